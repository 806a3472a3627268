// `tower predict IMAGE...`: the top classes of a trained model for JPEG/PNG files or folders.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "command.h"
#include "tower/train/predict.h"

namespace tower::cli {
namespace {

struct Flags {
  PredictConfig config;
  std::vector<std::string> images;
  int top_k = 3;
  bool json = false, no_ema = false;
};

void run_predict(Flags& flags) {
  PredictConfig config = flags.config;
  config.use_ema = !flags.no_ema;
  const std::vector<std::string> files = image_paths(flags.images);
  if (files.empty()) fail("no JPEG or PNG images in {}", fmt::join(flags.images, ", "));
  Predictor predictor(config);
  const std::vector<std::string>& names = predictor.model().classes;
  const size_t k = std::min<size_t>(static_cast<size_t>(flags.top_k), names.size());
  int failed = 0;
  for (const Prediction& p : predictor.predict(files)) {
    if (!p.error.empty()) {
      std::fflush(stdout);  // in the order of the files
      fmt::print(stderr, "error: {}\n", p.error);
      ++failed;
      continue;
    }
    std::vector<size_t> order(p.probabilities.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return p.logits[a] > p.logits[b]; });
    order.resize(k);
    if (flags.json) {
      nlohmann::json top = nlohmann::json::array();
      for (size_t c : order)
        top.push_back({{"class", names[c]}, {"index", c}, {"probability", p.probabilities[c]}});
      fmt::print("{}\n",
                 nlohmann::json{{"file", p.file}, {"top", top}, {"logits", p.logits}}.dump());
    } else {
      std::vector<std::string> parts;
      for (size_t c : order)
        parts.push_back(fmt::format("{} {:.4f}", names[c], p.probabilities[c]));
      fmt::print("{}: {}\n", p.file, fmt::join(parts, ", "));
    }
  }
  std::fflush(stdout);
  if (failed > 0) fail("{} of {} images could not be read (named above)", failed, files.size());
}

CommandRegistrar registrar{
    {"predict", "Classify image files with a trained model", [](CLI::App& app) {
       static Flags flags;
       app.add_option("images", flags.images, "JPEG or PNG files, or folders of them")->required();
       add_checkpoint_flags(app, flags.config.train_dir, flags.config.checkpoint);
       app.add_option("--top_k", flags.top_k, "Classes printed per image")
           ->capture_default_str()
           ->check(CLI::Range(1, 1000000));
       app.add_flag("--json", flags.json, "One JSON line per image: file, top classes, logits");
       app.add_flag("--no_ema", flags.no_ema,
                    "Use the raw weights instead of their moving average");
       app.add_option("--batch_size", flags.config.batch_size, "Images per batch")
           ->capture_default_str()
           ->check(positive);
       app.add_option("--num_threads", flags.config.num_threads, "Threads (default: all cores)")
           ->check(non_negative);
       app.callback([] { run_predict(flags); });
     }}};

}  // namespace
}  // namespace tower::cli
