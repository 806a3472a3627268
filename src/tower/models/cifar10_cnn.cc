// The CIFAR-10 tutorial CNN of TensorFlow's classic multi-GPU example, layer for layer:
// conv 5x5x64 -> max-pool 3x3/2 -> LRN -> conv 5x5x64 -> LRN -> max-pool -> fc 384 -> fc 192 ->
// linear 10, with the tutorial's initial stddevs and biases and weight decay 0.004 on the two
// hidden fully connected layers. 1,068,298 parameters for 24x24x3 input.
#include "tower/models/model.h"

namespace tower {
namespace {

ModelOutputs cifar10(const Scope& s, Value images, int num_classes, Mode) {
  using nn::Activation;
  const ops::LRNAttrs lrn{4, 1.0f, 0.001f / 9.0f, 0.75f};
  const nn::Pool pool{.size = 3, .stride = 2, .padding = ops::Padding::same};
  const nn::Conv2D conv{.filters = 64,
                        .kernel = 5,
                        .activation = Activation::relu,
                        .init = Initializer::truncated_normal(5e-2f)};
  Value x = nn::conv2d(s, "conv1", images, conv);
  x = nn::lrn(s, "norm1", nn::max_pool(s, "pool1", x, pool), lrn);
  nn::Conv2D conv2 = conv;
  conv2.bias_init = 0.1f;
  x = nn::conv2d(s, "conv2", x, conv2);
  x = nn::max_pool(s, "pool2", nn::lrn(s, "norm2", x, lrn), pool);
  const nn::Dense local{.activation = Activation::relu,
                        .init = Initializer::truncated_normal(0.04f),
                        .bias_init = 0.1f,
                        .weight_decay = 0.004f};
  nn::Dense local3 = local, local4 = local;
  local3.units = 384;
  local4.units = 192;
  x = nn::dense(s, "local3", x, local3);
  x = nn::dense(s, "local4", x, local4);
  return {nn::dense(s, "softmax_linear", x,
                    {.units = num_classes, .init = Initializer::truncated_normal(1.0f / 192.0f)}),
          {}};
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
                                 .augmentation = "cifar10",
                                 .data = "cifar10"}}};

}  // namespace
}  // namespace tower
