#include "tower/train/learner.h"

#include <algorithm>
#include <cmath>

#include "tower/core/trace.h"

namespace tower {

Learner::Learner(std::unique_ptr<DataParallel> towers, const OptimizerConfig& optimizer,
                 const LearnerOptions& options, std::string* warning)
    : towers_(std::move(towers)),
      optimizer_(std::make_unique<DataParallelOptimizer>(*towers_, optimizer)),
      schedule_(parse_lr_schedule(options.lr_schedule, options.lr, options.steps_per_epoch,
                                  options.total_steps, warning)),
      plateau_(plateau_spec(options.lr_schedule)),
      clip_norm_(options.clip_norm),
      lr_factor_(options.lr_factor) {
  if (options.ema_decay > 0) {
    ema_ = std::make_unique<ExponentialMovingAverage>(options.ema_decay);
    std::vector<std::pair<std::string, const Tensor*>> vars;
    for (const auto& v : towers_->trainable())
      vars.push_back({v.name, &towers_->replica(0).get(v.name)});
    ema_->init(vars);
    for (const Param& param : optimizer_->params())
      ema_index_.push_back(ema_->index_of(param.name));
  }
}

std::vector<std::pair<std::string, Tensor*>> Learner::state_tensors(Replicas replicas) {
  std::vector<std::pair<std::string, Tensor*>> all;
  const int n = replicas == Replicas::all ? towers_->num_replicas() : 1;
  for (int r = 0; r < n; ++r)
    for (const std::string& name : towers_->replica(r).names())
      all.push_back({name, &towers_->replica(r).get(name)});
  for (auto& slot : optimizer_->optimizer().slots()) all.push_back(slot);
  if (ema_)
    for (auto& shadow : ema_->shadows()) all.push_back(shadow);
  return all;
}

void Learner::restore(const CheckpointData& checkpoint) {
  for (auto& [name, into] : state_tensors(Replicas::all)) {
    auto it = checkpoint.tensors.find(name);
    if (it == checkpoint.tensors.end())
      fail("checkpoint {} has no tensor '{}' (was it written by another model?)", checkpoint.prefix,
           name);
    if (it->second.shape() != into->shape())
      fail("checkpoint {}: tensor '{}' has shape {}, the model expects {}", checkpoint.prefix, name,
           it->second.shape().to_string(), into->shape().to_string());
    into->copy_from(it->second);
  }
}

void Learner::load(const std::map<std::string, Tensor>& values) {
  for (auto& [name, into] : state_tensors(Replicas::all)) {
    auto it = values.find(name);
    if (it == values.end() && ema_)
      for (const auto& v : towers_->trainable())
        if (ExponentialMovingAverage::shadow_name(v.name) == name) it = values.find(v.name);
    if (it != values.end()) into->copy_from(it->second);
  }
}

float Learner::update(int64_t step) {
  trace::Slice slice("step", "optimizer");
  float lr = schedule_->lr(step) * lr_factor_;
  if (lr_reductions_ > 0)
    lr = static_cast<float>(std::max(
        lr * std::pow(plateau_.factor, static_cast<double>(lr_reductions_)), plateau_.min_lr));
  DataParallelOptimizer::RangeFn average;
  if (ema_) {
    const float one_minus_decay = 1.0f - ema_->decay_at(step + 1);
    average = [this, one_minus_decay](size_t param, int64_t begin, int64_t end) {
      ema_->update_range(ema_index_[param], begin, end, one_minus_decay);
    };
  }
  optimizer_->apply(lr, step, clip_norm_, average);
#ifndef NDEBUG
  TOWER_CHECK_MSG(towers_->replicas_identical(), "replicas diverged at step {}", step);
#endif
  return lr;
}

const Tensor& Learner::eval_weight(const std::string& name) const {
  if (ema_ && ema_->has(name)) return ema_->shadow(name);
  return towers_->replica(0).get(name);
}

}  // namespace tower
