#include "tower/parallel/tree_reducer.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "tower/core/error.h"

namespace tower {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

bool tree_siblings(TreeSpan a, TreeSpan b, int64_t n) {
  const int64_t width = a.hi - a.lo;  // a left child is always full: 2^L wide, 2^(L+1)-aligned
  return width > 0 && std::has_single_bit(static_cast<uint64_t>(width)) &&
         a.lo % (2 * width) == 0 && b.lo == a.hi && b.hi > b.lo &&
         b.hi == std::min(a.lo + 2 * width, n);
}

std::vector<TreeSpan> tree_cover(int64_t lo, int64_t hi, int64_t n) {
  std::vector<TreeSpan> stack;
  for (int64_t i = lo; i < hi; ++i) {
    TreeSpan span{i, i + 1};
    while (!stack.empty() && tree_siblings(stack.back(), span, n)) {
      span.lo = stack.back().lo;
      stack.pop_back();
    }
    stack.push_back(span);
  }
  return stack;
}

TreeReducer::TreeReducer(const std::vector<Shape>& shapes, int num_replicas,
                         MicroBatchLayout layout, int num_scalars, Communicator* comm)
    : layout_(std::move(layout)), num_scalars_(num_scalars), comm_(comm) {
  for (const Shape& s : shapes) {
    offsets_.push_back(total_);
    total_ += s.numel();
  }
  ranks_ = comm_ != nullptr ? comm_->size() : 1;
  const int64_t n = layout_.micro_batches, per_rank = n / ranks_;
  TOWER_CHECK(n % ranks_ == 0 && layout_.rank_first % per_rank == 0);
  int64_t first = layout_.rank_first;
  for (int64_t count : layout_.tower_count) {
    TOWER_CHECK(count > 0);
    first += count;
    TowerNodes& t = towers_.emplace_back();
    // The cover of any run of `count` leaves has at most two nodes per level (one more while a
    // leaf is being added).
    const int depth = 2 * std::bit_width(static_cast<uint64_t>(count)) + 1;
    for (int d = 0; d < depth; ++d) t.buffers.emplace_back(static_cast<size_t>(total_));
  }
  TOWER_CHECK(first == layout_.rank_first + per_rank);
  scalars_.assign(static_cast<size_t>(per_rank * num_scalars_), 0.0f);
  if (ranks_ > 1) {
    for (int r = 0; r < ranks_; ++r) {
      rank_covers_.push_back(tree_cover(r * per_rank, (r + 1) * per_rank, n));
      slot_nodes_ = std::max(slot_nodes_, static_cast<int64_t>(rank_covers_.back().size()));
    }
    const int64_t slot = slot_nodes_ * total_ + static_cast<int64_t>(scalars_.size());
    sent_.assign(static_cast<size_t>(slot), 0.0f);
    received_.assign(static_cast<size_t>(slot * ranks_), 0.0f);
  }
  for (int r = 0; r < num_replicas; ++r) {
    std::vector<Tensor>& grads = results_.emplace_back();
    for (const Shape& s : shapes) grads.emplace_back(s, DType::f32);
  }
  means_.assign(static_cast<size_t>(num_scalars_), 0.0f);
  begin_step();
}

void TreeReducer::begin_step() {
  for (TowerNodes& t : towers_) {
    t.stack.clear();
    t.free.clear();
    for (auto& b : t.buffers) t.free.push_back(b.data());
  }
  trace_ = ReduceTrace{};
}

void TreeReducer::push(std::vector<Node>& stack, Node node, std::vector<float*>* freed) const {
  while (!stack.empty() && tree_siblings(stack.back().span, node.span, layout_.micro_batches)) {
    Node& left = stack.back();
    float* __restrict out = left.data;
    const float* __restrict in = node.data;
    for (int64_t i = 0; i < total_; ++i) out[i] += in[i];
    if (freed != nullptr) freed->push_back(node.data);
    node = Node{{left.span.lo, node.span.hi}, left.data};
    stack.pop_back();
  }
  stack.push_back(node);
}

void TreeReducer::add(int tower, int64_t micro, const std::vector<const Tensor*>& grads,
                      const float* scalars) {
  TowerNodes& t = towers_[static_cast<size_t>(tower)];
  TOWER_CHECK(!t.free.empty() && grads.size() == offsets_.size());
  float* leaf = t.free.back();
  t.free.pop_back();
  for (size_t v = 0; v < grads.size(); ++v)
    std::memcpy(leaf + offsets_[v], grads[v]->raw_data(), grads[v]->nbytes());
  push(t.stack, Node{{micro, micro + 1}, leaf}, &t.free);
  std::memcpy(&scalars_[static_cast<size_t>((micro - layout_.rank_first) * num_scalars_)], scalars,
              sizeof(float) * static_cast<size_t>(num_scalars_));
}

void TreeReducer::finish() {
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = layout_.micro_batches;
  // This rank's towers' nodes, left to right, joined into the cover of the rank's run.
  std::vector<Node> rank_nodes;
  for (TowerNodes& t : towers_)
    for (const Node& node : t.stack) push(rank_nodes, node, nullptr);
  const float* root = nullptr;
  means_.assign(means_.size(), 0.0f);
  auto add_scalars = [&](const float* s, int64_t micro_batches) {
    for (int64_t m = 0; m < micro_batches; ++m)
      for (int k = 0; k < num_scalars_; ++k)
        means_[static_cast<size_t>(k)] += s[m * num_scalars_ + k];
  };
  if (ranks_ == 1) {
    TOWER_CHECK(rank_nodes.size() == 1 && rank_nodes[0].span == (TreeSpan{0, n}));
    root = rank_nodes[0].data;
    add_scalars(scalars_.data(), n);
  } else {
    const int64_t per_rank = n / ranks_, slot = static_cast<int64_t>(sent_.size());
    for (size_t k = 0; k < rank_nodes.size(); ++k)
      std::memcpy(&sent_[k * static_cast<size_t>(total_)], rank_nodes[k].data,
                  sizeof(float) * static_cast<size_t>(total_));
    std::memcpy(&sent_[static_cast<size_t>(slot_nodes_ * total_)], scalars_.data(),
                sizeof(float) * scalars_.size());
    const auto comm_start = std::chrono::steady_clock::now();
    comm_->allgather(sent_.data(), slot, received_.data());
    trace_.comm_seconds = seconds_since(comm_start);
    // Every rank forms the upper levels from the same nodes: the same bits everywhere.
    std::vector<Node> all;
    for (int r = 0; r < ranks_; ++r) {
      float* base = &received_[static_cast<size_t>(r * slot)];
      const std::vector<TreeSpan>& cover = rank_covers_[static_cast<size_t>(r)];
      for (size_t k = 0; k < cover.size(); ++k)
        push(all, Node{cover[k], base + static_cast<int64_t>(k) * total_}, nullptr);
    }
    TOWER_CHECK(all.size() == 1 && all[0].span == (TreeSpan{0, n}));
    root = all[0].data;
    // The scalars of every micro-batch, in index order, follow each rank's nodes.
    for (int r = 0; r < ranks_; ++r)
      add_scalars(&received_[static_cast<size_t>(r * slot + slot_nodes_ * total_)], per_rank);
  }
  const float scale = 1.0f / static_cast<float>(n);
  for (float& m : means_) m *= scale;
  for (auto& grads : results_)
    for (size_t v = 0; v < grads.size(); ++v) {
      float* out = grads[v].data<float>();
      const float* in = root + offsets_[v];
      for (int64_t i = 0; i < grads[v].numel(); ++i) out[i] = in[i] * scale;
    }
  trace_.reduce_seconds = seconds_since(start) - trace_.comm_seconds;
}

}  // namespace tower
