// The Arrow C Async Device Stream interface (ArrowAsyncDeviceStreamHandler,
// ArrowAsyncProducer, ArrowAsyncTask), both sides.
//
// The consumer owns the handler and gives it to a producer. The producer sets
// handler->producer, calls on_schema exactly once and first, then calls
// on_next_task only as often as the consumer asked for through
// producer->request(n) (back-pressure); on_next_task(NULL) ends the stream,
// on_error(code, message) reports a failure, and release is always the last
// call on the handler. producer->cancel asks the producer to stop: it
// eventually stops and releases the handler without calling on_error.
// Handler callbacks are serialised by the producer; request and cancel may be
// called from any thread, also from inside on_schema and on_next_task, and
// never call back into the handler synchronously.
//
// Every ArrowAsyncTask must be extracted exactly once (extract_data with
// out == NULL discards it): that is how the producer frees it, whatever the
// handler returned from on_next_task. Ferry's tasks hold their batch alive
// independently of the producer object, so they may be extracted after the
// producer has finished.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "ferry/base/status.h"
#include "ferry/c/abi.h"
#include "ferry/device/device.h"
#include "ferry/device/device_bridge.h"
#include "ferry/exchange/type.h"

namespace ferry::device {

// ---- Producer side ----------------------------------------------------------

struct AsyncExportOptions {
  // Goes to ArrowAsyncProducer::additional_metadata (encoded like schema
  // metadata; NULL when empty), valid until the handler is released.
  Metadata additional_metadata;
  // Applied to every batch when its task is extracted.
  ExportOptions export_options;
};

class AsyncDeviceStreamProducer;

// Drives `handler` from a producer thread owned by the returned object:
// exports `source`'s schema through on_schema, then pulls one batch from
// `source` per requested on_next_task call (the end-of-stream call
// included, so a source is never read ahead of the consumer's requests).
// Each task's extract_data exports its batch with ExportDeviceArray; a second
// call on the same task struct returns EINVAL. A source error, a batch on
// another device type than source->device_type() or with another schema, a
// request(n) with n <= 0, or a failed extract_data (while the stream is
// still running) becomes on_error (errno code, message) followed by release.
// A non-zero return from on_schema or on_next_task stops the producer:
// release follows, without on_error. After cancel, no further task is sent
// once the producer sees it (one already being handed over may still come).
// A handler that neither moves nor releases the schema passed to on_schema
// gets it released by the producer. All handler callbacks run on the
// producer thread; request and cancel only record and wake it.
//
// On failure (null handler or source, a handler without its mandatory
// callbacks, no thread) nothing is called but the handler's release, when
// it has one. The handler must stay valid until its release is called.
Result<std::unique_ptr<AsyncDeviceStreamProducer>> ExportAsyncDeviceStream(
    std::shared_ptr<DeviceBatchReader> source, ArrowAsyncDeviceStreamHandler* handler,
    AsyncExportOptions options = {});

// The running producer. Thread-safe. The ArrowAsyncProducer it gives the
// handler lives as long as this object; the destructor cancels the stream
// and joins the producer thread, which ends once the handler is released
// (a source blocked in Next() delays that). Destroying the object from its
// own thread (e.g. from the handler's release) detaches instead of joining.
class AsyncDeviceStreamProducer {
 public:
  ~AsyncDeviceStreamProducer();
  AsyncDeviceStreamProducer(const AsyncDeviceStreamProducer&) = delete;
  AsyncDeviceStreamProducer& operator=(const AsyncDeviceStreamProducer&) = delete;

  // As ArrowAsyncProducer::cancel: idempotent; stops without on_error.
  void Cancel();
  // Waits at most `timeout` for the handler's release, then reports how the
  // stream ended: OK after on_next_task(NULL), Cancelled after a
  // cancellation, the error passed to on_error, or Invalid naming the
  // callback that returned non-zero. TimedOut while still running.
  Status Wait(std::chrono::nanoseconds timeout = std::chrono::seconds(30));
  // True once the handler has been released.
  bool finished() const;
  // on_next_task calls with a task so far (the end marker not included).
  int64_t tasks_sent() const;

  class Core;

 private:
  friend Result<std::unique_ptr<AsyncDeviceStreamProducer>> ExportAsyncDeviceStream(
      std::shared_ptr<DeviceBatchReader>, ArrowAsyncDeviceStreamHandler*, AsyncExportOptions);
  explicit AsyncDeviceStreamProducer(std::shared_ptr<Core> core);
  std::shared_ptr<Core> core_;
};

// Producer threads of this process that have not ended yet: a shutdown leak
// check (every AsyncDeviceStreamProducer joins its thread when destroyed).
int64_t RunningAsyncProducerThreads();

// ---- Consumer side ----------------------------------------------------------

struct AsyncConsumerOptions {
  // Tasks buffered at most: request(window) after on_schema, then request(1)
  // for each task Next() takes. At least 1.
  int64_t window = 4;
  // How Next() imports each array (ImportDeviceArray).
  ImportOptions import_options;
};

// Receives an async device stream from any producer (Ferry's or a foreign C
// one) through the handler it provides, and turns it into blocking reads.
// Thread-safe; Next() is meant for one consumer thread at a time.
//
// The handler and the state behind it outlive this object until the
// producer releases the handler, so a producer that finishes late never
// touches freed memory. Destroying the consumer cancels the stream and
// discards (extracts with NULL) the tasks it buffered; tasks that arrive
// later are discarded as well. Calls into the producer (request, cancel) are
// never made while the handler's release runs, and never after it.
//
// A producer that breaks the protocol (on_next_task before on_schema or
// beyond what was requested, on_schema twice, a schema that is not a struct,
// a chunk on another device type than announced) gets a non-zero return and
// the stream fails with Invalid naming the rule.
class AsyncDeviceStreamConsumer {
 public:
  // Invalid for a window below 1.
  static Result<std::unique_ptr<AsyncDeviceStreamConsumer>> Make(AsyncConsumerOptions options = {});
  ~AsyncDeviceStreamConsumer();
  AsyncDeviceStreamConsumer(const AsyncDeviceStreamConsumer&) = delete;
  AsyncDeviceStreamConsumer& operator=(const AsyncDeviceStreamConsumer&) = delete;

  // The handler to give to one producer. It must then be released by that
  // producer (or by the caller through handler->release, if it never hands
  // it over). Calling this again returns the same handler.
  ArrowAsyncDeviceStreamHandler* handler();

  // Waits for on_schema (at most `timeout`): the stream's schema, or the
  // error that ended the stream first.
  Result<SchemaPtr> schema(std::chrono::nanoseconds timeout = std::chrono::seconds(30));
  // The producer's device type and additional metadata (valid after schema()).
  DeviceType device_type() const;
  Metadata additional_metadata() const;

  // The next batch in the producer's order; batch == nullptr after the end.
  // Batches that arrived before a producer error are returned first, then
  // the error (the producer's code and message). TimedOut when nothing
  // arrives within `timeout` (the stream stays usable); Cancelled after
  // Cancel(). An extraction or import failure fails the stream and cancels
  // the producer.
  Result<DeviceBatch> Next(std::chrono::nanoseconds timeout = std::chrono::seconds(30));

  // Asks the producer to stop and discards buffered tasks. Idempotent.
  void Cancel();
  // Waits at most `timeout` for the producer to release the handler.
  Status WaitReleased(std::chrono::nanoseconds timeout = std::chrono::seconds(30));
  bool released() const;

  class State;

 private:
  explicit AsyncDeviceStreamConsumer(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace ferry::device
