#include "tower/parallel/gradient_reducer.h"

#include <algorithm>
#include <future>

namespace tower {

Strategy parse_strategy(std::string_view name) {
  if (name == "central") return Strategy::central;
  if (name == "allreduce") return Strategy::allreduce;
  fail("bad --strategy '{}': expected 'allreduce' (bucketed all-reduce, mirrored replicas) or "
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

void check_layout(const std::vector<std::vector<Tensor>>& grads, const std::vector<float>& weights) {
  TOWER_CHECK(!grads.empty() && grads.size() == weights.size());
  for (const auto& tower : grads) {
    TOWER_CHECK(tower.size() == grads[0].size());
    for (size_t v = 0; v < tower.size(); ++v) TOWER_CHECK(tower[v].shape() == grads[0][v].shape());
  }
}

std::vector<Tensor> allocate_like(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.emplace_back(t.shape(), DType::f32, t.device());
  return out;
}

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
  CentralReducer(std::vector<std::vector<Tensor>> grads, std::vector<float> weights)
      : grads_(std::move(grads)), weights_(std::move(weights)), master_(allocate_like(grads_[0])) {
    check_layout(grads_, weights_);
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
    for (size_t v = 0; v < master_.size(); ++v)
      weighted_sum(grads_, weights_, v, 0, master_[v].numel(), master_[v].data<float>());
    trace_.reduce_seconds = seconds_since(t0);
    trace_.finish_wait_seconds = trace_.reduce_seconds;
  }
  Tensor& result(int, int variable) override {
    return master_[static_cast<size_t>(variable)];
  }
  int num_replicas() const override { return 1; }
  ReduceTrace trace() const override { return trace_; }

 private:
  std::vector<std::vector<Tensor>> grads_;
  std::vector<float> weights_;
  std::vector<Tensor> master_;
  Clock::time_point start_;
  std::mutex mutex_;
  ReduceTrace trace_;
};

class AllReduceReducer : public GradientReducer {
 public:
  AllReduceReducer(std::vector<std::vector<Tensor>> grads, std::vector<float> weights,
                   size_t bucket_bytes)
      : grads_(std::move(grads)), weights_(std::move(weights)) {
    check_layout(grads_, weights_);
    const int num_vars = static_cast<int>(grads_[0].size());
    for (size_t t = 0; t < grads_.size(); ++t) results_.push_back(allocate_like(grads_[0]));
    // Backward produces the last layers' gradients first, so buckets go from the last variable.
    bucket_of_.assign(static_cast<size_t>(num_vars), 0);
    size_t bytes = 0;
    for (int v = num_vars - 1; v >= 0; --v) {
      size_t b = grads_[0][static_cast<size_t>(v)].nbytes();
      if (buckets_.empty() || (bytes + b > bucket_bytes && bytes > 0)) {
        buckets_.emplace_back();
        bytes = 0;
      }
      buckets_.back().variables.push_back(v);
      buckets_.back().numel += grads_[0][static_cast<size_t>(v)].numel();
      bytes += b;
      bucket_of_[static_cast<size_t>(v)] = static_cast<int>(buckets_.size()) - 1;
    }
    for (size_t t = 0; t < grads_.size(); ++t) workers_.push_back(std::make_unique<ThreadPool>(1));
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
      for (Bucket& b : buckets_) b.ready = 0;
    }
    pending_.clear();
    for (size_t t = 0; t < workers_.size(); ++t)
      pending_.push_back(workers_[t]->submit([this, t] { reduce_chunks(t); }));
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

  void finish() override {
    auto t0 = Clock::now();
    std::exception_ptr error;
    for (auto& f : pending_) {
      try {
        f.get();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    pending_.clear();
    std::lock_guard<std::mutex> lock(mutex_);
    trace_.finish_wait_seconds = seconds_since(t0);
    if (error) std::rethrow_exception(error);
  }

  Tensor& result(int replica, int variable) override {
    return results_[static_cast<size_t>(replica)][static_cast<size_t>(variable)];
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
    size_t ready = 0;  // (tower, variable) gradients produced this step
  };

  // Worker `chunk` owns the chunk-th slice of every bucket (reduce-scatter), and writes the sum
  // into every replica's result (all-gather), bucket by bucket as they fill.
  void reduce_chunks(size_t chunk) {
    const size_t towers = grads_.size();
    for (Bucket& bucket : buckets_) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return aborted_ || bucket.ready == towers * bucket.variables.size(); });
        if (aborted_) return;
        if (trace_.first_reduce_start < 0) trace_.first_reduce_start = seconds_since(start_);
      }
      auto t0 = Clock::now();
      const int64_t lo = bucket.numel * static_cast<int64_t>(chunk) / static_cast<int64_t>(towers);
      const int64_t hi = bucket.numel * static_cast<int64_t>(chunk + 1) / static_cast<int64_t>(towers);
      int64_t base = 0;
      for (int v : bucket.variables) {
        const size_t var = static_cast<size_t>(v);
        const int64_t n = grads_[0][var].numel();
        const int64_t begin = std::max<int64_t>(lo - base, 0), end = std::min<int64_t>(hi - base, n);
        if (begin < end) {
          float* out0 = results_[0][var].data<float>();
          weighted_sum(grads_, weights_, var, begin, end, out0);
          for (size_t r = 1; r < towers; ++r)
            std::copy(out0 + begin, out0 + end, results_[r][var].data<float>() + begin);
        }
        base += n;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      trace_.reduce_seconds += seconds_since(t0);
    }
  }

  std::vector<std::vector<Tensor>> grads_;
  std::vector<float> weights_;
  std::vector<std::vector<Tensor>> results_;  // [replica][variable]
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  std::vector<std::unique_ptr<ThreadPool>> workers_;
  std::vector<std::future<void>> pending_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool aborted_ = false;
  Clock::time_point start_;
  ReduceTrace trace_;
};

}  // namespace

std::unique_ptr<GradientReducer> make_central_reducer(std::vector<std::vector<Tensor>> grads,
                                                      std::vector<float> weights) {
  return std::make_unique<CentralReducer>(std::move(grads), std::move(weights));
}

std::unique_ptr<GradientReducer> make_allreduce_reducer(std::vector<std::vector<Tensor>> grads,
                                                        std::vector<float> weights,
                                                        size_t bucket_bytes) {
  return std::make_unique<AllReduceReducer>(std::move(grads), std::move(weights), bucket_bytes);
}

}  // namespace tower
