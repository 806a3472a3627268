#include "tower/data/file_io.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "tower/core/error.h"

namespace tower {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) fail("cannot open {}: {}", path, std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f.get())) > 0)
    bytes.insert(bytes.end(), chunk, chunk + n);
  if (std::ferror(f.get())) fail("cannot read {}: {}", path, std::strerror(errno));
  return bytes;
}

void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) fail("cannot create {}: {}", path, std::strerror(errno));
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
    fail("cannot write {}: {}", path, std::strerror(errno));
  if (std::fclose(f.release()) != 0) fail("cannot write {}: {}", path, std::strerror(errno));
}

std::vector<uint8_t> gunzip(std::span<const uint8_t> bytes, const std::string& file) {
  if (bytes.size() > std::numeric_limits<uInt>::max())
    fail("{}: compressed file too large ({} bytes)", file, bytes.size());
  z_stream zs{};
  // 16 + MAX_WBITS: gzip framing only, so a plain file named .gz is reported, not guessed at.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) fail("{}: cannot initialize zlib", file);
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  std::vector<uint8_t> out;
  uint8_t chunk[1 << 16];
  bool member_done = false;
  for (;;) {
    zs.next_out = chunk;
    zs.avail_out = sizeof(chunk);
    int rc = inflate(&zs, Z_NO_FLUSH);
    out.insert(out.end(), chunk, chunk + (sizeof(chunk) - zs.avail_out));
    if (rc == Z_STREAM_END) {
      member_done = true;
      if (zs.avail_in == 0) break;
      // Another gzip member follows (as `cat a.gz b.gz` makes).
      if (inflateReset(&zs) != Z_OK) fail("{}: corrupt gzip stream", file);
      member_done = false;
      continue;
    }
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR)
      fail("{}: corrupt gzip stream ({})", file, zs.msg ? zs.msg : "invalid data");
    if (rc == Z_MEM_ERROR) fail("{}: out of memory while decompressing", file);
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // input ended inside the stream
    if (rc != Z_OK) fail("{}: corrupt gzip stream (zlib error {})", file, rc);
  }
  if (!member_done)
    fail("{}: truncated gzip stream (the file ends before the compressed data does)", file);
  return out;
}

std::vector<uint8_t> gzip(std::span<const uint8_t> bytes) {
  z_stream zs{};
  TOWER_CHECK(deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                           Z_DEFAULT_STRATEGY) == Z_OK);
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, deflateEnd);
  std::vector<uint8_t> out(deflateBound(&zs, static_cast<uLong>(bytes.size())));
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  TOWER_CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  return out;
}

std::vector<uint8_t> read_file_maybe_gzip(const std::string& path) {
  std::vector<uint8_t> bytes = read_file(path);
  return ends_with(path, ".gz") ? gunzip(bytes, path) : bytes;
}

}  // namespace tower
