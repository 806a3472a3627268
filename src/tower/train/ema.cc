#include "tower/train/ema.h"

#include <algorithm>
#include <cmath>

namespace tower {

ExponentialMovingAverage::ExponentialMovingAverage(float decay) : decay_(decay) {
  if (!(decay >= 0.0f && decay <= 1.0f)) fail("--ema_decay must be in [0, 1], got {}", decay);
}

void ExponentialMovingAverage::init(
    const std::vector<std::pair<std::string, const Tensor*>>& variables) {
  TOWER_CHECK_MSG(names_.empty(), "ExponentialMovingAverage::init called twice");
  for (const auto& [name, tensor] : variables) {
    TOWER_CHECK_MSG(tensor != nullptr && tensor->dtype() == DType::f32,
                    "moving average of '{}': not an f32 tensor", name);
    TOWER_CHECK_MSG(index_.emplace(name, names_.size()).second,
                    "moving average of '{}' requested twice", name);
    names_.push_back(name);
    variables_.push_back(tensor);
    shadows_.push_back(tensor->clone());
  }
}

float ExponentialMovingAverage::decay_at(int64_t num_updates) const {
  const double n = static_cast<double>(num_updates);
  return std::min(decay_, static_cast<float>((1.0 + n) / (10.0 + n)));
}

void ExponentialMovingAverage::update(int64_t num_updates) {
  const float one_minus_decay = 1.0f - decay_at(num_updates);
  for (size_t k = 0; k < shadows_.size(); ++k)
    update_range(k, 0, shadows_[k].numel(), one_minus_decay);
}

void ExponentialMovingAverage::update_range(size_t index, int64_t begin, int64_t end,
                                            float one_minus_decay) {
  TOWER_CHECK(index < shadows_.size() && begin >= 0 && end <= shadows_[index].numel());
  float* shadow = shadows_[index].data<float>();
  const float* var = variables_[index]->data<float>();
  for (int64_t i = begin; i < end; ++i) shadow[i] -= (shadow[i] - var[i]) * one_minus_decay;
}

size_t ExponentialMovingAverage::index_of(const std::string& variable) const {
  auto it = index_.find(variable);
  if (it == index_.end()) fail("no moving average of the variable '{}'", variable);
  return it->second;
}

const Tensor& ExponentialMovingAverage::shadow(const std::string& variable) const {
  auto it = index_.find(variable);
  if (it == index_.end()) fail("no moving average of the variable '{}'", variable);
  return shadows_[it->second];
}

std::vector<std::pair<std::string, Tensor*>> ExponentialMovingAverage::shadows() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (size_t k = 0; k < names_.size(); ++k) out.emplace_back(shadow_name(names_[k]), &shadows_[k]);
  return out;
}

}  // namespace tower
