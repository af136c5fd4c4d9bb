// The Arrow C Stream Interface: export any source of record batches as an
// ArrowArrayStream and read a foreign stream as an iterator of batches.
// Errors travel both ways: a failing source makes get_next return its errno
// code with get_last_error describing it; a failing foreign stream gives a
// Status carrying its get_last_error text.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "ferry/c/abi.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/status.h"

namespace ferry {

// A pull-based source of batches. Next() returns nullptr at the end.
// Not thread-safe: one consumer pulls at a time (as the C stream interface).
class RecordBatchReader {
 public:
  virtual ~RecordBatchReader() = default;
  virtual SchemaPtr schema() const = 0;
  virtual Result<RecordBatchPtr> Next() = 0;

  // Reads every remaining batch.
  Result<std::vector<RecordBatchPtr>> ReadAll();
  // A reader over a fixed list of batches (each must match `schema`).
  static Result<std::shared_ptr<RecordBatchReader>> FromBatches(
      SchemaPtr schema, std::vector<RecordBatchPtr> batches);
  // A reader over a generator function (returns nullptr at the end).
  static std::shared_ptr<RecordBatchReader> FromFunction(
      SchemaPtr schema, std::function<Result<RecordBatchPtr>()> next);
};

// Exports `reader` as a stream; the stream keeps the reader alive until released.
Status ExportRecordBatchReader(std::shared_ptr<RecordBatchReader> reader, ArrowArrayStream* out);
// Takes ownership of `stream` (moved; released when the reader is destroyed).
// Each batch is imported without copying and validated structurally.
Result<std::shared_ptr<RecordBatchReader>> ImportRecordBatchReader(ArrowArrayStream* stream);

}  // namespace ferry
