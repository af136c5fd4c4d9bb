// Pieces of the fleet server that hold no HTTP state: the per-user rate
// limiter, the in-flight idempotency keys, the token cache, page tokens,
// problem documents and small validators. Internal to src/fleet/server;
// kept apart so the unit tests reach them without a running server.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/model.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet::server_internal {

int64_t NowMs();

// ---- Encodings.
std::string Base64UrlEncode(std::string_view data);  // no padding
// nullopt on any character outside the alphabet, padding or an impossible length.
std::optional<std::string> Base64UrlDecode(std::string_view text);

// "fy_" + 32 random bytes in base64url (43 characters), from the OpenSSL CSPRNG.
Result<std::string> NewToken();

// Serializes without throwing: invalid UTF-8 (from a query or a path) becomes U+FFFD.
std::string Dump(const nlohmann::json& value);

// ---- Problem details (RFC 9457).
// {"type": "urn:ferry:problem:<suffix>", "title", "status", "detail", "instance"}.
nlohmann::json Problem(int status, std::string_view type_suffix, std::string_view detail,
                       std::string_view instance);
// The title shown for a type suffix ("validation" → "Invalid request").
std::string_view ProblemTitle(std::string_view type_suffix);

// ---- Routing.
// Matches a request path against a route pattern in which each "{}" stands
// for one or more characters other than '/' and ':'; appends what each "{}"
// matched to `captures`. Linear and non-recursive.
bool MatchPath(std::string_view pattern, std::string_view path, std::vector<std::string>* captures);

// The query of a request target ("/path?a=1&label=k=v"): pairs split at the
// first '=', percent-decoded ('+' is a space). Malformed escapes stay as written.
std::multimap<std::string, std::string> ParseQuery(std::string_view target);

// ---- Request checks.
// True when no array/object nests deeper than `max_depth` (strings are
// skipped). Keeps hostile bodies from exhausting the stack in recursive
// JSON code; the scan itself is iterative.
bool JsonNestingWithin(std::string_view body, int max_depth);
// 1..255 printable ASCII characters (0x20..0x7e).
bool ValidIdempotencyKey(std::string_view key);
// "application/json", optionally with parameters ("; charset=utf-8"), any case.
bool IsJsonContentType(std::string_view content_type);
// Names of tenants, teams, users and nodes: 1..128 of [A-Za-z0-9._-], not starting with '.'.
bool ValidName(std::string_view name);
// A whole decimal integer (optional '-'), nothing else; nullopt otherwise.
std::optional<int64_t> ParseInt(std::string_view text);

// ---- Per-user token buckets. Thread-safe.
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

// ---- Idempotency keys being processed right now, per user. Thread-safe.
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

// ---- Token hash → principal, bounded and short-lived. Thread-safe. Only
// known tokens are cached, so a token created a moment ago works at once.
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

// ---- Cursor pagination for GET /v1/jobs.
// A stable digest of a filter (states in any order give the same digest).
std::string FilterDigest(const JobFilter& filter);
// Opaque token: base64url of {"b": before_id, "f": digest}.
std::string EncodePageToken(int64_t before_id, const std::string& filter_digest);
// The before_id, or kInvalid when the token is garbage or belongs to another filter.
Result<int64_t> DecodePageToken(std::string_view token, const std::string& filter_digest);

}  // namespace ferry::fleet::server_internal
