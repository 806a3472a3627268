// The runtime's layout conversions on CPU: a oneDNN reorder between two descriptors of a value.
// f32 -> bf16 in the same layout (the copies that bf16 convolutions and matmuls read) is a plain
// loop over the buffer with AVX512-BF16's conversion instead: oneDNN 2.6's reorder does it at a
// third of the speed (cifar10's first layer gradient, 128x64x24x24: 0.6 ms against 0.35).
#include <immintrin.h>

#include <optional>

#include "tower/core/device.h"
#include "tower/core/dtype.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

// The same elements in the same places, only the type differs (f32 -> bf16), no padding.
bool is_f32_to_bf16(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  if (from.data_type() != dnnl::memory::data_type::f32 ||
      to.data_type() != dnnl::memory::data_type::bf16 || !cpu_info().avx512_bf16)
    return false;
  dnnl_memory_desc_t as_bf16 = from.data;
  as_bf16.data_type = dnnl_bf16;
  const auto& d = from.data;
  for (int i = 0; i < d.ndims; ++i)
    if (d.padded_dims[i] != d.dims[i]) return false;
  return dnnl_memory_desc_equal(&as_bf16, &to.data) != 0 && d.offset0 == 0;
}

// Round to nearest even, as oneDNN's reorder; 32 values at a time, the tail one by one.
[[gnu::target("avx512f,avx512bw,avx512vl,avx512bf16")]] void convert_to_bf16(const float* in,
                                                                             uint16_t* out,
                                                                             int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += 1024) {
    const int64_t end = std::min(n, i + 1024);
    int64_t j = i;
    for (; j + 32 <= end; j += 32) {
      const __m512bh pair =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + j + 16), _mm512_loadu_ps(in + j));
      _mm512_storeu_si512(out + j, reinterpret_cast<__m512i>(pair));
    }
    for (; j < end; ++j) out[j] = f32_to_bf16(in[j]);
  }
}

class ReorderKernel : public Kernel {
 public:
  // `value` names the converted value in errors; its node outlives the kernel (the graph does).
  ReorderKernel(const Value& value, const Layout& from, const Layout& to)
      : node_(*value.node), from_(from), to_(to) {
    from_md_ = md_of(value.shape(), from);
    to_md_ = md_of(value.shape(), to);
    if (value.shape().numel() == 0) return;  // nothing to convert (oneDNN skips empty tensors)
    to_bf16_ = is_f32_to_bf16(from_md_, to_md_);
    if (to_bf16_) return;
    prim_ = build(node_, [&] {
      return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from_md_, engine(), to_md_));
    });
  }
  void bind(const KernelIO& io) override {
    args_ = {{DNNL_ARG_FROM, make_memory(from_md_, io.inputs[0])},
             {DNNL_ARG_TO, make_memory(to_md_, io.outputs[0])}};
  }
  void run(const KernelIO& io) override {
    if (to_bf16_)
      convert_to_bf16(io.inputs[0].data<float>(),
                      static_cast<uint16_t*>(const_cast<void*>(io.outputs[0].raw_data())),
                      static_cast<int64_t>(from_md_.get_size() / sizeof(float)));
    else if (prim_)
      execute(node_, *prim_, args_);
  }
  Layout input_layout(int) const override { return from_; }
  Layout output_layout(int) const override { return to_; }

 private:
  const Node& node_;
  Layout from_, to_;
  dnnl::memory::desc from_md_, to_md_;
  bool to_bf16_ = false;
  std::optional<dnnl::reorder> prim_;
  std::unordered_map<int, dnnl::memory> args_;
};

ReorderRegistrar reorder{DeviceKind::cpu,
                         [](const Value& value, const Layout& from, const Layout& to) {
                           return std::make_unique<ReorderKernel>(value, from, to);
                         }};

}  // namespace
}  // namespace tower::cpu
