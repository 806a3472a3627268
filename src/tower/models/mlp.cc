// A multi-layer perceptron: flatten -> fc 256 -> fc 128 -> linear.
#include "tower/models/model.h"

namespace tower {
namespace {

ModelOutputs mlp(const Scope& s, Value images, int num_classes, Mode) {
  const auto relu = nn::Activation::relu;
  const Initializer he = Initializer::he_normal();
  Value x = nn::dense(s, "fc1", images, {.units = 256, .activation = relu, .init = he});
  x = nn::dense(s, "fc2", x, {.units = 128, .activation = relu, .init = he});
  return {nn::dense(s, "logits", x, {.units = num_classes}), {}};
}

ModelRegistrar registrar{
    {"mlp", "multi-layer perceptron (fc 256-128)", Shape{1, 28, 28}, mlp, fashion_mnist_recipe()}};

}  // namespace
}  // namespace tower
