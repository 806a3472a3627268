#include "tower/train/predict.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "tower/data/file_io.h"
#include "tower/data/image_decode.h"
#include "tower/train/evaluator.h"

namespace tower {
namespace fs = std::filesystem;

std::vector<std::string> image_paths(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (fs::recursive_directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
      std::string ext = it->path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
      if (it->is_regular_file(ec) && (ext == ".jpg" || ext == ".jpeg" || ext == ".png"))
        found.push_back(it->path().string());
    }
    if (ec) fail("cannot list the folder '{}': {}", p, ec.message());
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

struct Predictor::Impl {
  PredictConfig config;
  InferenceModel model;
  int threads = 1;
  // The evaluator of the last call, compiled for `batch` images on `team` threads: a call with
  // the same batch and team reuses it rather than compiling the model again.
  std::unique_ptr<Evaluator> evaluator;
  int64_t batch = 0;
  int team = 0;
};

Predictor::Predictor(const PredictConfig& config) : impl_(std::make_unique<Impl>()) {
  if (config.batch_size < 1 || config.batch_size > 65536)
    fail("--batch_size must be from 1 to 65536, got {}", config.batch_size);
  impl_->config = config;
  impl_->model = open_inference_model(config.train_dir, config.checkpoint, config.use_ema);
  impl_->threads = inference_threads(config.num_threads);
}

Predictor::~Predictor() = default;
const InferenceModel& Predictor::model() const { return impl_->model; }

std::vector<Prediction> Predictor::predict(const std::vector<std::string>& files) {
  const InferenceModel& m = impl_->model;
  const int64_t c = m.image_shape[0], h = m.image_shape[1], w = m.image_shape[2];
  const int64_t classes = static_cast<int64_t>(m.classes.size());
  std::vector<Prediction> out(files.size());
  std::vector<uint8_t> pixels;
  std::vector<size_t> good;
  for (size_t i = 0; i < files.size(); ++i) {
    out[i].file = files[i];
    const size_t at = pixels.size();
    pixels.resize(at + static_cast<size_t>(c * h * w));
    try {
      decode_to_size(read_file(files[i]), files[i], c, h, w, pixels.data() + at);
      good.push_back(i);
    } catch (const Error& e) {
      pixels.resize(at);  // the good images stay packed
      out[i].error = e.what();
    }
  }
  if (good.empty()) return out;
  auto data = std::make_shared<Dataset>();
  data->name = "the images given";
  const int64_t n = static_cast<int64_t>(good.size());
  data->images = Tensor(Shape{n, c, h, w}, DType::u8);
  std::copy(pixels.begin(), pixels.end(), data->images.data<uint8_t>());
  data->labels = Tensor(Shape{n}, DType::i32);
  data->labels.fill_zero();
  data->num_classes = static_cast<int>(classes);
  data->class_names = m.classes;
  // A thread per 16 images of a batch at most: splitting a batch of a few images costs more in
  // waking the team than it saves (batch 1 of lenet: 2x slower on 2 threads than on 1).
  const int64_t batch = std::min(impl_->config.batch_size, n);
  const int threads =
      static_cast<int>(std::clamp<int64_t>(batch / 16, 1, std::max(impl_->threads, 1)));
  if (impl_->evaluator && impl_->batch == batch && impl_->team == threads) {
    impl_->evaluator->set_dataset(data);
  } else {
    impl_->evaluator =
        std::make_unique<Evaluator>(m.model->name, data, m.transform, batch, threads);
    impl_->batch = batch;
    impl_->team = threads;
  }
  impl_->evaluator->evaluate([&](const std::string& v) -> const Tensor& { return m.weight(v); });
  const std::vector<float>& logits = impl_->evaluator->logits();
  for (int64_t k = 0; k < n; ++k) {
    Prediction& p = out[good[static_cast<size_t>(k)]];
    p.logits.assign(logits.begin() + k * classes, logits.begin() + (k + 1) * classes);
    const float top = *std::max_element(p.logits.begin(), p.logits.end());
    double sum = 0;
    for (float l : p.logits) sum += std::exp(static_cast<double>(l) - top);
    for (float l : p.logits)
      p.probabilities.push_back(static_cast<float>(std::exp(static_cast<double>(l) - top) / sum));
  }
  return out;
}

}  // namespace tower
