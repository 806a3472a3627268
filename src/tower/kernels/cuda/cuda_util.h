// Shared by the CUDA kernels' .cc files: the tower's stream and device, the plain "function of the
// io on the stream" kernel, and (cuda_check.h) status checks. The .cu files use launch.cuh.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "tower/kernels/cuda/cuda_check.h"
#include "tower/kernels/kernel.h"

namespace tower::cuda {

inline cudaStream_t stream_of(const KernelContext& context) {
  return static_cast<cudaStream_t>(context.stream);
}
// Makes `device` current on the calling thread (kernels are built and run on tower threads).
void use_device(const Device& device);

// One library handle per stream, shared by the kernels that run on it (a cuDNN handle is slow to
// create, a cuBLAS one reserves a workspace); the last of those kernels destroys it, before the
// program destroys its stream. `create` returns a handle bound to the stream.
template <typename Create, typename Destroy>
auto shared_handle(cudaStream_t stream, Create create, Destroy destroy) {
  using Pointee = std::remove_pointer_t<decltype(create())>;
  static std::mutex mutex;
  static std::map<cudaStream_t, std::weak_ptr<Pointee>> handles;
  std::lock_guard<std::mutex> lock(mutex);
  std::weak_ptr<Pointee>& slot = handles[stream];
  if (std::shared_ptr<Pointee> handle = slot.lock()) return handle;
  std::shared_ptr<Pointee> handle(create(), destroy);
  slot = handle;
  return handle;
}

// KernelIO is const in run(), but its output tensors are views meant for writing.
template <typename T = float>
T* output_of(const KernelIO& io, size_t index = 0) {
  return io.outputs[index].data<T>();
}

// A kernel whose run() is a function of the node, the io and the stream (no per-shape state).
class StreamKernel : public Kernel {
 public:
  using Fn = std::function<void(const Node&, const KernelIO&, cudaStream_t)>;
  StreamKernel(const Node& node, cudaStream_t stream, Fn fn)
      : node_(node), stream_(stream), fn_(std::move(fn)) {}
  void run(const KernelIO& io) override { fn_(node_, io, stream_); }

 private:
  const Node& node_;
  cudaStream_t stream_;
  Fn fn_;
};

inline KernelFactory stream_kernel(StreamKernel::Fn fn) {
  return [fn](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
    use_device(context.device);
    return std::make_unique<StreamKernel>(node, stream_of(context), fn);
  };
}

}  // namespace tower::cuda
