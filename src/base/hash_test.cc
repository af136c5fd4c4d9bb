#include "ferry/base/hash.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(Sha256Hex, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string with_nul("a\0b", 3);
  EXPECT_NE(Sha256Hex(with_nul), Sha256Hex("a"));
  EXPECT_EQ(Sha256Hex(with_nul).size(), 64u);
}

TEST(Sha256Stream, PiecesHashAsTheWholeAndItStartsOver) {
  Sha256Stream stream;
  stream.Update("a");
  stream.Update("");
  stream.Update("bc");
  EXPECT_EQ(stream.FinishHex(), Sha256Hex("abc"));
  EXPECT_EQ(stream.FinishHex(), Sha256Hex(""));  // nothing since the last digest
  const std::string large(3 << 20, 'x');
  for (size_t at = 0; at < large.size(); at += 1 << 20) stream.Update({large.data() + at, 1 << 20});
  EXPECT_EQ(stream.FinishHex(), Sha256Hex(large));
}

}  // namespace
}  // namespace ferry
