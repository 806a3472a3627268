// A trained model opened for inference (eval, export, predict): its checkpoint, the model it is,
// the images it was trained on and how eval preprocesses them, and the weights to use.
#pragma once

#include <string>
#include <vector>

#include "tower/data/transforms.h"
#include "tower/train/training_state.h"

namespace tower {

// The checkpoint prefix `name` (--checkpoint) names: itself when its files exist, else looked up
// in `train_dir` ("model.ckpt-100", or only the step, "100"); a trailing ".safetensors" or ".json"
// is dropped. Empty: the latest in `train_dir` (an error when there is none).
std::string resolve_checkpoint(const std::string& train_dir, const std::string& name);

// Loads the checkpoint; for the latest of a dir, an error also names the next usable one.
TrainingCheckpoint load_checkpoint_for_inference(const std::string& train_dir,
                                                 const std::string& name);

// The tensor to use for a variable: its moving average when `ema` and the checkpoint has one,
// else the raw one; an error naming the variable and the model when there is neither.
const Tensor& checkpoint_weight(const TrainingCheckpoint& checkpoint, const std::string& variable,
                                bool ema);

// Eval's preprocessing of images of `image` (C, H, W) for a run's checkpoint: the evaluation
// transform of the augmentation it trained with (its recipe's, for older checkpoints).
TransformSpec eval_transform(const TrainingState& state, const ModelDef& model, const Shape& image);

// The cores inference runs on: `num_threads`, or 0 for this process's share of the machine.
int inference_threads(int num_threads);

struct InferenceModel {
  TrainingCheckpoint checkpoint;
  const ModelDef* model = nullptr;
  Shape image_shape;        // (C, H, W): the data images the run trained on, before preprocessing
  Shape input_shape;        // (C, H, W): what the model takes (after preprocessing)
  TransformSpec transform;  // eval's preprocessing of one image
  std::vector<std::string> classes;
  bool ema = false;  // the moving-average weights are used

  const Tensor& weight(const std::string& variable) const {
    return checkpoint_weight(checkpoint, variable, ema);
  }
};

// Checkpoints of older versions that do not record the image shape or the class names have them
// read from the data set they were trained on.
InferenceModel open_inference_model(const std::string& train_dir, const std::string& checkpoint,
                                    bool use_ema);

}  // namespace tower
