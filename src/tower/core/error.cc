#include "tower/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace tower::detail {

void internal_check_failed(const char* expr, const char* file, int line,
                           const std::string& detail) {
  // An internal invariant is broken: report and abort (no exception, so no one can swallow it).
  std::fprintf(stderr, "tower: internal check failed at %s:%d: %s%s%s\nthis is a bug in tower\n",
               file, line, expr, detail.empty() ? "" : " — ", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace tower::detail
