// The safetensors format (https://github.com/huggingface/safetensors), so that checkpoints open in
// Python: 8-byte little-endian header length N, N bytes of JSON header (space-padded to a multiple
// of 8), then the tensors' bytes, contiguous, in the order of their sorted names.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tower/core/tensor.h"

namespace tower {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the header's "__metadata__"
};

// Checksums::yes adds a CRC-32C of each tensor's bytes to the metadata ("crc32c/<name>": 8 hex
// digits), which safetensors_read verifies.
enum class Checksums : uint8_t { no, yes };

// Writes CPU tensors (any order in; sorted by name in the file) atomically (see atomic_file.h).
// Names must be unique and not "__metadata__"; the error names `path`.
void safetensors_write(const std::string& path,
                       const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       Checksums checksums = Checksums::no);

// Reads and validates a whole file; a missing, truncated or corrupt file, or a tensor whose bytes
// fail their stored checksum, is a tower::Error naming `path` and what is wrong with it (and the
// tensor). The checksums stay in `metadata`.
SafetensorsFile safetensors_read(const std::string& path);

}  // namespace tower
