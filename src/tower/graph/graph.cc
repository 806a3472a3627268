#include "tower/graph/graph.h"

#include <algorithm>

#include "tower/graph/op_registry.h"

namespace tower {

const TensorSpec& Value::spec() const {
  TOWER_CHECK(node != nullptr);
  TOWER_CHECK(index >= 0 && index < static_cast<int>(node->outputs.size()));
  return node->outputs[static_cast<size_t>(index)];
}

const std::string& Value::name() const {
  TOWER_CHECK(node != nullptr);
  return node->name;
}

Node& Graph::add_node(std::string op, std::string name, std::vector<Value> inputs, std::any attrs,
                      Device device) {
  const OpDef& def = get_op(op);
  TOWER_CHECK_MSG(!by_name_.count(name), "duplicate node name {}", name);
  auto node = std::make_unique<Node>();
  node->id = static_cast<int>(nodes_.size());
  node->name = std::move(name);
  node->op = std::move(op);
  node->inputs = std::move(inputs);
  node->attrs = std::move(attrs);
  node->device = device;
  for (const Value& v : node->inputs)
    if (!v.defined()) fail("{} ({}): an input is undefined", node->name, node->op);
  node->outputs = def.infer(*node);
  Node* raw = node.get();
  by_name_[raw->name] = raw;
  nodes_.push_back(std::move(node));
  return *raw;
}

Node* Graph::find_node(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::string Graph::unique_name(const std::string& base) {
  int& count = name_counts_[base];
  std::string name = count == 0 ? base : fmt::format("{}_{}", base, count);
  ++count;
  while (by_name_.count(name)) name = fmt::format("{}_{}", base, count++);
  return name;
}

const VariableInfo* Graph::find_variable(const std::string& name) const {
  auto it = variable_index_.find(name);
  return it == variable_index_.end() ? nullptr : &variables_[it->second];
}

VariableInfo& Graph::add_variable(VariableInfo info) {
  TOWER_CHECK(!variable_index_.count(info.name));
  variable_index_[info.name] = variables_.size();
  variables_.push_back(std::move(info));
  return variables_.back();
}

std::vector<VariableInfo> Graph::trainable_variables() const {
  std::vector<VariableInfo> result;
  for (const auto& v : variables_)
    if (v.trainable == Trainable::yes) result.push_back(v);
  return result;
}

void Graph::add_to_collection(const std::string& collection, Value value) {
  collections_[collection].push_back(value);
}

std::vector<Value> Graph::get_collection(const std::string& collection,
                                         const std::string& scope_prefix) const {
  std::vector<Value> result;
  auto it = collections_.find(collection);
  if (it == collections_.end()) return result;
  for (const Value& v : it->second)
    if (scope_prefix.empty() || v.name().rfind(scope_prefix, 0) == 0) result.push_back(v);
  return result;
}

namespace {
std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}
}  // namespace

Scope Scope::name_scope(const std::string& name) const {
  Scope s = *this;
  s.name_prefix_ = join_name(name_prefix_, name);
  return s;
}

Scope Scope::variable_scope(const std::string& name, Reuse reuse) const {
  Scope s = *this;
  s.name_prefix_ = join_name(name_prefix_, name);
  s.variable_prefix_ = join_name(variable_prefix_, name);
  s.reuse_ = reuse;
  return s;
}

Scope Scope::with_reuse(Reuse reuse) const {
  Scope s = *this;
  s.reuse_ = reuse;
  return s;
}

Scope Scope::with_device(Device device) const {
  Scope s = *this;
  s.device_ = device;
  return s;
}

Scope Scope::with_frozen(std::vector<std::string> scopes) const {
  Scope s = *this;
  s.frozen_ = std::make_shared<const std::vector<std::string>>(std::move(scopes));
  return s;
}

bool within_scope(const std::string& name, const std::string& scope) {
  return name.starts_with(scope) && (name.size() == scope.size() || name[scope.size()] == '/');
}

Scope Scope::with_dropout(float rate) const {
  Scope s = *this;
  s.dropout_ = rate;
  return s;
}

bool Scope::frozen(const std::string& name) const {
  if (!frozen_) return false;
  const std::string full = join_name(variable_prefix_, name);
  return std::any_of(frozen_->begin(), frozen_->end(),
                     [&](const std::string& scope) { return within_scope(full, scope); });
}

Value Scope::get_variable(const std::string& name, Shape shape, Initializer initializer,
                          Trainable trainable, DType dtype) const {
  std::string full = join_name(variable_prefix_, name);
  if (frozen(name)) trainable = Trainable::no;
  const VariableInfo* existing = graph_->find_variable(full);
  if (reuse_ == Reuse::yes) {
    if (existing == nullptr)
      fail(
          "variable '{}' does not exist, but the variable scope asks to reuse it; create it "
          "first (in the first tower) or open the scope without reuse",
          full);
    if (existing->spec.shape != shape || existing->spec.dtype != dtype)
      fail("variable '{}' exists with shape {} {}, but is reused with shape {} {}", full,
           existing->spec.shape.to_string(), dtype_name(existing->spec.dtype), shape.to_string(),
           dtype_name(dtype));
    return existing->value;
  }
  if (existing != nullptr)
    fail(
        "variable '{}' already exists; did you mean to reuse it (variable scope with "
        "Reuse::yes)?",
        full);
  TensorSpec spec{std::move(shape), dtype};
  // Variables are named by their variable-scope name: they belong to no tower.
  Node& node = graph_->add_node("Variable", full, {}, VariableAttrs{full, spec}, device_);
  return graph_->add_variable({full, spec, initializer, trainable, node.output()}).value;
}

Value Scope::placeholder(const std::string& name, Shape shape, DType dtype) const {
  return op("Placeholder", {}, PlaceholderAttrs{{std::move(shape), dtype}}, name);
}

Value Scope::constant(const std::string& name, Shape shape, float value) const {
  return op("Constant", {}, ConstantAttrs{{std::move(shape), DType::f32}, value}, name);
}

Node& Scope::op_node(const std::string& op_name, std::vector<Value> inputs, std::any attrs,
                     const std::string& base_name) const {
  std::string name =
      graph_->unique_name(join_name(name_prefix_, base_name.empty() ? op_name : base_name));
  return graph_->add_node(op_name, std::move(name), std::move(inputs), std::move(attrs), device_);
}

Value Scope::op(const std::string& op_name, std::vector<Value> inputs, std::any attrs,
                const std::string& base_name) const {
  return op_node(op_name, std::move(inputs), std::move(attrs), base_name).output();
}

// Sources of the graph. They are registered here because Scope creates them.
namespace {
OpRegistrar placeholder_op{
    {"Placeholder",
     [](const Node& n) { return std::vector<TensorSpec>{n.attr<PlaceholderAttrs>().spec}; },
     {}}};
OpRegistrar variable_op{
    {"Variable",
     [](const Node& n) { return std::vector<TensorSpec>{n.attr<VariableAttrs>().spec}; },
     {}}};
OpRegistrar constant_op{
    {"Constant",
     [](const Node& n) { return std::vector<TensorSpec>{n.attr<ConstantAttrs>().spec}; },
     {}}};
}  // namespace

}  // namespace tower
