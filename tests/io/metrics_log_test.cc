#include "tower/io/metrics_log.h"

#include <gtest/gtest.h>

#include <fstream>

#include "testing/tmp_dir.h"
#include "tower/core/error.h"

namespace tower {
namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(MetricsLogTest, OneObjectPerLineVisibleImmediately) {
  testing::TmpDir dir;
  const std::string path = dir / "metrics.jsonl";
  MetricsLog log(path);
  log.append({{"step", 1}, {"loss", 2.5}});
  EXPECT_EQ(read_lines(path).size(), 1u);  // flushed without closing
  log.append({{"step", 2}, {"name", "a\nb"}});
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["loss"], 2.5);
  EXPECT_EQ(lines[1]["name"], "a\nb");
}

TEST(MetricsLogTest, AppendsAcrossRuns) {
  testing::TmpDir dir;
  const std::string path = dir / "metrics.jsonl";
  MetricsLog(path).append({{"step", 1}});
  MetricsLog(path).append({{"step", 2}});
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["step"], 2);
}

TEST(MetricsLogTest, InvalidUtf8IsReplacedNotThrown) {
  testing::TmpDir dir;
  MetricsLog log(dir / "m.jsonl");
  EXPECT_NO_THROW(log.append({{"tag", std::string("bad \xff byte")}}));
  EXPECT_EQ(read_lines(dir / "m.jsonl").size(), 1u);
}

TEST(MetricsLogTest, UnopenablePathNamesIt) {
  testing::TmpDir dir;
  const std::string path = dir / "no/such/metrics.jsonl";
  try {
    MetricsLog log(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

}  // namespace
}  // namespace tower
