// Max pooling and its gradient are plain loops over planes (an image's block of channels) in x's
// layout when it is NCHW, nChw8c, nChw16c or NHWC (others are converted), the window's elements of
// a block of channels one vector. A plain x is pooled in channel blocks of the vector width. The
// forward pass is faster than oneDNN 2.6's JIT pooling (bench/results/cpu_kernel_choices.md); the
// windows inside x (most) read offsets computed once.
//
// MaxPoolGrad has only x and dy: each window's argmax found again in x (the first largest, in
// row-major order, as TensorFlow) gets dy added. oneDNN would need its workspace, which the
// forward pass does not keep, and running the forward again for it costs more than the loop.
// Fused with the ReLU gradient that follows it (MaxPoolGrad+ReluGrad, when x is the ReLU's output)
// it skips the windows whose maximum is not positive.
//
// Average pooling runs oneDNN: the forward pass in x's layout when blocked (a convolution's),
// else in channel blocks of the vector width (oneDNN 2.6 pools plain NCHW with its reference-like
// `simple_nchw` code, many times slower per byte than its JIT code on blocks); AvgPoolGrad, which
// has no x, on plain NCHW.
#include "tower/ops/pool.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "tower/core/device.h"
#include "tower/kernels/cpu/bf16.h"
#include "tower/kernels/cpu/chunks.h"
#include "tower/kernels/cpu/clones.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using dnnl::memory;

// TensorFlow's average ignores padded positions.
constexpr auto kAverage = dnnl::algorithm::pooling_avg_exclude_padding;

// The layout to pool x (N, C, H, W) in: as it comes when blocked, else nChw8c (nChw16c with
// AVX-512) when the channels fill whole blocks.
Layout pooling_layout(const Shape& x, const Layout& incoming) {
  const int64_t block = cpu_info().avx512f ? 16 : 8;
  if (!incoming.is_plain() || x.rank() != 4 || x[1] % block != 0) return incoming;
  const auto tag = block == 16 ? memory::format_tag::nChw16c : memory::format_tag::nChw8c;
  return to_layout(memory::desc(to_dims(x), memory::data_type::f32, tag), x);
}

// y follows x: plain for a plain x (`x_md`), else the layout oneDNN picks to go with x's.
dnnl::pooling_forward::primitive_desc forward_pd(dnnl::prop_kind prop, const Shape& x,
                                                 const memory::desc& x_md, const Shape& y,
                                                 const ops::PoolAttrs& a) {
  const auto [ph, pw] = ops::pool_padding(x, a);
  memory::desc y_md = x_md == plain_md(x) ? plain_md(y)
                                          : memory::desc(to_dims(y), memory::data_type::f32,
                                                         memory::format_tag::any);
  dnnl::pooling_forward::desc desc(prop, kAverage, x_md, y_md, {a.strides[0], a.strides[1]},
                                   {a.ksize[0], a.ksize[1]}, {ph.before, pw.before},
                                   {ph.after, pw.after});
  return {desc, user_scratchpad(), engine()};
}

// AvgPool (input x), in batch chunks on a team of threads (chunks.h).
std::unique_ptr<Kernel> make_avg_pool(const Node& node, const KernelContext& context) {
  const Shape& x = node.inputs[0].shape();
  const Shape& y = node.outputs[0].shape;
  const memory::desc x_md = md_of(x, pooling_layout(x, context.input_layout(0)));
  return chunked(
      node, context, x[0],
      [&](int64_t rows) {
        const memory::desc xr_md = rows == x[0] ? x_md : with_batch(x_md, rows).value_or(x_md);
        const Shape xr = with_rows(x, xr_md.dims()[0]);
        auto pd = build(node, [&] {
          return forward_pd(dnnl::prop_kind::forward_inference, xr, xr_md, with_rows(y, xr[0]),
                            node.attr<ops::PoolAttrs>());
        });
        return Built{dnnl::pooling_forward(pd),
                     pd.scratchpad_desc(),
                     {input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc(), Role::rows),
                      output_arg(DNNL_ARG_DST, y, pd.dst_desc(), Role::rows)}};
      },
      Cut::rows);
}

// AvgPoolGrad (input dy) on plain NCHW.
class AvgPoolGradKernel : public Kernel {
 public:
  AvgPoolGradKernel(const Node& node, const KernelContext&) : node_(node) {
    const Shape& dy = node.inputs[0].shape();
    const Shape& dx = node.outputs[0].shape;
    const ops::PoolAttrs& a = node.attr<ops::PoolGradAttrs>().pool;
    build(node, [&] {
      fwd_pd_ = forward_pd(dnnl::prop_kind::forward_training, dx, plain_md(dx), dy, a);
      const auto [ph, pw] = ops::pool_padding(dx, a);
      dnnl::pooling_backward::desc desc(kAverage, plain_md(dx), fwd_pd_.dst_desc(),
                                        {a.strides[0], a.strides[1]}, {a.ksize[0], a.ksize[1]},
                                        {ph.before, pw.before}, {ph.after, pw.after});
      bwd_pd_ = dnnl::pooling_backward::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
      return 0;
    });
    bwd_prim_ = dnnl::pooling_backward(bwd_pd_);
  }

  size_t scratch_bytes() const override { return bwd_pd_.scratchpad_desc().get_size(); }
  Layout input_layout(int) const override {
    return to_layout(fwd_pd_.dst_desc(), node_.inputs[0].shape());
  }

  void bind(const KernelIO& io) override {
    args_ = {{DNNL_ARG_DIFF_DST, make_memory(bwd_pd_.diff_dst_desc(), io.inputs[0])},
             {DNNL_ARG_DIFF_SRC, make_memory(bwd_pd_.diff_src_desc(), io.outputs[0])}};
    add_scratchpad(args_, bwd_pd_.scratchpad_desc(), io.scratch);
  }
  void run(const KernelIO&) override { execute(node_, bwd_prim_, args_); }

 private:
  const Node& node_;
  dnnl::pooling_forward::primitive_desc fwd_pd_;
  dnnl::pooling_backward::primitive_desc bwd_pd_;
  dnnl::pooling_backward bwd_prim_;
  std::unordered_map<int, memory> args_;
};

// The layouts the hand-written MaxPoolGrad works in.
std::optional<memory::format_tag> loop_tag(const Shape& x, const Layout& layout) {
  using tag = memory::format_tag;
  for (tag t : {tag::nchw, tag::nChw8c, tag::nChw16c, tag::nhwc})
    if (to_layout(memory::desc(to_dims(x), memory::data_type::f32, t), x) == layout) return t;
  return std::nullopt;
}

// L neighbouring channels of one output position (L = 8 or 16: one vector in the clones for
// AVX2 or AVX-512): the first largest x of the window (positions at `offsets`, row-major) gets g
// (kRelu: only where that x is > 0, ReLU's gradient with x its output). Whole vectors, no
// branches or scatters: each window position adds g where it was the argmax and 0 elsewhere
// (tiles: the windows tile the plane, so each position's dx is 0 plus that, stored unread).
template <int L, bool kRelu>
TOWER_ALWAYS_INLINE void argmax_lanes(const float* x, const int64_t* offsets, int32_t positions,
                                      const float* g, float* dx, bool tiles) {
  using F = typename Vectors<L>::F;
  using I = typename Vectors<L>::I;
  static_assert(sizeof(F) == L * sizeof(float));
  F best, p, grad, d;
  load(best, x + offsets[0]);
  I index = I{} + 0;
  for (int32_t k = 1; k < positions; ++k) {
    load(p, x + offsets[k]);
    const I larger = p > best;
    best = larger ? p : best;
    index = larger ? I{} + k : index;
  }
  if constexpr (kRelu) index = best > F{} ? index : I{} - 1;
  load(grad, g);
  for (int32_t k = 0; k < positions; ++k) {
    if (tiles)
      d = F{};
    else
      load(d, dx + offsets[k]);
    d += index == k ? grad : F{};
    store(dx + offsets[k], d);
  }
}

// One channel at a time, for channel counts that do not fill a vector.
template <bool kRelu>
TOWER_ALWAYS_INLINE void argmax_lane(const float* x, const int64_t* offsets, int32_t positions,
                                     const float* g, float* dx) {
  float best = x[offsets[0]];
  int32_t index = 0;
  for (int32_t k = 1; k < positions; ++k)
    if (x[offsets[k]] > best) best = x[offsets[k]], index = k;
  if (!kRelu || best > 0.0f) dx[offsets[index]] += *g;
}

// The largest x of the window, L neighbouring channels at a time (else one).
template <int L>
TOWER_ALWAYS_INLINE void max_lanes(const float* x, const int64_t* offsets, int32_t positions,
                                   float* y) {
  using F = typename Vectors<L>::F;
  F best, p;
  load(best, x + offsets[0]);
  for (int32_t k = 1; k < positions; ++k) {
    load(p, x + offsets[k]);
    best = p > best ? p : best;
  }
  store(y, best);
}
TOWER_ALWAYS_INLINE void max_lane(const float* x, const int64_t* offsets, int32_t positions,
                                  float* y) {
  float best = x[offsets[0]];
  for (int32_t k = 1; k < positions; ++k) best = x[offsets[k]] > best ? x[offsets[k]] : best;
  *y = best;
}

// Where a plane of channels lies: x's and the pooled side's (y's or dy's) strides
// (channel_blocks) and the pooling window.
struct PoolPlane {
  const int64_t* xs;
  const int64_t* ds;
  int64_t lanes, block, height, width, out_height, out_width;
  ops::PoolAttrs attrs;
  ops::AxisPadding ph, pw;
};

// Calls f(at, offsets, positions, oh, ow, h1) for every window of the plane that holds a
// position: at + offsets[k] (k < positions) are its positions in x, in row-major order, and h1 is
// the row after its last. Windows inside x (most) take their offsets from the first, computed once.
template <typename Fn>
TOWER_ALWAYS_INLINE void each_window(const PoolPlane& p, const Fn& f) {
  const ops::PoolAttrs& a = p.attrs;
  int64_t inside[64], clipped[64];
  std::vector<int64_t> more;
  int64_t* whole = inside;
  int64_t* o = clipped;
  const int64_t window = a.ksize[0] * a.ksize[1];
  if (window > 64) {
    more.resize(static_cast<size_t>(2 * window));
    whole = more.data();
    o = whole + window;
  }
  for (int64_t k = 0; k < window; ++k)
    whole[k] = k / a.ksize[1] * p.xs[2] + k % a.ksize[1] * p.xs[3];
  for (int64_t oh = 0; oh < p.out_height; ++oh) {
    const int64_t top = oh * a.strides[0] - p.ph.before;
    const int64_t h0 = std::max<int64_t>(top, 0), h1 = std::min(top + a.ksize[0], p.height);
    for (int64_t ow = 0; ow < p.out_width; ++ow) {
      const int64_t left = ow * a.strides[1] - p.pw.before;
      const int64_t w0 = std::max<int64_t>(left, 0), w1 = std::min(left + a.ksize[1], p.width);
      if (h0 >= h1 || w0 >= w1) continue;
      if (h1 - h0 == a.ksize[0] && w1 - w0 == a.ksize[1]) {
        f(h0 * p.xs[2] + w0 * p.xs[3], whole, static_cast<int32_t>(window), oh, ow, h1);
        continue;
      }
      int32_t positions = 0;
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) o[positions++] = h * p.xs[2] + w * p.xs[3];
      f(0, o, positions, oh, ow, h1);
    }
  }
}

// x was written long before (by the layer before, or the forward pass): the window one output
// row down is fetched while this one is computed, or every new row of x costs a wait on memory
// (the windows step across rows, which the hardware prefetcher does not follow; the gain under
// AVX2: bench/results/cpu_kernel_choices.md).
TOWER_ALWAYS_INLINE void prefetch_window_below(const PoolPlane& p, const float* window,
                                               const int64_t* offsets, int32_t positions,
                                               int64_t h1) {
  const int64_t stride = p.attrs.strides[0];
  if (h1 - 1 + stride >= p.height) return;  // rows of this plane only
  for (int32_t k = 0; k < positions; ++k)
    __builtin_prefetch(window + offsets[k] + stride * p.xs[2]);
}

// Whether every position of the plane, every lane of its block, lies in exactly one window
// that argmax_lanes writes whole (no padding, windows side by side, no lanes left to the
// one-channel loop).
bool windows_tile(const PoolPlane& p) {
  const ops::PoolAttrs& a = p.attrs;
  return p.ph.before == 0 && p.pw.before == 0 && a.ksize[0] == a.strides[0] &&
         a.ksize[1] == a.strides[1] && p.out_height * a.strides[0] == p.height &&
         p.out_width * a.strides[1] == p.width && p.lanes == p.block &&
         (p.lanes == 8 || p.lanes % 16 == 0);
}

// (One loop for both cases: with a third template parameter, GCC stopped inlining the lambda
// into the clones, and the baseline copy it called ran cifar10's pool gradient 6 times slower.)
template <bool kRelu>
TOWER_ALWAYS_INLINE void max_pool_grad_plane_loop(const float* x, const float* dy, float* dx,
                                                  const PoolPlane& p) {
  // The plane's dx (its padding lanes too) is contiguous in every layout here: zeroed while it
  // is about to be in cache anyway, unless the windows write it all.
  const bool tiles = windows_tile(p);
  if (!tiles) std::memset(dx, 0, sizeof(float) * static_cast<size_t>(p.height * p.width * p.block));
  each_window(
      p, [&](int64_t at, const int64_t* o, int32_t positions, int64_t oh, int64_t ow, int64_t h1) {
        const float* g = dy + oh * p.ds[2] + ow * p.ds[3];
        const float* xw = x + at;
        float* dxw = dx + at;
        prefetch_window_below(p, xw, o, positions, h1);
        int64_t l0 = 0;
        if (p.lanes == 8) {
          argmax_lanes<8, kRelu>(xw, o, positions, g, dxw, tiles);
          l0 = 8;
        }
        for (; l0 + 16 <= p.lanes; l0 += 16)
          argmax_lanes<16, kRelu>(xw + l0, o, positions, g + l0, dxw + l0, tiles);
        for (; l0 < p.lanes; ++l0) argmax_lane<kRelu>(xw + l0, o, positions, g + l0, dxw + l0);
      });
}

// One plane of `lanes` channels of one image (x, dy and dx point at its start).
TOWER_ALWAYS_INLINE void max_pool_grad_plane_body(const float* x, const float* dy, float* dx,
                                                  const PoolPlane& p, bool relu) {
  if (relu)
    max_pool_grad_plane_loop<true>(x, dy, dx, p);
  else
    max_pool_grad_plane_loop<false>(x, dy, dx, p);
}
TOWER_CPU_VARIANTS(max_pool_grad_plane,
                   (const float* x, const float* dy, float* dx, const PoolPlane& p, bool relu),
                   (x, dy, dx, p, relu))

// One plane of `lanes` channels of one image: y (its start, the pooled side) the window's largest
// x.
TOWER_ALWAYS_INLINE void max_pool_plane_body(const float* x, float* y, const PoolPlane& p) {
  each_window(p, [&](int64_t at, const int64_t* offsets, int32_t positions, int64_t oh, int64_t ow,
                     int64_t h1) {
    const float* base = x + at;
    float* out = y + oh * p.ds[2] + ow * p.ds[3];
    prefetch_window_below(p, base, offsets, positions, h1);
    int64_t l0 = 0;
    if (p.lanes == 8) {
      max_lanes<8>(base, offsets, positions, out);
      l0 = 8;
    }
    for (; l0 + 16 <= p.lanes; l0 += 16) max_lanes<16>(base + l0, offsets, positions, out + l0);
    for (; l0 < p.lanes; ++l0) max_lane(base + l0, offsets, positions, out + l0);
  });
}
TOWER_CPU_VARIANTS(max_pool_plane, (const float* x, float* y, const PoolPlane& p), (x, y, p))

// A hand-written loop over the planes of x (an image's block of channels) and of the pooled side
// (y or dy), both in one of loop_tag's layouts: x's when it is one, else one the runtime converts
// x to. Planes run on the team, or in kTasks ranges as tasks on a team of several.
class PoolPlaneKernel : public Kernel {
 public:
  // `pooled`: the shape of y or dy.
  PoolPlaneKernel(const Node& node, const KernelContext& context, const Shape& pooled)
      : node_(node),
        team_(std::max(context.num_threads, 1)),
        members_(std::max(context.members, team_)) {
    const Shape& x = node.inputs[0].shape();
    layout_ = pooling_layout(x, context.input_layout(0));
    auto tag = loop_tag(x, layout_);
    if (!tag) {  // another layout: have the runtime convert x to a standard one
      layout_ = pooling_layout(x, Layout{});
      tag = loop_tag(x, layout_);
    }
    TOWER_CHECK(tag.has_value());
    x_md_ = memory::desc(to_dims(x), memory::data_type::f32, *tag);
    pooled_md_ = memory::desc(to_dims(pooled), memory::data_type::f32, *tag);
    x_blocks_ = *channel_blocks(x_md_);
    pooled_blocks_ = *channel_blocks(pooled_md_);
  }

  Tasks tasks() const override { return Tasks::split(members_ > 1 ? kTasks : 1); }
  void run_task(const KernelIO& io, int task, int member) override {
    const int64_t planes = num_planes();
    run_planes(io, planes * task / tasks().count, planes * (task + 1) / tasks().count, member);
  }
  void run(const KernelIO& io) override { run_planes(io, 0, num_planes(), -1); }

 protected:
  // One plane: x_at and pooled_at are its offsets in x and in the pooled side (p.lanes set).
  virtual void run_plane(const KernelIO& io, int64_t x_at, int64_t pooled_at, const PoolPlane& p,
                         int member) = 0;

  const Node& node_;
  int team_, members_;  // KernelContext::num_threads and members
  Layout layout_;       // x's
  memory::desc x_md_, pooled_md_;
  ChannelBlocks x_blocks_, pooled_blocks_;

 private:
  static constexpr int kTasks = 16;
  int64_t num_planes() const {
    const Shape& x = node_.inputs[0].shape();
    return x[0] * ((x[1] + x_blocks_.block - 1) / x_blocks_.block);
  }

  // Planes [begin, end) on the team, or with `member` >= 0 on the calling thread alone (a task).
  void run_planes(const KernelIO& io, int64_t begin, int64_t end, int member) {
    const Shape& x = node_.inputs[0].shape();
    const memory::dims pooled = pooled_md_.dims();
    const ops::PoolAttrs& a = node_.attr<ops::PoolAttrs>();
    const int64_t channels = x[1], block = x_blocks_.block;
    const int64_t blocks = (channels + block - 1) / block;
    PoolPlane p{x_blocks_.strides,
                pooled_blocks_.strides,
                0,
                block,
                x[2],
                x[3],
                pooled[2],
                pooled[3],
                a,
                ops::pool_padding(x, a)[0],
                ops::pool_padding(x, a)[1]};
    const int64_t* xs = x_blocks_.strides;
    const int64_t* ps = pooled_blocks_.strides;
#pragma omp parallel for num_threads(team_) schedule(dynamic, 4) firstprivate(p) if (member < 0)
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / blocks, cb = plane % blocks;
      p.lanes = std::min(block, channels - cb * block);
      run_plane(io, n * xs[0] + cb * xs[1], n * ps[0] + cb * ps[1], p,
                member < 0 ? omp_get_thread_num() : member);
    }
  }
};

// MaxPool (input x) in x's layout.
class MaxPoolKernel : public PoolPlaneKernel {
 public:
  MaxPoolKernel(const Node& node, const KernelContext& context)
      : PoolPlaneKernel(node, context, node.outputs[0].shape) {}
  Layout input_layout(int) const override { return layout_; }
  Layout output_layout(int) const override { return to_layout(pooled_md_, node_.outputs[0].shape); }

 private:
  void run_plane(const KernelIO& io, int64_t x_at, int64_t y_at, const PoolPlane& p, int) override {
    max_pool_plane(io.inputs[0].data<float>() + x_at, io.outputs[0].data<float>() + y_at, p);
  }
};

// MaxPoolGrad (inputs x, dy), and MaxPoolGrad+ReluGrad (inputs x, dy and ReLU's output, which is
// x).
template <bool kRelu>
class MaxPoolGradKernel : public PoolPlaneKernel {
 public:
  MaxPoolGradKernel(const Node& node, const KernelContext& context)
      : PoolPlaneKernel(node, context, node.inputs[1].shape()) {}
  Layout input_layout(int i) const override {
    return i == 1 ? to_layout(pooled_md_, node_.inputs[1].shape()) : layout_;
  }
  Layout output_layout(int) const override { return bf16_layout_ ? *bf16_layout_ : layout_; }
  // dx as bf16 in x's layout, for bf16 weight gradients that read only that: each plane summed in
  // f32 scratch, then rounded into place.
  bool write_output_as(int, const Layout& layout) override {
    if (!cpu_converts_to_bf16() || !is_bf16_copy(x_md_, md_of(node_.inputs[0].shape(), layout)))
      return false;
    bf16_layout_ = layout;
    return true;
  }
  size_t scratch_bytes() const override {
    return bf16_layout_ ? plane_floats() * sizeof(float) * static_cast<size_t>(members_) : 0;
  }

 private:
  void run_plane(const KernelIO& io, int64_t x_at, int64_t dy_at, const PoolPlane& p,
                 int member) override {
    const float* x = io.inputs[0].data<float>() + x_at;
    const float* dy = io.inputs[1].data<float>() + dy_at;
    if (!bf16_layout_) {
      max_pool_grad_plane(x, dy, io.outputs[0].data<float>() + x_at, p, kRelu);
      return;
    }
    float* sums = static_cast<float*>(io.scratch) + plane_floats() * static_cast<size_t>(member);
    max_pool_grad_plane(x, dy, sums, p, kRelu);
    convert_to_bf16(sums, static_cast<uint16_t*>(io.outputs[0].raw_data()) + x_at,
                    p.height * p.width * p.block);
  }

  // One plane of dx: H x W x the block's lanes, contiguous in every layout here.
  size_t plane_floats() const {
    const Shape& x = node_.inputs[0].shape();
    return align64(static_cast<size_t>(x[2] * x[3] * x_blocks_.block) * sizeof(float)) /
           sizeof(float);
  }

  std::optional<Layout> bf16_layout_;  // dx written as bf16 in this layout (write_output_as)
};

template <typename K>
std::unique_ptr<Kernel> make(const Node& node, const KernelContext& context) {
  return std::make_unique<K>(node, context);
}

KernelRegistrar max_pool_kernel{"MaxPool", DeviceKind::cpu, make<MaxPoolKernel>};
KernelRegistrar avg_pool_kernel{"AvgPool", DeviceKind::cpu, make_avg_pool};
KernelRegistrar max_pool_grad_kernel{"MaxPoolGrad", DeviceKind::cpu,
                                     make<MaxPoolGradKernel<false>>};
KernelRegistrar max_pool_grad_relu_kernel{"MaxPoolGrad+ReluGrad", DeviceKind::cpu,
                                          make<MaxPoolGradKernel<true>>};
KernelRegistrar avg_pool_grad_kernel{"AvgPoolGrad", DeviceKind::cpu, make<AvgPoolGradKernel>};

}  // namespace
}  // namespace tower::cpu
