#include "tower/train/train_hooks.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>

#include "tower/core/trace.h"

namespace tower {
namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int signal) { g_stop_signal.store(signal); }

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

}  // namespace

TrainHooks::TrainHooks(const TrainConfig& config, Communicator& comm, RunShape run)
    : config_(config),
      comm_(comm),
      chief_(comm.rank() == 0),
      run_(std::move(run)),
      progress_(run_.progress),
      plateau_(plateau_spec(config.lr_schedule)) {
  g_stop_signal.store(0);
  previous_int_ = std::signal(SIGINT, on_stop_signal);
  previous_term_ = std::signal(SIGTERM, on_stop_signal);
  if (chief_) metrics_.emplace(config_.train_dir + "/metrics.jsonl");
  if (chief_ && config_.summaries) events_ = std::make_unique<EventWriter>(config_.train_dir);
  // On a terminal a live progress line replaces the classic log lines.
  // (mpirun hands ranks a pseudo-terminal even when its own output is a file: no bar there.)
  progress_bar_ = comm_.size() == 1 && isatty(STDOUT_FILENO) != 0;
  start_ = last_bar_ = last_save_ = window_start_ = Clock::now();
}

TrainHooks::~TrainHooks() {
  std::signal(SIGINT, previous_int_);
  std::signal(SIGTERM, previous_term_);
}

double TrainHooks::seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void TrainHooks::after_step(int64_t step, const StepResult& out, float lr, const Learner& learner,
                            const Tensor& images) {
  ++window_steps_;
  window_accuracy_ += out.metrics[1];
  if (events_ && step == 1) add_input_images(*events_, images, step);
  const bool last = step == run_.total_steps;
  if (progress_bar_ &&
      (last || std::chrono::duration<double>(Clock::now() - last_bar_).count() > 0.2))
    show_progress(step, out, lr);
  if (config_.log_every > 0 && (step % config_.log_every == 0 || last)) log(step, out, lr, learner);
  // Every --eval_every steps, the last step too: what the evaluations make of the run (keep-best,
  // early stopping, plateau) is counted before the checkpoint of that step is written.
  if (chief_ && config_.eval_every > 0 && step % config_.eval_every == 0) {
    const double precision = evaluate(step, learner);
    std::printf("%sstep %lld, precision @ 1 = %.4f%s\n", progress_bar_ ? "\n" : "",
                static_cast<long long>(step), precision, at_5().c_str());
    observe(step, precision);
  }
}

bool TrainHooks::stop_requested() {
  // Small whole numbers: exact as floats. Only rank 0 evaluates, so the others add zeros.
  float values[3] = {static_cast<float>(g_stop_signal.load()), stop_early_ ? 1.0f : 0.0f,
                     chief_ ? static_cast<float>(progress_.lr_reductions) : 0.0f};
  comm_.allreduce_sum(values, 3);
  stopping_early_ = values[1] != 0;
  progress_.lr_reductions = static_cast<int64_t>(values[2]);
  return values[0] != 0;
}

void TrainHooks::observe(int64_t step, double precision) {
  EvalProgress& p = progress_;
  if (precision > p.best) {
    p = {.best = precision, .best_step = step, .lr_reductions = p.lr_reductions};
    save_best_ = config_.keep_best;
    return;
  }
  ++p.since_best;
  if (plateau_.patience > 0 && ++p.plateau_wait >= plateau_.patience) {
    p.plateau_wait = 0;
    ++p.lr_reductions;
    std::printf("plateau: no better precision in %lld evaluations: lr x%g from step %lld on\n",
                static_cast<long long>(plateau_.patience), plateau_.factor,
                static_cast<long long>(step + 1));
  }
  if (config_.early_stopping > 0 && p.since_best >= config_.early_stopping) {
    stop_early_ = true;
    std::printf(
        "early stopping at step %lld: %lld evaluations without a better precision than %.4f "
        "(step %lld)\n",
        static_cast<long long>(step), static_cast<long long>(p.since_best), p.best,
        static_cast<long long>(p.best_step));
  }
  std::fflush(stdout);
}

void TrainHooks::report_best() const {
  if (!chief_ || !config_.keep_best || progress_.best_step < 0) return;
  std::printf("best: precision @ 1 = %.4f at step %lld, kept in %s\n", progress_.best,
              static_cast<long long>(progress_.best_step),
              checkpoint_prefix(config_.train_dir, progress_.best_step).c_str());
}

bool TrainHooks::save_due(int64_t step, bool stopping) const {
  const double since_save = std::chrono::duration<double>(Clock::now() - last_save_).count();
  return chief_ && (step == run_.total_steps || stopping || save_best_ ||
                    (config_.save_every_steps > 0 && step % config_.save_every_steps == 0) ||
                    (config_.save_every_secs > 0 && since_save >= config_.save_every_secs));
}

void TrainHooks::save(const TrainingState& state, Learner& learner) {
  trace::Slice slice("hooks", "checkpoint");
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  for (auto& [name, tensor] : learner.state_tensors(Learner::Replicas::first))
    tensors.push_back({name, tensor});
  for (const auto& [name, tensor] : recomputed(state.step, learner))
    tensors.push_back({name + kRecomputedSuffix, &tensor});
  save_training_checkpoint(config_.train_dir, state, tensors, config_.keep_checkpoints,
                           config_.keep_best ? progress_.best_step : -1);
  last_save_ = Clock::now();
  save_best_ = false;
}

void TrainHooks::report_stop(int64_t step) const {
  if (!chief_) return;
  const int signal = g_stop_signal.load();
  std::printf("%sstopped by %s at step %lld; checkpoint written\n", progress_bar_ ? "\n" : "",
              signal != 0 ? fmt::format("signal {}", signal).c_str() : "a signal to another rank",
              static_cast<long long>(step));
}

void TrainHooks::show_progress(int64_t step, const StepResult& out, float lr) {
  last_bar_ = Clock::now();
  const bool last = step == run_.total_steps;
  const double elapsed = seconds();
  const double done = static_cast<double>(step - run_.first_step) /
                      static_cast<double>(run_.total_steps - run_.first_step);
  const int filled =
      static_cast<int>(20 * static_cast<double>(step) / static_cast<double>(run_.total_steps));
  std::printf(
      "\r[%s%s] epoch %.2f  step %lld/%lld  loss %.4f  train accuracy %.1f%%  lr %.3g  "
      "%.0f examples/s  ETA %.0f s ",
      std::string(static_cast<size_t>(filled), '#').c_str(),
      std::string(static_cast<size_t>(20 - filled), '.').c_str(),
      static_cast<double>(step) / static_cast<double>(run_.steps_per_epoch),
      static_cast<long long>(step), static_cast<long long>(run_.total_steps), out.loss,
      100.0 * window_accuracy_ / static_cast<double>(std::max<int64_t>(window_steps_, 1)), lr,
      static_cast<double>((step - run_.first_step) * run_.global_batch) / elapsed,
      done > 0 ? elapsed * (1 - done) / done : 0.0);
  if (last) std::printf("\n");
  std::fflush(stdout);
}

// The log line, metrics.jsonl and the TensorBoard scalars and histograms.
void TrainHooks::log(int64_t step, const StepResult& out, float lr, const Learner& learner) {
  trace::Slice slice("hooks", "log and summaries");
  const double per_batch = std::chrono::duration<double>(Clock::now() - window_start_).count() /
                           static_cast<double>(window_steps_);
  const double examples_per_sec = static_cast<double>(run_.global_batch) / per_batch;
  // The loss is the cross-entropy plus the weight-decay terms, which can dwarf it (cifar10: 2.1
  // of weight decay under a cross-entropy of 0.01): both are shown. The accuracy is the mean of
  // the training batches since the last line, here as in the progress bar, metrics.jsonl and
  // TensorBoard.
  const double accuracy = window_accuracy_ / static_cast<double>(window_steps_);
  if (chief_ && !progress_bar_) {
    std::printf(
        "step %lld, loss = %.4f (cross-entropy %.4f + regularization %.4f), train accuracy "
        "%.1f%% (%.1f examples/sec; %.3f sec/batch) lr %.3g\n",
        static_cast<long long>(step), out.loss, out.metrics[0], out.loss - out.metrics[0],
        100 * accuracy, examples_per_sec, per_batch, lr);
    std::fflush(stdout);
  }
  if (metrics_)
    metrics_->append(
        {{"step", step},
         {"wall_time", seconds()},
         {"epoch", static_cast<double>(step) / static_cast<double>(run_.steps_per_epoch)},
         {"loss", out.loss},
         {"cross_entropy", out.metrics[0]},
         {"train_accuracy", accuracy},
         {"lr", lr},
         {"examples_per_sec", examples_per_sec}});
  if (events_) {
    events_->add_scalar("total_loss", out.loss, step);
    events_->add_scalar("cross_entropy", out.metrics[0], step);
    events_->add_scalar("train_accuracy", static_cast<float>(accuracy), step);
    events_->add_scalar("learning_rate", lr, step);
    events_->add_scalar("examples_per_sec", static_cast<float>(examples_per_sec), step);
    const DataParallel& towers = learner.towers();
    const auto& trainable = towers.trainable();
    for (size_t v = 0; v < trainable.size(); ++v) {
      const Tensor& w = towers.replica(0).get(trainable[v].name);
      events_->add_histogram(trainable[v].name, w.data<float>(), static_cast<size_t>(w.numel()),
                             step);
      const Tensor& g = towers.gradient(0, static_cast<int>(v));
      events_->add_histogram(trainable[v].name + "/gradients", g.data<float>(),
                             static_cast<size_t>(g.numel()), step);
    }
    events_->flush();
  }
  window_start_ = Clock::now();
  window_steps_ = 0;
  window_accuracy_ = 0;
}

double TrainHooks::evaluate(int64_t step, const Learner& learner) {
  trace::Slice slice("hooks", "eval");
  if (!evaluator_)
    evaluator_ = std::make_unique<Evaluator>(config_.model, run_.test_set, run_.eval_transform, 500,
                                             run_.cores, config_.program.precision);
  const std::map<std::string, Tensor>& statistics = recomputed(step, learner);
  const double precision = evaluator_->evaluate([&](const std::string& name) -> const Tensor& {
    auto it = statistics.find(name);
    return it != statistics.end() ? it->second : learner.eval_weight(name);
  });
  nlohmann::json line = {
      {"step", step}, {"wall_time", seconds()}, {"eval_precision_at_1", precision}};
  const double at5 = evaluator_->precision_at_5();
  if (at5 >= 0) line["eval_precision_at_5"] = at5;
  metrics_->append(line);
  if (events_) events_->add_scalar("eval/precision_at_1", static_cast<float>(precision), step);
  if (events_ && at5 >= 0)
    events_->add_scalar("eval/precision_at_5", static_cast<float>(at5), step);
  last_eval_ = precision;
  last_eval_step_ = step;
  return precision;
}

const std::map<std::string, Tensor>& TrainHooks::recomputed(int64_t step, const Learner& learner) {
  if (run_.bn_statistics && step != recomputed_step_) {
    trace::Slice slice("hooks", "batch-norm statistics");
    recomputed_ = run_.bn_statistics->compute(
        [&](const std::string& name) -> const Tensor& { return learner.eval_weight(name); });
    recomputed_step_ = step;
  }
  return recomputed_;
}

std::string TrainHooks::at_5() const {
  const double at5 = evaluator_ ? evaluator_->precision_at_5() : -1;
  return at5 >= 0 ? fmt::format(", @ 5 = {:.4f}", at5) : std::string();
}

int64_t TrainHooks::eval_examples() const { return evaluator_ ? evaluator_->examples() : 0; }

}  // namespace tower
