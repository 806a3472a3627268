#include "tower/core/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace tower {
namespace {

// Vectors from RFC 3720 (iSCSI), appendix B.4, and the classic check value.
TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
    down[static_cast<size_t>(i)] = static_cast<uint8_t>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  EXPECT_EQ(crc32c(up.data(), up.size()), 0x46dd794eu);
  EXPECT_EQ(crc32c(down.data(), down.size()), 0x113fdb5cu);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  const char* text = "hello, tensorboard";
  const size_t n = std::strlen(text);
  for (size_t split = 0; split <= n; ++split)
    EXPECT_EQ(crc32c_extend(crc32c(text, split), text + split, n - split), crc32c(text, n));
}

TEST(Crc32cTest, MaskRoundTripsAndChangesValue) {
  for (uint32_t crc : {0u, 1u, 0xe3069283u, 0xffffffffu, 0x12345678u}) {
    EXPECT_EQ(crc32c_unmask(crc32c_mask(crc)), crc);
    EXPECT_NE(crc32c_mask(crc), crc);
  }
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8, worked by hand for crc = 1.
  EXPECT_EQ(crc32c_mask(1u), (1u << 17) + 0xa282ead8u);
}

}  // namespace
}  // namespace tower
