#include "tower/core/sha256.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tower/core/error.h"

namespace tower {
namespace {

std::string digest(const std::string& s) {
  Sha256 sha;
  sha.update(s);
  return sha.hex_digest();
}

// FIPS 180-4's examples, and the lengths around one block's padding.
TEST(Sha256Test, MatchesTheStandardsExamples) {
  EXPECT_EQ(digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(digest(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PiecesHashAsTheWhole) {
  const std::string text(200, 'x');
  for (size_t cut : {0, 1, 55, 56, 63, 64, 65, 199}) {
    Sha256 sha;
    sha.update(text.substr(0, cut));
    sha.update(text.substr(cut));
    EXPECT_EQ(sha.hex_digest(), digest(text)) << cut;
  }
}

TEST(Sha256Test, FilesAsSha256sum) {
  const std::string path = ::testing::TempDir() + "/sha256_test.txt";
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_EQ(sha256_file(path), digest("abc"));
  EXPECT_THROW(sha256_file(path + ".missing"), Error);
}

}  // namespace
}  // namespace tower
