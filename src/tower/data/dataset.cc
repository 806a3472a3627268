#include "tower/data/dataset.h"

#include "tower/core/error.h"
#include "tower/data/cifar.h"
#include "tower/data/idx.h"
#include "tower/data/image_folder.h"
#include "tower/data/npy.h"

namespace tower {

Shape Dataset::image_shape() const {
  const Shape& s = images.shape();
  TOWER_CHECK(s.rank() == 4);
  return Shape{s[1], s[2], s[3]};
}

std::string_view split_name(Split split) { return split == Split::train ? "train" : "test"; }

DatasetSpec parse_dataset_spec(std::string_view text) {
  DatasetSpec spec;
  spec.text = std::string(text);
  if (text == "fashion-mnist") {
    spec.format = DatasetFormat::idx;
    spec.dir = std::string(kFashionMnistDir);
    return spec;
  }
  size_t colon = text.find(':');
  std::string_view kind = text.substr(0, colon);
  std::string_view dir = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  if (kind == "cifar10") {
    spec.format = DatasetFormat::cifar10;
  } else if (kind == "cifar100") {
    spec.format = DatasetFormat::cifar100;
  } else if (kind == "cifar100-coarse") {
    spec.format = DatasetFormat::cifar100;
    spec.cifar100_label = Cifar100Label::coarse;
  } else if (kind == "idx") {
    spec.format = DatasetFormat::idx;
  } else if (kind == "folder") {
    spec.format = DatasetFormat::folder;
  } else if (kind == "npy") {
    spec.format = DatasetFormat::npy;
  } else {
    fail(
        "unknown data set '{}'; expected fashion-mnist, idx:DIR, cifar10:DIR, cifar100:DIR, "
        "cifar100-coarse:DIR, folder:DIR (JPEG/PNG images in class folders) or npy:DIR (NumPy "
        "arrays)",
        text);
  }
  if (dir.empty()) fail("data set '{}' names no directory; expected {}:DIR", text, kind);
  spec.dir = std::string(dir);
  return spec;
}

Dataset open_dataset(const DatasetSpec& spec, Split split) {
  Dataset dataset;
  switch (spec.format) {
    case DatasetFormat::cifar10:
      dataset = read_cifar10(spec.dir, split);
      break;
    case DatasetFormat::cifar100:
      dataset = read_cifar100(spec.dir, split, spec.cifar100_label);
      break;
    case DatasetFormat::idx:
      dataset = read_idx(spec.dir, split);
      break;
    case DatasetFormat::folder:
      dataset = read_image_folder(spec.dir, split,
                                  {.image_shape = spec.image_shape,
                                   .test_fraction = spec.test_fraction,
                                   .skip_bad_images = spec.skip_bad_images,
                                   .report = spec.report});
      break;
    case DatasetFormat::npy:
      dataset = read_npy(spec.dir, split);
      break;
  }
  if (dataset.class_names.empty())
    dataset.class_names = default_class_names(spec.format, spec.dir, dataset.num_classes);
  if (!spec.text.empty()) dataset.name = fmt::format("{} ({})", spec.text, split_name(split));
  return dataset;
}

std::vector<std::string> default_class_names(DatasetFormat format, const std::string& dir,
                                             int num_classes) {
  static const std::vector<std::string> fashion = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  static const std::vector<std::string> cifar10 = {
      "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  if (format == DatasetFormat::idx && dir == kFashionMnistDir && num_classes == 10) return fashion;
  if (format == DatasetFormat::cifar10 && num_classes == 10) return cifar10;
  std::vector<std::string> names;
  for (int c = 0; c < num_classes; ++c) names.push_back(std::to_string(c));
  return names;
}

}  // namespace tower
