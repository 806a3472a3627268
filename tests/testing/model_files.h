// Model files the integration tests train (header-only test helper).
#pragma once

#include <string>

namespace tower::testing {

// A small batch-norm model for 32x32 RGB images: conv_bn, one residual block, global average
// pooling, logits; named `name`.
inline std::string small_bn_model(const std::string& name) {
  return R"({
  "name": ")" +
         name + R"(", "input": [3, 32, 32],
  "layers": [
    {"type": "conv_bn", "name": "conv0", "filters": 8, "stride": 2, "activation": "relu"},
    {"type": "residual", "name": "block1", "filters": 8},
    {"type": "global_avg_pool"},
    {"type": "dense", "name": "logits", "units": "num_classes"}
  ]
})";
}

}  // namespace tower::testing
