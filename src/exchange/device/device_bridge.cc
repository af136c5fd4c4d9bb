#include "ferry/device/device_bridge.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "exchange/bridge_internal.h"
#include "exchange/device/backend.h"
#include "exchange/stream_internal.h"
#include "ferry/base/telemetry.h"
#include "ferry/exchange/bridge.h"

namespace ferry::device {
namespace {

using ::ferry::internal::FailStream;
using ::ferry::internal::SameColumnTypes;
using telemetry::Counter;

constexpr const char* kImportWhere = "ImportDeviceArray: ";

std::string DeviceLabel(DeviceType type, int64_t id) {
  std::string label = DeviceTypeName(type);
  if (id != -1) label += " device " + std::to_string(id);
  return label;
}

std::string DeviceLabel(const Device& device) { return DeviceLabel(device.type(), device.id()); }

int64_t NanosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start)
      .count();
}

// A host wait on a Ferry event, counted as an event wait.
Status WaitOnHost(Event& event, std::chrono::nanoseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  Status waited = event.Wait(timeout);
  internal::CountEventWait(NanosSince(start));
  return waited;
}

// Host memory that a failed device queue may still write into: it is kept
// (reachable, so not a leak) until the process ends instead of being freed
// under a copy that could not be drained.
void ParkUntilExit(std::shared_ptr<void> memory) {
  static std::mutex* mutex = new std::mutex();
  static auto* parked = new std::vector<std::shared_ptr<void>>();
  std::lock_guard<std::mutex> lock(*mutex);
  parked->push_back(std::move(memory));
}

// One contiguous range of device memory copied into host staging memory.
struct DeviceRange {
  const uint8_t* source;
  int64_t size;
  int64_t staging_offset;
};

// Copies every range into `staging` with copies enqueued back to back on one
// queue and a single synchronisation: `queue` when given (ordered after the
// device-side wait the caller put there), else a queue created for it.
Status CopyRangesToHost(Device* device, Queue* queue, const std::vector<DeviceRange>& ranges,
                        const std::shared_ptr<std::vector<uint8_t>>& staging) {
  // Destroying an owned queue drains it, so its copies cannot outlive
  // `staging`; a borrowed queue that fails to synchronise may still hold
  // copies into it, so the staging memory is parked instead of freed.
  QueuePtr owned;
  if (queue == nullptr) {
    FERRY_ASSIGN_OR_RAISE(owned, device->CreateQueue());
    queue = owned.get();
  }
  Status copied;
  for (const DeviceRange& range : ranges) {
    copied = queue->Copy(CopyDirection::kDeviceToHost, range.source,
                         staging->data() + range.staging_offset, range.size);
    if (!copied.ok()) break;
  }
  Status synced = queue->Synchronize();
  if (!synced.ok() && owned == nullptr) ParkUntilExit(staging);
  FERRY_RETURN_NOT_OK(copied);
  return synced;
}

// The values import must read from device memory (last offsets, variadic
// sizes), fetched in one batch: adjacent reads share one copy.
Status FetchDeviceValues(Device* device, Queue* queue,
                         const std::vector<ferry::internal::ValueRead>& reads,
                         std::vector<int64_t>* values) {
  std::vector<DeviceRange> ranges;
  int64_t total = 0;
  for (const auto& read : reads) {
    const auto* address = static_cast<const uint8_t*>(read.address);
    if (!ranges.empty() && ranges.back().source + ranges.back().size == address) {
      ranges.back().size += read.width;
    } else {
      ranges.push_back(DeviceRange{address, read.width, total});
    }
    total += read.width;
  }
  auto staging = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(total));
  FERRY_RETURN_NOT_OK(CopyRangesToHost(device, queue, ranges, staging)
                          .WithPrefix("reading " + std::to_string(total) +
                                      " bytes of offsets and sizes from " + DeviceLabel(*device) +
                                      ": "));
  values->clear();
  values->reserve(reads.size());
  int64_t position = 0;
  for (const auto& read : reads) {
    const uint8_t* bytes = staging->data() + position;
    if (read.width == 4) {
      int32_t value;
      std::memcpy(&value, bytes, sizeof(value));
      values->push_back(value);
    } else {
      int64_t value;
      std::memcpy(&value, bytes, sizeof(value));
      values->push_back(value);
    }
    position += read.width;
  }
  return Status::OK();
}

// The producer's event as seen by an importer after a device-side wait: it
// stays valid while the foreign array (which `keep_alive` holds) is alive.
class ForeignEvent final : public Event {
 public:
  ForeignEvent(Device* device, void* sync_event, std::shared_ptr<const void> keep_alive)
      : device_(device), sync_event_(sync_event), keep_alive_(std::move(keep_alive)) {}
  EventKind kind() const override { return device_->event_kind(); }
  void* sync_event() override { return sync_event_; }
  Status Wait(std::chrono::nanoseconds timeout) override {
    return device_->HostWait(sync_event_, timeout);
  }

 private:
  Device* device_;
  void* sync_event_;
  std::shared_ptr<const void> keep_alive_;
};

// ============================================================================
// Guard mode
// ============================================================================

struct GuardedBuffer {
  std::string path;
  int index;
  const uint8_t* data;
  int64_t size;
};

// Every non-empty buffer of the tree, with the path of its node. A struct
// root is a record batch: its children are columns ("col 'x'").
void CollectBuffers(const ArrayData& node, const std::string& path, bool children_are_columns,
                    std::vector<GuardedBuffer>* out) {
  for (size_t index = 0; index < node.buffers.size(); ++index) {
    const BufferPtr& buffer = node.buffers[index];
    if (buffer != nullptr && buffer->size() > 0) {
      out->push_back(GuardedBuffer{path, static_cast<int>(index), buffer->data(), buffer->size()});
    }
  }
  for (size_t index = 0; index < node.children.size(); ++index) {
    if (node.children[index] == nullptr) continue;
    const std::string name =
        index < node.type->children.size() ? node.type->children[index].name : "";
    const std::string child_path =
        children_are_columns
            ? "col " + ferry::QuoteName(name)
            : ferry::internal::ChildPath(path, *node.type, static_cast<int64_t>(index), name);
    CollectBuffers(*node.children[index], child_path, false, out);
  }
  if (node.dictionary != nullptr) {
    CollectBuffers(*node.dictionary, path + ".dictionary", false, out);
  }
}

// A 64-bit checksum (8 bytes per step, multiply-xorshift mixing): it only
// has to notice changes, not resist an adversary.
uint64_t Checksum(const uint8_t* data, int64_t size) {
  uint64_t hash = 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(size);
  int64_t position = 0;
  for (; position + 8 <= size; position += 8) {
    uint64_t word;
    std::memcpy(&word, data + position, sizeof(word));
    hash = (hash ^ word) * 0xFF51AFD7ED558CCDULL;
    hash ^= hash >> 32;
  }
  uint64_t tail = 0;
  if (position < size) std::memcpy(&tail, data + position, static_cast<size_t>(size - position));
  hash = (hash ^ tail) * 0xC4CEB9FE1A85EC53ULL;
  return hash ^ (hash >> 29);
}

// Checksums of `buffers`: in place for host-accessible memory, else after
// one batched D2H copy (counted).
Status ChecksumBuffers(Device* device, const std::vector<GuardedBuffer>& buffers,
                       std::vector<uint64_t>* sums) {
  sums->clear();
  if (device->host_accessible()) {
    for (const auto& buffer : buffers) sums->push_back(Checksum(buffer.data, buffer.size));
    return Status::OK();
  }
  std::vector<DeviceRange> ranges;
  int64_t total = 0;
  for (const auto& buffer : buffers) {
    ranges.push_back(DeviceRange{buffer.data, buffer.size, total});
    total += buffer.size;
  }
  auto staging = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(total));
  FERRY_RETURN_NOT_OK(CopyRangesToHost(device, nullptr, ranges, staging));
  for (const auto& range : ranges) {
    sums->push_back(Checksum(staging->data() + range.staging_offset, range.size));
  }
  return Status::OK();
}

struct GuardRegistry {
  std::mutex mutex;
  std::vector<GuardViolation> violations;
};

GuardRegistry& Guards() {
  static auto* registry = new GuardRegistry();  // never destroyed: used at exit
  return *registry;
}

void RecordViolation(GuardViolation violation) {
  std::fprintf(stderr, "ferry: guard: %s buffer %d on %s: %s\n", violation.column_path.c_str(),
               violation.buffer_index, violation.device.c_str(), violation.message.c_str());
  GuardRegistry& registry = Guards();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.violations.push_back(std::move(violation));
}

// ============================================================================
// Leak check
// ============================================================================

struct LeakRegistry {
  std::mutex mutex;
  uint64_t next_id = 1;
  std::map<uint64_t, OutstandingExport> outstanding;
};

LeakRegistry& Leaks() {
  static auto* registry = new LeakRegistry();  // never destroyed: read at exit
  return *registry;
}

void CheckLeaksAtExit() {
  const char* mode = std::getenv("FERRY_LEAK_CHECK");
  if (mode == nullptr || mode[0] == '\0' || std::strcmp(mode, "0") == 0) return;
  if (OutstandingExports().empty()) return;
  std::fprintf(stderr, "ferry: leak check: %s", LeakReport().c_str());
  if (std::strcmp(mode, "abort") == 0) {
    std::fflush(nullptr);
    std::_Exit(1);  // exit() may not be called again from an exit handler
  }
}

uint64_t RegisterOutstanding(const DeviceArray& array) {
  static std::once_flag installed;
  std::call_once(installed, [] { std::atexit(&CheckLeaksAtExit); });
  OutstandingExport entry;
  entry.device_type = array.device->type();
  entry.device_id = array.device->id();
  entry.device_name = array.device->name();
  entry.num_columns = array.data->type->id == TypeId::kStruct
                          ? static_cast<int64_t>(array.data->children.size())
                          : 1;
  std::vector<GuardedBuffer> buffers;
  CollectBuffers(*array.data, "array", false, &buffers);
  for (const auto& buffer : buffers) entry.bytes += buffer.size;
  entry.created = std::chrono::system_clock::now();
  LeakRegistry& registry = Leaks();
  std::lock_guard<std::mutex> lock(registry.mutex);
  const uint64_t id = registry.next_id++;
  entry.id = id;
  registry.outstanding.emplace(id, std::move(entry));
  return id;
}

void ForgetOutstanding(uint64_t id) {
  LeakRegistry& registry = Leaks();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.outstanding.erase(id);
}

// ============================================================================
// Leases
// ============================================================================

struct LeaseRegistry {
  std::mutex mutex;
  std::set<const ArrayData*> leased;
};

LeaseRegistry& Leases() {
  static auto* registry = new LeaseRegistry();
  return *registry;
}

// ============================================================================
// Export
// ============================================================================

// What the root of an exported ArrowDeviceArray owns beyond the C Data
// export: the event, the guard's checksums, the lease, the leak entry.
struct DeviceExport {
  ArrowArray inner{};  // the C Data export; its release frees Ferry's side
  EventPtr event;
  Device* device = nullptr;
  std::vector<GuardedBuffer> guarded;
  std::vector<uint64_t> checksums;
  std::shared_ptr<ExclusiveLease> lease;
  uint64_t leak_id = 0;

  DeviceExport() = default;
  DeviceExport(const DeviceExport&) = delete;
  DeviceExport& operator=(const DeviceExport&) = delete;
  ~DeviceExport() {
    if (inner.release != nullptr) inner.release(&inner);
  }
};

void VerifyGuard(const DeviceExport& state) {
  const std::string device = DeviceLabel(*state.device);
  std::vector<uint64_t> now;
  Status read = ChecksumBuffers(state.device, state.guarded, &now);
  if (!read.ok()) {
    for (const auto& buffer : state.guarded) {
      RecordViolation(GuardViolation{buffer.path, buffer.index, device,
                                     "could not be verified at release: " + read.message()});
    }
    return;
  }
  for (size_t i = 0; i < state.guarded.size(); ++i) {
    if (now[i] == state.checksums[i]) continue;
    const GuardedBuffer& buffer = state.guarded[i];
    char sums[80];
    std::snprintf(sums, sizeof(sums), "checksum %016" PRIx64 " at export, %016" PRIx64,
                  state.checksums[i], now[i]);
    RecordViolation(
        GuardViolation{buffer.path, buffer.index, device,
                       "changed between export and release (" + std::string(sums) +
                           " at release, " + std::to_string(buffer.size) +
                           " bytes): the consumer wrote into read-only exported memory"});
  }
}

// The root's release: verifies the guard, forgets the leak entry, then
// releases the C Data export (which counts kReleases). A second call finds
// release == NULL and counts kReleaseErrors, touching nothing else.
void ReleaseDeviceExport(ArrowArray* array) {
  if (array == nullptr || array->release == nullptr || array->private_data == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return;
  }
  auto* state = static_cast<DeviceExport*>(array->private_data);
  if (!state->guarded.empty()) VerifyGuard(*state);
  ForgetOutstanding(state->leak_id);
  delete state;
  array->private_data = nullptr;
  array->release = nullptr;
}

// ============================================================================
// Streams
// ============================================================================

class DeviceBatchListReader final : public DeviceBatchReader {
 public:
  DeviceBatchListReader(SchemaPtr schema, DeviceType device_type, std::vector<DeviceBatch> batches)
      : schema_(std::move(schema)), device_type_(device_type), batches_(std::move(batches)) {}
  SchemaPtr schema() const override { return schema_; }
  DeviceType device_type() const override { return device_type_; }
  Result<DeviceBatch> Next() override {
    if (next_index_ >= batches_.size()) return DeviceBatch{};
    return std::move(batches_[next_index_++]);
  }

 private:
  SchemaPtr schema_;
  DeviceType device_type_;
  std::vector<DeviceBatch> batches_;
  size_t next_index_ = 0;
};

struct ExportedDeviceStream {
  std::shared_ptr<DeviceBatchReader> reader;
  DeviceType device_type = DeviceType::kCpu;
  std::string last_error;
  int64_t batches_exported = 0;
};

Status ExportNextChunk(ExportedDeviceStream* state, ArrowDeviceArray* out) {
  FERRY_ASSIGN_OR_RAISE(DeviceBatch next, state->reader->Next());
  if (next.batch == nullptr) return Status::OK();  // the end: out stays released
  const std::string which = "chunk " + std::to_string(state->batches_exported);
  if (next.device == nullptr) return Status::Invalid(which + " has no device");
  if (next.device->type() != state->device_type) {
    return Status::Invalid(which + " is on " + DeviceLabel(*next.device) +
                           ", but the stream's device type is " +
                           DeviceTypeName(state->device_type));
  }
  const SchemaPtr schema = state->reader->schema();
  if (schema == nullptr || next.batch->schema() == nullptr ||
      !SameColumnTypes(*next.batch->schema(), *schema)) {
    return Status::Invalid(
        which + " does not match the stream's schema: stream has " +
        (schema ? schema->ToString() : std::string("no schema")) + ", chunk has " +
        (next.batch->schema() ? next.batch->schema()->ToString() : std::string("none")));
  }
  DeviceArray array{next.batch->ToStructArray(), next.device, next.event};
  FERRY_RETURN_NOT_OK(ExportDeviceArray(array, out).WithPrefix(which + ": "));
  ++state->batches_exported;
  telemetry::Add(Counter::kStreamBatchesExported);
  return Status::OK();
}

int DeviceStreamGetNext(ArrowDeviceArrayStream* stream, ArrowDeviceArray* out) {
  auto* state = ::ferry::internal::ExportedStreamState<ExportedDeviceStream>(stream);
  if (state == nullptr || out == nullptr) return EINVAL;
  state->last_error.clear();
  // Released until a chunk is exported: the end of the stream, or an error
  // that leaves the consumer nothing to release.
  std::memset(out, 0, sizeof(*out));
  try {
    Status exported = ExportNextChunk(state, out);
    return exported.ok() ? 0 : FailStream(state, exported);
  } catch (const std::exception& error) {
    return FailStream(state, Status::UnknownError(std::string("get_next threw: ") + error.what()));
  } catch (...) {
    return FailStream(state, Status::UnknownError("get_next threw a non-standard exception"));
  }
}

using ForeignDeviceStream = ::ferry::internal::ForeignStreamOwner<ArrowDeviceArrayStream>;

class ImportedDeviceStreamReader final : public DeviceBatchReader {
 public:
  ImportedDeviceStreamReader(std::unique_ptr<ForeignDeviceStream> stream, SchemaPtr schema,
                             DeviceType device_type, ImportOptions options)
      : stream_(std::move(stream)),
        schema_(std::move(schema)),
        struct_type_(struct_(schema_->fields)),
        device_type_(device_type),
        options_(options) {}

  SchemaPtr schema() const override { return schema_; }
  DeviceType device_type() const override { return device_type_; }

  Result<DeviceBatch> Next() override {
    if (!sticky_error_.ok()) return sticky_error_;
    if (finished_) return DeviceBatch{};
    Result<DeviceBatch> next = ReadChunk();
    if (!next.ok()) {
      sticky_error_ = next.status();
    } else if (next->batch == nullptr) {
      finished_ = true;
    } else {
      ++batches_imported_;
      telemetry::Add(Counter::kStreamBatchesImported);
    }
    return next;
  }

 private:
  Result<DeviceBatch> ReadChunk() {
    ArrowDeviceArrayStream* c_stream = stream_->get();
    ArrowDeviceArray chunk{};
    const int code = c_stream->get_next(c_stream, &chunk);
    if (code != 0) return stream_->ErrorFrom(code, "get_next");
    if (chunk.array.release == nullptr) return DeviceBatch{};
    const std::string which = "chunk " + std::to_string(batches_imported_) + " of the stream: ";
    if (chunk.device_type != static_cast<int32_t>(device_type_)) {
      const int32_t chunk_type = chunk.device_type;
      ferry::internal::ImportedArrayHolder discarded(&chunk.array);
      auto named = DeviceTypeFromCode(chunk_type);
      return Status::Invalid(
          which + "its device_type is " +
          (named.ok() ? std::string(DeviceTypeName(*named)) : std::to_string(chunk_type)) +
          ", but the stream's is " + DeviceTypeName(device_type_));
    }
    Result<DeviceArray> imported = ImportDeviceArray(&chunk, struct_type_, options_);
    if (!imported.ok()) return imported.status().WithPrefix(which);
    const ArrayData& data = *imported->data;
    // The top-level struct of a batch has no nulls; on memory the host may
    // not read only a known count (or no bitmap) can show that.
    int64_t top_level_nulls = data.null_count;
    if (data.buffers.empty() || data.buffers[0] == nullptr) {
      top_level_nulls = 0;
    } else if (top_level_nulls == kUnknownNullCount && imported->device->host_accessible()) {
      top_level_nulls = data.GetNullCount();
    }
    if (top_level_nulls != 0) {
      return Status::Invalid(which + "the top-level struct array has " +
                             (top_level_nulls < 0 ? std::string("an unknown number of")
                                                  : std::to_string(top_level_nulls)) +
                             " nulls; a record batch has none");
    }
    std::vector<ArrayDataPtr> columns;
    columns.reserve(data.children.size());
    for (const ArrayDataPtr& child : data.children) {
      const bool aligned = data.offset == 0 && child->length == data.length;
      columns.push_back(aligned ? child : Slice(child, data.offset, data.length));
    }
    Result<RecordBatchPtr> batch = RecordBatch::Make(schema_, data.length, std::move(columns));
    if (!batch.ok()) return batch.status().WithPrefix(which);
    return DeviceBatch{batch.MoveValueUnsafe(), imported->device, imported->event};
  }

  std::unique_ptr<ForeignDeviceStream> stream_;
  SchemaPtr schema_;
  TypePtr struct_type_;
  DeviceType device_type_;
  ImportOptions options_;
  Status sticky_error_;
  bool finished_ = false;
  int64_t batches_imported_ = 0;
};

}  // namespace

// ============================================================================
// Public API
// ============================================================================

Result<std::shared_ptr<ExclusiveLease>> ExclusiveLease::Grant(const DeviceArray& array) {
  if (array.data == nullptr) return Status::Invalid("ExclusiveLease: the array has no data");
  LeaseRegistry& registry = Leases();
  std::lock_guard<std::mutex> lock(registry.mutex);
  if (!registry.leased.insert(array.data.get()).second) {
    return Status::Invalid(
        "ExclusiveLease: the array is already leased; a second exclusive lease is refused "
        "until the first one ends");
  }
  return std::shared_ptr<ExclusiveLease>(new ExclusiveLease(array.data));
}

ExclusiveLease::~ExclusiveLease() {
  LeaseRegistry& registry = Leases();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.leased.erase(data_.get());
}

std::vector<GuardViolation> GuardViolations() {
  GuardRegistry& registry = Guards();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return registry.violations;
}

void ClearGuardViolations() {
  GuardRegistry& registry = Guards();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.violations.clear();
}

std::vector<OutstandingExport> OutstandingExports() {
  LeakRegistry& registry = Leaks();
  std::lock_guard<std::mutex> lock(registry.mutex);
  std::vector<OutstandingExport> out;
  out.reserve(registry.outstanding.size());
  for (const auto& [id, entry] : registry.outstanding) out.push_back(entry);
  return out;
}

std::string LeakReport() {
  const std::vector<OutstandingExport> outstanding = OutstandingExports();
  if (outstanding.empty()) return "no outstanding device exports\n";
  std::string report = std::to_string(outstanding.size()) + " device export" +
                       (outstanding.size() == 1 ? " was" : "s were") +
                       " never released by their consumer:\n";
  const auto now = std::chrono::system_clock::now();
  for (const OutstandingExport& entry : outstanding) {
    const double age_seconds = std::chrono::duration<double>(now - entry.created).count();
    char age[32];
    std::snprintf(age, sizeof(age), "%.3f s", age_seconds);
    report += "  export #" + std::to_string(entry.id) + ": " +
              DeviceLabel(entry.device_type, entry.device_id) + " (" + entry.device_name + "), " +
              std::to_string(entry.num_columns) +
              (entry.num_columns == 1 ? " column, " : " columns, ") + std::to_string(entry.bytes) +
              " bytes, outstanding for " + age + "\n";
  }
  return report;
}

Status ExportDeviceArray(const DeviceArray& array, ArrowDeviceArray* out, ArrowSchema* out_schema,
                         const ExportOptions& options) {
  if (out == nullptr) return Status::Invalid("ExportDeviceArray: output ArrowDeviceArray is NULL");
  std::memset(out, 0, sizeof(*out));
  if (array.data == nullptr || array.data->type == nullptr) {
    return Status::Invalid("ExportDeviceArray: the array has no data or no type");
  }
  if (array.device == nullptr) return Status::Invalid("ExportDeviceArray: the array has no device");
  Device* device = array.device;
  const std::string where = "ExportDeviceArray: " + DeviceLabel(*device) + ": ";
  if (array.event != nullptr && array.event->kind() != EventKind::kNone &&
      array.event->kind() != device->event_kind()) {
    return Status::Invalid(where + "the array's event is a " + EventKindName(array.event->kind()) +
                           " event, but the device's events are " +
                           EventKindName(device->event_kind()));
  }
  FERRY_RETURN_NOT_OK(device->CheckHealth().WithPrefix(where));

  auto state = std::make_unique<DeviceExport>();
  state->event = array.event;
  state->device = device;
  state->lease = options.lease;

  // Host-accessible memory may still be in the producer's hands until its
  // event completes, so export reads nothing from it while an event is set.
  ferry::internal::ArrayExportOptions memory;
  memory.host_readable =
      device->host_accessible() && (array.event == nullptr || array.event->sync_event() == nullptr);
  // The uploads read from host copies that live until they are synchronised
  // (a failed export frees its own memory at once).
  std::vector<std::vector<int64_t>> upload_sources;
  QueuePtr upload_queue;
  if (!device->host_accessible()) {
    memory.place_variadic_sizes = [&](const int64_t* sizes, int64_t count) -> Result<BufferPtr> {
      const int64_t bytes = count * static_cast<int64_t>(sizeof(int64_t));
      if (upload_queue == nullptr) {
        FERRY_ASSIGN_OR_RAISE(upload_queue, device->CreateQueue());
      }
      FERRY_ASSIGN_OR_RAISE(BufferPtr buffer, device->Allocate(bytes));
      upload_sources.emplace_back(sizes, sizes + count);
      FERRY_RETURN_NOT_OK(upload_queue->Copy(CopyDirection::kHostToDevice,
                                             upload_sources.back().data(), buffer->mutable_data(),
                                             bytes));
      return buffer;
    };
  }
  Status exported = ferry::internal::ExportArrayWith(array.data, &state->inner, memory);
  if (upload_queue != nullptr) {
    Status synced = upload_queue->Synchronize();
    if (exported.ok()) exported = synced;
    // A queue that could not drain still holds copies from upload_sources;
    // destroying it drains it (the queue is declared after the sources).
  }
  FERRY_RETURN_NOT_OK(exported.WithPrefix(where));

  const bool leased = options.lease != nullptr && options.lease->Covers(array);
  if (options.guard && !leased) {
    CollectBuffers(*array.data, "array", array.data->type->id == TypeId::kStruct, &state->guarded);
    if (array.event != nullptr) {
      FERRY_RETURN_NOT_OK(WaitOnHost(*array.event, options.timeout)
                              .WithPrefix(where + "guard: waiting for the array's event: "));
    }
    FERRY_RETURN_NOT_OK(
        ChecksumBuffers(device, state->guarded, &state->checksums).WithPrefix(where + "guard: "));
  }
  if (out_schema != nullptr) FERRY_RETURN_NOT_OK(ExportType(*array.data->type, out_schema));

  state->leak_id = RegisterOutstanding(array);
  out->array = state->inner;
  out->array.release = &ReleaseDeviceExport;
  out->array.private_data = state.release();
  out->device_id = device->id();
  out->device_type = static_cast<ArrowDeviceType>(device->type());
  out->sync_event = array.event != nullptr ? array.event->sync_event() : nullptr;
  telemetry::Add(Counter::kZeroCopyExports);
  return Status::OK();
}

Result<ExchangePlan> ExportDeviceArrayFor(const DeviceArray& array,
                                          const ConsumerCapabilities& consumer,
                                          ArrowDeviceArray* out, ArrowSchema* out_schema,
                                          const ExportOptions& options) {
  if (out == nullptr) {
    return Status::Invalid("ExportDeviceArrayFor: output ArrowDeviceArray is NULL");
  }
  std::memset(out, 0, sizeof(*out));
  if (array.data == nullptr || array.device == nullptr) {
    return Status::Invalid("ExportDeviceArrayFor: the array has no data or no device");
  }
  if (consumer.needs_write && consumer.exclusive_lease &&
      (options.lease == nullptr || !options.lease->Covers(array))) {
    return Status::Invalid(
        "ExportDeviceArrayFor: the consumer writes under an exclusive lease, but "
        "ExportOptions::lease holds no lease on this array (grant one with "
        "ExclusiveLease::Grant)");
  }
  ProducerInfo producer;
  producer.device_type = array.device->type();
  producer.device_id = array.device->id();
  producer.event_kind = array.event != nullptr ? array.event->kind() : EventKind::kNone;
  const ExchangePlan plan = Negotiate(producer, consumer);
  RecordPlan(plan);
  switch (plan.mode) {
    case ExchangeMode::kRefused:
      return Status::NotImplemented("ExportDeviceArrayFor: " + plan.explanation);
    case ExchangeMode::kZeroCopy:
    case ExchangeMode::kZeroCopyDeviceWait:
      FERRY_RETURN_NOT_OK(ExportDeviceArray(array, out, out_schema, options));
      return plan;
    case ExchangeMode::kCopy:
      break;
  }
  Result<Device*> target = DeviceRegistry::Global().Get(plan.target_type, plan.target_id);
  if (!target.ok()) {
    return target.status().WithPrefix("ExportDeviceArrayFor: " + plan.explanation +
                                      ": the target is not available: ");
  }
  Result<DeviceArray> copy = CopyArrayTo(array, *target, options.timeout);
  if (!copy.ok()) {
    return copy.status().WithPrefix("ExportDeviceArrayFor: " + plan.explanation + ": ");
  }
  // CopyArrayTo synchronised its queue, so an event of the source's kind on
  // a target without events (the CPU) is complete and can be dropped.
  if (copy->event != nullptr && copy->event->kind() != (*target)->event_kind()) {
    copy->event = nullptr;
  }
  ExportOptions copy_options = options;
  copy_options.lease = nullptr;  // the copy belongs to the consumer alone
  FERRY_RETURN_NOT_OK(ExportDeviceArray(*copy, out, out_schema, copy_options));
  return plan;
}

Result<DeviceArray> ImportDeviceArray(ArrowDeviceArray* array, const ArrowSchema* schema,
                                      const ImportOptions& options) {
  if (array == nullptr) {
    return Status::Invalid(std::string(kImportWhere) + "ArrowDeviceArray pointer is NULL");
  }
  if (array->array.release == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return Status::Invalid(std::string(kImportWhere) +
                           "ArrowDeviceArray is already released (array.release is NULL)");
  }
  Result<TypePtr> type = ImportType(schema);
  if (!type.ok()) {
    ferry::internal::ImportedArrayHolder discarded(&array->array);
    telemetry::Add(Counter::kValidationErrors);
    return type.status().WithPrefix(kImportWhere);
  }
  return ImportDeviceArray(array, *type, options);
}

Result<DeviceArray> ImportDeviceArray(ArrowDeviceArray* array, const TypePtr& type,
                                      const ImportOptions& options) {
  const std::string where = kImportWhere;
  if (array == nullptr) return Status::Invalid(where + "ArrowDeviceArray pointer is NULL");
  if (array->array.release == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return Status::Invalid(where + "ArrowDeviceArray is already released (array.release is NULL)");
  }
  // The foreign array is the holder's from here on: any return below that
  // does not hand out its buffers releases it.
  const int32_t type_code = array->device_type;
  const int64_t device_id = array->device_id;
  void* const sync_event = array->sync_event;
  int64_t reserved[3];
  std::memcpy(reserved, array->reserved, sizeof(reserved));
  auto holder = std::make_shared<ferry::internal::ImportedArrayHolder>(&array->array);
  auto reject = [&where](const std::string& rule) {
    telemetry::Add(Counter::kValidationErrors);
    return Status::Invalid(where + rule);
  };

  Result<DeviceType> device_type = DeviceTypeFromCode(type_code);
  if (!device_type.ok()) return reject("device_type: " + device_type.status().message());
  for (int word = 0; word < 3 && options.strict_reserved; ++word) {
    if (reserved[word] != 0) {
      return reject("reserved[" + std::to_string(word) + "] is " + std::to_string(reserved[word]) +
                    ", but the reserved words must be zero");
    }
  }
  if (type == nullptr) return reject("no type to import the array as");
  // Built only for error messages: the success path allocates no strings.
  auto label = [&] { return DeviceLabel(*device_type, device_id); };
  Result<Device*> found = DeviceRegistry::Global().Get(*device_type, device_id);
  if (!found.ok()) {
    return found.status().WithPrefix(where + "the array's device, " + label() +
                                     ", is not available: ");
  }
  Device* device = *found;
  if (Status health = device->CheckHealth(); !health.ok()) {
    return health.WithPrefix(where + label() + " is not usable: ");
  }
  if (sync_event != nullptr && device->event_kind() == EventKind::kNone) {
    return reject("sync_event is set, but " + label() +
                  " arrays carry no event (sync_event must be NULL)");
  }
  if (options.queue != nullptr) {
    Device* queue_device = options.queue->device();
    if (queue_device == nullptr || queue_device->type() != device->type() ||
        queue_device->id() != device->id()) {
      return Status::Invalid(
          where + "options.queue belongs to " +
          (queue_device ? DeviceLabel(*queue_device) : std::string("no device")) +
          ", but the array is on " + label());
    }
  }

  // Wait before anything is read. Host-accessible memory is read in place by
  // import itself, so the host waits for it whatever the options say.
  const bool device_side = options.queue != nullptr && !device->host_accessible();
  if (sync_event != nullptr) {
    if (device_side) {
      if (Status waited = options.queue->WaitEvent(sync_event); !waited.ok()) {
        return waited.WithPrefix(where + "device-side wait on the producer's sync event failed: ");
      }
    } else if (Status waited = device->HostWait(sync_event, options.timeout); !waited.ok()) {
      return waited.WithPrefix(where + "host wait on the producer's sync event of " + label() +
                               " failed: ");
    }
  }

  Queue* read_queue = device_side ? options.queue : nullptr;
  const ferry::internal::ValueReader device_reader = [device, read_queue](const auto& reads,
                                                                          auto* values) {
    return FetchDeviceValues(device, read_queue, reads, values);
  };
  Result<ArrayDataPtr> data = ferry::internal::ImportHeldArray(
      holder, type, device->host_accessible() ? nullptr : &device_reader);
  if (!data.ok()) return data.status().WithPrefix(where + label() + ": ");
  DeviceArray out{data.MoveValueUnsafe(), device, nullptr};
  if (sync_event != nullptr && device_side) {
    out.event = std::make_shared<ForeignEvent>(device, sync_event, holder);
  }
  return out;
}

Result<std::shared_ptr<DeviceBatchReader>> DeviceBatchReader::FromBatches(
    SchemaPtr schema, DeviceType device_type, std::vector<DeviceBatch> batches) {
  if (schema == nullptr) return Status::Invalid("DeviceBatchReader::FromBatches: schema is null");
  for (size_t i = 0; i < batches.size(); ++i) {
    const std::string which = "DeviceBatchReader::FromBatches: batch " + std::to_string(i);
    const DeviceBatch& batch = batches[i];
    if (batch.batch == nullptr) return Status::Invalid(which + " is null");
    if (batch.device == nullptr) return Status::Invalid(which + " has no device");
    if (batch.device->type() != device_type) {
      return Status::Invalid(which + " is on " + DeviceLabel(*batch.device) +
                             ", but the reader's device type is " + DeviceTypeName(device_type));
    }
    if (batch.batch->schema() == nullptr ||
        !batch.batch->schema()->Equals(*schema, /*check_metadata=*/false)) {
      return Status::Invalid(
          which + " does not match the reader's schema: expected " + schema->ToString() + ", got " +
          (batch.batch->schema() ? batch.batch->schema()->ToString() : std::string("none")));
    }
  }
  return std::shared_ptr<DeviceBatchReader>(
      std::make_shared<DeviceBatchListReader>(std::move(schema), device_type, std::move(batches)));
}

Status ExportDeviceBatchReader(std::shared_ptr<DeviceBatchReader> reader,
                               ArrowDeviceArrayStream* out) {
  if (out == nullptr) return Status::Invalid("ExportDeviceBatchReader: output stream is NULL");
  if (reader == nullptr) return Status::Invalid("ExportDeviceBatchReader: reader is null");
  auto state = std::make_unique<ExportedDeviceStream>();
  state->device_type = reader->device_type();
  state->reader = std::move(reader);
  std::memset(out, 0, sizeof(*out));
  out->device_type = static_cast<ArrowDeviceType>(state->device_type);
  out->get_schema =
      &::ferry::internal::ExportedStreamGetSchema<ExportedDeviceStream, ArrowDeviceArrayStream>;
  out->get_next = &DeviceStreamGetNext;
  out->get_last_error =
      &::ferry::internal::ExportedStreamGetLastError<ExportedDeviceStream, ArrowDeviceArrayStream>;
  out->release =
      &::ferry::internal::ReleaseExportedStream<ExportedDeviceStream, ArrowDeviceArrayStream>;
  out->private_data = state.release();
  return Status::OK();
}

Result<std::shared_ptr<DeviceBatchReader>> ImportDeviceBatchReader(ArrowDeviceArrayStream* stream,
                                                                   const ImportOptions& options) {
  const std::string where = "ImportDeviceBatchReader: ";
  if (stream == nullptr) return Status::Invalid(where + "stream is NULL");
  if (stream->release == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return Status::Invalid(where + "stream is already released (release is NULL)");
  }
  auto foreign = std::make_unique<ForeignDeviceStream>(stream, "foreign device stream");
  ArrowDeviceArrayStream* c_stream = foreign->get();
  Result<DeviceType> device_type = DeviceTypeFromCode(c_stream->device_type);
  if (!device_type.ok()) return device_type.status().WithPrefix(where + "device_type: ");
  if (c_stream->get_schema == nullptr || c_stream->get_next == nullptr) {
    return Status::Invalid(where + "stream has a NULL get_schema or get_next");
  }
  ArrowSchema c_schema{};
  const int code = c_stream->get_schema(c_stream, &c_schema);
  if (code != 0) return foreign->ErrorFrom(code, "get_schema").WithPrefix(where);
  if (c_schema.release == nullptr) {
    return Status::Invalid(where + "get_schema succeeded but gave a released schema");
  }
  Result<SchemaPtr> schema = ImportSchema(&c_schema);
  c_schema.release(&c_schema);
  telemetry::Add(Counter::kForeignReleases);
  if (!schema.ok()) return schema.status().WithPrefix(where);
  return std::shared_ptr<DeviceBatchReader>(std::make_shared<ImportedDeviceStreamReader>(
      std::move(foreign), schema.MoveValueUnsafe(), *device_type, options));
}

}  // namespace ferry::device
