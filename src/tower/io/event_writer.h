// TensorBoard event files: `tensorboard --logdir <dir>` shows what an EventWriter writes there.
// The file is a TFRecord stream of hand-encoded `Event` protocol buffers; see event_writer.cc.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace tower {

class EventWriter {
 public:
  // Creates `dir` if needed and a new file events.out.tfevents.<unix seconds>.<hostname> in it
  // (with a ".<n>" suffix if another writer took that name within the same second).
  explicit EventWriter(const std::string& dir);
  ~EventWriter();  // flushes; errors are dropped there, call flush() to see them
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  const std::string& path() const { return path_; }

  void add_scalar(const std::string& tag, float value, int64_t step);
  // A histogram over TensorFlow's default exponential buckets (±1e-12 · 1.1^k, and 0); NaN and
  // infinite values are left out, since a histogram cannot place them.
  void add_histogram(const std::string& tag, const float* values, size_t n, int64_t step);
  // HWC uint8 pixels with 1 (gray), 2, 3 (RGB) or 4 (RGBA) channels, PNG-encoded here.
  void add_image(const std::string& tag, const uint8_t* pixels, int height, int width, int channels,
                 int64_t step);
  // An image already encoded (PNG or JPEG); height, width and channels describe it.
  void add_encoded_image(const std::string& tag, std::span<const uint8_t> encoded, int height,
                         int width, int channels, int64_t step);
  // Makes everything added so far visible to readers; throws tower::Error naming the file.
  void flush();

 private:
  void write_event(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
  std::mutex mutex_;  // hooks may write summaries from more than one thread
};

// TensorFlow's default histogram bucket limits: 0, ±1e-12 · 1.1^k up to 1e20, and ±DBL_MAX.
const std::vector<double>& histogram_bucket_limits();
// The bucket of a finite x among them: the index of the first limit above x (std::upper_bound),
// found without a search.
size_t histogram_bucket(double x);

}  // namespace tower
