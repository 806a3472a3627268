// Combining the gradients of all towers into the average over the global batch.
//
// A reducer is told where every tower's gradients live once (fixed buffers of the compiled
// Programs); each step, towers call ready(tower, variable) as each gradient is produced, and the
// trainer calls finish() before the optimizer update. The average is weighted by the examples
// each tower saw, so an uneven split still gives the mean over the whole batch.
//
// With a communicator of several ranks the reduction is hierarchical: the towers of this process
// are summed first (in-process, as buckets fill), then each bucket is summed across ranks by one
// communication thread while the backward pass goes on; weights are then shares of the batch of
// all ranks together.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "tower/core/tensor.h"
#include "tower/core/thread_pool.h"
#include "tower/parallel/communicator.h"

namespace tower {

enum class Strategy {
  central,    // gather on the host, average per variable after all towers finish, one master copy
  allreduce,  // bucketed all-reduce as buckets fill, overlapped with backward; mirrored replicas
};
Strategy parse_strategy(std::string_view name);  // "central" | "allreduce"
std::string_view strategy_name(Strategy strategy);

// When reduction work happened, for tests and benchmarks (seconds since the step began).
struct ReduceTrace {
  double first_reduce_start = -1;  // first bucket's reduction began
  double last_ready = 0;           // the last gradient of the last tower was produced
  double reduce_seconds = 0;       // total time spent reducing (summed over reducer threads)
  double finish_wait_seconds = 0;  // time the trainer waited in finish() after the towers ended
  double comm_seconds = 0;         // time in cross-rank collectives (including waiting for ranks)
};

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  virtual void begin_step() = 0;
  virtual void ready(int tower, int variable) = 0;  // thread-safe
  // Called by a tower's thread once its gradients are all handed over: the reducer may use the
  // thread until the reduction that waits for the towers is done.
  virtual void help(int tower) {}
  virtual void finish() = 0;  // all reduced (rethrows a reducer failure)
  // A tower failed this step: stop waiting for its gradients (finish() then returns promptly).
  virtual void abort() = 0;
  // The averaged gradient of `variable` as seen by replica `replica` (central: only replica 0).
  virtual Tensor& result(int replica, int variable) = 0;  // the optimizer may clip it in place
  virtual int num_replicas() const = 0;
  virtual ReduceTrace trace() const = 0;
};

// grads[tower][variable]: views of the towers' gradient buffers. weights[tower]: that tower's
// share of the global batch (over all ranks: they sum to 1 / comm->size() on each rank).
// comm: null for this process alone.
std::unique_ptr<GradientReducer> make_central_reducer(std::vector<std::vector<Tensor>> grads,
                                                      std::vector<float> weights,
                                                      Communicator* comm = nullptr);
// bucket_bytes: gradients are grouped in production order (last variables first) into buckets of
// about this size; each bucket is reduced as soon as every tower has produced all of it, by the
// reducer's threads and the towers' that are done, chunk by chunk. The replicas share one buffer
// of averaged gradients.
std::unique_ptr<GradientReducer> make_allreduce_reducer(std::vector<std::vector<Tensor>> grads,
                                                        std::vector<float> weights,
                                                        size_t bucket_bytes,
                                                        Communicator* comm = nullptr);
// The variables of each bucket, in reduction order: from the last variable (backward produces
// the last layers' gradients first), about bucket_bytes each.
std::vector<std::vector<int>> make_buckets(const std::vector<Tensor>& grads, size_t bucket_bytes);
// The bucket sizes in bytes, in reduction order (for benchmarks and the scaling model).
std::vector<size_t> bucket_sizes(const std::vector<Tensor>& grads, size_t bucket_bytes);
// GPU towers (builds with NCCL): grads are device buffers written on streams[tower] (ready() may
// come as soon as the kernel is queued); the sums go over NCCL between all GPUs of all ranks and
// come back to one host copy per tower for the optimizer.
std::unique_ptr<GradientReducer> make_nccl_reducer(std::vector<std::vector<Tensor>> grads,
                                                   std::vector<float> weights,
                                                   std::vector<void*> streams, size_t bucket_bytes,
                                                   Communicator* comm);

}  // namespace tower
