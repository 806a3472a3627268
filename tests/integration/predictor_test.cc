// The library's Predictor on a run the binary trained: calls after the first reuse the compiled
// evaluator when the batch is the same, and give what a fresh Predictor gives.
#include <gtest/gtest.h>

#include <fstream>

#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/core/philox.h"
#include "tower/io/png.h"
#include "tower/train/predict.h"

namespace tower {
namespace {

using testing::run_tower;
using testing::TmpDir;

// `count` 28x28 grey PNGs of noise (seeded by their index) in `dir`.
std::vector<std::string> write_images(const std::string& dir, int first, int count) {
  std::vector<std::string> files;
  for (int i = first; i < first + count; ++i) {
    std::vector<uint8_t> pixels(28 * 28);
    Philox rng(static_cast<uint64_t>(i), 0);
    for (size_t k = 0; k < pixels.size(); ++k)
      pixels[k] = static_cast<uint8_t>(rng.uniform(k) * 255.0f);
    const std::vector<uint8_t> png = png_encode(pixels.data(), 28, 28, 1);
    files.push_back(dir + "/" + std::to_string(i) + ".png");
    std::ofstream(files.back(), std::ios::binary)
        .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  }
  return files;
}

TEST(PredictorTest, LaterCallsGiveWhatAFreshPredictorGives) {
  TmpDir tmp;
  auto data = run_tower("make-dataset --format idx --out " + (tmp / "idx") +
                        " --num_train 256 --num_test 64 --seed 2");
  ASSERT_EQ(data.exit_code, 0) << data.output;
  auto r = run_tower("train --model lenet --data idx:" + (tmp / "idx") +
                     " --max_steps 4 --batch_size 32 --train_dir " + (tmp / "train"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const PredictConfig config{.train_dir = tmp / "train", .batch_size = 4, .num_threads = 1};
  Predictor reused(config);
  // 6 images (batches of 4), then 5 others (the same batch: the evaluator is reused), then 2 (a
  // batch of 2: another one), then the first 6 again.
  const std::vector<std::vector<std::string>> calls = {write_images(tmp.path(), 0, 6),
                                                       write_images(tmp.path(), 6, 5),
                                                       write_images(tmp.path(), 11, 2)};
  for (const auto& files : {calls[0], calls[1], calls[2], calls[0]}) {
    const std::vector<Prediction> got = reused.predict(files);
    const std::vector<Prediction> want = Predictor(config).predict(files);
    ASSERT_EQ(got.size(), files.size());
    for (size_t i = 0; i < files.size(); ++i) {
      EXPECT_EQ(got[i].error, "") << files[i];
      EXPECT_EQ(got[i].logits, want[i].logits) << files[i];
      EXPECT_EQ(got[i].logits.size(), 10u);
    }
  }
}

}  // namespace
}  // namespace tower
