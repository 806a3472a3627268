// ExponentialMovingAverage: shadow copies of the weights, averaged after every update (the
// classic program's variable_averages); evaluation reads them.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tower/core/tensor.h"

namespace tower {

// TensorFlow's ExponentialMovingAverage of the trained variables, with num_updates: after update
// number n, shadow -= (1 - d) * (shadow - variable) with d = min(decay, (1 + n) / (10 + n)), so
// the average follows the weights closely early in training. Evaluation uses the shadows.
class ExponentialMovingAverage {
 public:
  // Throws tower::Error unless decay is in [0, 1].
  explicit ExponentialMovingAverage(float decay = 0.9999f);

  // Remembers the variables and copies their current values into the shadows (the only
  // allocations; update() allocates nothing). Call once.
  void init(const std::vector<std::pair<std::string, const Tensor*>>& variables);
  // After an optimizer step; `num_updates` counts the updates done so far, this one included.
  void update(int64_t num_updates);
  // The same for elements [begin, end) of variable `index` (init() order) alone, with
  // one_minus_decay = 1 - decay_at(num_updates): update() in pieces, for a caller that averages
  // each piece of a variable right after the optimizer wrote it (while it is in cache).
  void update_range(size_t index, int64_t begin, int64_t end, float one_minus_decay);
  size_t index_of(const std::string& variable) const;  // its init() position; Error if none
  // The decay update(num_updates) uses.
  float decay_at(int64_t num_updates) const;

  bool has(const std::string& variable) const { return index_.count(variable) != 0; }
  // The average of a variable (by the variable's name); tower::Error if it has none.
  const Tensor& shadow(const std::string& variable) const;
  // Shadows named "<variable>/ExponentialMovingAverage", in init() order, for checkpoints.
  std::vector<std::pair<std::string, Tensor*>> shadows();

  static std::string shadow_name(const std::string& variable) {
    return variable + "/ExponentialMovingAverage";
  }

 private:
  float decay_;
  std::vector<std::string> names_;
  std::vector<const Tensor*> variables_;
  std::vector<Tensor> shadows_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace tower
