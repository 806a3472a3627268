// Every op the models and the trainer rely on is registered and, unless the runtime handles it
// itself, has a CPU kernel. Fails loudly when a registrar is not linked (see STYLE.md §2).
#include <gtest/gtest.h>

#include <algorithm>

#include "tower/graph/op_registry.h"
#include "tower/kernels/kernel.h"

namespace tower {
namespace {

const char* const kExpectedOps[] = {
    // graph sources (Placeholder, Variable and Constant are materialized by the runtime)
    "Placeholder",
    "Variable",
    "Constant",
    // nn
    "Conv2D",
    "Conv2DBackpropInput",
    "Conv2DBackpropFilter",
    "BiasAdd",
    "BiasAddGrad",
    "MaxPool",
    "MaxPoolGrad",
    "AvgPool",
    "AvgPoolGrad",
    "LRN",
    "LRNGrad",
    "Relu",
    "ReluGrad",
    "Relu6",
    "Relu6Grad",
    "Elu",
    "EluGrad",
    "Sigmoid",
    "SigmoidGrad",
    "Tanh",
    "TanhGrad",
    // math
    "Add",
    "Sub",
    "Mul",
    "Scale",
    "Square",
    "AddN",
    "ReduceSum",
    "SumToShape",
    "BroadcastTo",
    "L2Loss",
    "Reshape",
    // matmul
    "MatMul",
    // losses and metrics
    "SparseSoftmaxCrossEntropyWithLogits",
    "SparseSoftmaxXentGrad",
    "Softmax",
    "SoftmaxGrad",
    "ArgMax",
    "InTopK",
    // dropout
    "Dropout",
    "DropoutGrad",
    // batch norm
    "FusedBatchNorm",
    "FusedBatchNormGrad",
    "AssignMovingAverage",
};

bool handled_by_runtime(const std::string& op) {
  return op == "Placeholder" || op == "Variable" || op == "Constant";
}

TEST(RegistryTest, EveryExpectedOpIsRegisteredWithACpuKernel) {
  std::vector<std::string> ops = registered_ops();
  for (const char* op : kExpectedOps) {
    EXPECT_TRUE(std::binary_search(ops.begin(), ops.end(), op)) << op << " is not registered";
    if (!handled_by_runtime(op)) {
      EXPECT_NE(find_kernel(op, DeviceKind::cpu), nullptr) << op << " has no CPU kernel";
    }
  }
}

TEST(RegistryTest, EveryRegisteredOpHasACpuKernel) {
  for (const std::string& op : registered_ops()) {
    if (!handled_by_runtime(op)) {
      EXPECT_NE(find_kernel(op, DeviceKind::cpu), nullptr) << op << " has no CPU kernel";
    }
  }
}

}  // namespace
}  // namespace tower
