// The training loop: input pipeline -> towers (forward, backward, gradient reduction) ->
// optimizer update on every replica -> hooks (log line, metrics.jsonl, TensorBoard, checkpoints,
// evaluation, NaN guard, SIGINT/SIGTERM). Same flags and seed give bitwise-identical weights,
// also across a kill and resume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tower/core/device.h"
#include "tower/models/model.h"
#include "tower/parallel/communicator.h"
#include "tower/parallel/data_parallel.h"
#include "tower/parallel/gradient_reducer.h"
#include "tower/train/evaluator.h"
#include "tower/train/optimizer.h"

namespace tower {

struct TrainConfig {
  std::string model = "lenet";
  // --data; empty: the recipe's data set (evaluator.h: run_data_spec). For folders: the size
  // images are brought to (--image_size: {S} or {H, W}), the held-out fraction, bad images.
  std::string data;
  std::vector<int64_t> image_size;
  double test_fraction = 0.1;
  bool skip_bad_images = false;
  std::vector<Device> devices;  // empty: num_devices logical CPU devices
  int num_devices = 0;          // 0: one per core
  int num_gpus = 0;             // > 0: cuda:0 .. cuda:num_gpus-1 (--num_gpus)
  int num_threads = 0;          // threads of all towers together; 0: this rank's share of the cores
  bool allow_soft_placement = false;
  bool log_device_placement = false;
  Strategy strategy = Strategy::allreduce;
  double bucket_mb = 25;
  // The recipe fields: for_model() fills them from the model's Recipe; these defaults are the
  // recipe of the default model, lenet.
  int64_t batch_size = 64;  // per tower, like the classic flag
  // Both > 0: each step trains on global_batch_size examples of all ranks, cut into micro-batches
  // of micro_batch_size whose gradients one fixed tree sums (DataParallelOptions::micro_batch):
  // the same weights on any number of towers and ranks, and a checkpoint resumes on another
  // layout. batch_size is then unused.
  int64_t global_batch_size = 0, micro_batch_size = 0;
  double epochs = 2.5;
  OptimizerConfig optimizer{.name = "adam"};
  float lr = 0.003f;
  std::string lr_schedule = "cosine:warmup_steps=50";
  // The run length in epochs that lr_schedule's epoch values are written for (a recipe's epochs;
  // 0: the schedule is the user's own). A run of another length has the schedule's
  // boundary_epochs and decay_epochs scaled to it (scale_schedule_epochs).
  double schedule_epochs = 0;
  float ema_decay = 0.9999f;  // 0: no moving average of the weights
  // The decay of every batch norm's moving averages (0: the model's own; PyTorch's momentum 0.1
  // is 0.9 here). Recorded in checkpoints.
  float bn_momentum = 0;
  // The cross-entropy's target: label smoothing e in [0, 1) (the one-hot target times 1 - e plus
  // e / K), and class weights ("", "balanced" or a JSON file: class_weights.h).
  float label_smoothing = 0;
  std::string class_weights;
  // Batch-norm statistics recomputed with the weights evaluated (batch_norm_statistics.h) for
  // evaluations and checkpoints: "on", "off", or "auto": when the run is too short for the moving
  // averages to settle.
  std::string precise_bn = "auto";
  std::string augmentation = "none";
  int64_t max_steps = 0;  // > 0: overrides epochs
  // Resume even when --max_steps, --epochs, --lr or --lr_schedule change the learning rate of the
  // steps still to train.
  bool allow_schedule_change = false;
  std::string train_dir = "train";
  float clip_norm = 0;  // > 0: clip gradients by global norm
  uint64_t seed = 1;
  int num_preprocess_threads = 1;
  int64_t log_every = 100;
  int64_t save_every_steps = 0;
  double save_every_secs = 600;
  int keep_checkpoints = 5;
  int64_t eval_every = 0;  // steps; 0: only at the end
  // With eval_every: keep the checkpoint of the best evaluation whatever keep_checkpoints says;
  // stop after early_stopping evaluations in a row without a better one (0: never).
  bool keep_best = false;
  int64_t early_stopping = 0;
  bool final_eval = true;
  std::string resume_from;  // a checkpoint prefix to resume from explicitly
  // Fine-tuning (fine_tune.h): the weights a new run starts from (a resume ignores them), whether
  // variables the file lacks may start as initialized, the frozen scopes, and when they thaw
  // (epochs; 0: never), at the learning rate times unfreeze_lr_factor from then on.
  std::string init_from;
  bool init_partial = false;
  std::string freeze;
  double unfreeze_after_epochs = 0;
  float unfreeze_lr_factor = 0.1f;
  float dropout = -1;     // every dropout layer's rate, as timm's drop_rate; < 0: the model's own
  bool summaries = true;  // TensorBoard event files
  double comm_timeout = 300;  // seconds a rank waits for the others before the job stops
  std::string trace_file;     // a Chrome/Perfetto trace of the first trace_steps steps
  int64_t trace_steps = 10;
  // How the towers' programs compute: deterministic kernels (matters on GPUs), precision (bf16:
  // convolutions and matmuls multiply in bf16), contended mode, fusion, layout propagation. The
  // device and threads come from the device plan.
  ProgramOptions program;

  // The model's recipe, every other field at its default.
  static TrainConfig for_model(const std::string& model);
};

// Sets the recipe fields of `config` from `recipe`.
void apply_recipe(TrainConfig& config, const Recipe& recipe);

// Every field checked up front (finite, in range, consistent); the error names the flag.
void validate(const TrainConfig& config);
// The most steps a run may have (--max_steps, --epochs).
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;
// What must agree between all ranks of one job, as (flag, value): everything that changes the
// numbers. With micro-batches ranks may run different numbers of towers.
std::vector<std::pair<std::string, std::string>> rank_fields(const TrainConfig& config,
                                                             size_t towers, const Dataset& data);
// The data fields of a config (run_data_spec).
DataOptions data_options(const TrainConfig& config);

// A built-in model's towers: the stage of train() that `tower bench` reuses. Each tower fetches
// its total loss, then the cross-entropy and the accuracy.
// What a run changes of a model's training graph: the decay of its moving averages (> 0) and the
// cross-entropy's target.
// And the scopes it builds frozen (Scope::with_frozen).
struct TowerLoss {
  float bn_momentum = 0;
  ops::SoftmaxCrossEntropyAttrs target;
  std::vector<std::string> frozen;
  float dropout = -1;  // every dropout layer's rate (--dropout); < 0: the model's
};
std::unique_ptr<DataParallel> build_towers(const ModelDef& model, const Shape& example_shape,
                                           int64_t batch, int num_classes,
                                           const DataParallelOptions& options,
                                           const TowerLoss& loss = {});

struct TrainResult {
  int64_t steps = 0;    // the step reached
  int64_t trained = 0;  // the steps this run trained (0 for a resume that had nothing to do)
  float last_loss = 0;
  double eval_accuracy = -1;  // precision@1 of the last evaluation, -1 if none
  double seconds = 0;
  bool interrupted = false;    // stopped by SIGINT/SIGTERM (after a checkpoint)
  bool stopped_early = false;  // --early_stopping (after a checkpoint)
};

// With several ranks (mpirun), every rank calls train() with the same config: each runs its own
// towers on its shard of the data, and only rank 0 reads and writes checkpoints, logs, metrics
// and summaries.
TrainResult train(const TrainConfig& config, Communicator& comm = world());

}  // namespace tower
