// Gradients combined by one fixed binary tree over micro-batch indices, so that the sum does not
// depend on how the micro-batches of a step are placed on towers and ranks.
//
// The tree over the n micro-batches of a step: level 0 holds each micro-batch's gradient; a level
// adds neighbours 2j and 2j+1 of the level below, and an odd last one moves up unchanged. A node
// therefore covers an aligned run [lo, hi) with lo = j * 2^L and hi = min(lo + 2^L, n).
// Floating-point addition is commutative, so only which sums are formed matters, never who forms
// them: a tower adds up the nodes inside its contiguous run of micro-batches as they finish, the
// rank joins its towers' nodes, and the ranks exchange theirs (an all-gather) so that every rank
// forms the upper levels itself. The micro-batches are all the same size, so the mean gradient
// is the root times 1/n: the same bits for 1 tower or 16 towers on 4 ranks.
#pragma once

#include <cstdint>
#include <vector>

#include "tower/core/tensor.h"
#include "tower/parallel/communicator.h"
#include "tower/parallel/gradient_reducer.h"

namespace tower {

struct TreeSpan {
  int64_t lo = 0, hi = 0;  // micro-batches [lo, hi)
  bool operator==(const TreeSpan&) const = default;
};
// Whether a and b are the left and right children of one node of the tree over n micro-batches.
bool tree_siblings(TreeSpan a, TreeSpan b, int64_t n);
// The largest nodes inside [lo, hi), left to right: what the holder of that run sums by itself.
std::vector<TreeSpan> tree_cover(int64_t lo, int64_t hi, int64_t n);

// Where the micro-batches of one step are computed.
struct MicroBatchLayout {
  int64_t micro_batches = 0;         // n, of all ranks together
  int64_t rank_first = 0;            // this rank's first micro-batch; ranks hold equal shares
  std::vector<int64_t> tower_count;  // this rank's towers: micro-batches each, in order
};

class TreeReducer final : public GradientReducer {
 public:
  // shapes: of each trainable variable's gradient. num_scalars: the loss and metrics fetched per
  // micro-batch. comm: null for this process alone.
  TreeReducer(const std::vector<Shape>& shapes, int num_replicas, MicroBatchLayout layout,
              int num_scalars, Communicator* comm);

  // On tower `tower`'s thread, as its micro-batches finish, in order: micro-batch `micro`'s
  // gradients (one per variable) and scalars.
  void add(int tower, int64_t micro, const std::vector<const Tensor*>& grads, const float* scalars);
  // After finish(): each scalar's mean over the n micro-batches (summed in index order).
  const std::vector<float>& mean_scalars() const { return means_; }

  void begin_step() override;
  void ready(int, int) override {}  // towers call add() instead
  void finish() override;
  void abort() override {}
  Tensor& result(int replica, int variable) override {
    return results_[static_cast<size_t>(replica)][static_cast<size_t>(variable)];
  }
  int num_replicas() const override { return static_cast<int>(results_.size()); }
  ReduceTrace trace() const override { return trace_; }

 private:
  struct Node {
    TreeSpan span;
    float* data;  // total_ floats: every variable's gradient, one after the other
  };
  struct TowerNodes {
    std::vector<std::vector<float>> buffers;  // enough for the deepest stack of its run
    std::vector<float*> free;
    std::vector<Node> stack;  // left to right, every pair of neighbours already added up
  };
  // Pushes `node` onto `stack`, adding it into its left sibling while there is one (the right
  // one's buffer is handed to `freed` when given).
  void push(std::vector<Node>& stack, Node node, std::vector<float*>* freed) const;

  std::vector<int64_t> offsets_;  // of each variable in a node's buffer
  int64_t total_ = 0;
  MicroBatchLayout layout_;
  int num_scalars_;
  Communicator* comm_;
  int ranks_ = 1;
  std::vector<TowerNodes> towers_;
  std::vector<float> scalars_;                      // [micro-batch of this rank][scalar]
  std::vector<float> sent_, received_;              // the all-gather's buffers (several ranks)
  std::vector<std::vector<TreeSpan>> rank_covers_;  // each rank's nodes (several ranks)
  int64_t slot_nodes_ = 0;                          // nodes per rank in an all-gather slot
  std::vector<std::vector<Tensor>> results_;
  std::vector<float> means_;
  ReduceTrace trace_;
};

}  // namespace tower
