#include "tower/data/input_pipeline.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "tower/core/error.h"
#include "tower/core/philox.h"
#include "tower/core/trace.h"
#include "tower/data/shuffle.h"

namespace tower {

InputPipeline::InputPipeline(std::shared_ptr<const Dataset> dataset, PipelineOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  TOWER_CHECK(dataset_ != nullptr);
  const Dataset& d = *dataset_;
  const PipelineOptions& o = options_;
  if (d.images.dtype() != DType::u8 || d.images.shape().rank() != 4)
    fail("data set {}: images must be u8 (N, C, H, W), got {} {}", d.name,
         dtype_name(d.images.dtype()), d.images.shape().to_string());
  if (d.labels.dtype() != DType::i32 || d.labels.shape() != Shape{d.size()})
    fail("data set {}: labels must be i32 ({}), got {} {}", d.name, d.size(),
         dtype_name(d.labels.dtype()), d.labels.shape().to_string());
  if (d.size() == 0) fail("data set {} has no examples", d.name);
  if (o.world_size < 1) fail("world_size {} must be at least 1", o.world_size);
  if (o.rank < 0 || o.rank >= o.world_size)
    fail("rank {} is out of range for world_size {}", o.rank, o.world_size);
  if (o.batch_size < 1) fail("batch_size {} must be at least 1", o.batch_size);
  if (o.batch_size % o.world_size != 0)
    fail("batch_size {} must be a multiple of world_size {} (each process gets an equal share)",
         o.batch_size, o.world_size);
  if (o.shuffle_buffer < 0) fail("shuffle_buffer {} must not be negative", o.shuffle_buffer);
  if (o.num_workers < 0) fail("num_workers {} must not be negative", o.num_workers);
  if (o.queue_capacity < 1) fail("queue_capacity {} must be at least 1", o.queue_capacity);
  if (d.size() > std::numeric_limits<uint32_t>::max())
    fail("data set {} has {} examples; at most 2^32 - 1 are supported", d.name, d.size());
  batches_per_epoch_ =
      o.drop_remainder ? d.size() / o.batch_size : (d.size() + o.batch_size - 1) / o.batch_size;
  if (batches_per_epoch_ == 0)
    fail("data set {} has {} examples, fewer than one batch of {} (with drop_remainder)", d.name,
         d.size(), o.batch_size);
  if (o.start.epoch < 0 || o.start.step < 0 || o.start.step >= batches_per_epoch_)
    fail("start position (epoch {}, step {}) is invalid: an epoch has {} batches", o.start.epoch,
         o.start.step, batches_per_epoch_);
  image_shape_ = transform_output_shape(o.transform, d.image_shape());
  start_ticket_ = o.start.epoch * batches_per_epoch_ + o.start.step;
  next_ticket_ = next_return_ = start_ticket_;
  for (int i = 0; i < o.num_workers; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

InputPipeline::~InputPipeline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  space_cv_.notify_all();
  // A worker finishes at most the one batch it is making, so this returns promptly.
  for (auto& worker : workers_) worker.join();
}

Position InputPipeline::position_of(int64_t ticket) const {
  return {ticket / batches_per_epoch_, ticket % batches_per_epoch_};
}

Position InputPipeline::position() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return position_of(next_return_);
}

std::shared_ptr<const std::vector<int64_t>> InputPipeline::epoch_order(int64_t epoch) {
  std::lock_guard<std::mutex> lock(order_mutex_);
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  const int64_t n = dataset_->size();
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = epoch_permutation(n, options_.seed, epoch);
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  if (options_.shuffle_buffer > 0)
    order = shuffle_with_buffer(order, options_.shuffle_buffer, options_.seed, epoch);
  auto shared = std::make_shared<const std::vector<int64_t>>(std::move(order));
  // Workers are at most queue_capacity batches apart, so they need the last two epochs at most;
  // an evicted order is recomputed, identically, if ever needed again.
  while (!orders_.empty() && orders_.begin()->first < epoch - 1) orders_.erase(orders_.begin());
  orders_.emplace(epoch, shared);
  return shared;
}

Batch InputPipeline::make_batch(int64_t ticket) {
  const Position pos = position_of(ticket);
  if (options_.batch_hook) options_.batch_hook(pos);
  const auto order = epoch_order(pos.epoch);
  const PipelineOptions& o = options_;
  const int64_t n = dataset_->size();
  const int64_t global_begin = pos.step * o.batch_size;
  const int64_t global_size = std::min(o.batch_size, n - global_begin);
  // This rank's contiguous share; shares differ by at most one row in a kept partial batch.
  const int64_t begin = global_begin + global_size * o.rank / o.world_size;
  const int64_t end = global_begin + global_size * (o.rank + 1) / o.world_size;
  const int64_t rows = end - begin;

  const Shape input = dataset_->image_shape();
  const int64_t in_size = input.numel(), out_size = image_shape_.numel();
  Batch batch;
  batch.epoch = pos.epoch;
  batch.step = pos.step;
  batch.images = Tensor(Shape{rows, image_shape_[0], image_shape_[1], image_shape_[2]}, DType::f32);
  batch.labels = Tensor(Shape{rows}, DType::i32);
  batch.indices.resize(static_cast<size_t>(rows));
  const uint8_t* images = dataset_->images.data<uint8_t>();
  const int32_t* labels = dataset_->labels.data<int32_t>();
  float* out = batch.images.data<float>();
  int32_t* out_labels = batch.labels.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t example = (*order)[static_cast<size_t>(begin + r)];
    batch.indices[static_cast<size_t>(r)] = example;
    out_labels[r] = labels[example];
    Philox rng(o.seed, philox_stream(kAugment, static_cast<uint64_t>(pos.epoch),
                                     static_cast<uint64_t>(example)));
    apply_transform(o.transform, images + example * in_size, input, rng, out + r * out_size);
  }
  return batch;
}

void InputPipeline::worker_loop(int index) {
  for (;;) {
    if (trace::active()) trace::name_thread(fmt::format("input worker {}", index));
    int64_t ticket;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      space_cv_.wait(
          lock, [&] { return stopping_ || next_ticket_ < next_return_ + options_.queue_capacity; });
      if (stopping_) return;
      ticket = next_ticket_++;
    }
    Slot slot;
    try {
      trace::Slice slice("input", "batch");
      slot.batch = make_batch(ticket);
    } catch (...) {
      slot.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(ticket, std::move(slot));
    }
    ready_cv_.notify_all();
  }
}

Batch InputPipeline::next() {
  if (workers_.empty()) {
    int64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ticket = next_return_;
    }
    trace::Slice slice("input", "batch");
    Batch batch = make_batch(ticket);
    std::lock_guard<std::mutex> lock(mutex_);
    ++next_return_;
    return batch;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  ready_cv_.wait(lock, [&] { return ready_.count(next_return_) > 0; });
  auto it = ready_.find(next_return_);
  // A failed batch stays queued, so every later call reports the same error instead of hanging.
  if (it->second.error) std::rethrow_exception(it->second.error);
  Batch batch = std::move(it->second.batch);
  ready_.erase(it);
  ++next_return_;
  lock.unlock();
  space_cv_.notify_all();
  return batch;
}

}  // namespace tower
