#include "tower/core/trace.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "tower/core/error.h"

namespace tower::trace {
namespace {

struct Event {
  const char* category;
  std::string name, detail;
  int64_t begin_ns, duration_ns;
  int tid;
};

std::atomic<bool> g_active{false};
std::mutex g_mutex;
std::vector<Event> g_events;
std::map<int, std::string> g_thread_names;
Clock::time_point g_origin = Clock::now();
std::atomic<int> g_next_tid{1};

int this_tid() {
  thread_local const int tid = g_next_tid.fetch_add(1);
  return tid;
}

std::string escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    else
      out += c;
  }
  return out;
}

}  // namespace

bool active() { return g_active.load(std::memory_order_relaxed); }

void start() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.clear();
  g_origin = Clock::now();
  g_active.store(true);
}

void name_thread(std::string_view name) {
  const int tid = this_tid();
  std::lock_guard<std::mutex> lock(g_mutex);
  g_thread_names[tid] = std::string(name);
}

void add(const char* category, std::string_view name, Clock::time_point begin,
         Clock::time_point end, std::string_view detail) {
  if (!active()) return;
  const int tid = this_tid();
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.push_back(
      {category, std::string(name), std::string(detail),
       std::chrono::duration_cast<std::chrono::nanoseconds>(begin - g_origin).count(),
       std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin).count(), tid});
}

void stop_and_write(const std::string& path, int pid) {
  g_active.store(false);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string text = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  text += fmt::format(
      R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"tower rank {}"}}}})",
      pid, pid);
  for (const auto& [tid, name] : g_thread_names)
    text += fmt::format(
        ",\n"
        R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})",
        pid, tid, escaped(name));
  for (const Event& e : g_events) {
    text += fmt::format(
        ",\n"
        R"({{"name":"{}","cat":"{}","ph":"X","ts":{:.3f},"dur":{:.3f},"pid":{},"tid":{})",
        escaped(e.name), e.category, static_cast<double>(e.begin_ns) / 1e3,
        static_cast<double>(e.duration_ns) / 1e3, pid, e.tid);
    if (!e.detail.empty()) text += fmt::format(R"(,"args":{{"detail":"{}"}})", escaped(e.detail));
    text += "}";
  }
  text += "\n]}\n";
  g_events.clear();
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) fail("cannot write the trace file '{}' (--trace)", path);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("cannot write the trace file '{}' (--trace): disk full?", path);
  }
}

}  // namespace tower::trace
