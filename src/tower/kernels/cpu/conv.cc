// Conv2D and its adjoints with oneDNN. The primitives pick their own (blocked) layouts
// (format_tag::any), which are much faster than plain NCHW for direct convolution; plain tensors
// are reordered into and out of kernel scratch around the primitive.
#include "tower/ops/conv.h"

#include <optional>
#include <vector>

#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

memory::desc any_md(const Shape& shape) {
  return memory::desc(to_dims(shape), memory::data_type::f32, tag::any);
}

struct ConvGeometry {
  memory::dims strides, padding_l, padding_r;
};

ConvGeometry geometry(const Shape& x, const Shape& w, const ops::Conv2DAttrs& a) {
  ops::AxisPadding ph = ops::axis_padding(x[2], w[2], a.strides[0], a.padding);
  ops::AxisPadding pw = ops::axis_padding(x[3], w[3], a.strides[1], a.padding);
  return {{a.strides[0], a.strides[1]}, {ph.before, pw.before}, {ph.after, pw.after}};
}

// The forward descriptor, also the hint the backward primitives are built against.
dnnl::convolution_forward::primitive_desc forward_pd(const Shape& x, const Shape& w, const Shape& y,
                                                     const ops::Conv2DAttrs& a) {
  ConvGeometry g = geometry(x, w, a);
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, any_md(x), any_md(w),
                                       any_md(y), g.strides, g.padding_l, g.padding_r);
  return {desc, user_scratchpad(), engine()};
}

// One tensor argument of the primitive: the plain buffer of the graph and, when the primitive
// chose another layout, a copy of it in scratch with the reorder between them.
struct Arg {
  int dnnl_arg = 0;
  bool is_output = false;
  int index = 0;  // into io.inputs or io.outputs
  memory::desc user_md, prim_md;
  size_t offset = 0;
  std::optional<dnnl::reorder> reorder_prim;
  memory user_mem, prim_mem;
  std::unordered_map<int, memory> reorder_args;
};

class ConvKernel : public Kernel {
 public:
  // `node` must outlive the kernel (the graph does). `args` list the inputs first.
  ConvKernel(const Node& node, dnnl::primitive prim, memory::desc scratchpad_md,
             std::vector<Arg> args)
      : node_(node), prim_(std::move(prim)), scratchpad_md_(scratchpad_md), args_(std::move(args)) {
    for (const Value& in : node.inputs) has_empty_input_ |= in.shape().numel() == 0;
    scratch_bytes_ = align64(scratchpad_md_.get_size());
    for (Arg& arg : args_) {
      if (arg.prim_md == arg.user_md) continue;
      arg.offset = scratch_bytes_;
      scratch_bytes_ += align64(arg.prim_md.get_size());
      const memory::desc& from = arg.is_output ? arg.prim_md : arg.user_md;
      const memory::desc& to = arg.is_output ? arg.user_md : arg.prim_md;
      arg.reorder_prim = build(node_, [&] {
        return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
      });
    }
  }

  size_t scratch_bytes() const override { return scratch_bytes_; }

  void bind(const KernelIO& io) override {
    auto* scratch = static_cast<char*>(io.scratch);
    for (Arg& arg : args_) {
      const Tensor& t = arg.is_output ? io.outputs[static_cast<size_t>(arg.index)]
                                      : io.inputs[static_cast<size_t>(arg.index)];
      arg.user_mem = make_memory(arg.user_md, t);
      if (arg.reorder_prim) {
        arg.prim_mem = memory(arg.prim_md, engine(), scratch + arg.offset);
        arg.reorder_args = {{DNNL_ARG_FROM, arg.is_output ? arg.prim_mem : arg.user_mem},
                            {DNNL_ARG_TO, arg.is_output ? arg.user_mem : arg.prim_mem}};
      } else {
        arg.prim_mem = arg.user_mem;
      }
      prim_args_[arg.dnnl_arg] = arg.prim_mem;
    }
    if (scratchpad_md_.get_size() > 0)
      prim_args_[DNNL_ARG_SCRATCHPAD] = memory(scratchpad_md_, engine(), scratch);
  }

  void run(const KernelIO& io) override {
    // oneDNN skips primitives on empty tensors; an empty batch still has a (zero) filter gradient.
    if (has_empty_input_) {
      for (const Tensor& t : io.outputs) const_cast<Tensor&>(t).fill_zero();
      return;
    }
    for (const Arg& arg : args_)
      if (!arg.is_output && arg.reorder_prim) execute(node_, *arg.reorder_prim, arg.reorder_args);
    execute(node_, prim_, prim_args_);
    for (const Arg& arg : args_)
      if (arg.is_output && arg.reorder_prim) execute(node_, *arg.reorder_prim, arg.reorder_args);
  }

 private:
  const Node& node_;
  dnnl::primitive prim_;
  memory::desc scratchpad_md_;
  std::vector<Arg> args_;
  size_t scratch_bytes_ = 0;
  bool has_empty_input_ = false;
  std::unordered_map<int, memory> prim_args_;
};

Arg input_arg(int dnnl_arg, int index, const Shape& shape, const memory::desc& prim_md) {
  return Arg{.dnnl_arg = dnnl_arg, .index = index, .user_md = plain_md(shape), .prim_md = prim_md};
}

Arg output_arg(int dnnl_arg, const Shape& shape, const memory::desc& prim_md) {
  return Arg{
      .dnnl_arg = dnnl_arg, .is_output = true, .user_md = plain_md(shape), .prim_md = prim_md};
}

KernelRegistrar conv2d_kernel{
    "Conv2D", DeviceKind::cpu,
    [](const Node& node, const KernelContext&) -> std::unique_ptr<Kernel> {
      const Shape& x = node.inputs[0].shape();
      const Shape& w = node.inputs[1].shape();
      const Shape& y = node.outputs[0].shape;
      auto pd = build(node, [&] { return forward_pd(x, w, y, node.attr<ops::Conv2DAttrs>()); });
      return std::make_unique<ConvKernel>(
          node, dnnl::convolution_forward(pd), pd.scratchpad_desc(),
          std::vector<Arg>{input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc()),
                           input_arg(DNNL_ARG_WEIGHTS, 1, w, pd.weights_desc()),
                           output_arg(DNNL_ARG_DST, y, pd.dst_desc())});
    }};

// inputs (w, dy) -> dx
KernelRegistrar conv2d_backprop_input_kernel{
    "Conv2DBackpropInput", DeviceKind::cpu,
    [](const Node& node, const KernelContext&) -> std::unique_ptr<Kernel> {
      const auto& a = node.attr<ops::Conv2DBackpropAttrs>();
      const Shape& x = a.shape;
      const Shape& w = node.inputs[0].shape();
      const Shape& dy = node.inputs[1].shape();
      auto pd = build(node, [&] {
        ConvGeometry g = geometry(x, w, a.conv);
        dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, any_md(x),
                                                   any_md(w), any_md(dy), g.strides, g.padding_l,
                                                   g.padding_r);
        return dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad(), engine(),
                                                               forward_pd(x, w, dy, a.conv));
      });
      return std::make_unique<ConvKernel>(
          node, dnnl::convolution_backward_data(pd), pd.scratchpad_desc(),
          std::vector<Arg>{input_arg(DNNL_ARG_WEIGHTS, 0, w, pd.weights_desc()),
                           input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc()),
                           output_arg(DNNL_ARG_DIFF_SRC, x, pd.diff_src_desc())});
    }};

// inputs (x, dy) -> dw
KernelRegistrar conv2d_backprop_filter_kernel{
    "Conv2DBackpropFilter", DeviceKind::cpu,
    [](const Node& node, const KernelContext&) -> std::unique_ptr<Kernel> {
      const auto& a = node.attr<ops::Conv2DBackpropAttrs>();
      const Shape& x = node.inputs[0].shape();
      const Shape& w = a.shape;
      const Shape& dy = node.inputs[1].shape();
      auto pd = build(node, [&] {
        ConvGeometry g = geometry(x, w, a.conv);
        dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct,
                                                      any_md(x), any_md(w), any_md(dy), g.strides,
                                                      g.padding_l, g.padding_r);
        return dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad(), engine(),
                                                                  forward_pd(x, w, dy, a.conv));
      });
      return std::make_unique<ConvKernel>(
          node, dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(),
          std::vector<Arg>{input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc()),
                           input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc()),
                           output_arg(DNNL_ARG_DIFF_WEIGHTS, w, pd.diff_weights_desc())});
    }};

}  // namespace
}  // namespace tower::cpu
