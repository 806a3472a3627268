// MatMul on the oneDNN matmul primitive. Transposes are expressed in the memory descriptors
// (format tag ba), so nothing is copied. The fused MatMul+BiasAdd[+Relu] (inputs a, b, bias) adds
// the bias and applies ReLU inside the primitive. On a team of threads it runs in batch chunks
// (chunks.h) of one-thread primitives, so that its bits do not depend on how many threads run it
// (oneDNN's gemm splits the sum over k between threads on some instruction sets): y = a b in
// chunks of a's and y's rows, and a weight gradient a^T b (the batch is k) as the sum of the
// chunks' products, added in chunk order.
#include "tower/ops/matmul.h"

#include <algorithm>

#include "tower/kernels/cpu/chunks.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// Chunks of 64 rows at least: oneDNN's gemm is slow on short sides (lenet's fc1 under AVX2:
// bench/results/cpu_kernel_choices.md).
constexpr int64_t kMinRows = 64;

template <bool kBias, bool kRelu>
std::unique_ptr<Kernel> make_matmul(const Node& node, const KernelContext& context) {
  const auto& attrs = node.attr<ops::MatMulAttrs>();
  const Shape& a = node.inputs[0].shape();
  const Shape& b = node.inputs[1].shape();
  const Shape& y = node.outputs[0].shape;
  const bool ta = attrs.transpose_a == ops::Transpose::yes;
  const bool tb = attrs.transpose_b == ops::Transpose::yes;
  const int64_t m = y[0], n = y[1], k = ta ? a[0] : a[1];
  if (m == 0 || n == 0 || k == 0)  // nothing to compute, or an empty sum: y = 0
    return simple_kernel([](const Node&, const KernelIO& io) {
      Tensor& out = io.outputs[0];
      std::fill_n(out.data<float>(), out.numel(), 0.0f);
    })(node, context);
  // bf16: the operands are read as bf16 copies (row-major, like the f32 values: the runtime
  // converts them), the product is accumulated and written in f32.
  const dt type = context.precision == Precision::bf16 ? dt::bf16 : dt::f32;
  // Chunks cut m (a's and y's rows) or, for a^T b, k (the rows of both operands; y is a sum). A
  // sum cannot take a bias or a ReLU per chunk, and b^T's k is not its outer dimension.
  const bool cut_k = ta && !tb && !kBias && !kRelu;
  const int64_t batch = !ta ? m : (cut_k ? k : 1);  // 1: never in chunks
  return chunked(
      node, context, batch,
      [&](int64_t rows) {
        const int64_t mr = !ta ? rows : m, kr = cut_k ? rows : k;
        const dnnl::memory::desc a_md({mr, kr}, type, ta ? tag::ba : tag::ab);
        const dnnl::memory::desc b_md({kr, n}, type, tb ? tag::ba : tag::ab);
        const dnnl::memory::desc y_md({mr, n}, dt::f32, tag::ab);
        auto pd = build(node, [&] {
          dnnl::primitive_attr attr = user_scratchpad();
          if (kRelu) {
            dnnl::post_ops ops;
            ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
            attr.set_post_ops(ops);
          }
          if (kBias)
            return dnnl::matmul::primitive_desc(
                dnnl::matmul::desc(a_md, b_md, dnnl::memory::desc({1, n}, dt::f32, tag::ab), y_md),
                attr, engine());
          return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, y_md), attr, engine());
        });
        // Layouts as the tensors hold them (plain, or plain bf16 copies): a transposed operand's
        // descriptor views its bytes the other way round.
        auto operand = [&](int i, const dnnl::memory::desc& md, bool transposed, bool rows) {
          Arg arg = input_arg(i == 0 ? DNNL_ARG_SRC : DNNL_ARG_WEIGHTS, i, i == 0 ? a : b, md,
                              rows ? Role::rows : Role::whole);
          if (transposed) arg.layout_md = plain_md(Shape{md.dims()[1], md.dims()[0]}, type);
          return arg;
        };
        std::vector<Arg> args = {operand(0, a_md, ta, batch > 1), operand(1, b_md, tb, cut_k)};
        if (kBias) {
          args.push_back(input_arg(DNNL_ARG_BIAS, 2, Shape{n}, pd.bias_desc()));
          args.back().layout_md = plain_md(Shape{n});
        }
        args.push_back(output_arg(DNNL_ARG_DST, y, y_md, cut_k ? Role::sum : Role::rows));
        return Built{dnnl::matmul(pd), pd.scratchpad_desc(), std::move(args)};
      },
      cut_k ? Cut::sums : Cut::rows, kMinRows);
}

KernelRegistrar matmul_kernel{"MatMul", DeviceKind::cpu, make_matmul<false, false>};
KernelRegistrar matmul_bias_kernel{"MatMul+BiasAdd", DeviceKind::cpu, make_matmul<true, false>};
KernelRegistrar matmul_bias_relu_kernel{"MatMul+BiasAdd+Relu", DeviceKind::cpu,
                                        make_matmul<true, true>};

}  // namespace
}  // namespace tower::cpu
