#include "tower/io/event_writer.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/python_env.h"
#include "testing/files.h"
#include "testing/tmp_dir.h"
#include "tower/core/crc32c.h"
#include "tower/core/error.h"
#include "tower/io/png.h"

namespace tower {
namespace {

using testing::contains;
using testing::read_file;
using testing::write_file;

namespace fs = std::filesystem;
using testing::TmpDir;

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + static_cast<size_t>(i)])) << (8 * i);
  return v;
}

// Splits a TFRecord file into its records, checking both CRCs of each.
std::vector<std::string> read_records(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size());
    const uint64_t length = le(bytes, at, 8);
    EXPECT_EQ(le(bytes, at + 8, 4), crc32c_mask(crc32c(bytes.data() + at, 8)));
    EXPECT_LE(at + 12 + length + 4, bytes.size());
    std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(le(bytes, at + 12 + length, 4), crc32c_mask(crc32c(data.data(), data.size())));
    records.push_back(std::move(data));
    at += 12 + length + 4;
  }
  return records;
}

// A protocol buffer message as field number -> raw values (varints as numbers in `ints`, fixed and
// length-delimited fields as bytes in `bytes`), enough to check what EventWriter encodes.
struct Message {
  std::multimap<int, uint64_t> ints;
  std::multimap<int, std::string> bytes;
  std::string one(int field) const { return bytes.find(field)->second; }
  double f64(int field) const {
    double v;
    std::memcpy(&v, one(field).data(), 8);
    return v;
  }
};

uint64_t varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    uint8_t b = static_cast<uint8_t>(s.at(at++));
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

Message parse(const std::string& s) {
  Message m;
  size_t at = 0;
  while (at < s.size()) {
    uint64_t key = varint(s, at);
    int field = static_cast<int>(key >> 3);
    switch (key & 7) {
      case 0:
        m.ints.emplace(field, varint(s, at));
        break;
      case 1:
        m.bytes.emplace(field, s.substr(at, 8));
        at += 8;
        break;
      case 5:
        m.bytes.emplace(field, s.substr(at, 4));
        at += 4;
        break;
      case 2: {
        uint64_t n = varint(s, at);
        m.bytes.emplace(field, s.substr(at, n));
        at += n;
        break;
      }
      default:
        ADD_FAILURE() << "unexpected wire type " << (key & 7);
        return m;
    }
  }
  return m;
}

std::string only_event_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  EXPECT_EQ(files.size(), 1u);
  return files.empty() ? "" : files[0];
}

TEST(EventWriterTest, FileNameAndFirstRecord) {
  TmpDir dir;
  std::string path;
  {
    EventWriter writer(dir / "logs");
    path = writer.path();
    // Visible to TensorBoard from the start, before any summary.
    EXPECT_EQ(read_records(path).size(), 1u);
  }
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir / "logs"));
  EXPECT_TRUE(name.starts_with("events.out.tfevents.")) << name;
  const long long seconds = std::stoll(name.substr(std::strlen("events.out.tfevents.")));
  EXPECT_NEAR(static_cast<double>(seconds), static_cast<double>(std::time(nullptr)), 60);

  auto records = read_records(path);
  ASSERT_EQ(records.size(), 1u);
  Message event = parse(records[0]);
  EXPECT_EQ(event.one(3), "brain.Event:2");
  EXPECT_NEAR(event.f64(1), static_cast<double>(std::time(nullptr)), 60);
}

TEST(EventWriterTest, TwoWritersInOneSecondGetTwoFiles) {
  TmpDir dir;
  EventWriter a(dir.path()), b(dir.path());
  EXPECT_NE(a.path(), b.path());
}

TEST(EventWriterTest, ScalarEncoding) {
  TmpDir dir;
  {
    EventWriter writer(dir.path());
    writer.add_scalar("loss", 0.25f, 42);
    writer.add_scalar("neg_step", 1.f, -1);
  }
  auto records = read_records(only_event_file(dir.path()));
  ASSERT_EQ(records.size(), 3u);
  Message event = parse(records[1]);
  EXPECT_EQ(event.ints.find(2)->second, 42u);
  Message summary = parse(event.one(5));
  Message value = parse(summary.one(1));
  EXPECT_EQ(value.one(1), "loss");
  float v;
  std::memcpy(&v, value.one(2).data(), 4);
  EXPECT_EQ(v, 0.25f);
  EXPECT_EQ(static_cast<int64_t>(parse(records[2]).ints.find(2)->second), -1);
}

TEST(EventWriterTest, HistogramStatisticsAndBuckets) {
  TmpDir dir;
  const std::vector<float> values = {-2.f, 0.f, 0.5f, 0.5f, 3.f, NAN, INFINITY};
  {
    EventWriter writer(dir.path());
    writer.add_histogram("w", values.data(), values.size(), 7);
    writer.add_histogram("empty", nullptr, 0, 7);
  }
  auto records = read_records(only_event_file(dir.path()));
  ASSERT_EQ(records.size(), 3u);
  Message histo = parse(parse(parse(parse(records[1]).one(5)).one(1)).one(5));
  EXPECT_EQ(histo.f64(1), -2.0);
  EXPECT_EQ(histo.f64(2), 3.0);
  EXPECT_EQ(histo.f64(3), 5.0);  // NaN and inf are left out
  EXPECT_EQ(histo.f64(4), 2.0);
  EXPECT_EQ(histo.f64(5), 4.0 + 0.25 + 0.25 + 9.0);
  std::string limits_bytes = histo.one(6), counts_bytes = histo.one(7);
  ASSERT_EQ(limits_bytes.size(), counts_bytes.size());
  std::vector<double> limits(limits_bytes.size() / 8), counts(counts_bytes.size() / 8);
  std::memcpy(limits.data(), limits_bytes.data(), limits_bytes.size());
  std::memcpy(counts.data(), counts_bytes.data(), counts_bytes.size());
  double total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    total += counts[i];
    if (i == 0) continue;
    EXPECT_LT(limits[i - 1], limits[i]);
    // Each value lies in [previous limit, limit) of a bucket that counts it.
    for (float x : {-2.f, 0.f, 0.5f, 3.f}) {
      if (limits[i - 1] <= x && x < limits[i]) {
        EXPECT_GT(counts[i], 0) << x;
      }
    }
  }
  EXPECT_EQ(total, 5.0);
  EXPECT_FALSE(parse(parse(parse(records[2]).one(5)).one(1)).bytes.empty());
}

TEST(EventWriterTest, FlushMakesRecordsVisible) {
  TmpDir dir;
  EventWriter writer(dir.path());
  for (int i = 0; i < 3; ++i) writer.add_scalar("x", static_cast<float>(i), i);
  writer.flush();
  EXPECT_EQ(read_records(writer.path()).size(), 4u);
}

TEST(EventWriterTest, ConcurrentWritersProduceWholeRecords) {
  TmpDir dir;
  {
    EventWriter writer(dir.path());
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        const std::string tag = fmt::format("t{}", t);
        for (int i = 0; i < 200; ++i) writer.add_scalar(tag, 1.f, i);
      });
    for (auto& th : threads) th.join();
  }
  EXPECT_EQ(read_records(only_event_file(dir.path())).size(), 801u);
}

TEST(EventWriterTest, UncreatableDirectoryIsAnError) {
  TmpDir dir;
  std::ofstream(dir / "file") << "x";
  try {
    EventWriter writer(dir / "file/logs");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "file/logs"), std::string::npos) << e.what();
  }
}

TEST(PngTest, EncodesAValidPng) {
  const int height = 2, width = 3, channels = 3;
  std::vector<uint8_t> pixels(height * width * channels);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 13);
  std::vector<uint8_t> png = png_encode(pixels.data(), height, width, channels);
  ASSERT_GT(png.size(), 8u + 25 + 12 + 12);
  EXPECT_EQ(std::memcmp(png.data(), "\x89PNG\r\n\x1a\n", 8), 0);
  auto be32 = [&](size_t at) {
    return static_cast<uint32_t>(png[at]) << 24 | static_cast<uint32_t>(png[at + 1]) << 16 |
           static_cast<uint32_t>(png[at + 2]) << 8 | png[at + 3];
  };
  // IHDR: length 13, width, height, depth 8, color type 2 (RGB), then its CRC.
  EXPECT_EQ(be32(8), 13u);
  EXPECT_EQ(std::memcmp(png.data() + 12, "IHDR", 4), 0);
  EXPECT_EQ(be32(16), 3u);
  EXPECT_EQ(be32(20), 2u);
  EXPECT_EQ(png[24], 8);
  EXPECT_EQ(png[25], 2);
  EXPECT_EQ(be32(29), crc32(0, png.data() + 12, 17));
  // IDAT: zlib stream of rows, each prefixed by filter byte 0.
  const uint32_t idat_length = be32(33);
  EXPECT_EQ(std::memcmp(png.data() + 37, "IDAT", 4), 0);
  std::vector<uint8_t> raw(height * (width * channels + 1));
  uLongf raw_size = raw.size();
  ASSERT_EQ(uncompress(raw.data(), &raw_size, png.data() + 41, idat_length), Z_OK);
  ASSERT_EQ(raw_size, raw.size());
  for (int y = 0; y < height; ++y) {
    EXPECT_EQ(raw[static_cast<size_t>(y) * 10], 0);
    EXPECT_EQ(
        std::memcmp(&raw[static_cast<size_t>(y) * 10 + 1], &pixels[static_cast<size_t>(y) * 9], 9),
        0);
  }
  // IEND closes the file.
  EXPECT_EQ(std::memcmp(png.data() + png.size() - 8, "IEND", 4), 0);
}

TEST(PngTest, RejectsBadGeometry) {
  uint8_t pixel[4] = {};
  EXPECT_THROW(png_encode(pixel, 0, 1, 1), Error);
  EXPECT_THROW(png_encode(pixel, 1, 1, 5), Error);
  EXPECT_NO_THROW(png_encode(pixel, 1, 1, 4));
}

TEST(EventWriterTest, TensorBoardReadsOurFile) {
  std::string why;
  auto python = testing::python_with("tensorboard", &why);
  if (!python) GTEST_SKIP() << why;
  TmpDir dir;
  std::vector<float> weights;
  for (int i = 0; i < 1000; ++i) weights.push_back(std::sin(static_cast<float>(i)) * 3);
  const int height = 4, width = 5, channels = 3;
  std::vector<uint8_t> pixels(height * width * channels);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> gray = {0, 64, 128, 255};
  {
    EventWriter writer(dir.path());
    for (int step = 0; step < 5; ++step)
      writer.add_scalar("loss", 2.0f - 0.25f * static_cast<float>(step), step * 10);
    writer.add_scalar("lr", 0.1f, 0);
    writer.add_histogram("conv1/weights", weights.data(), weights.size(), 10);
    writer.add_histogram("conv1/weights", weights.data(), 10, 20);
    writer.add_image("input", pixels.data(), height, width, channels, 30);
    writer.add_image("mask", gray.data(), 2, 2, 1, 31);
  }
  TmpDir out;
  auto r = testing::run_python(*python, "tfevents_check.py " + dir.path(), out.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json got = nlohmann::json::parse(r.output);

  EXPECT_EQ(got["file_version"], 2.0);  // TensorBoard's reading of "brain.Event:2"
  auto& loss = got["scalars"]["loss"];
  ASSERT_EQ(loss.size(), 5u);
  for (int step = 0; step < 5; ++step) {
    EXPECT_EQ(loss[step][0], step * 10);
    EXPECT_EQ(loss[step][1].get<double>(), 2.0 - 0.25 * step);
  }
  EXPECT_NEAR(got["scalars"]["lr"][0][1].get<double>(), 0.1, 1e-7);

  auto& histos = got["histograms"]["conv1/weights"];
  ASSERT_EQ(histos.size(), 2u);
  EXPECT_EQ(histos[0]["step"], 10);
  EXPECT_EQ(histos[0]["num"], 1000.0);
  EXPECT_EQ(histos[0]["bucket_count"], 1000.0);
  EXPECT_EQ(histos[0]["min"].get<double>(), *std::min_element(weights.begin(), weights.end()));
  EXPECT_EQ(histos[0]["max"].get<double>(), *std::max_element(weights.begin(), weights.end()));
  EXPECT_EQ(histos[1]["num"], 10.0);

  auto& image = got["images"]["input"][0];
  EXPECT_EQ(image["step"], 30);
  EXPECT_EQ(image["width"], width);
  EXPECT_EQ(image["height"], height);
  EXPECT_EQ(image["png_width"], width);
  EXPECT_EQ(image["png_height"], height);
  EXPECT_EQ(image["pixels"].get<std::vector<int>>(),
            std::vector<int>(pixels.begin(), pixels.end()));
  auto& mask = got["images"]["mask"][0];
  EXPECT_EQ(mask["width"], 2);
  EXPECT_EQ(mask["png_color"], 0);
  EXPECT_EQ(mask["pixels"].get<std::vector<int>>(), std::vector<int>({0, 64, 128, 255}));
}

// The bucket found without a search is std::upper_bound's, at every limit, on both sides of each
// (as doubles and as the floats next to them), at zeros, subnormals, the largest floats and
// values spread over every exponent.
TEST(EventWriterTest, HistogramBucketIsTheUpperBoundOfTheLimits) {
  const std::vector<double>& limits = histogram_bucket_limits();
  std::vector<double> xs = {0.0, -0.0, 1e-45, -1e-45, 1e-40, FLT_MAX, -FLT_MAX, 1e30, -1e30};
  for (double l : limits) {
    if (std::abs(l) == DBL_MAX) continue;
    const float f = static_cast<float>(l);
    for (double x : {l, std::nextafter(l, -DBL_MAX), std::nextafter(l, DBL_MAX),
                     static_cast<double>(f), static_cast<double>(std::nextafter(f, -FLT_MAX)),
                     static_cast<double>(std::nextafter(f, FLT_MAX))})
      xs.push_back(x);
  }
  for (int e = -150; e <= 128; ++e)
    for (float m : {1.0f, 1.3f, 1.77f, 1.9999f}) {
      xs.push_back(std::ldexp(m, e));
      xs.push_back(-std::ldexp(m, e));
    }
  for (double x : xs) {
    if (!std::isfinite(x)) continue;
    const size_t expected =
        static_cast<size_t>(std::upper_bound(limits.begin(), limits.end(), x) - limits.begin());
    ASSERT_EQ(histogram_bucket(x), expected) << x;
  }
}

}  // namespace
}  // namespace tower
