// The ImageNet models users hold weights for, as torchvision builds them, layer for layer and
// shape for shape (padding included: torchvision pads 1 pixel on each side of a stride-2 3x3,
// where SAME pads 0 before), so that torchvision's weights fit them one to one:
// - resnet18, resnet34 (basic blocks) and resnet50 (bottleneck blocks, v1.5: the stride on the
//   3x3): conv 7x7/2 (pad 3) - BN - ReLU - max pool 3x3/2 (pad 1) - four stages - global average
//   pooling - linear.
// - mobilenet_v2 (width 1.0): conv 3x3/2 - BN - ReLU6 - 17 inverted residuals - conv 1x1 (1280) -
//   BN - ReLU6 - global average pooling - dropout 0.2 - linear.
// Batch norm as PyTorch's: epsilon 1e-5, momentum 0.1 (moving-average decay 0.9).
//
// Variable names and torchvision's state-dict names (see nn/layers.h for the blocks' scopes):
//   conv1/weights, conv1/{gamma,beta,moving_mean,moving_variance}: conv1.weight,
//     bn1.{weight,bias,running_mean,running_var}
//   layer{s}/{b}/conv{i}/weights and .../conv{i}/gamma...: layer{s}.{b}.conv{i}.weight and
//     layer{s}.{b}.bn{i}.weight...; layer{s}/{b}/shortcut/...: layer{s}.{b}.downsample.0.weight
//     and downsample.1.weight...
//   fc/weights (in, out), fc/biases: fc.weight (out, in: transposed), fc.bias
//   mobilenet_v2: features/0/... and features/18/...: features.0.0.weight, features.0.1.weight...;
//     features/{i}/expand, /depthwise, /project: features.{i}.conv.{0.0, 0.1 | 1.0, 1.1 | 2, 3}
//     (in block 1, without the expansion: depthwise 0.0, 0.1, project 1, 2); classifier/...:
//     classifier.1.weight (transposed), classifier.1.bias
// torchvision's num_batches_tracked has no counterpart.
#include "tower/models/model.h"

namespace tower {
namespace {

// PyTorch's batch norm: momentum 0.1 is a decay of 0.9.
const nn::BatchNorm kBatchNorm{.momentum = 0.9f, .epsilon = 1e-5f};
constexpr float kResnetWeightDecay = 1e-4f;
constexpr float kMobileNetWeightDecay = 4e-5f;

// The stem of the ResNets: conv 7x7/2, BN, ReLU, max pool 3x3/2 with torchvision's padding.
Value resnet_stem(const Scope& s, Value images, Mode mode, std::vector<Value>& updates) {
  Value x = nn::conv_bn(s, "conv1", images, mode, updates,
                        {.filters = 64,
                         .kernel = 7,
                         .stride = 2,
                         .padding = ops::Padding::given,
                         .pads = 3,
                         .activation = nn::Activation::relu,
                         .weight_decay = kResnetWeightDecay},
                        kBatchNorm);
  return nn::max_pool(s, "maxpool", x,
                      {.size = 3, .stride = 2, .padding = ops::Padding::given, .pads = 1});
}

Value resnet_head(const Scope& s, Value x, int num_classes) {
  return nn::dense(s, "fc", nn::global_avg_pool(s, x),
                   {.units = num_classes, .weight_decay = kResnetWeightDecay});
}

// Blocks per stage (64, 128, 256, 512 filters; stride 2 at the start of stages 2 to 4).
ModelFn resnet(std::array<int, 4> blocks, bool bottleneck) {
  return [blocks, bottleneck](const Scope& s, Value images, int num_classes, Mode mode) {
    std::vector<Value> updates;
    Value x = resnet_stem(s, images, mode, updates);
    for (int stage = 0; stage < 4; ++stage)
      for (int b = 0; b < blocks[static_cast<size_t>(stage)]; ++b) {
        const std::string name = fmt::format("layer{}/{}", stage + 1, b);
        const int64_t filters = int64_t{64} << stage, stride = stage > 0 && b == 0 ? 2 : 1;
        x = bottleneck ? nn::bottleneck_block(s, name, x, mode, updates,
                                              {.filters = filters,
                                               .stride = stride,
                                               .weight_decay = kResnetWeightDecay,
                                               .batch_norm = kBatchNorm})
                       : nn::residual_block(s, name, x, mode, updates,
                                            {.filters = filters,
                                             .stride = stride,
                                             .weight_decay = kResnetWeightDecay,
                                             .batch_norm = kBatchNorm,
                                             .padding = ops::Padding::given});
      }
    return ModelOutputs{resnet_head(s, x, num_classes), updates};
  };
}

ModelOutputs mobilenet_v2(const Scope& s, Value images, int num_classes, Mode mode) {
  std::vector<Value> updates;
  Value x = nn::conv_bn(s, "features/0", images, mode, updates,
                        {.filters = 32,
                         .kernel = 3,
                         .stride = 2,
                         .padding = ops::Padding::given,
                         .pads = 1,
                         .activation = nn::Activation::relu6,
                         .weight_decay = kMobileNetWeightDecay},
                        kBatchNorm);
  // (expansion, channels, blocks, first stride): the paper's table 2
  const int64_t settings[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                  {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int index = 1;
  for (const auto& [t, c, n, stride] : settings)
    for (int64_t i = 0; i < n; ++i)
      x = nn::inverted_residual_block(s, fmt::format("features/{}", index++), x, mode, updates,
                                      {.filters = c,
                                       .stride = i == 0 ? stride : 1,
                                       .expansion = t,
                                       .weight_decay = kMobileNetWeightDecay,
                                       .batch_norm = kBatchNorm});
  x = nn::conv_bn(s, fmt::format("features/{}", index), x, mode, updates,
                  {.filters = 1280,
                   .kernel = 1,
                   .activation = nn::Activation::relu6,
                   .weight_decay = kMobileNetWeightDecay},
                  kBatchNorm);
  x = nn::dropout(s, nn::global_avg_pool(s, x), 0.2f, mode);
  Value logits =
      nn::dense(s, "classifier", x, {.units = num_classes, .weight_decay = kMobileNetWeightDecay});
  return {logits, updates};
}

// The ImageNet recipe of torchvision's references, per tower of 32 images: SGD with momentum
// 0.9, lr 0.1 (ResNets) or 0.045 (MobileNetV2) per 256 images, cosine decay after 5 warm-up
// epochs (the weight decay is the models': 1e-4, 4e-5). Its random-resized crops are not here
// yet: images are brought to the model's size.
Recipe imagenet_recipe(double epochs, float lr_per_256) {
  return Recipe{.optimizer = "momentum",
                .momentum = 0.9f,
                .lr = lr_per_256 * 32 / 256,
                .lr_schedule = "cosine:warmup_epochs=5",
                .batch_size = 32,
                .epochs = epochs,
                .augmentation = "none"};
}

const Shape kImageNetInput{3, 224, 224};

ModelRegistrar resnet18_registrar{{"resnet18", "ResNet-18 (torchvision's)", kImageNetInput,
                                   resnet({2, 2, 2, 2}, false), imagenet_recipe(90, 0.1f)}};
ModelRegistrar resnet34_registrar{{"resnet34", "ResNet-34 (torchvision's)", kImageNetInput,
                                   resnet({3, 4, 6, 3}, false), imagenet_recipe(90, 0.1f)}};
ModelRegistrar resnet50_registrar{{"resnet50", "ResNet-50 v1.5 (torchvision's)", kImageNetInput,
                                   resnet({3, 4, 6, 3}, true), imagenet_recipe(90, 0.1f)}};
ModelRegistrar mobilenet_v2_registrar{{"mobilenet_v2", "MobileNetV2 (torchvision's)",
                                       kImageNetInput, mobilenet_v2, imagenet_recipe(300, 0.045f)}};

}  // namespace
}  // namespace tower
