#include "tower/graph/graph.h"

#include <gtest/gtest.h>

#include "testing/errors.h"
#include "tower/graph/op_registry.h"

namespace tower {
namespace {

using testing::error_of;

TEST(GraphTest, NameScopesPrefixNodesButNotVariables) {
  Graph g;
  Scope root(g);
  Scope tower0 = root.name_scope("tower_0");
  Value w =
      tower0.variable_scope("conv1").get_variable("weights", Shape{4, 3}, Initializer::zeros());
  EXPECT_EQ(w.name(), "conv1/weights");
  Value x = tower0.variable_scope("conv1").placeholder("images", Shape{2, 3});
  EXPECT_EQ(x.name(), "tower_0/conv1/images");
  Value x2 = tower0.variable_scope("conv1").placeholder("images", Shape{2, 3});
  EXPECT_EQ(x2.name(), "tower_0/conv1/images_1");  // uniquified
}

TEST(GraphTest, VariableReuseAcrossTowers) {
  Graph g;
  Scope root(g);
  Value a = root.name_scope("tower_0").variable_scope("fc").get_variable(
      "weights", Shape{8, 2}, Initializer::glorot_uniform());
  Value b = root.name_scope("tower_1")
                .with_reuse(Reuse::yes)
                .variable_scope("fc")
                .get_variable("weights", Shape{8, 2}, Initializer::glorot_uniform());
  EXPECT_EQ(a, b);  // the same variable
  EXPECT_EQ(g.variables().size(), 1u);
}

TEST(GraphTest, VariableMistakesNameTheVariable) {
  Graph g;
  Scope root(g);
  root.variable_scope("fc").get_variable("weights", Shape{8, 2}, Initializer::zeros());
  std::string twice = error_of([&] {
    root.variable_scope("fc").get_variable("weights", Shape{8, 2}, Initializer::zeros());
  });
  EXPECT_NE(twice.find("'fc/weights' already exists"), std::string::npos) << twice;
  std::string missing = error_of([&] {
    root.variable_scope("fc", Reuse::yes).get_variable("bias", Shape{2}, Initializer::zeros());
  });
  EXPECT_NE(missing.find("'fc/bias' does not exist"), std::string::npos) << missing;
  std::string shape = error_of([&] {
    root.variable_scope("fc", Reuse::yes)
        .get_variable("weights", Shape{4, 2}, Initializer::zeros());
  });
  EXPECT_NE(shape.find("(8, 2)"), std::string::npos) << shape;
}

TEST(GraphTest, CollectionsFilterByScope) {
  Graph g;
  Scope root(g);
  Value l0 = root.name_scope("tower_0").constant("loss", Shape{}, 1.0f);
  Value l1 = root.name_scope("tower_1").constant("loss", Shape{}, 2.0f);
  g.add_to_collection("losses", l0);
  g.add_to_collection("losses", l1);
  EXPECT_EQ(g.get_collection("losses").size(), 2u);
  auto t1 = g.get_collection("losses", "tower_1/");
  ASSERT_EQ(t1.size(), 1u);
  EXPECT_EQ(t1[0], l1);
  EXPECT_TRUE(g.get_collection("nothing").empty());
}

TEST(GraphTest, TrainableFlag) {
  Graph g;
  Scope root(g);
  root.get_variable("w", Shape{2}, Initializer::zeros());
  root.get_variable("moving_mean", Shape{2}, Initializer::zeros(), Trainable::no);
  ASSERT_EQ(g.trainable_variables().size(), 1u);
  EXPECT_EQ(g.trainable_variables()[0].name, "w");
}

TEST(GraphTest, UnknownOpIsAnError) {
  Graph g;
  Scope root(g);
  std::string e = error_of([&] { root.op("NoSuchOp", {}); });
  EXPECT_NE(e.find("unknown op 'NoSuchOp'"), std::string::npos) << e;
}

}  // namespace
}  // namespace tower
