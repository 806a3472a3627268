// A multi-layer perceptron: flatten -> fc 256 -> fc 128 -> linear.
#include "tower/models/model.h"

namespace tower {
namespace {

ModelOutputs mlp(const Scope& scope, Value images, int num_classes, Mode) {
  Value h1 = dense(scope.variable_scope("fc1"), images, 256, Initializer::he_normal(), 0.0f, 0.0f,
                   Activation::relu);
  Value h2 = dense(scope.variable_scope("fc2"), h1, 128, Initializer::he_normal(), 0.0f, 0.0f,
                   Activation::relu);
  return {dense(scope.variable_scope("logits"), h2, num_classes, Initializer::glorot_uniform(),
                0.0f, 0.0f, Activation::none),
          {}};
}

ModelRegistrar registrar{
    {"mlp", "multi-layer perceptron (fc 256-128)", Shape{1, 28, 28}, mlp, fashion_mnist_recipe()}};

}  // namespace
}  // namespace tower
