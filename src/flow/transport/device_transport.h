// Device batches across processes: Publisher::SendDevice and the subscriber
// side that fills Message::device_batch.
//
// A device whose backend can hand memory to another process (CUDA device
// memory: Device::SupportsIpc) sends its batch as IPC handles, and nothing
// is copied. The message then is an ordinary transport message whose batch
// is a *carrier*: one non-nullable uint8 column "ferry.device_message"
// holding a device envelope, with schema metadata
// {"ferry.transport": "device_message"} (a reserved key). Carrying the
// envelope as a message reuses everything the transport does for host
// batches: queues, overflow policies, history, drop tokens, dead-peer
// reclaim. The carrier's buffer keeps the device batch and its IPC event
// alive in the publisher until every subscriber dropped the message.
//
// Envelope (native byte order, every part 8-byte aligned):
//   prefix, 64 bytes: u32 magic "FRYD", u16 version (1), u16 flags (bit 0:
//     an event follows), i32 device_type, u32 allocation_count, i64
//     device_id, u64 schema_bytes, u64 header_bytes, u64 reserved[3] (0)
//   event handle, 64 bytes (zero without an event)
//   allocation_count records of 80 bytes: the allocation's IPC handle (64
//     bytes), i64 allocation_size, u64 reserved (0)
//   the batch's schema (wire::EncodeSchema), zero-padded to 8
//   the batch's message header (wire::EncodeHeader) whose buffer records name
//     an allocation by its index as segment id and an offset inside it;
//     empty buffers use kEmptyAllocation.
//
// A subscriber opens each allocation once (a process-wide cache, shared by
// every message that is alive and points into it), opens the event, decodes
// the header without reading the payload (wire::DecodeOptions::
// payload_on_device) and returns the batch on the device. Releasing the
// received batch closes its handles and event first and then returns the drop
// token, so the publisher never frees memory another process still maps.
//
// Devices without IPC (OpenCL, CUDA pinned and managed memory, any device in
// a process whose driver lacks IPC) fall back to a copy: the batch is copied
// into the publisher's loan pool (counted per direction, and as a fallback
// with reason crosses_process) and the subscriber receives a host batch.
// CPU batches travel as SendCopy sends them.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ferry/device/device.h"
#include "ferry/device/device_bridge.h"
#include "ferry/flow/transport.h"

namespace ferry::flow::internal {

inline constexpr uint32_t kDeviceEnvelopeMagic = 0x44595246;  // "FRYD" in memory
inline constexpr uint16_t kDeviceEnvelopeVersion = 1;
// The segment id of an empty buffer in a device message header.
inline constexpr uint32_t kEmptyAllocation = 0xFFFFFFFEu;

// What SendDevice keeps per publisher: the IPC handle of every allocation it
// exported (while some buffer known to hold the allocation is alive), the
// encoding of the last schema, and one queue per device on which IPC events
// are recorded. Thread-safe.
class DeviceSender {
 public:
  DeviceSender();
  ~DeviceSender();
  DeviceSender(const DeviceSender&) = delete;
  DeviceSender& operator=(const DeviceSender&) = delete;

  // SendDevice on `publisher` (see transport.h); `timeout` bounds the host
  // wait of the copy fallback.
  Status Send(Publisher& publisher, const device::DeviceBatch& batch, const Metadata& metadata,
              std::chrono::nanoseconds timeout);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// If `message` carries a device envelope, opens it: message->device_batch is
// set and message->batch cleared. Host messages are left alone. An error
// (malformed envelope, device absent here or without IPC, a handle that does
// not open) names the cause; the message is then dropped by the caller.
Status ResolveDeviceMessage(Message* message);

// Process-wide counts of IPC operations, for tests and diagnostics.
struct DeviceIpcCounts {
  int64_t memory_exports = 0;  // ExportIpcMemory calls by senders (cache misses)
  int64_t memory_opens = 0;    // OpenIpcMemory calls by receivers (cache misses)
  int64_t event_exports = 0;
  int64_t event_opens = 0;
};
DeviceIpcCounts GetDeviceIpcCounts();

}  // namespace ferry::flow::internal
