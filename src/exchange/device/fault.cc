#include "ferry/device/fault.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace ferry::device {
namespace internal {

// The fault switches and bookkeeping shared by a FaultyDevice and everything
// it hands out (queues, events, buffer owners), which may outlive it.
class FaultState {
 public:
  explicit FaultState(std::string label) : label_(std::move(label)) {}

  void FailNextAllocations(int64_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_allocations_ = std::max<int64_t>(count, 0);
  }
  void SetWaitsTimeOut(bool enabled) {
    std::lock_guard<std::mutex> lock(mutex_);
    waits_time_out_ = enabled;
  }
  void SetEventsNeverComplete(bool enabled) {
    std::lock_guard<std::mutex> lock(mutex_);
    never_complete_ = enabled;
    if (!enabled) ReleaseStuckWorkLocked();
  }
  void SetCopiesFail(bool enabled) {
    std::lock_guard<std::mutex> lock(mutex_);
    copies_fail_ = enabled;
  }
  void LoseAfter(int64_t operations) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (operations <= 0) {
      lost_ = true;
      operations_before_loss_.reset();
      changed_.notify_all();  // blocked waits observe the loss
    } else {
      operations_before_loss_ = operations;
    }
  }
  void Reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    lost_ = false;
    operations_before_loss_.reset();
    ++epoch_;
    ReleaseStuckWorkLocked();
  }
  void ClearFaults() {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_allocations_ = 0;
    waits_time_out_ = false;
    never_complete_ = false;
    copies_fail_ = false;
    lost_ = false;
    operations_before_loss_.reset();
    ReleaseStuckWorkLocked();
  }

  bool lost() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lost_;
  }
  int64_t operations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return operations_;
  }
  uint64_t epoch() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return epoch_;
  }

  // Counts one operation, applies a scheduled loss, and rejects objects
  // (queues, events) from before a reset. `object_epoch` is unset for the
  // device itself and its default queue, which survive resets.
  Status BeginOperation(const std::string& what, std::optional<uint64_t> object_epoch) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++operations_;
    if (!lost_ && operations_before_loss_) {
      if (*operations_before_loss_ == 0) {
        lost_ = true;
        operations_before_loss_.reset();
      } else {
        --*operations_before_loss_;
      }
    }
    if (lost_) return LostError(what);
    if (object_epoch && *object_epoch != epoch_) {
      return Status::Invalid(label_ + ": " + what + " uses an object created before the device " +
                             "reset, which the reset invalidated");
    }
    return Status::OK();
  }

  Status CheckHealth() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (lost_) return Status::IOError(label_ + ": device lost (injected fault)");
    return Status::OK();
  }

  Status TakeAllocationFault(int64_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_allocations_ == 0) return Status::OK();
    --fail_allocations_;
    return Status::OutOfMemory(label_ + ": out of memory allocating " + std::to_string(size) +
                               " bytes (injected fault)");
  }

  Status CopyFault(CopyDirection direction, int64_t size) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!copies_fail_) return Status::OK();
    return Status::IOError(label_ + ": " + CopyDirectionName(direction) + " copy of " +
                           std::to_string(size) + " bytes failed (injected fault)");
  }

  // The host-side part of a wait on a real event: fails at once, or blocks
  // for the whole timeout when events never complete. On success `timeout`
  // holds what is left of it for the real wait.
  Status HostWaitFault(const std::string& what, std::chrono::nanoseconds* timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (waits_time_out_) {
      return Status::TimedOut(label_ + ": " + what + " timed out (injected fault: every wait " +
                              "times out)");
    }
    if (!never_complete_) return Status::OK();
    // Bounded so that a huge timeout cannot overflow the deadline.
    const auto budget = std::min<std::chrono::nanoseconds>(*timeout, std::chrono::hours(24));
    const auto start = std::chrono::steady_clock::now();
    const bool released =
        changed_.wait_until(lock, start + budget, [this] { return !never_complete_ || lost_; });
    if (lost_) return LostError(what);
    if (!released) {
      const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(budget).count();
      return Status::TimedOut(label_ + ": " + what + ": the event did not complete within " +
                              std::to_string(millis) + " ms (injected fault: events never " +
                              "complete)");
    }
    *timeout = std::max<std::chrono::nanoseconds>(
        budget - (std::chrono::steady_clock::now() - start), std::chrono::nanoseconds(0));
    return Status::OK();
  }

  // The part of a device-side wait on a real event. Sets `stuck_generation`
  // when the queue must stay stuck behind an event that never completes.
  Status DeviceWaitFault(const std::string& what, std::optional<uint64_t>* stuck_generation) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (waits_time_out_) {
      return Status::TimedOut(label_ + ": " + what + " timed out (injected fault: every wait " +
                              "times out)");
    }
    if (never_complete_) *stuck_generation = release_generation_;
    return Status::OK();
  }

  // Work on a queue stuck since `stuck_generation` cannot run until the
  // fault is cleared.
  Status CheckNotStuck(const std::string& what, const std::optional<uint64_t>& stuck_generation) {
    if (!stuck_generation) return Status::OK();
    std::lock_guard<std::mutex> lock(mutex_);
    if (*stuck_generation != release_generation_) return Status::OK();
    return Status::TimedOut(label_ + ": " + what + " cannot run: the queue waits on an event " +
                            "that never completes (injected fault)");
  }

  uint64_t RegisterAllocation(const void* address, int64_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t serial = next_serial_++;
    allocations_.insert_or_assign(reinterpret_cast<uintptr_t>(address),
                                  Allocation{size, epoch_, serial});
    return serial;
  }
  void UnregisterAllocation(const void* address, uint64_t serial) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = allocations_.find(reinterpret_cast<uintptr_t>(address));
    if (found != allocations_.end() && found->second.serial == serial) allocations_.erase(found);
  }
  // An error when `pointer` lies in memory this device allocated before its
  // last reset.
  Status CheckNotStale(const void* pointer, const char* role) const {
    const auto address = reinterpret_cast<uintptr_t>(pointer);
    std::lock_guard<std::mutex> lock(mutex_);
    auto after = allocations_.upper_bound(address);
    if (after == allocations_.begin()) return Status::OK();
    const auto& [start, allocation] = *std::prev(after);
    const auto extent = static_cast<uintptr_t>(std::max<int64_t>(allocation.size, 1));
    if (address - start >= extent || allocation.epoch == epoch_) return Status::OK();
    return Status::Invalid(label_ + ": the copy's " + role + " buffer was allocated before the " +
                           "device reset; its memory is no longer valid");
  }

  const std::string& label() const { return label_; }

 private:
  struct Allocation {
    int64_t size;
    uint64_t epoch;
    uint64_t serial;
  };

  Status LostError(const std::string& what) const {
    return Status::IOError(label_ + ": device lost (injected fault); " + what + " failed");
  }
  void ReleaseStuckWorkLocked() {
    ++release_generation_;
    changed_.notify_all();
  }

  const std::string label_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int64_t fail_allocations_ = 0;
  bool waits_time_out_ = false;
  bool never_complete_ = false;
  bool copies_fail_ = false;
  bool lost_ = false;
  std::optional<int64_t> operations_before_loss_;
  int64_t operations_ = 0;
  // Bumped by every reset: objects of an older epoch are invalid.
  uint64_t epoch_ = 0;
  // Bumped whenever stuck queues are let go (fault cleared, reset).
  uint64_t release_generation_ = 0;
  uint64_t next_serial_ = 0;
  std::map<uintptr_t, Allocation> allocations_;
};

}  // namespace internal

namespace {

using internal::FaultState;

std::string DeviceLabel(const Device& device) {
  std::string label = DeviceTypeName(device.type());
  if (device.id() != -1) label += " device " + std::to_string(device.id());
  const std::string name = device.name();
  if (name != DeviceTypeName(device.type())) label += " (" + name + ")";
  return label;
}

class FaultyEvent final : public Event {
 public:
  FaultyEvent(EventPtr inner, std::shared_ptr<FaultState> state, uint64_t epoch)
      : inner_(std::move(inner)), state_(std::move(state)), epoch_(epoch) {}
  EventKind kind() const override { return inner_->kind(); }
  void* sync_event() override { return inner_->sync_event(); }
  Status Wait(std::chrono::nanoseconds timeout) override {
    FERRY_RETURN_NOT_OK(state_->BeginOperation("event wait", epoch_));
    FERRY_RETURN_NOT_OK(state_->HostWaitFault("event wait", &timeout));
    return inner_->Wait(timeout);
  }

 private:
  EventPtr inner_;
  std::shared_ptr<FaultState> state_;
  uint64_t epoch_;
};

// Keeps the wrapped allocation alive and forgets its range when freed.
struct FaultyAllocation {
  FaultyAllocation(BufferPtr buffer, std::shared_ptr<FaultState> fault_state)
      : inner(std::move(buffer)),
        state(std::move(fault_state)),
        serial(state->RegisterAllocation(inner->data(), inner->size())) {}
  ~FaultyAllocation() { state->UnregisterAllocation(inner->data(), serial); }
  FaultyAllocation(const FaultyAllocation&) = delete;
  FaultyAllocation& operator=(const FaultyAllocation&) = delete;

  BufferPtr inner;
  std::shared_ptr<FaultState> state;
  uint64_t serial;
};

}  // namespace

class FaultyQueue final : public Queue {
 public:
  // `epoch` is unset for the device's default queue, which survives resets.
  FaultyQueue(FaultyDevice* device, Queue* inner, QueuePtr owned_inner,
              std::shared_ptr<FaultState> state, std::optional<uint64_t> epoch)
      : device_(device),
        inner_(inner),
        owned_inner_(std::move(owned_inner)),
        state_(std::move(state)),
        epoch_(epoch) {}

  Device* device() const override { return device_; }
  void* native() const override { return inner_->native(); }

  Status Copy(CopyDirection direction, const void* src, void* dst, int64_t size) override {
    FERRY_RETURN_NOT_OK(Begin("copy"));
    FERRY_RETURN_NOT_OK(state_->CopyFault(direction, size));
    FERRY_RETURN_NOT_OK(state_->CheckNotStale(src, "source"));
    FERRY_RETURN_NOT_OK(state_->CheckNotStale(dst, "destination"));
    return inner_->Copy(direction, src, dst, size);
  }
  Result<EventPtr> RecordEvent() override {
    FERRY_RETURN_NOT_OK(Begin("event record"));
    FERRY_ASSIGN_OR_RAISE(EventPtr event, inner_->RecordEvent());
    return EventPtr(std::make_shared<FaultyEvent>(std::move(event), state_, state_->epoch()));
  }
  Status WaitEvent(void* sync_event) override {
    FERRY_RETURN_NOT_OK(Begin("device-side event wait"));
    if (sync_event != nullptr) {
      FERRY_RETURN_NOT_OK(state_->DeviceWaitFault("device-side event wait", &stuck_generation_));
      // The wait is "enqueued" but never satisfied: nothing after it runs.
      if (stuck_generation_) return Status::OK();
    }
    return inner_->WaitEvent(sync_event);
  }
  Status Synchronize() override {
    FERRY_RETURN_NOT_OK(Begin("synchronize"));
    return inner_->Synchronize();
  }

 private:
  Status Begin(const std::string& what) {
    FERRY_RETURN_NOT_OK(state_->BeginOperation(what, epoch_));
    Status stuck = state_->CheckNotStuck(what, stuck_generation_);
    if (stuck.ok()) stuck_generation_.reset();
    return stuck;
  }

  FaultyDevice* device_;
  Queue* inner_;
  QueuePtr owned_inner_;  // null for the default queue, which the inner device owns
  std::shared_ptr<FaultState> state_;
  std::optional<uint64_t> epoch_;
  std::optional<uint64_t> stuck_generation_;
};

// ---- FaultyDevice -----------------------------------------------------------------

Result<std::shared_ptr<FaultyDevice>> FaultyDevice::Wrap(std::shared_ptr<Device> inner) {
  if (inner == nullptr) return Status::Invalid("FaultyDevice::Wrap needs a device to wrap");
  return std::shared_ptr<FaultyDevice>(new FaultyDevice(std::move(inner)));
}

FaultyDevice::FaultyDevice(std::shared_ptr<Device> inner)
    : inner_(std::move(inner)), state_(std::make_shared<FaultState>(DeviceLabel(*inner_))) {
  // A device without a default queue keeps having none.
  if (Queue* inner_queue = inner_->default_queue(); inner_queue != nullptr) {
    default_queue_ =
        std::make_unique<FaultyQueue>(this, inner_queue, nullptr, state_, std::nullopt);
  }
}

FaultyDevice::~FaultyDevice() = default;

void FaultyDevice::FailNextAllocations(int64_t count) { state_->FailNextAllocations(count); }
void FaultyDevice::SetWaitsTimeOut(bool enabled) { state_->SetWaitsTimeOut(enabled); }
void FaultyDevice::SetEventsNeverComplete(bool enabled) { state_->SetEventsNeverComplete(enabled); }
void FaultyDevice::SetCopiesFail(bool enabled) { state_->SetCopiesFail(enabled); }
void FaultyDevice::LoseAfter(int64_t operations) { state_->LoseAfter(operations); }
void FaultyDevice::Reset() { state_->Reset(); }
void FaultyDevice::ClearFaults() { state_->ClearFaults(); }
bool FaultyDevice::lost() const { return state_->lost(); }
int64_t FaultyDevice::operation_count() const { return state_->operations(); }

Result<BufferPtr> FaultyDevice::Allocate(int64_t size) {
  FERRY_RETURN_NOT_OK(state_->BeginOperation("allocation", std::nullopt));
  FERRY_RETURN_NOT_OK(state_->TakeAllocationFault(size));
  FERRY_ASSIGN_OR_RAISE(BufferPtr buffer, inner_->Allocate(size));
  auto owner = std::make_shared<FaultyAllocation>(std::move(buffer), state_);
  const BufferPtr& allocated = owner->inner;
  return std::make_shared<Buffer>(allocated->data(), allocated->size(), owner);
}

Result<QueuePtr> FaultyDevice::CreateQueue() {
  FERRY_RETURN_NOT_OK(state_->BeginOperation("queue creation", std::nullopt));
  FERRY_ASSIGN_OR_RAISE(QueuePtr queue, inner_->CreateQueue());
  Queue* raw = queue.get();
  return QueuePtr(
      std::make_shared<FaultyQueue>(this, raw, std::move(queue), state_, state_->epoch()));
}

Queue* FaultyDevice::default_queue() { return default_queue_.get(); }

Status FaultyDevice::HostWait(void* sync_event, std::chrono::nanoseconds timeout) {
  FERRY_RETURN_NOT_OK(state_->BeginOperation("host wait", std::nullopt));
  // A null event means the data is ready: no fault can make it late.
  if (sync_event != nullptr) FERRY_RETURN_NOT_OK(state_->HostWaitFault("host wait", &timeout));
  return inner_->HostWait(sync_event, timeout);
}

Status FaultyDevice::CheckHealth() {
  FERRY_RETURN_NOT_OK(state_->CheckHealth());
  return inner_->CheckHealth();
}

// ---- ScopedDeviceOverride -----------------------------------------------------------

namespace {

// Occupies a registry slot for the instant it takes to read the registered
// device's shared pointer: the registry hands out shared ownership only from
// Register (the device replaced, in place) and Unregister.
class SwapSlotDevice final : public Device {
 public:
  SwapSlotDevice(DeviceType type, int64_t id) : type_(type), id_(id) {}
  DeviceType type() const override { return type_; }
  int64_t id() const override { return id_; }
  std::string name() const override { return "placeholder"; }
  EventKind event_kind() const override { return EventKind::kNone; }
  Result<BufferPtr> Allocate(int64_t) override { return Unavailable(); }
  Result<QueuePtr> CreateQueue() override { return Unavailable(); }
  Queue* default_queue() override { return nullptr; }
  Status HostWait(void*, std::chrono::nanoseconds) override { return Unavailable(); }
  Status CheckHealth() override { return Unavailable(); }

 private:
  Status Unavailable() const {
    return Status::Invalid(std::string(DeviceTypeName(type_)) + " device " + std::to_string(id_) +
                           " is being replaced in the registry");
  }
  DeviceType type_;
  int64_t id_;
};

}  // namespace

ScopedDeviceOverride::ScopedDeviceOverride(DeviceType type, int64_t id) : type_(type), id_(id) {
  auto& registry = DeviceRegistry::Global();
  // Swapping in place keeps the registry's order (Present()) unchanged.
  original_ = registry.Register(std::make_shared<SwapSlotDevice>(type, id));
  if (original_) {
    registry.Register(original_);
  } else {
    registry.Unregister(type, id);
  }
}

ScopedDeviceOverride::~ScopedDeviceOverride() { Restore(); }

Status ScopedDeviceOverride::Install(std::shared_ptr<Device> device) {
  if (device == nullptr) return Status::Invalid("ScopedDeviceOverride::Install needs a device");
  if (device->type() != type_ || device->id() != id_) {
    return Status::Invalid(std::string("cannot install a ") + DeviceTypeName(device->type()) +
                           " device with id " + std::to_string(device->id()) + " in place of " +
                           DeviceTypeName(type_) + " id " + std::to_string(id_));
  }
  installed_.push_back(device);
  DeviceRegistry::Global().Register(std::move(device));
  return Status::OK();
}

Result<std::shared_ptr<FaultyDevice>> ScopedDeviceOverride::InstallFaulty() {
  if (original_ == nullptr) {
    Status why = DeviceRegistry::Global().Get(type_, id_).status();
    if (why.ok()) {
      why = Status::Invalid(std::string("no ") + DeviceTypeName(type_) +
                            " device is registered with exactly id " + std::to_string(id_));
    }
    return why.WithPrefix("cannot wrap a device in fault injection: ");
  }
  FERRY_ASSIGN_OR_RAISE(auto faulty, FaultyDevice::Wrap(original_));
  FERRY_RETURN_NOT_OK(Install(faulty));
  return faulty;
}

void ScopedDeviceOverride::MakeAbsent() { DeviceRegistry::Global().Unregister(type_, id_); }

void ScopedDeviceOverride::Restore() {
  auto& registry = DeviceRegistry::Global();
  if (original_) {
    registry.Register(original_);
  } else {
    registry.Unregister(type_, id_);
  }
}

}  // namespace ferry::device
