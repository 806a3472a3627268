#include <gtest/gtest.h>

#include <filesystem>

#include "data_test_util.h"
#include "tower/data/cifar.h"
#include "tower/data/dataset.h"
#include "tower/data/file_io.h"
#include "tower/data/idx.h"
#include "tower/data/make_dataset.h"

namespace tower {
namespace {

using testing::expect_error;
using testing::TempDir;

// A CIFAR record whose image bytes are (seed + i) mod 256, so each record is recognisable.
std::vector<uint8_t> cifar_record(std::vector<uint8_t> label_bytes, int seed) {
  std::vector<uint8_t> r = std::move(label_bytes);
  for (int i = 0; i < kCifarImageBytes; ++i) r.push_back(static_cast<uint8_t>(seed + i));
  return r;
}

void append(std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
}

TEST(Cifar10Reader, ReadsHandWrittenRecordsInFileOrder) {
  TempDir dir;
  for (int f = 1; f <= 5; ++f) {
    std::vector<uint8_t> bytes;
    for (int r = 0; r < f; ++r)
      append(bytes, cifar_record({static_cast<uint8_t>((f + r) % 10)}, 10 * f + r));
    write_file(dir.file(fmt::format("data_batch_{}.bin", f)), bytes);
  }
  write_file(dir.file("test_batch.bin"), cifar_record({9}, 77));
  Dataset train = read_cifar10(dir.path(), Split::train);
  ASSERT_EQ(train.size(), 15);
  EXPECT_EQ(train.images.shape(), (Shape{15, 3, 32, 32}));
  EXPECT_EQ(train.num_classes, 10);
  // Record 1 of data_batch_2.bin is example 1 + 1 = 2 overall.
  EXPECT_EQ(train.labels.data<int32_t>()[2], 3);
  const uint8_t* image = train.images.data<uint8_t>() + 2 * kCifarImageBytes;
  EXPECT_EQ(image[0], 21);
  EXPECT_EQ(image[1024], static_cast<uint8_t>(21 + 1024));  // first green byte
  Dataset test = read_cifar10(dir.path(), Split::test);
  ASSERT_EQ(test.size(), 1);
  EXPECT_EQ(test.labels.data<int32_t>()[0], 9);
  EXPECT_EQ(test.images.data<uint8_t>()[5], 82);
}

TEST(Cifar100Reader, PicksCoarseOrFineLabel) {
  TempDir dir;
  std::vector<uint8_t> bytes;
  append(bytes, cifar_record({19, 99}, 0));
  append(bytes, cifar_record({3, 17}, 1));
  write_file(dir.file("train.bin"), bytes);
  write_file(dir.file("test.bin"), cifar_record({0, 0}, 2));
  Dataset fine = read_cifar100(dir.path(), Split::train, Cifar100Label::fine);
  EXPECT_EQ(fine.num_classes, 100);
  EXPECT_EQ(fine.labels.to_vector<int32_t>(), (std::vector<int32_t>{99, 17}));
  EXPECT_EQ(fine.images.data<uint8_t>()[kCifarImageBytes], 1);
  Dataset coarse = read_cifar100(dir.path(), Split::train, Cifar100Label::coarse);
  EXPECT_EQ(coarse.num_classes, 20);
  EXPECT_EQ(coarse.labels.to_vector<int32_t>(), (std::vector<int32_t>{19, 3}));
  EXPECT_EQ(read_cifar100(dir.path(), Split::test, Cifar100Label::fine).size(), 1);
}

std::vector<uint8_t> idx_bytes(std::vector<uint32_t> dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 8, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  append(b, data);
  return b;
}

void write_idx_pair(const TempDir& dir, const std::string& prefix, int n, bool gz) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * 6), labels;
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < n; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  auto images = idx_bytes({static_cast<uint32_t>(n), 2, 3}, pixels);
  auto label_file = idx_bytes({static_cast<uint32_t>(n)}, labels);
  const std::string ext = gz ? ".gz" : "";
  write_file(dir.file(prefix + "-images-idx3-ubyte" + ext), gz ? gzip(images) : images);
  write_file(dir.file(prefix + "-labels-idx1-ubyte" + ext), gz ? gzip(label_file) : label_file);
}

TEST(IdxReader, ReadsPlainAndGzipFiles) {
  TempDir dir;
  write_idx_pair(dir, "train", 12, /*gz=*/true);
  write_idx_pair(dir, "t10k", 3, /*gz=*/false);
  Dataset train = read_idx(dir.path(), Split::train);
  EXPECT_EQ(train.images.shape(), (Shape{12, 1, 2, 3}));
  EXPECT_EQ(train.labels.data<int32_t>()[11], 1);
  EXPECT_EQ(train.images.data<uint8_t>()[6 * 11 + 5], 6 * 11 + 5);
  Dataset test = read_idx(dir.path(), Split::test);
  EXPECT_EQ(test.images.shape(), (Shape{3, 1, 2, 3}));
  EXPECT_EQ(test.num_classes, 10);
}

TEST(Gzip, RoundTripsAndAcceptsConcatenatedMembers) {
  std::vector<uint8_t> a = {1, 2, 3}, b(100000, 7);
  EXPECT_EQ(gunzip(gzip(a), "x.gz"), a);
  std::vector<uint8_t> both = gzip(a);
  append(both, gzip(b));
  std::vector<uint8_t> expected = a;
  append(expected, b);
  EXPECT_EQ(gunzip(both, "x.gz"), expected);
}

// make_dataset's files read back as what it generated, in every format.
TEST(Readers, RoundTripGeneratedDataSets) {
  for (auto format : {DatasetFormat::cifar10, DatasetFormat::cifar100, DatasetFormat::idx}) {
    for (auto compression : {IdxCompression::gzip, IdxCompression::none}) {
      if (format != DatasetFormat::idx && compression == IdxCompression::none) continue;
      TempDir dir;
      std::string spec_text = make_dataset({.format = format,
                                            .dir = dir.path(),
                                            .num_train = 23,
                                            .num_test = 7,
                                            .seed = 5,
                                            .idx_compression = compression});
      DatasetSpec spec = parse_dataset_spec(spec_text);
      Dataset train = open_dataset(spec, Split::train);
      Dataset test = open_dataset(spec, Split::test);
      EXPECT_EQ(train.size(), 23);
      EXPECT_EQ(test.size(), 7);
      EXPECT_EQ(train.name, spec_text + " (train)");
      Shape expected = format == DatasetFormat::idx ? Shape{1, 28, 28} : Shape{3, 32, 32};
      EXPECT_EQ(train.image_shape(), expected);
      for (int64_t i = 0; i < train.size(); ++i)
        EXPECT_EQ(train.labels.data<int32_t>()[i], i % train.num_classes);
      // Same seed, same bytes.
      TempDir again;
      make_dataset({.format = format,
                    .dir = again.path(),
                    .num_train = 23,
                    .num_test = 7,
                    .seed = 5,
                    .idx_compression = compression});
      Dataset train2 = open_dataset(
          parse_dataset_spec(spec_text.substr(0, spec_text.find(':') + 1) + again.path()),
          Split::train);
      EXPECT_EQ(train.images.to_vector<uint8_t>(), train2.images.to_vector<uint8_t>());
    }
  }
}

TEST(DatasetSpec, ParsesEveryForm) {
  DatasetSpec f = parse_dataset_spec("fashion-mnist");
  EXPECT_EQ(f.format, DatasetFormat::idx);
  EXPECT_EQ(f.dir, kFashionMnistDir);
  EXPECT_EQ(parse_dataset_spec("cifar10:/a/b").format, DatasetFormat::cifar10);
  EXPECT_EQ(parse_dataset_spec("cifar10:/a/b").dir, "/a/b");
  EXPECT_EQ(parse_dataset_spec("idx:rel").dir, "rel");
  DatasetSpec c = parse_dataset_spec("cifar100:/x");
  EXPECT_EQ(c.format, DatasetFormat::cifar100);
  EXPECT_EQ(c.cifar100_label, Cifar100Label::fine);
  EXPECT_EQ(parse_dataset_spec("cifar100-coarse:/x").cifar100_label, Cifar100Label::coarse);
  expect_error([] { parse_dataset_spec("mnist"); }, {"unknown data set 'mnist'"});
  expect_error([] { parse_dataset_spec("cifar10:"); }, {"no directory"});
  expect_error([] { parse_dataset_spec("cifar10"); }, {"no directory"});
}

// ---- Corrupt input: each failure names the file and what was wrong. ----

class Cifar10Corrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    make_dataset(
        {.format = DatasetFormat::cifar10, .dir = dir.path(), .num_train = 10, .num_test = 2});
  }
  TempDir dir;
};

TEST_F(Cifar10Corrupt, MissingFile) {
  std::filesystem::remove(dir.file("data_batch_3.bin"));
  expect_error([&] { read_cifar10(dir.path(), Split::train); },
               {dir.file("data_batch_3.bin"), "cannot open"});
}

TEST_F(Cifar10Corrupt, NotAWholeNumberOfRecords) {
  auto bytes = read_file(dir.file("test_batch.bin"));
  bytes.pop_back();
  write_file(dir.file("test_batch.bin"), bytes);
  expect_error([&] { read_cifar10(dir.path(), Split::test); },
               {dir.file("test_batch.bin"), "6145 bytes", "not a whole number of 3073-byte"});
}

TEST_F(Cifar10Corrupt, EmptyFile) {
  write_file(dir.file("data_batch_5.bin"), {});
  expect_error([&] { read_cifar10(dir.path(), Split::train); },
               {dir.file("data_batch_5.bin"), "empty"});
}

TEST_F(Cifar10Corrupt, LabelOutOfRange) {
  auto bytes = read_file(dir.file("test_batch.bin"));
  bytes[3073] = 10;  // label of record 1
  write_file(dir.file("test_batch.bin"), bytes);
  expect_error([&] { read_cifar10(dir.path(), Split::test); },
               {dir.file("test_batch.bin"), "record 1 has label 10", "[0, 10)"});
}

TEST(Cifar100Corrupt, LabelsOutOfRangeAndWrongSize) {
  TempDir dir;
  make_dataset(
      {.format = DatasetFormat::cifar100, .dir = dir.path(), .num_train = 4, .num_test = 2});
  auto bytes = read_file(dir.file("train.bin"));
  bytes[0] = 20;  // coarse label of record 0: fine labels still valid
  write_file(dir.file("train.bin"), bytes);
  EXPECT_NO_THROW(read_cifar100(dir.path(), Split::train, Cifar100Label::fine));
  expect_error([&] { read_cifar100(dir.path(), Split::train, Cifar100Label::coarse); },
               {dir.file("train.bin"), "label 20", "[0, 20)"});
  bytes[1] = 100;
  write_file(dir.file("train.bin"), bytes);
  expect_error([&] { read_cifar100(dir.path(), Split::train, Cifar100Label::fine); },
               {dir.file("train.bin"), "label 100", "[0, 100)"});
  // A CIFAR-10 file (1 label byte) is not a whole number of CIFAR-100 records.
  write_file(dir.file("test.bin"), std::vector<uint8_t>(3073 * 3, 0));
  expect_error([&] { read_cifar100(dir.path(), Split::test, Cifar100Label::fine); },
               {dir.file("test.bin"), "3074-byte"});
  std::filesystem::remove(dir.file("test.bin"));
  expect_error([&] { read_cifar100(dir.path(), Split::test, Cifar100Label::fine); },
               {dir.file("test.bin"), "cannot open"});
}

class IdxCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    make_dataset({.format = DatasetFormat::idx,
                  .dir = dir.path(),
                  .num_train = 20,
                  .num_test = 5,
                  .idx_compression = IdxCompression::none});
  }
  // Rewrites a plain file after `edit`.
  void edit(const std::string& name, const std::function<void(std::vector<uint8_t>&)>& fn) {
    auto bytes = read_file(dir.file(name));
    fn(bytes);
    write_file(dir.file(name), bytes);
  }
  TempDir dir;
  const std::string images = "train-images-idx3-ubyte", labels = "train-labels-idx1-ubyte";
};

TEST_F(IdxCorrupt, MissingFile) {
  std::filesystem::remove(dir.file(labels));
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(labels) + ".gz", dir.file(labels), "missing"});
}

TEST_F(IdxCorrupt, BadMagic) {
  edit(images, [](auto& b) { b[0] = 0x1f; });
  expect_error([&] { read_idx(dir.path(), Split::train); }, {dir.file(images), "bad IDX magic"});
}

TEST_F(IdxCorrupt, UnsupportedType) {
  edit(images, [](auto& b) { b[2] = 0x0d; });
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(images), "data type 0x0d", "0x08"});
}

TEST_F(IdxCorrupt, WrongNumberOfDimensions) {
  edit(labels, [](auto& b) { b[3] = 3; });
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(labels), "3 dimensions; expected 1"});
}

TEST_F(IdxCorrupt, DimensionsDisagreeWithSize) {
  edit(images, [](auto& b) { b.erase(b.end() - 100, b.end()); });
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(images), "20 x 28 x 28", "15680", "truncated"});
  edit(images, [](auto& b) { b[4] = 0xff; });  // absurd image count
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(images), "4278190100 x 28 x 28 need 3354101038400 data bytes"});
  edit(images, [](auto& b) { b[8] = b[12] = 0xff; });  // the product overflows 64 bits
  expect_error([&] { read_idx(dir.path(), Split::train); }, {dir.file(images), "more than 2^64"});
  edit(images, [](auto& b) { b.resize(10); });  // header cut short
  expect_error([&] { read_idx(dir.path(), Split::train); }, {dir.file(images), "too short"});
}

TEST_F(IdxCorrupt, ZeroDimension) {
  edit(images, [](auto& b) { b[8] = b[9] = b[10] = b[11] = 0; });
  expect_error([&] { read_idx(dir.path(), Split::train); }, {dir.file(images), "dimension 1 is 0"});
}

TEST_F(IdxCorrupt, ImageAndLabelCountsDisagree) {
  edit(labels, [](auto& b) {
    b[7] = 19;
    b.pop_back();
  });
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(images), "20 images", dir.file(labels), "19 labels"});
}

TEST_F(IdxCorrupt, LabelOutOfRange) {
  edit(labels, [](auto& b) { b[8 + 4] = 10; });
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(labels), "label 10 of example 4", "[0, 10)"});
}

TEST_F(IdxCorrupt, TruncatedGzip) {
  auto bytes = gzip(read_file(dir.file(images)));
  bytes.resize(bytes.size() / 2);
  write_file(dir.file(images + ".gz"), bytes);  // .gz is preferred over the plain file
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(images + ".gz"), "truncated gzip stream"});
  // Only the 8-byte trailer (CRC, size) missing.
  bytes = gzip(read_file(dir.file(images)));
  bytes.erase(bytes.end() - 8, bytes.end());
  write_file(dir.file(images + ".gz"), bytes);
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(images + ".gz"), "truncated gzip stream"});
}

TEST_F(IdxCorrupt, CorruptGzip) {
  auto bytes = gzip(read_file(dir.file(labels)));
  bytes[bytes.size() - 6] ^= 0xff;  // inside the CRC-32 / size trailer
  write_file(dir.file(labels + ".gz"), bytes);
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(labels + ".gz"), "corrupt gzip stream"});
  // A plain IDX file under a .gz name.
  write_file(dir.file(labels + ".gz"), read_file(dir.file(labels)));
  expect_error([&] { read_idx(dir.path(), Split::train); },
               {dir.file(labels + ".gz"), "corrupt gzip stream"});
  // Damage inside the deflate data: detected by the data check at the latest.
  bytes = gzip(read_file(dir.file(images)));
  for (size_t i = 20; i < 40; ++i) bytes[i] ^= 0x5a;
  write_file(dir.file(images + ".gz"), bytes);
  expect_error([&] { read_idx(dir.path(), Split::train); }, {dir.file(images + ".gz"), "gzip"});
}

TEST(FashionMnist, LoadsTheDebianPackage) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed at " << kFashionMnistDir
                 << " (apt-get install dataset-fashion-mnist)";
  DatasetSpec spec = parse_dataset_spec("fashion-mnist");
  Dataset train = open_dataset(spec, Split::train);
  Dataset test = open_dataset(spec, Split::test);
  EXPECT_EQ(train.images.shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(test.images.shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(train.num_classes, 10);
  std::vector<int64_t> counts(10, 0);
  for (int32_t label : train.labels.to_vector<int32_t>()) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++counts[static_cast<size_t>(label)];
  }
  for (int64_t c : counts) EXPECT_EQ(c, 6000);  // Fashion-MNIST is balanced
  EXPECT_EQ(train.name, "fashion-mnist (train)");
}

}  // namespace
}  // namespace tower
