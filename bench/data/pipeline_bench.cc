// Input pipeline throughput (images/s) for the classic CIFAR-10 training distortions
// (32x32x3 u8 -> random crop 24x24, flip, brightness, contrast, standardization -> f32), with 1
// and 2 worker threads, against the transform alone on the calling thread as the peer.
#include <benchmark/benchmark.h>

#include <memory>

#include "tower/core/philox.h"
#include "tower/data/input_pipeline.h"
#include "tower/data/shuffle.h"

namespace tower {
namespace {

std::shared_ptr<const Dataset> cifar_like(int64_t n) {
  auto d = std::make_shared<Dataset>();
  d->name = "bench";
  d->num_classes = 10;
  d->images = Tensor(Shape{n, 3, 32, 32}, DType::u8);
  Philox rng(1, 1);
  uint8_t* p = d->images.data<uint8_t>();
  for (int64_t i = 0; i < d->images.numel(); ++i)
    p[i] = static_cast<uint8_t>(rng.u32(static_cast<uint64_t>(i)));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  d->labels = Tensor::from_vector(Shape{n}, labels);
  return d;
}

constexpr int64_t kBatch = 128;

void BM_PipelineCifarDistortions(benchmark::State& state) {
  auto data = cifar_like(10000);
  PipelineOptions options{.batch_size = kBatch,
                          .seed = 1,
                          .num_workers = static_cast<int>(state.range(0)),
                          .queue_capacity = 8,
                          .transform = cifar10_train_transform()};
  InputPipeline pipeline(data, options);
  for (auto _ : state) {
    Batch batch = pipeline.next();
    benchmark::DoNotOptimize(batch.images.raw_data());
  }
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(state.iterations() * kBatch),
                                                  benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PipelineCifarDistortions)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("workers")
    ->UseRealTime()
    ->MinTime(2.0);

// The peer: the same per-image work, serially, with no queue or batching.
void BM_TransformOnly(benchmark::State& state) {
  auto data = cifar_like(1000);
  const TransformSpec spec = cifar10_train_transform();
  std::vector<float> out(3 * 24 * 24);
  int64_t i = 0;
  for (auto _ : state) {
    const int64_t example = i++ % 1000;
    apply_transform(spec, data->images.data<uint8_t>() + example * 3072, Shape{3, 32, 32},
                    Philox(1, philox_stream(kAugment, 0, static_cast<uint64_t>(example))),
                    out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["images/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TransformOnly)->UseRealTime();

}  // namespace
}  // namespace tower
