// What both nvcc and the host compiler see, with no engine header: CUDA status checks that throw
// a tower::Error naming the call and its file:line, a scoped current GPU, and the grid size of
// grid-stride loops. Each family's launchers are declared in kernels/cuda/<family>.h, defined in
// <family>.cu.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>

namespace tower::cuda {

// Each names the call and where it is (the path from src/ on).
void check(cudaError_t status, const char* call, const char* file, int line);
void check(cudnnStatus_t status, const char* call, const char* file, int line);
void check(cublasStatus_t status, const char* call, const char* file, int line);
#define TOWER_CUDA_CHECK(call) ::tower::cuda::check((call), #call, __FILE__, __LINE__)

// Makes a GPU current for a scope and gives the thread its previous one back (a negative index:
// leaves the current one).
struct DeviceGuard {
  explicit DeviceGuard(int device) {
    TOWER_CUDA_CHECK(cudaGetDevice(&previous));
    if (device >= 0) TOWER_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  int previous = 0;
};
// The GPU that holds `ptr`, or -1 for host memory.
int device_of(const void* ptr);

// Blocks of `threads` for a grid-stride loop over n items (at least 1, at most 65535).
inline unsigned grid_blocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace tower::cuda
