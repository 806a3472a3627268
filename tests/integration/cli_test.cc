// Runs the real `tower` binary: train, kill, resume, signals, eval, bad input.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

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

using testing::run_tower;
using testing::TmpDir;

// A small generated CIFAR-10-format data set shared by the tests of this file.
class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TmpDir();
    auto r = run_tower("make-dataset --format cifar10 --out " + data_->path() +
                       " --num_train 1000 --num_test 200 --seed 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete data_; }
  static std::string train_flags(const std::string& dir, int steps) {
    return "train --model cifar10 --data cifar10:" + data_->path() +
           " --num_devices 2 --batch_size 8 --optimizer momentum --lr 0.01 --lr_schedule constant "
           "--ema_decay 0.99"
           " --seed 3 --log_every 20 --save_every_steps 10 --max_steps " +
           std::to_string(steps) + " --train_dir " + dir;
  }
  static TmpDir* data_;
};
TmpDir* CliTest::data_ = nullptr;

void expect_same_tensors(const std::string& a, const std::string& b) {
  SafetensorsFile fa = safetensors_read(a), fb = safetensors_read(b);
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const auto& [name, ta] : fa.tensors) {
    const Tensor& tb = fb.tensors.at(name);
    ASSERT_EQ(ta.shape(), tb.shape()) << name;
    EXPECT_EQ(std::memcmp(ta.raw_data(), tb.raw_data(), ta.nbytes()), 0) << name << " differs";
  }
}

TEST_F(CliTest, KilledAndResumedRunEndsBitwiseIdenticalToAnUninterruptedOne) {
  TmpDir dirs;
  const int steps = 100;  // killed after 3 checkpoints (step 30 or later), long before the end
  auto full = run_tower(train_flags(dirs / "full", steps));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_TRUE(contains(full.output, "step 20, loss = ")) << full.output;
  // The loss with its two parts (cifar10's weight decay dwarfs a small cross-entropy), the
  // training accuracy and the learning rate.
  EXPECT_TRUE(contains(full.output, "(cross-entropy ")) << full.output;
  EXPECT_TRUE(contains(full.output, " + regularization ")) << full.output;
  EXPECT_TRUE(contains(full.output, "train accuracy ")) << full.output;
  EXPECT_TRUE(contains(full.output, "sec/batch) lr 0.01")) << full.output;
  EXPECT_TRUE(contains(full.output, "precision @ 1 = ")) << full.output;

  // Kill -9 somewhere in the middle, then run the same command again.
  pid_t pid = testing::spawn_tower(train_flags(dirs / "killed", steps), dirs / "killed.log");
  for (int i = 0; i < 3000 && checkpoint_list(dirs / "killed").size() < 3; ++i)  // up to a minute
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGKILL);
  ASSERT_EQ(testing::wait_exit_code(pid), 128 + SIGKILL) << "the run ended before it was killed";
  auto saved = checkpoint_list(dirs / "killed");
  ASSERT_FALSE(saved.empty());
  ASSERT_LT(saved.back(), steps);
  // (The killed run's lock on the train dir went with it.)
  auto resumed = run_tower(train_flags(dirs / "killed", steps));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "resumed from")) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, std::to_string(steps - saved.back()) + " steps trained"))
      << resumed.output;
  expect_same_tensors(checkpoint_prefix(dirs / "full", steps) + ".safetensors",
                      checkpoint_prefix(dirs / "killed", steps) + ".safetensors");

  // Evaluation and inspection of what was written.
  auto eval = run_tower("eval --run_once --train_dir " + (dirs / "full"));
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_TRUE(contains(eval.output, "step " + std::to_string(steps) + ": precision @ 1 = "))
      << eval.output;
  auto inspect = run_tower("inspect " + (dirs / "full"));
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "conv1/weights")) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "(64, 3, 5, 5)")) << inspect.output;
  EXPECT_TRUE(std::filesystem::exists(dirs / "full/metrics.jsonl"));
  EXPECT_TRUE(std::filesystem::exists(dirs / "full/checkpoint"));
}

// A resume with nothing left to train says so; eval without --run_once watches the train dir for
// new checkpoints, and says so too.
TEST_F(CliTest, ANothingToDoResumeAndAWaitingEvalSaySo) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 2)).exit_code, 0);
  auto again = run_tower(train_flags(dirs / "run", 2));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "already at step 2 ")) << again.output;
  pid_t pid = testing::spawn_tower("eval --eval_interval_secs 60 --train_dir " + (dirs / "run"),
                                   dirs / "eval.log");
  std::string text;
  for (int i = 0; i < 500 && !contains(text, "waiting for new checkpoints"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    text = testing::read_file(dirs / "eval.log");
  }
  kill(pid, SIGKILL);
  testing::wait_exit_code(pid);
  EXPECT_TRUE(contains(text, "step 2: precision @ 1 = ")) << text;
  EXPECT_TRUE(contains(text, "waiting for new checkpoints in " + (dirs / "run") + " (Ctrl-C"))
      << text;
}

TEST_F(CliTest, SigtermFinishesTheStepWritesACheckpointAndExitsCleanly) {
  TmpDir dirs;
  pid_t pid = testing::spawn_tower(train_flags(dirs / "run", 100000), dirs / "run.log");
  for (int i = 0; i < 600 && checkpoint_list(dirs / "run").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // One writer per train dir: a second run into it stops at once, naming the first one's pid.
  auto second = run_tower(train_flags(dirs / "run", 100000));
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_TRUE(contains(second.output,
                       "is in use by another `tower train` (pid " + std::to_string(pid) + ")"))
      << second.output;
  kill(pid, SIGTERM);
  EXPECT_EQ(testing::wait_exit_code(pid), 130);  // interrupted, after the checkpoint
  std::ifstream log(dirs / "run.log");
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_TRUE(contains(text, "stopped by signal")) << text;
  auto saved = checkpoint_list(dirs / "run");
  ASSERT_FALSE(saved.empty());
  EXPECT_TRUE(contains(text, "checkpoint written")) << text;
  EXPECT_TRUE(contains(text, "step " + std::to_string(saved.back()))) << text;
}

// A damaged latest checkpoint: eval names it and the older one to use; resuming warns, names it
// and falls back to the older one; naming the damaged one explicitly is an error.
TEST_F(CliTest, CorruptCheckpointIsNamedAndResumingFallsBackToTheOlderOne) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 20)).exit_code, 0);
  std::string file = checkpoint_prefix(dirs / "run", 20) + ".safetensors";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  const std::string older = checkpoint_prefix(dirs / "run", 10);
  auto eval = run_tower("eval --run_once --train_dir " + (dirs / "run"));
  EXPECT_EQ(eval.exit_code, 1);
  EXPECT_TRUE(contains(eval.output, file)) << eval.output;
  EXPECT_TRUE(contains(eval.output, "--checkpoint " + older)) << eval.output;
  auto explicit_resume = run_tower(train_flags(dirs / "run", 30) + " --resume_from " +
                                   checkpoint_prefix(dirs / "run", 20));
  EXPECT_EQ(explicit_resume.exit_code, 1);
  EXPECT_TRUE(contains(explicit_resume.output, file)) << explicit_resume.output;
  auto resume = run_tower(train_flags(dirs / "run", 30));
  EXPECT_EQ(resume.exit_code, 0) << resume.output;
  EXPECT_TRUE(contains(resume.output, "warning: safetensors file '" + file)) << resume.output;
  EXPECT_TRUE(contains(resume.output, "resuming from the older checkpoint " + older))
      << resume.output;
  EXPECT_TRUE(contains(resume.output, "at step 10")) << resume.output;
  EXPECT_NO_THROW(safetensors_read(checkpoint_prefix(dirs / "run", 30) + ".safetensors"));
  // The damaged files were kept aside before the new step 20 was written over their names.
  EXPECT_TRUE(contains(resume.output, "kept aside as " + file + ".damaged")) << resume.output;
  EXPECT_TRUE(std::filesystem::exists(file + ".damaged"));
  EXPECT_TRUE(std::filesystem::exists(checkpoint_prefix(dirs / "run", 20) + ".json.damaged"));
}

TEST_F(CliTest, ResumingWithOtherFlagsIsAClearError) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 10)).exit_code, 0);
  auto r = run_tower(train_flags(dirs / "run", 20) + " --model lenet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "model")) << r.output;
}

TEST_F(CliTest, NanLossStopsWithTheStep) {
  TmpDir dirs;
  auto r = run_tower(train_flags(dirs / "run", 50) + " --lr 1e12");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "diverged")) << r.output;
  EXPECT_TRUE(contains(r.output, "at step")) << r.output;
}

// On the GPU machine: the cifar10 model trained on cuda:0 follows the CPU run step by step (same
// data, same flags), with cuDNN's fastest convolutions too (--no-deterministic); two
// deterministic GPU runs end with the same bits. cuDNN and oneDNN sum in other orders, and
// training amplifies such differences: on an H200 the losses agreed to 1e-7 for 16 steps and
// drifted apart by 1% at step 40, so the losses of the first 10 steps are compared.
TEST_F(CliTest, TrainingOnAGpuFollowsTheCpuRun) {
  if (!contains(run_tower("devices").output, "cuda:0"))
    GTEST_SKIP() << "no CUDA device here (or no CUDA backend in this build): the GPU run is "
                    "compiled, not run";
  TmpDir dirs;
  const int steps = 10;
  auto losses = [](const std::string& dir) {
    std::vector<double> out;
    std::ifstream in(dir + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto at = line.find("\"loss\":");
      if (at != std::string::npos) out.push_back(std::stod(line.substr(at + 7)));
    }
    return out;
  };
  auto cpu = run_tower(train_flags(dirs / "cpu", steps) + " --log_every 1 --devices cpu:0");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  const std::vector<double> a = losses(dirs / "cpu");
  ASSERT_FALSE(a.empty());
  for (const std::string run : {"gpu", "again", "fast"}) {
    SCOPED_TRACE(run);
    auto gpu = run_tower(train_flags(dirs / run, steps) + " --log_every 1 --devices cuda:0" +
                         (run == "fast" ? " --no-deterministic" : ""));
    ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
    const std::vector<double> b = losses(dirs / run);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + a[i])) << "step " << i + 1;
  }
  expect_same_tensors(checkpoint_prefix(dirs / "gpu", steps) + ".safetensors",
                      checkpoint_prefix(dirs / "again", steps) + ".safetensors");
}

TEST(CliErrorsTest, BadFlagsAndMissingDataAreOneClearLine) {
  auto bad_number = run_tower("train --batch_size abc");
  EXPECT_EQ(bad_number.exit_code, 2);
  EXPECT_TRUE(contains(bad_number.output, "--batch_size: must be a number > 0, got 'abc'"))
      << bad_number.output;
  EXPECT_LT(bad_number.output.size(), 200u) << bad_number.output;
  auto unknown = run_tower("train --no_such_flag 1");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_TRUE(contains(unknown.output, "--no_such_flag")) << unknown.output;
  // A typo gets the nearest flag or sub-command.
  auto typo = run_tower("train --max_step 20");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_TRUE(contains(typo.output, "unknown flag --max_step: did you mean --max_steps?"))
      << typo.output;
  auto command = run_tower("trian --max_steps 20");
  EXPECT_EQ(command.exit_code, 2);
  EXPECT_TRUE(contains(command.output, "unknown sub-command 'trian': did you mean 'train'?"))
      << command.output;
  auto strategy = run_tower("train --strategy ring --max_steps 1");
  EXPECT_EQ(strategy.exit_code, 1);
  EXPECT_TRUE(contains(strategy.output, "--strategy 'ring'")) << strategy.output;
  auto missing = run_tower("train --data cifar10:/nonexistent/cifar --max_steps 1");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(contains(missing.output, "/nonexistent/cifar")) << missing.output;
  auto model = run_tower("train --model vgg --max_steps 1");
  EXPECT_EQ(model.exit_code, 1);
  EXPECT_TRUE(contains(model.output, "unknown model 'vgg'")) << model.output;
  auto gpu = run_tower("train --devices cuda:3 --max_steps 1");
  EXPECT_EQ(gpu.exit_code, 1);
  EXPECT_TRUE(contains(gpu.output, "--allow_soft_placement")) << gpu.output;
}

TEST(CliInfoTest, DevicesModelsVersion) {
  auto devices = run_tower("devices");
  EXPECT_EQ(devices.exit_code, 0);
  EXPECT_TRUE(contains(devices.output, "cpu:0")) << devices.output;
  auto models = run_tower("models");
  EXPECT_EQ(models.exit_code, 0);
  EXPECT_TRUE(contains(models.output, "1068298")) << models.output;
  // torchvision's count for resnet50 with ImageNet's classes
  EXPECT_TRUE(contains(models.output, "25557032 (1,000)")) << models.output;
  auto version = run_tower("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_TRUE(contains(version.output, "tower ")) << version.output;
}

// The kernels of a smaller CPU: the binary takes TOWER_MAX_CPU_ISA, any program oneDNN's own
// ONEDNN_MAX_CPU_ISA; `tower devices` says which level the kernels use. A bad name is one error.
TEST(CpuIsaTest, TheCapsAreHonouredAndABadNameIsNamed) {
  auto tower_env =
      testing::run_command("TOWER_MAX_CPU_ISA=avx2 " + testing::tower_binary() + " devices");
  EXPECT_EQ(tower_env.exit_code, 0) << tower_env.output;
  EXPECT_TRUE(contains(tower_env.output, "kernels: avx2 ")) << tower_env.output;
  auto onednn =
      testing::run_command("ONEDNN_MAX_CPU_ISA=AVX2 " + testing::tower_binary() + " devices");
  EXPECT_TRUE(contains(onednn.output, "kernels: avx2 ")) << onednn.output;
  auto bad = testing::run_command("TOWER_MAX_CPU_ISA=sse9 " + testing::tower_binary() + " devices");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(contains(bad.output, "TOWER_MAX_CPU_ISA=sse9: expected one of avx2, avx512"))
      << bad.output;
  // The hardware check comes with the choice of devices, before any data is read.
  testing::TmpDir tmp;
  auto bf16 = testing::run_command("ONEDNN_MAX_CPU_ISA=AVX2 " + testing::tower_binary() +
                                   " train --precision bf16 --data idx:" + (tmp / "none") +
                                   " --train_dir " + (tmp / "run"));
  EXPECT_EQ(bf16.exit_code, 1) << bf16.output;
  EXPECT_TRUE(contains(bf16.output, "--precision bf16 needs a CPU with AVX512-BF16 or AMX"))
      << bf16.output;
  EXPECT_FALSE(contains(bf16.output, "none")) << bf16.output;
  EXPECT_FALSE(std::filesystem::exists(tmp / "run"));
}

}  // namespace
}  // namespace tower
