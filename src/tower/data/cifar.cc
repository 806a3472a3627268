#include "tower/data/cifar.h"

#include <cstring>

#include "tower/core/error.h"
#include "tower/data/file_io.h"

namespace tower {

CifarLayout cifar10_layout() { return {.label_bytes = 1, .label_index = 0, .num_classes = 10}; }

CifarLayout cifar100_layout(Cifar100Label label) {
  return label == Cifar100Label::coarse
             ? CifarLayout{.label_bytes = 2, .label_index = 0, .num_classes = 20}
             : CifarLayout{.label_bytes = 2, .label_index = 1, .num_classes = 100};
}

void decode_cifar_records(std::span<const uint8_t> bytes, const CifarLayout& layout,
                          const std::string& file, std::vector<uint8_t>& images,
                          std::vector<int32_t>& labels) {
  const size_t record = static_cast<size_t>(layout.label_bytes + kCifarImageBytes);
  if (bytes.empty()) fail("{}: file is empty; expected CIFAR records of {} bytes", file, record);
  if (bytes.size() % record != 0)
    fail(
        "{}: size {} bytes is not a whole number of {}-byte CIFAR records ({} label byte{} + "
        "3x32x32 image); the file is truncated or not a CIFAR binary file",
        file, bytes.size(), record, layout.label_bytes, layout.label_bytes == 1 ? "" : "s");
  const size_t n = bytes.size() / record;
  images.reserve(images.size() + n * kCifarImageBytes);
  labels.reserve(labels.size() + n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* r = bytes.data() + i * record;
    int label = r[layout.label_index];
    if (label >= layout.num_classes)
      fail("{}: record {} has label {}, out of range [0, {})", file, i, label, layout.num_classes);
    labels.push_back(label);
    images.insert(images.end(), r + layout.label_bytes, r + record);
  }
}

std::vector<std::string> cifar_file_names(DatasetFormat format, Split split) {
  if (format == DatasetFormat::cifar100) return {split == Split::train ? "train.bin" : "test.bin"};
  TOWER_CHECK(format == DatasetFormat::cifar10);
  if (split == Split::test) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back(fmt::format("data_batch_{}.bin", i));
  return names;
}

namespace {

Dataset read_cifar(const std::string& dir, DatasetFormat format, Split split,
                   const CifarLayout& layout, std::string name) {
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
  for (const std::string& file : cifar_file_names(format, split)) {
    std::string path = dir + "/" + file;
    decode_cifar_records(read_file(path), layout, path, images, labels);
  }
  Dataset dataset;
  dataset.name = std::move(name);
  dataset.num_classes = layout.num_classes;
  const int64_t n = static_cast<int64_t>(labels.size());
  dataset.images = Tensor(Shape{n, kCifarChannels, kCifarHeight, kCifarWidth}, DType::u8);
  std::memcpy(dataset.images.raw_data(), images.data(), images.size());
  dataset.labels = Tensor::from_vector(Shape{n}, labels);
  return dataset;
}

}  // namespace

Dataset read_cifar10(const std::string& dir, Split split) {
  return read_cifar(dir, DatasetFormat::cifar10, split, cifar10_layout(),
                    fmt::format("cifar10:{} ({})", dir, split_name(split)));
}

Dataset read_cifar100(const std::string& dir, Split split, Cifar100Label label) {
  return read_cifar(
      dir, DatasetFormat::cifar100, split, cifar100_layout(label),
      fmt::format("cifar100{}:{} ({})", label == Cifar100Label::coarse ? "-coarse" : "", dir,
                  split_name(split)));
}

}  // namespace tower
