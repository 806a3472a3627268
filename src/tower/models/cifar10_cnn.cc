// The CIFAR-10 tutorial CNN of TensorFlow's classic multi-GPU example, layer for layer:
// conv 5x5x64 -> max-pool 3x3/2 -> LRN -> conv 5x5x64 -> LRN -> max-pool -> fc 384 -> fc 192 ->
// linear 10, with the tutorial's initial stddevs and biases and weight decay 0.004 on the two
// hidden fully connected layers. 1,068,298 parameters for 24x24x3 input.
#include "tower/models/model.h"
#include "tower/ops/activation.h"
#include "tower/ops/bias.h"
#include "tower/ops/conv.h"
#include "tower/ops/lrn.h"
#include "tower/ops/pool.h"

namespace tower {
namespace {

Value conv_relu(const Scope& scope, Value x, int64_t out, float bias_init) {
  Value w = variable_with_weight_decay(scope, "weights", Shape{out, x.shape()[1], 5, 5},
                                       Initializer::truncated_normal(5e-2f), 0.0f);
  Value b = scope.get_variable("biases", Shape{out}, Initializer::constant(bias_init));
  Value y = ops::bias_add(scope, ops::conv2d(scope, x, w, {{1, 1}, ops::Padding::same}), b);
  return ops::relu(scope, y);
}

ModelOutputs cifar10(const Scope& scope, Value images, int num_classes, Mode) {
  const ops::LRNAttrs lrn{4, 1.0f, 0.001f / 9.0f, 0.75f};
  const ops::PoolAttrs pool{{3, 3}, {2, 2}, ops::Padding::same};
  Value conv1 = conv_relu(scope.variable_scope("conv1"), images, 64, 0.0f);
  Value pool1 = ops::max_pool(scope.name_scope("pool1"), conv1, pool);
  Value norm1 = ops::lrn(scope.name_scope("norm1"), pool1, lrn);
  Value conv2 = conv_relu(scope.variable_scope("conv2"), norm1, 64, 0.1f);
  Value norm2 = ops::lrn(scope.name_scope("norm2"), conv2, lrn);
  Value pool2 = ops::max_pool(scope.name_scope("pool2"), norm2, pool);
  Value local3 = dense(scope.variable_scope("local3"), pool2, 384,
                       Initializer::truncated_normal(0.04f), 0.1f, 0.004f, Activation::relu);
  Value local4 = dense(scope.variable_scope("local4"), local3, 192,
                       Initializer::truncated_normal(0.04f), 0.1f, 0.004f, Activation::relu);
  Value logits = dense(scope.variable_scope("softmax_linear"), local4, num_classes,
                       Initializer::truncated_normal(1.0f / 192.0f), 0.0f, 0.0f, Activation::none);
  return {logits, {}};
}

ModelRegistrar registrar{{"cifar10",
                          "the classic CIFAR-10 tutorial CNN (conv-pool-LRN x2, fc 384-192)",
                          Shape{3, 24, 24}, cifar10,
                          // The tutorial's: 256 epochs are its 100k steps of batch 128 (~86%).
                          Recipe{.optimizer = "sgd",
                                 .lr = 0.1f,
                                 .lr_schedule = "exponential:decay_epochs=350,rate=0.1,staircase=1",
                                 .batch_size = 128,
                                 .epochs = 256,
                                 .ema_decay = 0.9999f,
                                 .augmentation = "cifar10"}}};

}  // namespace
}  // namespace tower
