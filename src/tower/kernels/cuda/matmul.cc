// MatMul with cuBLAS (plain FP32: no TF32, so results track the CPU kernel). Row-major
// Y = op(A) op(B) is computed as the column-major product Y^T = op(B)^T op(A)^T.
#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/matmul.h"

namespace tower::cuda {
namespace {

class MatMulKernel : public Kernel {
 public:
  MatMulKernel(const Node& node, const KernelContext& context) : stream_(stream_of(context)) {
    use_device(context.device);
    const auto& attrs = node.attr<ops::MatMulAttrs>();
    ta_ = attrs.transpose_a == ops::Transpose::yes;
    tb_ = attrs.transpose_b == ops::Transpose::yes;
    const Shape& a = node.inputs[0].shape();
    const Shape& y = node.outputs[0].shape;
    m_ = static_cast<int>(y[0]);
    n_ = static_cast<int>(y[1]);
    k_ = static_cast<int>(ta_ ? a[0] : a[1]);
    TOWER_CUDA_CHECK(cublasCreate(&handle_));
    TOWER_CUDA_CHECK(cublasSetStream(handle_, stream_));
    TOWER_CUDA_CHECK(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH));
  }
  ~MatMulKernel() override { cublasDestroy(handle_); }

  void run(const KernelIO& io) override {
    const float one = 1.0f, zero = 0.0f;
    TOWER_CUDA_CHECK(cublasSgemm(handle_, tb_ ? CUBLAS_OP_T : CUBLAS_OP_N, ta_ ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 n_, m_, k_, &one, io.inputs[1].data<float>(), tb_ ? k_ : n_,
                                 io.inputs[0].data<float>(), ta_ ? m_ : k_, &zero,
                                 const_cast<Tensor&>(io.outputs[0]).data<float>(), n_));
  }

 private:
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  bool ta_ = false, tb_ = false;
  int m_ = 0, n_ = 0, k_ = 0;
};

KernelRegistrar matmul{"MatMul", DeviceKind::cuda, [](const Node& node, const KernelContext& context) {
  return std::unique_ptr<Kernel>(std::make_unique<MatMulKernel>(node, context));
}};

}  // namespace
}  // namespace tower::cuda
