// `tower eval`: precision @ 1 of a checkpoint on a test split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tower/core/dtype.h"

namespace tower {

struct EvalConfig {
  std::string train_dir = "train";
  std::string checkpoint;  // prefix; empty: the latest in train_dir
  std::string data;        // empty: the data set recorded in the checkpoint
  // Either: evaluate the tensors file `checkpoint` alone (written by any tool, e.g.
  // safetensors.numpy.save_file, with tower's variable names) as this model, on `data` or the
  // model's recipe data; any state file beside it is not read.
  std::string model, model_file;
  bool use_ema = true;
  int64_t batch_size = 500;
  int num_threads = 0;  // 0: all cores
  Precision precision = Precision::fp32;
  bool skip_bad_images = false;  // an image folder's corrupt images: skipped with a warning
};

struct EvalResult {
  int64_t step = 0;
  double precision_at_1 = 0;
  double precision_at_5 = -1;  // -1: 5 classes or fewer
  int64_t examples = 0;
  std::string checkpoint;  // the prefix evaluated
  // What was evaluated, for TensorBoard tags and metrics keys: "eval" for the moving-average
  // weights on the training data's test split, "eval_raw" for the raw weights, with
  // "_<data set>" appended for another --data.
  std::string key;
  std::vector<std::string> class_names;
  // confusion[t * classes + p]: the examples of class t predicted as p (the first largest logit).
  std::vector<int64_t> confusion;
  std::vector<float> logits;  // (examples, classes) row-major, in the test split's order
};

// Throws tower::Error naming the checkpoint, the flag or the variable when the checkpoint cannot
// be evaluated on the data (and, for the latest of a dir, the next usable checkpoint).
EvalResult evaluate_checkpoint(const EvalConfig& config);

}  // namespace tower
