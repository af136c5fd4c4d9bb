// API tokens: minting a new one, and the short-lived cache from a token's
// hash to the principal it stands for (the store keeps only the hashes).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "ferry/base/status.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet::server_internal {

// "fy_" + 32 random bytes in base64url (43 characters), from the OpenSSL CSPRNG.
Result<std::string> NewToken();

// Token hash → principal, bounded and short-lived. Thread-safe. Only known
// tokens are cached, so a token created a moment ago works at once.
// DropUser forgets a user's tokens after they were revoked; a lookup that
// began before it (it read generation() earlier) is not cached, so a revoked
// token is never honoured from the cache once DropUser has returned.
class TokenCache {
 public:
  static constexpr uint64_t kAnyGeneration = ~uint64_t{0};
  TokenCache(size_t capacity, int64_t ttl_ms) : capacity_(capacity), ttl_ms_(ttl_ms) {}
  std::optional<Principal> Get(const std::string& token_sha256, int64_t now_ms);
  // Read before looking a token up in the store; pass it to Put.
  uint64_t generation();
  // Caches the principal unless DropUser ran since `generation` was read.
  void Put(const std::string& token_sha256, const Principal& principal, int64_t now_ms,
           uint64_t generation = kAnyGeneration);
  // Removes every entry of `user_id`.
  void DropUser(int64_t user_id);

 private:
  struct Entry {
    Principal principal;
    int64_t expires_ms = 0;
  };
  const size_t capacity_;
  const int64_t ttl_ms_;
  std::mutex mutex_;
  uint64_t generation_ = 0;
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace ferry::fleet::server_internal
