// A Chrome / Perfetto trace-event JSON of what tower's threads do (`tower train --trace FILE`):
// one lane per thread, named by the thread ("tower 0 (cpu:0)", "reduce 0", "communication",
// "input worker 0", "main"), one slice per kernel, bucket reduction, collective, input batch and
// optimizer step. While no trace is recording, a would-be slice costs one relaxed atomic load.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace tower::trace {

using Clock = std::chrono::steady_clock;

bool active();
void start();  // drops what was recorded and records from now on
// Stops recording and writes the JSON file (atomically); a tower::Error names the path.
void stop_and_write(const std::string& path, int pid = 0);
// Names the calling thread's lane (the last name given wins).
void name_thread(std::string_view name);
// A slice on the calling thread's lane; `detail` goes into the slice's args.
void add(const char* category, std::string_view name, Clock::time_point begin,
         Clock::time_point end, std::string_view detail = {});

// A slice from construction to destruction, when a trace is recording.
class Slice {
 public:
  Slice(const char* category, std::string_view name, std::string_view detail = {}) : on_(active()) {
    if (!on_) return;
    category_ = category;
    name_ = name;
    detail_ = detail;
    begin_ = Clock::now();
  }
  ~Slice() {
    if (on_) add(category_, name_, begin_, Clock::now(), detail_);
  }
  Slice(const Slice&) = delete;
  Slice& operator=(const Slice&) = delete;

 private:
  bool on_;
  const char* category_ = nullptr;
  std::string name_, detail_;
  Clock::time_point begin_;
};

}  // namespace tower::trace
