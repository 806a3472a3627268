// A user's own data: image folders (decoding, the size rule, splits, the cache) and .npy arrays,
// each with its round trip and its bad inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/data_test_util.h"
#include "tower/core/philox.h"
#include "tower/data/file_io.h"
#include "tower/data/image_decode.h"
#include "tower/data/image_folder.h"
#include "tower/data/npy.h"
#include "tower/io/png.h"

namespace tower {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// Random HWC pixels of an image.
std::vector<uint8_t> random_pixels(int h, int w, int c, uint64_t seed) {
  Philox rng(seed, 1);
  std::vector<uint8_t> p(static_cast<size_t>(h * w * c));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(rng.below(i, 256));
  return p;
}

void write_png(const std::string& path, const std::vector<uint8_t>& pixels, int h, int w, int c) {
  write_bytes(path, png_encode(pixels.data(), h, w, c));
}

TEST(ImageDecodeTest, PngIsLosslessInEveryMode) {
  for (int c : {1, 3, 4}) {
    const auto pixels = random_pixels(7, 5, c, static_cast<uint64_t>(c));
    DecodedImage image = decode_image(png_encode(pixels.data(), 7, 5, c), "x.png");
    ASSERT_EQ(image.height, 7);
    ASSERT_EQ(image.width, 5);
    ASSERT_EQ(image.channels, c);
    EXPECT_EQ(image.pixels, pixels) << c << " channels";
  }
}

TEST(ImageDecodeTest, ChannelsAndTheSizeRule) {
  // Grey from RGB with Pillow's weights; RGB from grey repeats it; RGBA drops alpha.
  DecodedImage rgba{1, 2, 4, {255, 0, 0, 7, 10, 20, 30, 255}};
  DecodedImage grey = convert_channels(rgba, 1);
  EXPECT_EQ(grey.pixels, (std::vector<uint8_t>{76, 18}));  // Pillow: 76 and 18
  EXPECT_EQ(convert_channels(grey, 3).pixels, (std::vector<uint8_t>{76, 76, 76, 18, 18, 18}));
  EXPECT_EQ(convert_channels(rgba, 3).pixels, (std::vector<uint8_t>{255, 0, 0, 10, 20, 30}));

  // The same size: the pixels themselves, as CHW planes.
  const auto pixels = random_pixels(4, 6, 3, 9);
  std::vector<uint8_t> out(4 * 6 * 3);
  fit_image({4, 6, 3, pixels}, 4, 6, out.data());
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 6; ++x)
      for (int k = 0; k < 3; ++k) ASSERT_EQ(out[(k * 4 + y) * 6 + x], pixels[(y * 6 + x) * 3 + k]);

  // A wide image is resized to the target's height and cropped in the middle: columns 4..11 of a
  // 16-wide image whose left and right quarters are black and middle white become all white.
  std::vector<uint8_t> wide(8 * 16, 0);
  for (int y = 0; y < 8; ++y)
    for (int x = 4; x < 12; ++x) wide[y * 16 + x] = 255;
  std::vector<uint8_t> crop(8 * 8);
  fit_image({8, 16, 1, wide}, 8, 8, crop.data());
  for (uint8_t v : crop) ASSERT_EQ(v, 255);
  // Shrinking a constant image keeps it constant (the filter's weights add up to one).
  std::vector<uint8_t> flat(40 * 30, 77), small(5 * 5);
  fit_image({40, 30, 1, flat}, 5, 5, small.data());
  for (uint8_t v : small) ASSERT_EQ(v, 77);
}

TEST(ImageDecodeTest, CorruptAndTruncatedImagesNameTheFile) {
  const auto pixels = random_pixels(8, 8, 3, 1);
  std::vector<uint8_t> png = png_encode(pixels.data(), 8, 8, 3);
  std::vector<uint8_t> truncated(png.begin(), png.begin() + static_cast<long>(png.size() / 2));
  expect_error([&] { decode_image(truncated, "cut.png"); }, {"cut.png", "PNG"});
  std::vector<uint8_t> flipped = png;
  flipped[png.size() / 2] ^= 0x40;  // inside the compressed data: the CRC no longer matches
  expect_error([&] { decode_image(flipped, "flip.png"); }, {"flip.png", "corrupt"});
  expect_error(
      [&] {
        decode_image(std::vector<uint8_t>{0xff, 0xd8, 0xff, 0xe0, 0, 1}, "a.jpg");
      },
      {"a.jpg", "JPEG"});
  expect_error(
      [&] {
        decode_image(std::vector<uint8_t>{'G', 'I', 'F', '8'}, "a.gif");
      },
      {"a.gif", "neither a JPEG nor a PNG"});
}

// DIR/<class>/<n>.png for classes b, a, c (listed out of order), 32x32 RGB.
void make_folder(const std::string& dir, int per_class) {
  int i = 0;
  for (const char* c : {"b", "a", "c"})
    for (int k = 0; k < per_class; ++k, ++i)
      write_png(dir + "/" + c + "/" + std::to_string(k) + ".png", random_pixels(32, 32, 3, i), 32,
                32, 3);
}

FolderOptions rgb32() {
  return {.image_shape = Shape{3, 32, 32}, .test_fraction = 0.25, .threads = 2};
}

TEST(ImageFolderTest, ClassesSortedSplitByHashAndStable) {
  TempDir dir;
  make_folder(dir.path(), 20);
  write_bytes(dir.file("readme.txt"), {'h', 'i'});
  write_bytes(dir.file("a/notes.md"), {'h', 'i'});
  FolderListing listing = list_image_folder(dir.path(), 0.25);
  EXPECT_EQ(listing.classes, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(listing.ignored, 2);
  EXPECT_EQ(listing.train.size() + listing.test.size(), 60u);
  EXPECT_GT(listing.test.size(), 5u);
  EXPECT_LT(listing.test.size(), 30u);
  for (const FolderEntry& e : listing.train) EXPECT_EQ(e.label, e.path[0] - 'a') << e.path;

  // New images move no old one between the splits.
  write_png(dir.file("a/new.png"), random_pixels(32, 32, 3, 99), 32, 32, 3);
  FolderListing more = list_image_folder(dir.path(), 0.25);
  for (const FolderEntry& e : listing.test)
    EXPECT_TRUE(std::any_of(more.test.begin(), more.test.end(), [&](const FolderEntry& m) {
      return m.path == e.path;
    })) << e.path;
}

TEST(ImageFolderTest, TrainAndTestFoldersAreTheSplits) {
  TempDir dir;
  make_folder(dir.path() + "/train", 3);
  make_folder(dir.path() + "/val", 1);
  FolderListing listing = list_image_folder(dir.path(), 0.5);
  EXPECT_EQ(listing.train.size(), 9u);
  EXPECT_EQ(listing.test.size(), 3u);
  write_png(dir.file("val/zebra/1.png"), random_pixels(32, 32, 3, 5), 32, 32, 3);
  expect_error([&] { list_image_folder(dir.path(), 0.5); }, {"zebra", "no counterpart"});
}

TEST(ImageFolderTest, DecodedPixelsLabelsAndTheCacheRoundTrip) {
  TempDir dir;
  make_folder(dir.path(), 4);
  Dataset first =
      read_image_folder(dir.path(), Split::train,
                        {.image_shape = Shape{3, 32, 32}, .test_fraction = 0.01, .threads = 2});
  ASSERT_EQ(first.size(), 12);
  EXPECT_EQ(first.class_names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(fs::exists(dir.file(".tower-cache/train-3x32x32.bin")));
  // Image k of class "a" (listed second when written: seeds 4..7) is pixel for pixel the PNG.
  const auto a0 = random_pixels(32, 32, 3, 4);
  const uint8_t* img = first.images.data<uint8_t>();
  EXPECT_EQ(first.labels.data<int32_t>()[0], 0);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x)
      for (int k = 0; k < 3; ++k) ASSERT_EQ(img[(k * 32 + y) * 32 + x], a0[(y * 32 + x) * 3 + k]);

  // The second read maps the cache: same bytes, no decoding (the PNGs are gone from memory's view:
  // make one unreadable and the cache still serves, since its key is unchanged).
  Dataset second = read_image_folder(dir.path(), Split::train,
                                     {.image_shape = Shape{3, 32, 32}, .test_fraction = 0.01});
  EXPECT_NE(second.backing, nullptr);
  ASSERT_EQ(second.images.nbytes(), first.images.nbytes());
  EXPECT_EQ(std::memcmp(second.images.raw_data(), first.images.raw_data(), first.images.nbytes()),
            0);
  EXPECT_EQ(second.labels.to_vector<int32_t>(), first.labels.to_vector<int32_t>());

  // A changed image (another size) and a truncated cache are decoded again, never trusted.
  write_png(dir.file("a/0.png"), random_pixels(32, 32, 3, 1234), 32, 32, 3);
  fs::last_write_time(dir.file("a/0.png"),
                      fs::file_time_type::clock::now() + std::chrono::hours(1));
  Dataset changed = read_image_folder(dir.path(), Split::train,
                                      {.image_shape = Shape{3, 32, 32}, .test_fraction = 0.01});
  EXPECT_EQ(changed.images.data<uint8_t>()[0], random_pixels(32, 32, 3, 1234)[0]);
  fs::resize_file(dir.file(".tower-cache/train-3x32x32.bin"), 1000);
  Dataset rebuilt = read_image_folder(dir.path(), Split::train,
                                      {.image_shape = Shape{3, 32, 32}, .test_fraction = 0.01});
  EXPECT_EQ(
      std::memcmp(rebuilt.images.raw_data(), changed.images.raw_data(), changed.images.nbytes()),
      0);
  // Another size is another cache file.
  Dataset grey = read_image_folder(dir.path(), Split::train,
                                   {.image_shape = Shape{1, 16, 16}, .test_fraction = 0.01});
  EXPECT_EQ(grey.image_shape(), (Shape{1, 16, 16}));
  EXPECT_TRUE(fs::exists(dir.file(".tower-cache/train-1x16x16.bin")));
}

TEST(ImageFolderTest, BadFoldersAndImagesAreNamed) {
  TempDir dir;
  expect_error([&] { list_image_folder(dir.file("nope"), 0.1); }, {"nope", "does not exist"});
  make_folder(dir.path(), 2);
  fs::create_directories(dir.file("d"));
  expect_error([&] { list_image_folder(dir.path(), 0.1); },
               {"class folder", "/d'", "no JPEG or PNG"});
  fs::remove_all(dir.file("d"));
  TempDir one;
  write_png(one.file("only/1.png"), random_pixels(8, 8, 3, 1), 8, 8, 3);
  expect_error([&] { list_image_folder(one.path(), 0.1); }, {"1 class folder", "at least 2"});

  write_bytes(dir.file("b/broken.png"), {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0});
  FolderOptions strict = rgb32();
  strict.test_fraction = 0.01;  // every image in training
  expect_error([&] { read_image_folder(dir.path(), Split::train, strict); },
               {"b/broken.png", "--skip_bad_images"});
  FolderOptions skip = strict;
  skip.skip_bad_images = true;
  Dataset d = read_image_folder(dir.path(), Split::train, skip);
  EXPECT_EQ(d.size(), 6);
  // The cache that run wrote serves a run without the flag too: it names the bad image.
  expect_error([&] { read_image_folder(dir.path(), Split::train, strict); },
               {"b/broken.png", "--skip_bad_images", "1 of"});
  EXPECT_EQ(read_image_folder(dir.path(), Split::train, skip).size(), 6);
}

// The cache's pixels and labels carry checksums: a flipped bit is named and the images are
// decoded again, never trained on.
TEST(ImageFolderTest, ADamagedCacheIsNamedAndRebuilt) {
  TempDir dir;
  make_folder(dir.path(), 2);
  FolderOptions o = rgb32();
  o.test_fraction = 0.01;
  const Dataset first = read_image_folder(dir.path(), Split::train, o);
  const std::vector<uint8_t> pixels(first.images.data<uint8_t>(),
                                    first.images.data<uint8_t>() + first.images.numel());
  const std::string cache = dir.file(".tower-cache/train-3x32x32.bin");
  const auto flip = [&](size_t from_end) {
    std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-static_cast<std::streamoff>(from_end), std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-static_cast<std::streamoff>(from_end), std::ios::end);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  };
  flip(1);  // the last image's last pixel
  ::testing::internal::CaptureStderr();
  const Dataset again = read_image_folder(dir.path(), Split::train, o);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("image 5 of the cache"), std::string::npos) << said;
  EXPECT_NE(said.find("fails its checksum: decoding the images again"), std::string::npos) << said;
  EXPECT_EQ(std::vector<uint8_t>(again.images.data<uint8_t>(),
                                 again.images.data<uint8_t>() + again.images.numel()),
            pixels);
  // The first label: 64-byte blocks of labels, checksums and file sizes precede the pixels.
  flip(first.images.nbytes() + 3 * 64);
  ::testing::internal::CaptureStderr();
  read_image_folder(dir.path(), Split::train, o);
  const std::string labels = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(labels.find("the cache's labels fail their checksum"), std::string::npos) << labels;
}

// A .npy file's bytes: format 1.0 (or 2.0), C order.
std::vector<uint8_t> npy(const std::string& descr, const std::string& shape,
                         const std::vector<uint8_t>& data, int major = 1, bool fortran = false) {
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  const size_t fixed = major == 1 ? 10 : 12;
  while ((fixed + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t n = header.size();
  bytes.push_back(static_cast<uint8_t>(n & 0xff));
  bytes.push_back(static_cast<uint8_t>(n >> 8));
  if (major > 1) bytes.insert(bytes.end(), {0, 0});
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

TEST(NpyTest, ImagesAndLabelsRoundTripInEveryForm) {
  TempDir dir;
  // 4 images of 2x2 RGB (NHWC), labels as int64, then as uint8 for the test split.
  std::vector<uint8_t> pixels(4 * 2 * 2 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 5);
  std::vector<uint8_t> labels64(4 * 8, 0);
  for (int i = 0; i < 4; ++i) labels64[static_cast<size_t>(i * 8)] = static_cast<uint8_t>(i % 2);
  write_bytes(dir.file("train_images.npy"), npy("|u1", "(4, 2, 2, 3)", pixels, 2));
  write_bytes(dir.file("train_labels.npy"), npy("<i8", "(4,)", labels64));
  // Test images as float32 in [0, 1], NHW grey... of the wrong channel count for train: allowed
  // per file, so use RGB here too.
  std::vector<uint8_t> floats(2 * 2 * 2 * 3 * 4);
  for (size_t i = 0; i < floats.size() / 4; ++i) {
    const float v = static_cast<float>(i) / 23.0f;
    std::memcpy(floats.data() + i * 4, &v, 4);
  }
  write_bytes(dir.file("test_images.npy"), npy("<f4", "(2, 2, 2, 3)", floats));
  write_bytes(dir.file("test_labels.npy"), npy("|u1", "(2,)", {1, 0}));

  Dataset train = read_npy(dir.path(), Split::train);
  ASSERT_EQ(train.images.shape(), (Shape{4, 3, 2, 2}));
  EXPECT_EQ(train.num_classes, 2);
  EXPECT_EQ(train.labels.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 0, 1}));
  // NHWC -> NCHW: image 1, channel 2, (y 1, x 0) is element ((1 * 2 + 1) * 2 + 0) * 3 + 2.
  EXPECT_EQ(train.images.data<uint8_t>()[((1 * 3 + 2) * 2 + 1) * 2 + 0],
            pixels[((1 * 2 + 1) * 2) * 3 + 2]);
  Dataset test = read_npy(dir.path(), Split::test);
  EXPECT_EQ(test.images.data<uint8_t>()[0], 0);
  EXPECT_EQ(test.images.data<uint8_t>()[test.images.numel() - 1], 255);  // 23/23 * 255
  EXPECT_EQ(test.labels.to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
}

TEST(NpyTest, BadFilesAreNamed) {
  TempDir dir;
  const std::vector<uint8_t> four(4, 1);
  expect_error(
      [&] {
        parse_npy(std::vector<uint8_t>{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0}, "a.npy");
      },
      {"a.npy", "magic"});
  auto good = npy("|u1", "(2, 2)", four);
  std::vector<uint8_t> cut(good.begin(), good.end() - 1);
  expect_error([&] { parse_npy(cut, "cut.npy"); }, {"cut.npy", "truncated"});
  expect_error([&] { parse_npy(npy(">i4", "(1,)", four), "be.npy"); }, {"be.npy", "'>i4'"});
  expect_error([&] { parse_npy(npy("|u1", "(2, 2)", four, 1, true), "f.npy"); }, {"Fortran"});
  expect_error([&] { parse_npy(npy("<U8", "(1,)", four), "s.npy"); }, {"s.npy", "not supported"});

  write_bytes(dir.file("train_images.npy"), npy("|u1", "(2, 2, 2, 2)", std::vector<uint8_t>(16)));
  write_bytes(dir.file("train_labels.npy"), npy("|u1", "(2,)", {0, 1}));
  expect_error([&] { read_npy(dir.path(), Split::train); }, {"train_images.npy", "C = 1 or 3"});
  write_bytes(dir.file("train_images.npy"), npy("|u1", "(3, 2, 2)", std::vector<uint8_t>(12)));
  expect_error([&] { read_npy(dir.path(), Split::train); },
               {"train_labels.npy", "2 labels for the 3"});
  write_bytes(dir.file("train_images.npy"), npy("|u1", "(2, 2, 2)", std::vector<uint8_t>(8)));
  write_bytes(dir.file("train_labels.npy"), npy("|i1", "(2,)", {0, 0xff}));
  expect_error([&] { read_npy(dir.path(), Split::train); }, {"train_labels.npy", "label -1"});
  write_bytes(dir.file("train_labels.npy"), npy("|u1", "(2,)", {0, 1}));
  write_bytes(dir.file("test_images.npy"), npy("|u1", "(1, 2, 2)", four));
  write_bytes(dir.file("test_labels.npy"), npy("|u1", "(1,)", {5}));
  expect_error([&] { read_npy(dir.path(), Split::test); },
               {"test_labels.npy", "label 5", "2 classes"});
  std::vector<uint8_t> big(8 * 4);
  const float v = 300;
  std::memcpy(big.data(), &v, 4);
  write_bytes(dir.file("train_images.npy"), npy("<f4", "(2, 2, 2)", big));
  expect_error([&] { read_npy(dir.path(), Split::train); },
               {"train_images.npy", "[0, 1] or [0, 255]"});
  expect_error([&] { read_npy(dir.file("none"), Split::train); }, {"none/train_images.npy"});
}

}  // namespace
}  // namespace tower
