// The real `tower` binary on a quiet machine and with another process spinning on a core: the
// team's automatic switch to contended mode must not change a bit of the checkpoint (issue: on
// AVX2 the weights followed the machine's load). CTest runs this once per instruction-set level
// the CPU has (ONEDNN_MAX_CPU_ISA).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>

#include "testing/checkpoints.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/io/checkpoint.h"
#include "tower/io/safetensors.h"

namespace tower {
namespace {

using testing::run_command;
using testing::run_tower;
using testing::TmpDir;

// 20 steps of `model_flags` on `towers` towers of 2 / towers threads: team mode
// (--contention off) on a quiet machine, the automatic choice with a busy loop on CPU 1, and
// contended mode throughout; the three checkpoints must be equal bit for bit. A team of two runs
// 64 rows (its kernels cut them into chunks, the matmuls into 2 of 32: with a whole-team matmul,
// AVX2's gemm did not split its sum and the bug hid); towers of one thread run 16 rows each.
void expect_load_changes_no_bit(const std::string& model_flags, int towers) {
  constexpr int kSteps = 20;
  TmpDir dirs;
  std::map<std::string, std::string> first;
  for (const char* mode : {"quiet", "busy", "contended"}) {
    SCOPED_TRACE(mode);
    const std::string dir = dirs / mode;
    const std::string contention = std::strcmp(mode, "quiet") == 0       ? " --contention off"
                                   : std::strcmp(mode, "contended") == 0 ? " --contention on"
                                                                         : "";
    pid_t spinner = -1;
    if (std::strcmp(mode, "busy") == 0)
      spinner = testing::spawn_command(
          "taskset -c 1 sh -c 'while :; do :; done' || sh -c 'while :; do :; done'",
          dirs / "spinner.log");
    auto r = run_command(testing::tower_binary() + " train " + model_flags + contention +
                         " --num_devices " + std::to_string(towers) + " --batch_size " +
                         (towers == 1 ? "64" : "16") + " --num_threads 2 --max_steps " +
                         std::to_string(kSteps) +
                         " --lr_schedule constant --log_every 10 --seed 5 --train_dir " + dir);
    if (spinner > 0) {
      kill(spinner, SIGKILL);
      testing::wait_exit_code(spinner);
    }
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto bits = testing::checkpoint_tensors(dir, kSteps);
    if (first.empty()) {
      first = bits;
      continue;
    }
    ASSERT_EQ(bits.size(), first.size());
    for (const auto& [name, value] : first) EXPECT_TRUE(bits[name] == value) << name;
  }
}

class BusyCoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TmpDir();
    auto a = run_tower("make-dataset --format idx --out " + (*data_ / "idx") +
                       " --num_train 2000 --num_test 100 --seed 3");
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto b = run_tower("make-dataset --format cifar10 --out " + (*data_ / "cifar") +
                       " --num_train 1000 --num_test 100 --seed 3");
    ASSERT_EQ(b.exit_code, 0) << b.output;
  }
  static void TearDownTestSuite() { delete data_; }
  static TmpDir* data_;
};
TmpDir* BusyCoreTest::data_ = nullptr;

// One test per model and layout, so that each stays short and CTest runs them side by side.
std::string lenet(const TmpDir& data) { return "--model lenet --data idx:" + (data / "idx"); }
std::string cifar10(const TmpDir& data) {
  return "--model cifar10 --data cifar10:" + (data / "cifar") + " --augmentation cifar10";
}
TEST_F(BusyCoreTest, LenetOneTowerOfTwoThreadsKeepsItsBitsWithACoreBusy) {
  expect_load_changes_no_bit(lenet(*data_), 1);
}
TEST_F(BusyCoreTest, LenetTwoTowersOfOneThreadKeepTheirBitsWithACoreBusy) {
  expect_load_changes_no_bit(lenet(*data_), 2);
}
TEST_F(BusyCoreTest, Cifar10OneTowerOfTwoThreadsKeepsItsBitsWithACoreBusy) {
  expect_load_changes_no_bit(cifar10(*data_), 1);
}
TEST_F(BusyCoreTest, Cifar10TwoTowersOfOneThreadKeepTheirBitsWithACoreBusy) {
  expect_load_changes_no_bit(cifar10(*data_), 2);
}

}  // namespace
}  // namespace tower
