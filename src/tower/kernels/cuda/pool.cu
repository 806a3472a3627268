// Max and average pooling on NCHW, written by hand because TensorFlow's SAME padding may put one
// more pixel after than before, which cuDNN's symmetric padding cannot express. Semantics of the
// CPU kernel (oneDNN pooling_max / pooling_avg_exclude_padding):
//   - a window covers rows [oh*stride - top, + kh) clipped to the image; padded positions take no
//     part (max ignores them, the average divides by the number of real elements);
//   - max starts from the lowest float and takes a value only when strictly greater, walking the
//     window row by row: the first maximum wins, and MaxPoolGrad routes dy to it alone;
//   - the gradients are gathers (one thread per input element, windows in (oh, ow) order), so no
//     atomics and a fixed summation order.
#include <cfloat>

#include "tower/kernels/cuda/launch.cuh"
#include "tower/kernels/cuda/pool.h"

namespace tower::cuda {
namespace {

struct Window {
  int64_t h0, h1, w0, w1;  // [h0, h1) x [w0, w1), clipped
};

__device__ __forceinline__ Window window_of(const PoolGeometry& g, int64_t oh, int64_t ow) {
  Window win;
  win.h0 = oh * g.stride_h - g.top;
  win.w0 = ow * g.stride_w - g.left;
  win.h1 = win.h0 + g.kh < g.h ? win.h0 + g.kh : g.h;
  win.w1 = win.w0 + g.kw < g.w ? win.w0 + g.kw : g.w;
  win.h0 = win.h0 > 0 ? win.h0 : 0;
  win.w0 = win.w0 > 0 ? win.w0 : 0;
  return win;
}

// The window's maximum and the index (r * w + c) of its first occurrence: from the lowest float,
// a value is taken only when strictly greater. -1 when no element exceeds the lowest float (a
// window of -inf / NaN only): no gradient is routed there.
__device__ __forceinline__ float window_max(const float* plane, const PoolGeometry& g,
                                            const Window& win, int32_t& arg) {
  float best = -FLT_MAX;
  arg = -1;
  for (int64_t r = win.h0; r < win.h1; ++r)
    for (int64_t c = win.w0; c < win.w1; ++c) {
      const float v = plane[r * g.w + c];
      if (v > best) {
        best = v;
        arg = static_cast<int32_t>(r * g.w + c);
      }
    }
  return best;
}

__global__ void max_pool_kernel(const float* x, float* y, int32_t* argmax, PoolGeometry g,
                                int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t ow = i % g.ow, oh = i / g.ow % g.oh, plane = i / (g.ow * g.oh);
    int32_t arg;
    const float best = window_max(x + plane * g.h * g.w, g, window_of(g, oh, ow), arg);
    if (y != nullptr) y[i] = best;
    if (argmax != nullptr) argmax[i] = arg;
  }
}

__global__ void avg_pool_kernel(const float* x, float* y, PoolGeometry g, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t ow = i % g.ow, oh = i / g.ow % g.oh, plane = i / (g.ow * g.oh);
    const Window win = window_of(g, oh, ow);
    const float* p = x + plane * g.h * g.w;
    float sum = 0.0f;
    for (int64_t r = win.h0; r < win.h1; ++r)
      for (int64_t c = win.w0; c < win.w1; ++c) sum += p[r * g.w + c];
    const int64_t count = (win.h1 - win.h0) * (win.w1 - win.w0);
    y[i] = count > 0 ? sum / static_cast<float>(count) : 0.0f;
  }
}

// The outputs whose windows contain input position `pos` along one axis: [lo, hi].
__device__ __forceinline__ void covering(int64_t pos, int64_t pad, int64_t k, int64_t stride,
                                         int64_t out, int64_t& lo, int64_t& hi) {
  const int64_t first = pos + pad - k + 1;  // smallest window start that still reaches pos
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  hi = (pos + pad) / stride;
  if (hi > out - 1) hi = out - 1;
}

__global__ void max_pool_grad_kernel(const float* dy, const int32_t* argmax, float* dx,
                                     PoolGeometry g, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t c = i % g.w, r = i / g.w % g.h, plane = i / (g.w * g.h);
    int64_t oh0, oh1, ow0, ow1;
    covering(r, g.top, g.kh, g.stride_h, g.oh, oh0, oh1);
    covering(c, g.left, g.kw, g.stride_w, g.ow, ow0, ow1);
    const int32_t self = static_cast<int32_t>(r * g.w + c);
    const int64_t base = plane * g.oh * g.ow;
    float sum = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow)
        if (argmax[base + oh * g.ow + ow] == self) sum += dy[base + oh * g.ow + ow];
    dx[i] = sum;
  }
}

__global__ void avg_pool_grad_kernel(const float* dy, float* dx, PoolGeometry g, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t c = i % g.w, r = i / g.w % g.h, plane = i / (g.w * g.h);
    int64_t oh0, oh1, ow0, ow1;
    covering(r, g.top, g.kh, g.stride_h, g.oh, oh0, oh1);
    covering(c, g.left, g.kw, g.stride_w, g.ow, ow0, ow1);
    const int64_t base = plane * g.oh * g.ow;
    float sum = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const Window win = window_of(g, oh, ow);
        const int64_t count = (win.h1 - win.h0) * (win.w1 - win.w0);
        sum += dy[base + oh * g.ow + ow] / static_cast<float>(count);
      }
    dx[i] = sum;
  }
}

}  // namespace

void launch_max_pool(const float* x, float* y, const PoolGeometry& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.oh * g.ow;
  launch_items(max_pool_kernel, n, stream, x, y, nullptr, g, n);
}

void launch_avg_pool(const float* x, float* y, const PoolGeometry& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.oh * g.ow;
  launch_items(avg_pool_kernel, n, stream, x, y, g, n);
}

void launch_max_pool_grad(const float* x, const float* dy, float* dx, int32_t* argmax,
                          const PoolGeometry& g, cudaStream_t stream) {
  const int64_t n_out = g.planes * g.oh * g.ow, n_in = g.planes * g.h * g.w;
  if (n_in == 0) return;
  if (n_out > 0) {
    launch_items(max_pool_kernel, n_out, stream, x, nullptr, argmax, g, n_out);
  }
  launch_items(max_pool_grad_kernel, n_in, stream, dy, argmax, dx, g, n_in);
}

void launch_avg_pool_grad(const float* dy, float* dx, const PoolGeometry& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.h * g.w;
  launch_items(avg_pool_grad_kernel, n, stream, dy, dx, g, n);
}

}  // namespace tower::cuda
