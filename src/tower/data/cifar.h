// CIFAR-10 and CIFAR-100 binary files: fixed-size records of label byte(s) followed by a
// 3x32x32 image, channel-major (R plane, G plane, B plane), rows top to bottom.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tower/data/dataset.h"

namespace tower {

inline constexpr int kCifarChannels = 3, kCifarHeight = 32, kCifarWidth = 32;
inline constexpr int64_t kCifarImageBytes = kCifarChannels * kCifarHeight * kCifarWidth;

// The record layout of one CIFAR variant.
struct CifarLayout {
  int label_bytes = 1;  // 1 for CIFAR-10; 2 (coarse, fine) for CIFAR-100
  int label_index = 0;  // which of the label bytes is the label
  int num_classes = 10;
};
CifarLayout cifar10_layout();
CifarLayout cifar100_layout(Cifar100Label label);

// Decodes the records of one file's bytes, appending to images (u8 CHW) and labels. `file` names
// the file in errors: a size that is not a whole number of records, an empty file, a label out of
// range.
void decode_cifar_records(std::span<const uint8_t> bytes, const CifarLayout& layout,
                          const std::string& file, std::vector<uint8_t>& images,
                          std::vector<int32_t>& labels);

// The file names of a split: data_batch_1..5.bin / test_batch.bin (CIFAR-10), train.bin /
// test.bin (CIFAR-100).
std::vector<std::string> cifar_file_names(DatasetFormat format, Split split);

Dataset read_cifar10(const std::string& dir, Split split);
Dataset read_cifar100(const std::string& dir, Split split, Cifar100Label label);

}  // namespace tower
