// The real `tower` binary with --global_batch_size/--micro_batch_size: the same weights, bit for
// bit, on any number of towers, ranks and threads, and a checkpoint resumes on another layout as
// if nothing had changed (elastic resume).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "testing/checkpoints.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/io/checkpoint.h"
#include "tower/io/safetensors.h"

namespace tower {
namespace {

using testing::contains;
using testing::run_command;
using testing::run_tower;
using testing::TmpDir;

using testing::mpirun;

bool have_mpi() { return !mpirun(1).empty(); }

class MicroBatchTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    idx_ = new TmpDir();
    cifar_ = new TmpDir();
    auto a = run_tower("make-dataset --format idx --out " + idx_->path() +
                       " --num_train 2000 --num_test 100 --seed 3");
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto b = run_tower("make-dataset --format cifar10 --out " + cifar_->path() +
                       " --num_train 500 --num_test 100 --seed 3");
    ASSERT_EQ(b.exit_code, 0) << b.output;
  }
  static void TearDownTestSuite() {
    delete idx_;
    delete cifar_;
  }
  // A layout: ranks (> 1 under mpirun) of towers, with `threads` per rank in all (0: one per
  // tower), and flags of its own (--contention on, say).
  struct Layout {
    int ranks = 1, towers = 1, threads = 0;
    std::string flags;
  };
  // A constant learning rate, so that a run stopped at step N and resumed follows the run that
  // went on (a cosine schedule depends on --max_steps).
  static testing::CommandResult train(const std::string& model_flags, const std::string& dir,
                                      const Layout& layout, int steps) {
    const int threads = layout.threads > 0 ? layout.threads : layout.towers;
    const std::string flags = model_flags + " --num_devices " + std::to_string(layout.towers) +
                              " --num_threads " + std::to_string(threads) + " --max_steps " +
                              std::to_string(steps) + " --train_dir " + dir +
                              " --lr_schedule constant --log_every 10 --seed 4 " + layout.flags;
    if (layout.ranks == 1) return run_tower("train " + flags);
    return run_command(mpirun(layout.ranks) + testing::tower_binary() + " train " + flags);
  }
  static std::string lenet() {
    return "--model lenet --data idx:" + idx_->path() +
           " --global_batch_size 32 --micro_batch_size 8";
  }
  static std::string cifar10() {
    return "--model cifar10 --data cifar10:" + cifar_->path() +
           " --global_batch_size 16 --micro_batch_size 4 --augmentation cifar10";
  }
  // Trains on each layout and checks every tensor of each checkpoint against the first's.
  static void expect_same_bits(const std::string& model_flags, int steps,
                               const std::vector<Layout>& layouts) {
    TmpDir dirs;
    std::map<std::string, std::string> first;
    for (const Layout& layout : layouts) {
      if (layout.ranks > 1 && !have_mpi()) continue;
      const std::string name = fmt::format("{}x{}x{}{}", layout.ranks, layout.towers,
                                           layout.threads, layout.flags.empty() ? "" : "+flags");
      SCOPED_TRACE(::testing::Message()
                   << "ranks x towers x threads: " << name << " " << layout.flags);
      const std::string dir = dirs / name;
      auto r = train(model_flags, dir, layout, steps);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      auto bits = testing::checkpoint_tensors(dir, steps);
      if (first.empty()) {
        first = bits;
        continue;
      }
      ASSERT_EQ(bits.size(), first.size());
      for (const auto& [tensor, value] : first) EXPECT_TRUE(bits[tensor] == value) << tensor;
    }
  }
  static TmpDir *idx_, *cifar_;
};
TmpDir* MicroBatchTest::idx_ = nullptr;
TmpDir* MicroBatchTest::cifar_ = nullptr;

TEST_F(MicroBatchTest, LenetGetsTheSameBitsOnAnyNumberOfTowersAndRanks) {
  // 4 micro-batches: 3 towers hold 2, 1 and 1 of them.
  expect_same_bits(lenet(), 20, {{1, 1}, {1, 2}, {1, 3}, {1, 4}, {2, 1}, {2, 2}});
}

TEST_F(MicroBatchTest, Cifar10GetsTheSameBitsOnAnyNumberOfTowersAndRanks) {
  expect_same_bits(cifar10(), 6, {{1, 1}, {1, 2}, {1, 4}, {2, 1}, {2, 2}});
}

TEST_F(MicroBatchTest, ResumingOnAnotherLayoutFollowsTheStraightRunBitForBit) {
  TmpDir dirs;
  const std::string elastic = dirs / "elastic", straight = dirs / "straight";
  auto a = train(lenet(), elastic, {1, 2}, 20);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  int64_t steps = 40;
  auto b = train(lenet(), elastic, {1, 1}, steps);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "resumed from")) << b.output;
  if (have_mpi()) {  // and on two ranks
    steps = 60;
    auto c = train(lenet(), elastic, {2, 2}, steps);
    ASSERT_EQ(c.exit_code, 0) << c.output;
    EXPECT_TRUE(contains(c.output, "resumed from")) << c.output;
  }
  auto d = train(lenet(), straight, {1, 4}, steps);
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_TRUE(testing::checkpoint_tensors(elastic, steps) ==
              testing::checkpoint_tensors(straight, steps));
}

TEST_F(MicroBatchTest, ResumingWithAnotherGlobalOrMicroBatchSizeIsAnError) {
  TmpDir dirs;
  const std::string dir = dirs / "run";
  ASSERT_EQ(train(lenet(), dir, {1, 1}, 10).exit_code, 0);
  const std::string data = "--model lenet --data idx:" + idx_->path();
  auto micro = train(data + " --global_batch_size 32 --micro_batch_size 16", dir, {1, 1}, 20);
  EXPECT_EQ(micro.exit_code, 1) << micro.output;
  EXPECT_TRUE(
      contains(micro.output, "micro_batch_size = 8, but this run has micro_batch_size = 16"))
      << micro.output;
  auto global = train(data + " --global_batch_size 64 --micro_batch_size 8", dir, {1, 1}, 20);
  EXPECT_EQ(global.exit_code, 1) << global.output;
  EXPECT_TRUE(
      contains(global.output, "global_batch_size = 32, but this run has global_batch_size = 64"))
      << global.output;
  auto classic = train(data + " --batch_size 32", dir, {1, 1}, 20);
  EXPECT_EQ(classic.exit_code, 1) << classic.output;
  // Every differing setting at once, and the way to change layouts.
  EXPECT_TRUE(contains(classic.output,
                       "a run with global_batch_size = 32, micro_batch_size = 8, batch_size = "
                       "none, num_towers = none, ranks = none, but this run has global_batch_size "
                       "= none, micro_batch_size = none, batch_size = 32, num_towers = 1"))
      << classic.output;
}

TEST_F(MicroBatchTest, InconsistentSizesAreRefusedNamingTheFlags) {
  TmpDir dirs;
  const std::string data = "--model lenet --data idx:" + idx_->path();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--global_batch_size 30 --micro_batch_size 8",
       "--global_batch_size 30 must be a multiple of --micro_batch_size 8"},
      {"--global_batch_size 32", "--global_batch_size and --micro_batch_size go together"},
      {"--micro_batch_size 8", "--global_batch_size and --micro_batch_size go together"},
      {"--batch_size 8 --global_batch_size 32 --micro_batch_size 8",
       "--batch_size (per tower) and --global_batch_size (per step) exclude each other"},
      {"--global_batch_size 16 --micro_batch_size 8 --num_devices 3",
       "3 towers (--num_devices or --devices) but only 2 micro-batches"},
  };
  for (const auto& [flags, message] : cases) {
    auto r =
        run_tower("train " + data + " --max_steps 1 --train_dir " + (dirs / "x") + " " + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_TRUE(contains(r.output, message)) << flags << "\n" << r.output;
  }
  if (have_mpi()) {
    auto r = run_command(mpirun(2) + testing::tower_binary() + " train " + data +
                         " --max_steps 1 --global_batch_size 24 --micro_batch_size 8 --train_dir " +
                         (dirs / "y"));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(contains(r.output, "which 2 ranks cannot share equally")) << r.output;
  }
}

// Any number of threads: one tower of one thread, one tower of two (the default with
// --num_devices 1 on two cores), two towers of one thread each and two ranks of one write the
// same checkpoint, every tensor bit for bit, with micro-batches; one tower of one or two threads
// also without them (--batch_size); and a run resumed with another --num_threads follows the
// straight run. The thread counts of a rank are in the layouts below.
const std::vector<MicroBatchTest::Layout> kThreadLayouts = {
    {.towers = 1, .threads = 1},
    {.towers = 1, .threads = 2},
    {.towers = 2, .threads = 2},
    {.ranks = 2, .towers = 1, .threads = 1}};
const std::vector<MicroBatchTest::Layout> kOneTowerThreads = {{.threads = 1}, {.threads = 2}};

TEST_F(MicroBatchTest, LenetGetsTheSameBitsOnAnyNumberOfThreads) {
  const std::string lenet = "--model lenet --data idx:" + idx_->path();
  expect_same_bits(lenet + " --global_batch_size 64 --micro_batch_size 16", 12, kThreadLayouts);
  expect_same_bits(lenet + " --batch_size 64", 12, kOneTowerThreads);
}

TEST_F(MicroBatchTest, Cifar10GetsTheSameBitsOnAnyNumberOfThreads) {
  const std::string cifar10 =
      "--model cifar10 --data cifar10:" + cifar_->path() + " --augmentation cifar10";
  expect_same_bits(cifar10 + " --global_batch_size 32 --micro_batch_size 16", 4, kThreadLayouts);
  expect_same_bits(cifar10 + " --batch_size 32", 4, kOneTowerThreads);
}

TEST_F(MicroBatchTest, Resnet20GetsTheSameBitsOnAnyNumberOfThreads) {
  const std::string resnet20 =
      "--model resnet20 --data cifar10:" + cifar_->path() + " --augmentation cifar10";
  expect_same_bits(resnet20 + " --global_batch_size 32 --micro_batch_size 16", 3, kThreadLayouts);
  expect_same_bits(resnet20 + " --batch_size 32", 3, kOneTowerThreads);
}

// Every layer a model file has: among them batch norms that oneDNN computes (a dense layer's
// output, and channels in a padded block), which sum on one thread and are never a task of
// contended mode (their OpenMP barrier would wait for the team), LRN, dropout, average pooling,
// grouped, depthwise and dilated convolutions, ReLU6.
TEST_F(MicroBatchTest, EveryLayerGetsTheSameBitsOnAnyNumberOfThreads) {
  const std::string model = std::string(TOWER_SOURCE_DIR) + "/tests/integration/every_layer.json";
  std::vector<Layout> layouts = kThreadLayouts;
  layouts.push_back({.towers = 1, .threads = 2, .flags = "--contention on"});
  expect_same_bits("--model_file " + model + " --data idx:" + idx_->path() +
                       " --global_batch_size 32 --micro_batch_size 16",
                   6, layouts);
}

TEST_F(MicroBatchTest, ResumingWithAnotherNumberOfThreadsFollowsTheStraightRun) {
  TmpDir dirs;
  const std::string flags =
      "--model lenet --data idx:" + idx_->path() + " --global_batch_size 64 --micro_batch_size 16";
  const std::string resumed = dirs / "resumed", straight = dirs / "straight";
  ASSERT_EQ(train(flags, resumed, {.threads = 2}, 10).exit_code, 0);
  auto r = train(flags, resumed, {.threads = 1}, 20);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "resumed from")) << r.output;
  ASSERT_EQ(train(flags, straight, {.threads = 2}, 20).exit_code, 0);
  EXPECT_TRUE(testing::checkpoint_tensors(resumed, 20) ==
              testing::checkpoint_tensors(straight, 20));
}

}  // namespace
}  // namespace tower
