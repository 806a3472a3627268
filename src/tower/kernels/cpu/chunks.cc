// Batch chunks of oneDNN primitives (chunks.h).
#include "tower/kernels/cpu/chunks.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>

namespace tower::cpu {
namespace {

using dnnl::memory;

// A primitive run either once (built for the team or for one thread) or, with batch chunks, once
// per chunk of rows on one thread each, the sum outputs of chunks 1... then added in chunk order.
class ChunkedKernel : public Kernel {
 public:
  // `node` must outlive the kernel (the graph does). The arguments list the inputs first.
  ChunkedKernel(const Node& node, Built built, int chunks, int team, int members, bool one_thread)
      : node_(node),
        prim_(std::move(built.prim)),
        scratchpad_md_(built.scratchpad_md),
        args_(std::move(built.args)),
        chunks_(chunks),
        slots_(chunks > 1 ? members : 1),
        team_(team),
        one_thread_(one_thread) {
    for (const Value& in : node.inputs) has_empty_input_ |= in.shape().numel() == 0;
  }

  // oneDNN's scratchpad for each thread, then the sum outputs of chunks 1... (chunk 0 writes the
  // output itself).
  size_t scratch_bytes() const override {
    size_t bytes = align64(scratchpad_md_.get_size()) * static_cast<size_t>(slots_);
    for (const Arg& arg : args_)
      if (arg.role == Role::sum) bytes += align64(arg.md.get_size()) * (chunks_ - 1);
    return bytes;
  }
  Layout input_layout(int i) const override { return layout_of(false, i); }
  Layout output_layout(int o) const override { return layout_of(true, o); }

  // The arguments of chunk c run by thread t, at [c * slots_ + t].
  void bind(const KernelIO& io) override {
    char* scratch = static_cast<char*>(io.scratch);
    char* partials = scratch + align64(scratchpad_md_.get_size()) * static_cast<size_t>(slots_);
    chunk_args_.assign(static_cast<size_t>(chunks_ * slots_), {});
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
        for (int th = 0; th < slots_; ++th)
          chunk_args_[static_cast<size_t>(c * slots_ + th)][arg.dnnl_arg] =
              dnnl::memory(arg.md, engine(), data);
      }
    }
    for (int c = 0; c < chunks_; ++c)
      for (int th = 0; th < slots_; ++th)
        add_scratchpad(chunk_args_[static_cast<size_t>(c * slots_ + th)], scratchpad_md_,
                       scratch + align64(scratchpad_md_.get_size()) * static_cast<size_t>(th));
  }

  // A chunk per task; a primitive built for a team needs it.
  Tasks tasks() const override {
    if (has_empty_input_) return Tasks::one();
    if (chunks_ > 1) return Tasks::split(chunks_);
    return team_ > 1 && !one_thread_ ? Tasks::team() : Tasks::one();
  }
  void run_task(const KernelIO& io, int task, int member) override {
    if (chunks_ == 1 || has_empty_input_) return run(io);
    execute(node_, prim_, chunk_args_[static_cast<size_t>(task * slots_ + member)]);
  }
  void finish_tasks(const KernelIO& io) override {
    if (chunks_ > 1 && !has_empty_input_) add_partials();
  }

  void run(const KernelIO& io) override {
    // oneDNN skips primitives on empty tensors; an empty batch still has a (zero) filter gradient.
    if (has_empty_input_) {
      for (const Arg& arg : args_)
        if (arg.is_output)
          std::memset(io.outputs[static_cast<size_t>(arg.index)].raw_data(), 0,
                      arg.md.get_size());  // the whole tensor's: an empty batch is one chunk
      return;
    }
    if (chunks_ == 1) {
      // (a one-thread primitive on one thread, whatever team runs it: oneDNN's gemm asks OpenMP)
      KernelThreadsScope threads(one_thread_ ? 1 : kernel_threads());
      execute(node_, prim_, chunk_args_[0]);
      return;
    }
    std::exception_ptr error;
#pragma omp parallel for num_threads(team_) schedule(dynamic, 1)
    for (int c = 0; c < chunks_; ++c) {
      try {
        execute(node_, prim_, chunk_args_[static_cast<size_t>(c * slots_ + omp_get_thread_num())]);
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
#pragma omp parallel for num_threads(team_) schedule(static) if (sum.n > kBlock)
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
        return to_layout(chunks_ > 1 && arg.role == Role::rows
                             ? *with_batch(arg.declared_md(), arg.shape[0])
                             : arg.declared_md(),
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
  int chunks_;
  int slots_;        // with chunks: KernelContext::members, each with its scratchpad and arguments
  int team_;         // the program's
  bool one_thread_;  // the primitive was built for one thread (else for the team)
  bool has_empty_input_ = false;
  std::vector<std::unordered_map<int, memory>> chunk_args_;
  std::vector<SumOutput> sums_;
};

}  // namespace

Arg input_arg(int dnnl_arg, int index, const Shape& shape, const memory::desc& md, Role role) {
  return Arg{.dnnl_arg = dnnl_arg, .index = index, .shape = shape, .md = md, .role = role};
}

Arg output_arg(int dnnl_arg, const Shape& shape, const memory::desc& md, Role role, int index) {
  return Arg{.dnnl_arg = dnnl_arg,
             .is_output = true,
             .index = index,
             .shape = shape,
             .md = md,
             .role = role};
}

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

Shape with_rows(const Shape& shape, int64_t rows) {
  std::vector<int64_t> dims = shape.dims();
  dims[0] = rows;
  return Shape(dims);
}

namespace {

// The most chunks (16, 8, 4 or 2) that divide `batch` into chunks of `min_rows` rows or more; 1
// where none does.
int chunks_of(int64_t batch, int64_t min_rows) {
  for (int chunks : {16, 8, 4, 2})
    if (batch % chunks == 0 && batch / chunks >= min_rows) return chunks;
  return 1;
}

}  // namespace

std::unique_ptr<Kernel> chunked(const Node& node, const KernelContext& context, int64_t batch,
                                const BuildFn& build, Cut cut, int64_t min_rows) {
  const int team = std::max(context.num_threads, 1);
  const int members = std::max(context.members, team);
  // Two chunks at least where the batch divides (a team of two shares them); nothing of the team.
  const int chunks = chunks_of(batch, std::min(min_rows, std::max<int64_t>(batch / 2, 1)));
  if (chunks > 1) {
    // A chunk runs on one thread: oneDNN's primitives cut their work (a gemm even its sums) by the
    // threads they were built for.
    KernelThreadsScope one(1);
    Built built = build(batch / chunks);
    bool contiguous = true;
    for (const Arg& arg : built.args)
      contiguous &= arg.role != Role::rows || with_batch(arg.declared_md(), batch).has_value();
    if (contiguous)
      return std::make_unique<ChunkedKernel>(node, std::move(built), chunks, team, members, true);
  }
  // One primitive of the whole batch: on one thread where it sums over the batch, else the team's.
  const bool one_thread = cut == Cut::sums || team == 1;
  KernelThreadsScope threads(one_thread ? 1 : team);
  return std::make_unique<ChunkedKernel>(node, build(batch), 1, team, members, one_thread);
}

}  // namespace tower::cpu
