// The order in which an epoch visits the examples. Pure functions of (seed, epoch), so every
// process and every restart computes the same order without talking to anyone.
#pragma once

#include <cstdint>
#include <vector>

namespace tower {

// Philox stream purposes of the data layer (first argument of philox_stream).
inline constexpr uint64_t kShuffle = 0x5348554646ull;        // "SHUFF"
inline constexpr uint64_t kShuffleBuffer = 0x5348425546ull;  // "SHBUF"
inline constexpr uint64_t kAugment = 0x4155474dull;          // "AUGM"

// A uniformly random permutation of [0, n): Fisher-Yates driven by
// Philox(seed, philox_stream(kShuffle, epoch)).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// Passes `order` through a shuffle buffer of `buffer_size` elements (TF's RandomShuffleQueue with
// min_after_dequeue = buffer_size): the buffer is filled from `order`, then each output is a
// random element of the buffer, replaced by the next input. Stays within one epoch, so every
// element still comes out exactly once. Random numbers from
// Philox(seed, philox_stream(kShuffleBuffer, epoch)).
std::vector<int64_t> shuffle_with_buffer(const std::vector<int64_t>& order, int64_t buffer_size,
                                         uint64_t seed, int64_t epoch);

}  // namespace tower
