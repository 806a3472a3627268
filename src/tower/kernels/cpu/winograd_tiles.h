// The input tiles of Winograd's F(2x2, 3x3) for a 3x3 stride-1 SAME convolution, shared by the
// convolution (conv_winograd.cc) and its filter gradient (conv_filter_grad_winograd.cc); only
// those kernel files include this. Tile t of an image covers its output rows and columns 2 * (t /
// tw) and 2 * (t % tw) on, tw = (width + 1) / 2, and its input from one row and column before.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tower/kernels/cpu/clones.h"

namespace tower::cpu::winograd {

using F = Vectors<8>::F;
constexpr int64_t kTiles = 32;  // tiles per block
// Floats between two positions of a block's transformed tiles for `channels` channels: 16 more
// than the block, so that the 16 positions of a tile do not lie a multiple of 4 KB apart (loads
// would wait on unrelated stores).
constexpr int64_t position_step(int64_t channels) { return channels * kTiles + 16; }

// Part `part` of `parts` of the cache lines of [p, p + floats) fetched into the cache ahead of
// their use: a batch's activations come from memory, and the loops over tiles read several rows of
// several channel blocks at a time, which the hardware's prefetchers do not follow.
TOWER_ALWAYS_INLINE void prefetch_part(const float* p, int64_t floats, int64_t part,
                                       int64_t parts) {
  const int64_t lines = (floats + 15) / 16;
  for (int64_t l = part * lines / parts; l < (part + 1) * lines / parts; ++l)
    __builtin_prefetch(p + l * 16);
}

// One image's plane in nChw8c: `channels` channels (a multiple of 8) of h x w.
struct Plane {
  const float* x;
  int64_t channels, h, w;
};

// e = the plane's element (yy, xx), or zero outside the plane: the address clamped into it and
// the value masked, with no branch (border tiles are most of a small plane's). (e should be a
// local: loaded into an array that stays in memory, the masking reads it back from there.)
TOWER_ALWAYS_INLINE void element_or_zero(F& e, const float* plane, int64_t yy, int64_t xx,
                                         int64_t h, int64_t w) {
  using I = Vectors<8>::I;
  const bool inside = yy >= 0 && yy < h && xx >= 0 && xx < w;
  F d;
  load(d, plane + (std::clamp<int64_t>(yy, 0, h - 1) * w + std::clamp<int64_t>(xx, 0, w - 1)) * 8);
  e = reinterpret_cast<F>(reinterpret_cast<I>(d) & (I{} - static_cast<int32_t>(inside)));
}

// Row yy of the input tile from column x0 (4 vectors, zero outside the image) times B: d0 - d2,
// d1 + d2, d2 - d1, d1 - d3.
TOWER_ALWAYS_INLINE void input_row(const Plane& in, const float* plane, int64_t yy, int64_t x0,
                                   bool inside, F& e0, F& e1, F& e2, F& e3) {
  F d0, d1, d2, d3;
  if (inside) {
    load(d0, plane + (yy * in.w + x0) * 8);
    load(d1, plane + (yy * in.w + x0 + 1) * 8);
    load(d2, plane + (yy * in.w + x0 + 2) * 8);
    load(d3, plane + (yy * in.w + x0 + 3) * 8);
  } else {
    element_or_zero(d0, plane, yy, x0, in.h, in.w);
    element_or_zero(d1, plane, yy, x0 + 1, in.h, in.w);
    element_or_zero(d2, plane, yy, x0 + 2, in.h, in.w);
    element_or_zero(d3, plane, yy, x0 + 3, in.h, in.w);
  }
  e0 = d0 - d2;
  e1 = d1 + d2;
  e2 = d2 - d1;
  e3 = d1 - d3;
}

// V = B^T d B for tiles [t0, t0 + n) of the image (tw tiles per row), rows then columns with at
// most three rows live, into v: [16 positions, position_step(channels) apart][channels / 8][kTiles]
// [8].
TOWER_ALWAYS_INLINE void input_transform(const Plane& in, float* v, int64_t t0, int64_t n,
                                         int64_t tw) {
  const int64_t step = position_step(in.channels);
  for (int64_t cb = 0; cb < in.channels / 8; ++cb) {
    const float* plane = in.x + cb * in.h * in.w * 8;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t y0 = (t0 + t) / tw * 2 - 1, x0 = (t0 + t) % tw * 2 - 1;
      const bool inside = y0 >= 0 && x0 >= 0 && y0 + 3 < in.h && x0 + 3 < in.w;
      float* vt = v + (cb * kTiles + t) * 8;
      F a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3;
      input_row(in, plane, y0, x0, inside, a0, a1, a2, a3);
      input_row(in, plane, y0 + 2, x0, inside, c0, c1, c2, c3);
      store(vt + 0 * step, a0 - c0);
      store(vt + 1 * step, a1 - c1);
      store(vt + 2 * step, a2 - c2);
      store(vt + 3 * step, a3 - c3);
      input_row(in, plane, y0 + 1, x0, inside, b0, b1, b2, b3);
      store(vt + 4 * step, b0 + c0);
      store(vt + 5 * step, b1 + c1);
      store(vt + 6 * step, b2 + c2);
      store(vt + 7 * step, b3 + c3);
      store(vt + 8 * step, c0 - b0);
      store(vt + 9 * step, c1 - b1);
      store(vt + 10 * step, c2 - b2);
      store(vt + 11 * step, c3 - b3);
      input_row(in, plane, y0 + 3, x0, inside, a0, a1, a2, a3);
      store(vt + 12 * step, b0 - a0);
      store(vt + 13 * step, b1 - a1);
      store(vt + 14 * step, b2 - a2);
      store(vt + 15 * step, b3 - a3);
    }
  }
}

}  // namespace tower::cpu::winograd
