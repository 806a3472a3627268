// Conv2D and its adjoints with cuDNN: descriptors, algorithm and workspace are chosen once when
// the kernel is built (FP32 math without TF32, so results track the CPU kernel; deterministic
// algorithms only unless the context allows others). cuDNN pads symmetrically; when TensorFlow's
// SAME padding puts one more pixel after, the image is padded explicitly in scratch and the
// convolution runs unpadded.
#include "tower/kernels/cuda/conv.h"

#include <algorithm>

#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/conv.h"

namespace tower::cuda {
namespace {

enum class Mode { forward, backward_data, backward_filter };

size_t align(size_t bytes) { return (bytes + 255) / 256 * 256; }

class ConvKernel : public Kernel {
 public:
  ConvKernel(const Node& node, const KernelContext& context, Mode mode)
      : mode_(mode), stream_(stream_of(context)), deterministic_(context.deterministic) {
    use_device(context.device);
    const ops::Conv2DAttrs& attrs = mode == Mode::forward
                                        ? node.attr<ops::Conv2DAttrs>()
                                        : node.attr<ops::Conv2DBackpropAttrs>().conv;
    x_ = mode == Mode::backward_data ? node.attr<ops::Conv2DBackpropAttrs>().shape
                                     : node.inputs[0].shape();
    w_ = mode == Mode::forward         ? node.inputs[1].shape()
         : mode == Mode::backward_data ? node.inputs[0].shape()
                                       : node.attr<ops::Conv2DBackpropAttrs>().shape;
    const Shape y = mode == Mode::forward ? node.outputs[0].shape : node.inputs[1].shape();
    const ops::AxisPadding ph = ops::axis_padding(x_[2], w_[2], attrs.strides[0], attrs.padding);
    const ops::AxisPadding pw = ops::axis_padding(x_[3], w_[3], attrs.strides[1], attrs.padding);
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
    TOWER_CUDA_CHECK(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                dim(x_[0]), dim(x_[1]), dim(padded_h_),
                                                dim(padded_w_)));
    TOWER_CUDA_CHECK(cudnnSetTensor4dDescriptor(y_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                dim(y[0]), dim(y[1]), dim(y[2]), dim(y[3])));
    TOWER_CUDA_CHECK(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                dim(w_[0]), dim(w_[1]), dim(w_[2]), dim(w_[3])));
    TOWER_CUDA_CHECK(cudnnSetConvolution2dDescriptor(
        conv_desc_, explicit_pad_ ? 0 : dim(ph.before), explicit_pad_ ? 0 : dim(pw.before),
        dim(attrs.strides[0]), dim(attrs.strides[1]), 1, 1, CUDNN_CROSS_CORRELATION,
        CUDNN_DATA_FLOAT));
    TOWER_CUDA_CHECK(cudnnSetConvolutionMathType(conv_desc_, CUDNN_FMA_MATH));
    choose_algorithm();
  }

  ~ConvKernel() override {
    cudnnDestroyConvolutionDescriptor(conv_desc_);
    cudnnDestroyFilterDescriptor(w_desc_);
    cudnnDestroyTensorDescriptor(y_desc_);
    cudnnDestroyTensorDescriptor(x_desc_);
  }

  // The padded image (when needed), then cuDNN's workspace.
  size_t scratch_bytes() const override { return padded_bytes() + workspace_bytes_; }

  void run(const KernelIO& io) override {
    const float one = 1.0f, zero = 0.0f;
    char* scratch = static_cast<char*>(io.scratch);
    float* padded = explicit_pad_ ? reinterpret_cast<float*>(scratch) : nullptr;
    void* workspace = scratch + padded_bytes();
    float* out = const_cast<Tensor&>(io.outputs[0]).data<float>();
    switch (mode_) {
      case Mode::forward: {  // (x, w) -> y
        const float* x = pad(io.inputs[0].data<float>(), padded);
        TOWER_CUDA_CHECK(cudnnConvolutionForward(handle_.get(), &one, x_desc_, x, w_desc_,
                                                 io.inputs[1].data<float>(), conv_desc_, fwd_algo_,
                                                 workspace, workspace_bytes_, &zero, y_desc_, out));
        break;
      }
      case Mode::backward_data:  // (w, dy) -> dx
        TOWER_CUDA_CHECK(cudnnConvolutionBackwardData(
            handle_.get(), &one, w_desc_, io.inputs[0].data<float>(), y_desc_,
            io.inputs[1].data<float>(), conv_desc_, data_algo_, workspace, workspace_bytes_, &zero,
            x_desc_, explicit_pad_ ? padded : out));
        if (explicit_pad_)
          launch_crop(padded, out, x_[0] * x_[1], x_[2], x_[3], top_, left_, padded_h_, padded_w_,
                      stream_);
        break;
      case Mode::backward_filter: {  // (x, dy) -> dw
        const float* x = pad(io.inputs[0].data<float>(), padded);
        TOWER_CUDA_CHECK(cudnnConvolutionBackwardFilter(
            handle_.get(), &one, x_desc_, x, y_desc_, io.inputs[1].data<float>(), conv_desc_,
            filter_algo_, workspace, workspace_bytes_, &zero, w_desc_, out));
        break;
      }
    }
  }

 private:
  size_t padded_bytes() const {
    return explicit_pad_
               ? align(static_cast<size_t>(x_[0] * x_[1] * padded_h_ * padded_w_) * sizeof(float))
               : 0;
  }
  const float* pad(const float* x, float* padded) {
    if (!explicit_pad_) return x;
    launch_pad(x, padded, x_[0] * x_[1], x_[2], x_[3], top_, left_, padded_h_, padded_w_, stream_);
    return padded;
  }

  // cuDNN's heuristics, best first: the first algorithm that works in plain FP32 (and is
  // deterministic when asked); its workspace is asked for separately, the heuristics' figure
  // being an estimate.
  void choose_algorithm() {
    constexpr int kMax = 16;
    int found = 0;
    auto pick = [&](const auto* perf, auto& algo) {
      for (int i = 0; i < found; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType != CUDNN_TENSOR_OP_MATH &&
            perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
            (!deterministic_ || perf[i].determinism == CUDNN_DETERMINISTIC)) {
          algo = perf[i].algo;
          return;
        }
      fail("cuDNN offers no {}FP32 algorithm for this convolution (x {}, w {}){}",
           deterministic_ ? "deterministic " : "", x_.to_string(), w_.to_string(),
           deterministic_ ? "; --no-deterministic allows the others" : "");
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
  Shape x_, w_;
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
