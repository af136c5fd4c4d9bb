// What the server writes into response bodies: JSON serialised without
// throwing, and RFC 9457 problem documents with their field errors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/fleet/model_json.h"

namespace ferry::fleet::server_internal {

// Serializes without throwing: invalid UTF-8 (from a query or a path) becomes U+FFFD.
std::string Dump(const nlohmann::json& value);

// {"type": "urn:ferry:problem:<suffix>", "title", "status", "detail", "instance"}.
nlohmann::json Problem(int status, std::string_view type_suffix, std::string_view detail,
                       std::string_view instance);
// The title shown for a type suffix ("validation" → "Invalid request").
std::string_view ProblemTitle(std::string_view type_suffix);
// Every type suffix the server sends, sorted.
std::vector<std::string_view> ProblemTypeSuffixes();
// One member of a validation problem's "errors": {"field", "detail"}.
nlohmann::json FieldErrorJson(const FieldError& error);

}  // namespace ferry::fleet::server_internal
