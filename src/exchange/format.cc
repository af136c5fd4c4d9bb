// C Data Interface format strings: parsing and printing one type node.

#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "ferry/exchange/type.h"

namespace ferry {

namespace {

// Formats that are a fixed string and name a type without parameters.
struct SimpleFormat {
  std::string_view format;
  TypeId id;
};

constexpr std::array<SimpleFormat, 31> kSimpleFormats = {{
    {"n", TypeId::kNull},
    {"b", TypeId::kBool},
    {"c", TypeId::kInt8},
    {"C", TypeId::kUInt8},
    {"s", TypeId::kInt16},
    {"S", TypeId::kUInt16},
    {"i", TypeId::kInt32},
    {"I", TypeId::kUInt32},
    {"l", TypeId::kInt64},
    {"L", TypeId::kUInt64},
    {"e", TypeId::kHalfFloat},
    {"f", TypeId::kFloat},
    {"g", TypeId::kDouble},
    {"z", TypeId::kBinary},
    {"Z", TypeId::kLargeBinary},
    {"vz", TypeId::kBinaryView},
    {"u", TypeId::kUtf8},
    {"U", TypeId::kLargeUtf8},
    {"vu", TypeId::kUtf8View},
    {"tdD", TypeId::kDate32},
    {"tdm", TypeId::kDate64},
    {"tiM", TypeId::kIntervalMonths},
    {"tiD", TypeId::kIntervalDayTime},
    {"tin", TypeId::kIntervalMonthDayNano},
    {"+l", TypeId::kList},
    {"+L", TypeId::kLargeList},
    {"+vl", TypeId::kListView},
    {"+vL", TypeId::kLargeListView},
    {"+s", TypeId::kStruct},
    {"+m", TypeId::kMap},
    {"+r", TypeId::kRunEndEncoded},
}};

Status InvalidFormat(std::string_view format, std::string_view reason) {
  return Status::Invalid("invalid format string '" + std::string(format) +
                         "': " + std::string(reason));
}

Status UnknownFormat(std::string_view format) {
  return Status::Invalid("unknown format string '" + std::string(format) + "'");
}

// Parses a whole decimal integer: digits with an optional leading '-' when `allow_negative`.
// Signs other than a leading '-', spaces and empty text are rejected.
Result<int32_t> ParseInt32(std::string_view text, bool allow_negative, std::string_view format,
                           std::string_view what) {
  const bool negative = !text.empty() && text.front() == '-';
  if (negative && !allow_negative) {
    return InvalidFormat(format, std::string(what) + " must not be negative");
  }
  std::string_view digits = negative ? text.substr(1) : text;
  if (digits.empty()) {
    return InvalidFormat(format, std::string(what) + " is missing");
  }
  for (char digit : digits) {
    if (digit < '0' || digit > '9') {
      return InvalidFormat(
          format, std::string(what) + " '" + std::string(text) + "' is not a decimal integer");
    }
  }
  int32_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) {
    return InvalidFormat(
        format, std::string(what) + " '" + std::string(text) + "' does not fit in 32 bits");
  }
  if (error != std::errc() || end != text.data() + text.size()) {
    return InvalidFormat(
        format, std::string(what) + " '" + std::string(text) + "' is not a decimal integer");
  }
  return value;
}

// Splits "a,b,c" at commas; "" gives no parts (a union without children).
std::vector<std::string_view> SplitCommas(std::string_view text) {
  std::vector<std::string_view> parts;
  if (text.empty()) {
    return parts;
  }
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) {
      parts.push_back(text.substr(start));
      return parts;
    }
    parts.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
}

Result<TimeUnit> ParseUnit(char letter, std::string_view format) {
  switch (letter) {
    case 's':
      return TimeUnit::kSecond;
    case 'm':
      return TimeUnit::kMilli;
    case 'u':
      return TimeUnit::kMicro;
    case 'n':
      return TimeUnit::kNano;
    default:
      return InvalidFormat(format, "unknown time unit '" + std::string(1, letter) + "'");
  }
}

char UnitLetter(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kSecond:
      return 's';
    case TimeUnit::kMilli:
      return 'm';
    case TimeUnit::kMicro:
      return 'u';
    case TimeUnit::kNano:
      return 'n';
  }
  return '?';
}

// "d:P,S" or "d:P,S,BW".
Result<DataType> ParseDecimal(std::string_view format) {
  const std::vector<std::string_view> parts = SplitCommas(format.substr(2));
  if (parts.size() != 2 && parts.size() != 3) {
    return InvalidFormat(format, "a decimal needs 'd:precision,scale[,bitwidth]'");
  }
  FERRY_ASSIGN_OR_RAISE(const int32_t precision,
                        ParseInt32(parts[0], /*allow_negative=*/false, format, "precision"));
  FERRY_ASSIGN_OR_RAISE(const int32_t scale,
                        ParseInt32(parts[1], /*allow_negative=*/true, format, "scale"));
  int32_t bit_width = 128;
  if (parts.size() == 3) {
    FERRY_ASSIGN_OR_RAISE(bit_width,
                          ParseInt32(parts[2], /*allow_negative=*/false, format, "bit width"));
    if (bit_width != 32 && bit_width != 64 && bit_width != 128 && bit_width != 256) {
      return InvalidFormat(format, "decimal bit width must be 32, 64, 128 or 256");
    }
  }
  return *decimal(bit_width, precision, scale);
}

// "+ud:I,J,..." or "+us:I,J,...": the type codes, each 0..127 and distinct.
Result<DataType> ParseUnion(std::string_view format, TypeId id) {
  if (format.size() < 4 || format[3] != ':') {
    return InvalidFormat(format, "a union needs a ':' before its type codes");
  }
  std::vector<int8_t> type_codes;
  std::array<bool, 128> seen{};
  for (std::string_view part : SplitCommas(format.substr(4))) {
    FERRY_ASSIGN_OR_RAISE(const int32_t code,
                          ParseInt32(part, /*allow_negative=*/true, format, "union type code"));
    if (code < 0 || code > 127) {
      return InvalidFormat(format,
                           "union type code " + std::to_string(code) + " is outside 0..127");
    }
    if (seen[static_cast<size_t>(code)]) {
      return InvalidFormat(format,
                           "union type code " + std::to_string(code) + " appears more than once");
    }
    seen[static_cast<size_t>(code)] = true;
    type_codes.push_back(static_cast<int8_t>(code));
  }
  DataType type;
  type.id = id;
  type.type_codes = std::move(type_codes);
  return type;
}

// The "t..." family: dates, times, timestamps, durations, intervals.
Result<DataType> ParseTemporal(std::string_view format) {
  if (format.size() < 3) {
    return UnknownFormat(format);
  }
  const char kind = format[1];
  if (kind == 't' || kind == 'D') {
    if (format.size() != 3) {
      return InvalidFormat(format, "unexpected characters after the time unit");
    }
    FERRY_ASSIGN_OR_RAISE(const TimeUnit unit, ParseUnit(format[2], format));
    if (kind == 'D') {
      return *duration(unit);
    }
    if (unit == TimeUnit::kSecond || unit == TimeUnit::kMilli) {
      return *time32(unit);
    }
    return *time64(unit);
  }
  if (kind == 's') {
    FERRY_ASSIGN_OR_RAISE(const TimeUnit unit, ParseUnit(format[2], format));
    if (format.size() < 4 || format[3] != ':') {
      return InvalidFormat(format, "a timestamp needs a ':' after its unit (then the time zone)");
    }
    return *timestamp(unit, std::string(format.substr(4)));
  }
  return UnknownFormat(format);
}

}  // namespace

Result<DataType> ParseFormat(std::string_view format) {
  if (format.empty()) {
    return Status::Invalid("invalid format string '': it is empty");
  }
  for (const SimpleFormat& simple : kSimpleFormats) {
    if (simple.format == format) {
      DataType type;
      type.id = simple.id;
      return type;
    }
  }
  if (format.substr(0, 2) == "d:") {
    return ParseDecimal(format);
  }
  if (format.substr(0, 2) == "w:") {
    FERRY_ASSIGN_OR_RAISE(
        const int32_t byte_width,
        ParseInt32(format.substr(2), /*allow_negative=*/false, format, "fixed-size binary width"));
    return *fixed_size_binary(byte_width);
  }
  if (format.substr(0, 3) == "+w:") {
    FERRY_ASSIGN_OR_RAISE(
        const int32_t list_size,
        ParseInt32(format.substr(3), /*allow_negative=*/false, format, "fixed-size list size"));
    DataType type;
    type.id = TypeId::kFixedSizeList;
    type.list_size = list_size;
    return type;
  }
  if (format.substr(0, 3) == "+ud") {
    return ParseUnion(format, TypeId::kDenseUnion);
  }
  if (format.substr(0, 3) == "+us") {
    return ParseUnion(format, TypeId::kSparseUnion);
  }
  if (format == "d" || format == "w" || format == "+w") {
    return InvalidFormat(format, "a ':' and parameters must follow");
  }
  if (format.front() == 't') {
    return ParseTemporal(format);
  }
  return UnknownFormat(format);
}

std::string FormatString(const DataType& type) {
  for (const SimpleFormat& simple : kSimpleFormats) {
    if (simple.id == type.id) {
      return std::string(simple.format);
    }
  }
  switch (type.id) {
    case TypeId::kDecimal32:
    case TypeId::kDecimal64:
    case TypeId::kDecimal128:
    case TypeId::kDecimal256: {
      int32_t bit_width = 128;
      if (type.id == TypeId::kDecimal32) {
        bit_width = 32;
      }
      if (type.id == TypeId::kDecimal64) {
        bit_width = 64;
      }
      if (type.id == TypeId::kDecimal256) {
        bit_width = 256;
      }
      return "d:" + std::to_string(type.precision) + "," + std::to_string(type.scale) + "," +
             std::to_string(bit_width);
    }
    case TypeId::kFixedSizeBinary:
      return "w:" + std::to_string(type.byte_width);
    case TypeId::kTime32:
    case TypeId::kTime64:
      return std::string("tt") + UnitLetter(type.unit);
    case TypeId::kTimestamp:
      return std::string("ts") + UnitLetter(type.unit) + ":" + type.timezone;
    case TypeId::kDuration:
      return std::string("tD") + UnitLetter(type.unit);
    case TypeId::kFixedSizeList:
      return "+w:" + std::to_string(type.list_size);
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion: {
      std::string text = type.id == TypeId::kDenseUnion ? "+ud:" : "+us:";
      for (size_t code_index = 0; code_index < type.type_codes.size(); ++code_index) {
        if (code_index > 0) {
          text += ",";
        }
        text += std::to_string(type.type_codes[code_index]);
      }
      return text;
    }
    case TypeId::kDictionary:
      return type.index_type == nullptr ? std::string() : FormatString(*type.index_type);
    default:
      return std::string();
  }
}

}  // namespace ferry
