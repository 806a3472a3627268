// Models: a model is a plain function that adds its layers (nn/layers.h) under a Scope and
// returns the logits; each registers itself by name (one static ModelRegistrar per model), the
// built-in ones (src/tower/models/) exactly as a user's own.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tower/graph/graph.h"
#include "tower/nn/layers.h"
#include "tower/ops/nn_loss.h"

namespace tower {

using nn::Mode;

struct ModelOutputs {
  Value logits;                // (N, num_classes)
  std::vector<Value> updates;  // moving-average updates (batch norm), run in training
};

// images: (N, C, H, W) f32. Weight-decay terms are added to the graph's "losses" collection
// under the scope's name prefix, like the classic program.
using ModelFn =
    std::function<ModelOutputs(const Scope& scope, Value images, int num_classes, Mode mode)>;

// How a model is meant to be trained: what `tower train --model M` uses for every field that no
// flag overrides. The L2 weight decay of the classic models is part of the model (the "losses"
// collection); `weight_decay` here is the optimizer's decoupled decay (adamw).
struct Recipe {
  std::string optimizer = "adam";  // sgd | momentum | adam | adamw
  float momentum = 0.9f;           // momentum
  float lr = 0.003f;
  std::string lr_schedule = "constant";  // see train/lr_schedule.h
  int64_t batch_size = 64;               // per tower
  double epochs = 1;
  float ema_decay = 0;                // moving average of the weights; 0: none
  float weight_decay = 0;             // adamw
  std::string augmentation = "none";  // none | cifar10 | pad-crop-flip (data/transforms.h)
  // The data set the recipe is for ("fashion-mnist", "cifar10"; empty: none in particular):
  // what `tower train` trains on without --data, and the size folder images are brought to.
  std::string data;
};
// The recipe of the Fashion-MNIST models (lenet, mlp): Adam at 3e-3, 50 warm-up steps then cosine
// decay, batch 64 per tower, 2.5 epochs, EMA 0.9999.
Recipe fashion_mnist_recipe();
// One line: "adam lr 0.003, cosine:warmup_steps=50, batch 64 per tower, 2.5 epochs, ...".
std::string to_string(const Recipe& recipe);

// Where a variable's values lie in a weights file another tool wrote: the key (torchvision's
// "layer1.0.bn1.running_mean" for "layer1/0/conv1/moving_mean") and whether that tool stores the
// tensor transposed (a linear layer's weight is (out, in) in PyTorch, (in, out) here).
struct ForeignName {
  std::string key;
  bool transposed = false;
};
// A model's names in other tools' files, tried in turn (torchvision's, then timm's); nothing
// for a variable no such file holds.
using ForeignNames = std::function<std::vector<ForeignName>(const std::string& variable)>;

// The per-channel normalization a model's weights expect of images scaled to [0, 1]:
// (x - mean[c]) / stddev[c] (ImageNet's for torchvision's models); empty: none. It travels with
// the weights: every transform of the run, the checkpoint's state and the exported ONNX graph.
struct Normalization {
  std::vector<float> mean, stddev;
  bool empty() const { return mean.empty(); }
};
// ImageNet's mean and standard deviation (RGB), as torchvision's and timm's models were trained.
Normalization imagenet_normalization();

struct ModelDef {
  std::string name;
  std::string description;
  Shape default_input;  // (C, H, W) the model is meant for
  ModelFn build;
  Recipe recipe;
  std::string source;  // a model file's text (model_file.h); empty for a model written in C++
  ForeignNames foreign_names;  // empty: only files in tower's names
  Normalization normalization;
};

const ModelDef& get_model(const std::string& name);  // throws listing the known models
std::vector<std::string> model_names();
struct ModelRegistrar {
  explicit ModelRegistrar(ModelDef def);
};
// Registers a model at run time (a model file's); a name already taken by a model of another
// source is an error.
void register_model(ModelDef def);

// Number of trainable parameters of a model built for `input` (C, H, W).
int64_t count_parameters(const ModelDef& model, const Shape& input, int num_classes);

// The classic tower loss: mean sparse softmax cross-entropy added to the "losses" collection,
// returned with the sum of every loss of that collection under the scope's name prefix.
struct LossOutputs {
  Value total_loss;     // cross-entropy + weight decay
  Value cross_entropy;  // mean over the batch
};
// `target`: label smoothing and class weights of the cross-entropy (none by default).
LossOutputs classification_loss(const Scope& scope, Value logits, Value labels,
                                const ops::SoftmaxCrossEntropyAttrs& target = {});

}  // namespace tower
