#include "tower/data/npy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tower/core/error.h"
#include "tower/data/file_io.h"

namespace tower {
namespace {

// The text after `'key':` in a header dict, or "" when the key is missing.
std::string header_value(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return "";
  size_t v = header.find(':', at);
  if (v == std::string::npos) return "";
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  size_t end = v;
  if (v < header.size() && header[v] == '(') {
    end = header.find(')', v);
    return end == std::string::npos ? "" : header.substr(v, end - v + 1);
  }
  if (v < header.size() && header[v] == '\'') {
    end = header.find('\'', v + 1);
    return end == std::string::npos ? "" : header.substr(v + 1, end - v - 1);
  }
  while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  return header.substr(v, end - v);
}

int64_t item_size(const std::string& dtype) {
  if (dtype.size() < 3 || (dtype[0] != '<' && dtype[0] != '|' && dtype[0] != '='))
    return 0;  // big-endian or not a plain number
  if (dtype[1] != 'u' && dtype[1] != 'i' && dtype[1] != 'f') return 0;
  const std::string n = dtype.substr(2);
  return n == "1" ? 1 : n == "2" ? 2 : n == "4" ? 4 : n == "8" ? 8 : 0;
}

// Element i of an integer array as int64.
int64_t integer_at(const NpyArray& a, int64_t i) {
  const uint8_t* p = a.data.data() + i * item_size(a.dtype);
  const bool is_signed = a.dtype[1] == 'i';
  switch (item_size(a.dtype)) {
    case 1:
      return is_signed ? static_cast<int8_t>(*p) : *p;
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return is_signed ? static_cast<int16_t>(v) : v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return is_signed ? static_cast<int32_t>(v) : v;
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return is_signed || v <= uint64_t(INT64_MAX) ? static_cast<int64_t>(v) : -1;
    }
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

}  // namespace

NpyArray parse_npy(std::span<const uint8_t> bytes, const std::string& file) {
  static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, 6) != 0)
    fail("{}: not a NumPy .npy file (no \\x93NUMPY magic string)", file);
  const int major = bytes[6];
  if (major < 1 || major > 3) fail("{}: .npy format version {} (expected 1, 2 or 3)", file, major);
  size_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    at = 10;
  } else {
    if (bytes.size() < 12) fail("{}: truncated .npy header", file);
    header_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (size_t(bytes[11]) << 24);
    at = 12;
  }
  if (at + header_len > bytes.size()) fail("{}: truncated .npy header", file);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + at), header_len);
  NpyArray a;
  a.dtype = header_value(header, "descr");
  if (item_size(a.dtype) == 0)
    fail("{}: dtype '{}' is not supported (expected little-endian integers or float32)", file,
         a.dtype);
  if (header_value(header, "fortran_order") != "False")
    fail("{}: the array is in Fortran order; save it with np.ascontiguousarray", file);
  const std::string shape = header_value(header, "shape");
  if (shape.empty()) fail("{}: the .npy header has no shape", file);
  // The dimensions, each and their product bounded by the bytes there are (no overflow).
  const uint64_t available = bytes.size() - at - header_len;
  uint64_t count = 1;
  bool empty = false;
  for (size_t i = 1; i < shape.size();) {
    while (i < shape.size() && !std::isdigit(static_cast<unsigned char>(shape[i]))) ++i;
    if (i >= shape.size()) break;
    uint64_t dim = 0;
    for (; i < shape.size() && std::isdigit(static_cast<unsigned char>(shape[i])); ++i) {
      dim = dim * 10 + static_cast<uint64_t>(shape[i] - '0');
      if (dim > available + 1)
        fail("{}: a dimension of shape {} is larger than the file", file, shape);
    }
    a.shape.push_back(static_cast<int64_t>(dim));
    empty |= dim == 0;
    if (!empty && (count *= dim) > available + 1)
      fail("{}: shape {} holds more elements than the file has bytes", file, shape);
  }
  if (empty) count = 0;
  at += header_len;
  const size_t expected = static_cast<size_t>(count * static_cast<uint64_t>(item_size(a.dtype)));
  if (bytes.size() - at != expected)
    fail("{}: {} bytes of data for shape {} of {} (expected {}): truncated or damaged", file,
         bytes.size() - at, shape_text(a.shape), a.dtype, expected);
  a.data = bytes.subspan(at);
  return a;
}

namespace {

// The classes: those of the train split (its largest label + 1, or class_names.txt). `top` is
// this split's largest label.
std::pair<int, std::vector<std::string>> read_classes(const std::string& dir, Split split,
                                                      int64_t top, const std::string& labels_file) {
  std::vector<std::string> names;
  std::ifstream names_in((std::filesystem::path(dir) / "class_names.txt").string());
  for (std::string line; std::getline(names_in, line);)
    if (!line.empty()) names.push_back(line);
  int classes = static_cast<int>(top + 1);
  if (split == Split::test || !names.empty()) {
    if (names.empty()) {
      const std::vector<uint8_t> train_bytes = read_file(dir + "/train_labels.npy");
      const NpyArray train = parse_npy(train_bytes, dir + "/train_labels.npy");
      int64_t train_top = -1;
      for (int64_t i = 0; i < train.shape[0]; ++i)
        train_top = std::max(train_top, integer_at(train, i));
      classes = static_cast<int>(train_top + 1);
    } else {
      classes = static_cast<int>(names.size());
    }
    if (top >= classes)
      fail("{}: label {} but the data set has {} classes ({})", labels_file, top, classes,
           names.empty() ? "the train split's largest label + 1" : "class_names.txt");
  }
  if (classes < 2)
    fail("{}: {} class{}: at least 2 are needed", labels_file, classes, classes == 1 ? "" : "es");
  return {classes, names};
}

// (N, H, W[, C]) uint8 or float32 -> (N, C, H, W) u8; float32 in [0, 1] is scaled to [0, 255].
Tensor to_nchw(const NpyArray& images, const std::string& images_file) {
  const auto& s = images.shape;
  const int64_t n = s[0], h = s[1], w = s[2], c = s.size() == 4 ? s[3] : 1;
  Tensor result(Shape{n, c, h, w}, DType::u8);
  uint8_t* out = result.data<uint8_t>();
  const int64_t count = n * h * w * c;
  float scale = 1;
  if (images.dtype == "<f4") {
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < count; ++i) {
      float v;
      std::memcpy(&v, images.data.data() + i * 4, 4);
      if (!std::isfinite(v))
        fail("{}: value {} at element {} (expected finite pixels)", images_file, v, i);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (lo < 0 || hi > 255)
      fail("{}: float32 pixels from {} to {} (expected [0, 1] or [0, 255])", images_file, lo, hi);
    scale = hi <= 1 ? 255.0f : 1.0f;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        for (int64_t k = 0; k < c; ++k) {
          const int64_t from = ((i * h + y) * w + x) * c + k;
          uint8_t v = 0;
          if (images.dtype == "|u1") {
            v = images.data[static_cast<size_t>(from)];
          } else {
            float f;
            std::memcpy(&f, images.data.data() + from * 4, 4);
            v = static_cast<uint8_t>(std::lround(f * scale));
          }
          out[((i * c + k) * h + y) * w + x] = v;
        }
  return result;
}

}  // namespace

Dataset read_npy(const std::string& dir, Split split) {
  const std::string prefix = (std::filesystem::path(dir) / split_name(split)).string();
  const std::string images_file = prefix + "_images.npy", labels_file = prefix + "_labels.npy";
  const std::vector<uint8_t> image_bytes = read_file(images_file);
  const std::vector<uint8_t> label_bytes = read_file(labels_file);
  const NpyArray images = parse_npy(image_bytes, images_file);
  const NpyArray labels = parse_npy(label_bytes, labels_file);

  const auto& s = images.shape;
  const bool hwc = s.size() == 4;
  if ((s.size() != 3 && !hwc) || (hwc && s[3] != 1 && s[3] != 3))
    fail("{}: images of shape {}: expected (N, H, W) or (N, H, W, C) with C = 1 or 3", images_file,
         shape_text(s));
  if (images.dtype != "|u1" && images.dtype != "<f4")
    fail("{}: images of dtype {}: expected uint8 or float32", images_file, images.dtype);
  if (labels.shape.size() != 1 || labels.dtype[1] == 'f')
    fail("{}: labels of shape {} and dtype {}: expected (N,) integers", labels_file,
         shape_text(labels.shape), labels.dtype);
  const int64_t n = s[0];
  if (labels.shape[0] != n)
    fail("{}: {} labels for the {} images of {}", labels_file, labels.shape[0], n, images_file);

  Dataset d;
  d.labels = Tensor(Shape{n}, DType::i32);
  int64_t top = -1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = integer_at(labels, i);
    if (label < 0 || label > 1000000)
      fail("{}: label {} of example {} (expected a class index >= 0)", labels_file, label, i);
    d.labels.data<int32_t>()[i] = static_cast<int32_t>(label);
    top = std::max(top, label);
  }
  const auto [classes, names] = read_classes(dir, split, top, labels_file);
  d.num_classes = classes;
  d.class_names = names;
  d.images = to_nchw(images, images_file);
  return d;
}

std::vector<uint8_t> npy_bytes(std::span<const float> values, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ",";
  if (shape.size() > 1) dims.pop_back();  // (3,) but (3, 4)
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // The magic (6), version (2) and length (2) bytes, the header, then spaces and a newline so
  // that the data starts at a multiple of 64 bytes.
  const size_t used = 10 + header.size() + 1;
  header += std::string((64 - used % 64) % 64, ' ') + "\n";
  std::string head = "\x93NUMPY";
  head += {'\x01', '\x00', static_cast<char>(header.size() & 0xff),
           static_cast<char>(header.size() >> 8)};
  head += header;
  std::vector<uint8_t> bytes(head.size() + values.size_bytes());
  std::memcpy(bytes.data(), head.data(), head.size());
  std::memcpy(bytes.data() + head.size(), values.data(), values.size_bytes());
  return bytes;
}

}  // namespace tower
