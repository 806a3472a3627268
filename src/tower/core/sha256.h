// SHA-256 (FIPS 180-4): the digest a run records of the weights file it started from, the one
// `sha256sum` prints, so that a user can tell which download a model came from.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tower {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest as 64 lowercase hex digits; the object is spent after it.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed
};

// The digest of a whole file; an unreadable file is a tower::Error naming it.
std::string sha256_file(const std::string& path);

}  // namespace tower
