// Export to and import from the Arrow C Data Interface.
//
// Export never copies: the exported structs point at Ferry's buffers and keep
// them alive until the consumer calls `release`. Import never copies: the
// imported ArrayData points at the producer's buffers and keeps the foreign
// struct alive (its release is called exactly once, when the last buffer,
// child or slice that points into it is gone). The `out` structs are
// caller-allocated; on failure nothing is left to release in them.
// Import functions take ownership of the input struct: on success and on
// failure alike it is released (moved) — its `release` is NULL afterwards.
// All functions are thread-safe for distinct arguments.
//
// Release. Every struct Ferry exports (schema or array, children and
// dictionary included) has its own release callback: it releases the
// children and dictionary the consumer did not move out, frees Ferry's
// private data, sets `release` to NULL and counts telemetry kReleases. A
// consumer may move children out and release them in any order. Calling
// `s->release(s)` a second time is a call through NULL: the consumer's bug,
// as the C Data Interface says. Ferry's callback reached again through a
// saved function pointer sees `release == NULL`, counts kReleaseErrors and
// touches nothing else. (A consumer that copied a struct without nulling the
// source's release and releases both is outside the protocol and undetected.)
//
// Import checks, in order, before reading any buffer: not released, lengths
// and counts non-negative (null_count may be -1), n_buffers and n_children
// matching the type (views: at least 3, the last holding the variadic buffer
// sizes), buffers/children pointers non-NULL, dictionary present exactly for
// dictionary types, every buffer that must hold bytes non-NULL (validity only
// when null_count > 0). Buffer sizes follow from type, offset and length; the
// data size of binary/utf8 comes from the last offset and that of view data
// buffers from the trailing sizes buffer. Then ValidateStructural runs.
// Rejections count kValidationErrors (kReleaseErrors for an already released
// input). Errors name the node: "array.'points'.item.'x': length is negative
// (-1)", "col 'tags'.item: unknown format string 'Q'". An array without any
// buffer keeps nothing of the producer's, so its release may run during import.
#pragma once

#include "ferry/base/status.h"
#include "ferry/c/abi.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/type.h"

namespace ferry {

// Moves a C struct: copies it into `dst` and marks `src` released.
void MoveSchema(ArrowSchema* src, ArrowSchema* dst);
void MoveArray(ArrowArray* src, ArrowArray* dst);
void MoveArrayStream(ArrowArrayStream* src, ArrowArrayStream* dst);

Status ExportType(const DataType& type, ArrowSchema* out);
Status ExportField(const Field& field, ArrowSchema* out);
// A schema is exported as a struct type ("+s") with the schema's metadata.
Status ExportSchema(const Schema& schema, ArrowSchema* out);
Status ExportArray(const ArrayDataPtr& data, ArrowArray* out);
// Exports both; on failure neither needs releasing.
Status ExportArray(const ArrayDataPtr& data, ArrowArray* out, ArrowSchema* out_schema);
Status ExportRecordBatch(const RecordBatch& batch, ArrowArray* out,
                         ArrowSchema* out_schema = nullptr);

// Does not take ownership of `schema` (schemas are cheap and often reused):
// the caller still releases it.
Result<Field> ImportField(const ArrowSchema* schema);
Result<TypePtr> ImportType(const ArrowSchema* schema);
// The schema must be a struct ("+s"); its children become the fields.
Result<SchemaPtr> ImportSchema(const ArrowSchema* schema);
// Takes ownership of `array` (see the header comment). Checks structure
// (ValidateStructural) before returning; a foreign array that fails is
// released and reported, never read past its buffers.
Result<ArrayDataPtr> ImportArray(ArrowArray* array, const TypePtr& type);
Result<ArrayDataPtr> ImportArray(ArrowArray* array, const ArrowSchema* schema);
Result<RecordBatchPtr> ImportRecordBatch(ArrowArray* array, const SchemaPtr& schema);
Result<RecordBatchPtr> ImportRecordBatch(ArrowArray* array, const ArrowSchema* schema);

}  // namespace ferry
