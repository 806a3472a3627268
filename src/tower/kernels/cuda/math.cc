// CUDA kernels of the math ops (math.cu): Add/Sub/Mul with a broadcast operand, Scale, Square,
// AddN, Reshape; ReduceSum, SumToShape, L2Loss and BroadcastTo. For the sums and the broadcast,
// as in the CPU kernels, size-1 axes are dropped and neighbouring axes of the same kind (kept /
// reduced, resp. copied / broadcast) merged; the launch plan is fixed when the kernel is built.
#include "tower/kernels/cuda/math.h"

#include <algorithm>

#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/math.h"

namespace tower::cuda {
namespace {

const float* in(const KernelIO& io, size_t i) { return io.inputs[i].data<float>(); }

using BinaryLaunch = void (*)(const float* a, const float* b, float* y, int64_t n, int64_t inner,
                              cudaStream_t stream);
KernelFactory binary(BinaryLaunch launch) {
  return stream_kernel([launch](const Node&, const KernelIO& io, cudaStream_t s) {
    launch(in(io, 0), in(io, 1), output_of(io), io.inputs[0].numel(), io.inputs[1].numel(), s);
  });
}

KernelRegistrar add{"Add", DeviceKind::cuda, binary(launch_add)};
KernelRegistrar sub{"Sub", DeviceKind::cuda, binary(launch_sub)};
KernelRegistrar mul{"Mul", DeviceKind::cuda, binary(launch_mul)};

KernelRegistrar scale{"Scale", DeviceKind::cuda,
                      stream_kernel([](const Node& node, const KernelIO& io, cudaStream_t s) {
                        launch_scale(in(io, 0), output_of(io), io.outputs[0].numel(),
                                     node.attr<ops::ScaleAttrs>().factor, s);
                      })};
KernelRegistrar square{"Square", DeviceKind::cuda,
                       stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
                         launch_square(in(io, 0), output_of(io), io.outputs[0].numel(), s);
                       })};

// Summed in input order, like the CPU kernel.
KernelRegistrar add_n{"AddN", DeviceKind::cuda,
                      stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
                        const int64_t n = io.outputs[0].numel();
                        launch_copy(in(io, 0), output_of(io), n, s);
                        for (size_t k = 1; k < io.inputs.size(); ++k)
                          launch_accumulate(in(io, k), output_of(io), n, s);
                      })};

KernelRegistrar reshape{
    "Reshape", DeviceKind::cuda, stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
      const void* x = io.inputs[0].raw_data();
      void* y = io.outputs[0].raw_data();
      if (x != y)
        TOWER_CUDA_CHECK(
            cudaMemcpyAsync(y, x, io.outputs[0].nbytes(), cudaMemcpyDeviceToDevice, s));
    })};

constexpr int64_t kPerThreadMinOutputs = 1024;  // one thread per output from this many outputs
constexpr int64_t kChunkElements = 32768;  // reduced elements per block when blocks split a sum
constexpr int64_t kMaxChunks = 256;

// Runs of equal kind over the axes of `shape` that are not 1, innermost last.
struct Runs {
  std::vector<int64_t> sizes;
  std::vector<char> kinds;
};
Runs merge_runs(const Shape& shape, const std::vector<char>& kind_of_axis) {
  Runs runs;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    const char kind = kind_of_axis[static_cast<size_t>(d)];
    if (!runs.kinds.empty() && runs.kinds.back() == kind) {
      runs.sizes.back() *= shape[d];
    } else {
      runs.sizes.push_back(shape[d]);
      runs.kinds.push_back(kind);
    }
  }
  return runs;
}

void push_front(Box& box, int64_t size, int64_t stride, const Node& node) {
  if (box.rank == kMaxBoxDims)
    fail("{} ({}): {} alternating runs of axes are more than the CUDA kernel's {}", node.name,
         node.op, box.rank + 1, kMaxBoxDims);
  for (int d = box.rank; d > 0; --d) {
    box.sizes[d] = box.sizes[d - 1];
    box.strides[d] = box.strides[d - 1];
  }
  box.sizes[0] = size;
  box.strides[0] = stride;
  ++box.rank;
}

// Sums a contiguous input (or its squares) over the axes marked in `reduced`, times `scale`.
class ReduceKernel : public Kernel {
 public:
  enum class Of { values, squares };
  ReduceKernel(const Node& node, const KernelContext& context, const std::vector<char>& reduced,
               Of of, double scale)
      : stream_(stream_of(context)), numel_(node.inputs[0].shape().numel()) {
    const bool square = of == Of::squares;
    use_device(context.device);
    plan_.square = square;
    plan_.scale = scale;
    const Runs runs = merge_runs(node.inputs[0].shape(), reduced);
    int64_t stride = 1;
    for (size_t d = runs.sizes.size(); d-- > 0;) {
      push_front(runs.kinds[d] ? plan_.reduced : plan_.kept, runs.sizes[d], stride, node);
      stride *= runs.sizes[d];
    }
    copy_ = plan_.reduced.rank == 0 && !square;
    const int64_t num_kept = plan_.kept.numel(), num_reduced = plan_.reduced.numel();
    const bool inner_kept = plan_.kept.rank > 0 && plan_.kept.strides[plan_.kept.rank - 1] == 1;
    plan_.per_thread = (inner_kept && num_kept >= kPerThreadMinOutputs) ||
                       plan_.reduced.rank == 0 || num_kept > (int64_t{1} << 30);
    if (!plan_.per_thread && num_kept < kPerThreadMinOutputs)
      plan_.chunks = static_cast<int>(
          std::clamp((num_reduced + kChunkElements - 1) / kChunkElements, int64_t{1}, kMaxChunks));
  }

  size_t scratch_bytes() const override {
    return plan_.chunks > 1
               ? static_cast<size_t>(plan_.kept.numel() * plan_.chunks) * sizeof(double)
               : 0;
  }

  void run(const KernelIO& io) override {
    float* y = output_of(io);
    if (numel_ == 0) {
      TOWER_CUDA_CHECK(cudaMemsetAsync(y, 0, io.outputs[0].nbytes(), stream_));
    } else if (copy_) {
      if (y != io.inputs[0].data<float>())
        TOWER_CUDA_CHECK(cudaMemcpyAsync(y, io.inputs[0].data<float>(), io.outputs[0].nbytes(),
                                         cudaMemcpyDeviceToDevice, stream_));
    } else {
      launch_reduce_sum(io.inputs[0].data<float>(), y, static_cast<double*>(io.scratch), plan_,
                        stream_);
    }
  }

 private:
  cudaStream_t stream_;
  int64_t numel_;
  bool copy_ = false;
  ReducePlan plan_;
};

KernelRegistrar reduce_sum{
    "ReduceSum", DeviceKind::cuda, [](const Node& node, const KernelContext& context) {
      return std::unique_ptr<Kernel>(std::make_unique<ReduceKernel>(
          node, context, ops::summed_axes(node), ReduceKernel::Of::values, 1.0));
    }};
KernelRegistrar sum_to_shape{
    "SumToShape", DeviceKind::cuda, [](const Node& node, const KernelContext& context) {
      return std::unique_ptr<Kernel>(std::make_unique<ReduceKernel>(
          node, context, ops::summed_axes(node), ReduceKernel::Of::values, 1.0));
    }};
// sum(x^2) / 2 in double, like the CPU kernel.
KernelRegistrar l2_loss{
    "L2Loss", DeviceKind::cuda, [](const Node& node, const KernelContext& context) {
      const std::vector<char> all(static_cast<size_t>(node.inputs[0].shape().rank()), 1);
      return std::unique_ptr<Kernel>(
          std::make_unique<ReduceKernel>(node, context, all, ReduceKernel::Of::squares, 0.5));
    }};

// NumPy broadcast of a contiguous input: one thread per output element.
class BroadcastKernel : public Kernel {
 public:
  BroadcastKernel(const Node& node, const KernelContext& context) : stream_(stream_of(context)) {
    use_device(context.device);
    const Shape& in = node.inputs[0].shape();
    const Shape& out = node.attr<ops::ShapeAttrs>().shape;
    out_numel_ = out.numel();
    const int pad = out.rank() - in.rank();
    std::vector<char> broadcast(static_cast<size_t>(out.rank()));
    for (int d = 0; d < out.rank(); ++d)
      broadcast[static_cast<size_t>(d)] = d < pad || in[d - pad] == 1;
    const Runs runs = merge_runs(out, broadcast);
    int64_t stride = 1;
    for (size_t d = runs.sizes.size(); d-- > 0;) {
      push_front(box_, runs.sizes[d], runs.kinds[d] ? 0 : stride, node);
      if (!runs.kinds[d]) stride *= runs.sizes[d];
    }
  }

  void run(const KernelIO& io) override {
    if (out_numel_ == 0) return;
    launch_broadcast(io.inputs[0].data<float>(), output_of(io), box_, stream_);
  }

 private:
  cudaStream_t stream_;
  int64_t out_numel_ = 0;
  Box box_;
};

KernelRegistrar broadcast_to{
    "BroadcastTo", DeviceKind::cuda, [](const Node& node, const KernelContext& context) {
      return std::unique_ptr<Kernel>(std::make_unique<BroadcastKernel>(node, context));
    }};

}  // namespace
}  // namespace tower::cuda
