#include "tower/core/philox.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tower {

// Known-answer vectors of Philox4x32-10 published with Random123 (kat_vectors).
TEST(PhiloxTest, Random123KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, AddressableAndDeterministic) {
  Philox a(42, 7), b(42, 7), other_stream(42, 8), other_seed(43, 7);
  EXPECT_EQ(a.u32(1000), b.u32(1000));
  EXPECT_NE(a.u32(1000), other_stream.u32(1000));
  EXPECT_NE(a.u32(1000), other_seed.u32(1000));
  EXPECT_EQ(a.u32(5), a.block(1)[1]);
}

TEST(PhiloxTest, DistributionsHaveTheRightMoments) {
  Philox rng(1, 2);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0, st2 = 0, tmax = 0;
  for (int i = 0; i < n; ++i) {
    float u = rng.uniform(static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    su += u;
    double x = rng.normal(static_cast<uint64_t>(i));
    sn += x;
    sn2 += x * x;
    double t = rng.truncated_normal(static_cast<uint64_t>(i));
    st2 += t * t;
    tmax = std::max(tmax, std::fabs(t));
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
  EXPECT_LE(tmax, 2.0);
  EXPECT_NEAR(st2 / n, 0.774, 0.02);  // variance of a standard normal truncated at +-2
}

TEST(PhiloxTest, BelowIsInRangeAndCoversIt) {
  Philox rng(3, 4);
  std::vector<int> counts(7, 0);
  for (uint64_t i = 0; i < 7000; ++i) counts[rng.below(i, 7)]++;
  for (int c : counts) EXPECT_NEAR(c, 1000, 150);
  EXPECT_NE(philox_stream(1, 2, 3), philox_stream(1, 3, 2));
}

}  // namespace tower
