// The frame of tower's hand-written weight-gradient kernels (conv_filter_grad.cc,
// conv_filter_grad_winograd.cc): the tasks are fixed chunks of a batch's images, each summing
// into a partial of its own, which finish_tasks() adds in chunk order, so the bits do not depend
// on which thread ran which chunk (only kernel files include this).
#pragma once

#include <omp.h>

#include <algorithm>

#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {

// A kernel of ceil(batch / rows) chunks (one at least). Its scratch: `member_bytes` for each
// member of the team that may run a chunk, then `part_bytes` for each chunk's partial. The
// subclass writes run_task() (chunk `task` on `member`) and finish_tasks().
class ChunkPartialsKernel : public Kernel {
 public:
  ChunkPartialsKernel(const KernelContext& context, int64_t batch, int64_t rows,
                      size_t member_bytes, size_t part_bytes)
      : chunks_(static_cast<int>(std::max<int64_t>((batch + rows - 1) / rows, 1))),
        team_(std::max(context.num_threads, 1)),
        members_(std::max(context.members, team_)),
        member_bytes_(align64(member_bytes)),
        part_bytes_(align64(part_bytes)) {}

  size_t scratch_bytes() const override {
    return member_bytes_ * static_cast<size_t>(members_) +
           part_bytes_ * static_cast<size_t>(chunks_);
  }
  Tasks tasks() const override { return Tasks::split(chunks_); }
  // The chunks on the team, one at a time each, then finish_tasks().
  void run(const KernelIO& io) override {
#pragma omp parallel for num_threads(team_) schedule(dynamic, 1) if (chunks_ > 1 && team_ > 1)
    for (int c = 0; c < chunks_; ++c) run_task(io, c, omp_get_thread_num());
    finish_tasks(io);
  }

 protected:
  int chunks() const { return chunks_; }
  float* member_scratch(const KernelIO& io, int member) const {
    return reinterpret_cast<float*>(static_cast<char*>(io.scratch) +
                                    member_bytes_ * static_cast<size_t>(member));
  }
  float* part(const KernelIO& io, int chunk) const {
    return reinterpret_cast<float*>(static_cast<char*>(io.scratch) +
                                    member_bytes_ * static_cast<size_t>(members_) +
                                    part_bytes_ * static_cast<size_t>(chunk));
  }

 private:
  int chunks_, team_, members_;
  size_t member_bytes_, part_bytes_;
};

}  // namespace tower::cpu
