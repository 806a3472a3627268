// Crash-safe whole-file writes for checkpoints and their index.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tower {

// Writes the concatenation of `pieces` to `path` so that a reader (or a restart after a crash)
// sees either the previous file or the complete new one: `path.tmp`, fsync, rename, fsync of the
// directory. On failure (disk full, permissions, ...) the temp file is removed, the previous file
// is left as it was, and the tower::Error names `path`.
void atomic_write_file(const std::string& path,
                       const std::vector<std::span<const uint8_t>>& pieces);
void atomic_write_file(const std::string& path, std::string_view text);

}  // namespace tower
