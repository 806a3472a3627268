// The message of the tower::Error a call throws (header-only test helper).
#pragma once

#include <string>

#include "tower/core/error.h"

namespace tower::testing {

// The message of the tower::Error that f() throws, or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tower::testing
