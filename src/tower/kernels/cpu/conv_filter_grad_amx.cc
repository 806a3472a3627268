// Conv2DBackpropFilter[+BiasAddGrad] in bf16 on AMX (conv.h's make_filter_grad_as_forward;
// conv.cc builds the other filter gradients).
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "tower/core/device.h"
#include "tower/kernels/cpu/conv.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/ops/conv.h"

namespace tower::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// The filter gradient as a forward convolution, for bf16 on AMX, where oneDNN 2.6's backward-
// weights kernel is several times slower than its forward one. With stride 1, dw[o, i, r, s] = sum
// over (n, p, q) of dy[n, o, p, q] * x[n, i, p + r, q + s] is the convolution of a "batch" of input
// channels i, each an image of channels n (x with its first two dimensions swapped), by "filters"
// dy (likewise), with x's padding; its output is the filter's size. Per chunk of up to 64 rows of
// the batch (a task), two reorders swap the dimensions of x and dy into the convolution's layouts
// and it writes the chunk's dw; finish_tasks adds the chunks in order (and the bias gradient,
// summed per chunk from dy), so the bits do not depend on which thread ran which chunk.
class FilterGradAsForward : public Kernel {
 public:
  // Null where it does not apply (fp32, no AMX, strides, a batch that is neither <= 64 nor a
  // multiple of 64), where oneDNN offers no AMX kernel for the shape, or where there are under 16
  // input channels: the convolution's batch, too small a one for it to win (cifar10's conv1: 3,
  // and swapping dy's dimensions costs more than the backward-weights kernel).
  static std::unique_ptr<Kernel> make(const Node& node, const KernelContext& context,
                                      const Shape& x, const Shape& w, const Shape& dy, bool bias) {
    const auto& a = node.attr<ops::Conv2DBackpropAttrs>();
    const int64_t batch = x[0];
    const int64_t rows = batch <= 64 ? batch : 64;
    if (context.precision != Precision::bf16 || !cpu_info().amx || x[1] < 16 ||
        !a.conv.is_dense() || a.conv.strides[0] != 1 || a.conv.strides[1] != 1 || batch == 0 ||
        batch % rows != 0)
      return nullptr;
    KernelThreadsScope one_thread(1);  // each chunk runs on one thread
    const auto [ph, pw] = ops::conv_padding(x, w, a.conv);
    const memory::dim n = rows, ic = x[1], h = x[2], wd = x[3], oc = dy[1], oh = dy[2], ow = dy[3];
    const auto bf16 = memory::data_type::bf16;
    dnnl::convolution_forward::primitive_desc conv_pd;
    try {
      conv_pd = {dnnl::convolution_forward::desc(
                     dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                     memory::desc({ic, n, h, wd}, bf16, tag::nhwc),
                     memory::desc({oc, n, oh, ow}, bf16, tag::any),
                     memory::desc({ic, oc, w[2], w[3]}, memory::data_type::f32, tag::nhwc), {1, 1},
                     {ph.before, pw.before}, {ph.after, pw.after}),
                 user_scratchpad(), engine()};
    } catch (const dnnl::error&) {
      return nullptr;
    }
    if (std::string(conv_pd.impl_info_str()).find("amx") == std::string::npos) return nullptr;
    return std::unique_ptr<Kernel>(
        new FilterGradAsForward(node, context, x, w, dy, bias, rows, std::move(conv_pd)));
  }

  size_t scratch_bytes() const override {
    return slot_bytes_ * static_cast<size_t>(slots_) + part_bytes_ * static_cast<size_t>(chunks_);
  }
  Layout input_layout(int i) const override {
    return to_layout(i == 0 ? x_md_ : dy_md_, i == 0 ? x_ : dy_);
  }

  void bind(const KernelIO& io) override {
    char* scratch = static_cast<char*>(io.scratch);
    auto* x = static_cast<char*>(const_cast<void*>(io.inputs[0].raw_data()));
    auto* dy = static_cast<char*>(const_cast<void*>(io.inputs[1].raw_data()));
    const size_t x_chunk = x_view_.get_size(), dy_chunk = dy_view_.get_size();
    args_.assign(static_cast<size_t>(chunks_ * slots_), {});
    for (int c = 0; c < chunks_; ++c) {
      char* part = scratch + slot_bytes_ * static_cast<size_t>(slots_) +
                   part_bytes_ * static_cast<size_t>(c);
      for (int t = 0; t < slots_; ++t) {
        char* slot = scratch + slot_bytes_ * static_cast<size_t>(t);
        char* src = slot;
        char* wei = src + align64(conv_pd_.src_desc().get_size());
        char* pad = wei + align64(conv_pd_.weights_desc().get_size());
        ChunkArgs& ca = args_[static_cast<size_t>(c * slots_ + t)];
        ca.x = {{DNNL_ARG_FROM, memory(x_view_, engine(), x + x_chunk * static_cast<size_t>(c))},
                {DNNL_ARG_TO, memory(conv_pd_.src_desc(), engine(), src)}};
        ca.dy = {
            {DNNL_ARG_FROM, memory(dy_view_, engine(), dy + dy_chunk * static_cast<size_t>(c))},
            {DNNL_ARG_TO, memory(conv_pd_.weights_desc(), engine(), wei)}};
        ca.conv = {{DNNL_ARG_SRC, ca.x[DNNL_ARG_TO]},
                   {DNNL_ARG_WEIGHTS, ca.dy[DNNL_ARG_TO]},
                   {DNNL_ARG_DST, memory(conv_pd_.dst_desc(), engine(), part)}};
        add_scratchpad(ca.x, x_reorder_pd_.scratchpad_desc(), pad);
        add_scratchpad(ca.dy, dy_reorder_pd_.scratchpad_desc(), pad);
        add_scratchpad(ca.conv, conv_pd_.scratchpad_desc(), pad);
        ca.dy_data = reinterpret_cast<const uint16_t*>(dy + dy_chunk * static_cast<size_t>(c));
        ca.dw = reinterpret_cast<float*>(part);
        ca.db = reinterpret_cast<float*>(part + align64(conv_pd_.dst_desc().get_size()));
      }
    }
    dw_ = io.outputs[0].data<float>();
    db_ = bias_ ? io.outputs[1].data<float>() : nullptr;
  }

  Tasks tasks() const override { return Tasks::split(chunks_); }
  void run_task(const KernelIO&, int task, int member) override {
    ChunkArgs& ca = args_[static_cast<size_t>(task * slots_ + member)];
    execute(node_, x_reorder_, ca.x);
    execute(node_, dy_reorder_, ca.dy);
    execute(node_, conv_, ca.conv);
    if (!bias_) return;
    const int64_t oc = dy_[1], positions = rows_ * dy_[2] * dy_[3];
    std::fill(ca.db, ca.db + oc, 0.0f);
    for (int64_t p = 0; p < positions; ++p)
      for (int64_t o = 0; o < oc; ++o)
        ca.db[o] += std::bit_cast<float>(static_cast<uint32_t>(ca.dy_data[p * oc + o]) << 16);
  }
  // dw[o, i, r, s] = the chunks' sum of their [i, r, s, o]; db likewise.
  void finish_tasks(const KernelIO&) override {
    const int64_t oc = w_[0], ic = w_[1], kk = w_[2] * w_[3];
#pragma omp parallel for num_threads(team_) schedule(static) if (oc * ic * kk > 65536)
    for (int64_t o = 0; o < oc; ++o)
      for (int c = 0; c < chunks_; ++c) {
        const float* part = args_[static_cast<size_t>(c * slots_)].dw;
        float* out = dw_ + o * ic * kk;
        for (int64_t i = 0; i < ic; ++i)
          for (int64_t k = 0; k < kk; ++k) {
            const float v = part[(i * kk + k) * oc + o];
            out[i * kk + k] = c == 0 ? v : out[i * kk + k] + v;
          }
      }
    if (!bias_) return;
    for (int64_t o = 0; o < oc; ++o) {
      float sum = 0;
      for (int c = 0; c < chunks_; ++c) sum += args_[static_cast<size_t>(c * slots_)].db[o];
      db_[o] = sum;
    }
  }

  void run(const KernelIO& io) override {
    std::exception_ptr error;
#pragma omp parallel for num_threads(team_) schedule(dynamic, 1)
    for (int c = 0; c < chunks_; ++c) {
      try {
        run_task(io, c, omp_get_thread_num());
      } catch (...) {
#pragma omp critical(tower_filter_grad_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    finish_tasks(io);
  }

 private:
  struct ChunkArgs {
    std::unordered_map<int, memory> x, dy, conv;
    const uint16_t* dy_data = nullptr;  // the chunk's dy (nhwc)
    float* dw = nullptr;                // its filter gradient, [i, r, s, o]
    float* db = nullptr;                // its bias gradient
  };

  FilterGradAsForward(const Node& node, const KernelContext& context, const Shape& x,
                      const Shape& w, const Shape& dy, bool bias, int64_t rows,
                      dnnl::convolution_forward::primitive_desc conv_pd)
      : node_(node),
        x_(x),
        w_(w),
        dy_(dy),
        bias_(bias),
        rows_(rows),
        chunks_(static_cast<int>(x[0] / rows)),
        team_(std::max(context.num_threads, 1)),
        slots_(std::max(context.members, team_)),
        conv_pd_(std::move(conv_pd)) {
    const auto bf16 = memory::data_type::bf16;
    x_md_ = memory::desc(to_dims(x), bf16, tag::nhwc);
    dy_md_ = memory::desc(to_dims(dy), bf16, tag::nhwc);
    // A chunk of x (nhwc) seen with its first two dimensions swapped; likewise dy.
    const memory::dim ic = x[1], h = x[2], wd = x[3], oc = dy[1], oh = dy[2], ow = dy[3];
    x_view_ = memory::desc({ic, rows, h, wd}, bf16, memory::dims{1, h * wd * ic, wd * ic, ic});
    dy_view_ = memory::desc({oc, rows, oh, ow}, bf16, memory::dims{1, oh * ow * oc, ow * oc, oc});
    x_reorder_pd_ = build(node, [&] {
      return dnnl::reorder::primitive_desc(engine(), x_view_, engine(), conv_pd_.src_desc(),
                                           user_scratchpad());
    });
    dy_reorder_pd_ = build(node, [&] {
      return dnnl::reorder::primitive_desc(engine(), dy_view_, engine(), conv_pd_.weights_desc(),
                                           user_scratchpad());
    });
    x_reorder_ = dnnl::reorder(x_reorder_pd_);
    dy_reorder_ = dnnl::reorder(dy_reorder_pd_);
    conv_ = dnnl::convolution_forward(conv_pd_);
    const size_t pad = std::max({x_reorder_pd_.scratchpad_desc().get_size(),
                                 dy_reorder_pd_.scratchpad_desc().get_size(),
                                 conv_pd_.scratchpad_desc().get_size()});
    slot_bytes_ = align64(conv_pd_.src_desc().get_size()) +
                  align64(conv_pd_.weights_desc().get_size()) + align64(pad);
    part_bytes_ = align64(conv_pd_.dst_desc().get_size()) +
                  align64(static_cast<size_t>(dy[1]) * sizeof(float));
  }

  const Node& node_;
  Shape x_, w_, dy_;
  bool bias_;
  int64_t rows_;
  int chunks_, team_, slots_;
  dnnl::convolution_forward::primitive_desc conv_pd_;
  dnnl::reorder::primitive_desc x_reorder_pd_, dy_reorder_pd_;
  dnnl::primitive conv_, x_reorder_, dy_reorder_;
  memory::desc x_md_, dy_md_, x_view_, dy_view_;
  size_t slot_bytes_ = 0, part_bytes_ = 0;
  std::vector<ChunkArgs> args_;  // [chunk * slots_ + member]
  float* dw_ = nullptr;
  float* db_ = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> make_filter_grad_as_forward(const Node& node, const KernelContext& context,
                                                    bool bias) {
  return FilterGradAsForward::make(node, context, node.inputs[0].shape(),
                                   node.attr<ops::Conv2DBackpropAttrs>().shape,
                                   node.inputs[1].shape(), bias);
}

}  // namespace tower::cpu
