// LRN across channels with oneDNN on plain NCHW. oneDNN divides alpha by the window size
// (2r + 1); TensorFlow does not, so alpha is passed multiplied by it.
#include "tower/ops/lrn.h"

#include <optional>

#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using dnnl::memory;

constexpr size_t align64(size_t n) { return (n + 63) / 64 * 64; }

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

memory::dim window(const ops::LRNAttrs& a) { return 2 * a.depth_radius + 1; }
float onednn_alpha(const ops::LRNAttrs& a) { return a.alpha * static_cast<float>(window(a)); }

dnnl::lrn_forward::primitive_desc forward_pd(dnnl::prop_kind prop, const Shape& x,
                                             const ops::LRNAttrs& a) {
  dnnl::lrn_forward::desc desc(prop, dnnl::algorithm::lrn_across_channels, plain_md(x), window(a),
                               onednn_alpha(a), a.beta, a.bias);
  return {desc, user_scratchpad(), engine()};
}

class LRNKernel : public Kernel {
 public:
  explicit LRNKernel(const Node& node) : node_(node) {
    pd_ = build(node, [&] {
      return forward_pd(dnnl::prop_kind::forward_inference, node.inputs[0].shape(),
                        node.attr<ops::LRNAttrs>());
    });
    prim_ = dnnl::lrn_forward(pd_);
  }
  size_t scratch_bytes() const override { return pd_.scratchpad_desc().get_size(); }
  void bind(const KernelIO& io) override {
    args_ = {{DNNL_ARG_SRC, make_memory(pd_.src_desc(), io.inputs[0])},
             {DNNL_ARG_DST, make_memory(pd_.dst_desc(), io.outputs[0])}};
    if (scratch_bytes() > 0)
      args_[DNNL_ARG_SCRATCHPAD] = memory(pd_.scratchpad_desc(), engine(), io.scratch);
  }
  void run(const KernelIO& io) override { execute(node_, prim_, args_); }

 private:
  const Node& node_;
  dnnl::lrn_forward::primitive_desc pd_;
  dnnl::lrn_forward prim_;
  std::unordered_map<int, memory> args_;
};

// Inputs (x, dy). When the backward implementation wants a workspace, the forward pass is rerun
// into scratch to produce it. Scratch: [backward scratchpad | forward scratchpad | y | workspace].
class LRNGradKernel : public Kernel {
 public:
  explicit LRNGradKernel(const Node& node) : node_(node) {
    const Shape& x = node.inputs[0].shape();
    const auto& a = node.attr<ops::LRNAttrs>();
    build(node, [&] {
      fwd_pd_ = forward_pd(dnnl::prop_kind::forward_training, x, a);
      dnnl::lrn_backward::desc desc(dnnl::algorithm::lrn_across_channels, plain_md(x), plain_md(x),
                                    window(a), onednn_alpha(a), a.beta, a.bias);
      bwd_pd_ = dnnl::lrn_backward::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
      return 0;
    });
    bwd_prim_ = dnnl::lrn_backward(bwd_pd_);
    needs_forward_ = bwd_pd_.workspace_desc().get_size() > 0;
    fwd_scratchpad_at_ = align64(bwd_pd_.scratchpad_desc().get_size());
    scratch_bytes_ = fwd_scratchpad_at_;
    if (needs_forward_) {
      fwd_prim_ = dnnl::lrn_forward(fwd_pd_);
      y_at_ = fwd_scratchpad_at_ + align64(fwd_pd_.scratchpad_desc().get_size());
      workspace_at_ = y_at_ + align64(fwd_pd_.dst_desc().get_size());
      scratch_bytes_ = workspace_at_ + align64(fwd_pd_.workspace_desc().get_size());
    }
  }

  size_t scratch_bytes() const override { return scratch_bytes_; }

  void bind(const KernelIO& io) override {
    auto* scratch = static_cast<char*>(io.scratch);
    bwd_args_ = {{DNNL_ARG_SRC, make_memory(bwd_pd_.src_desc(), io.inputs[0])},
                 {DNNL_ARG_DIFF_DST, make_memory(bwd_pd_.diff_dst_desc(), io.inputs[1])},
                 {DNNL_ARG_DIFF_SRC, make_memory(bwd_pd_.diff_src_desc(), io.outputs[0])}};
    if (bwd_pd_.scratchpad_desc().get_size() > 0)
      bwd_args_[DNNL_ARG_SCRATCHPAD] = memory(bwd_pd_.scratchpad_desc(), engine(), scratch);
    if (!needs_forward_) return;
    memory workspace(fwd_pd_.workspace_desc(), engine(), scratch + workspace_at_);
    bwd_args_[DNNL_ARG_WORKSPACE] = workspace;
    fwd_args_ = {{DNNL_ARG_SRC, make_memory(fwd_pd_.src_desc(), io.inputs[0])},
                 {DNNL_ARG_DST, memory(fwd_pd_.dst_desc(), engine(), scratch + y_at_)},
                 {DNNL_ARG_WORKSPACE, workspace}};
    if (fwd_pd_.scratchpad_desc().get_size() > 0)
      fwd_args_[DNNL_ARG_SCRATCHPAD] =
          memory(fwd_pd_.scratchpad_desc(), engine(), scratch + fwd_scratchpad_at_);
  }

  void run(const KernelIO& io) override {
    if (needs_forward_) execute(node_, *fwd_prim_, fwd_args_);
    execute(node_, bwd_prim_, bwd_args_);
  }

 private:
  const Node& node_;
  dnnl::lrn_forward::primitive_desc fwd_pd_;
  dnnl::lrn_backward::primitive_desc bwd_pd_;
  std::optional<dnnl::lrn_forward> fwd_prim_;
  dnnl::lrn_backward bwd_prim_;
  bool needs_forward_ = false;
  size_t fwd_scratchpad_at_ = 0, y_at_ = 0, workspace_at_ = 0, scratch_bytes_ = 0;
  std::unordered_map<int, memory> fwd_args_, bwd_args_;
};

KernelRegistrar lrn_kernel{"LRN", DeviceKind::cpu,
                           [](const Node& node, const KernelContext&) -> std::unique_ptr<Kernel> {
                             return std::make_unique<LRNKernel>(node);
                           }};
KernelRegistrar lrn_grad_kernel{
    "LRNGrad", DeviceKind::cpu,
    [](const Node& node, const KernelContext&) -> std::unique_ptr<Kernel> {
      return std::make_unique<LRNGradKernel>(node);
    }};

}  // namespace
}  // namespace tower::cpu
