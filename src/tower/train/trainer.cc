#include "tower/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "tower/core/thread_pool.h"
#include "tower/core/trace.h"
#include "tower/data/input_pipeline.h"
#include "tower/io/event_writer.h"
#include "tower/io/metrics_log.h"
#include "tower/ops/nn_loss.h"
#include "tower/parallel/data_parallel.h"
#include "tower/train/clip.h"
#include "tower/train/ema.h"
#include "tower/train/evaluator.h"
#include "tower/train/lr_schedule.h"
#include "tower/train/training_state.h"

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

// One training run, as its stages: train() calls them in order.
class Run {
 public:
  Run(const TrainConfig& config, Communicator& comm)
      : config_(config), comm_(comm), chief_(comm.rank() == 0), model_(get_model(config.model)) {}
  ~Run() {
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  TrainResult go() {
    set_up_devices();
    open_data();
    find_checkpoint();
    build_towers();
    restore_or_init();
    open_hooks();
    StopSignals signals;
    print_start();
    while (step_ < total_steps_ && !result_.interrupted) loop_step();
    trace_steps();
    finish();
    return result_;
  }

 private:
  void set_up_devices() {
    comm_.set_timeout(config_.comm_timeout);
    plan_ = select_devices({.devices = config_.devices,
                            .num_devices = config_.num_devices,
                            .num_gpus = config_.num_gpus,
                            .threads = config_.num_threads,
                            .allow_soft_placement = config_.allow_soft_placement,
                            .precision = config_.program.precision},
                           comm_);
    const bool micro = config_.micro_batch_size > 0;
    batches_ = plan_batches({.batch_size = micro ? 0 : config_.batch_size,
                             .global_batch_size = config_.global_batch_size,
                             .micro_batch_size = config_.micro_batch_size},
                            static_cast<int64_t>(plan_.devices.size()), comm_.size());
  }

  // Both splits are opened (and so checked) before the first step.
  void open_data() {
    spec_ = run_data_spec(data_options(config_), model_);
    spec_.report = chief_;  // one progress line and one warning per job, not one per rank
    train_set_ = std::make_shared<const Dataset>(open_dataset(spec_, Split::train));
    transforms_ =
        input_transforms(config_.augmentation, model_.default_input, train_set_->image_shape());
    const std::string warning = check_model_fits_data(
        model_, transform_output_shape(transforms_.train, train_set_->image_shape()), *train_set_);
    if (chief_ && !warning.empty()) fmt::print(stderr, "warning: {}\n", warning);
    if (chief_ && (config_.final_eval || config_.eval_every > 0))
      test_set_ = std::make_shared<const Dataset>(open_dataset(spec_, Split::test));
    check_same_on_all_ranks(comm_, rank_fields(config_, plan_.devices.size(), *train_set_),
                            "flags");
    if (config_.micro_batch_size > 0 && batches_.global > train_set_->size())
      fail("--global_batch_size {} is more than the {} examples of the training set {}",
           batches_.global, train_set_->size(), train_set_->name);
    if (batches_.global > train_set_->size())
      fail(
          "{} tower{} (--num_devices or --devices) x --batch_size {}{} = {} examples per step, but "
          "the training set {} has {}: lower --batch_size or the number of towers",
          plan_.devices.size(), plan_.devices.size() == 1 ? "" : "s", config_.batch_size,
          comm_.size() > 1 ? fmt::format(" x {} ranks", comm_.size()) : std::string(),
          batches_.global, train_set_->name, train_set_->size());
  }

  // Rank 0 finds the checkpoint to resume from and tells the others where training stands. The
  // train dir is made (and locked) only now, after the devices and the data passed their checks:
  // a refused run leaves nothing behind.
  void find_checkpoint() {
    if (chief_) {
      prepare_train_dir(config_.train_dir);
      lock_fd_ = lock_train_dir(config_.train_dir);
      if (!config_.resume_from.empty())
        checkpoint_ = load_training_checkpoint(config_.resume_from);
      else
        checkpoint_ = find_resume_checkpoint(config_.train_dir);
    }
    if (checkpoint_) refuse_other_run(*checkpoint_, identity());
    nlohmann::json resume;  // {step, epoch, epoch_step}; null when starting fresh
    if (checkpoint_)
      resume = {checkpoint_->state.step, checkpoint_->state.epoch, checkpoint_->state.epoch_step};
    if (comm_.size() > 1)
      resume = nlohmann::json::parse(comm_.allgather(chief_ ? resume.dump() : "")[0]);
    PipelineOptions options;
    options.batch_size = batches_.global;
    options.rank = comm_.rank();
    options.world_size = comm_.size();
    options.seed = config_.seed;
    options.num_workers = std::max(config_.num_preprocess_threads, 0);
    options.transform = transforms_.train;
    if (!resume.is_null()) {
      resumed_ = true;
      step_ = resume[0].get<int64_t>();
      options.start = {resume[1].get<int64_t>(), resume[2].get<int64_t>()};
    }
    pipeline_ = std::make_unique<InputPipeline>(train_set_, options);
    steps_per_epoch_ = pipeline_->batches_per_epoch();
    if (options.start.step >= steps_per_epoch_)
      fail(
          "checkpoint {}: its position (epoch {}, step {}) is past the end of an epoch of {} steps",
          checkpoint_ ? checkpoint_->data.prefix : std::string("of rank 0"), options.start.epoch,
          options.start.step, steps_per_epoch_);
    total_steps_ = config_.max_steps > 0
                       ? config_.max_steps
                       : static_cast<int64_t>(
                             std::ceil(config_.epochs * static_cast<double>(steps_per_epoch_)));
    if (total_steps_ > kMaxSteps)
      fail("--epochs {} is {} steps of {} per epoch, more than {}", config_.epochs, total_steps_,
           steps_per_epoch_, kMaxSteps);
    if (checkpoint_ && !config_.allow_schedule_change)
      refuse_schedule_change(*checkpoint_, {config_.lr_schedule, config_.lr, total_steps_}, step_,
                             steps_per_epoch_);
  }

  void build_towers() {
    DataParallelOptions options;
    options.devices = plan_.devices;
    options.threads = plan_.threads;
    options.comm = &comm_;
    options.strategy = config_.strategy;
    options.bucket_bytes = static_cast<size_t>(config_.bucket_mb * 1024 * 1024);
    options.seed = config_.seed;
    options.program = config_.program;
    options.micro_batch = config_.micro_batch_size;
    towers_ = tower::build_towers(model_, pipeline_->image_shape(), batches_.local,
                                  train_set_->num_classes, options, config_.optimizer);
    dp_ = towers_.dp.get();
    if (config_.log_device_placement && chief_)
      for (int t = 0; t < dp_->num_towers(); ++t)
        std::fputs(dp_->program(t).placement_log().c_str(), stderr);
    std::string warning;
    schedule_ = parse_lr_schedule(config_.lr_schedule, config_.lr, steps_per_epoch_, total_steps_,
                                  &warning);
    if (chief_ && !warning.empty()) fmt::print(stderr, "warning: {}\n", warning);
    if (config_.ema_decay > 0) {
      ema_ = std::make_unique<ExponentialMovingAverage>(config_.ema_decay);
      std::vector<std::pair<std::string, const Tensor*>> vars;
      for (const auto& v : dp_->trainable()) vars.push_back({v.name, &dp_->replica(0).get(v.name)});
      ema_->init(vars);
      for (const Param& param : towers_.optimizer->params(0))
        ema_index_.push_back(ema_->index_of(param.name));
    }
    update_pool_ = std::make_unique<ThreadPool>(dp_->num_replicas() - 1);
  }

  // Every tensor of the training state: what a checkpoint restores and rank 0 hands the others.
  std::vector<std::pair<std::string, Tensor*>> state_tensors(bool all_replicas) {
    std::vector<std::pair<std::string, Tensor*>> all;
    for (int r = 0; r < (all_replicas ? dp_->num_replicas() : 1); ++r) {
      for (const std::string& name : dp_->replica(r).names())
        all.push_back({name, &dp_->replica(r).get(name)});
      for (auto& slot : towers_.optimizer->replica_optimizer(r).slots()) all.push_back(slot);
    }
    if (ema_)
      for (auto& shadow : ema_->shadows()) all.push_back(shadow);
    return all;
  }

  void restore_or_init() {
    if (checkpoint_) {
      const std::string& prefix = checkpoint_->data.prefix;
      for (auto& [name, into] : state_tensors(true)) {
        auto it = checkpoint_->data.tensors.find(name);
        if (it == checkpoint_->data.tensors.end())
          fail("checkpoint {} has no tensor '{}' (was it written by another model?)", prefix, name);
        if (it->second.shape() != into->shape())
          fail("checkpoint {}: tensor '{}' has shape {}, the model expects {}", prefix, name,
               it->second.shape().to_string(), into->shape().to_string());
        into->copy_from(it->second);
      }
      std::printf("resumed from %s at step %lld\n", prefix.c_str(), static_cast<long long>(step_));
      checkpoint_.reset();  // its tensors are copied: free them
    }
    if (resumed_ && comm_.size() > 1) {
      std::vector<Tensor*> tensors;
      for (auto& named : state_tensors(true)) tensors.push_back(named.second);
      broadcast_from_rank0(comm_, tensors, "training state after resuming");
    }
  }

  void open_hooks() {
    if (chief_) metrics_.emplace(config_.train_dir + "/metrics.jsonl");
    if (chief_ && config_.summaries) events_ = std::make_unique<EventWriter>(config_.train_dir);
    // On a terminal a live progress line replaces the classic log lines.
    // (mpirun hands ranks a pseudo-terminal even when its own output is a file: no bar there.)
    progress_bar_ = comm_.size() == 1 && isatty(STDOUT_FILENO) != 0;
    first_step_ = step_;
    start_ = bar_start_ = last_bar_ = last_save_ = window_start_ = Clock::now();
  }

  void print_start() {
    if (!chief_) return;
    const size_t towers = plan_.devices.size();
    const int64_t micro = config_.micro_batch_size;
    fmt::print(
        "training {} on {}: {}{} tower{} ({}), global batch {}{}, {} steps ({} per epoch)\n",
        config_.model, train_set_->name,
        comm_.size() > 1 ? fmt::format("{} ranks x ", comm_.size()) : "", towers,
        towers == 1 ? "" : "s", strategy_name(config_.strategy), batches_.global,
        micro > 0 ? fmt::format(" in {} micro-batches of {}", batches_.global / micro, micro) : "",
        total_steps_, steps_per_epoch_);
    std::fflush(stdout);
  }

  // --trace: the first trace_steps steps of this run, one file per rank.
  void trace_steps() {
    if (config_.trace_file.empty()) return;
    const int64_t done = step_ - first_step_;
    if (done == 0 && step_ < total_steps_) {
      trace::start();
      trace::name_thread(fmt::format("main (rank {})", comm_.rank()));
    } else if (trace::active() &&
               (done == config_.trace_steps || step_ == total_steps_ || result_.interrupted)) {
      const std::string path = comm_.rank() == 0
                                   ? config_.trace_file
                                   : fmt::format("{}.rank{}", config_.trace_file, comm_.rank());
      trace::stop_and_write(path, comm_.rank());
      if (chief_)
        std::printf("trace of %lld steps written to %s\n", static_cast<long long>(done),
                    path.c_str());
    }
  }

  void loop_step() {
    trace_steps();
    std::optional<trace::Slice> wait;
    if (!next_) wait.emplace("input", "wait for a batch");
    Batch batch = next_ ? std::move(*next_) : pipeline_->next();
    wait.reset();
    next_.reset();
    StepResult out = [&] {
      trace::Slice slice("step", "towers: forward, backward, reduce");
      return dp_->step(batch.images, batch.labels, static_cast<uint64_t>(step_));
    }();
    if (!std::isfinite(out.loss))
      fail(
          "the loss is {} at step {}: training diverged (try a lower --lr or --clip_norm); "
          "the last good checkpoint in {} is kept",
          out.loss, step_, config_.train_dir);
    if (step_ + 1 <
        total_steps_) {  // taken one step early: its copy to GPU towers overlaps the update
      next_ = pipeline_->next();
      dp_->prefetch(next_->images, next_->labels);
    }
    const float lr = update(step_);
    ++step_;
    ++window_steps_;
    window_accuracy_ += out.metrics[1];
    result_.last_loss = out.loss;
    if (events_ && step_ == 1) add_input_images(*events_, batch.images, step_);
    const bool last = step_ == total_steps_;
    show_progress(out, lr, last);
    if (config_.log_every > 0 && (step_ % config_.log_every == 0 || last)) log(out, lr);
    if (chief_ && config_.eval_every > 0 && step_ % config_.eval_every == 0 && !last) {
      const double precision = record_eval();
      std::printf("%sstep %lld, precision @ 1 = %.4f\n", progress_bar_ ? "\n" : "",
                  static_cast<long long>(step_), precision);
    }
    // A signal to any rank stops every rank after the same step.
    float signal = static_cast<float>(g_stop_signal.load());
    comm_.allreduce_sum(&signal, 1);
    result_.interrupted = signal != 0;
    if (chief_ &&
        (last || result_.interrupted ||
         (config_.save_every_steps > 0 && step_ % config_.save_every_steps == 0) ||
         (config_.save_every_secs > 0 && seconds_since(last_save_) >= config_.save_every_secs))) {
      save();
      last_save_ = Clock::now();
    }
    if (result_.interrupted && chief_)
      std::printf("%sstopped by %s at step %lld; checkpoint written\n", progress_bar_ ? "\n" : "",
                  g_stop_signal.load() != 0 ? fmt::format("signal {}", g_stop_signal.load()).c_str()
                                            : "a signal to another rank",
                  static_cast<long long>(step_));
  }

  // The optimizer, and the moving average in the same pass (update number step + 1): each block of
  // a variable is averaged right after the optimizer wrote it, while it is in cache.
  float update(int64_t step) {
    trace::Slice slice("step", "optimizer");
    const float lr = schedule_->lr(step);
    DataParallelOptimizer::RangeFn average;
    if (ema_) {
      const float one_minus_decay = 1.0f - ema_->decay_at(step + 1);
      average = [this, one_minus_decay](size_t param, int64_t begin, int64_t end) {
        ema_->update_range(ema_index_[param], begin, end, one_minus_decay);
      };
    }
    towers_.optimizer->apply(lr, step, config_.clip_norm, update_pool_.get(), average);
#ifndef NDEBUG
    TOWER_CHECK_MSG(dp_->replicas_identical(), "replicas diverged at step {}", step);
#endif
    return lr;
  }

  void show_progress(const StepResult& out, float lr, bool last) {
    if (!progress_bar_ || (!last && seconds_since(last_bar_) <= 0.2)) return;
    last_bar_ = Clock::now();
    const double elapsed = seconds_since(bar_start_);
    const double done =
        static_cast<double>(step_ - first_step_) / static_cast<double>(total_steps_ - first_step_);
    const int filled =
        static_cast<int>(20 * static_cast<double>(step_) / static_cast<double>(total_steps_));
    std::printf(
        "\r[%s%s] epoch %.2f  step %lld/%lld  loss %.4f  accuracy %.1f%%  lr %.3g  "
        "%.0f examples/s  ETA %.0f s ",
        std::string(static_cast<size_t>(filled), '#').c_str(),
        std::string(static_cast<size_t>(20 - filled), '.').c_str(),
        static_cast<double>(step_) / static_cast<double>(steps_per_epoch_),
        static_cast<long long>(step_), static_cast<long long>(total_steps_), out.loss,
        100.0 * out.metrics[1], lr,
        static_cast<double>((step_ - first_step_) * batches_.global) / elapsed,
        done > 0 ? elapsed * (1 - done) / done : 0.0);
    if (last) std::printf("\n");
    std::fflush(stdout);
  }

  // The log line, metrics.jsonl and the TensorBoard scalars and histograms.
  void log(const StepResult& out, float lr) {
    trace::Slice slice("hooks", "log and summaries");
    const double per_batch = seconds_since(window_start_) / static_cast<double>(window_steps_);
    const double examples_per_sec = static_cast<double>(batches_.global) / per_batch;
    // The loss is the cross-entropy plus the weight-decay terms, which can dwarf it (cifar10: 2.1
    // of weight decay under a cross-entropy of 0.01): both are shown. The accuracy is the mean of
    // the training batches since the last line.
    const double accuracy = window_accuracy_ / static_cast<double>(window_steps_);
    if (chief_ && !progress_bar_) {
      std::printf(
          "step %lld, loss = %.4f (cross-entropy %.4f + regularization %.4f), train accuracy "
          "%.1f%% (%.1f examples/sec; %.3f sec/batch) lr %.3g\n",
          static_cast<long long>(step_), out.loss, out.metrics[0], out.loss - out.metrics[0],
          100 * accuracy, examples_per_sec, per_batch, lr);
      std::fflush(stdout);
    }
    if (metrics_)
      metrics_->append(
          {{"step", step_},
           {"wall_time", seconds_since(start_)},
           {"epoch", static_cast<double>(step_) / static_cast<double>(steps_per_epoch_)},
           {"loss", out.loss},
           {"cross_entropy", out.metrics[0]},
           {"train_accuracy", out.metrics[1]},
           {"lr", lr},
           {"examples_per_sec", examples_per_sec}});
    if (events_) {
      events_->add_scalar("total_loss", out.loss, step_);
      events_->add_scalar("cross_entropy", out.metrics[0], step_);
      events_->add_scalar("learning_rate", lr, step_);
      events_->add_scalar("examples_per_sec", static_cast<float>(examples_per_sec), step_);
      const auto& trainable = dp_->trainable();
      for (size_t v = 0; v < trainable.size(); ++v) {
        const Tensor& w = dp_->replica(0).get(trainable[v].name);
        events_->add_histogram(trainable[v].name, w.data<float>(), static_cast<size_t>(w.numel()),
                               step_);
        const Tensor& g = dp_->gradient(0, static_cast<int>(v));
        events_->add_histogram(trainable[v].name + "/gradients", g.data<float>(),
                               static_cast<size_t>(g.numel()), step_);
      }
      events_->flush();
    }
    window_start_ = Clock::now();
    window_steps_ = 0;
    window_accuracy_ = 0;
  }

  // Precision @ 1 of the moving-average weights (or the raw ones without EMA) on the test split,
  // recorded in metrics.jsonl and TensorBoard (rank 0).
  double record_eval() {
    trace::Slice slice("hooks", "eval");
    if (!evaluator_)
      evaluator_ = std::make_unique<Evaluator>(config_.model, test_set_, transforms_.eval, 500,
                                               plan_.cores, config_.program.precision);
    const double precision = evaluator_->evaluate([&](const std::string& name) -> const Tensor& {
      if (ema_ && ema_->has(name)) return ema_->shadow(name);
      return dp_->replica(0).get(name);
    });
    metrics_->append({{"step", step_},
                      {"wall_time", seconds_since(start_)},
                      {"eval_precision_at_1", precision}});
    if (events_) events_->add_scalar("eval/precision_at_1", static_cast<float>(precision), step_);
    result_.eval_accuracy = precision;
    return precision;
  }

  RunIdentity identity() const {
    RunIdentity r{.model = config_.model,
                  .data = config_.data,
                  .model_file = model_.source,
                  .global_batch_size = config_.global_batch_size,
                  .micro_batch_size = config_.micro_batch_size,
                  .strategy = std::string(strategy_name(config_.strategy)),
                  .optimizer = config_.optimizer.name,
                  .seed = config_.seed};
    if (config_.micro_batch_size == 0) {  // the classic towers: the layout shapes the batch
      r.batch_size = config_.batch_size;
      r.num_towers = static_cast<int64_t>(plan_.devices.size());
      r.ranks = comm_.size();
    }
    return r;
  }

  void save() {
    trace::Slice slice("hooks", "checkpoint");
    std::vector<std::pair<std::string, const Tensor*>> tensors;
    for (auto& [name, tensor] : state_tensors(false)) tensors.push_back({name, tensor});
    TrainingState state;
    state.step = step_;
    // The next batch to train on: the one already taken for prefetching, if any.
    const Position position = next_ ? Position{next_->epoch, next_->step} : pipeline_->position();
    state.epoch = position.epoch;
    state.epoch_step = position.step;
    state.run = identity();
    for (const Device& d : plan_.devices) state.devices.push_back(d.to_string());
    state.ema = ema_ != nullptr;
    state.augmentation = config_.augmentation;
    state.classes = train_set_->class_names;
    state.image_shape = train_set_->image_shape();
    state.schedule = {config_.lr_schedule, config_.lr, total_steps_};
    save_training_checkpoint(config_.train_dir, state, tensors, config_.keep_checkpoints);
  }

  void finish() {
    std::vector<const Tensor*> weights;
    for (const auto& v : dp_->trainable()) weights.push_back(&dp_->replica(0).get(v.name));
    check_identical_on_all_ranks(comm_, weights, "trained weights");
    if (chief_ && config_.final_eval && !result_.interrupted) {
      const double precision = record_eval();
      std::printf("precision @ 1 = %.4f (%lld test examples, %s weights)\n", precision,
                  static_cast<long long>(evaluator_->examples()), ema_ ? "moving-average" : "raw");
    }
    result_.steps = step_;
    result_.trained = step_ - first_step_;
    result_.seconds = seconds_since(start_);
  }

  const TrainConfig& config_;
  Communicator& comm_;
  const bool chief_;  // rank 0: the one writer
  const ModelDef& model_;
  int lock_fd_ = -1;  // the train dir's lock (rank 0), held while the run lasts
  DevicePlan plan_;
  BatchPlan batches_;
  DatasetSpec spec_;
  std::shared_ptr<const Dataset> train_set_, test_set_;
  InputTransforms transforms_;
  std::optional<TrainingCheckpoint> checkpoint_;
  std::unique_ptr<InputPipeline> pipeline_;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0, step_ = 0, first_step_ = 0;
  bool resumed_ = false;
  Towers towers_;
  DataParallel* dp_ = nullptr;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<ExponentialMovingAverage> ema_;
  std::vector<size_t> ema_index_;  // per optimizer param (replica 0): its moving average
  std::unique_ptr<ThreadPool> update_pool_;
  std::optional<MetricsLog> metrics_;
  std::unique_ptr<EventWriter> events_;
  std::unique_ptr<Evaluator> evaluator_;
  std::optional<Batch> next_;
  bool progress_bar_ = false;
  Clock::time_point start_, bar_start_, last_bar_, last_save_, window_start_;
  int64_t window_steps_ = 0;
  double window_accuracy_ = 0;  // the sum of the batches' accuracies since the last log line
  TrainResult result_;
};

}  // namespace

Towers build_towers(const ModelDef& model, const Shape& example_shape, int64_t batch,
                    int num_classes, const DataParallelOptions& options,
                    const OptimizerConfig& optimizer) {
  TowerFn tower_fn = [&model, num_classes](const Scope& scope, Value images, Value labels) {
    ModelOutputs out = model.build(scope, images, num_classes, Mode::train);
    LossOutputs loss = classification_loss(scope, out.logits, labels);
    Value accuracy = ops::accuracy(scope, out.logits, labels);
    return TowerOutputs{loss.total_loss, {loss.cross_entropy, accuracy}, out.updates};
  };
  Towers towers;
  towers.dp = std::make_unique<DataParallel>(example_shape, batch, tower_fn, options);
  towers.optimizer = std::make_unique<DataParallelOptimizer>(*towers.dp, optimizer);
  return towers;
}

TrainResult train(const TrainConfig& given, Communicator& comm) {
  validate(given);
  TrainConfig config = given;
  // The data set as a spec that names it, recorded in checkpoints and compared between ranks.
  config.data = run_data_spec(data_options(config), get_model(config.model)).text;
  return Run(config, comm).go();
}

}  // namespace tower
