// Builders: the way Ferry writes Arrow arrays. Every builder allocates through
// a MemoryPool (default_memory_pool() unless told otherwise), so the same code
// can build straight into loaned shared memory or any other pool. Buffers are
// 64-byte aligned, grow geometrically, and have their padding zeroed.
//
// Common contract of every ArrayBuilder:
//  - Append* adds values, AppendNull(s) adds nulls. When a call fails
//    (allocation, overflow, bad argument) a leaf builder is left as it was
//    before the call; a nested builder may have appended to some children
//    already, so discard it with Reset() unless the failure was a checked
//    argument (e.g. an undeclared union type code), which changes nothing.
//  - Finish() returns the array built so far and resets the builder (children
//    included), so it can be reused. It also resets it when it fails.
//  - The validity buffer is omitted (nullptr) when there are no nulls.
//  - A builder given a type it cannot build reports a TypeError from Finish()
//    and from status(); MakeBuilder() reports it at once.
// Builders are not thread-safe: one thread builds, then shares the result.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/buffer.h"
#include "ferry/exchange/type.h"

namespace ferry {

// ---- Raw buffers -----------------------------------------------------------

// A growable byte buffer in pool memory. Move-only; frees its memory unless
// Finish() handed it over to a Buffer.
class BufferBuilder {
 public:
  explicit BufferBuilder(MemoryPool* pool = default_memory_pool()) : pool_(pool) {}
  ~BufferBuilder() { Reset(); }
  BufferBuilder(BufferBuilder&& other) noexcept;
  BufferBuilder& operator=(BufferBuilder&& other) noexcept;
  BufferBuilder(const BufferBuilder&) = delete;
  BufferBuilder& operator=(const BufferBuilder&) = delete;

  // Makes room for `additional_bytes` more bytes without reallocating.
  Status Reserve(int64_t additional_bytes);
  // Sets the length; bytes gained are zeroed.
  Status Resize(int64_t new_length);
  Status Append(const void* data, int64_t size);
  Status AppendZeros(int64_t size);
  template <typename T>
  Status AppendValue(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    return Append(&value, sizeof(T));
  }
  // Precondition: Reserve made room.
  void UnsafeAppend(const void* data, int64_t size) {
    std::memcpy(data_ + length_, data, static_cast<size_t>(size));
    length_ += size;
  }

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  const uint8_t* data() const { return data_; }
  uint8_t* mutable_data() { return data_; }
  MemoryPool* pool() const { return pool_; }

  // Hands the bytes over as an immutable Buffer of size length() (padding
  // zeroed) and leaves this builder empty. With `shrink_to_fit` the memory is
  // first reallocated to the padded length (a copy in most pools).
  Result<BufferPtr> Finish(bool shrink_to_fit = false);
  // Frees the memory and empties the builder.
  void Reset();

 private:
  Status GrowTo(int64_t min_capacity);

  MemoryPool* pool_;
  uint8_t* data_ = nullptr;
  int64_t length_ = 0;
  int64_t capacity_ = 0;
};

// A BufferBuilder counted in elements of trivially copyable T.
template <typename T>
class TypedBufferBuilder {
 public:
  explicit TypedBufferBuilder(MemoryPool* pool = default_memory_pool()) : bytes_(pool) {}

  Status Reserve(int64_t additional) { return bytes_.Reserve(additional * int64_t{sizeof(T)}); }
  Status Append(T value) { return bytes_.AppendValue(value); }
  Status Append(const T* values, int64_t count) {
    return bytes_.Append(values, count * int64_t{sizeof(T)});
  }
  Status AppendCopies(T value, int64_t count) {
    FERRY_RETURN_NOT_OK(Reserve(count));
    for (int64_t i = 0; i < count; ++i) bytes_.UnsafeAppend(&value, sizeof(T));
    return Status::OK();
  }
  void UnsafeAppend(T value) { bytes_.UnsafeAppend(&value, sizeof(T)); }

  int64_t length() const { return bytes_.length() / int64_t{sizeof(T)}; }
  T value(int64_t i) const {
    T result;
    std::memcpy(&result, bytes_.data() + i * int64_t{sizeof(T)}, sizeof(T));
    return result;
  }
  void set_value(int64_t i, T value) {
    std::memcpy(bytes_.mutable_data() + i * int64_t{sizeof(T)}, &value, sizeof(T));
  }
  Result<BufferPtr> Finish() { return bytes_.Finish(); }
  void Reset() { bytes_.Reset(); }

 private:
  BufferBuilder bytes_;
};

// A growable bitmap (LSB bit order), e.g. a validity buffer.
class BitmapBuilder {
 public:
  explicit BitmapBuilder(MemoryPool* pool = default_memory_pool()) : bytes_(pool) {}

  Status Reserve(int64_t additional_bits);
  Status Append(bool value) { return AppendRun(value, 1); }
  Status AppendRun(bool value, int64_t count);
  // Appends `count` bits from `valid_bytes` (one byte per bit, non-zero = set).
  Status AppendBytes(const uint8_t* valid_bytes, int64_t count);

  int64_t length() const { return length_; }
  int64_t false_count() const { return false_count_; }
  bool Get(int64_t i) const { return GetBit(bytes_.data(), i); }
  // A buffer of BytesForBits(length()) bytes; the builder becomes empty.
  Result<BufferPtr> Finish();
  void Reset();

 private:
  BufferBuilder bytes_;
  int64_t length_ = 0;
  int64_t false_count_ = 0;
};

// ---- Half floats -------------------------------------------------------------

// IEEE 754 binary16 conversions (round to nearest even; NaN stays NaN).
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);

// ---- Values of interval types ------------------------------------------------

struct DayTimeInterval {
  int32_t days = 0;
  int32_t milliseconds = 0;
  bool operator==(const DayTimeInterval&) const = default;
};
static_assert(sizeof(DayTimeInterval) == 8);

struct MonthDayNanoInterval {
  int32_t months = 0;
  int32_t days = 0;
  int64_t nanoseconds = 0;
  bool operator==(const MonthDayNanoInterval&) const = default;
};
static_assert(sizeof(MonthDayNanoInterval) == 16);

// ---- The builder base ----------------------------------------------------------

class ArrayBuilder {
 public:
  virtual ~ArrayBuilder() = default;
  ArrayBuilder(const ArrayBuilder&) = delete;
  ArrayBuilder& operator=(const ArrayBuilder&) = delete;

  const TypePtr& type() const { return type_; }
  MemoryPool* pool() const { return pool_; }
  int64_t length() const { return length_; }
  int64_t null_count() const { return null_count_; }
  // TypeError when the builder was constructed for a type it cannot build.
  const Status& status() const { return init_status_; }

  Status AppendNull() { return AppendNulls(1); }
  virtual Status AppendNulls(int64_t count) = 0;
  // A valid "empty" value: zero, false, "", an empty list, a struct of empty
  // fields, ... Nested builders use it to fill slots nobody wrote.
  Status AppendEmptyValue() { return AppendEmptyValues(1); }
  virtual Status AppendEmptyValues(int64_t count) = 0;
  // Makes room for `additional` more elements of this array (not of children).
  virtual Status Reserve(int64_t additional);

  // Returns the array built so far and resets the builder for reuse.
  Result<ArrayDataPtr> Finish();
  // Discards everything appended so far (children included).
  virtual void Reset();

  // Child builders of nested types, in the order of the type's children
  // (map: key then item; run-end encoded: the values only).
  int num_children() const { return static_cast<int>(children_.size()); }
  ArrayBuilder* child(int i) const { return children_[static_cast<size_t>(i)].get(); }

 protected:
  ArrayBuilder(TypePtr type, MemoryPool* pool);

  virtual Result<ArrayDataPtr> FinishInternal() = 0;
  // Records `count` slots that are all valid or all null.
  Status AppendValidity(bool valid, int64_t count = 1);
  // One byte per slot, zero = null.
  Status AppendValidityBytes(const uint8_t* valid_bytes, int64_t count);
  Status ReserveValidity(int64_t additional);
  // nullptr when no null was appended.
  Result<BufferPtr> FinishValidity();
  // Sets init_status_ to a TypeError unless `ok`.
  void RequireType(bool ok, std::string_view expected);
  static Status CheckCount(int64_t count);
  // Builds a child for each field of the type; failures go to init_status_.
  void MakeChildren(const std::vector<Field>& fields);
  // Finishes every child builder.
  Result<std::vector<ArrayDataPtr>> FinishChildren();
  // For list-like builders: requires a type of id `expected` with one child
  // and builds that child (a placeholder when the type is rejected).
  void InitSingleChild(TypeId expected);
  // Appends `count` slots, valid or null, of empty elements whose offsets all
  // are `end`: the offsets of binary, list and map builders. Invalid when
  // `end` overflows OffsetType.
  template <typename OffsetType>
  Status AppendEmptyElements(TypedBufferBuilder<OffsetType>& offsets, int64_t end, bool valid,
                             int64_t count);

  TypePtr type_;
  MemoryPool* pool_;
  int64_t length_ = 0;
  int64_t null_count_ = 0;
  Status init_status_;
  std::vector<std::unique_ptr<ArrayBuilder>> children_;

 private:
  // Materialised only once the first null arrives.
  BitmapBuilder validity_;
};

// Builds any type; children of nested types are created recursively.
// Fails with TypeError for a type no builder supports (e.g. a null type
// pointer, a dictionary of a nested value type).
Result<std::unique_ptr<ArrayBuilder>> MakeBuilder(const TypePtr& type,
                                                  MemoryPool* pool = default_memory_pool());

// ---- Leaf builders ---------------------------------------------------------------

class NullBuilder final : public ArrayBuilder {
 public:
  explicit NullBuilder(MemoryPool* pool = default_memory_pool());
  Status AppendNulls(int64_t count) override;
  // A null array has only nulls, so empty values are nulls too.
  Status AppendEmptyValues(int64_t count) override { return AppendNulls(count); }

 protected:
  Result<ArrayDataPtr> FinishInternal() override;
};

class BooleanBuilder final : public ArrayBuilder {
 public:
  explicit BooleanBuilder(MemoryPool* pool = default_memory_pool());
  Status Append(bool value);
  Status AppendOptional(std::optional<bool> value) { return value ? Append(*value) : AppendNull(); }
  Status AppendValues(const std::vector<bool>& values);
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  Status Reserve(int64_t additional) override;
  void Reset() override;
  bool value(int64_t i) const { return values_.Get(i); }

 protected:
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);

  BitmapBuilder values_;
};

// Values of a fixed number of bytes (the type's fixed_width()). The byte-level
// core of the typed fixed-width, fixed-size binary and decimal builders.
class FixedBytesBuilder : public ArrayBuilder {
 public:
  FixedBytesBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());

  int32_t byte_width() const { return byte_width_; }
  // Appends `count` values stored back to back at `values`; `valid_bytes`
  // (optional, one byte per value, zero = null) marks nulls.
  Status AppendBytes(const uint8_t* values, int64_t count = 1,
                     const uint8_t* valid_bytes = nullptr);
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  Status Reserve(int64_t additional) override;
  void Reset() override;
  // The bytes of value i, valid until the next append.
  const uint8_t* value_bytes(int64_t i) const { return data_.data() + i * byte_width_; }

 protected:
  Result<ArrayDataPtr> FinishInternal() override;
  void set_byte_width(int32_t byte_width) { byte_width_ = byte_width; }

 private:
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);

  int32_t byte_width_ = 0;
  BufferBuilder data_;
};

// Fixed-width values of C type CType: integers, floats, half floats
// (uint16_t bits), dates, times, timestamps, durations, intervals. The type
// decides the logical meaning; its fixed_width() must equal sizeof(CType).
template <typename CType>
class FixedWidthBuilder : public FixedBytesBuilder {
  static_assert(std::is_trivially_copyable_v<CType>);

 public:
  explicit FixedWidthBuilder(TypePtr type, MemoryPool* pool = default_memory_pool())
      : FixedBytesBuilder(std::move(type), pool) {
    if (init_status_.ok()) {
      RequireType(byte_width() == int32_t{sizeof(CType)} && type_->id != TypeId::kFixedSizeBinary,
                  "a fixed-width type of " + std::to_string(sizeof(CType)) + " bytes");
    }
    // Appends stay memory-safe on a rejected type; Finish reports the error.
    if (!init_status_.ok()) set_byte_width(int32_t{sizeof(CType)});
  }

  Status Append(CType value) { return AppendBytes(reinterpret_cast<const uint8_t*>(&value)); }
  Status AppendOptional(std::optional<CType> value) {
    return value ? Append(*value) : AppendNull();
  }
  Status AppendValues(const CType* values, int64_t count, const uint8_t* valid_bytes = nullptr) {
    return AppendBytes(reinterpret_cast<const uint8_t*>(values), count, valid_bytes);
  }
  Status AppendValues(const std::vector<CType>& values) {
    return AppendValues(values.data(), static_cast<int64_t>(values.size()));
  }
  CType value(int64_t i) const {
    CType result;
    std::memcpy(&result, value_bytes(i), sizeof(CType));
    return result;
  }
};

// A FixedWidthBuilder preset to a parameterless type.
template <typename CType, TypePtr (*kMakeType)()>
class PresetFixedWidthBuilder final : public FixedWidthBuilder<CType> {
 public:
  explicit PresetFixedWidthBuilder(MemoryPool* pool = default_memory_pool())
      : FixedWidthBuilder<CType>(kMakeType(), pool) {}
};

using Int8Builder = PresetFixedWidthBuilder<int8_t, &int8>;
using Int16Builder = PresetFixedWidthBuilder<int16_t, &int16>;
using Int32Builder = PresetFixedWidthBuilder<int32_t, &int32>;
using Int64Builder = PresetFixedWidthBuilder<int64_t, &int64>;
using UInt8Builder = PresetFixedWidthBuilder<uint8_t, &uint8>;
using UInt16Builder = PresetFixedWidthBuilder<uint16_t, &uint16>;
using UInt32Builder = PresetFixedWidthBuilder<uint32_t, &uint32>;
using UInt64Builder = PresetFixedWidthBuilder<uint64_t, &uint64>;
// Values are binary16 bit patterns; see FloatToHalf.
using HalfFloatBuilder = PresetFixedWidthBuilder<uint16_t, &float16>;
using FloatBuilder = PresetFixedWidthBuilder<float, &float32>;
using DoubleBuilder = PresetFixedWidthBuilder<double, &float64>;
using Date32Builder = PresetFixedWidthBuilder<int32_t, &date32>;  // days since the epoch
using Date64Builder = PresetFixedWidthBuilder<int64_t, &date64>;  // milliseconds since the epoch
using MonthIntervalBuilder = PresetFixedWidthBuilder<int32_t, &interval_months>;
using DayTimeIntervalBuilder = PresetFixedWidthBuilder<DayTimeInterval, &interval_day_time>;
using MonthDayNanoIntervalBuilder =
    PresetFixedWidthBuilder<MonthDayNanoInterval, &interval_month_day_nano>;
// Parameterised by unit (and time zone): construct with the type, e.g.
// TimestampBuilder(timestamp(TimeUnit::kMicro, "UTC")).
using Time32Builder = FixedWidthBuilder<int32_t>;
using Time64Builder = FixedWidthBuilder<int64_t>;
using TimestampBuilder = FixedWidthBuilder<int64_t>;
using DurationBuilder = FixedWidthBuilder<int64_t>;

class FixedSizeBinaryBuilder final : public FixedBytesBuilder {
 public:
  explicit FixedSizeBinaryBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());
  // Invalid unless value.size() == byte_width().
  Status Append(std::string_view value);
  Status AppendOptional(std::optional<std::string_view> value) {
    return value ? Append(*value) : AppendNull();
  }
  std::string_view value(int64_t i) const {
    return {reinterpret_cast<const char*>(value_bytes(i)), static_cast<size_t>(byte_width())};
  }
};

// Decimal32/64/128/256: values are two's-complement little-endian integers of
// the type's byte width (the unscaled value; the type's scale places the point).
class DecimalBuilder final : public FixedBytesBuilder {
 public:
  explicit DecimalBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());
  // `little_endian` holds byte_width() bytes.
  Status AppendLittleEndian(const uint8_t* little_endian) { return AppendBytes(little_endian); }
  // Sign-extends; Invalid when the value does not fit a decimal32.
  Status Append(int64_t unscaled_value);
  Status AppendOptional(std::optional<int64_t> unscaled_value) {
    return unscaled_value ? Append(*unscaled_value) : AppendNull();
  }
};

// ---- Variable-length binary ------------------------------------------------------

// binary/utf8 (int32 offsets) and large_binary/large_utf8 (int64 offsets).
// UTF-8 is not checked here (ValidateFull does).
template <typename OffsetType>
class BaseBinaryBuilder : public ArrayBuilder {
 public:
  explicit BaseBinaryBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());

  // Invalid when the total data would overflow OffsetType.
  Status Append(std::string_view value);
  Status Append(const uint8_t* value, int64_t size) {
    return Append(
        std::string_view(reinterpret_cast<const char*>(value), static_cast<size_t>(size)));
  }
  Status AppendOptional(std::optional<std::string_view> value) {
    return value ? Append(*value) : AppendNull();
  }
  Status AppendValues(const std::vector<std::string>& values);
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  Status Reserve(int64_t additional) override;
  // Reserves room for `additional_bytes` more bytes of value data.
  Status ReserveData(int64_t additional_bytes) { return data_.Reserve(additional_bytes); }
  void Reset() override;

  int64_t value_data_length() const { return data_.length(); }
  std::string_view value(int64_t i) const;

 protected:
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);

  // Start offset of every appended element; the final offset is added by Finish.
  TypedBufferBuilder<OffsetType> offsets_;
  BufferBuilder data_;
};

class BinaryBuilder : public BaseBinaryBuilder<int32_t> {
 public:
  explicit BinaryBuilder(MemoryPool* pool = default_memory_pool())
      : BinaryBuilder(binary(), pool) {}
  // `type` is binary or utf8.
  explicit BinaryBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());
};
class Utf8Builder final : public BinaryBuilder {
 public:
  explicit Utf8Builder(MemoryPool* pool = default_memory_pool()) : BinaryBuilder(utf8(), pool) {}
};
class LargeBinaryBuilder : public BaseBinaryBuilder<int64_t> {
 public:
  explicit LargeBinaryBuilder(MemoryPool* pool = default_memory_pool())
      : LargeBinaryBuilder(large_binary(), pool) {}
  // `type` is large_binary or large_utf8.
  explicit LargeBinaryBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());
};
class LargeUtf8Builder final : public LargeBinaryBuilder {
 public:
  explicit LargeUtf8Builder(MemoryPool* pool = default_memory_pool())
      : LargeBinaryBuilder(large_utf8(), pool) {}
};

// binary_view / utf8_view. Values of at most 12 bytes live inline in their
// 16-byte view; longer ones go to data buffers of `block_size` bytes (a value
// longer than a block gets a block of its own size) and the view keeps their
// 4-byte prefix, buffer index and offset. Finish gives buffers
// [validity, views, data buffer 0, data buffer 1, ...].
class BinaryViewBuilder : public ArrayBuilder {
 public:
  static constexpr int64_t kDefaultBlockSize = int64_t{32} * 1024;
  static constexpr int64_t kMaxInlineSize = 12;

  explicit BinaryViewBuilder(MemoryPool* pool = default_memory_pool())
      : BinaryViewBuilder(binary_view(), pool) {}
  // `type` is binary_view or utf8_view; block_size is clamped to [1, INT32_MAX].
  explicit BinaryViewBuilder(TypePtr type, MemoryPool* pool = default_memory_pool(),
                             int64_t block_size = kDefaultBlockSize);

  // Invalid for values over INT32_MAX bytes.
  Status Append(std::string_view value);
  Status AppendOptional(std::optional<std::string_view> value) {
    return value ? Append(*value) : AppendNull();
  }
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  Status Reserve(int64_t additional) override;
  void Reset() override;

  int64_t block_size() const { return block_size_; }
  // Number of data buffers finished so far plus the one being filled.
  int64_t num_data_buffers() const;

 protected:
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);

  int64_t block_size_;
  BufferBuilder views_;
  BufferBuilder current_block_;
  std::vector<BufferPtr> finished_blocks_;
};

class Utf8ViewBuilder final : public BinaryViewBuilder {
 public:
  explicit Utf8ViewBuilder(MemoryPool* pool = default_memory_pool(),
                           int64_t block_size = kDefaultBlockSize)
      : BinaryViewBuilder(utf8_view(), pool, block_size) {}
};

// ---- Nested builders -------------------------------------------------------------

// list / large_list (and, with int32 offsets, the core of map). Append()
// opens an element; the values appended to value_builder() until the next
// Append/AppendNull/Finish belong to it.
template <typename OffsetType>
class BaseListBuilder : public ArrayBuilder {
 public:
  explicit BaseListBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());

  Status Append();
  Status Append(bool is_valid) { return is_valid ? Append() : AppendNull(); }
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  Status Reserve(int64_t additional) override;
  void Reset() override;
  ArrayBuilder* value_builder() const { return child(0); }

 protected:
  Result<ArrayDataPtr> FinishInternal() override;
  Result<BufferPtr> FinishOffsets();

 private:
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);
  TypedBufferBuilder<OffsetType> offsets_;
};

using ListBuilder = BaseListBuilder<int32_t>;
using LargeListBuilder = BaseListBuilder<int64_t>;

// list_view / large_list_view. Append() opens an element whose size is the
// number of values appended to value_builder() until the next element opens
// (or Finish). AppendView() states an element's offset and size directly, so
// elements may overlap or come out of order; Finish checks that every view
// lies inside the child.
template <typename OffsetType>
class BaseListViewBuilder : public ArrayBuilder {
 public:
  explicit BaseListViewBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());

  Status Append();
  Status AppendView(int64_t offset, int64_t size);
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  Status Reserve(int64_t additional) override;
  void Reset() override;
  ArrayBuilder* value_builder() const { return child(0); }

 protected:
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  Status CloseOpenElement();
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);

  TypedBufferBuilder<OffsetType> offsets_;
  TypedBufferBuilder<OffsetType> sizes_;
  bool element_open_ = false;
};

using ListViewBuilder = BaseListViewBuilder<int32_t>;
using LargeListViewBuilder = BaseListViewBuilder<int64_t>;

// fixed_size_list: after Append(), append exactly list_size() values to
// value_builder(). AppendNulls fills the child with empty values itself.
class FixedSizeListBuilder final : public ArrayBuilder {
 public:
  explicit FixedSizeListBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());

  Status Append();
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  int32_t list_size() const { return list_size_; }
  ArrayBuilder* value_builder() const { return child(0); }

 protected:
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);

  int32_t list_size_ = 0;
};

// struct: after Append(), append one value to every field_builder(i).
// AppendNulls/AppendEmptyValues fill the fields with empty values themselves.
class StructBuilder final : public ArrayBuilder {
 public:
  explicit StructBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());

  Status Append();
  Status Append(bool is_valid) { return is_valid ? Append() : AppendNull(); }
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  int num_fields() const { return num_children(); }
  ArrayBuilder* field_builder(int i) const { return child(i); }

 protected:
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);
};

// map: Append() opens a map; append its keys to key_builder() and as many
// items to item_builder(). Finish checks that keys and items pair up and
// that no key is null. keys_sorted is recorded, not checked.
class MapBuilder final : public ArrayBuilder {
 public:
  explicit MapBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());

  Status Append();
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  Status Reserve(int64_t additional) override;
  void Reset() override;
  ArrayBuilder* key_builder() const { return child(0); }
  ArrayBuilder* item_builder() const { return child(1); }

 protected:
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);

  TypedBufferBuilder<int32_t> offsets_;
};

// dense_union / sparse_union: Append(type_code) selects a child; then append
// exactly one value to child_for_code(type_code). A dense union records the
// child's offset; a sparse union fills every other child with an empty value.
// A union has no validity bitmap: AppendNull appends a null to the first child.
class UnionBuilder : public ArrayBuilder {
 public:
  // Invalid for a type code the union does not declare.
  Status Append(int8_t type_code);
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  Status Reserve(int64_t additional) override;
  void Reset() override;
  // nullptr for an undeclared code.
  ArrayBuilder* child_for_code(int8_t type_code) const;

 protected:
  UnionBuilder(TypePtr type, MemoryPool* pool, TypeId expected_id);
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);

  bool dense_;
  // Child index per type code, -1 if undeclared.
  int child_index_for_code_[128] = {};
  TypedBufferBuilder<int8_t> type_ids_;
  TypedBufferBuilder<int32_t> offsets_;  // dense only
};

class DenseUnionBuilder final : public UnionBuilder {
 public:
  explicit DenseUnionBuilder(TypePtr type, MemoryPool* pool = default_memory_pool())
      : UnionBuilder(std::move(type), pool, TypeId::kDenseUnion) {}
};
class SparseUnionBuilder final : public UnionBuilder {
 public:
  explicit SparseUnionBuilder(TypePtr type, MemoryPool* pool = default_memory_pool())
      : UnionBuilder(std::move(type), pool, TypeId::kSparseUnion) {}
};

// run_end_encoded. Three ways to add a run:
//  - append one value to value_builder(), then AppendRun(run_length);
//  - AppendValueRun(value, run_length) / AppendStringRun(value, run_length),
//    which merge with the previous run when the values are equal and
//    merge_equal_runs() is on (the default);
//  - AppendNulls(n), which extends a preceding null run when merging.
// Run ends are checked against the run-end type's range.
class RunEndEncodedBuilder final : public ArrayBuilder {
 public:
  explicit RunEndEncodedBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());

  // Invalid unless exactly one value was appended to value_builder() since
  // the previous run, or when run_length < 1.
  Status AppendRun(int64_t run_length);
  // For values built by a FixedWidthBuilder<CType> (TypeError otherwise).
  template <typename CType>
  Status AppendValueRun(CType value, int64_t run_length) {
    auto* values = dynamic_cast<FixedWidthBuilder<CType>*>(value_builder());
    if (values == nullptr) return ValueBuilderMismatch();
    return AppendRunWithKey(std::string(reinterpret_cast<const char*>(&value), sizeof(CType)),
                            run_length, [&] { return values->Append(value); });
  }
  // For binary, utf8 (large or view) values.
  Status AppendStringRun(std::string_view value, int64_t run_length);
  Status AppendNulls(int64_t count) override { return AppendSlots(false, count); }
  Status AppendEmptyValues(int64_t count) override { return AppendSlots(true, count); }
  void Reset() override;

  void set_merge_equal_runs(bool merge) { merge_equal_runs_ = merge; }
  bool merge_equal_runs() const { return merge_equal_runs_; }
  int64_t num_runs() const { return run_ends_.length() / run_end_width_; }
  ArrayBuilder* value_builder() const { return child(0); }

 private:
  template <typename AppendValue>
  Status AppendRunWithKey(std::string key, int64_t run_length, AppendValue&& append_value) {
    FERRY_RETURN_NOT_OK(CheckRunLength(run_length));
    if (merge_equal_runs_ && last_run_key_ && *last_run_key_ == key) {
      return ExtendLastRun(run_length);
    }
    FERRY_RETURN_NOT_OK(CheckValuesInStep());
    FERRY_RETURN_NOT_OK(run_ends_.Reserve(run_end_width_));
    FERRY_RETURN_NOT_OK(append_value());
    PushRunEnd(run_length);
    last_run_null_ = false;
    last_run_key_ = std::move(key);
    return Status::OK();
  }
  // Appends `count` slots, valid (empty values) or null.
  Status AppendSlots(bool valid, int64_t count);
  Status ValueBuilderMismatch() const;
  Status CheckRunLength(int64_t run_length) const;
  Status CheckValuesInStep() const;
  // Precondition: CheckRunLength passed and run_ends_ has room for one more.
  void PushRunEnd(int64_t run_length);
  Status ExtendLastRun(int64_t run_length);

 protected:
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  int32_t run_end_width_ = 8;
  int64_t run_end_max_ = INT64_MAX;
  BufferBuilder run_ends_;
  bool merge_equal_runs_ = true;
  // What the last run may merge with: a null run, or a value known by its
  // bytes (nullopt: a run added through AppendRun, which never merges).
  bool last_run_null_ = false;
  std::optional<std::string> last_run_key_;
};

// dictionary: memoises distinct values and appends their indices. Values may
// be integers (any width) or binary/utf8 (large and view variants too); the
// index type is any integer type. Finish resets the memo too.
class DictionaryBuilder final : public ArrayBuilder {
 public:
  explicit DictionaryBuilder(TypePtr type, MemoryPool* pool = default_memory_pool());

  // For binary-like value types (TypeError otherwise).
  Status Append(std::string_view value);
  // For integer value types (TypeError otherwise; Invalid when out of range).
  Status Append(int64_t value);
  Status AppendNulls(int64_t count) override;
  // Appends the index of the empty value ("" or 0).
  Status AppendEmptyValues(int64_t count) override;
  Status Reserve(int64_t additional) override;
  void Reset() override;
  int64_t dictionary_length() const { return static_cast<int64_t>(memo_values_.size()); }

 protected:
  Result<ArrayDataPtr> FinishInternal() override;

 private:
  Status AppendKey(std::string_view key);
  Status AppendIndex(int64_t index, bool valid, int64_t count);

  bool binary_values_ = false;
  int32_t index_width_ = 4;
  int64_t max_index_ = INT32_MAX;
  BufferBuilder indices_;
  std::unordered_map<std::string, int64_t> memo_;
  std::vector<std::string> memo_values_;  // in index order
};

// ---- Convenience -------------------------------------------------------------------

// Builds an array of `type` from optional values (nullopt = null).
template <typename CType>
Result<ArrayDataPtr> MakeFixedWidthArray(TypePtr type,
                                         const std::vector<std::optional<CType>>& values,
                                         MemoryPool* pool = default_memory_pool()) {
  FixedWidthBuilder<CType> builder(std::move(type), pool);
  FERRY_RETURN_NOT_OK(builder.Reserve(static_cast<int64_t>(values.size())));
  for (const auto& value : values) FERRY_RETURN_NOT_OK(builder.AppendOptional(value));
  return builder.Finish();
}

inline Result<ArrayDataPtr> MakeInt8Array(const std::vector<std::optional<int8_t>>& values) {
  return MakeFixedWidthArray<int8_t>(int8(), values);
}
inline Result<ArrayDataPtr> MakeInt16Array(const std::vector<std::optional<int16_t>>& values) {
  return MakeFixedWidthArray<int16_t>(int16(), values);
}
inline Result<ArrayDataPtr> MakeInt32Array(const std::vector<std::optional<int32_t>>& values) {
  return MakeFixedWidthArray<int32_t>(int32(), values);
}
inline Result<ArrayDataPtr> MakeInt64Array(const std::vector<std::optional<int64_t>>& values) {
  return MakeFixedWidthArray<int64_t>(int64(), values);
}
inline Result<ArrayDataPtr> MakeUInt8Array(const std::vector<std::optional<uint8_t>>& values) {
  return MakeFixedWidthArray<uint8_t>(uint8(), values);
}
inline Result<ArrayDataPtr> MakeUInt32Array(const std::vector<std::optional<uint32_t>>& values) {
  return MakeFixedWidthArray<uint32_t>(uint32(), values);
}
inline Result<ArrayDataPtr> MakeUInt64Array(const std::vector<std::optional<uint64_t>>& values) {
  return MakeFixedWidthArray<uint64_t>(uint64(), values);
}
inline Result<ArrayDataPtr> MakeFloat32Array(const std::vector<std::optional<float>>& values) {
  return MakeFixedWidthArray<float>(float32(), values);
}
inline Result<ArrayDataPtr> MakeFloat64Array(const std::vector<std::optional<double>>& values) {
  return MakeFixedWidthArray<double>(float64(), values);
}
Result<ArrayDataPtr> MakeBooleanArray(const std::vector<std::optional<bool>>& values,
                                      MemoryPool* pool = default_memory_pool());
// `type` is binary, utf8, their large or view variants, or fixed_size_binary.
Result<ArrayDataPtr> MakeStringArray(const TypePtr& type,
                                     const std::vector<std::optional<std::string>>& values,
                                     MemoryPool* pool = default_memory_pool());
inline Result<ArrayDataPtr> MakeUtf8Array(const std::vector<std::optional<std::string>>& values) {
  return MakeStringArray(utf8(), values);
}
inline Result<ArrayDataPtr> MakeBinaryArray(const std::vector<std::optional<std::string>>& values) {
  return MakeStringArray(binary(), values);
}
// A struct array over existing children (all of `length` = the first
// child's length); `validity` empty means no nulls. Children are not copied.
Result<ArrayDataPtr> MakeStructArray(const std::vector<std::string>& names,
                                     std::vector<ArrayDataPtr> children,
                                     const std::vector<bool>& validity = {},
                                     MemoryPool* pool = default_memory_pool());
// `length` nulls of any type.
Result<ArrayDataPtr> MakeArrayOfNulls(const TypePtr& type, int64_t length,
                                      MemoryPool* pool = default_memory_pool());

}  // namespace ferry
