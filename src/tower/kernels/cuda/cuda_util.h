// Shared by the CUDA kernels: the tower's stream and device, the plain "function of the io on the
// stream" kernel, and (launch.h) status checks and the launchers of the .cu kernels.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "tower/kernels/cuda/launch.h"
#include "tower/kernels/kernel.h"

namespace tower::cuda {

inline cudaStream_t stream_of(const KernelContext& context) {
  return static_cast<cudaStream_t>(context.stream);
}
// Makes `device` current on the calling thread (kernels are built and run on tower threads).
void use_device(const Device& device);

// KernelIO is const in run(), but its output tensors are views meant for writing.
template <typename T = float>
T* output_of(const KernelIO& io, size_t index = 0) {
  return const_cast<Tensor&>(io.outputs[index]).data<T>();
}

// A kernel whose run() is a function of the node, the io and the stream (no per-shape state).
class StreamKernel : public Kernel {
 public:
  using Fn = std::function<void(const Node&, const KernelIO&, cudaStream_t)>;
  StreamKernel(const Node& node, cudaStream_t stream, Fn fn) : node_(node), stream_(stream), fn_(std::move(fn)) {}
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
