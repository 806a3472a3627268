// metrics.jsonl: one JSON object per line, for scripts and plots that do not speak TensorBoard.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace tower {

class MetricsLog {
 public:
  // Opens `path` for appending (a resumed run continues the same file); throws naming it.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Writes `record` as one line and flushes it, so a crash loses at most the line being written.
  void append(const nlohmann::json& record);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tower
