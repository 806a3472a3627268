// LRN across channels (TensorFlow semantics) on plain NCHW, written by hand: oneDNN 2.6 has no
// fast kernel for NCHW with the CIFAR-10 window and falls back to a reference loop that took most
// of the model's step time. Per image, the window sum over channels slides along C while each
// step works on a whole H*W plane, so the inner loops are contiguous and vectorize: lrn_image is
// compiled for AVX-512, AVX2 and the baseline, the CPU picking one at load time.
//   d[c] = bias + alpha * sum_{|c'-c| <= r} x[c']^2,   y[c] = x[c] * d[c]^-beta
//   dx[c] = dy[c] d[c]^-beta - 2 alpha beta x[c] sum_{|c'-c| <= r} dy[c'] x[c'] d[c']^(-beta-1)
// LRNGrad+ReluGrad (fused by the runtime when x is a ReLU's output) zeroes dx where x is not > 0.
//
// With AVX-512, x in channel blocks of 16 (nChw16c: what the AVX-512 convolutions and pooling
// around an LRN read and write) or channels last (nhwc: what the AMX ones write) is normalized in
// that layout, with no conversion on either side: each pixel's channels are whole vectors of 16,
// and a window's sum adds the vector to its neighbours' lanes shifted in from the vectors on either
// side (vpermt2ps), so the window is summed directly instead of by a running sum.
#include "tower/ops/lrn.h"

#include <immintrin.h>
#include <omp.h>

#include <cmath>
#include <optional>

#include "tower/core/device.h"
#include "tower/kernels/cpu/clones.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

// A count of floats rounded up so that the next buffer starts 64-byte aligned.
constexpr size_t aligned_floats(size_t n) { return (n + 15) / 16 * 16; }

// d^-beta, with the common exponents of LRN done without pow (a loop over one of these
// vectorizes; one that chooses per element does not).
enum class Exponent { three_quarters, half, any };
template <Exponent kExponent>
TOWER_ALWAYS_INLINE float pow_neg(float d, float beta) {
  if constexpr (kExponent == Exponent::three_quarters) {
    float r = 1.0f / std::sqrt(d);
    return r * std::sqrt(r);
  } else if constexpr (kExponent == Exponent::half) {
    return 1.0f / std::sqrt(d);
  } else {
    return std::pow(d, -beta);
  }
}

// out[c] = sum over c' in [c-r, c+r] (clipped to [0, C)) of in[c'], plane by plane, as a running
// sum along the channels.
TOWER_ALWAYS_INLINE void window_sum(const float* in, int64_t channels, int64_t plane, int64_t r,
                                    float* out) {
  for (int64_t i = 0; i < plane; ++i) out[i] = 0.0f;
  for (int64_t c = 0; c <= std::min(r, channels - 1); ++c)
    for (int64_t i = 0; i < plane; ++i) out[i] += in[c * plane + i];
  for (int64_t c = 1; c < channels; ++c) {
    float* o = out + c * plane;
    const float* prev = o - plane;
    const float* add = c + r < channels ? in + (c + r) * plane : nullptr;
    const float* sub = c - r - 1 >= 0 ? in + (c - r - 1) * plane : nullptr;
    for (int64_t i = 0; i < plane; ++i)
      o[i] = prev[i] + (add ? add[i] : 0.0f) - (sub ? sub[i] : 0.0f);
  }
}

// Fills d (C planes of `plane` floats) with bias + alpha * window sum of src over channels.
TOWER_ALWAYS_INLINE void window_denominator(const float* x, int64_t channels, int64_t plane,
                                            const ops::LRNAttrs& a, float* sq, float* d) {
  for (int64_t i = 0; i < channels * plane; ++i) sq[i] = x[i] * x[i];
  window_sum(sq, channels, plane, a.depth_radius, d);
  for (int64_t i = 0; i < channels * plane; ++i) d[i] = a.bias + a.alpha * d[i];
}

// One image: y = LRN(x), or (dy given) dx (kRelu: times x > 0). `sq`, `d` and `t` are scratch of
// one image each.
template <bool kBackward, bool kRelu, Exponent kExponent>
TOWER_ALWAYS_INLINE void lrn_image_loop(const float* x, const float* dy, float* out, float* sq,
                                        float* d, float* t, int64_t channels, int64_t plane,
                                        const ops::LRNAttrs& a) {
  const int64_t image = channels * plane;
  window_denominator(x, channels, plane, a, sq, d);
  if constexpr (!kBackward) {
    for (int64_t i = 0; i < image; ++i) out[i] = x[i] * pow_neg<kExponent>(d[i], a.beta);
  } else {
    for (int64_t i = 0; i < image; ++i) {
      float p = pow_neg<kExponent>(d[i], a.beta);
      t[i] = dy[i] * x[i] * p / d[i];
      d[i] = p;  // d now holds d^-beta
    }
    window_sum(t, channels, plane, a.depth_radius, sq);
    const float k = 2.0f * a.alpha * a.beta;
    for (int64_t i = 0; i < image; ++i) {
      const float dx = dy[i] * d[i] - k * x[i] * sq[i];
      out[i] = kRelu && !(x[i] > 0.0f) ? 0.0f : dx;
    }
  }
}

template <Exponent kExponent>
TOWER_ALWAYS_INLINE void lrn_image_exponent(const float* x, const float* dy, float* out, float* sq,
                                            float* d, float* t, int64_t channels, int64_t plane,
                                            bool relu, const ops::LRNAttrs& a) {
  if (dy == nullptr)
    lrn_image_loop<false, false, kExponent>(x, dy, out, sq, d, t, channels, plane, a);
  else if (relu)
    lrn_image_loop<true, true, kExponent>(x, dy, out, sq, d, t, channels, plane, a);
  else
    lrn_image_loop<true, false, kExponent>(x, dy, out, sq, d, t, channels, plane, a);
}

// (No lambdas in here: a lambda is a function of its own, compiled for the baseline in every
// variant.)
TOWER_ALWAYS_INLINE void lrn_image_body(const float* x, const float* dy, float* out, float* sq,
                                        float* d, float* t, int64_t channels, int64_t plane,
                                        bool relu, const ops::LRNAttrs& a) {
  if (a.beta == 0.75f)
    lrn_image_exponent<Exponent::three_quarters>(x, dy, out, sq, d, t, channels, plane, relu, a);
  else if (a.beta == 0.5f)
    lrn_image_exponent<Exponent::half>(x, dy, out, sq, d, t, channels, plane, relu, a);
  else
    lrn_image_exponent<Exponent::any>(x, dy, out, sq, d, t, channels, plane, relu, a);
}
TOWER_CPU_VARIANTS(lrn_image,
                   (const float* x, const float* dy, float* out, float* sq, float* d, float* t,
                    int64_t channels, int64_t plane, bool relu, const ops::LRNAttrs& a),
                   (x, dy, out, sq, d, t, channels, plane, relu, a))

// Channel blocks of 16: the window sum of lane l of block b over channels within r (r <= 16), from
// the vectors of blocks b - 1, b and b + 1 (zero beyond the channels).
struct WindowShifts {
  __m512i up[17], down[17];  // lanes l + k of (cur, next), l - k of (prev, cur)
  int64_t radius;
};
[[gnu::target("avx512f")]] TOWER_ALWAYS_INLINE __m512 window_sum16(__m512 prev, __m512 cur,
                                                                   __m512 next,
                                                                   const WindowShifts& w) {
  __m512 sum = cur;
  for (int64_t k = 1; k <= w.radius; ++k) {
    sum = _mm512_add_ps(sum, _mm512_permutex2var_ps(prev, w.down[k], cur));
    sum = _mm512_add_ps(sum, _mm512_permutex2var_ps(cur, w.up[k], next));
  }
  return sum;
}

template <Exponent kExponent>
[[gnu::target("avx512f")]] TOWER_ALWAYS_INLINE __m512 pow_neg16(__m512 d, float beta) {
  if constexpr (kExponent == Exponent::any) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, d);
    for (float& v : lanes) v = std::pow(v, -beta);
    return _mm512_load_ps(lanes);
  } else {  // (maskz_sqrt: GCC 12 warns that plain sqrt's unused source is uninitialized)
    const __m512 r = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_maskz_sqrt_ps(0xffff, d));
    return kExponent == Exponent::half ? r : _mm512_mul_ps(r, _mm512_maskz_sqrt_ps(0xffff, r));
  }
}

constexpr int64_t kMaxBlocks = 64;  // channels <= 1024 for the blocked kernel

// One image in channel blocks of 16 (`blocks` of them, `block_stride` floats apart; a pixel's
// vectors `pixel_stride` floats apart): y = LRN(x), or (dy given) dx (kRelu: times x > 0). Per
// pixel: the squares, then d and d^-beta per block, then (backward) the window sums of dy x
// d^(-beta-1).
template <bool kBackward, bool kRelu, Exponent kExponent>
[[gnu::target("avx512f")]] TOWER_ALWAYS_INLINE void lrn_blocked_body(
    const float* x, const float* dy, float* out, int64_t blocks, int64_t pixels,
    int64_t block_stride, int64_t pixel_stride, const WindowShifts& w, const ops::LRNAttrs& a) {
  const __m512 bias = _mm512_set1_ps(a.bias), alpha = _mm512_set1_ps(a.alpha);
  const __m512 k = _mm512_set1_ps(2.0f * a.alpha * a.beta), zero = _mm512_setzero_ps();
  // Per block of the pixel; sq and t with a zero vector on either side.
  __m512 xs[kMaxBlocks], sq[kMaxBlocks + 2], p[kMaxBlocks], t[kMaxBlocks + 2];
  sq[0] = sq[blocks + 1] = t[0] = t[blocks + 1] = zero;
  for (int64_t i = 0; i < pixels; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      xs[b] = _mm512_loadu_ps(x + b * block_stride + i * pixel_stride);
      sq[b + 1] = _mm512_mul_ps(xs[b], xs[b]);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const __m512 d =
          _mm512_add_ps(bias, _mm512_mul_ps(alpha, window_sum16(sq[b], sq[b + 1], sq[b + 2], w)));
      p[b] = pow_neg16<kExponent>(d, a.beta);
      if constexpr (!kBackward) {
        _mm512_storeu_ps(out + b * block_stride + i * pixel_stride, _mm512_mul_ps(xs[b], p[b]));
      } else {
        const __m512 g = _mm512_loadu_ps(dy + b * block_stride + i * pixel_stride);
        t[b + 1] = _mm512_div_ps(_mm512_mul_ps(_mm512_mul_ps(g, xs[b]), p[b]), d);
        p[b] = _mm512_mul_ps(g, p[b]);  // dy d^-beta
      }
    }
    if constexpr (kBackward) {
      for (int64_t b = 0; b < blocks; ++b) {
        __m512 dx = _mm512_sub_ps(p[b], _mm512_mul_ps(_mm512_mul_ps(k, xs[b]),
                                                      window_sum16(t[b], t[b + 1], t[b + 2], w)));
        if constexpr (kRelu)
          dx = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(xs[b], zero, _CMP_GT_OQ), dx);
        _mm512_storeu_ps(out + b * block_stride + i * pixel_stride, dx);
      }
    }
  }
}

template <Exponent kExponent>
[[gnu::target("avx512f")]] TOWER_ALWAYS_INLINE void lrn_blocked_exponent(
    const float* x, const float* dy, float* out, int64_t blocks, int64_t pixels,
    int64_t block_stride, int64_t pixel_stride, bool relu, const WindowShifts& w,
    const ops::LRNAttrs& a) {
  if (dy == nullptr)
    lrn_blocked_body<false, false, kExponent>(x, dy, out, blocks, pixels, block_stride,
                                              pixel_stride, w, a);
  else if (relu)
    lrn_blocked_body<true, true, kExponent>(x, dy, out, blocks, pixels, block_stride, pixel_stride,
                                            w, a);
  else
    lrn_blocked_body<true, false, kExponent>(x, dy, out, blocks, pixels, block_stride, pixel_stride,
                                             w, a);
}

[[gnu::target("avx512f")]] void lrn_blocked_image(const float* x, const float* dy, float* out,
                                                  int64_t blocks, int64_t pixels,
                                                  int64_t block_stride, int64_t pixel_stride,
                                                  bool relu, const ops::LRNAttrs& a) {
  WindowShifts w;
  w.radius = a.depth_radius;
  for (int k = 0; k <= 16; ++k) {
    alignas(64) int32_t up[16], down[16];
    for (int l = 0; l < 16; ++l) up[l] = l + k, down[l] = 16 + l - k;
    w.up[k] = _mm512_load_si512(up);
    w.down[k] = _mm512_load_si512(down);
  }
  if (a.beta == 0.75f)
    lrn_blocked_exponent<Exponent::three_quarters>(x, dy, out, blocks, pixels, block_stride,
                                                   pixel_stride, relu, w, a);
  else if (a.beta == 0.5f)
    lrn_blocked_exponent<Exponent::half>(x, dy, out, blocks, pixels, block_stride, pixel_stride,
                                         relu, w, a);
  else
    lrn_blocked_exponent<Exponent::any>(x, dy, out, blocks, pixels, block_stride, pixel_stride,
                                        relu, w, a);
}

// How the blocked kernel reads x: in vectors of 16 channels, `block_stride` floats apart within a
// pixel, pixels `pixel_stride` floats apart.
struct VectorLayout {
  Layout layout;
  int64_t block_stride = 0, pixel_stride = 0;
};

// x's layout when the blocked kernel can read it, with AVX-512 and a window that reaches only the
// next vector: channels in whole blocks of 16 with each block's pixels contiguous (nChw16c, what
// AVX-512 convolutions write), or channels last (nhwc, what AMX convolutions write) with a multiple
// of 16 channels.
std::optional<VectorLayout> blocked_layout(const Shape& x, const Layout& incoming,
                                           const ops::LRNAttrs& a) {
  if (incoming.is_plain() || x.rank() != 4 || a.depth_radius > 16 || x[1] > 16 * kMaxBlocks ||
      x[1] % 16 != 0 || !cpu_info().avx512f)
    return std::nullopt;
  const dnnl::memory::desc md = md_of(x, incoming);
  const std::optional<ChannelBlocks> b = channel_blocks(md);
  const int64_t c = x[1], pixels = x[2] * x[3];
  if (!b || b->strides[0] != c * pixels) return std::nullopt;
  if (b->block == 16 && b->strides[3] == 16 && b->strides[2] == 16 * x[3] &&
      b->strides[1] == 16 * pixels)
    return VectorLayout{incoming, 16 * pixels, 16};
  if (b->block == c && b->strides[3] == c && b->strides[2] == c * x[3])
    return VectorLayout{incoming, 16, c};
  return std::nullopt;
}

class LRNKernel : public Kernel {
 public:
  // With Then::relu_grad the backward pass also applies the gradient of the ReLU before the LRN.
  enum class Then { nothing, relu_grad };
  LRNKernel(const Node& node, const KernelContext& context, Pass pass, Then then = Then::nothing)
      : attrs_(node.attr<ops::LRNAttrs>()),
        backward_(pass == Pass::backward),
        relu_(then == Then::relu_grad) {
    const Shape& x = node.inputs[0].shape();
    batch_ = x[0];
    channels_ = x[1];
    plane_ = x[2] * x[3];
    team_ = std::max(context.num_threads, 1);
    members_ = std::max(context.members, team_);
    blocked_ = blocked_layout(x, context.input_layout(0), attrs_);
    if (!blocked_)
      per_thread_ = aligned_floats(static_cast<size_t>(channels_ * plane_)) * (backward_ ? 3 : 2);
  }
  size_t scratch_bytes() const override {
    return per_thread_ * sizeof(float) * static_cast<size_t>(members_);
  }
  // Every input and the output in x's layout: plain, or the blocks it came in.
  Layout input_layout(int) const override { return blocked_ ? blocked_->layout : Layout{}; }
  Layout output_layout(int) const override { return blocked_ ? blocked_->layout : Layout{}; }

  // Images in kTasks ranges (one when a single thread runs it).
  Tasks tasks() const override { return Tasks::split(members_ > 1 ? kTasks : 1); }
  void run_task(const KernelIO& io, int task, int member) override {
    run_images(io, batch_ * task / tasks().count, batch_ * (task + 1) / tasks().count, member);
  }
  void run(const KernelIO& io) override { run_images(io, 0, batch_, -1); }

 private:
  static constexpr int kTasks = 16;

  // Images [begin, end) on the team, or with `member` >= 0 on the calling thread alone (a task).
  void run_images(const KernelIO& io, int64_t begin, int64_t end, int member) {
    const float* x = io.inputs[0].data<float>();
    const float* dy = backward_ ? io.inputs[1].data<float>() : nullptr;
    float* out = io.outputs[0].data<float>();
    float* scratch = static_cast<float*>(io.scratch);
    const int64_t image = channels_ * plane_;
#pragma omp parallel for num_threads(team_) schedule(dynamic, 2) if (member < 0)
    for (int64_t n = begin; n < end; ++n) {
      const float* g = backward_ ? dy + n * image : nullptr;
      if (blocked_) {
        lrn_blocked_image(x + n * image, g, out + n * image, channels_ / 16, plane_,
                          blocked_->block_stride, blocked_->pixel_stride, relu_, attrs_);
        continue;
      }
      const int slot = member < 0 ? omp_get_thread_num() : member;
      float* sq = scratch + per_thread_ * static_cast<size_t>(slot);
      float* d = sq + aligned_floats(static_cast<size_t>(image));
      float* t = backward_ ? d + aligned_floats(static_cast<size_t>(image)) : nullptr;
      lrn_image(x + n * image, g, out + n * image, sq, d, t, channels_, plane_, relu_, attrs_);
    }
  }

  ops::LRNAttrs attrs_;
  bool backward_, relu_;
  int64_t batch_ = 0, channels_ = 0, plane_ = 0;
  size_t per_thread_ = 0;
  int team_ = 1, members_ = 1;           // KernelContext::num_threads and members
  std::optional<VectorLayout> blocked_;  // vectors of 16 channels (lrn_blocked_image), else plain
};

KernelRegistrar lrn_kernel{
    "LRN", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      return std::make_unique<LRNKernel>(node, context, Pass::forward);
    }};
// inputs (x, dy) -> dx
KernelRegistrar lrn_grad_kernel{
    "LRNGrad", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      return std::make_unique<LRNKernel>(node, context, Pass::backward);
    }};
// inputs (x, dy, ReLU's output = x) -> dx where x > 0
KernelRegistrar lrn_grad_relu_kernel{
    "LRNGrad+ReluGrad", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      return std::make_unique<LRNKernel>(node, context, Pass::backward, LRNKernel::Then::relu_grad);
    }};

}  // namespace
}  // namespace tower::cpu
