// Conv2D and its adjoints with oneDNN. The primitives pick their own (blocked) layouts
// (format_tag::any), which are much faster than plain NCHW for direct convolution, and declare
// them as their input and output layouts: the runtime reorders only where a neighbour differs.
#include "tower/ops/conv.h"

#include <cstring>
#include <vector>

#include "tower/kernels/cpu/dnnl_util.h"
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

// One tensor argument of the primitive, in the layout the primitive chose: the runtime hands it
// over in that layout (converting only where the neighbouring kernel wrote or reads another).
struct Arg {
  int dnnl_arg = 0;
  bool is_output = false;
  int index = 0;  // into io.inputs or io.outputs
  Shape shape;
  memory::desc md;
};

class ConvKernel : public Kernel {
 public:
  // `node` must outlive the kernel (the graph does). `args` list the inputs first.
  ConvKernel(const Node& node, dnnl::primitive prim, memory::desc scratchpad_md,
             std::vector<Arg> args)
      : node_(node), prim_(std::move(prim)), scratchpad_md_(scratchpad_md), args_(std::move(args)) {
    for (const Value& in : node.inputs) has_empty_input_ |= in.shape().numel() == 0;
  }

  size_t scratch_bytes() const override { return scratchpad_md_.get_size(); }
  Layout input_layout(int i) const override { return layout_of(false, i); }
  Layout output_layout(int o) const override { return layout_of(true, o); }

  void bind(const KernelIO& io) override {
    for (const Arg& arg : args_) {
      const Tensor& t = arg.is_output ? io.outputs[static_cast<size_t>(arg.index)]
                                      : io.inputs[static_cast<size_t>(arg.index)];
      prim_args_[arg.dnnl_arg] = make_memory(arg.md, t);
    }
    add_scratchpad(prim_args_, scratchpad_md_, io.scratch);
  }

  void run(const KernelIO& io) override {
    // oneDNN skips primitives on empty tensors; an empty batch still has a (zero) filter gradient.
    if (has_empty_input_) {
      for (const Arg& arg : args_)
        if (arg.is_output)
          std::memset(const_cast<void*>(io.outputs[static_cast<size_t>(arg.index)].raw_data()), 0,
                      arg.md.get_size());
      return;
    }
    execute(node_, prim_, prim_args_);
  }

 private:
  Layout layout_of(bool is_output, int index) const {
    for (const Arg& arg : args_)
      if (arg.is_output == is_output && arg.index == index) return to_layout(arg.md, arg.shape);
    return {};
  }

  const Node& node_;
  dnnl::primitive prim_;
  memory::desc scratchpad_md_;
  std::vector<Arg> args_;
  bool has_empty_input_ = false;
  std::unordered_map<int, memory> prim_args_;
};

Arg input_arg(int dnnl_arg, int index, const Shape& shape, const memory::desc& md) {
  return Arg{.dnnl_arg = dnnl_arg, .index = index, .shape = shape, .md = md};
}

Arg output_arg(int dnnl_arg, const Shape& shape, const memory::desc& md, int index = 0) {
  return Arg{.dnnl_arg = dnnl_arg, .is_output = true, .index = index, .shape = shape, .md = md};
}

// Conv2D, and the fused Conv2D+BiasAdd[+Relu] (inputs x, w, bias).
template <bool kBias, bool kRelu>
std::unique_ptr<Kernel> make_conv2d(const Node& node, const KernelContext& context) {
  const Shape& x = node.inputs[0].shape();
  const Shape& w = node.inputs[1].shape();
  const Shape& y = node.outputs[0].shape;
  const int64_t bias = kBias ? w[0] : 0;
  auto pd = build(node, [&] {
    return forward_pd(x, w, y, node.attr<ops::Conv2DAttrs>(), operand_type(context), bias, kRelu);
  });
  std::vector<Arg> args = {input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc()),
                           input_arg(DNNL_ARG_WEIGHTS, 1, w, pd.weights_desc())};
  if (kBias) args.push_back(input_arg(DNNL_ARG_BIAS, 2, Shape{bias}, pd.bias_desc()));
  args.push_back(output_arg(DNNL_ARG_DST, y, pd.dst_desc()));
  return std::make_unique<ConvKernel>(node, dnnl::convolution_forward(pd), pd.scratchpad_desc(),
                                      std::move(args));
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
      auto pd = build(node, [&] {
        ConvGeometry g = geometry(x, w, a.conv);
        dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, any_md(x),
                                                   any_md(w, type), any_md(dy, type), g.strides,
                                                   g.padding_l, g.padding_r);
        return dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad(), engine(),
                                                               forward_pd(x, w, dy, a.conv, type));
      });
      return std::make_unique<ConvKernel>(
          node, dnnl::convolution_backward_data(pd), pd.scratchpad_desc(),
          std::vector<Arg>{input_arg(DNNL_ARG_WEIGHTS, 0, w, pd.weights_desc()),
                           input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc()),
                           output_arg(DNNL_ARG_DIFF_SRC, x, pd.diff_src_desc())});
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
  auto pd = build(node, [&] {
    ConvGeometry g = geometry(x, w, a.conv);
    auto desc = kBias ? dnnl::convolution_backward_weights::desc(
                            dnnl::algorithm::convolution_direct, any_md(x, type), any_md(w),
                            plain_md(db), any_md(dy, type), g.strides, g.padding_l, g.padding_r)
                      : dnnl::convolution_backward_weights::desc(
                            dnnl::algorithm::convolution_direct, any_md(x, type), any_md(w),
                            any_md(dy, type), g.strides, g.padding_l, g.padding_r);
    return dnnl::convolution_backward_weights::primitive_desc(
        desc, user_scratchpad(), engine(), forward_pd(x, w, dy, a.conv, type, kBias ? w[0] : 0));
  });
  std::vector<Arg> args = {input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc()),
                           input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc()),
                           output_arg(DNNL_ARG_DIFF_WEIGHTS, w, pd.diff_weights_desc())};
  if (kBias) args.push_back(output_arg(DNNL_ARG_DIFF_BIAS, db, pd.diff_bias_desc(), 1));
  return std::make_unique<ConvKernel>(node, dnnl::convolution_backward_weights(pd),
                                      pd.scratchpad_desc(), std::move(args));
}

KernelRegistrar conv2d_backprop_filter_kernel{"Conv2DBackpropFilter", DeviceKind::cpu,
                                              make_conv2d_backprop_filter<false>};
KernelRegistrar conv2d_backprop_filter_bias_kernel{
    "Conv2DBackpropFilter+BiasAddGrad", DeviceKind::cpu, make_conv2d_backprop_filter<true>};

}  // namespace
}  // namespace tower::cpu
