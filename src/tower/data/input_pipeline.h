// The input pipeline: shuffle, transform and batch a Dataset, sharded across processes, with
// worker threads (the classic queue runners) keeping a bounded queue of batches ready.
//
//   PipelineOptions options{.batch_size = 128, .seed = 1, .transform = cifar10_train_transform()};
//   InputPipeline pipeline(train_set, options);
//   Shape image = pipeline.image_shape();  // (3, 24, 24): known before the first batch
//   Batch batch = pipeline.next();         // images (64, 3, 24, 24) f32 on each of 2 ranks
//
// The batches are a pure function of (data set, options): every random choice is keyed by
// (seed, epoch, example), never by thread timing, so they do not depend on num_workers, and a
// pipeline started at a saved position() continues exactly where the saved one was.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tower/core/tensor.h"
#include "tower/data/dataset.h"
#include "tower/data/transforms.h"

namespace tower {

// Where the pipeline is: the batch `step` (0-based) of epoch `epoch` is the next one returned.
struct Position {
  int64_t epoch = 0;
  int64_t step = 0;
  bool operator==(const Position&) const = default;
};

struct PipelineOptions {
  int64_t batch_size = 32;       // global: all ranks together; a multiple of world_size
  int rank = 0, world_size = 1;  // this process gets rows [rank*b/W, (rank+1)*b/W) of each batch
  uint64_t seed = 0;
  bool shuffle = true;         // a fresh permutation every epoch
  int64_t shuffle_buffer = 0;  // > 0: also pass the order through a buffer of this size
  bool drop_remainder = true;  // drop the last, partial batch of each epoch
  int num_workers = 1;         // 0: batches are made on the caller's thread inside next()
  int queue_capacity = 4;      // batches made ahead of the caller (at least 1)
  TransformSpec transform{};
  Position start{};  // where to start (from a saved position())
  // Called with each batch's position just before a worker makes it (tracing; tests use it to
  // inject failures and delays). An exception it throws fails that batch like any other error.
  std::function<void(Position)> batch_hook{};
};

struct Batch {
  Tensor images{};                 // (N, C, H, W) f32, N = this rank's share of the global batch
  Tensor labels{};                 // (N,) i32
  std::vector<int64_t> indices{};  // the data set index of each row
  int64_t epoch = 0;
  int64_t step = 0;  // index of the batch within its epoch
};

class InputPipeline {
 public:
  // Throws tower::Error on inconsistent options or a transform that does not fit the images.
  InputPipeline(std::shared_ptr<const Dataset> dataset, PipelineOptions options);
  ~InputPipeline();  // stops and joins the workers promptly, whatever is queued
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // The next batch; rethrows, on the caller's thread, any error a worker met making it.
  Batch next();
  Position position() const;  // of the batch the next call to next() returns

  Shape image_shape() const { return image_shape_; }  // (C, H, W) after the transform
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  Position position_of(int64_t ticket) const;
  Batch make_batch(int64_t ticket);
  std::shared_ptr<const std::vector<int64_t>> epoch_order(int64_t epoch);
  void worker_loop(int index);

  std::shared_ptr<const Dataset> dataset_;
  PipelineOptions options_;
  Shape image_shape_;
  int64_t batches_per_epoch_ = 0;
  int64_t start_ticket_ = 0;  // batches are numbered from epoch 0 step 0

  mutable std::mutex mutex_;
  std::condition_variable ready_cv_;  // a slot was filled
  std::condition_variable space_cv_;  // the caller took a batch, or stop
  int64_t next_ticket_ = 0;           // next batch a worker claims
  int64_t next_return_ = 0;           // next batch next() returns
  std::map<int64_t, Slot> ready_;
  bool stopping_ = false;
  std::mutex order_mutex_;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders_;
  std::vector<std::thread> workers_;
};

}  // namespace tower
