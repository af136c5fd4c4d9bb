// Capability negotiation between a producer's device array and a consumer.
// A consumer says what it can read; Negotiate decides, in this order of
// preference: zero-copy, zero-copy with a device-side wait, an explicit copy
// (D2H, H2D, D2D), or refusal. Every copy and refusal carries a reason code
// that telemetry counts (telemetry::FallbackReason). Pure decision logic:
// thread-safe, touches no memory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ferry/base/telemetry.h"
#include "ferry/device/device.h"

namespace ferry::device {

struct ConsumerCapabilities {
  // Device types the consumer reads directly. Empty means CPU only.
  std::vector<DeviceType> device_types{DeviceType::kCpu};
  // Device ids it reads, per the types above; empty means any id.
  std::vector<int64_t> device_ids;
  // Event kinds it can wait on itself (device-side, on its own queue).
  std::vector<EventKind> event_kinds;
  // Host-accessible memory (CUDA_HOST, CUDA_MANAGED, ROCM_HOST) will do when
  // the consumer reads CPU memory.
  bool accepts_host_accessible = true;
  // The consumer will write into the buffers: it needs an owned copy or an
  // exclusive lease.
  bool needs_write = false;
  // With needs_write: the consumer holds an exclusive lease (the producer
  // promises nobody else reads the data), so no copy is required.
  bool exclusive_lease = false;
  // Whether copying is allowed at all (false: refuse instead of copying).
  bool allow_copy = true;
  // An opaque context id (e.g. a CUcontext / cl_context address) the
  // consumer uses; 0 = any. A different non-zero context on the same device
  // means the memory is not directly usable.
  uintptr_t context = 0;
};

enum class ExchangeMode : uint8_t {
  kZeroCopy,            // hand over as is; the consumer waits (host) if an event is set
  kZeroCopyDeviceWait,  // hand over as is; the consumer enqueues a device-side wait
  kCopy,                // copy to `target_type` / `target_id`, then hand over
  kRefused,             // cannot be exchanged under these capabilities
};
const char* ExchangeModeName(ExchangeMode mode);

struct ExchangePlan {
  ExchangeMode mode = ExchangeMode::kRefused;
  // For kCopy: where the data goes and which way.
  DeviceType target_type = DeviceType::kCpu;
  int64_t target_id = -1;
  CopyDirection direction = CopyDirection::kHostToHost;
  // Set for kCopy and kRefused.
  std::optional<telemetry::FallbackReason> reason;
  // One sentence for logs and errors, e.g. "copy D2H: consumer reads cpu only
  // (unsupported_device_type)".
  std::string explanation;
};

// Describes the producer side of an exchange.
struct ProducerInfo {
  DeviceType device_type = DeviceType::kCpu;
  int64_t device_id = -1;
  EventKind event_kind = EventKind::kNone;  // kind of the sync event, kNone if none
  uintptr_t context = 0;                    // 0 = unknown / any
  // False when the producer cannot prove the buffers outlive the exchange
  // (e.g. borrowed memory without a release hook): forces a copy.
  bool lifetime_provable = true;
  // True when the consumer is in another process (no IPC handle path).
  bool crosses_process = false;
};

// Decides how to exchange. Does not count telemetry: the caller that acts on
// the plan counts (see RecordPlan), so that a plan computed and discarded
// leaves no trace.
//
// Zero-copy needs the consumer to read the memory where it is: the
// producer's device type (and id, when the consumer lists ids; id -1 matches
// any list), or — for host-accessible memory (CUDA_HOST, CUDA_MANAGED,
// ROCM_HOST) — the CPU with accepts_host_accessible. Then, with an event,
// a device-side wait when the consumer lists the event kind, else a host
// wait when the consumer reads the CPU and the producer's device has a
// backend here (its HostWait does the waiting).
//
// When several rules forbid zero-copy, the reason is the first of: crosses
// process, unsupported device type, different device id, different context
// (only for memory that is not plain CPU memory read in place), lifetime not
// provable, consumer needs write (without exclusive_lease), event kind not
// importable.
//
// A copy goes, in this order, to: the producer's own device when the
// consumer reads it (an owned D2D or host copy; for a different context the
// executor allocates it in the consumer's context); another device of the
// same type whose id the consumer lists; the first type the consumer lists
// (id: the first listed id, else 0; -1 for the CPU). Only targets with a
// backend here count. crosses_process always targets the CPU (host memory
// travels; the other process copies on). A copy also needs a backend for
// the producer's device; without one, or with allow_copy false, or with no
// target, the plan is kRefused with the same reason code.
ExchangePlan Negotiate(const ProducerInfo& producer, const ConsumerCapabilities& consumer);

// Whether this process has a backend for the device (type, id). The default
// asks DeviceRegistry::Global().Get; tests pass a fixed answer so that plans
// do not depend on the machine.
using BackendPresence = std::function<bool(DeviceType type, int64_t id)>;
ExchangePlan Negotiate(const ProducerInfo& producer, const ConsumerCapabilities& consumer,
                       const BackendPresence& has_backend);

// Counts the plan's fallback reason (kCopy / kRefused) in telemetry.
void RecordPlan(const ExchangePlan& plan);

}  // namespace ferry::device
