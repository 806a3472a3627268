#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tower/core/device.h"

namespace tower {

// Memory of one device, 64-byte aligned, with counters so tests can assert that a training step
// allocates nothing (take counters() before and after; the allocation count must not move).
class Allocator {
 public:
  struct Counters {
    int64_t num_allocations = 0;  // calls to allocate() since start
    int64_t bytes_in_use = 0;
    int64_t peak_bytes_in_use = 0;
  };
  static constexpr size_t kAlignment = 64;

  explicit Allocator(Device device) : device_(device) {}
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  void* allocate(size_t bytes);  // throws tower::Error when memory runs out
  void deallocate(void* ptr, size_t bytes);
  Counters counters() const;
  Device device() const { return device_; }

 private:
  Device device_;
  std::atomic<int64_t> num_allocations_{0};
  std::atomic<int64_t> bytes_in_use_{0};
  std::atomic<int64_t> peak_bytes_in_use_{0};
};

// The process-wide allocator of a device (created on first use, lives until exit).
Allocator& allocator_for(Device device);

// How a non-host device kind is reached: its memory and its streams. A backend (CUDA) registers
// its functions when its library is loaded; in a build without it, using such a device is a clear
// error.
struct DeviceOps {
  void* (*allocate)(int index, size_t bytes);  // throws tower::Error when out of memory
  void (*deallocate)(int index, void* ptr, size_t bytes);
  void (*copy)(void* dst, const void* src, size_t bytes);  // any direction, host or device
  void (*zero)(void* ptr, size_t bytes);
  void* (*create_stream)(int index);  // an in-order queue of work on the device
  void (*destroy_stream)(void* stream);
  void (*synchronize)(void* stream);  // waits until the stream's work is done
  void (*make_current)(int index);    // the calling thread's kernels go to this device
  void* (*host_alloc)(size_t bytes);  // page-locked host memory, for asynchronous copies
  void (*host_free)(void* ptr);
  void (*copy_async)(void* dst, const void* src, size_t bytes, void* stream);  // ordered on stream
};
void register_device_ops(DeviceKind kind, DeviceOps ops);
const DeviceOps& device_ops(DeviceKind kind);  // throws if none is registered
bool has_device_ops(DeviceKind kind);          // this build has the backend

}  // namespace tower
