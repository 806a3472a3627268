// LRN across channels (TensorFlow semantics) on plain NCHW, written by hand: oneDNN 2.6 has no
// fast kernel for NCHW with the CIFAR-10 window and falls back to a reference loop that took most
// of the model's step time. Per image, the window sum over channels slides along C while each
// step works on a whole H*W plane, so the inner loops are contiguous and vectorize: lrn_image is
// compiled for AVX-512, AVX2 and the baseline, the CPU picking one at load time.
//   d[c] = bias + alpha * sum_{|c'-c| <= r} x[c']^2,   y[c] = x[c] * d[c]^-beta
//   dx[c] = dy[c] d[c]^-beta - 2 alpha beta x[c] sum_{|c'-c| <= r} dy[c'] x[c'] d[c']^(-beta-1)
// LRNGrad+ReluGrad (fused by the runtime when x is a ReLU's output) zeroes dx where x is not > 0.
#include "tower/ops/lrn.h"

#include <omp.h>

#include <cmath>

#include "tower/kernels/cpu/clones.h"
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
TOWER_ALWAYS_INLINE void lrn_image_body(const float* x, const float* dy, float* out, float* sq,
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
    lrn_image_body<false, false, kExponent>(x, dy, out, sq, d, t, channels, plane, a);
  else if (relu)
    lrn_image_body<true, true, kExponent>(x, dy, out, sq, d, t, channels, plane, a);
  else
    lrn_image_body<true, false, kExponent>(x, dy, out, sq, d, t, channels, plane, a);
}

// (No lambdas in here: a lambda is a function of its own, compiled for the baseline in every
// clone.)
TOWER_CPU_CLONES void lrn_image(const float* x, const float* dy, float* out, float* sq, float* d,
                                float* t, int64_t channels, int64_t plane, bool relu,
                                const ops::LRNAttrs& a) {
  if (a.beta == 0.75f)
    lrn_image_exponent<Exponent::three_quarters>(x, dy, out, sq, d, t, channels, plane, relu, a);
  else if (a.beta == 0.5f)
    lrn_image_exponent<Exponent::half>(x, dy, out, sq, d, t, channels, plane, relu, a);
  else
    lrn_image_exponent<Exponent::any>(x, dy, out, sq, d, t, channels, plane, relu, a);
}

class LRNKernel : public Kernel {
 public:
  LRNKernel(const Node& node, int num_threads, bool backward, bool relu = false)
      : attrs_(node.attr<ops::LRNAttrs>()), backward_(backward), relu_(relu) {
    const Shape& x = node.inputs[0].shape();
    batch_ = x[0];
    channels_ = x[1];
    plane_ = x[2] * x[3];
    per_thread_ = aligned_floats(static_cast<size_t>(channels_ * plane_)) * (backward ? 3 : 2);
    threads_ = std::max(num_threads, 1);
  }
  size_t scratch_bytes() const override {
    return per_thread_ * sizeof(float) * static_cast<size_t>(threads_);
  }

  void run(const KernelIO& io) override {
    const float* x = io.inputs[0].data<float>();
    const float* dy = backward_ ? io.inputs[1].data<float>() : nullptr;
    float* out = const_cast<Tensor&>(io.outputs[0]).data<float>();
    float* scratch = static_cast<float*>(io.scratch);
    const int64_t image = channels_ * plane_;
#pragma omp parallel for num_threads(threads_) schedule(dynamic, 2)
    for (int64_t n = 0; n < batch_; ++n) {
      float* sq = scratch + per_thread_ * static_cast<size_t>(omp_get_thread_num());
      float* d = sq + aligned_floats(static_cast<size_t>(image));
      float* t = backward_ ? d + aligned_floats(static_cast<size_t>(image)) : nullptr;
      lrn_image(x + n * image, backward_ ? dy + n * image : nullptr, out + n * image, sq, d, t,
                channels_, plane_, relu_, attrs_);
    }
  }

 private:
  ops::LRNAttrs attrs_;
  bool backward_, relu_;
  int64_t batch_ = 0, channels_ = 0, plane_ = 0;
  size_t per_thread_ = 0;
  int threads_ = 1;
};

KernelRegistrar lrn_kernel{
    "LRN", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      return std::make_unique<LRNKernel>(node, context.num_threads, false);
    }};
// inputs (x, dy) -> dx
KernelRegistrar lrn_grad_kernel{
    "LRNGrad", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      return std::make_unique<LRNKernel>(node, context.num_threads, true);
    }};
// inputs (x, dy, ReLU's output = x) -> dx where x > 0
KernelRegistrar lrn_grad_relu_kernel{
    "LRNGrad+ReluGrad", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      return std::make_unique<LRNKernel>(node, context.num_threads, true, true);
    }};

}  // namespace
}  // namespace tower::cpu
