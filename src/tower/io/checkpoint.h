// Checkpoints in a train dir, TF-Saver style but in open formats:
//   model.ckpt-<step>.safetensors   the tensors (opens in Python)
//   model.ckpt-<step>.json          the caller's state (data position, run flags, ...); written
//                                   last, so its presence marks a complete checkpoint
//   checkpoint                      text index naming the latest, as TF's `checkpoint` file
// Every file is written atomically, so a crash at any moment leaves the previous checkpoint usable.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tower/core/tensor.h"

namespace tower {

struct CheckpointData {
  std::map<std::string, Tensor> tensors;
  nlohmann::json state;
  int64_t step = 0;
  std::string prefix;  // e.g. "train/model.ckpt-1200"
};

// "<dir>/model.ckpt-<step>": the prefix both files of a checkpoint share.
std::string checkpoint_prefix(const std::string& dir, int64_t step);

// Writes checkpoint `step` into `dir` (created if missing), points the index at it, then deletes
// all but `keep_last` checkpoints (keep_last <= 0 keeps all): the new one and the highest-numbered
// others, so that saving after a rollback to an older step keeps the newer ones while room remains.
// Checkpoint `keep_also` (>= 0: the best one of the run), if there, is kept besides them.
void checkpoint_save(const std::string& dir, int64_t step,
                     const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                     const nlohmann::json& state, int keep_last, int64_t keep_also = -1);

// The prefix of the latest complete checkpoint in `dir`: the one the index names, or, when the
// index is missing, unreadable or names an incomplete checkpoint, the highest complete step.
std::optional<std::string> checkpoint_latest(const std::string& dir);

// Loads a checkpoint by prefix (a trailing ".safetensors" or ".json" is accepted too); a missing
// or corrupt file is a tower::Error naming it.
CheckpointData checkpoint_load(const std::string& prefix);

// Steps of the complete checkpoints (both files present) in `dir`, ascending; empty if no dir.
std::vector<int64_t> checkpoint_list(const std::string& dir);

// Steps whose tensors file is in `dir` without its state file (an interrupted save, or a state
// file deleted by hand), ascending.
std::vector<int64_t> checkpoint_list_incomplete(const std::string& dir);

// The prefix the index file of `dir` names as latest, complete or not; nothing without an index.
std::optional<std::string> checkpoint_indexed(const std::string& dir);

}  // namespace tower
