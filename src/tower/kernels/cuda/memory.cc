// CUDA devices for the core: memory through a caching allocator per GPU (a training loop frees
// and allocates the same sizes, so after the first step nothing reaches cudaMalloc) and streams,
// registered when this library is loaded; plus the status checks of cuda_check.h.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "tower/core/allocator.h"
#include "tower/kernels/cuda/cuda_util.h"

namespace tower::cuda {

namespace {
const char* source_path(const char* file) {
  const char* src = std::strstr(file, "src/");
  return src != nullptr ? src : file;
}
}  // namespace

void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    fail("CUDA error in {} at {}:{}: {}", call, source_path(file), line,
         cudaGetErrorString(status));
}
void check(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS)
    fail("cuDNN error in {} at {}:{}: {}", call, source_path(file), line,
         cudnnGetErrorString(status));
}
void check(cublasStatus_t status, const char* call, const char* file, int line) {
  // (cuBLAS is opened on demand, see matmul.cc: its status text is not at hand here.)
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS error in {} at {}:{}: status {}", call, source_path(file), line,
         static_cast<int>(status));
}

void use_device(const Device& device) {
  if (device.kind == DeviceKind::cuda) TOWER_CUDA_CHECK(cudaSetDevice(device.index));
}

int device_of(const void* ptr) {
  cudaPointerAttributes attributes{};
  TOWER_CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged
             ? attributes.device
             : -1;
}

namespace {

// Freed blocks are handed out again at once, without tracking streams: every tensor is freed
// after the work that uses it is done (programs synchronize at the end of run() and before they
// go; copies and fills complete before returning).
class CachingAllocator {
 public:
  void* allocate(int index, size_t bytes) {
    const size_t size = round(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free = free_[index];
      auto it = free.find(size);
      if (it != free.end()) {
        void* ptr = it->second;
        free.erase(it);
        return ptr;
      }
    }
    int previous = 0;
    TOWER_CUDA_CHECK(cudaGetDevice(&previous));
    TOWER_CUDA_CHECK(cudaSetDevice(index));
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {  // give the cached blocks back, then try once more
      (void)cudaGetLastError();
      release(index);
      status = cudaMalloc(&ptr, size);
    }
    cudaSetDevice(previous);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      fail("out of memory on cuda:{}: could not allocate {} bytes ({})", index, bytes,
           cudaGetErrorString(status));
    }
    return ptr;
  }

  void deallocate(int index, void* ptr, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[index].emplace(round(bytes), ptr);
  }

 private:
  // Small blocks by 512 B, large ones by 2 MiB: few distinct sizes, little waste.
  static size_t round(size_t bytes) {
    const size_t unit = bytes < (1u << 20) ? 512 : (2u << 20);
    return (std::max<size_t>(bytes, 1) + unit - 1) / unit * unit;
  }
  void release(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, ptr] : free_[index]) cudaFree(ptr);
    free_[index].clear();
  }
  std::mutex mutex_;
  std::map<int, std::multimap<size_t, void*>> free_;
};

CachingAllocator& caching_allocator() {
  static auto* allocator = new CachingAllocator();  // outlives tensors freed at exit
  return *allocator;
}

const bool registered = [] {
  register_device_ops(
      DeviceKind::cuda,
      {.allocate = [](int index,
                      size_t bytes) { return caching_allocator().allocate(index, bytes); },
       .deallocate = [](int index, void* ptr,
                        size_t bytes) { caching_allocator().deallocate(index, ptr, bytes); },
       // Copies and fills run on the default stream of the GPU that holds the memory (whichever
       // GPU the calling thread has current) and complete before returning: the towers' streams
       // do not wait for the default stream, so nothing may still be in flight when a kernel
       // reads the buffer.
       .copy =
           [](void* dst, const void* src, size_t bytes) {
             const int dst_device = device_of(dst);
             DeviceGuard guard(dst_device >= 0 ? dst_device : device_of(src));
             TOWER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, nullptr));
             TOWER_CUDA_CHECK(cudaStreamSynchronize(nullptr));
           },
       .zero =
           [](void* ptr, size_t bytes) {
             DeviceGuard guard(device_of(ptr));
             TOWER_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, nullptr));
             TOWER_CUDA_CHECK(cudaStreamSynchronize(nullptr));
           },
       .create_stream = [](int index) -> void* {
         DeviceGuard guard(index);
         cudaStream_t stream = nullptr;
         TOWER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
         return stream;
       },
       .destroy_stream =
           [](void* stream) {  // called from destructors: throws nothing
             int previous = 0, device = -1;
             cudaGetDevice(&previous);
             if (cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &device) == cudaSuccess)
               cudaSetDevice(device);
             cudaStreamDestroy(static_cast<cudaStream_t>(stream));
             cudaSetDevice(previous);
           },
       .synchronize =
           [](void* stream) {
             TOWER_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
           },
       .make_current = [](int index) { TOWER_CUDA_CHECK(cudaSetDevice(index)); },
       .host_alloc = [](size_t bytes) -> void* {
         void* ptr = nullptr;
         TOWER_CUDA_CHECK(cudaMallocHost(&ptr, std::max<size_t>(bytes, 1)));
         return ptr;
       },
       .host_free = [](void* ptr) { cudaFreeHost(ptr); },
       .copy_async =
           [](void* dst, const void* src, size_t bytes, void* stream) {
             TOWER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                              static_cast<cudaStream_t>(stream)));
           }});
  return true;
}();

}  // namespace
}  // namespace tower::cuda
