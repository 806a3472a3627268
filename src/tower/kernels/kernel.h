// The device implementation of an op. Kernels are made once, when a Program is compiled, and
// run many times: everything that depends only on shapes (oneDNN primitive descriptors and
// primitives, workspace sizes) is built in the factory; run() only computes.
//
// Life of a kernel:
//   1. factory(node, context)  -> kernel; scratch_bytes() says how much temporary memory it needs.
//   2. the runtime plans memory and calls bind(io) once with the final buffers (fixed addresses
//      for the life of the Program), so a kernel may prepare per-buffer state there.
//   3. run(io) every step, with the same io.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tower/core/device.h"
#include "tower/core/tensor.h"
#include "tower/graph/graph.h"

namespace tower {

struct KernelIO {
  std::vector<Tensor> inputs;   // views of the input buffers (const by convention)
  std::vector<Tensor> outputs;  // views of the output buffers
  void* scratch = nullptr;      // scratch_bytes() bytes, 64-byte aligned, valid during run()
  uint64_t step = 0;            // the training step (keys per-step randomness, e.g. dropout)
};

// What a kernel may know about where it runs.
struct KernelContext {
  Device device;
  int num_threads = 1;  // the device's thread team size
  void* stream = nullptr;  // CUDA: the tower's cudaStream_t, on which kernels run (null: default)
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual size_t scratch_bytes() const { return 0; }
  virtual void bind(const KernelIO& io) {}
  virtual void run(const KernelIO& io) = 0;
};

using KernelFactory =
    std::function<std::unique_ptr<Kernel>(const Node& node, const KernelContext& context)>;

// Registration, one per (op, device kind): a static KernelRegistrar in the kernel's file.
struct KernelRegistrar {
  KernelRegistrar(const std::string& op, DeviceKind kind, KernelFactory factory);
};
const KernelFactory* find_kernel(const std::string& op, DeviceKind kind);
std::vector<std::string> registered_kernels(DeviceKind kind);  // op names, sorted

// Kernels built from a plain function of the io (for simple ops with no per-shape state).
using SimpleKernelFn = std::function<void(const Node& node, const KernelIO& io)>;
KernelFactory simple_kernel(SimpleKernelFn fn);

// Sets the size of the calling thread's compute team (OpenMP), used by every kernel that the
// thread runs afterwards. The runtime calls it before running a Program on a thread.
void set_kernel_threads(int num_threads);

}  // namespace tower
