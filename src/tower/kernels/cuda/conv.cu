// The explicit padding of the convolutions whose TensorFlow SAME padding is asymmetric (conv.cc):
// copies into and out of a zero-padded image, one thread per element.
#include "tower/kernels/cuda/conv.h"
#include "tower/kernels/cuda/launch.cuh"

namespace tower::cuda {
namespace {

__global__ void pad_kernel(const float* x, float* padded, int64_t n, int64_t h, int64_t w,
                           int64_t top, int64_t left, int64_t ph, int64_t pw) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t plane = i / (ph * pw), r = i / pw % ph - top, c = i % pw - left;
    padded[i] = r >= 0 && r < h && c >= 0 && c < w ? x[(plane * h + r) * w + c] : 0.0f;
  }
}

__global__ void crop_kernel(const float* padded, float* x, int64_t n, int64_t h, int64_t w,
                            int64_t top, int64_t left, int64_t ph, int64_t pw) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t plane = i / (h * w), r = i / w % h + top, c = i % w + left;
    x[i] = padded[(plane * ph + r) * pw + c];
  }
}

}  // namespace

void launch_pad(const float* x, float* padded, int64_t planes, int64_t h, int64_t w, int64_t top,
                int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream) {
  const int64_t n = planes * padded_h * padded_w;
  launch_items(pad_kernel, n, stream, x, padded, n, h, w, top, left, padded_h, padded_w);
}

void launch_crop(const float* padded, float* x, int64_t planes, int64_t h, int64_t w, int64_t top,
                 int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream) {
  const int64_t n = planes * h * w;
  launch_items(crop_kernel, n, stream, padded, x, n, h, w, top, left, padded_h, padded_w);
}

}  // namespace tower::cuda
