// IDX files (MNIST, Fashion-MNIST), plain or gzip-compressed: a magic number (0, 0, type, number
// of dimensions), the dimensions as big-endian u32, then the data row-major. Only unsigned-byte
// data (type 0x08) is supported, which is what the MNIST family uses.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tower/data/dataset.h"

namespace tower {

inline constexpr int kIdxNumClasses = 10;  // MNIST and Fashion-MNIST

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};
// Decodes an uncompressed IDX file that must have `expected_rank` dimensions.
IdxArray decode_idx(std::span<const uint8_t> bytes, int expected_rank, const std::string& file);

// Builds a data set from decoded image (N, H, W) and label (N) files; checks that the counts agree
// and that labels are below num_classes, naming the files.
Dataset idx_dataset(const IdxArray& images, const std::string& images_file, const IdxArray& labels,
                    const std::string& labels_file, int num_classes, std::string name);

// Reads train-*/t10k-* images and labels from dir, preferring NAME.gz and falling back to NAME.
Dataset read_idx(const std::string& dir, Split split, int num_classes = kIdxNumClasses);

}  // namespace tower
