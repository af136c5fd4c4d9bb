#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "ferry/exchange/type.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;

std::string Int32Bytes(int32_t value) {
  std::string bytes(sizeof(value), '\0');
  std::memcpy(bytes.data(), &value, sizeof(value));
  return bytes;
}

std::string LengthPrefixed(const std::string& text) {
  return Int32Bytes(static_cast<int32_t>(text.size())) + text;
}

TEST(MetadataTest, EmptyMetadataEncodesAsEmptyString) { EXPECT_EQ(EncodeMetadata({}), ""); }

TEST(MetadataTest, NullPointerDecodesAsEmpty) {
  Result<Metadata> decoded = DecodeMetadata(nullptr);
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->empty());
}

TEST(MetadataTest, ZeroCountDecodesAsEmpty) {
  const std::string encoded = Int32Bytes(0);
  Result<Metadata> decoded = DecodeMetadata(encoded.data(), static_cast<int64_t>(encoded.size()));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(decoded->empty());
}

TEST(MetadataTest, EncodingFollowsTheSpecLayout) {
  const Metadata metadata = {{"key", "value"}, {"", "x"}};
  const std::string expected = Int32Bytes(2) + LengthPrefixed("key") + LengthPrefixed("value") +
                               LengthPrefixed("") + LengthPrefixed("x");
  EXPECT_EQ(EncodeMetadata(metadata), expected);
}

TEST(MetadataTest, RoundTripKeepsOrderRepeatedKeysAndBinaryValues) {
  const Metadata metadata = {
      {"ARROW:extension:name", "arrow.uuid"},
      {"dup", "first"},
      {"dup", "second"},
      {"binary", std::string("\0a\0\xff", 4)},
      {std::string("k\0ey", 4), ""},
  };
  const std::string encoded = EncodeMetadata(metadata);
  Result<Metadata> decoded = DecodeMetadata(encoded.data(), static_cast<int64_t>(encoded.size()));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, metadata);
  ASSERT_EQ(decoded->size(), 5u);
  EXPECT_EQ((*decoded)[3].second.size(), 4u);
}

TEST(MetadataTest, DefaultLimitDecodesWithoutAKnownSize) {
  const std::string encoded = EncodeMetadata({{"a", "b"}});
  Result<Metadata> decoded = DecodeMetadata(encoded.data());
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, (Metadata{{"a", "b"}}));
}

TEST(MetadataTest, NegativeCountIsAnError) {
  const std::string encoded = Int32Bytes(-1);
  Result<Metadata> decoded = DecodeMetadata(encoded.data(), static_cast<int64_t>(encoded.size()));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(decoded.status().message(), HasSubstr("pair count is negative (-1)"));
}

TEST(MetadataTest, NegativeKeyLengthIsAnError) {
  const std::string encoded = Int32Bytes(1) + Int32Bytes(-5) + LengthPrefixed("v");
  Result<Metadata> decoded = DecodeMetadata(encoded.data(), static_cast<int64_t>(encoded.size()));
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("key 0 length is negative (-5)"));
}

TEST(MetadataTest, NegativeValueLengthIsAnError) {
  const std::string encoded = Int32Bytes(2) + LengthPrefixed("a") + LengthPrefixed("b") +
                              LengthPrefixed("c") + Int32Bytes(-2147483647 - 1);
  Result<Metadata> decoded = DecodeMetadata(encoded.data(), static_cast<int64_t>(encoded.size()));
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("value 1 length is negative"));
}

TEST(MetadataTest, LengthBeyondTheLimitIsAnError) {
  const std::string encoded = Int32Bytes(1) + Int32Bytes(1000) + "abcdefgh";
  Result<Metadata> decoded = DecodeMetadata(encoded.data(), static_cast<int64_t>(encoded.size()));
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("key 0 at byte 8 runs past the limit of 16"));
}

TEST(MetadataTest, TruncatedInputIsAnError) {
  const std::string full = EncodeMetadata({{"key", "value"}});
  for (size_t cut = 0; cut < full.size(); ++cut) {
    Result<Metadata> decoded = DecodeMetadata(full.data(), static_cast<int64_t>(cut));
    EXPECT_FALSE(decoded.ok()) << "cut at " << cut;
    EXPECT_THAT(decoded.status().message(), HasSubstr("limit")) << "cut at " << cut;
  }
  EXPECT_TRUE(DecodeMetadata(full.data(), static_cast<int64_t>(full.size())).ok());
}

TEST(MetadataTest, HugeCountIsRejectedBeforeReadingPairs) {
  const std::string encoded = Int32Bytes(2147483647) + LengthPrefixed("a") + LengthPrefixed("b");
  Result<Metadata> decoded = DecodeMetadata(encoded.data(), static_cast<int64_t>(encoded.size()));
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(),
              HasSubstr("pair count 2147483647 cannot fit in the limit of 14 bytes"));
}

TEST(MetadataTest, NegativeLimitIsAnError) {
  const std::string encoded = Int32Bytes(0);
  Result<Metadata> decoded = DecodeMetadata(encoded.data(), -1);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("size limit must not be negative"));
}

TEST(MetadataTest, TrailingBytesAfterThePairsAreIgnored) {
  // The encoding carries no total size, so the limit is only an upper bound.
  const std::string encoded = EncodeMetadata({{"a", "b"}}) + "trailing";
  Result<Metadata> decoded = DecodeMetadata(encoded.data(), static_cast<int64_t>(encoded.size()));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, (Metadata{{"a", "b"}}));
}

}  // namespace
}  // namespace ferry
