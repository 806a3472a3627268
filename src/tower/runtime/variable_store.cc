#include "tower/runtime/variable_store.h"

#include <cmath>

#include "tower/core/hash.h"
#include "tower/core/philox.h"

namespace tower {

void initialize_tensor(Tensor& tensor, const Initializer& init, uint64_t seed,
                       const std::string& name) {
  if (tensor.dtype() != DType::f32)
    fail("variable '{}': only f32 variables can be initialized, got {}", name,
         dtype_name(tensor.dtype()));
  const Shape& s = tensor.shape();
  double fan_in = static_cast<double>(s.numel()), fan_out = fan_in;
  if (s.rank() == 2) {
    fan_in = static_cast<double>(s[0]);
    fan_out = static_cast<double>(s[1]);
  } else if (s.rank() == 4) {
    double receptive = static_cast<double>(s[2] * s[3]);
    fan_in = static_cast<double>(s[1]) * receptive;
    fan_out = static_cast<double>(s[0]) * receptive;
  }
  Philox rng(seed, philox_stream(fnv1a(name)));
  float* p = tensor.data<float>();
  const int64_t n = tensor.numel();
  using Kind = Initializer::Kind;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t k = static_cast<uint64_t>(i);
    switch (init.kind) {
      case Kind::constant:
        p[i] = init.value;
        break;
      case Kind::truncated_normal:
        p[i] = init.value * rng.truncated_normal(k);
        break;
      case Kind::normal:
        p[i] = init.value * rng.normal(k);
        break;
      case Kind::uniform:
        p[i] = init.value * (2.0f * rng.uniform(k) - 1.0f);
        break;
      case Kind::glorot_uniform:
        p[i] = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out))) *
               (2.0f * rng.uniform(k) - 1.0f);
        break;
      case Kind::he_normal:
        // Truncated at 2 stddev, rescaled so the variance stays 2 / fan_in.
        p[i] = static_cast<float>(std::sqrt(2.0 / fan_in) / 0.87962566103423978) *
               rng.truncated_normal(k);
        break;
    }
  }
}

void VariableStore::initialize(const Graph& graph, uint64_t seed) {
  for (const VariableInfo& v : graph.variables()) {
    if (contains(v.name)) continue;
    Tensor t(v.spec.shape, v.spec.dtype, device_);
    initialize_tensor(t, v.initializer, seed, v.name);
    tensors_.emplace(v.name, std::move(t));
  }
}

Tensor& VariableStore::get(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("variable '{}' has no storage (was the store initialized?)", name);
  return it->second;
}

const Tensor& VariableStore::get(const std::string& name) const {
  return const_cast<VariableStore*>(this)->get(name);
}

std::vector<std::string> VariableStore::names() const {
  std::vector<std::string> result;
  for (auto& [name, t] : tensors_) result.push_back(name);
  return result;
}

void VariableStore::copy_from(const VariableStore& other) {
  for (auto& [name, t] : other.tensors_) {
    auto it = tensors_.find(name);
    if (it == tensors_.end())
      tensors_.emplace(name, Tensor(t.shape(), t.dtype(), device_)).first->second.copy_from(t);
    else
      it->second.copy_from(t);
  }
}

}  // namespace tower
