#pragma once

#include <memory>
#include <string>

#include "tower/data/dataset.h"
#include "tower/data/transforms.h"
#include "tower/models/model.h"
#include "tower/runtime/program.h"

namespace tower {

// Precision @ 1 of a model on a whole data split: the eval graph (Mode::eval) is compiled once;
// evaluate() copies the given weights in and runs every batch (the last one padded, counting
// only its real rows).
class Evaluator {
 public:
  Evaluator(const std::string& model, std::shared_ptr<const Dataset> dataset,
            TransformSpec transform, int64_t batch_size, int num_threads,
            Precision precision = Precision::fp32);
  ~Evaluator();
  // `weights(name)` returns the tensor to use for each variable of the model.
  double evaluate(const std::function<const Tensor&(const std::string&)>& weights);
  // Evaluates `dataset` from now on, with the program already compiled: its images must have the
  // first one's shape and classes, and it may hold any number of them.
  void set_dataset(std::shared_ptr<const Dataset> dataset);
  int64_t examples() const;
  // Of the last evaluate(): the share of examples whose label is among the 5 largest logits (ties
  // counted in, as InTopK); -1 for 5 classes or fewer, where it would be 1.
  double precision_at_5() const;
  // Of the last evaluate(): [true class * classes + predicted class] -> examples.
  const std::vector<int64_t>& confusion() const;
  // Of the last evaluate(): the logits, (examples, classes) row-major, in the data set's order.
  const std::vector<float>& logits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The input transforms of a recipe's augmentation (Recipe::augmentation, --augmentation):
//   cifar10        the classic distortions (random 24x24 crop, flip, brightness, contrast,
//                  per-image standardization; eval: central crop, standardization) when the model
//                  takes 24x24 crops of 32x32 images; otherwise none
//   pad-crop-flip  4 pixels of zero padding, a random crop back to the image size, flip, scaled
//                  to [0, 1]; eval: scaled
//   random-resized-crop  the ImageNet recipe's: a random resized crop to 7/8 of the images' size
//                  (224 of 256), flip, scaled to [0, 1]; eval: the central crop of that size,
//                  scaled (image folders are decoded at 8/7 of the model's size for it)
//   none           scaled to [0, 1]
// then, in both, the model's normalization (ModelDef::normalization) where it has one.
// Throws naming --augmentation for any other name.
struct InputTransforms {
  TransformSpec train, eval;
  std::string note;  // why an augmentation asked for does not run (else empty)
};
InputTransforms input_transforms(const std::string& augmentation, const Shape& model_input,
                                 const Shape& data_image, const Normalization& normalization = {});
// "pad 4, random crop 32x32, flip, pixels x 0.00392157, then (x - mean) / stddev ...": every step
// of a transform, in the order they run.
std::string describe_input(const TransformSpec& spec);

// The data set a run trains on: `data` (--data), or without it the data set of the model's recipe
// (Fashion-MNIST, which Debian installs; for any other an error that says what to pass and how
// `tower make-dataset` makes a small one). A folder's images are brought to the model's channels
// and to `image_size` (H, W) or else the size of the data the recipe is for (CIFAR: 32x32).
struct DataOptions {
  std::string data;
  std::vector<int64_t> image_size;  // --image_size: empty, {S} or {H, W}
  double test_fraction = 0.1;
  bool skip_bad_images = false;
  // With "random-resized-crop", a folder's images are decoded at 8/7 of the model's size without
  // --image_size (256 for 224), so that the crops have more of each photo than they keep.
  std::string augmentation;
};
// The crop size of the random-resized-crop augmentation: 7/8 of the images' side (224 of 256).
int64_t crop_side(int64_t image_side);
DatasetSpec run_data_spec(const DataOptions& options, const ModelDef& model);
// The images of the data set the model's recipe is for, (C, H, W); its input without one.
Shape recipe_data_shape(const ModelDef& model);

// Refuses data whose channels the model cannot take, naming both shapes and the flags; for another
// height and width, returns a warning line (models adapt to the size they are built for).
std::string check_model_fits_data(const ModelDef& model, const Shape& model_input,
                                  const Dataset& data);

}  // namespace tower
