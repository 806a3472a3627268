// The CPU batch normalization for kernels that build on it (only kernel files include this).
#pragma once

#include <memory>

#include "tower/kernels/kernel.h"

namespace tower::cpu {

// Training FusedBatchNorm[+Relu], FusedBatchNorm+Add+Relu (a sixth input: the residual) and
// [ReluGrad+]FusedBatchNormGrad as loops over groups of channels, for x in a convolution's layout
// (batch_norm_groups.cc); null where they do not apply.
std::unique_ptr<Kernel> make_batch_norm_groups(const Node& node, const KernelContext& context,
                                               bool relu);
std::unique_ptr<Kernel> make_batch_norm_grad_groups(const Node& node, const KernelContext& context,
                                                    bool relu);

}  // namespace tower::cpu
