// FNV-1a, 64 bits: a stable hash of names and paths (variable initialization streams, the image
// folder's split and cache key), the same on every machine and version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tower {

// The standard offset basis (older versions had its last digit missing, and so other splits).
inline constexpr uint64_t kFnv1aBasis = 14695981039346656037ull;

// The hash of `n` bytes, continuing from `h` (chain calls to hash several pieces).
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnv1aBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aBasis) {
  return fnv1a(s.data(), s.size(), h);
}

}  // namespace tower
