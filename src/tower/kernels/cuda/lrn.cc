// CUDA kernels of LRN and LRNGrad (lrn.cu), TensorFlow semantics as the CPU kernel.
#include "tower/kernels/cuda/lrn.h"

#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/lrn.h"

namespace tower::cuda {
namespace {

class LRNKernel : public Kernel {
 public:
  LRNKernel(const Node& node, const KernelContext& context, Pass pass)
      : backward_(pass == Pass::backward), stream_(stream_of(context)) {
    use_device(context.device);
    const auto& a = node.attr<ops::LRNAttrs>();
    const Shape& x = node.inputs[0].shape();
    p_.batch = x[0];
    p_.channels = x[1];
    p_.plane = x[2] * x[3];
    p_.radius = a.depth_radius;
    p_.bias = a.bias;
    p_.alpha = a.alpha;
    p_.beta = a.beta;
  }

  // LRNGrad: d^-beta and the window terms, one float each per element.
  size_t scratch_bytes() const override {
    return backward_ ? static_cast<size_t>(2 * p_.batch * p_.channels * p_.plane) * sizeof(float)
                     : 0;
  }

  void run(const KernelIO& io) override {
    if (backward_)  // (x, dy) -> dx
      launch_lrn_grad(io.inputs[0].data<float>(), io.inputs[1].data<float>(), output_of(io),
                      static_cast<float*>(io.scratch), p_, stream_);
    else
      launch_lrn(io.inputs[0].data<float>(), output_of(io), p_, stream_);
  }

 private:
  bool backward_;
  cudaStream_t stream_;
  LRNParams p_;
};

KernelRegistrar lrn{
    "LRN", DeviceKind::cuda, [](const Node& node, const KernelContext& context) {
      return std::unique_ptr<Kernel>(std::make_unique<LRNKernel>(node, context, Pass::forward));
    }};
KernelRegistrar lrn_grad{
    "LRNGrad", DeviceKind::cuda, [](const Node& node, const KernelContext& context) {
      return std::unique_ptr<Kernel>(std::make_unique<LRNKernel>(node, context, Pass::backward));
    }};

}  // namespace
}  // namespace tower::cuda
