#include "tower/parallel/gradient_reducer.h"

#include <gtest/gtest.h>

#include <thread>

#include "testing/gradient_check.h"

namespace tower {
namespace {

using testing::random_tensor;

// grads[t][v] random; the expected result is sum_t w_t * g_t in tower order.
struct Fixture {
  std::vector<std::vector<Tensor>> grads;
  std::vector<float> weights;
  Fixture(int towers, const std::vector<Shape>& shapes) {
    for (int t = 0; t < towers; ++t) {
      grads.emplace_back();
      for (size_t v = 0; v < shapes.size(); ++v)
        grads.back().push_back(random_tensor(shapes[v], 100 * static_cast<uint64_t>(t) + v));
      weights.push_back(1.0f / static_cast<float>(towers));
    }
  }
  std::vector<std::vector<Tensor>> views() const {
    std::vector<std::vector<Tensor>> out;
    for (auto& tower : grads) {
      out.emplace_back();
      for (auto& g : tower) out.back().push_back(g.view());
    }
    return out;
  }
  float expected(size_t v, int64_t k) const {
    float sum = weights[0] * grads[0][v].data<float>()[k];
    for (size_t t = 1; t < grads.size(); ++t) sum += weights[t] * grads[t][v].data<float>()[k];
    return sum;
  }
};

// Each tower's thread hands over its gradients in backward order, then helps when `help`.
void run_step(GradientReducer& reducer, int towers, int vars, bool help = false) {
  reducer.begin_step();
  std::vector<std::thread> threads;
  for (int t = 0; t < towers; ++t)
    threads.emplace_back([&, t] {
      for (int v = vars - 1; v >= 0; --v) reducer.ready(t, v);
      if (help) reducer.help(t);
    });
  for (auto& th : threads) th.join();
  reducer.finish();
}

TEST(GradientReducerTest, BothStrategiesComputeTheWeightedMeanBitwiseAlike) {
  std::vector<Shape> shapes = {Shape{7, 5}, Shape{13}, Shape{3, 3, 2, 2}, Shape{1}};
  for (int towers : {1, 2, 3, 4}) {
    Fixture f(towers, shapes);
    auto central = make_central_reducer(f.views(), f.weights);
    auto allreduce = make_allreduce_reducer(f.views(), f.weights, 64);  // tiny buckets
    for (int step = 0; step < 4; ++step) {
      run_step(*central, towers, 4);
      run_step(*allreduce, towers, 4, /*help=*/step % 2 == 1);
      EXPECT_EQ(allreduce->num_replicas(), towers);
      for (size_t v = 0; v < shapes.size(); ++v)
        for (int64_t k = 0; k < shapes[v].numel(); ++k) {
          float want = f.expected(v, k);
          ASSERT_EQ(central->result(0, static_cast<int>(v)).data<float>()[k], want);
          for (int r = 0; r < towers; ++r)
            ASSERT_EQ(allreduce->result(r, static_cast<int>(v)).data<float>()[k], want)
                << "replica " << r << " var " << v;
        }
    }
  }
}

TEST(GradientReducerTest, UnevenWeights) {
  Fixture f(3, {Shape{10}});
  f.weights = {0.5f, 0.25f, 0.25f};
  auto reducer = make_allreduce_reducer(f.views(), f.weights, 1 << 20);
  run_step(*reducer, 3, 1);
  for (int64_t k = 0; k < 10; ++k)
    EXPECT_EQ(reducer->result(2, 0).data<float>()[k], f.expected(0, k));
}

TEST(GradientReducerTest, FirstBucketIsReducedBeforeTheLastGradientArrives) {
  Fixture f(2, {Shape{1000}, Shape{1000}, Shape{1000}});
  auto reducer = make_allreduce_reducer(f.views(), f.weights, 4000);  // one variable per bucket
  reducer->begin_step();
  for (int t = 0; t < 2; ++t) reducer->ready(t, 2);  // the last variable's bucket is complete
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int t = 0; t < 2; ++t) {
    reducer->ready(t, 1);
    reducer->ready(t, 0);
  }
  reducer->finish();
  ReduceTrace trace = reducer->trace();
  EXPECT_GE(trace.first_reduce_start, 0);
  EXPECT_LT(trace.first_reduce_start, trace.last_ready);
}

TEST(GradientReducerTest, AbortDoesNotHang) {
  Fixture f(2, {Shape{100}, Shape{100}});
  auto reducer = make_allreduce_reducer(f.views(), f.weights, 16);
  reducer->begin_step();
  reducer->ready(0, 1);  // tower 1 never delivers
  reducer->abort();
  reducer->finish();  // returns
  SUCCEED();
}

TEST(GradientReducerTest, StrategyNames) {
  EXPECT_EQ(parse_strategy("central"), Strategy::central);
  EXPECT_EQ(parse_strategy("allreduce"), Strategy::allreduce);
  try {
    parse_strategy("ring");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--strategy 'ring'"), std::string::npos);
  }
}

}  // namespace
}  // namespace tower
