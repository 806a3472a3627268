// The NCCL reducer of GPU towers: each tower's gradients are gathered, scaled by its share of the
// global batch, into a flat device buffer in bucket order on the tower's communication stream
// (which waits, through an event, for the kernel that wrote the gradient on the compute stream);
// as soon as every local tower has a bucket, one grouped ncclAllReduce sums it over all GPUs of
// all ranks (one NCCL communicator per tower; the NCCL id travels over the job's Communicator),
// and the sum is copied into the tower's page-locked host buffer for the optimizer. Buckets are
// launched in the same order everywhere, as NCCL requires.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>

#include "tower/core/allocator.h"
#include "tower/parallel/gradient_reducer.h"
#include "tower/parallel/nccl/gradient_scale.h"

namespace tower {
namespace {

// Checks naming the call and where it is (the path from src/ on).
const char* source_path(const char* file) {
  const char* src = std::strstr(file, "src/");
  return src != nullptr ? src : file;
}
void check_nccl(ncclResult_t status, const char* call, const char* file, int line) {
  if (status != ncclSuccess)
    fail("NCCL error in {} at {}:{}: {}", call, source_path(file), line,
         ncclGetErrorString(status));
}
#define TOWER_NCCL_CHECK(call) check_nccl((call), #call, __FILE__, __LINE__)
void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    fail("CUDA error in {} at {}:{}: {}", call, source_path(file), line,
         cudaGetErrorString(status));
}
#define TOWER_CUDA_CHECK(call) check_cuda((call), #call, __FILE__, __LINE__)

// Makes a GPU current for a scope and gives the thread its previous one back.
struct DeviceGuard {
  explicit DeviceGuard(int device) {
    TOWER_CUDA_CHECK(cudaGetDevice(&previous));
    TOWER_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  int previous = 0;
};

using Clock = std::chrono::steady_clock;

// ncclGroupStart() for a scope: end() closes it and checks the result; a group left by an
// exception is closed by the destructor, which never throws.
struct NcclGroup {
  NcclGroup() { TOWER_NCCL_CHECK(ncclGroupStart()); }
  void end() {
    ended = true;
    TOWER_NCCL_CHECK(ncclGroupEnd());
  }
  ~NcclGroup() {
    if (!ended) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  bool ended = false;
};

class NcclReducer : public GradientReducer {
 public:
  NcclReducer(std::vector<std::vector<Tensor>> grads, std::vector<float> weights,
              std::vector<void*> streams, size_t bucket_bytes, Communicator* comm)
      : grads_(std::move(grads)), weights_(std::move(weights)) {
    const size_t towers = grads_.size();
    TOWER_CHECK(towers > 0 && !grads_[0].empty() && streams.size() == towers);
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
    for (size_t t = 0; t < towers; ++t) {
      Tower& tw = towers_[t];
      tw.device = grads_[t][0].device().index;
      tw.compute = static_cast<cudaStream_t>(streams[t]);
      DeviceGuard guard(tw.device);
      TOWER_CUDA_CHECK(cudaStreamCreateWithFlags(&tw.stream, cudaStreamNonBlocking));
      TOWER_CUDA_CHECK(cudaEventCreateWithFlags(&tw.produced, cudaEventDisableTiming));
      tw.flat = Tensor(Shape{total_}, DType::f32, grads_[t][0].device());
      // Page-locked, so that the copies of the sums do not hold the tower threads.
      tw.host = static_cast<float*>(
          device_ops(DeviceKind::cuda).host_alloc(static_cast<size_t>(total_) * sizeof(float)));
      for (size_t v = 0; v < grads_[t].size(); ++v)
        tw.results.push_back(
            Tensor::wrap(tw.host + offset_of_[v], grads_[t][v].shape(), DType::f32));
    }
    NcclGroup group;
    for (size_t t = 0; t < towers; ++t) {
      Tower& tw = towers_[t];
      DeviceGuard guard(tw.device);
      TOWER_NCCL_CHECK(ncclCommInitRank(&tw.nccl, world, id,
                                        rank * static_cast<int>(towers) + static_cast<int>(t)));
    }
    group.end();
  }

  ~NcclReducer() override {
    for (Tower& tw : towers_) {
      DeviceGuard guard(tw.device);
      if (tw.stream != nullptr) cudaStreamSynchronize(tw.stream);
      if (tw.nccl != nullptr) ncclCommDestroy(tw.nccl);
      if (tw.produced != nullptr) cudaEventDestroy(tw.produced);
      if (tw.stream != nullptr) cudaStreamDestroy(tw.stream);
      if (tw.host != nullptr) device_ops(DeviceKind::cuda).host_free(tw.host);
    }
  }

  void begin_step() override {
    std::lock_guard<std::mutex> lock(mutex_);
    start_ = Clock::now();
    trace_ = {};
    next_ = 0;
    aborted_ = false;
    for (Bucket& b : buckets_) b.staged.assign(towers_.size(), 0);
  }

  // Called on the tower's thread once the kernel writing the gradient is queued on its stream.
  void ready(int tower, int variable) override {
    Tower& tw = towers_[static_cast<size_t>(tower)];
    const size_t v = static_cast<size_t>(variable);
    DeviceGuard guard(tw.device);
    // flat[offset..] = weight * grad, on the tower's communication stream, after the gradient.
    TOWER_CUDA_CHECK(cudaEventRecord(tw.produced, tw.compute));
    TOWER_CUDA_CHECK(cudaStreamWaitEvent(tw.stream, tw.produced, 0));
    const Tensor& grad = grads_[static_cast<size_t>(tower)][v];
    TOWER_CUDA_CHECK(nccl::scale_gradient(grad.data<float>(), tw.flat.data<float>() + offset_of_[v],
                                          grad.numel(), weights_[static_cast<size_t>(tower)],
                                          tw.stream));
    std::lock_guard<std::mutex> lock(mutex_);
    trace_.last_ready = std::chrono::duration<double>(Clock::now() - start_).count();
    buckets_[static_cast<size_t>(bucket_of_[v])].staged[static_cast<size_t>(tower)]++;
    launch_ready_buckets();
  }

  // A failed tower: finish() then leaves the error to the caller. (Other ranks, if any, stay
  // inside the collective until the job's watchdog stops the job.)
  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
  }

  void finish() override {
    const auto t0 = Clock::now();
    for (Tower& tw : towers_) {
      DeviceGuard guard(tw.device);
      TOWER_CUDA_CHECK(cudaStreamSynchronize(tw.stream));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (next_ != buckets_.size() && !aborted_)
      fail("a tower stopped before all its gradients were reduced");
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
    cudaStream_t compute = nullptr;  // the tower program's stream (not ours)
    cudaStream_t stream = nullptr;   // communication
    cudaEvent_t produced = nullptr;  // a gradient's kernel, recorded on compute
    ncclComm_t nccl = nullptr;
    Tensor flat;                  // device, bucket order
    float* host = nullptr;        // page-locked: the reduced gradients for the host optimizer
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
      {
        NcclGroup group;  // NCCL sets each communicator's device itself
        for (Tower& tw : towers_) {
          float* data = tw.flat.data<float>() + b.offset;
          TOWER_NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(b.numel), ncclFloat,
                                         ncclSum, tw.nccl, tw.stream));
        }
        group.end();
      }
      for (Tower& tw : towers_) {
        DeviceGuard guard(tw.device);
        TOWER_CUDA_CHECK(cudaMemcpyAsync(tw.host + b.offset, tw.flat.data<float>() + b.offset,
                                         static_cast<size_t>(b.numel) * sizeof(float),
                                         cudaMemcpyDeviceToHost, tw.stream));
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
  bool aborted_ = false;
  mutable std::mutex mutex_;
  Clock::time_point start_;
  ReduceTrace trace_;
};

}  // namespace

std::unique_ptr<GradientReducer> make_nccl_reducer(std::vector<std::vector<Tensor>> grads,
                                                   std::vector<float> weights,
                                                   std::vector<void*> streams, size_t bucket_bytes,
                                                   Communicator* comm) {
  return std::make_unique<NcclReducer>(std::move(grads), std::move(weights), std::move(streams),
                                       bucket_bytes, comm);
}

}  // namespace tower
