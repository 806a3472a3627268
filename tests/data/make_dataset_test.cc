#include "tower/data/make_dataset.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "data_test_util.h"
#include "tower/data/dataset.h"

namespace tower {
namespace {

// Accuracy on the test split of a nearest-class-mean classifier fitted on the training split: a
// model-free check that the classes are separable.
double nearest_mean_accuracy(const Dataset& train, const Dataset& test) {
  const int64_t size = train.image_shape().numel();
  const size_t k = static_cast<size_t>(train.num_classes);
  std::vector<std::vector<double>> means(k, std::vector<double>(static_cast<size_t>(size), 0));
  std::vector<int64_t> counts(k, 0);
  for (int64_t i = 0; i < train.size(); ++i) {
    const size_t label = static_cast<size_t>(train.labels.data<int32_t>()[i]);
    const uint8_t* image = train.images.data<uint8_t>() + i * size;
    for (int64_t j = 0; j < size; ++j) means[label][static_cast<size_t>(j)] += image[j];
    ++counts[label];
  }
  for (size_t c = 0; c < k; ++c)
    for (double& v : means[c]) v /= static_cast<double>(std::max<int64_t>(counts[c], 1));
  int64_t correct = 0;
  for (int64_t i = 0; i < test.size(); ++i) {
    const uint8_t* image = test.images.data<uint8_t>() + i * size;
    double best = 1e300;
    size_t best_class = 0;
    for (size_t c = 0; c < k; ++c) {
      double d = 0;
      for (int64_t j = 0; j < size; ++j) {
        double diff = image[j] - means[c][static_cast<size_t>(j)];
        d += diff * diff;
      }
      if (d < best) best = d, best_class = c;
    }
    correct += best_class == static_cast<size_t>(test.labels.data<int32_t>()[i]);
  }
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

TEST(MakeDataset, ClassesAreSeparable) {
  struct Case {
    DatasetFormat format;
    int64_t num_train;
    double min_accuracy;
  };
  for (Case c : {Case{DatasetFormat::cifar10, 500, 0.95}, Case{DatasetFormat::idx, 500, 0.95},
                 Case{DatasetFormat::cifar100, 2000, 0.8}}) {
    testing::TempDir dir;
    DatasetSpec spec = parse_dataset_spec(make_dataset({.format = c.format,
                                                        .dir = dir.path(),
                                                        .num_train = c.num_train,
                                                        .num_test = 300,
                                                        .seed = 11}));
    double accuracy =
        nearest_mean_accuracy(open_dataset(spec, Split::train), open_dataset(spec, Split::test));
    EXPECT_GE(accuracy, c.min_accuracy) << spec.text;
    if (c.format == DatasetFormat::cifar100) {
      spec.cifar100_label = Cifar100Label::coarse;
      Dataset coarse = open_dataset(spec, Split::train);
      EXPECT_EQ(coarse.num_classes, 20);
      EXPECT_EQ(coarse.labels.data<int32_t>()[99], 99 / 5);
    }
  }
}

TEST(MakeDataset, WritesTheRealFileNames) {
  testing::TempDir dir;
  make_dataset(
      {.format = DatasetFormat::cifar10, .dir = dir.path(), .num_train = 12, .num_test = 3});
  for (const char* name : {"data_batch_1.bin", "data_batch_5.bin", "test_batch.bin"})
    EXPECT_TRUE(std::filesystem::exists(dir.file(name))) << name;
  // 12 records over 5 files: 2, 2, 2, 3, 3.
  EXPECT_EQ(std::filesystem::file_size(dir.file("data_batch_1.bin")), 2u * 3073);
  EXPECT_EQ(std::filesystem::file_size(dir.file("data_batch_5.bin")), 3u * 3073);
  testing::TempDir idx;
  make_dataset({.format = DatasetFormat::idx,
                .dir = idx.path(),
                .num_train = 4,
                .num_test = 3,
                .idx_compression = IdxCompression::none});
  EXPECT_EQ(std::filesystem::file_size(idx.file("train-images-idx3-ubyte")), 16u + 4 * 784);
  EXPECT_EQ(std::filesystem::file_size(idx.file("t10k-labels-idx1-ubyte")), 8u + 3);
  testing::expect_error([] { parse_dataset_format("svhn"); }, {"unknown data set format 'svhn'"});
  testing::expect_error(
      [&] { make_dataset({.format = DatasetFormat::cifar10, .dir = dir.path(), .num_train = 3}); },
      {"num_train 3"});
}

// The CLI sub-command, when the tower binary has been built.
TEST(MakeDataset, CommandLine) {
  const std::string tower = std::string(TOWER_BINARY_DIR) + "/bin/tower";
  if (!std::filesystem::exists(tower)) GTEST_SKIP() << tower << " is not built";
  if (std::system((tower + " --help 2>&1 | grep -q make-dataset").c_str()) != 0)
    GTEST_SKIP() << tower << " predates make-dataset; rebuild target tower";
  testing::TempDir dir;
  const std::string command = tower + " make-dataset --format idx --out " + dir.path() +
                              " --num_train 30 --num_test 10 --seed 2 > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  Dataset train = open_dataset(parse_dataset_spec("idx:" + dir.path()), Split::train);
  EXPECT_EQ(train.size(), 30);
  EXPECT_NE(
      std::system((tower + " make-dataset --format tfrecord --out " + dir.path() + " 2> /dev/null")
                      .c_str()),
      0);
}

}  // namespace
}  // namespace tower
