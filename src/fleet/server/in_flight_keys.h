// Idempotency keys being processed right now, per user: a second submission
// with a key whose first one has not committed yet is refused (409) instead
// of racing it. Committed keys live in the store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace ferry::fleet::server_internal {

// Thread-safe.
class InFlightKeys {
 public:
  // RAII claim; `held()` is false when another request holds the same key.
  class Claim {
   public:
    Claim(InFlightKeys* owner, int64_t user_id, std::string key);
    ~Claim();
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    bool held() const { return held_; }

   private:
    InFlightKeys* owner_;
    std::pair<int64_t, std::string> entry_;
    bool held_ = false;
  };
  size_t size();

 private:
  std::mutex mutex_;
  std::set<std::pair<int64_t, std::string>> keys_;
};

}  // namespace ferry::fleet::server_internal
