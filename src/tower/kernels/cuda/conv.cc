// Conv2D and its adjoints with cuDNN: descriptors, algorithm and workspace are chosen once when
// the kernel is built (FP32 math without TF32, so results track the CPU kernel; deterministic
// algorithms only unless the context allows others). cuDNN pads symmetrically; when TensorFlow's
// SAME padding puts one more pixel after, the image is padded explicitly in scratch and the
// convolution runs unpadded.
//
// In bf16 precision the image, filter and result are bf16 copies in scratch (cuDNN's bf16
// configuration: f32 accumulation, tensor cores allowed), converted from and to the f32 tensors
// around the call.
#include "tower/kernels/cuda/conv.h"

#include <algorithm>

#include "tower/kernels/cuda/cuda_util.h"
#include "tower/kernels/cuda/math.h"
#include "tower/ops/conv.h"

namespace tower::cuda {
namespace {

enum class Mode { forward, backward_data, backward_filter };

size_t align(size_t bytes) { return (bytes + 255) / 256 * 256; }

class ConvKernel : public Kernel {
 public:
  ConvKernel(const Node& node, const KernelContext& context, Mode mode)
      : mode_(mode),
        stream_(stream_of(context)),
        deterministic_(context.deterministic),
        bf16_(context.precision == Precision::bf16) {
    use_device(context.device);
    const ops::Conv2DAttrs& attrs = mode == Mode::forward
                                        ? node.attr<ops::Conv2DAttrs>()
                                        : node.attr<ops::Conv2DBackpropAttrs>().conv;
    x_ = mode == Mode::backward_data ? node.attr<ops::Conv2DBackpropAttrs>().shape
                                     : node.inputs[0].shape();
    w_ = mode == Mode::forward         ? node.inputs[1].shape()
         : mode == Mode::backward_data ? node.inputs[0].shape()
                                       : node.attr<ops::Conv2DBackpropAttrs>().shape;
    y_ = mode == Mode::forward ? node.outputs[0].shape : node.inputs[1].shape();
    const auto [ph, pw] = ops::conv_padding(x_, w_, attrs);
    explicit_pad_ = ph.before != ph.after || pw.before != pw.after;
    top_ = ph.before;
    left_ = pw.before;
    padded_h_ = x_[2] + (explicit_pad_ ? ph.before + ph.after : 0);
    padded_w_ = x_[3] + (explicit_pad_ ? pw.before + pw.after : 0);

    handle_ = shared_handle(
        stream_,
        [this] {
          cudnnHandle_t handle = nullptr;
          TOWER_CUDA_CHECK(cudnnCreate(&handle));
          TOWER_CUDA_CHECK(cudnnSetStream(handle, stream_));
          return handle;
        },
        [](cudnnHandle_t handle) { cudnnDestroy(handle); });
    TOWER_CUDA_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
    TOWER_CUDA_CHECK(cudnnCreateTensorDescriptor(&y_desc_));
    TOWER_CUDA_CHECK(cudnnCreateFilterDescriptor(&w_desc_));
    TOWER_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&conv_desc_));
    auto dim = [](int64_t d) { return static_cast<int>(d); };
    const cudnnDataType_t type = bf16_ ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    TOWER_CUDA_CHECK(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NCHW, type, dim(x_[0]),
                                                dim(x_[1]), dim(padded_h_), dim(padded_w_)));
    TOWER_CUDA_CHECK(cudnnSetTensor4dDescriptor(y_desc_, CUDNN_TENSOR_NCHW, type, dim(y_[0]),
                                                dim(y_[1]), dim(y_[2]), dim(y_[3])));
    TOWER_CUDA_CHECK(cudnnSetFilter4dDescriptor(w_desc_, type, CUDNN_TENSOR_NCHW, dim(w_[0]),
                                                dim(w_[1]), dim(w_[2]), dim(w_[3])));
    TOWER_CUDA_CHECK(cudnnSetConvolution2dDescriptor(
        conv_desc_, explicit_pad_ ? 0 : dim(ph.before), explicit_pad_ ? 0 : dim(pw.before),
        dim(attrs.strides[0]), dim(attrs.strides[1]), dim(attrs.dilations[0]),
        dim(attrs.dilations[1]), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // (the filter descriptor is (K, C / groups, KH, KW), as the filter is)
    TOWER_CUDA_CHECK(cudnnSetConvolutionGroupCount(conv_desc_, dim(attrs.groups)));
    TOWER_CUDA_CHECK(
        cudnnSetConvolutionMathType(conv_desc_, bf16_ ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    choose_algorithm();
  }

  ~ConvKernel() override {
    cudnnDestroyConvolutionDescriptor(conv_desc_);
    cudnnDestroyFilterDescriptor(w_desc_);
    cudnnDestroyTensorDescriptor(y_desc_);
    cudnnDestroyTensorDescriptor(x_desc_);
  }

  // The padded image (when needed), the bf16 copies of x, w and y (in bf16), then cuDNN's
  // workspace.
  size_t scratch_bytes() const override {
    return padded_bytes() + bf16_bytes(x_numel()) + bf16_bytes(w_.numel()) +
           bf16_bytes(y_.numel()) + workspace_bytes_;
  }

  void run(const KernelIO& io) override {
    const float one = 1.0f, zero = 0.0f;
    char* scratch = static_cast<char*>(io.scratch);
    float* padded = explicit_pad_ ? reinterpret_cast<float*>(scratch) : nullptr;
    auto* x16 = reinterpret_cast<uint16_t*>(scratch + padded_bytes());
    auto* w16 = reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(x16) + bf16_bytes(x_numel()));
    auto* y16 = reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(w16) + bf16_bytes(w_.numel()));
    void* workspace = reinterpret_cast<char*>(y16) + bf16_bytes(y_.numel());
    float* out = io.outputs[0].data<float>();
    switch (mode_) {
      case Mode::forward: {  // (x, w) -> y
        const void* x = operand(pad(io.inputs[0].data<float>(), padded), x16, x_numel());
        const void* w = operand(io.inputs[1].data<float>(), w16, w_.numel());
        TOWER_CUDA_CHECK(cudnnConvolutionForward(handle_.get(), &one, x_desc_, x, w_desc_, w,
                                                 conv_desc_, fwd_algo_, workspace, workspace_bytes_,
                                                 &zero, y_desc_, target(y16, out)));
        result(y16, out, y_.numel());
        break;
      }
      case Mode::backward_data: {  // (w, dy) -> dx
        const void* w = operand(io.inputs[0].data<float>(), w16, w_.numel());
        const void* dy = operand(io.inputs[1].data<float>(), y16, y_.numel());
        float* dx = explicit_pad_ ? padded : out;
        TOWER_CUDA_CHECK(cudnnConvolutionBackwardData(
            handle_.get(), &one, w_desc_, w, y_desc_, dy, conv_desc_, data_algo_, workspace,
            workspace_bytes_, &zero, x_desc_, target(x16, dx)));
        result(x16, dx, x_numel());
        if (explicit_pad_)
          launch_crop(padded, out, x_[0] * x_[1], x_[2], x_[3], top_, left_, padded_h_, padded_w_,
                      stream_);
        break;
      }
      case Mode::backward_filter: {  // (x, dy) -> dw
        const void* x = operand(pad(io.inputs[0].data<float>(), padded), x16, x_numel());
        const void* dy = operand(io.inputs[1].data<float>(), y16, y_.numel());
        TOWER_CUDA_CHECK(cudnnConvolutionBackwardFilter(
            handle_.get(), &one, x_desc_, x, y_desc_, dy, conv_desc_, filter_algo_, workspace,
            workspace_bytes_, &zero, w_desc_, target(w16, out)));
        result(w16, out, w_.numel());
        break;
      }
    }
  }

 private:
  int64_t x_numel() const { return x_[0] * x_[1] * padded_h_ * padded_w_; }
  size_t padded_bytes() const {
    return explicit_pad_ ? align(static_cast<size_t>(x_numel()) * sizeof(float)) : 0;
  }
  size_t bf16_bytes(int64_t n) const {
    return bf16_ ? align(static_cast<size_t>(n) * sizeof(uint16_t)) : 0;
  }
  // What cuDNN reads: the f32 tensor, or in bf16 its copy.
  const void* operand(const float* x, uint16_t* copy, int64_t n) {
    if (!bf16_) return x;
    launch_to_bf16(x, copy, n, stream_);
    return copy;
  }
  // Where cuDNN writes: the f32 tensor, or in bf16 a copy that result() widens into it.
  void* target(uint16_t* copy, float* out) const {
    return bf16_ ? static_cast<void*>(copy) : static_cast<void*>(out);
  }
  void result(const uint16_t* copy, float* out, int64_t n) {
    if (bf16_) launch_from_bf16(copy, out, n, stream_);
  }
  const float* pad(const float* x, float* padded) {
    if (!explicit_pad_) return x;
    launch_pad(x, padded, x_[0] * x_[1], x_[2], x_[3], top_, left_, padded_h_, padded_w_, stream_);
    return padded;
  }

  // cuDNN's heuristics, best first: the first algorithm that works in plain FP32 (in bf16: any
  // math) and is deterministic when asked; its workspace is asked for separately, the
  // heuristics' figure being an estimate.
  void choose_algorithm() {
    constexpr int kMax = 16;
    int found = 0;
    auto pick = [&](const auto* perf, auto& algo) {
      for (int i = 0; i < found; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS &&
            (bf16_ || (perf[i].mathType != CUDNN_TENSOR_OP_MATH &&
                       perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)) &&
            (!deterministic_ || perf[i].determinism == CUDNN_DETERMINISTIC)) {
          algo = perf[i].algo;
          return;
        }
      fail("cuDNN offers no {}{} algorithm for this convolution (x {}, w {}){}",
           deterministic_ ? "deterministic " : "", bf16_ ? "bf16" : "FP32", x_.to_string(),
           w_.to_string(), deterministic_ ? "; --no-deterministic allows the others" : "");
    };
    cudnnHandle_t h = handle_.get();
    size_t bytes = 0;
    if (mode_ == Mode::forward) {
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      TOWER_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x_desc_, w_desc_, conv_desc_,
                                                              y_desc_, kMax, &found, perf));
      pick(perf, fwd_algo_);
      TOWER_CUDA_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, x_desc_, w_desc_, conv_desc_,
                                                               y_desc_, fwd_algo_, &bytes));
    } else if (mode_ == Mode::backward_data) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      TOWER_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_desc_, y_desc_, conv_desc_,
                                                                   x_desc_, kMax, &found, perf));
      pick(perf, data_algo_);
      TOWER_CUDA_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_desc_, y_desc_, conv_desc_,
                                                                    x_desc_, data_algo_, &bytes));
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      TOWER_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, x_desc_, y_desc_, conv_desc_, w_desc_, kMax, &found, perf));
      pick(perf, filter_algo_);
      TOWER_CUDA_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, x_desc_, y_desc_, conv_desc_, w_desc_, filter_algo_, &bytes));
    }
    workspace_bytes_ = align(bytes);
  }

  Mode mode_;
  cudaStream_t stream_;
  bool deterministic_;
  bool bf16_;
  Shape x_, w_, y_;
  bool explicit_pad_ = false;
  int64_t top_ = 0, left_ = 0, padded_h_ = 0, padded_w_ = 0;
  std::shared_ptr<cudnnContext> handle_;
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  cudnnConvolutionDescriptor_t conv_desc_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdDataAlgo_t data_algo_{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo_{};
  size_t workspace_bytes_ = 0;
};

template <Mode mode>
std::unique_ptr<Kernel> make(const Node& node, const KernelContext& context) {
  return std::make_unique<ConvKernel>(node, context, mode);
}

KernelRegistrar conv2d{"Conv2D", DeviceKind::cuda, make<Mode::forward>};
KernelRegistrar conv2d_backprop_input{"Conv2DBackpropInput", DeviceKind::cuda,
                                      make<Mode::backward_data>};
KernelRegistrar conv2d_backprop_filter{"Conv2DBackpropFilter", DeviceKind::cuda,
                                       make<Mode::backward_filter>};

}  // namespace
}  // namespace tower::cuda
