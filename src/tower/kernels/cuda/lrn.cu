// LRN across channels of NCHW images, TensorFlow semantics (alpha not divided by the window):
//   d[c] = bias + alpha * sum_{|c'-c| <= r, 0 <= c' < C} x[c']^2,   y[c] = x[c] * d[c]^-beta
//   dx[c] = dy[c] d[c]^-beta - 2 alpha beta x[c] sum_{|c'-c| <= r} dy[c'] x[c'] d[c']^(-beta-1)
// One thread per element; neighbouring threads are neighbouring pixels of one channel plane, so
// every read of the window over channels is coalesced. Window sums add the channels in order
// (the CPU kernel slides a running sum instead: the two differ by float rounding only).
#include "tower/kernels/cuda/launch.cuh"
#include "tower/kernels/cuda/lrn.h"

namespace tower::cuda {
namespace {

// d^-beta, with the same special cases as the CPU kernel.
__device__ __forceinline__ float pow_neg(float d, float beta) {
  if (beta == 0.75f) {
    const float r = 1.0f / sqrtf(d);
    return r * sqrtf(r);
  }
  if (beta == 0.5f) return 1.0f / sqrtf(d);
  return powf(d, -beta);
}

// Element i = (n, c, p): the first and last channel of its window and the offset of its channel 0.
struct Position {
  int64_t c, c0, c1, base;
};
__device__ __forceinline__ Position position(int64_t i, const LRNParams& p) {
  Position at;
  const int64_t pixel = i % p.plane;
  at.c = i / p.plane % p.channels;
  at.base = (i / (p.plane * p.channels)) * p.channels * p.plane + pixel;
  at.c0 = at.c - p.radius > 0 ? at.c - p.radius : 0;
  at.c1 = at.c + p.radius < p.channels - 1 ? at.c + p.radius : p.channels - 1;
  return at;
}

__device__ __forceinline__ float denominator(const float* x, const Position& at,
                                             const LRNParams& p) {
  float sum = 0.0f;
  for (int64_t c = at.c0; c <= at.c1; ++c) {
    const float v = x[at.base + c * p.plane];
    sum += v * v;
  }
  return p.bias + p.alpha * sum;
}

__global__ void lrn_kernel(const float* x, float* y, LRNParams p, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const Position at = position(i, p);
    y[i] = x[i] * pow_neg(denominator(x, at, p), p.beta);
  }
}

// Pass 1: powered[i] = d^-beta, t[i] = dy x d^-beta / d.
__global__ void lrn_grad_terms_kernel(const float* x, const float* dy, float* powered, float* t,
                                      LRNParams p, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float d = denominator(x, position(i, p), p);
    const float pw = pow_neg(d, p.beta);
    powered[i] = pw;
    t[i] = dy[i] * x[i] * pw / d;
  }
}

// Pass 2: dx = dy d^-beta - 2 alpha beta x (window sum of t).
__global__ void lrn_grad_kernel(const float* x, const float* dy, const float* powered,
                                const float* t, float* dx, LRNParams p, int64_t n) {
  const float k = 2.0f * p.alpha * p.beta;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const Position at = position(i, p);
    float sum = 0.0f;
    for (int64_t c = at.c0; c <= at.c1; ++c) sum += t[at.base + c * p.plane];
    dx[i] = dy[i] * powered[i] - k * x[i] * sum;
  }
}

}  // namespace

void launch_lrn(const float* x, float* y, const LRNParams& p, cudaStream_t stream) {
  const int64_t n = p.batch * p.channels * p.plane;
  launch_items(lrn_kernel, n, stream, x, y, p, n);
}

void launch_lrn_grad(const float* x, const float* dy, float* dx, float* scratch, const LRNParams& p,
                     cudaStream_t stream) {
  const int64_t n = p.batch * p.channels * p.plane;
  float* powered = scratch;
  float* t = scratch + n;
  launch_items(lrn_grad_terms_kernel, n, stream, x, dy, powered, t, p, n);
  launch_items(lrn_grad_kernel, n, stream, x, dy, powered, t, dx, p, n);
}

}  // namespace tower::cuda
