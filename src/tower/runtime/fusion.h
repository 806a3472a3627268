// Fusion: the chains and siblings of a graph that one kernel computes (ProgramOptions::fuse).
//   chains    Conv2D or MatMul -> BiasAdd [-> Relu] (bias and ReLU as post-ops); Conv2D ->
//             FusedBatchNorm in inference mode [-> Add -> Relu | -> Relu] (the batch norm folded
//             into the weights and a bias, each run; a residual Add's other operand as the sum
//             post-op; the statistics outputs unread); FusedBatchNorm -> Relu (oneDNN's fused
//             ReLU; the fused node keeps the statistics outputs and is built where the batch norm
//             is); MaxPoolGrad or
//             LRNGrad -> ReluGrad where the ReLU's output is what was pooled or normalized; Mul
//             by a scalar -> AddN of two (a weight decay term added to a gradient). Every value of
//             the chain but the last is read only by the next node and not fetched.
//   siblings  Conv2DBackpropFilter and BiasAddGrad of the same dy (oneDNN's weight gradient sums
//             the bias gradient as it goes): one kernel with both outputs.
// A fused node is built in place of the chain's last node (or the later sibling), whose inputs all
// exist by then (node ids are topological), and only where the device has a kernel for it.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "tower/core/device.h"
#include "tower/graph/graph.h"

namespace tower {

struct FusionPlan {
  std::vector<char> absorbed;                  // node id -> run inside a fused kernel
  std::map<int, std::unique_ptr<Node>> fused;  // node id -> the fused node built in its place
  // A sibling fusion's node: the value each of its outputs is.
  std::map<int, std::vector<Value>> fused_outputs;
  int fused_nodes = 0;  // nodes absorbed
};

// The plan for the `needed` nodes (by id) of `graph`; `fetches` are never fused away.
FusionPlan plan_fusion(const Graph& graph, const std::vector<char>& needed,
                       const std::vector<Value>& fetches, DeviceKind device);

}  // namespace tower
