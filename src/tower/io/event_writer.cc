#include "tower/io/event_writer.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "tower/core/crc32c.h"
#include "tower/core/error.h"
#include "tower/io/png.h"

namespace tower {
namespace {

static_assert(std::endian::native == std::endian::little,
              "protobuf fixed fields are little-endian");

// Appends protocol-buffer fields to a byte string. Field numbers are those of TensorFlow's
// event.proto, summary.proto and histogram.proto.
class ProtoWriter {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      bytes_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    bytes_.push_back(static_cast<char>(v));
  }
  void tag(int field, int wire_type) {
    varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
  }
  void int_field(int field, int64_t v) {  // int32/int64: negatives take ten bytes, as protobuf does
    tag(field, 0);
    varint(static_cast<uint64_t>(v));
  }
  void double_field(int field, double v) {
    tag(field, 1);
    raw(&v, 8);
  }
  void float_field(int field, float v) {
    tag(field, 5);
    raw(&v, 4);
  }
  void bytes_field(int field, std::string_view v) {
    tag(field, 2);
    varint(v.size());
    bytes_.append(v);
  }
  void packed_doubles(int field, const std::vector<double>& values) {
    tag(field, 2);
    varint(values.size() * 8);
    for (double v : values) raw(&v, 8);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  // Protobuf fixed-width fields are little-endian, like the host.
  void raw(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
};

double wall_time() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// An Event at `step` whose Summary holds the one Summary.Value `value`.
std::string event_with_value(const ProtoWriter& value, int64_t step) {
  ProtoWriter summary;
  summary.bytes_field(1, value.bytes());
  ProtoWriter event;
  event.double_field(1, wall_time());
  event.int_field(2, step);
  event.bytes_field(5, summary.bytes());
  return event.bytes();
}

std::string open_failure(const std::string& path) {
  return fmt::format("cannot create TensorBoard event file '{}': {}", path, std::strerror(errno));
}

// The positive limits in increasing order, and where a positive value falls among them without a
// search. Positive doubles order as their bit patterns, and the slices of values sharing their top
// 16 bits (exponent and 4 bits of mantissa) span a ratio of at most 1 + 1/16 < 1.1, so at most one
// limit lies inside a slice: below[slice] counts the limits under the slice's start (for a slice
// past the last finite limit, all of those), and one comparison finishes.
class PositiveLimits {
 public:
  PositiveLimits() {
    for (double v = 1e-12; v < 1e20; v *= 1.1) limits_.push_back(v);
    limits_.push_back(DBL_MAX);
    first_ = slice(limits_.front());
    for (uint64_t s = first_; s <= slice(limits_[limits_.size() - 2]) + 1; ++s) {
      const double start = std::bit_cast<double>(s << kShift);
      below_.push_back(static_cast<uint16_t>(
          std::lower_bound(limits_.begin(), limits_.end(), start) - limits_.begin()));
    }
  }
  const std::vector<double>& limits() const { return limits_; }
  // upper_bound(histogram_bucket_limits(), x): the negative limits are these mirrored, then 0.
  size_t bucket(double x) const {
    const size_t n = limits_.size();
    if (x > 0) return n + 1 + count_below(x, true);
    if (x < 0) return n - count_below(-x, false);
    return n + 1;
  }

 private:
  // How many limits are below `a` (> 0), or at most `a` when `or_equal`.
  size_t count_below(double a, bool or_equal) const {
    const uint64_t s = slice(a);
    const size_t k = s < first_ ? 0 : below_[std::min<size_t>(s - first_, below_.size() - 1)];
    return k + static_cast<size_t>(limits_[k] < a || (or_equal && limits_[k] == a));
  }
  static constexpr int kShift = 48;
  static uint64_t slice(double a) { return std::bit_cast<uint64_t>(a) >> kShift; }
  std::vector<double> limits_;
  std::vector<uint16_t> below_;
  uint64_t first_ = 0;
};

const PositiveLimits& positive_limits() {
  static const PositiveLimits limits;
  return limits;
}

}  // namespace

const std::vector<double>& histogram_bucket_limits() {
  static const std::vector<double> limits = [] {
    const std::vector<double>& positive = positive_limits().limits();
    std::vector<double> all;
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return limits;
}

size_t histogram_bucket(double x) { return positive_limits().bucket(x); }

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create the TensorBoard log directory '{}': {}", dir, ec.message());
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const std::string base =
      (std::filesystem::path(dir) / fmt::format("events.out.tfevents.{}.{}", seconds, host))
          .string();
  for (int n = 0; file_ == nullptr; ++n) {
    path_ = n == 0 ? base : fmt::format("{}.{}", base, n);
    file_ = std::fopen(path_.c_str(), "wbx");  // "x": never append to another writer's file
    if (file_ == nullptr && (errno != EEXIST || n >= 1000)) throw Error(open_failure(path_));
  }
  ProtoWriter event;
  event.double_field(1, wall_time());
  event.bytes_field(3, "brain.Event:2");
  try {
    write_event(event.bytes());
    flush();
  } catch (...) {
    std::fclose(file_);  // the destructor does not run for a throwing constructor
    throw;
  }
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventWriter::add_scalar(const std::string& tag, float value, int64_t step) {
  ProtoWriter v;
  v.bytes_field(1, tag);
  v.float_field(2, value);
  write_event(event_with_value(v, step));
}

void EventWriter::add_histogram(const std::string& tag, const float* values, size_t n,
                                int64_t step) {
  const std::vector<double>& limits = histogram_bucket_limits();
  const PositiveLimits& positive = positive_limits();
  std::vector<double> counts(limits.size(), 0.0);
  double min = DBL_MAX, max = -DBL_MAX, num = 0, sum = 0, sum_squares = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = values[i];
    if (!std::isfinite(x)) continue;
    // Bucket i holds [limits[i-1], limits[i]).
    counts[std::min(positive.bucket(x), limits.size() - 1)] += 1;
    min = std::min(min, x);
    max = std::max(max, x);
    num += 1;
    sum += x;
    sum_squares += x * x;
  }
  if (num == 0) min = max = 0;
  // Only non-empty buckets are stored; an empty one is inserted before a bucket whose left edge is
  // not the previous stored limit, so that readers still see where each bucket starts.
  std::vector<double> bucket_limit, bucket;
  for (size_t b = 0; b < counts.size(); ++b) {
    if (counts[b] == 0) continue;
    const double left = b == 0 ? -DBL_MAX : limits[b - 1];
    if (b > 0 && (bucket_limit.empty() || bucket_limit.back() != left)) {
      bucket_limit.push_back(left);
      bucket.push_back(0);
    }
    bucket_limit.push_back(limits[b]);
    bucket.push_back(counts[b]);
  }
  ProtoWriter histo;
  histo.double_field(1, min);
  histo.double_field(2, max);
  histo.double_field(3, num);
  histo.double_field(4, sum);
  histo.double_field(5, sum_squares);
  histo.packed_doubles(6, bucket_limit);
  histo.packed_doubles(7, bucket);
  ProtoWriter v;
  v.bytes_field(1, tag);
  v.bytes_field(5, histo.bytes());
  write_event(event_with_value(v, step));
}

void EventWriter::add_image(const std::string& tag, const uint8_t* pixels, int height, int width,
                            int channels, int64_t step) {
  std::vector<uint8_t> png = png_encode(pixels, height, width, channels);
  add_encoded_image(tag, png, height, width, channels, step);
}

void EventWriter::add_encoded_image(const std::string& tag, std::span<const uint8_t> encoded,
                                    int height, int width, int channels, int64_t step) {
  ProtoWriter image;
  image.int_field(1, height);
  image.int_field(2, width);
  image.int_field(3, channels);  // colorspace: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  image.bytes_field(
      4, std::string_view(reinterpret_cast<const char*>(encoded.data()), encoded.size()));
  ProtoWriter v;
  v.bytes_field(1, tag);
  v.bytes_field(4, image.bytes());
  write_event(event_with_value(v, step));
}

void EventWriter::flush() {
  std::lock_guard lock(mutex_);
  if (std::fflush(file_) != 0)
    fail("cannot write TensorBoard event file '{}': {}", path_, std::strerror(errno));
}

// TFRecord framing: length (u64 LE), masked CRC-32C of the length, data, masked CRC-32C of data.
void EventWriter::write_event(const std::string& event) {
  uint8_t header[12];
  const uint64_t length = event.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<uint8_t>(length >> (8 * i));
  const uint32_t length_crc = crc32c_mask(crc32c(header, 8));
  const uint32_t data_crc = crc32c_mask(crc32c(event.data(), event.size()));
  uint8_t footer[4];
  for (int i = 0; i < 4; ++i) {
    header[8 + i] = static_cast<uint8_t>(length_crc >> (8 * i));
    footer[i] = static_cast<uint8_t>(data_crc >> (8 * i));
  }
  std::lock_guard lock(mutex_);
  if (std::fwrite(header, 1, sizeof(header), file_) != sizeof(header) ||
      std::fwrite(event.data(), 1, event.size(), file_) != event.size() ||
      std::fwrite(footer, 1, sizeof(footer), file_) != sizeof(footer))
    fail("cannot write TensorBoard event file '{}': {}", path_, std::strerror(errno));
}

}  // namespace tower
