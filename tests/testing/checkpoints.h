// Checkpoints read back in tests (header-only test helper).
#pragma once

#include <map>
#include <string>

#include "tower/io/checkpoint.h"
#include "tower/io/safetensors.h"

namespace tower::testing {

// Every tensor of the checkpoint of `step` in `dir` (weights, optimizer slots, moving averages)
// as raw bytes, by name: two runs wrote the same bits when these maps are equal.
inline std::map<std::string, std::string> checkpoint_tensors(const std::string& dir, int64_t step) {
  std::map<std::string, std::string> out;
  for (auto& [name, t] : safetensors_read(checkpoint_prefix(dir, step) + ".safetensors").tensors)
    out[name] = std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

}  // namespace tower::testing
