// `tower export`: a trained model as an ONNX file with its preprocessing inside (docs/export.md).
#include <fmt/format.h>

#include "command.h"
#include "tower/train/export.h"

namespace tower::cli {
namespace {

struct Flags {
  ExportConfig config;
  std::string format = "onnx", input_type = "uint8";
  bool no_ema = false, no_fold = false;
};

void run_export(const Flags& flags) {
  if (flags.format != "onnx") fail("--format '{}': expected onnx", flags.format);
  ExportConfig config = flags.config;
  config.use_ema = !flags.no_ema;
  config.fold_batch_norm = !flags.no_fold;
  if (flags.input_type == "uint8")
    config.input_type = OnnxType::u8;
  else if (flags.input_type == "float32")
    config.input_type = OnnxType::f32;
  else
    fail("--input_type '{}': expected uint8 or float32", flags.input_type);
  const ExportResult r = export_onnx(config);
  fmt::print(
      "exported {} (step {}, {}) to {}: ONNX opset {}, {} nodes{}; input 'images' {} (N, {}, {}, "
      "{}) NHWC, outputs 'logits' and 'probabilities'\n",
      r.model, r.step, r.checkpoint, config.out, OnnxModel::kOpset, r.nodes,
      r.folded_batch_norms > 0
          ? fmt::format(", {} batch norms folded into convolutions", r.folded_batch_norms)
          : "",
      flags.input_type, r.input_dims[1], r.input_dims[2], r.input_dims[3]);
}

CommandRegistrar registrar{
    {"export", "Export a trained model (ONNX, preprocessing included)", [](CLI::App& app) {
       static Flags flags;
       add_checkpoint_flags(app, flags.config.train_dir, flags.config.checkpoint);
       app.add_option("--out", flags.config.out, "The file to write")->capture_default_str();
       app.add_option("--format", flags.format, "onnx")->capture_default_str();
       app.add_option("--input_type", flags.input_type,
                      "uint8 | float32 (pixels in [0, 255] either way)")
           ->capture_default_str();
       app.add_flag("--no_ema", flags.no_ema,
                    "Export the raw weights instead of their moving average");
       app.add_flag("--no_fold", flags.no_fold,
                    "Keep batch norms as BatchNormalization nodes (not folded into convolutions)");
       app.callback([] { run_export(flags); });
     }}};

}  // namespace
}  // namespace tower::cli
