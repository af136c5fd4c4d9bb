#include "fleet/server/api_tokens.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/test_util.h"

namespace ferry::fleet::server_internal {
namespace {

TEST(NewToken, HasThePrefixAndLength) {
  ASSERT_OK_AND_ASSIGN(std::string a, NewToken());
  ASSERT_OK_AND_ASSIGN(std::string b, NewToken());
  EXPECT_EQ(a.substr(0, 3), "fy_");
  EXPECT_EQ(a.size(), 3u + 43u);
  EXPECT_NE(a, b);
}

TEST(TokenCache, ExpiresAndStaysBounded) {
  TokenCache cache(/*capacity=*/4, /*ttl_ms=*/100);
  Principal p;
  p.user = "ana";
  cache.Put("h1", p, 1000);
  ASSERT_TRUE(cache.Get("h1", 1050).has_value());
  EXPECT_EQ(cache.Get("h1", 1050)->user, "ana");
  EXPECT_FALSE(cache.Get("h1", 1100).has_value());
  for (int i = 0; i < 100; ++i) cache.Put("k" + std::to_string(i), p, 2000);
  EXPECT_TRUE(cache.Get("k99", 2001).has_value());
}

TEST(TokenCache, DropUserForgetsItsTokensAndRefusesLookupsThatRacedIt) {
  TokenCache cache(/*capacity=*/16, /*ttl_ms=*/5000);
  Principal ana;
  ana.user_id = 7;
  ana.user = "ana";
  Principal bob;
  bob.user_id = 8;
  bob.user = "bob";
  cache.Put("ana-laptop", ana, 1000);
  cache.Put("ana-ci", ana, 1000);
  cache.Put("bob", bob, 1000);
  // A lookup that read the generation before the revocation...
  const uint64_t before = cache.generation();
  cache.DropUser(7);
  EXPECT_FALSE(cache.Get("ana-laptop", 1001).has_value());
  EXPECT_FALSE(cache.Get("ana-ci", 1001).has_value());
  EXPECT_TRUE(cache.Get("bob", 1001).has_value());
  // ...may not put what it found back.
  cache.Put("ana-laptop", ana, 1002, before);
  EXPECT_FALSE(cache.Get("ana-laptop", 1003).has_value());
  // A lookup after it may (a token issued later is valid).
  cache.Put("ana-new", ana, 1004, cache.generation());
  EXPECT_TRUE(cache.Get("ana-new", 1005).has_value());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
