// `tower train`: trains a model on every device.
#include <fmt/format.h>

#include "command.h"
#include "program_flags.h"
#include "tower/models/model.h"
#include "tower/models/model_file.h"
#include "tower/parallel/gradient_reducer.h"
#include "tower/train/lr_find.h"
#include "tower/train/lr_schedule.h"
#include "tower/train/trainer.h"

namespace tower::cli {
namespace {

struct Flags {
  TrainConfig config;
  std::string devices, strategy = "allreduce", model_file;
  ProgramFlags program;
  CLI::App* app = nullptr;
};

// The model's recipe, with the fields given as flags taken from the flags.
TrainConfig with_recipe(const Flags& flags) {
  TrainConfig config = flags.config;
  TrainConfig recipe = flags.config;
  apply_recipe(recipe, get_model(config.model).recipe);
  auto take = [&](const char* flag, auto& field, const auto& from_recipe) {
    if (flags.app->count(flag) == 0) field = from_recipe;
  };
  take("--optimizer", config.optimizer.name, recipe.optimizer.name);
  take("--momentum", config.optimizer.momentum, recipe.optimizer.momentum);
  take("--weight_decay", config.optimizer.weight_decay, recipe.optimizer.weight_decay);
  take("--lr", config.lr, recipe.lr);
  take("--lr_schedule", config.lr_schedule, recipe.lr_schedule);
  take("--lr_schedule", config.schedule_epochs, recipe.schedule_epochs);
  take("--batch_size", config.batch_size, recipe.batch_size);
  take("--epochs", config.epochs, recipe.epochs);
  take("--ema_decay", config.ema_decay, recipe.ema_decay);
  take("--augmentation", config.augmentation, recipe.augmentation);
  // A piecewise schedule holds absolute values, which --lr would not move: --lr scales the
  // recipe's, and with a piecewise --lr_schedule of the user's own it is refused.
  const bool piecewise = config.lr_schedule.rfind("piecewise:", 0) == 0;
  if (piecewise && flags.app->count("--lr") > 0) {
    if (flags.app->count("--lr_schedule") > 0)
      fail(
          "--lr {} has no effect with --lr_schedule '{}', whose values are the learning rates: "
          "drop --lr, or put the rates in the schedule's values",
          config.lr, config.lr_schedule);
    config.lr_schedule = scale_piecewise_values(recipe.lr_schedule, config.lr / recipe.lr);
    if (world().rank() == 0)
      fmt::print("--lr {} scales the recipe's schedule by {:.6g}: {}\n", config.lr,
                 config.lr / recipe.lr, config.lr_schedule);
  }
  return config;
}

std::string recipes_help() {
  std::string text =
      "\nRecipes (the defaults of --optimizer, --momentum, --weight_decay, --lr, --lr_schedule,\n"
      "--batch_size, --epochs, --ema_decay and --augmentation; a flag overrides its field):\n";
  for (const std::string& name : model_names())
    text += fmt::format("  {:<9} {}\n", name, to_string(get_model(name).recipe));
  return text;
}

// The run's config: the model (or model file) with its recipe, then the flags.
TrainConfig resolve(Flags& flags) {
  if (!flags.model_file.empty()) {
    if (flags.app->count("--model") > 0) fail("--model and --model_file exclude each other");
    flags.config.model = load_model_file(flags.model_file);
  }
  TrainConfig config = with_recipe(flags);
  if (!flags.devices.empty()) config.devices = parse_device_list(flags.devices);
  if (flags.app->count("--batch_size") > 0 && flags.app->count("--global_batch_size") > 0)
    fail("--batch_size (per tower) and --global_batch_size (per step) exclude each other");
  config.strategy = parse_strategy(flags.strategy);
  config.program = program_options(flags.program);
  return config;
}

void run_train(Flags& flags) {
  TrainResult result = train(resolve(flags));
  if (result.interrupted) exit_code() = 130;  // stopped by a signal, after its checkpoint
  if (world().rank() != 0) return;
  if (result.trained == 0)
    fmt::print("already at step {} (--max_steps or --epochs): nothing to train", result.steps);
  else if (result.trained < result.steps)
    fmt::print("done: step {}, {} steps trained in {:.1f} s", result.steps, result.trained,
               result.seconds);
  else
    fmt::print("done: {} steps in {:.1f} s", result.steps, result.seconds);
  if (result.eval_accuracy >= 0) fmt::print(", test precision @ 1 = {:.4f}", result.eval_accuracy);
  fmt::print("\n");
}

// The model and the data.
void add_model_flags(CLI::App& app, Flags& flags) {
  TrainConfig& c = flags.config;
  app.add_option("--model", c.model, "Model to train (see `tower models`)")->capture_default_str();
  app.add_option("--model_file", flags.model_file,
                 "A network as a JSON file (docs/model_file.md), instead of --model");
  app.add_option("--data", c.data,
                 "Data set: fashion-mnist | cifar10:DIR | cifar100:DIR | idx:DIR | folder:DIR "
                 "(JPEG/PNG images in class folders) | npy:DIR (NumPy arrays); default: the "
                 "recipe's (docs/data.md)");
  app.add_option("--image_size", c.image_size,
                 "folder: bring images to this size, S or H,W (default: the size of the data "
                 "the recipe is for, else the model's input)")
      ->delimiter(',')
      ->expected(1, 2)
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw);  // 3 values: no silent last 2
  app.add_option("--test_fraction", c.test_fraction,
                 "folder without train/ and test/: the share of images held out for testing")
      ->capture_default_str();
  app.add_flag("--skip_bad_images", c.skip_bad_images,
               "folder: skip corrupt images with a warning instead of stopping");
}

// Devices, threads, how the towers compute and share the batch.
void add_placement_flags(CLI::App& app, Flags& flags) {
  TrainConfig& c = flags.config;
  app.add_option("--devices", flags.devices, "Devices, e.g. cpu:0,cpu:1 (one tower each)");
  app.add_option("--num_devices", c.num_devices, "Split the CPU cores into N logical devices")
      ->check(positive);
  app.add_option("--num_threads", c.num_threads,
                 "Threads of all CPU towers together, split evenly (default: this rank's "
                 "share of the cores)")
      ->check(positive);
  app.add_option("--num_gpus", c.num_gpus, "Towers on cuda:0..N-1 (the classic flag)")
      ->check(positive);
  app.add_flag("--allow_soft_placement", c.allow_soft_placement,
               "Place towers of missing GPUs on CPU devices instead of failing");
  app.add_flag("--log_device_placement", c.log_device_placement, "Print where every node runs");
  add_program_flags(app, flags.program);
  app.add_option("--strategy", flags.strategy, "allreduce | central")->capture_default_str();
  app.add_option("--bucket_mb", c.bucket_mb, "All-reduce bucket size in MB")
      ->capture_default_str()
      ->check(positive);
  app.add_option("--batch_size", c.batch_size, "Examples per tower per step (recipe)")
      ->check(positive);
  app.add_option("--global_batch_size", c.global_batch_size,
                 "Examples per step, all towers and ranks together (with "
                 "--micro_batch_size, instead of --batch_size)")
      ->check(positive);
  app.add_option("--micro_batch_size", c.micro_batch_size,
                 "Cut each step into micro-batches of this size, summed by one fixed tree: "
                 "the same weights on any number of towers and ranks")
      ->check(positive);
}

// The steps, the optimizer and the schedule.
void add_recipe_flags(CLI::App& app, Flags& flags) {
  TrainConfig& c = flags.config;
  app.add_option("--max_steps", c.max_steps, "Stop after this many steps (overrides --epochs)")
      ->check(non_negative);
  app.add_option("--epochs", c.epochs, "Stop after this many epochs (recipe)")->check(non_negative);
  app.add_flag("--allow_schedule_change", c.allow_schedule_change,
               "Resume although --max_steps, --epochs, --lr or --lr_schedule change the "
               "learning rate of the steps still to train");
  app.add_option("--train_dir", c.train_dir, "Checkpoints, metrics.jsonl and TensorBoard logs")
      ->capture_default_str();
  app.add_option("--optimizer", c.optimizer.name, "sgd | momentum | adam | adamw (recipe)");
  app.add_option("--momentum", c.optimizer.momentum, "Momentum coefficient (recipe)");
  app.add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum");
  app.add_option("--weight_decay", c.optimizer.weight_decay,
                 "Decoupled weight decay (adamw; recipe)");
  app.add_option("--beta1", c.optimizer.beta1, "Adam beta1")->capture_default_str();
  app.add_option("--beta2", c.optimizer.beta2, "Adam beta2")->capture_default_str();
  app.add_option("--epsilon", c.optimizer.epsilon, "Adam epsilon")->capture_default_str();
  app.add_option("--lr", c.lr, "Initial learning rate (recipe)");
  app.add_option("--lr_schedule", c.lr_schedule,
                 "constant | exponential:decay_epochs=350,rate=0.1,staircase=1 | "
                 "piecewise:boundaries=1000;2000,values=0.1;0.01;0.001 | cosine:warmup_steps=500 "
                 "| plateau:patience=3,factor=0.1 (with --eval_every; recipe)");
  app.add_option("--augmentation", c.augmentation,
                 "none | cifar10 (the classic distortions, for 24x24 crops of 32x32 images) | "
                 "pad-crop-flip | random-resized-crop (ImageNet's: crops of 7/8 of the images' "
                 "size, a folder's decoded at 8/7 of the model's) (recipe)");
  app.add_option("--clip_norm", c.clip_norm, "Clip gradients to this global norm (0: off)");
  app.add_option("--ema_decay", c.ema_decay, "Moving average of the weights (0: off; recipe)");
  app.add_option("--label_smoothing", c.label_smoothing,
                 "Train towards (1 - E) one_hot + E / K instead of the one-hot label");
  app.add_option("--class_weights", c.class_weights,
                 "balanced (N / (K n_c)) | a JSON file {\"class\": weight}: weigh each "
                 "example's loss by its class");
  app.add_option("--bn_momentum", c.bn_momentum,
                 "Decay of every batch norm's moving averages (PyTorch's momentum 0.1 is 0.9 "
                 "here; default: the model's own)");
  app.add_option("--precise_bn", c.precise_bn,
                 "auto | on | off: evaluate and checkpoint with batch-norm statistics recomputed "
                 "over training batches (auto: when the run is too short for the moving "
                 "averages to settle)")
      ->capture_default_str();
  app.add_option("--seed", c.seed, "Random seed (init, shuffling, augmentation)")
      ->capture_default_str();
}

// Input workers, logs, checkpoints, evaluation and tracing.
void add_run_flags(CLI::App& app, Flags& flags) {
  TrainConfig& c = flags.config;
  app.add_option("--num_preprocess_threads", c.num_preprocess_threads, "Input pipeline workers")
      ->capture_default_str()
      ->check(non_negative);
  app.add_option("--log_every", c.log_every, "Log a line every N steps")->capture_default_str();
  app.add_option("--save_every_steps", c.save_every_steps, "Checkpoint every N steps (0: off)");
  app.add_option("--save_every_secs", c.save_every_secs, "Checkpoint every N seconds (0: off)")
      ->capture_default_str();
  app.add_option("--keep_checkpoints", c.keep_checkpoints, "Keep the last K checkpoints")
      ->capture_default_str()
      ->check(positive);
  app.add_option("--eval_every", c.eval_every,
                 "Evaluate on the test set every N steps (0: at the end)");
  app.add_flag("--keep_best", c.keep_best,
               "Keep the checkpoint of the best evaluation (--eval_every) besides the last "
               "--keep_checkpoints");
  app.add_option("--early_stopping", c.early_stopping,
                 "Stop after N evaluations (--eval_every) in a row without a better precision")
      ->check(non_negative);
  app.add_option("--resume_from", c.resume_from, "Resume from this checkpoint prefix");
  app.add_option("--trace", c.trace_file,
                 "Write a Chrome/Perfetto trace (JSON) of the first --trace_steps steps: a "
                 "lane per thread (the towers' kernels, reduction, communication, input "
                 "workers, main)");
  app.add_option("--trace_steps", c.trace_steps, "Steps in the --trace")
      ->capture_default_str()
      ->check(positive);
  app.add_option("--comm_timeout", c.comm_timeout,
                 "Seconds a rank waits for the other ranks (mpirun) before the job stops")
      ->capture_default_str()
      ->check(positive);
}

void add_fine_tune_flags(CLI::App& app, Flags& flags) {
  TrainConfig& c = flags.config;
  app.add_option("--init_from", c.init_from,
                 "Start a new run from these weights: a tower checkpoint (prefix or train dir) "
                 "of any data or classes, or a safetensors file in tower's or torchvision's/"
                 "timm's names; a classifier of another class count starts anew");
  app.add_flag("--init_partial", c.init_partial,
               "With --init_from: variables the file lacks or shapes otherwise start as "
               "initialized (listed) instead of stopping the run");
  app.add_option("--freeze", c.freeze,
                 "Train none of these variable scopes (comma-separated, e.g. conv1,layer1), or "
                 "'backbone': all but the classifier. Frozen batch norms keep their statistics");
  app.add_option("--unfreeze_after_epochs", c.unfreeze_after_epochs,
                 "With --freeze: train every layer after this many epochs, at the learning rate "
                 "times --unfreeze_lr_factor (0: stay frozen)");
  app.add_option("--dropout", c.dropout,
                 "Every dropout layer's rate instead of the model's (timm's drop_rate; -1: the "
                 "model's)")
      ->capture_default_str();
  app.add_option("--unfreeze_lr_factor", c.unfreeze_lr_factor,
                 "The learning rate's factor once the frozen layers thaw")
      ->capture_default_str();
}

CommandRegistrar registrar{
    {"train", "Train a model on every device (resumes from --train_dir)", [](CLI::App& app) {
       static Flags flags;
       flags.app = &app;
       app.footer(recipes_help());
       add_model_flags(app, flags);
       add_placement_flags(app, flags);
       add_recipe_flags(app, flags);
       add_run_flags(app, flags);
       add_fine_tune_flags(app, flags);
       app.callback([] { run_train(flags); });
     }}};

struct LrFindFlags {
  Flags run;
  LrFindConfig find;
};

void run_lr_find(LrFindFlags& flags) {
  flags.find.train = resolve(flags.run);
  const LrFindResult r = lr_find(flags.find);
  fmt::print(
      "{} steps: the smoothed loss fell fastest at lr {:.3g} and was lowest ({:.4f}) at lr "
      "{:.3g}\nsuggested --lr {:.3g}{}\n",
      r.lrs.size(), r.suggested_lr(), r.losses[r.lowest], r.lrs[r.lowest], r.suggested_lr(),
      flags.find.plot.empty() ? "" : fmt::format(" (plot: {})", flags.find.plot));
}

CommandRegistrar lr_find_registrar{
    {"lr-find", "Learning-rate range test: the loss against an exponentially growing lr",
     [](CLI::App& app) {
       static LrFindFlags flags;
       flags.run.app = &app;
       add_model_flags(app, flags.run);
       add_placement_flags(app, flags.run);
       add_recipe_flags(app, flags.run);
       app.add_option("--start_lr", flags.find.start_lr, "First learning rate")
           ->capture_default_str();
       app.add_option("--end_lr", flags.find.end_lr, "Last learning rate")->capture_default_str();
       app.add_option("--steps", flags.find.steps, "Steps (one batch each)")->capture_default_str();
       flags.find.plot = "lr_find.png";
       app.add_option("--plot", flags.find.plot, "Write the curve to this PNG")
           ->capture_default_str();
       app.callback([] { run_lr_find(flags); });
     }}};

}  // namespace
}  // namespace tower::cli
