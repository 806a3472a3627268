#pragma once

#include <map>
#include <string>
#include <vector>

#include "tower/core/tensor.h"
#include "tower/graph/graph.h"

namespace tower {

// The storage of a graph's variables on one device (one replica). Programs bind their Variable
// nodes to these tensors at compile time, so the tensors must outlive the Programs using them.
class VariableStore {
 public:
  explicit VariableStore(Device device = {}) : device_(device) {}
  VariableStore(const VariableStore&) = delete;
  VariableStore& operator=(const VariableStore&) = delete;

  // Creates storage for every variable of the graph not yet here, filled by its initializer
  // (Philox keyed by (seed, variable name): the same values whatever the creation order).
  void initialize(const Graph& graph, uint64_t seed);
  Tensor& get(const std::string& name);  // throws tower::Error naming the missing variable
  const Tensor& get(const std::string& name) const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  std::vector<std::string> names() const;
  Device device() const { return device_; }
  void copy_from(const VariableStore& other);  // same names and shapes

 private:
  Device device_;
  std::map<std::string, Tensor> tensors_;
};

// Fills `tensor` per the initializer. Fan-in/fan-out for Glorot/He: weights are (in, out) for
// matmul and (out, in, kh, kw) (OIHW) for conv.
void initialize_tensor(Tensor& tensor, const Initializer& initializer, uint64_t seed,
                       const std::string& name);

}  // namespace tower
