// The static graph a model is written as. A model is a plain function that adds nodes through a
// Scope; shapes are inferred (and user mistakes reported) as each node is added.
//
//   Graph graph;
//   Scope scope(graph);
//   Value x = scope.placeholder("images", Shape{128, 3, 24, 24});
//   Value w = scope.variable_scope("conv1").get_variable("weights", Shape{64, 3, 5, 5},
//                                                        Initializer::truncated_normal(5e-2));
//   Value y = ops::conv2d(scope, x, w, {.strides = {1, 1}, .padding = Padding::same});
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tower/core/device.h"
#include "tower/core/dtype.h"
#include "tower/core/error.h"
#include "tower/core/shape.h"

namespace tower {

struct Node;

struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
  bool operator==(const TensorSpec&) const = default;
};

// One output of a node. Cheap to copy; valid while the Graph lives.
struct Value {
  Node* node = nullptr;
  int index = 0;

  bool defined() const { return node != nullptr; }
  const TensorSpec& spec() const;
  const Shape& shape() const { return spec().shape; }
  DType dtype() const { return spec().dtype; }
  const std::string& name() const;  // the node's name ("tower_0/conv1/Conv2D"), ":index" omitted
  bool operator==(const Value&) const = default;
};

// How a variable starts. Random initializers draw from Philox keyed by (seed, variable name),
// so values depend neither on creation order nor on threads.
struct Initializer {
  enum class Kind { constant, truncated_normal, normal, uniform, glorot_uniform, he_normal };
  Kind kind = Kind::constant;
  float value = 0.0f;  // constant value, or stddev (normals), or limit (uniform: [-limit, limit])

  static Initializer constant(float v) { return {Kind::constant, v}; }
  static Initializer zeros() { return constant(0.0f); }
  static Initializer ones() { return constant(1.0f); }
  static Initializer truncated_normal(float stddev) { return {Kind::truncated_normal, stddev}; }
  static Initializer normal(float stddev) { return {Kind::normal, stddev}; }
  static Initializer uniform(float limit) { return {Kind::uniform, limit}; }
  static Initializer glorot_uniform() { return {Kind::glorot_uniform, 0.0f}; }
  static Initializer he_normal() { return {Kind::he_normal, 0.0f}; }
};

enum class Trainable : uint8_t { no, yes };
enum class Reuse : uint8_t { no, yes };

struct VariableInfo {
  std::string name;  // full variable-scope name, e.g. "conv1/weights"
  TensorSpec spec;
  Initializer initializer;
  Trainable trainable = Trainable::yes;
  Value value;  // the Variable node's output
};

struct Node {
  int id = 0;
  std::string name;  // unique in the graph
  std::string op;    // registered op name, e.g. "Conv2D"
  std::vector<Value> inputs;
  std::any attrs;  // the op's attribute struct (e.g. Conv2DAttrs), or empty
  std::vector<TensorSpec> outputs;
  Device device;  // where it runs (set by the scope that created it)

  // A handle on output `index`: a Value names an edge of the graph, whoever holds the node.
  Value output(int index = 0) const { return Value{const_cast<Node*>(this), index}; }
  template <typename T>
  const T& attr() const {
    const T* a = std::any_cast<T>(&attrs);
    TOWER_CHECK_MSG(a != nullptr, "node {} ({}) has no attributes of the requested type", name, op);
    return *a;
  }
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Adds a node of a registered op, infers its outputs (throws tower::Error naming the node on a
  // shape mistake). `name` must be unique (Scope makes it so).
  Node& add_node(std::string op, std::string name, std::vector<Value> inputs, std::any attrs,
                 Device device);
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  Node* find_node(const std::string& name) const;
  std::string unique_name(const std::string& base);

  // Variables, by full name, in creation order.
  const VariableInfo* find_variable(const std::string& name) const;
  VariableInfo& add_variable(VariableInfo info);
  const std::vector<VariableInfo>& variables() const { return variables_; }
  std::vector<VariableInfo> trainable_variables() const;

  // Named collections (e.g. "losses"); get_collection filters by a name-scope prefix.
  void add_to_collection(const std::string& collection, Value value);
  std::vector<Value> get_collection(const std::string& collection,
                                    const std::string& scope_prefix = "") const;

  // Deterministic per-graph seed used by random initializers and random ops.
  uint64_t seed = 0;

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<std::string, Node*> by_name_;
  std::map<std::string, int> name_counts_;
  std::vector<VariableInfo> variables_;
  std::map<std::string, size_t> variable_index_;
  std::map<std::string, std::vector<Value>> collections_;
};

// Where new nodes go: a name scope (prefix of node names), a variable scope (prefix of variable
// names, with reuse), and a device. Scopes are cheap values; nested scopes are derived copies.
// Whether variable `name` is `scope` or lies under it ("conv1/weights" under "conv1", not under
// "conv").
bool within_scope(const std::string& name, const std::string& scope);

class Scope {
 public:
  explicit Scope(Graph& graph, Device device = {}) : graph_(&graph), device_(device) {}

  Graph& graph() const { return *graph_; }
  Device device() const { return device_; }
  const std::string& name_prefix() const { return name_prefix_; }
  const std::string& variable_prefix() const { return variable_prefix_; }
  Reuse reuse() const { return reuse_; }

  Scope name_scope(const std::string& name) const;  // node names only ("tower_0/...")
  // Variable names and node names; Reuse::yes makes get_variable return existing variables.
  Scope variable_scope(const std::string& name, Reuse reuse) const;
  Scope variable_scope(const std::string& name) const { return variable_scope(name, reuse_); }
  Scope with_reuse(Reuse reuse) const;
  Scope with_device(Device device) const;
  // Variables under these scopes ("conv1" covers "conv1/weights" and "conv1/bn/gamma") are
  // built frozen: never trainable, and layers that behave differently in training (batch norm)
  // run as in inference. The scopes are full variable names, whatever this scope's prefix.
  Scope with_frozen(std::vector<std::string> scopes) const;
  // Whether "<variable prefix>/name" lies under a frozen scope.
  bool frozen(const std::string& name) const;
  // Every dropout layer built under this scope drops at `rate` instead of its own (timm's
  // drop_rate); < 0: each layer's own.
  Scope with_dropout(float rate) const;
  float dropout() const { return dropout_; }

  // TF-style get_variable: creates "<variable prefix>/name", or with reuse returns the existing
  // one (checking the shape). Creating twice without reuse, or reusing a missing variable, is an
  // error naming the variable.
  Value get_variable(const std::string& name, Shape shape, Initializer initializer,
                     Trainable trainable = Trainable::yes, DType dtype = DType::f32) const;
  Value placeholder(const std::string& name, Shape shape, DType dtype = DType::f32) const;
  Value constant(const std::string& name, Shape shape, float value) const;  // filled with value

  // Adds a node named "<name prefix>/<base>" (uniquified).
  Value op(const std::string& op_name, std::vector<Value> inputs, std::any attrs = {},
           const std::string& base_name = "") const;
  Node& op_node(const std::string& op_name, std::vector<Value> inputs, std::any attrs = {},
                const std::string& base_name = "") const;

 private:
  Graph* graph_;
  Device device_;
  std::string name_prefix_;
  std::string variable_prefix_;
  Reuse reuse_ = Reuse::no;
  std::shared_ptr<const std::vector<std::string>> frozen_;
  float dropout_ = -1;
};

struct PlaceholderAttrs {
  TensorSpec spec;
};
struct VariableAttrs {
  std::string name;  // the full variable name
  TensorSpec spec;
};
struct ConstantAttrs {
  TensorSpec spec;
  float value = 0.0f;
};

}  // namespace tower
