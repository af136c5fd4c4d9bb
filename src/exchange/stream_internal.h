// Internal: the C stream scaffolding that the C stream bridge (stream.cc) and
// the C device stream bridge (src/exchange/device/device_bridge.cc) share. Both stream
// structs have the same callbacks and the same rules for errors and release;
// only the chunk type differs. Not installed.
#pragma once

#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "ferry/base/status.h"
#include "ferry/base/telemetry.h"
#include "ferry/c/abi.h"
#include "ferry/exchange/bridge.h"
#include "ferry/exchange/type.h"

namespace ferry::internal {

// Batches travel through a C stream without a schema, so a batch must have
// the stream's column types (names and metadata do not cross).
bool SameColumnTypes(const Schema& left, const Schema& right);

// ---- Producer side --------------------------------------------------------------
// `State` is an exported stream's private_data: it holds the `reader` (whose
// schema() the stream serves) and `last_error`, the message for get_last_error.

// The state of a live exported stream; nullptr once released.
template <typename State, typename CStream>
State* ExportedStreamState(CStream* stream) {
  if (stream == nullptr || stream->release == nullptr) return nullptr;
  return static_cast<State*>(stream->private_data);
}

// Records `status` for get_last_error and returns its errno code.
template <typename State>
int FailStream(State* state, const Status& status) {
  state->last_error = status.message();
  return status.ToErrno();
}

// get_schema: the reader's schema, exported.
template <typename State, typename CStream>
int ExportedStreamGetSchema(CStream* stream, ArrowSchema* out) {
  State* state = ExportedStreamState<State>(stream);
  if (state == nullptr || out == nullptr) return EINVAL;
  state->last_error.clear();
  // No exception may cross the C ABI: the reader is user code.
  try {
    SchemaPtr schema = state->reader->schema();
    if (schema == nullptr) return FailStream(state, Status::Invalid("the reader has no schema"));
    Status exported = ExportSchema(*schema, out);
    return exported.ok() ? 0 : FailStream(state, exported);
  } catch (const std::exception& error) {
    return FailStream(state,
                      Status::UnknownError(std::string("get_schema threw: ") + error.what()));
  } catch (...) {
    return FailStream(state, Status::UnknownError("get_schema threw a non-standard exception"));
  }
}

template <typename State, typename CStream>
const char* ExportedStreamGetLastError(CStream* stream) {
  State* state = ExportedStreamState<State>(stream);
  if (state == nullptr || state->last_error.empty()) return nullptr;
  return state->last_error.c_str();
}

// As for arrays: a call on a stream already released (release == NULL) is
// counted as an error and touches nothing else.
template <typename State, typename CStream>
void ReleaseExportedStream(CStream* stream) {
  if (stream == nullptr || stream->release == nullptr || stream->private_data == nullptr) {
    telemetry::Add(telemetry::Counter::kReleaseErrors);
    return;
  }
  delete static_cast<State*>(stream->private_data);
  stream->private_data = nullptr;
  stream->release = nullptr;
  telemetry::Add(telemetry::Counter::kReleases);
}

// ---- Consumer side --------------------------------------------------------------

// Owns a moved foreign C stream and calls its release exactly once.
template <typename CStream>
class ForeignStreamOwner {
 public:
  // `what` names the stream in error messages, e.g. "foreign stream".
  ForeignStreamOwner(CStream* source, const char* what) : stream_(*source), what_(what) {
    source->release = nullptr;
  }
  ~ForeignStreamOwner() {
    if (stream_.release != nullptr) {
      stream_.release(&stream_);
      telemetry::Add(telemetry::Counter::kForeignReleases);
    }
  }
  ForeignStreamOwner(const ForeignStreamOwner&) = delete;
  ForeignStreamOwner& operator=(const ForeignStreamOwner&) = delete;

  CStream* get() { return &stream_; }

  // The status for a non-zero callback code, with the stream's own description.
  Status ErrorFrom(int code, const std::string& operation) {
    const char* description =
        stream_.get_last_error != nullptr ? stream_.get_last_error(&stream_) : nullptr;
    std::string message =
        std::string(what_) + " " + operation + " failed (" + std::strerror(code) + ")";
    if (description != nullptr) message += ": " + std::string(description);
    return Status::FromErrno(code, std::move(message));
  }

 private:
  CStream stream_;
  const char* what_;
};

}  // namespace ferry::internal
