// The device implementation of an op. Kernels are made once, when a Program is compiled, and
// run many times: everything that depends only on shapes (oneDNN primitive descriptors and
// primitives, workspace sizes) is built in the factory; run() only computes.
//
// Life of a kernel:
//   1. factory(node, context)  -> kernel; scratch_bytes() says how much temporary memory it needs.
//   2. the runtime plans memory and calls bind(io) once with the final buffers (fixed addresses
//      for the life of the Program), so a kernel may prepare per-buffer state there.
//   3. run(io) every step, with the same io.
//
// Layouts: a kernel may read and write device formats other than plain row-major (oneDNN's
// blocked ones, which convolutions need). The runtime tells the factory the layout each input
// will arrive in (KernelContext::input_layouts); the kernel answers with the layout it reads each
// input in (input_layout) and writes each output in (output_layout). Where a value's producer
// and a consumer disagree, the runtime converts it with a reorder kernel into a planned buffer,
// so consecutive kernels that agree exchange blocked values with no conversion at all.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tower/core/device.h"
#include "tower/core/tensor.h"
#include "tower/graph/graph.h"

namespace tower {

// How a value's elements lie in its buffer. Plain (dense row-major over the shape, the default) is
// what everything outside a Program sees; a Format is a device-specific one, implemented next to
// the kernels that use it (possibly padded: its buffer may be larger than the plain one).
class Layout {
 public:
  class Format {
   public:
    virtual ~Format() = default;
    virtual size_t bytes() const = 0;  // the buffer size, padding included
    virtual bool equals(const Format& other) const = 0;
  };

  Layout() = default;
  explicit Layout(std::shared_ptr<const Format> format) : format_(std::move(format)) {}
  bool is_plain() const { return format_ == nullptr; }
  const Format* format() const { return format_.get(); }
  size_t bytes(const TensorSpec& spec) const;
  bool operator==(const Layout& other) const;

 private:
  std::shared_ptr<const Format> format_;
};

// Views of the buffers (tensors with the node's logical shape; for a non-plain layout, the shape
// only names the value: the elements lie as the layout says).
struct KernelIO {
  std::vector<Tensor> inputs;  // views of the input buffers (read only, but for in-place updates)
  // Views of the output buffers: writable through the const KernelIO that run() gets.
  mutable std::vector<Tensor> outputs;
  void* scratch = nullptr;  // scratch_bytes() bytes, 64-byte aligned, valid during run()
  uint64_t step = 0;        // the training step (keys per-step randomness, e.g. dropout)
};

// What a kernel may know about where it runs.
struct KernelContext {
  Device device;
  int num_threads = 1;                // the device's thread team size
  void* stream = nullptr;             // CUDA: the tower's cudaStream_t, on which kernels run
  std::vector<Layout> input_layouts;  // how each input arrives (empty: all plain)
  // Only algorithms that give the same bits run after run (CPU kernels always do; cuDNN offers
  // faster ones that accumulate with atomics).
  bool deterministic = true;
  Precision precision = Precision::fp32;  // bf16: convolutions and matmuls multiply in bf16
  // The threads that may run the kernel's tasks at once in Program's contended mode: the team, or
  // the threads of a ProgramGroup (kernels take the larger of this and num_threads). Tasks and
  // their scratch are sized for them.
  int members = 1;

  const Layout& input_layout(size_t i) const {
    static const Layout plain;
    return i < input_layouts.size() ? input_layouts[i] : plain;
  }
};

// Which pass a kernel computes, for kernels that serve an op and its gradient.
enum class Pass { forward, backward };

// How a kernel runs in Program's contended mode (Kernel::tasks).
struct Tasks {
  enum class Kind {
    one,    // run() on one member, whose OpenMP loops then run on it alone
    team,   // run() needs the whole team (a library primitive that splits its work over the team
            // it was built for): contended mode is off for the program
    split,  // `count` independent tasks (run_task)
  };
  Kind kind = Kind::one;
  int count = 1;
  static Tasks one() { return {}; }
  static Tasks team() { return {Kind::team, 1}; }
  static Tasks split(int count) { return count > 1 ? Tasks{Kind::split, count} : one(); }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual size_t scratch_bytes() const { return 0; }
  virtual void bind(const KernelIO& io) {}
  virtual void run(const KernelIO& io) = 0;
  // The layouts the kernel reads input i and writes output o in, fixed by the factory.
  virtual Layout input_layout(int i) const { return {}; }
  virtual Layout output_layout(int o) const { return {}; }
  // Asked by the runtime (before scratch_bytes() and bind()) when output o is read only through a
  // conversion into `layout`: true when the kernel will write `layout` itself from now on, so that
  // the conversion is dropped (a bf16 copy written directly, say).
  virtual bool write_output_as(int o, const Layout& layout) { return false; }
  // An input whose buffer output 0 may take when nothing reads the input after this kernel (a
  // residual that the kernel adds its result to): the runtime may then give both one address.
  virtual int output_in_place_of() const { return -1; }

  // For Program's contended mode, where the members of the team take work from the kernels as it
  // becomes ready: how this kernel may be run (Tasks below). Split kernels are run as count
  // independent tasks that any member may run, in any order and at once (run_task(io, task,
  // member)), and then finish_tasks() on one member.
  virtual Tasks tasks() const { return Tasks::one(); }
  virtual void run_task(const KernelIO& io, int task, int member) { run(io); }
  virtual void finish_tasks(const KernelIO& io) {}
};

using KernelFactory =
    std::function<std::unique_ptr<Kernel>(const Node& node, const KernelContext& context)>;

// Registration, one per (op, device kind): a static KernelRegistrar in the kernel's file.
struct KernelRegistrar {
  KernelRegistrar(const std::string& op, DeviceKind kind, KernelFactory factory);
};
const KernelFactory* find_kernel(const std::string& op, DeviceKind kind);
// A kernel for a chain of nodes that the runtime fuses ("Conv2D+BiasAdd+Relu": the first node's
// inputs and attributes, then the other inputs of the chain in order; the last node's outputs).
inline bool is_fused_kernel(const std::string& op) { return op.find('+') != std::string::npos; }
std::vector<std::string> registered_kernels(DeviceKind kind);  // op names, sorted

// Converts a value between two layouts (`from` != `to`): io.inputs[0] -> io.outputs[0]. One per
// device kind that has non-plain layouts, registered by its kernels.
using ReorderFactory = std::function<std::unique_ptr<Kernel>(const Value& value, const Layout& from,
                                                             const Layout& to)>;
struct ReorderRegistrar {
  ReorderRegistrar(DeviceKind kind, ReorderFactory factory);
};
const ReorderFactory* find_reorder(DeviceKind kind);

// Kernels built from a plain function of the io (for simple ops with no per-shape state).
using SimpleKernelFn = std::function<void(const Node& node, const KernelIO& io)>;
KernelFactory simple_kernel(SimpleKernelFn fn);

// Sets the size of the calling thread's compute team (OpenMP), used by every kernel that the
// thread runs afterwards. Programs set their own (KernelThreadsScope) while they build their
// kernels, since oneDNN fixes a primitive's thread count when it is created, and while they run.
void set_kernel_threads(int num_threads);
int kernel_threads();  // the calling thread's team size
// The operating system's ids of the threads of the calling thread's team of `threads` (the
// caller's first), for reading their scheduler statistics.
std::vector<int> kernel_team_tids(int threads);
// Runs fn(member) on every member of a team of `threads` (the calling thread is member 0) at once
// and returns when all are done. The kernels they run meanwhile run on the member alone.
void run_on_team(int threads, const std::function<void(int member)>& fn);
// Subnormals as zero (core/denormals.h) on the members of the calling thread's team of `threads`
// but itself, for good (the caller sets its own for the run: DenormalsAreZero).
void zero_denormals_on_team(int threads);

// set_kernel_threads() for a scope: the thread gets its previous team size back.
class KernelThreadsScope {
 public:
  explicit KernelThreadsScope(int num_threads) : previous_(kernel_threads()) {
    set_kernel_threads(num_threads);
  }
  ~KernelThreadsScope() { set_kernel_threads(previous_); }
  KernelThreadsScope(const KernelThreadsScope&) = delete;
  KernelThreadsScope& operator=(const KernelThreadsScope&) = delete;

 private:
  int previous_;
};

}  // namespace tower
