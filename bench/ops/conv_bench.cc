// Conv2D and its two adjoints on the CIFAR-10 model's layer shapes (batch 128), timing
// Program::run() only: primitives and buffers are built before the loop.
#include <benchmark/benchmark.h>

#include "tower/core/philox.h"
#include "tower/graph/gradients.h"
#include "tower/ops/conv.h"
#include "tower/runtime/program.h"

namespace tower {
namespace {

void fill_random(Tensor& t, uint64_t seed) {
  Philox rng(seed, 0);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(static_cast<uint64_t>(i)) - 0.5f;
}

// args: channels in, channels out, image size; `backward` also computes dx and dw.
void run_conv(benchmark::State& state, bool backward) {
  int64_t c = state.range(0), k = state.range(1), hw = state.range(2);
  Graph graph;
  Scope scope(graph);
  Value x = scope.placeholder("x", Shape{128, c, hw, hw});
  Value w = scope.placeholder("w", Shape{k, c, 5, 5});
  Value y = ops::conv2d(scope, x, w, {{1, 1}, ops::Padding::same});
  std::vector<Value> fetches = {y};
  if (backward) {
    Value dy = scope.placeholder("dy", y.shape());
    for (Value g : gradients(scope, {y}, {x, w}, {dy})) fetches.push_back(g);
    fetches.erase(fetches.begin());
  }
  VariableStore variables;
  Program program(graph, fetches, variables, {Device{}, 2});
  uint64_t seed = 1;
  for (const auto& node : graph.nodes())
    if (node->op == "Placeholder" && program.has_input(node->output()))
      fill_random(program.input(node->output()), seed++);
  for (auto _ : state) program.run();
  double flops = 2.0 * 128 * c * k * 25 * hw * hw * (backward ? 2 : 1);
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// The filter gradient alone of ResNet-20's 3x3 stride-1 convolutions (args: channels, image
// size), on one thread.
void BM_Conv2DFilterGradient3x3(benchmark::State& state) {
  const int64_t c = state.range(0), hw = state.range(1);
  Graph graph;
  Scope scope(graph);
  Value x = scope.placeholder("x", Shape{128, c, hw, hw});
  Value w = scope.placeholder("w", Shape{c, c, 3, 3});
  Value y = ops::conv2d(scope, x, w, {{1, 1}, ops::Padding::same});
  Value dy = scope.placeholder("dy", y.shape());
  VariableStore variables;
  Program program(graph, gradients(scope, {y}, {w}, {dy}), variables, {Device{}, 1});
  uint64_t seed = 1;
  for (Value v : {x, dy}) fill_random(program.input(v), seed++);
  for (auto _ : state) program.run();
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 128 * c * c * 9 * hw * hw,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void BM_Conv2DForward(benchmark::State& state) { run_conv(state, false); }
void BM_Conv2DBackward(benchmark::State& state) { run_conv(state, true); }

BENCHMARK(BM_Conv2DForward)
    ->Args({3, 64, 24})
    ->Args({64, 64, 12})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Conv2DFilterGradient3x3)
    ->Args({16, 32})
    ->Args({32, 16})
    ->Args({64, 8})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Conv2DBackward)
    ->Args({3, 64, 24})
    ->Args({64, 64, 12})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tower
