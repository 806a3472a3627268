#include "tower/train/lr_find.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tower {
namespace {

// A curve flat at first, falling fastest around lr 1e-3, lowest at 1e-2, then running away.
LrFindResult curve() {
  LrFindResult r;
  for (int i = 0; i <= 60; ++i) {
    const double lr = std::pow(10.0, -6 + i * 0.1), x = std::log10(lr);
    r.lrs.push_back(lr);
    r.losses.push_back(x < -2 ? 2.0 - 1.5 / (1 + std::exp(-4 * (x + 3))) : 0.5 + (x + 2) * (x + 2));
  }
  return r;
}

TEST(LrFindTest, TheSuggestionIsTheSteepestFallBeforeTheLowestLoss) {
  LrFindResult r = curve();
  const size_t s = steepest_fall(r.lrs, r.losses);
  EXPECT_NEAR(std::log10(r.lrs[s]), -3, 0.11);
  // Within the range where the loss falls: before the lowest point, and the loss falls there.
  const size_t lowest =
      static_cast<size_t>(std::min_element(r.losses.begin(), r.losses.end()) - r.losses.begin());
  EXPECT_LT(s, lowest);
  EXPECT_LT(r.losses[s], r.losses[s - 1]);
  // A curve that only rises suggests its lowest (first) point after the warm-up tenth.
  std::vector<double> rising = {1, 2, 3, 4};
  EXPECT_EQ(steepest_fall({1e-3, 1e-2, 1e-1, 1}, rising), 0u);
}

TEST(LrFindTest, ThePlotIsAPngOfTheCurve) {
  LrFindResult r = curve();
  r.suggested = steepest_fall(r.lrs, r.losses);
  const std::vector<uint8_t> png = lr_find_plot(r);
  ASSERT_GT(png.size(), 33u);
  EXPECT_EQ(std::string(png.begin() + 1, png.begin() + 4), "PNG");
  // IHDR: width 640, height 400, big-endian, RGB.
  EXPECT_EQ(png[16] << 24 | png[17] << 16 | png[18] << 8 | png[19], 640);
  EXPECT_EQ(png[20] << 24 | png[21] << 16 | png[22] << 8 | png[23], 400);
  EXPECT_EQ(png[25], 2);
}

}  // namespace
}  // namespace tower
