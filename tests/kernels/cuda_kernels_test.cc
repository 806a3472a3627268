// GPU kernels against the CPU kernels: the same node on the same inputs, forward ops and gradient
// ops alike. Compiled in every build; skipped with a message where there is no CUDA backend or no
// GPU (the GPU machine runs them).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "testing/gradient_check.h"
#include "tower/core/device.h"
#include "tower/kernels/kernel.h"
#include "tower/ops/activation.h"
#include "tower/ops/bias.h"
#include "tower/ops/conv.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"

namespace tower {
namespace {

// Runs `node`'s kernel for `device` on copies of the host inputs; returns the outputs on the host.
// The default stream orders the kernels and the copies.
std::vector<Tensor> run_kernel(const Node& node, Device device, const std::vector<Tensor>& inputs) {
  const KernelFactory* factory = find_kernel(node.op, device.kind);
  if (factory == nullptr) fail("no {} kernel for {}", device.to_string(), node.op);
  KernelIO io;
  for (const Tensor& t : inputs) {
    io.inputs.emplace_back(t.shape(), t.dtype(), device);
    io.inputs.back().copy_from(t);
  }
  for (const TensorSpec& spec : node.outputs) io.outputs.emplace_back(spec.shape, spec.dtype, device);
  std::unique_ptr<Kernel> kernel = (*factory)(node, KernelContext{device, 1, nullptr});
  Tensor scratch(Shape{static_cast<int64_t>(kernel->scratch_bytes())}, DType::u8, device);
  io.scratch = scratch.raw_data();
  kernel->bind(io);
  kernel->run(io);
  std::vector<Tensor> out;
  for (const Tensor& t : io.outputs) {
    out.emplace_back(t.shape(), t.dtype());
    out.back().copy_from(t);
  }
  return out;
}

struct Case {
  std::string name;
  std::vector<Shape> inputs;
  std::function<Value(const Scope&, const std::vector<Value>&)> build;
  double tolerance = 1e-5;  // relative to max(1, |cpu value|)
  float low = -1, high = 1;  // input range
};

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

TEST(CudaKernelsTest, EveryGpuKernelMatchesTheCpuKernel) {
  std::string why;
  if (!have_gpu(why)) GTEST_SKIP() << why;
  const Device gpu{DeviceKind::cuda, 0};
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Graph graph;
    Scope scope(graph);
    std::vector<Value> placeholders;
    std::vector<Tensor> inputs;
    for (const Shape& shape : c.inputs) {
      placeholders.push_back(scope.placeholder(fmt::format("x{}", placeholders.size()), shape));
      inputs.push_back(testing::random_tensor(shape, seed++, c.low, c.high));
    }
    const Node& node = *c.build(scope, placeholders).node;
    std::vector<Tensor> cpu = run_kernel(node, Device{}, inputs);
    std::vector<Tensor> cuda = run_kernel(node, gpu, inputs);
    for (size_t o = 0; o < cpu.size(); ++o) {
      const float* a = cpu[o].data<float>();
      const float* b = cuda[o].data<float>();
      double worst = 0;
      for (int64_t i = 0; i < cpu[o].numel(); ++i)
        worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / std::max(1.0, std::fabs(double(a[i]))));
      EXPECT_LE(worst, c.tolerance) << node.op << " output " << o;
    }
  }
}

#ifdef TOWER_HAVE_CUDA
// What the GPU still lacks, spelled out: adding a CUDA kernel must shorten this list.
TEST(CudaKernelsTest, OpsWithoutAGpuKernelAreTheKnownOnes) {
  std::vector<std::string> missing;
  for (const std::string& op : registered_kernels(DeviceKind::cpu))
    if (find_kernel(op, DeviceKind::cuda) == nullptr) missing.push_back(op);
  const std::vector<std::string> expected = {
      "ArgMax", "AssignMovingAverage", "AvgPool", "AvgPoolGrad", "BroadcastTo", "Dropout", "DropoutGrad",
      "FusedBatchNorm", "FusedBatchNormGrad", "InTopK", "L2Loss", "LRN", "LRNGrad", "MaxPool", "MaxPoolGrad",
      "ReduceSum", "Softmax", "SoftmaxGrad", "SparseSoftmaxCrossEntropyWithLogits", "SparseSoftmaxXentGrad",
      "SumToShape"};
  EXPECT_EQ(missing, expected);
}
#endif

}  // namespace
}  // namespace tower
