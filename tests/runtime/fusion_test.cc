#include "tower/runtime/fusion.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "testing/graphs.h"
#include "tower/ops/activation.h"
#include "tower/ops/batch_norm.h"
#include "tower/ops/bias.h"
#include "tower/ops/conv.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"

namespace tower {
namespace {

std::vector<char> all_needed(const Graph& g) { return std::vector<char>(g.nodes().size(), 1); }

std::vector<std::string> fused_ops(const FusionPlan& plan) {
  std::vector<std::string> ops;
  for (const auto& [id, node] : plan.fused) ops.push_back(node->op);
  return ops;
}

// Conv2D -> BiasAdd -> Relu is one kernel, built in place of the Relu with the chain's other
// inputs; the Conv2D and BiasAdd are absorbed.
TEST(FusionTest, ConvBiasReluIsOneNode) {
  Graph g;
  Scope s(g);
  Value x = s.placeholder("x", Shape{2, 3, 8, 8});
  Value w = s.get_variable("w", Shape{4, 3, 3, 3}, Initializer::zeros());
  Value b = s.get_variable("b", Shape{4}, Initializer::zeros());
  Value conv = ops::conv2d(s, x, w);
  Value bias = ops::bias_add(s, conv, b);
  Value y = ops::relu(s, bias);
  const FusionPlan plan = plan_fusion(g, all_needed(g), {y}, DeviceKind::cpu);
  ASSERT_EQ(fused_ops(plan), (std::vector<std::string>{"Conv2D+BiasAdd+Relu"}));
  const Node& fused = *plan.fused.at(y.node->id);
  EXPECT_EQ(fused.inputs, (std::vector<Value>{x, w, b}));
  EXPECT_TRUE(plan.absorbed[static_cast<size_t>(conv.node->id)]);
  EXPECT_TRUE(plan.absorbed[static_cast<size_t>(bias.node->id)]);
  EXPECT_FALSE(plan.absorbed[static_cast<size_t>(y.node->id)]);
  EXPECT_EQ(plan.fused_nodes, 2);
}

// A value the chain would hide is fetched, or read by another node: the chain stops before it.
TEST(FusionTest, AChainStopsAtAValueReadElsewhere) {
  Graph g;
  Scope s(g);
  Value x = s.placeholder("x", Shape{4, 8});
  Value w = s.get_variable("w", Shape{8, 5}, Initializer::zeros());
  Value b = s.get_variable("b", Shape{5}, Initializer::zeros());
  Value mm = ops::matmul(s, x, w);
  Value bias = ops::bias_add(s, mm, b);
  Value y = ops::relu(s, bias);
  const FusionPlan fetched = plan_fusion(g, all_needed(g), {y, bias}, DeviceKind::cpu);
  EXPECT_EQ(fused_ops(fetched), (std::vector<std::string>{"MatMul+BiasAdd"}));
  Value other = ops::tanh(s, mm);  // a second reader of the MatMul's output
  const FusionPlan shared = plan_fusion(g, all_needed(g), {y, other}, DeviceKind::cpu);
  EXPECT_TRUE(shared.fused.empty());
  EXPECT_EQ(shared.fused_nodes, 0);
}

// The filter and bias gradients of one dy are one kernel with two outputs, in place of the later
// node; its outputs are the two nodes' values. A weight decay term (a scalar times the weight)
// added to the gradient is one kernel too.
TEST(FusionTest, SiblingGradientsAndWeightDecayFuse) {
  Graph g;
  Scope s(g);
  Value x = s.placeholder("x", Shape{2, 3, 8, 8});
  Value dy = s.placeholder("dy", Shape{2, 4, 8, 8});
  Value w = s.get_variable("w", Shape{4, 3, 3, 3}, Initializer::zeros());
  Value dw = ops::conv2d_backprop_filter(s, x, dy, Shape{4, 3, 3, 3}, {});
  Value db = ops::bias_add_grad(s, dy);
  Value decay = ops::mul(s, w, s.constant("wd", Shape{}, 1e-4f));
  Value total = ops::add_n(s, {dw, decay});
  const FusionPlan plan = plan_fusion(g, all_needed(g), {total, db}, DeviceKind::cpu);
  ASSERT_EQ(plan.fused.size(), 2u);
  EXPECT_EQ(plan.fused.at(total.node->id)->op, "Mul+AddN");
  const int later = std::max(dw.node->id, db.node->id);
  EXPECT_EQ(plan.fused.at(later)->op, "Conv2DBackpropFilter+BiasAddGrad");
  EXPECT_EQ(plan.fused_outputs.at(later), (std::vector<Value>{dw, db}));
  EXPECT_EQ(plan.fused_nodes, 2);
}

// Conv2D -> FusedBatchNorm -> Relu is one kernel (the batch norm folded into the convolution)
// when the batch norm is in inference mode and its statistics outputs are not read; a training
// batch norm is not folded, but takes its ReLU (FusedBatchNorm+Relu, built where the batch norm
// is, with its statistics as outputs 1 and 2).
TEST(FusionTest, InferenceBatchNormFoldsIntoTheConvolution) {
  for (const auto mode : {ops::BatchNormMode::inference, ops::BatchNormMode::training}) {
    Graph g;
    Scope s(g);
    Value x = s.placeholder("x", Shape{2, 3, 8, 8});
    Value w = s.get_variable("w", Shape{4, 3, 3, 3}, Initializer::zeros());
    Value gamma = s.get_variable("gamma", Shape{4}, Initializer::ones());
    Value beta = s.get_variable("beta", Shape{4}, Initializer::zeros());
    Value mean = s.get_variable("mean", Shape{4}, Initializer::zeros(), Trainable::no);
    Value var = s.get_variable("var", Shape{4}, Initializer::ones(), Trainable::no);
    Value conv = ops::conv2d(s, x, w);
    Value bn = ops::batch_norm(s, conv, gamma, beta, mean, var, {.mode = mode}).y;
    Value y = ops::relu(s, bn);
    const FusionPlan plan = plan_fusion(g, all_needed(g), {y}, DeviceKind::cpu);
    if (mode == ops::BatchNormMode::training) {
      ASSERT_EQ(fused_ops(plan), (std::vector<std::string>{"FusedBatchNorm+Relu"}));
      EXPECT_EQ(plan.fused_outputs.at(bn.node->id),
                (std::vector<Value>{y, bn.node->output(1), bn.node->output(2)}));
      EXPECT_TRUE(plan.absorbed[static_cast<size_t>(y.node->id)]);
      continue;
    }
    ASSERT_EQ(fused_ops(plan), (std::vector<std::string>{"Conv2D+FusedBatchNorm+Relu"}));
    EXPECT_EQ(plan.fused.at(y.node->id)->inputs,
              (std::vector<Value>{x, w, gamma, beta, mean, var}));
    EXPECT_EQ(plan.fused_nodes, 2);
    // The statistics the batch norm passes on, fetched: it cannot run hidden in the
    // convolution's kernel (it takes its ReLU instead).
    const FusionPlan stats =
        plan_fusion(g, all_needed(g), {y, bn.node->output(1)}, DeviceKind::cpu);
    EXPECT_EQ(fused_ops(stats), (std::vector<std::string>{"FusedBatchNorm+Relu"}));
  }
}

// MobileNet's unit in inference: the batch norm folded and ReLU6 (the clip post-op) in the
// convolution's kernel, dense or depthwise.
TEST(FusionTest, InferenceBatchNormAndRelu6FoldIntoTheConvolution) {
  for (int64_t groups : {1, 4}) {
    Graph g;
    Scope s(g);
    Value x = s.placeholder("x", Shape{2, 4, 8, 8});
    ops::Conv2DAttrs attrs;
    attrs.groups = groups;
    Value w = s.get_variable("w", Shape{4, 4 / groups, 3, 3}, Initializer::he_normal());
    Value gamma = s.get_variable("gamma", Shape{4}, Initializer::ones());
    Value beta = s.get_variable("beta", Shape{4}, Initializer::zeros());
    Value mean = s.get_variable("mean", Shape{4}, Initializer::zeros(), Trainable::no);
    Value var = s.get_variable("var", Shape{4}, Initializer::ones(), Trainable::no);
    Value bn = ops::batch_norm(s, ops::conv2d(s, x, w, attrs), gamma, beta, mean, var,
                               {.mode = ops::BatchNormMode::inference})
                   .y;
    Value y = ops::relu6(s, bn);
    const FusionPlan plan = plan_fusion(g, all_needed(g), {y}, DeviceKind::cpu);
    EXPECT_EQ(fused_ops(plan), (std::vector<std::string>{"Conv2D+FusedBatchNorm+Relu6"}));
    EXPECT_EQ(plan.fused_nodes, 2);
  }
}

// A residual block's end with a projection shortcut, in inference: both branches are folded
// convolutions ending at the same Add; the first takes the Add and the ReLU (the other branch
// becomes its sum input), the second folds alone.
TEST(FusionTest, ResidualAddJoinsOneBranchOnly) {
  Graph g;
  Scope s(g);
  Value x = s.placeholder("x", Shape{2, 4, 8, 8});
  Value h = testing::conv_inference_batch_norm(s, "h", x);
  Value shortcut = testing::conv_inference_batch_norm(s, "shortcut", x);
  Value y = ops::relu(s, ops::add(s, h, shortcut));
  const FusionPlan plan = plan_fusion(g, all_needed(g), {y}, DeviceKind::cpu);
  std::vector<std::string> ops = fused_ops(plan);
  std::sort(ops.begin(), ops.end());
  EXPECT_EQ(ops,
            (std::vector<std::string>{"Conv2D+FusedBatchNorm", "Conv2D+FusedBatchNorm+Add+Relu"}));
  EXPECT_EQ(plan.fused.at(y.node->id)->inputs.back(), shortcut);
  EXPECT_EQ(plan.fused_nodes, 4);
}

// A training residual block's end, relu(batch norm + shortcut): the batch norm takes the sum and
// the ReLU where it stands, and keeps its statistics as outputs 1 and 2. With a projection
// shortcut, built after the main branch's batch norm, the shortcut's batch norm takes them (the
// fused node may not read a value made after it).
TEST(FusionTest, TrainingBatchNormTakesTheResidualSumBuiltBeforeIt) {
  Graph g;
  Scope s(g);
  Value x = s.placeholder("x", Shape{2, 4, 6, 6});
  auto bn = [&](const std::string& name, Value in) {
    auto channel = [&](const std::string& v) {
      return s.get_variable(name + "/" + v, Shape{4}, Initializer::zeros());
    };
    return ops::batch_norm(s, in, channel("gamma"), channel("beta"), channel("mean"),
                           channel("var"), {})
        .y;
  };
  const Value main = bn("main", x);
  const Value main_mean = main.node->output(1), main_variance = main.node->output(2);
  Value identity_end = ops::relu(s, ops::add(s, main, x));
  const Value branch = bn("branch", ops::tanh(s, identity_end));
  const Value shortcut = bn("shortcut", identity_end);
  Value projection_end = ops::relu(s, ops::add(s, branch, shortcut));
  const std::vector<Value> fetches = {projection_end, main_mean, shortcut.node->output(2)};
  const FusionPlan plan = plan_fusion(g, all_needed(g), fetches, DeviceKind::cpu);
  EXPECT_EQ(fused_ops(plan),
            (std::vector<std::string>{"FusedBatchNorm+Add+Relu", "FusedBatchNorm+Add+Relu"}));
  std::vector<Value> inputs = main.node->inputs;
  inputs.push_back(x);
  EXPECT_EQ(plan.fused.at(main.node->id)->inputs, inputs);
  EXPECT_EQ(plan.fused_outputs.at(main.node->id),
            (std::vector<Value>{identity_end, main_mean, main_variance}));
  EXPECT_EQ(plan.fused.at(shortcut.node->id)->inputs.back(), branch);
  EXPECT_FALSE(plan.absorbed[static_cast<size_t>(branch.node->id)]);
  EXPECT_EQ(plan.fused_nodes, 4);
  // An inference batch norm keeps no statistics: not this fusion's.
  Graph h;
  Scope t(h);
  Value z = t.placeholder("z", Shape{2, 4, 6, 6});
  auto channel = [&](const std::string& v) {
    return t.get_variable(v, Shape{4}, Initializer::zeros());
  };
  const Value folded = ops::batch_norm(t, z, channel("gamma"), channel("beta"), channel("mean"),
                                       channel("var"), {.mode = ops::BatchNormMode::inference})
                           .y;
  Value end = ops::relu(t, ops::add(t, folded, z));
  EXPECT_EQ(fused_ops(plan_fusion(h, all_needed(h), {end}, DeviceKind::cpu)),
            (std::vector<std::string>{"Add+Relu"}));
}

}  // namespace
}  // namespace tower
