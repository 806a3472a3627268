// The real `tower` binary on any number of threads: one tower of one thread, one tower of two
// (the default with --num_devices 1 on two cores) and two towers of one thread each write the same
// checkpoint, every tensor bit for bit, with micro-batches, as do two ranks; one tower of one or
// two threads also without them; and a run resumed with another --num_threads follows the straight
// run.
#include <gtest/gtest.h>

#include <map>

#include "testing/checkpoints.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"

namespace tower {
namespace {

using testing::contains;
using testing::run_tower;
using testing::TmpDir;

class ThreadsTest : public ::testing::Test {
 public:
  struct Layout {
    int towers, threads, ranks = 1;
    std::string flags = "";  // --contention on, say
  };

 protected:
  static void SetUpTestSuite() {
    idx_ = new TmpDir();
    cifar_ = new TmpDir();
    auto a = run_tower("make-dataset --format idx --out " + idx_->path() +
                       " --num_train 1000 --num_test 100 --seed 5");
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto b = run_tower("make-dataset --format cifar10 --out " + cifar_->path() +
                       " --num_train 300 --num_test 100 --seed 5");
    ASSERT_EQ(b.exit_code, 0) << b.output;
  }
  static void TearDownTestSuite() {
    delete idx_;
    delete cifar_;
  }

  // `threads` in all per rank, shared by its towers; ranks > 1 under mpirun. A constant learning
  // rate, so that a run stopped at step N and resumed follows the run that went on.
  static testing::CommandResult train(const std::string& model_flags, const std::string& dir,
                                      Layout layout, int steps) {
    const std::string flags = model_flags + " --num_devices " + std::to_string(layout.towers) +
                              " --num_threads " + std::to_string(layout.threads) + " --max_steps " +
                              std::to_string(steps) + " --train_dir " + dir +
                              " --lr_schedule constant --log_every 10 --seed 4 " + layout.flags;
    if (layout.ranks == 1) return run_tower("train " + flags);
    return testing::run_command(testing::mpirun(layout.ranks) + testing::tower_binary() +
                                " train " + flags);
  }
  // Trains on each layout and checks every tensor of each checkpoint against the first's.
  static void expect_same_bits(const std::string& model_flags, int steps,
                               const std::vector<Layout>& layouts) {
    TmpDir dirs;
    std::map<std::string, std::string> first;
    for (Layout layout : layouts) {
      if (layout.ranks > 1 && testing::mpirun(1).empty()) continue;
      SCOPED_TRACE(::testing::Message()
                   << layout.ranks << " rank(s) x " << layout.towers << " tower(s), "
                   << layout.threads << " thread(s) " << layout.flags);
      const std::string dir =
          dirs / (std::to_string(layout.ranks) + "x" + std::to_string(layout.towers) + "x" +
                  std::to_string(layout.threads));
      auto r = train(model_flags, dir, layout, steps);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      auto bits = testing::checkpoint_tensors(dir, steps);
      if (first.empty()) {
        first = bits;
        continue;
      }
      ASSERT_EQ(bits.size(), first.size());
      for (const auto& [name, value] : first) EXPECT_TRUE(bits[name] == value) << name;
    }
  }
  static std::string lenet() { return "--model lenet --data idx:" + idx_->path(); }
  static std::string cifar(const std::string& model) {
    return "--model " + model + " --data cifar10:" + cifar_->path() + " --augmentation cifar10";
  }
  static TmpDir *idx_, *cifar_;
};
TmpDir* ThreadsTest::idx_ = nullptr;
TmpDir* ThreadsTest::cifar_ = nullptr;

// One tower of one thread, of two, two towers of one thread each, two ranks of one.
const std::vector<ThreadsTest::Layout> kMicroBatchLayouts = {{1, 1}, {1, 2}, {2, 2}, {1, 1, 2}};
const std::vector<ThreadsTest::Layout> kOneTower = {{1, 1}, {1, 2}};

TEST_F(ThreadsTest, LenetGetsTheSameBitsOnAnyNumberOfThreads) {
  expect_same_bits(lenet() + " --global_batch_size 64 --micro_batch_size 16", 12,
                   kMicroBatchLayouts);
  expect_same_bits(lenet() + " --batch_size 64", 12, kOneTower);
}

TEST_F(ThreadsTest, Cifar10GetsTheSameBitsOnAnyNumberOfThreads) {
  expect_same_bits(cifar("cifar10") + " --global_batch_size 32 --micro_batch_size 16", 4,
                   kMicroBatchLayouts);
  expect_same_bits(cifar("cifar10") + " --batch_size 32", 4, kOneTower);
}

TEST_F(ThreadsTest, Resnet20GetsTheSameBitsOnAnyNumberOfThreads) {
  expect_same_bits(cifar("resnet20") + " --global_batch_size 32 --micro_batch_size 16", 3,
                   kMicroBatchLayouts);
  expect_same_bits(cifar("resnet20") + " --batch_size 32", 3, kOneTower);
}

// Every layer a model file has: among them batch norms that oneDNN computes (a dense layer's
// output, and channels in a padded block), which sum on one thread and are never a task of
// contended mode (their OpenMP barrier would wait for the team), LRN, dropout and average pooling.
TEST_F(ThreadsTest, EveryLayerGetsTheSameBitsOnAnyNumberOfThreads) {
  const std::string model = std::string(TOWER_SOURCE_DIR) + "/tests/integration/every_layer.json";
  std::vector<Layout> layouts = kMicroBatchLayouts;
  layouts.push_back({1, 2, 1, "--contention on"});
  expect_same_bits("--model_file " + model + " --data idx:" + idx_->path() +
                       " --global_batch_size 32 --micro_batch_size 16",
                   6, layouts);
}

TEST_F(ThreadsTest, ResumingWithAnotherNumberOfThreadsFollowsTheStraightRun) {
  TmpDir dirs;
  const std::string flags = lenet() + " --global_batch_size 64 --micro_batch_size 16";
  const std::string resumed = dirs / "resumed", straight = dirs / "straight";
  ASSERT_EQ(train(flags, resumed, {1, 2}, 10).exit_code, 0);
  auto r = train(flags, resumed, {1, 1}, 20);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "resumed from")) << r.output;
  ASSERT_EQ(train(flags, straight, {1, 2}, 20).exit_code, 0);
  EXPECT_TRUE(testing::checkpoint_tensors(resumed, 20) ==
              testing::checkpoint_tensors(straight, 20));
}

}  // namespace
}  // namespace tower
