#include "ferry/exchange/type.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

namespace ferry {

namespace {

// Builds a type node of `id` and lets `configure` set its parameters.
template <typename Configure>
TypePtr MakeType(TypeId id, Configure&& configure) {
  auto type = std::make_shared<DataType>();
  type->id = id;
  configure(*type);
  return type;
}

TypePtr MakeType(TypeId id) {
  return MakeType(id, [](DataType&) {});
}

// One cached node per parameterless type: these are immutable, so every caller can share them.
#define FERRY_CACHED_TYPE(function_name, type_id)       \
  TypePtr function_name##_instance() {                  \
    static const TypePtr kInstance = MakeType(type_id); \
    return kInstance;                                   \
  }

FERRY_CACHED_TYPE(null, TypeId::kNull)
FERRY_CACHED_TYPE(boolean, TypeId::kBool)
FERRY_CACHED_TYPE(int8, TypeId::kInt8)
FERRY_CACHED_TYPE(uint8, TypeId::kUInt8)
FERRY_CACHED_TYPE(int16, TypeId::kInt16)
FERRY_CACHED_TYPE(uint16, TypeId::kUInt16)
FERRY_CACHED_TYPE(int32, TypeId::kInt32)
FERRY_CACHED_TYPE(uint32, TypeId::kUInt32)
FERRY_CACHED_TYPE(int64, TypeId::kInt64)
FERRY_CACHED_TYPE(uint64, TypeId::kUInt64)
FERRY_CACHED_TYPE(float16, TypeId::kHalfFloat)
FERRY_CACHED_TYPE(float32, TypeId::kFloat)
FERRY_CACHED_TYPE(float64, TypeId::kDouble)
FERRY_CACHED_TYPE(binary, TypeId::kBinary)
FERRY_CACHED_TYPE(large_binary, TypeId::kLargeBinary)
FERRY_CACHED_TYPE(binary_view, TypeId::kBinaryView)
FERRY_CACHED_TYPE(utf8, TypeId::kUtf8)
FERRY_CACHED_TYPE(large_utf8, TypeId::kLargeUtf8)
FERRY_CACHED_TYPE(utf8_view, TypeId::kUtf8View)
FERRY_CACHED_TYPE(date32, TypeId::kDate32)
FERRY_CACHED_TYPE(date64, TypeId::kDate64)
FERRY_CACHED_TYPE(interval_months, TypeId::kIntervalMonths)
FERRY_CACHED_TYPE(interval_day_time, TypeId::kIntervalDayTime)
FERRY_CACHED_TYPE(interval_month_day_nano, TypeId::kIntervalMonthDayNano)

#undef FERRY_CACHED_TYPE

TypePtr ListLike(TypeId id, Field item) {
  return MakeType(id, [&](DataType& type) { type.children.push_back(std::move(item)); });
}

std::vector<int8_t> DefaultTypeCodes(size_t num_fields) {
  std::vector<int8_t> codes(num_fields);
  for (size_t child_index = 0; child_index < num_fields; ++child_index) {
    // Out-of-range counts wrap here on purpose; ValidateType reports them.
    codes[child_index] = static_cast<int8_t>(child_index);
  }
  return codes;
}

TypePtr Union(TypeId id, std::vector<Field> fields, std::vector<int8_t> type_codes) {
  if (type_codes.empty()) {
    type_codes = DefaultTypeCodes(fields.size());
  }
  return MakeType(id, [&](DataType& type) {
    type.children = std::move(fields);
    type.type_codes = std::move(type_codes);
  });
}

bool MetadataEquals(const Metadata& left, const Metadata& right) { return left == right; }

bool FieldListEquals(const std::vector<Field>& left, const std::vector<Field>& right,
                     bool check_metadata) {
  if (left.size() != right.size()) {
    return false;
  }
  for (size_t field_index = 0; field_index < left.size(); ++field_index) {
    if (!left[field_index].Equals(right[field_index], check_metadata)) {
      return false;
    }
  }
  return true;
}

bool TypePtrEquals(const TypePtr& left, const TypePtr& right, bool check_metadata) {
  if (left == right) {
    return true;
  }
  if (left == nullptr || right == nullptr) {
    return false;
  }
  return left->Equals(*right, check_metadata);
}

// Like Field::Equals but blind to the field name.
bool FieldEqualsIgnoringName(const Field& left, const Field& right, bool check_metadata) {
  if (left.nullable != right.nullable) {
    return false;
  }
  if (check_metadata && !MetadataEquals(left.metadata, right.metadata)) {
    return false;
  }
  return TypePtrEquals(left.type, right.type, check_metadata);
}

// Producers name the map's entries, key and value fields differently ("entries"/"key_value",
// "key"/"keys", ...) for the same logical type, so map equality ignores those three names.
bool MapChildrenEqual(const std::vector<Field>& left, const std::vector<Field>& right,
                      bool check_metadata) {
  const auto is_regular_map = [](const std::vector<Field>& children) {
    return children.size() == 1 && children[0].type != nullptr &&
           children[0].type->id == TypeId::kStruct && children[0].type->children.size() == 2;
  };
  if (!is_regular_map(left) || !is_regular_map(right)) {
    return FieldListEquals(left, right, check_metadata);
  }
  const Field& left_entries = left[0];
  const Field& right_entries = right[0];
  if (left_entries.nullable != right_entries.nullable) {
    return false;
  }
  if (check_metadata && !MetadataEquals(left_entries.metadata, right_entries.metadata)) {
    return false;
  }
  for (size_t child_index = 0; child_index < 2; ++child_index) {
    if (!FieldEqualsIgnoringName(left_entries.type->children[child_index],
                                 right_entries.type->children[child_index], check_metadata)) {
      return false;
    }
  }
  return true;
}

std::string TypePtrToString(const TypePtr& type) {
  return type == nullptr ? std::string("<missing type>") : type->ToString();
}

std::string JoinFields(const std::vector<Field>& fields) {
  std::string joined;
  for (size_t field_index = 0; field_index < fields.size(); ++field_index) {
    if (field_index > 0) {
      joined += ", ";
    }
    joined += fields[field_index].ToString();
  }
  return joined;
}

std::string MetadataToString(const Metadata& metadata) {
  std::string text;
  for (const auto& [key, value] : metadata) {
    if (!text.empty()) {
      text += ", ";
    }
    text.append(key).append("=").append(value);
  }
  return text;
}

// Byte width and largest precision of each decimal type (Arrow columnar
// format); zeros for a type that is not a decimal.
struct DecimalLayout {
  int32_t byte_width = 0;
  int32_t max_precision = 0;
};

DecimalLayout DecimalLayoutOf(TypeId id) {
  switch (id) {
    case TypeId::kDecimal32:
      return {4, 9};
    case TypeId::kDecimal64:
      return {8, 18};
    case TypeId::kDecimal128:
      return {16, 38};
    case TypeId::kDecimal256:
      return {32, 76};
    default:
      return {};
  }
}

Status ValidateTypeAt(const DataType& type, const std::string& path);

Status ValidateChild(const Field& child, const std::string& parent_path) {
  std::string path = parent_path.empty() ? child.name : parent_path + "." + child.name;
  if (child.type == nullptr) {
    return Status::Invalid("field '" + path + "' has no type");
  }
  return ValidateTypeAt(*child.type, path);
}

Status ExpectChildCount(const DataType& type, size_t expected, const std::string& where) {
  if (type.children.size() != expected) {
    return Status::Invalid(where + TypeIdName(type.id) + " must have exactly " +
                           std::to_string(expected) + " child field(s), has " +
                           std::to_string(type.children.size()));
  }
  return Status::OK();
}

Status ValidateTypeAt(const DataType& type, const std::string& path) {
  const std::string where = path.empty() ? std::string() : "field '" + path + "': ";
  switch (type.id) {
    case TypeId::kDecimal32:
    case TypeId::kDecimal64:
    case TypeId::kDecimal128:
    case TypeId::kDecimal256: {
      const DecimalLayout layout = DecimalLayoutOf(type.id);
      const int32_t max_precision = layout.max_precision;
      if (type.precision < 1 || type.precision > max_precision) {
        return Status::Invalid(where + TypeIdName(type.id) + " precision must be in 1.." +
                               std::to_string(max_precision) + ", got " +
                               std::to_string(type.precision));
      }
      // Arrow lets the scale be negative or exceed the precision, but never by more than
      // the width could ever represent.
      if (type.scale < -max_precision || type.scale > max_precision) {
        return Status::Invalid(
            where + TypeIdName(type.id) + " scale must be in -" + std::to_string(max_precision) +
            ".." + std::to_string(max_precision) + ", got " + std::to_string(type.scale));
      }
      if (type.byte_width != layout.byte_width) {
        return Status::Invalid(where + "decimal bit width must be 32, 64, 128 or 256; " +
                               TypeIdName(type.id) + " needs byte width " +
                               std::to_string(layout.byte_width) + ", got " +
                               std::to_string(type.byte_width));
      }
      return Status::OK();
    }
    case TypeId::kFixedSizeBinary:
      if (type.byte_width < 0) {
        return Status::Invalid(where + "fixed_size_binary byte width must not be negative, got " +
                               std::to_string(type.byte_width));
      }
      return Status::OK();
    case TypeId::kTime32:
      if (type.unit != TimeUnit::kSecond && type.unit != TimeUnit::kMilli) {
        return Status::Invalid(where + "time32 unit must be seconds or milliseconds, got " +
                               TimeUnitName(type.unit));
      }
      return Status::OK();
    case TypeId::kTime64:
      if (type.unit != TimeUnit::kMicro && type.unit != TimeUnit::kNano) {
        return Status::Invalid(where + "time64 unit must be microseconds or nanoseconds, got " +
                               TimeUnitName(type.unit));
      }
      return Status::OK();
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kListView:
    case TypeId::kLargeListView:
    case TypeId::kFixedSizeList:
      FERRY_RETURN_NOT_OK(ExpectChildCount(type, 1, where));
      if (type.id == TypeId::kFixedSizeList && type.list_size < 0) {
        return Status::Invalid(where + "fixed_size_list size must not be negative, got " +
                               std::to_string(type.list_size));
      }
      return ValidateChild(type.children[0], path);
    case TypeId::kStruct:
      for (const Field& child : type.children) {
        FERRY_RETURN_NOT_OK(ValidateChild(child, path));
      }
      return Status::OK();
    case TypeId::kMap: {
      FERRY_RETURN_NOT_OK(ExpectChildCount(type, 1, where));
      const Field& entries = type.children[0];
      if (entries.type == nullptr || entries.type->id != TypeId::kStruct ||
          entries.type->children.size() != 2) {
        return Status::Invalid(where +
                               "map entries must be a struct of exactly two fields (key, value)");
      }
      if (entries.nullable) {
        return Status::Invalid(where + "map entries field must not be nullable");
      }
      if (entries.type->children[0].nullable) {
        return Status::Invalid(where + "map key field must not be nullable");
      }
      return ValidateChild(entries, path);
    }
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion: {
      if (type.type_codes.size() != type.children.size()) {
        return Status::Invalid(where + TypeIdName(type.id) + " needs one type code per child: " +
                               std::to_string(type.type_codes.size()) + " codes for " +
                               std::to_string(type.children.size()) + " children");
      }
      std::array<bool, 128> seen{};
      for (int8_t code : type.type_codes) {
        if (code < 0) {
          return Status::Invalid(where + TypeIdName(type.id) + " type code " +
                                 std::to_string(code) + " is outside 0..127");
        }
        if (seen[static_cast<uint8_t>(code)]) {
          return Status::Invalid(where + TypeIdName(type.id) + " type code " +
                                 std::to_string(code) + " appears more than once");
        }
        seen[static_cast<uint8_t>(code)] = true;
      }
      for (const Field& child : type.children) {
        FERRY_RETURN_NOT_OK(ValidateChild(child, path));
      }
      return Status::OK();
    }
    case TypeId::kRunEndEncoded: {
      FERRY_RETURN_NOT_OK(ExpectChildCount(type, 2, where));
      const TypePtr& run_end_type = type.children[0].type;
      if (run_end_type == nullptr ||
          (run_end_type->id != TypeId::kInt16 && run_end_type->id != TypeId::kInt32 &&
           run_end_type->id != TypeId::kInt64)) {
        return Status::Invalid(where +
                               "run_end_encoded run ends must be int16, int32 or int64, got " +
                               TypePtrToString(run_end_type));
      }
      return ValidateChild(type.children[1], path);
    }
    case TypeId::kDictionary:
      if (type.index_type == nullptr || !IsIntegerType(type.index_type->id)) {
        return Status::Invalid(where + "dictionary index type must be an integer, got " +
                               TypePtrToString(type.index_type));
      }
      if (type.value_type == nullptr) {
        return Status::Invalid(where + "dictionary has no value type");
      }
      return ValidateTypeAt(*type.value_type, path);
    default:
      return Status::OK();
  }
}

}  // namespace

// ---- Layout classification ---------------------------------------------------

bool IsIntegerType(TypeId id) {
  switch (id) {
    case TypeId::kInt8:
    case TypeId::kUInt8:
    case TypeId::kInt16:
    case TypeId::kUInt16:
    case TypeId::kInt32:
    case TypeId::kUInt32:
    case TypeId::kInt64:
    case TypeId::kUInt64:
      return true;
    default:
      return false;
  }
}

bool IsViewType(TypeId id) { return id == TypeId::kBinaryView || id == TypeId::kUtf8View; }

bool HasValidityBitmap(TypeId id) {
  return id != TypeId::kNull && id != TypeId::kSparseUnion && id != TypeId::kDenseUnion &&
         id != TypeId::kRunEndEncoded;
}

int OffsetWidthOfVariableLength(TypeId id) {
  switch (id) {
    case TypeId::kBinary:
    case TypeId::kUtf8:
    case TypeId::kList:
    case TypeId::kMap:
      return 4;
    case TypeId::kLargeBinary:
    case TypeId::kLargeUtf8:
    case TypeId::kLargeList:
      return 8;
    default:
      return 0;
  }
}

const DataType& StorageType(const DataType& type) {
  return type.id == TypeId::kDictionary && type.index_type ? *type.index_type : type;
}

int32_t LayoutBufferCount(TypeId id) {
  switch (id) {
    case TypeId::kNull:
    case TypeId::kRunEndEncoded:
      return 0;
    case TypeId::kFixedSizeList:
    case TypeId::kStruct:
    case TypeId::kSparseUnion:
      return 1;
    case TypeId::kBinary:
    case TypeId::kLargeBinary:
    case TypeId::kUtf8:
    case TypeId::kLargeUtf8:
    case TypeId::kListView:
    case TypeId::kLargeListView:
      return 3;
    default:
      // Validity plus one data buffer: fixed-width values, views, list offsets, union offsets.
      return 2;
  }
}

int64_t RequiredChildCount(const DataType& type) {
  switch (type.id) {
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kListView:
    case TypeId::kLargeListView:
    case TypeId::kFixedSizeList:
    case TypeId::kMap:
      return 1;
    case TypeId::kRunEndEncoded:
      return 2;
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion:
      return static_cast<int64_t>(type.type_codes.size());
    case TypeId::kStruct:
      return -1;
    default:
      return 0;
  }
}

// ---- Field -----------------------------------------------------------------

namespace {
std::optional<std::string> FindMetadataValue(const Metadata& metadata, std::string_view key) {
  for (const auto& [entry_key, entry_value] : metadata) {
    if (entry_key == key) {
      return entry_value;
    }
  }
  return std::nullopt;
}
}  // namespace

std::optional<std::string> Field::extension_name() const {
  return FindMetadataValue(metadata, kExtensionNameKey);
}

std::optional<std::string> Field::extension_metadata() const {
  return FindMetadataValue(metadata, kExtensionMetadataKey);
}

bool Field::Equals(const Field& other, bool check_metadata) const {
  if (name != other.name || nullable != other.nullable) {
    return false;
  }
  if (check_metadata && !MetadataEquals(metadata, other.metadata)) {
    return false;
  }
  return TypePtrEquals(type, other.type, check_metadata);
}

std::string Field::ToString() const {
  std::string text = name + ": " + TypePtrToString(type);
  if (!nullable) {
    text += " not null";
  }
  return text;
}

// ---- DataType --------------------------------------------------------------

bool DataType::Equals(const DataType& other, bool check_metadata) const {
  if (this == &other) {
    return true;
  }
  if (id != other.id) {
    return false;
  }
  switch (id) {
    case TypeId::kDecimal32:
    case TypeId::kDecimal64:
    case TypeId::kDecimal128:
    case TypeId::kDecimal256:
      return precision == other.precision && scale == other.scale;
    case TypeId::kFixedSizeBinary:
      return byte_width == other.byte_width;
    case TypeId::kTime32:
    case TypeId::kTime64:
    case TypeId::kDuration:
      return unit == other.unit;
    case TypeId::kTimestamp:
      return unit == other.unit && timezone == other.timezone;
    case TypeId::kFixedSizeList:
      return list_size == other.list_size &&
             FieldListEquals(children, other.children, check_metadata);
    case TypeId::kMap:
      return keys_sorted == other.keys_sorted &&
             MapChildrenEqual(children, other.children, check_metadata);
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion:
      return type_codes == other.type_codes &&
             FieldListEquals(children, other.children, check_metadata);
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kListView:
    case TypeId::kLargeListView:
    case TypeId::kStruct:
    case TypeId::kRunEndEncoded:
      return FieldListEquals(children, other.children, check_metadata);
    case TypeId::kDictionary:
      return ordered == other.ordered &&
             TypePtrEquals(index_type, other.index_type, check_metadata) &&
             TypePtrEquals(value_type, other.value_type, check_metadata);
    default:
      return true;
  }
}

std::string DataType::ToString() const {
  switch (id) {
    case TypeId::kDecimal32:
    case TypeId::kDecimal64:
    case TypeId::kDecimal128:
    case TypeId::kDecimal256:
      return std::string(TypeIdName(id)) + "(" + std::to_string(precision) + ", " +
             std::to_string(scale) + ")";
    case TypeId::kFixedSizeBinary:
      return "fixed_size_binary[" + std::to_string(byte_width) + "]";
    case TypeId::kDate32:
      return "date32[day]";
    case TypeId::kDate64:
      return "date64[ms]";
    case TypeId::kTime32:
    case TypeId::kTime64:
    case TypeId::kDuration:
      return std::string(TypeIdName(id)) + "[" + TimeUnitName(unit) + "]";
    case TypeId::kTimestamp: {
      std::string text = std::string("timestamp[") + TimeUnitName(unit);
      if (!timezone.empty()) {
        text += ", tz=" + timezone;
      }
      return text + "]";
    }
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kListView:
    case TypeId::kLargeListView:
    case TypeId::kStruct:
    case TypeId::kRunEndEncoded:
      return std::string(TypeIdName(id)) + "<" + JoinFields(children) + ">";
    case TypeId::kFixedSizeList:
      return "fixed_size_list<" + JoinFields(children) + ">[" + std::to_string(list_size) + "]";
    case TypeId::kMap: {
      std::string text = "map<" + JoinFields(children);
      if (keys_sorted) {
        text += ", keys_sorted";
      }
      return text + ">";
    }
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion: {
      std::string text = std::string(TypeIdName(id)) + "<";
      for (size_t child_index = 0; child_index < children.size(); ++child_index) {
        if (child_index > 0) {
          text += ", ";
        }
        text += children[child_index].ToString();
        if (child_index < type_codes.size()) {
          text += "=" + std::to_string(type_codes[child_index]);
        }
      }
      return text + ">";
    }
    case TypeId::kDictionary:
      return "dictionary<values=" + TypePtrToString(value_type) +
             ", indices=" + TypePtrToString(index_type) + (ordered ? ", ordered" : "") + ">";
    default:
      return TypeIdName(id);
  }
}

int32_t DataType::fixed_width() const {
  switch (id) {
    case TypeId::kNull:
    case TypeId::kBool:
      return 0;
    case TypeId::kInt8:
    case TypeId::kUInt8:
      return 1;
    case TypeId::kInt16:
    case TypeId::kUInt16:
    case TypeId::kHalfFloat:
      return 2;
    case TypeId::kInt32:
    case TypeId::kUInt32:
    case TypeId::kFloat:
    case TypeId::kDate32:
    case TypeId::kTime32:
    case TypeId::kIntervalMonths:
      return 4;
    case TypeId::kInt64:
    case TypeId::kUInt64:
    case TypeId::kDouble:
    case TypeId::kDate64:
    case TypeId::kTime64:
    case TypeId::kTimestamp:
    case TypeId::kDuration:
    case TypeId::kIntervalDayTime:
      return 8;
    case TypeId::kIntervalMonthDayNano:
      return 16;
    case TypeId::kDecimal32:
    case TypeId::kDecimal64:
    case TypeId::kDecimal128:
    case TypeId::kDecimal256:
      return DecimalLayoutOf(id).byte_width;
    case TypeId::kFixedSizeBinary:
      return byte_width;
    default:
      return -1;
  }
}

int32_t DataType::num_buffers() const {
  if (id == TypeId::kDictionary && index_type != nullptr) return index_type->num_buffers();
  return LayoutBufferCount(id);
}

bool DataType::is_nested() const {
  switch (id) {
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kListView:
    case TypeId::kLargeListView:
    case TypeId::kFixedSizeList:
    case TypeId::kStruct:
    case TypeId::kMap:
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion:
    case TypeId::kRunEndEncoded:
      return true;
    default:
      return false;
  }
}

const char* TypeIdName(TypeId id) {
  switch (id) {
    case TypeId::kNull:
      return "null";
    case TypeId::kBool:
      return "bool";
    case TypeId::kInt8:
      return "int8";
    case TypeId::kUInt8:
      return "uint8";
    case TypeId::kInt16:
      return "int16";
    case TypeId::kUInt16:
      return "uint16";
    case TypeId::kInt32:
      return "int32";
    case TypeId::kUInt32:
      return "uint32";
    case TypeId::kInt64:
      return "int64";
    case TypeId::kUInt64:
      return "uint64";
    case TypeId::kHalfFloat:
      return "halffloat";
    case TypeId::kFloat:
      return "float";
    case TypeId::kDouble:
      return "double";
    case TypeId::kDecimal32:
      return "decimal32";
    case TypeId::kDecimal64:
      return "decimal64";
    case TypeId::kDecimal128:
      return "decimal128";
    case TypeId::kDecimal256:
      return "decimal256";
    case TypeId::kBinary:
      return "binary";
    case TypeId::kLargeBinary:
      return "large_binary";
    case TypeId::kBinaryView:
      return "binary_view";
    case TypeId::kUtf8:
      return "string";
    case TypeId::kLargeUtf8:
      return "large_string";
    case TypeId::kUtf8View:
      return "string_view";
    case TypeId::kFixedSizeBinary:
      return "fixed_size_binary";
    case TypeId::kDate32:
      return "date32";
    case TypeId::kDate64:
      return "date64";
    case TypeId::kTime32:
      return "time32";
    case TypeId::kTime64:
      return "time64";
    case TypeId::kTimestamp:
      return "timestamp";
    case TypeId::kDuration:
      return "duration";
    case TypeId::kIntervalMonths:
      return "month_interval";
    case TypeId::kIntervalDayTime:
      return "day_time_interval";
    case TypeId::kIntervalMonthDayNano:
      return "month_day_nano_interval";
    case TypeId::kList:
      return "list";
    case TypeId::kLargeList:
      return "large_list";
    case TypeId::kListView:
      return "list_view";
    case TypeId::kLargeListView:
      return "large_list_view";
    case TypeId::kFixedSizeList:
      return "fixed_size_list";
    case TypeId::kStruct:
      return "struct";
    case TypeId::kMap:
      return "map";
    case TypeId::kDenseUnion:
      return "dense_union";
    case TypeId::kSparseUnion:
      return "sparse_union";
    case TypeId::kRunEndEncoded:
      return "run_end_encoded";
    case TypeId::kDictionary:
      return "dictionary";
  }
  return "unknown";
}

const char* TimeUnitName(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kSecond:
      return "s";
    case TimeUnit::kMilli:
      return "ms";
    case TimeUnit::kMicro:
      return "us";
    case TimeUnit::kNano:
      return "ns";
  }
  return "unknown";
}

// ---- Factories -------------------------------------------------------------

TypePtr null() { return null_instance(); }
TypePtr boolean() { return boolean_instance(); }
TypePtr int8() { return int8_instance(); }
TypePtr uint8() { return uint8_instance(); }
TypePtr int16() { return int16_instance(); }
TypePtr uint16() { return uint16_instance(); }
TypePtr int32() { return int32_instance(); }
TypePtr uint32() { return uint32_instance(); }
TypePtr int64() { return int64_instance(); }
TypePtr uint64() { return uint64_instance(); }
TypePtr float16() { return float16_instance(); }
TypePtr float32() { return float32_instance(); }
TypePtr float64() { return float64_instance(); }

TypePtr decimal(int32_t bit_width, int32_t precision, int32_t scale) {
  TypeId id = TypeId::kDecimal128;
  switch (bit_width) {
    case 32:
      id = TypeId::kDecimal32;
      break;
    case 64:
      id = TypeId::kDecimal64;
      break;
    case 256:
      id = TypeId::kDecimal256;
      break;
    default:
      id = TypeId::kDecimal128;
      break;
  }
  return MakeType(id, [&](DataType& type) {
    type.precision = precision;
    type.scale = scale;
    // An unsupported width keeps a mismatching byte width so that ValidateType reports it.
    type.byte_width = bit_width % 8 == 0 ? bit_width / 8 : -1;
  });
}

TypePtr binary() { return binary_instance(); }
TypePtr large_binary() { return large_binary_instance(); }
TypePtr binary_view() { return binary_view_instance(); }
TypePtr utf8() { return utf8_instance(); }
TypePtr large_utf8() { return large_utf8_instance(); }
TypePtr utf8_view() { return utf8_view_instance(); }

TypePtr fixed_size_binary(int32_t byte_width) {
  return MakeType(TypeId::kFixedSizeBinary, [&](DataType& type) { type.byte_width = byte_width; });
}

TypePtr date32() { return date32_instance(); }
TypePtr date64() { return date64_instance(); }

TypePtr time32(TimeUnit unit) {
  return MakeType(TypeId::kTime32, [&](DataType& type) { type.unit = unit; });
}

TypePtr time64(TimeUnit unit) {
  return MakeType(TypeId::kTime64, [&](DataType& type) { type.unit = unit; });
}

TypePtr timestamp(TimeUnit unit, std::string timezone) {
  return MakeType(TypeId::kTimestamp, [&](DataType& type) {
    type.unit = unit;
    type.timezone = std::move(timezone);
  });
}

TypePtr duration(TimeUnit unit) {
  return MakeType(TypeId::kDuration, [&](DataType& type) { type.unit = unit; });
}

TypePtr interval_months() { return interval_months_instance(); }
TypePtr interval_day_time() { return interval_day_time_instance(); }
TypePtr interval_month_day_nano() { return interval_month_day_nano_instance(); }

TypePtr list(Field item) { return ListLike(TypeId::kList, std::move(item)); }
TypePtr large_list(Field item) { return ListLike(TypeId::kLargeList, std::move(item)); }
TypePtr list_view(Field item) { return ListLike(TypeId::kListView, std::move(item)); }
TypePtr large_list_view(Field item) { return ListLike(TypeId::kLargeListView, std::move(item)); }

TypePtr fixed_size_list(Field item, int32_t list_size) {
  return MakeType(TypeId::kFixedSizeList, [&](DataType& type) {
    type.children.push_back(std::move(item));
    type.list_size = list_size;
  });
}

TypePtr struct_(std::vector<Field> fields) {
  return MakeType(TypeId::kStruct, [&](DataType& type) { type.children = std::move(fields); });
}

TypePtr map(TypePtr key_type, TypePtr item_type, bool keys_sorted) {
  std::vector<Field> entry_fields;
  entry_fields.push_back(field("key", std::move(key_type), /*nullable=*/false));
  entry_fields.push_back(field("value", std::move(item_type)));
  return map(field("entries", struct_(std::move(entry_fields)), /*nullable=*/false), keys_sorted);
}

TypePtr map(Field entries, bool keys_sorted) {
  return MakeType(TypeId::kMap, [&](DataType& type) {
    type.children.push_back(std::move(entries));
    type.keys_sorted = keys_sorted;
  });
}

TypePtr dense_union(std::vector<Field> fields, std::vector<int8_t> type_codes) {
  return Union(TypeId::kDenseUnion, std::move(fields), std::move(type_codes));
}

TypePtr sparse_union(std::vector<Field> fields, std::vector<int8_t> type_codes) {
  return Union(TypeId::kSparseUnion, std::move(fields), std::move(type_codes));
}

TypePtr run_end_encoded(TypePtr run_end_type, TypePtr value_type) {
  return MakeType(TypeId::kRunEndEncoded, [&](DataType& type) {
    // The spec requires the run ends child to be non-nullable.
    type.children.push_back(field("run_ends", std::move(run_end_type), /*nullable=*/false));
    type.children.push_back(field("values", std::move(value_type)));
  });
}

TypePtr dictionary(TypePtr index_type, TypePtr value_type, bool ordered) {
  return MakeType(TypeId::kDictionary, [&](DataType& type) {
    type.index_type = std::move(index_type);
    type.value_type = std::move(value_type);
    type.ordered = ordered;
  });
}

Field field(std::string name, TypePtr type, bool nullable, Metadata metadata) {
  Field result;
  result.name = std::move(name);
  result.type = std::move(type);
  result.nullable = nullable;
  result.metadata = std::move(metadata);
  return result;
}

Status ValidateType(const DataType& type) { return ValidateTypeAt(type, ""); }

// ---- Schema ----------------------------------------------------------------

int Schema::GetFieldIndex(std::string_view name) const {
  for (size_t field_index = 0; field_index < fields.size(); ++field_index) {
    if (fields[field_index].name == name) {
      return static_cast<int>(field_index);
    }
  }
  return -1;
}

bool Schema::Equals(const Schema& other, bool check_metadata) const {
  if (check_metadata && !MetadataEquals(metadata, other.metadata)) {
    return false;
  }
  return FieldListEquals(fields, other.fields, check_metadata);
}

std::string Schema::ToString() const {
  std::string text;
  for (size_t field_index = 0; field_index < fields.size(); ++field_index) {
    if (field_index > 0) {
      text += "\n";
    }
    text += fields[field_index].ToString();
  }
  if (!metadata.empty()) {
    if (!text.empty()) {
      text += "\n";
    }
    text += "-- metadata: " + MetadataToString(metadata);
  }
  return text;
}

}  // namespace ferry
