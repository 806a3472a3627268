// `tower eval`: evaluates checkpoints of a train dir, once or each new one as it appears.
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "command.h"
#include "tower/io/checkpoint.h"
#include "tower/io/event_writer.h"
#include "tower/io/metrics_log.h"
#include "tower/train/trainer.h"

namespace tower::cli {
namespace {

struct Flags {
  EvalConfig config;
  bool no_ema = false, run_once = false;
  double interval = 60;
};

void run_eval(Flags& flags) {
  EvalConfig config = flags.config;
  config.use_ema = !flags.no_ema;
  int64_t last_step = -1;
  for (;;) {
    auto latest = config.checkpoint.empty() ? checkpoint_latest(config.train_dir)
                                            : std::optional<std::string>(config.checkpoint);
    if (latest && (flags.run_once || config.checkpoint.empty())) {
      EvalConfig one = config;
      one.checkpoint = *latest;
      EvalResult r = evaluate_checkpoint(one);
      if (r.step != last_step) {
        last_step = r.step;
        fmt::print("step {}: precision @ 1 = {:.4f} ({} examples)\n", r.step, r.precision_at_1, r.examples);
        std::fflush(stdout);
        EventWriter events(config.train_dir + "/eval");
        events.add_scalar("precision_at_1", static_cast<float>(r.precision_at_1), r.step);
        MetricsLog(config.train_dir + "/metrics.jsonl")
            .append({{"step", r.step}, {"eval_precision_at_1", r.precision_at_1}});
      }
    } else if (flags.run_once) {
      fail("no checkpoint in '{}'", config.train_dir);
    }
    if (flags.run_once) return;
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.interval));
  }
}

CommandRegistrar registrar{{"eval", "Evaluate checkpoints on the test set", [](CLI::App& app) {
  static Flags flags;
  app.add_option("--train_dir", flags.config.train_dir, "Where the checkpoints are")->capture_default_str();
  app.add_option("--checkpoint", flags.config.checkpoint, "A checkpoint prefix (default: the latest)");
  app.add_option("--data", flags.config.data, "Data set (default: the one the model was trained on)");
  app.add_flag("--no_ema", flags.no_ema, "Use the raw weights instead of their moving average");
  app.add_flag("--run_once", flags.run_once, "Evaluate once and exit");
  app.add_option("--eval_interval_secs", flags.interval, "Seconds between looks for a new checkpoint")
      ->capture_default_str();
  app.add_option("--batch_size", flags.config.batch_size, "Examples per batch")->capture_default_str();
  app.callback([] { run_eval(flags); });
}}};

}  // namespace
}  // namespace tower::cli
