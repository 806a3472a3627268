#include "tower/core/allocator.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "tower/core/error.h"

namespace tower {

namespace {
DeviceOps g_cuda_ops{};
}

void register_device_ops(DeviceKind kind, DeviceOps ops) {
  TOWER_CHECK(kind == DeviceKind::cuda);
  g_cuda_ops = ops;
}

const DeviceOps& device_ops(DeviceKind kind) {
  if (kind != DeviceKind::cuda || g_cuda_ops.allocate == nullptr)
    fail(
        "this build of tower has no CUDA backend (configure with -DTOWER_CUDA=ON on a machine "
        "with the CUDA toolkit)");
  return g_cuda_ops;
}

bool has_device_ops(DeviceKind kind) {
  return kind == DeviceKind::cpu || g_cuda_ops.allocate != nullptr;
}

void* Allocator::allocate(size_t bytes) {
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = device_.kind == DeviceKind::cpu
                  ? std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded)
                  : device_ops(device_.kind).allocate(device_.index, rounded);
  if (ptr == nullptr)
    fail("out of memory on {}: could not allocate {} bytes", device_.to_string(), bytes);
  num_allocations_.fetch_add(1, std::memory_order_relaxed);
  int64_t now = bytes_in_use_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = peak_bytes_in_use_.load();
  while (now > peak && !peak_bytes_in_use_.compare_exchange_weak(peak, now)) {
  }
  return ptr;
}

void Allocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  if (device_.kind == DeviceKind::cpu)
    std::free(ptr);
  else
    device_ops(device_.kind)
        .deallocate(device_.index, ptr, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  bytes_in_use_.fetch_sub(static_cast<int64_t>(bytes));
}

Allocator::Counters Allocator::counters() const {
  return {num_allocations_.load(), bytes_in_use_.load(), peak_bytes_in_use_.load()};
}

Allocator& allocator_for(Device device) {
  static std::mutex mutex;
  // Leaked on purpose: tensors in static storage may be freed after main returns.
  static auto* allocators = new std::map<std::pair<int, int>, std::unique_ptr<Allocator>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*allocators)[{static_cast<int>(device.kind), device.index}];
  if (!slot) slot = std::make_unique<Allocator>(device);
  return *slot;
}

}  // namespace tower
