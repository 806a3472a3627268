#include "tower/train/training_state.h"

#include <gtest/gtest.h>

#include "tower/core/error.h"

namespace tower {
namespace {

TrainingState example() {
  TrainingState s;
  s.step = 1200;
  s.epoch = 3;
  s.epoch_step = 17;
  s.run = {.model = "cifar10",
           .data = "cifar10:/data",
           .batch_size = 64,
           .num_towers = 2,
           .ranks = 1,
           .strategy = "allreduce",
           .optimizer = "sgd",
           .seed = 7};
  s.devices = {"cpu:0", "cpu:1"};
  s.ema = true;
  s.augmentation = "cifar10";
  s.classes = {"airplane", "automobile"};
  s.image_shape = Shape{3, 32, 32};
  s.run.model_file = R"({"name": "m"})";
  s.run.bn_momentum = 0.9f;
  s.program = "my_trainer";
  s.progress = {
      .best = 0.75, .best_step = 400, .since_best = 2, .plateau_wait = 1, .lr_reductions = 3};
  s.run.freeze = "backbone until epoch 2, then lr x 0.1";
  s.init = {.file = "resnet18.safetensors", .sha256 = "ab12", .source = "a safetensors file"};
  s.normalization = {{0.5f, 0.25f}, {0.2f, 0.1f}};
  s.test_fraction = 0.25;
  return s;
}

std::string error_of(const nlohmann::json& json) {
  try {
    training_state_from_json(json, "dir/model.ckpt-1200.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TrainingStateTest, RoundTripsEveryField) {
  const TrainingState s = example();
  const nlohmann::json json = training_state_to_json(s);
  const TrainingState back = training_state_from_json(json, "f.json");
  EXPECT_EQ(back.step, s.step);
  EXPECT_EQ(back.epoch, s.epoch);
  EXPECT_EQ(back.epoch_step, s.epoch_step);
  EXPECT_TRUE(differences(back.run, s.run).empty());
  EXPECT_EQ(back.devices, s.devices);
  EXPECT_EQ(back.ema, s.ema);
  EXPECT_EQ(back.augmentation, s.augmentation);
  EXPECT_EQ(back.classes, s.classes);
  EXPECT_EQ(back.image_shape, s.image_shape);
  EXPECT_EQ(back.run.model_file, s.run.model_file);
  EXPECT_FLOAT_EQ(back.run.bn_momentum, 0.9f);
  EXPECT_EQ(back.program, "my_trainer");
  EXPECT_EQ(back.progress.best, 0.75);
  EXPECT_EQ(back.progress.best_step, 400);
  EXPECT_EQ(back.progress.since_best, 2);
  EXPECT_EQ(back.progress.plateau_wait, 1);
  EXPECT_EQ(back.progress.lr_reductions, 3);
  EXPECT_EQ(back.run.freeze, s.run.freeze);
  EXPECT_EQ(back.init.file, s.init.file);
  EXPECT_EQ(back.init.sha256, s.init.sha256);
  EXPECT_EQ(back.init.source, s.init.source);
  EXPECT_EQ(back.normalization.mean, s.normalization.mean);
  EXPECT_EQ(back.normalization.stddev, s.normalization.stddev);
  EXPECT_EQ(back.test_fraction, 0.25);
  EXPECT_EQ(training_state_to_json(back), json);
}

TEST(TrainingStateTest, EveryMissingWrongOrOutOfRangeKeyIsNamedWithTheFile) {
  const nlohmann::json good = training_state_to_json(example());
  EXPECT_EQ(error_of(nlohmann::json::array()),
            "checkpoint state file 'dir/model.ckpt-1200.json': the file is not a JSON object");
  struct Case {
    std::string pointer;
    nlohmann::json value;  // null: remove the key
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"/step", nullptr, "key 'step' is missing (expected a whole number)"},
           {"/step", -1, "key 'step' is -1 (expected a whole number >= 0)"},
           {"/step", 1.5, "key 'step' is 1.5 (expected a whole number)"},
           {"/position", 3, "key 'position' is 3 (expected a JSON object)"},
           {"/position/epoch", nullptr, "key 'position.epoch' is missing"},
           {"/run/model", "", "key 'run.model' is empty"},
           {"/run/batch_size", 0, "key 'run.batch_size' is 0 (expected a whole number >= 1)"},
           {"/run/seed", "7", "key 'run.seed' is \"7\" (expected a whole number)"},
           {"/devices", "cpu:0", "key 'devices' is \"cpu:0\" (expected a list of devices)"},
           {"/devices", nlohmann::json::array({1}), "key 'devices' holds 1"},
           {"/ema", 1, "key 'ema' is 1 (expected true or false)"},
           {"/augmentation", 5, "key 'augmentation' is 5 (expected a string)"},
           {"/classes", "cat", "key 'classes' is \"cat\" (expected a list of class names)"},
           {"/classes", nlohmann::json::array({1}), "key 'classes' holds 1"},
           {"/image_shape", nlohmann::json::array({3, 32}), "key 'image_shape' has 2 values"},
           {"/image_shape", nlohmann::json::array({3, 0, 32}), "key 'image_shape' holds 0"},
           {"/run/model_file", 5, "key 'run.model_file' is 5 (expected a string)"},
           {"/run/bn_momentum", 1, "key 'run.bn_momentum' is 1 (expected a number in (0, 1))"},
           {"/program", "", "key 'program' is empty"},
           {"/progress/best", 2, "key 'progress.best' is 2 (expected a precision in [0, 1])"},
           {"/progress/since_best", -1, "key 'progress.since_best' is -1"},
           {"/progress/lr_reductions", nullptr, "key 'progress.lr_reductions' is missing"},
           {"/run/freeze", 1, "key 'run.freeze' is 1 (expected a string)"},
           {"/test_fraction", 1, "key 'test_fraction' is 1 (expected a number in (0, 1))"},
           {"/init_from/sha256", nullptr, "key 'init_from.sha256' is missing"},
           {"/normalization/stddev", nlohmann::json::array({0.2, 0}),
            "key 'normalization.stddev' holds 0 (expected numbers > 0)"},
           {"/normalization/stddev", nlohmann::json::array({0.2}),
            "key 'normalization.stddev' has 1 values for 2 means"},
           {"/normalization/mean", "x", "key 'normalization.mean' is \"x\" (expected a list"}}) {
    SCOPED_TRACE(c.pointer);
    nlohmann::json bad = good;
    const nlohmann::json::json_pointer p(c.pointer);
    if (c.value.is_null())
      bad[p.parent_pointer()].erase(p.back());
    else
      bad[p] = c.value;
    const std::string message = error_of(bad);
    EXPECT_NE(message.find("'dir/model.ckpt-1200.json'"), std::string::npos) << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
  // Checkpoints of older versions have no augmentation, classes, image shape or model file:
  // accepted, left empty.
  nlohmann::json old = good;
  for (const char* key : {"augmentation", "classes", "image_shape", "program", "progress"})
    old.erase(key);
  old["run"].erase("model_file");
  old["run"].erase("bn_momentum");
  const TrainingState s = training_state_from_json(old, "f");
  EXPECT_EQ(s.augmentation, "");
  EXPECT_TRUE(s.classes.empty());
  EXPECT_EQ(s.image_shape.rank(), 0);
  EXPECT_EQ(s.run.model_file, "");
}

TEST(TrainingStateTest, DifferencesNameEveryKey) {
  RunIdentity a = example().run, b = a;
  b.num_towers = 4;
  b.ranks = 2;
  auto diff = differences(a, b);
  ASSERT_EQ(diff.size(), 2u);
  EXPECT_EQ(diff[0].key, "num_towers");
  EXPECT_EQ(diff[0].saved, "2");
  EXPECT_EQ(diff[0].now, "4");
  EXPECT_EQ(diff[1].key, "ranks");
  // Towers to micro-batches: the layout fields of the one and the sizes of the other.
  b = a;
  b.global_batch_size = 128, b.micro_batch_size = 32;
  b.batch_size = b.num_towers = b.ranks = 0;
  diff = differences(a, b);
  ASSERT_EQ(diff.size(), 5u);
  EXPECT_EQ(diff[0].key, "global_batch_size");
  EXPECT_EQ(diff[0].saved, "none");
  EXPECT_EQ(diff[2].key, "batch_size");
  EXPECT_EQ(diff[2].now, "none");
}

}  // namespace
}  // namespace tower
