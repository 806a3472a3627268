// BiasAdd and BiasAddGrad: plain loops (a memory-bound broadcast and a reduction, nothing for
// oneDNN to win). Plain inputs are viewed as (outer, C, inner): (N, C, H*W) or (N, C, 1). A 4-D
// input in a convolution's channel-blocked layout is worked on in place (y in the same layout), so
// conv -> bias -> relu needs no conversion; the sums run in the same order as on plain NCHW.
#include "tower/ops/bias.h"

#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

struct Dims {
  int64_t outer, channels, inner;
};

Dims dims_of(const Shape& x) {
  int axis = ops::bias_channel_axis(x.rank());
  int64_t inner = 1;
  for (int i = axis + 1; i < x.rank(); ++i) inner *= x[i];
  return {x[0], x[axis], inner};
}

void bias_add(const Node& node, const KernelIO& io) {
  Dims d = dims_of(io.inputs[0].shape());
  const float* x = io.inputs[0].data<float>();
  const float* b = io.inputs[1].data<float>();
  float* y = io.outputs[0].data<float>();
  if (d.inner == 1) {
#pragma omp parallel for
    for (int64_t n = 0; n < d.outer; ++n)
      for (int64_t c = 0; c < d.channels; ++c) y[n * d.channels + c] = x[n * d.channels + c] + b[c];
    return;
  }
#pragma omp parallel for
  for (int64_t nc = 0; nc < d.outer * d.channels; ++nc) {
    float bias = b[nc % d.channels];
    const float* xp = x + nc * d.inner;
    float* yp = y + nc * d.inner;
    for (int64_t i = 0; i < d.inner; ++i) yp[i] = xp[i] + bias;
  }
}

void bias_add_grad(const Node& node, const KernelIO& io) {
  Dims d = dims_of(io.inputs[0].shape());
  const float* dy = io.inputs[0].data<float>();
  float* db = io.outputs[0].data<float>();
  // One channel per iteration: each sum has a fixed order, so results do not depend on threads.
#pragma omp parallel for
  for (int64_t c = 0; c < d.channels; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < d.outer; ++n) {
      const float* p = dy + (n * d.channels + c) * d.inner;
      float part = 0;
      for (int64_t i = 0; i < d.inner; ++i) part += p[i];
      sum += part;
    }
    db[c] = static_cast<float>(sum);
  }
}

constexpr int64_t kMaxBlock = 64;

// Input 0 (x or dy) in a non-plain channel-blocked layout.
class BlockedBiasKernel : public Kernel {
 public:
  BlockedBiasKernel(const Node& node, const Layout& layout, ChannelBlocks blocks)
      : node_(node), layout_(layout), blocks_(blocks) {}
  Layout input_layout(int i) const override { return i == 0 ? layout_ : Layout{}; }
  Layout output_layout(int) const override { return node_.op == "BiasAdd" ? layout_ : Layout{}; }

  void run(const KernelIO& io) override {
    const Shape& shape = io.inputs[0].shape();
    const int64_t channels = shape[1], block = blocks_.block;
    const int64_t blocks = (channels + block - 1) / block;
    const int64_t* s = blocks_.strides;
    const float* x = io.inputs[0].data<float>();
    if (node_.op == "BiasAdd") {
      const float* b = io.inputs[1].data<float>();
      float* y = io.outputs[0].data<float>();
#pragma omp parallel for collapse(2)
      for (int64_t n = 0; n < shape[0]; ++n)
        for (int64_t cb = 0; cb < blocks; ++cb) {
          float bias[kMaxBlock];  // zero past the last channel, so the padding stays zero
          for (int64_t j = 0; j < block; ++j)
            bias[j] = cb * block + j < channels ? b[cb * block + j] : 0.0f;
          for (int64_t h = 0; h < shape[2]; ++h)
            for (int64_t w = 0; w < shape[3]; ++w) {
              int64_t at = n * s[0] + cb * s[1] + h * s[2] + w * s[3];
              for (int64_t j = 0; j < block; ++j) y[at + j] = x[at + j] + bias[j];
            }
        }
      return;
    }
    float* db = io.outputs[0].data<float>();
    // As bias_add_grad: per channel, a float sum over H*W per example, added up in double.
#pragma omp parallel for
    for (int64_t cb = 0; cb < blocks; ++cb) {
      double sum[kMaxBlock] = {};
      for (int64_t n = 0; n < shape[0]; ++n) {
        float part[kMaxBlock] = {};
        for (int64_t h = 0; h < shape[2]; ++h)
          for (int64_t w = 0; w < shape[3]; ++w) {
            const float* p = x + n * s[0] + cb * s[1] + h * s[2] + w * s[3];
            for (int64_t j = 0; j < block; ++j) part[j] += p[j];
          }
        for (int64_t j = 0; j < block; ++j) sum[j] += part[j];
      }
      for (int64_t j = 0; j < block && cb * block + j < channels; ++j)
        db[cb * block + j] = static_cast<float>(sum[j]);
    }
  }

 private:
  const Node& node_;
  Layout layout_;
  ChannelBlocks blocks_;
};

KernelFactory bias_factory(SimpleKernelFn plain) {
  return [plain = simple_kernel(std::move(plain))](
             const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
    const Layout& layout = context.input_layout(0);
    if (!layout.is_plain()) {
      auto blocks = channel_blocks(md_of(node.inputs[0].shape(), layout));
      if (blocks && blocks->block <= kMaxBlock)
        return std::make_unique<BlockedBiasKernel>(node, layout, *blocks);
    }
    return plain(node, context);
  };
}

KernelRegistrar bias_add_kernel{"BiasAdd", DeviceKind::cpu, bias_factory(bias_add)};
KernelRegistrar bias_add_grad_kernel{"BiasAddGrad", DeviceKind::cpu, bias_factory(bias_add_grad)};

}  // namespace
}  // namespace tower::cpu
