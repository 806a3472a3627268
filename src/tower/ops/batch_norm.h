// Batch normalization of x (N, C, H, W) NCHW or (N, C), per channel over the other axes.
#pragma once

#include <string>
#include <vector>

#include "tower/graph/graph.h"
#include "tower/ops/conv.h"

namespace tower::ops {

enum class BatchNormMode : uint8_t { training, inference };

struct BatchNormAttrs {
  using Mode = BatchNormMode;
  float epsilon = 1e-3f;
  float momentum = 0.99f;  // decay of the moving averages
  Mode mode = Mode::training;
};

// The attributes of the runtime's fused Conv2D+FusedBatchNorm[+Relu] (an inference batch norm
// folded into the convolution): both nodes'.
struct ConvBatchNormAttrs {
  Conv2DAttrs conv;
  BatchNormAttrs batch_norm;
};

struct AssignMovingAverageAttrs {
  float decay = 0.99f;
};

struct BatchNormResult {
  Value y;
  // Training only: the moving-average updates, to run as extra targets of the training step.
  std::vector<Value> updates;
};

// y = gamma * (x - mean) / sqrt(var + epsilon) + beta; gamma, beta, moving_mean and moving_var
// are (C,). Training normalizes with the batch statistics and returns updates of the moving
// averages (the variance one with Bessel's correction, as TF and PyTorch do); inference normalizes
// with the moving averages. Op "FusedBatchNorm" (outputs y, batch mean, batch variance as used),
// gradient op "FusedBatchNormGrad" (dx, dgamma, dbeta).
BatchNormResult batch_norm(const Scope& s, Value x, Value gamma, Value beta, Value moving_mean,
                           Value moving_var, BatchNormAttrs attrs = {});

// variable = decay * variable + (1 - decay) * value, written into the variable's storage when run;
// the output is the new value. Op "AssignMovingAverage".
Value assign_moving_average(const Scope& s, Value variable, Value value, float decay);

// The moving averages a training graph updates (the AssignMovingAverage nodes among `updates`):
// each variable's name, the batch value it averages, and its decay.
struct MovingAverageUpdate {
  std::string variable;
  Value value;
  float decay = 0;
};
std::vector<MovingAverageUpdate> moving_average_updates(const std::vector<Value>& updates);
// Sets the decay of every AssignMovingAverage node among `updates` (a run's --bn_momentum).
void set_moving_average_decay(const std::vector<Value>& updates, float decay);

}  // namespace tower::ops
