#include "ferry/exchange/stream.h"

#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "exchange/stream_internal.h"
#include "ferry/base/telemetry.h"
#include "ferry/exchange/bridge.h"

namespace ferry {

namespace internal {

bool SameColumnTypes(const Schema& left, const Schema& right) {
  if (left.num_fields() != right.num_fields()) return false;
  for (int i = 0; i < left.num_fields(); ++i) {
    const TypePtr& left_type = left.fields[static_cast<size_t>(i)].type;
    const TypePtr& right_type = right.fields[static_cast<size_t>(i)].type;
    if (left_type == nullptr || right_type == nullptr) return false;
    if (!left_type->Equals(*right_type, /*check_metadata=*/false)) return false;
  }
  return true;
}

}  // namespace internal

namespace {

using internal::FailStream;
using internal::SameColumnTypes;
using telemetry::Counter;

// ============================================================================
// Readers
// ============================================================================

class BatchListReader final : public RecordBatchReader {
 public:
  BatchListReader(SchemaPtr schema, std::vector<RecordBatchPtr> batches)
      : schema_(std::move(schema)), batches_(std::move(batches)) {}

  SchemaPtr schema() const override { return schema_; }
  Result<RecordBatchPtr> Next() override {
    if (next_index_ >= batches_.size()) return RecordBatchPtr();
    // Hand the batch over so the reader does not pin memory it no longer serves.
    return std::move(batches_[next_index_++]);
  }

 private:
  SchemaPtr schema_;
  std::vector<RecordBatchPtr> batches_;
  size_t next_index_ = 0;
};

class FunctionReader final : public RecordBatchReader {
 public:
  FunctionReader(SchemaPtr schema, std::function<Result<RecordBatchPtr>()> next)
      : schema_(std::move(schema)), next_(std::move(next)) {}

  SchemaPtr schema() const override { return schema_; }
  Result<RecordBatchPtr> Next() override {
    if (!next_) return Status::Invalid("FromFunction reader has no generator function");
    return next_();
  }

 private:
  SchemaPtr schema_;
  std::function<Result<RecordBatchPtr>()> next_;
};

// ============================================================================
// Export: a RecordBatchReader behind an ArrowArrayStream
// ============================================================================

struct ExportedStream {
  std::shared_ptr<RecordBatchReader> reader;
  // The message of the last failed callback, for get_last_error.
  std::string last_error;
  int64_t batches_exported = 0;
};

int StreamGetNext(ArrowArrayStream* stream, ArrowArray* out) {
  ExportedStream* state = internal::ExportedStreamState<ExportedStream>(stream);
  if (state == nullptr || out == nullptr) return EINVAL;
  state->last_error.clear();
  // On error `out` is marked released, so a consumer that releases whatever
  // it got does nothing harmful.
  out->release = nullptr;
  try {
    Result<RecordBatchPtr> next = state->reader->Next();
    if (!next.ok()) return FailStream(state, next.status());
    const RecordBatchPtr& batch = *next;
    if (batch == nullptr) {
      std::memset(out, 0, sizeof(*out));  // end of stream: release == NULL
      return 0;
    }
    const SchemaPtr schema = state->reader->schema();
    if (schema == nullptr || batch->schema() == nullptr ||
        !SameColumnTypes(*batch->schema(), *schema)) {
      return FailStream(
          state, Status::Invalid(
                     "batch " + std::to_string(state->batches_exported) +
                     " does not match the stream's schema: stream has " +
                     (schema ? schema->ToString() : std::string("no schema")) + ", batch has " +
                     (batch->schema() ? batch->schema()->ToString() : std::string("none"))));
    }
    Status exported = ExportRecordBatch(*batch, out);
    if (!exported.ok()) return FailStream(state, exported);
    ++state->batches_exported;
    telemetry::Add(Counter::kStreamBatchesExported);
    return 0;
  } catch (const std::exception& error) {
    return FailStream(state, Status::UnknownError(std::string("get_next threw: ") + error.what()));
  } catch (...) {
    return FailStream(state, Status::UnknownError("get_next threw a non-standard exception"));
  }
}

// ============================================================================
// Import: a foreign ArrowArrayStream as a RecordBatchReader
// ============================================================================

using ForeignStream = internal::ForeignStreamOwner<ArrowArrayStream>;

class ImportedStreamReader final : public RecordBatchReader {
 public:
  ImportedStreamReader(std::unique_ptr<ForeignStream> stream, SchemaPtr schema)
      : stream_(std::move(stream)), schema_(std::move(schema)) {}

  SchemaPtr schema() const override { return schema_; }

  Result<RecordBatchPtr> Next() override {
    // The C stream interface leaves a stream undefined after an error and
    // after the end, so neither state calls the producer again.
    if (!sticky_error_.ok()) return sticky_error_;
    if (finished_) return RecordBatchPtr();
    ArrowArray array{};
    const int code = stream_->get()->get_next(stream_->get(), &array);
    if (code != 0) {
      sticky_error_ = stream_->ErrorFrom(code, "get_next");
      return sticky_error_;
    }
    if (array.release == nullptr) {
      finished_ = true;
      return RecordBatchPtr();
    }
    Result<RecordBatchPtr> batch = ImportRecordBatch(&array, schema_);
    if (!batch.ok()) {
      sticky_error_ = batch.status().WithPrefix("batch " + std::to_string(batches_imported_) +
                                                " of the foreign stream: ");
      return sticky_error_;
    }
    ++batches_imported_;
    telemetry::Add(Counter::kStreamBatchesImported);
    return batch;
  }

 private:
  std::unique_ptr<ForeignStream> stream_;
  SchemaPtr schema_;
  Status sticky_error_;
  bool finished_ = false;
  int64_t batches_imported_ = 0;
};

}  // namespace

Result<std::vector<RecordBatchPtr>> RecordBatchReader::ReadAll() {
  std::vector<RecordBatchPtr> batches;
  while (true) {
    FERRY_ASSIGN_OR_RAISE(RecordBatchPtr batch, Next());
    if (batch == nullptr) return batches;
    batches.push_back(std::move(batch));
  }
}

Result<std::shared_ptr<RecordBatchReader>> RecordBatchReader::FromBatches(
    SchemaPtr schema, std::vector<RecordBatchPtr> batches) {
  if (schema == nullptr) return Status::Invalid("FromBatches: schema is null");
  for (size_t i = 0; i < batches.size(); ++i) {
    const RecordBatchPtr& batch = batches[i];
    if (batch == nullptr)
      return Status::Invalid("FromBatches: batch " + std::to_string(i) + " is null");
    if (batch->schema() == nullptr || !batch->schema()->Equals(*schema, /*check_metadata=*/false)) {
      return Status::Invalid("FromBatches: batch " + std::to_string(i) +
                             " does not match the reader's schema: expected " + schema->ToString() +
                             ", got " +
                             (batch->schema() ? batch->schema()->ToString() : std::string("none")));
    }
  }
  return std::shared_ptr<RecordBatchReader>(
      std::make_shared<BatchListReader>(std::move(schema), std::move(batches)));
}

std::shared_ptr<RecordBatchReader> RecordBatchReader::FromFunction(
    SchemaPtr schema, std::function<Result<RecordBatchPtr>()> next) {
  return std::make_shared<FunctionReader>(std::move(schema), std::move(next));
}

Status ExportRecordBatchReader(std::shared_ptr<RecordBatchReader> reader, ArrowArrayStream* out) {
  if (out == nullptr) return Status::Invalid("ExportRecordBatchReader: output stream is NULL");
  if (reader == nullptr) return Status::Invalid("ExportRecordBatchReader: reader is null");
  auto state = std::make_unique<ExportedStream>();
  state->reader = std::move(reader);
  out->get_schema = &internal::ExportedStreamGetSchema<ExportedStream, ArrowArrayStream>;
  out->get_next = &StreamGetNext;
  out->get_last_error = &internal::ExportedStreamGetLastError<ExportedStream, ArrowArrayStream>;
  out->release = &internal::ReleaseExportedStream<ExportedStream, ArrowArrayStream>;
  out->private_data = state.release();
  return Status::OK();
}

Result<std::shared_ptr<RecordBatchReader>> ImportRecordBatchReader(ArrowArrayStream* stream) {
  if (stream == nullptr) return Status::Invalid("ImportRecordBatchReader: stream is NULL");
  if (stream->release == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return Status::Invalid("ImportRecordBatchReader: stream is already released (release is NULL)");
  }
  auto foreign = std::make_unique<ForeignStream>(stream, "foreign stream");
  ArrowArrayStream* c_stream = foreign->get();
  if (c_stream->get_schema == nullptr || c_stream->get_next == nullptr) {
    return Status::Invalid("ImportRecordBatchReader: stream has a NULL get_schema or get_next");
  }
  ArrowSchema c_schema{};
  const int code = c_stream->get_schema(c_stream, &c_schema);
  if (code != 0)
    return foreign->ErrorFrom(code, "get_schema").WithPrefix("ImportRecordBatchReader: ");
  if (c_schema.release == nullptr) {
    return Status::Invalid(
        "ImportRecordBatchReader: get_schema succeeded but gave a released schema");
  }
  Result<SchemaPtr> schema = ImportSchema(&c_schema);
  c_schema.release(&c_schema);
  telemetry::Add(Counter::kForeignReleases);
  if (!schema.ok()) return schema.status().WithPrefix("ImportRecordBatchReader: ");
  return std::shared_ptr<RecordBatchReader>(
      std::make_shared<ImportedStreamReader>(std::move(foreign), schema.MoveValueUnsafe()));
}

}  // namespace ferry
