// `tower bench`: training or inference throughput of a model on synthetic data, as one JSON line:
// images_per_sec (median of timed windows after warm-up), ms_per_step, gflops, peak_rss_mb.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "command.h"
#include "tower/core/philox.h"
#include "tower/models/model.h"
#include "tower/parallel/data_parallel.h"
#include "tower/train/optimizer.h"

namespace tower::cli {
namespace {

struct Flags {
  std::string model = "cifar10", mode = "train", strategy = "allreduce";
  int64_t batch_size = 128;
  int threads = 0, num_devices = 1, steps = 10, windows = 5;
};

// Multiply-adds of the convolutions and matmuls (the rest is small next to them), times two.
double graph_flops(const Graph& graph) {
  double flops = 0;
  for (const auto& n : graph.nodes()) {
    auto in = [&](int i) { return n->inputs[static_cast<size_t>(i)].shape(); };
    const Shape& out = n->outputs.empty() ? Shape{} : n->outputs[0].shape;
    if (n->op == "Conv2D") {  // (x, w) -> y
      flops += 2.0 * static_cast<double>(out.numel() * in(1)[1] * in(1)[2] * in(1)[3]);
    } else if (n->op == "Conv2DBackpropInput") {  // (w, dy) -> dx
      flops += 2.0 * static_cast<double>(in(1).numel() * in(0)[1] * in(0)[2] * in(0)[3]);
    } else if (n->op == "Conv2DBackpropFilter") {  // (x, dy) -> dw
      flops += 2.0 * static_cast<double>(in(1).numel() * out[1] * out[2] * out[3]);
    } else if (n->op == "MatMul") {  // (M, N) from (M, K) x (K, N), whatever the transposes
      flops += 2.0 * static_cast<double>(out.numel() * (in(0).numel() / out[0]));
    }
  }
  return flops;
}

Tensor random_images(const Shape& shape) {
  Tensor t(shape, DType::f32);
  Philox rng(7, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.normal(static_cast<uint64_t>(i));
  return t;
}

// Times `steps` calls of fn per window; returns the median seconds per call.
template <typename F>
double median_seconds_per_step(const Flags& flags, F&& fn) {
  for (int i = 0; i < 3; ++i) fn();  // warm-up
  std::vector<double> windows;
  for (int w = 0; w < flags.windows; ++w) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < flags.steps; ++i) fn();
    windows.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      flags.steps);
  }
  std::sort(windows.begin(), windows.end());
  return windows[windows.size() / 2];
}

void run_bench(const Flags& flags) {
  const ModelDef& model = get_model(flags.model);
  if (flags.mode != "train" && flags.mode != "infer")
    fail("bad --mode '{}': expected train or infer", flags.mode);
  const int cores = flags.threads > 0 ? flags.threads : cpu_info().num_cores;
  std::vector<int64_t> dims = {flags.batch_size};
  for (int64_t d : model.default_input.dims()) dims.push_back(d);
  Tensor images = random_images(Shape(dims));
  Tensor labels(Shape{flags.batch_size}, DType::i32);
  for (int64_t i = 0; i < flags.batch_size; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);

  double seconds = 0, flops = 0;
  nlohmann::json extra = nlohmann::json::object();  // update() refuses a null
  if (flags.mode == "train") {
    DataParallelOptions options;
    options.devices.clear();
    for (int i = 0; i < flags.num_devices; ++i) options.devices.push_back({DeviceKind::cpu, i});
    options.threads = split_cores(cores, flags.num_devices);
    options.strategy = parse_strategy(flags.strategy);
    options.seed = 1;
    DataParallel dp(model.default_input, flags.batch_size,
                    [&](const Scope& scope, Value x, Value y) {
                      ModelOutputs out = model.build(scope, x, 10, Mode::train);
                      return TowerOutputs{classification_loss(scope, out.logits, y).total_loss, {}, out.updates};
                    },
                    options);
    std::vector<std::unique_ptr<Optimizer>> optimizers;
    std::vector<std::vector<Param>> params(static_cast<size_t>(dp.num_replicas()));
    for (int r = 0; r < dp.num_replicas(); ++r) {
      for (size_t v = 0; v < dp.trainable().size(); ++v)
        params[static_cast<size_t>(r)].push_back({dp.trainable()[v].name, &dp.replica(r).get(dp.trainable()[v].name),
                                                  &dp.gradient(r, static_cast<int>(v))});
      optimizers.push_back(make_optimizer(OptimizerConfig{}));
      optimizers.back()->init(params[static_cast<size_t>(r)]);
    }
    int64_t step = 0;
    seconds = median_seconds_per_step(flags, [&] {
      dp.step(images, labels, static_cast<uint64_t>(step));
      for (int r = 0; r < dp.num_replicas(); ++r)
        optimizers[static_cast<size_t>(r)]->apply(params[static_cast<size_t>(r)], 0.01f, step);
      ++step;
    });
    flops = graph_flops(dp.graph());
    // Reduction cost of the last step: all work of the reducer threads, and the part the step
    // waited for after every tower had finished its backward pass (not hidden by overlap).
    ReduceTrace trace = dp.reducer().trace();
    extra = {{"strategy", flags.strategy},
             {"reduce_ms", trace.reduce_seconds * 1e3},
             {"reduce_wait_ms", trace.finish_wait_seconds * 1e3},
             {"reduce_wait_share", trace.finish_wait_seconds / seconds}};
  } else {
    Graph graph;
    Scope scope(graph);
    Value x = scope.placeholder("images", images.shape());
    ModelOutputs out = model.build(scope, x, 10, Mode::eval);
    VariableStore vars;
    vars.initialize(graph, 1);
    Program program(graph, {out.logits}, vars, {Device{}, cores});
    program.input(x).copy_from(images);
    seconds = median_seconds_per_step(flags, [&] { program.run(); });
    flops = graph_flops(graph);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  nlohmann::json line = {{"model", flags.model},
                         {"mode", flags.mode},
                         {"batch_size", flags.batch_size},
                         {"threads", cores},
                         {"num_devices", flags.num_devices},
                         {"images_per_sec", static_cast<double>(flags.batch_size) / seconds},
                         {"ms_per_step", seconds * 1e3},
                         {"gflops", flops / seconds / 1e9},
                         {"mflop_per_image", flops / static_cast<double>(flags.batch_size) / 1e6},
                         {"peak_rss_mb", static_cast<double>(usage.ru_maxrss) / 1024.0}};
  line.update(extra);
  fmt::print("{}\n", line.dump());
}

CommandRegistrar registrar{{"bench", "Measure training or inference throughput on synthetic data", [](CLI::App& app) {
  static Flags flags;
  app.add_option("--model", flags.model, "Model")->capture_default_str();
  app.add_option("--mode", flags.mode, "train (forward + backward + SGD update) or infer")->capture_default_str();
  app.add_option("--batch_size", flags.batch_size, "Global batch")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--threads", flags.threads, "Threads in all (default: all cores)");
  app.add_option("--num_devices", flags.num_devices, "Towers (train mode)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--strategy", flags.strategy, "allreduce | central")->capture_default_str();
  app.add_option("--steps", flags.steps, "Steps per timed window")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--windows", flags.windows, "Timed windows (the median is reported)")->capture_default_str()->check(CLI::PositiveNumber);
  app.callback([] { run_bench(flags); });
}}};

}  // namespace
}  // namespace tower::cli
