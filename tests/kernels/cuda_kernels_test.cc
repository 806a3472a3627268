// GPU kernels against the CPU kernels: the same node on the same inputs, forward ops and gradient
// ops alike. Compiled in every build; skipped with a message where there is no CUDA backend or no
// GPU (the GPU machine runs them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "testing/gradient_check.h"
#include "tower/core/device.h"
#include "tower/core/philox.h"
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

// Buffers that outlive the views wrapping them.
struct Buffers {
  std::vector<Tensor> storage;
  // A zero-filled buffer for `spec` in `layout` (a blocked layout may need more bytes than plain),
  // viewed with the spec's shape.
  Tensor make(const TensorSpec& spec, const Layout& layout, Device device) {
    const auto bytes = static_cast<int64_t>(std::max<size_t>(layout.bytes(spec), 1));
    storage.emplace_back(Shape{bytes}, DType::u8, device);
    return Tensor::wrap(storage.back().raw_data(), spec.shape, spec.dtype, device);
  }
};

// Binds and runs `kernel` once on `io`, with its scratch.
void run_once(Kernel& kernel, KernelIO& io, Device device) {
  Tensor scratch(Shape{static_cast<int64_t>(kernel.scratch_bytes())}, DType::u8, device);
  io.scratch = scratch.raw_data();
  kernel.bind(io);
  kernel.run(io);
}

// `t` converted from layout `from` to `to` with the device's reorder kernel (or `t` itself).
Tensor reorder(const Value& value, Tensor t, const Layout& from, const Layout& to, Device device, Buffers& buffers) {
  if (from == to) return t;
  const ReorderFactory* factory = find_reorder(device.kind);
  if (factory == nullptr) fail("no layout conversion on {}", device.to_string());
  std::unique_ptr<Kernel> kernel = (*factory)(value, from, to);
  KernelIO io;
  io.inputs.push_back(std::move(t));
  io.outputs.push_back(buffers.make(value.spec(), to, device));
  run_once(*kernel, io, device);
  return std::move(io.outputs[0]);
}

// Runs `node`'s kernel for `device` on copies of the host inputs; returns the outputs on the host,
// plain. Inputs and outputs are converted where the kernel reads or writes another layout (the
// CPU convolutions' blocked ones), as the runtime does. The default stream orders the kernels and
// the copies.
std::vector<Tensor> run_kernel(const Node& node, Device device, const std::vector<Tensor>& inputs,
                               bool deterministic = true) {
  const KernelFactory* factory = find_kernel(node.op, device.kind);
  if (factory == nullptr) fail("no {} kernel for {}", device.to_string(), node.op);
  std::unique_ptr<Kernel> kernel = (*factory)(node, KernelContext{device, 1, nullptr, {}, deterministic});
  Buffers buffers;
  KernelIO io;
  io.step = 7;  // any step: keys the dropout mask
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor plain = buffers.make(node.inputs[i].spec(), Layout{}, device);
    plain.copy_from(inputs[i]);
    io.inputs.push_back(reorder(node.inputs[i], std::move(plain), Layout{}, kernel->input_layout(static_cast<int>(i)),
                                device, buffers));
  }
  for (size_t o = 0; o < node.outputs.size(); ++o)
    io.outputs.push_back(buffers.make(node.outputs[o], kernel->output_layout(static_cast<int>(o)), device));
  run_once(*kernel, io, device);
  std::vector<Tensor> out;
  for (size_t o = 0; o < io.outputs.size(); ++o) {
    const Value value{const_cast<Node*>(&node), static_cast<int>(o)};
    Tensor plain = reorder(value, io.outputs[o].view(), kernel->output_layout(static_cast<int>(o)), Layout{}, device,
                           buffers);
    out.emplace_back(plain.shape(), plain.dtype());
    out.back().copy_from(plain);
  }
  return out;
}

struct Case {
  std::string name;
  std::vector<Shape> inputs;
  std::function<Value(const Scope&, const std::vector<Value>&)> build;
  double tolerance = 1e-5;  // relative to max(1, |cpu value|)
  float low = -1, high = 1;  // input range
  int labels = -1;           // index of an i32 input of class labels in [0, classes)
  int32_t classes = 0;
  bool quantize = false;     // inputs rounded to multiples of 1/4, so that ties are common
  std::vector<std::pair<float, float>> ranges;  // per input, where given: overrides low, high
};

// Labels in [0, classes), fixed by the seed.
Tensor random_labels(const Shape& shape, uint64_t seed, int32_t classes) {
  Tensor t(shape, DType::i32);
  Philox rng(seed, 23);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int32_t>()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(i), static_cast<uint32_t>(classes)));
  return t;
}

Shape pooled(const Shape& x, const ops::PoolAttrs& a) {
  return Shape{x[0], x[1], ops::axis_padding(x[2], a.ksize[0], a.strides[0], a.padding).out,
               ops::axis_padding(x[3], a.ksize[1], a.strides[1], a.padding).out};
}

// Cases of the ops beyond the element-wise, matmul and conv families.
void add_nn_cases(std::vector<Case>& all) {
  using ops::Padding;
  // Sums: one output per thread, one block per output, and blocks split into chunks; kept and
  // reduced axes interleaved.
  for (auto [shape, axes] : {std::pair{Shape{3, 5, 7}, std::vector<int>{}}, {Shape{300000}, {}},
                             {Shape{64, 40}, {0}}, {Shape{6, 2048}, {0}}, {Shape{4, 5, 6}, {1}},
                             {Shape{4, 5, 6}, {0, 2}}, {Shape{50, 3000}, {-1}}, {Shape{2, 1, 3}, {1}},
                             {Shape{3, 40000}, {1}}}) {
    all.push_back({"reduce_sum", {shape}, [axes](auto& s, auto& v) {
                     return axes.empty() ? ops::reduce_sum(s, v[0]) : ops::reduce_sum(s, v[0], axes);
                   }});
  }
  for (auto [from, to] : {std::pair{Shape{8, 3, 5, 5}, Shape{3, 1, 1}}, {Shape{4, 6}, Shape{6}},
                          {Shape{2, 3, 4}, Shape{1, 3, 1}}, {Shape{5, 7}, Shape{5, 7}}, {Shape{9, 4}, Shape{}}})
    all.push_back({"sum_to_shape", {from}, [to](auto& s, auto& v) { return ops::sum_to_shape(s, v[0], to); }});
  for (auto [from, to] : {std::pair{Shape{3, 1}, Shape{2, 3, 4}}, {Shape{5}, Shape{4, 5}}, {Shape{}, Shape{3, 3}},
                          {Shape{2, 1, 3}, Shape{2, 4, 3}}})
    all.push_back({"broadcast_to", {from}, [to](auto& s, auto& v) { return ops::broadcast_to(s, v[0], to); }});
  for (const Shape& shape : {Shape{1000}, Shape{70000}, Shape{1, 1}})
    all.push_back({"l2_loss", {shape}, [](auto& s, auto& v) { return ops::l2_loss(s, v[0]); }});

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
      all.push_back({.name = "max_pool", .inputs = {x},
                     .build = [attrs](auto& s, auto& v) { return ops::max_pool(s, v[0], attrs); }, .quantize = quantize});
      all.push_back({.name = "max_pool_grad", .inputs = {x, y},
                     .build = [attrs](auto& s, auto& v) { return ops::max_pool_grad(s, v[0], v[1], attrs); },
                     .quantize = quantize});
    }
    all.push_back({"avg_pool", {x}, [attrs](auto& s, auto& v) { return ops::avg_pool(s, v[0], attrs); }});
    all.push_back({"avg_pool_grad", {y},
                   [attrs, x](auto& s, auto& v) { return ops::avg_pool_grad(s, v[0], x, attrs); }});
  }

  // LRN: the CIFAR-10 model's parameters, a window wider than the channels, a general beta.
  for (auto attrs : {ops::LRNAttrs{4, 1.0f, 0.001f / 9.0f, 0.75f}, ops::LRNAttrs{5, 1.0f, 0.1f, 0.5f},
                     ops::LRNAttrs{2, 2.0f, 0.05f, 0.6f}, ops::LRNAttrs{9, 1.0f, 0.2f, 0.75f}}) {
    const Shape x{2, 12, 5, 4};
    all.push_back({.name = "lrn", .inputs = {x}, .build = [attrs](auto& s, auto& v) { return ops::lrn(s, v[0], attrs); },
                   .tolerance = 1e-4, .low = -2, .high = 2});
    all.push_back({.name = "lrn_grad", .inputs = {x, x},
                   .build = [attrs](auto& s, auto& v) { return ops::lrn_grad(s, v[0], v[1], attrs); },
                   .tolerance = 1e-4, .low = -2, .high = 2});
  }

  // The softmax family: rows shorter and longer than a block's threads.
  for (const Shape& logits : {Shape{6, 10}, Shape{4, 1000}}) {
    const Shape labels{logits[0]};
    all.push_back({.name = "softmax", .inputs = {logits},
                   .build = [](auto& s, auto& v) { return ops::softmax(s, v[0]); }, .low = -5, .high = 5});
    all.push_back({"softmax_grad", {logits, logits}, [](auto& s, auto& v) { return s.op("SoftmaxGrad", {v[0], v[1]}); }});
    all.push_back({.name = "sparse_xent", .inputs = {logits, labels},
                   .build = [](auto& s, auto& v) { return ops::sparse_softmax_cross_entropy_with_logits(s, v[0], v[1]); },
                   .low = -5, .high = 5, .labels = 1, .classes = static_cast<int32_t>(logits[1])});
    all.push_back({.name = "sparse_xent_grad", .inputs = {logits, labels, labels},
                   .build = [](auto& s, auto& v) { return s.op("SparseSoftmaxXentGrad", {v[0], v[1], v[2]}); },
                   .low = -5, .high = 5, .labels = 1, .classes = static_cast<int32_t>(logits[1])});
    for (bool quantize : {false, true}) {
      all.push_back({.name = "argmax", .inputs = {logits}, .build = [](auto& s, auto& v) { return ops::argmax(s, v[0]); },
                     .quantize = quantize});
      for (int k : {1, 3})
        all.push_back({.name = "in_top_k", .inputs = {logits, labels},
                       .build = [k](auto& s, auto& v) { return ops::in_top_k(s, v[0], v[1], k); },
                       .labels = 1, .classes = static_cast<int32_t>(logits[1]), .quantize = quantize});
    }
  }
  all.push_back({"softmax_rank3", {Shape{3, 4, 300}}, [](auto& s, auto& v) { return ops::softmax(s, v[0]); }});

  // Dropout: the mask must be the CPU's bit for bit (a length that is not a multiple of 4, and
  // one longer than the CPU's parallel blocks).
  for (const Shape& shape : {Shape{3, 1001}, Shape{40003}}) {
    all.push_back({.name = "dropout", .inputs = {shape}, .build = [](auto& s, auto& v) {
                     return s.op("Dropout", {v[0]}, ops::DropoutAttrs{0.7f, 42, 5, -1});
                   }, .tolerance = 0});
    all.push_back({.name = "dropout_grad", .inputs = {shape}, .build = [](auto& s, auto& v) {
                     return s.op("DropoutGrad", {v[0]}, ops::DropoutAttrs{0.6f, 1234567890123ull, 3, 17});
                   }, .tolerance = 0});
  }

  // Batch norm, NCHW and NC, training and inference; variances positive.
  const std::pair<float, float> any{-1.0f, 1.0f}, positive{0.1f, 1.5f};
  for (const Shape& x : {Shape{4, 3, 5, 5}, Shape{6, 7}}) {
    const Shape c{x[1]};
    for (auto mode : {ops::BatchNormMode::training, ops::BatchNormMode::inference}) {
      const ops::BatchNormAttrs attrs{1e-3f, 0.99f, mode};
      all.push_back({.name = "fused_batch_norm", .inputs = {x, c, c, c, c},
                     .build = [attrs](auto& s, auto& v) { return s.op("FusedBatchNorm", v, attrs); },
                     .tolerance = 1e-4, .ranges = {any, any, any, any, positive}});
      all.push_back({.name = "fused_batch_norm_grad", .inputs = {x, x, c, c, c, c},
                     .build = [attrs](auto& s, auto& v) { return s.op("FusedBatchNormGrad", v, attrs); },
                     .tolerance = 1e-4, .ranges = {any, any, any, any, any, positive}});
    }
  }
  all.push_back({"assign_moving_average", {Shape{37}, Shape{37}}, [](auto& s, auto& v) {
                   Value variable = s.get_variable("moving", Shape{37}, Initializer::zeros(), Trainable::no);
                   return ops::assign_moving_average(s, variable, v[1], 0.99f);
                 }});
}

std::vector<Case> cases() {
  using ops::Transpose;
  const Shape x4{2, 3, 9, 9}, w{4, 3, 3, 3};
  auto conv = [](int64_t stride, ops::Padding padding) { return ops::Conv2DAttrs{{stride, stride}, padding}; };
  std::vector<Case> all = {
      {"relu", {Shape{3, 5, 7}}, [](auto& s, auto& v) { return ops::relu(s, v[0]); }},
      {"elu", {Shape{3, 5, 7}}, [](auto& s, auto& v) { return ops::elu(s, v[0]); }},
      {"sigmoid", {Shape{3, 5, 7}}, [](auto& s, auto& v) { return ops::sigmoid(s, v[0]); }},
      {"tanh", {Shape{3, 5, 7}}, [](auto& s, auto& v) { return ops::tanh(s, v[0]); }},
      {"relu_grad", {Shape{3, 5, 7}, Shape{3, 5, 7}}, [](auto& s, auto& v) { return ops::relu_grad(s, v[0], v[1]); }},
      {"elu_grad", {Shape{3, 5, 7}, Shape{3, 5, 7}}, [](auto& s, auto& v) { return ops::elu_grad(s, v[0], v[1]); }},
      {"sigmoid_grad", {Shape{3, 5, 7}, Shape{3, 5, 7}}, [](auto& s, auto& v) { return ops::sigmoid_grad(s, v[0], v[1]); }},
      {"tanh_grad", {Shape{3, 5, 7}, Shape{3, 5, 7}}, [](auto& s, auto& v) { return ops::tanh_grad(s, v[0], v[1]); }},
      {"add", {Shape{4, 6, 5}, Shape{4, 6, 5}}, [](auto& s, auto& v) { return ops::add(s, v[0], v[1]); }},
      {"sub_trailing", {Shape{4, 6, 5}, Shape{5}}, [](auto& s, auto& v) { return ops::sub(s, v[0], v[1]); }},
      {"mul_scalar", {Shape{4, 6, 5}, Shape{}}, [](auto& s, auto& v) { return ops::mul(s, v[0], v[1]); }},
      {"scale", {Shape{1000}}, [](auto& s, auto& v) { return ops::scale(s, v[0], -2.5f); }},
      {"square", {Shape{1000}}, [](auto& s, auto& v) { return ops::square(s, v[0]); }},
      {"add_n", {Shape{17, 3}, Shape{17, 3}, Shape{17, 3}}, [](auto& s, auto& v) { return ops::add_n(s, v); }},
      {"reshape", {Shape{4, 6}}, [](auto& s, auto& v) { return ops::reshape(s, v[0], Shape{3, 8}); }},
      {"bias_add_nchw", {x4, Shape{3}}, [](auto& s, auto& v) { return ops::bias_add(s, v[0], v[1]); }},
      {"bias_add_nc", {Shape{5, 7}, Shape{7}}, [](auto& s, auto& v) { return ops::bias_add(s, v[0], v[1]); }},
      {"bias_add_grad", {x4}, [](auto& s, auto& v) { return ops::bias_add_grad(s, v[0]); }},
  };
  for (auto ta : {Transpose::no, Transpose::yes})
    for (auto tb : {Transpose::no, Transpose::yes})
      all.push_back({"matmul", {ta == Transpose::yes ? Shape{5, 7} : Shape{7, 5}, tb == Transpose::yes ? Shape{3, 5} : Shape{5, 3}},
                     [ta, tb](auto& s, auto& v) { return ops::matmul(s, v[0], v[1], ta, tb); }, 1e-4});
  // Stride 2 SAME on 9 pixels pads 1 before and 1 after; on 8 pixels, 0 before and 1 after (the
  // explicitly padded path).
  for (auto [attrs, x] : {std::pair{conv(1, ops::Padding::same), x4}, {conv(2, ops::Padding::same), x4},
                          {conv(2, ops::Padding::same), Shape{2, 3, 8, 8}}, {conv(1, ops::Padding::valid), x4}}) {
    const Shape y{x[0], w[0], ops::axis_padding(x[2], w[2], attrs.strides[0], attrs.padding).out,
                  ops::axis_padding(x[3], w[3], attrs.strides[1], attrs.padding).out};
    all.push_back({"conv2d", {x, w}, [attrs](auto& s, auto& v) { return ops::conv2d(s, v[0], v[1], attrs); }, 1e-4});
    all.push_back({"conv2d_backprop_input", {w, y},
                   [attrs, x](auto& s, auto& v) { return ops::conv2d_backprop_input(s, v[0], v[1], x, attrs); }, 1e-4});
    all.push_back({"conv2d_backprop_filter", {x, y},
                   [attrs, w](auto& s, auto& v) { return ops::conv2d_backprop_filter(s, v[0], v[1], w, attrs); }, 1e-4});
  }
  add_nn_cases(all);
  return all;
}

bool have_gpu(std::string& why) {
#ifndef TOWER_HAVE_CUDA
  why = "this build has no CUDA backend (configure with -DTOWER_CUDA=ON where the CUDA toolkit is)";
  return false;
#else
  if (cuda_devices().empty()) {
    why = "no CUDA device on this machine: the GPU kernels are compiled but not run here";
    return false;
  }
  return true;
#endif
}

// A case's graph, its node and its host inputs (seeded by `seed`, which advances per input).
struct Built {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  const Node* node = nullptr;
  std::vector<Tensor> inputs;
};
Built build(const Case& c, uint64_t& seed) {
  Built b;
  Scope scope(*b.graph);
  std::vector<Value> placeholders;
  for (const Shape& shape : c.inputs) {
    const size_t i = placeholders.size();
    const bool labels = static_cast<int>(i) == c.labels;
    placeholders.push_back(scope.placeholder(fmt::format("x{}", i), shape, labels ? DType::i32 : DType::f32));
    if (labels) {
      b.inputs.push_back(random_labels(shape, seed++, c.classes));
      continue;
    }
    const auto [low, high] = i < c.ranges.size() ? c.ranges[i] : std::pair{c.low, c.high};
    b.inputs.push_back(testing::random_tensor(shape, seed++, low, high));
    if (c.quantize)
      for (int64_t j = 0; j < b.inputs.back().numel(); ++j) {
        float& v = b.inputs.back().data<float>()[j];
        v = std::round(v * 4.0f) / 4.0f;
      }
  }
  b.node = c.build(scope, placeholders).node;
  return b;
}

// The table itself, on every machine: each case builds and its CPU kernel runs.
TEST(CudaKernelsTest, EveryCaseRunsOnTheCpu) {
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Built b = build(c, seed);
    EXPECT_EQ(run_kernel(*b.node, Device{}, b.inputs).size(), b.node->outputs.size());
  }
}

// The GPU outputs against the CPU ones: class indices exactly, floats within `tolerance` relative
// to max(1, |cpu value|).
void expect_close(const std::vector<Tensor>& cpu, const std::vector<Tensor>& cuda, double tolerance,
                  const std::string& op) {
  for (size_t o = 0; o < cpu.size(); ++o) {
    if (cpu[o].dtype() == DType::i32) {
      const int32_t* a = cpu[o].data<int32_t>();
      const int32_t* g = cuda[o].data<int32_t>();
      int64_t differ = 0;
      for (int64_t i = 0; i < cpu[o].numel(); ++i) differ += a[i] != g[i];
      EXPECT_EQ(differ, 0) << op << " output " << o;
      continue;
    }
    const float* a = cpu[o].data<float>();
    const float* g = cuda[o].data<float>();
    double worst = 0;
    for (int64_t i = 0; i < cpu[o].numel(); ++i)
      worst = std::max(worst, std::fabs(double(a[i]) - g[i]) / std::max(1.0, std::fabs(double(a[i]))));
    EXPECT_LE(worst, tolerance) << op << " output " << o;
  }
}

TEST(CudaKernelsTest, EveryGpuKernelMatchesTheCpuKernel) {
  std::string why;
  if (!have_gpu(why)) GTEST_SKIP() << why;
  const Device gpu{DeviceKind::cuda, 0};
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Built b = build(c, seed);
    expect_close(run_kernel(*b.node, Device{}, b.inputs), run_kernel(*b.node, gpu, b.inputs), c.tolerance, b.node->op);
  }
}

// --no-deterministic lets cuDNN choose its fastest convolutions (some accumulate with atomics):
// still the CPU's results within tolerance. The deterministic ones repeat bit for bit.
TEST(CudaKernelsTest, ConvolutionAlgorithmsInBothModes) {
  std::string why;
  if (!have_gpu(why)) GTEST_SKIP() << why;
  const Device gpu{DeviceKind::cuda, 0};
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    Built b = build(c, seed);
    if (c.name.rfind("conv2d", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    const std::vector<Tensor> cpu = run_kernel(*b.node, Device{}, b.inputs);
    expect_close(cpu, run_kernel(*b.node, gpu, b.inputs, false), c.tolerance, b.node->op);
    const std::vector<Tensor> first = run_kernel(*b.node, gpu, b.inputs), second = run_kernel(*b.node, gpu, b.inputs);
    EXPECT_EQ(std::memcmp(first[0].raw_data(), second[0].raw_data(), first[0].nbytes()), 0) << b.node->op;
  }
}

#ifdef TOWER_HAVE_CUDA
// Every op with a CPU kernel has a CUDA one: a new CPU kernel needs its GPU twin (or an entry here
// saying it still lacks one).
TEST(CudaKernelsTest, OpsWithoutAGpuKernelAreTheKnownOnes) {
  std::vector<std::string> missing;
  for (const std::string& op : registered_kernels(DeviceKind::cpu))
    if (find_kernel(op, DeviceKind::cuda) == nullptr) missing.push_back(op);
  const std::vector<std::string> expected = {};
  EXPECT_EQ(missing, expected);
}
#endif

}  // namespace
}  // namespace tower
