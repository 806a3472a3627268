// Conv2D and its adjoints with oneDNN. The primitives pick their own (blocked) layouts
// (format_tag::any), which are much faster than plain NCHW for direct convolution, and declare
// them as their input and output layouts: the runtime reorders only where a neighbour differs.
// On a team of threads they run in batch chunks (chunks.h). In bf16 on AMX the filter gradient
// runs as a forward convolution instead (conv_filter_grad_amx.cc).
#include "tower/ops/conv.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "tower/core/device.h"
#include "tower/kernels/cpu/chunks.h"
#include "tower/kernels/cpu/clones.h"
#include "tower/kernels/cpu/conv.h"
#include "tower/kernels/cpu/conv_winograd.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// Any layout the primitive likes; in bf16 precision the multiplied operands are bf16 and the
// results (outputs and gradients) stay f32.
memory::desc any_md(const Shape& shape, memory::data_type type = memory::data_type::f32) {
  return memory::desc(to_dims(shape), type, tag::any);
}
memory::data_type operand_type(const KernelContext& context) {
  return context.precision == Precision::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
}

// oneDNN's dilations count the pixels skipped between taps (0: none).
struct ConvGeometry {
  memory::dims strides, dilates, padding_l, padding_r;
};

ConvGeometry geometry(const Shape& x, const Shape& w, const ops::Conv2DAttrs& a) {
  const auto [ph, pw] = ops::conv_padding(x, w, a);
  return {{a.strides[0], a.strides[1]},
          {a.dilations[0] - 1, a.dilations[1] - 1},
          {ph.before, pw.before},
          {ph.after, pw.after}};
}

// The filter (K, C / G, KH, KW) as oneDNN sees it: with groups, (G, K / G, C / G, KH, KW), the
// same bytes when plain (to_layout and the reorder take either shape).
memory::desc filter_md(const Shape& w, const ops::Conv2DAttrs& a,
                       memory::data_type type = memory::data_type::f32) {
  if (a.groups == 1) return any_md(w, type);
  return memory::desc({a.groups, w[0] / a.groups, w[1], w[2], w[3]}, type, tag::any);
}

// The algorithm of the convolution of x by w, for its three passes: oneDNN 2.6's Winograd
// F(4x4, 3x3) (jit_wino_4x3) under AVX-512 on AMD CPUs, in fp32, for 3x3 stride-1 SAME filters
// with 32 or more input and output channels in whole blocks of 16, where it is faster than direct
// in every pass (with 16 channels it is slower, and AdjointConv faster still). Its transforms
// round more, within the bounds Conv2DTest.SameConvolutionsWithManyChannelsMatchReference checks.
// Intel CPUs, not measured, keep direct. The measurements: bench/results/cpu_kernel_choices.md.
dnnl::algorithm conv_algorithm(const Shape& x, const Shape& w, const ops::Conv2DAttrs& a,
                               memory::data_type type) {
  const bool winograd = cpu_isa() >= CpuIsa::avx512 && cpu_info().amd &&
                        type == memory::data_type::f32 && is_same_3x3(w, a) && x[1] >= 32 &&
                        w[0] >= 32 && x[1] % 16 == 0 && w[0] % 16 == 0;
  return winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
}

// make(alg), or make(direct) where oneDNN has no kernel of `alg` for the descriptor.
template <typename F>
auto with_algorithm(dnnl::algorithm alg, F&& make) -> decltype(make(alg)) {
  if (alg != dnnl::algorithm::convolution_direct) try {
      return make(alg);
    } catch (const dnnl::error&) {
    }
  return make(dnnl::algorithm::convolution_direct);
}

// The forward descriptor, also the hint the backward primitives are built against. Fused
// (Conv2D+BiasAdd[+Add][+Relu]): with a bias of `bias` channels (f32), the output's previous
// contents added (sum post-op) and ReLU as post-ops.
dnnl::convolution_forward::primitive_desc forward_pd(const Shape& x, const Shape& w, const Shape& y,
                                                     const ops::Conv2DAttrs& a,
                                                     memory::data_type type, int64_t bias = 0,
                                                     ConvEpilogue epilogue = {}) {
  ConvGeometry g = geometry(x, w, a);
  const auto prop = dnnl::prop_kind::forward_training;
  dnnl::primitive_attr attr = user_scratchpad();
  dnnl::post_ops ops;
  if (epilogue.add_output) ops.append_sum(1.0f);
  if (epilogue.relu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  if (epilogue.relu6) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip_v2, 0.0f, 6.0f);
  if (ops.len() > 0) attr.set_post_ops(ops);
  return with_algorithm(
      conv_algorithm(x, w, a, type),
      [&](dnnl::algorithm alg) -> dnnl::convolution_forward::primitive_desc {
        if (bias > 0)
          return {dnnl::convolution_forward::desc(prop, alg, any_md(x, type), filter_md(w, a, type),
                                                  plain_md(Shape{bias}), any_md(y), g.strides,
                                                  g.dilates, g.padding_l, g.padding_r),
                  attr, engine()};
        return {dnnl::convolution_forward::desc(prop, alg, any_md(x, type), filter_md(w, a, type),
                                                any_md(y), g.strides, g.dilates, g.padding_l,
                                                g.padding_r),
                attr, engine()};
      });
}

}  // namespace

bool is_same_3x3(const Shape& w, const ops::Conv2DAttrs& a) {
  return a.is_dense() && w[2] == 3 && w[3] == 3 && a.strides[0] == 1 && a.strides[1] == 1 &&
         a.padding == ops::Padding::same;
}

bool adjoint_conv_pays() {
  const CpuIsa isa = cpu_isa();
  return isa == CpuIsa::avx2 || (isa >= CpuIsa::avx512 && cpu_info().amd);
}

namespace {

// Whether a convolution runs as the backward-data convolution of its flipped filter: y = conv(x,
// w) with stride 1 and padding (K - 1) / 2 on both sides of an odd K is the input gradient that
// a convolution by v from y's shape to x's (flipped_filter_layout: w's channel dimensions
// swapped, its rows and columns reversed) gives for the output gradient x. oneDNN 2.6's
// backward-data kernels run ResNet-20's 3x3 convolutions faster than its forward ones under AVX2
// and under AVX-512 on AMD CPUs, but not under AVX-512 on Intel's (adjoint_conv_pays(); the
// measurements: bench/results/cpu_kernel_choices.md). 5x5 filters or lenet's 32 -> 64 channels
// gain nothing. So: fp32, 3x3, the same channels on both sides, 16 or more in whole
// blocks of 8, and a plain filter (a variable: the reorder flips only that); not where the
// Winograd kernels run (conv_algorithm).
bool forward_as_adjoint(const Shape& x, const Shape& w, const ops::Conv2DAttrs& a,
                        const KernelContext& context) {
  return adjoint_conv_pays() && context.precision == Precision::fp32 &&
         context.input_layout(1).is_plain() && is_same_3x3(w, a) && x[0] > 0 && x[1] >= 16 &&
         w[0] == x[1] && x[1] % 8 == 0 &&
         conv_algorithm(x, w, a, memory::data_type::f32) == dnnl::algorithm::convolution_direct;
}

// y = relu((conv + b) + y) over `planes` planes of `positions` x `block` lanes (block a multiple of
// 8, the bias of plane p at b + p % blocks * block), each step as `flags` asks (kBias, kAdd,
// kRelu): the roundings of the kernels apart. conv may be y.
enum EpilogueFlags { kBias = 1, kAdd = 2, kRelu = 4 };
template <int kFlags>
TOWER_ALWAYS_INLINE void epilogue_planes(const float* conv, float* y, const float* bias,
                                         int64_t planes, int64_t blocks, int64_t positions,
                                         int64_t block) {
  using F = Vectors<8>::F;
  for (int64_t p = 0; p < planes; ++p) {
    const float* b = kFlags & kBias ? bias + p % blocks * block : nullptr;
    const float* in = conv + p * positions * block;
    float* out = y + p * positions * block;
    for (int64_t l = 0; l < block; l += 8) {
      F bv{}, v, r;
      if constexpr ((kFlags & kBias) != 0) load(bv, b + l);
      for (int64_t i = l; i < positions * block; i += block) {
        load(v, in + i);
        if constexpr ((kFlags & kBias) != 0) v += bv;
        if constexpr ((kFlags & kAdd) != 0) {
          load(r, out + i);
          v += r;
        }
        if constexpr ((kFlags & kRelu) != 0) v = v > F{} ? v : F{};
        store(out + i, v);
      }
    }
  }
}
TOWER_ALWAYS_INLINE void conv_epilogue_body(const float* conv, float* y, const float* bias,
                                            int64_t planes, int64_t blocks, int64_t positions,
                                            int64_t block, int flags) {
  switch (flags) {
#define TOWER_EPILOGUE_CASE(f) \
  case f:                      \
    return epilogue_planes<f>(conv, y, bias, planes, blocks, positions, block);
    TOWER_EPILOGUE_CASE(1)
    TOWER_EPILOGUE_CASE(2)
    TOWER_EPILOGUE_CASE(3)
    TOWER_EPILOGUE_CASE(4)
    TOWER_EPILOGUE_CASE(5)
    TOWER_EPILOGUE_CASE(6)
    TOWER_EPILOGUE_CASE(7)
#undef TOWER_EPILOGUE_CASE
    default:
      return;
  }
}
TOWER_CPU_VARIANTS(conv_epilogue,
                   (const float* conv, float* y, const float* bias, int64_t planes, int64_t blocks,
                    int64_t positions, int64_t block, int flags),
                   (conv, y, bias, planes, blocks, positions, block, flags))

// The convolution of forward_as_adjoint in chunks of rows of the batch, each chunk's epilogue
// (bias, the output's previous contents added, ReLU: the forward kernels' post-ops) applied by a
// loop right after its convolution, while the chunk is in cache, with the roundings of the kernels
// apart (y + b, then + the previous contents, then ReLU), so that a fused Conv2D+BiasAdd+Relu
// keeps the bits of its nodes run one by one. The chunks (the most images, up to 16, that divide
// the batch and whose output fits in 512 KB) are the tasks, on any thread count the same bits;
// with the output's previous contents added, a chunk's convolution goes to its thread's scratch
// first.
class AdjointConv final : public Kernel {
 public:
  static std::unique_ptr<Kernel> make(const Node& node, const KernelContext& context,
                                      const ConvEpilogue& epilogue) {
    const Shape& x = node.inputs[0].shape();
    const Shape& w = node.inputs[1].shape();
    if (!forward_as_adjoint(x, w, node.attr<ops::Conv2DAttrs>(), context)) return nullptr;
    const Shape& y = node.outputs[0].shape;
    // Chunks of up to 16 images whose output fits in a core's L2 (512 KB on AVX2 EPYCs), where
    // the epilogue finds it.
    int64_t rows = 16;
    while (rows > 1 && (x[0] % rows != 0 || rows * (y.numel() / y[0]) * 4 > (512 << 10))) rows /= 2;
    KernelThreadsScope one_thread(1);  // each chunk runs on one thread
    const Shape xr = with_rows(x, rows), yr = with_rows(y, rows), v{w[1], w[0], w[2], w[3]};
    const ops::Conv2DAttrs& a = node.attr<ops::Conv2DAttrs>();
    auto pd = build(node, [&] {
      const ConvGeometry g = geometry(yr, v, a);
      dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, any_md(yr),
                                                 any_md(v), any_md(xr), g.strides, g.padding_l,
                                                 g.padding_r);
      return dnnl::convolution_backward_data::primitive_desc(
          desc, user_scratchpad(), engine(), forward_pd(yr, v, xr, a, memory::data_type::f32));
    });
    const auto x_md = with_batch(pd.diff_dst_desc(), x[0]);
    const auto y_md = with_batch(pd.diff_src_desc(), y[0]);
    // The epilogue walks planes of channel blocks one after another (nChw8c and the like).
    const auto blocks = channel_blocks(pd.diff_src_desc());
    if (!x_md || !y_md || !blocks || y[1] % blocks->block != 0 || blocks->block % 8 != 0)
      return nullptr;
    const int64_t block = blocks->block, plane = y[2] * y[3] * block;
    const int64_t* st = blocks->strides;
    if (st[3] != block || st[2] != y[3] * block || (y[1] > block && st[1] != plane) ||
        st[0] != y[1] / block * plane)
      return nullptr;
    return std::unique_ptr<Kernel>(
        new AdjointConv(node, context, epilogue, rows, pd, *x_md, *y_md, *blocks));
  }

  size_t scratch_bytes() const override { return member_bytes() * static_cast<size_t>(members_); }
  Layout input_layout(int i) const override {
    if (i == 0) return to_layout(x_md_, node_.inputs[0].shape());
    return i == 1 ? flipped_filter_layout(pd_.weights_desc()) : Layout{};
  }
  Layout output_layout(int) const override { return to_layout(y_md_, node_.outputs[0].shape); }

  // The arguments of chunk c run by member m, at [c * members_ + m].
  void bind(const KernelIO& io) override {
    args_.assign(static_cast<size_t>(chunks_ * members_), {});
    auto* x = static_cast<const char*>(io.inputs[0].raw_data());
    auto* y = static_cast<char*>(io.outputs[0].raw_data());
    const dnnl::memory::desc x_chunk = pd_.diff_dst_desc(), y_chunk = pd_.diff_src_desc();
    const dnnl::memory weights = make_memory(pd_.weights_desc(), io.inputs[1]);
    for (int c = 0; c < chunks_; ++c)
      for (int m = 0; m < members_; ++m) {
        auto& args = args_[static_cast<size_t>(c * members_ + m)];
        char* scratch = static_cast<char*>(io.scratch) + member_bytes() * static_cast<size_t>(m);
        args[DNNL_ARG_DIFF_DST] = dnnl::memory(
            x_chunk, engine(), const_cast<char*>(x) + x_chunk.get_size() * static_cast<size_t>(c));
        args[DNNL_ARG_WEIGHTS] = weights;
        args[DNNL_ARG_DIFF_SRC] =
            dnnl::memory(y_chunk, engine(),
                         epilogue_.add_output ? scratch + scratchpad_bytes()
                                              : y + y_chunk.get_size() * static_cast<size_t>(c));
        add_scratchpad(args, pd_.scratchpad_desc(), scratch);
      }
  }

  Tasks tasks() const override { return Tasks::split(chunks_); }
  void run_task(const KernelIO& io, int task, int member) override {
    const auto& args = args_[static_cast<size_t>(task * members_ + member)];
    execute(node_, prim_, args);
    const size_t chunk = pd_.diff_src_desc().get_size();
    float* y = reinterpret_cast<float*>(static_cast<char*>(io.outputs[0].raw_data()) +
                                        chunk * static_cast<size_t>(task));
    const float* conv = static_cast<const float*>(args.at(DNNL_ARG_DIFF_SRC).get_data_handle());
    epilogue(conv, y, epilogue_.bias ? io.inputs[2].data<float>() : nullptr);
  }
  void run(const KernelIO& io) override {
#pragma omp parallel for num_threads(team_) schedule(dynamic, 1) if (team_ > 1)
    for (int c = 0; c < chunks_; ++c) run_task(io, c, team_ > 1 ? omp_get_thread_num() : 0);
  }

 private:
  AdjointConv(const Node& node, const KernelContext& context, const ConvEpilogue& epilogue,
              int64_t rows, dnnl::convolution_backward_data::primitive_desc pd,
              dnnl::memory::desc x_md, dnnl::memory::desc y_md, ChannelBlocks blocks)
      : node_(node),
        epilogue_(epilogue),
        rows_(rows),
        chunks_(static_cast<int>(node.inputs[0].shape()[0] / rows)),
        team_(std::max(context.num_threads, 1)),
        members_(std::max(context.members, team_)),
        pd_(std::move(pd)),
        prim_(pd_),
        x_md_(std::move(x_md)),
        y_md_(std::move(y_md)),
        block_(blocks.block) {}

  size_t scratchpad_bytes() const { return align64(pd_.scratchpad_desc().get_size()); }
  size_t member_bytes() const {
    return scratchpad_bytes() +
           (epilogue_.add_output ? align64(pd_.diff_src_desc().get_size()) : 0);
  }

  // y (a chunk: rows x planes of block lanes) = relu((conv + b) + y) as the epilogue asks.
  void epilogue(const float* conv, float* y, const float* bias) const {
    const int flags = (epilogue_.bias ? kBias : 0) | (epilogue_.add_output ? kAdd : 0) |
                      (epilogue_.relu ? kRelu : 0);
    const Shape& shape = node_.outputs[0].shape;
    const int64_t blocks = shape[1] / block_;
    conv_epilogue(conv, y, bias, rows_ * blocks, blocks, shape[2] * shape[3], block_, flags);
  }

  const Node& node_;
  ConvEpilogue epilogue_;
  int64_t rows_;
  int chunks_, team_, members_;
  dnnl::convolution_backward_data::primitive_desc pd_;
  dnnl::convolution_backward_data prim_;
  dnnl::memory::desc x_md_, y_md_;
  int64_t block_;
  std::vector<std::unordered_map<int, dnnl::memory>> args_;
};

// Rows per batch chunk (chunks.h) of a convolution whose images (or input gradients) have the
// shape `image`: 4096 positions at least, so that each one-thread primitive has long loops.
int64_t chunk_rows(const Shape& image) {
  const int64_t positions = std::max<int64_t>(image[2] * image[3], 1);
  return std::max<int64_t>(16, (4096 + positions - 1) / positions);
}

// Conv2D, and the fused Conv2D+BiasAdd[+Relu] (inputs x, w, bias).
template <bool kBias, bool kRelu>
std::unique_ptr<Kernel> make_conv2d(const Node& node, const KernelContext& context) {
  return make_conv2d_with(node, context, {.bias = kBias, .relu = kRelu});
}

}  // namespace

std::unique_ptr<Kernel> make_conv2d_with(const Node& node, const KernelContext& context,
                                         ConvEpilogue epilogue) {
  const Shape& x = node.inputs[0].shape();
  const Shape& w = node.inputs[1].shape();
  const Shape& y = node.outputs[0].shape;
  const int64_t bias = epilogue.bias ? w[0] : 0;
  const bool kBias = epilogue.bias;
  // (tower's own kernels apply ReLU alone)
  if (!epilogue.relu6) {
    if (auto winograd = make_winograd_conv(node, context, epilogue)) return winograd;
    if (auto adjoint = AdjointConv::make(node, context, epilogue)) return adjoint;
  }
  return chunked(
      node, context, x[0],
      [&](int64_t rows) {
        auto pd = build(node, [&] {
          return forward_pd(with_rows(x, rows), w, with_rows(y, rows),
                            node.attr<ops::Conv2DAttrs>(), operand_type(context), bias, epilogue);
        });
        std::vector<Arg> args = {input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc(), Role::rows),
                                 input_arg(DNNL_ARG_WEIGHTS, 1, w, pd.weights_desc())};
        if (kBias) args.push_back(input_arg(DNNL_ARG_BIAS, 2, Shape{bias}, pd.bias_desc()));
        args.push_back(output_arg(DNNL_ARG_DST, y, pd.dst_desc(), Role::rows));
        return Built{dnnl::convolution_forward(pd), pd.scratchpad_desc(), std::move(args)};
      },
      Cut::rows, chunk_rows(y));
}

namespace {

KernelRegistrar conv2d_kernel{"Conv2D", DeviceKind::cpu, make_conv2d<false, false>};
KernelRegistrar conv2d_bias_kernel{"Conv2D+BiasAdd", DeviceKind::cpu, make_conv2d<true, false>};
KernelRegistrar conv2d_bias_relu_kernel{"Conv2D+BiasAdd+Relu", DeviceKind::cpu,
                                        make_conv2d<true, true>};

// inputs (w, dy) -> dx
KernelRegistrar conv2d_backprop_input_kernel{
    "Conv2DBackpropInput", DeviceKind::cpu,
    [](const Node& node, const KernelContext& context) -> std::unique_ptr<Kernel> {
      const auto& a = node.attr<ops::Conv2DBackpropAttrs>();
      const memory::data_type type = operand_type(context);
      const Shape& x = a.shape;
      const Shape& w = node.inputs[0].shape();
      const Shape& dy = node.inputs[1].shape();
      if (auto winograd = make_winograd_backprop_input(node, context)) return winograd;
      return chunked(
          node, context, x[0],
          [&](int64_t rows) {
            const Shape xr = with_rows(x, rows), dyr = with_rows(dy, rows);
            auto pd = build(node, [&] {
              ConvGeometry g = geometry(x, w, a.conv);
              return with_algorithm(conv_algorithm(x, w, a.conv, type), [&](dnnl::algorithm alg) {
                dnnl::convolution_backward_data::desc desc(
                    alg, any_md(xr), filter_md(w, a.conv, type), any_md(dyr, type), g.strides,
                    g.dilates, g.padding_l, g.padding_r);
                return dnnl::convolution_backward_data::primitive_desc(
                    desc, user_scratchpad(), engine(), forward_pd(xr, w, dyr, a.conv, type));
              });
            });
            return Built{dnnl::convolution_backward_data(pd), pd.scratchpad_desc(),
                         std::vector<Arg>{
                             input_arg(DNNL_ARG_WEIGHTS, 0, w, pd.weights_desc()),
                             input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc(), Role::rows),
                             output_arg(DNNL_ARG_DIFF_SRC, x, pd.diff_src_desc(), Role::rows)}};
          },
          Cut::rows, chunk_rows(x));
    }};

// inputs (x, dy) -> dw; and Conv2DBackpropFilter+BiasAddGrad (the runtime's fusion of the two
// readers of dy) -> dw, db, the bias gradient summed by the same primitive.
template <bool kBias>
std::unique_ptr<Kernel> make_conv2d_backprop_filter(const Node& node,
                                                    const KernelContext& context) {
  const auto& a = node.attr<ops::Conv2DBackpropAttrs>();
  const memory::data_type type = operand_type(context);
  const Shape& x = node.inputs[0].shape();
  const Shape& w = a.shape;
  const Shape& dy = node.inputs[1].shape();
  const Shape db{w[0]};
  if (auto kernel = make_filter_grad_as_forward(node, context, kBias)) return kernel;
  if (auto kernel = make_small_filter_grad(node, context, kBias)) return kernel;
  if (auto kernel = make_winograd_filter_grad(node, context, kBias)) return kernel;
  return chunked(
      node, context, x[0],
      [&](int64_t rows) {
        const Shape xr = with_rows(x, rows), dyr = with_rows(dy, rows);
        auto pd = build(node, [&] {
          ConvGeometry g = geometry(x, w, a.conv);
          return with_algorithm(conv_algorithm(x, w, a.conv, type), [&](dnnl::algorithm alg) {
            auto desc = kBias
                            ? dnnl::convolution_backward_weights::desc(
                                  alg, any_md(xr, type), filter_md(w, a.conv), plain_md(db),
                                  any_md(dyr, type), g.strides, g.dilates, g.padding_l, g.padding_r)
                            : dnnl::convolution_backward_weights::desc(
                                  alg, any_md(xr, type), filter_md(w, a.conv), any_md(dyr, type),
                                  g.strides, g.dilates, g.padding_l, g.padding_r);
            return dnnl::convolution_backward_weights::primitive_desc(
                desc, user_scratchpad(), engine(),
                forward_pd(xr, w, dyr, a.conv, type, kBias ? w[0] : 0));
          });
        });
        std::vector<Arg> args = {
            input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc(), Role::rows),
            input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc(), Role::rows),
            output_arg(DNNL_ARG_DIFF_WEIGHTS, w, pd.diff_weights_desc(), Role::sum)};
        if (kBias)
          args.push_back(output_arg(DNNL_ARG_DIFF_BIAS, db, pd.diff_bias_desc(), Role::sum, 1));
        return Built{dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(), std::move(args)};
      },
      Cut::sums);
}

KernelRegistrar conv2d_backprop_filter_kernel{"Conv2DBackpropFilter", DeviceKind::cpu,
                                              make_conv2d_backprop_filter<false>};
KernelRegistrar conv2d_backprop_filter_bias_kernel{
    "Conv2DBackpropFilter+BiasAddGrad", DeviceKind::cpu, make_conv2d_backprop_filter<true>};

}  // namespace
}  // namespace tower::cpu
