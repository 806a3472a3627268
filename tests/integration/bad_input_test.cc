// What the real `tower` binary does with bad input (README: "What tower does with bad input"):
// every case stops with one message naming the flag, file, key or tensor, or goes on with a
// warning where going on is safe; nothing already written is overwritten.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/io/checkpoint.h"

namespace tower {
namespace {

using testing::contains;
using testing::read_file;
using testing::write_file;

using testing::run_tower;
using testing::TmpDir;
namespace fs = std::filesystem;

// A small generated CIFAR-10-format data set and a short run with checkpoints at steps 5 and 10.
class BadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TmpDir();
    auto r = run_tower("make-dataset --format cifar10 --out " + data_->path() +
                       " --num_train 500 --num_test 100 --seed 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete data_; }
  static std::string data() { return data_->path(); }
  static std::string train_flags(const std::string& dir, int steps) {
    return "train --model cifar10 --data cifar10:" + data() +
           " --num_devices 1 --batch_size 8 --lr 0.01 --seed 3 --save_every_steps 5 --max_steps " +
           std::to_string(steps) + " --train_dir " + dir;
  }
  static TmpDir* data_;
};
TmpDir* BadInputTest::data_ = nullptr;

TEST_F(BadInputTest, AFlippedBitInATensorIsNamedAndResumingFallsBackToTheCheckpointBefore) {
  TmpDir dirs;
  const std::string constant = " --lr_schedule constant";  // a longer run continues it
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 10) + constant).exit_code, 0);
  const std::string file = checkpoint_prefix(dirs / "run", 10) + ".safetensors";
  std::string bytes = read_file(file);
  bytes[bytes.size() - 3] =
      static_cast<char>(bytes[bytes.size() - 3] ^ 0x04);  // in the last tensor
  write_file(file, bytes);
  auto resume = run_tower(train_flags(dirs / "run", 15) + constant);
  EXPECT_EQ(resume.exit_code, 0) << resume.output;
  EXPECT_TRUE(contains(resume.output, file)) << resume.output;
  EXPECT_TRUE(contains(resume.output, "fails its CRC-32C check")) << resume.output;
  EXPECT_TRUE(contains(resume.output, "resumed from " + checkpoint_prefix(dirs / "run", 5)))
      << resume.output;
}

TEST_F(BadInputTest, AStateFileWithoutItsKeysNamesTheFileTheKeyAndTheOlderCheckpoint) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 10)).exit_code, 0);
  const std::string state = checkpoint_prefix(dirs / "run", 10) + ".json";
  const std::string older = checkpoint_prefix(dirs / "run", 5);
  write_file(state, "{}");
  auto resume = run_tower(train_flags(dirs / "run", 15));
  EXPECT_EQ(resume.exit_code, 1) << resume.output;
  EXPECT_TRUE(contains(resume.output, state)) << resume.output;
  EXPECT_TRUE(contains(resume.output, "key 'step' is missing")) << resume.output;
  EXPECT_TRUE(contains(resume.output, "--resume_from " + older)) << resume.output;
  EXPECT_FALSE(contains(resume.output, "unexpected")) << resume.output;
  auto eval = run_tower("eval --train_dir " + (dirs / "run"));
  EXPECT_EQ(eval.exit_code, 1) << eval.output;
  EXPECT_TRUE(contains(eval.output, state)) << eval.output;
  EXPECT_TRUE(contains(eval.output, "--checkpoint " + older)) << eval.output;

  // A key of the wrong type is named with its path.
  nlohmann::json json = nlohmann::json::parse(read_file(older + ".json"));
  json["position"]["step"] = "seven";
  write_file(state, json.dump());
  auto typed = run_tower(train_flags(dirs / "run", 15));
  EXPECT_EQ(typed.exit_code, 1) << typed.output;
  EXPECT_TRUE(contains(typed.output, "key 'position.step' is \"seven\" (expected a whole number)"))
      << typed.output;

  // Hostile files get the same named answer: absurd numbers, deep nesting, a huge index entry.
  json["position"]["step"] = 1e300;
  write_file(state, json.dump());
  auto huge = run_tower(train_flags(dirs / "run", 15));
  EXPECT_EQ(huge.exit_code, 1) << huge.output;
  EXPECT_TRUE(contains(huge.output, "key 'position.step' is 1e+300")) << huge.output;
  write_file(state, std::string(100000, '[') + std::string(100000, ']'));
  auto deep = run_tower(train_flags(dirs / "run", 15));
  EXPECT_EQ(deep.exit_code, 1) << deep.output;
  EXPECT_TRUE(contains(deep.output, state + "': the file is not a JSON object")) << deep.output;
  EXPECT_FALSE(contains(huge.output + deep.output, "unexpected")) << huge.output << deep.output;
}

// Every checkpoint damaged: no fallback, so nothing is renamed, and the run stops.
TEST_F(BadInputTest, EveryCheckpointDamagedStopsAndRenamesNothing) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 10)).exit_code, 0);
  for (int step : {5, 10}) {
    const std::string file = checkpoint_prefix(dirs / "run", step) + ".safetensors";
    fs::resize_file(file, fs::file_size(file) / 2);
  }
  auto r = run_tower(train_flags(dirs / "run", 20));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "none of the 2 checkpoints")) << r.output;
  for (int step : {5, 10})
    EXPECT_TRUE(fs::exists(checkpoint_prefix(dirs / "run", step) + ".safetensors")) << step;
}

TEST_F(BadInputTest, MissingStateFilesStopTrainingInsteadOfOverwritingTheCheckpoints) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 10)).exit_code, 0);
  for (int step : {5, 10}) fs::remove(checkpoint_prefix(dirs / "run", step) + ".json");
  const std::string tensors = checkpoint_prefix(dirs / "run", 10) + ".safetensors";
  const std::string before = read_file(tensors);
  auto r = run_tower(train_flags(dirs / "run", 10));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, checkpoint_prefix(dirs / "run", 10) + ".json is missing"))
      << r.output;
  EXPECT_EQ(read_file(tensors), before);
}

// The latest checkpoint's state file deleted, an older one complete: the same rule as damage, a
// fallback to the older one with the orphaned tensors kept aside under a new name.
TEST_F(BadInputTest, AMissingStateFileFallsBackWithTheTensorsKeptAside) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 10)).exit_code, 0);
  const std::string prefix = checkpoint_prefix(dirs / "run", 10);
  fs::remove(prefix + ".json");
  const std::string before = read_file(prefix + ".safetensors");
  auto r = run_tower(train_flags(dirs / "run", 10));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, prefix + ".json is missing (deleted?); kept aside as " + prefix +
                                     ".safetensors.damaged"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "resumed from " + checkpoint_prefix(dirs / "run", 5))) << r.output;
  EXPECT_EQ(read_file(prefix + ".safetensors.damaged"), before);
  EXPECT_EQ(checkpoint_list(dirs / "run").back(), 10);  // trained again from step 5
}

// What an interrupted save leaves (the tensors of step 10, no state file, the index still naming
// step 5): said on stderr, and training resumes from step 5.
TEST_F(BadInputTest, AnInterruptedSaveIsSaidAndTheCheckpointBeforeItResumes) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 10)).exit_code, 0);
  fs::remove(checkpoint_prefix(dirs / "run", 10) + ".json");
  write_file(dirs / "run/checkpoint", "model_checkpoint_path: \"model.ckpt-5\"\n");
  auto r = run_tower(train_flags(dirs / "run", 10));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "warning: ignoring " + checkpoint_prefix(dirs / "run", 10) +
                                     ".safetensors: its state file is missing"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "resumed from " + checkpoint_prefix(dirs / "run", 5))) << r.output;
}

// A resume whose flags change the learning rate of the steps still to train (a cosine decay
// stretched, a recipe's schedule fitted to another length, another --lr) says so and asks for
// --allow_schedule_change; a longer run of a schedule that only continues (exponential decay in
// steps) resumes as before.
TEST_F(BadInputTest, ResumingWithAnotherScheduleAsksForAllowScheduleChange) {
  TmpDir dirs;
  const std::string cosine = " --lr_schedule cosine";
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 10) + cosine).exit_code, 0);
  auto longer = run_tower(train_flags(dirs / "run", 20) + cosine);
  EXPECT_EQ(longer.exit_code, 1) << longer.output;
  EXPECT_TRUE(contains(longer.output,
                       "was trained with --lr_schedule cosine --lr 0.01 over 10 "
                       "steps, this run asks for --lr_schedule cosine --lr 0.01 "
                       "over 20 steps: at step 10 the learning rate would be"))
      << longer.output;
  EXPECT_TRUE(contains(longer.output, "--allow_schedule_change")) << longer.output;
  EXPECT_EQ(checkpoint_list(dirs / "run"), (std::vector<int64_t>{5, 10}));
  auto allowed = run_tower(train_flags(dirs / "run", 20) + cosine + " --allow_schedule_change");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_EQ(checkpoint_list(dirs / "run").back(), 20);

  const std::string exponential = " --lr_schedule exponential:decay_steps=12,rate=0.1,staircase=1";
  ASSERT_EQ(run_tower(train_flags(dirs / "exp", 10) + exponential).exit_code, 0);
  auto lr = run_tower(train_flags(dirs / "exp", 15) + exponential + " --lr 0.02");
  EXPECT_EQ(lr.exit_code, 1) << lr.output;
  EXPECT_TRUE(contains(lr.output, "the learning rate would be 0.02 instead of 0.01")) << lr.output;
  EXPECT_EQ(run_tower(train_flags(dirs / "exp", 15) + exponential).exit_code, 0);

  // The recipe's schedule in epochs follows the run's length, as a cosine decay does: a longer
  // run moves its decays.
  ASSERT_EQ(run_tower(train_flags(dirs / "recipe", 10)).exit_code, 0);
  auto recipe = run_tower(train_flags(dirs / "recipe", 15));
  EXPECT_EQ(recipe.exit_code, 1) << recipe.output;
  EXPECT_TRUE(contains(recipe.output, "was trained with --lr_schedule exponential:decay_epochs="))
      << recipe.output;
  EXPECT_TRUE(contains(recipe.output, "--allow_schedule_change")) << recipe.output;
}

// A changed layout is refused with every differing setting at once, naming the micro-batch flags
// that allow any layout.
TEST_F(BadInputTest, AnotherLayoutIsRefusedWithEveryDifferenceAndTheWayToChangeLayouts) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 5) + " --num_devices 2 --batch_size 4").exit_code,
            0);
  auto r = run_tower(train_flags(dirs / "run", 10));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "a run with batch_size = 4, num_towers = 2, but this run has "
                       "batch_size = 8, num_towers = 1"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "--global_batch_size and --micro_batch_size")) << r.output;
}

TEST_F(BadInputTest, FlagsAreCheckedUpFrontAndNamed) {
  TmpDir dirs;
  const std::string base = train_flags(dirs / "run", 10);
  struct Case {
    std::string flags;
    int exit_code;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {" --epochs nan --max_steps 0", 2, "--epochs: must be a number >= 0, got 'nan'"},
           {" --epochs 1e30 --max_steps 0", 1, "--epochs must be a number of epochs from 0 to 1e6"},
           {" --bucket_mb -1", 2, "--bucket_mb: must be a number > 0"},
           {" --image_size 0", 1, "--image_size: sides must be from 1 to 65535 pixels, got 0"},
           {" --image_size 8,8,8", 2, "--image_size: At Most 2 required but received 3"},
           {" --test_fraction 1", 1, "--test_fraction must be in (0, 1), got 1"},
           {" --bucket_mb 1e9", 1, "--bucket_mb must be a size in MB"},
           {" --devices cpu:99", 1, "--devices: cpu:99 does not exist"},
           {" --devices cpu:0,cpu:0", 1, "cpu:0 is listed twice"},
           {" --num_devices 1000", 1, "--num_devices"},
           {" --num_devices 100 --batch_size 8", 1,
            "100 towers (--num_devices or --devices) x --batch_size 8 = 800 examples per step"},
           {" --ema_decay 1.5", 1, "--ema_decay must be in [0, 1)"},
           {" --augmentation sideways", 1, "--augmentation 'sideways'"},
           {" --keep_checkpoints 0", 2, "--keep_checkpoints"},
           {" --comm_timeout inf", 2, "--comm_timeout"},
           {" --dropout 1", 1, "--dropout must be in [0, 1) (or -1: the model's own rates), got 1"},
           {" --init_partial", 1, "--init_partial goes with --init_from"},
           {" --unfreeze_after_epochs 2", 1, "--unfreeze_after_epochs goes with --freeze"},
           {" --freeze conv9", 1,
            "--freeze 'conv9': no variable of the model lies under 'conv9'"}}) {
    SCOPED_TRACE(c.flags);
    auto r = run_tower(base + c.flags);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.output;
    EXPECT_TRUE(contains(r.output, c.message)) << r.output;
    EXPECT_FALSE(contains(r.output, "unexpected")) << r.output;
    EXPECT_FALSE(fs::exists(dirs / "run/checkpoint")) << "nothing may be trained";
  }
}

TEST_F(BadInputTest, ATrainDirThatIsAFileIsAnOrdinaryErrorNamingIt) {
  TmpDir dirs;
  write_file(dirs / "file", "x");
  for (const std::string& dir : {dirs / "file", dirs / "file/sub"}) {
    auto r = run_tower(train_flags(dir, 5));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, dir)) << r.output;
    EXPECT_FALSE(contains(r.output, "unexpected")) << r.output;
  }
}

TEST_F(BadInputTest, ACorruptTestSetIsFoundBeforeTheFirstStep) {
  TmpDir dirs;
  fs::copy(data(), dirs / "data");
  fs::resize_file(dirs / "data/test_batch.bin", 1000);
  auto r =
      run_tower("train --model cifar10 --data cifar10:" + (dirs / "data") +
                " --num_devices 1 --batch_size 8 --max_steps 100000 --train_dir " + (dirs / "run"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "test_batch.bin")) << r.output;
  EXPECT_FALSE(contains(r.output, "step 1")) << r.output;
  EXPECT_TRUE(checkpoint_list(dirs / "run").empty());
}

TEST_F(BadInputTest, EvalWritesBesideTheCheckpointWithTagsNamingWhatWasEvaluated) {
  TmpDir dirs;
  ASSERT_EQ(run_tower(train_flags(dirs / "run", 5)).exit_code, 0);
  const std::string prefix = checkpoint_prefix(dirs / "run", 5);
  auto r = run_tower("eval --checkpoint " + prefix);  // from another working directory
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(run_tower("eval --no_ema --checkpoint " + prefix).exit_code, 0);
  auto other = run_tower("eval --checkpoint " + prefix + " --data fashion-mnist");
  EXPECT_EQ(other.exit_code, 1) << "a 1x28x28 data set cannot feed a model of 3-channel images";
  const std::string metrics = read_file(dirs / "run/eval/metrics.jsonl");
  EXPECT_TRUE(contains(metrics, "\"eval_precision_at_1\"")) << metrics;
  EXPECT_TRUE(contains(metrics, "\"eval_raw_precision_at_1\"")) << metrics;
  bool events = false;
  for (const auto& entry : fs::directory_iterator(dirs / "run/eval"))
    events |= contains(entry.path().filename().string(), "tfevents");
  EXPECT_TRUE(events);

  ASSERT_EQ(
      run_tower("eval --checkpoint " + prefix + " --eval_dir " + (dirs / "elsewhere")).exit_code,
      0);
  EXPECT_TRUE(fs::exists(dirs / "elsewhere/metrics.jsonl"));
}

TEST_F(BadInputTest, EvalOnDataOfAnotherShapeNamesTheCheckpointTheVariableAndTheFlag) {
  TmpDir dirs;
  auto cifar =
      run_tower("train --model cifar10 --data cifar10:" + data() +
                " --num_devices 1 --batch_size 8 --max_steps 2 --train_dir " + (dirs / "run"));
  ASSERT_EQ(cifar.exit_code, 0) << cifar.output;
  auto r = run_tower("eval --train_dir " + (dirs / "run") + " --data fashion-mnist");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, checkpoint_prefix(dirs / "run", 2))) << r.output;
  EXPECT_TRUE(contains(r.output, "--data fashion-mnist")) << r.output;
  EXPECT_TRUE(contains(r.output, "variable 'conv1/weights' has shape (64, 3, 5, 5)")) << r.output;
  auto bad_batch = run_tower("eval --train_dir " + (dirs / "run") + " --batch_size -5");
  EXPECT_EQ(bad_batch.exit_code, 2);
  EXPECT_TRUE(contains(bad_batch.output, "--batch_size")) << bad_batch.output;
}

TEST(RecipeTest, EachModelTrainsWithItsOwnRecipeAndFlagsOverrideSingleFields) {
  TmpDir dirs;
  auto models = run_tower("models");
  EXPECT_TRUE(contains(models.output,
                       "recipe: sgd lr 0.1, exponential:decay_epochs=350,rate=0.1,staircase=1, "
                       "batch 128 per tower, 256 epochs, EMA 0.9999, augmentation cifar10"))
      << models.output;
  auto help = run_tower("train --help");
  EXPECT_TRUE(contains(help.output, "Recipes")) << help.output;
  EXPECT_TRUE(contains(help.output, "resnet20")) << help.output;

  // The classic recipe of cifar10: SGD at 0.1, batch 128 per tower.
  auto made = run_tower("make-dataset --format cifar10 --out " + (dirs / "data") +
                        " --num_train 200 --num_test 20");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto cifar = run_tower("train --model cifar10 --data cifar10:" + (dirs / "data") +
                         " --max_steps 3 --num_devices 1 --train_dir " + (dirs / "c"));
  ASSERT_EQ(cifar.exit_code, 0) << cifar.output;
  EXPECT_TRUE(contains(cifar.output, "global batch 128,")) << cifar.output;
  EXPECT_TRUE(contains(cifar.output, "lr 0.1\n")) << cifar.output;
  nlohmann::json state =
      nlohmann::json::parse(read_file(checkpoint_prefix(dirs / "c", 3) + ".json"));
  EXPECT_EQ(state["run"]["optimizer"], "sgd");
  EXPECT_EQ(state["augmentation"], "cifar10");

  // resnet20's schedule holds absolute rates: --lr scales them, and says so; with a piecewise
  // schedule of the user's own, --lr would do nothing and is refused.
  const std::string resnet =
      "train --model resnet20 --data cifar10:" + (dirs / "data") +
      " --max_steps 2 --num_devices 1 --batch_size 8 --log_every 1 --lr 0.05";
  auto scaled = run_tower(resnet + " --train_dir " + (dirs / "r"));
  ASSERT_EQ(scaled.exit_code, 0) << scaled.output;
  EXPECT_TRUE(contains(scaled.output, "values=0.05;0.005;0.0005")) << scaled.output;
  EXPECT_TRUE(contains(scaled.output, "sec/batch) lr 0.05\n")) << scaled.output;
  auto refused = run_tower(resnet + " --lr_schedule 'piecewise:boundaries=5,values=0.1;0.01'");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(contains(refused.output, "--lr 0.05 has no effect")) << refused.output;

  // lenet's warm-up of 50 steps on a 4-step run: clamped with one warning line; --lr overrides
  // only the learning rate.
  auto lenet =
      run_tower("train --max_steps 4 --num_devices 1 --lr 0.001 --train_dir " + (dirs / "l"));
  ASSERT_EQ(lenet.exit_code, 0) << lenet.output;
  EXPECT_TRUE(contains(lenet.output, "warning: --lr_schedule 'cosine:warmup_steps=50'"))
      << lenet.output;
  EXPECT_TRUE(contains(lenet.output, "global batch 64,")) << lenet.output;
  state = nlohmann::json::parse(read_file(checkpoint_prefix(dirs / "l", 4) + ".json"));
  EXPECT_EQ(state["run"]["optimizer"], "adam");
}

}  // namespace
}  // namespace tower
