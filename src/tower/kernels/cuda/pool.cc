// CUDA kernels of MaxPool, AvgPool and their gradients (pool.cu): TensorFlow's padding, the CPU
// kernel's tie rule. MaxPoolGrad recomputes the argmax of every window into scratch, then gathers.
#include "tower/kernels/cuda/pool.h"

#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/pool.h"

namespace tower::cuda {
namespace {

enum class Kind { max, avg, max_grad, avg_grad };

size_t align(size_t bytes) { return (bytes + 255) / 256 * 256; }

class PoolKernel : public Kernel {
 public:
  PoolKernel(const Node& node, const KernelContext& context, Kind kind)
      : kind_(kind), stream_(stream_of(context)) {
    use_device(context.device);
    const ops::PoolAttrs& a =
        kind == Kind::avg_grad ? node.attr<ops::PoolGradAttrs>().pool : node.attr<ops::PoolAttrs>();
    // x is the pooled image: the input of the forward ops and of MaxPoolGrad, AvgPoolGrad's output.
    const Shape& x = kind == Kind::avg_grad ? node.outputs[0].shape : node.inputs[0].shape();
    const auto [ph, pw] = ops::pool_padding(x, a);
    g_.planes = x[0] * x[1];
    g_.h = x[2];
    g_.w = x[3];
    g_.oh = ph.out;
    g_.ow = pw.out;
    g_.kh = a.ksize[0];
    g_.kw = a.ksize[1];
    g_.stride_h = a.strides[0];
    g_.stride_w = a.strides[1];
    g_.top = ph.before;
    g_.left = pw.before;
  }

  size_t scratch_bytes() const override {
    return kind_ == Kind::max_grad
               ? align(static_cast<size_t>(g_.planes * g_.oh * g_.ow) * sizeof(int32_t))
               : 0;
  }

  void run(const KernelIO& io) override {
    float* out = output_of(io);
    switch (kind_) {
      case Kind::max:
        launch_max_pool(io.inputs[0].data<float>(), out, g_, stream_);
        break;
      case Kind::avg:
        launch_avg_pool(io.inputs[0].data<float>(), out, g_, stream_);
        break;
      case Kind::max_grad:  // (x, dy) -> dx
        launch_max_pool_grad(io.inputs[0].data<float>(), io.inputs[1].data<float>(), out,
                             static_cast<int32_t*>(io.scratch), g_, stream_);
        break;
      case Kind::avg_grad:
        launch_avg_pool_grad(io.inputs[0].data<float>(), out, g_, stream_);
        break;  // dy -> dx
    }
  }

 private:
  Kind kind_;
  cudaStream_t stream_;
  PoolGeometry g_;
};

template <Kind kind>
std::unique_ptr<Kernel> make(const Node& node, const KernelContext& context) {
  return std::make_unique<PoolKernel>(node, context, kind);
}

KernelRegistrar max_pool{"MaxPool", DeviceKind::cuda, make<Kind::max>};
KernelRegistrar avg_pool{"AvgPool", DeviceKind::cuda, make<Kind::avg>};
KernelRegistrar max_pool_grad{"MaxPoolGrad", DeviceKind::cuda, make<Kind::max_grad>};
KernelRegistrar avg_pool_grad{"AvgPoolGrad", DeviceKind::cuda, make<Kind::avg_grad>};

}  // namespace
}  // namespace tower::cuda
