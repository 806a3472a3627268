// The memory plan: buffers placed in one arena by liveness, and Reshapes that copy nothing.
#include <gtest/gtest.h>

#include <algorithm>

#include "testing/gradient_check.h"
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

}  // namespace
}  // namespace tower
