// The training loop: input pipeline -> towers (forward, backward, gradient reduction) ->
// optimizer update on every replica -> hooks (log line, metrics.jsonl, TensorBoard, checkpoints,
// evaluation, NaN guard, SIGINT/SIGTERM). Same flags and seed give bitwise-identical weights,
// also across a kill and resume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tower/core/device.h"
#include "tower/parallel/communicator.h"
#include "tower/parallel/gradient_reducer.h"
#include "tower/train/optimizer.h"

namespace tower {

struct TrainConfig {
  std::string model = "lenet";
  std::string data = "fashion-mnist";
  std::vector<Device> devices;  // empty: num_devices logical CPU devices
  int num_devices = 0;          // 0: one per core
  bool allow_soft_placement = false;
  bool log_device_placement = false;
  Strategy strategy = Strategy::allreduce;
  double bucket_mb = 25;
  int64_t batch_size = 64;      // per tower, like the classic flag
  int64_t max_steps = 0;        // > 0: overrides epochs
  double epochs = 2.5;
  std::string train_dir = "train";
  // The defaults are the recipe of the default run (lenet on Fashion-MNIST, >= 91% in 90 s).
  OptimizerConfig optimizer{.name = "adam"};
  float lr = 0.003f;
  std::string lr_schedule = "cosine:warmup_steps=50";
  float clip_norm = 0;          // > 0: clip gradients by global norm
  float ema_decay = 0.9999f;    // 0: no moving average of the weights
  uint64_t seed = 1;
  int num_preprocess_threads = 1;
  int64_t log_every = 100;
  int64_t save_every_steps = 0;
  double save_every_secs = 600;
  int keep_checkpoints = 5;
  int64_t eval_every = 0;       // steps; 0: only at the end
  bool final_eval = true;
  std::string resume_from;      // a checkpoint prefix to resume from explicitly
  bool summaries = true;        // TensorBoard event files
  double comm_timeout = 300;    // seconds a rank waits for the others before the job stops
  bool deterministic = true;    // bitwise-repeatable kernels only (matters on GPUs)
};

struct TrainResult {
  int64_t steps = 0;
  float last_loss = 0;
  double eval_accuracy = -1;  // precision@1 of the last evaluation, -1 if none
  double seconds = 0;
  bool interrupted = false;   // stopped by SIGINT/SIGTERM (after a checkpoint)
};

// With several ranks (mpirun), every rank calls train() with the same config: each runs its own
// towers on its shard of the data, and only rank 0 reads and writes checkpoints, logs, metrics
// and summaries.
TrainResult train(const TrainConfig& config, Communicator& comm = world());

// Evaluation of a checkpoint (the latest in train_dir, or a given prefix) on the test split.
struct EvalConfig {
  std::string train_dir = "train";
  std::string checkpoint;  // prefix; empty: the latest in train_dir
  std::string data;        // empty: the data set recorded in the checkpoint
  bool use_ema = true;
  int64_t batch_size = 500;
  int num_threads = 0;     // 0: all cores
};
struct EvalResult {
  int64_t step = 0;
  double precision_at_1 = 0;
  int64_t examples = 0;
};
EvalResult evaluate_checkpoint(const EvalConfig& config);

}  // namespace tower
