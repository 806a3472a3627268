// 3x3 stride-1 SAME convolutions by Winograd's F(2x2, 3x3) under AVX2, where oneDNN 2.6 has no
// Winograd kernel and its direct one already runs at the FMA peak: each 2x2 output tile costs
// 16 multiply-adds per input and output channel instead of 36 (Lavin & Gray 2016). Per image (a
// task), in blocks of kTiles tiles that stay in L2: the input tiles (4x4, in nChw8c) transformed,
// V = B^T d B; for each of the 16 positions a matrix product M = V U over the channels, U = G g G^T
// the filter transformed by the runtime's reorder into winograd_filter_layout; the outputs
// A^T M A, then the epilogue (bias, the output's previous contents, ReLU: the roundings of the
// kernels apart). The same bits on any team. The input gradient of such a convolution is the
// convolution of dy by the filter flipped, its channel dimensions swapped: the same kernel. While
// an image's blocks are multiplied, the next image is fetched into the cache: a batch's
// activations come from memory (ResNet-20's first stage: 8 MB a tensor at batch 128).
#include "tower/kernels/cpu/conv_winograd.h"

#include <omp.h>

#include <algorithm>

#include "tower/kernels/cpu/clones.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/cpu/winograd_tiles.h"
#include "tower/ops/conv.h"

namespace tower::cpu {
namespace {

using winograd::F;
using winograd::kTiles;
using winograd::position_step;
constexpr int kRows = 6;  // tiles per step of the matrix product (x 16 output channels)

class WinogradFilterFormat : public Layout::Format {
 public:
  WinogradFilterFormat(const Shape& w, bool flipped) : w_(w), flipped_(flipped) {}
  size_t bytes() const override { return static_cast<size_t>(16 * w_[0] * w_[1]) * sizeof(float); }
  bool equals(const Format& other) const override {
    auto* o = dynamic_cast<const WinogradFilterFormat*>(&other);
    return o != nullptr && o->w_ == w_ && o->flipped_ == flipped_;
  }
  bool flipped() const { return flipped_; }

 private:
  Shape w_;
  bool flipped_;
};

// What one image's convolution needs.
struct WinogradJob {
  const float* x;  // the image, nChw8c
  float* y;        // its output, nChw8c
  const float* u;  // winograd_filter_layout
  const float* bias;
  float* v;  // scratch: [16][C / 8][kTiles][8], positions position_step(C) apart
  float* m;  // scratch: [16][K / 8][kTiles][8], positions position_step(K) apart
  int64_t c, k, h, w;
  int flags;                    // 1 bias, 2 add, 4 relu
  const float* next = nullptr;  // the next image, fetched into the cache meanwhile (or null)
};

// M[p][kb..kb+1][t..t+rows) = sum over c of V[p][c][t] U[p][c][kb..kb+1] (16 output channels).
template <int kR>
TOWER_ALWAYS_INLINE void product_rows(const WinogradJob& j, int p, int64_t kb, int64_t t) {
  F acc[kR][2];
  for (int r = 0; r < kR; ++r) acc[r][0] = acc[r][1] = F{};
  const float* u0 = j.u + ((p * (j.k / 8) + kb) * j.c) * 8;
  const float* u1 = u0 + j.c * 8;
  for (int64_t cb = 0; cb < j.c / 8; ++cb) {
    const float* vp = j.v + p * position_step(j.c) + (cb * kTiles + t) * 8;
    for (int l = 0; l < 8; ++l) {
      F a, b;
      load(a, u0 + (cb * 8 + l) * 8);
      load(b, u1 + (cb * 8 + l) * 8);
      for (int r = 0; r < kR; ++r) {
        const float s = vp[r * 8 + l];
        acc[r][0] += s * a;
        acc[r][1] += s * b;
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    float* m = j.m + p * position_step(j.k) + (kb * kTiles + t + r) * 8;
    store(m, acc[r][0]);
    store(m + kTiles * 8, acc[r][1]);
  }
}

TOWER_ALWAYS_INLINE void product(const WinogradJob& j, int64_t n, int64_t block, int64_t blocks) {
  const int64_t floats = j.c * j.h * j.w;
  for (int p = 0; p < 16; ++p)
    for (int64_t kb = 0; kb < j.k / 8; kb += 2) {
      if (kb == 0 && j.next != nullptr)
        winograd::prefetch_part(j.next, floats, block * 16 + p, blocks * 16);
      int64_t t = 0;
      for (; t + kRows <= n; t += kRows) product_rows<kRows>(j, p, kb, t);
      switch (n - t) {
        case 5:
          product_rows<5>(j, p, kb, t);
          break;
        case 4:
          product_rows<4>(j, p, kb, t);
          break;
        case 3:
          product_rows<3>(j, p, kb, t);
          break;
        case 2:
          product_rows<2>(j, p, kb, t);
          break;
        case 1:
          product_rows<1>(j, p, kb, t);
          break;
        default:
          break;
      }
    }
}

// y for tiles [t0, t0 + n): A^T M A, then the epilogue (kFlags: 1 bias, 2 add, 4 relu).
template <int kFlags>
TOWER_ALWAYS_INLINE void output_transform(const WinogradJob& j, int64_t t0, int64_t n, int64_t tw) {
  const int64_t step = position_step(j.k);
  for (int64_t kb = 0; kb < j.k / 8; ++kb) {
    F b{};
    if constexpr ((kFlags & 1) != 0) load(b, j.bias + kb * 8);
    float* plane = j.y + kb * j.h * j.w * 8;
    for (int64_t t = 0; t < n; ++t) {
      const float* m = j.m + (kb * kTiles + t) * 8;
      F s0[4], s1[4];
      for (int q = 0; q < 4; ++q) {
        F m0, m1, m2, m3;
        load(m0, m + q * step);
        load(m1, m + (4 + q) * step);
        load(m2, m + (8 + q) * step);
        load(m3, m + (12 + q) * step);
        s0[q] = m0 + m1 + m2;
        s1[q] = m1 - m2 - m3;
      }
      const int64_t y0 = (t0 + t) / tw * 2, x0 = (t0 + t) % tw * 2;
      for (int r = 0; r < 2; ++r) {
        const F* s = r == 0 ? s0 : s1;
        for (int q = 0; q < 2; ++q) {
          if (y0 + r >= j.h || x0 + q >= j.w) continue;
          F o = q == 0 ? s[0] + s[1] + s[2] : s[1] - s[2] - s[3];
          float* at = plane + ((y0 + r) * j.w + x0 + q) * 8;
          if constexpr ((kFlags & 1) != 0) o += b;
          if constexpr ((kFlags & 2) != 0) {
            F prev;
            load(prev, at);
            o += prev;
          }
          if constexpr ((kFlags & 4) != 0) o = o > F{} ? o : F{};
          store(at, o);
        }
      }
    }
  }
}

TOWER_ALWAYS_INLINE void winograd_image_body(const WinogradJob& j) {
  const int64_t th = (j.h + 1) / 2, tw = (j.w + 1) / 2;
  const int64_t blocks = (th * tw + kTiles - 1) / kTiles;
  for (int64_t t0 = 0; t0 < th * tw; t0 += kTiles) {
    const int64_t n = std::min(kTiles, th * tw - t0);
    winograd::input_transform({j.x, j.c, j.h, j.w}, j.v, t0, n, tw);
    product(j, n, t0 / kTiles, blocks);
    switch (j.flags) {
#define TOWER_WINOGRAD_CASE(f)         \
  case f:                              \
    output_transform<f>(j, t0, n, tw); \
    break;
      TOWER_WINOGRAD_CASE(0)
      TOWER_WINOGRAD_CASE(1)
      TOWER_WINOGRAD_CASE(2)
      TOWER_WINOGRAD_CASE(3)
      TOWER_WINOGRAD_CASE(4)
      TOWER_WINOGRAD_CASE(5)
      TOWER_WINOGRAD_CASE(6)
      TOWER_WINOGRAD_CASE(7)
#undef TOWER_WINOGRAD_CASE
      default:
        break;
    }
  }
}
TOWER_CPU_VARIANTS(winograd_image, (const WinogradJob& j), (j))

// Conv2D[+BiasAdd][+Add][+Relu] (inputs x, w[, bias]), or Conv2DBackpropInput (inputs w, dy: the
// convolution of dy by the flipped filter with its channel dimensions swapped).
class WinogradConv final : public Kernel {
 public:
  WinogradConv(const Node& node, const KernelContext& context, const ConvEpilogue& epilogue,
               bool backprop_input)
      : node_(node),
        flags_((epilogue.bias ? 1 : 0) | (epilogue.add_output ? 2 : 0) | (epilogue.relu ? 4 : 0)),
        team_(std::max(context.num_threads, 1)),
        members_(std::max(context.members, team_)),
        x_(backprop_input ? 1 : 0),
        w_(backprop_input ? 0 : 1) {
    const Shape& x = node.inputs[static_cast<size_t>(x_)].shape();
    c_ = x[1];
    k_ = node.outputs[0].shape[1];
    x_layout_ = winograd_activation_layout(x);
    y_layout_ = winograd_activation_layout(node.outputs[0].shape);
    w_layout_ =
        winograd_filter_layout(node.inputs[static_cast<size_t>(w_)].shape(), backprop_input);
  }
  size_t scratch_bytes() const override { return member_bytes() * static_cast<size_t>(members_); }
  Layout input_layout(int i) const override {
    if (i == x_) return x_layout_;
    return i == w_ ? w_layout_ : Layout{};
  }
  Layout output_layout(int) const override { return y_layout_; }

  Tasks tasks() const override { return Tasks::split(static_cast<int>(node_.outputs[0].shape[0])); }
  void run_task(const KernelIO& io, int task, int member) override {
    const Shape& x = node_.inputs[static_cast<size_t>(x_)].shape();
    float* scratch = reinterpret_cast<float*>(static_cast<char*>(io.scratch) +
                                              member_bytes() * static_cast<size_t>(member));
    WinogradJob job{io.inputs[static_cast<size_t>(x_)].data<float>() + task * c_ * x[2] * x[3],
                    io.outputs[0].data<float>() + task * k_ * x[2] * x[3],
                    io.inputs[static_cast<size_t>(w_)].data<float>(),
                    flags_ & 1 ? io.inputs[2].data<float>() : nullptr,
                    scratch,
                    scratch + 16 * position_step(c_),
                    c_,
                    k_,
                    x[2],
                    x[3],
                    flags_};
    if (task + 1 < x[0]) job.next = job.x + c_ * x[2] * x[3];
    winograd_image(job);
  }
  void run(const KernelIO& io) override {
    const int images = static_cast<int>(node_.outputs[0].shape[0]);
#pragma omp parallel for num_threads(team_) schedule(dynamic, 1) if (team_ > 1)
    for (int n = 0; n < images; ++n) run_task(io, n, team_ > 1 ? omp_get_thread_num() : 0);
  }

 private:
  size_t member_bytes() const {
    return align64(static_cast<size_t>(16 * (position_step(c_) + position_step(k_))) *
                   sizeof(float));
  }

  const Node& node_;
  int flags_, team_, members_;
  int x_, w_;              // the input image's and the filter's input indices
  int64_t c_ = 0, k_ = 0;  // input and output channels
  Layout x_layout_, y_layout_, w_layout_;
};

// Where the kernel applies to a convolution from c to k channels.
bool winograd_applies(const KernelContext& context, const Layout& filter, const Shape& w,
                      const ops::Conv2DAttrs& a, int64_t images, int64_t c, int64_t k) {
  return cpu_isa() == CpuIsa::avx2 && context.precision == Precision::fp32 && filter.is_plain() &&
         is_same_3x3(w, a) && images > 0 && c >= 16 && k >= 16 && c % 8 == 0 && k % 16 == 0;
}

}  // namespace

Layout winograd_activation_layout(const Shape& shape) {
  return to_layout(dnnl::memory::desc(to_dims(shape), dnnl::memory::data_type::f32,
                                      dnnl::memory::format_tag::nChw8c),
                   shape);
}

Layout winograd_filter_layout(const Shape& w, bool flipped) {
  return Layout(std::make_shared<WinogradFilterFormat>(w, flipped));
}

bool is_winograd_filter(const Layout& layout) {
  return dynamic_cast<const WinogradFilterFormat*>(layout.format()) != nullptr;
}

void winograd_filter(const float* w, const Shape& w_shape, const Layout& layout, float* u) {
  const bool flipped = dynamic_cast<const WinogradFilterFormat&>(*layout.format()).flipped();
  // Flipped: the filter from w's input channels to its output channels, rows and columns reversed.
  const int64_t k = flipped ? w_shape[1] : w_shape[0], c = flipped ? w_shape[0] : w_shape[1];
  for (int64_t o = 0; o < k; ++o)
    for (int64_t i = 0; i < c; ++i) {
      float g[9];
      for (int e = 0; e < 9; ++e)
        g[e] = flipped ? w[(i * k + o) * 9 + 8 - e] : w[(o * c + i) * 9 + e];
      double s[4][3], e[4][4];
      for (int q = 0; q < 3; ++q) {
        s[0][q] = g[q];
        s[1][q] = 0.5 * (static_cast<double>(g[q]) + g[3 + q] + g[6 + q]);
        s[2][q] = 0.5 * (static_cast<double>(g[q]) - g[3 + q] + g[6 + q]);
        s[3][q] = g[6 + q];
      }
      for (int r = 0; r < 4; ++r) {
        e[r][0] = s[r][0];
        e[r][1] = 0.5 * (s[r][0] + s[r][1] + s[r][2]);
        e[r][2] = 0.5 * (s[r][0] - s[r][1] + s[r][2]);
        e[r][3] = s[r][2];
      }
      for (int p = 0; p < 16; ++p)
        u[((p * (k / 8) + o / 8) * c + i) * 8 + o % 8] = static_cast<float>(e[p / 4][p % 4]);
    }
}

std::unique_ptr<Kernel> make_winograd_conv(const Node& node, const KernelContext& context,
                                           const ConvEpilogue& epilogue) {
  const Shape& x = node.inputs[0].shape();
  const Shape& w = node.inputs[1].shape();
  if (!winograd_applies(context, context.input_layout(1), w, node.attr<ops::Conv2DAttrs>(), x[0],
                        x[1], w[0]))
    return nullptr;
  return std::make_unique<WinogradConv>(node, context, epilogue, false);
}

std::unique_ptr<Kernel> make_winograd_backprop_input(const Node& node,
                                                     const KernelContext& context) {
  const Shape& w = node.inputs[0].shape();
  const Shape& dy = node.inputs[1].shape();
  if (!winograd_applies(context, context.input_layout(0), w,
                        node.attr<ops::Conv2DBackpropAttrs>().conv, dy[0], w[0], w[1]))
    return nullptr;
  return std::make_unique<WinogradConv>(node, context, ConvEpilogue{}, true);
}

}  // namespace tower::cpu
