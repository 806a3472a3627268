#include "tower/train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tower/core/thread_pool.h"
#include "tower/data/input_pipeline.h"
#include "tower/io/checkpoint.h"
#include "tower/io/event_writer.h"
#include "tower/io/metrics_log.h"
#include "tower/models/model.h"
#include "tower/ops/nn_loss.h"
#include "tower/parallel/data_parallel.h"
#include "tower/train/clip.h"
#include "tower/train/ema.h"
#include "tower/train/evaluator.h"
#include "tower/train/lr_schedule.h"

namespace tower {
namespace {

using Clock = std::chrono::steady_clock;
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int signal) { g_stop_signal.store(signal); }

// Restores the previous SIGINT/SIGTERM handlers when training ends.
struct StopSignals {
  StopSignals() {
    g_stop_signal.store(0);
    previous_int = std::signal(SIGINT, on_stop_signal);
    previous_term = std::signal(SIGTERM, on_stop_signal);
  }
  ~StopSignals() {
    std::signal(SIGINT, previous_int);
    std::signal(SIGTERM, previous_term);
  }
  void (*previous_int)(int);
  void (*previous_term)(int);
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<Device> choose_devices(const TrainConfig& config, int cores, const Communicator& comm) {
  if (!config.devices.empty())
    return resolve_devices(config.devices, config.allow_soft_placement, comm.local_rank());
  int n = config.num_devices > 0 ? config.num_devices : cores;
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::cpu, i});
  return devices;
}

// What must agree between a checkpoint and the run resuming it.
nlohmann::json run_identity(const TrainConfig& config, size_t num_towers, int ranks) {
  return {{"model", config.model},
          {"data", config.data},
          {"batch_size", config.batch_size},
          {"num_towers", num_towers},
          {"ranks", ranks},
          {"strategy", std::string(strategy_name(config.strategy))},
          {"optimizer", config.optimizer.name},
          {"seed", config.seed}};
}

// An image summary of the first few training inputs after distortion, each rescaled to 0..255.
void add_input_images(EventWriter& events, const Tensor& images, int64_t step) {
  const Shape& s = images.shape();
  const int c = static_cast<int>(s[1]), h = static_cast<int>(s[2]), w = static_cast<int>(s[3]);
  if (c != 1 && c != 3) return;
  const int64_t plane = static_cast<int64_t>(h) * w;
  for (int64_t n = 0; n < std::min<int64_t>(s[0], 3); ++n) {
    const float* x = images.data<float>() + n * c * plane;
    auto [lo, hi] = std::minmax_element(x, x + c * plane);
    const float range = *hi > *lo ? *hi - *lo : 1.0f;
    std::vector<uint8_t> hwc(static_cast<size_t>(c * plane));
    for (int64_t p = 0; p < plane; ++p)
      for (int ch = 0; ch < c; ++ch)
        hwc[static_cast<size_t>(p * c + ch)] =
            static_cast<uint8_t>(255.0f * (x[ch * plane + p] - *lo) / range + 0.5f);
    events.add_image(fmt::format("input/image/{}", n), hwc.data(), h, w, c, step);
  }
}

// What must agree between all ranks of one job: everything that changes the numbers.
std::vector<std::pair<std::string, std::string>> rank_fields(const TrainConfig& c, size_t towers,
                                                             const Dataset& data) {
  const OptimizerConfig& o = c.optimizer;
  std::vector<std::pair<std::string, std::string>> fields = {
      {"--model", c.model}, {"--data", c.data},
      {"the data set's size", fmt::format("{} examples of {}", data.size(), data.image_shape().to_string())},
      {"the number of towers", std::to_string(towers)}, {"--batch_size", std::to_string(c.batch_size)},
      {"--strategy", std::string(strategy_name(c.strategy))}, {"--bucket_mb", fmt::format("{}", c.bucket_mb)},
      {"--max_steps", std::to_string(c.max_steps)}, {"--epochs", fmt::format("{}", c.epochs)},
      {"--optimizer", o.name}, {"--momentum", fmt::format("{}", o.momentum)},
      {"--nesterov", fmt::format("{}", o.nesterov)}, {"--weight_decay", fmt::format("{}", o.weight_decay)},
      {"--beta1", fmt::format("{}", o.beta1)}, {"--beta2", fmt::format("{}", o.beta2)},
      {"--epsilon", fmt::format("{}", o.epsilon)}, {"--lr", fmt::format("{}", c.lr)},
      {"--lr_schedule", c.lr_schedule}, {"--clip_norm", fmt::format("{}", c.clip_norm)},
      {"--ema_decay", fmt::format("{}", c.ema_decay)}, {"--seed", std::to_string(c.seed)},
      {"--resume_from", c.resume_from}, {"--deterministic", fmt::format("{}", c.deterministic)}};
  return fields;
}

}  // namespace

TrainResult train(const TrainConfig& config, Communicator& comm) {
  const auto start = Clock::now();
  const bool chief = comm.rank() == 0;  // the one writer
  comm.set_timeout(config.comm_timeout);
  const int cores = cores_per_rank(comm);
  const std::vector<Device> devices = choose_devices(config, cores, comm);
  const int num_towers = static_cast<int>(devices.size());
  if (config.batch_size < 1) fail("--batch_size must be >= 1, got {}", config.batch_size);
  if (config.clip_norm < 0) fail("--clip_norm must be >= 0 (0: no clipping), got {}", config.clip_norm);
  if (config.max_steps <= 0 && config.epochs <= 0)
    fail("nothing to train: give --max_steps N or --epochs E greater than 0");
  const ModelDef& model = get_model(config.model);
  const DatasetSpec spec = parse_dataset_spec(config.data);
  auto train_set = std::make_shared<const Dataset>(open_dataset(spec, Split::train));
  check_same_on_all_ranks(comm, rank_fields(config, devices.size(), *train_set), "flags");
  const int64_t local_batch = config.batch_size * num_towers;
  const int64_t global_batch = local_batch * comm.size();

  // Resume (rank 0 reads, the others are told): the latest checkpoint of the train dir, or the
  // one named by --resume_from.
  std::optional<CheckpointData> checkpoint;
  std::string prefix = chief ? config.resume_from : std::string();
  if (chief) std::filesystem::create_directories(config.train_dir);
  if (chief && prefix.empty()) {
    if (auto latest = checkpoint_latest(config.train_dir)) prefix = *latest;
  }
  if (!prefix.empty()) {
    try {
      checkpoint = checkpoint_load(prefix);
    } catch (const Error& e) {
      // Never fall back silently: say which older checkpoint could be used instead.
      auto steps = checkpoint_list(config.train_dir);
      std::string older;
      for (int64_t s : steps)
        if (checkpoint_prefix(config.train_dir, s) != prefix) older = checkpoint_prefix(config.train_dir, s);
      if (!config.resume_from.empty() || older.empty()) throw;
      fail("{}\nan older checkpoint exists: pass --resume_from {} to resume from it", e.what(), older);
    }
    nlohmann::json expected = run_identity(config, devices.size(), comm.size());
    const nlohmann::json& saved = checkpoint->state.at("run");
    for (auto& [key, value] : expected.items())
      if (saved.value(key, nlohmann::json()) != value)
        fail("checkpoint {} was written by a run with {} = {}, but this run has {} = {}; use "
             "another --train_dir or the same flags",
             prefix, key, saved.value(key, nlohmann::json()).dump(), key, value.dump());
  }

  nlohmann::json resume;  // {step, position} of the checkpoint, null when starting fresh
  if (checkpoint) resume = {{"step", checkpoint->step}, {"position", checkpoint->state.at("position")}};
  if (comm.size() > 1) resume = nlohmann::json::parse(comm.allgather(chief ? resume.dump() : "")[0]);

  PipelineOptions pipeline_options;
  pipeline_options.batch_size = global_batch;
  pipeline_options.rank = comm.rank();
  pipeline_options.world_size = comm.size();
  pipeline_options.seed = config.seed;
  pipeline_options.num_workers = std::max(config.num_preprocess_threads, 0);
  pipeline_options.transform = train_transform_for(model.default_input, train_set->image_shape());
  if (!resume.is_null())
    pipeline_options.start = {resume.at("position").at("epoch").get<int64_t>(),
                              resume.at("position").at("step").get<int64_t>()};
  InputPipeline pipeline(train_set, pipeline_options);
  if (pipeline.batches_per_epoch() < 1)
    fail("the data set {} has {} examples, fewer than one global batch of {}", train_set->name,
         train_set->size(), global_batch);
  const int num_classes = train_set->num_classes;

  TowerFn tower_fn = [&](const Scope& scope, Value images, Value labels) {
    ModelOutputs out = model.build(scope, images, num_classes, Mode::train);
    LossOutputs loss = classification_loss(scope, out.logits, labels);
    Value accuracy = ops::accuracy(scope, out.logits, labels);
    return TowerOutputs{loss.total_loss, {loss.cross_entropy, accuracy}, out.updates};
  };
  DataParallelOptions dp_options;
  dp_options.devices = devices;
  dp_options.threads = split_cores(cores, num_towers);
  dp_options.comm = &comm;
  dp_options.strategy = config.strategy;
  dp_options.bucket_bytes = static_cast<size_t>(config.bucket_mb * 1024 * 1024);
  dp_options.seed = config.seed;
  dp_options.deterministic = config.deterministic;
  DataParallel dp(pipeline.image_shape(), local_batch, tower_fn, dp_options);
  if (config.log_device_placement && chief)
    for (int t = 0; t < dp.num_towers(); ++t) std::fputs(dp.program(t).placement_log().c_str(), stderr);

  // One optimizer per replica: identical inputs, identical updates, identical replicas.
  const auto& trainable = dp.trainable();
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  std::vector<std::vector<Param>> params;
  for (int r = 0; r < dp.num_replicas(); ++r) {
    params.push_back(replica_params(dp, r));
    optimizers.push_back(make_optimizer(config.optimizer));
    optimizers.back()->init(params[static_cast<size_t>(r)]);
  }
  const int64_t steps_per_epoch = pipeline.batches_per_epoch();
  const int64_t total_steps =
      config.max_steps > 0
          ? config.max_steps
          : static_cast<int64_t>(std::ceil(config.epochs * static_cast<double>(steps_per_epoch)));
  auto schedule = parse_lr_schedule(config.lr_schedule, config.lr, steps_per_epoch, total_steps);
  std::unique_ptr<ExponentialMovingAverage> ema;
  if (config.ema_decay > 0) {
    ema = std::make_unique<ExponentialMovingAverage>(config.ema_decay);
    std::vector<std::pair<std::string, const Tensor*>> vars;
    for (const auto& v : trainable) vars.push_back({v.name, &dp.replica(0).get(v.name)});
    ema->init(vars);
  }

  // Every tensor of the training state: what a checkpoint restores and rank 0 hands the others.
  auto state_tensors = [&] {
    std::vector<std::pair<std::string, Tensor*>> all;
    for (int r = 0; r < dp.num_replicas(); ++r) {
      for (const std::string& name : dp.replica(r).names()) all.push_back({name, &dp.replica(r).get(name)});
      for (auto& slot : optimizers[static_cast<size_t>(r)]->slots()) all.push_back(slot);
    }
    if (ema)
      for (auto& shadow : ema->shadows()) all.push_back(shadow);
    return all;
  };
  int64_t step = resume.is_null() ? 0 : resume.at("step").get<int64_t>();
  if (checkpoint) {
    auto take = [&](const std::string& name, Tensor& into) {
      auto it = checkpoint->tensors.find(name);
      if (it == checkpoint->tensors.end())
        fail("checkpoint {} has no tensor '{}' (was it written by another model?)", prefix, name);
      if (it->second.shape() != into.shape())
        fail("checkpoint {}: tensor '{}' has shape {}, the model expects {}", prefix, name,
             it->second.shape().to_string(), into.shape().to_string());
      into.copy_from(it->second);
    };
    for (auto& [name, tensor] : state_tensors()) take(name, *tensor);
    std::printf("resumed from %s at step %lld\n", prefix.c_str(), static_cast<long long>(step));
  }
  if (!resume.is_null() && comm.size() > 1) {
    std::vector<Tensor*> tensors;
    for (auto& named : state_tensors()) tensors.push_back(named.second);
    broadcast_from_rank0(comm, tensors, "training state after resuming");
  }

  // Hooks.
  std::optional<MetricsLog> metrics;
  std::unique_ptr<EventWriter> events;
  if (chief) metrics.emplace(config.train_dir + "/metrics.jsonl");
  if (chief && config.summaries) events = std::make_unique<EventWriter>(config.train_dir);
  std::unique_ptr<Evaluator> evaluator;
  auto evaluate = [&]() {
    if (!evaluator) {
      auto test_set = std::make_shared<const Dataset>(open_dataset(spec, Split::test));
      evaluator = std::make_unique<Evaluator>(
          config.model, test_set, eval_transform_for(model.default_input, test_set->image_shape()),
          500, cores);
    }
    return evaluator->evaluate([&](const std::string& name) -> const Tensor& {
      if (ema && ema->has(name)) return ema->shadow(name);
      return dp.replica(0).get(name);
    });
  };
  std::optional<Batch> next;  // taken one step early: its copy to GPU towers overlaps the update
  auto save = [&]() {
    std::vector<std::pair<std::string, const Tensor*>> tensors;
    for (const std::string& name : dp.replica(0).names()) tensors.push_back({name, &dp.replica(0).get(name)});
    for (auto& [name, slot] : optimizers[0]->slots()) tensors.push_back({name, slot});
    if (ema)
      for (auto& [name, shadow] : ema->shadows()) tensors.push_back({name, shadow});
    // The next batch to train on: the one already taken for prefetching, if any.
    Position position = next ? Position{next->epoch, next->step} : pipeline.position();
    nlohmann::json state = {{"step", step},
                            {"epoch", position.epoch},
                            {"position", {{"epoch", position.epoch}, {"step", position.step}}},
                            {"run", run_identity(config, devices.size(), comm.size())},
                            {"devices", [&] {
                               std::vector<std::string> d;
                               for (auto& dev : devices) d.push_back(dev.to_string());
                               return d;
                             }()},
                            {"ema", ema != nullptr}};
    checkpoint_save(config.train_dir, step, tensors, state, config.keep_checkpoints);
  };

  ThreadPool update_pool(dp.num_replicas() - 1);
  // On a terminal a live progress line replaces the classic log lines.
  // (mpirun hands ranks a pseudo-terminal even when its own output is a file: no bar there.)
  const bool progress_bar = comm.size() == 1 && isatty(STDOUT_FILENO) != 0;
  const int64_t first_step = step;
  const auto bar_start = Clock::now();
  auto last_bar = bar_start;
  StopSignals signals;
  TrainResult result;
  auto last_save = Clock::now();
  auto window_start = Clock::now();
  int64_t window_steps = 0;
  if (chief) {
    std::printf("training %s on %s: %s%d tower%s (%s), global batch %lld, %lld steps (%lld per epoch)\n",
                config.model.c_str(), train_set->name.c_str(),
                comm.size() > 1 ? fmt::format("{} ranks x ", comm.size()).c_str() : "", num_towers,
                num_towers == 1 ? "" : "s", std::string(strategy_name(config.strategy)).c_str(),
                static_cast<long long>(global_batch), static_cast<long long>(total_steps),
                static_cast<long long>(steps_per_epoch));
    std::fflush(stdout);
  }
  while (step < total_steps) {
    Batch batch = next ? std::move(*next) : pipeline.next();
    next.reset();
    StepResult out = dp.step(batch.images, batch.labels, static_cast<uint64_t>(step));
    if (!std::isfinite(out.loss))
      fail("the loss is {} at step {}: training diverged (try a lower --lr or --clip_norm); "
           "the last good checkpoint in {} is kept",
           out.loss, step, config.train_dir);
    if (step + 1 < total_steps) {
      next = pipeline.next();
      dp.prefetch(next->images, next->labels);
    }
    const float lr = schedule->lr(step);
    // Replicas are independent: update them side by side (each gets identical bits anyway).
    update_pool.parallel_for(dp.num_replicas(), [&](int64_t r) {
      auto& replica_params = params[static_cast<size_t>(r)];
      if (config.clip_norm > 0) {
        std::vector<Tensor*> grads;
        for (auto& p : replica_params) grads.push_back(const_cast<Tensor*>(p.grad));
        clip_by_global_norm(grads, config.clip_norm);
      }
      optimizers[static_cast<size_t>(r)]->apply(replica_params, lr, step);
    });
#ifndef NDEBUG
    TOWER_CHECK_MSG(dp.replicas_identical(), "replicas diverged at step {}", step);
#endif
    ++step;
    if (ema) ema->update(step);
    ++window_steps;
    result.last_loss = out.loss;
    if (events && step == 1) add_input_images(*events, batch.images, step);

    const bool last = step == total_steps;
    if (progress_bar && (last || seconds_since(last_bar) > 0.2)) {
      last_bar = Clock::now();
      const double elapsed = seconds_since(bar_start);
      const double done = static_cast<double>(step - first_step) / static_cast<double>(total_steps - first_step);
      const int filled = static_cast<int>(20 * static_cast<double>(step) / static_cast<double>(total_steps));
      std::printf("\r[%s%s] epoch %.2f  step %lld/%lld  loss %.4f  %.0f examples/s  ETA %.0f s ",
                  std::string(static_cast<size_t>(filled), '#').c_str(),
                  std::string(static_cast<size_t>(20 - filled), '.').c_str(),
                  static_cast<double>(step) / static_cast<double>(steps_per_epoch),
                  static_cast<long long>(step), static_cast<long long>(total_steps), out.loss,
                  static_cast<double>((step - first_step) * global_batch) / elapsed,
                  done > 0 ? elapsed * (1 - done) / done : 0.0);
      if (last) std::printf("\n");
      std::fflush(stdout);
    }
    if (config.log_every > 0 && (step % config.log_every == 0 || last)) {
      double seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
      double per_batch = seconds / static_cast<double>(window_steps);
      double examples_per_sec = static_cast<double>(global_batch) / per_batch;
      if (chief && !progress_bar) {
        std::printf("step %lld, loss = %.4f (%.1f examples/sec; %.3f sec/batch) lr %.3g\n",
                    static_cast<long long>(step), out.loss, examples_per_sec, per_batch, lr);
        std::fflush(stdout);
      }
      if (metrics)
        metrics->append({{"step", step},
                      {"wall_time", seconds_since(start)},
                      {"epoch", static_cast<double>(step) / static_cast<double>(steps_per_epoch)},
                      {"loss", out.loss},
                      {"cross_entropy", out.metrics[0]},
                      {"train_accuracy", out.metrics[1]},
                      {"lr", lr},
                      {"examples_per_sec", examples_per_sec}});
      if (events) {
        events->add_scalar("total_loss", out.loss, step);
        events->add_scalar("cross_entropy", out.metrics[0], step);
        events->add_scalar("learning_rate", lr, step);
        events->add_scalar("examples_per_sec", static_cast<float>(examples_per_sec), step);
        for (size_t v = 0; v < trainable.size(); ++v) {
          const Tensor& w = dp.replica(0).get(trainable[v].name);
          events->add_histogram(trainable[v].name, w.data<float>(), static_cast<size_t>(w.numel()), step);
          const Tensor& g = dp.gradient(0, static_cast<int>(v));
          events->add_histogram(trainable[v].name + "/gradients", g.data<float>(),
                                static_cast<size_t>(g.numel()), step);
        }
        events->flush();
      }
      window_start = Clock::now();
      window_steps = 0;
    }
    if (chief && config.eval_every > 0 && step % config.eval_every == 0 && !last) {
      double precision = evaluate();
      std::printf("%sstep %lld, precision @ 1 = %.4f\n", progress_bar ? "\n" : "",
                  static_cast<long long>(step), precision);
      metrics->append({{"step", step}, {"wall_time", seconds_since(start)}, {"eval_precision_at_1", precision}});
      if (events) events->add_scalar("precision_at_1", static_cast<float>(precision), step);
      result.eval_accuracy = precision;
    }
    // A signal to any rank stops every rank after the same step.
    float signal = static_cast<float>(g_stop_signal.load());
    comm.allreduce_sum(&signal, 1);
    const bool stop = signal != 0;
    const double since_save = std::chrono::duration<double>(Clock::now() - last_save).count();
    if (chief && (last || stop || (config.save_every_steps > 0 && step % config.save_every_steps == 0) ||
                  (config.save_every_secs > 0 && since_save >= config.save_every_secs))) {
      save();
      last_save = Clock::now();
    }
    if (stop) {
      if (chief)
        std::printf("%sstopped by %s at step %lld; checkpoint written\n", progress_bar ? "\n" : "",
                    g_stop_signal.load() != 0 ? fmt::format("signal {}", g_stop_signal.load()).c_str()
                                              : "a signal to another rank",
                    static_cast<long long>(step));
      result.interrupted = true;
      break;
    }
  }
  std::vector<const Tensor*> weights;
  for (const auto& v : trainable) weights.push_back(&dp.replica(0).get(v.name));
  check_identical_on_all_ranks(comm, weights, "trained weights");
  if (chief && config.final_eval && !result.interrupted) {
    double precision = evaluate();
    std::printf("precision @ 1 = %.4f (%lld test examples, %s weights)\n", precision,
                static_cast<long long>(evaluator->examples()), ema ? "moving-average" : "raw");
    metrics->append({{"step", step}, {"wall_time", seconds_since(start)}, {"eval_precision_at_1", precision}});
    if (events) events->add_scalar("precision_at_1", static_cast<float>(precision), step);
    result.eval_accuracy = precision;
  }
  result.steps = step;
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace tower
