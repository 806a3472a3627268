#include "tower/runtime/variable_store.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tower {
namespace {

TEST(VariableStoreTest, InitializersAreDeterministicAndOrderIndependent) {
  Graph g1, g2;
  Scope s1(g1), s2(g2);
  s1.get_variable("a", Shape{100}, Initializer::truncated_normal(0.1f));
  s1.get_variable("b", Shape{10, 20}, Initializer::glorot_uniform());
  s2.get_variable("b", Shape{10, 20}, Initializer::glorot_uniform());
  s2.get_variable("a", Shape{100}, Initializer::truncated_normal(0.1f));
  VariableStore v1, v2;
  v1.initialize(g1, 7);
  v2.initialize(g2, 7);
  EXPECT_EQ(v1.get("a").to_vector<float>(), v2.get("a").to_vector<float>());
  EXPECT_EQ(v1.get("b").to_vector<float>(), v2.get("b").to_vector<float>());
  for (float x : v1.get("a").to_vector<float>()) EXPECT_LE(std::fabs(x), 0.2f + 1e-6f);
  float limit = std::sqrt(6.0f / 30.0f);
  for (float x : v1.get("b").to_vector<float>()) EXPECT_LE(std::fabs(x), limit);
  VariableStore v3;
  v3.initialize(g1, 8);
  EXPECT_NE(v1.get("a").to_vector<float>(), v3.get("a").to_vector<float>());
}

TEST(VariableStoreTest, ConstantAndMissing) {
  Graph g;
  Scope s(g);
  s.get_variable("c", Shape{3}, Initializer::constant(0.5f));
  VariableStore v;
  v.initialize(g, 1);
  EXPECT_EQ(v.get("c").to_vector<float>(), (std::vector<float>{0.5f, 0.5f, 0.5f}));
  EXPECT_THROW(v.get("nope"), Error);
}

}  // namespace
}  // namespace tower
