// Small synthetic data sets written in the real file formats, for tests, examples and demos.
// They are learnable: each class has its own smooth pattern (a few coloured blobs at fixed
// places), and each example is its class pattern, slightly shifted, plus pixel noise, so a small
// model (even a nearest-class-mean classifier) separates the classes well.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tower/data/dataset.h"

namespace tower {

enum class IdxCompression { gzip, none };

struct MakeDatasetOptions {
  DatasetFormat format = DatasetFormat::cifar10;
  std::string dir{};  // created if missing
  int64_t num_train = 5000;
  int64_t num_test = 1000;
  uint64_t seed = 0;
  IdxCompression idx_compression = IdxCompression::gzip;
};

// Writes the files of the format into dir (CIFAR-10: data_batch_1..5.bin, test_batch.bin,
// batches.meta.txt; CIFAR-100: train.bin, test.bin; IDX: the four MNIST-named files). Returns
// the spec string that opens it ("cifar10:DIR", ...).
std::string make_dataset(const MakeDatasetOptions& options);

DatasetFormat parse_dataset_format(std::string_view name);  // "cifar10", "cifar100", "idx"

}  // namespace tower
