// Elementwise activations on f32 tensors of any shape. Each gradient is a dedicated op computed
// from the output y (ReluGrad(dy, y), ...), so x need not be kept alive for backprop.
#pragma once

#include "tower/graph/graph.h"

namespace tower::ops {

Value relu(const Scope& s, Value x);
Value relu6(const Scope& s, Value x);    // min(max(x, 0), 6) (MobileNet's)
Value elu(const Scope& s, Value x);      // x > 0 ? x : exp(x) - 1
Value sigmoid(const Scope& s, Value x);  // 1 / (1 + exp(-x))
Value tanh(const Scope& s, Value x);

// dx given dy and the activation's output y (ops "ReluGrad", "Relu6Grad", "EluGrad",
// "SigmoidGrad", "TanhGrad"), for dy and y of one shape. Relu6Grad passes dy where 0 < y < 6.
Value relu_grad(const Scope& s, Value dy, Value y);
Value relu6_grad(const Scope& s, Value dy, Value y);
Value elu_grad(const Scope& s, Value dy, Value y);
Value sigmoid_grad(const Scope& s, Value dy, Value y);
Value tanh_grad(const Scope& s, Value dy, Value y);

}  // namespace tower::ops
