// --precision bf16: convolutions and matrix products multiply bf16 copies of their operands and
// accumulate in f32; every value between kernels stays f32. Forward values and gradients must
// match the fp32 program within bf16's precision (8 bits of mantissa).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "testing/gradient_check.h"
#include "tower/graph/gradients.h"
#include "tower/ops/activation.h"
#include "tower/ops/bias.h"
#include "tower/ops/conv.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"
#include "tower/ops/pool.h"
#include "tower/runtime/program.h"

namespace tower {
namespace {

bool cpu_has_bf16() {
  const CpuInfo cpu = cpu_info();
  return cpu.avx512_bf16 || cpu.amx;
}

// conv -> bias -> relu -> max-pool -> conv -> relu -> flatten -> matmul -> l2 loss, and the
// gradients of every weight and of the images.
struct Net {
  Graph graph;
  Value images;
  std::vector<Value> fetches;
  VariableStore variables;

  Net() {
    Scope s(graph);
    images = s.placeholder("images", Shape{8, 3, 16, 16});
    Value w1 = s.get_variable("w1", Shape{16, 3, 5, 5}, Initializer::he_normal());
    Value b1 = s.get_variable("b1", Shape{16}, Initializer::uniform(0.5f));
    Value w2 = s.get_variable("w2", Shape{24, 16, 3, 3}, Initializer::he_normal());
    Value w3 = s.get_variable("w3", Shape{24 * 8 * 8, 10}, Initializer::glorot_uniform());
    const ops::Conv2DAttrs same{{1, 1}, ops::Padding::same};
    Value h1 = ops::relu(s, ops::bias_add(s, ops::conv2d(s, images, w1, same), b1));
    Value p1 = ops::max_pool(s, h1, {{2, 2}, {2, 2}, ops::Padding::valid});
    Value h2 = ops::relu(s, ops::conv2d(s, p1, w2, same));
    Value logits = ops::matmul(s, ops::reshape(s, h2, Shape{8, 24 * 8 * 8}), w3);
    Value loss = ops::l2_loss(s, logits);
    fetches = {loss, logits};
    for (Value g : gradients(s, loss, {images, w1, b1, w2, w3})) fetches.push_back(g);
    variables.initialize(graph, 11);
  }

  std::vector<Tensor> run(Precision precision) {
    ProgramOptions options{Device{}, 2};
    options.precision = precision;
    Program program(graph, fetches, variables, options);
    program.input(images).copy_from(testing::random_tensor(Shape{8, 3, 16, 16}, 3));
    program.run();
    std::vector<Tensor> out;
    for (int i = 0; i < program.num_fetches(); ++i) out.push_back(program.output(i).clone());
    return out;
  }
};

TEST(PrecisionTest, Bf16MatchesFp32ForwardAndGradientsAtBf16Tolerance) {
  Net net;
  if (!cpu_has_bf16()) {
    ProgramOptions options{Device{}, 2};
    options.precision = Precision::bf16;
    try {
      Program program(net.graph, net.fetches, net.variables, options);
      ADD_FAILURE() << "a CPU without bf16 instructions built a bf16 program";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--precision bf16 needs a CPU with AVX512-BF16 or AMX"),
                std::string::npos)
          << e.what();
    }
    GTEST_SKIP() << "this CPU has no bf16 instructions (checked: the clear error above)";
  }
  const std::vector<Tensor> fp32 = net.run(Precision::fp32), bf16 = net.run(Precision::bf16);
  const char* names[] = {"loss", "logits", "d images", "d w1", "d b1", "d w2", "d w3"};
  double largest_difference = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    const float* a = fp32[i].data<float>();
    const float* b = bf16[i].data<float>();
    float scale = 0;
    for (int64_t k = 0; k < fp32[i].numel(); ++k) scale = std::max(scale, std::fabs(a[k]));
    ASSERT_GT(scale, 0.0f) << names[i];
    double worst = 0;
    for (int64_t k = 0; k < fp32[i].numel(); ++k)
      worst = std::max(worst, static_cast<double>(std::fabs(a[k] - b[k]) / scale));
    EXPECT_LT(worst, 3e-2) << names[i] << ": bf16 is further from fp32 than its precision allows";
    largest_difference = std::max(largest_difference, worst);
  }
  // bf16 really ran: rounding the operands to 8 bits of mantissa changes the results.
  EXPECT_GT(largest_difference, 1e-4);
}

TEST(PrecisionTest, NamesParseAndPrint) {
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_EQ(precision_name(parse_precision("fp32")), "fp32");
  EXPECT_THROW(parse_precision("fp16"), Error);
}

}  // namespace
}  // namespace tower
