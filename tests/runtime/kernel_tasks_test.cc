// Kernel::tasks (Program's contended mode): running every task, in any order, then finish_tasks()
// computes what run() computes, on a team of one thread and of two.
#include <gtest/gtest.h>

#include <cstring>

#include "testing/gradient_check.h"
#include "testing/kernel_runner.h"
#include "tower/core/device.h"
#include "tower/graph/gradients.h"
#include "tower/ops/batch_norm.h"
#include "tower/ops/conv.h"
#include "tower/ops/lrn.h"
#include "tower/ops/math.h"
#include "tower/ops/pool.h"

namespace tower {
namespace {

// The node's kernel for a team of `threads` (its inputs arriving in `layouts`, else plain), run
// whole and then as its tasks (last first): the outputs' bytes must agree.
void expect_tasks_cover_the_kernel(const Node& node, int threads,
                                   Precision precision = Precision::fp32,
                                   const std::vector<Layout>& layouts = {}) {
  const KernelFactory* factory = find_kernel(node.op, DeviceKind::cpu);
  ASSERT_NE(factory, nullptr) << node.op;
  KernelThreadsScope scope(threads);
  KernelContext context{Device{}, threads};
  context.precision = precision;
  context.input_layouts = layouts;
  std::unique_ptr<Kernel> kernel = (*factory)(node, context);
  testing::Buffers buffers;
  KernelIO io;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    Tensor plain = buffers.make(node.inputs[i].spec(), Layout{}, Device{});
    plain.copy_from(testing::random_tensor(node.inputs[i].shape(), 11 + i, -1.0f, 1.0f));
    io.inputs.push_back(testing::reorder(node.inputs[i], std::move(plain), Layout{},
                                         kernel->input_layout(static_cast<int>(i)), Device{},
                                         buffers));
  }
  for (size_t o = 0; o < node.outputs.size(); ++o)
    io.outputs.push_back(
        buffers.make(node.outputs[o], kernel->output_layout(static_cast<int>(o)), Device{}));
  Tensor scratch(Shape{static_cast<int64_t>(kernel->scratch_bytes())}, DType::u8);
  io.scratch = scratch.raw_data();
  kernel->bind(io);
  kernel->run(io);
  std::vector<std::vector<char>> whole;
  for (Tensor& out : io.outputs) {
    whole.emplace_back(static_cast<const char*>(out.raw_data()),
                       static_cast<const char*>(out.raw_data()) + out.nbytes());
    std::memset(out.raw_data(), 0, out.nbytes());
  }
  ASSERT_NE(kernel->tasks().kind, Tasks::Kind::team) << node.op;
  const int tasks = kernel->tasks().count;
  ASSERT_GE(tasks, 1) << node.op;
  if (precision == Precision::fp32 && threads > 1) {
    EXPECT_GT(tasks, 1) << node.op << ": split on a team of " << threads;
  }
  for (int task = tasks - 1; task >= 0; --task) kernel->run_task(io, task, task % threads);
  kernel->finish_tasks(io);
  for (size_t o = 0; o < io.outputs.size(); ++o)
    EXPECT_EQ(std::memcmp(whole[o].data(), io.outputs[o].raw_data(), whole[o].size()), 0)
        << node.op << " output " << o << " with " << threads << " threads";
}

TEST(KernelTasksTest, EveryTaskOnceGivesTheKernelsBits) {
  Graph g;
  Scope s(g);
  Value x = s.placeholder("x", Shape{32, 16, 12, 12});
  Value dy = s.placeholder("dy", Shape{32, 16, 6, 6});
  Value dz = s.placeholder("dz", Shape{32, 16, 12, 12});
  Value grey = s.placeholder("grey", Shape{32, 1, 12, 12});
  ops::PoolAttrs pool;
  pool.ksize = {3, 3};
  pool.strides = {2, 2};
  pool.padding = ops::Padding::same;
  const std::vector<Value> nodes = {
      ops::lrn(s, x), ops::lrn_grad(s, x, x, {}), ops::max_pool(s, x, pool),
      ops::max_pool_grad(s, x, dy, pool),
      ops::conv2d_backprop_filter(s, x, dz, Shape{16, 16, 3, 3}, ops::Conv2DAttrs{}),
      // one input channel (on AVX2 a hand-written kernel, in chunks of 16 rows on any team)
      ops::conv2d_backprop_filter(s, grey, dz, Shape{16, 1, 5, 5}, ops::Conv2DAttrs{})};
  for (const Value& v : nodes)
    for (int threads : {1, 2}) expect_tasks_cover_the_kernel(*v.node, threads);
}

// A bf16 filter gradient of 128 rows with its bias gradient: on a CPU with AMX, the forward-
// convolution form in two chunks of 64 rows (on any team), else oneDNN's kernel in batch chunks.
TEST(KernelTasksTest, Bf16FilterGradientTasksGiveTheKernelsBits) {
  if (!testing::cpu_has_bf16()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  Graph g;
  Scope s(g);
  Value x = s.placeholder("x", Shape{128, 16, 8, 8});
  Value dz = s.placeholder("dz", Shape{128, 16, 8, 8});
  const Value dw = ops::conv2d_backprop_filter(s, x, dz, Shape{16, 16, 5, 5},
                                               ops::Conv2DAttrs{{1, 1}, ops::Padding::same});
  for (int threads : {1, 2}) expect_tasks_cover_the_kernel(*dw.node, threads, Precision::bf16);
}

// Training batch norm, forward (with its ReLU or not) and backward, on a convolution's blocked
// layout: its tasks are groups of channels (batch_norm_groups.cc), its run() shares out images.
TEST(KernelTasksTest, BatchNormOnChannelGroupsTasksGiveTheKernelsBits) {
  Graph g;
  Scope s(g);
  Value x = s.placeholder("x", Shape{8, 32, 6, 6});
  Value w = s.placeholder("w", Shape{32, 32, 3, 3});
  KernelContext conv_context{Device{}, 1};
  const Value conv = ops::conv2d(s, x, w, ops::Conv2DAttrs{});
  const Layout layout =
      (*find_kernel("Conv2D", DeviceKind::cpu))(*conv.node, conv_context)->output_layout(0);
  ASSERT_FALSE(layout.is_plain());
  auto channels = [&](const char* name) {
    return s.get_variable(name, Shape{32}, Initializer::ones(), Trainable::no);
  };
  ops::BatchNormResult bn =
      ops::batch_norm(s, x, channels("gamma"), channels("beta"), channels("mean"), channels("var"));
  gradients(s, ops::reduce_sum(s, bn.y), {x});
  const Node* grad = nullptr;
  for (const auto& node : g.nodes())
    if (node->op == "FusedBatchNormGrad") grad = node.get();
  ASSERT_NE(grad, nullptr);
  Node relu = *bn.y.node;
  relu.op = "FusedBatchNorm+Relu";
  for (int threads : {1, 2}) {
    expect_tasks_cover_the_kernel(*bn.y.node, threads, Precision::fp32, {layout});
    expect_tasks_cover_the_kernel(relu, threads, Precision::fp32, {layout});
    expect_tasks_cover_the_kernel(*grad, threads, Precision::fp32, {layout, layout});
  }
}

}  // namespace
}  // namespace tower
