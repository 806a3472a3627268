// Inverted dropout: y = x * mask / keep_prob, mask ~ Bernoulli(keep_prob), so inference needs no
// rescaling.
#pragma once

#include <cstdint>

#include "tower/graph/graph.h"

namespace tower::ops {

// The mask of element i at step t is a pure function of (seed, key_node, salt, t, i) (Philox):
// it changes every step, repeats across runs, and DropoutGrad regenerates it instead of storing it.
struct DropoutAttrs {
  float keep_prob = 1.0f;
  uint64_t seed = 0;  // the graph's seed when the op was built
  uint64_t salt = 0;
  int key_node = -1;  // node id keying the mask; -1: the node's own id (the forward Dropout)
};

// Op "Dropout"; its gradient is op "DropoutGrad" (dy -> dy * mask / keep_prob). Reads
// scope.graph().seed when called, so set the graph's seed before building the model.
Value dropout(const Scope& s, Value x, float keep_prob, uint64_t seed_salt = 0);

}  // namespace tower::ops
