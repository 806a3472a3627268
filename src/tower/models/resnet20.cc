// ResNet-20 for CIFAR (He et al. 2016, section 4.2): conv 3x3x16, three stages of three basic
// blocks (16, 32, 64 channels; stride 2 at the start of stages 2 and 3), global average pooling,
// linear. Batch norm after every convolution; projection shortcuts (1x1 conv + BN) where the shape
// changes. Weight decay 1e-4 on the convolution and linear weights.
#include "tower/models/model.h"
#include "tower/ops/activation.h"
#include "tower/ops/batch_norm.h"
#include "tower/ops/conv.h"
#include "tower/ops/math.h"

namespace tower {
namespace {

constexpr float kWeightDecay = 1e-4f;

struct Builder {
  Mode mode;
  std::vector<Value> updates;

  Value conv_bn(const Scope& scope, Value x, int64_t out, int64_t kernel, int64_t stride) {
    Value w = variable_with_weight_decay(scope, "weights", Shape{out, x.shape()[1], kernel, kernel},
                                         Initializer::he_normal(), kWeightDecay);
    Value y = ops::conv2d(scope, x, w, {{stride, stride}, ops::Padding::same});
    Value gamma = scope.get_variable("gamma", Shape{out}, Initializer::ones());
    Value beta = scope.get_variable("beta", Shape{out}, Initializer::zeros());
    Value mean = scope.get_variable("moving_mean", Shape{out}, Initializer::zeros(), Trainable::no);
    Value var =
        scope.get_variable("moving_variance", Shape{out}, Initializer::ones(), Trainable::no);
    ops::BatchNormAttrs attrs;
    attrs.mode = mode == Mode::train ? ops::BatchNormMode::training : ops::BatchNormMode::inference;
    ops::BatchNormResult bn = ops::batch_norm(scope, y, gamma, beta, mean, var, attrs);
    updates.insert(updates.end(), bn.updates.begin(), bn.updates.end());
    return bn.y;
  }

  Value block(const Scope& scope, Value x, int64_t out, int64_t stride) {
    Value h = ops::relu(scope, conv_bn(scope.variable_scope("conv1"), x, out, 3, stride));
    h = conv_bn(scope.variable_scope("conv2"), h, out, 3, 1);
    Value shortcut = x;
    if (stride != 1 || x.shape()[1] != out)
      shortcut = conv_bn(scope.variable_scope("shortcut"), x, out, 1, stride);
    return ops::relu(scope, ops::add(scope, h, shortcut));
  }
};

ModelOutputs resnet20(const Scope& scope, Value images, int num_classes, Mode mode) {
  Builder b{mode, {}};
  Value x = ops::relu(scope, b.conv_bn(scope.variable_scope("conv0"), images, 16, 3, 1));
  const int64_t widths[] = {16, 32, 64};
  for (int stage = 0; stage < 3; ++stage)
    for (int i = 0; i < 3; ++i)
      x = b.block(scope.variable_scope(fmt::format("stage{}/block{}", stage + 1, i + 1)), x,
                  widths[stage], stage > 0 && i == 0 ? 2 : 1);
  Value pooled = ops::reduce_mean(scope, x, {2, 3});
  Value logits = dense(scope.variable_scope("logits"), pooled, num_classes,
                       Initializer::glorot_uniform(), 0.0f, kWeightDecay, Activation::none);
  return {logits, b.updates};
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
            .augmentation = "pad-crop-flip"}}};

}  // namespace
}  // namespace tower
