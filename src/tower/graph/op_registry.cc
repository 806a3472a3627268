#include "tower/graph/op_registry.h"

#include <map>

namespace tower {
namespace {
std::map<std::string, OpDef>& registry() {
  static std::map<std::string, OpDef> ops;
  return ops;
}
}  // namespace

OpRegistrar::OpRegistrar(OpDef def) {
  TOWER_CHECK_MSG(!registry().count(def.name), "op {} registered twice", def.name);
  TOWER_CHECK(def.infer);
  std::string name = def.name;
  registry().emplace(std::move(name), std::move(def));
}

const OpDef* find_op(const std::string& name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

const OpDef& get_op(const std::string& name) {
  const OpDef* def = find_op(name);
  if (def == nullptr) fail("unknown op '{}': no op of that name is registered", name);
  return *def;
}

std::vector<std::string> registered_ops() {
  std::vector<std::string> names;
  for (auto& [name, def] : registry()) names.push_back(name);
  return names;
}

[[noreturn]] void fail_node(const Node& node, const std::string& what) {
  std::string inputs;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const Value& v = node.inputs[i];
    inputs += fmt::format("{}{} {}{}", i ? ", " : "", v.name(), dtype_name(v.dtype()),
                          v.shape().to_string());
  }
  fail("{} ({}): {}; inputs: [{}]", node.name, node.op, what, inputs);
}

void expect_num_inputs(const Node& node, size_t count) {
  if (node.inputs.size() != count)
    fail_node(node, fmt::format("expected {} inputs, got {}", count, node.inputs.size()));
}

void expect_rank(const Node& node, int input, int rank) {
  int got = node.inputs.at(static_cast<size_t>(input)).shape().rank();
  if (got != rank)
    fail_node(node, fmt::format("input {} must have rank {}, got rank {}", input, rank, got));
}

void expect_dtype(const Node& node, int input, DType dtype) {
  DType got = node.inputs.at(static_cast<size_t>(input)).dtype();
  if (got != dtype)
    fail_node(node, fmt::format("input {} must be {}, got {}", input, dtype_name(dtype),
                                dtype_name(got)));
}

}  // namespace tower
