#include "tower/data/shuffle.h"

#include <limits>
#include <numeric>
#include <utility>

#include "tower/core/error.h"
#include "tower/core/philox.h"

namespace tower {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  TOWER_CHECK(n >= 0 && n <= std::numeric_limits<uint32_t>::max());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  Philox rng(seed, philox_stream(kShuffle, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = rng.below(static_cast<uint64_t>(i), static_cast<uint32_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<int64_t> shuffle_with_buffer(const std::vector<int64_t>& order, int64_t buffer_size,
                                         uint64_t seed, int64_t epoch) {
  TOWER_CHECK(buffer_size >= 0);
  Philox rng(seed, philox_stream(kShuffleBuffer, static_cast<uint64_t>(epoch)));
  std::vector<int64_t> out, buffer;
  out.reserve(order.size());
  size_t next_in = 0;
  for (uint64_t k = 0; out.size() < order.size(); ++k) {
    // Dequeue only while min_after_dequeue (= buffer_size) elements would remain, as TF's
    // RandomShuffleQueue; once the input is exhausted, drain what is left.
    while (static_cast<int64_t>(buffer.size()) <= buffer_size && next_in < order.size())
      buffer.push_back(order[next_in++]);
    size_t j = rng.below(k, static_cast<uint32_t>(buffer.size()));
    out.push_back(buffer[j]);
    buffer[j] = buffer.back();
    buffer.pop_back();
  }
  return out;
}

}  // namespace tower
