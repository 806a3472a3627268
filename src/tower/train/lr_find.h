// The learning-rate range test (Smith 2015; fastai's lr_find, Lightning's Tuner.lr_find): a few
// hundred steps of the run's model, data and optimizer with the learning rate growing
// exponentially from `start_lr` to `end_lr`, the loss smoothed as it goes; stopped when the loss
// runs away (4x its lowest) or turns non-finite. The suggestion is where the smoothed loss falls
// fastest against log(lr), a rate that still trains fast without diverging.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tower/train/trainer.h"

namespace tower {

struct LrFindConfig {
  TrainConfig train;  // model, data, devices, batch, optimizer; its schedule and steps unused
  double start_lr = 1e-7, end_lr = 10;
  int64_t steps = 100;
  std::string plot;  // a PNG of the smoothed loss against the learning rate (log axis)
};

struct LrFindResult {
  std::vector<double> lrs, losses;  // per step: the rate it trained with, the smoothed loss
  size_t suggested = 0;             // index of the suggested rate
  size_t lowest = 0;                // index of the lowest smoothed loss
  double suggested_lr() const { return lrs[suggested]; }
};

// One process only (an error names mpirun otherwise); nothing is written but the plot.
LrFindResult lr_find(const LrFindConfig& config);

// The suggestion for a curve: the steepest fall of loss against log(lr) before the lowest loss,
// skipping the first tenth of the curve (its smoothing has not warmed up).
size_t steepest_fall(const std::vector<double>& lrs, const std::vector<double>& losses);

// The curve as a PNG: loss against log10(lr), a tick per decade, the suggestion as a red line.
std::vector<uint8_t> lr_find_plot(const LrFindResult& result);

}  // namespace tower
