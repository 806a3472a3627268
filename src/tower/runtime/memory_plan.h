// The memory plan's placement: the buffers and scratchpads of a program are blocks of one arena,
// each alive over a range of schedule positions; blocks alive at the same time never overlap.
#pragma once

#include <cstddef>
#include <vector>

namespace tower {

inline constexpr size_t kArenaAlign = 64;  // every block starts on a cache line
inline size_t align_up(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// A block of the arena, alive over schedule positions [first, last].
struct MemoryBlock {
  size_t bytes = 0;
  int first = 0, last = 0;
  size_t offset = 0;  // set by place_blocks
};

// Greedy first-fit by liveness: blocks are placed in order of their first position (the larger
// first on ties) at the lowest offset that overlaps no block alive at the same time. Sets each
// block's offset and returns the arena's size.
size_t place_blocks(std::vector<MemoryBlock*>& blocks);

}  // namespace tower
