// The real `tower` binary under mpirun: ranks train like one process with the same global batch,
// bitwise reproducibly, resume after a rank is killed, and never hang when a rank dies, stops
// answering, or was started with other flags.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "testing/checkpoints.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/io/checkpoint.h"
#include "tower/io/safetensors.h"

namespace tower {
namespace {

using testing::contains;
using testing::read_file;
using testing::write_file;

using testing::mpirun;
using testing::run_command;
using testing::run_tower;
using testing::TmpDir;
using Clock = std::chrono::steady_clock;

// The pids of the processes whose parent is `parent` (the ranks mpirun started).
std::vector<pid_t> children(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_file(entry.path() / "stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent &&
        contains(stat, "(tower)"))
      out.push_back(std::stoi(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool alive(pid_t pid) {
  return kill(pid, 0) == 0 && !contains(read_file("/proc/" + std::to_string(pid) + "/stat"), ") Z");
}

class MpiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TmpDir();
    auto r = run_tower("make-dataset --format idx --out " + data_->path() +
                       " --num_train 3000 --num_test 200 --seed 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete data_; }
  void SetUp() override {
#ifndef TOWER_MPIEXEC
    GTEST_SKIP()
        << "this build has no MPI (apt-get install libopenmpi-dev openmpi-bin, then rebuild)";
#endif
  }
  // Plain SGD at a constant rate, no moving average: the weights are the whole state.
  static std::string train_flags(const std::string& dir, int towers, int steps) {
    return "train --model lenet --data idx:" + data_->path() + " --num_devices " +
           std::to_string(towers) +
           " --batch_size 8 --optimizer momentum --lr 0.02 --lr_schedule constant --ema_decay 0 "
           "--seed 5"
           " --log_every 10 --save_every_steps 10 --max_steps " +
           std::to_string(steps) + " --train_dir " + dir;
  }
  static std::string ranks_command(int ranks, const std::string& flags) {
    return mpirun(ranks) + testing::tower_binary() + " " + flags;
  }
  // Starts 2 ranks training into `dir` in the background and waits until they have written
  // `checkpoints` checkpoints. Returns mpirun's pid and the ranks' pids (empty if they did not
  // show up).
  static std::pair<pid_t, std::vector<pid_t>> start_job(const std::string& dir,
                                                        const std::string& flags,
                                                        size_t checkpoints) {
    pid_t job = testing::spawn_command(ranks_command(2, flags), dir + ".log");
    // Up to a minute: a loaded machine (ctest -j) starts two ranks slowly.
    for (int i = 0; i < 6000 && checkpoint_list(dir).size() < checkpoints; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return {job, children(job)};
  }
  static TmpDir* data_;
};
TmpDir* MpiTest::data_ = nullptr;

std::map<std::string, std::vector<float>> weights(const std::string& dir, int64_t step) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : safetensors_read(checkpoint_prefix(dir, step) + ".safetensors").tensors)
    out[name] = t.to_vector<float>();
  return out;
}

TEST_F(MpiTest, TwoAndThreeRanksMatchOneProcessWithTheSameGlobalBatch) {
  TmpDir dirs;
  const int steps = 30;
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << ranks << " ranks");
    const std::string one = dirs / ("one" + std::to_string(ranks)),
                      many = dirs / ("many" + std::to_string(ranks));
    auto a = run_tower(train_flags(one, ranks, steps));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto b = run_command(ranks_command(ranks, train_flags(many, 1, steps)));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_TRUE(contains(b.output, std::to_string(ranks) + " ranks x 1 tower")) << b.output;
    // Only rank 0 logs: every line once.
    EXPECT_EQ(b.output.find("step 10, loss"), b.output.rfind("step 10, loss")) << b.output;
    auto wa = weights(one, steps), wb = weights(many, steps);
    ASSERT_EQ(wa.size(), wb.size());
    // Documented tolerance: the same sums in another order (per-rank partial sums), over 30
    // momentum steps, as in the towers equivalence test.
    for (const auto& [name, va] : wa) {
      double worst = 0;
      for (size_t k = 0; k < va.size(); ++k)
        worst = std::max(worst, std::fabs(double(va[k]) - wb[name][k]));
      EXPECT_LE(worst, 1e-4) << name;
    }
  }
}

// Fine-tuning across ranks: rank 0 reads the --init_from weights and hands them out, the frozen
// layers thaw at the same step everywhere, and 2 ranks of 1 tower end on the bits of 1 process of
// 2 towers (micro-batches).
TEST_F(MpiTest, FineTuningGivesTheSameBitsOnRanksAsOnTowers) {
  TmpDir dirs;
  auto pre = run_tower(train_flags(dirs / "pre", 2, 10));
  ASSERT_EQ(pre.exit_code, 0) << pre.output;
  const auto flags = [&](const std::string& dir, int towers) {
    return "train --model lenet --data idx:" + data_->path() + " --num_devices " +
           std::to_string(towers) +
           " --global_batch_size 16 --micro_batch_size 8 --optimizer momentum --lr 0.02 "
           "--lr_schedule constant --max_steps 8 --save_every_steps 8 --init_from " +
           (dirs / "pre") + " --freeze conv1,conv2 --unfreeze_after_epochs 0.02 --train_dir " + dir;
  };
  auto towers = run_tower(flags(dirs / "towers", 2));
  ASSERT_EQ(towers.exit_code, 0) << towers.output;
  auto ranks = run_command(ranks_command(2, flags(dirs / "ranks", 1)));
  ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
  EXPECT_TRUE(contains(ranks.output, "step 4: conv1, conv2 thaw")) << ranks.output;
  EXPECT_EQ(ranks.output.find("init from"), ranks.output.rfind("init from")) << ranks.output;
  EXPECT_EQ(testing::checkpoint_tensors(dirs / "towers", 8),
            testing::checkpoint_tensors(dirs / "ranks", 8));
}

// Warnings that are the same on every rank (a warm-up clamped to a short run) come from rank 0
// only, once.
TEST_F(MpiTest, WarningsThatEveryRankWouldGiveComeOnce) {
  TmpDir dirs;
  auto r = run_command(
      ranks_command(2, train_flags(dirs / "run", 1, 4) + " --lr_schedule cosine:warmup_steps=50"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t first = r.output.find("warning: --lr_schedule");
  EXPECT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(first, r.output.rfind("warning: --lr_schedule")) << r.output;
}

TEST_F(MpiTest, KillingOneRankEndsTheJobAndResumingIsBitwiseIdentical) {
  TmpDir dirs;
  const int steps = 60;  // killed after its second checkpoint (step 20), long before the end
  auto full = run_command(ranks_command(2, train_flags(dirs / "full", 1, steps)));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto again = run_command(ranks_command(2, train_flags(dirs / "again", 1, steps)));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(weights(dirs / "full", steps), weights(dirs / "again", steps)) << "not deterministic";

  auto [job, ranks] = start_job(dirs / "killed", train_flags(dirs / "killed", 1, steps), 2);
  ASSERT_EQ(ranks.size(), 2u) << read_file(dirs / "killed.log");
  ASSERT_FALSE(checkpoint_list(dirs / "killed").empty()) << "no checkpoint yet\n"
                                                         << read_file(dirs / "killed.log");
  const auto killed_at = Clock::now();
  kill(ranks[1], SIGKILL);
  const int code = testing::wait_exit_code(job);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_NE(code, 0) << read_file(dirs / "killed.log");
  EXPECT_LT(seconds, 30.0) << "the job outlived its killed rank";
  // mpirun may return while the kernel is still tearing down the last rank: a few seconds of grace
  // (a rank stuck for good still fails).
  for (pid_t rank : ranks) {
    for (int i = 0; i < 500 && alive(rank); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(alive(rank)) << "rank process " << rank << " survived";
  }
  ASSERT_LT(checkpoint_list(dirs / "killed").back(), steps) << "the run ended before it was killed";

  auto resumed = run_command(ranks_command(2, train_flags(dirs / "killed", 1, steps)));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "resumed from")) << resumed.output;
  EXPECT_EQ(weights(dirs / "full", steps), weights(dirs / "killed", steps));
}

TEST_F(MpiTest, AStuckRankMakesTheOthersStopWithinTheTimeout) {
  TmpDir dirs;
  auto [job, ranks] =
      start_job(dirs / "run", train_flags(dirs / "run", 1, 1000000) + " --comm_timeout 3", 1);
  ASSERT_EQ(ranks.size(), 2u) << read_file(dirs / "run.log");
  const auto stopped_at = Clock::now();
  kill(ranks[1], SIGSTOP);
  const int code = testing::wait_exit_code(job);
  const double seconds = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  for (pid_t rank : ranks) kill(rank, SIGKILL);  // in case the launcher left one behind
  const std::string log = read_file(dirs / "run.log");
  EXPECT_NE(code, 0) << log;
  EXPECT_LT(seconds, 30.0);
  EXPECT_TRUE(contains(log, "tower[rank 0]: error: rank 0 waited 3 s")) << log;
}

TEST_F(MpiTest, SigtermToOneRankStopsEveryRankAfterTheSameStep) {
  TmpDir dirs;
  auto [job, ranks] = start_job(dirs / "run", train_flags(dirs / "run", 1, 1000000), 1);
  ASSERT_EQ(ranks.size(), 2u) << read_file(dirs / "run.log");
  kill(ranks[1], SIGTERM);
  // Every rank exits with 130 (interrupted, after the checkpoint), and so does mpirun.
  EXPECT_EQ(testing::wait_exit_code(job), 130) << read_file(dirs / "run.log");
  const std::string log = read_file(dirs / "run.log");
  EXPECT_TRUE(contains(log, "stopped by a signal to another rank")) << log;
  EXPECT_TRUE(contains(log, "checkpoint written")) << log;
}

TEST_F(MpiTest, RanksStartedWithOtherFlagsAreAClearError) {
  TmpDir dirs;
  const std::string flags = train_flags(dirs / "run", 1, 5);
  auto r = run_command(mpirun(1) + testing::tower_binary() + " " + flags + " --lr 0.1 : -np 1 " +
                       testing::tower_binary() + " " + flags + " --lr 0.2");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(
      r.output, "the ranks disagree on their flags: --lr is 0.2 on rank 1 but 0.1 on rank 0"))
      << r.output;
}

}  // namespace
}  // namespace tower
