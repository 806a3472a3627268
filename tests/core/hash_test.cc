#include "tower/core/hash.h"

#include <gtest/gtest.h>

#include <string_view>

namespace tower {
namespace {

// The published FNV-1a 64-bit values: docs/data.md says which images a folder holds out by them.
TEST(HashTest, Fnv1aIsTheStandardOne) {
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(fnv1a(std::string_view("bar"), fnv1a("foo")), fnv1a("foobar"));
}

}  // namespace
}  // namespace tower
