// An image folder through the real binary: `tower data` says what it holds and lists a split; a
// run with --skip_bad_images and `tower eval` share one cache, eval skips the bad image as
// training did, and a flipped bit in the cache is named and never trained on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/io/png.h"

namespace tower {
namespace {

using testing::contains;
using testing::run_tower;
using testing::TmpDir;

// 3 classes of 16 PNGs at 32x32, each class its own colour, and one corrupt PNG in "b".
void make_folder(const std::string& dir) {
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 16; ++i) {
      std::vector<uint8_t> pixels(32 * 32 * 3);
      for (size_t p = 0; p < pixels.size(); ++p)
        pixels[p] = static_cast<uint8_t>(p % 3 == static_cast<size_t>(c) ? 200 : (p * 7 + i) % 50);
      const std::string file = fmt::format("{}/{}/{}.png", dir, "abc"[c], i);
      std::filesystem::create_directories(std::filesystem::path(file).parent_path());
      const std::vector<uint8_t> png = png_encode(pixels.data(), 32, 32, 3);
      testing::write_file(file, std::string(png.begin(), png.end()));
    }
  testing::write_file(dir + "/b/broken.png", std::string("\x89PNG\r\n\x1a\n\0\0", 10));
}

TEST(ImageCacheTest, DataTrainAndEvalShareOneTrustedCache) {
  TmpDir tmp;
  const std::string photos = tmp / "photos", run = tmp / "run";
  make_folder(photos);
  auto data = run_tower("data folder:" + photos + " --test_fraction 0.25 --list test");
  ASSERT_EQ(data.exit_code, 0) << data.output;
  for (const char* line : {"3 classes", "held out by FNV-1a", "files: 32x32 to 32x32",
                           "48 PNG; 1 without a readable header", "\tc\n"})
    EXPECT_TRUE(contains(data.output, line)) << line << "\n" << data.output;
  const std::string train = "train --model resnet20 --data folder:" + photos +
                            " --test_fraction 0.25 --batch_size 8 --max_steps 4 --train_dir " + run;
  auto refused = run_tower(train);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(contains(refused.output, "broken.png")) << refused.output;
  auto trained = run_tower(train + " --skip_bad_images");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(contains(trained.output, "skipped 1 bad image")) << trained.output;
  // The run says what happens to the images: their size, and why the recipe's augmentation
  // (resnet20's pad-crop-flip) runs as it does.
  for (const char* line :
       {"images: files of 32x32 to 32x32 pixels (median 32x32), each resized (shorter side) "
        "and centre-cropped to (3, 32, 32) (the size of the recipe's data",
        "training: pad 4, random crop to the image's size, flip, pixels x 0.00392157; "
        "evaluation: pixels x 0.00392157"})
    EXPECT_TRUE(contains(trained.output, line)) << line << "\n" << trained.output;
  // eval reads the same cache (no decoding line), and stops on the bad image without the flag.
  auto eval = run_tower("eval --run_once --train_dir " + run);
  EXPECT_FALSE(contains(eval.output, "decoding the images again")) << eval.output;
  auto skipped = run_tower("eval --run_once --skip_bad_images --train_dir " + run);
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_FALSE(contains(skipped.output, "decoding")) << skipped.output;
  // A bit flipped in the training cache's last image: named, decoded again, the run goes on.
  const std::string cache = photos + "/.tower-cache/train-3x32x32.bin";
  {
    std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  auto again = run_tower(train + "2 --skip_bad_images");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "fails its checksum: decoding the images again"))
      << again.output;
}

}  // namespace
}  // namespace tower
