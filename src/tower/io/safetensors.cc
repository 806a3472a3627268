#include "tower/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>

#include "tower/core/crc32c.h"
#include "tower/io/atomic_file.h"

namespace tower {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; tower writes tensors' bytes as they are");

// The same cap as the reference implementation: a larger header means a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string_view safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
  }
  TOWER_CHECK(false);
  return "";
}

bool parse_safetensors_dtype(std::string_view name, DType* dtype) {
  for (DType d : {DType::f32, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    if (safetensors_dtype(d) == name) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// Reads exactly `n` bytes at `offset`; returns false at end of file or on error (errno set).
bool read_at(int fd, void* into, size_t n, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(into);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Parses one header entry; `what` prefixes every message with the file and tensor.
Entry parse_entry(const std::string& name, const nlohmann::json& value, const std::string& what) {
  if (!value.is_object()) fail("{} is not a JSON object: {}", what, value.dump());
  Entry e{name, DType::f32, {}, 0, 0};
  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) fail("{} has no \"dtype\" string", what);
  if (!parse_safetensors_dtype(dtype->get<std::string>(), &e.dtype))
    fail("{} has dtype {}, which tower does not support (expected F32, BF16, I32, I64 or U8)", what,
         dtype->dump());
  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) fail("{} has no \"shape\" array", what);
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail("{} has shape {}: dimensions must be non-negative integers", what, shape->dump());
    e.shape.push_back(d.get<int64_t>());
  }
  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
    fail("{} has no \"data_offsets\" pair of non-negative integers", what);
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  if (e.end < e.begin) fail("{} has data_offsets [{}, {}]: end before begin", what, e.begin, e.end);
  uint64_t bytes = dtype_size(e.dtype);
  for (int64_t d : e.shape)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      fail("{} has shape {}, too large to hold", what, shape->dump());
  if (bytes != e.end - e.begin)
    fail("{} has shape {} of {} ({} bytes) but data_offsets [{}, {}] span {} bytes", what,
         shape->dump(), dtype->get<std::string>(), bytes, e.begin, e.end, e.end - e.begin);
  return e;
}

// Metadata key prefix of the per-tensor checksums: "crc32c/<tensor name>" -> 8 hex digits.
constexpr std::string_view kChecksumKey = "crc32c/";

std::string checksum_text(const Tensor& t) {
  return fmt::format("{:08x}", crc32c(t.raw_data(), t.nbytes()));
}

}  // namespace

void safetensors_write(const std::string& path,
                       const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata, Checksums checksums) {
  std::vector<std::pair<std::string, const Tensor*>> sorted = tensors;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [name, tensor] = sorted[i];
    if (i > 0 && sorted[i - 1].first == name)
      fail("cannot write '{}': two tensors are named '{}'", path, name);
    if (name == "__metadata__")
      fail("cannot write '{}': '__metadata__' is not a valid tensor name", path);
    TOWER_CHECK(tensor != nullptr);
    if (tensor->device().kind != DeviceKind::cpu)
      fail("cannot write '{}': tensor '{}' is on {}, copy it to the CPU first", path, name,
           tensor->device().to_string());
    TOWER_CHECK_MSG(tensor->defined(), "tensor '{}' has no storage", name);
  }
  std::map<std::string, std::string> all_metadata = metadata;
  for (const auto& [key, value] : metadata)
    if (key.starts_with(kChecksumKey))
      fail("cannot write '{}': metadata keys starting with '{}' are tower's checksums", path,
           kChecksumKey);
  if (checksums == Checksums::yes)
    for (const auto& [name, tensor] : sorted)
      all_metadata[std::string(kChecksumKey) + name] = checksum_text(*tensor);

  // ordered_json keeps the layout of files the Python library writes: metadata first, then the
  // tensors in buffer order, each as dtype, shape, data_offsets.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!all_metadata.empty()) header["__metadata__"] = all_metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : sorted) {
    nlohmann::ordered_json entry;
    entry["dtype"] = safetensors_dtype(tensor->dtype());
    entry["shape"] = tensor->shape().dims();
    entry["data_offsets"] = {offset, offset + tensor->nbytes()};
    header[name] = std::move(entry);
    offset += tensor->nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception&) {
    fail("cannot write '{}': a tensor name or metadata string is not valid UTF-8", path);
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  std::vector<std::span<const uint8_t>> pieces;
  pieces.emplace_back(length, 8);
  pieces.emplace_back(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  for (const auto& [name, tensor] : sorted)
    pieces.emplace_back(static_cast<const uint8_t*>(tensor->raw_data()), tensor->nbytes());
  atomic_write_file(path, pieces);
}

namespace {

// The tensors must tile the data buffer exactly: no gaps, no overlaps, nothing past the end.
// Sorts the entries by their offsets.
void check_tiling(std::vector<Entry>& entries, uint64_t buffer_size, const std::string& corrupt) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < expected)
      fail("{}: tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}'", corrupt, e.name, e.begin,
           e.end, entries[i - 1].name);
    if (e.begin > expected)
      fail("{}: bytes [{}, {}) of the data buffer belong to no tensor (before tensor '{}')",
           corrupt, expected, e.begin, e.name);
    if (e.end > buffer_size)
      fail(
          "{}: tensor '{}' ends at byte {} of the data buffer, but the file holds only {} bytes of "
          "data (the file is shorter than its header declares)",
          corrupt, e.name, e.end, buffer_size);
    expected = e.end;
  }
  if (expected != buffer_size)
    fail("{}: the tensors cover {} bytes but the data buffer has {} bytes", corrupt, expected,
         buffer_size);
}

}  // namespace

SafetensorsFile safetensors_read(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open safetensors file '{}': {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    fail("cannot stat safetensors file '{}': {}", path, std::strerror(errno));
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  const std::string corrupt = fmt::format("safetensors file '{}' is corrupt or truncated", path);

  uint8_t length_bytes[8];
  if (file_size < 8 || !read_at(fd.get(), length_bytes, 8, 0))
    fail("{}: it has {} bytes, fewer than the 8-byte header length", corrupt, file_size);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
  if (header_size > kMaxHeaderBytes || header_size > file_size - 8)
    fail("{}: the header length field says {} bytes but the file has {} bytes", corrupt,
         header_size, file_size);
  std::string text(header_size, '\0');
  if (!read_at(fd.get(), text.data(), header_size, 8))
    fail("cannot read the header of safetensors file '{}': {}", path, std::strerror(errno));

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number past a double
    fail("{}: the header is not valid JSON ({})", corrupt, e.what());
  }
  if (!header.is_object()) fail("{}: the header is not a JSON object", corrupt);

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail("{}: \"__metadata__\" is not a JSON object", corrupt);
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) fail("{}: metadata '{}' is not a string: {}", corrupt, key, v.dump());
        file.metadata[key] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, value, fmt::format("{}: tensor '{}'", corrupt, name)));
  }

  check_tiling(entries, file_size - 8 - header_size, corrupt);
  for (Entry& e : entries) {
    Tensor t(Shape(std::move(e.shape)), e.dtype);
    errno = 0;
    if (!read_at(fd.get(), t.raw_data(), t.nbytes(), 8 + header_size + e.begin))
      fail("cannot read tensor '{}' from safetensors file '{}': {}", e.name, path,
           errno ? std::strerror(errno) : "unexpected end of file");
    // Files written by tower carry a CRC-32C per tensor: a flipped bit is found here, not later
    // as a silently different model.
    if (auto it = file.metadata.find(std::string(kChecksumKey) + e.name); it != file.metadata.end())
      if (std::string computed = checksum_text(t); computed != it->second)
        fail(
            "safetensors file '{}' is damaged: the data of tensor '{}' fails its CRC-32C check "
            "(stored {}, computed {})",
            path, e.name, it->second, computed);
    file.tensors.emplace(e.name, std::move(t));
  }
  for (const auto& [key, value] : file.metadata)
    if (key.starts_with(kChecksumKey) && !file.tensors.count(key.substr(kChecksumKey.size())))
      fail("{}: metadata '{}' is the checksum of a tensor the file does not have", corrupt, key);
  return file;
}

}  // namespace tower
