#include "tower/io/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "testing/errors.h"
#include "testing/tmp_dir.h"

namespace tower {
namespace {

namespace fs = std::filesystem;
using testing::TmpDir;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

void save(const TmpDir& dir, int64_t step, int keep_last = 0) {
  Tensor w = Tensor::from_vector<float>({2}, {static_cast<float>(step), 1});
  checkpoint_save(dir.path(), step, {{"w", &w}}, {{"step", step}}, keep_last);
}

using testing::error_of;

TEST(CheckpointTest, RoundTrip) {
  TmpDir dir;
  Tensor w = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor count = Tensor::from_vector<int64_t>({1}, {77});
  nlohmann::json state = {{"position", {{"epoch", 3}, {"step", 17}}},
                          {"run", {{"model", "cifar10"}}}};
  checkpoint_save(dir.path(), 1200, {{"conv1/weights", &w}, {"global_step", &count}}, state, 5);

  EXPECT_TRUE(fs::exists(dir / "model.ckpt-1200.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model.ckpt-1200.json"));
  EXPECT_EQ(checkpoint_list(dir.path()), std::vector<int64_t>({1200}));
  auto latest = checkpoint_latest(dir.path());
  ASSERT_TRUE(latest);
  EXPECT_EQ(*latest, dir / "model.ckpt-1200");

  CheckpointData data = checkpoint_load(*latest);
  EXPECT_EQ(data.step, 1200);
  EXPECT_EQ(data.prefix, *latest);
  EXPECT_EQ(data.state, state);
  ASSERT_EQ(data.tensors.size(), 2u);
  EXPECT_EQ(data.tensors.at("conv1/weights").to_vector<float>(), std::vector<float>({1, 2, 3, 4}));
  EXPECT_EQ(data.tensors.at("global_step").to_vector<int64_t>(), std::vector<int64_t>({77}));

  // A file name is accepted in place of the prefix.
  EXPECT_EQ(checkpoint_load(*latest + ".safetensors").step, 1200);
  EXPECT_EQ(checkpoint_load(*latest + ".json").prefix, *latest);
}

TEST(CheckpointTest, EmptyOrMissingDirHasNoCheckpoint) {
  TmpDir dir;
  EXPECT_FALSE(checkpoint_latest(dir.path()));
  EXPECT_TRUE(checkpoint_list(dir.path()).empty());
  EXPECT_FALSE(checkpoint_latest(dir / "missing"));
  EXPECT_TRUE(checkpoint_list(dir / "missing").empty());
}

TEST(CheckpointTest, SaveCreatesTheDirectory) {
  TmpDir dir;
  Tensor w = Tensor::from_vector<float>({1}, {1});
  checkpoint_save(dir / "a/b", 3, {{"w", &w}}, nlohmann::json::object(), 1);
  EXPECT_EQ(checkpoint_list(dir / "a/b"), std::vector<int64_t>({3}));
}

TEST(CheckpointTest, IndexNamesLatestAndAllKept) {
  TmpDir dir;
  for (int64_t step : {100, 200, 300}) save(dir, step, 2);
  EXPECT_EQ(read_text(dir / "checkpoint"),
            "model_checkpoint_path: \"model.ckpt-300\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-200\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-300\"\n");
  EXPECT_FALSE(fs::exists(dir / "checkpoint.tmp"));
}

TEST(CheckpointTest, KeepsTheLastK) {
  TmpDir dir;
  for (int64_t step = 1; step <= 6; ++step) save(dir, step * 10, 3);
  EXPECT_EQ(checkpoint_list(dir.path()), std::vector<int64_t>({40, 50, 60}));
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-30.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-30.json"));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 3u * 2 + 1);  // three checkpoints and the index
  EXPECT_EQ(checkpoint_load(*checkpoint_latest(dir.path())).tensors.at("w").to_vector<float>()[0],
            60.f);
}

TEST(CheckpointTest, KeepZeroKeepsAll) {
  TmpDir dir;
  for (int64_t step = 1; step <= 4; ++step) save(dir, step, 0);
  EXPECT_EQ(checkpoint_list(dir.path()), std::vector<int64_t>({1, 2, 3, 4}));
}

// Resuming from an older checkpoint and saving again keeps the new one (it is the latest) and,
// while room remains, the newer ones of the abandoned run.
TEST(CheckpointTest, SavingAnOlderStepKeepsItAsLatest) {
  TmpDir dir;
  for (int64_t step : {10, 20, 30}) save(dir, step, 3);
  save(dir, 15, 3);
  EXPECT_EQ(checkpoint_list(dir.path()), std::vector<int64_t>({15, 20, 30}));
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-15");
}

TEST(CheckpointTest, LeftoverTempFilesAreIgnoredAndCleanedUp) {
  TmpDir dir;
  save(dir, 100, 2);
  // A save of step 200 that crashed: its temp files, and the tensors without the state file.
  write_text(dir / "model.ckpt-200.safetensors.tmp", "partial");
  write_text(dir / "model.ckpt-300.safetensors", "whatever");
  write_text(dir / "model.ckpt-300.json.tmp", "{");
  write_text(dir / "checkpoint.tmp", "model_checkpoint_path: \"model.ckpt-300\"\n");
  EXPECT_EQ(checkpoint_list(dir.path()), std::vector<int64_t>({100}));
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-100");
  fs::remove(dir / "checkpoint");
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-100");

  save(dir, 400, 1);
  EXPECT_EQ(checkpoint_list(dir.path()), std::vector<int64_t>({400}));
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-200.safetensors.tmp"));
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-300.safetensors"));
}

TEST(CheckpointTest, IncompleteStepsAndTheIndexedPrefix) {
  TmpDir dir;
  EXPECT_FALSE(checkpoint_indexed(dir.path()));
  for (int64_t step : {10, 20, 30}) save(dir, step, 0);
  fs::remove(dir / "model.ckpt-30.json");         // an interrupted save
  fs::remove(dir / "model.ckpt-10.json");         // deleted by hand
  fs::remove(dir / "model.ckpt-20.safetensors");  // the other way round: neither list has it
  EXPECT_EQ(checkpoint_list_incomplete(dir.path()), std::vector<int64_t>({10, 30}));
  EXPECT_TRUE(checkpoint_list(dir.path()).empty());
  ASSERT_TRUE(checkpoint_indexed(dir.path()));
  EXPECT_EQ(*checkpoint_indexed(dir.path()), dir / "model.ckpt-30");
}

TEST(CheckpointTest, LatestFallsBackToScanning) {
  TmpDir dir;
  for (int64_t step : {5, 7, 6}) save(dir, step, 0);
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-6");  // the index: the last saved
  fs::remove(dir / "checkpoint");
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-7");  // no index: the highest step
  write_text(dir / "checkpoint", "garbage\n");
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-7");
  write_text(dir / "checkpoint", "model_checkpoint_path: \"model.ckpt-99\"\n");  // gone
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-7");
  // A hostile index (a name longer than any file system allows) is an unreadable one.
  write_text(dir / "checkpoint", "model_checkpoint_path: \"" + std::string(100000, 'x') + "\"\n");
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-7");
  EXPECT_FALSE(checkpoint_indexed(dir.path()));
  write_text(dir / "checkpoint", "model_checkpoint_path: \"model.ckpt-5\"\n");
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-5");
  fs::remove(dir / "model.ckpt-7.json");  // incomplete ones do not count
  fs::remove(dir / "checkpoint");
  EXPECT_EQ(*checkpoint_latest(dir.path()), dir / "model.ckpt-6");
  EXPECT_EQ(checkpoint_list(dir.path()), std::vector<int64_t>({5, 6}));
}

TEST(CheckpointTest, NonCanonicalNamesAreNotCheckpoints) {
  TmpDir dir;
  save(dir, 8, 0);
  for (const char* name : {"model.ckpt-08", "model.ckpt--1", "model.ckpt-x", "model.ckpt-"}) {
    write_text(dir / (std::string(name) + ".json"), "{}");
    write_text(dir / (std::string(name) + ".safetensors"), "");
  }
  EXPECT_EQ(checkpoint_list(dir.path()), std::vector<int64_t>({8}));
}

TEST(CheckpointTest, CorruptTensorsFileIsAnErrorNamingIt) {
  TmpDir dir;
  save(dir, 10);
  const std::string file = dir / "model.ckpt-10.safetensors";
  std::string bytes = read_text(file);
  write_text(file, bytes.substr(0, bytes.size() - 3));
  std::string message = error_of([&] { checkpoint_load(dir / "model.ckpt-10"); });
  EXPECT_NE(message.find(file), std::string::npos) << message;
}

TEST(CheckpointTest, CorruptStateFileIsAnErrorNamingIt) {
  TmpDir dir;
  save(dir, 10);
  for (const char* text : {"{\"step\": ", "{\"step\": 1e400}"}) {  // 1e400: past a double
    write_text(dir / "model.ckpt-10.json", text);
    std::string message = error_of([&] { checkpoint_load(dir / "model.ckpt-10"); });
    EXPECT_NE(message.find(dir / "model.ckpt-10.json"), std::string::npos) << message;
    EXPECT_NE(message.find("not valid JSON"), std::string::npos) << message;
  }
}

TEST(CheckpointTest, MissingFilesAreErrorsNamingThem) {
  TmpDir dir;
  save(dir, 10);
  fs::remove(dir / "model.ckpt-10.json");
  std::string message = error_of([&] { checkpoint_load(dir / "model.ckpt-10"); });
  EXPECT_NE(message.find(dir / "model.ckpt-10.json"), std::string::npos) << message;
  // Weights without a state file may be another tool's: never called an interrupted save alone.
  EXPECT_NE(message.find("has no state file"), std::string::npos) << message;
  EXPECT_NE(message.find("--init_from"), std::string::npos) << message;

  message = error_of([&] { checkpoint_load(dir / "model.ckpt-11"); });
  EXPECT_NE(message.find(dir / "model.ckpt-11"), std::string::npos) << message;
}

TEST(CheckpointTest, RenamedCheckpointKnowsItsStep) {
  TmpDir dir;
  save(dir, 1234);
  fs::rename(dir / "model.ckpt-1234.safetensors", dir / "best.safetensors");
  fs::rename(dir / "model.ckpt-1234.json", dir / "best.json");
  EXPECT_EQ(checkpoint_load(dir / "best").step, 1234);
}

TEST(CheckpointTest, NegativeStepIsAnError) {
  TmpDir dir;
  Tensor w = Tensor::from_vector<float>({1}, {1});
  EXPECT_THROW(checkpoint_save(dir.path(), -1, {{"w", &w}}, {}, 1), Error);
}

}  // namespace
}  // namespace tower
