#include "flow/operator/metadata_json.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "ferry/base/json_string.h"

namespace ferry::flow::internal {
namespace {

void MetadataToJsonSlow(const Metadata& metadata, std::string* out) {
  // Built by hand: nlohmann's object sorts keys and drops repeated ones.
  out->assign("{");
  for (const auto& [key, value] : metadata) {
    if (out->size() > 1) *out += ',';
    *out += nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    *out += ':';
    *out += nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  *out += '}';
}

Status MetadataFromJsonSlow(const char* json, Metadata* out) {
  out->clear();
  // Keys in the order written: parse events instead of a sorted object.
  nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(json, nullptr, false);
  if (parsed.is_discarded()) return Status::Invalid("metadata is not valid JSON");
  if (!parsed.is_object()) return Status::Invalid("metadata must be a JSON object");
  for (const auto& [key, value] : parsed.items()) {
    out->emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  return Status::OK();
}

// Reads the common shape of metadata: {"k":"v",...} whose strings have no
// escapes and no control characters, and are valid UTF-8; with whitespace
// between tokens when `whitespace`. Calls visit(key, value) per entry.
// False (the caller falls back to nlohmann) for anything else, a key that
// appears twice included (nlohmann keeps one of them).
template <typename Visit>
bool ScanPlainObject(const char* json, size_t size, bool whitespace, Visit&& visit) {
  constexpr size_t kMaxKeys = 32;
  std::string_view keys[kMaxKeys];
  size_t count = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(json);
  const auto* end = p + size;
  auto skip = [&] {
    if (!whitespace) return;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
  };
  auto string = [&](std::string_view* out) {
    if (p == end || *p != '"') return false;
    const auto* start = ++p;
    while (p < end && *p != '"') {
      if (*p < 0x20 || *p == '\\') return false;
      if (*p >= 0x80) {
        const size_t length = json_text::Utf8SequenceLength(p, end);
        if (length == 0) return false;
        p += length;
      } else {
        ++p;
      }
    }
    if (p == end) return false;
    *out = std::string_view(reinterpret_cast<const char*>(start), static_cast<size_t>(p - start));
    ++p;
    return true;
  };
  skip();
  if (p == end || *p != '{') return false;
  ++p;
  skip();
  if (p < end && *p == '}') {
    ++p;
  } else {
    while (true) {
      std::string_view key, value;
      if (!string(&key)) return false;
      skip();
      if (p == end || *p != ':') return false;
      ++p;
      skip();
      if (!string(&value)) return false;
      if (count == kMaxKeys) return false;
      for (size_t i = 0; i < count; ++i) {
        if (keys[i] == key) return false;
      }
      keys[count++] = key;
      visit(key, value);
      skip();
      if (p == end) return false;
      if (*p == '}') {
        ++p;
        break;
      }
      if (*p != ',') return false;
      ++p;
      skip();
    }
  }
  skip();
  return p == end;
}

}  // namespace

void MetadataToJson(const Metadata& metadata, std::string* out) {
  out->assign("{");
  for (const auto& [key, value] : metadata) {
    if (out->size() > 1) *out += ',';
    if (!json_text::AppendQuoted(key, out)) return MetadataToJsonSlow(metadata, out);
    *out += ':';
    if (!json_text::AppendQuoted(value, out)) return MetadataToJsonSlow(metadata, out);
  }
  *out += '}';
}

std::string MetadataToJson(const Metadata& metadata) {
  std::string out;
  MetadataToJson(metadata, &out);
  return out;
}

Status MetadataFromJson(const char* json, Metadata* out) {
  if (json == nullptr || *json == '\0') {
    out->clear();
    return Status::OK();
  }
  size_t used = 0;
  const bool plain = ScanPlainObject(json, std::strlen(json), /*whitespace=*/true,
                                     [&](std::string_view key, std::string_view value) {
                                       if (used < out->size()) {
                                         (*out)[used].first.assign(key);
                                         (*out)[used].second.assign(value);
                                       } else {
                                         out->emplace_back(std::string(key), std::string(value));
                                       }
                                       ++used;
                                     });
  if (!plain) return MetadataFromJsonSlow(json, out);
  out->resize(used);
  return Status::OK();
}

Result<Metadata> MetadataFromJson(const char* json) {
  Metadata out;
  FERRY_RETURN_NOT_OK(MetadataFromJson(json, &out));
  return out;
}

bool IsCanonicalMetadataJson(const char* json, size_t size) {
  if (json == nullptr || size == 0) return false;
  return ScanPlainObject(json, size, /*whitespace=*/false,
                         [](std::string_view, std::string_view) {});
}

}  // namespace ferry::flow::internal
