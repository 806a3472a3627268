#include "tower/train/optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <thread>

#include "tower/core/denormals.h"
#include "tower/core/thread_pool.h"
#include "tower/core/trace.h"
#include "tower/parallel/data_parallel.h"
#include "tower/train/clip.h"

namespace tower {

namespace {
constexpr const char* kNames = "sgd, momentum, adam, adamw";

// In [0, 1): 1 would freeze the average forever, and NaN passes every other comparison.
void check_unit_interval(const char* flag, float value) {
  if (!(value >= 0.0f && value < 1.0f)) fail("{} must be in [0, 1), got {}", flag, value);
}
}  // namespace

void validate(const OptimizerConfig& config) {
  const std::string& n = config.name;
  if (n != "sgd" && n != "momentum" && n != "adam" && n != "adamw")
    fail("--optimizer: unknown optimizer '{}'; valid names are {}", n, kNames);
  if (n == "momentum") check_unit_interval("--momentum", config.momentum);
  if (n == "adam" || n == "adamw") {
    check_unit_interval("--beta1", config.beta1);
    check_unit_interval("--beta2", config.beta2);
    if (!(config.epsilon > 0.0f) || !std::isfinite(config.epsilon))
      fail("--epsilon must be > 0, got {}", config.epsilon);
  }
  if (!(config.weight_decay >= 0.0f) || !std::isfinite(config.weight_decay))
    fail("--weight_decay must be >= 0, got {}", config.weight_decay);
  // Silently ignoring the flag would train a different model than the one asked for.
  if (config.weight_decay != 0.0f && n != "adamw")
    fail(
        "--weight_decay (decoupled weight decay) is only implemented by --optimizer adamw, "
        "not {}",
        n);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config) {
  validate(config);
  if (config.name == "sgd") return detail::make_sgd();
  if (config.name == "momentum") return detail::make_momentum(config.momentum, config.nesterov);
  if (config.name == "adam") return detail::make_adam(config.beta1, config.beta2, config.epsilon);
  return detail::make_adamw(config.beta1, config.beta2, config.epsilon, config.weight_decay);
}

namespace detail {

void check_param(const Param& param) {
  TOWER_CHECK_MSG(param.value != nullptr && param.grad != nullptr, "param '{}' has no tensor",
                  param.name);
  TOWER_CHECK_MSG(param.value->dtype() == DType::f32 && param.grad->dtype() == DType::f32,
                  "param '{}' is not f32", param.name);
  TOWER_CHECK_MSG(param.value->shape() == param.grad->shape(),
                  "param '{}' has shape {} but its gradient {}", param.name,
                  param.value->shape().to_string(), param.grad->shape().to_string());
}

void SlotSet::init(const std::vector<Param>& params) {
  if (initialized_) {
    check_same(params);
    return;
  }
  for (const Param& p : params) {
    check_param(p);
    param_names_.push_back(p.name);
    for (size_t s = 0; s < slot_names_.size(); ++s)
      slots_.emplace_back(p.value->shape(), DType::f32, p.value->device());
  }
  initialized_ = true;
}

void SlotSet::check_same(const std::vector<Param>& params) const {
  TOWER_CHECK_MSG(params.size() == param_names_.size(),
                  "optimizer initialised for {} params, applied to {}", param_names_.size(),
                  params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    check_param(params[i]);
    TOWER_CHECK_MSG(params[i].name == param_names_[i] &&
                        (slot_names_.empty() ||
                         params[i].value->shape() == slots_[i * slot_names_.size()].shape()),
                    "optimizer param {} is '{}' {}, was '{}' at init", i, params[i].name,
                    params[i].value->shape().to_string(), param_names_[i]);
  }
}

std::vector<std::pair<std::string, Tensor*>> SlotSet::named() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (size_t p = 0; p < param_names_.size(); ++p)
    for (size_t s = 0; s < slot_names_.size(); ++s)
      out.emplace_back(param_names_[p] + "/" + slot_names_[s], &slot(p, s));
  return out;
}

}  // namespace detail
void Optimizer::apply(const std::vector<Param>& params, float lr, int64_t step) {
  start_step(params, lr, step);
  for (size_t k = 0; k < params.size(); ++k) update(k, 0, params[k].value->numel());
}

DataParallelOptimizer::DataParallelOptimizer(DataParallel& dp, const OptimizerConfig& config)
    : params_(replica_params(dp, 0)), optimizer_(make_optimizer(config)) {
  optimizer_->init(params_);
  // Blocks of 32 KB per tensor: the variable, its gradient and slots, a moving average and the
  // copies stay in L2.
  constexpr int64_t kBlock = 8192;
  for (size_t k = 0; k < params_.size(); ++k) {
    mirrors_.emplace_back();
    for (int r = 1; r < dp.num_replicas(); ++r)
      mirrors_.back().push_back(&dp.replica(r).get(params_[k].name));
    for (int64_t b = 0, n = params_[k].value->numel(); b < n; b += kBlock)
      blocks_.push_back({k, b, std::min(b + kBlock, n)});
  }
  pool_ = std::make_unique<ThreadPool>(std::max(dp.num_threads() - 1, 0));
}

DataParallelOptimizer::~DataParallelOptimizer() = default;

void DataParallelOptimizer::apply(float lr, int64_t step, float clip_norm,
                                  const RangeFn& after_range) {
  DenormalsAreZero denormals;  // (the pool's threads have it)
  if (clip_norm > 0) {
    std::vector<Tensor*> grads;
    for (const Param& p : params_) grads.push_back(p.grad);
    clip_by_global_norm(grads, clip_norm);
  }
  optimizer_->start_step(params_, lr, step);
  std::atomic<size_t> next{0};
  const std::thread::id caller = std::this_thread::get_id();
  pool_->parallel_for(pool_->num_threads() + 1, [&](int64_t) {
    // (The caller's lane shows the whole update.)
    std::optional<trace::Slice> slice;
    if (trace::active() && std::this_thread::get_id() != caller) {
      trace::name_thread("update");
      slice.emplace("step", "update blocks");
    }
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < blocks_.size();) {
      const Block& b = blocks_[i];
      optimizer_->update(b.param, b.begin, b.end);
      if (after_range) after_range(b.param, b.begin, b.end);
      const float* value = params_[b.param].value->data<float>();
      for (Tensor* mirror : mirrors_[b.param])
        std::copy(value + b.begin, value + b.end, mirror->data<float>() + b.begin);
    }
  });
}

std::vector<Param> replica_params(DataParallel& dp, int replica) {
  std::vector<Param> params;
  for (size_t v = 0; v < dp.trainable().size(); ++v) {
    const std::string& name = dp.trainable()[v].name;
    params.push_back(
        {name, &dp.replica(replica).get(name), &dp.gradient(replica, static_cast<int>(v))});
  }
  return params;
}

}  // namespace tower
