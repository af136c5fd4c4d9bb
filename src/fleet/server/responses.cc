#include "fleet/server/responses.h"

#include <map>
#include <string>
#include <vector>

namespace ferry::fleet::server_internal {

using nlohmann::json;

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// Every problem type the server sends, with its title. openapi.json documents
// each one (openapi_test.cc checks that they agree).
const std::map<std::string_view, std::string_view>& ProblemTitles() {
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
  return kTitles;
}

}  // namespace

std::string_view ProblemTitle(std::string_view type_suffix) {
  auto it = ProblemTitles().find(type_suffix);
  return it == ProblemTitles().end() ? std::string_view("Error") : it->second;
}

std::vector<std::string_view> ProblemTypeSuffixes() {
  std::vector<std::string_view> suffixes;
  suffixes.reserve(ProblemTitles().size());
  for (const auto& [suffix, title] : ProblemTitles()) suffixes.push_back(suffix);
  return suffixes;
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
