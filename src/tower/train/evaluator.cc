#include "tower/train/evaluator.h"

#include <fmt/ranges.h>

#include "tower/data/input_pipeline.h"
#include "tower/models/model.h"
#include "tower/ops/nn_loss.h"

namespace tower {

struct Evaluator::Impl {
  std::shared_ptr<const Dataset> dataset;
  int64_t batch_size;
  Graph graph;
  Value images, labels, correct, predicted, logits, correct5;
  double precision_at_5 = -1;
  std::vector<int64_t> confusion;
  std::vector<float> logits_seen;
  VariableStore variables;
  std::unique_ptr<Program> program;
  std::unique_ptr<InputPipeline> pipeline;
  PipelineOptions options;
};

Evaluator::Evaluator(const std::string& model, std::shared_ptr<const Dataset> dataset,
                     TransformSpec transform, int64_t batch_size, int num_threads,
                     Precision precision)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.dataset = dataset;
  m.batch_size = std::min<int64_t>(batch_size, std::max<int64_t>(dataset->size(), 1));
  m.options.batch_size = m.batch_size;
  m.options.shuffle = false;
  m.options.drop_remainder = false;
  m.options.num_workers = 1;
  m.options.transform = std::move(transform);
  Shape example = transform_output_shape(m.options.transform, dataset->image_shape());
  Scope scope(m.graph);
  std::vector<int64_t> dims = {m.batch_size};
  for (int64_t d : example.dims()) dims.push_back(d);
  m.images = scope.placeholder("images", Shape(dims));
  m.labels = scope.placeholder("labels", Shape{m.batch_size}, DType::i32);
  ModelOutputs out = get_model(model).build(scope, m.images, dataset->num_classes, Mode::eval);
  m.correct = ops::in_top_k(scope, out.logits, m.labels, 1);
  m.predicted = ops::argmax(scope, out.logits);
  m.logits = out.logits;
  std::vector<Value> fetches{m.correct, m.predicted, m.logits};
  if (dataset->num_classes > 5) {
    m.correct5 = ops::in_top_k(scope, out.logits, m.labels, 5);
    fetches.push_back(m.correct5);
  }
  m.variables.initialize(m.graph, 0);
  ProgramOptions options{Device{}, num_threads > 0 ? num_threads : cpu_info().num_cores};
  options.precision = precision;
  m.program = std::make_unique<Program>(m.graph, fetches, m.variables, options);
}

Evaluator::~Evaluator() = default;

void Evaluator::set_dataset(std::shared_ptr<const Dataset> dataset) {
  Impl& m = *impl_;
  TOWER_CHECK_MSG(dataset->image_shape() == m.dataset->image_shape() &&
                      dataset->num_classes == m.dataset->num_classes,
                  "an evaluator's data sets share their image shape and classes");
  m.dataset = std::move(dataset);
}

int64_t Evaluator::examples() const { return impl_->dataset->size(); }
const std::vector<int64_t>& Evaluator::confusion() const { return impl_->confusion; }
const std::vector<float>& Evaluator::logits() const { return impl_->logits_seen; }
double Evaluator::precision_at_5() const { return impl_->precision_at_5; }

double Evaluator::evaluate(const std::function<const Tensor&(const std::string&)>& weights) {
  Impl& m = *impl_;
  for (const std::string& name : m.variables.names()) {
    Tensor& into = m.variables.get(name);
    const Tensor& from = weights(name);
    if (from.shape() != into.shape())
      fail("variable '{}' has shape {}, but the model built for the {} images of {} needs {}", name,
           from.shape().to_string(), m.dataset->image_shape().to_string(), m.dataset->name,
           into.shape().to_string());
    into.copy_from(from);
  }
  InputPipeline pipeline(m.dataset, m.options);
  int64_t seen = 0, correct = 0, correct5 = 0;
  const bool top5 = m.program->num_fetches() > 3;
  const int64_t total = m.dataset->size(), classes = m.dataset->num_classes;
  m.confusion.assign(static_cast<size_t>(classes * classes), 0);
  m.logits_seen.resize(static_cast<size_t>(total * classes));
  while (seen < total) {
    Batch batch = pipeline.next();
    const int64_t n = batch.images.shape()[0];
    Tensor& images = m.program->input(m.images);
    Tensor& labels = m.program->input(m.labels);
    images.fill_zero();
    labels.fill_zero();
    images.slice(0, n).copy_from(batch.images);
    labels.slice(0, n).copy_from(batch.labels);
    m.program->run();
    const float* c = m.program->output(0).data<float>();
    const int32_t* p = m.program->output(1).data<int32_t>();
    const int32_t* t = batch.labels.data<int32_t>();
    const float* l = m.program->output(2).data<float>();
    std::copy(l, l + n * classes, m.logits_seen.begin() + seen * classes);
    for (int64_t i = 0; i < n; ++i) {
      correct += c[i] > 0.5f ? 1 : 0;
      if (top5) correct5 += m.program->output(3).data<float>()[i] > 0.5f ? 1 : 0;
      if (p[i] >= 0 && p[i] < classes) ++m.confusion[static_cast<size_t>(t[i] * classes + p[i])];
    }
    seen += n;
  }
  const double n = static_cast<double>(std::max<int64_t>(total, 1));
  m.precision_at_5 = top5 ? static_cast<double>(correct5) / n : -1;
  return total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

namespace {
// The classic CIFAR-10 setup: a model for 24x24 crops fed with 32x32 images.
bool cifar10_crops(const Shape& model_input, const Shape& data_image) {
  return data_image.rank() == 3 && data_image[1] == 32 && model_input.rank() == 3 &&
         model_input[1] == 24;
}
TransformSpec scale_to_unit() {
  TransformSpec spec;
  spec.scale = 1.0f / 255.0f;
  return spec;
}
}  // namespace

namespace {
InputTransforms augmentation_transforms(const std::string& augmentation, const Shape& model_input,
                                        const Shape& data_image) {
  if (augmentation == "cifar10" && cifar10_crops(model_input, data_image))
    return {cifar10_train_transform(), cifar10_eval_transform()};
  if (augmentation == "cifar10" || augmentation == "none")
    return {scale_to_unit(), scale_to_unit()};
  if (augmentation == "pad-crop-flip") return {pad_crop_flip_transform(4), scale_to_unit()};
  if (augmentation == "random-resized-crop") {
    const int h = static_cast<int>(crop_side(data_image[1]));
    const int w = static_cast<int>(crop_side(data_image[2]));
    return {random_resized_crop_transform(h, w), central_crop_transform(h, w)};
  }
  fail("--augmentation '{}': expected none, cifar10, pad-crop-flip or random-resized-crop",
       augmentation);
}
}  // namespace

InputTransforms input_transforms(const std::string& augmentation, const Shape& model_input,
                                 const Shape& data_image, const Normalization& normalization) {
  InputTransforms t = augmentation_transforms(augmentation, model_input, data_image);
  if (augmentation == "cifar10" && !cifar10_crops(model_input, data_image))
    t.note = fmt::format(
        "--augmentation cifar10 crops 24x24 from 32x32 images for a model of 24x24 inputs; the "
        "model takes {} and the images are {}: none of its distortions runs",
        model_input.to_string(), data_image.to_string());
  if (!normalization.empty())
    for (TransformSpec* spec : {&t.train, &t.eval}) {
      spec->mean = normalization.mean;
      spec->stddev = normalization.stddev;
    }
  return t;
}

std::string describe_input(const TransformSpec& spec) {
  std::string text;
  if (spec.padding > 0) text += fmt::format("pad {}, ", spec.padding);
  if (spec.crop == Crop::random_resized)
    text += fmt::format(
        "random resized crop ({:g}% to {:g}% of the area, aspect {:.3g} to {:.3g}) to {}x{}, ",
        100 * spec.min_area, 100 * spec.max_area, spec.min_ratio, spec.max_ratio, spec.crop_height,
        spec.crop_width);
  else if (spec.crop != Crop::none)
    text +=
        fmt::format("{} crop {}, ", spec.crop == Crop::random ? "random" : "central",
                    spec.crop_height > 0 ? fmt::format("{}x{}", spec.crop_height, spec.crop_width)
                                         : std::string("to the image's size"));
  if (spec.random_flip) text += "flip, ";
  if (spec.max_brightness_delta > 0)
    text += fmt::format("brightness +-{:g}, ", spec.max_brightness_delta);
  if (spec.min_contrast != 1 || spec.max_contrast != 1)
    text += fmt::format("contrast x {:g} to {:g}, ", spec.min_contrast, spec.max_contrast);
  text += spec.scale == 1 ? "pixels 0-255" : fmt::format("pixels x {:g}", spec.scale);
  if (!spec.mean.empty())
    text += fmt::format(", then (x - mean) / stddev per channel: mean ({:g}), stddev ({:g})",
                        fmt::join(spec.mean, ", "), fmt::join(spec.stddev, ", "));
  if (spec.standardize) text += ", then per-image standardization";
  return text;
}

int64_t crop_side(int64_t image_side) { return std::max<int64_t>(1, (image_side * 7 + 4) / 8); }

DatasetSpec run_data_spec(const DataOptions& o, const ModelDef& model) {
  std::string data = o.data;
  if (data.empty()) {
    const std::string& want = model.recipe.data;
    if (!want.empty() && want != "fashion-mnist")
      fail(
          "model {} is meant for {} data ({} images): pass --data {}:DIR, or your own images as "
          "--data folder:DIR or npy:DIR (`tower make-dataset --format {} --out DIR` makes a small "
          "{} set)",
          model.name, want, recipe_data_shape(model).to_string(), want, want, want);
    data = "fashion-mnist";
  }
  if (o.image_size.size() > 2)
    fail("--image_size: expected S or H,W (pixels), got {} values", o.image_size.size());
  for (int64_t side : o.image_size)
    if (side < 1 || side > 65535)
      fail("--image_size: sides must be from 1 to 65535 pixels, got {}", side);
  DatasetSpec spec = parse_dataset_spec(data);
  if (spec.format == DatasetFormat::folder) {
    const Shape fit = recipe_data_shape(model);
    int64_t h = fit[1], w = fit[2];
    if (o.augmentation == "random-resized-crop")  // decoded larger, cropped to the model's size
      h = (h * 8 + 3) / 7, w = (w * 8 + 3) / 7;
    if (o.image_size.size() == 1) h = w = o.image_size[0];
    if (o.image_size.size() == 2) h = o.image_size[0], w = o.image_size[1];
    const int64_t c = model.default_input[0];
    if (c != 1 && c != 3)
      fail("model {} takes {} channels; folder images can be brought to 1 (grey) or 3 (RGB)",
           model.name, c);
    spec.image_shape = Shape{c, h, w};
  }
  if (!(o.test_fraction > 0 && o.test_fraction < 1))
    fail("--test_fraction must be in (0, 1), got {}", o.test_fraction);
  spec.test_fraction = o.test_fraction;
  spec.skip_bad_images = o.skip_bad_images;
  return spec;
}

Shape recipe_data_shape(const ModelDef& model) {
  const std::string& d = model.recipe.data;
  if (d == "cifar10" || d == "cifar100") return Shape{3, 32, 32};
  if (d == "fashion-mnist" || d == "mnist") return Shape{1, 28, 28};
  return model.default_input;
}

std::string check_model_fits_data(const ModelDef& model, const Shape& model_input,
                                  const Dataset& data) {
  const Shape& want = model.default_input;
  if (model_input[0] != want[0])
    fail(
        "the images of {} are {} but model {} takes {} images: pass a --model for such images "
        "(--model or --model_file), or data of {} channel{} (a folder, --data folder:DIR, is "
        "brought to the model's)",
        data.name, data.image_shape().to_string(), model.name, want.to_string(), want[0],
        want[0] == 1 ? "" : "s");
  if (model_input != want)
    return fmt::format("model {} is meant for {} inputs; it is built for the {} inputs of {}",
                       model.name, want.to_string(), model_input.to_string(), data.name);
  return "";
}

}  // namespace tower
