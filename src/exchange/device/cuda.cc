// The CUDA backend, through the driver API loaded at run time (see
// cuda_driver.h). Each GPU appears as three devices sharing its primary
// context: CUDA (device memory), CUDA_HOST (pinned host memory) and
// CUDA_MANAGED (unified memory). Queues are non-blocking CUstreams; events
// are CUevents, and ArrowDeviceArray::sync_event points at the CUevent the
// Event owns, as the spec asks.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "exchange/device/cuda_driver.h"

namespace ferry::device::internal {
namespace cuda {
namespace {

// Names for when the driver cannot give them (no driver loaded, or an old one).
const char* BuiltInErrorName(CUresult result) {
#define FERRY_CUDA_ERROR_NAME(code) \
  case code:                        \
    return #code;
  switch (result) {
    FERRY_CUDA_ERROR_NAME(CUDA_SUCCESS)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_INVALID_VALUE)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_OUT_OF_MEMORY)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_NOT_INITIALIZED)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_DEINITIALIZED)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_NO_DEVICE)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_INVALID_DEVICE)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_INVALID_IMAGE)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_INVALID_CONTEXT)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_NO_BINARY_FOR_GPU)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_ECC_UNCORRECTABLE)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_INVALID_HANDLE)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_NOT_FOUND)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_NOT_READY)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_LAUNCH_TIMEOUT)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_CONTEXT_IS_DESTROYED)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_ASSERT)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_HARDWARE_STACK_ERROR)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_ILLEGAL_INSTRUCTION)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_MISALIGNED_ADDRESS)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_INVALID_ADDRESS_SPACE)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_INVALID_PC)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_LAUNCH_FAILED)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_NOT_SUPPORTED)
    FERRY_CUDA_ERROR_NAME(CUDA_ERROR_UNKNOWN)
    default:
      return nullptr;
  }
#undef FERRY_CUDA_ERROR_NAME
}

std::string ErrorName(const DriverApi* api, CUresult result) {
  const char* name = nullptr;
  if (api != nullptr && api->cuGetErrorName(result, &name) == CUDA_SUCCESS && name != nullptr) {
    return name;
  }
  name = BuiltInErrorName(result);
  return name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(result));
}

}  // namespace

// ---- Driver loading ---------------------------------------------------------

Result<const DriverApi*> LoadDriver(const char* library) {
  dlerror();  // clear a stale message
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    return Status::NotImplemented(std::string("the CUDA driver ") + library +
                                  " could not be loaded: " + (reason ? reason : "unknown reason"));
  }
  auto api = std::make_unique<DriverApi>();
  api->library = library;
  std::string missing;
#define FERRY_CUDA_RESOLVE_ENTRY(name)                                     \
  api->name = reinterpret_cast<decltype(api->name)>(dlsym(handle, #name)); \
  if (api->name == nullptr && missing.empty()) missing = #name;
  FERRY_CUDA_DRIVER_FUNCTIONS(FERRY_CUDA_RESOLVE_ENTRY)
#undef FERRY_CUDA_RESOLVE_ENTRY
  if (!missing.empty()) {
    dlclose(handle);  // nothing from it was called
    return Status::NotImplemented(std::string(library) + " lacks the CUDA driver entry point " +
                                  missing + " (not a CUDA driver, or one older than this build)");
  }
  // The driver stays loaded: buffers and events may be freed up to process exit.
  return static_cast<const DriverApi*>(api.release());
}

// ---- Errors and health --------------------------------------------------------

Status GpuHealth::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_;
}

void GpuHealth::MarkLost(const Status& cause) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (lost_.ok()) lost_ = Status::IOError("device lost: " + cause.message());
}

bool IsDeviceLoss(CUresult result) {
  switch (static_cast<int>(result)) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case 226:  // CUDA_ERROR_CONTAINED (newer toolkits): a contained hardware error
    case 911:  // CUDA_ERROR_EXTERNAL_DEVICE (newer toolkits)
      return true;
    default:
      return false;
  }
}

Status CudaStatus(const DriverApi* api, CUresult result, std::string_view call, GpuHealth* health) {
  if (result == CUDA_SUCCESS) return Status::OK();
  std::string message = std::string(call) + " failed: " + ErrorName(api, result);
  const char* text = nullptr;
  if (api != nullptr && api->cuGetErrorString(result, &text) == CUDA_SUCCESS && text != nullptr) {
    message += std::string(" (") + text + ")";
  }
  Status status;
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      status = Status::OutOfMemory(std::move(message));
      break;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
      status = Status::Invalid(std::move(message));
      break;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      status = Status::NotImplemented(std::move(message));
      break;
    default:
      status = Status::IOError(std::move(message));
      break;
  }
  if (IsDeviceLoss(result) && health != nullptr) health->MarkLost(status);
  return status;
}

std::string Gpu::Describe() const {
  return "CUDA device " + std::to_string(ordinal) + " (" + name + ")";
}

ScopedContext::ScopedContext(const Gpu& gpu) : gpu_(gpu) {
  status_ =
      CudaStatus(gpu_.api, gpu_.api->cuCtxPushCurrent_v2(gpu_.context), "cuCtxPushCurrent_v2");
}

ScopedContext::~ScopedContext() {
  if (!status_.ok()) return;
  CUcontext popped = nullptr;
  (void)gpu_.api->cuCtxPopCurrent_v2(&popped);
}

Status PollUntilReady(const std::function<CUresult()>& query, std::chrono::nanoseconds timeout,
                      const DriverApi* api, std::string_view call, GpuHealth* health) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // A timeout too long to add to now (e.g. nanoseconds::max()) means "no deadline".
  const auto room = Clock::time_point::max() - start;
  const auto deadline = timeout >= room ? Clock::time_point::max()
                                        : start + std::max(timeout, std::chrono::nanoseconds(0));
  // Short waits stay responsive; long ones stop burning a core.
  std::chrono::microseconds pause(1);
  constexpr std::chrono::microseconds kLongestPause(1000);
  int spins = 0;
  for (;;) {
    const CUresult result = query();
    if (result == CUDA_SUCCESS) return Status::OK();
    if (result != CUDA_ERROR_NOT_READY) return CudaStatus(api, result, call, health);
    const auto now = Clock::now();
    if (now >= deadline) {
      char limit[32];
      std::snprintf(limit, sizeof(limit), "%.3f ms", static_cast<double>(timeout.count()) / 1e6);
      return Status::TimedOut(std::string(call) + ": CUDA event not complete after " + limit);
    }
    if (spins < 64) {
      ++spins;
      std::this_thread::yield();
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    std::this_thread::sleep_for(std::min({pause, left + std::chrono::microseconds(1)}));
    pause = std::min(pause * 2, kLongestPause);
  }
}

namespace {

// The GPUs found by the process-wide discovery (DiscoverCuda), by ordinal.
struct DiscoveredGpus {
  std::mutex mutex;
  std::vector<std::shared_ptr<Gpu>> gpus;
};

DiscoveredGpus& Discovered() {
  static auto* discovered = new DiscoveredGpus();  // never destroyed: buffers outlive main
  return *discovered;
}

// ---- Events, queues, devices ------------------------------------------------------

// Refuses work on a GPU that was lost, naming the device and the first cause.
Status CheckUsable(const Gpu& gpu) {
  Status health = gpu.health.status();
  if (health.ok()) return health;
  return health.WithPrefix(gpu.Describe() + ": ");
}

Status WaitForEvent(Gpu& gpu, CUevent event, std::chrono::nanoseconds timeout) {
  FERRY_RETURN_NOT_OK(CheckUsable(gpu));
  ScopedContext scope(gpu);
  FERRY_RETURN_NOT_OK(scope.status());
  const DriverApi* api = gpu.api;
  return PollUntilReady([api, event] { return api->cuEventQuery(event); }, timeout, api,
                        "cuEventQuery", &gpu.health);
}

class CudaEvent final : public Event {
 public:
  CudaEvent(std::shared_ptr<Gpu> gpu, CUevent event) : gpu_(std::move(gpu)), event_(event) {}
  ~CudaEvent() override {
    ScopedContext scope(*gpu_);
    if (scope.status().ok()) (void)gpu_->api->cuEventDestroy_v2(event_);
  }
  EventKind kind() const override { return EventKind::kCuda; }
  // The spec's sync_event for CUDA: a pointer to the CUevent, valid as long
  // as this Event lives.
  void* sync_event() override { return &event_; }
  Status Wait(std::chrono::nanoseconds timeout) override {
    return WaitForEvent(*gpu_, event_, timeout);
  }

 private:
  std::shared_ptr<Gpu> gpu_;
  CUevent event_;
};

class CudaQueue final : public Queue {
 public:
  static Result<std::unique_ptr<CudaQueue>> Create(Device* device, std::shared_ptr<Gpu> gpu) {
    FERRY_RETURN_NOT_OK(CheckUsable(*gpu));
    ScopedContext scope(*gpu);
    FERRY_RETURN_NOT_OK(scope.status());
    CUstream stream = nullptr;
    // Non-blocking: no implicit ordering with the legacy default stream,
    // so ordering comes only from the events Ferry records and waits on.
    FERRY_RETURN_NOT_OK(CudaStatus(gpu->api,
                                   gpu->api->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING),
                                   "cuStreamCreate", &gpu->health));
    return std::unique_ptr<CudaQueue>(new CudaQueue(device, std::move(gpu), stream));
  }

  ~CudaQueue() override {
    // Work still queued completes; the driver frees the stream afterwards.
    ScopedContext scope(*gpu_);
    if (scope.status().ok()) (void)gpu_->api->cuStreamDestroy_v2(stream_);
  }

  Device* device() const override { return device_; }
  void* native() const override { return stream_; }

  Status Copy(CopyDirection direction, const void* src, void* dst, int64_t size) override {
    if (size < 0) return Status::Invalid("negative copy size " + std::to_string(size));
    if (size == 0) return Status::OK();
    if (src == nullptr || dst == nullptr) {
      return Status::Invalid("copy of " + std::to_string(size) + " bytes with a null " +
                             (src == nullptr ? "source" : "destination"));
    }
    FERRY_RETURN_NOT_OK(CheckUsable(*gpu_));
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    // Unified addressing lets the driver tell host from device memory, so one
    // call serves every direction and every memory kind (pinned, managed,
    // pageable); the direction only labels the bytes for telemetry.
    FERRY_RETURN_NOT_OK(CudaStatus(gpu_->api,
                                   gpu_->api->cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                                                            reinterpret_cast<CUdeviceptr>(src),
                                                            static_cast<size_t>(size), stream_),
                                   "cuMemcpyAsync", &gpu_->health));
    CountCopy(direction, size);
    return Status::OK();
  }

  Result<EventPtr> RecordEvent() override {
    FERRY_RETURN_NOT_OK(CheckUsable(*gpu_));
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    const DriverApi* api = gpu_->api;
    CUevent event = nullptr;
    FERRY_RETURN_NOT_OK(CudaStatus(api, api->cuEventCreate(&event, CU_EVENT_DISABLE_TIMING),
                                   "cuEventCreate", &gpu_->health));
    Status recorded =
        CudaStatus(api, api->cuEventRecord(event, stream_), "cuEventRecord", &gpu_->health);
    if (!recorded.ok()) {
      (void)api->cuEventDestroy_v2(event);
      return recorded;
    }
    return EventPtr(std::make_shared<CudaEvent>(gpu_, event));
  }

  Status WaitEvent(void* sync_event) override {
    if (sync_event == nullptr) return Status::OK();
    const CUevent event = *static_cast<CUevent*>(sync_event);
    if (event == nullptr) return Status::Invalid("sync_event points to a null CUevent");
    FERRY_RETURN_NOT_OK(CheckUsable(*gpu_));
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    // The event may come from another context or GPU; the driver orders the
    // stream after it without involving the host.
    FERRY_RETURN_NOT_OK(
        CudaStatus(gpu_->api, gpu_->api->cuStreamWaitEvent(stream_, event, CU_EVENT_WAIT_DEFAULT),
                   "cuStreamWaitEvent", &gpu_->health));
    CountEventWait(0);  // the host does not wait at all
    return Status::OK();
  }

  Status Synchronize() override {
    FERRY_RETURN_NOT_OK(CheckUsable(*gpu_));
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    return CudaStatus(gpu_->api, gpu_->api->cuStreamSynchronize(stream_), "cuStreamSynchronize",
                      &gpu_->health);
  }

 private:
  CudaQueue(Device* device, std::shared_ptr<Gpu> gpu, CUstream stream)
      : device_(device), gpu_(std::move(gpu)), stream_(stream) {}

  Device* device_;
  std::shared_ptr<Gpu> gpu_;
  CUstream stream_;
};

// Frees one allocation of a given memory kind when its last Buffer goes.
struct CudaMemoryRelease {
  std::shared_ptr<Gpu> gpu;
  DeviceType kind;
  void operator()(void* address) const {
    // A destructor has no one to report to; a failed free leaks at worst.
    ScopedContext scope(*gpu);
    if (!scope.status().ok()) return;
    // Work still queued on any stream may use this memory. The driver's free
    // is documented to synchronize; draining the context first makes that
    // explicit, since a kernel writing freed memory would poison the context.
    (void)gpu->api->cuCtxSynchronize();
    if (kind == DeviceType::kCudaHost) {
      (void)gpu->api->cuMemFreeHost(address);
    } else {
      (void)gpu->api->cuMemFree_v2(reinterpret_cast<CUdeviceptr>(address));
    }
  }
};

// Closes memory opened with cuIpcOpenMemHandle when its last Buffer goes.
struct IpcMemoryClose {
  std::shared_ptr<Gpu> gpu;
  void operator()(void* address) const {
    ScopedContext scope(*gpu);
    if (!scope.status().ok()) return;
    // Our own queued work may still read it.
    (void)gpu->api->cuCtxSynchronize();
    (void)gpu->api->cuIpcCloseMemHandle(reinterpret_cast<CUdeviceptr>(address));
  }
};

class CudaDevice final : public Device {
 public:
  static Result<std::shared_ptr<CudaDevice>> Create(std::shared_ptr<Gpu> gpu, DeviceType kind) {
    auto device = std::shared_ptr<CudaDevice>(new CudaDevice(gpu, kind));
    FERRY_ASSIGN_OR_RAISE(device->default_queue_, CudaQueue::Create(device.get(), std::move(gpu)));
    return device;
  }

  DeviceType type() const override { return kind_; }
  int64_t id() const override { return gpu_->ordinal; }
  std::string name() const override {
    switch (kind_) {
      case DeviceType::kCudaHost:
        return gpu_->name + " (pinned host memory)";
      case DeviceType::kCudaManaged:
        return gpu_->name + " (managed memory)";
      default:
        return gpu_->name;
    }
  }
  EventKind event_kind() const override { return EventKind::kCuda; }

  Result<BufferPtr> Allocate(int64_t size) override {
    if (size < 0) {
      return Status::Invalid("negative allocation size " + std::to_string(size) + " on " + name());
    }
    FERRY_RETURN_NOT_OK(CheckUsable(*gpu_));
    // Size 0 still gets a real allocation: Arrow buffers need a valid address.
    const auto padded = static_cast<size_t>(std::max(PaddedSize(size), kBufferAlignment));
    auto address = AllocateRaw(padded);
    if (!address.ok()) return address.status().WithPrefix(name() + ": ");
    std::shared_ptr<void> owner(*address, CudaMemoryRelease{gpu_, kind_});
    if (reinterpret_cast<uintptr_t>(*address) % kBufferAlignment != 0) {
      return Status::UnknownError("the CUDA driver returned memory not aligned to " +
                                  std::to_string(kBufferAlignment) + " bytes");
    }
    return std::make_shared<Buffer>(static_cast<const uint8_t*>(*address), size, std::move(owner));
  }

  Result<QueuePtr> CreateQueue() override {
    FERRY_ASSIGN_OR_RAISE(auto queue, CudaQueue::Create(this, gpu_));
    return QueuePtr(std::move(queue));
  }

  Queue* default_queue() override { return default_queue_.get(); }

  Status HostWait(void* sync_event, std::chrono::nanoseconds timeout) override {
    if (sync_event == nullptr) return Status::OK();
    const CUevent event = *static_cast<CUevent*>(sync_event);
    if (event == nullptr) return Status::Invalid("sync_event points to a null CUevent");
    const auto start = std::chrono::steady_clock::now();
    Status status = WaitForEvent(*gpu_, event, timeout);
    CountEventWait(std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count());
    return status;
  }

  Status CheckHealth() override { return CheckUsable(*gpu_); }

  // Only plain device memory (cuMemAlloc) has IPC handles; pinned and
  // managed memory do not.
  bool SupportsIpc() const override { return kind_ == DeviceType::kCuda && gpu_->ipc; }

  Result<IpcMemoryHandle> ExportIpcMemory(const void* address, int64_t size) override {
    FERRY_RETURN_NOT_OK(CheckIpc());
    if (address == nullptr || size < 0) {
      return Status::Invalid("ExportIpcMemory: a null address or a negative size on " + name());
    }
    const DriverApi* api = gpu_->api;
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    // The handle names the allocation, so find its base first.
    const auto pointer = reinterpret_cast<CUdeviceptr>(address);
    CUdeviceptr base = 0;
    size_t allocation_size = 0;
    FERRY_RETURN_NOT_OK(CudaStatus(api,
                                   api->cuMemGetAddressRange_v2(&base, &allocation_size, pointer),
                                   "cuMemGetAddressRange_v2", &gpu_->health)
                            .WithPrefix(name() + ": memory to export is not a CUDA allocation: "));
    const uint64_t offset = pointer - base;
    if (offset > allocation_size || static_cast<uint64_t>(size) > allocation_size - offset) {
      return Status::Invalid("ExportIpcMemory: " + std::to_string(size) + " bytes at offset " +
                             std::to_string(offset) + " run past the allocation of " +
                             std::to_string(allocation_size) + " bytes");
    }
    CUipcMemHandle native{};
    FERRY_RETURN_NOT_OK(
        CudaStatus(api, api->cuIpcGetMemHandle(&native, base), "cuIpcGetMemHandle", &gpu_->health));
    IpcMemoryHandle handle;
    static_assert(sizeof(native) == IpcMemoryHandle::kBytes);
    std::memcpy(handle.bytes.data(), &native, sizeof(native));
    handle.allocation_size = static_cast<int64_t>(allocation_size);
    handle.offset = static_cast<int64_t>(offset);
    handle.size = size;
    return handle;
  }

  Result<BufferPtr> OpenIpcMemory(const IpcMemoryHandle& handle) override {
    FERRY_RETURN_NOT_OK(CheckIpc());
    if (handle.allocation_size <= 0 || handle.offset < 0 || handle.size < 0 ||
        handle.offset > handle.allocation_size ||
        handle.size > handle.allocation_size - handle.offset) {
      return Status::Invalid("OpenIpcMemory: malformed handle (range [" +
                             std::to_string(handle.offset) + ", +" + std::to_string(handle.size) +
                             ") of an allocation of " + std::to_string(handle.allocation_size) +
                             " bytes)");
    }
    const DriverApi* api = gpu_->api;
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    CUipcMemHandle native;
    std::memcpy(&native, handle.bytes.data(), sizeof(native));
    CUdeviceptr base = 0;
    FERRY_RETURN_NOT_OK(
        CudaStatus(api,
                   api->cuIpcOpenMemHandle_v2(&base, native, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                   "cuIpcOpenMemHandle_v2", &gpu_->health)
            .WithPrefix(name() + ": "));
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the driver hands out integers
    std::shared_ptr<void> owner(reinterpret_cast<void*>(base), IpcMemoryClose{gpu_});
    // The handle's sizes are the sender's word: hold them against the mapping.
    CUdeviceptr mapped_base = 0;
    size_t mapped_size = 0;
    FERRY_RETURN_NOT_OK(CudaStatus(api,
                                   api->cuMemGetAddressRange_v2(&mapped_base, &mapped_size, base),
                                   "cuMemGetAddressRange_v2", &gpu_->health));
    if (mapped_base != base || mapped_size < static_cast<size_t>(handle.allocation_size)) {
      return Status::Invalid("OpenIpcMemory: the handle claims an allocation of " +
                             std::to_string(handle.allocation_size) +
                             " bytes, but the opened one has " + std::to_string(mapped_size));
    }
    // A CUDA device address is an integer (CUdeviceptr).
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    const auto* data = reinterpret_cast<const uint8_t*>(base) + handle.offset;
    return std::make_shared<Buffer>(data, handle.size, std::move(owner));
  }

  Result<std::pair<EventPtr, IpcEventHandle>> ExportIpcEvent(Queue* queue,
                                                             const EventPtr& after) override {
    FERRY_RETURN_NOT_OK(CheckIpc());
    if (queue == nullptr) queue = default_queue_.get();
    const Device* owner = queue->device();
    if (owner == nullptr || owner->id() != id() || owner->event_kind() != EventKind::kCuda ||
        queue->native() == nullptr) {
      return Status::Invalid("ExportIpcEvent: the queue does not belong to " + name());
    }
    if (after != nullptr) {
      if (after->kind() != EventKind::kCuda) {
        return Status::Invalid(std::string("ExportIpcEvent: cannot wait on a ") +
                               EventKindName(after->kind()) + " event on " + name());
      }
      FERRY_RETURN_NOT_OK(queue->WaitEvent(after->sync_event()));
    }
    const DriverApi* api = gpu_->api;
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    CUevent native = nullptr;
    FERRY_RETURN_NOT_OK(CudaStatus(
        api, api->cuEventCreate(&native, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING),
        "cuEventCreate(INTERPROCESS)", &gpu_->health));
    auto event = std::make_shared<CudaEvent>(gpu_, native);
    FERRY_RETURN_NOT_OK(
        CudaStatus(api, api->cuEventRecord(native, static_cast<CUstream>(queue->native())),
                   "cuEventRecord", &gpu_->health));
    CUipcEventHandle handle_native{};
    FERRY_RETURN_NOT_OK(CudaStatus(api, api->cuIpcGetEventHandle(&handle_native, native),
                                   "cuIpcGetEventHandle", &gpu_->health));
    IpcEventHandle handle;
    static_assert(sizeof(handle_native) == IpcEventHandle::kBytes);
    std::memcpy(handle.bytes.data(), &handle_native, sizeof(handle_native));
    return std::make_pair(EventPtr(std::move(event)), handle);
  }

  Result<EventPtr> OpenIpcEvent(const IpcEventHandle& handle) override {
    FERRY_RETURN_NOT_OK(CheckIpc());
    const DriverApi* api = gpu_->api;
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    CUipcEventHandle native;
    std::memcpy(&native, handle.bytes.data(), sizeof(native));
    CUevent event = nullptr;
    FERRY_RETURN_NOT_OK(CudaStatus(api, api->cuIpcOpenEventHandle(&event, native),
                                   "cuIpcOpenEventHandle", &gpu_->health)
                            .WithPrefix(name() + ": "));
    return EventPtr(std::make_shared<CudaEvent>(gpu_, event));
  }

 private:
  CudaDevice(std::shared_ptr<Gpu> gpu, DeviceType kind) : gpu_(std::move(gpu)), kind_(kind) {}

  Status CheckIpc() const {
    if (!SupportsIpc()) {
      return Status::NotImplemented(
          name() + (kind_ == DeviceType::kCuda
                        ? std::string(": the GPU does not support interprocess handles")
                        : std::string(" has no interprocess handles (only plain CUDA device "
                                      "memory does)")));
    }
    return CheckUsable(*gpu_);
  }

  // `padded` bytes of this device's memory kind; the caller owns them.
  Result<void*> AllocateRaw(size_t padded) {
    const DriverApi* api = gpu_->api;
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    switch (kind_) {
      case DeviceType::kCuda: {
        CUdeviceptr pointer = 0;
        FERRY_RETURN_NOT_OK(
            CudaStatus(api, api->cuMemAlloc_v2(&pointer, padded), "cuMemAlloc_v2", &gpu_->health));
        // NOLINTNEXTLINE(performance-no-int-to-ptr): the driver hands out integers
        return reinterpret_cast<void*>(pointer);
      }
      case DeviceType::kCudaHost: {
        // Pinning more than the machine has can only fail, and trying may
        // first push the host into swapping: refuse it up front.
        const long pages = sysconf(_SC_PHYS_PAGES);
        const long page_size = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page_size > 0 &&
            padded > static_cast<size_t>(pages) * static_cast<size_t>(page_size)) {
          return Status::OutOfMemory("refusing to pin " + std::to_string(padded) +
                                     " bytes: more than the host's physical memory");
        }
        // Portable: pinned for every context, not only this GPU's; mapped:
        // kernels read it at the same address the host uses.
        void* address = nullptr;
        FERRY_RETURN_NOT_OK(
            CudaStatus(api,
                       api->cuMemHostAlloc(&address, padded,
                                           CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
                       "cuMemHostAlloc", &gpu_->health));
        return address;
      }
      case DeviceType::kCudaManaged: {
        // Oversubscribing managed memory can wedge the GPU, not just fail:
        // never ask for more than is free right now.
        size_t free_bytes = 0;
        size_t total_bytes = 0;
        FERRY_RETURN_NOT_OK(CudaStatus(api, api->cuMemGetInfo_v2(&free_bytes, &total_bytes),
                                       "cuMemGetInfo_v2", &gpu_->health));
        if (padded > free_bytes) {
          return Status::OutOfMemory("refusing a managed allocation of " + std::to_string(padded) +
                                     " bytes: only " + std::to_string(free_bytes) +
                                     " bytes of the GPU are free");
        }
        CUdeviceptr pointer = 0;
        FERRY_RETURN_NOT_OK(
            CudaStatus(api, api->cuMemAllocManaged(&pointer, padded, CU_MEM_ATTACH_GLOBAL),
                       "cuMemAllocManaged", &gpu_->health));
        // NOLINTNEXTLINE(performance-no-int-to-ptr): the driver hands out integers
        return reinterpret_cast<void*>(pointer);
      }
      default:
        return Status::UnknownError("CUDA device of unexpected kind");
    }
  }

  std::shared_ptr<Gpu> gpu_;
  DeviceType kind_;
  std::unique_ptr<CudaQueue> default_queue_;
};

constexpr DeviceType kCudaKinds[] = {DeviceType::kCuda, DeviceType::kCudaHost,
                                     DeviceType::kCudaManaged};

// Opens one GPU: its name, attributes and retained primary context.
Result<std::shared_ptr<Gpu>> OpenGpu(const DriverApi* api, int ordinal) {
  auto gpu = std::make_shared<Gpu>();
  gpu->api = api;
  gpu->ordinal = ordinal;
  FERRY_RETURN_NOT_OK(CudaStatus(api, api->cuDeviceGet(&gpu->device, ordinal), "cuDeviceGet"));
  char name[256] = {};
  FERRY_RETURN_NOT_OK(CudaStatus(api, api->cuDeviceGetName(name, sizeof(name) - 1, gpu->device),
                                 "cuDeviceGetName"));
  gpu->name = name;
  int unified_addressing = 0;
  FERRY_RETURN_NOT_OK(
      CudaStatus(api,
                 api->cuDeviceGetAttribute(&unified_addressing,
                                           CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, gpu->device),
                 "cuDeviceGetAttribute(UNIFIED_ADDRESSING)"));
  if (unified_addressing == 0) {
    // Ferry hands device pointers around as plain addresses.
    return Status::NotImplemented(gpu->Describe() + " lacks unified addressing");
  }
  if (api->cuDeviceGetAttribute(&gpu->clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, gpu->device) !=
      CUDA_SUCCESS) {
    gpu->clock_khz = 0;  // only a hint for test kernels
  }
  int ipc_events = 0;
  gpu->ipc = api->cuDeviceGetAttribute(&ipc_events, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED,
                                       gpu->device) == CUDA_SUCCESS &&
             ipc_events != 0;
  FERRY_RETURN_NOT_OK(CudaStatus(api, api->cuDevicePrimaryCtxRetain(&gpu->context, gpu->device),
                                 "cuDevicePrimaryCtxRetain"));
  return gpu;
}

}  // namespace

Result<std::shared_ptr<Gpu>> GpuForOrdinal(int64_t ordinal) {
  auto& discovered = Discovered();
  std::lock_guard<std::mutex> lock(discovered.mutex);
  for (const auto& gpu : discovered.gpus) {
    if (gpu->ordinal == ordinal) return gpu;
  }
  return Status::NotImplemented("no CUDA device with ordinal " + std::to_string(ordinal) +
                                " was discovered");
}

Discovery DiscoverCudaFrom(const char* library) {
  Discovery out;
  auto all_absent = [&out](const std::string& reason) {
    for (DeviceType kind : kCudaKinds) out.absent.emplace_back(kind, reason);
    return out;
  };
  auto loaded = LoadDriver(library);
  if (!loaded.ok()) return all_absent(loaded.status().message());
  const DriverApi* api = *loaded;
  Status initialized = CudaStatus(api, api->cuInit(0), "cuInit");
  if (!initialized.ok()) {
    return all_absent(std::string(library) + " is loaded but " + initialized.message());
  }
  int count = 0;
  Status counted = CudaStatus(api, api->cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (!counted.ok())
    return all_absent(std::string(library) + " is loaded but " + counted.message());
  if (count <= 0) return all_absent(std::string(library) + " is loaded but reports no CUDA GPU");

  for (int ordinal = 0; ordinal < count; ++ordinal) {
    auto gpu = OpenGpu(api, ordinal);
    if (!gpu.ok()) {
      for (DeviceType kind : kCudaKinds) {
        out.absent.emplace_back(
            kind, "CUDA device " + std::to_string(ordinal) + ": " + gpu.status().message());
      }
      continue;
    }
    int managed_memory = 0;
    if (api->cuDeviceGetAttribute(&managed_memory, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
                                  (*gpu)->device) != CUDA_SUCCESS) {
      managed_memory = 0;
    }
    for (DeviceType kind : kCudaKinds) {
      if (kind == DeviceType::kCudaManaged && managed_memory == 0) {
        out.absent.emplace_back(kind, (*gpu)->Describe() + " does not support managed memory");
        continue;
      }
      auto device = CudaDevice::Create(*gpu, kind);
      if (!device.ok()) {
        out.absent.emplace_back(kind, (*gpu)->Describe() + ": " + device.status().message());
        continue;
      }
      out.devices.push_back(std::move(*device));
    }
    if (std::string_view(library) == "libcuda.so.1") {
      auto& discovered = Discovered();
      std::lock_guard<std::mutex> lock(discovered.mutex);
      discovered.gpus.push_back(*gpu);
    }
  }
  return out;
}

}  // namespace cuda

Discovery DiscoverCuda() { return cuda::DiscoverCudaFrom("libcuda.so.1"); }

}  // namespace ferry::device::internal
