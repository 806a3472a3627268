// The NCCL reducer of GPU towers: each tower's gradients are gathered, scaled by its share of the
// global batch, into a flat device buffer in bucket order on the tower's communication stream;
// as soon as every local tower has a bucket, one grouped ncclAllReduce sums it over all GPUs of
// all ranks (one NCCL communicator per tower; the NCCL id travels over the job's Communicator),
// and the sum is copied to the tower's host replica for the optimizer. Buckets are launched in
// the same order everywhere, as NCCL requires.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <mutex>

#include "tower/kernels/cuda/launch.h"
#include "tower/parallel/gradient_reducer.h"

namespace tower {
namespace {

void check_nccl(ncclResult_t status, const char* call) {
  if (status != ncclSuccess) fail("NCCL error in {}: {}", call, ncclGetErrorString(status));
}
#define TOWER_NCCL_CHECK(call) check_nccl((call), #call)

using Clock = std::chrono::steady_clock;

// Makes a GPU current for a scope: the callers are tower threads that must get their own back.
struct DeviceGuard {
  explicit DeviceGuard(int device) {
    TOWER_CUDA_CHECK(cudaGetDevice(&previous));
    TOWER_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous); }
  int previous = 0;
};

class NcclReducer : public GradientReducer {
 public:
  NcclReducer(std::vector<std::vector<Tensor>> grads, std::vector<float> weights, size_t bucket_bytes,
              Communicator* comm)
      : grads_(std::move(grads)), weights_(std::move(weights)) {
    const size_t towers = grads_.size();
    bucket_of_.assign(grads_[0].size(), 0);
    offset_of_.assign(grads_[0].size(), 0);
    for (std::vector<int>& variables : make_buckets(grads_[0], bucket_bytes)) {
      Bucket bucket;
      bucket.offset = total_;
      for (int v : variables) {
        bucket_of_[static_cast<size_t>(v)] = static_cast<int>(buckets_.size());
        offset_of_[static_cast<size_t>(v)] = total_;
        total_ += grads_[0][static_cast<size_t>(v)].numel();
      }
      bucket.numel = total_ - bucket.offset;
      bucket.variables = std::move(variables);
      buckets_.push_back(std::move(bucket));
    }

    // One NCCL rank per tower of every process: ids from rank 0 of the job.
    const int ranks = comm != nullptr ? comm->size() : 1, rank = comm != nullptr ? comm->rank() : 0;
    ncclUniqueId id{};
    if (rank == 0) TOWER_NCCL_CHECK(ncclGetUniqueId(&id));
    if (comm != nullptr) comm->broadcast(&id, sizeof(id), 0);
    const int world = ranks * static_cast<int>(towers);
    towers_.resize(towers);
    TOWER_NCCL_CHECK(ncclGroupStart());
    for (size_t t = 0; t < towers; ++t) {
      Tower& tw = towers_[t];
      tw.device = grads_[t][0].device().index;
      DeviceGuard guard(tw.device);
      TOWER_CUDA_CHECK(cudaStreamCreateWithFlags(&tw.stream, cudaStreamNonBlocking));
      tw.flat = Tensor(Shape{total_}, DType::f32, grads_[t][0].device());
      tw.host = Tensor(Shape{total_}, DType::f32);
      for (size_t v = 0; v < grads_[t].size(); ++v)
        tw.results.push_back(Tensor::wrap(tw.host.data<float>() + offset_of_[v], grads_[t][v].shape(), DType::f32));
      TOWER_NCCL_CHECK(ncclCommInitRank(&tw.nccl, world, id, rank * static_cast<int>(towers) + static_cast<int>(t)));
    }
    TOWER_NCCL_CHECK(ncclGroupEnd());
  }

  ~NcclReducer() override {
    for (Tower& tw : towers_) {
      cudaSetDevice(tw.device);
      cudaStreamSynchronize(tw.stream);
      ncclCommDestroy(tw.nccl);
      cudaStreamDestroy(tw.stream);
    }
  }

  void begin_step() override {
    std::lock_guard<std::mutex> lock(mutex_);
    start_ = Clock::now();
    trace_ = {};
    next_ = 0;
    for (Bucket& b : buckets_) b.staged.assign(towers_.size(), 0);
  }

  // Called on the tower's thread once its program synchronized: the gradient is complete.
  void ready(int tower, int variable) override {
    Tower& tw = towers_[static_cast<size_t>(tower)];
    const size_t v = static_cast<size_t>(variable);
    DeviceGuard guard(tw.device);
    // flat[offset..] = weight * grad, on the tower's communication stream.
    cuda::launch_unary(cuda::Unary::scale, grads_[static_cast<size_t>(tower)][v].data<float>(),
                       tw.flat.data<float>() + offset_of_[v], grads_[static_cast<size_t>(tower)][v].numel(),
                       weights_[static_cast<size_t>(tower)], tw.stream);
    std::lock_guard<std::mutex> lock(mutex_);
    trace_.last_ready = std::chrono::duration<double>(Clock::now() - start_).count();
    buckets_[static_cast<size_t>(bucket_of_[v])].staged[static_cast<size_t>(tower)]++;
    launch_ready_buckets();
  }

  void abort() override {}

  void finish() override {
    const auto t0 = Clock::now();
    for (Tower& tw : towers_) {
      DeviceGuard guard(tw.device);
      TOWER_CUDA_CHECK(cudaStreamSynchronize(tw.stream));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (next_ != buckets_.size()) fail("a tower stopped before all its gradients were reduced");
    trace_.finish_wait_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  Tensor& result(int replica, int variable) override {
    return towers_[static_cast<size_t>(replica)].results[static_cast<size_t>(variable)];
  }
  int num_replicas() const override { return static_cast<int>(towers_.size()); }
  ReduceTrace trace() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return trace_;
  }

 private:
  struct Bucket {
    std::vector<int> variables;
    int64_t offset = 0, numel = 0;
    std::vector<size_t> staged;  // per tower: its variables of this bucket staged this step
  };
  struct Tower {
    int device = 0;
    cudaStream_t stream = nullptr;
    ncclComm_t nccl = nullptr;
    Tensor flat;                  // device, bucket order
    Tensor host;                  // the reduced gradients for the host optimizer
    std::vector<Tensor> results;  // views of host per variable
  };

  // Under mutex_: launches, in order, every bucket all local towers have staged.
  void launch_ready_buckets() {
    while (next_ < buckets_.size()) {
      Bucket& b = buckets_[next_];
      for (size_t staged : b.staged)
        if (staged != b.variables.size()) return;
      if (trace_.first_reduce_start < 0)
        trace_.first_reduce_start = std::chrono::duration<double>(Clock::now() - start_).count();
      TOWER_NCCL_CHECK(ncclGroupStart());  // NCCL sets each communicator's device itself
      for (Tower& tw : towers_) {
        float* data = tw.flat.data<float>() + b.offset;
        TOWER_NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(b.numel), ncclFloat, ncclSum, tw.nccl, tw.stream));
      }
      TOWER_NCCL_CHECK(ncclGroupEnd());
      for (Tower& tw : towers_) {
        DeviceGuard guard(tw.device);
        TOWER_CUDA_CHECK(cudaMemcpyAsync(tw.host.data<float>() + b.offset, tw.flat.data<float>() + b.offset,
                                         static_cast<size_t>(b.numel) * sizeof(float), cudaMemcpyDeviceToHost,
                                         tw.stream));
      }
      ++next_;
    }
  }

  std::vector<std::vector<Tensor>> grads_;
  std::vector<float> weights_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  std::vector<int64_t> offset_of_;
  int64_t total_ = 0;
  std::vector<Tower> towers_;
  size_t next_ = 0;
  mutable std::mutex mutex_;
  Clock::time_point start_;
  ReduceTrace trace_;
};

}  // namespace

std::unique_ptr<GradientReducer> make_nccl_reducer(std::vector<std::vector<Tensor>> grads,
                                                   std::vector<float> weights, size_t bucket_bytes,
                                                   Communicator* comm) {
  return std::make_unique<NcclReducer>(std::move(grads), std::move(weights), bucket_bytes, comm);
}

}  // namespace tower
