// Message metadata at the operator ABI: a JSON object of string values
// (FerryOperatorEvent::metadata_json, send_output's metadata_json). Internal
// to the operator host and the C++ operator helper.
#pragma once

#include <string>

#include "ferry/exchange/status.h"
#include "ferry/exchange/type.h"

namespace ferry::flow::internal {

// {"key":"value",...} in order (a repeated key appears twice).
std::string MetadataToJson(const Metadata& metadata);
// Parses a JSON object; string values are taken as they are, any other value
// as its JSON text. nullptr and "" give an empty Metadata. Invalid, naming
// the problem, for text that is not a JSON object.
Result<Metadata> MetadataFromJson(const char* json);

}  // namespace ferry::flow::internal
