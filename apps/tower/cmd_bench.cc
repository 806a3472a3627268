// `tower bench`: training or inference throughput of a model on synthetic data, as one JSON line:
// images_per_sec (median of timed windows after warm-up), ms_per_step, gflops, peak_rss_mb,
// arena_mb (tower 0's planned buffers, the larger part of the peak) and contended_runs (tower 0's
// steps run in contended mode, warm-up included: ProgramOptions).
// Under mpirun (train mode) the batch is split over the ranks and rank 0 prints the line, with
// the time spent in cross-rank communication.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "command.h"
#include "program_flags.h"
#include "tower/core/philox.h"
#include "tower/models/model.h"
#include "tower/models/model_file.h"
#include "tower/parallel/data_parallel.h"
#include "tower/train/trainer.h"
#include "tower/train/training_state.h"

namespace tower::cli {
namespace {

struct Flags {
  std::string model = "cifar10", mode = "train", strategy = "allreduce", devices, model_file,
              train_dir, optimizer = "sgd";
  int64_t batch_size = 0;         // per tower, as in train
  int64_t global_batch_size = 0;  // all towers and ranks; neither flag: 128
  int64_t micro_batch_size = 0;
  int threads = 0, num_devices = 1, steps = 10, windows = 5;
  int64_t image_size = 0;  // 0: the model's input
  double bucket_mb = 25;
  ProgramFlags program;
  bool profile = false;
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

// --profile: `steps` more steps with `program`'s kernels timed, then a table on stderr of the
// time per op type and what the step spends outside the kernels.
template <typename F>
void print_profile(const Flags& flags, Program& program, F&& step) {
  program.set_profiling(true);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < flags.steps; ++i) step();
  const double step_ms =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3 /
      flags.steps;
  const std::vector<KernelTime> kernels = program.profile();
  program.set_profiling(false);
  struct Row {
    int kernels = 0;
    double ms = 0;
  };
  std::map<std::string, Row> by_op;
  double kernels_ms = 0;
  for (const KernelTime& k : kernels) {
    Row& row = by_op[k.op];
    ++row.kernels;
    row.ms += k.seconds * 1e3 / flags.steps;
    kernels_ms += k.seconds * 1e3 / flags.steps;
  }
  std::vector<std::pair<std::string, Row>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  fmt::print(stderr, "profile of {} (tower 0), {} steps of {:.2f} ms:\n", flags.model, flags.steps,
             step_ms);
  fmt::print(stderr, "  {:<36} {:>8} {:>9} {:>7}\n", "op", "kernels", "ms/step", "share");
  for (const auto& [op, row] : rows)
    fmt::print(stderr, "  {:<36} {:>8} {:>9.3f} {:>6.1f}%\n", op, row.kernels, row.ms,
               100 * row.ms / step_ms);
  fmt::print(stderr, "  {:<36} {:>8} {:>9.3f} {:>6.1f}%\n", "all kernels", "", kernels_ms,
             100 * kernels_ms / step_ms);
  fmt::print(stderr, "  {:<36} {:>8} {:>9.3f} {:>6.1f}%\n", "outside kernels", "",
             step_ms - kernels_ms, 100 * (step_ms - kernels_ms) / step_ms);
  std::vector<KernelTime> slowest = kernels;
  std::sort(slowest.begin(), slowest.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
  slowest.resize(std::min<size_t>(slowest.size(), 12));
  fmt::print(stderr, "slowest kernels:\n");
  for (const KernelTime& k : slowest)
    fmt::print(stderr, "  {:<36} {:<24} {:>9.3f}\n", k.op, k.node, k.seconds * 1e3 / flags.steps);
}

// Cross-rank all-reduce time by message size (the latency/bandwidth of the MPI transport), the
// measurements the all-reduce scaling model (bench/e2e/allreduce_model.py) is fitted to.
void run_allreduce_bench(const Flags& flags, Communicator& comm) {
  nlohmann::json sizes = nlohmann::json::array(), seconds = nlohmann::json::array();
  for (int64_t bytes = 4096; bytes <= (64 << 20); bytes *= 4) {
    std::vector<float> data(static_cast<size_t>(bytes / 4), 1.0f);
    double t = median_seconds_per_step(flags, [&] { comm.allreduce_sum(data.data(), bytes / 4); });
    sizes.push_back(bytes);
    seconds.push_back(t);
  }
  if (comm.rank() == 0)
    fmt::print("{}\n", nlohmann::json{{"mode", "allreduce"},
                                      {"ranks", comm.size()},
                                      {"backend", comm.backend()},
                                      {"bytes", sizes},
                                      {"seconds", seconds}}
                           .dump());
}

// What one bench run measured: seconds per step, floating-point operations per step, and the
// fields of its mode for the JSON line.
struct Measured {
  double seconds = 0, flops = 0;
  nlohmann::json extra = nlohmann::json::object();  // update() refuses a null
};

// The towers and optimizers of `tower train` (--optimizer, plain SGD by default), on synthetic
// data.
Measured bench_train(const Flags& flags, const ModelDef& model, const DevicePlan& plan,
                     const BatchPlan& batches, const Tensor& images, const Tensor& labels,
                     Communicator& comm) {
  const int64_t local_batch = batches.local;
  Measured m;
  DataParallelOptions options;
  options.devices = plan.devices;
  options.threads = plan.threads;
  options.strategy = parse_strategy(flags.strategy);
  options.seed = 1;
  options.comm = &comm;
  options.program = program_options(flags.program);
  options.bucket_bytes = static_cast<size_t>(flags.bucket_mb * (1 << 20));
  options.micro_batch = flags.micro_batch_size;
  std::unique_ptr<DataParallel> towers = build_towers(
      model,
      Shape(std::vector<int64_t>(images.shape().dims().begin() + 1, images.shape().dims().end())),
      local_batch, 10, options);
  DataParallel& dp = *towers;
  const OptimizerConfig optimizer_config{.name = flags.optimizer};
  validate(optimizer_config);
  DataParallelOptimizer optimizer(dp, optimizer_config);
  int64_t step = 0;
  std::vector<ReduceTrace> traces;
  auto train_step = [&] {
    dp.step(images, labels, static_cast<uint64_t>(step));
    optimizer.apply(0.01f, step);
    traces.push_back(dp.reducer().trace());
    ++step;
  };
  m.seconds = median_seconds_per_step(flags, train_step);
  // With micro-batches the graph is one micro-batch's, run local_batch / micro times per rank.
  m.flops =
      graph_flops(dp.graph()) * comm.size() * (batches.micro > 0 ? local_batch / batches.micro : 1);
  // Mean over the timed steps of: all work of the reducer threads, the time in cross-rank
  // collectives, and the part of the step spent waiting for the reduction after every tower had
  // finished its backward pass (what overlap did not hide).
  ReduceTrace mean;
  const size_t timed = static_cast<size_t>(flags.steps * flags.windows);
  for (size_t i = traces.size() - timed; i < traces.size(); ++i) {
    mean.reduce_seconds += traces[i].reduce_seconds / static_cast<double>(timed);
    mean.comm_seconds += traces[i].comm_seconds / static_cast<double>(timed);
    mean.finish_wait_seconds += traces[i].finish_wait_seconds / static_cast<double>(timed);
  }
  if (flags.profile) print_profile(flags, dp.program(0), train_step);
  std::vector<Tensor> grads;
  for (const auto& v : dp.trainable()) grads.emplace_back(v.value.shape(), DType::f32);
  m.extra = {{"strategy", flags.strategy},
             {"optimizer", flags.optimizer},
             {"ranks", comm.size()},
             {"bucket_bytes", bucket_sizes(grads, options.bucket_bytes)},
             {"reduce_ms", mean.reduce_seconds * 1e3},
             {"comm_ms", mean.comm_seconds * 1e3},
             {"reduce_wait_ms", mean.finish_wait_seconds * 1e3},
             {"reduce_wait_share", mean.finish_wait_seconds / m.seconds},
             {"contended_runs", dp.program(0).stats().contended_runs},
             {"fused_nodes", dp.program(0).stats().fused_nodes},
             {"reorders", dp.program(0).stats().reorders},
             {"arena_mb", static_cast<double>(dp.program(0).stats().arena_bytes) / (1 << 20)}};
  return m;
}

// The model's eval graph on one device with all the cores.
Measured bench_infer(const Flags& flags, const ModelDef& model, const DevicePlan& plan,
                     const Tensor& images) {
  const int cores = plan.cores;
  Measured m;
  Graph graph;
  Scope scope(graph);
  Value x = scope.placeholder("images", images.shape());
  ModelOutputs out = model.build(scope, x, 10, Mode::eval);
  VariableStore vars;
  vars.initialize(graph, 1);
  const Device device = plan.devices[0];
  VariableStore device_vars(device);
  device_vars.copy_from(vars);
  ProgramOptions options = program_options(flags.program);
  options.device = device;
  options.num_threads = cores;
  Program program(graph, {out.logits}, device_vars, options);
  program.input(x).copy_from(images);
  m.seconds = median_seconds_per_step(flags, [&] { program.run(); });
  if (flags.profile) print_profile(flags, program, [&] { program.run(); });
  m.flops = graph_flops(graph);
  m.extra = {{"contended_runs", program.stats().contended_runs},
             {"fused_nodes", program.stats().fused_nodes},
             {"reorders", program.stats().reorders},
             {"arena_mb", static_cast<double>(program.stats().arena_bytes) / (1 << 20)}};
  return m;
}

void run_bench(Flags flags) {
  Communicator& comm = world();
  if (flags.mode == "allreduce") return run_allreduce_bench(flags, comm);
  if (!flags.model_file.empty()) flags.model = load_model_file(flags.model_file);
  if (!flags.train_dir.empty()) {  // the model of the latest checkpoint there
    auto latest = checkpoint_latest(flags.train_dir);
    if (!latest) fail("--train_dir: no checkpoint in '{}'", flags.train_dir);
    flags.model = run_model(load_training_checkpoint(*latest).state, *latest + ".json").name;
  }
  const ModelDef& model = get_model(flags.model);
  if (flags.mode != "train" && flags.mode != "infer")
    fail("bad --mode '{}': expected train, infer or allreduce", flags.mode);
  const DevicePlan plan = select_devices(
      {.devices = flags.devices.empty() ? std::vector<Device>{} : parse_device_list(flags.devices),
       .num_devices = flags.num_devices,
       .threads = flags.threads,
       .precision = parse_precision(flags.program.precision)},
      comm);
  const int cores = plan.cores;
  // --batch_size is per tower, as in `tower train`; --global_batch_size the whole step's.
  const int64_t towers = flags.mode == "train" ? static_cast<int64_t>(plan.devices.size()) : 1;
  const int ranks = flags.mode == "train" ? comm.size() : 1;
  const BatchPlan batches = plan_batches(
      {.batch_size = flags.batch_size,
       .global_batch_size =
           flags.batch_size == 0 && flags.global_batch_size == 0 ? 128 : flags.global_batch_size,
       .micro_batch_size = flags.mode == "train" ? flags.micro_batch_size : 0},
      towers, ranks);
  const int64_t local_batch = batches.local;
  flags.global_batch_size = batches.global;
  std::vector<int64_t> dims = {local_batch};
  for (int64_t d : model.default_input.dims()) dims.push_back(d);
  if (flags.image_size > 0) dims[2] = dims[3] = flags.image_size;
  Tensor images = random_images(Shape(dims));
  Tensor labels(Shape{local_batch}, DType::i32);
  for (int64_t i = 0; i < local_batch; ++i)
    labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);

  const Measured m = flags.mode == "train"
                         ? bench_train(flags, model, plan, batches, images, labels, comm)
                         : bench_infer(flags, model, plan, images);
  const double seconds = m.seconds, flops = m.flops;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  nlohmann::json line = {
      {"model", flags.model},
      {"mode", flags.mode},
      {"global_batch_size", flags.global_batch_size},
      {"batch_size", flags.global_batch_size / (towers * ranks)},
      {"micro_batch_size", flags.micro_batch_size},
      {"threads", cores},
      {"image_size", dims[2]},
      {"precision", flags.program.precision},
      {"num_devices", flags.num_devices},
      {"devices", flags.devices.empty() ? "cpu" : flags.devices},
      {"images_per_sec", static_cast<double>(flags.global_batch_size) / seconds},
      {"ms_per_step", seconds * 1e3},
      {"gflops", flops / seconds / 1e9},
      {"mflop_per_image", flops / static_cast<double>(flags.global_batch_size) / 1e6},
      {"peak_rss_mb", static_cast<double>(usage.ru_maxrss) / 1024.0}};
  line.update(m.extra);
  if (comm.rank() == 0) fmt::print("{}\n", line.dump());
}

CommandRegistrar registrar{
    {"bench", "Measure training or inference throughput on synthetic data", [](CLI::App& app) {
       static Flags flags;
       app.add_option("--model", flags.model, "Model")->capture_default_str();
       app.add_option("--model_file", flags.model_file,
                      "A network as a JSON file (docs/model_file.md), instead of --model");
       app.add_option("--train_dir", flags.train_dir,
                      "The model of the latest checkpoint there, instead of --model");
       app.add_option("--mode", flags.mode,
                      "train (forward + backward + SGD update), infer, or allreduce (MPI transport "
                      "time by message size, under mpirun)")
           ->capture_default_str();
       app.add_option("--bucket_mb", flags.bucket_mb, "All-reduce bucket size in MB (train mode)")
           ->capture_default_str();
       app.add_option("--batch_size", flags.batch_size, "Examples per tower (as tower train)")
           ->check(positive);
       app.add_option("--global_batch_size", flags.global_batch_size,
                      "Examples per step, all towers and ranks (default 128)")
           ->check(positive);
       app.add_option("--micro_batch_size", flags.micro_batch_size,
                      "Train mode: micro-batches of this size summed by one fixed tree (as tower "
                      "train)")
           ->check(positive);
       app.add_option("--threads", flags.threads, "Threads in all (default: all cores)");
       app.add_option("--image_size", flags.image_size,
                      "Square images of this size (default: the model's input)")
           ->check(CLI::PositiveNumber);
       app.add_option("--num_devices", flags.num_devices, "Towers (train mode)")
           ->capture_default_str()
           ->check(positive);
       app.add_option("--devices", flags.devices,
                      "Devices instead of CPU towers, e.g. cuda:0 or cuda:0,cuda:1");
       add_program_flags(app, flags.program);
       app.add_option("--strategy", flags.strategy, "allreduce | central")->capture_default_str();
       app.add_option("--optimizer", flags.optimizer,
                      "Train mode's update: sgd | momentum (0.9) | adam | adamw, lr 0.01")
           ->capture_default_str();
       app.add_flag("--profile", flags.profile,
                    "Then time every kernel: a table of ms per op type on stderr");
       app.add_option("--steps", flags.steps, "Steps per timed window")
           ->capture_default_str()
           ->check(positive);
       app.add_option("--windows", flags.windows, "Timed windows (the median is reported)")
           ->capture_default_str()
           ->check(positive);
       app.callback([] { run_bench(flags); });
     }}};

}  // namespace
}  // namespace tower::cli
