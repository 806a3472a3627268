#include "tower/train/batch_norm_statistics.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tower/ops/batch_norm.h"
#include "tower/runtime/variable_store.h"

namespace tower {
namespace {

// A batch norm over the raw pixels, then the logits.
ModelOutputs probe(const Scope& s, Value images, int num_classes, Mode mode) {
  std::vector<Value> updates;
  Value x = nn::batch_norm(s, "bn", images, mode, updates);
  return {nn::dense(s, "logits", nn::flatten(s, x), {.units = num_classes}), updates};
}
ModelOutputs no_batch_norm(const Scope& s, Value images, int num_classes, Mode) {
  return {nn::dense(s, "logits", nn::flatten(s, images), {.units = num_classes}), {}};
}

const ModelDef kProbe{"bn_probe", "", Shape{2, 2, 2}, probe, {}, ""};

// n images (2, 2, 2) of scattered byte values, two classes.
std::shared_ptr<const Dataset> pixels(int64_t n) {
  auto data = std::make_shared<Dataset>();
  data->name = "pixels";
  data->images = Tensor(Shape{n, 2, 2, 2}, DType::u8);
  data->labels = Tensor(Shape{n}, DType::i32);
  for (int64_t i = 0; i < n * 8; ++i)
    data->images.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + i * i) % 251);
  for (int64_t i = 0; i < n; ++i) data->labels.data<int32_t>()[i] = static_cast<int32_t>(i % 2);
  data->num_classes = 2;
  data->class_names = {"0", "1"};
  return data;
}

// Every variable of the model, as a run would hold them.
struct Weights {
  Graph graph;
  VariableStore store;
  explicit Weights(const ModelDef& model) {
    Scope scope(graph);
    model.build(scope, scope.placeholder("images", Shape{1, 2, 2, 2}), 2, Mode::train);
    store.initialize(graph, 7);
  }
  std::function<const Tensor&(const std::string&)> fn() const {
    return [this](const std::string& name) -> const Tensor& { return store.get(name); };
  }
};

// Over one batch of the whole set, the statistics are the set's per-channel mean and its
// variance with Bessel's correction, as the moving averages take them.
TEST(BatchNormStatisticsTest, OneBatchGivesTheMeanAndUnbiasedVarianceOfTheData) {
  const int64_t n = 12;
  auto data = pixels(n);
  BatchNormStatistics statistics(kProbe, data, TransformSpec{}, {.batch = n, .seed = 3});
  ASSERT_FALSE(statistics.empty());
  EXPECT_EQ(statistics.batches(), 1);
  EXPECT_EQ(statistics.examples(), n);
  Weights weights(kProbe);
  auto computed = statistics.compute(weights.fn());
  ASSERT_EQ(computed.size(), 2u);
  const Tensor& mean = computed.at("bn/moving_mean");
  const Tensor& variance = computed.at("bn/moving_variance");
  for (int c = 0; c < 2; ++c) {
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int p = 0; p < 4; ++p) sum += data->images.data<uint8_t>()[(i * 2 + c) * 4 + p];
    const double m = sum / (n * 4);
    for (int64_t i = 0; i < n; ++i)
      for (int p = 0; p < 4; ++p) {
        const double d = data->images.data<uint8_t>()[(i * 2 + c) * 4 + p] - m;
        squares += d * d;
      }
    EXPECT_NEAR(mean.data<float>()[c], m, 1e-3) << c;
    EXPECT_NEAR(variance.data<float>()[c], squares / (n * 4 - 1), 1e-2) << c;
  }
}

// Several batches: the statistics are their mean, at most max_examples of whole batches, and the
// same bits every time.
TEST(BatchNormStatisticsTest, BatchesAreAveragedAndRepeatable) {
  auto data = pixels(20);
  BatchNormStatistics statistics(kProbe, data, TransformSpec{},
                                 {.batch = 4, .max_examples = 12, .seed = 3});
  EXPECT_EQ(statistics.batches(), 3);
  Weights weights(kProbe);
  auto a = statistics.compute(weights.fn()), b = statistics.compute(weights.fn());
  for (const auto& [name, tensor] : a)
    EXPECT_EQ(std::memcmp(tensor.raw_data(), b.at(name).raw_data(), tensor.nbytes()), 0) << name;
  // At most one epoch, at least one batch.
  EXPECT_EQ(BatchNormStatistics(kProbe, data, {}, {.batch = 4, .max_examples = 1000}).batches(), 5);
  EXPECT_EQ(BatchNormStatistics(kProbe, data, {}, {.batch = 8, .max_examples = 1}).batches(), 1);
}

TEST(BatchNormStatisticsTest, DecayIsTheModelsOrTheRunsMomentum) {
  auto data = pixels(4);
  EXPECT_FLOAT_EQ(BatchNormStatistics(kProbe, data, {}, {.batch = 4}).decay(), 0.99f);
  EXPECT_FLOAT_EQ(BatchNormStatistics(kProbe, data, {}, {.batch = 4, .momentum = 0.9f}).decay(),
                  0.9f);
  const ModelDef plain{"plain", "", Shape{2, 2, 2}, no_batch_norm, {}, ""};
  EXPECT_TRUE(BatchNormStatistics(plain, data, {}, {.batch = 4}).empty());
  EXPECT_EQ(moving_average_settle_steps(0.99f), 459);
  EXPECT_EQ(moving_average_settle_steps(0.9f), 44);
  EXPECT_EQ(moving_average_settle_steps(0.0f), 0);
}

// --bn_momentum rewrites the decay of every moving-average update of a built graph.
TEST(BatchNormStatisticsTest, MovingAverageDecayCanBeSet) {
  Graph graph;
  Scope scope(graph);
  ModelOutputs out = probe(scope, scope.placeholder("images", Shape{4, 2, 2, 2}), 2, Mode::train);
  auto before = ops::moving_average_updates(out.updates);
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0].variable, "bn/moving_mean");
  EXPECT_EQ(before[1].variable, "bn/moving_variance");
  EXPECT_FLOAT_EQ(before[0].decay, 0.99f);
  ops::set_moving_average_decay(out.updates, 0.9f);
  for (const auto& update : ops::moving_average_updates(out.updates))
    EXPECT_FLOAT_EQ(update.decay, 0.9f) << update.variable;
}

}  // namespace
}  // namespace tower
