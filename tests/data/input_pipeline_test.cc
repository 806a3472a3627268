#include "tower/data/input_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>

#include "data_test_util.h"
#include "tower/core/philox.h"
#include "tower/data/shuffle.h"

namespace tower {
namespace {

std::shared_ptr<const Dataset> random_dataset(int64_t n, Shape image = {3, 32, 32}) {
  auto d = std::make_shared<Dataset>();
  d->name = "random";
  d->num_classes = 10;
  d->images = Tensor(Shape{n, image[0], image[1], image[2]}, DType::u8);
  Philox rng(7, 7);
  uint8_t* p = d->images.data<uint8_t>();
  for (int64_t i = 0; i < d->images.numel(); ++i)
    p[i] = static_cast<uint8_t>(rng.u32(static_cast<uint64_t>(i)));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  d->labels = Tensor::from_vector(Shape{n}, labels);
  return d;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.labels.to_vector<int32_t>(), b.labels.to_vector<int32_t>());
  ASSERT_EQ(a.images.shape(), b.images.shape());
  EXPECT_EQ(0, std::memcmp(a.images.raw_data(), b.images.raw_data(), a.images.nbytes()))
      << "images of epoch " << a.epoch << " step " << a.step << " differ";
}

std::vector<Batch> take(InputPipeline& pipeline, int count) {
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) batches.push_back(pipeline.next());
  return batches;
}

PipelineOptions train_options() {
  return {.batch_size = 16, .seed = 1234, .transform = cifar10_train_transform()};
}

TEST(InputPipeline, ImageShapeIsKnownBeforeTheFirstBatch) {
  InputPipeline pipeline(random_dataset(40), train_options());
  EXPECT_EQ(pipeline.image_shape(), (Shape{3, 24, 24}));
  EXPECT_EQ(pipeline.batches_per_epoch(), 2);
  EXPECT_EQ(pipeline.position(), (Position{0, 0}));
  Batch b = pipeline.next();
  EXPECT_EQ(b.images.shape(), (Shape{16, 3, 24, 24}));
  EXPECT_EQ(b.images.dtype(), DType::f32);
  EXPECT_EQ(b.labels.shape(), (Shape{16}));
  EXPECT_EQ(b.labels.dtype(), DType::i32);
  for (int64_t r = 0; r < 16; ++r)
    EXPECT_EQ(b.labels.data<int32_t>()[r], b.indices[static_cast<size_t>(r)] % 10);
  EXPECT_EQ(pipeline.position(), (Position{0, 1}));
  pipeline.next();
  EXPECT_EQ(pipeline.position(), (Position{1, 0}));
}

// Rows are the transform of the example under Philox(seed, (kAugment, epoch, example)).
TEST(InputPipeline, RowsAreTheTransformedExamples) {
  auto data = random_dataset(20);
  PipelineOptions options = train_options();
  options.batch_size = 5;
  InputPipeline pipeline(data, options);
  take(pipeline, 4);
  Batch b = pipeline.next();  // epoch 1
  ASSERT_EQ(b.epoch, 1);
  for (int64_t r = 0; r < 5; ++r) {
    const int64_t example = b.indices[static_cast<size_t>(r)];
    std::vector<float> expected(3 * 24 * 24);
    apply_transform(
        options.transform, data->images.data<uint8_t>() + example * 3072, Shape{3, 32, 32},
        Philox(1234, philox_stream(kAugment, 1, static_cast<uint64_t>(example))), expected.data());
    EXPECT_EQ(0, std::memcmp(expected.data(), b.images.data<float>() + r * expected.size(),
                             expected.size() * sizeof(float)));
  }
}

// The TF tutorial's distortions and the random resized crops alike.
TEST(InputPipeline, SameBatchesWhateverTheNumberOfWorkers) {
  auto data = random_dataset(100);
  for (const TransformSpec& transform :
       {cifar10_train_transform(), random_resized_crop_transform(20, 24)}) {
    PipelineOptions options = train_options();
    options.transform = transform;
    options.num_workers = 0;
    InputPipeline reference(data, options);
    std::vector<Batch> expected = take(reference, 20);  // 3+ epochs of 6 batches
    for (int workers : {1, 2, 4}) {
      for (int capacity : {1, 3}) {
        options.num_workers = workers;
        options.queue_capacity = capacity;
        InputPipeline pipeline(data, options);
        std::vector<Batch> got = take(pipeline, 20);
        for (size_t i = 0; i < got.size(); ++i) expect_same_batch(expected[i], got[i]);
      }
    }
    // A different seed gives different batches.
    options.seed = 1235;
    InputPipeline other(data, options);
    EXPECT_NE(other.next().indices, expected[0].indices);
  }
}

TEST(InputPipeline, RestoredPositionContinuesTheSameStream) {
  auto data = random_dataset(50);
  for (int64_t buffer : {0, 7}) {
    for (bool drop : {true, false}) {
      PipelineOptions options = train_options();
      options.batch_size = 12;
      options.drop_remainder = drop;
      options.shuffle_buffer = buffer;
      options.num_workers = 2;
      InputPipeline uninterrupted(data, options);
      std::vector<Batch> expected = take(uninterrupted, 17);
      Position saved;
      {
        InputPipeline first(data, options);
        take(first, 6);
        saved = first.position();
      }  // destroyed with a full queue of batches made ahead
      EXPECT_EQ(saved, drop ? (Position{1, 2}) : (Position{1, 1}));
      options.start = saved;
      InputPipeline resumed(data, options);
      EXPECT_EQ(resumed.position(), saved);
      for (size_t i = 6; i < expected.size(); ++i) expect_same_batch(expected[i], resumed.next());
    }
  }
}

// Across all ranks, each epoch uses every example exactly once (kept remainder) or every
// example of the full batches exactly once (dropped remainder), and the ranks' shares are
// contiguous pieces of the single-process batch, with identical pixels.
TEST(InputPipeline, ShardingUsesEachExampleOncePerEpoch) {
  const int64_t n = 50;
  auto data = random_dataset(n, {1, 8, 8});
  for (bool drop : {true, false}) {
    for (int world_size = 1; world_size <= 3; ++world_size) {
      const int64_t batch_size = 6 * world_size;  // 6, 12, 18: 50 is never a multiple
      PipelineOptions options{
          .batch_size = batch_size,
          .seed = 3,
          .drop_remainder = drop,
          .num_workers = 1,
          .transform = {
              .crop = Crop::random, .crop_height = 6, .crop_width = 6, .random_flip = true}};
      InputPipeline global(data, options);
      std::vector<std::unique_ptr<InputPipeline>> ranks;
      for (int rank = 0; rank < world_size; ++rank) {
        PipelineOptions o = options;
        o.rank = rank;
        o.world_size = world_size;
        ranks.push_back(std::make_unique<InputPipeline>(data, o));
      }
      const int64_t steps = global.batches_per_epoch();
      EXPECT_EQ(steps, drop ? n / batch_size : (n + batch_size - 1) / batch_size);
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        std::vector<int> uses(static_cast<size_t>(n), 0);
        for (int64_t step = 0; step < steps; ++step) {
          Batch whole = global.next();
          std::vector<int64_t> joined;
          std::vector<float> pixels;
          for (auto& r : ranks) {
            Batch part = r->next();
            EXPECT_EQ(part.epoch, epoch);
            EXPECT_EQ(part.step, step);
            if (step + 1 < steps || drop) {
              EXPECT_EQ(part.images.shape()[0], 6);
            }
            joined.insert(joined.end(), part.indices.begin(), part.indices.end());
            const float* p = part.images.data<float>();
            pixels.insert(pixels.end(), p, p + part.images.numel());
          }
          EXPECT_EQ(joined, whole.indices);
          EXPECT_EQ(pixels, whole.images.to_vector<float>());
          for (int64_t i : joined) ++uses[static_cast<size_t>(i)];
        }
        const int used = static_cast<int>(std::count(uses.begin(), uses.end(), 1));
        EXPECT_EQ(std::count_if(uses.begin(), uses.end(), [](int u) { return u > 1; }), 0);
        EXPECT_EQ(used, drop ? steps * batch_size : n)
            << "world_size " << world_size << " drop " << drop << " epoch " << epoch;
      }
    }
  }
}

TEST(InputPipeline, WorkerErrorReachesTheCaller) {
  PipelineOptions options = train_options();
  options.num_workers = 2;
  options.batch_hook = [](Position p) {
    if (p.step == 1) fail("cannot decode batch {} of epoch {}", p.step, p.epoch);
  };
  InputPipeline pipeline(random_dataset(64), options);
  EXPECT_NO_THROW(pipeline.next());
  testing::expect_error([&] { pipeline.next(); }, {"cannot decode batch 1 of epoch 0"});
  // It stays failed (no hang, no skipped batch).
  testing::expect_error([&] { pipeline.next(); }, {"cannot decode batch 1"});
  EXPECT_EQ(pipeline.position(), (Position{0, 1}));
}

TEST(InputPipeline, StopsPromptlyWithAFullQueue) {
  auto data = random_dataset(64);
  for (int workers : {1, 4}) {
    PipelineOptions options = train_options();
    options.num_workers = workers;
    options.queue_capacity = 2;
    options.batch_hook = [](Position) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    };
    auto start = std::chrono::steady_clock::now();
    {
      InputPipeline pipeline(data, options);
      pipeline.next();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the queue fill
    }
    { InputPipeline never_used(data, options); }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 2.0);
  }
}

TEST(InputPipeline, RejectsBadOptions) {
  auto data = random_dataset(10);
  using testing::expect_error;
  expect_error([&] { InputPipeline(data, {.batch_size = 4, .rank = 0, .world_size = 3}); },
               {"batch_size 4 must be a multiple of world_size 3"});
  expect_error([&] { InputPipeline(data, {.batch_size = 4, .rank = 2, .world_size = 2}); },
               {"rank 2 is out of range"});
  expect_error([&] { InputPipeline(data, {.batch_size = 11}); }, {"fewer than one batch of 11"});
  EXPECT_NO_THROW(InputPipeline(data, {.batch_size = 11, .drop_remainder = false}));
  expect_error(
      [&] {
        InputPipeline(data, {.batch_size = 5, .start = {0, 2}});
      },
      {"start position (epoch 0, step 2) is invalid"});
  expect_error([&] { InputPipeline(data, {.batch_size = 5, .queue_capacity = 0}); },
               {"queue_capacity"});
  expect_error(
      [&] {
        InputPipeline(random_dataset(40, {3, 16, 16}), train_options());
      },
      {"crop 24x24"});
}

TEST(Shuffle, EpochPermutationIsAFreshPermutationEachEpoch) {
  auto p0 = epoch_permutation(1000, 1, 0), p1 = epoch_permutation(1000, 1, 1);
  EXPECT_EQ(p0, epoch_permutation(1000, 1, 0));
  EXPECT_NE(p0, p1);
  EXPECT_NE(p0, epoch_permutation(1000, 2, 0));
  auto sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  // Every element lands first about equally often.
  std::vector<int> first(5, 0);
  for (int64_t e = 0; e < 5000; ++e) ++first[static_cast<size_t>(epoch_permutation(5, 9, e)[0])];
  for (int c : first) EXPECT_NEAR(c, 1000, 150);
  EXPECT_TRUE(epoch_permutation(0, 1, 0).empty());
}

TEST(Shuffle, ShuffleBufferMixesLocallyAndKeepsEveryElement) {
  std::vector<int64_t> in(200);
  std::iota(in.begin(), in.end(), 0);
  auto out = shuffle_with_buffer(in, 10, 4, 0);
  EXPECT_EQ(out, shuffle_with_buffer(in, 10, 4, 0));
  EXPECT_NE(out, shuffle_with_buffer(in, 10, 4, 1));
  EXPECT_NE(out, in);
  // Output k can only come from the first k + 11 inputs (buffer of 10 plus the one dequeued).
  for (size_t k = 0; k < out.size(); ++k) EXPECT_LE(out[k], static_cast<int64_t>(k) + 10);
  auto sorted = out;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, in);
  EXPECT_EQ(shuffle_with_buffer(in, 0, 4, 0), in);  // a buffer of 0 (one slot) keeps the order
}

}  // namespace
}  // namespace tower
