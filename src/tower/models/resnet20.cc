// ResNet-20 for CIFAR (He et al. 2016, section 4.2): conv 3x3x16, three stages of three basic
// blocks (16, 32, 64 channels; stride 2 at the start of stages 2 and 3), global average pooling,
// linear. Batch norm after every convolution; projection shortcuts (1x1 conv + BN) where the shape
// changes. Weight decay 1e-4 on the convolution and linear weights.
#include "tower/models/model.h"

namespace tower {
namespace {

constexpr float kWeightDecay = 1e-4f;

ModelOutputs resnet20(const Scope& s, Value images, int num_classes, Mode mode) {
  std::vector<Value> updates;
  Value x = nn::conv_bn(
      s, "conv0", images, mode, updates,
      {.filters = 16, .activation = nn::Activation::relu, .weight_decay = kWeightDecay});
  const int64_t widths[] = {16, 32, 64};
  for (int stage = 0; stage < 3; ++stage)
    for (int i = 0; i < 3; ++i)
      x = nn::residual_block(s, fmt::format("stage{}/block{}", stage + 1, i + 1), x, mode, updates,
                             {.filters = widths[stage],
                              .stride = stage > 0 && i == 0 ? 2 : 1,
                              .weight_decay = kWeightDecay});
  Value logits = nn::dense(s, "logits", nn::global_avg_pool(s, x),
                           {.units = num_classes, .weight_decay = kWeightDecay});
  return {logits, updates};
}

ModelRegistrar registrar{
    {"resnet20", "ResNet-20 for CIFAR (batch norm, projection shortcuts)", Shape{3, 32, 32},
     resnet20,
     // The paper's: lr / 10 at 32k and 48k of 64k steps of batch 128.
     Recipe{.optimizer = "momentum",
            .momentum = 0.9f,
            .lr = 0.1f,
            .lr_schedule = "piecewise:boundary_epochs=82;123,values=0.1;0.01;0.001",
            .batch_size = 128,
            .epochs = 164,
            .augmentation = "pad-crop-flip",
            .data = "cifar10"}}};

}  // namespace
}  // namespace tower
