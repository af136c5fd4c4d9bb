// The OpenCL backend, through the ICD loader (PoCL in CI). Buffers are shared
// virtual memory (clSVMAlloc) so that an Arrow buffer address is a real
// pointer that kernels take as is; queues are in-order command queues; a sync
// event is a pointer to a cl_event that the producer's Event owns. The host
// never dereferences device memory: it copies with clEnqueueSVMMemcpy.
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exchange/device/backend.h"

namespace ferry::device {
namespace internal {

namespace {

struct ErrorName {
  cl_int code;
  const char* name;
};

// Stringizing keeps every name equal to the constant it stands for.
#define FERRY_CL_ERROR(code) \
  ErrorName { code, #code }
constexpr ErrorName kErrorNames[] = {
    FERRY_CL_ERROR(CL_SUCCESS),
    FERRY_CL_ERROR(CL_DEVICE_NOT_FOUND),
    FERRY_CL_ERROR(CL_DEVICE_NOT_AVAILABLE),
    FERRY_CL_ERROR(CL_COMPILER_NOT_AVAILABLE),
    FERRY_CL_ERROR(CL_MEM_OBJECT_ALLOCATION_FAILURE),
    FERRY_CL_ERROR(CL_OUT_OF_RESOURCES),
    FERRY_CL_ERROR(CL_OUT_OF_HOST_MEMORY),
    FERRY_CL_ERROR(CL_PROFILING_INFO_NOT_AVAILABLE),
    FERRY_CL_ERROR(CL_MEM_COPY_OVERLAP),
    FERRY_CL_ERROR(CL_IMAGE_FORMAT_MISMATCH),
    FERRY_CL_ERROR(CL_IMAGE_FORMAT_NOT_SUPPORTED),
    FERRY_CL_ERROR(CL_BUILD_PROGRAM_FAILURE),
    FERRY_CL_ERROR(CL_MAP_FAILURE),
    FERRY_CL_ERROR(CL_MISALIGNED_SUB_BUFFER_OFFSET),
    FERRY_CL_ERROR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST),
    FERRY_CL_ERROR(CL_COMPILE_PROGRAM_FAILURE),
    FERRY_CL_ERROR(CL_LINKER_NOT_AVAILABLE),
    FERRY_CL_ERROR(CL_LINK_PROGRAM_FAILURE),
    FERRY_CL_ERROR(CL_DEVICE_PARTITION_FAILED),
    FERRY_CL_ERROR(CL_KERNEL_ARG_INFO_NOT_AVAILABLE),
    FERRY_CL_ERROR(CL_INVALID_VALUE),
    FERRY_CL_ERROR(CL_INVALID_DEVICE_TYPE),
    FERRY_CL_ERROR(CL_INVALID_PLATFORM),
    FERRY_CL_ERROR(CL_INVALID_DEVICE),
    FERRY_CL_ERROR(CL_INVALID_CONTEXT),
    FERRY_CL_ERROR(CL_INVALID_QUEUE_PROPERTIES),
    FERRY_CL_ERROR(CL_INVALID_COMMAND_QUEUE),
    FERRY_CL_ERROR(CL_INVALID_HOST_PTR),
    FERRY_CL_ERROR(CL_INVALID_MEM_OBJECT),
    FERRY_CL_ERROR(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR),
    FERRY_CL_ERROR(CL_INVALID_IMAGE_SIZE),
    FERRY_CL_ERROR(CL_INVALID_SAMPLER),
    FERRY_CL_ERROR(CL_INVALID_BINARY),
    FERRY_CL_ERROR(CL_INVALID_BUILD_OPTIONS),
    FERRY_CL_ERROR(CL_INVALID_PROGRAM),
    FERRY_CL_ERROR(CL_INVALID_PROGRAM_EXECUTABLE),
    FERRY_CL_ERROR(CL_INVALID_KERNEL_NAME),
    FERRY_CL_ERROR(CL_INVALID_KERNEL_DEFINITION),
    FERRY_CL_ERROR(CL_INVALID_KERNEL),
    FERRY_CL_ERROR(CL_INVALID_ARG_INDEX),
    FERRY_CL_ERROR(CL_INVALID_ARG_VALUE),
    FERRY_CL_ERROR(CL_INVALID_ARG_SIZE),
    FERRY_CL_ERROR(CL_INVALID_KERNEL_ARGS),
    FERRY_CL_ERROR(CL_INVALID_WORK_DIMENSION),
    FERRY_CL_ERROR(CL_INVALID_WORK_GROUP_SIZE),
    FERRY_CL_ERROR(CL_INVALID_WORK_ITEM_SIZE),
    FERRY_CL_ERROR(CL_INVALID_GLOBAL_OFFSET),
    FERRY_CL_ERROR(CL_INVALID_EVENT_WAIT_LIST),
    FERRY_CL_ERROR(CL_INVALID_EVENT),
    FERRY_CL_ERROR(CL_INVALID_OPERATION),
    FERRY_CL_ERROR(CL_INVALID_GL_OBJECT),
    FERRY_CL_ERROR(CL_INVALID_BUFFER_SIZE),
    FERRY_CL_ERROR(CL_INVALID_MIP_LEVEL),
    FERRY_CL_ERROR(CL_INVALID_GLOBAL_WORK_SIZE),
    FERRY_CL_ERROR(CL_INVALID_PROPERTY),
    FERRY_CL_ERROR(CL_INVALID_IMAGE_DESCRIPTOR),
    FERRY_CL_ERROR(CL_INVALID_COMPILER_OPTIONS),
    FERRY_CL_ERROR(CL_INVALID_LINKER_OPTIONS),
    FERRY_CL_ERROR(CL_INVALID_DEVICE_PARTITION_COUNT),
    FERRY_CL_ERROR(CL_INVALID_PIPE_SIZE),
    FERRY_CL_ERROR(CL_INVALID_DEVICE_QUEUE),
    FERRY_CL_ERROR(CL_INVALID_SPEC_ID),
    FERRY_CL_ERROR(CL_MAX_SIZE_RESTRICTION_EXCEEDED),
    FERRY_CL_ERROR(CL_PLATFORM_NOT_FOUND_KHR),
};
#undef FERRY_CL_ERROR

}  // namespace

const char* OpenCLErrorName(int32_t code) {
  for (const auto& entry : kErrorNames) {
    if (entry.code == code) return entry.name;
  }
  return "CL_UNKNOWN_ERROR";
}

Status OpenCLStatus(int32_t code, const char* call) {
  if (code == CL_SUCCESS) return Status::OK();
  std::string message =
      std::string(call) + " failed: " + OpenCLErrorName(code) + " (" + std::to_string(code) + ")";
  switch (code) {
    case CL_OUT_OF_HOST_MEMORY:
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return Status::OutOfMemory(std::move(message));
    default:
      // The CL_INVALID_* codes (-30 and below, down to the last core code)
      // mean the caller passed something wrong; the rest are runtime failures.
      if (code <= CL_INVALID_VALUE && code >= CL_MAX_SIZE_RESTRICTION_EXCEEDED) {
        return Status::Invalid(std::move(message));
      }
      return Status::IOError(std::move(message));
  }
}

}  // namespace internal

namespace {

using internal::OpenCLErrorName;
using internal::OpenCLStatus;

std::string FormatMillis(std::chrono::nanoseconds duration) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(duration.count()) / 1e6);
  return text;
}

const char* ExecutionStatusName(cl_int status) {
  switch (status) {
    case CL_COMPLETE:
      return "complete";
    case CL_RUNNING:
      return "running";
    case CL_SUBMITTED:
      return "submitted";
    case CL_QUEUED:
      return "queued";
    default:
      return OpenCLErrorName(status);
  }
}

// Polls `event` until it completes, fails or `timeout` passes. There is no
// blocking call here (clWaitForEvents cannot time out), so a stuck producer
// turns into TimedOut instead of a hang.
Status PollEvent(cl_event event, std::chrono::nanoseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::max(timeout, std::chrono::nanoseconds(0));
  // Short sleeps first so a nearly finished event costs microseconds; longer
  // ones later so a long wait does not burn a core.
  auto backoff = std::chrono::microseconds(5);
  constexpr auto kMaxBackoff = std::chrono::microseconds(1000);
  for (;;) {
    cl_int status = CL_QUEUED;
    FERRY_RETURN_NOT_OK(OpenCLStatus(
        clGetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, nullptr),
        "clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)"));
    if (status == CL_COMPLETE) return Status::OK();
    if (status < 0) {
      return Status::IOError(std::string("the OpenCL event's command failed: ") +
                             OpenCLErrorName(status) + " (" + std::to_string(status) + ")");
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return Status::TimedOut("OpenCL event not complete after " + FormatMillis(timeout) +
                              " (still " + ExecutionStatusName(status) + ")");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min<std::chrono::microseconds>(backoff * 2, kMaxBackoff);
  }
}

// Reads the cl_event a sync_event points to; null handles are refused because
// there is nothing to wait on and passing one to OpenCL is undefined.
Result<cl_event> EventFromSyncEvent(void* sync_event) {
  cl_event event = *static_cast<cl_event*>(sync_event);
  if (event == nullptr) {
    return Status::Invalid("the sync_event points to a null cl_event");
  }
  return event;
}

// One context per platform, shared by the platform's devices and kept alive
// by every buffer made in it.
class PlatformContext {
 public:
  PlatformContext(cl_context context, std::string name)
      : context_(context), name_(std::move(name)) {}
  ~PlatformContext() { clReleaseContext(context_); }
  PlatformContext(const PlatformContext&) = delete;
  PlatformContext& operator=(const PlatformContext&) = delete;

  cl_context context() const { return context_; }
  const std::string& name() const { return name_; }

 private:
  cl_context context_;
  std::string name_;
};

// What a device's buffers still need after the Device object may be gone:
// the context to free into, and the device's live queues, which are drained
// before a free because clSVMFree does not wait for queued commands that use
// the memory (freeing waits for the device, as cudaFree does). A queue held by
// a foreign event that never completes would hold a free as well; Ferry's own
// events are markers, which always complete.
class DeviceCore {
 public:
  DeviceCore(std::shared_ptr<PlatformContext> platform, cl_device_id device)
      : platform_(std::move(platform)), device_(device) {}

  cl_context context() const { return platform_->context(); }
  cl_device_id device() const { return device_; }

  void AddQueue(cl_command_queue queue) {
    std::lock_guard<std::mutex> lock(queues_mutex_);
    live_queues_.push_back(queue);
  }
  void RemoveQueue(cl_command_queue queue) {
    std::lock_guard<std::mutex> lock(queues_mutex_);
    live_queues_.erase(std::remove(live_queues_.begin(), live_queues_.end(), queue),
                       live_queues_.end());
  }

  void Free(void* pointer) {
    {
      // Holding the lock keeps every listed queue from being released meanwhile.
      std::lock_guard<std::mutex> lock(queues_mutex_);
      for (cl_command_queue queue : live_queues_) clFinish(queue);
    }
    clSVMFree(context(), pointer);
  }

  // Converts a CL result, remembering a vanished device as lost.
  Status Check(cl_int code, const char* call) {
    Status status = OpenCLStatus(code, call);
    if (code == CL_DEVICE_NOT_AVAILABLE || code == CL_DEVICE_NOT_FOUND) MarkLost(status);
    return status;
  }
  void MarkLost(const Status& reason) {
    std::lock_guard<std::mutex> lock(loss_mutex_);
    if (loss_.ok()) loss_ = reason.WithPrefix("OpenCL device lost: ");
  }
  Status loss() {
    std::lock_guard<std::mutex> lock(loss_mutex_);
    return loss_;
  }

 private:
  std::shared_ptr<PlatformContext> platform_;
  cl_device_id device_;
  std::mutex queues_mutex_;
  std::vector<cl_command_queue> live_queues_;  // guarded by queues_mutex_
  std::mutex loss_mutex_;
  Status loss_;  // guarded by loss_mutex_
};

// Owns one cl_event; sync_event() is the address of the handle, which stays
// put for the Event's lifetime because the Event is never moved.
class OpenCLEvent final : public Event {
 public:
  OpenCLEvent(cl_event event, std::shared_ptr<DeviceCore> core)
      : event_(event), core_(std::move(core)) {}
  ~OpenCLEvent() override { clReleaseEvent(event_); }
  OpenCLEvent(const OpenCLEvent&) = delete;
  OpenCLEvent& operator=(const OpenCLEvent&) = delete;

  EventKind kind() const override { return EventKind::kOpenCL; }
  void* sync_event() override { return &event_; }
  Status Wait(std::chrono::nanoseconds timeout) override { return PollEvent(event_, timeout); }

 private:
  cl_event event_;
  std::shared_ptr<DeviceCore> core_;  // the context outlives its events
};

class OpenCLQueue final : public Queue {
 public:
  static Result<std::unique_ptr<OpenCLQueue>> Make(Device* device,
                                                   std::shared_ptr<DeviceCore> core) {
    cl_int error = CL_SUCCESS;
    // No properties: an in-order queue, which is what the Queue contract means.
    cl_command_queue queue =
        clCreateCommandQueueWithProperties(core->context(), core->device(), nullptr, &error);
    FERRY_RETURN_NOT_OK(core->Check(error, "clCreateCommandQueueWithProperties"));
    return std::unique_ptr<OpenCLQueue>(new OpenCLQueue(device, std::move(core), queue));
  }

  ~OpenCLQueue() override {
    // Drain first: buffers freed later rely on the device's live queues, and
    // this one leaves that list here.
    clFinish(queue_);
    core_->RemoveQueue(queue_);
    clReleaseCommandQueue(queue_);
  }
  OpenCLQueue(const OpenCLQueue&) = delete;
  OpenCLQueue& operator=(const OpenCLQueue&) = delete;

  Device* device() const override { return device_; }
  void* native() const override { return queue_; }

  Status Copy(CopyDirection direction, const void* src, void* dst, int64_t size) override {
    if (size < 0) return Status::Invalid("negative copy size " + std::to_string(size));
    if (size == 0) return Status::OK();
    if (src == nullptr || dst == nullptr) {
      return Status::Invalid(std::string("OpenCL ") + CopyDirectionName(direction) + " copy of " +
                             std::to_string(size) + " bytes with a null " +
                             (src == nullptr ? "source" : "destination"));
    }
    FERRY_RETURN_NOT_OK(
        core_->Check(clEnqueueSVMMemcpy(queue_, CL_FALSE, dst, src, static_cast<size_t>(size), 0,
                                        nullptr, nullptr),
                     "clEnqueueSVMMemcpy"));
    internal::CountCopy(direction, size);
    return Status::OK();
  }

  Result<EventPtr> RecordEvent() override {
    cl_event event = nullptr;
    FERRY_RETURN_NOT_OK(core_->Check(clEnqueueMarkerWithWaitList(queue_, 0, nullptr, &event),
                                     "clEnqueueMarkerWithWaitList"));
    auto recorded = std::make_shared<OpenCLEvent>(event, core_);
    // Submit the work: another queue or a host poll can only see the event
    // complete once the commands before it have left this queue.
    FERRY_RETURN_NOT_OK(core_->Check(clFlush(queue_), "clFlush"));
    return EventPtr(std::move(recorded));
  }

  Status WaitEvent(void* sync_event) override {
    if (sync_event == nullptr) return Status::OK();
    FERRY_ASSIGN_OR_RAISE(cl_event event, EventFromSyncEvent(sync_event));
    // An event of another context is refused by OpenCL (CL_INVALID_CONTEXT).
    FERRY_RETURN_NOT_OK(core_->Check(clEnqueueBarrierWithWaitList(queue_, 1, &event, nullptr),
                                     "clEnqueueBarrierWithWaitList"));
    internal::CountEventWait(0);  // the host does not wait at all
    return Status::OK();
  }

  Status Synchronize() override { return core_->Check(clFinish(queue_), "clFinish"); }

 private:
  OpenCLQueue(Device* device, std::shared_ptr<DeviceCore> core, cl_command_queue queue)
      : device_(device), core_(std::move(core)), queue_(queue) {
    core_->AddQueue(queue_);
  }

  Device* device_;
  std::shared_ptr<DeviceCore> core_;
  cl_command_queue queue_;
};

enum class SvmKind : uint8_t { kFineGrainedBuffer, kCoarseGrainedBuffer };

const char* SvmKindName(SvmKind kind) {
  return kind == SvmKind::kFineGrainedBuffer ? "fine-grained buffer" : "coarse-grained buffer";
}

class OpenCLDevice final : public Device {
 public:
  OpenCLDevice(int64_t id, std::string name, std::shared_ptr<DeviceCore> core, SvmKind svm_kind,
               int64_t max_allocation)
      : id_(id),
        name_(std::move(name)),
        core_(std::move(core)),
        svm_kind_(svm_kind),
        max_allocation_(max_allocation) {}

  // The default queue needs the device's address, so it is made after it.
  Status Init() {
    FERRY_ASSIGN_OR_RAISE(default_queue_, OpenCLQueue::Make(this, core_));
    return Status::OK();
  }

  DeviceType type() const override { return DeviceType::kOpenCL; }
  int64_t id() const override { return id_; }
  std::string name() const override { return name_; }
  EventKind event_kind() const override { return EventKind::kOpenCL; }
  SvmKind svm_kind() const { return svm_kind_; }

  Result<BufferPtr> Allocate(int64_t size) override {
    if (size < 0) return Status::Invalid("negative allocation size " + std::to_string(size));
    FERRY_RETURN_NOT_OK(core_->loss());
    // clSVMAlloc refuses 0 bytes; a zero-size buffer still needs an address.
    const int64_t bytes = std::max(PaddedSize(size), kBufferAlignment);
    if (bytes > max_allocation_) {
      return Status::OutOfMemory("cannot allocate " + std::to_string(size) + " bytes on " + name_ +
                                 ": its largest allocation is " + std::to_string(max_allocation_) +
                                 " bytes");
    }
    cl_svm_mem_flags flags = CL_MEM_READ_WRITE;
    if (svm_kind_ == SvmKind::kFineGrainedBuffer) flags |= CL_MEM_SVM_FINE_GRAIN_BUFFER;
    void* pointer = clSVMAlloc(core_->context(), flags, static_cast<size_t>(bytes),
                               static_cast<cl_uint>(kBufferAlignment));
    if (pointer == nullptr) {
      return Status::OutOfMemory("clSVMAlloc of " + std::to_string(bytes) + " bytes (" +
                                 SvmKindName(svm_kind_) + " SVM) failed on " + name_);
    }
    std::shared_ptr<const void> owner(
        pointer, [core = core_](const void* memory) { core->Free(const_cast<void*>(memory)); });
    return std::make_shared<Buffer>(static_cast<const uint8_t*>(pointer), size, std::move(owner));
  }

  Result<QueuePtr> CreateQueue() override {
    FERRY_RETURN_NOT_OK(core_->loss());
    FERRY_ASSIGN_OR_RAISE(auto queue, OpenCLQueue::Make(this, core_));
    return QueuePtr(std::move(queue));
  }

  Queue* default_queue() override { return default_queue_.get(); }

  // Trusts a non-null sync_event to point to a live cl_event of the producer:
  // an arbitrary pointer cannot be validated, only a null handle can.
  Status HostWait(void* sync_event, std::chrono::nanoseconds timeout) override {
    if (sync_event == nullptr) return Status::OK();
    FERRY_ASSIGN_OR_RAISE(cl_event event, EventFromSyncEvent(sync_event));
    const auto start = std::chrono::steady_clock::now();
    Status status = PollEvent(event, timeout);
    internal::CountEventWait(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now() - start)
                                 .count());
    return status;
  }

  Status CheckHealth() override {
    FERRY_RETURN_NOT_OK(core_->loss());
    cl_bool available = CL_FALSE;
    Status query = core_->Check(clGetDeviceInfo(core_->device(), CL_DEVICE_AVAILABLE,
                                                sizeof(available), &available, nullptr),
                                "clGetDeviceInfo(CL_DEVICE_AVAILABLE)");
    if (!query.ok()) {
      core_->MarkLost(query);
    } else if (available != CL_TRUE) {
      core_->MarkLost(Status::IOError(name_ + " reports CL_DEVICE_AVAILABLE = false"));
    }
    return core_->loss();
  }

 private:
  int64_t id_;
  std::string name_;
  std::shared_ptr<DeviceCore> core_;
  SvmKind svm_kind_;
  int64_t max_allocation_;
  std::unique_ptr<OpenCLQueue> default_queue_;
};

// ---- Discovery ------------------------------------------------------------

// A string property; OpenCL counts the terminating NUL, and some drivers pad
// with spaces.
template <typename Handle, typename Info, typename Getter>
Result<std::string> InfoString(Getter getter, Handle handle, Info info, const char* call) {
  size_t size = 0;
  FERRY_RETURN_NOT_OK(OpenCLStatus(getter(handle, info, 0, nullptr, &size), call));
  std::string text(size, '\0');
  FERRY_RETURN_NOT_OK(OpenCLStatus(getter(handle, info, size, text.data(), nullptr), call));
  while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
  return text;
}

Result<std::vector<cl_device_id>> PlatformDevices(cl_platform_id platform) {
  cl_uint count = 0;
  cl_int error = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &count);
  if (error == CL_DEVICE_NOT_FOUND) return std::vector<cl_device_id>{};
  FERRY_RETURN_NOT_OK(OpenCLStatus(error, "clGetDeviceIDs"));
  std::vector<cl_device_id> devices(count);
  FERRY_RETURN_NOT_OK(
      OpenCLStatus(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, count, devices.data(), nullptr),
                   "clGetDeviceIDs"));
  return devices;
}

// The SVM kind to use on `device`, or an error saying why it has none.
Result<SvmKind> ChooseSvmKind(cl_device_id device) {
  cl_device_svm_capabilities capabilities = 0;
  cl_int error = clGetDeviceInfo(device, CL_DEVICE_SVM_CAPABILITIES, sizeof(capabilities),
                                 &capabilities, nullptr);
  if (error == CL_INVALID_VALUE) {
    capabilities = 0;  // an OpenCL 1.x device, which does not know the query
  } else {
    FERRY_RETURN_NOT_OK(OpenCLStatus(error, "clGetDeviceInfo(CL_DEVICE_SVM_CAPABILITIES)"));
  }
  if (capabilities & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) return SvmKind::kFineGrainedBuffer;
  if (capabilities & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) return SvmKind::kCoarseGrainedBuffer;
  return Status::NotImplemented(
      "no shared virtual memory (OpenCL 2.0 SVM is needed for Arrow buffer addresses)");
}

Result<std::shared_ptr<OpenCLDevice>> MakeDevice(int64_t id, cl_device_id device,
                                                 const std::shared_ptr<PlatformContext>& platform) {
  FERRY_ASSIGN_OR_RAISE(std::string device_name, InfoString(clGetDeviceInfo, device, CL_DEVICE_NAME,
                                                            "clGetDeviceInfo(CL_DEVICE_NAME)"));
  const std::string name = device_name + " (" + platform->name() + ")";
  auto svm_kind = ChooseSvmKind(device);
  if (!svm_kind.ok()) return svm_kind.status().WithPrefix(name + ": ");
  cl_ulong max_allocation = 0;
  FERRY_RETURN_NOT_OK(
      OpenCLStatus(clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(max_allocation),
                                   &max_allocation, nullptr),
                   "clGetDeviceInfo(CL_DEVICE_MAX_MEM_ALLOC_SIZE)")
          .WithPrefix(name + ": "));
  auto out =
      std::make_shared<OpenCLDevice>(id, name, std::make_shared<DeviceCore>(platform, device),
                                     *svm_kind, static_cast<int64_t>(max_allocation));
  FERRY_RETURN_NOT_OK(out->Init().WithPrefix(name + ": "));
  return out;
}

std::string JoinReasons(const std::vector<std::string>& reasons) {
  std::string text;
  for (const auto& reason : reasons) text += (text.empty() ? "" : "; ") + reason;
  return text;
}

}  // namespace

namespace internal {

const char* OpenCLSvmKind(const Device* device) {
  const auto* opencl = dynamic_cast<const OpenCLDevice*>(device);
  return opencl == nullptr ? nullptr : SvmKindName(opencl->svm_kind());
}

Discovery DiscoverOpenCL() {
  Discovery out;
  cl_uint platform_count = 0;
  cl_int error = clGetPlatformIDs(0, nullptr, &platform_count);
  if (error == CL_PLATFORM_NOT_FOUND_KHR || (error == CL_SUCCESS && platform_count == 0)) {
    out.absent.emplace_back(DeviceType::kOpenCL,
                            "no OpenCL platform found (is an ICD such as PoCL installed?)");
    return out;
  }
  if (error != CL_SUCCESS) {
    out.absent.emplace_back(DeviceType::kOpenCL, OpenCLStatus(error, "clGetPlatformIDs").message());
    return out;
  }
  std::vector<cl_platform_id> platforms(platform_count);
  error = clGetPlatformIDs(platform_count, platforms.data(), nullptr);
  if (error != CL_SUCCESS) {
    out.absent.emplace_back(DeviceType::kOpenCL, OpenCLStatus(error, "clGetPlatformIDs").message());
    return out;
  }

  std::vector<std::string> skipped;
  int64_t next_id = 0;
  for (cl_platform_id platform : platforms) {
    auto platform_name =
        InfoString(clGetPlatformInfo, platform, CL_PLATFORM_NAME, "clGetPlatformInfo");
    if (!platform_name.ok()) {
      skipped.push_back(platform_name.status().message());
      continue;
    }
    auto devices = PlatformDevices(platform);
    if (!devices.ok()) {
      skipped.push_back(*platform_name + ": " + devices.status().message());
      continue;
    }
    if (devices->empty()) continue;
    const cl_context_properties properties[] = {
        CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(platform), 0};
    cl_context context = clCreateContext(properties, static_cast<cl_uint>(devices->size()),
                                         devices->data(), nullptr, nullptr, &error);
    if (error != CL_SUCCESS) {
      skipped.push_back(*platform_name + ": " + OpenCLStatus(error, "clCreateContext").message());
      continue;
    }
    auto shared_context = std::make_shared<PlatformContext>(context, *platform_name);
    for (cl_device_id device : *devices) {
      auto made = MakeDevice(next_id, device, shared_context);
      if (!made.ok()) {
        skipped.push_back(made.status().message());
        continue;
      }
      out.devices.push_back(std::move(*made));
      ++next_id;
    }
  }
  if (out.devices.empty()) {
    std::string reason =
        "no usable OpenCL device on " + std::to_string(platform_count) + " platform(s)";
    if (!skipped.empty()) reason += ": " + JoinReasons(skipped);
    out.absent.emplace_back(DeviceType::kOpenCL, std::move(reason));
  }
  return out;
}

}  // namespace internal
}  // namespace ferry::device
