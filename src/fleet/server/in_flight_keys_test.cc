#include "fleet/server/in_flight_keys.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace ferry::fleet::server_internal {
namespace {

TEST(InFlightKeys, OneClaimPerUserAndKey) {
  InFlightKeys keys;
  {
    InFlightKeys::Claim first(&keys, 1, "k");
    EXPECT_TRUE(first.held());
    InFlightKeys::Claim second(&keys, 1, "k");
    EXPECT_FALSE(second.held());
    InFlightKeys::Claim other_user(&keys, 2, "k");
    EXPECT_TRUE(other_user.held());
    InFlightKeys::Claim other_key(&keys, 1, "k2");
    EXPECT_TRUE(other_key.held());
    EXPECT_EQ(keys.size(), 3u);
  }
  EXPECT_EQ(keys.size(), 0u);
  InFlightKeys::Claim again(&keys, 1, "k");
  EXPECT_TRUE(again.held());
}

TEST(InFlightKeys, ConcurrentClaimsHaveOneWinnerAtATime) {
  InFlightKeys keys;
  std::atomic<int> holders{0};
  std::atomic<int> max_holders{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        InFlightKeys::Claim claim(&keys, 7, "same");
        if (!claim.held()) {
          ++refused;
          continue;
        }
        const int now = ++holders;
        int seen = max_holders.load();
        while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
        }
        --holders;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(max_holders.load(), 1);
  EXPECT_EQ(keys.size(), 0u);
}

}  // namespace
}  // namespace ferry::fleet::server_internal
