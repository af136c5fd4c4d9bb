#include "flow/operator/metadata_json.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

namespace ferry::flow::internal {
namespace {

// Length of the well-formed UTF-8 sequence at p (first byte >= 0x80), or 0.
// The same rules as nlohmann's decoder (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF).
size_t Utf8Length(const unsigned char* p, const unsigned char* end) {
  const unsigned char c = p[0];
  size_t length;
  unsigned char low = 0x80, high = 0xBF;  // bounds of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    length = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    length = 3;
    if (c == 0xE0) low = 0xA0;
    if (c == 0xED) high = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    length = 4;
    if (c == 0xF0) low = 0x90;
    if (c == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (static_cast<size_t>(end - p) < length) return 0;
  if (p[1] < low || p[1] > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  }
  return length;
}

// Appends `text` as a JSON string, escaped as nlohmann's dump escapes it
// (UTF-8 kept, control characters escaped). False for text that is not
// valid UTF-8 (nlohmann replaces what is invalid: the caller asks it).
bool AppendJsonString(std::string_view text, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  out->push_back('"');
  const auto* run = p;  // start of bytes copied as they are
  while (p < end) {
    const unsigned char c = *p;
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++p;
      continue;
    }
    if (c >= 0x80) {
      const size_t length = Utf8Length(p, end);
      if (length == 0) return false;
      p += length;
      continue;
    }
    out->append(reinterpret_cast<const char*>(run), static_cast<size_t>(p - run));
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\r':
        out->append("\\r");
        break;
      default: {
        const char escaped[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
        out->append(escaped, sizeof(escaped));
      }
    }
    run = ++p;
  }
  out->append(reinterpret_cast<const char*>(run), static_cast<size_t>(p - run));
  out->push_back('"');
  return true;
}

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
        const size_t length = Utf8Length(p, end);
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
    if (!AppendJsonString(key, out)) return MetadataToJsonSlow(metadata, out);
    *out += ':';
    if (!AppendJsonString(value, out)) return MetadataToJsonSlow(metadata, out);
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
