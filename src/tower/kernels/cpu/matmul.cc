// MatMul on the oneDNN matmul primitive. Transposes are expressed in the memory descriptors
// (format tag ba), so nothing is copied. The primitive is built once at compile time with a user
// scratchpad, which the runtime plans like any other buffer. The fused MatMul+BiasAdd[+Relu]
// (inputs a, b, bias) adds the bias and applies ReLU inside the primitive.
#include "tower/ops/matmul.h"

#include <algorithm>

#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

class MatMulKernel : public Kernel {
 public:
  MatMulKernel(const Node& node, const KernelContext& context, bool bias, bool relu) : node_(node) {
    const auto& attrs = node.attr<ops::MatMulAttrs>();
    const Shape& a = node.inputs[0].shape();
    const Shape& y = node.outputs[0].shape;
    bool ta = attrs.transpose_a == ops::Transpose::yes;
    bool tb = attrs.transpose_b == ops::Transpose::yes;
    int64_t m = y[0], n = y[1], k = ta ? a[0] : a[1];
    if (m == 0 || n == 0) return;  // nothing to compute
    if (k == 0) {                  // an empty sum: y = 0
      zero_ = true;
      return;
    }
    // bf16: the operands are read as bf16 copies (row-major, like the f32 values: the runtime
    // converts them), the product is accumulated and written in f32.
    const dt type = context.precision == Precision::bf16 ? dt::bf16 : dt::f32;
    if (type != dt::f32)
      for (int i = 0; i < 2; ++i)
        layouts_[i] = to_layout(plain_md(node.inputs[static_cast<size_t>(i)].shape(), type),
                                node.inputs[static_cast<size_t>(i)].shape());
    dnnl::memory::desc a_md({m, k}, type, ta ? tag::ba : tag::ab);
    dnnl::memory::desc b_md({k, n}, type, tb ? tag::ba : tag::ab);
    dnnl::memory::desc y_md({m, n}, dt::f32, tag::ab);
    matmul_pd_ = build(node, [&] {
      dnnl::primitive_attr attr = user_scratchpad();
      if (relu) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(ops);
      }
      if (bias)
        return dnnl::matmul::primitive_desc(
            dnnl::matmul::desc(a_md, b_md, dnnl::memory::desc({1, n}, dt::f32, tag::ab), y_md),
            attr, engine());
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, y_md), attr, engine());
    });
    has_bias_ = bias;
    matmul_prim_ = dnnl::matmul(matmul_pd_);
    active_ = true;
  }

  Layout input_layout(int i) const override { return i < 2 ? layouts_[i] : Layout{}; }
  size_t scratch_bytes() const override {
    return active_ ? matmul_pd_.scratchpad_desc().get_size() : 0;
  }

  void bind(const KernelIO& io) override {
    if (!active_) return;
    args_[DNNL_ARG_SRC] = make_memory(matmul_pd_.src_desc(), io.inputs[0]);
    args_[DNNL_ARG_WEIGHTS] = make_memory(matmul_pd_.weights_desc(), io.inputs[1]);
    args_[DNNL_ARG_DST] = make_memory(matmul_pd_.dst_desc(), io.outputs[0]);
    if (has_bias_) args_[DNNL_ARG_BIAS] = make_memory(matmul_pd_.bias_desc(), io.inputs[2]);
    if (scratch_bytes() > 0)
      args_[DNNL_ARG_SCRATCHPAD] = dnnl::memory(matmul_pd_.scratchpad_desc(), engine(), io.scratch);
  }

  void run(const KernelIO& io) override {
    if (zero_) {
      Tensor& y = const_cast<Tensor&>(io.outputs[0]);
      std::fill_n(y.data<float>(), y.numel(), 0.0f);
    }
    if (!active_) return;
    execute(node_, matmul_prim_, args_);
  }

 private:
  const Node& node_;
  bool active_ = false, zero_ = false, has_bias_ = false;
  Layout layouts_[2];
  dnnl::matmul::primitive_desc matmul_pd_;
  dnnl::matmul matmul_prim_;
  std::unordered_map<int, dnnl::memory> args_;
};

template <bool kBias, bool kRelu>
std::unique_ptr<Kernel> make_matmul(const Node& node, const KernelContext& context) {
  return std::make_unique<MatMulKernel>(node, context, kBias, kRelu);
}

KernelRegistrar matmul_kernel{"MatMul", DeviceKind::cpu, make_matmul<false, false>};
KernelRegistrar matmul_bias_kernel{"MatMul+BiasAdd", DeviceKind::cpu, make_matmul<true, false>};
KernelRegistrar matmul_bias_relu_kernel{"MatMul+BiasAdd+Relu", DeviceKind::cpu,
                                        make_matmul<true, true>};

}  // namespace
}  // namespace tower::cpu
