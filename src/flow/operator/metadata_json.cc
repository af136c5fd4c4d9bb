#include "flow/operator/metadata_json.h"

#include <nlohmann/json.hpp>

namespace ferry::flow::internal {

std::string MetadataToJson(const Metadata& metadata) {
  // Built by hand: nlohmann's object sorts keys and drops repeated ones.
  std::string out = "{";
  for (const auto& [key, value] : metadata) {
    if (out.size() > 1) out += ',';
    out += nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += ':';
    out += nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  out += '}';
  return out;
}

Result<Metadata> MetadataFromJson(const char* json) {
  Metadata out;
  if (json == nullptr || *json == '\0') return out;
  // Keys in the order written: parse events instead of a sorted object.
  nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(json, nullptr, false);
  if (parsed.is_discarded()) return Status::Invalid("metadata is not valid JSON");
  if (!parsed.is_object()) return Status::Invalid("metadata must be a JSON object");
  for (const auto& [key, value] : parsed.items()) {
    out.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  return out;
}

}  // namespace ferry::flow::internal
