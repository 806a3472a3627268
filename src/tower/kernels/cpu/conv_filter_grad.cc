// The filter gradient of a convolution with few input channels (a network's first layer: 1 for
// grey images, 3 for colour) on AVX2, where oneDNN 2.6's backward-weights kernel runs far below
// the FMA peak (this loop is several times faster: bench/results/cpu_kernel_choices.md). With s, t
// the strides and top, left the padding, dw[o, i, r, c] = sum over (n, p, q) of x[n, i, p*s + r -
// top, q*t + c - left] * dy[n, o, p, q]. For one image, input channel and filter row r, KW
// accumulators of 8 output channels each (two such groups at a time) take x's element broadcast
// times dy's 8 channels at every output position; x is first copied into a zero-padded plane, so
// the loop checks no bounds.
//
// The batch runs in fixed chunks of 16 images (the tasks), each summing its images in order into
// its own partial; the chunks are then added in order: the same bits on every thread count and
// mode. The file is compiled with -ffp-contract=fast, so that acc += a * b is one fused
// multiply-add in the AVX2 clone.
#include <algorithm>
#include <cstring>

#include "tower/kernels/cpu/chunk_partials.h"
#include "tower/kernels/cpu/clones.h"
#include "tower/kernels/cpu/conv.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/ops/conv.h"

namespace tower::cpu {
namespace {

using F = Vectors<8>::F;
constexpr int64_t kRows = 16;  // images per chunk
constexpr int kMaxWidth = 7;   // filter widths up to this have an unrolled loop

// Where things lie for one chunk's loops.
struct FilterGradGeometry {
  int64_t channels, height, width;  // x's
  int64_t kh, kw, oh, ow, sh, sw;   // the filter, dy's plane, the strides
  int64_t top, left;                // padding
  int64_t padded_h, padded_w;       // the zero-padded plane of x
  int64_t groups;                   // 8-lane groups of output channels
  int64_t block;                    // dy's channel block (a multiple of 8)
  int64_t ds[4];                    // dy's strides (ChannelBlocks)
  int64_t lanes() const { return groups * 8; }
  int64_t part_floats() const { return channels * kh * kw * lanes() + lanes(); }
};

// dy's 8 channels from 8 * group at output row p, column 0, of one image.
TOWER_ALWAYS_INLINE const float* dy_row(const float* dy, const FilterGradGeometry& g, int64_t group,
                                        int64_t p) {
  const int64_t c = group * 8;
  return dy + (c / g.block) * g.ds[1] + c % g.block + p * g.ds[2];
}

// Filter row r of one input channel (its padded plane xp), for NG groups from g0: the image's
// sums over output positions added to part[c][lane] (c < KW).
template <int KW, int NG>
TOWER_ALWAYS_INLINE void filter_row(const float* xp, const float* dy, const FilterGradGeometry& g,
                                    int64_t g0, int64_t r, float* part) {
  F acc[NG][KW] = {};
  for (int64_t p = 0; p < g.oh; ++p) {
    const float* xr = xp + (p * g.sh + r) * g.padded_w;
    const float* d[NG];
    for (int k = 0; k < NG; ++k) d[k] = dy_row(dy, g, g0 + k, p);
    for (int64_t q = 0; q < g.ow; ++q) {
      F dv[NG];
      for (int k = 0; k < NG; ++k) load(dv[k], d[k] + q * g.ds[3]);
#pragma GCC unroll 8
      for (int c = 0; c < KW; ++c) {
        const float v = xr[q * g.sw + c];
        const F xv = {v, v, v, v, v, v, v, v};  // (F{} + v would add 0.0 first)
        for (int k = 0; k < NG; ++k) acc[k][c] += xv * dv[k];
      }
    }
  }
  for (int c = 0; c < KW; ++c)
    for (int k = 0; k < NG; ++k) {
      float* at = part + c * g.lanes() + (g0 + k) * 8;
      F sum;
      load(sum, at);
      sum += acc[k][c];
      store(at, sum);
    }
}

// All rows of the filter for one input channel; two groups at a time where the accumulators fit
// in AVX2's 16 registers (KW <= 5), else one.
template <int KW>
TOWER_ALWAYS_INLINE void filter_rows(const float* xp, const float* dy, const FilterGradGeometry& g,
                                     float* part) {
  constexpr int kPair = KW <= 5 ? 2 : 1;
  int64_t g0 = 0;
  for (; g0 + kPair <= g.groups; g0 += kPair)
    for (int64_t r = 0; r < g.kh; ++r)
      filter_row<KW, kPair>(xp, dy, g, g0, r, part + r * KW * g.lanes());
  for (; g0 < g.groups; ++g0)
    for (int64_t r = 0; r < g.kh; ++r)
      filter_row<KW, 1>(xp, dy, g, g0, r, part + r * KW * g.lanes());
}

// One chunk of `images` images: part = [i][r][c][lane] then the bias gradient's [lane], each the
// images' sums added in order. xp: scratch for one padded plane.
TOWER_ALWAYS_INLINE void filter_grad_chunk_body(const float* x, const float* dy, int64_t images,
                                                const FilterGradGeometry& g, float* xp,
                                                float* part) {
  std::fill(part, part + g.part_floats(), 0.0f);
  float* db = part + g.channels * g.kh * g.kw * g.lanes();
  for (int64_t n = 0; n < images; ++n) {
    const float* dyn = dy + n * g.ds[0];
    for (int64_t i = 0; i < g.channels; ++i) {
      std::fill(xp, xp + g.padded_h * g.padded_w, 0.0f);
      const float* plane = x + (n * g.channels + i) * g.height * g.width;
      for (int64_t h = 0; h < g.height && h + g.top < g.padded_h; ++h)
        for (int64_t w = 0; w < g.width && w + g.left < g.padded_w; ++w)
          xp[(h + g.top) * g.padded_w + w + g.left] = plane[h * g.width + w];
      float* pi = part + i * g.kh * g.kw * g.lanes();
      switch (g.kw) {
        case 1:
          filter_rows<1>(xp, dyn, g, pi);
          break;
        case 2:
          filter_rows<2>(xp, dyn, g, pi);
          break;
        case 3:
          filter_rows<3>(xp, dyn, g, pi);
          break;
        case 4:
          filter_rows<4>(xp, dyn, g, pi);
          break;
        case 5:
          filter_rows<5>(xp, dyn, g, pi);
          break;
        case 6:
          filter_rows<6>(xp, dyn, g, pi);
          break;
        default:
          filter_rows<7>(xp, dyn, g, pi);
          break;
      }
    }
    for (int64_t group = 0; group < g.groups; ++group) {
      F sum{}, dv;
      for (int64_t p = 0; p < g.oh; ++p) {
        const float* d = dy_row(dyn, g, group, p);
        for (int64_t q = 0; q < g.ow; ++q) {
          load(dv, d + q * g.ds[3]);
          sum += dv;
        }
      }
      F total;
      load(total, db + group * 8);
      total += sum;
      store(db + group * 8, total);
    }
  }
}
TOWER_CPU_VARIANTS(filter_grad_chunk,
                   (const float* x, const float* dy, int64_t images, const FilterGradGeometry& g,
                    float* xp, float* part),
                   (x, dy, images, g, xp, part))

// Conv2DBackpropFilter[+BiasAddGrad] (inputs x, dy -> dw[, db]).
// Each member's scratch: one padded plane.
class SmallFilterGrad : public ChunkPartialsKernel {
 public:
  SmallFilterGrad(const Node& node, const KernelContext& context, const FilterGradGeometry& g,
                  const dnnl::memory::desc& dy_md, bool bias)
      : ChunkPartialsKernel(context, node.inputs[0].shape()[0], kRows,
                            static_cast<size_t>(g.padded_h * g.padded_w) * sizeof(float),
                            static_cast<size_t>(g.part_floats()) * sizeof(float)),
        node_(node),
        g_(g),
        dy_md_(dy_md),
        bias_(bias),
        batch_(node.inputs[0].shape()[0]) {}

  Layout input_layout(int i) const override {
    return i == 1 ? to_layout(dy_md_, node_.inputs[1].shape()) : Layout{};
  }

  void run_task(const KernelIO& io, int task, int member) override {
    const int64_t first = task * kRows, images = std::min(kRows, batch_ - first);
    filter_grad_chunk(io.inputs[0].data<float>() + first * g_.channels * g_.height * g_.width,
                      io.inputs[1].data<float>() + first * g_.ds[0], std::max<int64_t>(images, 0),
                      g_, member_scratch(io, member), part(io, task));
  }
  // dw[o, i, r, c] and db[o]: the chunks' partials added in chunk order.
  void finish_tasks(const KernelIO& io) override {
    const Shape& w = io.outputs[0].shape();
    const int64_t taps = w[1] * w[2] * w[3], oc = w[0];
    float* dw = io.outputs[0].data<float>();
    float* db = bias_ ? io.outputs[1].data<float>() : nullptr;
    for (int c = 0; c < chunks(); ++c) {
      const float* p = part(io, c);
      for (int64_t o = 0; o < oc; ++o) {
        for (int64_t k = 0; k < taps; ++k) {
          const float v = p[k * g_.lanes() + o];
          dw[o * taps + k] = c == 0 ? v : dw[o * taps + k] + v;
        }
        if (db) db[o] = c == 0 ? p[taps * g_.lanes() + o] : db[o] + p[taps * g_.lanes() + o];
      }
    }
  }

 private:
  const Node& node_;
  FilterGradGeometry g_;
  dnnl::memory::desc dy_md_;
  bool bias_;
  int64_t batch_;
};

}  // namespace

std::unique_ptr<Kernel> make_small_filter_grad(const Node& node, const KernelContext& context,
                                               bool bias) {
  const auto& a = node.attr<ops::Conv2DBackpropAttrs>();
  const Shape& x = node.inputs[0].shape();
  const Shape& w = a.shape;
  const Shape& dy = node.inputs[1].shape();
  // With AVX-512, oneDNN's own kernel is faster than this one
  // (bench/results/cpu_kernel_choices.md).
  if (cpu_isa() >= CpuIsa::avx512 || context.precision != Precision::fp32 || x[1] > 4 ||
      w[3] > kMaxWidth || !a.conv.is_dense())
    return nullptr;
  // dy as it comes when its channels lie in runs of 8 (blocks of 8 or 16, channels last), else in
  // blocks of 8.
  dnnl::memory::desc dy_md = md_of(dy, context.input_layout(1));
  auto blocks = channel_blocks(dy_md);
  if (!blocks || blocks->block % 8 != 0) {
    dy_md = dnnl::memory::desc(to_dims(dy), dnnl::memory::data_type::f32,
                               dnnl::memory::format_tag::nChw8c);
    blocks = channel_blocks(dy_md);
  }
  const auto [ph, pw] = ops::conv_padding(x, w, a.conv);
  FilterGradGeometry g{.channels = x[1],
                       .height = x[2],
                       .width = x[3],
                       .kh = w[2],
                       .kw = w[3],
                       .oh = dy[2],
                       .ow = dy[3],
                       .sh = a.conv.strides[0],
                       .sw = a.conv.strides[1],
                       .top = ph.before,
                       .left = pw.before,
                       .padded_h = (dy[2] - 1) * a.conv.strides[0] + w[2],
                       .padded_w = (dy[3] - 1) * a.conv.strides[1] + w[3],
                       .groups = (dy[1] + 7) / 8,
                       .block = blocks->block,
                       .ds = {}};
  std::copy(blocks->strides, blocks->strides + 4, g.ds);
  return std::make_unique<SmallFilterGrad>(node, context, g, dy_md, bias);
}

}  // namespace tower::cpu
