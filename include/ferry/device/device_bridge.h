// Export to and import from the Arrow C Device Data Interface
// (ArrowDeviceArray, ArrowDeviceArrayStream).
//
// Export: buffers stay on their device; device_type/device_id describe it;
// sync_event points to the producer's event (recorded after its last write)
// and the event lives until the consumer releases; reserved words are zero.
// Import: takes ownership of the struct (released exactly once, when the
// last user of its buffers is gone), resolves the device in the registry,
// waits for the event before any byte is read — device-side on the
// consumer's queue, or on the host with a timeout that becomes TimedOut —
// and reads from the device only what it must (the last offsets of
// variable-length columns, the variadic sizes of view columns), batched into
// one copy. Buffers are never copied.
#pragma once

#include <chrono>
#include <memory>

#include "ferry/c/abi.h"
#include "ferry/device/device.h"
#include "ferry/device/negotiate.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/status.h"

namespace ferry::device {

struct ImportOptions {
  // A queue of the array's device: the consumer's device-side wait goes
  // there. nullptr: wait on the host, at most `timeout`.
  Queue* queue = nullptr;
  std::chrono::nanoseconds timeout = std::chrono::seconds(30);
};

struct ExportOptions {
  // Debug guard: checksum every buffer at export and verify at release;
  // a mismatch is recorded (see GuardViolations) naming the column.
  bool guard = false;
};

Status ExportDeviceArray(const DeviceArray& array, ArrowDeviceArray* out,
                         ArrowSchema* out_schema = nullptr, const ExportOptions& options = {});

// Negotiates with `consumer` (negotiate.h), copies when the plan says so
// (counted by direction), records the plan's reason, and exports. Refusal is
// an error (NotImplemented) whose message is the plan's explanation.
Result<ExchangePlan> ExportDeviceArrayFor(const DeviceArray& array,
                                          const ConsumerCapabilities& consumer,
                                          ArrowDeviceArray* out, ArrowSchema* out_schema = nullptr,
                                          const ExportOptions& options = {});

// Takes ownership of `array` (released on failure too).
Result<DeviceArray> ImportDeviceArray(ArrowDeviceArray* array, const ArrowSchema* schema,
                                      const ImportOptions& options = {});
Result<DeviceArray> ImportDeviceArray(ArrowDeviceArray* array, const TypePtr& type,
                                      const ImportOptions& options = {});

// A batch on a device, with the event recorded after its last write.
struct DeviceBatch {
  RecordBatchPtr batch;
  Device* device = nullptr;
  EventPtr event;
};

// A pull source of device batches, all on one device type.
class DeviceBatchReader {
 public:
  virtual ~DeviceBatchReader() = default;
  virtual SchemaPtr schema() const = 0;
  virtual DeviceType device_type() const = 0;
  // A batch with batch == nullptr marks the end.
  virtual Result<DeviceBatch> Next() = 0;
};

// Exports `reader` as an ArrowDeviceArrayStream (every chunk of the
// stream's device type; a chunk on another device type is an error).
Status ExportDeviceBatchReader(std::shared_ptr<DeviceBatchReader> reader,
                               ArrowDeviceArrayStream* out);
// Takes ownership of `stream`; each chunk is imported as ImportDeviceArray does.
Result<std::shared_ptr<DeviceBatchReader>> ImportDeviceBatchReader(
    ArrowDeviceArrayStream* stream, const ImportOptions& options = {});

}  // namespace ferry::device
