// What nvcc compiles needs no engine header: CUDA status checks that throw a tower::Error naming
// the call, and the launchers of the kernels of the .cu files. Every launcher enqueues on `stream`
// and allocates nothing; `scratch` arguments are the kernel's scratch_bytes().
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>

namespace tower::cuda {

void check(cudaError_t status, const char* call);
void check(cudnnStatus_t status, const char* call);
void check(cublasStatus_t status, const char* call);
#define TOWER_CUDA_CHECK(call) ::tower::cuda::check((call), #call)

// Makes a GPU current for a scope and gives the thread its previous one back (a negative index:
// leaves the current one).
struct DeviceGuard {
  explicit DeviceGuard(int device) {
    TOWER_CUDA_CHECK(cudaGetDevice(&previous));
    if (device >= 0) TOWER_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  int previous = 0;
};
// The GPU that holds `ptr`, or -1 for host memory.
int device_of(const void* ptr);

// Blocks of `threads` for a grid-stride loop over n items (at least 1, at most 65535).
inline unsigned grid_blocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

enum class Unary { relu, elu, sigmoid, tanh, scale, square, copy };
enum class Binary { add, sub, mul };
// y = f(x); `param` is Scale's factor.
void launch_unary(Unary op, const float* x, float* y, int64_t n, float param, cudaStream_t stream);
// dx = f'(y) * dy from the forward output y (relu, elu, sigmoid, tanh).
void launch_unary_grad(Unary op, const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream);
// y[i] = a[i] op b[i % inner]: b has a's shape, is a scalar, or a's trailing dims.
void launch_binary(Binary op, const float* a, const float* b, float* y, int64_t n, int64_t inner,
                   cudaStream_t stream);
// y += x
void launch_accumulate(const float* x, float* y, int64_t n, cudaStream_t stream);
// x viewed as (outer, channels, inner): y = x + b[channel]; db[c] = sum of dy over outer, inner.
void launch_bias_add(const float* x, const float* b, float* y, int64_t outer, int64_t channels,
                     int64_t inner, cudaStream_t stream);
void launch_bias_add_grad(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner,
                          cudaStream_t stream);

// NCHW images (planes = N*C of h x w) into/from a zero-padded copy of (h + top + bottom) x
// (w + left + right): cuDNN pads symmetrically, TensorFlow's SAME may put one more pixel after.
void launch_pad(const float* x, float* padded, int64_t planes, int64_t h, int64_t w, int64_t top,
                int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream);
void launch_crop(const float* padded, float* x, int64_t planes, int64_t h, int64_t w, int64_t top,
                 int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream);

// ---- reduce.cu: sums and broadcast ---------------------------------------------------------------

constexpr int kMaxBoxDims = 8;
// A row-major box of `sizes` walked with `strides` (elements): index `linear` of the box is at
// sum_d index_d * strides[d]. rank 0 is one element at offset 0.
struct Box {
  int rank = 0;
  int64_t sizes[kMaxBoxDims] = {};
  int64_t strides[kMaxBoxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= sizes[d];
    return n;
  }
};

// y[k] = scale * sum over r of f(x[kept(k) + reduced(r)]), summed in double, f = identity or
// square. Either one thread per output (reads coalesce when the kept box is innermost) or
// `chunks` blocks per output, each a fixed strided split and a fixed tree, their partial sums
// (chunks > 1: num_kept * chunks doubles of `partial`) added in order by a second kernel.
struct ReducePlan {
  Box kept, reduced;
  bool per_thread = false;
  int chunks = 1;
  bool square = false;
  double scale = 1.0;
};
void launch_reduce_sum(const float* x, float* y, double* partial, const ReducePlan& plan, cudaStream_t stream);
// y[i] = x[offset of i in `in`], `in` the output's box with the input's strides (0: broadcast).
void launch_broadcast(const float* x, float* y, const Box& in, cudaStream_t stream);

// ---- pool.cu: NCHW pooling, TensorFlow padding ------------------------------------------------

// planes = N*C images of h x w pooled to oh x ow; window rows [oh*stride_h - top, + kh) clipped to
// the image (padded positions are ignored by max and not counted by the average).
struct PoolGeometry {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, top = 0, left = 0;
};
void launch_max_pool(const float* x, float* y, const PoolGeometry& g, cudaStream_t stream);
void launch_avg_pool(const float* x, float* y, const PoolGeometry& g, cudaStream_t stream);
// `argmax`: scratch of planes*oh*ow int32 (the window's first maximum, as the CPU kernel routes).
void launch_max_pool_grad(const float* x, const float* dy, float* dx, int32_t* argmax, const PoolGeometry& g,
                          cudaStream_t stream);
void launch_avg_pool_grad(const float* dy, float* dx, const PoolGeometry& g, cudaStream_t stream);

// ---- lrn.cu: LRN across channels, TensorFlow semantics --------------------------------------------

struct LRNParams {
  int64_t batch = 0, channels = 0, plane = 0;
  int64_t radius = 0;
  float bias = 1, alpha = 1, beta = 0.5f;
};
void launch_lrn(const float* x, float* y, const LRNParams& p, cudaStream_t stream);
// `scratch`: 2 * batch*channels*plane floats.
void launch_lrn_grad(const float* x, const float* dy, float* dx, float* scratch, const LRNParams& p,
                     cudaStream_t stream);

// ---- nn_loss.cu: row-wise softmax family (rows of k), one block per row --------------------------

void launch_softmax(const float* x, float* y, int64_t rows, int64_t k, cudaStream_t stream);
void launch_softmax_grad(const float* y, const float* dy, float* dx, int64_t rows, int64_t k, cudaStream_t stream);
// A label outside [0, k) gives a NaN loss (resp. a NaN gradient row), as TensorFlow's GPU kernel.
void launch_sparse_xent(const float* logits, const int32_t* labels, float* loss, int64_t rows, int64_t k,
                        cudaStream_t stream);
void launch_sparse_xent_grad(const float* logits, const int32_t* labels, const float* dy, float* dx, int64_t rows,
                             int64_t k, cudaStream_t stream);
void launch_argmax(const float* x, int32_t* out, int64_t rows, int64_t k, cudaStream_t stream);
void launch_in_top_k(const float* x, const int32_t* labels, float* out, int64_t rows, int64_t k, int64_t top,
                     cudaStream_t stream);

// ---- dropout.cu ---------------------------------------------------------------------------------

// y[i] = x[i] * inv_keep where the top 24 bits of word i of Philox(seed, stream) are below
// `threshold`, else 0 (the CPU kernel's mask, bit for bit).
void launch_dropout(const float* x, float* y, int64_t n, uint64_t seed, uint64_t stream_id, uint32_t threshold,
                    float inv_keep, cudaStream_t stream);

// ---- batch_norm.cu: per channel of x viewed as (n, c, plane) ------------------------------------

struct BatchNormDims {
  int64_t n = 0, c = 0, plane = 0;
};
// Batch mean and biased variance (two passes, in double), per channel.
void launch_batch_norm_stats(const float* x, float* mean, float* variance, const BatchNormDims& d,
                             cudaStream_t stream);
// y = gamma / sqrt(variance + epsilon) * (x - mean) + beta.
void launch_batch_norm_apply(const float* x, const float* gamma, const float* beta, const float* mean,
                             const float* variance, float epsilon, float* y, const BatchNormDims& d,
                             cudaStream_t stream);
// dgamma, dbeta, and dx (through the batch statistics when `training`).
void launch_batch_norm_grad(const float* dy, const float* x, const float* gamma, const float* mean,
                            const float* variance, float epsilon, bool training, float* dx, float* dgamma,
                            float* dbeta, const BatchNormDims& d, cudaStream_t stream);
// variable = decay * variable + (1 - decay) * value; out = the new value.
void launch_assign_moving_average(float* variable, const float* value, float* out, float decay, int64_t n,
                                  cudaStream_t stream);

}  // namespace tower::cuda
