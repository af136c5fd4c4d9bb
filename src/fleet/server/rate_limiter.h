// Per-user token buckets: the request rate limit of every caller but agents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace ferry::fleet::server_internal {

// Thread-safe.
class RateLimiter {
 public:
  RateLimiter(double rate_per_second, double burst);
  // Takes one token from `user_id`'s bucket. Returns 0 when allowed, else the
  // whole seconds (>= 1) until a token is available.
  int64_t Acquire(int64_t user_id, int64_t now_ms);
  bool enabled() const { return rate_ > 0; }

 private:
  struct Bucket {
    double tokens = 0;
    int64_t updated_ms = 0;
  };
  static constexpr size_t kMaxBuckets = 100'000;
  const double rate_;
  const double burst_;
  std::mutex mutex_;
  std::unordered_map<int64_t, Bucket> buckets_;
};

}  // namespace ferry::fleet::server_internal
