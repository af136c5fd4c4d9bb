#include "fleet/server/rate_limiter.h"

#include <gtest/gtest.h>

namespace ferry::fleet::server_internal {
namespace {

TEST(RateLimiter, EmptiesTheBucketAndRefills) {
  RateLimiter limiter(/*rate_per_second=*/2, /*burst=*/3);
  const int64_t t0 = 1'000'000;
  EXPECT_EQ(limiter.Acquire(1, t0), 0);
  EXPECT_EQ(limiter.Acquire(1, t0), 0);
  EXPECT_EQ(limiter.Acquire(1, t0), 0);
  EXPECT_EQ(limiter.Acquire(1, t0), 1);        // empty: 0.5 s to the next token, rounded up
  EXPECT_EQ(limiter.Acquire(2, t0), 0);        // buckets are per user
  EXPECT_EQ(limiter.Acquire(1, t0 + 500), 0);  // refilled one token
  EXPECT_EQ(limiter.Acquire(1, t0 + 500), 1);

  RateLimiter slow(/*rate_per_second=*/0.01, /*burst=*/1);
  EXPECT_EQ(slow.Acquire(1, t0), 0);
  EXPECT_EQ(slow.Acquire(1, t0), 100);

  RateLimiter disabled(0, 0);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(disabled.Acquire(1, t0), 0);
}

}  // namespace
}  // namespace ferry::fleet::server_internal
