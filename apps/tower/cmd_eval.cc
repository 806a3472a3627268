// `tower eval`: evaluates checkpoints of a train dir, once or each new one as it appears. Results
// go beside the checkpoint (<its dir>/eval, or --eval_dir): TensorBoard events and metrics.jsonl,
// under a tag that names what was evaluated (eval/precision_at_1 for the moving-average weights on
// the training data's test split; eval_raw/... for --no_ema; eval_<data>/... for another --data).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "command.h"
#include "tower/data/file_io.h"
#include "tower/data/npy.h"
#include "tower/io/checkpoint.h"
#include "tower/io/event_writer.h"
#include "tower/io/metrics_log.h"
#include "tower/train/eval.h"

namespace tower::cli {
namespace {

struct Flags {
  EvalConfig config;
  std::string eval_dir, save_logits;
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
  if (r.precision_at_5 >= 0)
    events.add_scalar(r.key + "/precision_at_5", static_cast<float>(r.precision_at_5), r.step);
  // The confusion matrix as an image: row t (true class), column p (predicted), each row scaled to
  // its largest count, every cell a square of pixels.
  const int64_t k = static_cast<int64_t>(r.class_names.size());
  if (k > 0 && r.confusion.size() == static_cast<size_t>(k * k)) {
    const int64_t cell = std::max<int64_t>(1, 256 / k), side = k * cell;
    std::vector<uint8_t> pixels(static_cast<size_t>(side * side));
    for (int64_t t = 0; t < k; ++t) {
      const int64_t top =
          *std::max_element(r.confusion.begin() + t * k, r.confusion.begin() + (t + 1) * k);
      for (int64_t y = t * cell; y < (t + 1) * cell; ++y)
        for (int64_t x = 0; x < side; ++x)
          pixels[static_cast<size_t>(y * side + x)] = static_cast<uint8_t>(
              top > 0 ? 255 * r.confusion[static_cast<size_t>(t * k + x / cell)] / top : 0);
    }
    events.add_image(r.key + "/confusion_matrix", pixels.data(), static_cast<int>(side),
                     static_cast<int>(side), 1, r.step);
  }
  nlohmann::json line = {{"step", r.step},
                         {"checkpoint", r.checkpoint},
                         {r.key + "_precision_at_1", r.precision_at_1}};
  if (r.precision_at_5 >= 0) line[r.key + "_precision_at_5"] = r.precision_at_5;
  line[r.key + "_classes"] = r.class_names;
  line[r.key + "_confusion"] = r.confusion;
  MetricsLog(dir + "/metrics.jsonl").append(line);
}

// Per class: precision (of the examples predicted as the class, the share that are) and recall
// (of the class's examples, the share predicted as it); then the matrix itself for up to 20
// classes.
void print_classes(const EvalResult& r) {
  const int64_t k = static_cast<int64_t>(r.class_names.size());
  if (k == 0 || r.confusion.size() != static_cast<size_t>(k * k)) return;
  size_t width = 5;
  for (const std::string& name : r.class_names) width = std::max(width, name.size());
  fmt::print("  {:<{}}  precision  recall  examples\n", "class", width);
  for (int64_t c = 0; c < k; ++c) {
    int64_t predicted = 0, actual = 0;
    for (int64_t o = 0; o < k; ++o) {
      predicted += r.confusion[static_cast<size_t>(o * k + c)];
      actual += r.confusion[static_cast<size_t>(c * k + o)];
    }
    const int64_t hit = r.confusion[static_cast<size_t>(c * k + c)];
    fmt::print("  {:<{}}  {:>9.4f}  {:>6.4f}  {:>8}\n", r.class_names[static_cast<size_t>(c)],
               width,
               predicted > 0 ? static_cast<double>(hit) / static_cast<double>(predicted) : 0.0,
               actual > 0 ? static_cast<double>(hit) / static_cast<double>(actual) : 0.0, actual);
  }
  if (k > 20) return;
  fmt::print("  confusion matrix (rows: true class, columns: predicted, in class order):\n");
  for (int64_t t = 0; t < k; ++t) {
    fmt::print("  {:<{}}", r.class_names[static_cast<size_t>(t)], width);
    for (int64_t p = 0; p < k; ++p)
      fmt::print(" {:>5}", r.confusion[static_cast<size_t>(t * k + p)]);
    fmt::print("\n");
  }
}

void run_eval(Flags& flags) {
  EvalConfig config = flags.config;
  config.use_ema = !flags.no_ema;
  config.precision = parse_precision(flags.precision);
  // A named checkpoint is evaluated once; a train dir is watched unless --run_once.
  const bool once = flags.run_once || !config.checkpoint.empty();
  int64_t last_step = -1;
  bool waiting = false;
  for (;;) {
    if (!config.checkpoint.empty() || checkpoint_latest(config.train_dir)) {
      EvalResult r = evaluate_checkpoint(config);
      if (r.step != last_step) {
        last_step = r.step;
        fmt::print("step {}: precision @ 1 = {:.4f}{} ({} examples)\n", r.step, r.precision_at_1,
                   r.precision_at_5 >= 0 ? fmt::format(", @ 5 = {:.4f}", r.precision_at_5) : "",
                   r.examples);
        print_classes(r);
        if (!flags.save_logits.empty()) {
          const std::vector<int64_t> shape{r.examples, static_cast<int64_t>(r.class_names.size())};
          write_file(flags.save_logits, npy_bytes(r.logits, shape));
        }
        std::fflush(stdout);
        record(r, flags.eval_dir);
      }
    } else if (once) {
      fail("no checkpoint in '{}' (--train_dir)", config.train_dir);
    }
    if (once) return;
    if (!waiting) {  // an eval that stays looks hung unless it says so
      fmt::print("waiting for new checkpoints in {} (Ctrl-C to stop; --run_once evaluates once)\n",
                 config.train_dir);
      std::fflush(stdout);
      waiting = true;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.interval));
  }
}

CommandRegistrar registrar{
    {"eval", "Evaluate checkpoints on the test set", [](CLI::App& app) {
       static Flags flags;
       add_checkpoint_flags(app, flags.config.train_dir, flags.config.checkpoint);
       app.add_option("--model", flags.config.model,
                      "Evaluate the --checkpoint tensors file alone as this model (a file "
                      "written by another tool: no state file needed)");
       app.add_option("--model_file", flags.config.model_file, "The same for a model file's model");
       app.add_option("--data", flags.config.data,
                      "Data set (default: the one the model was trained on)");
       app.add_option(
           "--eval_dir", flags.eval_dir,
           "Where to write events and metrics.jsonl (default: eval/ beside the checkpoint)");
       app.add_option("--save_logits", flags.save_logits,
                      "Write the test split's logits, in its order, to this .npy file");
       app.add_option("--precision", flags.precision, "fp32 | bf16 (as tower train)")
           ->capture_default_str();
       app.add_flag("--no_ema", flags.no_ema,
                    "Use the raw weights instead of their moving average");
       app.add_flag("--run_once", flags.run_once, "Evaluate once and exit");
       app.add_flag("--skip_bad_images", flags.config.skip_bad_images,
                    "An image folder's corrupt images are skipped with a warning, as in training");
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
