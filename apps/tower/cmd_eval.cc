// `tower eval`: evaluates checkpoints of a train dir, once or each new one as it appears. Results
// go beside the checkpoint (<its dir>/eval, or --eval_dir): TensorBoard events and metrics.jsonl,
// under a tag that names what was evaluated (eval/precision_at_1 for the moving-average weights on
// the training data's test split; eval_raw/... for --no_ema; eval_<data>/... for another --data).
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "command.h"
#include "tower/io/checkpoint.h"
#include "tower/io/event_writer.h"
#include "tower/io/metrics_log.h"
#include "tower/train/eval.h"

namespace tower::cli {
namespace {

struct Flags {
  EvalConfig config;
  std::string eval_dir;
  bool no_ema = false, run_once = false;
  std::string precision = "fp32";
  double interval = 60;
};

void record(const EvalResult& r, const std::string& eval_dir) {
  const std::string dir =
      !eval_dir.empty() ? eval_dir
                        : (std::filesystem::path(r.checkpoint).parent_path() / "eval").string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create the eval dir '{}' (--eval_dir): {}", dir, ec.message());
  EventWriter events(dir);
  events.add_scalar(r.key + "/precision_at_1", static_cast<float>(r.precision_at_1), r.step);
  MetricsLog(dir + "/metrics.jsonl")
      .append({{"step", r.step},
               {"checkpoint", r.checkpoint},
               {r.key + "_precision_at_1", r.precision_at_1}});
}

void run_eval(Flags& flags) {
  EvalConfig config = flags.config;
  config.use_ema = !flags.no_ema;
  config.precision = parse_precision(flags.precision);
  // A named checkpoint is evaluated once; a train dir is watched unless --run_once.
  const bool once = flags.run_once || !config.checkpoint.empty();
  int64_t last_step = -1;
  for (;;) {
    if (!config.checkpoint.empty() || checkpoint_latest(config.train_dir)) {
      EvalResult r = evaluate_checkpoint(config);
      if (r.step != last_step) {
        last_step = r.step;
        fmt::print("step {}: precision @ 1 = {:.4f} ({} examples)\n", r.step, r.precision_at_1,
                   r.examples);
        std::fflush(stdout);
        record(r, flags.eval_dir);
      }
    } else if (once) {
      fail("no checkpoint in '{}' (--train_dir)", config.train_dir);
    }
    if (once) return;
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.interval));
  }
}

CommandRegistrar registrar{
    {"eval", "Evaluate checkpoints on the test set", [](CLI::App& app) {
       static Flags flags;
       app.add_option("--train_dir", flags.config.train_dir, "Where the checkpoints are")
           ->capture_default_str();
       app.add_option("--checkpoint", flags.config.checkpoint,
                      "A checkpoint prefix (default: the latest)");
       app.add_option("--data", flags.config.data,
                      "Data set (default: the one the model was trained on)");
       app.add_option(
           "--eval_dir", flags.eval_dir,
           "Where to write events and metrics.jsonl (default: eval/ beside the checkpoint)");
       app.add_option("--precision", flags.precision, "fp32 | bf16 (as tower train)")
           ->capture_default_str();
       app.add_flag("--no_ema", flags.no_ema,
                    "Use the raw weights instead of their moving average");
       app.add_flag("--run_once", flags.run_once, "Evaluate once and exit");
       app.add_option("--eval_interval_secs", flags.interval,
                      "Seconds between looks for a new checkpoint")
           ->capture_default_str()
           ->check(positive);
       app.add_option("--batch_size", flags.config.batch_size, "Examples per batch")
           ->capture_default_str()
           ->check(positive);
       app.add_option("--num_threads", flags.config.num_threads, "Threads (default: all cores)")
           ->check(non_negative);
       app.callback([] { run_eval(flags); });
     }}};

}  // namespace
}  // namespace tower::cli
