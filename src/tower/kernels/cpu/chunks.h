// oneDNN primitives in batch chunks. oneDNN splits one primitive's work evenly and statically
// over its thread team, so a thread slowed down by another process on its core holds the whole
// team back. A chunked kernel instead builds a one-thread primitive for a chunk of rows of the
// batch and has the team take the chunks one at a time (a dynamic schedule): a slowed thread runs
// fewer chunks. Outputs that sum over the batch (a weight or bias gradient) are each chunk's
// result added in chunk order, so the bits do not depend on which thread ran which chunk.
// Convolutions, pooling and matmuls use it (only kernel files include this).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tower/kernels/cpu/dnnl_util.h"

namespace tower::cpu {

// One tensor argument of the primitive. `md` is its layout for the primitive (a chunk's, with
// batch chunks), which the kernel declares as the tensor's layout, so the runtime hands the tensor
// over in it. A `rows` argument is cut into chunks of rows (the batch must be outermost in
// memory); a `sum` output is the sum of the chunks' results; a `whole` one is read whole by every
// chunk. `layout_md`, when set, is the tensor's own layout where `md` views the same bytes another
// way (a matmul operand read transposed): the kernel declares it instead of `md`.
enum class Role { whole, rows, sum };
struct Arg {
  int dnnl_arg = 0;
  bool is_output = false;
  int index = 0;  // into io.inputs or io.outputs
  Shape shape;    // the whole tensor's
  dnnl::memory::desc md;
  Role role = Role::whole;
  std::optional<dnnl::memory::desc> layout_md;
  // The layout the kernel declares for the tensor.
  const dnnl::memory::desc& declared_md() const { return layout_md ? *layout_md : md; }
};
Arg input_arg(int dnnl_arg, int index, const Shape& shape, const dnnl::memory::desc& md,
              Role role = Role::whole);
Arg output_arg(int dnnl_arg, const Shape& shape, const dnnl::memory::desc& md, Role role,
               int index = 0);

// A primitive with its arguments, built for a batch of some number of rows.
struct Built {
  dnnl::primitive prim;
  dnnl::memory::desc scratchpad_md;
  std::vector<Arg> args;
};

// `shape` with `rows` rows (dimension 0).
Shape with_rows(const Shape& shape, int64_t rows);
// `md` (of some rows) for `batch` rows, when the batch is its outermost dimension (not blocked,
// the largest stride), so that chunks of rows lie one after another; nullopt otherwise.
std::optional<dnnl::memory::desc> with_batch(const dnnl::memory::desc& md, int64_t batch);

// A kernel's batch is cut into chunks fixed by the batch and `min_rows` alone, never by the
// team: each chunk is a one-thread primitive, which one thread runs in turn or a team shares, and
// a sum output (a weight gradient) adds the chunks' sums in chunk order. So the bits are the same
// on any number of threads. Where the batch gives one chunk (an odd batch) or a `rows` argument's
// layout allows none, one primitive of the whole batch runs: on one thread where it sums over the
// batch (Cut::sums), else on the team (Cut::rows; its bits may then depend on the team's size).
enum class Cut { rows, sums };

// The kernel of `build(rows)` (a primitive for `rows` of the batch), in the most chunks (up to
// 16) of at least `min_rows` rows (smaller ones lose speed in bf16; a matmul's gemm wants more),
// or of half the batch where that is fewer.
using BuildFn = std::function<Built(int64_t rows)>;
std::unique_ptr<Kernel> chunked(const Node& node, const KernelContext& context, int64_t batch,
                                const BuildFn& build, Cut cut, int64_t min_rows = 16);

}  // namespace tower::cpu
