// Data sets in memory, and how to open one from a command-line spec string.
//
//   DatasetSpec spec = parse_dataset_spec("cifar10:/data/cifar-10-batches-bin");
//   auto train = std::make_shared<const Dataset>(open_dataset(spec, Split::train));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tower/core/tensor.h"

namespace tower {

// A whole split of a data set, decoded to memory (all supported data sets fit easily).
struct Dataset {
  std::string name{};  // for messages, e.g. "cifar10:/data/cifar (train)"
  Tensor images{};     // (N, C, H, W), u8, channel-major as in the files
  Tensor labels{};     // (N,), i32, each in [0, num_classes)
  int num_classes = 0;
  std::vector<std::string> class_names{};  // num_classes names ("0", "1", ... where none are known)
  std::shared_ptr<const void> backing{};   // what images and labels point into (a mapped cache)
  std::string origin{};  // what the images were made from ("files of 53x57 to 108x125 pixels ...")

  int64_t size() const { return images.shape().rank() > 0 ? images.shape()[0] : 0; }
  Shape image_shape() const;  // (C, H, W)
};

enum class Split { train, test };
enum class DatasetFormat { cifar10, cifar100, idx, folder, npy };
enum class Cifar100Label { fine, coarse };  // CIFAR-100 records carry both: 100 fine / 20 coarse

// Where the real Fashion-MNIST lives when Debian's dataset-fashion-mnist is installed.
inline constexpr std::string_view kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// A data set as named on the command line:
//   fashion-mnist          IDX files of Debian's dataset-fashion-mnist (kFashionMnistDir)
//   idx:DIR                train-images-idx3-ubyte[.gz] ... t10k-labels-idx1-ubyte[.gz] in DIR
//   cifar10:DIR            data_batch_1.bin ... data_batch_5.bin, test_batch.bin in DIR
//   cifar100:DIR           train.bin, test.bin in DIR, fine labels (100 classes)
//   cifar100-coarse:DIR    the same files with the coarse labels (20 classes)
//   folder:DIR             JPEG and PNG images in class folders (image_folder.h)
//   npy:DIR                train_images.npy, train_labels.npy, test_images.npy, test_labels.npy
struct DatasetSpec {
  DatasetFormat format = DatasetFormat::idx;
  std::string dir{};
  Cifar100Label cifar100_label = Cifar100Label::fine;
  std::string text{};  // the spec as given, for names and messages
  // folder: the size images are brought to, (C, H, W); the held-out fraction without test/;
  // whether corrupt images are skipped with a warning.
  Shape image_shape{};
  double test_fraction = 0.1;
  bool skip_bad_images = false;
  bool report = true;  // progress and warnings on stderr (false on MPI ranks but 0)
};
DatasetSpec parse_dataset_spec(std::string_view text);  // throws tower::Error on a bad spec
Dataset open_dataset(const DatasetSpec& spec, Split split);

std::string_view split_name(Split split);  // "train", "test"

// The class names of the data sets that have them (Fashion-MNIST, CIFAR-10), else "0", "1", ...
std::vector<std::string> default_class_names(DatasetFormat format, const std::string& dir,
                                             int num_classes);

}  // namespace tower
