#include "ferry/exchange/array.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exchange/array_internal.h"
#include "ferry/exchange/builder.h"

namespace ferry {
namespace {

bool HasNoValidityBitmap(TypeId id) {
  return id == TypeId::kDenseUnion || id == TypeId::kSparseUnion || id == TypeId::kRunEndEncoded;
}

const uint8_t* BufferData(const ArrayData& data, size_t index) {
  if (index >= data.buffers.size() || data.buffers[index] == nullptr) return nullptr;
  return data.buffers[index]->data();
}

template <typename T>
T Load(const uint8_t* values, int64_t index) {
  T value;
  std::memcpy(&value, values + index * int64_t{sizeof(T)}, sizeof(T));
  return value;
}

// Reads element `index` (absolute: the array offset already applied) of an
// integer buffer whose width and signedness come from `type_id`.
int64_t ReadInteger(const uint8_t* values, TypeId type_id, int64_t index) {
  switch (type_id) {
    case TypeId::kInt8:
      return Load<int8_t>(values, index);
    case TypeId::kUInt8:
      return Load<uint8_t>(values, index);
    case TypeId::kInt16:
      return Load<int16_t>(values, index);
    case TypeId::kUInt16:
      return Load<uint16_t>(values, index);
    case TypeId::kInt32:
      return Load<int32_t>(values, index);
    case TypeId::kUInt32:
      return Load<uint32_t>(values, index);
    default:
      return Load<int64_t>(values, index);
  }
}

// The integer type that stores values of an integer-backed temporal type.
TypeId IntegerStorage(TypeId id) {
  switch (id) {
    case TypeId::kTime32:
    case TypeId::kDate32:
      return TypeId::kInt32;
    case TypeId::kTime64:
    case TypeId::kTimestamp:
    case TypeId::kDuration:
    case TypeId::kDate64:
      return TypeId::kInt64;
    default:
      return id;
  }
}

// Offsets of element `index` (absolute) of a binary or list array.
std::pair<int64_t, int64_t> LoadOffsets(const uint8_t* offsets, bool large, int64_t index) {
  if (large) return {Load<int64_t>(offsets, index), Load<int64_t>(offsets, index + 1)};
  return {Load<int32_t>(offsets, index), Load<int32_t>(offsets, index + 1)};
}

// Value `index` (absolute) of a binary_view / utf8_view array; nullopt when
// the view points outside the data buffers.
std::optional<std::string_view> LoadView(const ArrayData& data, int64_t index) {
  const uint8_t* views = BufferData(data, 1);
  if (views == nullptr) return std::nullopt;
  const uint8_t* view = views + index * 16;
  const auto length = Load<int32_t>(view, 0);
  if (length < 0) return std::nullopt;
  if (length <= 12) {
    return std::string_view(reinterpret_cast<const char*>(view + 4), static_cast<size_t>(length));
  }
  const auto buffer_index = static_cast<int64_t>(Load<int32_t>(view + 8, 0));
  const auto offset = static_cast<int64_t>(Load<int32_t>(view + 12, 0));
  const int64_t slot = 2 + buffer_index;
  if (buffer_index < 0 || offset < 0 || slot >= static_cast<int64_t>(data.buffers.size())) {
    return std::nullopt;
  }
  const BufferPtr& block = data.buffers[static_cast<size_t>(slot)];
  if (block == nullptr || offset + length > block->size()) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(block->data() + offset),
                          static_cast<size_t>(length));
}

// Value `index` (relative to the array's offset) of any binary-like array.
std::optional<std::string_view> LoadBytes(const ArrayData& data, int64_t index) {
  const int64_t absolute = data.offset + index;
  switch (data.type->id) {
    case TypeId::kBinaryView:
    case TypeId::kUtf8View:
      return LoadView(data, absolute);
    case TypeId::kFixedSizeBinary: {
      const uint8_t* values = BufferData(data, 1);
      if (values == nullptr) return std::nullopt;
      const int64_t width = data.type->byte_width;
      return std::string_view(reinterpret_cast<const char*>(values + absolute * width),
                              static_cast<size_t>(width));
    }
    default: {
      const uint8_t* offsets = BufferData(data, 1);
      const uint8_t* values = BufferData(data, 2);
      if (offsets == nullptr) return std::nullopt;
      const bool large =
          data.type->id == TypeId::kLargeBinary || data.type->id == TypeId::kLargeUtf8;
      auto [start, end] = LoadOffsets(offsets, large, absolute);
      if (end < start) return std::nullopt;
      if (end == start) return std::string_view();
      if (values == nullptr) return std::nullopt;
      return std::string_view(reinterpret_cast<const char*>(values + start),
                              static_cast<size_t>(end - start));
    }
  }
}

// Child index of every union type code, -1 where undeclared.
struct UnionCodeMap {
  explicit UnionCodeMap(const DataType& type) {
    std::fill(std::begin(child_index), std::end(child_index), -1);
    for (size_t i = 0; i < type.type_codes.size(); ++i) {
      if (type.type_codes[i] >= 0) child_index[type.type_codes[i]] = static_cast<int>(i);
    }
  }
  int operator()(int8_t code) const { return code < 0 ? -1 : child_index[code]; }
  int child_index[128] = {};
};

// Index of the run containing logical position `position` (absolute): the
// first run whose end exceeds it.
int64_t FindRun(const ArrayData& run_ends, int64_t position) {
  const uint8_t* values = BufferData(run_ends, 1);
  if (values == nullptr) return run_ends.length;
  int64_t low = 0;
  int64_t high = run_ends.length;
  while (low < high) {
    const int64_t middle = low + (high - low) / 2;
    if (ReadInteger(values, run_ends.type->id, run_ends.offset + middle) <= position) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

int64_t RunEnd(const ArrayData& run_ends, int64_t run) {
  return ReadInteger(BufferData(run_ends, 1), run_ends.type->id, run_ends.offset + run);
}

template <typename T>
bool SameFloat(T left, T right) {
  // Equal values, or both NaN: a copy of an array must compare equal to it.
  return left == right || (std::isnan(left) && std::isnan(right));
}

// ---- Logical equality ------------------------------------------------------

bool RangeEquals(const ArrayData& left, int64_t left_start, const ArrayData& right,
                 int64_t right_start, int64_t count);

// Walks [0, count) and calls compare_run(start, length) for every maximal run
// of slots valid on both sides; false as soon as validity differs.
template <typename CompareRun>
bool CompareValidRuns(const ArrayData& left, int64_t left_start, const ArrayData& right,
                      int64_t right_start, int64_t count, CompareRun&& compare_run) {
  int64_t i = 0;
  while (i < count) {
    const bool left_valid = left.IsValid(left_start + i);
    if (left_valid != right.IsValid(right_start + i)) return false;
    if (!left_valid) {
      ++i;
      continue;
    }
    const int64_t run_start = i;
    ++i;
    while (i < count && left.IsValid(left_start + i) && right.IsValid(right_start + i)) ++i;
    if (!compare_run(run_start, i - run_start)) return false;
  }
  return true;
}

bool ChildRangeEquals(const ArrayData& left, size_t child_index, int64_t left_start,
                      const ArrayData& right, int64_t right_start, int64_t count) {
  if (child_index >= left.children.size() || child_index >= right.children.size()) return false;
  const ArrayDataPtr& left_child = left.children[child_index];
  const ArrayDataPtr& right_child = right.children[child_index];
  if (left_child == nullptr || right_child == nullptr || left_child->type == nullptr ||
      right_child->type == nullptr || left_child->type->id != right_child->type->id) {
    return false;
  }
  if (left_start < 0 || right_start < 0 || left_start + count > left_child->length ||
      right_start + count > right_child->length) {
    return false;
  }
  return RangeEquals(*left_child, left_start, *right_child, right_start, count);
}

bool FixedBytesEqual(const ArrayData& left, int64_t left_start, const ArrayData& right,
                     int64_t right_start, int64_t count, int64_t width) {
  const uint8_t* left_values = BufferData(left, 1);
  const uint8_t* right_values = BufferData(right, 1);
  if (left_values == nullptr || right_values == nullptr) return width == 0;
  return std::memcmp(left_values + (left.offset + left_start) * width,
                     right_values + (right.offset + right_start) * width,
                     static_cast<size_t>(count * width)) == 0;
}

template <typename T, typename Equal>
bool ValuesEqual(const ArrayData& left, int64_t left_start, const ArrayData& right,
                 int64_t right_start, int64_t count, Equal&& equal) {
  const uint8_t* left_values = BufferData(left, 1);
  const uint8_t* right_values = BufferData(right, 1);
  if (left_values == nullptr || right_values == nullptr) return false;
  for (int64_t i = 0; i < count; ++i) {
    if (!equal(Load<T>(left_values, left.offset + left_start + i),
               Load<T>(right_values, right.offset + right_start + i))) {
      return false;
    }
  }
  return true;
}

bool ListRunEquals(const ArrayData& left, int64_t left_start, const ArrayData& right,
                   int64_t right_start, int64_t count, bool large) {
  const uint8_t* left_offsets = BufferData(left, 1);
  const uint8_t* right_offsets = BufferData(right, 1);
  if (left_offsets == nullptr || right_offsets == nullptr) return false;
  // A run of valid lists covers one contiguous child range on each side.
  for (int64_t i = 0; i < count; ++i) {
    auto [left_begin, left_end] = LoadOffsets(left_offsets, large, left.offset + left_start + i);
    auto [right_begin, right_end] =
        LoadOffsets(right_offsets, large, right.offset + right_start + i);
    if (left_end - left_begin != right_end - right_begin) return false;
  }
  const int64_t left_begin = LoadOffsets(left_offsets, large, left.offset + left_start).first;
  const int64_t left_end =
      LoadOffsets(left_offsets, large, left.offset + left_start + count - 1).second;
  const int64_t right_begin = LoadOffsets(right_offsets, large, right.offset + right_start).first;
  return ChildRangeEquals(left, 0, left_begin, right, right_begin, left_end - left_begin);
}

bool ListViewRunEquals(const ArrayData& left, int64_t left_start, const ArrayData& right,
                       int64_t right_start, int64_t count, bool large) {
  const uint8_t* left_offsets = BufferData(left, 1);
  const uint8_t* left_sizes = BufferData(left, 2);
  const uint8_t* right_offsets = BufferData(right, 1);
  const uint8_t* right_sizes = BufferData(right, 2);
  if (!left_offsets || !left_sizes || !right_offsets || !right_sizes) return false;
  auto load = [large](const uint8_t* values, int64_t index) {
    return large ? Load<int64_t>(values, index) : int64_t{Load<int32_t>(values, index)};
  };
  for (int64_t i = 0; i < count; ++i) {
    const int64_t left_index = left.offset + left_start + i;
    const int64_t right_index = right.offset + right_start + i;
    const int64_t size = load(left_sizes, left_index);
    if (size != load(right_sizes, right_index)) return false;
    if (!ChildRangeEquals(left, 0, load(left_offsets, left_index), right,
                          load(right_offsets, right_index), size)) {
      return false;
    }
  }
  return true;
}

bool UnionEquals(const ArrayData& left, int64_t left_start, const ArrayData& right,
                 int64_t right_start, int64_t count) {
  const bool dense = left.type->id == TypeId::kDenseUnion;
  const uint8_t* left_codes = BufferData(left, 0);
  const uint8_t* right_codes = BufferData(right, 0);
  const uint8_t* left_offsets = dense ? BufferData(left, 1) : nullptr;
  const uint8_t* right_offsets = dense ? BufferData(right, 1) : nullptr;
  if (!left_codes || !right_codes || (dense && (!left_offsets || !right_offsets))) return false;
  const UnionCodeMap child_for_code(*left.type);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t left_index = left.offset + left_start + i;
    const int64_t right_index = right.offset + right_start + i;
    const auto code = static_cast<int8_t>(left_codes[left_index]);
    if (code != static_cast<int8_t>(right_codes[right_index])) return false;
    const int child_index = child_for_code(code);
    if (child_index < 0) return false;
    // Sparse children are indexed like the union itself (offset included).
    const int64_t left_child_index = dense ? Load<int32_t>(left_offsets, left_index) : left_index;
    const int64_t right_child_index =
        dense ? Load<int32_t>(right_offsets, right_index) : right_index;
    if (!ChildRangeEquals(left, static_cast<size_t>(child_index), left_child_index, right,
                          right_child_index, 1)) {
      return false;
    }
  }
  return true;
}

bool RunEndEncodedEquals(const ArrayData& left, int64_t left_start, const ArrayData& right,
                         int64_t right_start, int64_t count) {
  if (left.children.size() != 2 || right.children.size() != 2) return false;
  for (const auto* data : {&left, &right}) {
    for (const ArrayDataPtr& child_data : data->children) {
      if (child_data == nullptr || child_data->type == nullptr) return false;
    }
  }
  const ArrayData& left_run_ends = *left.children[0];
  const ArrayData& right_run_ends = *right.children[0];
  int64_t left_position = left.offset + left_start;
  int64_t right_position = right.offset + right_start;
  int64_t left_run = FindRun(left_run_ends, left_position);
  int64_t right_run = FindRun(right_run_ends, right_position);
  int64_t remaining = count;
  while (remaining > 0) {
    if (left_run >= left_run_ends.length || right_run >= right_run_ends.length) return false;
    const int64_t left_end = RunEnd(left_run_ends, left_run);
    const int64_t right_end = RunEnd(right_run_ends, right_run);
    const int64_t step =
        std::min({left_end - left_position, right_end - right_position, remaining});
    if (step <= 0) return false;  // run ends not increasing
    if (!ChildRangeEquals(left, 1, left_run, right, right_run, 1)) return false;
    left_position += step;
    right_position += step;
    remaining -= step;
    if (left_position == left_end) ++left_run;
    if (right_position == right_end) ++right_run;
  }
  return true;
}

bool DictionaryRunEquals(const ArrayData& left, int64_t left_start, const ArrayData& right,
                         int64_t right_start, int64_t count) {
  const uint8_t* left_indices = BufferData(left, 1);
  const uint8_t* right_indices = BufferData(right, 1);
  if (!left_indices || !right_indices || !left.dictionary || !right.dictionary ||
      !left.type->index_type) {
    return false;
  }
  const TypeId index_id = left.type->index_type->id;
  const bool same_dictionary = left.dictionary == right.dictionary;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t left_index = ReadInteger(left_indices, index_id, left.offset + left_start + i);
    const int64_t right_index =
        ReadInteger(right_indices, index_id, right.offset + right_start + i);
    if (same_dictionary && left_index == right_index) continue;
    if (left_index < 0 || left_index >= left.dictionary->length || right_index < 0 ||
        right_index >= right.dictionary->length) {
      return false;
    }
    if (!RangeEquals(*left.dictionary, left_index, *right.dictionary, right_index, 1)) {
      return false;
    }
  }
  return true;
}

bool RangeEquals(const ArrayData& left, int64_t left_start, const ArrayData& right,
                 int64_t right_start, int64_t count) {
  if (count == 0) return true;
  const DataType& type = *left.type;
  const TypeId id = type.id;
  if (id == TypeId::kNull) return true;
  if (id == TypeId::kDenseUnion || id == TypeId::kSparseUnion) {
    return UnionEquals(left, left_start, right, right_start, count);
  }
  if (id == TypeId::kRunEndEncoded) {
    return RunEndEncodedEquals(left, left_start, right, right_start, count);
  }
  auto compare_run = [&](int64_t start, int64_t length) -> bool {
    const int64_t l = left_start + start;
    const int64_t r = right_start + start;
    switch (id) {
      case TypeId::kBool: {
        const uint8_t* left_bits = BufferData(left, 1);
        const uint8_t* right_bits = BufferData(right, 1);
        if (!left_bits || !right_bits) return false;
        for (int64_t i = 0; i < length; ++i) {
          if (GetBit(left_bits, left.offset + l + i) != GetBit(right_bits, right.offset + r + i)) {
            return false;
          }
        }
        return true;
      }
      case TypeId::kHalfFloat:
        return ValuesEqual<uint16_t>(left, l, right, r, length, [](uint16_t a, uint16_t b) {
          return SameFloat(HalfToFloat(a), HalfToFloat(b));
        });
      case TypeId::kFloat:
        return ValuesEqual<float>(left, l, right, r, length, SameFloat<float>);
      case TypeId::kDouble:
        return ValuesEqual<double>(left, l, right, r, length, SameFloat<double>);
      case TypeId::kBinary:
      case TypeId::kUtf8:
      case TypeId::kLargeBinary:
      case TypeId::kLargeUtf8:
      case TypeId::kBinaryView:
      case TypeId::kUtf8View:
        for (int64_t i = 0; i < length; ++i) {
          auto left_value = LoadBytes(left, l + i);
          auto right_value = LoadBytes(right, r + i);
          if (!left_value || !right_value || *left_value != *right_value) return false;
        }
        return true;
      case TypeId::kList:
      case TypeId::kMap:
        return ListRunEquals(left, l, right, r, length, /*large=*/false);
      case TypeId::kLargeList:
        return ListRunEquals(left, l, right, r, length, /*large=*/true);
      case TypeId::kListView:
        return ListViewRunEquals(left, l, right, r, length, /*large=*/false);
      case TypeId::kLargeListView:
        return ListViewRunEquals(left, l, right, r, length, /*large=*/true);
      case TypeId::kFixedSizeList: {
        const int64_t list_size = type.list_size;
        return ChildRangeEquals(left, 0, (left.offset + l) * list_size, right,
                                (right.offset + r) * list_size, length * list_size);
      }
      case TypeId::kStruct:
        for (size_t field_index = 0; field_index < type.children.size(); ++field_index) {
          if (!ChildRangeEquals(left, field_index, left.offset + l, right, right.offset + r,
                                length)) {
            return false;
          }
        }
        return true;
      case TypeId::kDictionary:
        return DictionaryRunEquals(left, l, right, r, length);
      default: {
        // Every remaining type is fixed-width: integers, decimals, fixed-size
        // binary, dates, times, timestamps, durations, intervals.
        const int32_t width = type.fixed_width();
        if (width < 0) return false;
        return FixedBytesEqual(left, l, right, r, length, width);
      }
    }
  };
  return CompareValidRuns(left, left_start, right, right_start, count, compare_run);
}

// ---- Printing ---------------------------------------------------------------

void AppendEscaped(std::string* out, std::string_view bytes, bool text) {
  static constexpr char kHex[] = "0123456789abcdef";
  if (!text) out->push_back('b');
  out->push_back('"');
  for (char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (byte < 0x20 || byte == 0x7F || (!text && byte >= 0x80)) {
      out->append("\\x");
      out->push_back(kHex[byte >> 4]);
      out->push_back(kHex[byte & 15]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

template <typename T>
void AppendNumber(std::string* out, T value) {
  char text[64];
  auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  out->append(text, error == std::errc() ? end : text);
}

// Two's-complement little-endian integer of `width` bytes, with `scale`
// digits after the point.
std::string FormatDecimal(const uint8_t* bytes, int32_t width, int32_t scale) {
  std::vector<uint32_t> limbs(static_cast<size_t>(width / 4));
  std::memcpy(limbs.data(), bytes, static_cast<size_t>(width));
  const bool negative = (bytes[width - 1] & 0x80) != 0;
  if (negative) {
    uint64_t carry = 1;
    for (uint32_t& limb : limbs) {
      const uint64_t sum = uint64_t{static_cast<uint32_t>(~limb)} + carry;
      limb = static_cast<uint32_t>(sum);
      carry = sum >> 32;
    }
  }
  std::string digits;
  auto is_zero = [&] {
    return std::all_of(limbs.begin(), limbs.end(), [](uint32_t limb) { return limb == 0; });
  };
  while (!is_zero()) {
    uint64_t remainder = 0;
    for (auto limb = limbs.rbegin(); limb != limbs.rend(); ++limb) {
      const uint64_t current = (remainder << 32) | *limb;
      *limb = static_cast<uint32_t>(current / 10);
      remainder = current % 10;
    }
    digits.push_back(static_cast<char>('0' + remainder));
  }
  if (digits.empty()) digits = "0";
  std::reverse(digits.begin(), digits.end());
  if (scale > 0) {
    if (static_cast<int32_t>(digits.size()) <= scale) {
      digits.insert(0, static_cast<size_t>(scale) + 1 - digits.size(), '0');
    }
    digits.insert(digits.size() - static_cast<size_t>(scale), 1, '.');
  } else if (scale < 0) {
    digits.append(static_cast<size_t>(-scale), '0');
  }
  return negative ? "-" + digits : digits;
}

// Days since 1970-01-01 to a proleptic Gregorian "YYYY-MM-DD" (the civil
// calendar algorithm: shift to years starting in March, split into 400-year eras).
std::string FormatDate(int64_t days) {
  days += 719468;
  const int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  const int64_t day_of_era = days - era * 146097;
  const int64_t year_of_era =
      (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
  const int64_t day_of_year =
      day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  const int64_t month_index = (5 * day_of_year + 2) / 153;
  const int64_t day = day_of_year - (153 * month_index + 2) / 5 + 1;
  const int64_t month = month_index < 10 ? month_index + 3 : month_index - 9;
  const int64_t year = year_of_era + era * 400 + (month <= 2 ? 1 : 0);
  char text[80];
  std::snprintf(text, sizeof(text), "%04lld-%02lld-%02lld", static_cast<long long>(year),
                static_cast<long long>(month), static_cast<long long>(day));
  return text;
}

int64_t FloorDiv(int64_t value, int64_t divisor) {
  int64_t quotient = value / divisor;
  if ((value % divisor != 0) && ((value < 0) != (divisor < 0))) --quotient;
  return quotient;
}

void AppendValue(std::string* out, const ArrayData& data, int64_t index, int64_t max_values);

void AppendChildValues(std::string* out, const ArrayData& data, size_t child_index, int64_t start,
                       int64_t count, int64_t max_values) {
  out->push_back('[');
  if (child_index >= data.children.size() || data.children[child_index] == nullptr) {
    out->append("<missing child>]");
    return;
  }
  const ArrayData& child_data = *data.children[child_index];
  const int64_t shown = max_values < 0 ? count : std::min(count, max_values);
  for (int64_t i = 0; i < shown; ++i) {
    if (i > 0) out->append(", ");
    if (start + i < 0 || start + i >= child_data.length) {
      out->append("<out of range>");
      continue;
    }
    AppendValue(out, child_data, start + i, max_values);
  }
  if (shown < count) out->append(", ... " + std::to_string(count - shown) + " more");
  out->push_back(']');
}

void AppendValue(std::string* out, const ArrayData& data, int64_t index, int64_t max_values) {
  const DataType& type = *data.type;
  if (!data.IsValid(index)) {
    out->append("null");
    return;
  }
  const int64_t absolute = data.offset + index;
  const uint8_t* values = BufferData(data, 1);
  auto need = [&](const void* pointer) {
    if (pointer == nullptr) out->append("<missing buffer>");
    return pointer != nullptr;
  };
  switch (type.id) {
    case TypeId::kNull:
      out->append("null");
      return;
    case TypeId::kBool:
      if (need(values)) out->append(GetBit(values, absolute) ? "true" : "false");
      return;
    case TypeId::kInt8:
    case TypeId::kUInt8:
    case TypeId::kInt16:
    case TypeId::kUInt16:
    case TypeId::kInt32:
    case TypeId::kUInt32:
    case TypeId::kInt64:
    case TypeId::kTime32:
    case TypeId::kTime64:
    case TypeId::kTimestamp:
    case TypeId::kDuration:
      if (need(values)) AppendNumber(out, ReadInteger(values, IntegerStorage(type.id), absolute));
      return;
    case TypeId::kUInt64:
      if (need(values)) AppendNumber(out, Load<uint64_t>(values, absolute));
      return;
    case TypeId::kHalfFloat:
      if (need(values)) AppendNumber(out, HalfToFloat(Load<uint16_t>(values, absolute)));
      return;
    case TypeId::kFloat:
      if (need(values)) AppendNumber(out, Load<float>(values, absolute));
      return;
    case TypeId::kDouble:
      if (need(values)) AppendNumber(out, Load<double>(values, absolute));
      return;
    case TypeId::kDecimal32:
    case TypeId::kDecimal64:
    case TypeId::kDecimal128:
    case TypeId::kDecimal256: {
      const int32_t width = type.fixed_width();
      if (need(values)) out->append(FormatDecimal(values + absolute * width, width, type.scale));
      return;
    }
    case TypeId::kDate32:
      if (need(values)) out->append(FormatDate(Load<int32_t>(values, absolute)));
      return;
    case TypeId::kDate64:
      if (need(values))
        out->append(FormatDate(FloorDiv(Load<int64_t>(values, absolute), 86400000)));
      return;
    case TypeId::kIntervalMonths:
      if (need(values)) out->append(std::to_string(Load<int32_t>(values, absolute)) + "M");
      return;
    case TypeId::kIntervalDayTime:
      if (need(values)) {
        const auto interval = Load<DayTimeInterval>(values, absolute);
        out->append(std::to_string(interval.days) + "d" + std::to_string(interval.milliseconds) +
                    "ms");
      }
      return;
    case TypeId::kIntervalMonthDayNano:
      if (need(values)) {
        const auto interval = Load<MonthDayNanoInterval>(values, absolute);
        out->append(std::to_string(interval.months) + "M" + std::to_string(interval.days) + "d" +
                    std::to_string(interval.nanoseconds) + "ns");
      }
      return;
    case TypeId::kBinary:
    case TypeId::kLargeBinary:
    case TypeId::kBinaryView:
    case TypeId::kFixedSizeBinary:
    case TypeId::kUtf8:
    case TypeId::kLargeUtf8:
    case TypeId::kUtf8View: {
      auto bytes = LoadBytes(data, index);
      if (!bytes) {
        out->append("<invalid value>");
        return;
      }
      const bool text =
          type.id == TypeId::kUtf8 || type.id == TypeId::kLargeUtf8 || type.id == TypeId::kUtf8View;
      AppendEscaped(out, *bytes, text);
      return;
    }
    case TypeId::kList:
    case TypeId::kLargeList: {
      if (!need(values)) return;
      auto [begin, end] = LoadOffsets(values, type.id == TypeId::kLargeList, absolute);
      AppendChildValues(out, data, 0, begin, end - begin, max_values);
      return;
    }
    case TypeId::kListView:
    case TypeId::kLargeListView: {
      const uint8_t* sizes = BufferData(data, 2);
      if (!need(values) || !need(sizes)) return;
      const bool large = type.id == TypeId::kLargeListView;
      const int64_t begin =
          large ? Load<int64_t>(values, absolute) : Load<int32_t>(values, absolute);
      const int64_t size = large ? Load<int64_t>(sizes, absolute) : Load<int32_t>(sizes, absolute);
      AppendChildValues(out, data, 0, begin, size, max_values);
      return;
    }
    case TypeId::kFixedSizeList:
      AppendChildValues(out, data, 0, absolute * type.list_size, type.list_size, max_values);
      return;
    case TypeId::kStruct: {
      out->push_back('{');
      for (size_t field_index = 0; field_index < type.children.size(); ++field_index) {
        if (field_index > 0) out->append(", ");
        out->append(type.children[field_index].name + ": ");
        if (field_index >= data.children.size() || !data.children[field_index]) {
          out->append("<missing child>");
          continue;
        }
        AppendValue(out, *data.children[field_index], absolute, max_values);
      }
      out->push_back('}');
      return;
    }
    case TypeId::kMap: {
      if (!need(values)) return;
      auto [begin, end] = LoadOffsets(values, false, absolute);
      if (data.children.empty() || !data.children[0] || data.children[0]->children.size() != 2 ||
          !data.children[0]->children[0] || !data.children[0]->children[1]) {
        out->append("<missing entries>");
        return;
      }
      const ArrayData& entries = *data.children[0];
      out->push_back('{');
      const int64_t shown = max_values < 0 ? end - begin : std::min(end - begin, max_values);
      for (int64_t i = 0; i < shown; ++i) {
        if (i > 0) out->append(", ");
        const int64_t entry = entries.offset + begin + i;
        AppendValue(out, *entries.children[0], entry, max_values);
        out->append(": ");
        AppendValue(out, *entries.children[1], entry, max_values);
      }
      if (shown < end - begin)
        out->append(", ... " + std::to_string(end - begin - shown) + " more");
      out->push_back('}');
      return;
    }
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion: {
      const uint8_t* codes = BufferData(data, 0);
      if (!need(codes)) return;
      const auto code = static_cast<int8_t>(codes[absolute]);
      const int child_index = UnionCodeMap(type)(code);
      if (child_index < 0 || static_cast<size_t>(child_index) >= data.children.size() ||
          !data.children[static_cast<size_t>(child_index)]) {
        out->append("<undeclared type code " + std::to_string(code) + ">");
        return;
      }
      int64_t child_position = absolute;
      if (type.id == TypeId::kDenseUnion) {
        if (!need(values)) return;
        child_position = Load<int32_t>(values, absolute);
      }
      AppendValue(out, *data.children[static_cast<size_t>(child_index)], child_position,
                  max_values);
      return;
    }
    case TypeId::kRunEndEncoded: {
      if (data.children.size() != 2 || !data.children[0] || !data.children[1] ||
          !data.children[0]->type) {
        out->append("<missing children>");
        return;
      }
      const int64_t run = FindRun(*data.children[0], absolute);
      if (run >= data.children[1]->length) {
        out->append("<out of range>");
        return;
      }
      AppendValue(out, *data.children[1], run, max_values);
      return;
    }
    case TypeId::kDictionary: {
      if (!need(values) || !need(data.dictionary.get()) || !need(type.index_type.get())) return;
      const int64_t dictionary_index = ReadInteger(values, type.index_type->id, absolute);
      if (dictionary_index < 0 || dictionary_index >= data.dictionary->length) {
        out->append("<index " + std::to_string(dictionary_index) + " out of range>");
        return;
      }
      AppendValue(out, *data.dictionary, dictionary_index, max_values);
      return;
    }
  }
  out->append("<unknown type>");
}

}  // namespace

// ---- ArrayData ---------------------------------------------------------------

int64_t ArrayData::GetNullCount() const {
  if (type != nullptr) {
    if (type->id == TypeId::kNull) return length;
    if (HasNoValidityBitmap(type->id)) return 0;
  }
  if (null_count >= 0) return null_count;
  const uint8_t* validity = BufferData(*this, 0);
  if (validity == nullptr) return 0;
  return length - CountSetBits(validity, offset, length);
}

bool ArrayData::IsValid(int64_t i) const {
  if (type != nullptr) {
    if (type->id == TypeId::kNull) return false;
    if (HasNoValidityBitmap(type->id)) return true;
  }
  if (null_count == 0) return true;
  const uint8_t* validity = BufferData(*this, 0);
  return validity == nullptr || GetBit(validity, offset + i);
}

ArrayDataPtr Slice(const ArrayDataPtr& data, int64_t offset, int64_t length) {
  if (data == nullptr) return nullptr;
  offset = std::clamp<int64_t>(offset, 0, data->length);
  length = std::clamp<int64_t>(length, 0, data->length - offset);
  auto sliced = std::make_shared<ArrayData>(*data);
  sliced->offset = data->offset + offset;
  sliced->length = length;
  if (data->type != nullptr && data->type->id == TypeId::kNull) {
    sliced->null_count = length;
  } else if (data->null_count == 0 || length == 0 ||
             (data->type != nullptr && HasNoValidityBitmap(data->type->id))) {
    sliced->null_count = 0;
  } else if (offset != 0 || length != data->length) {
    sliced->null_count = kUnknownNullCount;
  }
  return sliced;
}

bool ArrayEquals(const ArrayData& left, const ArrayData& right) {
  if (&left == &right) return true;
  if (left.type == nullptr || right.type == nullptr) return left.type == right.type;
  // Equal types: a shared node (the common case) needs no walk.
  if (left.length != right.length) return false;
  if (left.type != right.type && !left.type->Equals(*right.type, /*check_metadata=*/false)) {
    return false;
  }
  return RangeEquals(left, 0, right, 0, left.length);
}

std::string ArrayToString(const ArrayData& data, int64_t max_values) {
  if (data.type == nullptr) return "<array without type>";
  std::string out = data.type->ToString() + " (" + std::to_string(data.length) + " values, " +
                    std::to_string(data.GetNullCount()) + " nulls)";
  const int64_t shown = max_values < 0 ? data.length : std::min(data.length, max_values);
  for (int64_t i = 0; i < shown; ++i) {
    out.append("\n  ");
    AppendValue(&out, data, i, max_values);
  }
  if (shown < data.length) out.append("\n  ... " + std::to_string(data.length - shown) + " more");
  return out;
}

// ---- RecordBatch ----------------------------------------------------------------

Result<std::shared_ptr<RecordBatch>> RecordBatch::Make(SchemaPtr schema, int64_t num_rows,
                                                       std::vector<ArrayDataPtr> columns) {
  if (schema == nullptr) return Status::Invalid("a record batch needs a schema");
  if (num_rows < 0) {
    return Status::Invalid("a record batch cannot have " + std::to_string(num_rows) + " rows");
  }
  if (columns.size() != schema->fields.size()) {
    return Status::Invalid("the schema has " + std::to_string(schema->fields.size()) +
                           " fields but " + std::to_string(columns.size()) + " columns were given");
  }
  for (size_t column_index = 0; column_index < columns.size(); ++column_index) {
    const Field& column_field = schema->fields[column_index];
    const ArrayDataPtr& column_data = columns[column_index];
    const std::string where =
        "column " + std::to_string(column_index) + " '" + column_field.name + "'";
    if (column_data == nullptr || column_data->type == nullptr) {
      return Status::Invalid(where + " has no array");
    }
    if (column_field.type == nullptr ||
        !column_data->type->Equals(*column_field.type, /*check_metadata=*/false)) {
      return Status::TypeError(where + " has type " + column_data->type->ToString() +
                               " but the schema says " +
                               (column_field.type ? column_field.type->ToString() : "<none>"));
    }
    if (column_data->length != num_rows) {
      return Status::Invalid(where + " has " + std::to_string(column_data->length) +
                             " rows, the batch " + std::to_string(num_rows));
    }
  }
  return std::shared_ptr<RecordBatch>(
      new RecordBatch(std::move(schema), num_rows, std::move(columns)));
}

namespace internal {

RecordBatchPtr RecordBatchAccess::MakeTrusted(SchemaPtr schema, int64_t num_rows,
                                              std::vector<ArrayDataPtr> columns) {
  // make_shared needs a public constructor; this local class lends it ours.
  struct SharedBatch : RecordBatch {
    SharedBatch(SchemaPtr schema, int64_t num_rows, std::vector<ArrayDataPtr> columns)
        : RecordBatch(std::move(schema), num_rows, std::move(columns)) {}
  };
  return std::make_shared<SharedBatch>(std::move(schema), num_rows, std::move(columns));
}

}  // namespace internal

Result<std::shared_ptr<RecordBatch>> RecordBatch::FromStructArray(const ArrayDataPtr& struct_array,
                                                                  Metadata schema_metadata) {
  if (struct_array == nullptr || struct_array->type == nullptr) {
    return Status::Invalid("FromStructArray needs an array");
  }
  if (struct_array->type->id != TypeId::kStruct) {
    return Status::TypeError("FromStructArray needs a struct array, got " +
                             struct_array->type->ToString());
  }
  if (struct_array->GetNullCount() != 0) {
    return Status::Invalid("a struct array with " + std::to_string(struct_array->GetNullCount()) +
                           " top-level nulls cannot become a record batch");
  }
  const auto& fields = struct_array->type->children;
  if (struct_array->children.size() != fields.size()) {
    return Status::Invalid("the struct type has " + std::to_string(fields.size()) +
                           " fields but the array " +
                           std::to_string(struct_array->children.size()) + " children");
  }
  std::vector<ArrayDataPtr> columns;
  columns.reserve(fields.size());
  for (size_t column_index = 0; column_index < fields.size(); ++column_index) {
    const ArrayDataPtr& child_data = struct_array->children[column_index];
    if (child_data == nullptr || child_data->length < struct_array->offset + struct_array->length) {
      return Status::Invalid("struct field '" + fields[column_index].name +
                             "' is shorter than the struct array");
    }
    // Children see the parent's offset: a column is the matching child slice.
    columns.push_back(ferry::Slice(child_data, struct_array->offset, struct_array->length));
  }
  auto schema = std::make_shared<Schema>();
  schema->fields = fields;
  schema->metadata = std::move(schema_metadata);
  return Make(std::move(schema), struct_array->length, std::move(columns));
}

ArrayDataPtr RecordBatch::ToStructArray() const {
  auto data = std::make_shared<ArrayData>();
  data->type = struct_(schema_->fields);
  data->length = num_rows_;
  data->null_count = 0;
  data->buffers = {nullptr};
  data->children = columns_;
  return data;
}

std::shared_ptr<RecordBatch> RecordBatch::Slice(int64_t offset, int64_t length) const {
  offset = std::clamp<int64_t>(offset, 0, num_rows_);
  length = std::clamp<int64_t>(length, 0, num_rows_ - offset);
  std::vector<ArrayDataPtr> sliced;
  sliced.reserve(columns_.size());
  for (const ArrayDataPtr& column_data : columns_) {
    sliced.push_back(ferry::Slice(column_data, offset, length));
  }
  return std::shared_ptr<RecordBatch>(new RecordBatch(schema_, length, std::move(sliced)));
}

bool RecordBatch::Equals(const RecordBatch& other) const {
  if (num_rows_ != other.num_rows_ || columns_.size() != other.columns_.size()) return false;
  if (!schema_->Equals(*other.schema_, /*check_metadata=*/false)) return false;
  for (size_t column_index = 0; column_index < columns_.size(); ++column_index) {
    if (!ArrayEquals(*columns_[column_index], *other.columns_[column_index])) return false;
  }
  return true;
}

std::string RecordBatch::ToString() const {
  std::string out = "record batch: " + std::to_string(num_rows_) + " rows, " +
                    std::to_string(columns_.size()) + " columns";
  for (size_t column_index = 0; column_index < columns_.size(); ++column_index) {
    out += "\n" + schema_->fields[column_index].name + ": ";
    std::string column_text = ArrayToString(*columns_[column_index]);
    // Indent the column's value lines under its name.
    for (size_t position = 0; (position = column_text.find('\n', position)) != std::string::npos;
         position += 3) {
      column_text.insert(position + 1, "  ");
    }
    out += column_text;
  }
  return out;
}

}  // namespace ferry
