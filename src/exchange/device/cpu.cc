// The CPU backend: host memory from the default pool, work runs inline, and
// data is always ready (no sync event).
#include <cstring>

#include "exchange/device/backend.h"

namespace ferry::device {
namespace {

class ReadyEvent final : public Event {
 public:
  EventKind kind() const override { return EventKind::kNone; }
  void* sync_event() override { return nullptr; }
  Status Wait(std::chrono::nanoseconds) override { return Status::OK(); }
};

class CpuQueue final : public Queue {
 public:
  explicit CpuQueue(Device* device) : device_(device) {}
  Device* device() const override { return device_; }
  void* native() const override { return nullptr; }
  Status Copy(CopyDirection direction, const void* src, void* dst, int64_t size) override {
    if (size < 0) return Status::Invalid("negative copy size " + std::to_string(size));
    if (size > 0) std::memcpy(dst, src, static_cast<size_t>(size));
    // Every CPU copy is a host memcpy, whatever the caller called it.
    internal::CountCopy(CopyDirection::kHostToHost, size);
    (void)direction;
    return Status::OK();
  }
  Result<EventPtr> RecordEvent() override { return EventPtr(std::make_shared<ReadyEvent>()); }
  Status WaitEvent(void* sync_event) override {
    if (sync_event != nullptr) {
      return Status::Invalid("the CPU cannot wait on a device event; wait on the host instead");
    }
    return Status::OK();
  }
  Status Synchronize() override { return Status::OK(); }

 private:
  Device* device_;
};

class CpuDevice final : public Device {
 public:
  CpuDevice() : queue_(this) {}
  DeviceType type() const override { return DeviceType::kCpu; }
  int64_t id() const override { return -1; }
  std::string name() const override { return "cpu"; }
  EventKind event_kind() const override { return EventKind::kNone; }
  Result<BufferPtr> Allocate(int64_t size) override { return Buffer::Allocate(size); }
  Result<QueuePtr> CreateQueue() override { return QueuePtr(std::make_shared<CpuQueue>(this)); }
  Queue* default_queue() override { return &queue_; }
  Status HostWait(void* sync_event, std::chrono::nanoseconds) override {
    if (sync_event != nullptr) {
      return Status::Invalid("a CPU array must not carry a sync event");
    }
    return Status::OK();
  }
  Status CheckHealth() override { return Status::OK(); }

 private:
  CpuQueue queue_;
};

}  // namespace

namespace internal {
std::shared_ptr<Device> MakeCpuDevice() { return std::make_shared<CpuDevice>(); }
}  // namespace internal

}  // namespace ferry::device
