#include "tower/runtime/memory_plan.h"

#include <algorithm>
#include <utility>

namespace tower {

size_t place_blocks(std::vector<MemoryBlock*>& blocks) {
  std::sort(blocks.begin(), blocks.end(), [](const MemoryBlock* a, const MemoryBlock* b) {
    return a->first != b->first ? a->first < b->first : a->bytes > b->bytes;
  });
  std::vector<MemoryBlock*> placed;
  size_t arena = 0;
  for (MemoryBlock* b : blocks) {
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of overlapping-in-time blocks
    for (MemoryBlock* p : placed)
      if (p->first <= b->last && b->first <= p->last)
        busy.push_back({p->offset, p->offset + p->bytes});
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (auto& [start, end] : busy) {
      if (offset + b->bytes <= start) break;
      offset = std::max(offset, end);
    }
    b->offset = offset;
    arena = std::max(arena, offset + b->bytes);
    placed.push_back(b);
  }
  return arena;
}

}  // namespace tower
