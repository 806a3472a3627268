// A user's own data made the way users make it (Pillow images in class folders, NumPy arrays from
// np.save), trained on with the real binary.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "io/python_env.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/data/dataset.h"
#include "tower/data/file_io.h"
#include "tower/data/npy.h"

namespace tower {
namespace {

using testing::contains;
using testing::run_tower;
using testing::TmpDir;

// Runs tests/data/make_images.py with the venv's python; its JSON line.
std::string make_images(const std::string& python, const std::string& args) {
  auto r = testing::run_shell(python + " " + TOWER_SOURCE_DIR + "/tests/data/make_images.py " +
                              args + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

// The test precision @ 1 that `tower train` printed last.
double precision_of(const std::string& output) {
  const size_t at = output.rfind("precision @ 1 = ");
  return at == std::string::npos ? -1 : std::stod(output.substr(at + 16));
}

class OwnDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto python = testing::python_with("pillow numpy", &why);
    if (!python) GTEST_SKIP() << why;
    python_ = *python;
  }
  std::string python_;
};

// PNG is lossless: the folder's decoded pixels are Pillow's source arrays, bit for bit, and the
// classes are numbered in sorted order as torchvision's ImageFolder numbers them.
TEST_F(OwnDataTest, PngFolderDecodesToPillowsPixelsBitForBit) {
  TmpDir tmp;
  const std::string dir = tmp / "exact";
  make_images(python_, "exact " + dir + " 30");
  DatasetSpec spec = parse_dataset_spec("folder:" + dir);
  spec.image_shape = Shape{3, 32, 32};
  spec.test_fraction = 0.001;
  Dataset all = open_dataset(spec, Split::train);
  const std::vector<uint8_t> bytes = read_file(dir + ".npy");
  NpyArray source = parse_npy(bytes, dir + ".npy");
  ASSERT_EQ(source.shape, (std::vector<int64_t>{30, 3, 32, 32}));
  ASSERT_EQ(all.size(), 30);  // the hash keeps every image of 30 in training at this fraction
  EXPECT_EQ(all.class_names, (std::vector<std::string>{"cat", "dog", "frog"}));
  EXPECT_EQ(std::memcmp(all.images.raw_data(), source.data.data(), source.data.size()), 0);
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(all.labels.data<int32_t>()[i], i / 10) << i;
}

// Mixed sizes, grey, RGB and RGBA, PNG and JPEG, sub-folders and a stray text file: cifar10
// trains on it from the command line, well above chance, and eval names the classes.
TEST_F(OwnDataTest, MixedImageFolderTrainsAndEvalNamesTheClasses) {
  TmpDir tmp;
  const std::string dir = tmp / "photos";
  make_images(python_, "folder " + dir + " 240 32");
  auto r = run_tower("train --model cifar10 --data folder:" + dir +
                     " --max_steps 80 --batch_size 32 --lr 0.05 --log_every 40 --train_dir " +
                     (tmp / "train"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ignored 1 file")) << r.output;
  EXPECT_GT(precision_of(r.output), 0.6) << r.output;  // chance: 1/3
  auto again = run_tower("train --model cifar10 --data folder:" + dir +
                         " --max_steps 1 --batch_size 32 --train_dir " + (tmp / "train2"));
  EXPECT_FALSE(contains(again.output, "decoding")) << "the cache was not used: " << again.output;
  // Under MPI the data lines come from rank 0 only.
  if (!testing::mpirun(2).empty()) {
    auto ranks = testing::run_command(testing::mpirun(2) + testing::tower_binary() +
                                      " train --model cifar10 --data folder:" + dir +
                                      " --num_devices 1 --max_steps 1 --batch_size 8 --train_dir " +
                                      (tmp / "mpi"));
    ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
    const size_t first = ranks.output.find("ignored 1 file");
    EXPECT_NE(first, std::string::npos) << ranks.output;
    EXPECT_EQ(ranks.output.find("ignored 1 file", first + 1), std::string::npos) << ranks.output;
  }
  auto eval = run_tower("eval --run_once --train_dir " + (tmp / "train"));
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  for (const char* name : {"cat", "dog", "frog", "confusion matrix"})
    EXPECT_TRUE(contains(eval.output, name)) << eval.output;
}

TEST_F(OwnDataTest, NumpyArraysTrainInEitherDtype) {
  TmpDir tmp;
  for (const std::string dtype : {"uint8", "float32"}) {
    const std::string dir = tmp / dtype;
    make_images(python_, "npy " + dir + " 300 " + dtype);
    auto r = run_tower("train --model lenet --data npy:" + dir +
                       " --max_steps 40 --batch_size 32 --log_every 40 --train_dir " +
                       (tmp / ("train_" + dtype)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_GT(precision_of(r.output), 0.6) << dtype << ": " << r.output;
  }
}

// Without Python: the refusals of models and data that do not fit.
TEST(OwnDataRulesTest, ModelsAndDataThatDoNotFitAreRefusedNamingBoth) {
  TmpDir tmp;
  auto no_data = run_tower("train --model cifar10 --max_steps 1 --train_dir " + (tmp / "a"));
  EXPECT_EQ(no_data.exit_code, 1) << no_data.output;
  EXPECT_TRUE(contains(no_data.output, "--data cifar10:DIR")) << no_data.output;
  EXPECT_TRUE(contains(no_data.output, "tower make-dataset --format cifar10")) << no_data.output;
  auto made = run_tower("make-dataset --format cifar10 --out " + (tmp / "cifar") +
                        " --num_train 100 --num_test 20");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto colour = run_tower("train --data cifar10:" + (tmp / "cifar") +
                          " --max_steps 1 --train_dir " + (tmp / "b"));
  EXPECT_EQ(colour.exit_code, 1) << colour.output;
  EXPECT_TRUE(contains(colour.output, "(3, 32, 32)") && contains(colour.output, "(1, 28, 28)") &&
              contains(colour.output, "--model"))
      << colour.output;
  // A refused run leaves nothing behind.
  EXPECT_FALSE(std::filesystem::exists(tmp / "a"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "b"));
  auto models = run_tower("models");
  EXPECT_TRUE(contains(models.output, "for cifar10 data")) << models.output;
  auto unknown = run_tower("train --data imagefolder:" + (tmp / "x"));
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(contains(unknown.output, "folder:DIR")) << unknown.output;
}

}  // namespace
}  // namespace tower
