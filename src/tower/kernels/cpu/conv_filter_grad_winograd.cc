// The filter gradient of a 3x3 stride-1 SAME convolution by Winograd's F(2x2, 3x3) under AVX2,
// where oneDNN 2.6 has no Winograd kernel. The forward convolution of a tile is Y = A^T [U . V] A
// (U = G g G^T, V = B^T d B, conv_winograd.cc), so the gradient of sum(dY . Y) by the filter g is
// G^T [(A dY A^T) . V] G: per position, a product of the tiles' transformed output gradients and
// inputs summed over all the tiles of the batch, then one transform at the end. Per output and
// input channel that is 16 multiply-adds per 2x2 tile instead of 36.
//
// The batch runs in fixed chunks of 16 images (the tasks), each summing its images' blocks of tiles
// in order into its own partial; finish_tasks adds the chunks in order and transforms: the same
// bits on every thread count. The bias gradient (Conv2DBackpropFilter+BiasAddGrad) is the sum of
// position (1, 1) of A dY A^T, the sum of each tile's four outputs.
#include <algorithm>

#include "tower/kernels/cpu/chunk_partials.h"
#include "tower/kernels/cpu/clones.h"
#include "tower/kernels/cpu/conv.h"
#include "tower/kernels/cpu/conv_winograd.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/cpu/winograd_tiles.h"
#include "tower/ops/conv.h"

namespace tower::cpu {
namespace {

using winograd::F;
using winograd::kTiles;
using winograd::position_step;
constexpr int64_t kImages = 16;  // images per chunk
constexpr int kRows = 6;         // output channels per step of the product (x 16 input channels)

// What one chunk's loops need.
struct FilterGradJob {
  const float* x;   // the chunk's first image, nChw8c
  const float* dy;  // its output gradient, nChw8c
  int64_t images, c, k, h, w;
  // scratch: B^T d B as [16][c / 8][kTiles][8] and A dY A^T as [16][k / 8][kTiles][8], their
  // positions position_step(c) and position_step(k) apart
  float *v, *a;
  float* part;  // the chunk's sums: [16][k][c], then the bias gradient's [k]
};

// A dY A^T for tiles [t0, t0 + n) of one image's output gradient (tw tiles per row): each 2x2 tile
// (zero outside the plane) to d0, d0 + d1, d0 - d1, -d1 along rows, then columns.
TOWER_ALWAYS_INLINE void gradient_transform(const FilterGradJob& j, const float* dy, int64_t t0,
                                            int64_t n, int64_t tw) {
  const int64_t step = position_step(j.k);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t y0 = (t0 + t) / tw * 2, x0 = (t0 + t) % tw * 2;
    const bool inside = y0 + 1 < j.h && x0 + 1 < j.w;
    for (int64_t kb = 0; kb < j.k / 8; ++kb) {
      const float* plane = dy + kb * j.h * j.w * 8;
      F d00, d01, d10, d11;
      if (inside) {
        load(d00, plane + (y0 * j.w + x0) * 8);
        load(d01, plane + (y0 * j.w + x0 + 1) * 8);
        load(d10, plane + ((y0 + 1) * j.w + x0) * 8);
        load(d11, plane + ((y0 + 1) * j.w + x0 + 1) * 8);
      } else {
        winograd::element_or_zero(d00, plane, y0, x0, j.h, j.w);
        winograd::element_or_zero(d01, plane, y0, x0 + 1, j.h, j.w);
        winograd::element_or_zero(d10, plane, y0 + 1, x0, j.h, j.w);
        winograd::element_or_zero(d11, plane, y0 + 1, x0 + 1, j.h, j.w);
      }
      const F e0[4] = {d00, d00 + d01, d00 - d01, F{} - d01};
      const F e1[4] = {d10, d10 + d11, d10 - d11, F{} - d11};
      float* at = j.a + (kb * kTiles + t) * 8;
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        store(at + q * step, e0[q]);
        store(at + (4 + q) * step, e0[q] + e1[q]);
        store(at + (8 + q) * step, e0[q] - e1[q]);
        store(at + (12 + q) * step, F{} - e1[q]);
      }
    }
  }
}

// part[p][k0..k0+kR)[cb * 8..(cb + kV) * 8) += sum over tiles [0, n) of A[p][k][t] V[p][c][t]: kR x
// kV accumulators.
template <int kR, int kV>
TOWER_ALWAYS_INLINE void product_rows(const FilterGradJob& j, int p, int64_t k0, int64_t cb,
                                      int64_t n) {
  float* out = j.part + (p * j.k + k0) * j.c + cb * 8;
  F acc[kR][kV];
  const float* ar[kR];
  for (int r = 0; r < kR; ++r) {
    for (int q = 0; q < kV; ++q) load(acc[r][q], out + r * j.c + q * 8);
    const int64_t k = k0 + r;
    ar[r] = j.a + p * position_step(j.k) + k / 8 * kTiles * 8 + k % 8;
  }
  const float* v = j.v + p * position_step(j.c) + cb * kTiles * 8;
  for (int64_t t = 0; t < n; ++t) {
    F x[kV];
#pragma GCC unroll 4
    for (int q = 0; q < kV; ++q) load(x[q], v + (q * kTiles + t) * 8);
#pragma GCC unroll 6
    for (int r = 0; r < kR; ++r) {
      const float s = ar[r][t * 8];
#pragma GCC unroll 4
      for (int q = 0; q < kV; ++q) acc[r][q] += s * x[q];
    }
  }
  for (int r = 0; r < kR; ++r)
    for (int q = 0; q < kV; ++q) store(out + r * j.c + q * 8, acc[r][q]);
}

// An image's input and output gradient to fetch into the cache while block `block` of `blocks`
// is multiplied (x null: none).
struct Ahead {
  const float* x;
  int64_t x_floats;
  const float* dy;
  int64_t dy_floats, block, blocks;
};

// Rows of 6 output channels by 16 input channels; the 2 or 4 rows left (k is a multiple of 8) with
// at least 8 accumulators, fewer leaving the multiply-adds waiting on each other.
TOWER_ALWAYS_INLINE void product(const FilterGradJob& j, int64_t n, const Ahead& ahead) {
  const int64_t rest = j.k % kRows, k1 = j.k - rest;
  for (int p = 0; p < 16; ++p) {
    if (ahead.x != nullptr) {
      winograd::prefetch_part(ahead.x, ahead.x_floats, ahead.block * 16 + p, ahead.blocks * 16);
      winograd::prefetch_part(ahead.dy, ahead.dy_floats, ahead.block * 16 + p, ahead.blocks * 16);
    }
    for (int64_t cb = 0; cb < j.c / 8; cb += 2)
      for (int64_t k0 = 0; k0 < k1; k0 += kRows) product_rows<kRows, 2>(j, p, k0, cb, n);
    if (rest == 4)
      for (int64_t cb = 0; cb < j.c / 8; cb += 2) product_rows<4, 2>(j, p, k1, cb, n);
    if (rest == 2 && j.c % 32 == 0)
      for (int64_t cb = 0; cb < j.c / 8; cb += 4) product_rows<2, 4>(j, p, k1, cb, n);
    else if (rest == 2)
      for (int64_t cb = 0; cb < j.c / 8; cb += 2) product_rows<2, 2>(j, p, k1, cb, n);
  }
}

TOWER_ALWAYS_INLINE void filter_grad_chunk_body(const FilterGradJob& j) {
  std::fill(j.part, j.part + 16 * j.k * j.c + j.k, 0.0f);
  float* db = j.part + 16 * j.k * j.c;
  const int64_t tw = (j.w + 1) / 2, tiles = (j.h + 1) / 2 * tw;
  const int64_t blocks = (tiles + kTiles - 1) / kTiles, xs = j.c * j.h * j.w, dys = j.k * j.h * j.w;
  for (int64_t i = 0; i < j.images; ++i) {
    const float* x = j.x + i * xs;
    const float* dy = j.dy + i * dys;
    for (int64_t t0 = 0; t0 < tiles; t0 += kTiles) {
      const int64_t n = std::min(kTiles, tiles - t0);
      winograd::input_transform({x, j.c, j.h, j.w}, j.v, t0, n, tw);
      gradient_transform(j, dy, t0, n, tw);
      // The next image's, a part at each position of each block.
      const Ahead ahead{
          i + 1 < j.images ? x + xs : nullptr, xs, dy + dys, dys, t0 / kTiles, blocks};
      product(j, n, ahead);
      for (int64_t kb = 0; kb < j.k / 8; ++kb) {
        const float* a = j.a + 5 * position_step(j.k) + kb * kTiles * 8;
        F sum;
        load(sum, db + kb * 8);
        for (int64_t t = 0; t < n; ++t) {
          F at;
          load(at, a + t * 8);
          sum += at;
        }
        store(db + kb * 8, sum);
      }
    }
  }
}
TOWER_CPU_VARIANTS(filter_grad_chunk, (const FilterGradJob& j), (j))

// Conv2DBackpropFilter[+BiasAddGrad] (inputs x, dy -> dw[, db]).
// A member's scratch for c input and k output channels: a block's transformed tiles (V, then
// A dY A^T). A chunk's partial: the 16 positions' sums, then the bias gradient.
size_t tile_bytes(int64_t c, int64_t k) {
  return static_cast<size_t>(16 * (position_step(c) + position_step(k))) * sizeof(float);
}
size_t partial_floats(int64_t c, int64_t k) { return static_cast<size_t>(16 * k * c + k); }

class WinogradFilterGrad final : public ChunkPartialsKernel {
 public:
  WinogradFilterGrad(const Node& node, const KernelContext& context, bool bias)
      : ChunkPartialsKernel(
            context, node.inputs[0].shape()[0], kImages,
            tile_bytes(node.inputs[0].shape()[1], node.inputs[1].shape()[1]),
            partial_floats(node.inputs[0].shape()[1], node.inputs[1].shape()[1]) * sizeof(float)),
        node_(node),
        bias_(bias),
        x_(node.inputs[0].shape()),
        k_(node.inputs[1].shape()[1]) {}

  Layout input_layout(int i) const override {
    return winograd_activation_layout(node_.inputs[i].shape());
  }

  void run_task(const KernelIO& io, int task, int member) override {
    const int64_t first = task * kImages, plane = x_[2] * x_[3];
    float* scratch = member_scratch(io, member);
    filter_grad_chunk({io.inputs[0].data<float>() + first * x_[1] * plane,
                       io.inputs[1].data<float>() + first * k_ * plane,
                       std::min(kImages, x_[0] - first), x_[1], k_, x_[2], x_[3], scratch,
                       scratch + 16 * position_step(x_[1]), part(io, task)});
  }
  // The chunks' partials added in chunk order, then dw = G^T M G per output and input channel (G's
  // columns: 1, 1/2, 1/2, 0; 0, 1/2, -1/2, 0; 0, 1/2, 1/2, 1), and db.
  void finish_tasks(const KernelIO& io) override {
    const int64_t c = x_[1], floats = static_cast<int64_t>(partial_floats(c, k_));
    float* sum = part(io, 0);
    for (int chunk = 1; chunk < chunks(); ++chunk) {
      const float* p = part(io, chunk);
      for (int64_t e = 0; e < floats; ++e) sum[e] += p[e];
    }
    float* dw = io.outputs[0].data<float>();
    for (int64_t o = 0; o < k_; ++o)
      for (int64_t i = 0; i < c; ++i) {
        double m[4][4], t[3][4];
        for (int p = 0; p < 16; ++p) m[p / 4][p % 4] = sum[(p * k_ + o) * c + i];
        for (int q = 0; q < 4; ++q) {
          t[0][q] = m[0][q] + 0.5 * (m[1][q] + m[2][q]);
          t[1][q] = 0.5 * (m[1][q] - m[2][q]);
          t[2][q] = 0.5 * (m[1][q] + m[2][q]) + m[3][q];
        }
        float* g = dw + (o * c + i) * 9;
        for (int r = 0; r < 3; ++r) {
          g[r * 3] = static_cast<float>(t[r][0] + 0.5 * (t[r][1] + t[r][2]));
          g[r * 3 + 1] = static_cast<float>(0.5 * (t[r][1] - t[r][2]));
          g[r * 3 + 2] = static_cast<float>(0.5 * (t[r][1] + t[r][2]) + t[r][3]);
        }
      }
    if (bias_) std::copy(sum + 16 * k_ * c, sum + floats, io.outputs[1].data<float>());
  }

 private:
  const Node& node_;
  bool bias_;
  Shape x_;
  int64_t k_;
};

}  // namespace

std::unique_ptr<Kernel> make_winograd_filter_grad(const Node& node, const KernelContext& context,
                                                  bool bias) {
  const auto& a = node.attr<ops::Conv2DBackpropAttrs>();
  const Shape& x = node.inputs[0].shape();
  const int64_t k = a.shape[0];
  if (cpu_isa() != CpuIsa::avx2 || context.precision != Precision::fp32 ||
      !is_same_3x3(a.shape, a.conv) || x[0] == 0 || x[1] < 16 || k < 16 || x[1] % 16 != 0 ||
      k % 8 != 0)
    return nullptr;
  return std::make_unique<WinogradFilterGrad>(node, context, bias);
}

}  // namespace tower::cpu
