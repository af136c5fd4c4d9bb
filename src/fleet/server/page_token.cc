#include "fleet/server/page_token.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "ferry/base/hash.h"
#include "fleet/server/base64url.h"
#include "fleet/server/responses.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

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
