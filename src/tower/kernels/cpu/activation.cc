// Activations with oneDNN eltwise, in whatever layout the input comes in (a plain tensor is seen
// flat), written in that same layout. The Grad ops take the forward output y, use oneDNN's
// *_use_dst_for_bwd algorithms, and work in y's layout.
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using dnnl::algorithm;
using dnnl::memory;

memory::desc md_in(const Shape& shape, const Layout& layout) {
  return layout.is_plain() ? plain_md(Shape{shape.numel()}) : md_of(shape, layout);
}

// oneDNN's alpha: ELU's scale (1 in TensorFlow), ReLU's negative slope (0), clip's lower bound.
float alpha_of(algorithm alg) {
  return alg == algorithm::eltwise_elu || alg == algorithm::eltwise_elu_use_dst_for_bwd ? 1.0f
                                                                                        : 0.0f;
}
// oneDNN's beta: clip's upper bound (ReLU6: 6), unused by the others.
float beta_of(algorithm alg) {
  return alg == algorithm::eltwise_clip_v2 || alg == algorithm::eltwise_clip_v2_use_dst_for_bwd
             ? 6.0f
             : 0.0f;
}

class EltwiseForwardKernel : public Kernel {
 public:
  EltwiseForwardKernel(const Node& node, const KernelContext& context, algorithm alg)
      : node_(node), layout_(context.input_layout(0)) {
    pd_ = build(node, [&] {
      dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, alg,
                                       md_in(node.inputs[0].shape(), layout_), alpha_of(alg),
                                       beta_of(alg));
      return dnnl::eltwise_forward::primitive_desc(desc, user_scratchpad(), engine());
    });
    prim_ = dnnl::eltwise_forward(pd_);
  }
  size_t scratch_bytes() const override { return pd_.scratchpad_desc().get_size(); }
  void bind(const KernelIO& io) override {
    args_ = {{DNNL_ARG_SRC, make_memory(pd_.src_desc(), io.inputs[0])},
             {DNNL_ARG_DST, make_memory(pd_.dst_desc(), io.outputs[0])}};
    add_scratchpad(args_, pd_.scratchpad_desc(), io.scratch);
  }
  void run(const KernelIO& io) override { execute(node_, prim_, args_); }
  Layout input_layout(int) const override { return layout_; }
  Layout output_layout(int) const override { return layout_; }

 private:
  const Node& node_;
  Layout layout_;
  dnnl::eltwise_forward::primitive_desc pd_;
  dnnl::eltwise_forward prim_;
  std::unordered_map<int, memory> args_;
};

// Inputs (dy, y); `alg` is a *_use_dst_for_bwd algorithm.
class EltwiseBackwardKernel : public Kernel {
 public:
  EltwiseBackwardKernel(const Node& node, const KernelContext& context, algorithm alg)
      : node_(node), layout_(context.input_layout(1)) {
    pd_ = build(node, [&] {
      memory::desc md = md_in(node.inputs[1].shape(), layout_);
      dnnl::eltwise_forward::desc fwd_desc(dnnl::prop_kind::forward_training, alg, md,
                                           alpha_of(alg), beta_of(alg));
      dnnl::eltwise_forward::primitive_desc fwd_pd(fwd_desc, engine());
      dnnl::eltwise_backward::desc desc(alg, md, md, alpha_of(alg), beta_of(alg));
      return dnnl::eltwise_backward::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd);
    });
    prim_ = dnnl::eltwise_backward(pd_);
  }
  size_t scratch_bytes() const override { return pd_.scratchpad_desc().get_size(); }
  void bind(const KernelIO& io) override {
    args_ = {{DNNL_ARG_DIFF_DST, make_memory(pd_.diff_dst_desc(), io.inputs[0])},
             {DNNL_ARG_DST, make_memory(pd_.diff_dst_desc(), io.inputs[1])},
             {DNNL_ARG_DIFF_SRC, make_memory(pd_.diff_src_desc(), io.outputs[0])}};
    add_scratchpad(args_, pd_.scratchpad_desc(), io.scratch);
  }
  void run(const KernelIO& io) override { execute(node_, prim_, args_); }
  Layout input_layout(int) const override { return layout_; }
  Layout output_layout(int) const override { return layout_; }

 private:
  const Node& node_;
  Layout layout_;
  dnnl::eltwise_backward::primitive_desc pd_;
  dnnl::eltwise_backward prim_;
  std::unordered_map<int, memory> args_;
};

template <typename K, algorithm alg>
std::unique_ptr<Kernel> make(const Node& node, const KernelContext& context) {
  return std::make_unique<K>(node, context, alg);
}

KernelRegistrar relu_kernel{"Relu", DeviceKind::cpu,
                            make<EltwiseForwardKernel, algorithm::eltwise_relu>};
KernelRegistrar relu6_kernel{"Relu6", DeviceKind::cpu,
                             make<EltwiseForwardKernel, algorithm::eltwise_clip_v2>};
KernelRegistrar elu_kernel{"Elu", DeviceKind::cpu,
                           make<EltwiseForwardKernel, algorithm::eltwise_elu>};
KernelRegistrar sigmoid_kernel{"Sigmoid", DeviceKind::cpu,
                               make<EltwiseForwardKernel, algorithm::eltwise_logistic>};
KernelRegistrar tanh_kernel{"Tanh", DeviceKind::cpu,
                            make<EltwiseForwardKernel, algorithm::eltwise_tanh>};

KernelRegistrar relu_grad_kernel{
    "ReluGrad", DeviceKind::cpu,
    make<EltwiseBackwardKernel, algorithm::eltwise_relu_use_dst_for_bwd>};
KernelRegistrar relu6_grad_kernel{
    "Relu6Grad", DeviceKind::cpu,
    make<EltwiseBackwardKernel, algorithm::eltwise_clip_v2_use_dst_for_bwd>};
KernelRegistrar elu_grad_kernel{
    "EluGrad", DeviceKind::cpu,
    make<EltwiseBackwardKernel, algorithm::eltwise_elu_use_dst_for_bwd>};
KernelRegistrar sigmoid_grad_kernel{
    "SigmoidGrad", DeviceKind::cpu,
    make<EltwiseBackwardKernel, algorithm::eltwise_logistic_use_dst_for_bwd>};
KernelRegistrar tanh_grad_kernel{
    "TanhGrad", DeviceKind::cpu,
    make<EltwiseBackwardKernel, algorithm::eltwise_tanh_use_dst_for_bwd>};

}  // namespace
}  // namespace tower::cpu
