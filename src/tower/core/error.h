// Errors in tower come in two kinds:
//   * tower::Error  — something a *user* caused (bad flag, missing/corrupt file, shape mismatch in
//     their model, NaN loss). Thrown with a message naming the file/flag/value and what was
//     expected.
//   * TOWER_CHECK(cond) — an *internal invariant*; failing means a bug in tower, never a user
//   error.
// (Beware: PyTorch's TORCH_CHECK is the user-facing one; ours is the opposite.)
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tower {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws tower::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void internal_check_failed(const char* expr, const char* file, int line,
                                        const std::string& detail);
}  // namespace detail

}  // namespace tower

#define TOWER_CHECK(cond)                                                               \
  do {                                                                                  \
    if (!(cond)) ::tower::detail::internal_check_failed(#cond, __FILE__, __LINE__, ""); \
  } while (0)

#define TOWER_CHECK_MSG(cond, ...)                                        \
  do {                                                                    \
    if (!(cond))                                                          \
      ::tower::detail::internal_check_failed(#cond, __FILE__, __LINE__,   \
                                             ::fmt::format(__VA_ARGS__)); \
  } while (0)
