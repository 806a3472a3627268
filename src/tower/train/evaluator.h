#pragma once

#include <memory>
#include <string>

#include "tower/data/dataset.h"
#include "tower/data/transforms.h"
#include "tower/runtime/program.h"

namespace tower {

// Precision @ 1 of a model on a whole data split: the eval graph (Mode::eval) is compiled once;
// evaluate() copies the given weights in and runs every batch (the last one padded, counting
// only its real rows).
class Evaluator {
 public:
  Evaluator(const std::string& model, std::shared_ptr<const Dataset> dataset,
            TransformSpec transform, int64_t batch_size, int num_threads);
  ~Evaluator();
  // `weights(name)` returns the tensor to use for each variable of the model.
  double evaluate(const std::function<const Tensor&(const std::string&)>& weights);
  int64_t examples() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The transforms tower uses for a model and data set: the classic CIFAR-10 distortions when the
// model wants 24x24 crops of 32x32 images, otherwise scaling to [0, 1].
TransformSpec train_transform_for(const Shape& model_input, const Shape& data_image);
TransformSpec eval_transform_for(const Shape& model_input, const Shape& data_image);

}  // namespace tower
