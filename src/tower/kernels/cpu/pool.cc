// Pooling with oneDNN, in the layout x comes in when it is blocked (a convolution's), else in
// channel blocks of the vector width: oneDNN 2.6 pools plain NCHW with its reference-like
// `simple_nchw` code, ten times slower per byte than its JIT code on blocks, far more than the
// layout conversions cost (cifar10's second pooling, after LRN, 9 ms against 1 ms for the
// conversion and 1 ms for the pooling, per step of 128 on 2 cores).
//
// MaxPoolGrad has only x and dy. It is a plain loop in x's layout (NCHW, nChw8c, nChw16c or NHWC):
// each window's argmax found again in x (the first largest, in row-major order, as TensorFlow)
// gets dy added. oneDNN would need its workspace, which the forward pass does not keep: running
// the forward again for it and then oneDNN's backward cost 15 ms per cifar10 step against 3 ms.
// In other layouts it does that (and AvgPoolGrad, which has no x, runs oneDNN on plain NCHW).
#include "tower/ops/pool.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "tower/core/device.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using dnnl::memory;

dnnl::algorithm algorithm_of(bool is_max) {
  // TensorFlow's average ignores padded positions, as does its max.
  return is_max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
}

// The layout to pool x (N, C, H, W) in: as it comes when blocked, else nChw8c (nChw16c with
// AVX-512) when the channels fill whole blocks.
Layout pooling_layout(const Shape& x, const Layout& incoming) {
  const int64_t block = cpu_info().avx512f ? 16 : 8;
  if (!incoming.is_plain() || x.rank() != 4 || x[1] % block != 0) return incoming;
  const auto tag = block == 16 ? memory::format_tag::nChw16c : memory::format_tag::nChw8c;
  return to_layout(memory::desc(to_dims(x), memory::data_type::f32, tag), x);
}

// y follows x: plain for a plain x, else the layout oneDNN picks to go with x's.
dnnl::pooling_forward::primitive_desc forward_pd(dnnl::prop_kind prop, bool is_max, const Shape& x,
                                                 const Layout& x_layout, const Shape& y,
                                                 const ops::PoolAttrs& a) {
  ops::AxisPadding ph = ops::axis_padding(x[2], a.ksize[0], a.strides[0], a.padding);
  ops::AxisPadding pw = ops::axis_padding(x[3], a.ksize[1], a.strides[1], a.padding);
  memory::desc y_md = x_layout.is_plain() ? plain_md(y)
                                          : memory::desc(to_dims(y), memory::data_type::f32,
                                                         memory::format_tag::any);
  dnnl::pooling_forward::desc desc(prop, algorithm_of(is_max), md_of(x, x_layout), y_md,
                                   {a.strides[0], a.strides[1]}, {a.ksize[0], a.ksize[1]},
                                   {ph.before, pw.before}, {ph.after, pw.after});
  return {desc, user_scratchpad(), engine()};
}

class PoolForwardKernel : public Kernel {
 public:
  PoolForwardKernel(const Node& node, const KernelContext& context, bool is_max)
      : node_(node), x_layout_(pooling_layout(node.inputs[0].shape(), context.input_layout(0))) {
    pd_ = build(node, [&] {
      return forward_pd(dnnl::prop_kind::forward_inference, is_max, node.inputs[0].shape(),
                        x_layout_, node.outputs[0].shape, node.attr<ops::PoolAttrs>());
    });
    prim_ = dnnl::pooling_forward(pd_);
  }
  Layout input_layout(int) const override { return x_layout_; }
  Layout output_layout(int) const override {
    return to_layout(pd_.dst_desc(), node_.outputs[0].shape);
  }
  size_t scratch_bytes() const override { return pd_.scratchpad_desc().get_size(); }
  void bind(const KernelIO& io) override {
    args_ = {{DNNL_ARG_SRC, make_memory(pd_.src_desc(), io.inputs[0])},
             {DNNL_ARG_DST, make_memory(pd_.dst_desc(), io.outputs[0])}};
    add_scratchpad(args_, pd_.scratchpad_desc(), io.scratch);
  }
  void run(const KernelIO& io) override { execute(node_, prim_, args_); }

 private:
  const Node& node_;
  Layout x_layout_;
  dnnl::pooling_forward::primitive_desc pd_;
  dnnl::pooling_forward prim_;
  std::unordered_map<int, memory> args_;
};

// Scratch layout: [forward scratchpad | backward scratchpad | y | workspace]; the last two only
// for max pooling.
class PoolBackwardKernel : public Kernel {
 public:
  PoolBackwardKernel(const Node& node, const KernelContext& context, bool is_max)
      : node_(node), is_max_(is_max) {
    const Shape& dy = node.inputs[is_max ? 1 : 0].shape();
    const Shape& dx = node.outputs[0].shape;
    const ops::PoolAttrs& a =
        is_max ? node.attr<ops::PoolAttrs>() : node.attr<ops::PoolGradAttrs>().pool;
    if (is_max) x_layout_ = pooling_layout(dx, context.input_layout(0));
    build(node, [&] {
      fwd_pd_ = forward_pd(dnnl::prop_kind::forward_training, is_max, dx, x_layout_, dy, a);
      ops::AxisPadding ph = ops::axis_padding(dx[2], a.ksize[0], a.strides[0], a.padding);
      ops::AxisPadding pw = ops::axis_padding(dx[3], a.ksize[1], a.strides[1], a.padding);
      dnnl::pooling_backward::desc desc(algorithm_of(is_max), md_of(dx, x_layout_),
                                        fwd_pd_.dst_desc(), {a.strides[0], a.strides[1]},
                                        {a.ksize[0], a.ksize[1]}, {ph.before, pw.before},
                                        {ph.after, pw.after});
      bwd_pd_ = dnnl::pooling_backward::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
      return 0;
    });
    bwd_prim_ = dnnl::pooling_backward(bwd_pd_);
    if (is_max_) fwd_prim_ = dnnl::pooling_forward(fwd_pd_);
    bwd_scratchpad_at_ = align64(is_max_ ? fwd_pd_.scratchpad_desc().get_size() : 0);
    y_at_ = bwd_scratchpad_at_ + align64(bwd_pd_.scratchpad_desc().get_size());
    workspace_at_ = y_at_ + (is_max_ ? align64(fwd_pd_.dst_desc().get_size()) : 0);
    scratch_bytes_ = workspace_at_ + (is_max_ ? align64(fwd_pd_.workspace_desc().get_size()) : 0);
  }

  size_t scratch_bytes() const override { return scratch_bytes_; }
  // x and dx in x's layout, dy in the forward output's.
  Layout input_layout(int i) const override {
    return i == 0 && is_max_
               ? x_layout_
               : to_layout(fwd_pd_.dst_desc(), node_.inputs[static_cast<size_t>(i)].shape());
  }
  Layout output_layout(int) const override { return x_layout_; }

  void bind(const KernelIO& io) override {
    auto* scratch = static_cast<char*>(io.scratch);
    const Tensor& dy = io.inputs[is_max_ ? 1 : 0];
    bwd_args_ = {{DNNL_ARG_DIFF_DST, make_memory(bwd_pd_.diff_dst_desc(), dy)},
                 {DNNL_ARG_DIFF_SRC, make_memory(bwd_pd_.diff_src_desc(), io.outputs[0])}};
    add_scratchpad(bwd_args_, bwd_pd_.scratchpad_desc(), scratch + bwd_scratchpad_at_);
    if (!is_max_) return;
    memory workspace(fwd_pd_.workspace_desc(), engine(), scratch + workspace_at_);
    bwd_args_[DNNL_ARG_WORKSPACE] = workspace;
    fwd_args_ = {{DNNL_ARG_SRC, make_memory(fwd_pd_.src_desc(), io.inputs[0])},
                 {DNNL_ARG_DST, memory(fwd_pd_.dst_desc(), engine(), scratch + y_at_)},
                 {DNNL_ARG_WORKSPACE, workspace}};
    add_scratchpad(fwd_args_, fwd_pd_.scratchpad_desc(), scratch);
  }

  void run(const KernelIO& io) override {
    if (is_max_) execute(node_, *fwd_prim_, fwd_args_);
    execute(node_, bwd_prim_, bwd_args_);
  }

 private:
  const Node& node_;
  bool is_max_;
  Layout x_layout_;
  dnnl::pooling_forward::primitive_desc fwd_pd_;
  dnnl::pooling_backward::primitive_desc bwd_pd_;
  std::optional<dnnl::pooling_forward> fwd_prim_;
  dnnl::pooling_backward bwd_prim_;
  size_t bwd_scratchpad_at_ = 0, y_at_ = 0, workspace_at_ = 0, scratch_bytes_ = 0;
  std::unordered_map<int, memory> fwd_args_, bwd_args_;
};

// The layouts the hand-written MaxPoolGrad works in.
std::optional<memory::format_tag> loop_tag(const Shape& x, const Layout& layout) {
  using tag = memory::format_tag;
  for (tag t : {tag::nchw, tag::nChw8c, tag::nChw16c, tag::nhwc})
    if (to_layout(memory::desc(to_dims(x), memory::data_type::f32, t), x) == layout) return t;
  return std::nullopt;
}

constexpr int kMaxWindow = 64;

// L neighbouring channels of one output position: the first largest x of the window (positions
// at `offsets`, row-major) gets g. Compares and selects without branches, so they vectorize.
template <int L>
void argmax_lanes(const float* x, const int64_t* offsets, int32_t positions, const float* g,
                  float* dx) {
  float best[L];
  int32_t index[L];
  for (int l = 0; l < L; ++l) {
    best[l] = x[offsets[0] + l];
    index[l] = 0;
  }
  for (int32_t k = 1; k < positions; ++k) {
    const float* p = x + offsets[k];
    for (int l = 0; l < L; ++l) {
      const bool larger = p[l] > best[l];
      best[l] = larger ? p[l] : best[l];
      index[l] = larger ? k : index[l];
    }
  }
  for (int l = 0; l < L; ++l) dx[offsets[index[l]] + l] += g[l];
}

class MaxPoolGradKernel : public Kernel {
 public:
  MaxPoolGradKernel(const Node& node, const Layout& layout, memory::format_tag tag)
      : node_(node), layout_(layout) {
    const Shape& x = node.inputs[0].shape();
    const Shape& dy = node.inputs[1].shape();
    x_md_ = memory::desc(to_dims(x), memory::data_type::f32, tag);
    dy_md_ = memory::desc(to_dims(dy), memory::data_type::f32, tag);
    x_blocks_ = *channel_blocks(x_md_);
    dy_blocks_ = *channel_blocks(dy_md_);
  }
  Layout input_layout(int i) const override {
    return i == 0 ? layout_ : to_layout(dy_md_, node_.inputs[1].shape());
  }
  Layout output_layout(int) const override { return layout_; }

  void run(const KernelIO& io) override {
    const Shape& x_shape = io.inputs[0].shape();
    const Shape& dy_shape = io.inputs[1].shape();
    const ops::PoolAttrs& a = node_.attr<ops::PoolAttrs>();
    const ops::AxisPadding ph = ops::axis_padding(x_shape[2], a.ksize[0], a.strides[0], a.padding);
    const ops::AxisPadding pw = ops::axis_padding(x_shape[3], a.ksize[1], a.strides[1], a.padding);
    const int64_t channels = x_shape[1], block = x_blocks_.block;
    const int64_t blocks = (channels + block - 1) / block, height = x_shape[2], width = x_shape[3];
    const int64_t* xs = x_blocks_.strides;
    const int64_t* ds = dy_blocks_.strides;
    const float* x = io.inputs[0].data<float>();
    const float* dy = io.inputs[1].data<float>();
    float* dx = const_cast<Tensor&>(io.outputs[0]).data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < x_shape[0] * blocks; ++plane) {
      const int64_t n = plane / blocks, cb = plane % blocks;
      const int64_t lanes = std::min(block, channels - cb * block);
      const int64_t x_at = n * xs[0] + cb * xs[1], dy_at = n * ds[0] + cb * ds[1];
      // The plane's dx (its padding lanes too) is contiguous in every layout here: zeroed while
      // it is about to be in cache anyway.
      std::memset(dx + x_at, 0, sizeof(float) * static_cast<size_t>(height * width * block));
      for (int64_t oh = 0; oh < dy_shape[2]; ++oh) {
        const int64_t h0 = std::max<int64_t>(oh * a.strides[0] - ph.before, 0);
        const int64_t h1 = std::min(oh * a.strides[0] - ph.before + a.ksize[0], height);
        for (int64_t ow = 0; ow < dy_shape[3]; ++ow) {
          const int64_t w0 = std::max<int64_t>(ow * a.strides[1] - pw.before, 0);
          const int64_t w1 = std::min(ow * a.strides[1] - pw.before + a.ksize[1], width);
          const float* g = dy + dy_at + oh * ds[2] + ow * ds[3];
          if (h0 >= h1 || w0 >= w1) continue;
          // Offsets of the window's positions, in row-major order.
          int64_t offsets[kMaxWindow];
          int32_t positions = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) offsets[positions++] = x_at + h * xs[2] + w * xs[3];
          int64_t l0 = 0;
          if (lanes == 8) {
            argmax_lanes<8>(x, offsets, positions, g, dx);
            l0 = 8;
          }
          for (; l0 + 16 <= lanes; l0 += 16)
            argmax_lanes<16>(x + l0, offsets, positions, g + l0, dx + l0);
          for (; l0 < lanes; ++l0) argmax_lanes<1>(x + l0, offsets, positions, g + l0, dx + l0);
        }
      }
    }
  }

 private:
  const Node& node_;
  Layout layout_;
  memory::desc x_md_, dy_md_;
  ChannelBlocks x_blocks_, dy_blocks_;
};

template <typename K, bool is_max>
std::unique_ptr<Kernel> make(const Node& node, const KernelContext& context) {
  return std::make_unique<K>(node, context, is_max);
}

std::unique_ptr<Kernel> make_max_pool_grad(const Node& node, const KernelContext& context) {
  const Shape& x = node.inputs[0].shape();
  const Layout layout = pooling_layout(x, context.input_layout(0));
  const ops::PoolAttrs& a = node.attr<ops::PoolAttrs>();
  if (x.rank() == 4 && x.numel() > 0 && a.ksize[0] * a.ksize[1] <= kMaxWindow)
    if (auto tag = loop_tag(x, layout))
      return std::make_unique<MaxPoolGradKernel>(node, layout, *tag);
  return std::make_unique<PoolBackwardKernel>(node, context, true);
}

KernelRegistrar max_pool_kernel{"MaxPool", DeviceKind::cpu, make<PoolForwardKernel, true>};
KernelRegistrar avg_pool_kernel{"AvgPool", DeviceKind::cpu, make<PoolForwardKernel, false>};
KernelRegistrar max_pool_grad_kernel{"MaxPoolGrad", DeviceKind::cpu, make_max_pool_grad};
KernelRegistrar avg_pool_grad_kernel{"AvgPoolGrad", DeviceKind::cpu,
                                     make<PoolBackwardKernel, false>};

}  // namespace
}  // namespace tower::cpu
