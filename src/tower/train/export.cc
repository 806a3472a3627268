#include "tower/train/export.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tower/ops/batch_norm.h"
#include "tower/ops/conv.h"
#include "tower/ops/lrn.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"
#include "tower/ops/pool.h"
#include "tower/train/inference.h"

namespace tower {
namespace {

std::string name_of(Value v) {
  return v.index == 0 ? v.node->name : fmt::format("{}:{}", v.node->name, v.index);
}

std::vector<int64_t> pads_of(const std::array<ops::AxisPadding, 2>& p) {
  return {p[0].before, p[1].before, p[0].after, p[1].after};
}

// An initializer added to `onnx`; returns its name, for the node that reads it.
std::string floats(OnnxModel& onnx, const std::string& name, const std::vector<int64_t>& dims,
                   const std::vector<float>& values) {
  onnx.add_initializer(name, dims, std::span<const float>(values));
  return name;
}
std::string ints(OnnxModel& onnx, const std::string& name, const std::vector<int64_t>& values) {
  onnx.add_initializer(name, {static_cast<int64_t>(values.size())},
                       std::span<const int64_t>(values));
  return name;
}

// The translation of one graph into ONNX nodes, node by node in graph order.
class Emitter {
 public:
  Emitter(const OnnxGraph& graph, const std::string& input_name, OnnxModel& onnx)
      : g_(graph), input_name_(input_name), onnx_(onnx) {}

  int run() {
    std::vector<Node*> order = reachable();
    for (Node* n : order)
      for (Value v : n->inputs) users_[{v.node, v.index}].push_back(n);
    for (Node* n : order)
      if (!done_.count(n)) emit(*n);
    return folded_;
  }

 private:
  // The nodes logits depends on, in creation (hence topological) order.
  std::vector<Node*> reachable() {
    std::set<Node*> seen;
    std::vector<Node*> stack{g_.logits.node};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (Value v : n->inputs) stack.push_back(v.node);
    }
    std::vector<Node*> order(seen.begin(), seen.end());
    std::sort(order.begin(), order.end(), [](Node* a, Node* b) { return a->id < b->id; });
    return order;
  }

  [[noreturn]] void unsupported(const Node& n, const std::string& why) {
    fail("op {} (node {}) {}; nothing was written", n.op, n.name, why);
  }

  const std::vector<Node*>& users(Value v) {
    static const std::vector<Node*> none;
    auto it = users_.find({v.node, v.index});
    return it == users_.end() ? none : it->second;
  }
  // The single node that reads v, if v has exactly one reader and no other output of v's node
  // is read.
  Node* only_user(Value v) {
    if (users(v).size() != 1) return nullptr;
    for (int i = 0; i < static_cast<int>(v.node->outputs.size()); ++i)
      if (i != v.index && !users(Value{v.node, i}).empty()) return nullptr;
    return users(v)[0];
  }

  const Tensor& weight(const Node& variable) {
    const VariableAttrs& a = variable.attr<VariableAttrs>();
    const Tensor& t = g_.weights(a.name);
    if (t.shape() != a.spec.shape || t.dtype() != DType::f32)
      fail("variable '{}' has shape {} in the checkpoint, the model needs {}", a.name,
           t.shape().to_string(), a.spec.shape.to_string());
    return t;
  }
  bool is_variable(Value v) const { return v.node->op == "Variable"; }

  // The ONNX name of an input value, adding the initializer of a variable or constant once.
  std::string in(Value v) {
    const Node& n = *v.node;
    if (n.op == "Placeholder") {
      if (v != g_.input) unsupported(n, "is an input other than the images");
      return input_name_;
    }
    if (n.op == "Variable" && initialized_.insert(n.name).second) {
      const Tensor& t = weight(n);
      onnx_.add_initializer(n.name, t.shape().dims(),
                            std::span<const float>(t.data<float>(), t.numel()));
    }
    if (n.op == "Constant" && initialized_.insert(n.name).second) {
      const ConstantAttrs& a = n.attr<ConstantAttrs>();
      floats(onnx_, n.name, a.spec.shape.dims(),
             std::vector<float>(static_cast<size_t>(a.spec.shape.numel()), a.value));
    }
    return name_of(v);
  }

  void simple(const std::string& type, const Node& n, std::vector<std::string> inputs,
              const std::vector<OnnxAttr>& attrs = {}) {
    onnx_.add_node(type, inputs, {n.name}, attrs, n.name);
  }

  void emit(const Node& n) {
    const std::string& op = n.op;
    if (op == "Placeholder" || op == "Variable" || op == "Constant") return;  // read by `in`
    if (op == "Conv2D") return conv(n);
    if (op == "BiasAdd") return bias_add(n);
    if (op == "FusedBatchNorm") return batch_norm(n);
    if (op == "Relu" || op == "Sigmoid" || op == "Tanh") return simple(op, n, {in(n.inputs[0])});
    if (op == "Elu") return simple("Elu", n, {in(n.inputs[0])}, {{"alpha", 1.0f}});
    if (op == "Relu6")  // Clip's bounds are scalar inputs
      return simple("Clip", n,
                    {in(n.inputs[0]), floats(onnx_, n.name + "/min", {}, {0.0f}),
                     floats(onnx_, n.name + "/max", {}, {6.0f})});
    if (op == "Dropout") return simple("Identity", n, {in(n.inputs[0])});
    if (op == "Add" || op == "Sub" || op == "Mul")
      return simple(op, n, {in(n.inputs[0]), in(n.inputs[1])});
    if (op == "Square") return simple("Mul", n, {in(n.inputs[0]), in(n.inputs[0])});
    if (op == "Scale")
      return simple("Mul", n,
                    {in(n.inputs[0]),
                     floats(onnx_, n.name + "/factor", {}, {n.attr<ops::ScaleAttrs>().factor})});
    if (op == "AddN") {
      std::vector<std::string> inputs;
      for (Value v : n.inputs) inputs.push_back(in(v));
      return simple("Sum", n, inputs);
    }
    if (op == "ReduceSum") return reduce_sum(n);
    if (op == "Reshape") return reshape(n);
    if (op == "MatMul") return matmul(n);
    if (op == "MaxPool" || op == "AvgPool") return pool(n);
    if (op == "LRN") return lrn(n);
    if (op == "Softmax") return simple("Softmax", n, {in(n.inputs[0])}, {{"axis", int64_t{-1}}});
    unsupported(n, "has no ONNX form in tower's exporter");
  }

  // Conv2D, with the BiasAdd that alone reads it as its bias, and the inference batch norm that
  // alone reads either, folded in: w' = w * s, b' = (b - mean) * s + beta, s = gamma /
  // sqrt(var + eps) per output channel.
  void conv(const Node& n) {
    const auto& a = n.attr<ops::Conv2DAttrs>();
    const Shape& w_shape = n.inputs[1].shape();
    std::vector<OnnxAttr> attrs{
        {"kernel_shape", std::vector<int64_t>{w_shape[2], w_shape[3]}},
        {"strides", std::vector<int64_t>{a.strides[0], a.strides[1]}},
        {"pads", pads_of(ops::conv_padding(n.inputs[0].shape(), w_shape, a))}};
    if (a.groups != 1) attrs.push_back({"group", a.groups});
    if (!a.is_dense())
      attrs.push_back({"dilations", std::vector<int64_t>{a.dilations[0], a.dilations[1]}});
    Value out = n.output(0);
    const Node* bias = nullptr;
    if (Node* u = only_user(out);
        u && u->op == "BiasAdd" && u->inputs[0] == out && is_variable(u->inputs[1])) {
      bias = u;
      out = Value{u, 0};
    }
    const Node* bn = nullptr;
    if (Node* u = only_user(out);
        g_.fold_batch_norm && u && u->op == "FusedBatchNorm" && u->inputs[0] == out &&
        u->attr<ops::BatchNormAttrs>().mode == ops::BatchNormMode::inference &&
        std::all_of(u->inputs.begin() + 1, u->inputs.end(),
                    [&](Value v) { return is_variable(v); })) {
      bn = u;
      out = Value{u, 0};
    }
    std::vector<std::string> inputs{in(n.inputs[0])};
    if (!bn) {
      inputs.push_back(in(n.inputs[1]));
      if (bias) inputs.push_back(in(bias->inputs[1]));
    } else {
      const int64_t k = w_shape[0], per = w_shape.numel() / k;
      const float* w = weight(*n.inputs[1].node).data<float>();
      const float* gamma = weight(*bn->inputs[1].node).data<float>();
      const float* beta = weight(*bn->inputs[2].node).data<float>();
      const float* mean = weight(*bn->inputs[3].node).data<float>();
      const float* var = weight(*bn->inputs[4].node).data<float>();
      const float* b = bias ? weight(*bias->inputs[1].node).data<float>() : nullptr;
      const double eps = bn->attr<ops::BatchNormAttrs>().epsilon;
      std::vector<float> folded_w(static_cast<size_t>(w_shape.numel())),
          folded_b(static_cast<size_t>(k));
      for (int64_t o = 0; o < k; ++o) {
        const double s = gamma[o] / std::sqrt(static_cast<double>(var[o]) + eps);
        for (int64_t i = 0; i < per; ++i)
          folded_w[o * per + i] = static_cast<float>(w[o * per + i] * s);
        folded_b[o] = static_cast<float>(((b ? b[o] : 0.0) - mean[o]) * s + beta[o]);
      }
      inputs.push_back(floats(onnx_, n.name + "/folded_weights", w_shape.dims(), folded_w));
      inputs.push_back(floats(onnx_, n.name + "/folded_bias", {k}, folded_b));
      ++folded_;
    }
    if (bias) done_.insert(bias);
    if (bn) done_.insert(bn);
    onnx_.add_node("Conv", inputs, {name_of(out)}, attrs, n.name);
  }

  void bias_add(const Node& n) {
    const Value b = n.inputs[1];
    std::string bias = in(b);
    if (n.inputs[0].shape().rank() == 4) {  // (C) along axis 1 of NCHW: as (C, 1, 1)
      onnx_.add_node("Unsqueeze", {bias, ints(onnx_, n.name + "/axes", {1, 2})}, {n.name + "/bias"},
                     {}, n.name + "/Unsqueeze");
      bias = n.name + "/bias";
    }
    simple("Add", n, {in(n.inputs[0]), bias});
  }

  void batch_norm(const Node& n) {
    const auto& a = n.attr<ops::BatchNormAttrs>();
    if (a.mode != ops::BatchNormMode::inference) unsupported(n, "normalizes in training mode");
    for (int i = 1; i < 3; ++i)
      if (!users(n.output(i)).empty()) unsupported(n, "has its batch statistics read");
    simple("BatchNormalization", n,
           {in(n.inputs[0]), in(n.inputs[1]), in(n.inputs[2]), in(n.inputs[3]), in(n.inputs[4])},
           {{"epsilon", a.epsilon}});
  }

  void reduce_sum(const Node& n) {
    const auto& a = n.attr<ops::ReduceSumAttrs>();
    std::vector<int64_t> axes;
    const int rank = n.inputs[0].shape().rank();
    for (int axis : a.axes) {
      const int k = axis < 0 ? axis + rank : axis;
      if (k == 0) unsupported(n, "sums over the batch axis");
      axes.push_back(k);
    }
    simple("ReduceSum", n, {in(n.inputs[0]), ints(onnx_, n.name + "/axes", axes)},
           {{"keepdims", int64_t{a.keep_dims == ops::KeepDims::yes}}});
  }

  // The batch stays the first axis (0: copied from the input, whatever N is).
  void reshape(const Node& n) {
    const Shape& out = n.outputs[0].shape;
    if (out.rank() < 1 || out[0] != n.inputs[0].shape()[0])
      unsupported(n, "changes the batch axis");
    std::vector<int64_t> shape = out.dims();
    shape[0] = 0;
    simple("Reshape", n, {in(n.inputs[0]), ints(onnx_, n.name + "/shape", shape)});
  }

  void matmul(const Node& n) {
    const auto& a = n.attr<ops::MatMulAttrs>();
    if (a.transpose_a == ops::Transpose::yes) unsupported(n, "transposes the batch");
    if (a.transpose_b == ops::Transpose::no)
      return simple("MatMul", n, {in(n.inputs[0]), in(n.inputs[1])});
    simple("Gemm", n, {in(n.inputs[0]), in(n.inputs[1])}, {{"transB", int64_t{1}}});
  }

  void pool(const Node& n) {
    const auto& a = n.attr<ops::PoolAttrs>();
    std::vector<OnnxAttr> attrs{{"kernel_shape", std::vector<int64_t>{a.ksize[0], a.ksize[1]}},
                                {"strides", std::vector<int64_t>{a.strides[0], a.strides[1]}},
                                {"pads", pads_of(ops::pool_padding(n.inputs[0].shape(), a))}};
    if (n.op == "MaxPool") return simple("MaxPool", n, {in(n.inputs[0])}, attrs);
    attrs.push_back({"count_include_pad", int64_t{0}});  // divide by the real elements
    simple("AveragePool", n, {in(n.inputs[0])}, attrs);
  }

  // TensorFlow's alpha multiplies the plain sum; ONNX's is divided by the window size.
  void lrn(const Node& n) {
    const auto& a = n.attr<ops::LRNAttrs>();
    const int64_t size = 2 * a.depth_radius + 1;
    simple("LRN", n, {in(n.inputs[0])},
           {{"size", size},
            {"alpha", a.alpha * static_cast<float>(size)},
            {"beta", a.beta},
            {"bias", a.bias}});
  }

  const OnnxGraph& g_;
  std::string input_name_;
  OnnxModel& onnx_;
  std::map<std::pair<Node*, int>, std::vector<Node*>> users_;
  std::set<const Node*> done_;
  std::set<std::string> initialized_;
  int folded_ = 0;
};

std::vector<int64_t> hwc(const Shape& chw) { return {-1, chw[1], chw[2], chw[0]}; }

}  // namespace

int add_inference_graph(const OnnxGraph& graph, const std::string& input_name, OnnxModel& onnx) {
  return Emitter(graph, input_name, onnx).run();
}

std::string add_preprocessing(const TransformSpec& spec, const Shape& image, OnnxType type,
                              const std::string& input, OnnxModel& onnx) {
  if (spec.crop == Crop::random || spec.random_flip || spec.max_brightness_delta != 0 ||
      spec.min_contrast != 1 || spec.max_contrast != 1)
    fail("the evaluation preprocessing is random (crop, flip, brightness or contrast)");
  auto step = [&](const std::string& op, const std::string& out,
                  const std::vector<std::string>& inputs, const std::vector<OnnxAttr>& attrs = {}) {
    const std::string name = "preprocess/" + out;
    onnx.add_node(op, inputs, {name}, attrs, name);
    return name;
  };
  std::string x = input;
  if (type == OnnxType::u8)
    x = step("Cast", "float", {x}, {{"to", int64_t{static_cast<int>(OnnxType::f32)}}});
  x = step("Transpose", "nchw", {x}, {{"perm", std::vector<int64_t>{0, 3, 1, 2}}});
  int64_t h = image[1], w = image[2];
  if (spec.padding > 0) {
    const int64_t p = spec.padding;
    x = step("Pad", "pad", {x, ints(onnx, "preprocess/pads", {0, 0, p, p, 0, 0, p, p})});
    h += 2 * p, w += 2 * p;
  }
  if (spec.crop == Crop::central) {
    const int64_t top = (h - spec.crop_height) / 2, left = (w - spec.crop_width) / 2;
    x = step("Slice", "crop",
             {x, ints(onnx, "preprocess/crop_starts", {top, left}),
              ints(onnx, "preprocess/crop_ends", {top + spec.crop_height, left + spec.crop_width}),
              ints(onnx, "preprocess/crop_axes", {2, 3})});
    h = spec.crop_height, w = spec.crop_width;
  }
  if (spec.scale != 1)
    x = step("Mul", "scale", {x, floats(onnx, "preprocess/scale_factor", {}, {spec.scale})});
  if (!spec.mean.empty()) {
    const int64_t c = static_cast<int64_t>(spec.mean.size());
    x = step("Sub", "centered", {x, floats(onnx, "preprocess/mean", {c, 1, 1}, spec.mean)});
    x = step("Div", "normalized", {x, floats(onnx, "preprocess/stddev", {c, 1, 1}, spec.stddev)});
  }
  if (spec.standardize) {  // (x - mean) / max(stddev, 1 / sqrt(numel)) over each whole image
    const std::vector<OnnxAttr> all{{"axes", std::vector<int64_t>{1, 2, 3}},
                                    {"keepdims", int64_t{1}}};
    const std::string mean = step("ReduceMean", "image_mean", {x}, all);
    const std::string d = step("Sub", "image_centered", {x, mean});
    const std::string var =
        step("ReduceMean", "image_variance", {step("Mul", "squares", {d, d})}, all);
    const double numel = static_cast<double>(image[0] * h * w);
    const std::string floor =
        floats(onnx, "preprocess/stddev_floor", {}, {static_cast<float>(1 / std::sqrt(numel))});
    const std::string stddev =
        step("Max", "image_divisor", {step("Sqrt", "image_stddev", {var}), floor});
    x = step("Div", "standardized", {d, stddev});
  }
  return x;
}

ExportResult export_onnx(const ExportConfig& config) {
  if (config.input_type != OnnxType::u8 && config.input_type != OnnxType::f32)
    fail("--input_type: expected uint8 or float32");
  InferenceModel m = open_inference_model(config.train_dir, config.checkpoint, config.use_ema);
  const std::string& prefix = m.checkpoint.data.prefix;
  const int64_t classes = static_cast<int64_t>(m.classes.size());
  Graph graph;
  Scope scope(graph);
  std::vector<int64_t> dims{1};
  for (int64_t d : m.input_shape.dims()) dims.push_back(d);
  const Value images = scope.placeholder("images", Shape(dims));
  ModelOutputs out;
  try {
    out = m.model->build(scope, images, static_cast<int>(classes), Mode::eval);
  } catch (const Error& e) {
    fail("cannot build model {} for checkpoint {}: {}", m.model->name, prefix, e.what());
  }
  if (out.logits.shape() != Shape{1, classes})
    fail("model {} gives logits of shape {}, expected (N, {}) for the {} classes of checkpoint {}",
         m.model->name, out.logits.shape().to_string(), classes, classes, prefix);

  OnnxModel onnx(m.model->name);
  onnx.add_input("images", config.input_type, hwc(m.image_shape));
  const std::string x =
      add_preprocessing(m.transform, m.image_shape, config.input_type, "images", onnx);
  ExportResult result;
  try {
    result.folded_batch_norms = add_inference_graph(
        {images, out.logits, [&](const std::string& v) -> const Tensor& { return m.weight(v); },
         config.fold_batch_norm},
        x, onnx);
  } catch (const Error& e) {
    fail("cannot export model {} ({}): {}", m.model->name, prefix, e.what());
  }
  onnx.add_node("Identity", {name_of(out.logits)}, {"logits"}, {}, "logits");
  onnx.add_node("Softmax", {"logits"}, {"probabilities"}, {{"axis", int64_t{-1}}}, "probabilities");
  onnx.add_output("logits", OnnxType::f32, {-1, classes});
  onnx.add_output("probabilities", OnnxType::f32, {-1, classes});

  const std::string file = std::filesystem::path(prefix).filename().string();
  onnx.add_metadata("classes", nlohmann::json(m.classes).dump());
  onnx.add_metadata("model", m.model->name);
  onnx.add_metadata("checkpoint", file);
  onnx.add_metadata("step", std::to_string(m.checkpoint.data.step));
  onnx.add_metadata("weights", m.ema ? "moving average" : "raw");
  onnx.add_metadata("input_layout", "NHWC");
  onnx.set_doc(fmt::format(
      "{} trained by tower ({}). Input 'images': {} NHWC (N, {}, {}, {}) pixels in [0, 255]; the "
      "preprocessing tower's eval applies is inside the graph. Outputs 'logits' and "
      "'probabilities' (N, {}); the class names are the metadata 'classes' (JSON).",
      m.model->name, file, config.input_type == OnnxType::u8 ? "uint8" : "float32",
      m.image_shape[1], m.image_shape[2], m.image_shape[0], classes));
  onnx.write(config.out);
  result.checkpoint = prefix;
  result.model = m.model->name;
  result.step = m.checkpoint.data.step;
  result.input_dims = hwc(m.image_shape);
  result.nodes = onnx.num_nodes();
  return result;
}

}  // namespace tower
