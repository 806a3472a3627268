#include "tower/train/batch_norm_statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tower/data/input_pipeline.h"
#include "tower/ops/batch_norm.h"

namespace tower {

int64_t moving_average_settle_steps(float decay) {
  if (!(decay > 0)) return 0;
  if (!(decay < 1)) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(std::ceil(std::log(0.01) / std::log(static_cast<double>(decay))));
}

struct BatchNormStatistics::Impl {
  std::shared_ptr<const Dataset> data;
  PipelineOptions pipeline;
  int64_t batches = 0;
  Graph graph;
  Value images;
  std::vector<ops::MovingAverageUpdate> averages;
  VariableStore variables;
  ProgramOptions program_options;
  std::unique_ptr<Program> program;  // compiled on the first compute()
};

BatchNormStatistics::BatchNormStatistics(const ModelDef& model, std::shared_ptr<const Dataset> data,
                                         TransformSpec transform,
                                         const BatchNormStatisticsOptions& options)
    : impl_(std::make_unique<Impl>()), batch_(options.batch) {
  TOWER_CHECK(options.batch >= 1 && options.batch <= data->size());
  Impl& m = *impl_;
  m.data = std::move(data);
  m.pipeline.batch_size = options.batch;
  m.pipeline.seed = options.seed;
  m.pipeline.num_workers = 1;
  m.pipeline.transform = std::move(transform);
  const int64_t per_epoch = m.data->size() / options.batch;
  m.batches = std::max<int64_t>(1, std::min(per_epoch, options.max_examples / options.batch));
  const Shape example = transform_output_shape(m.pipeline.transform, m.data->image_shape());
  std::vector<int64_t> dims = {options.batch};
  for (int64_t d : example.dims()) dims.push_back(d);
  const Scope scope = Scope(m.graph).with_frozen(options.frozen);
  m.images = scope.placeholder("images", Shape(dims));
  ModelOutputs out = model.build(scope, m.images, m.data->num_classes, Mode::train);
  if (options.momentum > 0) ops::set_moving_average_decay(out.updates, options.momentum);
  m.averages = ops::moving_average_updates(out.updates);
  m.program_options = ProgramOptions{Device{}, 1};
  m.program_options.precision = options.precision;
}

BatchNormStatistics::~BatchNormStatistics() = default;

bool BatchNormStatistics::empty() const { return impl_->averages.empty(); }
int64_t BatchNormStatistics::batches() const { return impl_->batches; }

float BatchNormStatistics::decay() const {
  float decay = 0;
  for (const auto& a : impl_->averages) decay = std::max(decay, a.decay);
  return decay;
}

std::map<std::string, Tensor> BatchNormStatistics::compute(
    const std::function<const Tensor&(const std::string&)>& weights) {
  Impl& m = *impl_;
  if (!m.program) {
    m.variables.initialize(m.graph, 0);
    std::vector<Value> fetches;
    for (const auto& a : m.averages) fetches.push_back(a.value);
    m.program = std::make_unique<Program>(m.graph, fetches, m.variables, m.program_options);
  }
  for (const std::string& name : m.variables.names())
    m.variables.get(name).copy_from(weights(name));
  // Sums in double, in batch order: the same bits whatever the thread that runs it.
  std::vector<std::vector<double>> sums(m.averages.size());
  InputPipeline pipeline(m.data, m.pipeline);
  for (int64_t b = 0; b < m.batches; ++b) {
    Batch batch = pipeline.next();
    m.program->input(m.images).copy_from(batch.images);
    m.program->run(static_cast<uint64_t>(b));
    for (size_t i = 0; i < m.averages.size(); ++i) {
      const Tensor& value = m.program->output(static_cast<int>(i));
      const float* v = value.data<float>();
      sums[i].resize(static_cast<size_t>(value.numel()));
      for (size_t j = 0; j < sums[i].size(); ++j) sums[i][j] += v[j];
    }
  }
  std::map<std::string, Tensor> statistics;
  for (size_t i = 0; i < m.averages.size(); ++i) {
    Tensor mean(m.averages[i].value.shape(), DType::f32);
    float* out = mean.data<float>();
    for (size_t j = 0; j < sums[i].size(); ++j)
      out[j] = static_cast<float>(sums[i][j] / static_cast<double>(m.batches));
    statistics.emplace(m.averages[i].variable, std::move(mean));
  }
  return statistics;
}

}  // namespace tower
