// The runtime's layout conversions on CPU: a oneDNN reorder between two descriptors of a value.
// f32 -> bf16 in the same layout (the copies that bf16 convolutions and matmuls read) is a plain
// loop over the buffer with AVX512-BF16's conversion instead, which is faster than oneDNN 2.6's
// reorder for it. A filter into flipped_filter_layout is flipped into a plain scratch copy first;
// one into winograd_filter_layout is transformed by a loop (conv_winograd.cc).
#include <algorithm>
#include <optional>

#include "tower/kernels/cpu/bf16.h"
#include "tower/kernels/cpu/conv_winograd.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

class ReorderKernel : public Kernel {
 public:
  // `value` names the converted value in errors; its node outlives the kernel (the graph does).
  ReorderKernel(const Value& value, const Layout& from, const Layout& to)
      : node_(*value.node), from_(from), to_(to) {
    if (is_winograd_filter(to)) {
      TOWER_CHECK_MSG(from.is_plain() && value.shape().rank() == 4,
                      "transforms only a plain filter");
      winograd_ = value.shape();
      return;
    }
    from_md_ = md_of(value.shape(), from);
    to_md_ = md_of(value.shape(), to);
    // A grouped filter's layouts view it in 5-D, (G, K / G, C / G, KH, KW): a row-major side
    // takes the other side's dimensions (the same bytes).
    if (from_md_.data.ndims != to_md_.data.ndims) {
      auto row_major = [](const dnnl::memory::desc& md, const dnnl::memory::desc& as) {
        return is_row_major(md) ? plain_md(Shape(as.dims()), md.data_type()) : md;
      };
      from_md_ = row_major(from_md_, to_md_);
      to_md_ = row_major(to_md_, from_md_);
    }
    if (value.shape().numel() == 0) return;  // nothing to convert (oneDNN skips empty tensors)
    if (is_flipped_filter(to)) {
      TOWER_CHECK_MSG(from.is_plain() && value.shape().rank() == 4, "flips only a plain filter");
      const Shape& w = value.shape();
      flip_ = w;
      from_md_ = plain_md(Shape{w[1], w[0], w[2], w[3]});
    }
    to_bf16_ = is_bf16_copy(from_md_, to_md_) && cpu_converts_to_bf16();
    if (to_bf16_) return;
    prim_ = build(node_, [&] {
      return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from_md_, engine(), to_md_));
    });
  }
  size_t scratch_bytes() const override {
    return flip_ ? static_cast<size_t>(flip_->numel()) * sizeof(float) : 0;
  }
  void bind(const KernelIO& io) override {
    if (winograd_) return;
    args_ = {{DNNL_ARG_FROM, flip_ ? dnnl::memory(from_md_, engine(), io.scratch)
                                   : make_memory(from_md_, io.inputs[0])},
             {DNNL_ARG_TO, make_memory(to_md_, io.outputs[0])}};
  }
  void run(const KernelIO& io) override {
    if (winograd_) {
      winograd_filter(io.inputs[0].data<float>(), *winograd_, to_, io.outputs[0].data<float>());
      return;
    }
    if (flip_) flip_filter(io.inputs[0].data<float>(), *flip_, static_cast<float*>(io.scratch));
    if (to_bf16_) {
      const float* in = io.inputs[0].data<float>();
      auto* out = static_cast<uint16_t*>(io.outputs[0].raw_data());
      const auto n = static_cast<int64_t>(from_md_.get_size() / sizeof(float));
      // Blocks taken one at a time: a thread slowed by another process converts fewer.
#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t i = 0; i < n; i += 16384)
        convert_to_bf16(in + i, out + i, std::min<int64_t>(16384, n - i));
    } else if (prim_) {
      execute(node_, *prim_, args_);
    }
  }
  Layout input_layout(int) const override { return from_; }
  Layout output_layout(int) const override { return to_; }

 private:
  const Node& node_;
  Layout from_, to_;
  dnnl::memory::desc from_md_, to_md_;
  bool to_bf16_ = false;
  std::optional<Shape> flip_;      // the filter's shape, when flipped (flipped_filter_layout)
  std::optional<Shape> winograd_;  // the filter's shape, into winograd_filter_layout
  std::optional<dnnl::reorder> prim_;
  std::unordered_map<int, dnnl::memory> args_;
};

ReorderRegistrar reorder{DeviceKind::cpu,
                         [](const Value& value, const Layout& from, const Layout& to) {
                           return std::make_unique<ReorderKernel>(value, from, to);
                         }};

}  // namespace
}  // namespace tower::cpu
