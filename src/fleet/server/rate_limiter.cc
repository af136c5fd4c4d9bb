#include "fleet/server/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace ferry::fleet::server_internal {

RateLimiter::RateLimiter(double rate_per_second, double burst)
    : rate_(rate_per_second), burst_(std::max(1.0, burst)) {}

int64_t RateLimiter::Acquire(int64_t user_id, int64_t now_ms) {
  if (rate_ <= 0) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buckets_.find(user_id);
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxBuckets) {
      // Forget buckets that refilled completely: they carry no state.
      for (auto b = buckets_.begin(); b != buckets_.end();) {
        const double refill = (now_ms - b->second.updated_ms) / 1000.0 * rate_;
        b = b->second.tokens + refill >= burst_ ? buckets_.erase(b) : std::next(b);
      }
      if (buckets_.size() >= kMaxBuckets) buckets_.clear();
    }
    it = buckets_.emplace(user_id, Bucket{burst_, now_ms}).first;
  }
  Bucket& bucket = it->second;
  if (now_ms > bucket.updated_ms) {
    bucket.tokens = std::min(burst_, bucket.tokens + (now_ms - bucket.updated_ms) / 1000.0 * rate_);
    bucket.updated_ms = now_ms;
  }
  if (bucket.tokens >= 1.0) {
    bucket.tokens -= 1.0;
    return 0;
  }
  const double wait_seconds = (1.0 - bucket.tokens) / rate_;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait_seconds)));
}

}  // namespace ferry::fleet::server_internal
