#include "tower/core/trace.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/tmp_dir.h"
#include "tower/core/error.h"

namespace tower {
namespace {

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(TraceRecorderTest, ThreadsRecordOnTheirOwnLanesOnlyWhileActive) {
  testing::TmpDir dir;
  { trace::Slice ignored("test", "before the start"); }
  EXPECT_FALSE(trace::active());
  trace::start();
  EXPECT_TRUE(trace::active());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      trace::name_thread("worker " + std::to_string(t));
      for (int i = 0; i < 500; ++i)
        trace::Slice slice("test", "work", i == 0 ? "a \"quoted\" detail" : "");
    });
  for (auto& t : threads) t.join();
  trace::stop_and_write(dir / "t.json", 3);
  EXPECT_FALSE(trace::active());
  { trace::Slice ignored("test", "after the stop"); }
  std::ifstream in(dir / "t.json");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(count(text, R"("ph":"X")"), 2000u);
  EXPECT_EQ(count(text, R"("name":"thread_name")"), 4u);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(count(text, "\"worker " + std::to_string(t) + "\""), 1u);
  EXPECT_EQ(count(text, R"(a \"quoted\" detail)"), 4u);
  EXPECT_EQ(count(text, "before the start") + count(text, "after the stop"), 0u);
  EXPECT_EQ(count(text, R"("pid":3)"), 2000u + 4u + 1u);
  EXPECT_THROW(trace::stop_and_write(dir / "no/such/dir/t.json"), Error);
}

}  // namespace
}  // namespace tower
