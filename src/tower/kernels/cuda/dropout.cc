// CUDA kernels of Dropout and DropoutGrad (dropout.cu): the same Philox stream as the CPU kernel,
// keyed by (seed, "dropout", key node, salt, step), so both devices drop the same elements.
#include "tower/kernels/cuda/dropout.h"

#include "tower/core/philox.h"
#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/dropout.h"

namespace tower::cuda {
namespace {

constexpr uint64_t kDropoutPurpose = 0x64726f706f7574;  // "dropout", as in kernels/cpu/dropout.cc

void apply_mask(const Node& node, const KernelIO& io, cudaStream_t stream) {
  const auto& attrs = node.attr<ops::DropoutAttrs>();
  const int key_node = attrs.key_node >= 0 ? attrs.key_node : node.id;
  const uint64_t stream_id = philox_stream(
      philox_stream(kDropoutPurpose, static_cast<uint64_t>(key_node), attrs.salt), io.step);
  const auto threshold = static_cast<uint32_t>(static_cast<double>(attrs.keep_prob) * (1u << 24));
  const float inv_keep = 1.0f / attrs.keep_prob;
  launch_dropout(io.inputs[0].data<float>(), output_of(io), io.inputs[0].numel(), attrs.seed,
                 stream_id, threshold, inv_keep, stream);
}

KernelRegistrar dropout{"Dropout", DeviceKind::cuda, stream_kernel(apply_mask)};
KernelRegistrar dropout_grad{"DropoutGrad", DeviceKind::cuda, stream_kernel(apply_mask)};

}  // namespace
}  // namespace tower::cuda
