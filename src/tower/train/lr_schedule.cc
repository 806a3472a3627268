#include "tower/train/lr_schedule.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <utility>
#include <vector>

#include "tower/core/error.h"

namespace tower {
namespace {

constexpr const char* kExpected =
    "constant | exponential:decay_epochs=350,rate=0.1,staircase=1 | "
    "piecewise:boundaries=1000;2000,values=0.1;0.01;0.001 | "
    "cosine:warmup_steps=500,alpha=0 | plateau:patience=3,factor=0.1";

class Constant final : public LrSchedule {
 public:
  explicit Constant(double lr) : lr_(lr) {}
  float lr(int64_t) const override { return static_cast<float>(lr_); }

 private:
  double lr_;
};

class Exponential final : public LrSchedule {
 public:
  Exponential(double initial, int64_t decay_steps, double rate, bool staircase)
      : initial_(initial), decay_steps_(decay_steps), rate_(rate), staircase_(staircase) {}
  float lr(int64_t step) const override {
    double p = static_cast<double>(step) / static_cast<double>(decay_steps_);
    if (staircase_) p = static_cast<double>(step / decay_steps_);  // exact, unlike floor(p)
    return static_cast<float>(initial_ * std::pow(rate_, p));
  }

 private:
  double initial_;
  int64_t decay_steps_;
  double rate_;
  bool staircase_;
};

class Piecewise final : public LrSchedule {
 public:
  Piecewise(std::vector<int64_t> boundaries, std::vector<double> values)
      : boundaries_(std::move(boundaries)), values_(std::move(values)) {}
  float lr(int64_t step) const override {
    size_t i = 0;
    while (i < boundaries_.size() && step > boundaries_[i]) ++i;
    return static_cast<float>(values_[i]);
  }

 private:
  std::vector<int64_t> boundaries_;
  std::vector<double> values_;  // one more than boundaries_
};

class Cosine final : public LrSchedule {
 public:
  Cosine(double initial, int64_t warmup_steps, double warmup_start, double alpha,
         int64_t total_steps)
      : initial_(initial),
        warmup_steps_(warmup_steps),
        warmup_start_(warmup_start),
        alpha_(alpha),
        decay_steps_(total_steps - warmup_steps) {}
  float lr(int64_t step) const override {
    if (step < warmup_steps_)
      return static_cast<float>(warmup_start_ + (initial_ - warmup_start_) *
                                                    static_cast<double>(step) /
                                                    static_cast<double>(warmup_steps_));
    const double p = static_cast<double>(std::min(step - warmup_steps_, decay_steps_)) /
                     static_cast<double>(decay_steps_);
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    return static_cast<float>(initial_ * ((1.0 - alpha_) * cosine + alpha_));
  }

 private:
  double initial_;
  int64_t warmup_steps_;
  double warmup_start_;
  double alpha_;
  int64_t decay_steps_;
};

// The key=value pairs of one spec.
class SpecParser {
 public:
  SpecParser(const std::string& spec, int64_t steps_per_epoch)
      : spec_(spec), steps_per_epoch_(steps_per_epoch) {
    const size_t colon = spec.find(':');
    name_ = spec.substr(0, colon);
    if (colon == std::string::npos) return;
    const std::string rest = spec.substr(colon + 1);
    size_t begin = 0;
    while (begin <= rest.size()) {
      size_t end = rest.find(',', begin);
      if (end == std::string::npos) end = rest.size();
      const std::string item = rest.substr(begin, end - begin);
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        error("'{}' is not KEY=VALUE", item);
      const std::string key = item.substr(0, eq);
      if (find(key) != nullptr) error("key '{}' is given twice", key);
      entries_.push_back({key, item.substr(eq + 1)});
      begin = end + 1;
    }
  }

  bool has(const std::string& key) const { return find(key) != nullptr; }

  double number(const std::string& key, double fallback) {
    const Entry* e = find(key);
    return e ? parse_number(key, e->value) : fallback;
  }
  double required_number(const std::string& key) {
    if (!has(key)) error("{} needs {}=", name_, key);
    return number(key, 0);
  }
  std::vector<double> numbers(const std::string& key) {
    if (!has(key)) error("{} needs {}=", name_, key);
    std::vector<double> out;
    const std::string value = find(key)->value;
    size_t begin = 0;
    while (begin <= value.size()) {
      size_t end = value.find(';', begin);
      if (end == std::string::npos) end = value.size();
      out.push_back(parse_number(key, value.substr(begin, end - begin)));
      begin = end + 1;
    }
    return out;
  }
  bool flag(const std::string& key, bool fallback) {
    const Entry* e = find(key);
    if (!e) return fallback;
    const std::string value = e->value;
    if (value == "1" || value == "true") return true;
    if (value == "0" || value == "false") return false;
    error("{} must be 0 or 1, got '{}'", key, value);
  }
  // A count of steps given either in steps (`steps_key`) or in epochs (`epochs_key`).
  int64_t steps(const std::string& steps_key, const std::string& epochs_key, int64_t fallback) {
    if (has(steps_key) && has(epochs_key)) error("give {} or {}, not both", steps_key, epochs_key);
    if (has(steps_key)) return whole(steps_key, number(steps_key, 0));
    if (has(epochs_key)) return from_epochs(epochs_key, number(epochs_key, 0));
    return fallback;
  }
  std::vector<int64_t> steps_list(const std::string& steps_key, const std::string& epochs_key) {
    if (has(steps_key) && has(epochs_key)) error("give {} or {}, not both", steps_key, epochs_key);
    if (!has(steps_key) && !has(epochs_key))
      error("{} needs {}= or {}=", name_, steps_key, epochs_key);
    std::vector<int64_t> out;
    if (has(steps_key))
      for (double v : numbers(steps_key)) out.push_back(whole(steps_key, v));
    else
      for (double v : numbers(epochs_key)) out.push_back(from_epochs(epochs_key, v));
    return out;
  }

  // Rejects other keys: a typo must not silently fall back to a default.
  void allow(const std::vector<std::string>& valid) const {
    for (const Entry& e : entries_) {
      if (std::find(valid.begin(), valid.end(), e.key) != valid.end()) continue;
      if (valid.empty()) error("{} takes no keys, got '{}'", name_, e.key);
      error("unknown key '{}' for {}; valid keys: {}", e.key, name_, fmt::join(valid, ", "));
    }
  }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("--lr_schedule '{}': {}", spec_, fmt::format(format, std::forward<Args>(args)...));
  }

 private:
  struct Entry {
    std::string key, value;
  };
  const Entry* find(const std::string& key) const {
    for (const Entry& e : entries_)
      if (e.key == key) return &e;
    return nullptr;
  }
  double parse_number(const std::string& key, const std::string& text) const {
    double value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value))
      error("{} must be a number, got '{}'", key, text);
    return value;
  }
  int64_t whole(const std::string& key, double value) const {
    if (value < 0 || value != std::floor(value) || value > 9e18)
      error("{} must be a whole number of steps >= 0, got {}", key, value);
    return static_cast<int64_t>(value);
  }
  int64_t from_epochs(const std::string& key, double epochs) const {
    if (epochs < 0) error("{} must be >= 0, got {}", key, epochs);
    TOWER_CHECK(steps_per_epoch_ >= 1);
    // Truncated, like the classic int(num_batches_per_epoch * NUM_EPOCHS_PER_DECAY).
    return static_cast<int64_t>(epochs * static_cast<double>(steps_per_epoch_));
  }

  std::string spec_;
  std::string name_;
  std::vector<Entry> entries_;
  int64_t steps_per_epoch_;
};

}  // namespace

namespace {
// The spec with every number of KEY's ";" list times `factor`; the spec itself when it has no KEY.
std::string scale_key(const std::string& spec, const std::string& key, double factor) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return spec;
  const std::string tag = key + "=";
  size_t at = colon + 1;
  while (at < spec.size() && spec.compare(at, tag.size(), tag) != 0) {
    at = spec.find(',', at);
    if (at == std::string::npos) return spec;
    ++at;
  }
  if (at >= spec.size()) return spec;
  const size_t begin = at + tag.size(), end = std::min(spec.find(',', begin), spec.size());
  std::string values;
  for (size_t i = begin; i < end;) {
    const size_t next = std::min(spec.find(';', i), end);
    const double v = std::strtod(spec.substr(i, next - i).c_str(), nullptr);
    values += fmt::format("{}{:.6g}", values.empty() ? "" : ";", v * factor);
    i = next + 1;
  }
  return spec.substr(0, begin) + values + spec.substr(end);
}
}  // namespace

std::string scale_piecewise_values(const std::string& spec, double factor) {
  if (spec.rfind("piecewise:", 0) != 0) return spec;
  return scale_key(spec, "values", factor);
}

std::string scale_schedule_epochs(const std::string& spec, double factor) {
  return scale_key(scale_key(spec, "boundary_epochs", factor), "decay_epochs", factor);
}

PlateauSpec plateau_spec(const std::string& spec) {
  PlateauSpec plateau;
  if (spec.substr(0, spec.find(':')) != "plateau") return plateau;
  SpecParser p(spec, 1);
  p.allow({"patience", "factor", "min_lr"});
  const double patience = p.required_number("patience");
  if (patience < 1 || patience != std::floor(patience) || patience > 1e9)
    p.error("patience must be a whole number of evaluations >= 1, got {}", patience);
  plateau.patience = static_cast<int64_t>(patience);
  plateau.factor = p.number("factor", plateau.factor);
  if (!(plateau.factor > 0 && plateau.factor < 1))
    p.error("factor must be in (0, 1), got {}", plateau.factor);
  plateau.min_lr = p.number("min_lr", plateau.min_lr);
  if (plateau.min_lr < 0) p.error("min_lr must be >= 0, got {}", plateau.min_lr);
  return plateau;
}

std::unique_ptr<LrSchedule> parse_lr_schedule(const std::string& spec, float initial_lr,
                                              int64_t steps_per_epoch, int64_t total_steps,
                                              std::string* warning) {
  const std::string name = spec.substr(0, spec.find(':'));
  if (name != "constant" && name != "exponential" && name != "piecewise" && name != "cosine" &&
      name != "plateau")
    fail("--lr_schedule '{}': unknown schedule '{}'; expected {}", spec, name, kExpected);
  SpecParser p(spec, steps_per_epoch);
  const bool uses_initial = name != "piecewise";
  if (uses_initial && (!(initial_lr > 0.0f) || !std::isfinite(initial_lr)))
    fail("--lr must be a positive number, got {}", initial_lr);
  const double lr = initial_lr;

  if (name == "constant") {
    p.allow({});
    return std::make_unique<Constant>(lr);
  }
  if (name == "plateau") {  // the reductions are the run's (plateau_spec), applied by the learner
    plateau_spec(spec);
    return std::make_unique<Constant>(lr);
  }
  if (name == "exponential") {
    p.allow({"decay_steps", "decay_epochs", "rate", "staircase"});
    const int64_t decay_steps = p.steps("decay_steps", "decay_epochs", -1);
    if (decay_steps < 0) p.error("exponential needs decay_steps= or decay_epochs=");
    if (decay_steps < 1) p.error("the decay period must be at least 1 step, got {}", decay_steps);
    const double rate = p.required_number("rate");
    if (!(rate > 0)) p.error("rate must be > 0, got {}", rate);
    const bool staircase = p.flag("staircase", false);
    if (staircase && decay_steps >= total_steps && warning)
      *warning = fmt::format(
          "--lr_schedule '{}': the first decay comes after {} steps, but the run has {}: the "
          "learning rate stays {} to the end",
          spec, decay_steps, total_steps, lr);
    return std::make_unique<Exponential>(lr, decay_steps, rate, staircase);
  }
  if (name == "piecewise") {
    p.allow({"boundaries", "boundary_epochs", "values"});
    std::vector<int64_t> boundaries = p.steps_list("boundaries", "boundary_epochs");
    std::vector<double> values = p.numbers("values");
    if (values.size() != boundaries.size() + 1)
      p.error("{} boundaries need {} values, got {}", boundaries.size(), boundaries.size() + 1,
              values.size());
    // Epochs that increase may fall on one step of a short run (a value never used), steps not.
    const bool epochs = p.has("boundary_epochs");
    const std::vector<double> given =
        epochs ? p.numbers("boundary_epochs")
               : std::vector<double>(boundaries.begin(), boundaries.end());
    for (size_t i = 1; i < given.size(); ++i)
      if (given[i] <= given[i - 1])
        p.error("boundaries must strictly increase, got {} after {}", given[i], given[i - 1]);
    for (double v : values)
      if (!(v > 0)) p.error("values must be learning rates > 0, got {}", v);
    size_t reached = 0;  // the boundaries the run passes (lr(step) for step < total_steps)
    while (reached < boundaries.size() && boundaries[reached] < total_steps - 1) ++reached;
    if (reached < boundaries.size() && warning)
      *warning = fmt::format(
          "--lr_schedule '{}': boundary {} (step {}) is past the run's last step {}: the learning "
          "rate stays {} to the end",
          spec, reached + 1, boundaries[reached], total_steps - 1, values[reached]);
    return std::make_unique<Piecewise>(std::move(boundaries), std::move(values));
  }
  if (name == "cosine") {
    p.allow({"warmup_steps", "warmup_epochs", "warmup_start", "alpha"});
    int64_t warmup = p.steps("warmup_steps", "warmup_epochs", 0);
    const double start = p.number("warmup_start", 0);
    const double alpha = p.number("alpha", 0);
    if (start < 0) p.error("warmup_start must be >= 0, got {}", start);
    if (alpha < 0 || alpha > 1) p.error("alpha must be in [0, 1], got {}", alpha);
    if (warmup >= total_steps) {  // a recipe's warm-up on a short run: clamp it, never fail
      if (warning)
        *warning = fmt::format(
            "--lr_schedule '{}': the warm-up of {} steps is longer than the run ({} steps): "
            "warming up for {}",
            spec, warmup, total_steps, total_steps / 2);
      warmup = total_steps / 2;
    }
    return std::make_unique<Cosine>(lr, warmup, start, alpha, total_steps);
  }
  TOWER_CHECK_MSG(false, "schedule '{}' passed the name check but has no parser", name);
  return nullptr;
}

}  // namespace tower
