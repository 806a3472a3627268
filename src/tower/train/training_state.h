// The state file of a checkpoint (model.ckpt-<step>.json, beside the tensors): where training
// stands and which run wrote it. One schema, used to save and to restore; every key is checked
// on load (docs/checkpoint_format.md describes it).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tower/io/checkpoint.h"
#include "tower/models/model.h"

namespace tower {

// What must agree between a checkpoint and the run resuming it (the flags that shape the
// variables, the optimizer slots or the data order).
struct RunIdentity {
  std::string model, data;
  std::string model_file;  // the text of the model's file (ModelDef::source); empty: a C++ model
  // Micro-batches (both > 0): the step's work, whatever the towers and ranks that do it; the
  // three layout fields below are then 0 and left out of the file.
  int64_t global_batch_size = 0, micro_batch_size = 0;
  int64_t batch_size = 0;  // per tower
  int64_t num_towers = 0;
  int64_t ranks = 0;
  std::string strategy, optimizer;
  uint64_t seed = 0;
  float bn_momentum = 0;  // --bn_momentum; 0: the model's own (and left out of the file)
  // The frozen scopes and when they thaw ("backbone until epoch 2, then lr x 0.1"); empty: none
  // (and left out of the file).
  std::string freeze;
};

// The weights a run started from (--init_from): the file and its sha256.
struct InitRecord {
  std::string file, sha256, source;
};

// The learning-rate schedule a run trained on, as resolved from the recipe and the flags.
struct ScheduleRecord {
  std::string spec;  // --lr_schedule
  double lr = 0;     // --lr
  int64_t total_steps = 0;
};

// What a run made of its evaluations so far (--eval_every): the best precision @ 1 and its step
// (--keep_best keeps that checkpoint), the evaluations since (--early_stopping), and the plateau
// schedule's count.
struct EvalProgress {
  double best = -1;  // -1: no evaluation yet
  int64_t best_step = -1;
  int64_t since_best = 0;     // evaluations in a row without a better precision
  int64_t plateau_wait = 0;   // the same since the last reduction of the learning rate
  int64_t lr_reductions = 0;  // lr x factor^lr_reductions (plateau:...)
};
nlohmann::json eval_progress_to_json(const EvalProgress& progress);
// `file` and the key path name the source in errors.
EvalProgress eval_progress_from_json(const nlohmann::json& json, const std::string& file);

struct TrainingState {
  int64_t step = 0;                   // updates done
  int64_t epoch = 0, epoch_step = 0;  // the input pipeline's position: the next batch to train on
  RunIdentity run;
  std::vector<std::string> devices;  // of rank 0, for information
  bool ema = false;                  // the tensors include "<var>/ExponentialMovingAverage"
  std::string augmentation;          // empty in checkpoints of older versions
  std::vector<std::string> classes;  // the class names of the data set (empty in older ones)
  Shape image_shape;                 // (C, H, W) of the data set's images (rank 0 in older ones)
  double test_fraction = 0;          // an image folder's held-out fraction (0: not recorded)
  ScheduleRecord schedule;           // total_steps 0 in older ones
  std::string program;               // the file name of the program that trained it (older: "")
  EvalProgress progress;             // no evaluation yet in older ones
  InitRecord init;                   // file empty: the run started from its initializers
  Normalization normalization;       // the model's input normalization (none: left out)
};

nlohmann::json training_state_to_json(const TrainingState& state);

// Throws tower::Error naming `file` and the key that is missing, of the wrong type or out of
// range.
TrainingState training_state_from_json(const nlohmann::json& json, const std::string& file);

// The fields of `saved` that differ from `now`, as "key = saved value" and "key = this run's
// value"; empty when they agree.
struct IdentityDifference {
  std::string key, saved, now;
};
std::vector<IdentityDifference> differences(const RunIdentity& saved, const RunIdentity& now);

// The model a run trained; a model file's is registered from the text the checkpoint carries
// (`origin` names the checkpoint in errors). A model this program does not know, which the
// program that trained it registered, is an error naming that program.
const ModelDef& run_model(const TrainingState& state, const std::string& origin);
// The file name of the running program ("tower", or a user's program linking the library).
std::string this_program();

// A state file that is valid JSON but does not fit the schema: written by another tool (or by
// hand), not damage. The message names the file and the key.
class ForeignStateError : public Error {
 public:
  using Error::Error;
};

// A checkpoint of a training run: its tensors and its validated state.
struct TrainingCheckpoint {
  CheckpointData data;
  TrainingState state;
};

// Writes the tensors (with checksums) and the state; see checkpoint_save.
void save_training_checkpoint(const std::string& dir, const TrainingState& state,
                              const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                              int keep_last, int64_t keep_also = -1);

// Loads a checkpoint and validates its state; a tower::Error names the file and what is wrong
// (a damaged file, a tensor failing its checksum), a ForeignStateError the state key.
TrainingCheckpoint load_training_checkpoint(const std::string& prefix);

// The train dir exists (created if need be), is a directory and can be written.
void prepare_train_dir(const std::string& dir);
// One writer per train dir: an advisory lock on DIR/.lock, held while the run lasts (the kernel
// drops the lock of a killed process, so a stale one never blocks). Returns the lock's
// descriptor; a dir in use is an error naming the pid that holds it.
int lock_train_dir(const std::string& dir);

// Stops a resume from a checkpoint of another run (model, data, layout, optimizer, seed), naming
// every difference at once (and the micro-batch flags that allow any layout).
void refuse_other_run(const TrainingCheckpoint& checkpoint, const RunIdentity& now);
// Stops a resume whose flags change the learning rate of any step from `from_step` on (a cosine
// decay stretched or cut short, another --lr), naming the step and both rates and
// --allow_schedule_change; older checkpoints without a schedule record pass.
void refuse_schedule_change(const TrainingCheckpoint& checkpoint, const ScheduleRecord& now,
                            int64_t from_step, int64_t steps_per_epoch);

// The checkpoint a run resumes from in `dir`, or nothing when there is none:
//  - the latest complete one; if its files are damaged (truncated, corrupt, failing a checksum)
//    a warning on stderr names the file, and the one before it is tried, and so on;
//  - a state file that is intact but does not fit the schema stops with an error naming the
//    file, the key and the next usable checkpoint (--resume_from);
//  - so does an index ("checkpoint") naming a checkpoint whose state file is gone, and a dir in
//    which every checkpoint is damaged: never a silent fresh start over existing checkpoints.
std::optional<TrainingCheckpoint> find_resume_checkpoint(const std::string& dir);

// "the checkpoint before it, P, is usable: pass FLAG P" or "no older checkpoint in DIR is usable".
std::string older_checkpoint_hint(const std::string& dir, int64_t before_step,
                                  const std::string& flag);

}  // namespace tower
