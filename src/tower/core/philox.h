#pragma once

#include <array>
#include <cstdint>

namespace tower {

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, so any random number is a pure function of (key, counter) and
// results never depend on thread timing.
using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;
PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key);

// Random numbers addressed by (seed, stream, counter). The seed is the key; `stream` names a
// purpose (init of variable k, shuffle of epoch e, augmentation, dropout...), `counter` the
// position inside it. Each counter value yields 4 independent 32-bit words.
class Philox {
 public:
  Philox(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  std::array<uint32_t, 4> block(uint64_t counter) const;
  uint32_t u32(uint64_t index) const;            // word `index` of the stream
  float uniform(uint64_t index) const;           // in [0, 1), 24 bits of precision
  float normal(uint64_t index) const;            // standard normal (Box-Muller on 2 words)
  float truncated_normal(uint64_t index) const;  // standard normal resampled until |x| <= 2
  // Uniform integer in [0, bound), bound > 0; unbiased (rejection on the top of the range).
  uint32_t below(uint64_t index, uint32_t bound) const;

 private:
  uint64_t seed_;
  uint64_t stream_;
};

// Mixes several integers into one stream id (for keys like (purpose, epoch, example)).
uint64_t philox_stream(uint64_t a, uint64_t b = 0, uint64_t c = 0);

}  // namespace tower
