// Internal: building a record batch without RecordBatch::Make's checks, for
// code that has just established them itself (the C Data bridge's import).
// Not installed.
#pragma once

#include <cstdint>
#include <vector>

#include "ferry/exchange/array.h"
#include "ferry/exchange/type.h"

namespace ferry::internal {

struct RecordBatchAccess {
  // The caller guarantees what Make would check: `schema` is not null,
  // num_rows >= 0, and `columns` has one non-null array per field, of the
  // field's type and num_rows long. One allocation holds the batch and its
  // reference count.
  static RecordBatchPtr MakeTrusted(SchemaPtr schema, int64_t num_rows,
                                    std::vector<ArrayDataPtr> columns);
};

}  // namespace ferry::internal
