// Layers over the ops, the way a model function is written: each takes the scope, a name (its
// variable scope, so its variables are "<name>/weights", "<name>/biases", "<name>/gamma", ...),
// the input and options with the usual defaults, and returns its output. A model in this style:
//
//   Value x = nn::conv2d(s, "conv1", images, {.filters = 32, .kernel = 5, .activation = relu});
//   x = nn::max_pool(s, "pool1", x);
//   x = nn::dense(s, "fc1", x, {.units = 256, .activation = relu});
//   return {nn::dense(s, "logits", x, {.units = num_classes}), {}};
//
// Weight decay (`weight_decay` > 0) adds wd * l2_loss(weights) to the graph's "losses" collection,
// which classification_loss() adds to the loss (the classic program's L2 terms).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tower/graph/graph.h"
#include "tower/ops/conv.h"
#include "tower/ops/lrn.h"

namespace tower::nn {

// Training (batch statistics, dropout on, moving averages updated) or evaluation.
enum class Mode : uint8_t { train, eval };

enum class Activation : uint8_t { none, relu, relu6, elu, sigmoid, tanh };
Value activation(const Scope& scope, Value x, Activation a);
// "none", "relu", "relu6", "elu", "sigmoid", "tanh"; nullopt for anything else.
std::optional<Activation> parse_activation(const std::string& name);

// A variable with an L2 weight-decay term wd * l2_loss(var) in "losses" when wd > 0.
Value variable_with_weight_decay(const Scope& scope, const std::string& name, Shape shape,
                                 Initializer init, float wd);

// 2-D convolution of NCHW images by `filters` square kernels (OIHW weights), then the bias and
// the activation. The kernel size must be odd for SAME padding to centre it (TensorFlow rules).
// With `groups`, the channels in and out are cut into that many groups, each output group seeing
// its input group alone (weights (filters, C / groups, k, k)); `dilation` spaces the taps.
struct Conv2D {
  int64_t filters = 0;
  int64_t kernel = 3;
  int64_t stride = 1;
  int64_t groups = 1;
  int64_t dilation = 1;
  ops::Padding padding = ops::Padding::same;
  int64_t pads = 0;  // each side's, with Padding::given (PyTorch's padding)
  Activation activation = Activation::none;
  bool bias = true;
  Initializer init = Initializer::he_normal();
  float bias_init = 0.0f;
  float weight_decay = 0.0f;
};
Value conv2d(const Scope& scope, const std::string& name, Value x, const Conv2D& options);
// A depthwise convolution: each input channel by `multiplier` filters of its own (Conv2D with
// groups = the channels and filters = channels x multiplier; `filters` and `groups` are set).
Value depthwise_conv2d(const Scope& scope, const std::string& name, Value x, Conv2D options,
                       int64_t multiplier = 1);

// Fully connected: x (N, in), or (N, ...) flattened, times weights (in, units), plus the bias.
struct Dense {
  int64_t units = 0;
  Activation activation = Activation::none;
  bool bias = true;
  Initializer init = Initializer::glorot_uniform();
  float bias_init = 0.0f;
  float weight_decay = 0.0f;
};
Value dense(const Scope& scope, const std::string& name, Value x, const Dense& options);

// Batch normalization per channel (axis 1) with a learned scale (gamma) and shift (beta), and
// moving averages of the mean and variance (not trainable) for evaluation. In training the
// moving-average updates are appended to `updates`, which the model returns (ModelOutputs).
struct BatchNorm {
  float momentum = 0.99f;  // decay of the moving averages
  float epsilon = 1e-3f;
};
Value batch_norm(const Scope& scope, const std::string& name, Value x, Mode mode,
                 std::vector<Value>& updates, const BatchNorm& options = {});

// Max or average pooling over H and W with a square window; `stride` 0 means the window's size.
struct Pool {
  int64_t size = 2;
  int64_t stride = 0;
  ops::Padding padding = ops::Padding::valid;
  int64_t pads = 0;  // each side's, with Padding::given
};
Value max_pool(const Scope& scope, const std::string& name, Value x, const Pool& options = {});
Value avg_pool(const Scope& scope, const std::string& name, Value x, const Pool& options = {});
// The mean over H and W: (N, C, H, W) -> (N, C).
Value global_avg_pool(const Scope& scope, Value x);
// (N, ...) -> (N, rest).
Value flatten(const Scope& scope, Value x);
// Inverted dropout of a fraction `rate` of the elements in training; the identity in evaluation.
Value dropout(const Scope& scope, Value x, float rate, Mode mode);
// Local response normalization across channels (TensorFlow's attributes).
Value lrn(const Scope& scope, const std::string& name, Value x, const ops::LRNAttrs& options);

// The ResNet basic block (v1): conv 3x3 (stride) - batch norm - ReLU - conv 3x3 - batch norm, plus
// the input (through a 1x1 convolution with batch norm, "<name>/shortcut", when the stride or the
// channels change), then ReLU. Its convolutions are "<name>/conv1" and "<name>/conv2", without
// biases, each with its batch norm's variables in the same scope. `padding` given: the 3x3
// convolutions pad 1 pixel on each side, as torchvision's (SAME pads 0 before a stride of 2).
struct Residual {
  int64_t filters = 0;
  int64_t stride = 1;
  float weight_decay = 0.0f;
  BatchNorm batch_norm;
  ops::Padding padding = ops::Padding::same;
};
Value residual_block(const Scope& scope, const std::string& name, Value x, Mode mode,
                     std::vector<Value>& updates, const Residual& options);

// ResNet's bottleneck block, v1.5 (torchvision's: the stride on the 3x3): conv 1x1 (filters) - BN
// - ReLU - conv 3x3 (stride, 1 pixel of padding) - BN - ReLU - conv 1x1 (expansion x filters) -
// BN, plus the input (through "<name>/shortcut", a 1x1 convolution with the stride and BN, where
// the stride or the channels change), then ReLU. Convolutions "<name>/conv1" to "<name>/conv3".
struct Bottleneck {
  int64_t filters = 0;
  int64_t stride = 1;
  int64_t expansion = 4;
  float weight_decay = 0.0f;
  BatchNorm batch_norm;
};
Value bottleneck_block(const Scope& scope, const std::string& name, Value x, Mode mode,
                       std::vector<Value>& updates, const Bottleneck& options);

// MobileNetV2's inverted residual: conv 1x1 to expansion x the input's channels - BN - ReLU6
// ("<name>/expand", none when the expansion is 1), depthwise 3x3 (stride, 1 pixel of padding) -
// BN - ReLU6 ("<name>/depthwise"), conv 1x1 to `filters` - BN, linear ("<name>/project"); plus
// the input where the stride is 1 and the channels stay.
struct InvertedResidual {
  int64_t filters = 0;
  int64_t stride = 1;
  int64_t expansion = 6;
  float weight_decay = 0.0f;
  BatchNorm batch_norm;
};
Value inverted_residual_block(const Scope& scope, const std::string& name, Value x, Mode mode,
                              std::vector<Value>& updates, const InvertedResidual& options);
// A convolution (no bias) followed by batch norm, both in the variable scope `name`: ResNet's
// unit. `options.activation` applies after the batch norm.
Value conv_bn(const Scope& scope, const std::string& name, Value x, Mode mode,
              std::vector<Value>& updates, Conv2D options, const BatchNorm& bn = {});

}  // namespace tower::nn
