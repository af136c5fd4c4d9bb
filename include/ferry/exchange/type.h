// Arrow logical types, fields and schemas, and the C Data Interface format
// strings that describe them. Types are immutable and shared through
// std::shared_ptr<const DataType>; every function here is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/base/status.h"

namespace ferry {

enum class TypeId : uint8_t {
  kNull,
  kBool,
  kInt8,
  kUInt8,
  kInt16,
  kUInt16,
  kInt32,
  kUInt32,
  kInt64,
  kUInt64,
  kHalfFloat,
  kFloat,
  kDouble,
  kDecimal32,
  kDecimal64,
  kDecimal128,
  kDecimal256,
  kBinary,
  kLargeBinary,
  kBinaryView,
  kUtf8,
  kLargeUtf8,
  kUtf8View,
  kFixedSizeBinary,
  kDate32,
  kDate64,
  kTime32,
  kTime64,
  kTimestamp,
  kDuration,
  kIntervalMonths,
  kIntervalDayTime,
  kIntervalMonthDayNano,
  kList,
  kLargeList,
  kListView,
  kLargeListView,
  kFixedSizeList,
  kStruct,
  kMap,
  kDenseUnion,
  kSparseUnion,
  kRunEndEncoded,
  kDictionary,
};

enum class TimeUnit : uint8_t { kSecond, kMilli, kMicro, kNano };

// Key/value metadata in order; keys may repeat (the C Data Interface allows it).
using Metadata = std::vector<std::pair<std::string, std::string>>;

class DataType;
using TypePtr = std::shared_ptr<const DataType>;

// Metadata keys that carry an extension type on a field.
inline constexpr std::string_view kExtensionNameKey = "ARROW:extension:name";
inline constexpr std::string_view kExtensionMetadataKey = "ARROW:extension:metadata";

struct Field {
  std::string name;
  TypePtr type;
  bool nullable = true;
  Metadata metadata;

  // The value of ARROW:extension:name in the metadata, if any.
  std::optional<std::string> extension_name() const;
  std::optional<std::string> extension_metadata() const;
  bool Equals(const Field& other, bool check_metadata = true) const;
  std::string ToString() const;
};

// One Arrow type node. Only the parameters relevant to `id` are meaningful;
// the factories below set them and leave the rest at their defaults.
class DataType {
 public:
  TypeId id = TypeId::kNull;
  int32_t byte_width = 0;             // kFixedSizeBinary; decimals: 4, 8, 16, 32
  int32_t precision = 0;              // decimals
  int32_t scale = 0;                  // decimals
  TimeUnit unit = TimeUnit::kSecond;  // kTime32, kTime64, kTimestamp, kDuration
  std::string timezone;               // kTimestamp; empty = naive
  int32_t list_size = 0;              // kFixedSizeList
  bool keys_sorted = false;           // kMap
  std::vector<int8_t> type_codes;     // unions: one per child
  // Children: list-likes 1 (the item field), struct N, map 1 (a non-nullable
  // struct "entries" of key and value), unions N, run-end encoded 2
  // (run_ends, values).
  std::vector<Field> children;
  // kDictionary: the index type (a signed or unsigned integer) and value type.
  TypePtr index_type;
  TypePtr value_type;
  bool ordered = false;

  bool Equals(const DataType& other, bool check_metadata = true) const;
  // Readable form, e.g. "list<item: int32>" or "timestamp[us, tz=UTC]".
  std::string ToString() const;
  // Fixed byte width of one value for fixed-width types (bool: 0, as it is
  // bit-packed); -1 for variable-width and nested types.
  int32_t fixed_width() const;
  // Number of buffers of this type in the C Data Interface layout, not
  // counting the variadic buffers of view types (which have at least 2 + 1).
  int32_t num_buffers() const;
  bool is_nested() const;
};

const char* TypeIdName(TypeId id);
const char* TimeUnitName(TimeUnit unit);  // "s", "ms", "us", "ns"

// Layout classification, shared by the bridge, validation, builders and the wire format.

// True for the eight integer types, signed and unsigned, 8 to 64 bits.
bool IsIntegerType(TypeId id);
// True for binary_view and utf8_view, whose arrays carry variadic data buffers.
bool IsViewType(TypeId id);
// False for null, union and run-end encoded types: their buffer 0, if any, is no validity bitmap.
bool HasValidityBitmap(TypeId id);
// Offset width in bytes of binary, utf8, list and map (4) and their large
// variants (8); 0 for types without a "length + 1" offsets buffer at index 1.
int OffsetWidthOfVariableLength(TypeId id);
// The type whose buffers an array of `type` has: a dictionary's index type
// (when set), otherwise `type` itself.
const DataType& StorageType(const DataType& type);
// Buffers in the C layout of a type with this id, as DataType::num_buffers()
// counts them; a dictionary counts as its usual integer indices (2).
int32_t LayoutBufferCount(TypeId id);
// Children a node of `type` parsed from a format string must declare: 1 for
// list-likes and maps, 2 for run-end encoded, one per type code for unions,
// -1 (any number) for struct, 0 otherwise.
int64_t RequiredChildCount(const DataType& type);

// Factories. Each returns a shared, immutable type node.
TypePtr null();
TypePtr boolean();
TypePtr int8();
TypePtr uint8();
TypePtr int16();
TypePtr uint16();
TypePtr int32();
TypePtr uint32();
TypePtr int64();
TypePtr uint64();
TypePtr float16();
TypePtr float32();
TypePtr float64();
// bit_width is 32, 64, 128 or 256; precision/scale are not range-checked here
// (ValidateType does that).
TypePtr decimal(int32_t bit_width, int32_t precision, int32_t scale);
TypePtr binary();
TypePtr large_binary();
TypePtr binary_view();
TypePtr utf8();
TypePtr large_utf8();
TypePtr utf8_view();
TypePtr fixed_size_binary(int32_t byte_width);
TypePtr date32();
TypePtr date64();
TypePtr time32(TimeUnit unit);  // seconds or milliseconds
TypePtr time64(TimeUnit unit);  // microseconds or nanoseconds
TypePtr timestamp(TimeUnit unit, std::string timezone = "");
TypePtr duration(TimeUnit unit);
TypePtr interval_months();
TypePtr interval_day_time();
TypePtr interval_month_day_nano();
TypePtr list(Field item);
TypePtr large_list(Field item);
TypePtr list_view(Field item);
TypePtr large_list_view(Field item);
TypePtr fixed_size_list(Field item, int32_t list_size);
TypePtr struct_(std::vector<Field> fields);
// key_type/item_type become the "entries" struct of fields "key" (non-nullable) and "value".
TypePtr map(TypePtr key_type, TypePtr item_type, bool keys_sorted = false);
TypePtr map(Field entries, bool keys_sorted = false);
// type_codes defaults to 0..n-1.
TypePtr dense_union(std::vector<Field> fields, std::vector<int8_t> type_codes = {});
TypePtr sparse_union(std::vector<Field> fields, std::vector<int8_t> type_codes = {});
TypePtr run_end_encoded(TypePtr run_end_type, TypePtr value_type);
TypePtr dictionary(TypePtr index_type, TypePtr value_type, bool ordered = false);

Field field(std::string name, TypePtr type, bool nullable = true, Metadata metadata = {});

// Checks parameters a format string cannot rule out: decimal precision and
// scale ranges, union type codes (distinct, 0..127, one per child), run-end
// type int16/32/64, dictionary index an integer, map entries shape, time
// units matching time32/time64, list child counts. The message names the rule.
Status ValidateType(const DataType& type);

struct Schema {
  std::vector<Field> fields;
  Metadata metadata;

  int num_fields() const { return static_cast<int>(fields.size()); }
  // -1 if absent; the first match if the name repeats.
  int GetFieldIndex(std::string_view name) const;
  bool Equals(const Schema& other, bool check_metadata = true) const;
  std::string ToString() const;
};
using SchemaPtr = std::shared_ptr<const Schema>;

// ---- C Data Interface format strings -------------------------------------

// Parses one format string (this node only: the children of nested types
// come from the ArrowSchema children and are left empty here; for a
// dictionary-encoded field the format is the index type). Errors quote the
// format string, e.g. `Invalid: unknown format string 'Q'`.
Result<DataType> ParseFormat(std::string_view format);
// The format string of this node alone ("+l", "tsu:UTC", "d:10,2,128", ...).
// For a dictionary type this is the index type's format.
std::string FormatString(const DataType& type);

// ---- Metadata in the C Data Interface binary encoding ---------------------

// int32 count, then per pair int32 key length, key bytes, int32 value length,
// value bytes; native endianness. An empty Metadata encodes as "" and the
// caller passes NULL to the C structure.
std::string EncodeMetadata(const Metadata& metadata);
// Decodes metadata; nullptr gives an empty Metadata. Negative counts or
// lengths and sizes beyond `max_bytes` are errors, never a crash.
Result<Metadata> DecodeMetadata(const char* encoded, int64_t max_bytes = int64_t{1} << 30);

}  // namespace ferry
