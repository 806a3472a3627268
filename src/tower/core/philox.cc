#include "tower/core/philox.h"

#include <cmath>

namespace tower {

PhiloxCounter philox4x32(PhiloxCounter ctr, PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

std::array<uint32_t, 4> Philox::block(uint64_t counter) const {
  PhiloxCounter ctr = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                       static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)};
  return philox4x32(ctr, {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
}

uint32_t Philox::u32(uint64_t index) const { return block(index / 4)[index % 4]; }

float Philox::uniform(uint64_t index) const {
  return static_cast<float>(u32(index) >> 8) * (1.0f / 16777216.0f);
}

float Philox::normal(uint64_t index) const {
  auto b = block(index);
  // (0, 1] so that log() is finite.
  double u1 = (static_cast<double>(b[0]) + 1.0) / 4294967296.0;
  double u2 = static_cast<double>(b[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

float Philox::truncated_normal(uint64_t index) const {
  // Each attempt uses a fresh counter far away from the others of this index.
  for (uint64_t attempt = 0;; ++attempt) {
    float x = normal(index + (attempt << 40));
    if (std::fabs(x) <= 2.0f) return x;
  }
}

uint32_t Philox::below(uint64_t index, uint32_t bound) const {
  uint32_t limit = static_cast<uint32_t>(-bound) % bound;  // 2^32 mod bound
  for (uint64_t attempt = 0;; ++attempt) {
    uint32_t r = u32(index + (attempt << 40));
    if (r >= limit) return r % bound;
  }
}

uint64_t philox_stream(uint64_t a, uint64_t b, uint64_t c) {
  // splitmix64-style mixing: distinct tuples give unrelated stream ids.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  return mix(mix(mix(a) ^ b) ^ c);
}

}  // namespace tower
