#include "fleet/server/responses.h"

#include <map>
#include <string>

namespace ferry::fleet::server_internal {

using nlohmann::json;

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

json FieldErrorJson(const FieldError& error) {
  return {{"field", error.field}, {"detail", error.detail}};
}

}  // namespace ferry::fleet::server_internal
