#include "tower/train/trainer.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "tower/core/trace.h"
#include "tower/data/input_pipeline.h"
#include "tower/ops/batch_norm.h"
#include "tower/ops/nn_loss.h"
#include "tower/parallel/data_parallel.h"
#include "tower/train/batch_norm_statistics.h"
#include "tower/train/class_weights.h"
#include "tower/train/fine_tune.h"
#include "tower/train/learner.h"
#include "tower/train/lr_schedule.h"
#include "tower/train/train_hooks.h"
#include "tower/train/training_state.h"

namespace tower {
namespace {

// Where a run stands on its devices and its batch.
struct RunPlan {
  DevicePlan devices;
  BatchPlan batches;
};
// The data a run reads: the training split (and rank 0's test split) and their transforms.
struct RunData {
  DatasetSpec spec;
  std::shared_ptr<const Dataset> train, test;
  InputTransforms transforms;
  std::vector<float> class_weights;  // --class_weights, resolved on the training set
};
// Where a resumed run starts: the step, the position in the data, and (rank 0) the checkpoint.
struct ResumePoint {
  int64_t step = 0;
  Position position;
  EvalProgress progress;
  std::optional<TrainingCheckpoint> checkpoint;
};

// One training run, as its stages: go() calls them in order. Each stage returns what the next
// ones need; the learner owns what training changes and the hooks what happens around the steps.
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
    comm_.set_timeout(config_.comm_timeout);
    plan_ = plan_run();
    data_ = open_data();
    plan_fine_tune();
    std::optional<ResumePoint> resume = find_resume();
    open_pipeline(resume);
    learner_ = make_learner(frozen_at(step_));
    start_weights(resume);
    const EvalProgress progress = resume ? resume->progress : EvalProgress{};
    learner_->set_lr_reductions(progress.lr_reductions);
    plan_batch_norm();
    hooks_ = std::make_unique<TrainHooks>(config_, comm_,
                                          RunShape{.global_batch = plan_.batches.global,
                                                   .steps_per_epoch = steps_per_epoch_,
                                                   .total_steps = total_steps_,
                                                   .first_step = first_step_,
                                                   .test_set = data_.test,
                                                   .eval_transform = data_.transforms.eval,
                                                   .bn_statistics = bn_statistics_,
                                                   .progress = progress,
                                                   .cores = plan_.devices.cores});
    print_start();
    if (config_.early_stopping > 0 && progress.since_best >= config_.early_stopping) {
      result_.stopped_early = true;  // a resume of a run that stopped early: nothing to do
      if (chief_)
        fmt::print(
            "stopped early at step {}: {} evaluations without a better precision (raise "
            "--early_stopping to go on)\n",
            step_, progress.since_best);
    }
    while (step_ < total_steps_ && !result_.interrupted && !result_.stopped_early) loop_step();
    trace_steps();
    finish();
    return result_;
  }

 private:
  RunPlan plan_run() const {
    RunPlan plan;
    plan.devices = select_devices({.devices = config_.devices,
                                   .num_devices = config_.num_devices,
                                   .num_gpus = config_.num_gpus,
                                   .threads = config_.num_threads,
                                   .allow_soft_placement = config_.allow_soft_placement,
                                   .precision = config_.program.precision},
                                  comm_);
    const bool micro = config_.micro_batch_size > 0;
    plan.batches = plan_batches({.batch_size = micro ? 0 : config_.batch_size,
                                 .global_batch_size = config_.global_batch_size,
                                 .micro_batch_size = config_.micro_batch_size},
                                static_cast<int64_t>(plan.devices.devices.size()), comm_.size());
    return plan;
  }

  // Both splits are opened (and so checked) before the first step.
  RunData open_data() const {
    RunData data;
    data.spec = run_data_spec(data_options(config_), model_);
    data.spec.report = chief_;  // one progress line and one warning per job, not one per rank
    data.train = std::make_shared<const Dataset>(open_dataset(data.spec, Split::train));
    const Dataset& train = *data.train;
    data.transforms = input_transforms(config_.augmentation, model_.default_input,
                                       train.image_shape(), model_.normalization);
    data.class_weights = class_weights(config_.class_weights, train);
    const std::string warning = check_model_fits_data(
        model_, transform_output_shape(data.transforms.train, train.image_shape()), train);
    if (chief_ && !warning.empty()) fmt::print(stderr, "warning: {}\n", warning);
    if (chief_ && (config_.final_eval || config_.eval_every > 0))
      data.test = std::make_shared<const Dataset>(open_dataset(data.spec, Split::test));
    const size_t towers = plan_.devices.devices.size();
    check_same_on_all_ranks(comm_, rank_fields(config_, towers, train), "flags");
    const int64_t global = plan_.batches.global;
    if (config_.micro_batch_size > 0 && global > train.size())
      fail("--global_batch_size {} is more than the {} examples of the training set {}", global,
           train.size(), train.name);
    if (global > train.size())
      fail(
          "{} tower{} (--num_devices or --devices) x --batch_size {}{} = {} examples per step, but "
          "the training set {} has {}: lower --batch_size or the number of towers",
          towers, towers == 1 ? "" : "s", config_.batch_size,
          comm_.size() > 1 ? fmt::format(" x {} ranks", comm_.size()) : std::string(), global,
          train.name, train.size());
    return data;
  }

  // Rank 0 finds the checkpoint to resume from and tells the others where training stands. The
  // train dir is made (and locked) only now, after the devices and the data passed their checks:
  // a refused run leaves nothing behind.
  std::optional<ResumePoint> find_resume() {
    std::optional<TrainingCheckpoint> checkpoint;
    if (chief_) {
      // Read (and checked) before the train dir is made: a refused run leaves nothing behind.
      if (!config_.init_from.empty() && !checkpoint_latest(config_.train_dir))
        init_ = read_init_from(config_.init_from, model_, variables_, config_.init_partial);
      prepare_train_dir(config_.train_dir);
      lock_fd_ = lock_train_dir(config_.train_dir);
      checkpoint = config_.resume_from.empty() ? find_resume_checkpoint(config_.train_dir)
                                               : load_training_checkpoint(config_.resume_from);
    }
    if (checkpoint) refuse_other_run(*checkpoint, identity());
    nlohmann::json where;  // {step, epoch, epoch_step, progress}; null when starting fresh
    if (checkpoint)
      where = {checkpoint->state.step, checkpoint->state.epoch, checkpoint->state.epoch_step,
               checkpoint->state.progress.best_step >= 0
                   ? eval_progress_to_json(checkpoint->state.progress)
                   : nlohmann::json()};
    if (comm_.size() > 1)
      where = nlohmann::json::parse(comm_.allgather(chief_ ? where.dump() : "")[0]);
    if (where.is_null()) return std::nullopt;
    return ResumePoint{.step = where[0].get<int64_t>(),
                       .position = {where[1].get<int64_t>(), where[2].get<int64_t>()},
                       .progress = where[3].is_null()
                                       ? EvalProgress{}
                                       : eval_progress_from_json(where[3], "rank 0's resume point"),
                       .checkpoint = std::move(checkpoint)};
  }

  // The input pipeline from the resume point, and the steps of the run.
  void open_pipeline(const std::optional<ResumePoint>& resume) {
    PipelineOptions options;
    options.batch_size = plan_.batches.global;
    options.rank = comm_.rank();
    options.world_size = comm_.size();
    options.seed = config_.seed;
    options.num_workers = std::max(config_.num_preprocess_threads, 0);
    options.transform = data_.transforms.train;
    if (resume) {
      first_step_ = step_ = resume->step;
      options.start = resume->position;
    }
    pipeline_ = std::make_unique<InputPipeline>(data_.train, options);
    steps_per_epoch_ = pipeline_->batches_per_epoch();
    if (config_.unfreeze_after_epochs > 0)
      unfreeze_step_ =
          std::llround(config_.unfreeze_after_epochs * static_cast<double>(steps_per_epoch_));
    if (options.start.step >= steps_per_epoch_)
      fail(
          "checkpoint {}: its position (epoch {}, step {}) is past the end of an epoch of {} steps",
          resume->checkpoint ? resume->checkpoint->data.prefix : std::string("of rank 0"),
          options.start.epoch, options.start.step, steps_per_epoch_);
    total_steps_ = config_.max_steps > 0
                       ? config_.max_steps
                       : static_cast<int64_t>(
                             std::ceil(config_.epochs * static_cast<double>(steps_per_epoch_)));
    if (total_steps_ > kMaxSteps)
      fail("--epochs {} is {} steps of {} per epoch, more than {}", config_.epochs, total_steps_,
           steps_per_epoch_, kMaxSteps);
    fit_schedule();
    if (resume && resume->checkpoint && !config_.allow_schedule_change)
      refuse_schedule_change(*resume->checkpoint, {lr_schedule_, config_.lr, total_steps_}, step_,
                             steps_per_epoch_);
  }

  // A recipe's schedule in epochs follows the run's length: its boundaries stay at the same
  // fractions of the run.
  void fit_schedule() {
    lr_schedule_ = config_.lr_schedule;
    if (config_.schedule_epochs <= 0) return;
    const double epochs = config_.max_steps > 0 ? static_cast<double>(total_steps_) /
                                                      static_cast<double>(steps_per_epoch_)
                                                : config_.epochs;
    const double factor = epochs / config_.schedule_epochs;
    const std::string scaled = scale_schedule_epochs(config_.lr_schedule, factor);
    if (factor == 1 || scaled == config_.lr_schedule) return;
    lr_schedule_ = scaled;
    schedule_note_ = fmt::format(" (the recipe's {}, written for {} epochs, scaled to {:.6g})",
                                 config_.lr_schedule, config_.schedule_epochs, epochs);
  }

  // The model's variables (which are its head), the frozen scopes and the step they thaw at.
  void plan_fine_tune() {
    if (config_.init_from.empty() && config_.freeze.empty())
      return;  // model_variables builds twice
    const Shape example =
        transform_output_shape(data_.transforms.train, data_.train->image_shape());
    variables_ = model_variables(model_, example, data_.train->num_classes);
    frozen_ = resolve_freeze(config_.freeze, variables_);
  }
  // Whether the learner of step `step` keeps the frozen scopes frozen: until the thaw, which
  // happens before step unfreeze_step_ trains (so a checkpoint of that step is still frozen's).
  bool frozen_at(int64_t step) const {
    return !frozen_.empty() && (unfreeze_step_ < 0 || step <= unfreeze_step_);
  }

  // The learning rate's factor of a learner: --unfreeze_lr_factor once the frozen layers thawed.
  float thawed(bool frozen) const {
    return !frozen_.empty() && !frozen ? config_.unfreeze_lr_factor : 1.0f;
  }

  std::unique_ptr<Learner> make_learner(bool frozen) const {
    DataParallelOptions options;
    options.devices = plan_.devices.devices;
    options.threads = plan_.devices.threads;
    options.comm = &comm_;
    options.strategy = config_.strategy;
    options.bucket_bytes = static_cast<size_t>(config_.bucket_mb * 1024 * 1024);
    options.seed = config_.seed;
    options.program = config_.program;
    options.micro_batch = config_.micro_batch_size;
    const TowerLoss loss{.bn_momentum = config_.bn_momentum,
                         .target = {.label_smoothing = config_.label_smoothing,
                                    .class_weights = data_.class_weights},
                         .frozen = frozen ? frozen_ : std::vector<std::string>{},
                         .dropout = config_.dropout};
    std::unique_ptr<DataParallel> towers =
        build_towers(model_, pipeline_->image_shape(), plan_.batches.local,
                     data_.train->num_classes, options, loss);
    if (config_.log_device_placement && chief_)
      for (int t = 0; t < towers->num_towers(); ++t)
        std::fputs(towers->program(t).placement_log().c_str(), stderr);
    std::string warning;
    auto learner = std::make_unique<Learner>(std::move(towers), config_.optimizer,
                                             LearnerOptions{.lr_schedule = lr_schedule_,
                                                            .lr = config_.lr,
                                                            .steps_per_epoch = steps_per_epoch_,
                                                            .total_steps = total_steps_,
                                                            .ema_decay = config_.ema_decay,
                                                            .clip_norm = config_.clip_norm,
                                                            .lr_factor = thawed(frozen)},
                                             &warning);
    if (chief_ && !warning.empty() && frozen == frozen_at(step_))  // once, not at the thaw
      fmt::print(stderr, "warning: {}\n", warning);
    return learner;
  }

  // Rank 0, which evaluates and saves, decides whether the batch norms' statistics are recomputed
  // (--precise_bn) and says what it chose. They are taken of the training images as evaluation
  // preprocesses them: normalized by them, the activations of evaluated images have the zero
  // mean and unit variance the next layers trained on (with augmented statistics, padding and
  // crops shift them).
  void plan_batch_norm() {
    if (!chief_ || config_.precise_bn == "off") return;
    const int64_t batch =
        config_.micro_batch_size > 0 ? config_.micro_batch_size : config_.batch_size;
    auto statistics = std::make_shared<BatchNormStatistics>(
        model_, data_.train, data_.transforms.eval,
        BatchNormStatisticsOptions{.batch = std::min(batch, data_.train->size()),
                                   .seed = config_.seed,
                                   .momentum = config_.bn_momentum,
                                   .precision = config_.program.precision,
                                   .frozen = frozen_});
    if (statistics->empty()) return;
    const float decay = statistics->decay();
    const int64_t settle = moving_average_settle_steps(decay);
    const std::string momentum =
        fmt::format("batch norm: momentum {:g}{}", decay,
                    config_.bn_momentum > 0 ? " (--bn_momentum)" : " (the model's)");
    if (config_.precise_bn == "auto" && total_steps_ >= settle) {
      batch_norm_note_ =
          fmt::format("{}: moving averages (they settle in {} steps, this run has {})", momentum,
                      settle, total_steps_);
      return;
    }
    bn_statistics_ = std::move(statistics);
    batch_norm_note_ = fmt::format(
        "{}: evaluations and checkpoints use statistics recomputed over {} training examples "
        "with the weights evaluated (precise BN{})",
        momentum, bn_statistics_->examples(),
        config_.precise_bn == "on"
            ? ", --precise_bn on"
            : fmt::format("; the moving averages need {} steps to settle, this run has {}: "
                          "--precise_bn off keeps them",
                          settle, total_steps_));
  }

  // Rank 0 copies the checkpoint (or the --init_from weights) in and hands the state to the
  // others.
  void start_weights(std::optional<ResumePoint>& resume) {
    if (resume && resume->checkpoint) {
      learner_->restore(resume->checkpoint->data);
      init_record_ = resume->checkpoint->state.init;
      std::printf("resumed from %s at step %lld\n", resume->checkpoint->data.prefix.c_str(),
                  static_cast<long long>(step_));
      if (!config_.init_from.empty())
        fmt::print("--init_from is not read again: the run started from {}\n",
                   init_record_.file.empty() ? "its initializers" : init_record_.file);
      resume->checkpoint.reset();  // its tensors are copied: free them
    }
    if (init_) {
      learner_->load(init_->values);
      init_->values.clear();
      init_record_ = {init_->file, init_->sha256, init_->source};
    }
    if (comm_.size() > 1 && (resume || !config_.init_from.empty())) {
      std::vector<Tensor*> tensors;
      for (auto& named : learner_->state_tensors(Learner::Replicas::all))
        tensors.push_back(named.second);
      broadcast_from_rank0(comm_, tensors, "training state after resuming");
    }
  }

  void print_start() const {
    if (!chief_) return;
    const size_t towers = plan_.devices.devices.size();
    const int64_t micro = config_.micro_batch_size, global = plan_.batches.global;
    fmt::print("training {} on {}: {}{} tower{} ({}), global batch {}{}, {} steps ({} per epoch)\n",
               config_.model, data_.train->name,
               comm_.size() > 1 ? fmt::format("{} ranks x ", comm_.size()) : "", towers,
               towers == 1 ? "" : "s", strategy_name(config_.strategy), global,
               micro > 0 ? fmt::format(" in {} micro-batches of {}", global / micro, micro) : "",
               total_steps_, steps_per_epoch_);
    fmt::print("schedule: {} lr {:g}, {}{}\n", config_.optimizer.name, config_.lr, lr_schedule_,
               schedule_note_);
    if (!batch_norm_note_.empty()) fmt::print("{}\n", batch_norm_note_);
    if (config_.dropout >= 0)
      fmt::print("dropout: {:g} in every dropout layer (--dropout)\n", config_.dropout);
    if (init_) fmt::print("{}", init_->report(variables_.size()));
    fmt::print("{}", frozen_line(frozen_, variables_,
                                 {unfreeze_step_, config_.unfreeze_after_epochs,
                                  config_.unfreeze_lr_factor}));
    if (unfreeze_step_ >= total_steps_)
      fmt::print(stderr,
                 "warning: --unfreeze_after_epochs {:g} is step {}, past the run's {}: the "
                 "frozen layers stay frozen\n",
                 config_.unfreeze_after_epochs, unfreeze_step_, total_steps_);
    fmt::print("{}\n", class_counts_line(*data_.train, !config_.class_weights.empty()));
    print_input();
    if (config_.label_smoothing > 0 || !config_.class_weights.empty())
      fmt::print("loss: cross-entropy{}{}\n",
                 config_.label_smoothing > 0
                     ? fmt::format(", label smoothing {:g}", config_.label_smoothing)
                     : "",
                 config_.class_weights.empty()
                     ? ""
                     : fmt::format(", class weights {} ({:.4g})", config_.class_weights,
                                   fmt::join(data_.class_weights, ", ")));
    std::fflush(stdout);
  }

  // What happens to the images: the size a folder's are brought to, and each step of the
  // training and evaluation transforms (or why an augmentation asked for does not run).
  void print_input() const {
    const std::string size = data_.train->image_shape().to_string();
    const std::string why =
        !config_.image_size.empty() ? "--image_size"
        : config_.augmentation == "random-resized-crop"
            ? "8/7 of the model's size, for the random resized crops; --image_size sets another"
            : "the size of the recipe's data, --image_size sets another";
    if (data_.spec.format == DatasetFormat::folder)
      fmt::print("images: {}, each resized (shorter side) and centre-cropped to {} ({})\n",
                 data_.train->origin, size, why);
    fmt::print(
        "input: {}, training: {}; evaluation: {}{}\n", size, describe_input(data_.transforms.train),
        describe_input(data_.transforms.eval),
        model_.normalization.empty() ? "" : " (the model's weights expect this normalization)");
    if (!data_.transforms.note.empty()) fmt::print(stderr, "warning: {}\n", data_.transforms.note);
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

  // The frozen scopes thaw: towers built anew with every variable trainable, the state carried
  // over (the thawed variables' optimizer slots start at zero, their averages at their values).
  void thaw() {
    std::map<std::string, Tensor> state;
    for (auto& [name, tensor] : learner_->state_tensors(Learner::Replicas::first))
      state.emplace(name, tensor->clone());
    learner_.reset();
    learner_ = make_learner(false);  // (after the reset: one copy of the towers at a time)
    learner_->load(state);
    learner_->set_lr_reductions(hooks_->progress().lr_reductions);
    if (next_) learner_->towers().prefetch(next_->images, next_->labels);
    if (chief_)
      fmt::print("step {}: {} thaw; every layer trains from now on, at the learning rate x {:g}\n",
                 step_, fmt::join(frozen_, ", "), config_.unfreeze_lr_factor);
  }

  void loop_step() {
    if (step_ == unfreeze_step_ && frozen_at(step_)) thaw();
    trace_steps();
    std::optional<trace::Slice> wait;
    if (!next_) wait.emplace("input", "wait for a batch");
    Batch batch = next_ ? std::move(*next_) : pipeline_->next();
    wait.reset();
    next_.reset();
    DataParallel& towers = learner_->towers();
    StepResult out = [&] {
      trace::Slice slice("step", "towers: forward, backward, reduce");
      return towers.step(batch.images, batch.labels, static_cast<uint64_t>(step_));
    }();
    if (!std::isfinite(out.loss))
      fail(
          "the loss is {} at step {}: training diverged (try a lower --lr or --clip_norm); "
          "the last good checkpoint in {} is kept",
          out.loss, step_, config_.train_dir);
    // The next batch is taken one step early: its copy to GPU towers overlaps the update.
    if (step_ + 1 < total_steps_) {
      trace::Slice slice("input", "take the next batch");
      next_ = pipeline_->next();
      towers.prefetch(next_->images, next_->labels);
    }
    const float lr = learner_->update(step_);
    ++step_;
    result_.last_loss = out.loss;
    hooks_->after_step(step_, out, lr, *learner_, batch.images);
    result_.interrupted = hooks_->stop_requested();
    result_.stopped_early = hooks_->stopping_early();
    learner_->set_lr_reductions(hooks_->progress().lr_reductions);
    if (hooks_->save_due(step_, result_.interrupted || result_.stopped_early))
      hooks_->save(checkpoint_state(), *learner_);
    if (result_.interrupted) hooks_->report_stop(step_);
  }

  RunIdentity identity() const {
    RunIdentity r{
        .model = config_.model,
        .data = config_.data,
        .model_file = model_.source,
        .global_batch_size = config_.global_batch_size,
        .micro_batch_size = config_.micro_batch_size,
        .strategy = std::string(strategy_name(config_.strategy)),
        .optimizer = config_.optimizer.name,
        .seed = config_.seed,
        .bn_momentum = config_.bn_momentum,
        .freeze = config_.freeze.empty() || config_.unfreeze_after_epochs <= 0
                      ? config_.freeze
                      : fmt::format("{} until epoch {:g}, then lr x {:g}", config_.freeze,
                                    config_.unfreeze_after_epochs, config_.unfreeze_lr_factor)};
    if (config_.micro_batch_size == 0) {  // the classic towers: the layout shapes the batch
      r.batch_size = config_.batch_size;
      r.num_towers = static_cast<int64_t>(plan_.devices.devices.size());
      r.ranks = comm_.size();
    }
    return r;
  }

  // What the state file of a checkpoint after this step records.
  TrainingState checkpoint_state() const {
    TrainingState state;
    state.step = step_;
    // The next batch to train on: the one already taken for prefetching, if any.
    const Position position = next_ ? Position{next_->epoch, next_->step} : pipeline_->position();
    state.epoch = position.epoch;
    state.epoch_step = position.step;
    state.run = identity();
    for (const Device& d : plan_.devices.devices) state.devices.push_back(d.to_string());
    state.ema = learner_->averages();
    state.augmentation = config_.augmentation;
    state.classes = data_.train->class_names;
    state.image_shape = data_.train->image_shape();
    if (data_.spec.format == DatasetFormat::folder) state.test_fraction = config_.test_fraction;
    state.schedule = {lr_schedule_, config_.lr, total_steps_};
    state.program = this_program();
    state.progress = hooks_->progress();
    state.init = init_record_;
    state.normalization = model_.normalization;
    return state;
  }

  void finish() {
    const DataParallel& towers = learner_->towers();
    std::vector<const Tensor*> weights;
    for (const auto& v : towers.trainable()) weights.push_back(&towers.replica(0).get(v.name));
    check_identical_on_all_ranks(comm_, weights, "trained weights");
    if (chief_ && config_.final_eval && !result_.interrupted) {
      const double precision = hooks_->last_eval_step() == step_
                                   ? hooks_->last_eval()  // --eval_every's, of this step
                                   : hooks_->evaluate(step_, *learner_);
      std::printf("precision @ 1 = %.4f%s (%lld test examples, %s weights%s)\n", precision,
                  hooks_->at_5().c_str(), static_cast<long long>(hooks_->eval_examples()),
                  learner_->averages() ? "moving-average" : "raw",
                  bn_statistics_ ? ", recomputed batch-norm statistics" : "");
    }
    hooks_->report_best();
    result_.eval_accuracy = hooks_->last_eval();
    result_.steps = step_;
    result_.trained = step_ - first_step_;
    result_.seconds = hooks_->seconds();
  }

  const TrainConfig& config_;
  Communicator& comm_;
  const bool chief_;  // rank 0: the one writer
  const ModelDef& model_;
  int lock_fd_ = -1;  // the train dir's lock (rank 0), held while the run lasts
  RunPlan plan_;
  RunData data_;
  std::unique_ptr<InputPipeline> pipeline_;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0, step_ = 0, first_step_ = 0;
  std::string lr_schedule_,
      schedule_note_;  // the schedule this run follows, and why (fit_schedule)
  std::shared_ptr<BatchNormStatistics> bn_statistics_;  // rank 0, when recomputed (--precise_bn)
  std::string batch_norm_note_;
  std::unique_ptr<Learner> learner_;
  std::unique_ptr<TrainHooks> hooks_;
  std::optional<Batch> next_;            // the next batch, taken early
  std::vector<InitVariable> variables_;  // the model's, as this run builds it
  std::vector<std::string> frozen_;      // --freeze resolved
  int64_t unfreeze_step_ = -1;           // when they thaw; -1: never
  std::optional<InitFrom> init_;         // rank 0, a new run with --init_from
  InitRecord init_record_;               // the weights the run started from
  TrainResult result_;
};

}  // namespace

std::unique_ptr<DataParallel> build_towers(const ModelDef& model, const Shape& example_shape,
                                           int64_t batch, int num_classes,
                                           const DataParallelOptions& options,
                                           const TowerLoss& tower_loss) {
  TowerFn tower_fn = [&model, num_classes, tower_loss](const Scope& scope, Value images,
                                                       Value labels) {
    const Scope built = (tower_loss.frozen.empty() ? scope : scope.with_frozen(tower_loss.frozen))
                            .with_dropout(tower_loss.dropout);
    ModelOutputs out = model.build(built, images, num_classes, Mode::train);
    if (tower_loss.bn_momentum > 0)
      ops::set_moving_average_decay(out.updates, tower_loss.bn_momentum);
    LossOutputs loss = classification_loss(scope, out.logits, labels, tower_loss.target);
    Value accuracy = ops::accuracy(scope, out.logits, labels);
    return TowerOutputs{loss.total_loss, {loss.cross_entropy, accuracy}, out.updates};
  };
  return std::make_unique<DataParallel>(example_shape, batch, tower_fn, options);
}

TrainResult train(const TrainConfig& given, Communicator& comm) {
  validate(given);
  TrainConfig config = given;
  // The data set as a spec that names it, recorded in checkpoints and compared between ranks.
  config.data = run_data_spec(data_options(config), get_model(config.model)).text;
  return Run(config, comm).go();
}

}  // namespace tower
