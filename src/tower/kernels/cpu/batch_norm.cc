// FusedBatchNorm and its gradient on oneDNN batch_normalization (separate scale and shift), built
// once with a user scratchpad, in the layout x comes in (plain nchw / nc, or a convolution's
// blocked one); the per-channel tensors are plain. What sums over the batch runs on one thread
// (bn_threads). In training, on a convolution's layout, the loops over channel groups of
// batch_norm_groups.cc run instead (they split into tasks). AssignMovingAverage is a plain loop.
#include "tower/ops/batch_norm.h"

#include <algorithm>
#include <cstring>

#include "tower/kernels/cpu/batch_norm.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/cpu/math.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using flags = dnnl::normalization_flags;
using prop = dnnl::prop_kind;

bool inference(const Node& node) {
  return node.attr<ops::BatchNormAttrs>().mode == ops::BatchNormMode::inference;
}

flags bn_flags(const Node& node) {
  flags f = flags::use_scale | flags::use_shift;
  return inference(node) ? f | flags::use_global_stats : f;
}

// The team a kernel of `node` runs on: one thread where it sums over the batch (training's
// statistics and every gradient), since oneDNN cuts those sums by the threads the primitive was
// built for; the bits then do not depend on the team. Inference only normalizes.
int bn_threads(const Node& node, const KernelContext& context) {
  return inference(node) && node.op != "FusedBatchNormGrad" ? std::max(context.num_threads, 1) : 1;
}

dnnl::batch_normalization_forward::primitive_desc forward_pd(const Node& node, const Shape& x,
                                                             const Layout& x_layout, prop kind,
                                                             bool relu = false) {
  return build(node, [&] {
    dnnl::batch_normalization_forward::desc desc(
        kind, md_of(x, x_layout), node.attr<ops::BatchNormAttrs>().epsilon,
        relu ? bn_flags(node) | flags::fuse_norm_relu : bn_flags(node));
    return dnnl::batch_normalization_forward::primitive_desc(desc, user_scratchpad(), engine());
  });
}

// Inputs (x, gamma, beta, moving_mean, moving_var) -> (y, mean, variance). FusedBatchNorm+Relu
// (fused by the runtime): y after the ReLU, in the same pass; the workspace oneDNN writes for a
// fused backward pass goes to scratch (the ReLU's gradient reads y).
class FusedBatchNormKernel : public Kernel {
 public:
  FusedBatchNormKernel(const Node& node, const KernelContext& context, bool relu)
      : node_(node),
        team_(bn_threads(node, context)),
        program_team_(context.num_threads),
        inference_(inference(node)),
        x_layout_(context.input_layout(0)) {
    KernelThreadsScope threads(team_);
    bn_pd_ = forward_pd(node, node.inputs[0].shape(), x_layout_,
                        inference_ ? prop::forward_inference : prop::forward_training, relu);
    bn_prim_ = dnnl::batch_normalization_forward(bn_pd_);
  }

  size_t scratch_bytes() const override {
    return align64(bn_pd_.scratchpad_desc().get_size()) + bn_pd_.workspace_desc().get_size();
  }
  Layout input_layout(int i) const override { return i == 0 ? x_layout_ : Layout{}; }
  Layout output_layout(int o) const override { return o == 0 ? x_layout_ : Layout{}; }

  void bind(const KernelIO& io) override {
    dnnl::memory::desc c_md = plain_md(io.inputs[1].shape());
    args_[DNNL_ARG_SRC] = make_memory(bn_pd_.src_desc(), io.inputs[0]);
    args_[DNNL_ARG_DST] = make_memory(bn_pd_.dst_desc(), io.outputs[0]);
    args_[DNNL_ARG_SCALE] = make_memory(c_md, io.inputs[1]);
    args_[DNNL_ARG_SHIFT] = make_memory(c_md, io.inputs[2]);
    // Training computes the statistics into outputs 1 and 2; inference reads the moving ones.
    const Tensor& mean = inference_ ? io.inputs[3] : io.outputs[1];
    const Tensor& variance = inference_ ? io.inputs[4] : io.outputs[2];
    args_[DNNL_ARG_MEAN] = make_memory(c_md, mean);
    args_[DNNL_ARG_VARIANCE] = make_memory(c_md, variance);
    add_scratchpad(args_, bn_pd_.scratchpad_desc(), io.scratch);
    if (bn_pd_.workspace_desc().get_size() > 0)
      args_[DNNL_ARG_WORKSPACE] = dnnl::memory(
          bn_pd_.workspace_desc(), engine(),
          static_cast<char*>(io.scratch) + align64(bn_pd_.scratchpad_desc().get_size()));
  }

  // Never a task of contended mode on a team: oneDNN's primitive synchronizes with an OpenMP
  // barrier, which, run on one thread inside the team's region, would wait for the whole team.
  Tasks tasks() const override { return program_team_ > 1 ? Tasks::team() : Tasks::one(); }
  void run(const KernelIO& io) override {
    {
      KernelThreadsScope threads(team_);
      execute(node_, bn_prim_, args_);
    }
    if (inference_) {  // the statistics used, for FusedBatchNormGrad
      std::memcpy(io.outputs[1].raw_data(), io.inputs[3].raw_data(), io.inputs[3].nbytes());
      std::memcpy(io.outputs[2].raw_data(), io.inputs[4].raw_data(), io.inputs[4].nbytes());
    }
  }

 private:
  const Node& node_;
  int team_;          // the primitive's threads (bn_threads)
  int program_team_;  // KernelContext::num_threads
  bool inference_;
  Layout x_layout_;
  dnnl::batch_normalization_forward::primitive_desc bn_pd_;
  dnnl::batch_normalization_forward bn_prim_;
  std::unordered_map<int, dnnl::memory> args_;
};

// Inputs (dy, x, gamma, beta, mean, variance) -> (dx, dgamma, dbeta).
class FusedBatchNormGradKernel : public Kernel {
 public:
  // dy and dx in x's layout.
  FusedBatchNormGradKernel(const Node& node, const KernelContext& context)
      : node_(node),
        team_(bn_threads(node, context)),
        program_team_(context.num_threads),
        x_layout_(context.input_layout(1)) {
    KernelThreadsScope threads(team_);
    const Shape& x = node.inputs[1].shape();
    auto hint_pd = forward_pd(node, x, x_layout_, prop::forward_training);
    bn_pd_ = build(node, [&] {
      dnnl::batch_normalization_backward::desc desc(
          prop::backward, md_of(x, x_layout_), md_of(x, x_layout_),
          node.attr<ops::BatchNormAttrs>().epsilon, bn_flags(node));
      return dnnl::batch_normalization_backward::primitive_desc(desc, user_scratchpad(), engine(),
                                                                hint_pd);
    });
    bn_prim_ = dnnl::batch_normalization_backward(bn_pd_);
  }

  size_t scratch_bytes() const override { return bn_pd_.scratchpad_desc().get_size(); }
  Layout input_layout(int i) const override { return i <= 1 ? x_layout_ : Layout{}; }
  Layout output_layout(int o) const override { return o == 0 ? x_layout_ : Layout{}; }

  void bind(const KernelIO& io) override {
    dnnl::memory::desc c_md = plain_md(io.inputs[2].shape());
    args_[DNNL_ARG_DIFF_DST] = make_memory(bn_pd_.diff_dst_desc(), io.inputs[0]);
    args_[DNNL_ARG_SRC] = make_memory(bn_pd_.src_desc(), io.inputs[1]);
    args_[DNNL_ARG_SCALE] = make_memory(c_md, io.inputs[2]);
    args_[DNNL_ARG_SHIFT] = make_memory(c_md, io.inputs[3]);  // unused, but required by 2.6
    args_[DNNL_ARG_MEAN] = make_memory(c_md, io.inputs[4]);
    args_[DNNL_ARG_VARIANCE] = make_memory(c_md, io.inputs[5]);
    args_[DNNL_ARG_DIFF_SRC] = make_memory(bn_pd_.diff_src_desc(), io.outputs[0]);
    args_[DNNL_ARG_DIFF_SCALE] = make_memory(c_md, io.outputs[1]);
    args_[DNNL_ARG_DIFF_SHIFT] = make_memory(c_md, io.outputs[2]);
    add_scratchpad(args_, bn_pd_.scratchpad_desc(), io.scratch);
  }

  // (never a task of contended mode: FusedBatchNormKernel::tasks)
  Tasks tasks() const override { return program_team_ > 1 ? Tasks::team() : Tasks::one(); }
  void run(const KernelIO&) override {
    KernelThreadsScope threads(team_);
    execute(node_, bn_prim_, args_);
  }

 private:
  const Node& node_;
  int team_;          // the primitive's threads (bn_threads)
  int program_team_;  // KernelContext::num_threads
  Layout x_layout_;
  dnnl::batch_normalization_backward::primitive_desc bn_pd_;
  dnnl::batch_normalization_backward bn_prim_;
  std::unordered_map<int, dnnl::memory> args_;
};

KernelRegistrar batch_norm_kernel{
    "FusedBatchNorm", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      if (auto kernel = make_batch_norm_groups(node, context, false)) return kernel;
      return std::make_unique<FusedBatchNormKernel>(node, context, false);
    }};
KernelRegistrar batch_norm_relu_kernel{
    "FusedBatchNorm+Relu", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      if (auto kernel = make_batch_norm_groups(node, context, true)) return kernel;
      return std::make_unique<FusedBatchNormKernel>(node, context, true);
    }};
// FusedBatchNorm+Add+Relu (a residual block's end in training: inputs FusedBatchNorm's, then the
// residual r; outputs FusedBatchNorm's, y = relu(batch norm + r)): where the channel groups do
// not apply, oneDNN's batch norm into scratch, then the sum and the ReLU.
class BatchNormThenAddRelu : public Kernel {
 public:
  BatchNormThenAddRelu(const Node& node, const KernelContext& context)
      : inner_(node, context, false), bytes_(inner_.input_layout(0).bytes(node.inputs[0].spec())) {}
  size_t scratch_bytes() const override { return align64(bytes_) + inner_.scratch_bytes(); }
  Layout input_layout(int i) const override { return inner_.input_layout(i == 5 ? 0 : i); }
  Layout output_layout(int o) const override { return inner_.output_layout(o); }
  void bind(const KernelIO& io) override {
    inner_io_.inputs.clear();
    for (size_t i = 0; i < 5; ++i) inner_io_.inputs.push_back(io.inputs[i].view());
    inner_io_.outputs.clear();
    inner_io_.outputs.push_back(Tensor::wrap(io.scratch, io.outputs[0].shape(), DType::f32));
    for (size_t o = 1; o < io.outputs.size(); ++o)
      inner_io_.outputs.push_back(io.outputs[o].view());
    inner_io_.scratch = static_cast<char*>(io.scratch) + align64(bytes_);
    inner_.bind(inner_io_);
  }
  Tasks tasks() const override { return inner_.tasks(); }
  void run(const KernelIO& io) override {
    inner_.run(inner_io_);
    const auto* y = static_cast<const float*>(io.scratch);
    const float* r = io.inputs[5].data<float>();
    float* out = io.outputs[0].data<float>();
    add_two_relu(y, r, nullptr, out, static_cast<int64_t>(bytes_ / sizeof(float)));
  }

 private:
  FusedBatchNormKernel inner_;
  size_t bytes_ = 0;  // x's, in its layout
  KernelIO inner_io_;
};

KernelRegistrar batch_norm_add_relu_kernel{
    "FusedBatchNorm+Add+Relu", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      if (auto kernel = make_batch_norm_groups(node, context, true)) return kernel;
      return std::make_unique<BatchNormThenAddRelu>(node, context);
    }};

KernelRegistrar batch_norm_grad_kernel{
    "FusedBatchNormGrad", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      if (auto kernel = make_batch_norm_grad_groups(node, context, false)) return kernel;
      return std::make_unique<FusedBatchNormGradKernel>(node, context);
    }};

// ReluGrad+FusedBatchNormGrad (inputs dy, the ReLU's output y, then FusedBatchNormGrad's but dy):
// where the channel groups do not apply, dy masked by y > 0 into scratch, then oneDNN's gradient.
class ReluThenBatchNormGrad : public Kernel {
 public:
  ReluThenBatchNormGrad(const Node& node, const KernelContext& context)
      : inner_node_(node), inner_context_(context) {
    inner_node_.op = "FusedBatchNormGrad";
    inner_node_.inputs.erase(inner_node_.inputs.begin() + 1);
    const Layout x_layout = context.input_layout(2);
    inner_context_.input_layouts = {x_layout, x_layout};
    inner_ = std::make_unique<FusedBatchNormGradKernel>(inner_node_, inner_context_);
    bytes_ = x_layout.bytes(node.inputs[0].spec());
  }
  size_t scratch_bytes() const override { return align64(bytes_) + inner_->scratch_bytes(); }
  Layout input_layout(int i) const override {
    return i <= 1 ? inner_->input_layout(0) : inner_->input_layout(i - 1);
  }
  Layout output_layout(int o) const override { return inner_->output_layout(o); }
  void bind(const KernelIO& io) override {
    inner_io_.inputs.clear();
    inner_io_.inputs.push_back(Tensor::wrap(io.scratch, io.inputs[0].shape(), DType::f32));
    for (size_t i = 2; i < io.inputs.size(); ++i) inner_io_.inputs.push_back(io.inputs[i].view());
    inner_io_.outputs.clear();
    for (const Tensor& out : io.outputs) inner_io_.outputs.push_back(out.view());
    inner_io_.scratch = static_cast<char*>(io.scratch) + align64(bytes_);
    inner_->bind(inner_io_);
  }
  Tasks tasks() const override { return inner_->tasks(); }
  void run(const KernelIO& io) override {
    const float* dy = io.inputs[0].data<float>();
    const float* y = io.inputs[1].data<float>();
    auto* masked = static_cast<float*>(io.scratch);
    for (size_t i = 0; i < bytes_ / sizeof(float); ++i) masked[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    inner_->run(inner_io_);
  }

 private:
  Node inner_node_;  // FusedBatchNormGrad's
  KernelContext inner_context_;
  std::unique_ptr<FusedBatchNormGradKernel> inner_;
  KernelIO inner_io_;
  size_t bytes_ = 0;  // dy's, in its layout
};

KernelRegistrar relu_batch_norm_grad_kernel{
    "ReluGrad+FusedBatchNormGrad", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      if (auto kernel = make_batch_norm_grad_groups(node, context, true)) return kernel;
      return std::make_unique<ReluThenBatchNormGrad>(node, context);
    }};

// Input 0 is a view of the variable's storage (the runtime binds Variable nodes to it), so the
// update lands in the variable itself.
KernelRegistrar assign_moving_average_kernel{
    "AssignMovingAverage", DeviceKind::cpu, simple_kernel([](const Node& node, const KernelIO& io) {
      float decay = node.attr<ops::AssignMovingAverageAttrs>().decay;
      float* variable = const_cast<Tensor&>(io.inputs[0]).data<float>();
      const float* value = io.inputs[1].data<float>();
      float* out = io.outputs[0].data<float>();
      for (int64_t i = 0; i < io.inputs[0].numel(); ++i) {
        variable[i] = decay * variable[i] + (1.0f - decay) * value[i];
        out[i] = variable[i];
      }
    })};

}  // namespace
}  // namespace tower::cpu
