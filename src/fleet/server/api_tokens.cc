#include "fleet/server/api_tokens.h"

#include <openssl/rand.h>

#include <iterator>

#include "fleet/server/base64url.h"

namespace ferry::fleet::server_internal {

Result<std::string> NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return Status::IOError("token generation: RAND_bytes failed");
  }
  return "fy_" + Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(bytes), 32));
}

std::optional<Principal> TokenCache::Get(const std::string& token_sha256, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(token_sha256);
  if (it == entries_.end()) return std::nullopt;
  if (it->second.expires_ms <= now_ms) {
    entries_.erase(it);
    return std::nullopt;
  }
  return it->second.principal;
}

uint64_t TokenCache::generation() {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation_;
}

void TokenCache::DropUser(int64_t user_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++generation_;
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->second.principal.user_id == user_id ? entries_.erase(it) : std::next(it);
  }
}

void TokenCache::Put(const std::string& token_sha256, const Principal& principal, int64_t now_ms,
                     uint64_t generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation != kAnyGeneration && generation != generation_) return;
  if (entries_.size() >= capacity_ && !entries_.count(token_sha256)) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.expires_ms <= now_ms ? entries_.erase(it) : std::next(it);
    }
    if (entries_.size() >= capacity_) entries_.clear();
  }
  entries_[token_sha256] = Entry{principal, now_ms + ttl_ms_};
}

}  // namespace ferry::fleet::server_internal
