// Array data: the in-memory form of one Arrow array (any type), and record
// batches. ArrayData is immutable once shared; slicing never copies. Buffers
// follow the C Data Interface layout of the type (see DataType::num_buffers),
// except that view types keep only validity, views and their variadic data
// buffers: the trailing buffer of variadic sizes exists only on export.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/exchange/buffer.h"
#include "ferry/exchange/type.h"

namespace ferry {

inline constexpr int64_t kUnknownNullCount = -1;

struct ArrayData;
using ArrayDataPtr = std::shared_ptr<const ArrayData>;

namespace internal {
struct RecordBatchAccess;  // trusted construction for importers (src/exchange/array_internal.h)
}  // namespace internal

struct ArrayData {
  TypePtr type;
  int64_t length = 0;
  // Logical offset into the buffers, in elements. For struct, fixed-size list
  // and sparse union arrays it applies to the children as well (as in Arrow);
  // for run-end encoded arrays it is a logical offset into the runs.
  int64_t offset = 0;
  // Number of nulls, or kUnknownNullCount until computed.
  int64_t null_count = 0;
  // May hold nullptr where the spec allows an absent buffer (validity when
  // null_count == 0; any buffer of a zero-length array).
  std::vector<BufferPtr> buffers;
  std::vector<ArrayDataPtr> children;
  // The dictionary of a dictionary-encoded array (its type is the value type).
  ArrayDataPtr dictionary;

  // Null count computed from the validity bitmap when unknown (unions and
  // run-end encoded arrays have no validity bitmap: their null count is 0;
  // null arrays: length).
  int64_t GetNullCount() const;
  bool IsValid(int64_t i) const;  // i is relative to offset; true without bitmap
  // Typed pointer to buffer `index`, already advanced by `offset` elements of T.
  template <typename T>
  const T* GetValues(int index) const {
    const auto& buffer = buffers[static_cast<size_t>(index)];
    return buffer ? buffer->data_as<T>() + offset : nullptr;
  }
};

// A zero-copy slice [offset, offset+length) of `data` (length is clamped);
// null_count becomes kUnknownNullCount unless it was 0 or length == 0.
ArrayDataPtr Slice(const ArrayDataPtr& data, int64_t offset, int64_t length);

// Equality of logical contents (types, validity, values), ignoring offsets,
// capacity and the bytes under null slots.
bool ArrayEquals(const ArrayData& left, const ArrayData& right);
// One line per top-level value, for debugging and `make run`.
std::string ArrayToString(const ArrayData& data, int64_t max_values = 20);

// A schema and a struct array of the same fields. Immutable.
class RecordBatch {
 public:
  // Checks that `columns` match the schema's fields in count, type and length.
  static Result<std::shared_ptr<RecordBatch>> Make(SchemaPtr schema, int64_t num_rows,
                                                   std::vector<ArrayDataPtr> columns);
  // `struct_array` must be of struct type; its fields become the schema.
  static Result<std::shared_ptr<RecordBatch>> FromStructArray(const ArrayDataPtr& struct_array,
                                                              Metadata schema_metadata = {});

  const SchemaPtr& schema() const { return schema_; }
  int64_t num_rows() const { return num_rows_; }
  int num_columns() const { return static_cast<int>(columns_.size()); }
  const ArrayDataPtr& column(int i) const { return columns_[static_cast<size_t>(i)]; }
  const std::vector<ArrayDataPtr>& columns() const { return columns_; }
  // The batch as one struct array of length num_rows (no copy).
  ArrayDataPtr ToStructArray() const;
  std::shared_ptr<RecordBatch> Slice(int64_t offset, int64_t length) const;
  bool Equals(const RecordBatch& other) const;
  std::string ToString() const;

 private:
  friend struct internal::RecordBatchAccess;
  RecordBatch(SchemaPtr schema, int64_t num_rows, std::vector<ArrayDataPtr> columns)
      : schema_(std::move(schema)), num_rows_(num_rows), columns_(std::move(columns)) {}
  SchemaPtr schema_;
  int64_t num_rows_;
  std::vector<ArrayDataPtr> columns_;
};
using RecordBatchPtr = std::shared_ptr<RecordBatch>;

}  // namespace ferry
