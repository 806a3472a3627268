// `tower predict`: a trained model's classes for image files, decoded and preprocessed exactly as
// training and eval see their images (brought to the training size as an image folder's images
// are, then eval's transform).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tower/train/inference.h"

namespace tower {

struct PredictConfig {
  std::string train_dir = "train";
  std::string checkpoint;  // empty: the latest
  bool use_ema = true;
  int64_t batch_size = 64;
  int num_threads = 0;  // 0: all cores
};

struct Prediction {
  std::string file;
  std::vector<float> logits, probabilities;  // one per class
  std::string error;  // the file could not be read or decoded; nothing else is set
};

// JPEG and PNG files: each path as given, a folder's images (recursively, sorted) in its place.
std::vector<std::string> image_paths(const std::vector<std::string>& paths);

class Predictor {
 public:
  explicit Predictor(const PredictConfig& config);
  ~Predictor();
  const InferenceModel& model() const;
  // One Prediction per file, in order; an unreadable or corrupt image gets its error and the
  // others are still predicted.
  std::vector<Prediction> predict(const std::vector<std::string>& files);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tower
