// Cursor pagination for GET /v1/jobs: opaque page tokens bound to the filter
// they were issued for.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/base/status.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet::server_internal {

// A stable digest of a filter (states in any order give the same digest).
std::string FilterDigest(const JobFilter& filter);
// Opaque token: base64url of {"b": before_id, "f": digest}.
std::string EncodePageToken(int64_t before_id, const std::string& filter_digest);
// The before_id, or kInvalid when the token is garbage or belongs to another filter.
Result<int64_t> DecodePageToken(std::string_view token, const std::string& filter_digest);

}  // namespace ferry::fleet::server_internal
