// Pooling with oneDNN, in the layout x comes in (plain NCHW or a convolution's blocked one: pooling
// is memory-bound, converting for it would not pay). MaxPoolGrad has only x and dy: it reruns the
// forward pass into scratch to get oneDNN's workspace (the argmax), then runs the backward pass;
// dx is written in x's layout. AvgPoolGrad (no x) works on plain NCHW.
#include "tower/ops/pool.h"

#include <optional>

#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using dnnl::memory;

dnnl::algorithm algorithm_of(bool is_max) {
  // TensorFlow's average ignores padded positions, as does its max.
  return is_max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
}

// y follows x: plain for a plain x, else the layout oneDNN picks to go with x's.
dnnl::pooling_forward::primitive_desc forward_pd(dnnl::prop_kind prop, bool is_max, const Shape& x,
                                                 const Layout& x_layout, const Shape& y,
                                                 const ops::PoolAttrs& a) {
  ops::AxisPadding ph = ops::axis_padding(x[2], a.ksize[0], a.strides[0], a.padding);
  ops::AxisPadding pw = ops::axis_padding(x[3], a.ksize[1], a.strides[1], a.padding);
  memory::desc y_md = x_layout.is_plain() ? plain_md(y)
                                          : memory::desc(to_dims(y), memory::data_type::f32,
                                                         memory::format_tag::any);
  dnnl::pooling_forward::desc desc(prop, algorithm_of(is_max), md_of(x, x_layout), y_md,
                                   {a.strides[0], a.strides[1]}, {a.ksize[0], a.ksize[1]},
                                   {ph.before, pw.before}, {ph.after, pw.after});
  return {desc, user_scratchpad(), engine()};
}

class PoolForwardKernel : public Kernel {
 public:
  PoolForwardKernel(const Node& node, const KernelContext& context, bool is_max)
      : node_(node), x_layout_(context.input_layout(0)) {
    pd_ = build(node, [&] {
      return forward_pd(dnnl::prop_kind::forward_inference, is_max, node.inputs[0].shape(),
                        x_layout_, node.outputs[0].shape, node.attr<ops::PoolAttrs>());
    });
    prim_ = dnnl::pooling_forward(pd_);
  }
  Layout input_layout(int) const override { return x_layout_; }
  Layout output_layout(int) const override {
    return to_layout(pd_.dst_desc(), node_.outputs[0].shape);
  }
  size_t scratch_bytes() const override { return pd_.scratchpad_desc().get_size(); }
  void bind(const KernelIO& io) override {
    args_ = {{DNNL_ARG_SRC, make_memory(pd_.src_desc(), io.inputs[0])},
             {DNNL_ARG_DST, make_memory(pd_.dst_desc(), io.outputs[0])}};
    add_scratchpad(args_, pd_.scratchpad_desc(), io.scratch);
  }
  void run(const KernelIO& io) override { execute(node_, prim_, args_); }

 private:
  const Node& node_;
  Layout x_layout_;
  dnnl::pooling_forward::primitive_desc pd_;
  dnnl::pooling_forward prim_;
  std::unordered_map<int, memory> args_;
};

// Scratch layout: [forward scratchpad | backward scratchpad | y | workspace]; the last two only
// for max pooling.
class PoolBackwardKernel : public Kernel {
 public:
  PoolBackwardKernel(const Node& node, const KernelContext& context, bool is_max)
      : node_(node), is_max_(is_max) {
    const Shape& dy = node.inputs[is_max ? 1 : 0].shape();
    const Shape& dx = node.outputs[0].shape;
    const ops::PoolAttrs& a =
        is_max ? node.attr<ops::PoolAttrs>() : node.attr<ops::PoolGradAttrs>().pool;
    if (is_max) x_layout_ = context.input_layout(0);
    build(node, [&] {
      fwd_pd_ = forward_pd(dnnl::prop_kind::forward_training, is_max, dx, x_layout_, dy, a);
      ops::AxisPadding ph = ops::axis_padding(dx[2], a.ksize[0], a.strides[0], a.padding);
      ops::AxisPadding pw = ops::axis_padding(dx[3], a.ksize[1], a.strides[1], a.padding);
      dnnl::pooling_backward::desc desc(algorithm_of(is_max), md_of(dx, x_layout_),
                                        fwd_pd_.dst_desc(), {a.strides[0], a.strides[1]},
                                        {a.ksize[0], a.ksize[1]}, {ph.before, pw.before},
                                        {ph.after, pw.after});
      bwd_pd_ = dnnl::pooling_backward::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
      return 0;
    });
    bwd_prim_ = dnnl::pooling_backward(bwd_pd_);
    if (is_max_) fwd_prim_ = dnnl::pooling_forward(fwd_pd_);
    bwd_scratchpad_at_ = align64(is_max_ ? fwd_pd_.scratchpad_desc().get_size() : 0);
    y_at_ = bwd_scratchpad_at_ + align64(bwd_pd_.scratchpad_desc().get_size());
    workspace_at_ = y_at_ + (is_max_ ? align64(fwd_pd_.dst_desc().get_size()) : 0);
    scratch_bytes_ = workspace_at_ + (is_max_ ? align64(fwd_pd_.workspace_desc().get_size()) : 0);
  }

  size_t scratch_bytes() const override { return scratch_bytes_; }
  // x and dx in x's layout, dy in the forward output's.
  Layout input_layout(int i) const override {
    return i == 0 && is_max_
               ? x_layout_
               : to_layout(fwd_pd_.dst_desc(), node_.inputs[static_cast<size_t>(i)].shape());
  }
  Layout output_layout(int) const override { return x_layout_; }

  void bind(const KernelIO& io) override {
    auto* scratch = static_cast<char*>(io.scratch);
    const Tensor& dy = io.inputs[is_max_ ? 1 : 0];
    bwd_args_ = {{DNNL_ARG_DIFF_DST, make_memory(bwd_pd_.diff_dst_desc(), dy)},
                 {DNNL_ARG_DIFF_SRC, make_memory(bwd_pd_.diff_src_desc(), io.outputs[0])}};
    add_scratchpad(bwd_args_, bwd_pd_.scratchpad_desc(), scratch + bwd_scratchpad_at_);
    if (!is_max_) return;
    memory workspace(fwd_pd_.workspace_desc(), engine(), scratch + workspace_at_);
    bwd_args_[DNNL_ARG_WORKSPACE] = workspace;
    fwd_args_ = {{DNNL_ARG_SRC, make_memory(fwd_pd_.src_desc(), io.inputs[0])},
                 {DNNL_ARG_DST, memory(fwd_pd_.dst_desc(), engine(), scratch + y_at_)},
                 {DNNL_ARG_WORKSPACE, workspace}};
    add_scratchpad(fwd_args_, fwd_pd_.scratchpad_desc(), scratch);
  }

  void run(const KernelIO& io) override {
    if (is_max_) execute(node_, *fwd_prim_, fwd_args_);
    execute(node_, bwd_prim_, bwd_args_);
  }

 private:
  const Node& node_;
  bool is_max_;
  Layout x_layout_;
  dnnl::pooling_forward::primitive_desc fwd_pd_;
  dnnl::pooling_backward::primitive_desc bwd_pd_;
  std::optional<dnnl::pooling_forward> fwd_prim_;
  dnnl::pooling_backward bwd_prim_;
  size_t bwd_scratchpad_at_ = 0, y_at_ = 0, workspace_at_ = 0, scratch_bytes_ = 0;
  std::unordered_map<int, memory> fwd_args_, bwd_args_;
};

template <typename K, bool is_max>
std::unique_ptr<Kernel> make(const Node& node, const KernelContext& context) {
  return std::make_unique<K>(node, context, is_max);
}

KernelRegistrar max_pool_kernel{"MaxPool", DeviceKind::cpu, make<PoolForwardKernel, true>};
KernelRegistrar avg_pool_kernel{"AvgPool", DeviceKind::cpu, make<PoolForwardKernel, false>};
KernelRegistrar max_pool_grad_kernel{"MaxPoolGrad", DeviceKind::cpu,
                                     make<PoolBackwardKernel, true>};
KernelRegistrar avg_pool_grad_kernel{"AvgPoolGrad", DeviceKind::cpu,
                                     make<PoolBackwardKernel, false>};

}  // namespace
}  // namespace tower::cpu
