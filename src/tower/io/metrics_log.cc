#include "tower/io/metrics_log.h"

#include <cerrno>
#include <cstring>

#include "tower/core/error.h"

namespace tower {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) fail("cannot open metrics log '{}': {}", path, std::strerror(errno));
}

MetricsLog::~MetricsLog() { std::fclose(file_); }

void MetricsLog::append(const nlohmann::json& record) {
  // Invalid UTF-8 in a string is replaced rather than thrown: a log line is not worth a crash.
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    fail("cannot write metrics log '{}': {}", path_, std::strerror(errno));
}

}  // namespace tower
