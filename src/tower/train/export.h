// `tower export`: a trained model as an ONNX file (opset 17) that needs no tower code to run. The
// preprocessing eval applies is inside the graph: the input "images" is uint8 (or float32 in
// [0, 255]) NHWC with a dynamic batch; the outputs are "logits" and "probabilities"; the class
// names are in the metadata (docs/export.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tower/core/tensor.h"
#include "tower/data/transforms.h"
#include "tower/graph/graph.h"
#include "tower/io/onnx_model.h"

namespace tower {

struct ExportConfig {
  std::string train_dir = "train";
  std::string checkpoint;  // empty: the latest in train_dir
  std::string out = "model.onnx";
  bool use_ema = true;
  OnnxType input_type = OnnxType::u8;  // u8 or f32
  bool fold_batch_norm = true;
};

struct ExportResult {
  std::string checkpoint, model;
  int64_t step = 0;
  std::vector<int64_t> input_dims;  // N (-1), H, W, C
  int64_t nodes = 0;
  int folded_batch_norms = 0;
};

// Writes config.out atomically; a tower::Error names the checkpoint, the op and node without an
// ONNX form, or the path that cannot be written, and leaves nothing behind.
ExportResult export_onnx(const ExportConfig& config);

// The lower level, for any inference graph: adds to `onnx` the nodes computing `logits` (batch
// first) from `input` (a placeholder whose first axis is the batch), the variables as
// initializers read through `weights`. `input_name` is the ONNX value that feeds `input`. Returns
// the number of batch norms folded into convolutions.
struct OnnxGraph {
  Value input, logits;
  std::function<const Tensor&(const std::string&)> weights;
  bool fold_batch_norm = true;
};
int add_inference_graph(const OnnxGraph& graph, const std::string& input_name, OnnxModel& onnx);

// Adds the nodes that apply eval's preprocessing `spec` to NHWC `input` ((N, H, W, C) of
// `type`), producing the NCHW float value returned.
std::string add_preprocessing(const TransformSpec& spec, const Shape& image, OnnxType type,
                              const std::string& input, OnnxModel& onnx);

}  // namespace tower
