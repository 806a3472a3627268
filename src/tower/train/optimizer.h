// Optimizers update f32 variables from their (already tower-averaged) gradients, outside the graph.
// Every replica runs its own optimizer on identical inputs, so an update is a pure element-wise
// function of (variable, gradient, slots, lr, step): bitwise the same on every replica and across
// a checkpoint/resume (Adam's bias correction is computed from `step`, not kept as state).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tower/core/tensor.h"

namespace tower {

struct Param {
  std::string name;
  Tensor* value;
  Tensor* grad;  // clipping scales it in place
};

// The flags of `tower train` that choose and tune the optimizer.
struct OptimizerConfig {
  std::string name = "sgd";  // sgd | momentum | adam | adamw
  float momentum = 0.9f;     // momentum
  bool nesterov = false;     // momentum
  float beta1 = 0.9f;        // adam, adamw
  float beta2 = 0.999f;      // adam, adamw
  float epsilon = 1e-8f;     // adam, adamw ("epsilon hat" of Kingma & Ba, as in TensorFlow)
  float weight_decay = 0;    // adamw only: decoupled, var *= 1 - lr * weight_decay
};

// Throws tower::Error naming the flag and the valid values when the config makes no sense
// (unknown name, momentum outside [0, 1), weight decay given to an optimizer without it, ...).
void validate(const OptimizerConfig& config);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Creates the slots (zeros) for these params. Call once before the step loop so that apply()
  // allocates nothing; apply() calls it itself on first use otherwise.
  virtual void init(const std::vector<Param>& params) = 0;
  // One update of every param; `step` is the number of updates done before this one. The params
  // must be the ones (same names, order and shapes) of the first init()/apply().
  void apply(const std::vector<Param>& params, float lr, int64_t step);
  // The same update in pieces, so that a caller may do more with each piece while it is in cache
  // (the moving average): start_step() once, then update() over every element of every param,
  // each element once, in any order. `params` must live until the last update() of the step.
  virtual void start_step(const std::vector<Param>& params, float lr, int64_t step) = 0;
  virtual void update(size_t param, int64_t begin, int64_t end) = 0;
  // Slot tensors named "<param name>/<slot name>" in param order, for checkpoints: writing into
  // them restores the optimizer exactly. Empty before init().
  virtual std::vector<std::pair<std::string, Tensor*>> slots() = 0;
  virtual std::string name() const = 0;
};

// Validates the config, then builds the optimizer it names.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);

// The trainable variables of one replica of `dp` with their averaged gradients. An optimizer
// applied to these updates that replica alone: a training loop uses DataParallelOptimizer.
class DataParallel;
class ThreadPool;
std::vector<Param> replica_params(DataParallel& dp, int replica);

// The optimizer step of a DataParallel. Under Strategy::allreduce every replica holds its own copy
// of the variables, and an Optimizer applied to one replica's params would leave the others behind
// (DataParallel::step() stops with an error when it sees that). This one updates them all: as the
// replicas hold the same values and averaged gradients and an update is element-wise, it runs the
// optimizer once, on replica 0, and copies each updated block to the other replicas while it is in
// cache: the bits each replica would compute on its own. The blocks are shared out over the
// threads the towers run on, which wait for the update anyway. `dp` must outlive it.
class DataParallelOptimizer {
 public:
  DataParallelOptimizer(DataParallel& dp, const OptimizerConfig& config);
  ~DataParallelOptimizer();
  // One update of every replica, the gradients first clipped to a global norm of `clip_norm`
  // when > 0 (clip.h). `after_range(param, begin, end)`, when given, runs after each block of a
  // param is updated, while the block is in cache (the moving average, in the same pass); blocks
  // run side by side, in no set order.
  using RangeFn = std::function<void(size_t param, int64_t begin, int64_t end)>;
  void apply(float lr, int64_t step, float clip_norm = 0, const RangeFn& after_range = {});
  // Replica 0's variables and gradients.
  const std::vector<Param>& params() const { return params_; }
  // The optimizer of replica 0, the only one: its slots ("<param>/<slot>") for checkpoints.
  Optimizer& optimizer() { return *optimizer_; }

 private:
  struct Block {
    size_t param;
    int64_t begin, end;
  };
  std::vector<Param> params_;
  std::vector<std::vector<Tensor*>> mirrors_;  // per param: its value in replicas 1, 2, ...
  std::vector<Block> blocks_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<ThreadPool> pool_;  // with the caller, as many threads as the towers
};

namespace detail {
// Shared by the optimizers with slots: one zero tensor per (param, slot name), created once.
class SlotSet {
 public:
  explicit SlotSet(std::vector<std::string> slot_names) : slot_names_(std::move(slot_names)) {}
  bool initialized() const { return initialized_; }
  void init(const std::vector<Param>& params);
  // TOWER_CHECKs that `params` are the params of init() (cheap: no allocation).
  void check_same(const std::vector<Param>& params) const;
  Tensor& slot(size_t param, size_t slot) { return slots_[param * slot_names_.size() + slot]; }
  std::vector<std::pair<std::string, Tensor*>> named();

 private:
  std::vector<std::string> slot_names_;
  std::vector<std::string> param_names_;
  std::vector<Tensor> slots_;  // param-major
  bool initialized_ = false;
};

// The checks every optimizer does on its inputs (f32, grad shape == value shape).
void check_param(const Param& param);

std::unique_ptr<Optimizer> make_sgd();
std::unique_ptr<Optimizer> make_momentum(float momentum, bool nesterov);
std::unique_ptr<Optimizer> make_adam(float beta1, float beta2, float epsilon);
std::unique_ptr<Optimizer> make_adamw(float beta1, float beta2, float epsilon, float weight_decay);
}  // namespace detail

}  // namespace tower
