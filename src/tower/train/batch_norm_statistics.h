// "Precise" batch-norm statistics (pycls, Detectron2, SWA's update_bn): the mean and variance
// each batch norm sees, averaged over some training batches with the weights held fixed. Moving
// averages with a decay of 0.99 take about 460 steps to forget their start and lag weights that
// are still changing: on a run of a few hundred steps they describe no weights the run had, and
// the model scores near chance at test time. Recomputed statistics describe the final weights
// whatever the run's length.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tower/data/dataset.h"
#include "tower/data/transforms.h"
#include "tower/models/model.h"
#include "tower/runtime/program.h"

namespace tower {

// How many steps moving averages of decay `decay` take until their start weighs under 1%.
int64_t moving_average_settle_steps(float decay);

// The suffix of a recomputed statistic in checkpoints: "<variable>/Recomputed" beside the moving
// average "<variable>", which training goes on with (so a resume keeps its bits).
inline constexpr const char* kRecomputedSuffix = "/Recomputed";

struct BatchNormStatisticsOptions {
  int64_t batch = 0;            // examples per batch: what one tower's batch norms saw in training
  int64_t max_examples = 8192;  // at most this many (whole batches of the first epoch)
  uint64_t seed = 0;            // the run's: the first epoch's order
  float momentum = 0;           // > 0: the run's --bn_momentum (for decay())
  Precision precision = Precision::fp32;
  std::vector<std::string> frozen;  // the run's frozen scopes: their statistics stay as they are
};

// The model built for training on batches of `options.batch` examples of `data` after
// `transform` (a run passes its evaluation transform). One thread computes, so the statistics have
// the same bits on any tower layout.
class BatchNormStatistics {
 public:
  BatchNormStatistics(const ModelDef& model, std::shared_ptr<const Dataset> data,
                      TransformSpec transform, const BatchNormStatisticsOptions& options);
  ~BatchNormStatistics();

  bool empty() const;   // the model has no moving averages
  float decay() const;  // the largest decay of its moving averages
  int64_t batches() const;
  int64_t examples() const { return batches() * batch_; }

  // The mean over the batches of each moving average's batch value, with `weights(name)` for
  // every variable of the model, keyed by the moving average's variable name.
  std::map<std::string, Tensor> compute(
      const std::function<const Tensor&(const std::string&)>& weights);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t batch_ = 0;
};

}  // namespace tower
