#include "tower/parallel/gradient_reducer.h"

#include <algorithm>
#include <future>

#include "tower/core/trace.h"

namespace tower {

Strategy parse_strategy(std::string_view name) {
  if (name == "central") return Strategy::central;
  if (name == "allreduce") return Strategy::allreduce;
  fail(
      "bad --strategy '{}': expected 'allreduce' (bucketed all-reduce, mirrored replicas) or "
      "'central' (average on the host, one master copy)",
      name);
}

std::string_view strategy_name(Strategy strategy) {
  return strategy == Strategy::central ? "central" : "allreduce";
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_layout(const std::vector<std::vector<Tensor>>& grads,
                  const std::vector<float>& weights) {
  TOWER_CHECK(!grads.empty() && grads.size() == weights.size());
  for (const auto& tower : grads) {
    TOWER_CHECK(tower.size() == grads[0].size());
    for (size_t v = 0; v < tower.size(); ++v) TOWER_CHECK(tower[v].shape() == grads[0][v].shape());
  }
}

// One contiguous buffer holding a tensor like each of `like`, laid out in `order`, so that a run
// of consecutive variables (a bucket) is one range for a cross-rank collective.
struct FlatBuffer {
  Tensor storage;
  std::vector<Tensor> views;    // indexed by variable
  std::vector<int64_t> offset;  // of each variable in storage, in floats
  float* data() { return storage.data<float>(); }
};

FlatBuffer make_flat(const std::vector<Tensor>& like, const std::vector<int>& order) {
  FlatBuffer flat;
  int64_t total = 0;
  for (const Tensor& t : like) total += t.numel();
  flat.storage = Tensor(Shape{total}, DType::f32, like.empty() ? Device{} : like[0].device());
  flat.views.resize(like.size());
  flat.offset.resize(like.size());
  int64_t at = 0;
  for (int v : order) {
    const size_t i = static_cast<size_t>(v);
    flat.offset[i] = at;
    flat.views[i] = Tensor::wrap(flat.data() + at, like[i].shape(), DType::f32, like[i].device());
    at += like[i].numel();
  }
  return flat;
}

bool crosses_ranks(const Communicator* comm) { return comm != nullptr && comm->size() > 1; }

// out[k] = sum over towers t (in tower order, so every replica gets the same bits) of
// weights[t] * grads[t][variable][k], for k in [begin, end).
void weighted_sum(const std::vector<std::vector<Tensor>>& grads, const std::vector<float>& weights,
                  size_t variable, int64_t begin, int64_t end, float* out) {
  const float* g0 = grads[0][variable].data<float>();
  for (int64_t k = begin; k < end; ++k) out[k] = weights[0] * g0[k];
  for (size_t t = 1; t < grads.size(); ++t) {
    const float* g = grads[t][variable].data<float>();
    const float w = weights[t];
    for (int64_t k = begin; k < end; ++k) out[k] += w * g[k];
  }
}

class CentralReducer : public GradientReducer {
 public:
  CentralReducer(std::vector<std::vector<Tensor>> grads, std::vector<float> weights,
                 Communicator* comm)
      : grads_(std::move(grads)), weights_(std::move(weights)), comm_(comm) {
    check_layout(grads_, weights_);
    std::vector<int> order(grads_[0].size());
    for (size_t v = 0; v < order.size(); ++v) order[v] = static_cast<int>(v);
    master_ = make_flat(grads_[0], order);
  }
  void begin_step() override {
    start_ = Clock::now();
    trace_ = {};
  }
  void ready(int, int) override {
    std::lock_guard<std::mutex> lock(mutex_);
    trace_.last_ready = seconds_since(start_);
  }
  void abort() override {}
  void finish() override {
    // The classic average_gradients: after every tower is done, on the host, per variable.
    auto t0 = Clock::now();
    trace_.first_reduce_start = seconds_since(start_);
    for (size_t v = 0; v < master_.views.size(); ++v)
      weighted_sum(grads_, weights_, v, 0, master_.views[v].numel(),
                   master_.views[v].data<float>());
    trace_.reduce_seconds = seconds_since(t0);
    if (crosses_ranks(comm_)) {
      auto t1 = Clock::now();
      comm_->allreduce_sum(master_.data(), master_.storage.numel());
      trace_.comm_seconds = seconds_since(t1);
    }
    trace_.finish_wait_seconds = seconds_since(t0);
  }
  Tensor& result(int, int variable) override {
    return master_.views[static_cast<size_t>(variable)];
  }
  int num_replicas() const override { return 1; }
  ReduceTrace trace() const override { return trace_; }

 private:
  std::vector<std::vector<Tensor>> grads_;
  std::vector<float> weights_;
  Communicator* comm_;
  FlatBuffer master_;
  Clock::time_point start_;
  std::mutex mutex_;
  ReduceTrace trace_;
};

class AllReduceReducer : public GradientReducer {
 public:
  AllReduceReducer(std::vector<std::vector<Tensor>> grads, std::vector<float> weights,
                   size_t bucket_bytes, Communicator* comm)
      : grads_(std::move(grads)), weights_(std::move(weights)), comm_(comm) {
    check_layout(grads_, weights_);
    bucket_of_.assign(grads_[0].size(), 0);
    std::vector<int> order;
    for (std::vector<int>& variables : make_buckets(grads_[0], bucket_bytes)) {
      Bucket bucket;
      for (int v : variables) {
        bucket.numel += grads_[0][static_cast<size_t>(v)].numel();
        bucket_of_[static_cast<size_t>(v)] = static_cast<int>(buckets_.size());
        order.push_back(v);
      }
      bucket.variables = std::move(variables);
      buckets_.push_back(std::move(bucket));
    }
    result_ = make_flat(grads_[0], order);
    for (Bucket& b : buckets_) b.offset = result_.offset[static_cast<size_t>(b.variables[0])];
    // The last bucket fills when the towers are done, and is theirs alone: threads of the
    // reducer's own take chunks of the others, while the towers still run.
    if (buckets_.size() > 1)
      for (size_t t = 0; t < grads_.size(); ++t)
        workers_.push_back(std::make_unique<ThreadPool>(1));
    if (crosses_ranks(comm_)) communicator_ = std::make_unique<ThreadPool>(1);
  }

  ~AllReduceReducer() override {
    abort();
    for (auto& f : pending_)
      if (f.valid()) f.wait();
  }

  void begin_step() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      start_ = Clock::now();
      trace_ = {};
      aborted_ = false;
      for (Bucket& b : buckets_) b.ready = b.claimed = b.reduced = 0;
    }
    pending_.clear();
    for (size_t t = 0; t < workers_.size(); ++t)
      pending_.push_back(workers_[t]->submit([this, t] {
        if (trace::active()) trace::name_thread(fmt::format("reduce {}", t));
        reduce_chunks(buckets_.size() - 1);
      }));
    if (communicator_) pending_.push_back(communicator_->submit([this] { communicate(); }));
  }

  void ready(int, int variable) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      buckets_[static_cast<size_t>(bucket_of_[static_cast<size_t>(variable)])].ready++;
      trace_.last_ready = seconds_since(start_);
    }
    cv_.notify_all();
  }

  void abort() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      aborted_ = true;
    }
    cv_.notify_all();
  }

  void help(int) override { reduce_chunks(buckets_.size()); }

  void finish() override {
    auto t0 = Clock::now();
    reduce_chunks(buckets_.size());  // what no tower took (a caller that does not help)
    std::exception_ptr error = wait_all(pending_);
    pending_.clear();
    std::lock_guard<std::mutex> lock(mutex_);
    trace_.finish_wait_seconds = seconds_since(t0);
    if (error) std::rethrow_exception(error);
  }

  Tensor& result(int, int variable) override {
    return result_.views[static_cast<size_t>(variable)];
  }
  int num_replicas() const override { return static_cast<int>(grads_.size()); }
  ReduceTrace trace() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return trace_;
  }

 private:
  struct Bucket {
    std::vector<int> variables;
    int64_t numel = 0;
    int64_t offset = 0;  // in the flat result buffers
    size_t ready = 0;    // (tower, variable) gradients produced this step
    int claimed = 0;     // chunks taken by a thread
    int reduced = 0;     // chunks summed over this process's towers
  };
  int chunks() const { return 2 * static_cast<int>(grads_.size()); }

  // Bucket by bucket as they fill (the first `count`), takes chunks of the bucket that no other
  // thread took and sums them over the towers (a reduce-scatter over the threads that come: the
  // reducer's own, and the towers' once they are done). Across ranks, communicate() then takes
  // over.
  void reduce_chunks(size_t count) {
    for (size_t b = 0; b < count; ++b) {
      Bucket& bucket = buckets_[b];
      for (;;) {
        int chunk;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, [&] {
            return aborted_ || bucket.ready == grads_.size() * bucket.variables.size();
          });
          if (aborted_) return;
          if (bucket.claimed == chunks()) break;
          chunk = bucket.claimed++;
          if (trace_.first_reduce_start < 0) trace_.first_reduce_start = seconds_since(start_);
        }
        auto t0 = Clock::now();
        reduce_chunk(bucket, chunk);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          trace_.reduce_seconds += seconds_since(t0);
          bucket.reduced++;
        }
        if (communicator_) cv_.notify_all();
      }
    }
  }

  void reduce_chunk(const Bucket& bucket, int chunk) {
    trace::Slice slice("reduce", "reduce bucket");
    const int64_t lo = bucket.numel * chunk / chunks();
    const int64_t hi = bucket.numel * (chunk + 1) / chunks();
    int64_t base = 0;
    for (int v : bucket.variables) {
      const size_t var = static_cast<size_t>(v);
      const int64_t n = grads_[0][var].numel();
      const int64_t begin = std::max<int64_t>(lo - base, 0), end = std::min<int64_t>(hi - base, n);
      if (begin < end)
        weighted_sum(grads_, weights_, var, begin, end, result_.views[var].data<float>());
      base += n;
    }
  }

  // Sums each bucket over the ranks as soon as this process's towers have summed it.
  void communicate() {
    for (Bucket& bucket : buckets_) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return aborted_ || bucket.reduced == chunks(); });
        if (aborted_) return;
      }
      if (trace::active()) trace::name_thread("communication");
      trace::Slice slice("comm", "allreduce bucket");
      auto t0 = Clock::now();
      comm_->allreduce_sum(result_.data() + bucket.offset, bucket.numel);
      std::lock_guard<std::mutex> lock(mutex_);
      trace_.comm_seconds += seconds_since(t0);
    }
  }

  std::vector<std::vector<Tensor>> grads_;
  std::vector<float> weights_;
  Communicator* comm_;
  FlatBuffer result_;  // shared by the replicas
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  std::vector<std::unique_ptr<ThreadPool>> workers_;
  std::unique_ptr<ThreadPool> communicator_;  // only across ranks
  std::vector<std::future<void>> pending_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool aborted_ = false;
  Clock::time_point start_;
  ReduceTrace trace_;
};

}  // namespace

std::unique_ptr<GradientReducer> make_central_reducer(std::vector<std::vector<Tensor>> grads,
                                                      std::vector<float> weights,
                                                      Communicator* comm) {
  return std::make_unique<CentralReducer>(std::move(grads), std::move(weights), comm);
}

std::unique_ptr<GradientReducer> make_allreduce_reducer(std::vector<std::vector<Tensor>> grads,
                                                        std::vector<float> weights,
                                                        size_t bucket_bytes, Communicator* comm) {
  return std::make_unique<AllReduceReducer>(std::move(grads), std::move(weights), bucket_bytes,
                                            comm);
}

std::vector<std::vector<int>> make_buckets(const std::vector<Tensor>& grads, size_t bucket_bytes) {
  std::vector<std::vector<int>> buckets;
  size_t bytes = 0;
  for (int v = static_cast<int>(grads.size()) - 1; v >= 0; --v) {
    const size_t b = grads[static_cast<size_t>(v)].nbytes();
    if (buckets.empty() || (bytes + b > bucket_bytes && bytes > 0)) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(v);
    bytes += b;
  }
  return buckets;
}

std::vector<size_t> bucket_sizes(const std::vector<Tensor>& grads, size_t bucket_bytes) {
  std::vector<size_t> sizes;
  for (const auto& bucket : make_buckets(grads, bucket_bytes)) {
    sizes.push_back(0);
    for (int v : bucket) sizes.back() += grads[static_cast<size_t>(v)].nbytes();
  }
  return sizes;
}

}  // namespace tower
