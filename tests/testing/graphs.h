// Small graph pieces that several tests build (header-only, tests only).
#pragma once

#include <string>

#include "tower/graph/graph.h"
#include "tower/ops/batch_norm.h"
#include "tower/ops/conv.h"

namespace tower::testing {

// A 3x3 "same" convolution of x to as many channels as x has, then an inference batch norm (a
// residual branch's end in an eval graph): weights He-normal; gamma, beta and mean uniform in
// [-1, 1], variance 1; the batch norm's variables not trainable.
inline Value conv_inference_batch_norm(const Scope& s, const std::string& name, Value x) {
  const int64_t channels = x.shape()[1];
  Value w = s.get_variable(name + "/w", Shape{channels, channels, 3, 3}, Initializer::he_normal());
  auto channel = [&](const std::string& v, Initializer init) {
    return s.get_variable(name + "/" + v, Shape{channels}, init, Trainable::no);
  };
  Value conv = ops::conv2d(s, x, w, {{1, 1}, ops::Padding::same});
  return ops::batch_norm(
             s, conv, channel("gamma", Initializer::uniform(1)),
             channel("beta", Initializer::uniform(1)), channel("mean", Initializer::uniform(1)),
             channel("var", Initializer::ones()), {.mode = ops::BatchNormMode::inference})
      .y;
}

}  // namespace tower::testing
