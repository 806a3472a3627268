// The op table: one row per registered op, and every op needs one (a test names the ops that
// lack it). A row's cases build the op on random inputs; each case runs
//   - forward: the CPU kernel against the row's plain-loop reference (reference_math.h,
//     reference_nn.h), unless the row says where the forward values are checked instead;
//   - gradient: central differences against the gradient rule (gradient_check.h), on the row's
//     first case, unless the row says why not (gradient ops, integer outputs...);
//   - backends: every other backend's kernel (CUDA) against the CPU kernel, same node, same
//     inputs; skipped with a message where there is no GPU.
// Adding an op: one row here (docs/adding_an_op.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>

#include "testing/gradient_check.h"
#include "testing/kernel_runner.h"
#include "testing/reference_math.h"
#include "testing/reference_nn.h"
#include "tower/core/device.h"
#include "tower/core/philox.h"
#include "tower/graph/op_registry.h"
#include "tower/kernels/kernel.h"
#include "tower/ops/activation.h"
#include "tower/ops/batch_norm.h"
#include "tower/ops/bias.h"
#include "tower/ops/conv.h"
#include "tower/ops/dropout.h"
#include "tower/ops/lrn.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"
#include "tower/ops/nn_loss.h"
#include "tower/ops/pool.h"

namespace tower {
namespace {

using testing::expect_kernels_close;
using testing::GradCheckOptions;
using testing::have_gpu;
using testing::random_labels;
using testing::run_kernel;

struct Case {
  std::string name;
  std::vector<Shape> inputs;
  std::function<Value(const Scope&, const std::vector<Value>&)> build;
  double tolerance = 1e-5;   // backends vs CPU, relative to max(1, |cpu value|)
  float low = -1, high = 1;  // input range
  int labels = -1;           // index of an i32 input of class labels in [0, classes)
  int32_t classes = 0;
  bool quantize = false;  // inputs rounded to multiples of 1/4, so that ties are common
  std::vector<std::pair<float, float>> ranges;  // per input, where given: overrides low, high
};

// Output 0 of `node` on host `inputs`, computed with plain loops.
using Reference = std::function<Tensor(const Node& node, const std::vector<Tensor>& inputs)>;

struct Row {
  std::string op;
  std::vector<Case> cases;
  Reference reference;
  double reference_tolerance = 1e-5;  // relative to max(1, |reference value|)
  std::string forward_checked_by;     // no reference: where the forward values are checked
  GradCheckOptions gradient;          // for the first case
  float gradient_gap = 0;             // first case's inputs pushed this far from 0 (kinks at 0)
  bool gradient_distinct = false;     // first case's inputs all distinct (max pooling: no ties)
  std::string no_gradient;            // why there is no finite-difference check
  std::string no_kernel;              // why there are no cases (ops the runtime materializes)
};

// A case's graph, its node and its host inputs (seeded by `seed`, which advances per input).
struct Built {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  const Node* node = nullptr;
  std::vector<Tensor> inputs;
};
Built build(const Case& c, uint64_t& seed);

// The rows, filled case by case (each case lands in the row of the op it builds).
class Table {
 public:
  void add(Case c) {
    uint64_t seed = 0;
    const std::string op = build(c, seed).node->op;
    row(op).cases.push_back(std::move(c));
  }
  Row& row(const std::string& op) {
    for (Row& r : rows_)
      if (r.op == op) return r;
    rows_.push_back(Row{op});
    return rows_.back();
  }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  std::vector<Row> rows_;
};

Shape pooled(const Shape& x, const ops::PoolAttrs& a) {
  return Shape{x[0], x[1], ops::axis_padding(x[2], a.ksize[0], a.strides[0], a.padding).out,
               ops::axis_padding(x[3], a.ksize[1], a.strides[1], a.padding).out};
}

// Cases of the ops beyond the element-wise, matmul and conv families.
void add_nn_cases(Table& all) {
  using ops::Padding;
  // Sums: one output per thread, one block per output, and blocks split into chunks; kept and
  // reduced axes interleaved.
  for (auto [shape, axes] : {std::pair{Shape{3, 5, 7}, std::vector<int>{}},
                             {Shape{300000}, {}},
                             {Shape{64, 40}, {0}},
                             {Shape{6, 2048}, {0}},
                             {Shape{4, 5, 6}, {1}},
                             {Shape{4, 5, 6}, {0, 2}},
                             {Shape{50, 3000}, {-1}},
                             {Shape{2, 1, 3}, {1}},
                             {Shape{3, 40000}, {1}}}) {
    all.add({"reduce_sum", {shape}, [axes](auto& s, auto& v) {
               return axes.empty() ? ops::reduce_sum(s, v[0]) : ops::reduce_sum(s, v[0], axes);
             }});
  }
  for (auto [from, to] : {std::pair{Shape{8, 3, 5, 5}, Shape{3, 1, 1}},
                          {Shape{4, 6}, Shape{6}},
                          {Shape{2, 3, 4}, Shape{1, 3, 1}},
                          {Shape{5, 7}, Shape{5, 7}},
                          {Shape{9, 4}, Shape{}}})
    all.add({"sum_to_shape", {from}, [to](auto& s, auto& v) {
               return ops::sum_to_shape(s, v[0], to);
             }});
  for (auto [from, to] : {std::pair{Shape{3, 1}, Shape{2, 3, 4}},
                          {Shape{5}, Shape{4, 5}},
                          {Shape{}, Shape{3, 3}},
                          {Shape{2, 1, 3}, Shape{2, 4, 3}}})
    all.add({"broadcast_to", {from}, [to](auto& s, auto& v) {
               return ops::broadcast_to(s, v[0], to);
             }});
  for (const Shape& shape : {Shape{1000}, Shape{70000}, Shape{1, 1}})
    all.add({"l2_loss", {shape}, [](auto& s, auto& v) { return ops::l2_loss(s, v[0]); }});

  // Pooling: symmetric SAME (9 pixels, k 3, stride 2), SAME with the odd pixel after (8 pixels),
  // VALID, overlapping stride-1 windows; quantized inputs make ties (the first maximum wins).
  const Shape x9{2, 3, 9, 9}, x8{2, 3, 8, 8};
  for (auto [attrs, x] : {std::pair{ops::PoolAttrs{{3, 3}, {2, 2}, Padding::same}, x9},
                          {ops::PoolAttrs{{3, 3}, {2, 2}, Padding::same}, x8},
                          {ops::PoolAttrs{{3, 3}, {2, 2}, Padding::valid}, x9},
                          {ops::PoolAttrs{{2, 2}, {2, 2}, Padding::valid}, x8},
                          {ops::PoolAttrs{{3, 3}, {1, 1}, Padding::same}, x8},
                          {ops::PoolAttrs{{2, 3}, {1, 2}, Padding::same}, Shape{1, 2, 7, 6}}}) {
    const Shape y = pooled(x, attrs);
    for (bool quantize : {false, true}) {
      all.add({.name = "max_pool",
               .inputs = {x},
               .build = [attrs](auto& s, auto& v) { return ops::max_pool(s, v[0], attrs); },
               .quantize = quantize});
      all.add(
          {.name = "max_pool_grad",
           .inputs = {x, y},
           .build = [attrs](auto& s, auto& v) { return ops::max_pool_grad(s, v[0], v[1], attrs); },
           .quantize = quantize});
    }
    all.add({"avg_pool", {x}, [attrs](auto& s, auto& v) { return ops::avg_pool(s, v[0], attrs); }});
    all.add({"avg_pool_grad", {y}, [attrs, x](auto& s, auto& v) {
               return ops::avg_pool_grad(s, v[0], x, attrs);
             }});
  }

  // LRN: the CIFAR-10 model's parameters, a window wider than the channels, a general beta.
  for (auto attrs :
       {ops::LRNAttrs{4, 1.0f, 0.001f / 9.0f, 0.75f}, ops::LRNAttrs{5, 1.0f, 0.1f, 0.5f},
        ops::LRNAttrs{2, 2.0f, 0.05f, 0.6f}, ops::LRNAttrs{9, 1.0f, 0.2f, 0.75f}}) {
    const Shape x{2, 12, 5, 4};
    all.add({.name = "lrn",
             .inputs = {x},
             .build = [attrs](auto& s, auto& v) { return ops::lrn(s, v[0], attrs); },
             .tolerance = 1e-4,
             .low = -2,
             .high = 2});
    all.add({.name = "lrn_grad",
             .inputs = {x, x},
             .build = [attrs](auto& s, auto& v) { return ops::lrn_grad(s, v[0], v[1], attrs); },
             .tolerance = 1e-4,
             .low = -2,
             .high = 2});
  }

  // The softmax family: rows shorter and longer than a block's threads.
  for (const Shape& logits : {Shape{6, 10}, Shape{4, 1000}}) {
    const Shape labels{logits[0]};
    all.add({.name = "softmax",
             .inputs = {logits},
             .build = [](auto& s, auto& v) { return ops::softmax(s, v[0]); },
             .low = -5,
             .high = 5});
    all.add({"softmax_grad", {logits, logits}, [](auto& s, auto& v) {
               return s.op("SoftmaxGrad", {v[0], v[1]});
             }});
    all.add({.name = "sparse_xent",
             .inputs = {logits, labels},
             .build =
                 [](auto& s, auto& v) {
                   return ops::sparse_softmax_cross_entropy_with_logits(s, v[0], v[1]);
                 },
             .low = -5,
             .high = 5,
             .labels = 1,
             .classes = static_cast<int32_t>(logits[1])});
    all.add({.name = "sparse_xent_grad",
             .inputs = {logits, labels, labels},
             .build =
                 [](auto& s, auto& v) {
                   return s.op("SparseSoftmaxXentGrad", {v[0], v[1], v[2]});
                 },
             .low = -5,
             .high = 5,
             .labels = 1,
             .classes = static_cast<int32_t>(logits[1])});
    for (bool quantize : {false, true}) {
      all.add({.name = "argmax",
               .inputs = {logits},
               .build = [](auto& s, auto& v) { return ops::argmax(s, v[0]); },
               .quantize = quantize});
      for (int k : {1, 3})
        all.add({.name = "in_top_k",
                 .inputs = {logits, labels},
                 .build = [k](auto& s, auto& v) { return ops::in_top_k(s, v[0], v[1], k); },
                 .labels = 1,
                 .classes = static_cast<int32_t>(logits[1]),
                 .quantize = quantize});
    }
  }
  all.add({"softmax_rank3", {Shape{3, 4, 300}}, [](auto& s, auto& v) {
             return ops::softmax(s, v[0]);
           }});

  // Dropout: the mask must be the CPU's bit for bit (a length that is not a multiple of 4, and
  // one longer than the CPU's parallel blocks).
  for (const Shape& shape : {Shape{3, 1001}, Shape{40003}}) {
    all.add({.name = "dropout",
             .inputs = {shape},
             .build =
                 [](auto& s, auto& v) {
                   return s.op("Dropout", {v[0]}, ops::DropoutAttrs{0.7f, 42, 5, -1});
                 },
             .tolerance = 0});
    all.add(
        {.name = "dropout_grad",
         .inputs = {shape},
         .build =
             [](auto& s, auto& v) {
               return s.op("DropoutGrad", {v[0]}, ops::DropoutAttrs{0.6f, 1234567890123ull, 3, 17});
             },
         .tolerance = 0});
  }

  // Batch norm, NCHW and NC, training and inference; variances positive.
  const std::pair<float, float> any{-1.0f, 1.0f}, positive{0.1f, 1.5f};
  for (const Shape& x : {Shape{4, 3, 5, 5}, Shape{6, 7}}) {
    const Shape c{x[1]};
    for (auto mode : {ops::BatchNormMode::training, ops::BatchNormMode::inference}) {
      const ops::BatchNormAttrs attrs{1e-3f, 0.99f, mode};
      all.add({.name = "fused_batch_norm",
               .inputs = {x, c, c, c, c},
               .build = [attrs](auto& s, auto& v) { return s.op("FusedBatchNorm", v, attrs); },
               .tolerance = 1e-4,
               .ranges = {any, any, any, any, positive}});
      all.add({.name = "fused_batch_norm_grad",
               .inputs = {x, x, c, c, c, c},
               .build = [attrs](auto& s, auto& v) { return s.op("FusedBatchNormGrad", v, attrs); },
               .tolerance = 1e-4,
               .ranges = {any, any, any, any, any, positive}});
    }
  }
  all.add({"assign_moving_average", {Shape{37}, Shape{37}}, [](auto& s, auto& v) {
             Value variable =
                 s.get_variable("moving", Shape{37}, Initializer::zeros(), Trainable::no);
             return ops::assign_moving_average(s, variable, v[1], 0.99f);
           }});
}

void add_cases(Table& all) {
  using ops::Transpose;
  const Shape x4{2, 3, 9, 9}, w{4, 3, 3, 3};
  auto conv = [](int64_t stride, ops::Padding padding) {
    return ops::Conv2DAttrs{{stride, stride}, padding};
  };
  for (Case c : std::vector<Case>{
           {"relu", {Shape{3, 5, 7}}, [](auto&s, auto&v) { return ops::relu(s, v[0]); }},
           {"elu", {Shape{3, 5, 7}}, [](auto&s, auto&v) { return ops::elu(s, v[0]); }},
           {"relu6", {Shape{3, 5, 7}}, [](auto&s, auto&v) { return ops::relu6(s, v[0]); }},
           {.name = "relu6_both_bounds",
           .inputs = {Shape{3, 5, 7}},
           .build = [](auto&s, auto&v) { return ops::relu6(s, v[0]); },
           .low = -3,
           .high = 9},
           {"sigmoid", {Shape{3, 5, 7}}, [](auto&s, auto&v) { return ops::sigmoid(s, v[0]); }},
           {"tanh", {Shape{3, 5, 7}}, [](auto&s, auto&v) { return ops::tanh(s, v[0]); }},
           {"relu_grad",
            {Shape{3, 5, 7}, Shape{3, 5, 7}},
            [](auto&s, auto&v) { return ops::relu_grad(s, v[0], v[1]); }},
           {.name = "relu6_grad",
           .inputs = {Shape{3, 5, 7}, Shape{3, 5, 7}},
           .build = [](auto&s, auto&v) { return ops::relu6_grad(s, v[0], v[1]); },
           .ranges = {{-1, 1}, {-1, 7}}},
           {"elu_grad",
            {Shape{3, 5, 7}, Shape{3, 5, 7}},
            [](auto&s, auto&v) { return ops::elu_grad(s, v[0], v[1]); }},
           {"sigmoid_grad",
            {Shape{3, 5, 7}, Shape{3, 5, 7}},
            [](auto&s, auto&v) { return ops::sigmoid_grad(s, v[0], v[1]); }},
           {"tanh_grad",
            {Shape{3, 5, 7}, Shape{3, 5, 7}},
            [](auto&s, auto&v) { return ops::tanh_grad(s, v[0], v[1]); }},
           {"add",
            {Shape{4, 6, 5}, Shape{4, 6, 5}},
            [](auto&s, auto&v) { return ops::add(s, v[0], v[1]); }},
           {"sub_trailing",
            {Shape{4, 6, 5}, Shape{5}},
            [](auto&s, auto&v) { return ops::sub(s, v[0], v[1]); }},
           {"mul_scalar",
            {Shape{4, 6, 5}, Shape{}},
            [](auto&s, auto&v) { return ops::mul(s, v[0], v[1]); }},
           {"scale", {Shape{1000}}, [](auto&s, auto&v) { return ops::scale(s, v[0], -2.5f); }},
           {"square", {Shape{1000}}, [](auto&s, auto&v) { return ops::square(s, v[0]); }},
           {"add_n",
            {Shape{17, 3}, Shape{17, 3}, Shape{17, 3}},
            [](auto&s, auto&v) { return ops::add_n(s, v); }},
           {"reshape",
            {Shape{4, 6}},
            [](auto&s, auto&v) { return ops::reshape(s, v[0], Shape{3, 8}); }},
           {"bias_add_nchw",
            {x4, Shape{3}},
            [](auto&s, auto&v) { return ops::bias_add(s, v[0], v[1]); }},
           {"bias_add_nc",
            {Shape{5, 7}, Shape{7}},
            [](auto&s, auto&v) { return ops::bias_add(s, v[0], v[1]); }},
           {"bias_add_grad", {x4}, [](auto&s, auto&v) { return ops::bias_add_grad(s, v[0]); }},
       })
    all.add(std::move(c));
  for (auto ta : {Transpose::no, Transpose::yes})
    for (auto tb : {Transpose::no, Transpose::yes})
      all.add({"matmul",
               {ta == Transpose::yes ? Shape{5, 7} : Shape{7, 5},
                tb == Transpose::yes ? Shape{3, 5} : Shape{5, 3}},
               [ta, tb](auto& s, auto& v) { return ops::matmul(s, v[0], v[1], ta, tb); },
               1e-4});
  // Stride 2 SAME on 9 pixels pads 1 before and 1 after; on 8 pixels, 0 before and 1 after (the
  // explicitly padded path).
  // Grouped (2 groups of 3 channels into 2 groups of 2), depthwise (6 channels, one filter
  // each, times 2), and dilated (SAME and VALID, strided and not) convolutions.
  auto grouped = [](int64_t groups, int64_t stride, int64_t dilation, ops::Padding padding) {
    ops::Conv2DAttrs a{{stride, stride}, padding};
    a.groups = groups;
    a.dilations = {dilation, dilation};
    return a;
  };
  const Shape x6{2, 6, 9, 9};
  for (auto [attrs, x, w] : {std::tuple{conv(1, ops::Padding::same), x4, w},
                             {conv(2, ops::Padding::same), x4, w},
                             {conv(2, ops::Padding::same), Shape{2, 3, 8, 8}, w},
                             {conv(1, ops::Padding::valid), x4, w},
                             {grouped(2, 1, 1, ops::Padding::same), x6, Shape{4, 3, 3, 3}},
                             {grouped(6, 1, 1, ops::Padding::same), x6, Shape{6, 1, 3, 3}},
                             {grouped(6, 2, 1, ops::Padding::same), x6, Shape{12, 1, 3, 3}},
                             {grouped(1, 1, 2, ops::Padding::same), x4, w},
                             {grouped(1, 2, 2, ops::Padding::valid), x4, w},
                             {grouped(6, 1, 3, ops::Padding::same), x6, Shape{6, 1, 3, 3}}}) {
    const auto [ph, pw] = ops::conv_padding(x, w, attrs);
    const Shape y{x[0], w[0], ph.out, pw.out};
    all.add({"conv2d",
             {x, w},
             [attrs](auto& s, auto& v) { return ops::conv2d(s, v[0], v[1], attrs); },
             1e-4});
    all.add({"conv2d_backprop_input",
             {w, y},
             [attrs, x](auto& s, auto& v) {
               return ops::conv2d_backprop_input(s, v[0], v[1], x, attrs);
             },
             1e-4});
    all.add({"conv2d_backprop_filter",
             {x, y},
             [attrs, w](auto& s, auto& v) {
               return ops::conv2d_backprop_filter(s, v[0], v[1], w, attrs);
             },
             1e-4});
  }
  add_nn_cases(all);
}

// Host inputs of a case (seeded by `seed`, which advances per input).
std::vector<Tensor> make_inputs(const Case& c, uint64_t& seed) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Shape& shape = c.inputs[i];
    if (static_cast<int>(i) == c.labels) {
      inputs.push_back(random_labels(shape, seed++, c.classes));
      continue;
    }
    const auto [low, high] = i < c.ranges.size() ? c.ranges[i] : std::pair{c.low, c.high};
    inputs.push_back(testing::random_tensor(shape, seed++, low, high));
    if (c.quantize)
      for (int64_t j = 0; j < inputs.back().numel(); ++j) {
        float& v = inputs.back().data<float>()[j];
        v = std::round(v * 4.0f) / 4.0f;
      }
  }
  return inputs;
}

Built build(const Case& c, uint64_t& seed) {
  Built b;
  Scope scope(*b.graph);
  std::vector<Value> placeholders;
  b.inputs = make_inputs(c, seed);
  for (size_t i = 0; i < c.inputs.size(); ++i)
    placeholders.push_back(
        scope.placeholder(fmt::format("x{}", i), c.inputs[i], b.inputs[i].dtype()));
  b.node = c.build(scope, placeholders).node;
  return b;
}

Tensor from_double(const Shape& shape, const std::vector<double>& values) {
  Tensor t(shape, DType::f32);
  for (size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = static_cast<float>(values[i]);
  return t;
}
Reference elementwise(double (*f)(double)) {
  return
      [f](const Node&, const std::vector<Tensor>& in) { return testing::map_reference(in[0], f); };
}
Reference binary(double (*f)(double, double)) {
  return [f](const Node&, const std::vector<Tensor>& in) {
    return from_double(in[0].shape(), testing::ref_binary(in[0], in[1], f));
  };
}
// Sums over the axes the op reduces (ReduceSum, SumToShape).
Tensor reduce_reference(const Node& node, const std::vector<Tensor>& in) {
  const std::vector<char> axes = ops::summed_axes(node);
  return from_double(node.outputs[0].shape,
                     testing::ref_reduce_sum(in[0], std::vector<bool>(axes.begin(), axes.end())));
}

const char* const kGradientOp =
    "a gradient op: its values are checked by its forward op's "
    "finite-difference check";

// What the cases cannot say: references, gradient settings and the reasons for exceptions.
std::vector<Row> table() {
  Table t;
  add_cases(t);
  for (const char* op : {"Placeholder", "Variable", "Constant"}) {
    t.row(op).no_kernel = "a graph source, materialized by the runtime";
    t.row(op).no_gradient = "a graph source";
  }
  // activation
  t.row("Relu").reference = elementwise([](double x) { return x > 0 ? x : 0.0; });
  t.row("Elu").reference = elementwise([](double x) { return x > 0 ? x : std::expm1(x); });
  t.row("Sigmoid").reference = elementwise([](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  t.row("Tanh").reference = elementwise([](double x) { return std::tanh(x); });
  t.row("Relu6").reference = elementwise([](double x) { return std::min(std::max(x, 0.0), 6.0); });
  t.row("Relu6Grad").reference = [](const Node&, const std::vector<Tensor>& in) {
    return from_double(in[0].shape(), testing::ref_binary(in[0], in[1], [](double dy, double y) {
                         return y > 0 && y < 6 ? dy : 0.0;
                       }));
  };
  t.row("Relu").gradient_gap = t.row("Elu").gradient_gap = t.row("Relu6").gradient_gap = 0.05f;
  // math
  t.row("Add").reference = binary([](double a, double b) { return a + b; });
  t.row("Sub").reference = binary([](double a, double b) { return a - b; });
  t.row("Mul").reference = binary([](double a, double b) { return a * b; });
  t.row("Scale").reference = [](const Node& node, const std::vector<Tensor>& in) {
    const double factor = node.attr<ops::ScaleAttrs>().factor;
    return testing::map_reference(in[0], [factor](double x) { return factor * x; });
  };
  t.row("Square").reference = elementwise([](double x) { return x * x; });
  t.row("AddN").reference = [](const Node&, const std::vector<Tensor>& in) {
    std::vector<double> sum(static_cast<size_t>(in[0].numel()), 0.0);
    for (const Tensor& x : in)
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += x.data<float>()[i];
    return from_double(in[0].shape(), sum);
  };
  t.row("Reshape").reference = [](const Node& node, const std::vector<Tensor>& in) {
    return from_double(node.outputs[0].shape, testing::to_double(in[0]));
  };
  t.row("ReduceSum").reference = reduce_reference;
  t.row("SumToShape").reference = reduce_reference;
  t.row("ReduceSum").reference_tolerance = t.row("SumToShape").reference_tolerance = 1e-4;
  t.row("L2Loss").reference = [](const Node&, const std::vector<Tensor>& in) {
    double sum = 0;
    for (double v : testing::to_double(in[0])) sum += v * v / 2;
    return from_double(Shape{}, {sum});
  };
  t.row("BroadcastTo").forward_checked_by = "math_test.cc (MathTest.BroadcastTo*)";
  t.row("MatMul").reference = [](const Node& node, const std::vector<Tensor>& in) {
    const auto& a = node.attr<ops::MatMulAttrs>();
    return from_double(node.outputs[0].shape,
                       testing::ref_matmul(in[0], in[1], a.transpose_a == ops::Transpose::yes,
                                           a.transpose_b == ops::Transpose::yes));
  };
  t.row("MatMul").reference_tolerance = 1e-4;
  // nn
  t.row("BiasAdd").reference = [](const Node&, const std::vector<Tensor>& in) {
    return testing::bias_add_reference(in[0], in[1]);
  };
  t.row("BiasAddGrad").reference = [](const Node& node, const std::vector<Tensor>& in) {
    std::vector<bool> reduced(static_cast<size_t>(in[0].shape().rank()), true);
    reduced[static_cast<size_t>(ops::bias_channel_axis(in[0].shape().rank()))] = false;
    return from_double(node.outputs[0].shape, testing::ref_reduce_sum(in[0], reduced));
  };
  t.row("BiasAddGrad").reference_tolerance = 1e-4;
  t.row("Conv2D").reference = [](const Node& node, const std::vector<Tensor>& in) {
    return testing::conv2d_reference(in[0], in[1], node.attr<ops::Conv2DAttrs>());
  };
  t.row("Conv2D").reference_tolerance = 1e-4;
  t.row("MaxPool").reference = [](const Node& node, const std::vector<Tensor>& in) {
    return testing::pool_reference(in[0], node.attr<ops::PoolAttrs>(), true);
  };
  t.row("AvgPool").reference = [](const Node& node, const std::vector<Tensor>& in) {
    return testing::pool_reference(in[0], node.attr<ops::PoolAttrs>(), false);
  };
  t.row("MaxPool").gradient_distinct = true;
  t.row("LRN").reference = [](const Node& node, const std::vector<Tensor>& in) {
    return testing::lrn_reference(in[0], node.attr<ops::LRNAttrs>());
  };
  t.row("LRN").reference_tolerance = 1e-4;
  // losses and metrics
  t.row("Softmax").reference = [](const Node&, const std::vector<Tensor>& in) {
    return from_double(in[0].shape(), testing::ref_softmax(in[0]));
  };
  t.row("SparseSoftmaxCrossEntropyWithLogits").reference = [](const Node&,
                                                              const std::vector<Tensor>& in) {
    return from_double(Shape{in[0].shape()[0]}, testing::ref_sparse_xent(in[0], in[1]));
  };
  t.row("ArgMax").forward_checked_by = "nn_loss_test.cc (ArgMax cases)";
  t.row("InTopK").forward_checked_by = "nn_loss_test.cc (InTopK cases)";
  t.row("ArgMax").no_gradient = t.row("InTopK").no_gradient = "an integer / 0-1 metric";
  // dropout and batch norm
  t.row("Dropout").forward_checked_by = "dropout_test.cc (mask statistics, scaling)";
  t.row("FusedBatchNorm").forward_checked_by = "batch_norm_test.cc (against ref_batch_norm)";
  t.row("FusedBatchNorm").gradient.no_grad = {3, 4};  // the moving statistics (training mode)
  t.row("FusedBatchNorm").gradient.tolerance = 2e-2;
  t.row("AssignMovingAverage").forward_checked_by = "batch_norm_test.cc (moving averages)";
  t.row("AssignMovingAverage").no_gradient = "updates a variable";
  // Gradient ops: made by their forward op's gradient rule, which its finite-difference check
  // tests through them.
  for (const char* op :
       {"ReluGrad", "Relu6Grad", "EluGrad", "SigmoidGrad", "TanhGrad", "BiasAddGrad",
        "Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPoolGrad", "AvgPoolGrad", "LRNGrad",
        "SoftmaxGrad", "SparseSoftmaxXentGrad", "FusedBatchNormGrad", "DropoutGrad"}) {
    if (!t.row(op).reference) t.row(op).forward_checked_by = kGradientOp;
    t.row(op).no_gradient = "a gradient op";
  }
  t.row("AvgPoolGrad").no_gradient = "";  // linear: its gradient rule is AvgPool
  return t.rows();
}

const std::vector<Row>& rows() {
  static const std::vector<Row> all = table();
  return all;
}
const Row* find_row(const std::string& op) {
  for (const Row& r : rows())
    if (r.op == op) return &r;
  return nullptr;
}

// Every registered op has a row, and the row says how each of its checks is done.
TEST(OpTableTest, EveryRegisteredOpHasARow) {
  for (const std::string& op : registered_ops()) {
    const Row* r = find_row(op);
    if (r == nullptr) {
      ADD_FAILURE() << op << " has no row in tests/ops/op_table_test.cc (see docs/adding_an_op.md)";
      continue;
    }
    if (r->no_kernel.empty()) {
      EXPECT_FALSE(r->cases.empty()) << op << ": its row has no cases";
    }
    if (!r->cases.empty()) {
      EXPECT_TRUE(r->reference || !r->forward_checked_by.empty())
          << op << ": its row has no reference (nor says where its forward values are checked)";
    }
    const bool differentiable = static_cast<bool>(get_op(op).grad);
    EXPECT_TRUE(differentiable == r->no_gradient.empty())
        << op
        << (differentiable ? ": has a gradient rule, but its row skips the gradient check"
                           : ": has no gradient rule: its row must say why (no_gradient)");
  }
  for (const Row& r : rows())
    EXPECT_NE(find_op(r.op), nullptr) << "a row for " << r.op << ", which is not registered";
}

// Every kernel of every device kind is exercised by its op's row.
TEST(OpTableTest, EveryKernelHasCases) {
  for (DeviceKind kind : {DeviceKind::cpu, DeviceKind::cuda})
    for (const std::string& op : registered_kernels(kind)) {
      if (is_fused_kernel(op)) continue;  // tests/runtime/fusion_test.cc
      const Row* r = find_row(op);
      EXPECT_TRUE(r != nullptr && !r->cases.empty())
          << op << " has a " << Device{kind, 0}.to_string() << " kernel but no cases in its row";
    }
}

TEST(OpTableTest, ForwardMatchesReference) {
  for (const Row& r : rows()) {
    if (!r.reference) continue;
    uint64_t seed = 1;
    for (const Case& c : r.cases) {
      SCOPED_TRACE(r.op + " / " + c.name);
      Built b = build(c, seed);
      const std::vector<Tensor> cpu = run_kernel(*b.node, Device{}, b.inputs);
      const Tensor want = r.reference(*b.node, b.inputs);
      ASSERT_EQ(cpu[0].numel(), want.numel());
      EXPECT_LE(testing::max_relative_error(cpu[0].reshape(want.shape()), want),
                r.reference_tolerance);
    }
  }
}

TEST(OpTableTest, GradientsMatchFiniteDifferences) {
  for (const Row& r : rows()) {
    if (!r.no_gradient.empty() || r.cases.empty()) continue;
    SCOPED_TRACE(r.op + " / " + r.cases[0].name);
    const Case& c = r.cases[0];
    uint64_t seed = 100;
    std::vector<Tensor> inputs = make_inputs(c, seed);
    GradCheckOptions options = r.gradient;
    if (c.labels >= 0) options.no_grad.insert(c.labels);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (static_cast<int>(i) == c.labels) continue;
      if (r.gradient_gap > 0)
        inputs[i] = testing::away_from_zero(std::move(inputs[i]), r.gradient_gap);
      if (r.gradient_distinct) inputs[i] = testing::distinct_values(inputs[i].shape(), seed++);
    }
    testing::check_gradients(c.build, inputs, options);
  }
}

// On every machine: each case builds and its CPU kernel runs.
TEST(OpTableTest, EveryCaseRunsOnTheCpu) {
  for (const Row& r : rows()) {
    uint64_t seed = 1;
    for (const Case& c : r.cases) {
      SCOPED_TRACE(r.op + " / " + c.name);
      Built b = build(c, seed);
      EXPECT_EQ(b.node->op, r.op);
      EXPECT_EQ(run_kernel(*b.node, Device{}, b.inputs).size(), b.node->outputs.size());
    }
  }
}

// The GPU outputs against the CPU ones: class indices exactly, floats within the case's
// tolerance relative to max(1, |cpu value|).
TEST(OpTableTest, EveryGpuKernelMatchesTheCpuKernel) {
  std::string why;
  if (!have_gpu(why)) GTEST_SKIP() << why;
  const Device gpu{DeviceKind::cuda, 0};
  for (const Row& r : rows()) {
    uint64_t seed = 1;
    for (const Case& c : r.cases) {
      SCOPED_TRACE(r.op + " / " + c.name);
      Built b = build(c, seed);
      expect_kernels_close(run_kernel(*b.node, Device{}, b.inputs),
                           run_kernel(*b.node, gpu, b.inputs), c.tolerance, b.node->op);
    }
  }
}

// --no-deterministic lets cuDNN choose its fastest convolutions (some accumulate with atomics):
// still the CPU's results within tolerance. The deterministic ones repeat bit for bit.
TEST(OpTableTest, ConvolutionAlgorithmsInBothModes) {
  std::string why;
  if (!have_gpu(why)) GTEST_SKIP() << why;
  const Device gpu{DeviceKind::cuda, 0};
  for (const Row& r : rows()) {
    if (r.op.rfind("Conv2D", 0) != 0) continue;
    uint64_t seed = 1;
    for (const Case& c : r.cases) {
      SCOPED_TRACE(r.op + " / " + c.name);
      Built b = build(c, seed);
      const std::vector<Tensor> cpu = run_kernel(*b.node, Device{}, b.inputs);
      expect_kernels_close(cpu, run_kernel(*b.node, gpu, b.inputs, false), c.tolerance, r.op);
      const std::vector<Tensor> first = run_kernel(*b.node, gpu, b.inputs);
      const std::vector<Tensor> second = run_kernel(*b.node, gpu, b.inputs);
      EXPECT_EQ(std::memcmp(first[0].raw_data(), second[0].raw_data(), first[0].nbytes()), 0)
          << r.op;
    }
  }
}

#ifdef TOWER_HAVE_CUDA
// Every op with a CPU kernel has a CUDA one: a new CPU kernel needs its GPU twin (or an entry here
// saying it still lacks one).
TEST(OpTableTest, OpsWithoutAGpuKernelAreTheKnownOnes) {
  std::vector<std::string> missing;
  for (const std::string& op : registered_kernels(DeviceKind::cpu))
    if (!is_fused_kernel(op) && find_kernel(op, DeviceKind::cuda) == nullptr) missing.push_back(op);
  const std::vector<std::string> expected = {};
  EXPECT_EQ(missing, expected);
}
#endif

}  // namespace
}  // namespace tower
