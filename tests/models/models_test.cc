#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "testing/gradient_check.h"
#include "testing/kernel_runner.h"
#include "tower/core/philox.h"
#include "tower/graph/gradients.h"
#include "tower/models/model.h"
#include "tower/runtime/program.h"

namespace tower {
namespace {

TEST(ModelsTest, Cifar10HasTheTutorialParameterCount) {
  EXPECT_EQ(count_parameters(get_model("cifar10"), Shape{3, 24, 24}, 10), 1068298);
}

// torchvision's parameter counts for 1,000 classes, to the parameter (its architectures exactly).
TEST(ModelsTest, ImageNetModelsHaveTorchvisionsParameterCounts) {
  const std::pair<const char*, int64_t> expected[] = {{"resnet18", 11689512},
                                                      {"resnet34", 21797672},
                                                      {"resnet50", 25557032},
                                                      {"mobilenet_v2", 3504872}};
  for (const auto& [name, count] : expected)
    EXPECT_EQ(count_parameters(get_model(name), Shape{3, 224, 224}, 1000), count) << name;
}

TEST(ModelsTest, RegistryListsEveryModelAndRejectsUnknownOnes) {
  auto names = model_names();
  for (const char* name :
       {"cifar10", "lenet", "mlp", "resnet20", "resnet18", "resnet34", "resnet50", "mobilenet_v2"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  try {
    get_model("vgg");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model 'vgg'"), std::string::npos);
  }
}

TEST(ModelsTest, EveryModelBuildsForItsInputInBothModes) {
  for (const std::string& name : model_names()) {
    const ModelDef& m = get_model(name);
    for (Mode mode : {Mode::train, Mode::eval}) {
      Graph g;
      Scope s(g);
      std::vector<int64_t> dims = {2};
      for (int64_t d : m.default_input.dims()) dims.push_back(d);
      ModelOutputs out = m.build(s, s.placeholder("images", Shape(dims)), 10, mode);
      EXPECT_EQ(out.logits.shape(), (Shape{2, 10})) << name;
    }
  }
}

// A separable problem: class k has a bright square at a class-dependent place, plus noise.
struct Problem {
  Tensor images, labels;
};
Problem separable(const Shape& example, int64_t n, uint64_t seed) {
  std::vector<int64_t> dims = {n};
  for (int64_t d : example.dims()) dims.push_back(d);
  Problem p{testing::random_tensor(Shape(dims), seed, 0.0f, 0.3f), Tensor(Shape{n}, DType::i32)};
  const int64_t c = example[0], h = example[1], w = example[2];
  for (int64_t i = 0; i < n; ++i) {
    int label = static_cast<int>(i % 4);
    p.labels.data<int32_t>()[i] = label;
    float* img = p.images.data<float>() + i * c * h * w;
    for (int64_t y = 0; y < h / 2; ++y)
      for (int64_t x = 0; x < w / 2; ++x)
        img[(y + (label / 2) * (h / 2)) * w + x + (label % 2) * (w / 2)] += 1.0f;
  }
  return p;
}

// A model's training graph for a batch of n: the loss (fetch 0) and the gradient of every
// trainable variable (fetches 1..), compiled with initialized variables.
struct TrainingGraph {
  Graph graph;
  Value images, labels;
  std::vector<Value> fetches;
  std::vector<Value> updates;
  VariableStore variables;

  TrainingGraph(const std::string& model, const Shape& example, int64_t n, int num_classes,
                uint64_t seed, Mode mode = Mode::train) {
    graph.seed = seed;
    Scope s(graph);
    images = s.placeholder("images", Shape{n, example[0], example[1], example[2]});
    labels = s.placeholder("labels", Shape{n}, DType::i32);
    ModelOutputs out = get_model(model).build(s, images, num_classes, mode);
    Value loss = classification_loss(s, out.logits, labels).total_loss;
    std::vector<Value> xs;
    for (const auto& v : graph.trainable_variables()) xs.push_back(v.value);
    fetches = {loss};
    for (Value grad : gradients(s, loss, xs)) fetches.push_back(grad);
    updates = out.updates;
    variables.initialize(graph, seed);
  }
};

void expect_loss_goes_down(const std::string& name, const Shape& example, float lr) {
  const int64_t n = 32;
  TrainingGraph t(name, example, n, 4, 4);
  Graph& g = t.graph;
  VariableStore& vars = t.variables;
  Value images = t.images, labels = t.labels;
  Program program(g, t.fetches, vars, {Device{}, 2}, t.updates);
  Problem p = separable(example, n, 1);
  program.input(images).copy_from(p.images);
  program.input(labels).copy_from(p.labels);
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    program.run(static_cast<uint64_t>(step));
    last = program.output(0).data<float>()[0];
    if (step == 0) first = last;
    auto trainable = g.trainable_variables();
    for (size_t v = 0; v < trainable.size(); ++v) {
      Tensor& w = vars.get(trainable[v].name);
      const float* gr = program.output(1 + static_cast<int>(v)).data<float>();
      for (int64_t k = 0; k < w.numel(); ++k) w.data<float>()[k] -= lr * gr[k];
    }
  }
  EXPECT_LT(last, 0.3f * first) << name << ": loss " << first << " -> " << last;
}

TEST(ModelsTest, MlpLearnsASeparableProblem) {
  expect_loss_goes_down("mlp", Shape{1, 28, 28}, 0.05f);
}
TEST(ModelsTest, LenetLearnsASeparableProblem) {
  expect_loss_goes_down("lenet", Shape{1, 28, 28}, 0.05f);
}

TEST(ModelsTest, StepAllocatesNothing) {
  TrainingGraph t("cifar10", Shape{3, 24, 24}, 8, 10, 1);
  Program program(t.graph, t.fetches, t.variables, {Device{}, 1});
  program.run(0);  // warm-up: oneDNN may set up per-thread state on first use
  auto before = allocator_for(Device{}).counters().num_allocations;
  for (int step = 1; step < 4; ++step) program.run(static_cast<uint64_t>(step));
  EXPECT_EQ(allocator_for(Device{}).counters().num_allocations, before);
  EXPECT_LT(program.stats().arena_bytes, program.stats().unplanned_bytes);
}

// Contended mode (ProgramOptions::contention) takes the same kernels' tasks in another order, on
// whichever thread is free, and defers the weight gradients: every fetch must keep its bits, in
// both precisions, run after run, and every fetch is reported ready once per run. A model with a
// kernel that needs the whole team (batch norm) is never run in contended mode.
// `steps` runs of a program of t on p's batch: its fetches after the last, and its stats. Every
// fetch must be reported ready once per run (in contended mode, from either thread).
std::vector<std::vector<float>> run_steps(TrainingGraph& t, const Problem& p,
                                          const ProgramOptions& options, int steps,
                                          ProgramStats& stats) {
  Program program(t.graph, t.fetches, t.variables, options, t.updates);
  program.input(t.images).copy_from(p.images);
  program.input(t.labels).copy_from(p.labels);
  std::atomic<int> ready{0};
  for (int step = 0; step < steps; ++step)
    program.run(static_cast<uint64_t>(step), [&](int) { ++ready; });
  EXPECT_EQ(ready, steps * program.num_fetches());
  std::vector<std::vector<float>> results;
  for (int i = 0; i < program.num_fetches(); ++i)
    results.push_back(program.output(i).to_vector<float>());
  stats = program.stats();
  return results;
}

void expect_contended_mode_keeps_the_bits(const std::string& model, const Shape& example,
                                          bool contendable) {
  const bool bf16 = testing::cpu_has_bf16();
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    if (precision == Precision::bf16 && !bf16) continue;
    TrainingGraph t(model, example, 64, 10, 3);
    const Problem p = separable(example, 64, 4);
    std::vector<std::vector<float>> results[2];
    for (int contended = 0; contended < 2; ++contended) {
      ProgramOptions options{Device{}, 2};
      options.precision = precision;
      options.contention =
          contended ? ProgramOptions::Contention::on : ProgramOptions::Contention::off;
      ProgramStats stats;
      results[contended] = run_steps(t, p, options, 3, stats);
      EXPECT_EQ(stats.deferrable > 0, contendable && contended == 1) << model;
      EXPECT_EQ(stats.contended_runs, contendable && contended == 1 ? 3 : 0) << model;
    }
    for (size_t i = 0; i < results[0].size(); ++i)
      ASSERT_EQ(results[0][i], results[1][i]) << model << " fetch " << i;
  }
}
TEST(ModelsTest, ContendedModeKeepsTheBitsOfLenet) {
  expect_contended_mode_keeps_the_bits("lenet", Shape{1, 28, 28}, true);
}
TEST(ModelsTest, ContendedModeKeepsTheBitsOfCifar10) {
  expect_contended_mode_keeps_the_bits("cifar10", Shape{3, 24, 24}, true);
}
// (its training batch norms split into tasks by channel groups: kernels/cpu/batch_norm_groups.cc)
TEST(ModelsTest, ContendedModeKeepsTheBitsOfResnet20) {
  expect_contended_mode_keeps_the_bits("resnet20", Shape{3, 32, 32}, true);
}

// ResNet-20's inference (batch norms folded into the convolutions, conv_batch_norm.cc, whose tasks
// are the convolution's) on 2 threads, twice: the logits of the second run.
std::vector<float> resnet20_inference(ProgramOptions::Contention contention) {
  Graph graph;
  Scope s(graph);
  Value images = s.placeholder("images", Shape{32, 3, 32, 32});
  Value logits = get_model("resnet20").build(s, images, 10, Mode::eval).logits;
  VariableStore variables;
  variables.initialize(graph, 5);
  ProgramOptions options{Device{}, 2};
  options.contention = contention;
  Program program(graph, {logits}, variables, options);
  EXPECT_GT(program.stats().fused_nodes, 0);
  program.input(images).copy_from(separable(Shape{3, 32, 32}, 32, 4).images);
  for (int run = 0; run < 2; ++run) program.run();
  EXPECT_EQ(program.stats().contended_runs, contention == ProgramOptions::Contention::on ? 2 : 0);
  return program.output(0).to_vector<float>();
}
TEST(ModelsTest, ContendedModeKeepsTheBitsOfResnet20Inference) {
  EXPECT_EQ(resnet20_inference(ProgramOptions::Contention::off),
            resnet20_inference(ProgramOptions::Contention::on));
}

// MobileNetV2's inference: its batch norms folded into the convolutions, ReLU6 in their kernels
// (Conv2D+FusedBatchNorm+Relu6, dense and depthwise), within f32 rounding of the kernels apart.
TEST(ModelsTest, MobileNetV2InferenceFusedKeepsItsLogits) {
  Graph graph;
  Scope s(graph);
  Value images = s.placeholder("images", Shape{4, 3, 32, 32});
  Value logits = get_model("mobilenet_v2").build(s, images, 10, Mode::eval).logits;
  VariableStore variables;
  variables.initialize(graph, 5);
  const Tensor input = separable(Shape{3, 32, 32}, 4, 4).images;
  std::vector<float> out[2];
  int fused_nodes[2] = {0, 0};
  for (int fuse = 0; fuse < 2; ++fuse) {
    Program program(graph, {logits}, variables, {Device{}, 2, true, fuse == 1});
    program.input(images).copy_from(input);
    program.run();
    out[fuse] = program.output(0).to_vector<float>();
    fused_nodes[fuse] = program.stats().fused_nodes;
  }
  EXPECT_GE(fused_nodes[1], 2 * 35) << "every convolution with its batch norm";
  float scale = 0;
  for (float v : out[0]) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < out[0].size(); ++i) EXPECT_NEAR(out[0][i], out[1][i], 1e-4f * scale) << i;
}

// For `make tsan`: contended mode alone (team mode's OpenMP regions look racy to ThreadSanitizer,
// which does not see libgomp's fork and join), twice, with the same bits each time: lenet,
// ResNet-20 (its batch norms' channel groups as tasks), and ResNet-20's inference (the folded batch
// norm's fold made by whichever task comes first).
void expect_contended_mode_repeats_its_bits(const std::string& model, const Shape& example) {
  TrainingGraph t(model, example, 64, 10, 3);
  const Problem p = separable(example, 64, 4);
  std::vector<std::vector<float>> results[2];
  for (int run = 0; run < 2; ++run) {
    ProgramOptions options{Device{}, 2};
    options.contention = ProgramOptions::Contention::on;
    ProgramStats stats;
    results[run] = run_steps(t, p, options, 2, stats);
    EXPECT_EQ(stats.contended_runs, 2);
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_GT(results[0][0][0], 0.0f) << "the loss";
}
TEST(ModelsTest, ContendedModeRepeatsItsBits) {
  expect_contended_mode_repeats_its_bits("lenet", Shape{1, 28, 28});
}
TEST(ModelsTest, ContendedModeRepeatsItsBitsOnResnet20) {
  expect_contended_mode_repeats_its_bits("resnet20", Shape{3, 32, 32});
}
TEST(ModelsTest, ContendedModeRepeatsItsBitsOnResnet20Inference) {
  EXPECT_EQ(resnet20_inference(ProgramOptions::Contention::on),
            resnet20_inference(ProgramOptions::Contention::on));
}

// A program of 1, 2 or 3 threads computes the same bits (kernels/cpu/chunks.h: the batch's cut
// is fixed by the shapes, never by the team): the loss and every weight gradient, in both
// precisions, at batches of 64 and 16 (micro-batches), and for lenet an odd batch and one that
// cuts into chunks of 3 rows.
void expect_threads_keep_the_bits(const std::string& model, const Shape& example, int64_t n) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    if (precision == Precision::bf16 && !testing::cpu_has_bf16()) continue;
    TrainingGraph t(model, example, n, 10, 3);
    const Problem p = separable(example, n, 4);
    std::vector<std::vector<float>> results[3];
    for (int threads = 1; threads <= 3; ++threads) {
      ProgramOptions options{Device{}, threads};
      options.precision = precision;
      options.contention = ProgramOptions::Contention::off;
      ProgramStats stats;
      results[threads - 1] = run_steps(t, p, options, 2, stats);
    }
    auto trainable = t.graph.trainable_variables();
    for (int k = 1; k < 3; ++k)
      for (size_t i = 0; i < results[0].size(); ++i)
        EXPECT_EQ(results[0][i], results[k][i])
            << model << " n=" << n << " bf16=" << (precision == Precision::bf16) << " threads "
            << k + 1 << " fetch " << i << " " << (i ? trainable[i - 1].name : "loss");
  }
}
TEST(ModelsTest, ThreadsKeepTheBitsOfLenet) {
  expect_threads_keep_the_bits("lenet", Shape{1, 28, 28}, 64);
  expect_threads_keep_the_bits("lenet", Shape{1, 28, 28}, 16);
  expect_threads_keep_the_bits("lenet", Shape{1, 28, 28}, 5);
  expect_threads_keep_the_bits("lenet", Shape{1, 28, 28}, 6);
}
TEST(ModelsTest, ThreadsKeepTheBitsOfCifar10) {
  expect_threads_keep_the_bits("cifar10", Shape{3, 24, 24}, 64);
  expect_threads_keep_the_bits("cifar10", Shape{3, 24, 24}, 16);
}
TEST(ModelsTest, ThreadsKeepTheBitsOfResnet20) {
  expect_threads_keep_the_bits("resnet20", Shape{3, 32, 32}, 64);
  expect_threads_keep_the_bits("resnet20", Shape{3, 32, 32}, 16);
}

// One step of a training graph compiled with and without layout propagation: the fetches and
// the layout conversions per step of each.
struct LayoutRuns {
  std::vector<std::vector<float>> results[2];
  int reorders[2] = {0, 0};
};
LayoutRuns run_with_and_without_propagation(TrainingGraph& t, const Problem& p) {
  LayoutRuns runs;
  for (int propagate = 0; propagate < 2; ++propagate) {
    Program program(t.graph, t.fetches, t.variables, {Device{}, 2, propagate == 1});
    program.input(t.images).copy_from(p.images);
    program.input(t.labels).copy_from(p.labels);
    program.run();
    for (int i = 0; i < program.num_fetches(); ++i)
      runs.results[propagate].push_back(program.output(i).to_vector<float>());
    runs.reorders[propagate] = program.stats().reorders;
  }
  return runs;
}

// Fetches [0, count) agree within tolerance * the fetch's largest magnitude.
void expect_same_results(const LayoutRuns& runs, size_t count, float tolerance,
                         const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    const std::vector<float>& a = runs.results[0][i];
    const std::vector<float>& b = runs.results[1][i];
    float scale = 0;
    for (float v : a) scale = std::max(scale, std::fabs(v));
    for (size_t k = 0; k < a.size(); ++k)
      ASSERT_NEAR(a[k], b[k], tolerance * scale) << what << " fetch " << i << " element " << k;
  }
}

// Keeping values in oneDNN's blocked layouts between kernels must not change what a training
// step computes, and must run fewer layout conversions than converting around every kernel.
TEST(ModelsTest, LayoutPropagationKeepsTheStepAndSavesReorders) {
  struct Case {
    std::string model;
    Shape example;
  };
  for (const Case& c : {Case{"lenet", Shape{1, 28, 28}}, Case{"resnet20", Shape{3, 32, 32}},
                        Case{"cifar10", Shape{3, 24, 24}}}) {
    TrainingGraph t(c.model, c.example, 4, 10, 2);
    Problem p = separable(c.example, 4, 3);
    LayoutRuns runs = run_with_and_without_propagation(t, p);
    std::printf("%s: %d reorders per step without propagation, %d with\n", c.model.c_str(),
                runs.reorders[0], runs.reorders[1]);
    // cifar10 saves no conversions: each of its conv blocks ends in LRN, a plain-only kernel.
    if (c.model == "cifar10")
      EXPECT_LE(runs.reorders[1], runs.reorders[0]) << c.model;
    else
      EXPECT_LT(runs.reorders[1], runs.reorders[0]) << c.model;
    if (c.model != "resnet20") {
      expect_same_results(runs, runs.results[0].size(), 1e-5f, c.model);
      continue;
    }
    // With batch statistics, only the loss: the blocked layout sums them in another order, and
    // under such last-bit changes ReLU masks after batch norm flip (scaling the images by
    // 1 + 1e-6 alone moves ResNet-20's gradients by ~1%). With the moving statistics (eval-mode
    // batch norm, still differentiated) the whole step must agree; tests/runtime/layout_test.cc
    // checks a training-mode batch norm chain tightly.
    expect_same_results(runs, 1, 1e-5f, c.model);
    TrainingGraph eval(c.model, c.example, 4, 10, 2, Mode::eval);
    LayoutRuns eval_runs = run_with_and_without_propagation(eval, p);
    expect_same_results(eval_runs, eval_runs.results[0].size(), 1e-5f, c.model + " (eval)");
  }
}

}  // namespace
}  // namespace tower
