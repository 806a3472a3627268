// The flags of a run: the recipe's defaults, the checks before anything is built, and what must
// agree between the ranks of one job.
#include <fmt/format.h>

#include <cmath>

#include "tower/train/lr_schedule.h"
#include "tower/train/trainer.h"

namespace tower {
namespace {

constexpr int64_t kMaxBatch = int64_t{1} << 20;

void check_number(const char* flag, double value, double lo, double hi, const char* expected) {
  if (!std::isfinite(value) || value < lo || value > hi)
    fail("{} must be {}, got {}", flag, expected, value);
}
void check_count(const char* flag, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    fail("{} must be a whole number from {} to {}, got {}", flag, lo, hi, value);
}

}  // namespace

// What must agree between all ranks of one job: everything that changes the numbers.
// (With micro-batches ranks may run different numbers of towers.)
std::vector<std::pair<std::string, std::string>> rank_fields(const TrainConfig& c, size_t towers,
                                                             const Dataset& data) {
  const OptimizerConfig& o = c.optimizer;
  const bool micro = c.micro_batch_size > 0;
  return {{"--model", c.model},
          {"--data", c.data},
          {"the data set's size",
           fmt::format("{} examples of {}", data.size(), data.image_shape().to_string())},
          {"the number of towers", micro ? "any" : std::to_string(towers)},
          {"--batch_size", micro ? "unused" : std::to_string(c.batch_size)},
          {"--global_batch_size", std::to_string(c.global_batch_size)},
          {"--micro_batch_size", std::to_string(c.micro_batch_size)},
          {"--strategy", std::string(strategy_name(c.strategy))},
          {"--bucket_mb", fmt::format("{}", c.bucket_mb)},
          {"--max_steps", std::to_string(c.max_steps)},
          {"--epochs", fmt::format("{}", c.epochs)},
          {"--optimizer", o.name},
          {"--momentum", fmt::format("{}", o.momentum)},
          {"--nesterov", fmt::format("{}", o.nesterov)},
          {"--weight_decay", fmt::format("{}", o.weight_decay)},
          {"--beta1", fmt::format("{}", o.beta1)},
          {"--beta2", fmt::format("{}", o.beta2)},
          {"--epsilon", fmt::format("{}", o.epsilon)},
          {"--lr", fmt::format("{}", c.lr)},
          {"--lr_schedule", c.lr_schedule},
          {"the recipe's epochs", fmt::format("{}", c.schedule_epochs)},
          {"--clip_norm", fmt::format("{}", c.clip_norm)},
          {"--ema_decay", fmt::format("{}", c.ema_decay)},
          {"--bn_momentum", fmt::format("{}", c.bn_momentum)},
          {"--precise_bn", c.precise_bn},
          {"--label_smoothing", fmt::format("{}", c.label_smoothing)},
          {"--class_weights", c.class_weights},
          {"--augmentation", c.augmentation},
          {"--seed", std::to_string(c.seed)},
          {"--resume_from", c.resume_from},
          {"--init_from", c.init_from},
          {"--init_partial", fmt::format("{}", c.init_partial)},
          {"--freeze", c.freeze},
          {"--unfreeze_after_epochs", fmt::format("{}", c.unfreeze_after_epochs)},
          {"--unfreeze_lr_factor", fmt::format("{}", c.unfreeze_lr_factor)},
          {"--dropout", fmt::format("{}", c.dropout)},
          {"--deterministic", fmt::format("{}", c.program.deterministic)},
          {"--precision", std::string(precision_name(c.program.precision))}};
}

TrainConfig TrainConfig::for_model(const std::string& model) {
  TrainConfig config;
  config.model = model;
  apply_recipe(config, get_model(model).recipe);
  return config;
}

void apply_recipe(TrainConfig& config, const Recipe& recipe) {
  config.optimizer = OptimizerConfig{};
  config.optimizer.name = recipe.optimizer;
  config.optimizer.momentum = recipe.momentum;
  config.optimizer.weight_decay = recipe.weight_decay;
  config.lr = recipe.lr;
  config.lr_schedule = recipe.lr_schedule;
  config.schedule_epochs = recipe.epochs;
  config.batch_size = recipe.batch_size;
  config.epochs = recipe.epochs;
  config.ema_decay = recipe.ema_decay;
  config.augmentation = recipe.augmentation;
}

DataOptions data_options(const TrainConfig& c) {
  return {c.data, c.image_size, c.test_fraction, c.skip_bad_images, c.augmentation};
}

void validate(const TrainConfig& c) {
  const ModelDef& model = get_model(c.model);
  run_data_spec(data_options(c), model);
  check_count("--batch_size", c.batch_size, 1, kMaxBatch);
  check_count("--global_batch_size", c.global_batch_size, 0, kMaxBatch);
  check_count("--micro_batch_size", c.micro_batch_size, 0, kMaxBatch);
  if ((c.global_batch_size > 0) != (c.micro_batch_size > 0))
    fail("--global_batch_size and --micro_batch_size go together: give both, or neither");
  check_count("--max_steps", c.max_steps, 0, kMaxSteps);
  check_number("--epochs", c.epochs, 0, 1e6, "a number of epochs from 0 to 1e6");
  if (c.max_steps == 0 && c.epochs <= 0)
    fail("nothing to train: give --max_steps N or --epochs E greater than 0");
  check_number("--bucket_mb", c.bucket_mb, 1.0 / 1024, 65536, "a size in MB from 1/1024 to 65536");
  check_count("--num_devices", c.num_devices, 0, kMaxTowersPerRank);
  check_count("--num_gpus", c.num_gpus, 0, kMaxTowersPerRank);
  check_count("--num_threads", c.num_threads, 0, 4096);
  check_number("--lr", c.lr, 1e-30, 1e30, "a number > 0");
  check_number("--clip_norm", c.clip_norm, 0, 1e30, "a number >= 0 (0: no clipping)");
  if (!std::isfinite(c.ema_decay) || c.ema_decay < 0 || c.ema_decay >= 1)
    fail("--ema_decay must be in [0, 1) (0: no moving average), got {}", c.ema_decay);
  if (!std::isfinite(c.bn_momentum) || c.bn_momentum < 0 || c.bn_momentum >= 1)
    fail(
        "--bn_momentum must be in (0, 1) (the decay of the moving averages; 0: the model's own), "
        "got {}",
        c.bn_momentum);
  if (!std::isfinite(c.label_smoothing) || c.label_smoothing < 0 || c.label_smoothing >= 1)
    fail("--label_smoothing must be in [0, 1), got {}", c.label_smoothing);
  if (c.precise_bn != "auto" && c.precise_bn != "on" && c.precise_bn != "off")
    fail("--precise_bn must be auto, on or off, got '{}'", c.precise_bn);
  input_transforms(c.augmentation, model.default_input, model.default_input);
  check_count("--num_preprocess_threads", c.num_preprocess_threads, 0, 256);
  check_count("--log_every", c.log_every, 0, kMaxSteps);
  check_count("--save_every_steps", c.save_every_steps, 0, kMaxSteps);
  check_number("--save_every_secs", c.save_every_secs, 0, 1e9, "a number of seconds >= 0 (0: off)");
  check_count("--keep_checkpoints", c.keep_checkpoints, 1, 1000000);
  check_count("--eval_every", c.eval_every, 0, kMaxSteps);
  check_count("--early_stopping", c.early_stopping, 0, kMaxSteps);
  const bool plateau = plateau_spec(c.lr_schedule).patience > 0;  // checks the spec
  for (const auto& [flag, given] : {std::pair{"--keep_best", c.keep_best},
                                    {"--early_stopping", c.early_stopping > 0},
                                    {"--lr_schedule plateau", plateau}})
    if (given && c.eval_every == 0)
      fail("{} needs --eval_every N: it compares the evaluations made every N steps", flag);
  check_number("--comm_timeout", c.comm_timeout, 1e-3, 1e9, "a number of seconds > 0");
  if (c.train_dir.empty()) fail("--train_dir must not be empty");
  check_count("--trace_steps", c.trace_steps, 1, 1000000);
  if (!c.init_from.empty() && !c.resume_from.empty())
    fail("--init_from starts a new run from weights, --resume_from continues a run: give one");
  if (c.init_partial && c.init_from.empty())
    fail("--init_partial goes with --init_from: it says which weights may be missing");
  check_number("--unfreeze_after_epochs", c.unfreeze_after_epochs, 0, 1e6,
               "a number of epochs >= 0 (0: never)");
  if (c.unfreeze_after_epochs > 0 && c.freeze.empty())
    fail("--unfreeze_after_epochs goes with --freeze: it says when the frozen layers thaw");
  check_number("--unfreeze_lr_factor", c.unfreeze_lr_factor, 1e-6, 1e3, "a number in (0, 1000]");
  if (!std::isfinite(c.dropout) || c.dropout >= 1 || (c.dropout < 0 && c.dropout != -1))
    fail("--dropout must be in [0, 1) (or -1: the model's own rates), got {}", c.dropout);
  validate(c.optimizer);
}

}  // namespace tower
