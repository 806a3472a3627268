#include "tower/io/safetensors.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/python_env.h"
#include "testing/files.h"
#include "testing/tmp_dir.h"

namespace tower {
namespace {

using testing::contains;
using testing::read_file;
using testing::write_file;

using testing::TmpDir;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file made of `header` (padded to 8 like ours) and `data`.
std::string make_file(const std::string& header, const std::string& data) {
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  return le64(padded.size()) + padded + data;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(SafetensorsTest, RoundTripsEveryDtypeScalarEmptyAndMetadata) {
  TmpDir dir;
  Tensor f32 = Tensor::from_vector<float>({2, 3}, {1.5f, -2, 0, 3.25f, 1e-30f, -7});
  Tensor bf16({3}, DType::bf16);
  for (int i = 0; i < 3; ++i)
    static_cast<uint16_t*>(bf16.raw_data())[i] = f32_to_bf16(static_cast<float>(i) - 0.5f);
  Tensor i32 = Tensor::from_vector<int32_t>({4}, {INT32_MIN, -1, 0, INT32_MAX});
  Tensor i64 = Tensor::from_vector<int64_t>({1, 2}, {INT64_MIN, INT64_MAX});
  Tensor u8 = Tensor::from_vector<uint8_t>({2, 2, 1}, {0, 1, 128, 255});
  Tensor scalar = Tensor::from_vector<float>(Shape(std::vector<int64_t>{}), {42.f});
  Tensor empty({0}, DType::f32);
  Tensor empty2d({2, 0}, DType::i64);
  const std::vector<std::pair<std::string, const Tensor*>> tensors = {
      {"z/f32", &f32}, {"bf16", &bf16},     {"i32", &i32},     {"i64", &i64},
      {"u8", &u8},     {"scalar", &scalar}, {"empty", &empty}, {"empty2d", &empty2d}};
  const std::map<std::string, std::string> metadata = {{"step", "12"},
                                                       {"note", "héllo \"quoted\""}};
  const std::string path = dir / "t.safetensors";
  safetensors_write(path, tensors, metadata);

  SafetensorsFile file = safetensors_read(path);
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file.tensors.count(name));
    EXPECT_TRUE(same_bytes(file.tensors.at(name), *tensor));
  }
  EXPECT_EQ(file.tensors.at("scalar").shape().rank(), 0);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(SafetensorsTest, ChecksumsRoundTripAndAFlippedBitNamesTheTensorAndTheFile) {
  TmpDir dir;
  Tensor a = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::from_vector<int32_t>({3}, {7, 8, 9});
  Tensor empty({0}, DType::f32);
  const std::string path = dir / "c.safetensors";
  safetensors_write(path, {{"conv1/weights", &a}, {"b", &b}, {"empty", &empty}}, {{"step", "3"}},
                    Checksums::yes);
  SafetensorsFile file = safetensors_read(path);
  EXPECT_EQ(file.metadata.at("step"), "3");
  EXPECT_EQ(file.metadata.at("crc32c/conv1/weights").size(), 8u);
  EXPECT_EQ(file.metadata.count("crc32c/b"), 1u);
  EXPECT_TRUE(same_bytes(file.tensors.at("conv1/weights"), a));

  // Flip one bit of each tensor's data in turn (the data are the file's last bytes: "b" first).
  const std::string good = read_file(path);
  const size_t data_start = good.size() - static_cast<size_t>(a.nbytes() + b.nbytes());
  for (auto [offset, name] : {std::pair<size_t, std::string>{0, "b"},
                              {static_cast<size_t>(b.nbytes()) + 5, "conv1/weights"}}) {
    std::string bad = good;
    bad[data_start + offset] = static_cast<char>(bad[data_start + offset] ^ 0x10);
    write_file(path, bad);
    try {
      safetensors_read(path);
      ADD_FAILURE() << "a flipped bit in '" << name << "' went unnoticed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor '" + name + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("CRC-32C"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(safetensors_write(path, {{"a", &a}}, {{"crc32c/a", "0"}}, Checksums::yes), Error);
}

TEST(SafetensorsTest, NoMetadataMeansNoMetadataKey) {
  TmpDir dir;
  Tensor t = Tensor::from_vector<uint8_t>({1}, {9});
  safetensors_write(dir / "a.safetensors", {{"t", &t}});
  EXPECT_EQ(read_file(dir / "a.safetensors").find("__metadata__"), std::string::npos);
  EXPECT_TRUE(safetensors_read(dir / "a.safetensors").metadata.empty());
}

TEST(SafetensorsTest, WritesTheExactLayout) {
  TmpDir dir;
  Tensor b = Tensor::from_vector<float>({2}, {1.0f, -2.0f});
  Tensor a = Tensor::from_vector<uint8_t>({3}, {1, 2, 3});
  safetensors_write(dir / "x.safetensors", {{"b", &b}, {"a", &a}}, {{"k", "v"}});

  // Metadata first, then tensors sorted by name with contiguous offsets; padded to 8 with spaces.
  const std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
  ASSERT_EQ(header.size(), 132u);
  std::string expected = le64(136) + header + "    ";
  expected += std::string("\x01\x02\x03", 3);
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f little-endian
  EXPECT_EQ(read_file(dir / "x.safetensors"), expected);
}

// Every way a file can be broken: the error names the file and says what is wrong.
TEST(SafetensorsTest, CorruptFilesAreClearErrors) {
  TmpDir dir;
  Tensor good = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  safetensors_write(dir / "good.safetensors", {{"w", &good}, {"v", &good}});
  const std::string good_bytes = read_file(dir / "good.safetensors");
  const std::string data16(16, '\x01');
  const std::string data32(32, '\x01');
  struct Case {
    std::string name, bytes, expect;
  };
  const std::vector<Case> cases = {
      {"empty", "", "fewer than the 8-byte header length"},
      {"short", "\x05\x00\x00", "fewer than the 8-byte header length"},
      {"length_past_end", le64(1000) + "{}      ", "header length field says 1000"},
      {"length_huge", le64(~0ull) + "{}      ", "header length field says"},
      {"not_json", make_file("{\"w\": nope", data16), "not valid JSON"},
      {"number_past_a_double", make_file("{\"w\": 1e400}", data16), "not valid JSON"},
      {"not_object", make_file("[1, 2]", ""), "not a JSON object"},
      {"unknown_dtype",
       make_file(R"({"w":{"dtype":"F16","shape":[8],"data_offsets":[0,16]}})", data16),
       "dtype \"F16\""},
      {"missing_dtype", make_file(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", data16),
       "no \"dtype\""},
      {"size_mismatch",
       make_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", data16),
       "24 bytes"},
      {"negative_dim",
       make_file(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data16),
       "non-negative"},
      {"huge_shape",
       make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})",
                 data16),
       "too large"},
      {"bad_offsets", make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", data16),
       "data_offsets"},
      {"end_before_begin",
       make_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", data16),
       "end before begin"},
      {"out_of_range",
       make_file(R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", data16),
       "shorter than its header declares"},
      {"overlap",
       make_file(R"({"v":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                 R"("w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                 data32),
       "overlaps"},
      {"gap",
       make_file(R"({"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("w":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})",
                 data32),
       "belong to no tensor"},
      {"trailing_bytes",
       make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data32),
       "cover 16 bytes but the data buffer has 32"},
      {"bad_metadata", make_file(R"({"__metadata__":{"step":12}})", ""),
       "metadata 'step' is not a string"},
      {"truncated", good_bytes.substr(0, good_bytes.size() - 5),
       "shorter than its header declares"},
      {"header_truncated", good_bytes.substr(0, 20), "header length field says"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir / (c.name + ".safetensors");
    write_file(path, c.bytes);
    try {
      safetensors_read(path);
      ADD_FAILURE() << "no error for " << c.name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(safetensors_read(dir / "good.safetensors").tensors.size(), 2u);
}

TEST(SafetensorsTest, MissingFileNamesIt) {
  TmpDir dir;
  try {
    safetensors_read(dir / "nope.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "nope.safetensors"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsTest, BadTensorListsAreErrors) {
  TmpDir dir;
  Tensor t = Tensor::from_vector<float>({1}, {1});
  EXPECT_THROW(safetensors_write(dir / "d.safetensors", {{"a", &t}, {"a", &t}}), Error);
  EXPECT_THROW(safetensors_write(dir / "m.safetensors", {{"__metadata__", &t}}), Error);
  EXPECT_FALSE(std::filesystem::exists(dir / "d.safetensors"));
}

TEST(SafetensorsTest, UnwritableDirectoryNamesTheFile) {
  TmpDir dir;
  Tensor t = Tensor::from_vector<float>({1}, {1});
  const std::string path = dir / "no/such/dir/x.safetensors";
  try {
    safetensors_write(path, {{"t", &t}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// A full disk is simulated with a file-size limit: write() then fails with EFBIG, as it would
// with ENOSPC. The previous file must survive and no temp file may be left behind.
TEST(SafetensorsTest, FailedWriteKeepsThePreviousFile) {
  TmpDir dir;
  const std::string path = dir / "ckpt.safetensors";
  Tensor small = Tensor::from_vector<float>({2}, {1, 2});
  safetensors_write(path, {{"w", &small}});
  const std::string before = read_file(path);

  Tensor big({1 << 16}, DType::f32);
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit limited = saved;
  limited.rlim_cur = 4096;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    safetensors_write(path, {{"w", &big}});
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_EQ(read_file(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(SafetensorsTest, ReferencePythonLibraryReadsOurFilesAndWeReadItsFiles) {
  std::string why;
  auto python = testing::python_with("safetensors numpy", &why);
  if (!python) GTEST_SKIP() << why;
  TmpDir dir;
  Tensor f32 = Tensor::from_vector<float>({2, 3}, {1.5f, -2, 0, 3.25f, 1e-3f, -7});
  Tensor i32 = Tensor::from_vector<int32_t>({2}, {INT32_MIN, 5});
  Tensor i64 = Tensor::from_vector<int64_t>({1, 1}, {INT64_MAX});
  Tensor u8 = Tensor::from_vector<uint8_t>({3}, {0, 7, 255});
  Tensor scalar = Tensor::from_vector<float>(Shape(std::vector<int64_t>{}), {42.f});
  Tensor empty({0, 4}, DType::f32);
  const std::string ours = dir / "ours.safetensors";
  safetensors_write(ours,
                    {{"conv1/weights", &f32},
                     {"i32", &i32},
                     {"i64", &i64},
                     {"u8", &u8},
                     {"scalar", &scalar},
                     {"empty", &empty}},
                    {{"step", "1200"}});

  auto r = testing::run_python(*python, "safetensors_check.py dump " + ours, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json got = nlohmann::json::parse(r.output);
  EXPECT_EQ(got["metadata"], nlohmann::json({{"step", "1200"}}));
  auto& t = got["tensors"];
  EXPECT_EQ(t["conv1/weights"]["dtype"], "float32");
  EXPECT_EQ(t["conv1/weights"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(t["conv1/weights"]["values"].get<std::vector<float>>(), f32.to_vector<float>());
  EXPECT_EQ(t["i32"]["dtype"], "int32");
  EXPECT_EQ(t["i32"]["values"].get<std::vector<int32_t>>(), i32.to_vector<int32_t>());
  EXPECT_EQ(t["i64"]["values"].get<std::vector<int64_t>>(), i64.to_vector<int64_t>());
  EXPECT_EQ(t["u8"]["dtype"], "uint8");
  EXPECT_EQ(t["u8"]["values"].get<std::vector<int>>(), std::vector<int>({0, 7, 255}));
  EXPECT_EQ(t["scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(t["scalar"]["values"], nlohmann::json({42.0}));
  EXPECT_EQ(t["empty"]["shape"], nlohmann::json({0, 4}));

  const std::string theirs = dir / "theirs.safetensors";
  r = testing::run_python(*python, "safetensors_check.py write " + theirs, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsFile file = safetensors_read(theirs);
  EXPECT_EQ(file.metadata.at("written_by"), "python");
  EXPECT_EQ(file.tensors.at("weights").shape(), Shape({2, 3}));
  EXPECT_EQ(file.tensors.at("weights").to_vector<float>(),
            std::vector<float>({0, 0.25f, 0.5f, 0.75f, 1, 1.25f}));
  EXPECT_EQ(file.tensors.at("counts").to_vector<int64_t>(), std::vector<int64_t>({-3, 7}));
  EXPECT_EQ(file.tensors.at("pixels").to_vector<uint8_t>(), std::vector<uint8_t>({0, 255}));
  EXPECT_EQ(file.tensors.at("scalar").shape().rank(), 0);
  EXPECT_EQ(file.tensors.at("scalar").to_vector<float>(), std::vector<float>({2.5f}));
}

}  // namespace
}  // namespace tower
