#include "tower/data/idx.h"

#include <sys/stat.h>

#include <cstring>
#include <limits>

#include "tower/core/error.h"
#include "tower/data/file_io.h"

namespace tower {

IdxArray decode_idx(std::span<const uint8_t> bytes, int expected_rank, const std::string& file) {
  if (bytes.size() < 4)
    fail("{}: {} bytes is too short for an IDX file (a 4-byte magic number comes first)", file,
         bytes.size());
  if (bytes[0] != 0 || bytes[1] != 0)
    fail("{}: bad IDX magic number {:02x} {:02x} {:02x} {:02x}; expected 00 00 08 {:02x}", file,
         bytes[0], bytes[1], bytes[2], bytes[3], expected_rank);
  if (bytes[2] != 0x08)
    fail("{}: IDX data type 0x{:02x} is not supported; expected unsigned bytes (0x08)", file,
         bytes[2]);
  if (bytes[3] != expected_rank)
    fail("{}: IDX file has {} dimensions; expected {}", file, bytes[3], expected_rank);
  const size_t header = 4 + 4 * static_cast<size_t>(expected_rank);
  if (bytes.size() < header)
    fail("{}: {} bytes is too short for the {}-byte IDX header", file, bytes.size(), header);
  IdxArray array;
  const uint64_t available = bytes.size() - header;
  uint64_t numel = 1;
  bool too_big = false;  // the product of the dimensions overflows 64 bits
  std::string dims_text;
  for (int d = 0; d < expected_rank; ++d) {
    const uint8_t* p = bytes.data() + 4 + 4 * d;
    uint64_t dim = (uint64_t{p[0]} << 24) | (uint64_t{p[1]} << 16) | (uint64_t{p[2]} << 8) | p[3];
    if (d > 0 && dim == 0) fail("{}: IDX dimension {} is 0", file, d);
    array.dims.push_back(static_cast<int64_t>(dim));
    dims_text += (d ? " x " : "") + std::to_string(dim);
    if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim) too_big = true;
    if (!too_big) numel *= dim;
  }
  if (too_big || numel != available)
    fail(
        "{}: IDX dimensions {} need {} data bytes after the header, but the file has {}; it is "
        "truncated or corrupt",
        file, dims_text, too_big ? std::string("more than 2^64") : std::to_string(numel),
        available);
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return array;
}

Dataset idx_dataset(const IdxArray& images, const std::string& images_file, const IdxArray& labels,
                    const std::string& labels_file, int num_classes, std::string name) {
  TOWER_CHECK(images.dims.size() == 3 && labels.dims.size() == 1);
  const int64_t n = images.dims[0];
  if (labels.dims[0] != n)
    fail("{} holds {} images but {} holds {} labels; they must agree", images_file, n, labels_file,
         labels.dims[0]);
  if (n == 0) fail("{}: holds no images", images_file);
  std::vector<int32_t> label_values(labels.data.begin(), labels.data.end());
  for (int64_t i = 0; i < n; ++i)
    if (label_values[i] >= num_classes)
      fail("{}: label {} of example {} is out of range [0, {})", labels_file, label_values[i], i,
           num_classes);
  Dataset dataset;
  dataset.name = std::move(name);
  dataset.num_classes = num_classes;
  dataset.images = Tensor(Shape{n, 1, images.dims[1], images.dims[2]}, DType::u8);
  std::memcpy(dataset.images.raw_data(), images.data.data(), images.data.size());
  dataset.labels = Tensor::from_vector(Shape{n}, label_values);
  return dataset;
}

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// NAME.gz if present, else NAME; a missing file is reported under both names.
std::string find_idx_file(const std::string& dir, const std::string& name) {
  std::string plain = dir + "/" + name;
  if (exists(plain + ".gz")) return plain + ".gz";
  if (exists(plain)) return plain;
  fail("missing IDX file: neither {}.gz nor {} exists", plain, plain);
}

}  // namespace

Dataset read_idx(const std::string& dir, Split split, int num_classes) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  std::string images_file = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  std::string labels_file = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = decode_idx(read_file_maybe_gzip(images_file), 3, images_file);
  IdxArray labels = decode_idx(read_file_maybe_gzip(labels_file), 1, labels_file);
  return idx_dataset(images, images_file, labels, labels_file, num_classes,
                     fmt::format("idx:{} ({})", dir, split_name(split)));
}

}  // namespace tower
