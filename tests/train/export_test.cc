#include "tower/train/export.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <map>

#include "tower/graph/op_registry.h"
#include "tower/ops/activation.h"
#include "tower/ops/batch_norm.h"
#include "tower/ops/bias.h"
#include "tower/ops/conv.h"

namespace tower {
namespace {

// An op that ONNX has no form for (as a user's own op would be).
OpRegistrar test_only_op{
    {"TestOnlyOp", [](const Node& n) { return std::vector<TensorSpec>{n.inputs[0].spec()}; }}};

// conv (2 filters, 1 channel, 3x3) + bias + inference batch norm, on (1, 1, 5, 5) images.
struct ConvBnGraph {
  Graph graph;
  Value images, logits;
  std::map<std::string, Tensor> weights;

  ConvBnGraph() {
    Scope s(graph);
    images = s.placeholder("images", Shape{1, 1, 5, 5});
    auto var = [&](const std::string& name, Shape shape, std::vector<float> values) {
      weights.emplace(name, Tensor::from_vector<float>(shape, values));
      return s.get_variable(name, shape, Initializer::zeros());
    };
    std::vector<float> w(18);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i) - 0.5f;
    Value y = ops::conv2d(s, images, var("w", Shape{2, 1, 3, 3}, w), {{2, 2}, ops::Padding::same});
    y = ops::bias_add(s, y, var("b", Shape{2}, {0.25f, -1}));
    ops::BatchNormAttrs attrs;
    attrs.mode = ops::BatchNormMode::inference;
    attrs.epsilon = 1e-3f;
    y = ops::batch_norm(s, y, var("gamma", Shape{2}, {2, 0.5f}), var("beta", Shape{2}, {1, -1}),
                        var("mean", Shape{2}, {0.5f, 0.25f}), var("var", Shape{2}, {4, 0.25f}),
                        attrs)
            .y;
    logits = ops::relu(s, y);
  }
  onnx::ModelProto onnx(bool fold, int* folded = nullptr) {
    OnnxModel m("test");
    m.add_input("in", OnnxType::f32, {-1, 1, 5, 5});
    const int n = add_inference_graph(
        {images, logits, [&](const std::string& v) -> const Tensor& { return weights.at(v); },
         fold},
        "in", m);
    if (folded) *folded = n;
    m.add_node("Identity", {logits.node->name}, {"out"});
    m.add_output("out", OnnxType::f32, {-1, 2, 3, 3});
    onnx::ModelProto proto;
    EXPECT_TRUE(proto.ParseFromString(m.serialize()));
    return proto;
  }
};

std::vector<std::string> op_types(const onnx::ModelProto& m) {
  std::vector<std::string> types;
  for (const auto& n : m.graph().node()) types.push_back(n.op_type());
  return types;
}

std::vector<float> initializer(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& t : m.graph().initializer())
    if (t.name() == name) {
      std::vector<float> v(t.raw_data().size() / sizeof(float));
      std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
      return v;
    }
  ADD_FAILURE() << "no initializer " << name;
  return {};
}

// TF's SAME padding of a 3x3 window at stride 2 on 5 pixels: one pixel before and after.
TEST(ExportTest, ConvKeepsItsBiasAndTensorFlowPadding) {
  ConvBnGraph g;
  const onnx::ModelProto m = g.onnx(false);
  EXPECT_EQ(op_types(m),
            (std::vector<std::string>{"Conv", "BatchNormalization", "Relu", "Identity"}));
  const onnx::NodeProto& conv = m.graph().node(0);
  ASSERT_EQ(conv.input_size(), 3);  // the bias is the convolution's
  for (const auto& a : conv.attribute())
    if (a.name() == "pads") {
      EXPECT_EQ(std::vector<int64_t>(a.ints().begin(), a.ints().end()),
                (std::vector<int64_t>{1, 1, 1, 1}));
    }
}

// Folded: w' = w * s and b' = (b - mean) * s + beta with s = gamma / sqrt(var + eps).
TEST(ExportTest, FoldsBatchNormIntoTheConvolution) {
  ConvBnGraph g;
  int folded = 0;
  const onnx::ModelProto m = g.onnx(true, &folded);
  EXPECT_EQ(folded, 1);
  EXPECT_EQ(op_types(m), (std::vector<std::string>{"Conv", "Relu", "Identity"}));
  const std::string conv = m.graph().node(0).name();
  const std::vector<float> w = initializer(m, conv + "/folded_weights");
  const std::vector<float> b = initializer(m, conv + "/folded_bias");
  ASSERT_EQ(w.size(), 18u);
  ASSERT_EQ(b.size(), 2u);
  const float gamma[] = {2, 0.5f}, beta[] = {1, -1}, mean[] = {0.5f, 0.25f}, var[] = {4, 0.25f},
              bias[] = {0.25f, -1};
  for (int o = 0; o < 2; ++o) {
    const double s = gamma[o] / std::sqrt(var[o] + 1e-3);
    for (int i = 0; i < 9; ++i)
      EXPECT_FLOAT_EQ(w[o * 9 + i], static_cast<float>((0.1 * (o * 9 + i) - 0.5) * s));
    EXPECT_FLOAT_EQ(b[o], static_cast<float>((bias[o] - mean[o]) * s + beta[o]));
  }
}

// An op with no ONNX form is named with its node, and nothing is left to write.
TEST(ExportTest, AnOpWithoutAnOnnxFormIsNamed) {
  Graph graph;
  Scope s(graph);
  Value x = s.placeholder("images", Shape{1, 4});
  Value y = ops::relu(s, s.op("TestOnlyOp", {ops::tanh(s, x)}, {}, "mystery"));
  OnnxModel m("test");
  m.add_input("in", OnnxType::f32, {-1, 4});
  std::map<std::string, Tensor> none;
  try {
    add_inference_graph({x, y, [&](const std::string& v) -> const Tensor& { return none.at(v); }},
                        "in", m);
    FAIL() << "exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op TestOnlyOp (node mystery)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tower
