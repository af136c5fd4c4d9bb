#include "fleet/server/server_internal.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace ferry::fleet::server_internal {

using nlohmann::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int AlphabetIndex(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}
}  // namespace

std::string Base64UrlEncode(std::string_view data) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    uint32_t v = (static_cast<uint8_t>(data[i]) << 16) | (static_cast<uint8_t>(data[i + 1]) << 8) |
                 static_cast<uint8_t>(data[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = data.size() - i;
  if (rest == 1) {
    uint32_t v = static_cast<uint8_t>(data[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
  } else if (rest == 2) {
    uint32_t v = (static_cast<uint8_t>(data[i]) << 16) | (static_cast<uint8_t>(data[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
  }
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view text) {
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = AlphabetIndex(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  // Leftover bits must be zero, else the text is not a canonical encoding.
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

Result<std::string> NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return Status::IOError("token generation: RAND_bytes failed");
  }
  return "fy_" + Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(bytes), 32));
}

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string_view ProblemTitle(std::string_view type_suffix) {
  static const std::map<std::string_view, std::string_view> kTitles = {
      {"malformed-json", "Malformed JSON body"},
      {"bad-request", "Bad request"},
      {"unauthorized", "Authentication required"},
      {"forbidden", "Forbidden"},
      {"not-found", "Not found"},
      {"method-not-allowed", "Method not allowed"},
      {"idempotency-in-progress", "Request with this Idempotency-Key in progress"},
      {"conflict", "Conflict with the current state"},
      {"payload-too-large", "Payload too large"},
      {"unsupported-media-type", "Unsupported media type"},
      {"validation", "Invalid request"},
      {"unsatisfiable", "Unsatisfiable job"},
      {"idempotency-key-reuse", "Idempotency-Key reused with another body"},
      {"rate-limited", "Too many requests"},
      {"internal", "Internal server error"},
      {"unavailable", "Service unavailable"},
  };
  auto it = kTitles.find(type_suffix);
  return it == kTitles.end() ? std::string_view("Error") : it->second;
}

json Problem(int status, std::string_view type_suffix, std::string_view detail,
             std::string_view instance) {
  return json{{"type", "urn:ferry:problem:" + std::string(type_suffix)},
              {"title", ProblemTitle(type_suffix)},
              {"status", status},
              {"detail", detail},
              {"instance", instance}};
}

bool MatchPath(std::string_view pattern, std::string_view path,
               std::vector<std::string>* captures) {
  size_t p = 0;
  size_t s = 0;
  while (p < pattern.size()) {
    if (pattern.compare(p, 2, "{}") == 0) {
      const size_t start = s;
      while (s < path.size() && path[s] != '/' && path[s] != ':') ++s;
      if (s == start) return false;
      captures->emplace_back(path.substr(start, s - start));
      p += 2;
    } else {
      if (s >= path.size() || path[s] != pattern[p]) return false;
      ++p;
      ++s;
    }
  }
  return s == path.size();
}

namespace {
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%' && i + 2 < text.size() && HexValue(text[i + 1]) >= 0 &&
               HexValue(text[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2]));
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

std::multimap<std::string, std::string> ParseQuery(std::string_view target) {
  std::multimap<std::string, std::string> params;
  const size_t question = target.find('?');
  if (question == std::string_view::npos) return params;
  std::string_view query = target.substr(question + 1);
  const size_t fragment = query.find('#');
  if (fragment != std::string_view::npos) query = query.substr(0, fragment);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string_view key = pair.substr(0, eq);
    std::string_view value =
        eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    params.emplace(PercentDecode(key), PercentDecode(value));
  }
  return params;
}

bool JsonNestingWithin(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

bool ValidIdempotencyKey(std::string_view key) {
  if (key.empty() || key.size() > 255) return false;
  return std::all_of(key.begin(), key.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

bool IsJsonContentType(std::string_view content_type) {
  const size_t semicolon = content_type.find(';');
  std::string_view media = content_type.substr(0, semicolon);
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  while (!media.empty() && media.front() == ' ') media.remove_prefix(1);
  constexpr std::string_view kJson = "application/json";
  if (media.size() != kJson.size()) return false;
  for (size_t i = 0; i < media.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(media[i])) != kJson[i]) return false;
  }
  return true;
}

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

std::optional<int64_t> ParseInt(std::string_view text) {
  int64_t value = 0;
  if (text.empty()) return std::nullopt;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

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

InFlightKeys::Claim::Claim(InFlightKeys* owner, int64_t user_id, std::string key)
    : owner_(owner), entry_(user_id, std::move(key)) {
  std::lock_guard<std::mutex> lock(owner_->mutex_);
  held_ = owner_->keys_.insert(entry_).second;
}

InFlightKeys::Claim::~Claim() {
  if (!held_) return;
  std::lock_guard<std::mutex> lock(owner_->mutex_);
  owner_->keys_.erase(entry_);
}

size_t InFlightKeys::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return keys_.size();
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

std::string FilterDigest(const JobFilter& filter) {
  std::vector<std::string> states;
  for (JobState state : filter.states) states.emplace_back(ToString(state));
  std::sort(states.begin(), states.end());
  states.erase(std::unique(states.begin(), states.end()), states.end());
  const json canonical = {
      {"states", states}, {"user", filter.user}, {"team", filter.team}, {"labels", filter.labels}};
  return Sha256Hex(Dump(canonical)).substr(0, 16);
}

std::string EncodePageToken(int64_t before_id, const std::string& filter_digest) {
  return Base64UrlEncode(Dump(json{{"b", before_id}, {"f", filter_digest}}));
}

Result<int64_t> DecodePageToken(std::string_view token, const std::string& filter_digest) {
  const Status garbage = Status::Invalid("page_token: not a token from this API");
  if (token.size() > 512) return garbage;
  std::optional<std::string> raw = Base64UrlDecode(token);
  if (!raw) return garbage;
  json doc = json::parse(*raw, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || doc.size() != 2 || !doc.contains("b") || !doc.contains("f") ||
      !doc["b"].is_number_integer() || !doc["f"].is_string()) {
    return garbage;
  }
  if (doc["f"].get<std::string>() != filter_digest) {
    return Status::Invalid("page_token: the token belongs to another filter");
  }
  const int64_t before_id = doc["b"].get<int64_t>();
  if (before_id <= 0) return garbage;
  return before_id;
}

}  // namespace ferry::fleet::server_internal
