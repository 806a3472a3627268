// Conv2D -> FusedBatchNorm (inference) [-> Add -> Relu | -> Relu | -> Relu6], fused by the runtime
// (runtime/fusion.cc): the batch norm is folded into the convolution. Each run (the statistics
// and the weights are variables, which may change between runs) makes, per output channel o,
//   s = gamma[o] / sqrt(variance[o] + epsilon),  w'[o] = w[o] * s,  b'[o] = beta[o] - mean[o] * s
// (in double, rounded once), converts w' into the layout the convolution reads (by the runtime's
// reorder kernel: flipped for conv.cc's AdjointConv, transformed for conv_winograd.cc), and runs
// the convolution on (x, w', b') with the bias, [the residual added: the Add's other input is
// copied into the output first, and the sum post-op adds to it,] and [ReLU or ReLU6] as its
// epilogue. Not the same bits as the kernels apart: the tests bound the difference. Inputs (x, w,
// gamma, beta, mean, variance[, the Add's other input]). Outputs: y; with no node after the batch
// norm, FusedBatchNorm's (y, mean, variance), the statistics used copied as that kernel does.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

#include "tower/kernels/cpu/conv.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"
#include "tower/ops/batch_norm.h"

namespace tower::cpu {
namespace {

class ConvBatchNormKernel final : public Kernel {
 public:
  ConvBatchNormKernel(const Node& node, const KernelContext& context, bool add, bool relu,
                      bool relu6 = false)
      : node_(node),
        epsilon_(node.attr<ops::ConvBatchNormAttrs>().batch_norm.epsilon),
        add_(add),
        team_(std::max(context.num_threads, 1)),
        inner_node_(node) {
    inner_node_.inputs = {node.inputs[0], node.inputs[1], node.inputs[2]};  // the bias: (O)
    inner_node_.outputs = {node.outputs[0]};
    inner_node_.attrs = node.attr<ops::ConvBatchNormAttrs>().conv;
    KernelContext inner_context = context;
    inner_context.input_layouts.resize(1);  // x as it arrives; the weights and bias plain
    inner_ = make_conv2d_with(inner_node_, inner_context,
                              {.bias = true, .add_output = add, .relu = relu, .relu6 = relu6});
    const Shape& w = node.inputs[1].shape();
    // The runtime's own conversion of a plain filter into the layout the convolution reads.
    filter_reorder_ =
        (*find_reorder(DeviceKind::cpu))(node.inputs[1], Layout{}, inner_->input_layout(1));
    inner_scratch_ = align64(inner_->scratch_bytes());
    plain_bytes_ = align64(static_cast<size_t>(w.numel()) * sizeof(float));
    target_bytes_ = align64(inner_->input_layout(1).bytes(node.inputs[1].spec()));
    bias_bytes_ = align64(static_cast<size_t>(w[0]) * sizeof(float));
    output_bytes_ = inner_->output_layout(0).bytes(node.outputs[0]);
  }

  size_t scratch_bytes() const override {
    return inner_scratch_ + plain_bytes_ + target_bytes_ + bias_bytes_ +
           filter_reorder_->scratch_bytes();
  }
  // The residual, when nothing reads it later, is the output itself (nothing to copy).
  int output_in_place_of() const override { return add_ ? 6 : -1; }
  // The residual in the output's layout, since it is copied into the output.
  Layout input_layout(int i) const override {
    if (i == 0) return inner_->input_layout(0);
    return add_ && i == 6 ? inner_->output_layout(0) : Layout{};
  }
  Layout output_layout(int o) const override {
    return o == 0 ? inner_->output_layout(0) : Layout{};
  }

  void bind(const KernelIO& io) override {
    char* scratch = static_cast<char*>(io.scratch);
    plain_w_ = reinterpret_cast<float*>(scratch + inner_scratch_);
    void* target = scratch + inner_scratch_ + plain_bytes_;
    bias_ = reinterpret_cast<float*>(scratch + inner_scratch_ + plain_bytes_ + target_bytes_);
    const Shape& w = node_.inputs[1].shape();
    inner_io_.inputs.clear();
    inner_io_.inputs.push_back(io.inputs[0].view());
    inner_io_.inputs.push_back(Tensor::wrap(target, w, DType::f32));
    inner_io_.inputs.push_back(Tensor::wrap(bias_, Shape{w[0]}, DType::f32));
    inner_io_.outputs.clear();
    inner_io_.outputs.push_back(io.outputs[0].view());
    inner_io_.scratch = io.scratch;
    inner_->bind(inner_io_);
    filter_io_.inputs.clear();
    filter_io_.inputs.push_back(Tensor::wrap(plain_w_, w, DType::f32));
    filter_io_.outputs.clear();
    filter_io_.outputs.push_back(Tensor::wrap(target, w, DType::f32));
    filter_io_.scratch = scratch + inner_scratch_ + plain_bytes_ + target_bytes_ + bias_bytes_;
    filter_reorder_->bind(filter_io_);
  }

  // The convolution's tasks (its chunks of images), so that contended mode may run an inference
  // program (with one busy core, ResNet-20's inference on 2 threads: 2105 to 2291 images/s against
  // 1779 to 1960 as one team kernel). The first task of a run to come folds the batch norm into
  // the filter while the others wait (a filter's worth of work); finish_tasks() readies the next
  // run's fold. The same bits as run().
  Tasks tasks() const override { return inner_->tasks(); }
  void run_task(const KernelIO& io, int task, int member) override {
    if (!folded_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(fold_mutex_);
      if (!folded_.load(std::memory_order_relaxed)) {
        prepare(io, 1);
        folded_.store(true, std::memory_order_release);
      }
    }
    inner_->run_task(inner_io_, task, member);
  }
  void finish_tasks(const KernelIO& io) override {
    inner_->finish_tasks(inner_io_);
    copy_statistics(io);
    folded_.store(false, std::memory_order_release);
  }

  void run(const KernelIO& io) override {
    prepare(io, team_);
    inner_->run(inner_io_);
    copy_statistics(io);
  }

 private:
  // The fold, the folded filter's conversion and the residual (by `threads`), before the
  // convolution.
  void prepare(const KernelIO& io, int threads) {
    fold(io);
    filter_reorder_->run(filter_io_);
    if (add_) copy_residual(io, threads);
    inner_io_.step = io.step;
  }
  void copy_statistics(const KernelIO& io) const {
    if (io.outputs.size() == 3) {  // the statistics used, for FusedBatchNormGrad
      std::memcpy(io.outputs[1].raw_data(), io.inputs[4].raw_data(), io.inputs[4].nbytes());
      std::memcpy(io.outputs[2].raw_data(), io.inputs[5].raw_data(), io.inputs[5].nbytes());
    }
  }

  // The residual into the output, for the sum post-op, by `threads`: alone, one thread's copy of
  // ResNet-20's first-stage residual (8 MB at batch 128) took about a millisecond while the rest
  // of the team waited. (Where nothing reads the residual later, the output is the residual.)
  void copy_residual(const KernelIO& io, int threads) const {
    const auto* from = static_cast<const char*>(io.inputs[6].raw_data());
    auto* to = static_cast<char*>(io.outputs[0].raw_data());
    if (from == to) return;
    constexpr size_t kBlock = size_t{1} << 16;
    const auto blocks = static_cast<int64_t>((output_bytes_ + kBlock - 1) / kBlock);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const size_t begin = static_cast<size_t>(b) * kBlock;
      std::memcpy(to + begin, from + begin, std::min(kBlock, output_bytes_ - begin));
    }
  }

  void fold(const KernelIO& io) {
    const float* w = io.inputs[1].data<float>();
    const float* gamma = io.inputs[2].data<float>();
    const float* beta = io.inputs[3].data<float>();
    const float* mean = io.inputs[4].data<float>();
    const float* variance = io.inputs[5].data<float>();
    const int64_t channels = io.inputs[1].shape()[0];
    const int64_t per_channel = io.inputs[1].numel() / channels;
    for (int64_t o = 0; o < channels; ++o) {
      const double s = gamma[o] / std::sqrt(static_cast<double>(variance[o]) + epsilon_);
      bias_[o] = static_cast<float>(beta[o] - mean[o] * s);
      for (int64_t i = o * per_channel; i < (o + 1) * per_channel; ++i)
        plain_w_[i] = static_cast<float>(w[i] * s);
    }
  }

  const Node& node_;
  double epsilon_;
  bool add_;
  int team_;
  size_t output_bytes_ = 0;
  Node inner_node_;  // Conv2D+BiasAdd[+Relu] on (x, w', b')
  std::unique_ptr<Kernel> inner_;
  // The folded filter (plain) into the layout inner_ reads (reorder.cc: oneDNN's, flipped for
  // AdjointConv, or transformed for conv_winograd.cc), with its own scratch.
  std::unique_ptr<Kernel> filter_reorder_;
  size_t inner_scratch_ = 0, plain_bytes_ = 0, target_bytes_ = 0, bias_bytes_ = 0;
  float* plain_w_ = nullptr;
  float* bias_ = nullptr;
  KernelIO inner_io_, filter_io_;
  std::mutex fold_mutex_;
  std::atomic<bool> folded_{false};
};

KernelRegistrar conv_batch_norm_kernel{
    "Conv2D+FusedBatchNorm", DeviceKind::cpu, [](const Node& node, const KernelContext& context) {
      return std::make_unique<ConvBatchNormKernel>(node, context, false, false);
    }};
KernelRegistrar conv_batch_norm_relu_kernel{"Conv2D+FusedBatchNorm+Relu", DeviceKind::cpu,
                                            [](const Node& node, const KernelContext& context) {
                                              return std::make_unique<ConvBatchNormKernel>(
                                                  node, context, false, true);
                                            }};
// MobileNet's convolutions: ReLU6 after the batch norm.
KernelRegistrar conv_batch_norm_relu6_kernel{"Conv2D+FusedBatchNorm+Relu6", DeviceKind::cpu,
                                             [](const Node& node, const KernelContext& context) {
                                               return std::make_unique<ConvBatchNormKernel>(
                                                   node, context, false, false, true);
                                             }};
KernelRegistrar conv_batch_norm_add_relu_kernel{"Conv2D+FusedBatchNorm+Add+Relu", DeviceKind::cpu,
                                                [](const Node& node, const KernelContext& context) {
                                                  return std::make_unique<ConvBatchNormKernel>(
                                                      node, context, true, true);
                                                }};

}  // namespace
}  // namespace tower::cpu
