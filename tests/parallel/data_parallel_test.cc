// Towers are equivalent: N towers with per-tower batch b train like 1 tower with batch N*b.
#include "tower/parallel/data_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "testing/gradient_check.h"
#include "testing/kernel_runner.h"
#include "tower/core/allocator.h"
#include "tower/core/philox.h"
#include "tower/models/model.h"
#include "tower/ops/nn_loss.h"

namespace tower {
namespace {

struct Problem {
  Tensor images, labels;
};

Problem make_problem(const Shape& example, int64_t batch, uint64_t seed) {
  std::vector<int64_t> dims = {batch};
  for (int64_t d : example.dims()) dims.push_back(d);
  Problem p{testing::random_tensor(Shape(dims), seed), Tensor(Shape{batch}, DType::i32)};
  Philox rng(seed, 5);
  for (int64_t i = 0; i < batch; ++i)
    p.labels.data<int32_t>()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(i), 10));
  return p;
}

TowerFn classifier(const std::string& model) {
  return [model](const Scope& scope, Value images, Value labels) {
    ModelOutputs out = get_model(model).build(scope, images, 10, Mode::train);
    LossOutputs loss = classification_loss(scope, out.logits, labels);
    return TowerOutputs{loss.total_loss, {}, out.updates};
  };
}

struct TrainRun {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> weights;
};

// 5 steps of plain SGD (lr 0.05) on a fixed batch sequence. With a communicator of R ranks this
// rank takes its share of each global batch, as the input pipeline gives it.
TrainRun train(const std::string& model, const Shape& example, int num_towers, int64_t global_batch,
               Strategy strategy, size_t bucket_bytes = 25u << 20, Communicator* comm = nullptr,
               uint64_t seed = 3, bool staged = false, DeviceKind kind = DeviceKind::cpu,
               int64_t micro_batch = 0) {
  const int ranks = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  const int64_t begin = global_batch * rank / ranks, end = global_batch * (rank + 1) / ranks;
  DataParallelOptions options;
  options.devices.clear();
  for (int i = 0; i < num_towers; ++i)
    options.devices.push_back({kind, kind == DeviceKind::cpu ? i : 0});
  options.threads.assign(static_cast<size_t>(num_towers), 1);
  options.strategy = strategy;
  options.bucket_bytes = bucket_bytes;
  options.seed = seed;
  options.comm = comm;
  options.stage_through_host = staged;
  options.micro_batch = micro_batch;
  DataParallel dp(example, end - begin, classifier(model), options);
  TrainRun run;
  for (int step = 0; step < 5; ++step) {
    Problem p = make_problem(example, global_batch, 100 + static_cast<uint64_t>(step));
    run.losses.push_back(
        dp.step(p.images.slice(begin, end), p.labels.slice(begin, end), static_cast<uint64_t>(step))
            .loss);
    for (int r = 0; r < dp.num_replicas(); ++r)
      for (size_t v = 0; v < dp.trainable().size(); ++v) {
        Tensor& w = dp.replica(r).get(dp.trainable()[v].name);
        const Tensor& g = dp.gradient(r, static_cast<int>(v));
        for (int64_t k = 0; k < w.numel(); ++k) w.data<float>()[k] -= 0.05f * g.data<float>()[k];
      }
    EXPECT_TRUE(dp.replicas_identical()) << "step " << step;
  }
  for (const std::string& name : dp.replica(0).names())
    run.weights[name] = dp.replica(0).get(name).to_vector<float>();
  return run;
}

// Documented tolerance: float summation order differs (per-tower means averaged vs one mean),
// so results agree to a few ulps of accumulated rounding, not bitwise.
void expect_close(const TrainRun& a, const TrainRun& b, double tolerance) {
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], tolerance * (1 + std::fabs(a.losses[i]))) << "step " << i;
  for (const auto& [name, wa] : a.weights) {
    const auto& wb = b.weights.at(name);
    double worst = 0;
    for (size_t k = 0; k < wa.size(); ++k)
      worst = std::max(worst, std::fabs(static_cast<double>(wa[k]) - wb[k]));
    EXPECT_LE(worst, tolerance) << name;
  }
}

class TowersEquivalenceTest : public ::testing::TestWithParam<std::tuple<std::string, Strategy>> {};

TEST_P(TowersEquivalenceTest, NTowersMatchOneTowerWithNTimesTheBatch) {
  auto [model, strategy] = GetParam();
  const Shape example = model == "cifar10" ? Shape{3, 24, 24} : Shape{1, 8, 8};
  const int64_t per_tower = 4;
  for (int n : {1, 2, 3, 4, 8}) {
    TrainRun one = train(model, example, 1, n * per_tower, strategy);
    TrainRun many = train(model, example, n, n * per_tower, strategy);
    SCOPED_TRACE(::testing::Message() << model << " with " << n << " towers");
    expect_close(one, many, 2e-5);
  }
}

TEST_P(TowersEquivalenceTest, UnevenSplitIsWeightedByExamples) {
  auto [model, strategy] = GetParam();
  const Shape example = model == "cifar10" ? Shape{3, 24, 24} : Shape{1, 8, 8};
  TrainRun one = train(model, example, 1, 11, strategy);
  TrainRun three = train(model, example, 3, 11, strategy);  // 4 + 4 + 3
  expect_close(one, three, 2e-5);
}

TEST_P(TowersEquivalenceTest, SameSeedSameLayoutIsBitwiseDeterministic) {
  auto [model, strategy] = GetParam();
  const Shape example = model == "cifar10" ? Shape{3, 24, 24} : Shape{1, 8, 8};
  TrainRun a = train(model, example, 3, 12, strategy, 4096);
  TrainRun b = train(model, example, 3, 12, strategy, 4096);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.weights, b.weights);
}

// The path GPU towers take (own copy of the variables, gradients handed over through host
// buffers, moving averages brought back from tower 0), checked on CPU towers: same kernels in the
// same order, so the same bits, including resnet20's batch-norm moving averages.
TEST(DataParallelTest, StagedTowersMatchTowersSharingHostMemoryBitwise) {
  for (const auto& [model, example] :
       {std::pair<std::string, Shape>{"mlp", Shape{1, 8, 8}}, {"resnet20", Shape{3, 8, 8}}})
    for (Strategy strategy : {Strategy::allreduce, Strategy::central}) {
      SCOPED_TRACE(model + " " + std::string(strategy_name(strategy)));
      TrainRun direct = train(model, example, 2, 8, strategy, 4096);
      TrainRun staged = train(model, example, 2, 8, strategy, 4096, nullptr, 3, true);
      EXPECT_EQ(direct.losses, staged.losses);
      EXPECT_EQ(direct.weights, staged.weights);
    }
}

// On the GPU machine: one GPU tower trains like one CPU tower (cuDNN/cuBLAS vs oneDNN: the same
// math in another order, so within the towers tolerance, looser for the deeper model).
TEST(DataParallelTest, OneGpuTowerMatchesOneCpuTower) {
  if (!has_device_ops(DeviceKind::cuda) || cuda_devices().empty())
    GTEST_SKIP() << "no CUDA device here (or no CUDA backend in this build): the GPU path is "
                    "compiled, not run";
  for (const auto& [model, example, tolerance] :
       {std::tuple<std::string, Shape, double>{"mlp", Shape{1, 8, 8}, 2e-5},
        {"cifar10", Shape{3, 24, 24}, 1e-4}}) {
    // allreduce reduces over NCCL (in builds with it), central on the host.
    for (Strategy strategy : {Strategy::allreduce, Strategy::central}) {
      SCOPED_TRACE(model + " " + std::string(strategy_name(strategy)));
      TrainRun cpu = train(model, example, 1, 8, strategy);
      TrainRun gpu =
          train(model, example, 1, 8, strategy, 4096, nullptr, 3, false, DeviceKind::cuda);
      expect_close(cpu, gpu, tolerance);
    }
  }
}

// GPU towers (all on cuda:0 here) with micro-batches: staged through host buffers, each
// micro-batch copied in on the copy stream; 1, 2 and 3 towers give the same bits, and follow the
// CPU towers within the GPU's rounding.
TEST(DataParallelTest, GpuTowersWithMicroBatchesGiveTheSameBits) {
  if (!has_device_ops(DeviceKind::cuda) || cuda_devices().empty())
    GTEST_SKIP() << "no CUDA device here (or no CUDA backend in this build): the GPU path is "
                    "compiled, not run";
  const Shape example{3, 24, 24};
  const TrainRun cpu = train("cifar10", example, 1, 12, Strategy::allreduce, 4096, nullptr, 3,
                             false, DeviceKind::cpu, 2);
  const TrainRun one = train("cifar10", example, 1, 12, Strategy::allreduce, 4096, nullptr, 3,
                             false, DeviceKind::cuda, 2);
  expect_close(cpu, one, 1e-4);
  for (int towers : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << towers << " GPU towers");
    const TrainRun many = train("cifar10", example, towers, 12, Strategy::allreduce, 4096, nullptr,
                                3, false, DeviceKind::cuda, 2);
    EXPECT_EQ(many.losses, one.losses);
    EXPECT_EQ(many.weights, one.weights);
  }
}

TEST(DataParallelTest, CpuAndGpuTowersDoNotMix) {
  DataParallelOptions options;
  options.devices = {Device{DeviceKind::cpu, 0}, Device{DeviceKind::cuda, 0}};
  try {
    DataParallel dp(Shape{1, 8, 8}, 4, classifier("mlp"), options);
    FAIL() << "mixed towers were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot mix CPU and GPU towers"), std::string::npos)
        << e.what();
  }
}

// R ranks (threads of this process standing in for MPI processes), each with its own towers.
// Every rank must end with the same bits; rank 0's run is returned.
TrainRun train_ranks(const std::string& model, const Shape& example, int ranks, int towers_per_rank,
                     int64_t global_batch, Strategy strategy, size_t bucket_bytes,
                     std::vector<uint64_t> seeds = {}, int64_t micro_batch = 0) {
  auto comms = make_thread_communicators(ranks);
  std::vector<TrainRun> runs(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const uint64_t seed = seeds.empty() ? 3 : seeds[static_cast<size_t>(r)];
      runs[static_cast<size_t>(r)] =
          train(model, example, towers_per_rank, global_batch, strategy, bucket_bytes,
                comms[static_cast<size_t>(r)].get(), seed, false, DeviceKind::cpu, micro_batch);
    });
  for (auto& t : threads) t.join();
  for (int r = 1; r < ranks; ++r) {
    EXPECT_EQ(runs[static_cast<size_t>(r)].losses, runs[0].losses) << "rank " << r;
    EXPECT_EQ(runs[static_cast<size_t>(r)].weights, runs[0].weights) << "rank " << r;
  }
  return runs[0];
}

class RanksTest : public ::testing::TestWithParam<Strategy> {};

TEST_P(RanksTest, RanksTimesTowersMatchOneProcessWithTheSameGlobalBatch) {
  const Shape example{1, 8, 8};
  for (auto [ranks, towers] : {std::pair{2, 1}, {3, 1}, {2, 2}}) {
    const int64_t global_batch = 4 * ranks * towers;
    SCOPED_TRACE(::testing::Message() << ranks << " ranks x " << towers << " towers");
    TrainRun one = train("mlp", example, 1, global_batch, GetParam());
    // Small buckets: several cross-rank reductions per step, overlapped with backward.
    TrainRun many = train_ranks("mlp", example, ranks, towers, global_batch, GetParam(), 2048);
    expect_close(one, many, 2e-5);
  }
}

TEST_P(RanksTest, InitialWeightsComeFromRankZero) {
  const Shape example{1, 8, 8};
  TrainRun same = train_ranks("mlp", example, 2, 1, 8, GetParam(), 2048);
  // Rank 1 asks for another seed; it still starts from (and ends with) rank 0's weights.
  TrainRun mixed = train_ranks("mlp", example, 2, 1, 8, GetParam(), 2048, {3, 4});
  EXPECT_EQ(same.weights, mixed.weights);
}

INSTANTIATE_TEST_SUITE_P(Strategies, RanksTest,
                         ::testing::Values(Strategy::allreduce, Strategy::central),
                         [](const auto& info) { return std::string(strategy_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(Models, TowersEquivalenceTest,
                         ::testing::Combine(::testing::Values("mlp", "cifar10"),
                                            ::testing::Values(Strategy::allreduce,
                                                              Strategy::central)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(strategy_name(std::get<1>(info.param)));
                         });

// Micro-batches summed by the fixed tree: the same bits (losses, weights and, for resnet20, the
// batch-norm moving averages of micro-batch 0) on any number of towers, with either strategy,
// staged or not, and on 2 ranks (threads standing in for processes).
TEST(DataParallelTest, MicroBatchesGiveTheSameBitsOnAnyLayout) {
  const int64_t global_batch = 12, micro = 2;  // 6 micro-batches
  for (const auto& [model, example] :
       {std::pair<std::string, Shape>{"mlp", Shape{1, 8, 8}}, {"resnet20", Shape{3, 8, 8}}}) {
    SCOPED_TRACE(model);
    const TrainRun one = train(model, example, 1, global_batch, Strategy::allreduce, 4096, nullptr,
                               3, false, DeviceKind::cpu, micro);
    for (Strategy strategy : {Strategy::allreduce, Strategy::central})
      for (int towers : {1, 2, 3, 4}) {
        for (bool staged : {false, true}) {
          SCOPED_TRACE(::testing::Message() << towers << " towers, " << strategy_name(strategy)
                                            << (staged ? ", staged" : ""));
          const TrainRun many = train(model, example, towers, global_batch, strategy, 4096, nullptr,
                                      3, staged, DeviceKind::cpu, micro);
          EXPECT_EQ(many.losses, one.losses);
          EXPECT_EQ(many.weights, one.weights);
        }
      }
    if (model != "mlp") continue;  // ranks > 0 keep no moving averages: mlp has none
    for (int towers : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << "2 ranks x " << towers << " towers");
      const TrainRun ranks = train_ranks(model, example, 2, towers, global_batch,
                                         Strategy::allreduce, 4096, {}, micro);
      EXPECT_EQ(ranks.losses, one.losses);
      EXPECT_EQ(ranks.weights, one.weights);
    }
  }
}

// One-thread CPU towers form a ProgramGroup: in contended mode each tower's thread also takes the
// others' tasks (batch chunks, whole kernels, weight gradients). The kernels are the same in both
// modes, so the losses and every gradient keep their bits, with an uneven split too (32, 31 and
// 31 examples: 2 chunks for tower 0, whole kernels for the others).
TEST(DataParallelTest, TowerGroupKeepsItsBitsInContendedMode) {
  struct Case {
    std::string model;
    Shape example;
    int towers;
    int64_t batch;
  };
  const bool bf16 = testing::cpu_has_bf16();
  for (const Case& c :
       {Case{"cifar10", Shape{3, 24, 24}, 2, 128}, Case{"lenet", {1, 28, 28}, 3, 94}})
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
      if (precision == Precision::bf16 && !bf16) continue;
      SCOPED_TRACE(::testing::Message()
                   << c.model << ", " << c.towers << " towers, " << precision_name(precision));
      std::vector<float> values[2];  // per mode: losses and gradients of every step
      int64_t contended_runs[2] = {0, 0};
      for (int on : {0, 1}) {
        DataParallelOptions options;
        options.devices.clear();
        for (int i = 0; i < c.towers; ++i) options.devices.push_back({DeviceKind::cpu, i});
        options.threads.assign(static_cast<size_t>(c.towers), 1);
        options.program.precision = precision;
        options.program.contention =
            on ? ProgramOptions::Contention::on : ProgramOptions::Contention::off;
        DataParallel dp(c.example, c.batch, classifier(c.model), options);
        for (int step = 0; step < 3; ++step) {
          Problem p = make_problem(c.example, c.batch, 200 + static_cast<uint64_t>(step));
          values[on].push_back(dp.step(p.images, p.labels, static_cast<uint64_t>(step)).loss);
          for (size_t v = 0; v < dp.trainable().size(); ++v) {
            Tensor& w = dp.replica(0).get(dp.trainable()[v].name);
            const Tensor& g = dp.gradient(0, static_cast<int>(v));
            values[on].insert(values[on].end(), g.data<float>(), g.data<float>() + g.numel());
            for (int r = 0; r < dp.num_replicas(); ++r) {
              Tensor& wr = dp.replica(r).get(dp.trainable()[v].name);
              for (int64_t k = 0; k < w.numel(); ++k)
                wr.data<float>()[k] -= 0.05f * dp.gradient(r, static_cast<int>(v)).data<float>()[k];
            }
          }
        }
        for (int t = 0; t < c.towers; ++t) {
          if (on) {
            EXPECT_GT(dp.program(t).stats().deferrable, 0) << "tower " << t;
          }
          contended_runs[on] += dp.program(t).stats().contended_runs;
        }
      }
      EXPECT_EQ(contended_runs[0], 0);
      EXPECT_EQ(contended_runs[1], 3 * c.towers);
      ASSERT_EQ(values[0].size(), values[1].size());
      size_t differ = 0;
      for (size_t i = 0; i < values[0].size(); ++i)
        differ += std::memcmp(&values[0][i], &values[1][i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0u) << "of " << values[0].size() << " values";
    }
}

TEST(DataParallelTest, OverlapFirstBucketReducedBeforeBackwardEnds) {
  DataParallelOptions options;
  options.devices = {{DeviceKind::cpu, 0}, {DeviceKind::cpu, 1}};
  options.threads = {1, 1};
  options.bucket_bytes = 64 << 10;  // many buckets
  DataParallel dp(Shape{3, 24, 24}, 32, classifier("cifar10"), options);
  Problem p = make_problem(Shape{3, 24, 24}, 32, 1);
  dp.step(p.images, p.labels, 0);
  ReduceTrace trace = dp.reducer().trace();
  EXPECT_GE(trace.first_reduce_start, 0);
  EXPECT_LT(trace.first_reduce_start, trace.last_ready)
      << "the first bucket must be reduced while backward is still producing gradients";
}

TEST(DataParallelTest, BatchSmallerThanTowersIsAnError) {
  DataParallelOptions options;
  options.devices = {{DeviceKind::cpu, 0}, {DeviceKind::cpu, 1}, {DeviceKind::cpu, 2}};
  EXPECT_THROW(DataParallel(Shape{1, 8, 8}, 2, classifier("mlp"), options), Error);
}

TEST(DataParallelTest, MissingGpuNeedsSoftPlacement) {
  std::vector<Device> want = {{DeviceKind::cuda, 7}};
  try {
    resolve_devices(want, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:7"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("--allow_soft_placement"), std::string::npos);
  }
  auto placed = resolve_devices(want, true);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].kind, DeviceKind::cpu);
  // A second rank on the machine asking for cuda:7 is told which GPU that became, and why.
  try {
    resolve_devices(want, false, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 of this machine"), std::string::npos) << e.what();
  }
}

// Ranks sharing a machine take GPUs of their own; CPU towers are left as they are.
TEST(DataParallelTest, RanksOnOneMachineTakeTheirOwnGpus) {
  const std::vector<Device> two = {{DeviceKind::cuda, 0}, {DeviceKind::cuda, 1}};
  EXPECT_EQ(rank_devices(two, 0), two);
  const std::vector<Device> third = {{DeviceKind::cuda, 4}, {DeviceKind::cuda, 5}};
  EXPECT_EQ(rank_devices(two, 2), third);
  const std::vector<Device> cpus = {{DeviceKind::cpu, 0}, {DeviceKind::cpu, 1}};
  EXPECT_EQ(rank_devices(cpus, 3), cpus);
}

}  // namespace
}  // namespace tower
