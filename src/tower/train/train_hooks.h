// What a training run does around its steps: the progress bar or log line, metrics.jsonl,
// TensorBoard summaries, evaluations, checkpoints, and stopping on SIGINT/SIGTERM. Rank 0 is the
// one writer; stopping is agreed by every rank.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "tower/data/dataset.h"
#include "tower/data/transforms.h"
#include "tower/io/event_writer.h"
#include "tower/io/metrics_log.h"
#include "tower/train/batch_norm_statistics.h"
#include "tower/train/evaluator.h"
#include "tower/train/learner.h"
#include "tower/train/trainer.h"
#include "tower/train/training_state.h"

namespace tower {

// What the hooks know of the run.
struct RunShape {
  int64_t global_batch = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  int64_t first_step = 0;                   // where this run started (resumed or 0)
  std::shared_ptr<const Dataset> test_set;  // rank 0, when it evaluates
  TransformSpec eval_transform;
  std::shared_ptr<BatchNormStatistics> bn_statistics;  // rank 0: null unless recomputed
  EvalProgress progress;                               // of the checkpoint resumed from
  int cores = 1;                                       // for the evaluation
};

class TrainHooks {
 public:
  // Installs the SIGINT/SIGTERM handlers (the previous ones come back on destruction) and opens
  // metrics.jsonl and the event file on rank 0.
  TrainHooks(const TrainConfig& config, Communicator& comm, RunShape run);
  ~TrainHooks();
  TrainHooks(const TrainHooks&) = delete;
  TrainHooks& operator=(const TrainHooks&) = delete;

  // After step `step` (counted, so 1 after the first) with its result, learning rate and inputs:
  // the progress bar, the log line with its metrics and summaries, and an evaluation when one is
  // due.
  void after_step(int64_t step, const StepResult& out, float lr, const Learner& learner,
                  const Tensor& images);
  // Whether a signal reached any rank: every rank stops after the same step (a collective that
  // also hands rank 0's early stop and plateau count to the others).
  bool stop_requested();
  // Whether rank 0's evaluations called for an early stop (after stop_requested()).
  bool stopping_early() const { return stopping_early_; }
  const EvalProgress& progress() const { return progress_; }
  // Whether a checkpoint is due after `step` (rank 0): the last step, a stop, every
  // --save_every_steps steps, every --save_every_secs seconds.
  bool save_due(int64_t step, bool stopping) const;
  // Writes a checkpoint of `state` with replica 0's training state.
  void save(const TrainingState& state, Learner& learner);
  // Says on rank 0 why training stopped early (a signal).
  void report_stop(int64_t step) const;
  // On rank 0, the best evaluation and where its checkpoint is (--keep_best).
  void report_best() const;
  // Precision @ 1 of the learner's evaluation weights on the test split, recorded in
  // metrics.jsonl and TensorBoard (rank 0).
  double evaluate(int64_t step, const Learner& learner);
  int64_t eval_examples() const;
  // ", @ 5 = P" of the last evaluation where the data has more than 5 classes, else "".
  std::string at_5() const;
  double last_eval() const { return last_eval_; }  // -1: none yet
  int64_t last_eval_step() const { return last_eval_step_; }
  double seconds() const;  // since the hooks opened

 private:
  using Clock = std::chrono::steady_clock;
  void show_progress(int64_t step, const StepResult& out, float lr);
  void log(int64_t step, const StepResult& out, float lr, const Learner& learner);
  // The batch-norm statistics recomputed for the learner's evaluation weights after `step`
  // (once per step); empty when they are not recomputed.
  const std::map<std::string, Tensor>& recomputed(int64_t step, const Learner& learner);
  // Updates the progress with an evaluation during the run: the best, early stopping, plateau.
  void observe(int64_t step, double precision);
  const TrainConfig& config_;
  Communicator& comm_;
  const bool chief_;
  RunShape run_;
  void (*previous_int_)(int);
  void (*previous_term_)(int);
  std::optional<MetricsLog> metrics_;
  std::unique_ptr<EventWriter> events_;
  std::unique_ptr<Evaluator> evaluator_;
  bool progress_bar_ = false;
  Clock::time_point start_, last_bar_, last_save_, window_start_;
  int64_t window_steps_ = 0;
  double last_eval_ = -1;
  int64_t last_eval_step_ = -1;
  std::map<std::string, Tensor> recomputed_;
  int64_t recomputed_step_ = -1;
  EvalProgress progress_;
  PlateauSpec plateau_;
  bool save_best_ = false;       // rank 0: this step's evaluation is the best so far (--keep_best)
  bool stop_early_ = false;      // rank 0: --early_stopping ran out
  bool stopping_early_ = false;  // every rank, after stop_requested()
  double window_accuracy_ = 0;   // the sum of the batches' accuracies since the last log line
};

}  // namespace tower
