// The real binary starting from other weights: a checkpoint of 10 classes fine-tuned on 100 with a
// new head and a frozen backbone, the record of where the weights came from, refusals that point
// to --init_from, and frozen and thawing runs that keep the same bits on any layout and across a
// resume.
#include "tower/train/fine_tune.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/python_env.h"
#include "testing/checkpoints.h"
#include "testing/files.h"
#include "testing/model_files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/core/sha256.h"
#include "tower/io/checkpoint.h"
#include "tower/io/safetensors.h"
#include "tower/models/model.h"

namespace tower {
namespace {

using testing::contains;
using testing::run_tower;
using testing::TmpDir;

class FineTuneCliTest : public ::testing::Test {
 protected:
  // A 10-class set, a 100-class one, and a checkpoint trained on the first (with averages).
  static void SetUpTestSuite() {
    tmp_ = new TmpDir();
    for (const char* format : {"cifar10", "cifar100"}) {
      auto r =
          run_tower(fmt::format("make-dataset --format {} --out {} --num_train 240 "
                                "--num_test 40 --seed 3",
                                format, *tmp_ / format));
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    testing::write_file(*tmp_ / "small_ft.json", testing::small_bn_model("small_ft"));
    auto r = run_tower(flags("cifar10", *tmp_ / "pretrained", 10, "--ema_decay 0.9"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete tmp_; }
  static std::string flags(const std::string& data, const std::string& dir, int steps,
                           const std::string& more = "") {
    return fmt::format(
        "train --model_file {} --data {}:{}{} --optimizer momentum --lr 0.05 "
        "--lr_schedule constant --log_every 5 --max_steps {} --train_dir {} {}",
        *tmp_ / "small_ft.json", data, *tmp_ / data,
        contains(more, "--global_batch_size") ? "" : " --batch_size 8", steps, dir, more);
  }
  static std::string pretrained() { return *tmp_ / "pretrained"; }
  static TmpDir* tmp_;
};
TmpDir* FineTuneCliTest::tmp_ = nullptr;

nlohmann::json state_of(const std::string& dir, int64_t step) {
  return nlohmann::json::parse(testing::read_file(checkpoint_prefix(dir, step) + ".json"));
}

// 10 classes to 100: the head starts anew and says so, the frozen backbone keeps every bit of the
// checkpoint's moving averages (batch-norm statistics included), and the state records the file.
TEST_F(FineTuneCliTest, ANewHeadOnAFrozenBackbone) {
  TmpDir dirs;
  const std::string dir = dirs / "fine";
  auto r = run_tower(flags(
      "cifar100", dir, 6,
      "--num_devices 2 --init_from " + pretrained() + " --freeze backbone --save_every_steps 6"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"a tower checkpoint of small_ft on cifar10:", "at step 10 (its moving averages",
        "15 of 17 variables loaded", "2 re-initialized:",
        "logits/weights: the file's 'logits/weights/ExponentialMovingAverage' is (8, 10), the "
        "model's (8, 100) (a new head for this run's classes)",
        "frozen: conv0, block1 (", "no gradient, no optimizer state, no update"})
    EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
  const auto before = testing::checkpoint_tensors(pretrained(), 10);
  const auto after = testing::checkpoint_tensors(dir, 6);
  int frozen = 0;
  for (const auto& [name, bytes] : after) {
    if (name.rfind("logits", 0) == 0 || name.find('/') == std::string::npos) continue;
    if (name.find("Momentum") != std::string::npos) continue;
    const auto average = before.find(name + "/ExponentialMovingAverage");
    const auto& source = average != before.end() ? average->second : before.at(name);
    EXPECT_EQ(bytes, source) << name;
    ++frozen;
  }
  EXPECT_GE(frozen, 8);
  const nlohmann::json init = state_of(dir, 6)["init_from"];
  const std::string file = checkpoint_prefix(pretrained(), 10) + ".safetensors";
  EXPECT_EQ(init["file"], file);
  EXPECT_EQ(init["sha256"], sha256_file(file));
  auto inspect = run_tower("inspect " + checkpoint_prefix(dir, 6));
  EXPECT_TRUE(contains(inspect.output, sha256_file(file))) << inspect.output;
}

// A resume on other data points to --init_from; a weights file without a state file is not
// called interrupted; weights that do not fit stop the run before its train dir exists.
TEST_F(FineTuneCliTest, RefusalsPointToInitFrom) {
  TmpDir dirs;
  const std::string prefix = checkpoint_prefix(pretrained(), 10);
  auto r = run_tower(flags("cifar100", dirs / "resumed", 12, "--resume_from " + prefix));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(
      contains(r.output, "start a new run in another --train_dir with --init_from " + prefix))
      << r.output;
  std::filesystem::copy_file(prefix + ".safetensors", dirs / "weights.safetensors");
  r = run_tower(
      flags("cifar10", dirs / "plain", 12, "--resume_from " + (dirs / "weights.safetensors")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "--init_from")) << r.output;
  EXPECT_FALSE(contains(r.output, "interrupted")) << r.output;
  r = run_tower(
      flags("cifar10", dirs / "plain", 2, "--init_from " + (dirs / "weights.safetensors")));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "a safetensors file, tower's names")) << r.output;
  r = run_tower("train --model resnet20 --data cifar10:" + (*tmp_ / "cifar10") +
                " --batch_size 8 --max_steps 2 --train_dir " + (dirs / "misfit") + " --init_from " +
                prefix);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "does not fit model resnet20: 105 of its 107 variables"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "--init_partial")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dirs / "misfit"));
  r = run_tower(
      flags("cifar10", dirs / "both", 2, "--init_from " + prefix + " --resume_from " + prefix));
  EXPECT_TRUE(contains(r.output, "give one")) << r.output;
}

// Frozen layers that thaw at step 3: one tower or two (micro-batches), straight through or
// stopped at step 3 and resumed, every tensor ends the same; the thawed backbone has moved.
TEST_F(FineTuneCliTest, ThawingRunsKeepTheirBitsOnAnyLayoutAndAcrossAResume) {
  TmpDir dirs;
  const std::string thaw =
      "--global_batch_size 16 --micro_batch_size 8 --freeze conv0,block1 "
      "--unfreeze_after_epochs 0.2 --unfreeze_lr_factor 0.5 --save_every_steps 3 --init_from " +
      pretrained();
  auto one = run_tower(flags("cifar100", dirs / "one", 8, thaw + " --num_devices 1"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_TRUE(contains(one.output, "they thaw at step 3 (epoch 0.2)")) << one.output;
  EXPECT_TRUE(contains(one.output, "step 3: conv0, block1 thaw")) << one.output;
  auto two = run_tower(flags("cifar100", dirs / "two", 8, thaw + " --num_devices 2"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(testing::checkpoint_tensors(dirs / "one", 8),
            testing::checkpoint_tensors(dirs / "two", 8));
  auto part = run_tower(flags("cifar100", dirs / "resumed", 3, thaw + " --num_devices 2"));
  ASSERT_EQ(part.exit_code, 0) << part.output;
  auto rest = run_tower(flags("cifar100", dirs / "resumed", 8, thaw + " --num_devices 1"));
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_TRUE(contains(rest.output, "--init_from is not read again")) << rest.output;
  EXPECT_EQ(testing::checkpoint_tensors(dirs / "one", 8),
            testing::checkpoint_tensors(dirs / "resumed", 8));
  const auto start = testing::checkpoint_tensors(dirs / "one", 3);
  const auto end = testing::checkpoint_tensors(dirs / "one", 8);
  EXPECT_EQ(
      start.at("conv0/weights"),
      testing::checkpoint_tensors(pretrained(), 10).at("conv0/weights/ExponentialMovingAverage"));
  EXPECT_NE(start.at("conv0/weights"), end.at("conv0/weights"));
  EXPECT_EQ(end.count("conv0/weights/Momentum"), 1u);
}

// resnet18's variables under torchvision's names (the linear layer (out, in)), 1,000 classes,
// small values that keep activations finite, batch norms at mean 0 and variance 1.
void write_torchvision_resnet18(const std::string& path) {
  const ModelDef& model = get_model("resnet18");
  std::map<std::string, Tensor> tensors;
  uint32_t state = 1;
  for (const InitVariable& v : model_variables(model, Shape{3, 32, 32}, 1000)) {
    const ForeignName name = model.foreign_names(v.name).at(0);
    Tensor t(name.transposed ? Shape{v.shape[1], v.shape[0]} : v.shape, DType::f32);
    const bool ones = v.name.ends_with("gamma") || v.name.ends_with("variance");
    for (int64_t i = 0; i < t.numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      t.data<float>()[i] = ones ? 1.0f : static_cast<float>(state >> 8) / (1 << 24) * 0.1f - 0.05f;
    }
    if (v.name.ends_with("moving_mean")) t.fill_zero();
    tensors.emplace(name.key, std::move(t));
  }
  std::vector<std::pair<std::string, const Tensor*>> list;
  for (const auto& [name, t] : tensors) list.push_back({name, &t});
  safetensors_write(path, list);
}

// The user's path of docs/fine_tune.md: a torchvision file and a folder of photos to a model that
// trains with its head first, then evaluates, exports and predicts.
TEST(FineTuneFromTorchvisionTest, AFolderOfPhotosToPredictions) {
  std::string why;
  auto python = testing::python_with("pillow numpy", &why);
  if (!python) GTEST_SKIP() << why;
  TmpDir tmp;
  const std::string photos = tmp / "photos", dir = tmp / "run";
  auto made = testing::run_shell(*python + " " + TOWER_SOURCE_DIR +
                                 "/tests/data/make_images.py folder " + photos + " 48 32 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  write_torchvision_resnet18(tmp / "resnet18.safetensors");
  auto r =
      run_tower("train --model resnet18 --data folder:" + photos +
                " --image_size 32 --test_fraction 0.25 --batch_size 8 --epochs 2 --init_from " +
                (tmp / "resnet18.safetensors") +
                " --freeze backbone --unfreeze_after_epochs 1 --train_dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"resnet18's foreign names (torchvision's or timm's)", "100 of 102 variables loaded",
        "(1000, 512) (transposed)", "frozen: conv1, layer1, layer2, layer3, layer4", "thaw;",
        "evaluation: central crop 28x28, pixels x 0.00392157, then (x - mean) / stddev per "
        "channel"})
    EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
  EXPECT_EQ(run_tower("eval --run_once --train_dir " + dir).exit_code, 0);
  auto exported = run_tower("export --train_dir " + dir + " --out " + (tmp / "m.onnx"));
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  auto predicted = run_tower("predict --train_dir " + dir + " " + photos + "/dog");
  EXPECT_EQ(predicted.exit_code, 0) << predicted.output;
  EXPECT_TRUE(contains(predicted.output, "cat") && contains(predicted.output, "frog"))
      << predicted.output;
}

}  // namespace
}  // namespace tower
