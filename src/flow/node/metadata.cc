// Typed metadata (node.h): values as text plus their types under
// "ferry.types", lists and maps as a small JSON dialect of our own writer and
// parser (64-bit integers kept apart from floats, NaN and infinities as bare
// words, a nesting limit, repeated keys refused).
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <system_error>

#include "ferry/base/json_string.h"
#include "ferry/flow/node.h"

namespace ferry::flow {
namespace {

using json = nlohmann::json;

std::string FormatDouble(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[64];
  auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  if (error != std::errc()) return std::to_string(value);
  return std::string(text, end);
}

template <typename T>
bool ParseWhole(const std::string& text, T* out) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return error == std::errc() && end == text.data() + text.size();
}

// ---- Writing ------------------------------------------------------------------

// Strings are written as they are even when they are not valid UTF-8: the
// reader below takes bytes back unchanged, so such text still round-trips.
void WriteString(std::string_view text, std::string* out) {
  static_cast<void>(json_text::AppendQuoted(text, out));
}

void WriteValue(const MetadataValue& value, std::string* out) {
  switch (value.index()) {
    case 0:
      WriteString(std::get<std::string>(value), out);
      break;
    case 1:
      out->append(std::to_string(std::get<int64_t>(value)));
      break;
    case 2: {
      const double number = std::get<double>(value);
      if (std::isnan(number)) {
        out->append("NaN");
      } else if (std::isinf(number)) {
        out->append(number > 0 ? "Infinity" : "-Infinity");
      } else {
        std::string text = FormatDouble(number);
        // A float stays a float: "1" would read back as an integer.
        if (text.find_first_of(".e") == std::string::npos) text += ".0";
        out->append(text);
      }
      break;
    }
    case 3:
      out->append(std::get<bool>(value) ? "true" : "false");
      break;
    case 4: {
      out->push_back('[');
      bool first = true;
      for (const MetadataValue& item : std::get<MetadataList>(value)) {
        if (!first) out->push_back(',');
        first = false;
        WriteValue(item, out);
      }
      out->push_back(']');
      break;
    }
    default: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, item] : std::get<MetadataMap>(value)) {
        if (!first) out->push_back(',');
        first = false;
        WriteString(key, out);
        out->push_back(':');
        WriteValue(item, out);
      }
      out->push_back('}');
    }
  }
}

// Checks what the writer cannot: the nesting depth and repeated map keys.
Status CheckValue(const MetadataValue& value, const std::string& path, int depth) {
  if (const auto* list = std::get_if<MetadataList>(&value)) {
    if (depth + 1 > kMaxMetadataDepth) {
      return Status::Invalid("metadata value '" + path + "' nests deeper than " +
                             std::to_string(kMaxMetadataDepth) + " levels");
    }
    for (size_t index = 0; index < list->size(); ++index) {
      FERRY_RETURN_NOT_OK(
          CheckValue((*list)[index], path + "[" + std::to_string(index) + "]", depth + 1));
    }
  } else if (const auto* map = std::get_if<MetadataMap>(&value)) {
    if (depth + 1 > kMaxMetadataDepth) {
      return Status::Invalid("metadata value '" + path + "' nests deeper than " +
                             std::to_string(kMaxMetadataDepth) + " levels");
    }
    std::set<std::string_view> seen;
    for (const auto& [key, item] : *map) {
      if (!seen.insert(key).second) {
        return Status::Invalid("metadata value '" + path + "' has the key '" + key + "' twice");
      }
      FERRY_RETURN_NOT_OK(CheckValue(item, path + "." + key, depth + 1));
    }
  }
  return Status::OK();
}

// ---- Reading ------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view text, int max_depth) : text_(text), max_depth_(max_depth) {}

  Result<MetadataValue> ParseDocument() {
    FERRY_ASSIGN_OR_RAISE(MetadataValue value, ParseValue(0));
    SkipSpace();
    if (position_ != text_.size()) return Error("unexpected text after the value");
    return value;
  }

 private:
  Status Error(const std::string& what) const {
    return Status::Invalid("metadata JSON at offset " + std::to_string(position_) + ": " + what);
  }

  void SkipSpace() {
    while (position_ < text_.size() && (text_[position_] == ' ' || text_[position_] == '\t' ||
                                        text_[position_] == '\n' || text_[position_] == '\r')) {
      ++position_;
    }
  }

  bool Consume(std::string_view word) {
    if (text_.substr(position_, word.size()) != word) return false;
    position_ += word.size();
    return true;
  }

  Result<MetadataValue> ParseValue(int depth) {
    SkipSpace();
    if (position_ >= text_.size()) return Error("a value is missing");
    const char c = text_[position_];
    if (c == '"') {
      FERRY_ASSIGN_OR_RAISE(std::string text, ParseString());
      return MetadataValue(std::move(text));
    }
    if (c == '[' || c == '{') {
      if (depth + 1 > max_depth_) {
        return Error("nesting deeper than " + std::to_string(max_depth_) + " levels");
      }
      return c == '[' ? ParseList(depth + 1) : ParseMap(depth + 1);
    }
    if (Consume("true")) return MetadataValue(true);
    if (Consume("false")) return MetadataValue(false);
    if (Consume("NaN")) return MetadataValue(std::numeric_limits<double>::quiet_NaN());
    if (Consume("Infinity")) return MetadataValue(std::numeric_limits<double>::infinity());
    if (Consume("-Infinity")) return MetadataValue(-std::numeric_limits<double>::infinity());
    return ParseNumber();
  }

  Result<MetadataValue> ParseNumber() {
    const size_t begin = position_;
    bool is_float = false;
    if (position_ < text_.size() && text_[position_] == '-') ++position_;
    const size_t digits = position_;
    while (position_ < text_.size()) {
      const char c = text_[position_];
      if (c >= '0' && c <= '9') {
        ++position_;
      } else if (c == '.' || c == 'e' || c == 'E' || ((c == '+' || c == '-') && is_float)) {
        is_float = true;
        ++position_;
      } else {
        break;
      }
    }
    if (position_ == digits) return Error("not a value");
    const std::string_view number = text_.substr(begin, position_ - begin);
    // JSON's number grammar: no leading zeros, digits around the point.
    if (number.size() > digits - begin + 1 && text_[digits] == '0' && text_[digits + 1] >= '0' &&
        text_[digits + 1] <= '9') {
      return Error("a number with a leading zero");
    }
    if (is_float) {
      double value = 0;
      auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value,
                                          std::chars_format::general);
      if (error != std::errc() || end != number.data() + number.size() ||
          !std::isdigit(static_cast<unsigned char>(text_[digits])) ||
          !std::isdigit(static_cast<unsigned char>(number.back()))) {
        return Error("a malformed number '" + std::string(number) + "'");
      }
      return MetadataValue(value);
    }
    int64_t value = 0;
    auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (error == std::errc::result_out_of_range) {
      return Error("the integer " + std::string(number) + " does not fit in 64 bits");
    }
    if (error != std::errc() || end != number.data() + number.size()) {
      return Error("a malformed number '" + std::string(number) + "'");
    }
    return MetadataValue(value);
  }

  Result<uint32_t> ParseHex4() {
    if (position_ + 4 > text_.size()) return Error("a short \\u escape");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[position_++];
      code <<= 4;
      if (c >= '0' && c <= '9') {
        code |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        code |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        code |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return Error("a malformed \\u escape");
      }
    }
    return code;
  }

  static void AppendUtf8(uint32_t code, std::string* out) {
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (code >> 6)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (code >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (code >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  Result<std::string> ParseString() {
    ++position_;  // the opening quote
    std::string out;
    while (position_ < text_.size()) {
      const char c = text_[position_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return Error("a control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (position_ >= text_.size()) break;
      const char escape = text_[position_++];
      switch (escape) {
        case '"':
        case '\\':
        case '/':
          out.push_back(escape);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          FERRY_ASSIGN_OR_RAISE(uint32_t code, ParseHex4());
          if (code >= 0xD800 && code <= 0xDBFF) {
            if (!Consume("\\u")) return Error("a lone surrogate");
            FERRY_ASSIGN_OR_RAISE(uint32_t low, ParseHex4());
            if (low < 0xDC00 || low > 0xDFFF) return Error("a lone surrogate");
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code <= 0xDFFF) {
            return Error("a lone surrogate");
          }
          AppendUtf8(code, &out);
          break;
        }
        default:
          return Error(std::string("an unknown escape \\") + escape);
      }
    }
    return Error("an unterminated string");
  }

  Result<MetadataValue> ParseList(int depth) {
    ++position_;  // '['
    MetadataList list;
    SkipSpace();
    if (Consume("]")) return MetadataValue(std::move(list));
    for (;;) {
      FERRY_ASSIGN_OR_RAISE(MetadataValue item, ParseValue(depth));
      list.push_back(std::move(item));
      SkipSpace();
      if (Consume("]")) return MetadataValue(std::move(list));
      if (!Consume(",")) return Error("expected ',' or ']' in a list");
    }
  }

  Result<MetadataValue> ParseMap(int depth) {
    ++position_;  // '{'
    MetadataMap map;
    std::set<std::string> seen;
    SkipSpace();
    if (Consume("}")) return MetadataValue(std::move(map));
    for (;;) {
      SkipSpace();
      if (position_ >= text_.size() || text_[position_] != '"') {
        return Error("map keys must be strings");
      }
      FERRY_ASSIGN_OR_RAISE(std::string key, ParseString());
      if (!seen.insert(key).second) return Error("the key '" + key + "' appears twice");
      SkipSpace();
      if (!Consume(":")) return Error("expected ':' after a key");
      FERRY_ASSIGN_OR_RAISE(MetadataValue item, ParseValue(depth));
      map.emplace_back(std::move(key), std::move(item));
      SkipSpace();
      if (Consume("}")) return MetadataValue(std::move(map));
      if (!Consume(",")) return Error("expected ',' or '}' in a map");
    }
  }

  std::string_view text_;
  int max_depth_;
  size_t position_ = 0;
};

}  // namespace

bool MetadataValue::operator==(const MetadataValue& other) const {
  if (index() != other.index()) return false;
  if (const auto* number = std::get_if<double>(this)) {
    const double theirs = std::get<double>(other);
    return (std::isnan(*number) && std::isnan(theirs)) || *number == theirs;
  }
  return as_variant() == other.as_variant();
}

std::string MetadataValueToJson(const MetadataValue& value) {
  std::string out;
  WriteValue(value, &out);
  return out;
}

Result<MetadataValue> MetadataValueFromJson(std::string_view text, int max_depth) {
  return Parser(text, max_depth).ParseDocument();
}

Result<Metadata> EncodeTypedMetadata(const TypedMetadata& values) {
  Metadata out;
  out.reserve(values.size() + 1);
  json types = json::object();
  std::set<std::string_view> seen;
  size_t bytes = 0;
  for (const auto& [key, value] : values) {
    if (key.empty()) return Status::Invalid("metadata keys must not be empty");
    if (key.rfind("ferry.", 0) == 0) {
      return Status::Invalid("metadata key '" + key +
                             "' is reserved (keys starting with "
                             "\"ferry.\" belong to Ferry)");
    }
    if (!seen.insert(key).second) {
      return Status::Invalid("metadata key '" + key + "' appears twice");
    }
    switch (value.index()) {
      case 0:
        out.emplace_back(key, std::get<std::string>(value));
        break;
      case 1:
        out.emplace_back(key, std::to_string(std::get<int64_t>(value)));
        types[key] = "int";
        break;
      case 2:
        out.emplace_back(key, FormatDouble(std::get<double>(value)));
        types[key] = "float";
        break;
      case 3:
        out.emplace_back(key, std::get<bool>(value) ? "true" : "false");
        types[key] = "bool";
        break;
      default:
        FERRY_RETURN_NOT_OK(CheckValue(value, key, 0));
        out.emplace_back(key, MetadataValueToJson(value));
        types[key] = "json";
    }
    bytes += key.size() + out.back().second.size();
    if (bytes > kMaxMetadataBytes) {
      return Status::Invalid("metadata is larger than " + std::to_string(kMaxMetadataBytes) +
                             " bytes (at key '" + key + "')");
    }
  }
  if (!types.empty()) {
    out.emplace_back(std::string(kTypesMetadataKey),
                     types.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  return out;
}

TypedMetadata DecodeTypedMetadata(const Metadata& metadata) {
  json types = json::object();
  for (const auto& [key, value] : metadata) {
    if (key != kTypesMetadataKey) continue;
    json parsed = json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object()) types = std::move(parsed);
  }
  TypedMetadata out;
  out.reserve(metadata.size());
  for (const auto& [key, value] : metadata) {
    if (key == kTypesMetadataKey || key == kArrayMetadataKey) continue;
    auto type = types.find(key);
    const std::string kind =
        (type != types.end() && type->is_string()) ? type->get<std::string>() : std::string();
    if (kind == "int") {
      int64_t integer = 0;
      if (ParseWhole(value, &integer)) {
        out.emplace_back(key, integer);
        continue;
      }
    } else if (kind == "float") {
      double number = 0;
      if (ParseWhole(value, &number)) {
        out.emplace_back(key, number);
        continue;
      }
    } else if (kind == "bool" && (value == "true" || value == "false")) {
      out.emplace_back(key, value == "true");
      continue;
    } else if (kind == "json") {
      Result<MetadataValue> parsed = MetadataValueFromJson(value);
      if (parsed.ok() && (std::holds_alternative<MetadataList>(*parsed) ||
                          std::holds_alternative<MetadataMap>(*parsed))) {
        out.emplace_back(key, std::move(parsed).MoveValueUnsafe());
        continue;
      }
    }
    out.emplace_back(key, value);
  }
  return out;
}

}  // namespace ferry::flow
