// The C API (include/ferry/c/ferry.h). Every entry point catches every
// exception and turns it and any non-OK Status into an errno code plus a
// message, so nothing but plain return values crosses the C boundary.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "ferry/base/telemetry.h"
#include "ferry/c/ferry.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/bridge.h"
#include "ferry/exchange/sample.h"
#include "ferry/exchange/stream.h"
#include "ferry/exchange/type.h"
#include "ferry/exchange/validate.h"

struct FerryArray {
  ferry::ArrayDataPtr data;
  std::string format;
};

namespace {

// Writes `prefix` then `detail` into the error's message, truncating; does not
// allocate, so it is safe inside the exception handlers of Guard.
void SetError(FerryError* error, const char* prefix, const char* detail = "") noexcept {
  if (error == nullptr) return;
  std::snprintf(error->message, sizeof(error->message), "%s%s", prefix, detail);
}

void SetError(FerryError* error, const std::string& message) { SetError(error, message.c_str()); }

int Fail(FerryError* error, const ferry::Status& status) {
  SetError(error, status.ToString());
  return status.ToErrno();
}

// Runs `body` (returning a Status), converting exceptions to error codes.
template <typename Body>
int Guard(FerryError* error, Body&& body) noexcept {
  try {
    ferry::Status status = body();
    return status.ok() ? 0 : Fail(error, status);
  } catch (const std::bad_alloc&) {
    SetError(error, "Out of memory");
    return ENOMEM;
  } catch (const std::exception& e) {
    SetError(error, "Unknown error: ", e.what());
    return EIO;
  } catch (...) {
    SetError(error, "Unknown error: non-standard exception");
    return EIO;
  }
}

// Writes `text` into a caller buffer, truncating, always NUL-terminating.
void WriteText(const std::string& text, char* out, size_t out_size, size_t* out_length) {
  if (out_length != nullptr) *out_length = text.size();
  if (out == nullptr || out_size == 0) return;
  size_t n = std::min(text.size(), out_size - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

void NoRelease(ArrowArray* array) { array->release = nullptr; }

// Imports a borrowed array: a shallow copy whose release does nothing, so the
// caller's struct (and its children) stay owned by the caller. The imported
// data must not outlive this call.
ferry::Result<ferry::ArrayDataPtr> ImportBorrowed(const ArrowArray* array,
                                                  const ArrowSchema* schema) {
  if (array == nullptr || schema == nullptr) {
    return ferry::Status::Invalid("array and schema must not be NULL");
  }
  if (array->release == nullptr) return ferry::Status::Invalid("array is already released");
  ArrowArray shallow = *array;
  shallow.release = NoRelease;
  return ferry::ImportArray(&shallow, schema);
}

ferry::Status CheckSchemaPointer(const ArrowSchema* schema) {
  if (schema == nullptr) return ferry::Status::Invalid("schema must not be NULL");
  if (schema->release == nullptr) return ferry::Status::Invalid("schema is already released");
  return ferry::Status::OK();
}

}  // namespace

extern "C" {

const char* ferry_version(void) { return "0.1.0"; }

int ferry_schema_validate(const ArrowSchema* schema, FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    FERRY_RETURN_NOT_OK(CheckSchemaPointer(schema));
    FERRY_ASSIGN_OR_RAISE(auto field, ferry::ImportField(schema));
    return ferry::ValidateType(*field.type);
  });
}

int ferry_array_validate(const ArrowArray* array, const ArrowSchema* schema, int level,
                         FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    if (level != FERRY_VALIDATE_STRUCTURAL && level != FERRY_VALIDATE_FULL) {
      return ferry::Status::Invalid("unknown validation level " + std::to_string(level));
    }
    FERRY_RETURN_NOT_OK(CheckSchemaPointer(schema));
    FERRY_ASSIGN_OR_RAISE(auto data, ImportBorrowed(array, schema));
    return level == FERRY_VALIDATE_FULL ? ferry::ValidateFull(*data) : ferry::Status::OK();
  });
}

int ferry_schema_describe(const ArrowSchema* schema, char* out, size_t out_size, size_t* out_length,
                          FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    FERRY_RETURN_NOT_OK(CheckSchemaPointer(schema));
    FERRY_ASSIGN_OR_RAISE(auto field, ferry::ImportField(schema));
    WriteText(field.ToString(), out, out_size, out_length);
    return ferry::Status::OK();
  });
}

int ferry_array_describe(const ArrowArray* array, const ArrowSchema* schema, char* out,
                         size_t out_size, size_t* out_length, FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    FERRY_RETURN_NOT_OK(CheckSchemaPointer(schema));
    FERRY_ASSIGN_OR_RAISE(auto data, ImportBorrowed(array, schema));
    WriteText(ferry::ArrayToString(*data), out, out_size, out_length);
    return ferry::Status::OK();
  });
}

int ferry_array_import(ArrowArray* array, const ArrowSchema* schema, FerryArray** out,
                       FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    if (out == nullptr) {
      if (array != nullptr && array->release != nullptr) array->release(array);
      return ferry::Status::Invalid("out must not be NULL");
    }
    *out = nullptr;
    if (array == nullptr) return ferry::Status::Invalid("array must not be NULL");
    if (schema == nullptr || schema->release == nullptr) {
      if (array->release != nullptr) array->release(array);
      return ferry::Status::Invalid("schema must not be NULL or released");
    }
    FERRY_ASSIGN_OR_RAISE(auto data, ferry::ImportArray(array, schema));
    *out = new FerryArray{data, ferry::FormatString(*data->type)};
    return ferry::Status::OK();
  });
}

int ferry_array_export(const FerryArray* handle, ArrowArray* out_array, ArrowSchema* out_schema,
                       FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    if (handle == nullptr || out_array == nullptr) {
      return ferry::Status::Invalid("handle and out_array must not be NULL");
    }
    if (out_schema == nullptr) return ferry::ExportArray(handle->data, out_array);
    return ferry::ExportArray(handle->data, out_array, out_schema);
  });
}

int ferry_array_slice(const FerryArray* handle, int64_t offset, int64_t length, FerryArray** out,
                      FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    if (handle == nullptr || out == nullptr) {
      return ferry::Status::Invalid("handle and out must not be NULL");
    }
    if (offset < 0 || length < 0 || offset > handle->data->length) {
      return ferry::Status::IndexError("slice [" + std::to_string(offset) + ", +" +
                                       std::to_string(length) + ") outside array of length " +
                                       std::to_string(handle->data->length));
    }
    *out = new FerryArray{ferry::Slice(handle->data, offset, length), handle->format};
    return ferry::Status::OK();
  });
}

void ferry_array_free(FerryArray* handle) { delete handle; }

int64_t ferry_array_length(const FerryArray* handle) {
  return handle == nullptr ? -1 : handle->data->length;
}

int64_t ferry_array_null_count(const FerryArray* handle) {
  return handle == nullptr ? -1 : handle->data->GetNullCount();
}

int64_t ferry_array_num_children(const FerryArray* handle) {
  return handle == nullptr ? -1 : static_cast<int64_t>(handle->data->children.size());
}

const void* ferry_array_buffer(const FerryArray* handle, int64_t index) {
  if (handle == nullptr || index < 0 ||
      index >= static_cast<int64_t>(handle->data->buffers.size())) {
    return nullptr;
  }
  const auto& buffer = handle->data->buffers[static_cast<size_t>(index)];
  return buffer ? buffer->data() : nullptr;
}

const char* ferry_array_format(const FerryArray* handle) {
  return handle == nullptr ? nullptr : handle->format.c_str();
}

int ferry_make_sample_batch(int64_t num_rows, ArrowArray* out_array, ArrowSchema* out_schema,
                            FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    if (out_array == nullptr || out_schema == nullptr) {
      return ferry::Status::Invalid("out_array and out_schema must not be NULL");
    }
    FERRY_ASSIGN_OR_RAISE(auto batch, ferry::MakeSampleBatch(num_rows));
    return ferry::ExportRecordBatch(*batch, out_array, out_schema);
  });
}

int ferry_stream_drain(ArrowArrayStream* stream, int64_t* out_batches, int64_t* out_rows,
                       FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    if (stream == nullptr) return ferry::Status::Invalid("stream must not be NULL");
    FERRY_ASSIGN_OR_RAISE(auto reader, ferry::ImportRecordBatchReader(stream));
    int64_t batches = 0;
    int64_t rows = 0;
    while (true) {
      FERRY_ASSIGN_OR_RAISE(auto batch, reader->Next());
      if (batch == nullptr) break;
      ++batches;
      rows += batch->num_rows();
    }
    if (out_batches != nullptr) *out_batches = batches;
    if (out_rows != nullptr) *out_rows = rows;
    return ferry::Status::OK();
  });
}

int ferry_telemetry_count(void) { return static_cast<int>(ferry::telemetry::Snapshot().size()); }

const char* ferry_telemetry_name(int index) {
  using ferry::telemetry::Counter;
  using ferry::telemetry::FallbackReason;
  // Names in Snapshot() order: a static table built once.
  static const std::vector<std::string>* names = [] {
    auto* table = new std::vector<std::string>();
    for (const auto& entry : ferry::telemetry::Snapshot()) table->push_back(entry.first);
    return table;
  }();
  if (index < 0 || index >= static_cast<int>(names->size())) return nullptr;
  return (*names)[static_cast<size_t>(index)].c_str();
}

int ferry_telemetry_get(const char* name, int64_t* out_value, FerryError* error) {
  if (name == nullptr || out_value == nullptr) {
    SetError(error, "Invalid: name and out_value must not be NULL");
    return EINVAL;
  }
  auto snapshot = ferry::telemetry::Snapshot();
  auto found = snapshot.find(name);
  if (found == snapshot.end()) {
    SetError(error, std::string("Invalid: no telemetry counter named '") + name + "'");
    return ENOENT;
  }
  *out_value = found->second;
  return 0;
}

int ferry_telemetry_prometheus(char* out, size_t out_size, size_t* out_length, FerryError* error) {
  return Guard(error, [&]() -> ferry::Status {
    WriteText(ferry::telemetry::ToPrometheus(), out, out_size, out_length);
    return ferry::Status::OK();
  });
}

void ferry_telemetry_reset(void) { ferry::telemetry::Reset(); }

}  // extern "C"
