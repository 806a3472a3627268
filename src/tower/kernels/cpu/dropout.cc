// Dropout and its gradient share one mask generator: element i keeps its value when the top 24
// bits of Philox word i fall below keep_prob * 2^24. Counter-based, so blocks are computed in
// parallel in any order with the same result.
#include "tower/ops/dropout.h"

#include <algorithm>

#include "tower/core/philox.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

constexpr uint64_t kDropoutPurpose = 0x64726f706f7574;  // "dropout"
constexpr int64_t kBlock = 16384;                       // a multiple of 4 (words per Philox call)

void apply_mask(const Node& node, const KernelIO& io) {
  const auto& attrs = node.attr<ops::DropoutAttrs>();
  int key_node = attrs.key_node >= 0 ? attrs.key_node : node.id;
  Philox rng(attrs.seed, philox_stream(philox_stream(kDropoutPurpose,
                                                     static_cast<uint64_t>(key_node), attrs.salt),
                                       io.step));
  auto threshold = static_cast<uint32_t>(static_cast<double>(attrs.keep_prob) * (1u << 24));
  float inv_keep = 1.0f / attrs.keep_prob;
  const float* x = io.inputs[0].data<float>();
  float* y = io.outputs[0].data<float>();
  int64_t n = io.inputs[0].numel();
  int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; i += 4) {
      auto words = rng.block(static_cast<uint64_t>(i / 4));
      for (int64_t l = 0; l < 4 && i + l < end; ++l)
        y[i + l] = (words[static_cast<size_t>(l)] >> 8) < threshold ? x[i + l] * inv_keep : 0.0f;
    }
  }
}

KernelRegistrar dropout_kernel{"Dropout", DeviceKind::cpu, simple_kernel(apply_mask)};
KernelRegistrar dropout_grad_kernel{"DropoutGrad", DeviceKind::cpu, simple_kernel(apply_mask)};

}  // namespace
}  // namespace tower::cpu
