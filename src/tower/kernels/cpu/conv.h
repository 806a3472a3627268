// The CPU convolution for kernels that build on it (only kernel files include this).
#pragma once

#include <memory>

#include "tower/kernels/kernel.h"
#include "tower/ops/conv.h"

namespace tower::cpu {

// What follows the convolution inside its primitive.
struct ConvEpilogue {
  bool bias = false;        // input 2, (O) f32
  bool add_output = false;  // the output's previous contents added (oneDNN's sum post-op)
  bool relu = false;
  bool relu6 = false;  // min(max(y, 0), 6) instead (oneDNN's clip post-op; oneDNN's kernels only)
};
// The Conv2D kernel of `node` (inputs x, w[, bias]; its Conv2DAttrs) with `epilogue`, in batch
// chunks on a team (chunks.h).
std::unique_ptr<Kernel> make_conv2d_with(const Node& node, const KernelContext& context,
                                         ConvEpilogue epilogue);
// Whether a filter of shape w with attributes a is 3x3, stride 1, SAME (padding 1 on every side):
// the convolutions that AdjointConv and the Winograd kernels take.
bool is_same_3x3(const Shape& w, const ops::Conv2DAttrs& a);
// Whether a 3x3 stride-1 SAME fp32 convolution with the same 16 or more channels on both sides
// runs as the backward-data convolution of its flipped filter (AdjointConv in conv.cc): under
// AVX2, and under AVX-512 on AMD CPUs, where oneDNN 2.6's backward-data kernel is the faster one.
bool adjoint_conv_pays();
// The filter gradient (Conv2DBackpropFilter[+BiasAddGrad] with `bias`) as a forward convolution
// in bf16 on AMX (conv_filter_grad_amx.cc); null where it does not apply.
std::unique_ptr<Kernel> make_filter_grad_as_forward(const Node& node, const KernelContext& context,
                                                    bool bias);
// The filter gradient (Conv2DBackpropFilter[+BiasAddGrad] with `bias`) of a convolution with few
// input channels, hand-written (conv_filter_grad.cc); null where it does not apply.
std::unique_ptr<Kernel> make_small_filter_grad(const Node& node, const KernelContext& context,
                                               bool bias);

}  // namespace tower::cpu
