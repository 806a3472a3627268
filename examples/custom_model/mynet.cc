// Your own model with the whole `tower` command line (train, eval, bench, inspect, models...):
//   mynet train --model mynet --data idx:DIR --num_devices 2       (docs/custom_model.md)
#include <tower/tower.h>

using namespace tower;
constexpr auto relu = nn::Activation::relu;

ModelOutputs mynet(const Scope& s, Value images, int num_classes, Mode mode) {
  Value x = nn::conv2d(s, "conv1", images, {.filters = 16, .kernel = 3, .activation = relu});
  x = nn::max_pool(s, "pool1", x);
  x = nn::conv2d(s, "conv2", x, {.filters = 32, .kernel = 3, .activation = relu});
  x = nn::max_pool(s, "pool2", x);
  x = nn::dense(s, "fc1", x, {.units = 128, .activation = relu});
  x = nn::dropout(s, x, 0.25f, mode);
  return {nn::dense(s, "logits", x, {.units = num_classes}), {}};
}

ModelRegistrar registrar{{"mynet", "2 conv + 2 dense, for 28x28 grey images", Shape{1, 28, 28},
                          mynet, fashion_mnist_recipe()}};

int main(int argc, char** argv) { return cli_main(argc, argv); }
