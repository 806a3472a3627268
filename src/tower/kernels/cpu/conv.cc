// Conv2D and its adjoints with oneDNN. The primitives pick their own (blocked) layouts
// (format_tag::any), which are much faster than plain NCHW for direct convolution, and declare
// them as their input and output layouts: the runtime reorders only where a neighbour differs.
// On a team of threads they run in batch chunks (chunks.h).
#include "tower/ops/conv.h"

#include <vector>

#include "tower/kernels/cpu/chunks.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// Any layout the primitive likes; in bf16 precision the multiplied operands are bf16 and the
// results (outputs and gradients) stay f32.
memory::desc any_md(const Shape& shape, memory::data_type type = memory::data_type::f32) {
  return memory::desc(to_dims(shape), type, tag::any);
}
memory::data_type operand_type(const KernelContext& context) {
  return context.precision == Precision::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
}

struct ConvGeometry {
  memory::dims strides, padding_l, padding_r;
};

ConvGeometry geometry(const Shape& x, const Shape& w, const ops::Conv2DAttrs& a) {
  ops::AxisPadding ph = ops::axis_padding(x[2], w[2], a.strides[0], a.padding);
  ops::AxisPadding pw = ops::axis_padding(x[3], w[3], a.strides[1], a.padding);
  return {{a.strides[0], a.strides[1]}, {ph.before, pw.before}, {ph.after, pw.after}};
}

// The forward descriptor, also the hint the backward primitives are built against. Fused
// (Conv2D+BiasAdd[+Relu]): with a bias of `bias` channels (f32) and ReLU as a post-op.
dnnl::convolution_forward::primitive_desc forward_pd(const Shape& x, const Shape& w, const Shape& y,
                                                     const ops::Conv2DAttrs& a,
                                                     memory::data_type type, int64_t bias = 0,
                                                     bool relu = false) {
  ConvGeometry g = geometry(x, w, a);
  const auto prop = dnnl::prop_kind::forward_training;
  const auto alg = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr = user_scratchpad();
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  if (bias > 0)
    return {dnnl::convolution_forward::desc(prop, alg, any_md(x, type), any_md(w, type),
                                            plain_md(Shape{bias}), any_md(y), g.strides,
                                            g.padding_l, g.padding_r),
            attr, engine()};
  return {dnnl::convolution_forward::desc(prop, alg, any_md(x, type), any_md(w, type), any_md(y),
                                          g.strides, g.padding_l, g.padding_r),
          attr, engine()};
}

// Conv2D, and the fused Conv2D+BiasAdd[+Relu] (inputs x, w, bias).
template <bool kBias, bool kRelu>
std::unique_ptr<Kernel> make_conv2d(const Node& node, const KernelContext& context) {
  const Shape& x = node.inputs[0].shape();
  const Shape& w = node.inputs[1].shape();
  const Shape& y = node.outputs[0].shape;
  const int64_t bias = kBias ? w[0] : 0;
  return chunked(node, context, x[0], [&](int64_t rows) {
    auto pd = build(node, [&] {
      return forward_pd(with_rows(x, rows), w, with_rows(y, rows), node.attr<ops::Conv2DAttrs>(),
                        operand_type(context), bias, kRelu);
    });
    std::vector<Arg> args = {input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc(), Role::rows),
                             input_arg(DNNL_ARG_WEIGHTS, 1, w, pd.weights_desc())};
    if (kBias) args.push_back(input_arg(DNNL_ARG_BIAS, 2, Shape{bias}, pd.bias_desc()));
    args.push_back(output_arg(DNNL_ARG_DST, y, pd.dst_desc(), Role::rows));
    return Built{dnnl::convolution_forward(pd), pd.scratchpad_desc(), std::move(args)};
  });
}

KernelRegistrar conv2d_kernel{"Conv2D", DeviceKind::cpu, make_conv2d<false, false>};
KernelRegistrar conv2d_bias_kernel{"Conv2D+BiasAdd", DeviceKind::cpu, make_conv2d<true, false>};
KernelRegistrar conv2d_bias_relu_kernel{"Conv2D+BiasAdd+Relu", DeviceKind::cpu,
                                        make_conv2d<true, true>};

// inputs (w, dy) -> dx
KernelRegistrar conv2d_backprop_input_kernel{
    "Conv2DBackpropInput", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      const auto& a = node.attr<ops::Conv2DBackpropAttrs>();
      const memory::data_type type = operand_type(context);
      const Shape& x = a.shape;
      const Shape& w = node.inputs[0].shape();
      const Shape& dy = node.inputs[1].shape();
      return chunked(node, context, x[0], [&](int64_t rows) {
        const Shape xr = with_rows(x, rows), dyr = with_rows(dy, rows);
        auto pd = build(node, [&] {
          ConvGeometry g = geometry(x, w, a.conv);
          dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct,
                                                     any_md(xr), any_md(w, type), any_md(dyr, type),
                                                     g.strides, g.padding_l, g.padding_r);
          return dnnl::convolution_backward_data::primitive_desc(
              desc, user_scratchpad(), engine(), forward_pd(xr, w, dyr, a.conv, type));
        });
        return Built{
            dnnl::convolution_backward_data(pd), pd.scratchpad_desc(),
            std::vector<Arg>{input_arg(DNNL_ARG_WEIGHTS, 0, w, pd.weights_desc()),
                             input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc(), Role::rows),
                             output_arg(DNNL_ARG_DIFF_SRC, x, pd.diff_src_desc(), Role::rows)}};
      });
    }};

// inputs (x, dy) -> dw; and Conv2DBackpropFilter+BiasAddGrad (the runtime's fusion of the two
// readers of dy) -> dw, db, the bias gradient summed by the same primitive.
template <bool kBias>
std::unique_ptr<Kernel> make_conv2d_backprop_filter(const Node& node,
                                                    const KernelContext& context) {
  const auto& a = node.attr<ops::Conv2DBackpropAttrs>();
  const memory::data_type type = operand_type(context);
  const Shape& x = node.inputs[0].shape();
  const Shape& w = a.shape;
  const Shape& dy = node.inputs[1].shape();
  const Shape db{w[0]};
  return chunked(node, context, x[0], [&](int64_t rows) {
    const Shape xr = with_rows(x, rows), dyr = with_rows(dy, rows);
    auto pd = build(node, [&] {
      ConvGeometry g = geometry(x, w, a.conv);
      auto desc = kBias ? dnnl::convolution_backward_weights::desc(
                              dnnl::algorithm::convolution_direct, any_md(xr, type), any_md(w),
                              plain_md(db), any_md(dyr, type), g.strides, g.padding_l, g.padding_r)
                        : dnnl::convolution_backward_weights::desc(
                              dnnl::algorithm::convolution_direct, any_md(xr, type), any_md(w),
                              any_md(dyr, type), g.strides, g.padding_l, g.padding_r);
      return dnnl::convolution_backward_weights::primitive_desc(
          desc, user_scratchpad(), engine(),
          forward_pd(xr, w, dyr, a.conv, type, kBias ? w[0] : 0));
    });
    std::vector<Arg> args = {
        input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc(), Role::rows),
        input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc(), Role::rows),
        output_arg(DNNL_ARG_DIFF_WEIGHTS, w, pd.diff_weights_desc(), Role::sum)};
    if (kBias)
      args.push_back(output_arg(DNNL_ARG_DIFF_BIAS, db, pd.diff_bias_desc(), Role::sum, 1));
    return Built{dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(), std::move(args)};
  });
}

KernelRegistrar conv2d_backprop_filter_kernel{"Conv2DBackpropFilter", DeviceKind::cpu,
                                              make_conv2d_backprop_filter<false>};
KernelRegistrar conv2d_backprop_filter_bias_kernel{
    "Conv2DBackpropFilter+BiasAddGrad", DeviceKind::cpu, make_conv2d_backprop_filter<true>};

}  // namespace
}  // namespace tower::cpu
