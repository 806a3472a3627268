// Winograd F(2x2, 3x3) convolutions under AVX2 (conv_winograd.cc; only kernel files include this).
#pragma once

#include <memory>

#include "tower/kernels/cpu/conv.h"

namespace tower::cpu {

// The layout the kernels read and write activations of `shape` in: nChw8c.
Layout winograd_activation_layout(const Shape& shape);
// The layout of a 3x3 filter w (K, C, 3, 3) transformed for the kernel: U = G g G^T per filter, as
// [16 positions][K / 8][C][8 output channels]; `flipped`, of the filter of the input gradient
// instead (from K channels to C, rows and columns reversed). The runtime's reorder (reorder.cc)
// writes it from the plain filter with winograd_filter.
Layout winograd_filter_layout(const Shape& w, bool flipped = false);
bool is_winograd_filter(const Layout& layout);
void winograd_filter(const float* w, const Shape& w_shape, const Layout& layout, float* u);

// The Conv2D[+BiasAdd][+Add][+Relu] kernel by Winograd's F(2x2, 3x3), or null where it does not
// apply: AVX2, fp32, 3x3 stride-1 SAME, 16 or more input channels in blocks of 8 and output
// channels in blocks of 16, and a plain filter.
std::unique_ptr<Kernel> make_winograd_conv(const Node& node, const KernelContext& context,
                                           const ConvEpilogue& epilogue);
// Conv2DBackpropInput of such a convolution (inputs w, dy) by the same kernel, or null.
std::unique_ptr<Kernel> make_winograd_backprop_input(const Node& node,
                                                     const KernelContext& context);
// Conv2DBackpropFilter[+BiasAddGrad with `bias`] of a 3x3 stride-1 SAME fp32 convolution under
// AVX2 with 16 or more input channels in blocks of 16 and 16 or more output channels in blocks of 8
// (conv_filter_grad_winograd.cc), or null.
std::unique_ptr<Kernel> make_winograd_filter_grad(const Node& node, const KernelContext& context,
                                                  bool bias);

}  // namespace tower::cpu
