#include "fleet/server/base64url.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace ferry::fleet::server_internal {
namespace {

TEST(Base64Url, RoundTripsEveryLength) {
  std::string data;
  for (int i = 0; i < 40; ++i) {
    const std::string encoded = Base64UrlEncode(data);
    EXPECT_EQ(encoded.find_first_of("+/="), std::string::npos);
    std::optional<std::string> decoded = Base64UrlDecode(encoded);
    ASSERT_TRUE(decoded.has_value()) << encoded;
    EXPECT_EQ(*decoded, data);
    data += static_cast<char>(i * 37 + 250);
  }
}

TEST(Base64Url, RefusesGarbage) {
  EXPECT_FALSE(Base64UrlDecode("a").has_value());     // impossible length
  EXPECT_FALSE(Base64UrlDecode("ab+c").has_value());  // standard alphabet
  EXPECT_FALSE(Base64UrlDecode("ab==").has_value());  // padding
  EXPECT_FALSE(Base64UrlDecode("ab c").has_value());
  EXPECT_FALSE(Base64UrlDecode("AB").has_value());  // non-zero leftover bits
  EXPECT_TRUE(Base64UrlDecode("AA").has_value());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
