#include "tower/train/evaluator.h"

#include "tower/data/input_pipeline.h"
#include "tower/models/model.h"
#include "tower/ops/nn_loss.h"

namespace tower {

struct Evaluator::Impl {
  std::shared_ptr<const Dataset> dataset;
  int64_t batch_size;
  Graph graph;
  Value images, labels, correct;
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
  m.variables.initialize(m.graph, 0);
  ProgramOptions options{Device{}, num_threads > 0 ? num_threads : cpu_info().num_cores};
  options.precision = precision;
  m.program =
      std::make_unique<Program>(m.graph, std::vector<Value>{m.correct}, m.variables, options);
}

Evaluator::~Evaluator() = default;

int64_t Evaluator::examples() const { return impl_->dataset->size(); }

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
  int64_t seen = 0, correct = 0;
  const int64_t total = m.dataset->size();
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
    for (int64_t i = 0; i < n; ++i) correct += c[i] > 0.5f ? 1 : 0;
    seen += n;
  }
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

InputTransforms input_transforms(const std::string& augmentation, const Shape& model_input,
                                 const Shape& data_image) {
  if (augmentation == "cifar10" && cifar10_crops(model_input, data_image))
    return {cifar10_train_transform(), cifar10_eval_transform()};
  if (augmentation == "cifar10" || augmentation == "none")
    return {scale_to_unit(), scale_to_unit()};
  if (augmentation == "pad-crop-flip") return {pad_crop_flip_transform(4), scale_to_unit()};
  fail("--augmentation '{}': expected none, cifar10 or pad-crop-flip", augmentation);
}

}  // namespace tower
