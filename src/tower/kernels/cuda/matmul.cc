// MatMul with cuBLAS (plain FP32: no TF32, so results track the CPU kernel). Row-major
// Y = op(A) op(B) is computed as the column-major product Y^T = op(B)^T op(A)^T. In bf16
// precision A and B are bf16 copies in scratch, multiplied with f32 accumulation into the f32 Y
// (cublasGemmEx, tensor cores allowed).
//
// cuBLAS adds a large amount of resident memory to any process that loads it, so it is opened on
// the first GPU matmul instead of at start-up: CPU-only runs of a CUDA build do not pay for it.
#include "tower/ops/matmul.h"

#include <dlfcn.h>

#include "tower/kernels/cuda/cuda_util.h"
#include "tower/kernels/cuda/math.h"

namespace tower::cuda {
namespace {

struct Cublas {
  decltype(&cublasCreate) create;
  decltype(&cublasDestroy) destroy;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm) sgemm;
  // cublasGemmEx (the header overloads the name, so the type is spelled out)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);

  static const Cublas& get() {
    static const Cublas cublas = load();
    return cublas;
  }

 private:
  template <typename F>
  static F symbol(void* lib, const char* name) {
    void* p = dlsym(lib, name);
    if (p == nullptr) fail("cuBLAS has no symbol {}: {}", name, dlerror());
    return reinterpret_cast<F>(p);
  }
  static Cublas load() {
    const std::string name = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) fail("cannot open {} for GPU matmuls: {}", name, dlerror());
    return {symbol<decltype(create)>(lib, "cublasCreate_v2"),
            symbol<decltype(destroy)>(lib, "cublasDestroy_v2"),
            symbol<decltype(set_stream)>(lib, "cublasSetStream_v2"),
            symbol<decltype(set_math_mode)>(lib, "cublasSetMathMode"),
            symbol<decltype(sgemm)>(lib, "cublasSgemm_v2"),
            symbol<decltype(gemm_ex)>(lib, "cublasGemmEx")};
  }
};

class MatMulKernel : public Kernel {
 public:
  MatMulKernel(const Node& node, const KernelContext& context)
      : stream_(stream_of(context)), bf16_(context.precision == Precision::bf16) {
    use_device(context.device);
    const auto& attrs = node.attr<ops::MatMulAttrs>();
    ta_ = attrs.transpose_a == ops::Transpose::yes;
    tb_ = attrs.transpose_b == ops::Transpose::yes;
    const Shape& a = node.inputs[0].shape();
    const Shape& y = node.outputs[0].shape;
    m_ = static_cast<int>(y[0]);
    n_ = static_cast<int>(y[1]);
    k_ = static_cast<int>(ta_ ? a[0] : a[1]);
    a_numel_ = a.numel();
    b_numel_ = node.inputs[1].shape().numel();
    // One program's kernels share the handle and the precision.
    handle_ = shared_handle(
        stream_,
        [this] {
          cublasHandle_t handle = nullptr;
          TOWER_CUDA_CHECK(cublas_.create(&handle));
          TOWER_CUDA_CHECK(cublas_.set_stream(handle, stream_));
          TOWER_CUDA_CHECK(
              cublas_.set_math_mode(handle, bf16_ ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH));
          return handle;
        },
        [destroy = cublas_.destroy](cublasHandle_t handle) { destroy(handle); });
  }

  // The bf16 copies of A and B (B 256-byte aligned), in bf16.
  size_t scratch_bytes() const override {
    return bf16_ ? static_cast<size_t>(b_offset() + b_numel_) * sizeof(uint16_t) : 0;
  }

  void run(const KernelIO& io) override {
    float* y = output_of(io);
    if (m_ == 0 || n_ == 0) return;
    if (k_ == 0) {  // an empty sum (cuBLAS wants leading dimensions >= 1)
      TOWER_CUDA_CHECK(cudaMemsetAsync(y, 0, io.outputs[0].nbytes(), stream_));
      return;
    }
    const float one = 1.0f, zero = 0.0f;
    if (bf16_) {
      auto* a16 = static_cast<uint16_t*>(io.scratch);
      uint16_t* b16 = a16 + b_offset();
      launch_to_bf16(io.inputs[0].data<float>(), a16, a_numel_, stream_);
      launch_to_bf16(io.inputs[1].data<float>(), b16, b_numel_, stream_);
      TOWER_CUDA_CHECK(cublas_.gemm_ex(
          handle_.get(), tb_ ? CUBLAS_OP_T : CUBLAS_OP_N, ta_ ? CUBLAS_OP_T : CUBLAS_OP_N, n_, m_,
          k_, &one, b16, CUDA_R_16BF, tb_ ? k_ : n_, a16, CUDA_R_16BF, ta_ ? m_ : k_, &zero, y,
          CUDA_R_32F, n_, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    }
    TOWER_CUDA_CHECK(cublas_.sgemm(handle_.get(), tb_ ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta_ ? CUBLAS_OP_T : CUBLAS_OP_N, n_, m_, k_, &one,
                                   io.inputs[1].data<float>(), tb_ ? k_ : n_,
                                   io.inputs[0].data<float>(), ta_ ? m_ : k_, &zero, y, n_));
  }

 private:
  int64_t b_offset() const { return (a_numel_ + 127) / 128 * 128; }

  const Cublas& cublas_ = Cublas::get();
  cudaStream_t stream_;
  std::shared_ptr<cublasContext> handle_;
  bool bf16_;
  bool ta_ = false, tb_ = false;
  int m_ = 0, n_ = 0, k_ = 0;
  int64_t a_numel_ = 0, b_numel_ = 0;
};

KernelRegistrar matmul{
    "MatMul", DeviceKind::cuda, [](const Node& node, const KernelContext& context) {
      return std::unique_ptr<Kernel>(std::make_unique<MatMulKernel>(node, context));
    }};

}  // namespace
}  // namespace tower::cuda
