#include "tower/nn/layers.h"

#include "tower/ops/activation.h"
#include "tower/ops/batch_norm.h"
#include "tower/ops/bias.h"
#include "tower/ops/dropout.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"
#include "tower/ops/pool.h"

namespace tower::nn {

Value activation(const Scope& scope, Value x, Activation a) {
  switch (a) {
    case Activation::none:
      return x;
    case Activation::relu:
      return ops::relu(scope, x);
    case Activation::relu6:
      return ops::relu6(scope, x);
    case Activation::elu:
      return ops::elu(scope, x);
    case Activation::sigmoid:
      return ops::sigmoid(scope, x);
    case Activation::tanh:
      return ops::tanh(scope, x);
  }
  return x;
}

std::optional<Activation> parse_activation(const std::string& name) {
  if (name == "none") return Activation::none;
  if (name == "relu") return Activation::relu;
  if (name == "relu6") return Activation::relu6;
  if (name == "elu") return Activation::elu;
  if (name == "sigmoid") return Activation::sigmoid;
  if (name == "tanh") return Activation::tanh;
  return std::nullopt;
}

Value variable_with_weight_decay(const Scope& scope, const std::string& name, Shape shape,
                                 Initializer init, float wd) {
  Value var = scope.get_variable(name, std::move(shape), init);
  if (wd > 0.0f && !scope.frozen(name))  // a frozen weight's decay is a constant of the loss
    scope.graph().add_to_collection("losses", ops::scale(scope, ops::l2_loss(scope, var), wd));
  return var;
}

Value conv2d(const Scope& scope, const std::string& name, Value x, const Conv2D& o) {
  const Scope s = scope.variable_scope(name);
  if (x.shape().rank() != 4)
    fail("layer '{}': conv2d takes NCHW images, got a value of shape {}", name,
         x.shape().to_string());
  if (o.filters <= 0 || o.kernel <= 0 || o.stride <= 0 || o.groups <= 0 || o.dilation <= 0)
    fail(
        "layer '{}': filters, kernel, stride, groups and dilation must be > 0, got {}, {}, {}, {} "
        "and {}",
        name, o.filters, o.kernel, o.stride, o.groups, o.dilation);
  const int64_t channels = x.shape()[1];
  if (channels % o.groups != 0 || o.filters % o.groups != 0)
    fail("layer '{}': {} groups must divide the {} input channels and the {} filters", name,
         o.groups, channels, o.filters);
  Value w = variable_with_weight_decay(s, "weights",
                                       Shape{o.filters, channels / o.groups, o.kernel, o.kernel},
                                       o.init, o.weight_decay);
  ops::Conv2DAttrs attrs{{o.stride, o.stride}, o.padding, {o.pads, o.pads}};
  attrs.groups = o.groups;
  attrs.dilations = {o.dilation, o.dilation};
  Value y = ops::conv2d(s, x, w, attrs);
  if (o.bias)
    y = ops::bias_add(
        s, y, s.get_variable("biases", Shape{o.filters}, Initializer::constant(o.bias_init)));
  return activation(s, y, o.activation);
}

Value depthwise_conv2d(const Scope& scope, const std::string& name, Value x, Conv2D o,
                       int64_t multiplier) {
  if (x.shape().rank() != 4)
    fail("layer '{}': depthwise_conv2d takes NCHW images, got a value of shape {}", name,
         x.shape().to_string());
  if (multiplier <= 0) fail("layer '{}': multiplier must be > 0, got {}", name, multiplier);
  o.groups = x.shape()[1];
  o.filters = x.shape()[1] * multiplier;
  return conv2d(scope, name, x, o);
}

Value dense(const Scope& scope, const std::string& name, Value x, const Dense& o) {
  const Scope s = scope.variable_scope(name);
  if (o.units <= 0) fail("layer '{}': units must be > 0, got {}", name, o.units);
  if (x.shape().rank() != 2) x = ops::flatten(s, x);
  Value w = variable_with_weight_decay(s, "weights", Shape{x.shape()[1], o.units}, o.init,
                                       o.weight_decay);
  Value y = ops::matmul(s, x, w);
  if (o.bias)
    y = ops::bias_add(s, y,
                      s.get_variable("biases", Shape{o.units}, Initializer::constant(o.bias_init)));
  return activation(s, y, o.activation);
}

Value batch_norm(const Scope& scope, const std::string& name, Value x, Mode mode,
                 std::vector<Value>& updates, const BatchNorm& o) {
  const Scope s = scope.variable_scope(name);
  const int64_t c = x.shape().rank() >= 2 ? x.shape()[1] : 0;
  Value gamma = s.get_variable("gamma", Shape{c}, Initializer::ones());
  Value beta = s.get_variable("beta", Shape{c}, Initializer::zeros());
  Value mean = s.get_variable("moving_mean", Shape{c}, Initializer::zeros(), Trainable::no);
  Value var = s.get_variable("moving_variance", Shape{c}, Initializer::ones(), Trainable::no);
  ops::BatchNormAttrs attrs;
  attrs.epsilon = o.epsilon;
  attrs.momentum = o.momentum;
  // A frozen batch norm normalizes with its moving averages and leaves them as they are (Keras).
  const bool train = mode == Mode::train && !s.frozen("gamma");
  attrs.mode = train ? ops::BatchNormMode::training : ops::BatchNormMode::inference;
  ops::BatchNormResult bn = ops::batch_norm(s, x, gamma, beta, mean, var, attrs);
  updates.insert(updates.end(), bn.updates.begin(), bn.updates.end());
  return bn.y;
}

namespace {
ops::PoolAttrs pool_attrs(const Pool& o) {
  const int64_t stride = o.stride > 0 ? o.stride : o.size;
  return {{o.size, o.size}, {stride, stride}, o.padding, {o.pads, o.pads}};
}
}  // namespace

Value max_pool(const Scope& scope, const std::string& name, Value x, const Pool& o) {
  return ops::max_pool(scope.name_scope(name), x, pool_attrs(o));
}
Value avg_pool(const Scope& scope, const std::string& name, Value x, const Pool& o) {
  return ops::avg_pool(scope.name_scope(name), x, pool_attrs(o));
}
Value global_avg_pool(const Scope& scope, Value x) { return ops::reduce_mean(scope, x, {2, 3}); }
Value flatten(const Scope& scope, Value x) { return ops::flatten(scope, x); }

Value dropout(const Scope& scope, Value x, float rate, Mode mode) {
  if (scope.dropout() >= 0) rate = scope.dropout();  // the run's --dropout
  if (!(rate >= 0.0f && rate < 1.0f)) fail("dropout rate must be in [0, 1), got {}", rate);
  if (mode == Mode::eval || rate == 0.0f) return x;
  return ops::dropout(scope, x, 1.0f - rate);
}

Value lrn(const Scope& scope, const std::string& name, Value x, const ops::LRNAttrs& o) {
  return ops::lrn(scope.name_scope(name), x, o);
}

Value conv_bn(const Scope& scope, const std::string& name, Value x, Mode mode,
              std::vector<Value>& updates, Conv2D options, const BatchNorm& bn) {
  const Activation after = options.activation;
  options.activation = Activation::none;
  options.bias = false;
  Value y = conv2d(scope, name, x, options);
  return activation(scope, batch_norm(scope, name, y, mode, updates, bn), after);
}

Value residual_block(const Scope& scope, const std::string& name, Value x, Mode mode,
                     std::vector<Value>& updates, const Residual& o) {
  const Scope s = scope.variable_scope(name);
  const bool given = o.padding == ops::Padding::given;
  const Conv2D conv{.filters = o.filters,
                    .kernel = 3,
                    .padding = o.padding,
                    .pads = given ? 1 : 0,
                    .weight_decay = o.weight_decay};
  Conv2D first = conv;
  first.stride = o.stride;
  first.activation = Activation::relu;
  Value h = conv_bn(s, "conv1", x, mode, updates, first, o.batch_norm);
  h = conv_bn(s, "conv2", h, mode, updates, conv, o.batch_norm);
  Value shortcut = x;
  if (o.stride != 1 || x.shape()[1] != o.filters) {
    Conv2D projection = conv;
    projection.kernel = 1;
    projection.stride = o.stride;
    projection.pads = 0;
    shortcut = conv_bn(s, "shortcut", x, mode, updates, projection, o.batch_norm);
  }
  return ops::relu(s, ops::add(s, h, shortcut));
}

namespace {
// A bottleneck's or an inverted residual's sizes, before anything is built.
template <typename Block>
void check_block(const std::string& name, const Block& o) {
  if (o.filters <= 0 || o.stride <= 0 || o.expansion <= 0)
    fail("layer '{}': filters, stride and expansion must be > 0, got {}, {} and {}", name,
         o.filters, o.stride, o.expansion);
}
}  // namespace

Value bottleneck_block(const Scope& scope, const std::string& name, Value x, Mode mode,
                       std::vector<Value>& updates, const Bottleneck& o) {
  const Scope s = scope.variable_scope(name);
  check_block(name, o);
  const Conv2D one{.filters = o.filters,
                   .kernel = 1,
                   .activation = Activation::relu,
                   .weight_decay = o.weight_decay};
  Conv2D three = one;
  three.kernel = 3;
  three.stride = o.stride;
  three.padding = ops::Padding::given;
  three.pads = 1;
  Conv2D last = one;
  last.filters = o.filters * o.expansion;
  last.activation = Activation::none;
  Value h = conv_bn(s, "conv1", x, mode, updates, one, o.batch_norm);
  h = conv_bn(s, "conv2", h, mode, updates, three, o.batch_norm);
  h = conv_bn(s, "conv3", h, mode, updates, last, o.batch_norm);
  Value shortcut = x;
  if (o.stride != 1 || x.shape()[1] != last.filters) {
    Conv2D projection = last;
    projection.stride = o.stride;
    shortcut = conv_bn(s, "shortcut", x, mode, updates, projection, o.batch_norm);
  }
  return ops::relu(s, ops::add(s, h, shortcut));
}

Value inverted_residual_block(const Scope& scope, const std::string& name, Value x, Mode mode,
                              std::vector<Value>& updates, const InvertedResidual& o) {
  const Scope s = scope.variable_scope(name);
  check_block(name, o);
  const int64_t channels = x.shape()[1];
  Value h = x;
  if (o.expansion != 1)
    h = conv_bn(s, "expand", h, mode, updates,
                {.filters = channels * o.expansion,
                 .kernel = 1,
                 .activation = Activation::relu6,
                 .weight_decay = o.weight_decay},
                o.batch_norm);
  h = conv_bn(s, "depthwise", h, mode, updates,
              {.filters = h.shape()[1],
               .kernel = 3,
               .stride = o.stride,
               .groups = h.shape()[1],
               .padding = ops::Padding::given,
               .pads = 1,
               .activation = Activation::relu6,
               .weight_decay = o.weight_decay},
              o.batch_norm);
  h = conv_bn(s, "project", h, mode, updates,
              {.filters = o.filters, .kernel = 1, .weight_decay = o.weight_decay}, o.batch_norm);
  if (o.stride == 1 && channels == o.filters) h = ops::add(s, h, x);
  return h;
}

}  // namespace tower::nn
