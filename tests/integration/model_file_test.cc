// The real binary with --model_file: each example file trains to the bits of its built-in model,
// and eval, bench and inspect need only the train dir (the checkpoint carries the file).
#include <gtest/gtest.h>

#include "testing/checkpoints.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/io/checkpoint.h"
#include "tower/io/safetensors.h"

namespace tower {
namespace {

using testing::contains;
using testing::run_tower;
using testing::TmpDir;

// Trains `model` built in and from its example file with `flags` for `steps` steps into
// tmp/<model> and tmp/<model>_file: every tensor of the two checkpoints the same bits.
void expect_file_trains_like_builtin(const TmpDir& tmp, const std::string& model,
                                     const std::string& flags, int steps) {
  const std::string file = std::string(TOWER_SOURCE_DIR) + "/examples/models/" + model + ".json";
  auto builtin = run_tower("train --model " + model + flags + " --train_dir " + (tmp / model));
  ASSERT_EQ(builtin.exit_code, 0) << builtin.output;
  const std::string dir = tmp / (model + "_file");
  auto from_file = run_tower("train --model_file " + file + flags + " --train_dir " + dir);
  ASSERT_EQ(from_file.exit_code, 0) << from_file.output;
  auto x = testing::checkpoint_tensors(tmp / model, steps),
       y = testing::checkpoint_tensors(dir, steps);
  ASSERT_EQ(x.size(), y.size());
  for (const auto& [name, bits] : x) EXPECT_TRUE(y[name] == bits) << name;
}

TEST(ModelFileCliTest, ExampleFilesTrainToTheBitsOfTheBuiltInModels) {
  TmpDir tmp;
  auto a = run_tower("make-dataset --format idx --out " + (tmp / "idx") +
                     " --num_train 500 --num_test 100 --seed 3");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = run_tower("make-dataset --format cifar10 --out " + (tmp / "cifar") +
                     " --num_train 500 --num_test 100 --seed 3");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  for (const std::string model : {"lenet", "cifar10", "resnet20"}) {
    SCOPED_TRACE(model);
    const std::string data =
        model == "lenet" ? "idx:" + (tmp / "idx") : "cifar10:" + (tmp / "cifar");
    expect_file_trains_like_builtin(
        tmp, model,
        " --data " + data + " --num_devices 2 --batch_size 8 --max_steps 20 --log_every 10", 20);

    // The train dir alone: eval, inspect.
    const std::string dir = tmp / (model + "_file");
    auto eval = run_tower("eval --train_dir " + dir + " --run_once");
    EXPECT_EQ(eval.exit_code, 0) << eval.output;
    EXPECT_TRUE(contains(eval.output, "precision @ 1")) << eval.output;
    auto bench = run_tower("bench --train_dir " + dir + " --batch_size 8 --steps 1 --windows 1");
    EXPECT_EQ(bench.exit_code, 0) << bench.output;
    EXPECT_TRUE(contains(bench.output, "\"model\":\"" + model + "_file\"")) << bench.output;
    auto inspect = run_tower("inspect " + dir);
    EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
    EXPECT_TRUE(contains(inspect.output, "model_file")) << inspect.output;
  }
  // The ImageNet models, on 32x32 images (they train at any size), one step (resnet34 has
  // resnet18's blocks).
  for (const std::string model : {"resnet18", "resnet50", "mobilenet_v2"}) {
    SCOPED_TRACE(model);
    expect_file_trains_like_builtin(
        tmp, model,
        " --data cifar10:" + (tmp / "cifar") +
            " --batch_size 4 --max_steps 1 --log_every 1 --precise_bn off",
        1);
  }
}

TEST(ModelFileCliTest, BenchTakesAModelFileAndBadFilesAreOneLine) {
  TmpDir tmp;
  const std::string file = std::string(TOWER_SOURCE_DIR) + "/examples/models/lenet.json";
  auto bench = run_tower("bench --model_file " + file + " --batch_size 16 --steps 1 --windows 1");
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_TRUE(contains(bench.output, "\"model\":\"lenet_file\"")) << bench.output;

  testing::write_file(tmp / "bad.json", R"({"name": "m", "input": [1, 28, 28], "layers": [
      {"type": "conv2d", "name": "c1", "filters": 8, "stride": -1}]})");
  auto bad =
      run_tower("train --model_file " + (tmp / "bad.json") + " --train_dir " + (tmp / "train"));
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(contains(bad.output, "bad.json: layer 0 (c1): key 'stride' is -1")) << bad.output;
  auto both = run_tower("train --model lenet --model_file " + file);
  EXPECT_EQ(both.exit_code, 1) << both.output;
  EXPECT_TRUE(contains(both.output, "--model and --model_file exclude each other")) << both.output;
}

}  // namespace
}  // namespace tower
