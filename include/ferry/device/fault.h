// Fault injection for devices: a FaultyDevice wraps any Device (same type,
// id, name and event kind), forwards every call, and fails on demand, so
// that allocation failure, event-wait timeouts, events that never complete,
// failed copies, device loss and device reset are testable in CI on the CPU
// and on OpenCL (PoCL) — and on CUDA where a GPU is lent.
//
// Faults are switched at run time from any thread and apply from the next
// operation on. "Operations" are the calls that do device work: Allocate,
// CreateQueue, HostWait, and, on the device's queues and events, Copy,
// RecordEvent, WaitEvent, Synchronize and Event::Wait. Accessors (type, id,
// name, default_queue) and CheckHealth are not operations.
//
// Routing the code under test through the faults. Code that imports an
// ArrowDeviceArray resolves its (device_type, device_id) through
// DeviceRegistry::Global(), so a test installs the wrapper there for the
// scope of the test:
//
//   ScopedDeviceOverride scope(DeviceType::kOpenCL, 0);
//   auto faulty = scope.InstallFaulty();  // Result<std::shared_ptr<FaultyDevice>>
//   ASSERT_TRUE(faulty.ok());
//   (*faulty)->LoseAfter(2);  // the third operation finds the device lost
//   // DeviceRegistry::Global().Get(kOpenCL, 0) now returns the wrapper, so
//   // ImportDeviceArray(&array, schema) waits, reads and copies through it:
//   // expect an error naming "device lost", never a crash.
//   // ~ScopedDeviceOverride puts the original device back.
//
// Export with the wrapper too (allocate and record events through
// `faulty`, or through the registry while it is installed) when the
// producer side should see the faults. scope.MakeAbsent() instead makes
// Get(type, id) fail, as on a machine without that device.
//
// What the wrapper cannot see: copies between two host-accessible devices
// are plain memcpy calls in CopyBetween that reach no device, so copy faults
// and stale-buffer checks on CPU memory show only through the device's
// queues (default_queue()->Copy); direct host reads and writes of buffer
// memory bypass every device.
//
// Thread safety: FaultyDevice and its events are thread-safe; its queues,
// like every Queue, are used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/device/device.h"

namespace ferry::device {

namespace internal {
class FaultState;
}  // namespace internal

class FaultyQueue;

class FaultyDevice final : public Device {
 public:
  // Wraps `inner`, which the wrapper keeps alive. Invalid if `inner` is null.
  static Result<std::shared_ptr<FaultyDevice>> Wrap(std::shared_ptr<Device> inner);
  ~FaultyDevice() override;
  FaultyDevice(const FaultyDevice&) = delete;
  FaultyDevice& operator=(const FaultyDevice&) = delete;

  const std::shared_ptr<Device>& inner() const { return inner_; }

  // ---- Faults ---------------------------------------------------------------
  // The next `count` allocations fail with OutOfMemory (0 cancels).
  void FailNextAllocations(int64_t count);
  // Every wait on an event (Event::Wait, HostWait, Queue::WaitEvent) returns
  // TimedOut at once, as if its deadline had passed. Null events stay ready.
  void SetWaitsTimeOut(bool enabled);
  // No event completes: host waits block for their whole timeout and then
  // return TimedOut (never a hang); a device-side wait leaves its queue stuck,
  // so later work on that queue returns TimedOut instead of running. Turning
  // the fault off wakes blocked host waits, which then wait for real.
  void SetEventsNeverComplete(bool enabled);
  // Every Queue::Copy fails with IOError without copying.
  void SetCopiesFail(bool enabled);
  // The next `operations` operations succeed (as far as other faults allow);
  // the one after them and every later one fails with IOError naming "device
  // lost", and CheckHealth reports the loss.
  void LoseAfter(int64_t operations);
  void LoseNow() { LoseAfter(0); }
  // A device reset: the loss (if any) is over and the device works again,
  // but everything from before — allocations, queues created by
  // CreateQueue, recorded events — is invalid: passing such memory to a
  // Copy, or using such a queue or event, returns an error. Other faults
  // stay as they are.
  void Reset();
  // Ends every fault, including a loss, without invalidating anything: the
  // device behaves exactly like the wrapped one again.
  void ClearFaults();

  bool lost() const;
  // Operations attempted so far (failed ones included).
  int64_t operation_count() const;

  // ---- Device -----------------------------------------------------------------
  DeviceType type() const override { return inner_->type(); }
  int64_t id() const override { return inner_->id(); }
  std::string name() const override { return inner_->name(); }
  EventKind event_kind() const override { return inner_->event_kind(); }
  Result<BufferPtr> Allocate(int64_t size) override;
  Result<QueuePtr> CreateQueue() override;
  Queue* default_queue() override;
  Status HostWait(void* sync_event, std::chrono::nanoseconds timeout) override;
  Status CheckHealth() override;

 private:
  explicit FaultyDevice(std::shared_ptr<Device> inner);

  std::shared_ptr<Device> inner_;
  std::shared_ptr<internal::FaultState> state_;
  std::unique_ptr<FaultyQueue> default_queue_;
};

// Swaps the registry entry at (type, id) for the length of a scope; the
// destructor puts back the device that was registered when the scope began
// (or removes what was installed when there was none). Not atomic with
// respect to concurrent DeviceRegistry::Get calls: install before starting
// threads that resolve the device. Not copyable or movable.
class ScopedDeviceOverride {
 public:
  // `id` is the exact registered id (-1 for the CPU).
  ScopedDeviceOverride(DeviceType type, int64_t id);
  ~ScopedDeviceOverride();
  ScopedDeviceOverride(const ScopedDeviceOverride&) = delete;
  ScopedDeviceOverride& operator=(const ScopedDeviceOverride&) = delete;

  // The device registered at (type, id) when the scope began; null if none.
  const std::shared_ptr<Device>& original() const { return original_; }
  // Registers `device` in place of whatever is at (type, id) now. Invalid if
  // it is null or its type or id differ from the scope's.
  Status Install(std::shared_ptr<Device> device);
  // Wraps the original device and installs the wrapper. NotImplemented /
  // Invalid (as DeviceRegistry::Get would say) when there was none.
  Result<std::shared_ptr<FaultyDevice>> InstallFaulty();
  // Removes whatever is registered at (type, id): Get(type, id) fails until
  // Restore, Install or the end of the scope.
  void MakeAbsent();
  // Puts the original back now (also done by the destructor).
  void Restore();

 private:
  DeviceType type_;
  int64_t id_;
  std::shared_ptr<Device> original_;
  // Keeps what this scope installed alive until the scope ends, so raw
  // Device pointers handed out by Get stay valid that long.
  std::vector<std::shared_ptr<Device>> installed_;
};

}  // namespace ferry::device
