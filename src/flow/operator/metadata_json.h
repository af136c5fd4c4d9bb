// Message metadata at the operator ABI: a JSON object of string values
// (FerryOperatorEvent::metadata_json, send_output's metadata_json). Internal
// to the operator host and the C++ operator helper.
//
// Every hop between two operators of a runtime passes through here, so the
// common shape (an object of plain strings: no escapes, valid UTF-8) is
// written and read by hand; anything else goes through nlohmann::json with
// exactly the results it always had.
#pragma once

#include <cstddef>
#include <string>

#include "ferry/base/status.h"
#include "ferry/exchange/type.h"

namespace ferry::flow::internal {

// {"key":"value",...} in order (a repeated key appears twice).
std::string MetadataToJson(const Metadata& metadata);
// The same into *out (its capacity is reused).
void MetadataToJson(const Metadata& metadata, std::string* out);
// Parses a JSON object; string values are taken as they are, any other value
// as its JSON text. nullptr and "" give an empty Metadata. Invalid, naming
// the problem, for text that is not a JSON object.
Result<Metadata> MetadataFromJson(const char* json);
// The same into *out (cleared first; the capacity of its entries is reused).
Status MetadataFromJson(const char* json, Metadata* out);
// True when `json` (of `size` bytes) is exactly what
// MetadataToJson(*MetadataFromJson(json)) gives, so that it can be passed on
// as it is: an object of plain string values, no whitespace, no repeated key.
bool IsCanonicalMetadataJson(const char* json, size_t size);

}  // namespace ferry::flow::internal
