#include "tower/runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <random>

namespace tower {
namespace {

bool overlap_in_time(const MemoryBlock& a, const MemoryBlock& b) {
  return a.first <= b.last && b.first <= a.last;
}
bool overlap_in_memory(const MemoryBlock& a, const MemoryBlock& b) {
  return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// A chain of values each read only by the next step: two blocks alive at a time, so the arena
// holds two, whatever the chain's length.
TEST(MemoryPlanTest, AChainReusesTwoBlocks) {
  std::vector<MemoryBlock> chain(10);
  std::vector<MemoryBlock*> blocks;
  for (int i = 0; i < 10; ++i) {
    chain[static_cast<size_t>(i)] = {align_up(1000), i, i + 1};
    blocks.push_back(&chain[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(place_blocks(blocks), 2 * align_up(1000));
}

// Blocks alive at the same time never share bytes, every block starts on a cache line, and the
// arena is at least the largest sum alive at one position; random lifetimes and sizes.
TEST(MemoryPlanTest, LiveBlocksNeverOverlap) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<MemoryBlock> all(40);
    std::vector<MemoryBlock*> blocks;
    for (MemoryBlock& b : all) {
      const int first = static_cast<int>(rng() % 30);
      b = {align_up(1 + rng() % 5000), first, first + static_cast<int>(rng() % 8)};
      blocks.push_back(&b);
    }
    const size_t arena = place_blocks(blocks);
    size_t peak = 0;
    for (int p = 0; p < 40; ++p) {
      size_t alive = 0;
      for (const MemoryBlock& b : all) alive += b.first <= p && p <= b.last ? b.bytes : 0;
      peak = std::max(peak, alive);
    }
    EXPECT_GE(arena, peak);
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(all[i].offset % kArenaAlign, 0u);
      EXPECT_LE(all[i].offset + all[i].bytes, arena);
      for (size_t j = i + 1; j < all.size(); ++j)
        EXPECT_FALSE(overlap_in_time(all[i], all[j]) && overlap_in_memory(all[i], all[j]))
            << trial << ": " << i << " " << j;
    }
  }
}

}  // namespace
}  // namespace tower
