// Whole-file reading and gzip (de)compression for the data readers and the generator.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tower {

// Reads a whole file; throws tower::Error naming it when it is missing or unreadable.
std::vector<uint8_t> read_file(const std::string& path);
// Writes a whole file (creating or truncating it); throws naming it on failure.
void write_file(const std::string& path, std::span<const uint8_t> bytes);

// Decompresses a gzip stream (concatenated members allowed); throws tower::Error naming `file`
// when the stream is truncated or corrupt.
std::vector<uint8_t> gunzip(std::span<const uint8_t> bytes, const std::string& file);
// Compresses into one gzip member (mtime 0, so output depends only on the input).
std::vector<uint8_t> gzip(std::span<const uint8_t> bytes);

// Reads `path`, decompressing it when its name ends in ".gz".
std::vector<uint8_t> read_file_maybe_gzip(const std::string& path);

}  // namespace tower
