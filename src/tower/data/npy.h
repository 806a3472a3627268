// NumPy arrays (`--data npy:DIR`), the format a Python user reaches in one line (np.save):
//
//   DIR/train_images.npy  (N, H, W, C) or (N, H, W); uint8, or float32 in [0, 1] or [0, 255]
//   DIR/train_labels.npy  (N,) of any integer type, each in [0, classes)
//   DIR/test_images.npy, DIR/test_labels.npy   the same for the test split
//   DIR/class_names.txt   optional: one name per line
//
// The .npy format 1.0, 2.0 and 3.0 (a magic string, a header dict, then the data), C order.
// float32 images are scaled to uint8 (x 255 when every value is in [0, 1]) and rounded.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tower/data/dataset.h"

namespace tower {

struct NpyArray {
  std::string dtype;  // numpy's descr: "|u1", "<f4", "<i8", ...
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;  // into the bytes given to parse_npy
};
// The array in a .npy file's bytes; `file` names it in errors.
NpyArray parse_npy(std::span<const uint8_t> bytes, const std::string& file);

// A float32 array as the bytes of a .npy file (format 1.0, little-endian, C order), as np.load
// reads it.
std::vector<uint8_t> npy_bytes(std::span<const float> values, const std::vector<int64_t>& shape);

// The split of DIR; every file and value is checked, errors name the file.
Dataset read_npy(const std::string& dir, Split split);

}  // namespace tower
