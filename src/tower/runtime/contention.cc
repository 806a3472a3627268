#include "tower/runtime/contention.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

namespace tower {

RunDelay::RunDelay(int tid)
    : fd_(::open(fmt::format("/proc/self/task/{}/schedstat", tid).c_str(), O_RDONLY)) {}

RunDelay::~RunDelay() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t RunDelay::nanoseconds() const {
  char text[128];
  const ssize_t n = fd_ < 0 ? -1 : ::pread(fd_, text, sizeof text - 1, 0);
  if (n <= 0) return 0;
  text[n] = 0;
  char* end = nullptr;
  std::strtoull(text, &end, 10);  // time on a core
  return static_cast<int64_t>(std::strtoull(end, nullptr, 10));
}

void observe_contention(int64_t waited_ns, double run_ns, bool& contended, int& streak) {
  const double waited_fraction = static_cast<double>(waited_ns) / run_ns;
  const bool other = contended ? waited_fraction < 0.05 : waited_fraction >= 0.15;
  streak = other ? streak + 1 : 0;
  if (streak >= (contended ? 3 : 2)) contended = !contended, streak = 0;
}

}  // namespace tower
