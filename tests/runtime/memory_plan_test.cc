// The memory plan: blocks placed in one arena by liveness (place_blocks), buffers of a compiled
// program, and Reshapes that copy nothing.
#include "tower/runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "testing/gradient_check.h"
#include "testing/graphs.h"
#include "tower/ops/activation.h"
#include "tower/ops/math.h"
#include "tower/runtime/program.h"

namespace tower {
namespace {

// x -> relu -> reshape (read only at the end), and temporaries of the same size in between that
// would land on the ReLU's bytes if the reshape did not keep them alive.
struct ReshapeGraph {
  Graph graph;
  Value x, relu, flat, out;
  VariableStore variables;

  ReshapeGraph() {
    Scope s(graph);
    x = s.placeholder("x", Shape{4, 6});
    relu = ops::relu(s, x);
    flat = ops::reshape(s, ops::reshape(s, relu, Shape{2, 12}), Shape{24});
    Value t1 = ops::scale(s, x, 2.0f);
    Value t2 = ops::add(s, ops::square(s, t1), t1);
    out = ops::add(s, flat, ops::reshape(s, t2, Shape{24}));
  }
};

TEST(MemoryPlanTest, ReshapeOfAnArenaBufferIsThatBuffer) {
  ReshapeGraph g;
  const Tensor input = testing::random_tensor(Shape{4, 6}, 3);
  Program program(g.graph, {g.relu, g.flat}, g.variables, {Device{}, 1});
  program.input(g.x).copy_from(input);
  program.run();
  EXPECT_EQ(program.output(1).raw_data(), program.output(0).raw_data());
  EXPECT_EQ(program.output(1).shape(), Shape{24});
  for (int64_t i = 0; i < 24; ++i)
    ASSERT_EQ(program.output(1).data<float>()[i], std::max(input.data<float>()[i], 0.0f)) << i;
}

TEST(MemoryPlanTest, ReshapedBufferLivesUntilItsLastReader) {
  ReshapeGraph g;
  const Tensor input = testing::random_tensor(Shape{4, 6}, 4);
  Program program(g.graph, {g.out}, g.variables, {Device{}, 1});
  program.input(g.x).copy_from(input);
  for (int run = 0; run < 2; ++run) {
    program.run();
    for (int64_t i = 0; i < 24; ++i) {
      const float x = input.data<float>()[i];
      ASSERT_FLOAT_EQ(program.output(0).data<float>()[i], std::max(x, 0.0f) + 4 * x * x + 2 * x)
          << "run " << run << " element " << i;
    }
  }
}

// Feeds `input` to x in every program and runs it.
void run_with(std::initializer_list<Program*> programs, Value x, const Tensor& input) {
  for (Program* p : programs) {
    p->input(x).copy_from(input);
    p->run();
  }
}

// a + b, element by element.
std::vector<float> sum_of(const Tensor& a, const Tensor& b) {
  std::vector<float> sum = a.to_vector<float>();
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += b.data<float>()[i];
  return sum;
}

// got within f32 rounding of want, which holds a real sum (some value above 0.5), not zeros.
void expect_sums_near(const Tensor& got, const std::vector<float>& want) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want[i], 1e-5f * (1 + std::abs(want[i]))) << i;
  EXPECT_GT(*std::max_element(want.begin(), want.end()), 0.5f);
}

// relu(conv_bn(x) + shortcut) with the projection shortcut = conv_bn(x) (inference batch norms):
// a residual block's end, whose sum is one Conv2D+FusedBatchNorm+Add+Relu.
Value residual_block(const Scope& s, Value x, const std::string& name, Value* shortcut) {
  *shortcut = testing::conv_inference_batch_norm(s, "shortcut", x);
  return ops::relu(s, ops::add(s, testing::conv_inference_batch_norm(s, name, x), *shortcut));
}

// A residual block's end in inference, Conv2D+FusedBatchNorm+Add+Relu: the residual (the
// projection's output) is read by nothing else, so the output is written over it instead of into
// a copy of it. Fetching the residual too keeps it apart (other layouts, so other last bits).
TEST(MemoryPlanTest, AResidualReadByNothingElseIsTheOutput) {
  Graph graph;
  Scope s(graph);
  Value x = s.placeholder("x", Shape{2, 8, 6, 6});
  Value shortcut;
  Value y = residual_block(s, x, "h", &shortcut);
  VariableStore variables;
  variables.initialize(graph, 5);
  const Tensor input = testing::random_tensor(Shape{2, 8, 6, 6}, 6);
  Program in_place(graph, {y}, variables, {Device{}, 1});
  Program apart(graph, {y, shortcut}, variables, {Device{}, 1});
  ASSERT_EQ(in_place.stats().fused_nodes, apart.stats().fused_nodes);
  EXPECT_EQ(in_place.stats().in_place, 1);
  // Read again after the Add: not in place, or the second read would see the output.
  Value again = ops::add(s, y, shortcut);
  Program later(graph, {again}, variables, {Device{}, 1});
  EXPECT_EQ(later.stats().in_place, 0);
  run_with({&in_place, &apart, &later}, x, input);
  expect_sums_near(in_place.output(0), apart.output(0).to_vector<float>());
  expect_sums_near(later.output(0), sum_of(apart.output(0), apart.output(1)));
}

// Two residual blocks in a row: the second sum's residual is the first sum, itself written in
// place of the shortcut, so both sums take the shortcut's buffer (a residual network's stage runs
// in one); not when the first sum is read again after the second. Against the kernels apart.
TEST(MemoryPlanTest, AChainOfResidualSumsSharesOneBuffer) {
  Graph graph;
  Scope s(graph);
  Value x = s.placeholder("x", Shape{2, 8, 6, 6});
  Value shortcut;
  Value y1 = residual_block(s, x, "h1", &shortcut);
  // (Two convolutions, as in a residual block: the first reads y1 apart from the sum.)
  Value h2 = ops::relu(s, testing::conv_inference_batch_norm(s, "h2a", y1));
  Value y2 = ops::relu(s, ops::add(s, testing::conv_inference_batch_norm(s, "h2b", h2), y1));
  Value again = ops::add(s, y2, y1);
  VariableStore variables;
  variables.initialize(graph, 5);
  const Tensor input = testing::random_tensor(Shape{2, 8, 6, 6}, 6);
  Program chain(graph, {y2}, variables, {Device{}, 1});
  Program read_again(graph, {again}, variables, {Device{}, 1});
  ProgramOptions unfused{Device{}, 1};
  unfused.fuse = false;  // the batch norms apart: no kernel writes in place
  Program apart(graph, {y2, y1}, variables, unfused);
  EXPECT_EQ(chain.stats().in_place, 2);
  EXPECT_EQ(read_again.stats().in_place, 1);
  EXPECT_EQ(apart.stats().in_place, 0);
  run_with({&chain, &read_again, &apart}, x, input);
  expect_sums_near(chain.output(0), apart.output(0).to_vector<float>());
  expect_sums_near(read_again.output(0), sum_of(apart.output(0), apart.output(1)));
}

bool overlap_in_time(const MemoryBlock& a, const MemoryBlock& b) {
  return a.first <= b.last && b.first <= a.last;
}
bool overlap_in_memory(const MemoryBlock& a, const MemoryBlock& b) {
  return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// A chain of values each read only by the next step: two blocks alive at a time, so the arena
// holds two, whatever the chain's length.
TEST(MemoryPlanTest, AChainReusesTwoBlocks) {
  std::vector<MemoryBlock> chain(10);
  std::vector<MemoryBlock*> blocks;
  for (int i = 0; i < 10; ++i) {
    chain[static_cast<size_t>(i)] = {align_up(1000), i, i + 1};
    blocks.push_back(&chain[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(place_blocks(blocks), 2 * align_up(1000));
}

// Blocks alive at the same time never share bytes, every block starts on a cache line, and the
// arena is at least the largest sum alive at one position; random lifetimes and sizes.
TEST(MemoryPlanTest, LiveBlocksNeverOverlap) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<MemoryBlock> all(40);
    std::vector<MemoryBlock*> blocks;
    for (MemoryBlock& b : all) {
      const int first = static_cast<int>(rng() % 30);
      b = {align_up(1 + rng() % 5000), first, first + static_cast<int>(rng() % 8)};
      blocks.push_back(&b);
    }
    const size_t arena = place_blocks(blocks);
    size_t peak = 0;
    for (int p = 0; p < 40; ++p) {
      size_t alive = 0;
      for (const MemoryBlock& b : all) alive += b.first <= p && p <= b.last ? b.bytes : 0;
      peak = std::max(peak, alive);
    }
    EXPECT_GE(arena, peak);
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(all[i].offset % kArenaAlign, 0u);
      EXPECT_LE(all[i].offset + all[i].bytes, arena);
      for (size_t j = i + 1; j < all.size(); ++j)
        EXPECT_FALSE(overlap_in_time(all[i], all[j]) && overlap_in_memory(all[i], all[j]))
            << trial << ": " << i << " " << j;
    }
  }
}

}  // namespace
}  // namespace tower
