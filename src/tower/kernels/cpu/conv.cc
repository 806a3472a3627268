// Conv2D and its adjoints with oneDNN. The primitives pick their own (blocked) layouts
// (format_tag::any), which are much faster than plain NCHW for direct convolution, and declare
// them as their input and output layouts: the runtime reorders only where a neighbour differs.
#include "tower/ops/conv.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <vector>

#include "tower/kernels/cpu/dnnl_util.h"
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

struct ConvGeometry {
  memory::dims strides, padding_l, padding_r;
};

ConvGeometry geometry(const Shape& x, const Shape& w, const ops::Conv2DAttrs& a) {
  ops::AxisPadding ph = ops::axis_padding(x[2], w[2], a.strides[0], a.padding);
  ops::AxisPadding pw = ops::axis_padding(x[3], w[3], a.strides[1], a.padding);
  return {{a.strides[0], a.strides[1]}, {ph.before, pw.before}, {ph.after, pw.after}};
}

// The forward descriptor, also the hint the backward primitives are built against. Fused
// (Conv2D+BiasAdd[+Relu]): with a bias of `bias` channels (f32) and ReLU as a post-op.
dnnl::convolution_forward::primitive_desc forward_pd(const Shape& x, const Shape& w, const Shape& y,
                                                     const ops::Conv2DAttrs& a,
                                                     memory::data_type type, int64_t bias = 0,
                                                     bool relu = false) {
  ConvGeometry g = geometry(x, w, a);
  const auto prop = dnnl::prop_kind::forward_training;
  const auto alg = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr = user_scratchpad();
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  if (bias > 0)
    return {dnnl::convolution_forward::desc(prop, alg, any_md(x, type), any_md(w, type),
                                            plain_md(Shape{bias}), any_md(y), g.strides,
                                            g.padding_l, g.padding_r),
            attr, engine()};
  return {dnnl::convolution_forward::desc(prop, alg, any_md(x, type), any_md(w, type), any_md(y),
                                          g.strides, g.padding_l, g.padding_r),
          attr, engine()};
}

// One tensor argument of the primitive, in the layout the primitive chose: the runtime hands it
// over in that layout (converting only where the neighbouring kernel wrote or reads another).
// With batch chunks (below), `md` is a chunk's: `rows` arguments are cut into chunks of rows, a
// `sum` output (a weight or bias gradient) is the sum of the chunks' results.
enum class Role { whole, rows, sum };
struct Arg {
  int dnnl_arg = 0;
  bool is_output = false;
  int index = 0;  // into io.inputs or io.outputs
  Shape shape;    // the whole tensor's
  memory::desc md;
  Role role = Role::whole;
};

// A primitive with its arguments, built for a batch of some number of rows.
struct Built {
  dnnl::primitive prim;
  memory::desc scratchpad_md;
  std::vector<Arg> args;
};

// `md` (of some rows) for `batch` rows, when the batch is its outermost dimension (not blocked,
// the largest stride), so that chunks of rows lie one after another; nullopt otherwise.
std::optional<memory::desc> with_batch(const memory::desc& md, int64_t batch) {
  dnnl_memory_desc_t d = md.data;
  if (d.format_kind != dnnl_blocked || d.offset0 != 0) return std::nullopt;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  for (int i = 0; i < b.inner_nblks; ++i)
    if (b.inner_idxs[i] == 0) return std::nullopt;
  const size_t elem = memory::data_type_size(md.data_type());
  if (static_cast<size_t>(b.strides[0] * d.padded_dims[0]) * elem != md.get_size())
    return std::nullopt;
  d.dims[0] = d.padded_dims[0] = batch;
  return memory::desc(d);
}

// A convolution primitive, run either once by the whole team or, with batch chunks, once per
// chunk of rows on one thread each: the team takes the chunks one at a time (a dynamic
// schedule), so a thread slowed down by another process on its core runs fewer chunks instead
// of holding the others back (oneDNN splits one primitive's work evenly and statically over its
// team). The chunks' weight and bias gradients are then added in chunk order, so the result
// does not depend on which thread ran which chunk.
class ConvKernel : public Kernel {
 public:
  // `node` must outlive the kernel (the graph does). The arguments list the inputs first.
  ConvKernel(const Node& node, Built built, int chunks, int threads)
      : node_(node),
        prim_(std::move(built.prim)),
        scratchpad_md_(built.scratchpad_md),
        args_(std::move(built.args)),
        chunks_(chunks),
        threads_(chunks > 1 ? threads : 1) {
    for (const Value& in : node.inputs) has_empty_input_ |= in.shape().numel() == 0;
  }

  // oneDNN's scratchpad for each thread, then the sum outputs of chunks 1... (chunk 0 writes the
  // output itself).
  size_t scratch_bytes() const override {
    size_t bytes = align64(scratchpad_md_.get_size()) * static_cast<size_t>(threads_);
    for (const Arg& arg : args_)
      if (arg.role == Role::sum) bytes += align64(arg.md.get_size()) * (chunks_ - 1);
    return bytes;
  }
  Layout input_layout(int i) const override { return layout_of(false, i); }
  Layout output_layout(int o) const override { return layout_of(true, o); }

  // The arguments of chunk c run by thread t, at [c * threads_ + t].
  void bind(const KernelIO& io) override {
    char* scratch = static_cast<char*>(io.scratch);
    char* partials = scratch + align64(scratchpad_md_.get_size()) * static_cast<size_t>(threads_);
    chunk_args_.assign(static_cast<size_t>(chunks_ * threads_), {});
    sums_.clear();
    for (const Arg& arg : args_) {
      const Tensor& t = arg.is_output ? io.outputs[static_cast<size_t>(arg.index)]
                                      : io.inputs[static_cast<size_t>(arg.index)];
      char* base = static_cast<char*>(const_cast<void*>(t.raw_data()));
      if (arg.role == Role::sum && chunks_ > 1)
        sums_.push_back({reinterpret_cast<float*>(base),
                         static_cast<int64_t>(arg.md.get_size() / sizeof(float)),
                         {}});
      for (int c = 0; c < chunks_; ++c) {
        char* data = base;
        if (arg.role == Role::rows) data += arg.md.get_size() * static_cast<size_t>(c);
        if (arg.role == Role::sum && c > 0) {
          data = partials;
          partials += align64(arg.md.get_size());
          sums_.back().partials.push_back(reinterpret_cast<const float*>(data));
        }
        for (int th = 0; th < threads_; ++th)
          chunk_args_[static_cast<size_t>(c * threads_ + th)][arg.dnnl_arg] =
              dnnl::memory(arg.md, engine(), data);
      }
    }
    for (int c = 0; c < chunks_; ++c)
      for (int th = 0; th < threads_; ++th)
        add_scratchpad(chunk_args_[static_cast<size_t>(c * threads_ + th)], scratchpad_md_,
                       scratch + align64(scratchpad_md_.get_size()) * static_cast<size_t>(th));
  }

  void run(const KernelIO& io) override {
    // oneDNN skips primitives on empty tensors; an empty batch still has a (zero) filter gradient.
    if (has_empty_input_) {
      for (const Arg& arg : args_)
        if (arg.is_output)
          std::memset(const_cast<void*>(io.outputs[static_cast<size_t>(arg.index)].raw_data()), 0,
                      arg.md.get_size());  // the whole tensor's: an empty batch is one chunk
      return;
    }
    if (chunks_ == 1) {
      execute(node_, prim_, chunk_args_[0]);
      return;
    }
    std::exception_ptr error;
#pragma omp parallel for num_threads(threads_) schedule(dynamic, 1)
    for (int c = 0; c < chunks_; ++c) {
      try {
        execute(node_, prim_,
                chunk_args_[static_cast<size_t>(c * threads_ + omp_get_thread_num())]);
      } catch (...) {
#pragma omp critical(tower_conv_chunk_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    add_partials();
  }

 private:
  // Each sum output += the partial results of chunks 1..., in chunk order.
  void add_partials() {
    constexpr int64_t kBlock = 4096;
    for (const SumOutput& sum : sums_) {
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int64_t begin = 0; begin < sum.n; begin += kBlock) {
        const int64_t end = std::min(sum.n, begin + kBlock);
        for (const float* in : sum.partials)
          for (int64_t i = begin; i < end; ++i) sum.out[i] += in[i];
      }
    }
  }

  Layout layout_of(bool is_output, int index) const {
    for (const Arg& arg : args_)
      if (arg.is_output == is_output && arg.index == index)
        return to_layout(
            chunks_ > 1 && arg.role == Role::rows ? *with_batch(arg.md, arg.shape[0]) : arg.md,
            arg.shape);
    return {};
  }

  // A weight or bias gradient (chunk 0's result, in place) and where chunks 1... wrote theirs.
  struct SumOutput {
    float* out;
    int64_t n;
    std::vector<const float*> partials;
  };
  const Node& node_;
  dnnl::primitive prim_;
  memory::desc scratchpad_md_;
  std::vector<Arg> args_;
  int chunks_, threads_;
  bool has_empty_input_ = false;
  std::vector<std::unordered_map<int, memory>> chunk_args_;
  std::vector<SumOutput> sums_;
};

Arg input_arg(int dnnl_arg, int index, const Shape& shape, const memory::desc& md,
              Role role = Role::whole) {
  return Arg{.dnnl_arg = dnnl_arg, .index = index, .shape = shape, .md = md, .role = role};
}

Arg output_arg(int dnnl_arg, const Shape& shape, const memory::desc& md, Role role, int index = 0) {
  return Arg{.dnnl_arg = dnnl_arg,
             .is_output = true,
             .index = index,
             .shape = shape,
             .md = md,
             .role = role};
}

Shape with_rows(const Shape& shape, int64_t rows) {
  std::vector<int64_t> dims = shape.dims();
  dims[0] = rows;
  return Shape(dims);
}

// Chunks of at least 16 rows (smaller ones lose speed in bf16), at most 16 of them, when the team
// has several threads.
int chunks_for(int64_t batch, int threads) {
  if (threads < 2) return 1;
  for (int chunks : {16, 8, 4, 2})
    if (batch % chunks == 0 && batch / chunks >= 16) return chunks;
  return 1;
}

// The kernel of `build(rows)` (a primitive for `rows` of the batch), in batch chunks where
// chunks_for() wants them and the primitive's layouts allow (the batch outermost), else whole.
template <typename Build>
std::unique_ptr<Kernel> chunked(const Node& node, const KernelContext& context, int64_t batch,
                                Build build) {
  const int threads = std::max(context.num_threads, 1);
  if (const int chunks = chunks_for(batch, threads); chunks > 1) {
    KernelThreadsScope one_thread(1);
    Built built = build(batch / chunks);
    bool contiguous = true;
    for (const Arg& arg : built.args)
      contiguous &= arg.role != Role::rows || with_batch(arg.md, batch).has_value();
    if (contiguous) return std::make_unique<ConvKernel>(node, std::move(built), chunks, threads);
  }
  return std::make_unique<ConvKernel>(node, build(batch), 1, threads);
}

// Conv2D, and the fused Conv2D+BiasAdd[+Relu] (inputs x, w, bias).
template <bool kBias, bool kRelu>
std::unique_ptr<Kernel> make_conv2d(const Node& node, const KernelContext& context) {
  const Shape& x = node.inputs[0].shape();
  const Shape& w = node.inputs[1].shape();
  const Shape& y = node.outputs[0].shape;
  const int64_t bias = kBias ? w[0] : 0;
  return chunked(node, context, x[0], [&](int64_t rows) {
    auto pd = build(node, [&] {
      return forward_pd(with_rows(x, rows), w, with_rows(y, rows), node.attr<ops::Conv2DAttrs>(),
                        operand_type(context), bias, kRelu);
    });
    std::vector<Arg> args = {input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc(), Role::rows),
                             input_arg(DNNL_ARG_WEIGHTS, 1, w, pd.weights_desc())};
    if (kBias) args.push_back(input_arg(DNNL_ARG_BIAS, 2, Shape{bias}, pd.bias_desc()));
    args.push_back(output_arg(DNNL_ARG_DST, y, pd.dst_desc(), Role::rows));
    return Built{dnnl::convolution_forward(pd), pd.scratchpad_desc(), std::move(args)};
  });
}

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
      return chunked(node, context, x[0], [&](int64_t rows) {
        const Shape xr = with_rows(x, rows), dyr = with_rows(dy, rows);
        auto pd = build(node, [&] {
          ConvGeometry g = geometry(x, w, a.conv);
          dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct,
                                                     any_md(xr), any_md(w, type), any_md(dyr, type),
                                                     g.strides, g.padding_l, g.padding_r);
          return dnnl::convolution_backward_data::primitive_desc(
              desc, user_scratchpad(), engine(), forward_pd(xr, w, dyr, a.conv, type));
        });
        return Built{
            dnnl::convolution_backward_data(pd), pd.scratchpad_desc(),
            std::vector<Arg>{input_arg(DNNL_ARG_WEIGHTS, 0, w, pd.weights_desc()),
                             input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc(), Role::rows),
                             output_arg(DNNL_ARG_DIFF_SRC, x, pd.diff_src_desc(), Role::rows)}};
      });
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
  return chunked(node, context, x[0], [&](int64_t rows) {
    const Shape xr = with_rows(x, rows), dyr = with_rows(dy, rows);
    auto pd = build(node, [&] {
      ConvGeometry g = geometry(x, w, a.conv);
      auto desc = kBias ? dnnl::convolution_backward_weights::desc(
                              dnnl::algorithm::convolution_direct, any_md(xr, type), any_md(w),
                              plain_md(db), any_md(dyr, type), g.strides, g.padding_l, g.padding_r)
                        : dnnl::convolution_backward_weights::desc(
                              dnnl::algorithm::convolution_direct, any_md(xr, type), any_md(w),
                              any_md(dyr, type), g.strides, g.padding_l, g.padding_r);
      return dnnl::convolution_backward_weights::primitive_desc(
          desc, user_scratchpad(), engine(),
          forward_pd(xr, w, dyr, a.conv, type, kBias ? w[0] : 0));
    });
    std::vector<Arg> args = {
        input_arg(DNNL_ARG_SRC, 0, x, pd.src_desc(), Role::rows),
        input_arg(DNNL_ARG_DIFF_DST, 1, dy, pd.diff_dst_desc(), Role::rows),
        output_arg(DNNL_ARG_DIFF_WEIGHTS, w, pd.diff_weights_desc(), Role::sum)};
    if (kBias)
      args.push_back(output_arg(DNNL_ARG_DIFF_BIAS, db, pd.diff_bias_desc(), Role::sum, 1));
    return Built{dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(), std::move(args)};
  });
}

KernelRegistrar conv2d_backprop_filter_kernel{"Conv2DBackpropFilter", DeviceKind::cpu,
                                              make_conv2d_backprop_filter<false>};
KernelRegistrar conv2d_backprop_filter_bias_kernel{
    "Conv2DBackpropFilter+BiasAddGrad", DeviceKind::cpu, make_conv2d_backprop_filter<true>};

}  // namespace
}  // namespace tower::cpu
