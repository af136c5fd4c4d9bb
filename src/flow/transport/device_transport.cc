// Device batches across processes (see device_transport.h).

#include "flow/transport/device_transport.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/device/negotiate.h"
#include "flow/transport/batch_header.h"
#include "flow/transport/schema_codec.h"

namespace ferry::flow::internal {
namespace {

using device::Device;
using device::EventPtr;
using device::IpcEventHandle;
using device::IpcMemoryHandle;
using device::Queue;

struct EnvelopePrefix {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  int32_t device_type;
  uint32_t allocation_count;
  int64_t device_id;
  uint64_t schema_bytes;
  uint64_t header_bytes;
  uint64_t reserved[3];
};
static_assert(sizeof(EnvelopePrefix) == 64);

struct AllocationRecord {
  uint8_t handle[IpcMemoryHandle::kBytes];
  int64_t allocation_size;
  uint64_t reserved;
};
static_assert(sizeof(AllocationRecord) == 80);

constexpr uint16_t kHasEvent = 1;
constexpr uint64_t kFixedBytes = sizeof(EnvelopePrefix) + IpcEventHandle::kBytes;
constexpr uint32_t kMaxAllocations = 1u << 20;
constexpr size_t kSchemaCacheSize = 16;
constexpr size_t kMaxOwnersPerAllocation = 8;

constexpr std::string_view kCarrierKey = "ferry.transport";
constexpr std::string_view kCarrierValue = "device_message";
constexpr std::string_view kCarrierField = "ferry.device_message";

constexpr uint64_t PadTo8(uint64_t size) { return (size + 7) & ~uint64_t{7}; }

std::atomic<int64_t> g_memory_exports{0};
std::atomic<int64_t> g_memory_opens{0};
std::atomic<int64_t> g_event_exports{0};
std::atomic<int64_t> g_event_opens{0};

const SchemaPtr& CarrierSchema() {
  static const SchemaPtr schema = [] {
    auto carrier = std::make_shared<Schema>();
    carrier->fields.push_back(field(std::string(kCarrierField), uint8(), /*nullable=*/false));
    carrier->metadata.emplace_back(kCarrierKey, kCarrierValue);
    return SchemaPtr(std::move(carrier));
  }();
  return schema;
}

// Calls `visit` for every present buffer of the tree, in wire record order.
template <typename Visit>
Status ForEachBuffer(const ArrayData& data, Visit&& visit) {
  for (const BufferPtr& buffer : data.buffers) {
    if (buffer != nullptr) FERRY_RETURN_NOT_OK(visit(*buffer));
  }
  for (const ArrayDataPtr& child : data.children) {
    if (child != nullptr) FERRY_RETURN_NOT_OK(ForEachBuffer(*child, visit));
  }
  if (data.dictionary != nullptr) FERRY_RETURN_NOT_OK(ForEachBuffer(*data.dictionary, visit));
  return Status::OK();
}

// What the carrier's buffer keeps alive in the publisher until every
// subscriber dropped the message.
struct SentDeviceMessage {
  BufferPtr envelope;
  RecordBatchPtr batch;
  EventPtr batch_event;
  EventPtr ipc_event;
};

// One allocation of this message's table.
struct TableEntry {
  uintptr_t base = 0;
  IpcMemoryHandle handle;  // offset 0, size = allocation_size
};

}  // namespace

// ---- Sending ---------------------------------------------------------------------

struct DeviceSender::State {
  // An allocation exported before. Valid while one of the buffers that
  // pointed into it is alive: then the allocation is too, and its handle is
  // the same. Once all are gone the address may be reused for other memory.
  struct Exported {
    Device* device = nullptr;
    int64_t size = 0;
    IpcMemoryHandle handle;
    std::vector<std::weak_ptr<const void>> owners;

    bool Alive() {
      owners.erase(
          std::remove_if(owners.begin(), owners.end(),
                         [](const std::weak_ptr<const void>& owner) { return owner.expired(); }),
          owners.end());
      return !owners.empty();
    }
    void Hold(const std::shared_ptr<const void>& owner) {
      if (owner == nullptr) return;
      for (const auto& held : owners) {
        if (!held.owner_before(owner) && !owner.owner_before(held)) return;
      }
      if (owners.size() >= kMaxOwnersPerAllocation) owners.erase(owners.begin());
      owners.push_back(owner);
    }
  };

  std::mutex mutex;
  std::map<uintptr_t, Exported> exported;  // by allocation base
  SchemaPtr schema;
  std::string encoded_schema;
  std::map<Device*, device::QueuePtr> queues;

  // The allocation holding `buffer`, from the cache or exported now.
  Result<TableEntry> Find(Device* device, const Buffer& buffer) {
    const auto address = reinterpret_cast<uintptr_t>(buffer.data());
    auto found = exported.upper_bound(address);
    if (found != exported.begin()) {
      --found;
      Exported& entry = found->second;
      const uintptr_t end = found->first + static_cast<uint64_t>(entry.size);
      if (entry.device == device && address < end &&
          static_cast<uint64_t>(buffer.size()) <= end - address && entry.Alive()) {
        entry.Hold(buffer.owner());
        return TableEntry{found->first, entry.handle};
      }
    }
    FERRY_ASSIGN_OR_RAISE(IpcMemoryHandle handle,
                          device->ExportIpcMemory(buffer.data(), buffer.size()));
    g_memory_exports.fetch_add(1, std::memory_order_relaxed);
    const uintptr_t base = address - static_cast<uint64_t>(handle.offset);
    handle.offset = 0;
    handle.size = handle.allocation_size;
    // Whatever was cached over this range described freed memory.
    auto stale = exported.lower_bound(base);
    if (stale != exported.begin()) {
      auto before = std::prev(stale);
      if (before->first + static_cast<uint64_t>(before->second.size) > base) stale = before;
    }
    const uintptr_t end = base + static_cast<uint64_t>(handle.allocation_size);
    while (stale != exported.end() && stale->first < end) stale = exported.erase(stale);
    Exported& entry = exported[base];
    entry.device = device;
    entry.size = handle.allocation_size;
    entry.handle = handle;
    entry.Hold(buffer.owner());
    return TableEntry{base, handle};
  }

  void SweepExpired() {
    for (auto entry = exported.begin(); entry != exported.end();) {
      entry = entry->second.Alive() ? std::next(entry) : exported.erase(entry);
    }
  }

  Result<Queue*> QueueFor(Device* device) {
    device::QueuePtr& queue = queues[device];
    if (queue == nullptr) {
      Result<device::QueuePtr> created = device->CreateQueue();
      if (!created.ok()) {
        queues.erase(device);
        return created.status();
      }
      queue = std::move(*created);
    }
    return queue.get();
  }
};

DeviceSender::DeviceSender() : state_(std::make_unique<State>()) {}
DeviceSender::~DeviceSender() = default;

namespace {

// Devices without IPC: one counted copy of the whole batch into the
// publisher's loan pool, then an ordinary zero-copy Send.
Status SendCopied(Publisher& publisher, const device::DeviceBatch& batch, const Metadata& metadata,
                  std::chrono::nanoseconds timeout, const std::string& where) {
  Device* device = batch.device;
  device::ProducerInfo producer;
  producer.device_type = device->type();
  producer.device_id = device->id();
  producer.event_kind = batch.event != nullptr ? batch.event->kind() : device::EventKind::kNone;
  producer.crosses_process = true;
  const device::ExchangePlan plan = device::Negotiate(producer, device::ConsumerCapabilities{});
  if (plan.mode != device::ExchangeMode::kCopy || plan.target_type != device::DeviceType::kCpu) {
    device::RecordPlan(plan);
    return Status::NotImplemented(where + plan.explanation);
  }
  Device* cpu = device::DeviceRegistry::Global().cpu();
  // The columns as one struct tree: one event wait and one synchronisation.
  const SchemaPtr& schema = batch.batch->schema();
  auto root = std::make_shared<ArrayData>();
  root->type = struct_(schema->fields);
  root->length = batch.batch->num_rows();
  root->null_count = 0;
  root->buffers = {nullptr};
  root->children = batch.batch->columns();
  Result<device::DeviceArray> copied = device::CopyArrayTo(
      device::DeviceArray{root, device, batch.event}, cpu, timeout, nullptr, publisher.LoanPool());
  if (!copied.ok()) return copied.status().WithPrefix(where + "copy to shared memory failed: ");
  device::RecordPlan(plan);
  FERRY_ASSIGN_OR_RAISE(RecordBatchPtr host,
                        RecordBatch::Make(schema, batch.batch->num_rows(), copied->data->children));
  return publisher.Send(*host, metadata);
}

}  // namespace

Status DeviceSender::Send(Publisher& publisher, const device::DeviceBatch& batch,
                          const Metadata& metadata, std::chrono::nanoseconds timeout) {
  const std::string where = "cannot SendDevice on channel '" + publisher.name() + "': ";
  if (batch.batch == nullptr || batch.device == nullptr || batch.batch->schema() == nullptr) {
    return Status::Invalid(where + "the batch, its schema or its device is missing");
  }
  Device* device = batch.device;
  if (device->type() == device::DeviceType::kCpu) {
    return publisher.SendCopy(*batch.batch, metadata);
  }
  if (batch.event != nullptr && batch.event->kind() != device->event_kind()) {
    return Status::Invalid(where + "the batch's event is a " + EventKindName(batch.event->kind()) +
                           " event, but " + device->name() + " uses " +
                           EventKindName(device->event_kind()) + " events");
  }
  if (!device->SupportsIpc()) return SendCopied(publisher, batch, metadata, timeout, where);

  const RecordBatch& payload = *batch.batch;
  std::vector<TableEntry> table;
  std::map<uintptr_t, uint32_t> indices;  // allocation base -> table index
  std::vector<uint32_t> buffer_indices;   // per present non-empty buffer, in record order
  std::pair<EventPtr, IpcEventHandle> ipc_event;
  std::string encoded_schema;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->SweepExpired();
    const SchemaPtr& schema = payload.schema();
    if (state_->schema == nullptr ||
        (state_->schema != schema && !state_->schema->Equals(*schema))) {
      FERRY_ASSIGN_OR_RAISE(state_->encoded_schema, wire::EncodeSchema(*schema));
    }
    state_->schema = schema;
    encoded_schema = state_->encoded_schema;
    for (size_t column = 0; column < payload.columns().size(); ++column) {
      if (payload.columns()[column] == nullptr) continue;  // EncodeHeader names the error
      Status collected = ForEachBuffer(*payload.columns()[column], [&](const Buffer& buffer) {
        if (buffer.size() == 0) return Status::OK();
        FERRY_ASSIGN_OR_RAISE(TableEntry entry, state_->Find(device, buffer));
        auto [position, added] = indices.emplace(entry.base, static_cast<uint32_t>(table.size()));
        if (added) table.push_back(entry);
        buffer_indices.push_back(position->second);
        return Status::OK();
      });
      if (!collected.ok()) {
        return collected.WithPrefix(where + "column '" + payload.schema()->fields[column].name +
                                    "': ");
      }
    }
    if (table.size() > kMaxAllocations) {
      return Status::Invalid(where + "the batch spans " + std::to_string(table.size()) +
                             " allocations, more than " + std::to_string(kMaxAllocations));
    }
    if (batch.event != nullptr) {
      FERRY_ASSIGN_OR_RAISE(Queue * queue, state_->QueueFor(device));
      Result<std::pair<EventPtr, IpcEventHandle>> exported =
          device->ExportIpcEvent(queue, batch.event);
      if (!exported.ok()) return exported.status().WithPrefix(where);
      ipc_event = std::move(*exported);
      g_event_exports.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // The header's records: the same buffers in the same order as above.
  size_t next_buffer = 0;
  auto locate = [&](const Buffer& buffer) -> Result<wire::BufferLocation> {
    wire::BufferLocation location;
    location.length = static_cast<uint64_t>(buffer.size());
    if (buffer.size() == 0) {
      location.segment_id = kEmptyAllocation;
      return location;
    }
    if (next_buffer >= buffer_indices.size()) {
      return Status::UnknownError("internal: the header has more buffers than were exported");
    }
    const uint32_t index = buffer_indices[next_buffer++];
    location.segment_id = index;
    location.offset = reinterpret_cast<uintptr_t>(buffer.data()) - table[index].base;
    return location;
  };
  FERRY_ASSIGN_OR_RAISE(const int64_t header_bytes, wire::EncodedHeaderSize(payload, {}));
  const uint64_t schema_padded = PadTo8(encoded_schema.size());
  const uint64_t records_bytes = sizeof(AllocationRecord) * table.size();
  const uint64_t total =
      kFixedBytes + records_bytes + schema_padded + static_cast<uint64_t>(header_bytes);
  FERRY_ASSIGN_OR_RAISE(BufferPtr envelope,
                        Buffer::Allocate(static_cast<int64_t>(total), publisher.LoanPool()));
  uint8_t* out = envelope->mutable_data();
  EnvelopePrefix prefix{};
  prefix.magic = kDeviceEnvelopeMagic;
  prefix.version = kDeviceEnvelopeVersion;
  prefix.flags = ipc_event.first != nullptr ? kHasEvent : 0;
  prefix.device_type = static_cast<int32_t>(device->type());
  prefix.allocation_count = static_cast<uint32_t>(table.size());
  prefix.device_id = device->id();
  prefix.schema_bytes = encoded_schema.size();
  prefix.header_bytes = static_cast<uint64_t>(header_bytes);
  std::memcpy(out, &prefix, sizeof(prefix));
  std::memcpy(out + sizeof(prefix), ipc_event.second.bytes.data(), IpcEventHandle::kBytes);
  uint64_t cursor = kFixedBytes;
  for (const TableEntry& entry : table) {
    AllocationRecord record{};
    std::memcpy(record.handle, entry.handle.bytes.data(), IpcMemoryHandle::kBytes);
    record.allocation_size = entry.handle.allocation_size;
    std::memcpy(out + cursor, &record, sizeof(record));
    cursor += sizeof(record);
  }
  std::copy_n(encoded_schema.data(), encoded_schema.size(), out + cursor);
  std::memset(out + cursor + encoded_schema.size(), 0, schema_padded - encoded_schema.size());
  cursor += schema_padded;
  Result<int64_t> written =
      wire::EncodeHeader(payload, {}, locate, out + cursor, static_cast<int64_t>(header_bytes));
  if (!written.ok()) return written.status().WithPrefix(where);

  auto keep = std::make_shared<SentDeviceMessage>();
  keep->envelope = envelope;
  keep->batch = batch.batch;
  keep->batch_event = batch.event;
  keep->ipc_event = std::move(ipc_event.first);
  auto carrier_buffer =
      std::make_shared<Buffer>(envelope->data(), static_cast<int64_t>(total), std::move(keep));
  auto column = std::make_shared<ArrayData>();
  column->type = CarrierSchema()->fields[0].type;
  column->length = static_cast<int64_t>(total);
  column->null_count = 0;
  column->buffers = {nullptr, std::move(carrier_buffer)};
  FERRY_ASSIGN_OR_RAISE(RecordBatchPtr carrier,
                        RecordBatch::Make(CarrierSchema(), column->length, {column}));
  return publisher.Send(*carrier, metadata);
}

// ---- Receiving ---------------------------------------------------------------------

namespace {

// One allocation opened in this process; closed when the last message that
// points into it is gone.
struct OpenedAllocation {
  BufferPtr memory;
};

struct ReceiverCaches {
  std::mutex mutex;
  // Key: device type, device id, handle bytes, allocation size.
  std::map<std::string, std::weak_ptr<OpenedAllocation>> allocations;
  std::vector<std::pair<std::string, SchemaPtr>> schemas;  // newest last
};

ReceiverCaches& Caches() {
  static auto* caches = new ReceiverCaches();  // never destroyed: batches outlive main
  return *caches;
}

// A received device message. Its release order matters: the event and the
// opened memory are closed before the carrier (and with it the drop token)
// goes, so the publisher frees nothing this process still has open.
struct ReceivedDeviceMessage {
  ~ReceivedDeviceMessage() {
    event.reset();
    allocations.clear();
    carrier.reset();
  }
  RecordBatchPtr carrier;
  std::vector<std::shared_ptr<OpenedAllocation>> allocations;
  EventPtr event;
};

bool IsCarrier(const Schema& schema) {
  for (const auto& [key, value] : schema.metadata) {
    if (key == kCarrierKey) return value == kCarrierValue;
  }
  return false;
}

Result<SchemaPtr> DecodeCachedSchema(const uint8_t* data, uint64_t size) {
  ReceiverCaches& caches = Caches();
  const std::string_view encoded(reinterpret_cast<const char*>(data), size);
  {
    std::lock_guard<std::mutex> lock(caches.mutex);
    for (const auto& [bytes, schema] : caches.schemas) {
      if (bytes == encoded) return schema;
    }
  }
  FERRY_ASSIGN_OR_RAISE(SchemaPtr schema, wire::DecodeSchema(data, static_cast<int64_t>(size)));
  std::lock_guard<std::mutex> lock(caches.mutex);
  if (caches.schemas.size() >= kSchemaCacheSize) caches.schemas.erase(caches.schemas.begin());
  caches.schemas.emplace_back(std::string(encoded), schema);
  return schema;
}

Result<std::shared_ptr<OpenedAllocation>> OpenAllocation(Device* device,
                                                         const AllocationRecord& record) {
  std::string key(reinterpret_cast<const char*>(record.handle), IpcMemoryHandle::kBytes);
  const int32_t type = static_cast<int32_t>(device->type());
  const int64_t id = device->id();
  key.append(reinterpret_cast<const char*>(&type), sizeof(type));
  key.append(reinterpret_cast<const char*>(&id), sizeof(id));
  key.append(reinterpret_cast<const char*>(&record.allocation_size), sizeof(int64_t));
  ReceiverCaches& caches = Caches();
  std::lock_guard<std::mutex> lock(caches.mutex);
  auto found = caches.allocations.find(key);
  if (found != caches.allocations.end()) {
    if (auto opened = found->second.lock()) return opened;
  }
  IpcMemoryHandle handle;
  std::memcpy(handle.bytes.data(), record.handle, IpcMemoryHandle::kBytes);
  handle.allocation_size = record.allocation_size;
  handle.offset = 0;
  handle.size = record.allocation_size;
  FERRY_ASSIGN_OR_RAISE(BufferPtr memory, device->OpenIpcMemory(handle));
  g_memory_opens.fetch_add(1, std::memory_order_relaxed);
  auto opened = std::make_shared<OpenedAllocation>();
  opened->memory = std::move(memory);
  // Forget closed allocations while we are here (only on a miss).
  for (auto entry = caches.allocations.begin(); entry != caches.allocations.end();) {
    entry = entry->second.expired() ? caches.allocations.erase(entry) : std::next(entry);
  }
  caches.allocations[key] = opened;
  return opened;
}

}  // namespace

Status ResolveDeviceMessage(Message* message) {
  if (message->batch == nullptr || message->batch->schema() == nullptr ||
      !IsCarrier(*message->batch->schema())) {
    return Status::OK();
  }
  auto fail = [](const std::string& rule) { return Status::Invalid("device message: " + rule); };
  const RecordBatch& carrier = *message->batch;
  if (carrier.num_columns() != 1 || carrier.schema()->fields[0].name != kCarrierField ||
      carrier.column(0)->type->id != TypeId::kUInt8 || carrier.column(0)->buffers.size() != 2 ||
      carrier.column(0)->buffers[1] == nullptr) {
    return fail("the carrier batch does not have the device envelope's shape");
  }
  // A private copy: the publisher's memory is not ours to trust twice.
  const ArrayData& column = *carrier.column(0);
  const auto size = static_cast<uint64_t>(column.length);
  if (size < kFixedBytes) return fail("the envelope is truncated");
  std::vector<uint8_t> envelope(size);
  std::memcpy(envelope.data(), column.buffers[1]->data() + column.offset, size);

  EnvelopePrefix prefix{};
  std::memcpy(&prefix, envelope.data(), sizeof(prefix));
  if (prefix.magic != kDeviceEnvelopeMagic) return fail("bad magic");
  if (prefix.version != kDeviceEnvelopeVersion) {
    return fail("unsupported version " + std::to_string(prefix.version));
  }
  if ((prefix.flags & ~kHasEvent) != 0 || prefix.reserved[0] != 0 || prefix.reserved[1] != 0 ||
      prefix.reserved[2] != 0) {
    return fail("unknown flags or reserved bytes set");
  }
  if (prefix.allocation_count > kMaxAllocations ||
      prefix.schema_bytes > static_cast<uint64_t>(wire::kMaxEncodedSize) ||
      prefix.header_bytes > static_cast<uint64_t>(wire::kMaxEncodedSize)) {
    return fail("section sizes out of range");
  }
  // Each term is bounded above, so the sum cannot overflow.
  const uint64_t records_bytes = uint64_t{prefix.allocation_count} * sizeof(AllocationRecord);
  const uint64_t schema_offset = kFixedBytes + records_bytes;
  const uint64_t header_offset = schema_offset + PadTo8(prefix.schema_bytes);
  if (header_offset + prefix.header_bytes != size) {
    return fail("the envelope has " + std::to_string(size) + " bytes but its sections need " +
                std::to_string(header_offset + prefix.header_bytes));
  }
  Result<device::DeviceType> type = device::DeviceTypeFromCode(prefix.device_type);
  if (!type.ok()) return type.status().WithPrefix("device message: ");
  const std::string label =
      std::string(device::DeviceTypeName(*type)) + " device " + std::to_string(prefix.device_id);
  Result<Device*> found = device::DeviceRegistry::Global().Get(*type, prefix.device_id);
  if (!found.ok()) {
    return found.status().WithPrefix("device message on " + label + ", not available here: ");
  }
  Device* device = *found;
  if (!device->SupportsIpc()) {
    return Status::NotImplemented("device message on " + label + ": " + device->name() +
                                  " cannot open interprocess handles in this process");
  }
  Result<SchemaPtr> decoded_schema =
      DecodeCachedSchema(envelope.data() + schema_offset, prefix.schema_bytes);
  if (!decoded_schema.ok()) return decoded_schema.status().WithPrefix("device message: ");
  const SchemaPtr& schema = *decoded_schema;

  auto state = std::make_shared<ReceivedDeviceMessage>();
  state->carrier = std::move(message->batch);
  state->allocations.reserve(prefix.allocation_count);
  for (uint32_t index = 0; index < prefix.allocation_count; ++index) {
    AllocationRecord record{};
    std::memcpy(&record, envelope.data() + kFixedBytes + sizeof(AllocationRecord) * index,
                sizeof(record));
    if (record.reserved != 0 || record.allocation_size <= 0) {
      return fail("allocation " + std::to_string(index) + " is malformed");
    }
    Result<std::shared_ptr<OpenedAllocation>> opened = OpenAllocation(device, record);
    if (!opened.ok()) {
      return opened.status().WithPrefix("device message: allocation " + std::to_string(index) +
                                        ": ");
    }
    state->allocations.push_back(std::move(*opened));
  }
  if ((prefix.flags & kHasEvent) != 0) {
    IpcEventHandle handle;
    std::memcpy(handle.bytes.data(), envelope.data() + sizeof(EnvelopePrefix),
                IpcEventHandle::kBytes);
    Result<EventPtr> event = device->OpenIpcEvent(handle);
    if (!event.ok()) return event.status().WithPrefix("device message: event: ");
    g_event_opens.fetch_add(1, std::memory_order_relaxed);
    state->event = std::move(*event);
  }

  alignas(kBufferAlignment) static const uint8_t kEmpty[kBufferAlignment] = {};
  auto lookup = [&](uint32_t segment_id) -> Result<wire::SegmentView> {
    wire::SegmentView view;
    if (segment_id == kEmptyAllocation) {
      view.data = kEmpty;
      return view;
    }
    if (segment_id >= state->allocations.size()) {
      return Status::Invalid("no allocation " + std::to_string(segment_id) + " in the envelope");
    }
    const Buffer& memory = *state->allocations[segment_id]->memory;
    view.data = memory.data();
    view.size = memory.size();
    return view;
  };
  wire::DecodeOptions options;
  options.payload_on_device = true;
  Result<RecordBatchPtr> batch =
      wire::DecodeHeader(envelope.data() + header_offset, static_cast<int64_t>(prefix.header_bytes),
                         schema, lookup, std::shared_ptr<const void>(state), nullptr, options);
  if (!batch.ok()) return batch.status().WithPrefix("device message: ");
  device::DeviceBatch received;
  received.batch = std::move(*batch);
  received.device = device;
  if (state->event != nullptr) received.event = EventPtr(state, state->event.get());
  message->device_batch = std::move(received);
  return Status::OK();
}

DeviceIpcCounts GetDeviceIpcCounts() {
  DeviceIpcCounts counts;
  counts.memory_exports = g_memory_exports.load(std::memory_order_relaxed);
  counts.memory_opens = g_memory_opens.load(std::memory_order_relaxed);
  counts.event_exports = g_event_exports.load(std::memory_order_relaxed);
  counts.event_opens = g_event_opens.load(std::memory_order_relaxed);
  return counts;
}

}  // namespace ferry::flow::internal
