// The Arrow C Stream Interface: export any source of record batches as an
// ArrowArrayStream and read a foreign stream as an iterator of batches.
// Errors travel both ways: a failing source makes get_next return its errno
// code with get_last_error describing it; a failing foreign stream gives a
// Status carrying its get_last_error text.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/c/abi.h"
#include "ferry/exchange/array.h"

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
// get_schema exports the reader's schema on every call. get_next exports the
// next batch (it must have the schema's column types) or marks the end with
// out->release == NULL; a reader error (or exception) becomes its
// Status::ToErrno() code, out is left released and get_last_error returns the
// message until the next call. The stream stays usable after an error: the
// next get_next asks the reader again. Callbacks are not thread-safe.
Status ExportRecordBatchReader(std::shared_ptr<RecordBatchReader> reader, ArrowArrayStream* out);
// Takes ownership of `stream` (moved; released when the reader is destroyed,
// also when this function fails). Each batch is imported without copying and
// validated structurally against the stream's schema; imported batches
// outlive the reader. After an error or the end of the stream, Next() repeats
// that outcome without calling the producer again (the C stream interface
// leaves a stream undefined after an error).
Result<std::shared_ptr<RecordBatchReader>> ImportRecordBatchReader(ArrowArrayStream* stream);

}  // namespace ferry
