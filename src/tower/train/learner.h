// The part of a training run that the steps change and a checkpoint keeps: the towers (every
// replica of the variables), the optimizer, the moving average of the weights, and
// the learning-rate schedule that drives the updates. train() runs one; so may a program of its
// own (see examples/).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tower/core/thread_pool.h"
#include "tower/io/checkpoint.h"
#include "tower/parallel/data_parallel.h"
#include "tower/train/ema.h"
#include "tower/train/lr_schedule.h"
#include "tower/train/optimizer.h"

namespace tower {

struct LearnerOptions {
  std::string lr_schedule;  // parse_lr_schedule's spec
  float lr = 0;
  int64_t steps_per_epoch = 0, total_steps = 0;
  float ema_decay = 0;  // 0: no moving average
  float clip_norm = 0;  // > 0: clip the averaged gradients by global norm
  float lr_factor = 1;  // the schedule's rate times this (thawed layers train slower)
};

class Learner {
 public:
  // `warning`: where a schedule warning goes (parse_lr_schedule), for the caller to print once.
  Learner(std::unique_ptr<DataParallel> towers, const OptimizerConfig& optimizer,
          const LearnerOptions& options, std::string* warning);

  DataParallel& towers() { return *towers_; }
  const DataParallel& towers() const { return *towers_; }
  // Every tensor of the training state, named as in checkpoints: each variable (of every replica,
  // or of replica 0 alone: what is saved, since the replicas are equal bit for bit), each
  // optimizer slot and each moving average.
  enum class Replicas { all, first };
  std::vector<std::pair<std::string, Tensor*>> state_tensors(Replicas replicas);
  // Copies a checkpoint's tensors into every replica; a missing tensor or another shape is an
  // error naming the checkpoint.
  void restore(const CheckpointData& checkpoint);
  // Copies the tensors of `values` that the state names (state_tensors) into every replica, and
  // a variable's into its moving average where `values` has no average of its own; the rest
  // stays as it is (a new optimizer slot: zeros). Starting from other weights, and thawing.
  void load(const std::map<std::string, Tensor>& values);
  // The update of step `step` on every replica (DataParallelOptimizer), with the moving
  // average of each block of a variable right after the optimizer wrote it, while it is in cache
  // (average number step + 1). Returns the learning rate it used.
  float update(int64_t step);
  // The weights to evaluate: the moving average where there is one, else replica 0's values.
  const Tensor& eval_weight(const std::string& name) const;
  bool averages() const { return ema_ != nullptr; }
  // The plateau schedule's reductions so far (the run's count of evaluations without progress):
  // the learning rate is the schedule's times factor^reductions, at least min_lr.
  void set_lr_reductions(int64_t reductions) { lr_reductions_ = reductions; }

 private:
  std::unique_ptr<DataParallel> towers_;
  std::unique_ptr<DataParallelOptimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  PlateauSpec plateau_;
  int64_t lr_reductions_ = 0;
  std::unique_ptr<ExponentialMovingAverage> ema_;
  std::vector<size_t> ema_index_;  // per optimizer param (replica 0): its moving average
  float clip_norm_ = 0;
  float lr_factor_ = 1;
};

}  // namespace tower
