// CPU kernels of the math family: plain loops the compiler vectorizes, parallel over fixed blocks
// or rows, so that every result is computed in one fixed order whatever the thread count.
#include "tower/ops/math.h"

#include <algorithm>
#include <cstring>

#include "tower/kernels/cpu/clones.h"
#include "tower/kernels/cpu/math.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

constexpr int64_t kBlock = 16384;  // elements per parallel work item (and per partial sum)

// Runs fn(begin, end) over [0, n) in blocks of kBlock elements.
template <typename F>
void for_blocks(int64_t n, F&& fn) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) fn(b * kBlock, std::min(n, (b + 1) * kBlock));
}

// Sum of f(p[i]) in double over 8 lanes (vectorizes, and keeps float inputs exact).
template <typename F>
double sum_contiguous(const float* p, int64_t n, F f) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += f(p[i + l]);
  double tail = 0;
  for (; i < n; ++i) tail += f(p[i]);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
}
constexpr auto identity = [](float v) { return static_cast<double>(v); };

// KernelIO is const in run(), but its output tensors are views meant for writing.
float* output(const KernelIO& io, size_t index = 0) { return io.outputs[index].data<float>(); }

// Offset of the `linear`-th index of a row-major box of `sizes`, walked with `strides`.
int64_t offset_of(int64_t linear, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    offset += (linear % sizes[d]) * strides[d];
    linear /= sizes[d];
  }
  return offset;
}

// ---- elementwise -------------------------------------------------------------------------------

// y = op(a, b) where b is a's shape, a scalar or a's trailing dims (see ops/math.h).
template <typename Op>
void binary(const KernelIO& io, Op op) {
  const float* a = io.inputs[0].data<float>();
  const float* b = io.inputs[1].data<float>();
  float* y = output(io);
  int64_t n = io.inputs[0].numel(), inner = io.inputs[1].numel();
  if (n == 0) return;
  if (inner == n) {
    for_blocks(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = op(a[i], b[i]);
    });
  } else if (inner == 1) {
    float bv = b[0];
    for_blocks(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = op(a[i], bv);
    });
  } else {
    int64_t outer = n / inner;
#pragma omp parallel for schedule(static) if (n > kBlock)
    for (int64_t o = 0; o < outer; ++o) {
      const float* ar = a + o * inner;
      float* yr = y + o * inner;
      for (int64_t j = 0; j < inner; ++j) yr[j] = op(ar[j], b[j]);
    }
  }
}

template <typename F>
void unary(const KernelIO& io, F f) {
  const float* x = io.inputs[0].data<float>();
  float* y = output(io);
  for_blocks(io.inputs[0].numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = f(x[i]);
  });
}

// Add and AddN of same-shape inputs go element by element, so they work in any layout: they take
// the one most inputs come in (plain on a tie), ask for the others in it and write it (a padded
// layout's zeros stay zero), so that residual sums and gradient accumulations between convolutions
// need no conversion. The plain loop then runs over the whole (padded) buffer, seen flat.
class AnyLayoutKernel : public Kernel {
 public:
  AnyLayoutKernel(const Node& node, const KernelContext& context, SimpleKernelFn fn)
      : node_(node), fn_(std::move(fn)) {
    bool same_shapes = true;
    for (const Value& in : node.inputs) same_shapes &= in.shape() == node.outputs[0].shape;
    if (!same_shapes) return;
    auto count = [&](const Layout& layout) {
      int n = 0;
      for (size_t i = 0; i < node.inputs.size(); ++i) n += context.input_layout(i) == layout;
      return n;
    };
    int best = count(layout_);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (int n = count(context.input_layout(i)); n > best) {
        best = n;
        layout_ = context.input_layout(i);
      }
  }
  Layout input_layout(int) const override { return layout_; }
  Layout output_layout(int) const override { return layout_; }
  void bind(const KernelIO& io) override {
    if (layout_.is_plain()) return;
    auto flat = [&](const Tensor& t) {
      Shape shape{static_cast<int64_t>(layout_.bytes(node_.outputs[0]) / sizeof(float))};
      return Tensor::wrap(const_cast<void*>(t.raw_data()), shape, DType::f32, t.device());
    };
    for (const Tensor& t : io.inputs) flat_.inputs.push_back(flat(t));
    for (const Tensor& t : io.outputs) flat_.outputs.push_back(flat(t));
  }
  void run(const KernelIO& io) override { fn_(node_, layout_.is_plain() ? io : flat_); }

 private:
  const Node& node_;
  SimpleKernelFn fn_;
  Layout layout_;
  KernelIO flat_;
};

KernelFactory any_layout_kernel(SimpleKernelFn fn) {
  return [fn = std::move(fn)](const Node& node, const KernelContext& context) {
    return std::make_unique<AnyLayoutKernel>(node, context, fn);
  };
}

KernelRegistrar add_kernel{"Add", DeviceKind::cpu,
                           any_layout_kernel([](const Node&, const KernelIO& io) {
                             binary(io, [](float a, float b) { return a + b; });
                           })};
KernelRegistrar sub_kernel{"Sub", DeviceKind::cpu,
                           simple_kernel([](const Node&, const KernelIO& io) {
                             binary(io, [](float a, float b) { return a - b; });
                           })};
KernelRegistrar mul_kernel{"Mul", DeviceKind::cpu,
                           simple_kernel([](const Node&, const KernelIO& io) {
                             binary(io, [](float a, float b) { return a * b; });
                           })};
// Mul+AddN, the runtime's fusion of a weight decay term x * s (s a scalar) with the gradient g
// it is added to: inputs (x, s, g) -> g + x * s in one pass, with Mul's and AddN's roundings.
KernelRegistrar mul_add_n_kernel{
    "Mul+AddN", DeviceKind::cpu, simple_kernel([](const Node&, const KernelIO& io) {
      const float* x = io.inputs[0].data<float>();
      const float s = io.inputs[1].data<float>()[0];
      const float* g = io.inputs[2].data<float>();
      float* y = output(io);
      for_blocks(io.outputs[0].numel(), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const float decay = x[i] * s;
          y[i] = g[i] + decay;
        }
      });
    })};
KernelRegistrar scale_kernel{"Scale", DeviceKind::cpu,
                             simple_kernel([](const Node& node, const KernelIO& io) {
                               float factor = node.attr<ops::ScaleAttrs>().factor;
                               unary(io, [factor](float x) { return factor * x; });
                             })};
KernelRegistrar square_kernel{"Square", DeviceKind::cpu,
                              simple_kernel([](const Node&, const KernelIO& io) {
                                unary(io, [](float x) { return x * x; });
                              })};

}  // namespace

// add_two_relu (math.h), in vectors of 8; ReluGrad's masked lanes are alpha * dy: -0 where s < 0.
TOWER_ALWAYS_INLINE void add_two_relu_body(const float* a, const float* b, const float* mask,
                                           float* y, int64_t n) {
  using F = Vectors<8>::F;
  int64_t i = 0;
  for (F va, vb, vm; i + 8 <= n; i += 8) {
    load(va, a + i);
    load(vb, b + i);
    const F sum = va + vb;
    if (mask == nullptr) {
      store(y + i, sum > F{} ? sum : F{});
      continue;
    }
    load(vm, mask + i);
    store(y + i, vm > F{} ? sum : sum * F{});
  }
  for (; i < n; ++i) {
    const float sum = a[i] + b[i];
    if (mask == nullptr)
      y[i] = sum > 0.0f ? sum : 0.0f;
    else
      y[i] = mask[i] > 0.0f ? sum : sum * 0.0f;
  }
}
TOWER_CPU_VARIANTS(add_two_relu,
                   (const float* a, const float* b, const float* mask, float* y, int64_t n),
                   (a, b, mask, y, n))

namespace {

// Add+Relu, the runtime's fusion of a residual sum with the ReLU after it (inputs of one shape:
// fusion.cc's rule): one pass, rounded as the kernels apart (the sum, then s > 0 ? s : 0, as
// oneDNN's ReLU).
KernelRegistrar add_relu_kernel{
    "Add+Relu", DeviceKind::cpu, any_layout_kernel([](const Node&, const KernelIO& io) {
      const float* a = io.inputs[0].data<float>();
      const float* b = io.inputs[1].data<float>();
      float* y = output(io);
      for_blocks(io.outputs[0].numel(), [&](int64_t begin, int64_t end) {
        add_two_relu(a + begin, b + begin, nullptr, y + begin, end - begin);
      });
    })};

// y[begin, end) = the first `count` inputs summed in input order, element by element: the result
// does not depend on threads.
void sum_in_order(const KernelIO& io, size_t count, int64_t begin, int64_t end, float* y) {
  const float* x0 = io.inputs[0].data<float>();
  for (int64_t i = begin; i < end; ++i) y[i] = x0[i];
  for (size_t k = 1; k < count; ++k) {
    const float* xk = io.inputs[k].data<float>();
    for (int64_t i = begin; i < end; ++i) y[i] += xk[i];
  }
}

KernelRegistrar add_n_kernel{"AddN", DeviceKind::cpu,
                             any_layout_kernel([](const Node&, const KernelIO& io) {
                               float* y = output(io);
                               for_blocks(io.outputs[0].numel(), [&](int64_t begin, int64_t end) {
                                 sum_in_order(io, io.inputs.size(), begin, end, y);
                               });
                             })};
// AddN+ReluGrad, the runtime's fusion of the gradients of a ReLU's output summed (two branches
// of a residual network) with the ReLU's gradient: inputs (the gradients..., the ReLU's output
// r); the sum where r > 0, else 0 times it, in one pass with the kernels' roundings.
KernelRegistrar add_n_relu_grad_kernel{
    "AddN+ReluGrad", DeviceKind::cpu, any_layout_kernel([](const Node&, const KernelIO& io) {
      float* y = output(io);
      const size_t count = io.inputs.size() - 1;
      const float* r = io.inputs[count].data<float>();
      for_blocks(io.outputs[0].numel(), [&](int64_t begin, int64_t end) {
        if (count == 2) {
          add_two_relu(io.inputs[0].data<float>() + begin, io.inputs[1].data<float>() + begin,
                       r + begin, y + begin, end - begin);
          return;
        }
        sum_in_order(io, count, begin, end, y);
        for (int64_t i = begin; i < end; ++i) y[i] = r[i] > 0.0f ? y[i] : y[i] * 0.0f;
      });
    })};

KernelRegistrar reshape_kernel{"Reshape", DeviceKind::cpu,
                               simple_kernel([](const Node&, const KernelIO& io) {
                                 void* y = io.outputs[0].raw_data();
                                 if (y != io.inputs[0].raw_data() && io.inputs[0].nbytes() > 0)
                                   std::memcpy(y, io.inputs[0].raw_data(), io.inputs[0].nbytes());
                               })};

// ---- reductions --------------------------------------------------------------------------------

// Sums a contiguous input over a set of axes. Size-1 axes are dropped and neighbouring axes of the
// same kind merged, leaving at most alternating kept/reduced runs; the innermost run decides the
// loop: a kept innermost run adds whole rows (vectorized), a reduced one sums contiguous runs.
// Every output element is summed by one work item in a fixed order; a full reduction uses fixed
// blocks of partial sums (in the scratchpad) added in order.
class ReduceSumKernel : public Kernel {
 public:
  ReduceSumKernel(const Shape& in, const std::vector<char>& reduced) : numel_(in.numel()) {
    std::vector<int64_t> sizes;
    std::vector<char> kinds;
    for (int d = 0; d < in.rank(); ++d) {
      if (in[d] == 1) continue;
      char kind = reduced[static_cast<size_t>(d)];
      if (!kinds.empty() && kinds.back() == kind) {
        sizes.back() *= in[d];
      } else {
        sizes.push_back(in[d]);
        kinds.push_back(kind);
      }
    }
    bool any_reduced = std::find(kinds.begin(), kinds.end(), 1) != kinds.end();
    if (!any_reduced) {
      mode_ = Mode::copy;
      return;
    }
    if (sizes.size() == 1) {
      mode_ = Mode::full;
      return;
    }
    inner_ = sizes.back();
    mode_ = kinds.back() ? Mode::inner_reduced : Mode::inner_kept;
    int64_t stride = inner_;
    for (size_t d = sizes.size() - 1; d-- > 0;) {
      if (kinds[d]) {
        red_sizes_.insert(red_sizes_.begin(), sizes[d]);
        red_strides_.insert(red_strides_.begin(), stride);
      } else {
        kept_sizes_.insert(kept_sizes_.begin(), sizes[d]);
        kept_strides_.insert(kept_strides_.begin(), stride);
      }
      stride *= sizes[d];
    }
    for (int64_t s : kept_sizes_) num_kept_ *= s;
    for (int64_t s : red_sizes_) num_red_ *= s;
  }

  size_t scratch_bytes() const override {
    return mode_ == Mode::full ? static_cast<size_t>(num_blocks()) * sizeof(double) : 0;
  }

  void run(const KernelIO& io) override {
    const float* x = io.inputs[0].data<float>();
    float* y = output(io);
    int64_t out_numel = io.outputs[0].numel();
    if (numel_ == 0) {
      std::fill_n(y, out_numel, 0.0f);
      return;
    }
    switch (mode_) {
      case Mode::copy:
        std::memcpy(y, x, static_cast<size_t>(numel_) * sizeof(float));
        break;
      case Mode::full: {
        auto* partial = static_cast<double*>(io.scratch);
        int64_t blocks = num_blocks();
#pragma omp parallel for schedule(static) if (blocks > 1)
        for (int64_t b = 0; b < blocks; ++b) {
          int64_t begin = b * kBlock;
          partial[b] = sum_contiguous(x + begin, std::min(numel_ - begin, kBlock), identity);
        }
        double sum = 0;
        for (int64_t b = 0; b < blocks; ++b) sum += partial[b];
        y[0] = static_cast<float>(sum);
        break;
      }
      case Mode::inner_reduced:
#pragma omp parallel for schedule(static) if (numel_ > kBlock)
        for (int64_t k = 0; k < num_kept_; ++k) {
          const float* base = x + offset_of(k, kept_sizes_, kept_strides_);
          double sum = 0;
          for (int64_t r = 0; r < num_red_; ++r)
            sum += sum_contiguous(base + offset_of(r, red_sizes_, red_strides_), inner_, identity);
          y[k] = static_cast<float>(sum);
        }
        break;
      case Mode::inner_kept: {
        constexpr int64_t kCols = 64;
        int64_t col_blocks = (inner_ + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (numel_ > kBlock)
        for (int64_t item = 0; item < num_kept_ * col_blocks; ++item) {
          int64_t k = item / col_blocks, c0 = (item % col_blocks) * kCols;
          int64_t cols = std::min(kCols, inner_ - c0);
          const float* base = x + offset_of(k, kept_sizes_, kept_strides_) + c0;
          double acc[kCols] = {};
          for (int64_t r = 0; r < num_red_; ++r) {
            const float* row = base + offset_of(r, red_sizes_, red_strides_);
            for (int64_t j = 0; j < cols; ++j) acc[j] += row[j];
          }
          float* out = y + k * inner_ + c0;
          for (int64_t j = 0; j < cols; ++j) out[j] = static_cast<float>(acc[j]);
        }
        break;
      }
    }
  }

 private:
  enum class Mode { copy, full, inner_reduced, inner_kept };
  int64_t num_blocks() const { return (numel_ + kBlock - 1) / kBlock; }

  Mode mode_ = Mode::copy;
  int64_t numel_ = 0;
  int64_t inner_ = 1;
  std::vector<int64_t> kept_sizes_, kept_strides_, red_sizes_, red_strides_;
  int64_t num_kept_ = 1, num_red_ = 1;
};

KernelRegistrar reduce_sum_kernel{
    "ReduceSum", DeviceKind::cpu, [](const Node& node, const KernelContext&) {
      return std::make_unique<ReduceSumKernel>(node.inputs[0].shape(), ops::summed_axes(node));
    }};
KernelRegistrar sum_to_shape_kernel{
    "SumToShape", DeviceKind::cpu, [](const Node& node, const KernelContext&) {
      return std::make_unique<ReduceSumKernel>(node.inputs[0].shape(), ops::summed_axes(node));
    }};

// sum(x^2) / 2 with the same fixed-block partial sums as a full ReduceSum.
class L2LossKernel : public Kernel {
 public:
  explicit L2LossKernel(int64_t numel) : numel_(numel) {}
  size_t scratch_bytes() const override { return static_cast<size_t>(blocks()) * sizeof(double); }
  void run(const KernelIO& io) override {
    const float* x = io.inputs[0].data<float>();
    auto* partial = static_cast<double*>(io.scratch);
    int64_t num_blocks = blocks();
#pragma omp parallel for schedule(static) if (num_blocks > 1)
    for (int64_t b = 0; b < num_blocks; ++b) {
      int64_t begin = b * kBlock;
      partial[b] = sum_contiguous(x + begin, std::min(numel_ - begin, kBlock),
                                  [](float v) { return static_cast<double>(v) * v; });
    }
    double sum = 0;
    for (int64_t b = 0; b < num_blocks; ++b) sum += partial[b];
    output(io)[0] = static_cast<float>(sum / 2);
  }

 private:
  int64_t blocks() const { return (numel_ + kBlock - 1) / kBlock; }
  int64_t numel_;
};

KernelRegistrar l2_loss_kernel{
    "L2Loss", DeviceKind::cpu, [](const Node& node, const KernelContext&) {
      return std::make_unique<L2LossKernel>(node.inputs[0].shape().numel());
    }};

// ---- broadcast ---------------------------------------------------------------------------------

// NumPy broadcast of a contiguous input. As in ReduceSumKernel, size-1 output axes are dropped
// and neighbours of the same kind (broadcast or copied) merged; each output row of the innermost
// run is then a memcpy or a fill.
class BroadcastToKernel : public Kernel {
 public:
  BroadcastToKernel(const Shape& in, const Shape& out) : out_numel_(out.numel()) {
    std::vector<int64_t> sizes;
    std::vector<char> kinds;  // 1: broadcast (input stride 0)
    int pad = out.rank() - in.rank();
    for (int d = 0; d < out.rank(); ++d) {
      if (out[d] == 1) continue;
      char kind = d < pad || in[d - pad] == 1;
      if (!kinds.empty() && kinds.back() == kind) {
        sizes.back() *= out[d];
      } else {
        sizes.push_back(out[d]);
        kinds.push_back(kind);
      }
    }
    if (sizes.empty()) return;  // one element (or none)
    inner_ = sizes.back();
    inner_broadcast_ = kinds.back();
    int64_t stride = inner_broadcast_ ? 1 : inner_;
    for (size_t d = sizes.size() - 1; d-- > 0;) {
      outer_sizes_.insert(outer_sizes_.begin(), sizes[d]);
      outer_strides_.insert(outer_strides_.begin(), kinds[d] ? 0 : stride);
      if (!kinds[d]) stride *= sizes[d];
    }
  }

  void run(const KernelIO& io) override {
    const float* x = io.inputs[0].data<float>();
    float* y = output(io);
    if (out_numel_ == 0) return;
    int64_t rows = out_numel_ / inner_;
#pragma omp parallel for schedule(static) if (out_numel_ > kBlock)
    for (int64_t o = 0; o < rows; ++o) {
      const float* src = x + offset_of(o, outer_sizes_, outer_strides_);
      float* dst = y + o * inner_;
      if (inner_broadcast_)
        std::fill_n(dst, inner_, *src);
      else
        std::memcpy(dst, src, static_cast<size_t>(inner_) * sizeof(float));
    }
  }

 private:
  int64_t out_numel_;
  int64_t inner_ = 1;
  bool inner_broadcast_ = false;
  std::vector<int64_t> outer_sizes_, outer_strides_;
};

KernelRegistrar broadcast_to_kernel{
    "BroadcastTo", DeviceKind::cpu, [](const Node& node, const KernelContext&) {
      return std::make_unique<BroadcastToKernel>(node.inputs[0].shape(),
                                                 node.attr<ops::ShapeAttrs>().shape);
    }};

}  // namespace
}  // namespace tower::cpu
