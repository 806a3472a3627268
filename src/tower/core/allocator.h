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

}  // namespace tower
