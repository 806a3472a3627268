#include "tower/train/clip.h"

#include <cmath>
#include <limits>

namespace tower {
namespace {

// Four fixed lanes break the dependency chain of one running sum; lane i % 4 and the final
// combination order never change, so the result does not depend on anything but the data.
struct SumOfSquares {
  double lanes[4] = {0, 0, 0, 0};
  void add(const Tensor& t);
  double norm() const { return std::sqrt((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])); }
};

void SumOfSquares::add(const Tensor& t) {
  const float* x = t.data<float>();
  const int64_t n = t.numel();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) {
      const double v = x[i + l];
      lanes[l] += v * v;
    }
  for (; i < n; ++i) {
    const double v = x[i];
    lanes[0] += v * v;
  }
}

}  // namespace

double global_norm(const std::vector<const Tensor*>& tensors) {
  SumOfSquares sum;
  for (const Tensor* t : tensors) sum.add(*t);
  return sum.norm();
}

float clip_by_global_norm(const std::vector<Tensor*>& grads, float max_norm) {
  if (!(max_norm > 0.0f) || !std::isfinite(max_norm))
    fail("--clip_norm must be a positive number, got {}", max_norm);
  SumOfSquares sum;
  for (const Tensor* t : grads) sum.add(*t);
  const double norm = sum.norm();
  if (std::isfinite(norm) && norm <= max_norm) return static_cast<float>(norm);
  const float scale = std::isfinite(norm) ? static_cast<float>(max_norm / norm)
                                          : std::numeric_limits<float>::quiet_NaN();
  for (Tensor* t : grads) {
    float* x = t->data<float>();
    const int64_t n = t->numel();
    for (int64_t i = 0; i < n; ++i) x[i] *= scale;
  }
  return static_cast<float>(norm);
}

}  // namespace tower
