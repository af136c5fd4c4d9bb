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
//
// Ownership: every export fills caller-allocated structs whose release the
// consumer calls exactly once; on failure nothing is left to release in
// them. Every import takes ownership of its input and releases it on
// failure too. Thread safety: the functions are thread-safe for distinct
// arguments; the process-wide guard and leak lists are locked.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/c/abi.h"
#include "ferry/device/device.h"
#include "ferry/device/negotiate.h"
#include "ferry/exchange/array.h"

namespace ferry::device {

struct ImportOptions {
  // A queue of the array's device: the consumer's device-side wait goes
  // there. nullptr: wait on the host, at most `timeout`.
  Queue* queue = nullptr;
  std::chrono::nanoseconds timeout = std::chrono::seconds(30);
  // The spec asks producers to zero ArrowDeviceArray::reserved, but Arrow C++
  // (and so pyarrow, at least up to 26) leaves them uninitialised. By default
  // the words are ignored so that such producers interoperate; strict mode
  // rejects non-zero words, as a conformance check of a producer.
  bool strict_reserved = false;
};

// An exclusive write lease on one array: while a lease lives, its producer
// promises that nobody but the lease holder reads or writes the array's
// buffers, so a consumer that needs to write may write in place (zero copy)
// instead of getting an owned copy. At most one lease per array (its root
// ArrayData node) exists at a time: Grant refuses a second one while the
// first is alive. The lease ends when its last reference is dropped; an
// export made with the lease (ExportOptions::lease) holds a reference until
// the consumer releases it. The lease is a promise between cooperating
// parties: Ferry refuses a second lease but does not stop other readers.
// Thread-safe.
class ExclusiveLease {
 public:
  // Invalid when the array has no data or is already leased.
  static Result<std::shared_ptr<ExclusiveLease>> Grant(const DeviceArray& array);
  ~ExclusiveLease();
  ExclusiveLease(const ExclusiveLease&) = delete;
  ExclusiveLease& operator=(const ExclusiveLease&) = delete;

  // Whether this lease is the one on `array`.
  bool Covers(const DeviceArray& array) const { return array.data == data_; }

 private:
  explicit ExclusiveLease(ArrayDataPtr data) : data_(std::move(data)) {}
  ArrayDataPtr data_;  // held so that the key cannot be reused while leased
};

struct ExportOptions {
  // Debug guard: checksum every buffer at export and verify at release;
  // a mismatch is recorded (see GuardViolations) naming the column. Device
  // memory is copied to the host for this both times (counted D2H, after a
  // host wait on the array's event): a debugging aid, not for production.
  // An export under an exclusive lease is not guarded (writes are allowed).
  bool guard = false;
  // The lease a consumer with needs_write + exclusive_lease relies on
  // (ExportDeviceArrayFor refuses such a consumer without it); the export
  // keeps it alive until release.
  std::shared_ptr<ExclusiveLease> lease;
  // Host waits on the array's event (guard mode; the copies of
  // ExportDeviceArrayFor) give up with TimedOut after this.
  std::chrono::nanoseconds timeout = std::chrono::seconds(30);
};

// Exports `array` as is (counted as a zero-copy export): `out->array` is the
// C Data export of its data, device_type/device_id are its device's,
// sync_event is array.event's (NULL without an event), reserved words are
// zero. The release keeps the event and the buffers alive until the
// consumer calls it. The device must be healthy, and an event must be of
// the device's kind. The host never reads device memory here: a null_count
// Ferry does not know travels as -1; the one exception is view arrays on
// memory the host cannot read, whose variadic buffer sizes (known on the
// host) are uploaded to a small device buffer (counted H2D, 8 bytes per
// data buffer, synchronised before return) because the spec puts every
// buffer on the array's device. `out_schema`, when given, gets the type.
Status ExportDeviceArray(const DeviceArray& array, ArrowDeviceArray* out,
                         ArrowSchema* out_schema = nullptr, const ExportOptions& options = {});

// Negotiates with `consumer` (negotiate.h), copies when the plan says so
// (counted by direction), records the plan's reason, and exports. Refusal is
// an error (NotImplemented) whose message is the plan's explanation. A
// consumer declaring needs_write with exclusive_lease is Invalid unless
// options.lease covers `array`. Returns the plan that was carried out.
Result<ExchangePlan> ExportDeviceArrayFor(const DeviceArray& array,
                                          const ConsumerCapabilities& consumer,
                                          ArrowDeviceArray* out, ArrowSchema* out_schema = nullptr,
                                          const ExportOptions& options = {});

// Takes ownership of `array` (released on failure too); does not take
// ownership of `schema`.
//
// Checks, before anything is waited on or read: not released, device_type a
// value the spec defines, reserved words zero, no sync_event on a device
// without events (the CPU), the device present in DeviceRegistry::Global()
// (an error naming the device type and why it is absent) and healthy. Then
// waits: with options.queue (which must belong to the array's device) a
// device-side wait on it, else a host wait of at most options.timeout
// (TimedOut); host-accessible memory, which import reads in place, is
// always waited for on the host. Then imports: host-accessible memory as
// ImportArray does; device memory without dereferencing it (see
// ImportHeldArray in src/exchange/bridge_internal.h): the last offsets and
// variadic sizes it needs are fetched with one batched D2H copy on
// options.queue (or on a queue created for it) and one synchronisation, and
// structural validation is limited to what those values and the headers
// allow (first offsets and values are the consumer's to check on its
// device). Counts kZeroCopyImports; the backends count the event wait.
//
// The result's buffers stay on the device and keep the foreign array alive
// (released once, when the last of them is gone). Its event is null when
// the host waited (the data is ready); after a device-side wait it is the
// producer's event (kept valid by the same foreign array), so that other
// queues can wait on it too.
Result<DeviceArray> ImportDeviceArray(ArrowDeviceArray* array, const ArrowSchema* schema,
                                      const ImportOptions& options = {});
Result<DeviceArray> ImportDeviceArray(ArrowDeviceArray* array, const TypePtr& type,
                                      const ImportOptions& options = {});

// ---- Guard mode ---------------------------------------------------------------

// A buffer found changed at release, or one that could not be verified.
struct GuardViolation {
  std::string column_path;  // "col 'x'", "col 'tags'.item", or "array" for a non-batch root
  int buffer_index = 0;     // index in the node's C Data layout
  std::string device;       // e.g. "opencl device 0"
  std::string message;      // what was found, in one sentence
};
// Every violation recorded since the start or the last Clear (each is also
// logged to stderr when found).
std::vector<GuardViolation> GuardViolations();
void ClearGuardViolations();

// ---- Leak check ---------------------------------------------------------------

// A device export whose consumer has not released it yet.
struct OutstandingExport {
  uint64_t id = 0;  // in order of export, from 1
  DeviceType device_type = DeviceType::kCpu;
  int64_t device_id = -1;
  std::string device_name;
  int64_t num_columns = 0;  // children of a struct (record batch) root, else 1
  int64_t bytes = 0;        // sum of the sizes of the exported buffers
  std::chrono::system_clock::time_point created;
};
std::vector<OutstandingExport> OutstandingExports();
// One line per outstanding export (device, columns, bytes, age), after a
// header line with the count; "no outstanding device exports" when none.
// With FERRY_LEAK_CHECK=1 in the environment, the report is printed to
// stderr at exit when exports are outstanding; with FERRY_LEAK_CHECK=abort
// the process then exits with status 1. (Checked at exit by a handler that
// the first device export installs.)
std::string LeakReport();

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

  // A reader over a fixed list of batches, handed out in order (and
  // forgotten once handed out). Invalid when a batch is null, has no
  // device, is on another device type, or does not match `schema`.
  static Result<std::shared_ptr<DeviceBatchReader>> FromBatches(SchemaPtr schema,
                                                                DeviceType device_type,
                                                                std::vector<DeviceBatch> batches);
};

// Exports `reader` as an ArrowDeviceArrayStream (every chunk of the
// stream's device type; a chunk on another device type is an error).
// The stream keeps the reader alive until released. get_next exports each
// batch as ExportDeviceArray does, or marks the end with out->array.release
// == NULL; a reader error, a chunk on another device type or with other
// column types becomes an errno code (EINVAL, EIO, ETIMEDOUT, ...) with
// get_last_error describing it until the next call. Callbacks are not
// thread-safe (as the C stream interface).
Status ExportDeviceBatchReader(std::shared_ptr<DeviceBatchReader> reader,
                               ArrowDeviceArrayStream* out);
// Takes ownership of `stream` (released when the reader is destroyed, also
// when this function fails); each chunk is imported as ImportDeviceArray
// does, with `options`, after checking that its device_type is the
// stream's. After an error or the end, Next() repeats that outcome without
// calling the producer again.
Result<std::shared_ptr<DeviceBatchReader>> ImportDeviceBatchReader(
    ArrowDeviceArrayStream* stream, const ImportOptions& options = {});

}  // namespace ferry::device
