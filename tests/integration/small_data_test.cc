// The real binary on a short run of a batch-norm model: statistics recomputed for evaluation and
// checkpoints (precise BN), --bn_momentum recorded, and a recipe's schedule fitted to the run.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "testing/checkpoints.h"
#include "testing/files.h"
#include "testing/model_files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/io/checkpoint.h"

namespace tower {
namespace {

using testing::contains;
using testing::run_tower;
using testing::TmpDir;

// The state file of checkpoint `step` in `dir`.
nlohmann::json state_of(const std::string& dir, int64_t step) {
  return nlohmann::json::parse(testing::read_file(checkpoint_prefix(dir, step) + ".json"));
}

// A run refused with exit code 1 and a line holding `message`.
void expect_refused(const testing::CommandResult& r, const std::string& message) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, message)) << r.output;
}

// Two runs that end on the same checkpoint: the same step, every tensor and the evaluations'
// progress bitwise. Returns that progress.
nlohmann::json expect_same_end(const std::string& a, const std::string& b) {
  const int64_t last = checkpoint_list(a).back();
  EXPECT_EQ(checkpoint_list(b).back(), last);
  EXPECT_EQ(testing::checkpoint_tensors(a, last), testing::checkpoint_tensors(b, last));
  EXPECT_EQ(state_of(a, last)["progress"], state_of(b, last)["progress"]);
  return state_of(a, last)["progress"];
}

class SmallDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TmpDir();
    auto r = run_tower("make-dataset --format cifar10 --out " + (*tmp_ / "data") +
                       " --num_train 240 --num_test 60 --seed 5");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    testing::write_file(*tmp_ / "small_bn.json", testing::small_bn_model("small_bn"));
  }
  static void TearDownTestSuite() { delete tmp_; }
  static std::string flags(const std::string& dir, int steps, const std::string& more = "") {
    return "train --model_file " + (*tmp_ / "small_bn.json") +
           " --data cifar10:" + (*tmp_ / "data") +
           " --num_devices 2 --batch_size 8 --optimizer momentum --lr 0.05 --lr_schedule constant"
           " --log_every 5 --max_steps " +
           std::to_string(steps) + " --train_dir " + dir + " " + more;
  }
  static TmpDir* tmp_;
};
TmpDir* SmallDataTest::tmp_ = nullptr;

// A run shorter than the moving averages need says so, evaluates and checkpoints with recomputed
// statistics beside the moving averages, and eval reads them back to the same precision.
TEST_F(SmallDataTest, ShortRunsRecomputeBatchNormStatistics) {
  TmpDir dirs;
  auto run = run_tower(flags(dirs / "short", 12, "--save_every_steps 6"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output,
                       "batch norm: momentum 0.99 (the model's): evaluations and checkpoints use "
                       "statistics recomputed over 240 training examples"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "the moving averages need 459 steps to settle, this run has 12"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "recomputed batch-norm statistics)")) << run.output;
  auto tensors = testing::checkpoint_tensors(dirs / "short", 12);
  for (const std::string name : {"conv0/moving_mean", "block1/conv2/moving_variance"}) {
    ASSERT_TRUE(tensors.count(name)) << name;
    ASSERT_TRUE(tensors.count(name + "/Recomputed")) << name;
    EXPECT_NE(tensors[name], tensors[name + "/Recomputed"]) << name;
  }
  const std::string final_line = run.output.substr(run.output.find("precision @ 1 = "), 22);
  auto eval = run_tower("eval --run_once --train_dir " + (dirs / "short"));
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_TRUE(contains(eval.output, final_line)) << final_line << "\n" << eval.output;

  // The moving averages go on as if nothing was recomputed: 6 + 6 steps resumed are bitwise 12.
  auto first = run_tower(flags(dirs / "resumed", 6));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto second = run_tower(flags(dirs / "resumed", 12, "--allow_schedule_change"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(testing::checkpoint_tensors(dirs / "resumed", 12), tensors);

  // With micro-batches, the recomputed statistics are the same bits on any layout (one thread
  // per tower, as the rest of the run: README).
  auto micro = [&](const std::string& dir, const std::string& layout) {
    return run_tower("train --model_file " + (*tmp_ / "small_bn.json") +
                     " --data cifar10:" + (*tmp_ / "data") +
                     " --global_batch_size 16 --micro_batch_size 8 --max_steps 6 --train_dir " +
                     dir + " " + layout);
  };
  auto one = micro(dirs / "one", "--num_devices 1 --num_threads 1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = micro(dirs / "two", "--num_devices 2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto one_tensors = testing::checkpoint_tensors(dirs / "one", 6);
  EXPECT_TRUE(one_tensors.count("conv0/moving_mean/Recomputed"));
  EXPECT_EQ(one_tensors, testing::checkpoint_tensors(dirs / "two", 6));

  // Off: the checkpoint holds the moving averages alone.
  auto off = run_tower(flags(dirs / "off", 2, "--precise_bn off"));
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_FALSE(contains(off.output, "recomputed")) << off.output;
  for (const auto& [name, bytes] : testing::checkpoint_tensors(dirs / "off", 2))
    EXPECT_FALSE(contains(name, "Recomputed")) << name;
}

// --bn_momentum sets every batch norm's decay, is recorded in the checkpoint, and a resume with
// another is refused naming it; with it the moving averages settle within the run.
TEST_F(SmallDataTest, BatchNormMomentumIsAFlagOfTheRun) {
  TmpDir dirs;
  auto run = run_tower(flags(dirs / "m", 50, "--bn_momentum 0.9"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output,
                       "batch norm: momentum 0.9 (--bn_momentum): moving averages (they settle "
                       "in 44 steps, this run has 50)"))
      << run.output;
  const auto state = state_of(dirs / "m", 50);
  EXPECT_FLOAT_EQ(state["run"]["bn_momentum"].get<float>(), 0.9f);
  EXPECT_FALSE(testing::checkpoint_tensors(dirs / "m", 50).count("conv0/moving_mean/Recomputed"));
  auto other = run_tower(flags(dirs / "m", 60, "--bn_momentum 0.5 --allow_schedule_change"));
  expect_refused(other, "bn_momentum");
  expect_refused(run_tower(flags(dirs / "bad", 1, "--bn_momentum 1")),
                 "--bn_momentum must be in (0, 1)");
  expect_refused(run_tower(flags(dirs / "bad", 1, "--precise_bn sometimes")),
                 "--precise_bn must be auto, on or off");
}

// ResNet-20's recipe (x0.1 at epochs 82 and 123 of 164) run for 8 epochs decays at 4 and 6, and
// the run's first lines say so.
TEST_F(SmallDataTest, RecipeScheduleFollowsTheRunsEpochs) {
  TmpDir dirs;
  auto run = run_tower("train --model resnet20 --data cifar10:" + (*tmp_ / "data") +
                       " --num_devices 1 --batch_size 240 --epochs 8 --log_every 1 --train_dir " +
                       (dirs / "r"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(
      contains(run.output,
               "schedule: momentum lr 0.1, piecewise:boundary_epochs=4;6,values=0.1;0.01;"
               "0.001 (the recipe's piecewise:boundary_epochs=82;123,values=0.1;0.01;0.001, "
               "written for 164 epochs, scaled to 8)"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "step 2, ")) << run.output;
  EXPECT_TRUE(contains(run.output, "lr 0.1\n")) << run.output;
  EXPECT_TRUE(contains(run.output, "lr 0.01\n")) << run.output;
  EXPECT_TRUE(contains(run.output, "lr 0.001\n")) << run.output;
  // A schedule of the user's own that never decays within the run is said, not scaled.
  auto own = run_tower(
      flags(dirs / "own", 4, "--lr_schedule exponential:decay_steps=10,rate=0.5,staircase=1"));
  ASSERT_EQ(own.exit_code, 0) << own.output;
  EXPECT_TRUE(contains(own.output,
                       "warning: --lr_schedule 'exponential:decay_steps=10,rate=0.5,staircase=1': "
                       "the first decay comes after 10 steps, but the run has 4"))
      << own.output;
}

// Weights that do not move (a learning rate of 1e-20) give the same precision at every
// evaluation: the first is the best, and the plateau and early-stopping counts run from there.
TEST_F(SmallDataTest, PlateauAndEarlyStoppingCountEvaluationsWithoutProgress) {
  TmpDir dirs;
  auto run = run_tower(flags(dirs / "still", 50,
                             "--lr 1e-20 --lr_schedule plateau:patience=2,factor=0.5 "
                             "--eval_every 1 --early_stopping 4 --log_every 1 --keep_best "
                             "--keep_checkpoints 1"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "step 3, precision @ 1 = ")) << run.output;
  EXPECT_TRUE(contains(run.output,
                       "plateau: no better precision in 2 evaluations: lr x0.5 from "
                       "step 4 on"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "sec/batch) lr 1e-20\n")) << run.output;
  EXPECT_TRUE(contains(run.output, "sec/batch) lr 5e-21\n")) << run.output;
  EXPECT_TRUE(contains(run.output,
                       "early stopping at step 5: 4 evaluations without a better "
                       "precision than "))
      << run.output;
  EXPECT_TRUE(contains(run.output, "best: precision @ 1 = ")) << run.output;
  EXPECT_TRUE(contains(run.output, " at step 1, kept in ")) << run.output;
  EXPECT_FALSE(contains(run.output, "step 6,")) << run.output;
  // The best (step 1) stays beside the last (step 5) with --keep_checkpoints 1.
  EXPECT_EQ(checkpoint_list(dirs / "still"), (std::vector<int64_t>{1, 5}));
  const auto state = state_of(dirs / "still", 5);
  EXPECT_EQ(state["progress"]["best_step"], 1);
  EXPECT_EQ(state["progress"]["since_best"], 4);
  EXPECT_EQ(state["progress"]["lr_reductions"], 2);

  expect_refused(run_tower(flags(dirs / "x", 5, "--keep_best")),
                 "--keep_best needs --eval_every N");
  expect_refused(run_tower(flags(dirs / "x", 5, "--eval_every 1 --lr_schedule plateau:factor=2")),
                 "plateau needs patience=");
}

// A run stopped and resumed goes on counting: the same plateau reductions, the same early stop
// and the same weights as the run that never stopped.
TEST_F(SmallDataTest, PlateauAndEarlyStoppingResumeBitwise) {
  TmpDir dirs;
  const std::string more =
      "--lr_schedule plateau:patience=2,factor=0.5 --eval_every 2 --early_stopping 4 "
      "--keep_best --precise_bn off --allow_schedule_change";
  auto straight = run_tower(flags(dirs / "straight", 80, more));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto first = run_tower(flags(dirs / "resumed", 10, more));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto second = run_tower(flags(dirs / "resumed", 80, more));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  expect_same_end(dirs / "straight", dirs / "resumed");
}

// Label smoothing and class weights are said at the start; eval's precision @ 5 (more than 5
// classes) is the share of test labels among the 5 largest of the logits it saves.
TEST_F(SmallDataTest, LossTargetAndTopFive) {
  TmpDir dirs;
  testing::write_file(dirs / "weights.json", R"({"cat": 2, "9": 0.5})");
  auto run = run_tower(flags(
      dirs / "t", 8,
      "--label_smoothing 0.1 --class_weights " + (dirs / "weights.json") + " --eval_every 4"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "10 classes: airplane 24, automobile 24,")) << run.output;
  EXPECT_TRUE(contains(run.output, "loss: cross-entropy, label smoothing 0.1, class weights " +
                                       (dirs / "weights.json") +
                                       " (1, 1, 1, 2, 1, 1, 1, 1, 1, 0.5)"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "step 4, precision @ 1 = ")) << run.output;
  EXPECT_TRUE(contains(testing::read_file(dirs / "t/metrics.jsonl"), "\"eval_precision_at_5\":"));

  auto eval = run_tower("eval --run_once --train_dir " + (dirs / "t") + " --save_logits " +
                        (dirs / "logits.npy"));
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  const size_t at = eval.output.find(", @ 5 = ");
  ASSERT_NE(at, std::string::npos) << eval.output;
  const double reported = std::stod(eval.output.substr(at + 8, 6));
  const std::string npy = testing::read_file(dirs / "logits.npy");
  const size_t header = 10 + (static_cast<uint8_t>(npy[8]) | static_cast<uint8_t>(npy[9]) << 8);
  const std::string test = testing::read_file(*tmp_ / "data/test_batch.bin");
  const size_t examples = test.size() / 3073;
  ASSERT_EQ(npy.size() - header, examples * 10 * sizeof(float));
  int64_t in_top5 = 0;
  for (size_t i = 0; i < examples; ++i) {
    float row[10];
    std::memcpy(row, npy.data() + header + i * sizeof(row), sizeof(row));
    const int label = static_cast<uint8_t>(test[i * 3073]);
    int larger = 0;  // InTopK: fewer than 5 logits strictly larger than the label's
    for (float v : row) larger += v > row[label] ? 1 : 0;
    in_top5 += larger < 5 ? 1 : 0;
  }
  EXPECT_NEAR(reported, static_cast<double>(in_top5) / static_cast<double>(examples), 5e-5);

  expect_refused(run_tower(flags(dirs / "bad", 1, "--label_smoothing 1")),
                 "--label_smoothing must be in [0, 1), got 1");
  // An unknown sub-command is an error, --help or not.
  auto unknown = run_tower("lr-fnd --help");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_TRUE(contains(unknown.output, "unknown sub-command 'lr-fnd': did you mean 'lr-find'?"))
      << unknown.output;
}

// The range test writes its plot, and suggests a rate where the loss still falls: below the rate
// of the lowest loss.
TEST_F(SmallDataTest, LrFindSuggestsARateWhereTheLossFalls) {
  TmpDir dirs;
  auto run = run_tower("lr-find --model_file " + (*tmp_ / "small_bn.json") +
                       " --data cifar10:" + (*tmp_ / "data") +
                       " --num_devices 1 --batch_size 16 --steps 80 --plot " + (dirs / "lr.png"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "lr-find: small_bn on cifar10:")) << run.output;
  const size_t fastest = run.output.find("fell fastest at lr "),
               lowest = run.output.find(") at lr ");
  ASSERT_NE(fastest, std::string::npos) << run.output;
  ASSERT_NE(lowest, std::string::npos) << run.output;
  const double suggested = std::stod(run.output.substr(fastest + 19)),
               at_lowest = std::stod(run.output.substr(lowest + 8));
  EXPECT_GT(suggested, 1e-7);
  EXPECT_LT(suggested, at_lowest) << run.output;
  EXPECT_TRUE(contains(run.output, "suggested --lr ")) << run.output;
  EXPECT_EQ(testing::read_file(dirs / "lr.png").substr(1, 3), "PNG");
  expect_refused(run_tower("lr-find --model_file " + (*tmp_ / "small_bn.json") +
                           " --data cifar10:" + (*tmp_ / "data") + " --start_lr 1 --end_lr 0.1"),
                 "expected 0 < start < end");
}

// A run killed with SIGKILL and resumed goes on counting from its last checkpoint: the same
// plateau reductions, early stop and weights as the run that was never killed.
TEST_F(SmallDataTest, PlateauAndEarlyStoppingSurviveASigkill) {
  TmpDir dirs;
  auto command = [&](const std::string& dir) {
    return "train --model resnet20 --data cifar10:" + (*tmp_ / "data") +
           " --num_devices 1 --batch_size 16 --max_steps 80 --save_every_steps 4 --eval_every 4 "
           "--early_stopping 6 --lr_schedule plateau:patience=2,factor=0.5 --keep_best "
           "--train_dir " +
           dir;
  };
  auto straight = run_tower(command(dirs / "straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  pid_t pid = testing::spawn_tower(command(dirs / "killed"), dirs / "killed.log");
  for (int i = 0; i < 3000 && checkpoint_list(dirs / "killed").size() < 3; ++i)  // up to a minute
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGKILL);
  ASSERT_EQ(testing::wait_exit_code(pid), 128 + SIGKILL) << "the run ended before it was killed";
  auto resumed = run_tower(command(dirs / "killed"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "resumed from")) << resumed.output;
  const nlohmann::json progress = expect_same_end(dirs / "straight", dirs / "killed");
  EXPECT_GT(progress["lr_reductions"].get<int64_t>(), 0) << straight.output;
}

// A checkpoint of a model that another program registered (a user's program linking the
// library) names that program when tower itself cannot build the model.
TEST_F(SmallDataTest, EvalOfAnotherProgramsModelNamesTheProgram) {
  TmpDir dirs;
  auto run = run_tower(flags(dirs / "p", 2));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string file = checkpoint_prefix(dirs / "p", 2) + ".json";
  auto state = nlohmann::json::parse(testing::read_file(file));
  EXPECT_EQ(state["program"], "tower");
  state["run"]["model"] = "smallres";
  state["run"].erase("model_file");
  state["program"] = "my_trainer";
  testing::write_file(file, state.dump());
  auto eval = run_tower("eval --run_once --train_dir " + (dirs / "p"));
  expect_refused(eval,
                 "model 'smallres' was registered by the program that trained it, "
                 "'my_trainer', not by this one ('tower'): run that program's eval");
}

}  // namespace
}  // namespace tower
