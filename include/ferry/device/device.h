// Devices, queues, events and device memory: the layer under the Arrow C
// Device Data Interface. A device is (device type, device id) plus a backend
// (CPU, OpenCL, CUDA, or a fault-injection wrapper around any of them).
// Backends are looked up through the process-wide DeviceRegistry.
//
// Thread safety: Device, DeviceRegistry and Event are thread-safe. A Queue is
// used by one thread at a time (like a CUDA stream or OpenCL command queue).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/c/abi.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/buffer.h"

namespace ferry::device {

// The spec's device types, with the spec's values.
enum class DeviceType : int32_t {
  kCpu = ARROW_DEVICE_CPU,
  kCuda = ARROW_DEVICE_CUDA,
  kCudaHost = ARROW_DEVICE_CUDA_HOST,
  kOpenCL = ARROW_DEVICE_OPENCL,
  kVulkan = ARROW_DEVICE_VULKAN,
  kMetal = ARROW_DEVICE_METAL,
  kVpi = ARROW_DEVICE_VPI,
  kRocm = ARROW_DEVICE_ROCM,
  kRocmHost = ARROW_DEVICE_ROCM_HOST,
  kExtDev = ARROW_DEVICE_EXT_DEV,
  kCudaManaged = ARROW_DEVICE_CUDA_MANAGED,
  kOneApi = ARROW_DEVICE_ONEAPI,
  kWebGpu = ARROW_DEVICE_WEBGPU,
  kHexagon = ARROW_DEVICE_HEXAGON,
};

// "cpu", "cuda", "cuda_host", "opencl", "vulkan", "metal", "vpi", "rocm",
// "rocm_host", "ext_dev", "cuda_managed", "oneapi", "webgpu", "hexagon".
const char* DeviceTypeName(DeviceType type);
// Every type the spec defines, in numeric order.
const std::vector<DeviceType>& AllDeviceTypes();
// Rejects values the spec does not define (e.g. 5, 6, 0, 99) with Invalid.
Result<DeviceType> DeviceTypeFromCode(int32_t code);
Result<DeviceType> DeviceTypeFromName(std::string_view name);
// True for memory the host may dereference directly (CPU, CUDA_HOST,
// CUDA_MANAGED, ROCM_HOST).
bool IsHostAccessible(DeviceType type);

// What an ArrowDeviceArray's sync_event points to.
enum class EventKind : uint8_t {
  kNone,    // no event: data is ready (CPU)
  kCuda,    // a CUevent* / cudaEvent_t*
  kOpenCL,  // a cl_event*
};
const char* EventKindName(EventKind kind);

enum class CopyDirection : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };
const char* CopyDirectionName(CopyDirection direction);

class Device;

// ---- Interprocess sharing (same machine, same device) ----------------------------
//
// A device that SupportsIpc() hands its memory and events to other processes
// as opaque handles (CUDA: cuIpcGetMemHandle / cuIpcGetEventHandle); the
// importing process opens them on the same device. Handles are plain bytes
// that may travel through any channel; an importer must treat them as
// untrusted input.

// The handle of one device allocation, plus the range [offset, offset + size)
// of it that was exported. One handle serves every buffer of the allocation.
struct IpcMemoryHandle {
  static constexpr size_t kBytes = 64;
  std::array<uint8_t, kBytes> bytes{};  // backend-specific (CUDA: a CUipcMemHandle)
  int64_t allocation_size = 0;          // bytes of the whole allocation
  int64_t offset = 0;                   // where the exported range starts in it
  int64_t size = 0;                     // bytes of the exported range
};

// The handle of an interprocess event (backend-specific bytes).
struct IpcEventHandle {
  static constexpr size_t kBytes = 64;
  std::array<uint8_t, kBytes> bytes{};
};

// A producer-owned synchronisation event. sync_event() is the value that goes
// into ArrowDeviceArray::sync_event: a pointer to the native handle, stable
// for the Event's lifetime. The producer keeps the Event alive until the
// consumer releases the exported array.
class Event {
 public:
  virtual ~Event() = default;
  virtual EventKind kind() const = 0;
  virtual void* sync_event() = 0;
  // Host-side wait; TimedOut after `timeout`, an error if the device was lost.
  virtual Status Wait(std::chrono::nanoseconds timeout) = 0;
};
using EventPtr = std::shared_ptr<Event>;

// An ordered queue of device work: a CUDA stream, an OpenCL command queue;
// for the CPU, work runs inline.
class Queue {
 public:
  virtual ~Queue() = default;
  virtual Device* device() const = 0;
  // The native handle (CUstream, cl_command_queue), nullptr for the CPU.
  virtual void* native() const = 0;
  // Enqueues a copy of `size` bytes. Host pointers must stay valid until the
  // queue reaches the copy (Synchronize or an event wait). Counts telemetry
  // bytes by direction.
  virtual Status Copy(CopyDirection direction, const void* src, void* dst, int64_t size) = 0;
  // Records an event after all work enqueued so far.
  virtual Result<EventPtr> RecordEvent() = 0;
  // Device-side wait: work enqueued later waits for `sync_event`, which must
  // be of the device's EventKind. Counts an event wait.
  virtual Status WaitEvent(void* sync_event) = 0;
  // Blocks until all enqueued work is done.
  virtual Status Synchronize() = 0;
};
using QueuePtr = std::shared_ptr<Queue>;

// One device of one backend.
class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceType type() const = 0;
  // -1 for devices without ids (the CPU).
  virtual int64_t id() const = 0;
  // Human-readable, e.g. "cpu", "pthread-x86_64 (PoCL)", "NVIDIA H200".
  virtual std::string name() const = 0;
  virtual EventKind event_kind() const = 0;
  bool host_accessible() const { return IsHostAccessible(type()); }

  // Allocates device memory (64-byte aligned, usable as an Arrow buffer
  // address); freed when the last Buffer reference is gone.
  virtual Result<BufferPtr> Allocate(int64_t size) = 0;
  virtual Result<QueuePtr> CreateQueue() = 0;
  // A queue owned by the device, for callers that do not manage their own.
  virtual Queue* default_queue() = 0;
  // Host-side wait on a foreign sync event of this device's kind, at most
  // `timeout` (TimedOut after that, never a hang). nullptr returns OK.
  virtual Status HostWait(void* sync_event, std::chrono::nanoseconds timeout) = 0;
  // OK while usable; an error naming the cause after loss or reset.
  virtual Status CheckHealth() = 0;

  // ---- Interprocess sharing (see IpcMemoryHandle). Devices without an IPC
  // mechanism keep these defaults: false, and NotImplemented naming the device.

  // Whether ExportIpcMemory/OpenIpcMemory and the event pair work here.
  virtual bool SupportsIpc() const { return false; }
  // The handle of the allocation (made by Allocate on this device) that holds
  // [address, address + size). Cheap and repeatable. The exporter must keep
  // the memory allocated until every importer has released what
  // OpenIpcMemory gave it.
  virtual Result<IpcMemoryHandle> ExportIpcMemory(const void* address, int64_t size) {
    return IpcUnsupported("export memory");
  }
  // Opens, in this process, a handle exported by another process on the same
  // device: the buffer covers the handle's [offset, offset + size) and its
  // release closes the handle. Invalid for a malformed handle or one that
  // does not name a live allocation of at least allocation_size bytes.
  virtual Result<BufferPtr> OpenIpcMemory(const IpcMemoryHandle& handle) {
    return IpcUnsupported("open memory");
  }
  // Records an interprocess event on `queue` (a queue of this device;
  // nullptr: the default queue) after a device-side wait on `after` (null:
  // nothing to wait for). Returns the local event, which the exporter keeps
  // alive until every importer has released its copy, and its handle.
  virtual Result<std::pair<EventPtr, IpcEventHandle>> ExportIpcEvent(Queue* queue,
                                                                     const EventPtr& after) {
    return IpcUnsupported("export an event");
  }
  // Opens an event exported by another process; waiting on the result (on a
  // queue or the host) waits for the exporter's recorded work.
  virtual Result<EventPtr> OpenIpcEvent(const IpcEventHandle& handle) {
    return IpcUnsupported("open an event");
  }

 private:
  Status IpcUnsupported(const char* what) const {
    return Status::NotImplemented(std::string(DeviceTypeName(type())) + " devices cannot " + what +
                                  " across processes (no IPC mechanism)");
  }
};

// The process-wide registry of devices. Backends that are not compiled in,
// or whose driver is absent at run time, are reported as absent with the
// reason; every spec device type is known by name either way.
class DeviceRegistry {
 public:
  static DeviceRegistry& Global();

  // The device, or NotImplemented / Invalid naming why it is unavailable
  // (no backend for the type, driver not found, no such id).
  Result<Device*> Get(DeviceType type, int64_t id = -1);
  Device* cpu();
  // Devices present now.
  std::vector<Device*> Present();
  // One entry per present device, then one per device type with none present
  // (id -1, `present` false, `reason` saying why), in device type order.
  struct Entry {
    DeviceType type;
    int64_t id = -1;
    std::string name;  // the device's name; "" when absent
    bool present = false;
    std::string reason;  // why the type is absent; "" when present
  };
  std::vector<Entry> List();
  // One line per device type: present devices, or the reason for absence.
  std::string Describe();
  // Adds or replaces a device (tests use this to install fault injectors).
  // Returns the previous device at that (type, id), if any.
  std::shared_ptr<Device> Register(std::shared_ptr<Device> device);
  // Removes a device registered at (type, id); returns it.
  std::shared_ptr<Device> Unregister(DeviceType type, int64_t id);

 private:
  DeviceRegistry();
  void Discover();
  std::mutex mutex_;
  std::vector<std::shared_ptr<Device>> devices_;
  std::vector<std::pair<DeviceType, std::string>> absent_;
};

// Copies `size` bytes between two devices (either may be the CPU), on
// `queue` (which belongs to one of them; nullptr = the non-CPU side's
// default queue), choosing the direction and counting it in telemetry.
// Device-to-device across different devices stages through the host when
// no peer path exists (counted as D2H + H2D).
Status CopyBetween(Device* src_device, const void* src, Device* dst_device, void* dst, int64_t size,
                   Queue* queue = nullptr);

// An Arrow array whose buffers live on `device`, with the event recorded
// after the producer's last write (null when the data is ready).
struct DeviceArray {
  ArrayDataPtr data;
  Device* device = nullptr;
  EventPtr event;
};

// Copies every buffer of `array` (children and dictionary included) to
// `target` after waiting for the array's event (on `queue` when given and
// the kinds match, else on the host with `timeout`). The result carries an
// event recorded after the copies. Bytes are counted per direction.
// `host_pool`, for a host-accessible target: where the copies are allocated
// (e.g. a transport's shared memory) instead of target->Allocate.
Result<DeviceArray> CopyArrayTo(const DeviceArray& array, Device* target,
                                std::chrono::nanoseconds timeout = std::chrono::seconds(30),
                                Queue* queue = nullptr, MemoryPool* host_pool = nullptr);

}  // namespace ferry::device
