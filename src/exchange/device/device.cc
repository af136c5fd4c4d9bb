#include "ferry/device/device.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <sstream>

#include "exchange/device/backend.h"
#include "ferry/base/telemetry.h"

namespace ferry::device {
namespace {

struct TypeInfo {
  DeviceType type;
  const char* name;
};

constexpr std::array<TypeInfo, 14> kTypes = {{
    {DeviceType::kCpu, "cpu"},
    {DeviceType::kCuda, "cuda"},
    {DeviceType::kCudaHost, "cuda_host"},
    {DeviceType::kOpenCL, "opencl"},
    {DeviceType::kVulkan, "vulkan"},
    {DeviceType::kMetal, "metal"},
    {DeviceType::kVpi, "vpi"},
    {DeviceType::kRocm, "rocm"},
    {DeviceType::kRocmHost, "rocm_host"},
    {DeviceType::kExtDev, "ext_dev"},
    {DeviceType::kCudaManaged, "cuda_managed"},
    {DeviceType::kOneApi, "oneapi"},
    {DeviceType::kWebGpu, "webgpu"},
    {DeviceType::kHexagon, "hexagon"},
}};

}  // namespace

const char* DeviceTypeName(DeviceType type) {
  for (const auto& info : kTypes) {
    if (info.type == type) return info.name;
  }
  return "unknown";
}

const std::vector<DeviceType>& AllDeviceTypes() {
  static const std::vector<DeviceType> types = [] {
    std::vector<DeviceType> out;
    out.reserve(std::size(kTypes));
    for (const auto& info : kTypes) out.push_back(info.type);
    return out;
  }();
  return types;
}

Result<DeviceType> DeviceTypeFromCode(int32_t code) {
  for (const auto& info : kTypes) {
    if (static_cast<int32_t>(info.type) == code) return info.type;
  }
  return Status::Invalid("unknown Arrow device type " + std::to_string(code) +
                         " (the spec defines 1-4, 7-16)");
}

Result<DeviceType> DeviceTypeFromName(std::string_view name) {
  for (const auto& info : kTypes) {
    if (name == info.name) return info.type;
  }
  return Status::Invalid("unknown device type name '" + std::string(name) + "'");
}

bool IsHostAccessible(DeviceType type) {
  return type == DeviceType::kCpu || type == DeviceType::kCudaHost ||
         type == DeviceType::kCudaManaged || type == DeviceType::kRocmHost;
}

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kNone:
      return "none";
    case EventKind::kCuda:
      return "cuda";
    case EventKind::kOpenCL:
      return "opencl";
  }
  return "unknown";
}

const char* CopyDirectionName(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::kHostToDevice:
      return "h2d";
    case CopyDirection::kDeviceToHost:
      return "d2h";
    case CopyDirection::kDeviceToDevice:
      return "d2d";
    case CopyDirection::kHostToHost:
      return "host";
  }
  return "unknown";
}

namespace internal {

void CountCopy(CopyDirection direction, int64_t size) {
  using telemetry::Counter;
  switch (direction) {
    case CopyDirection::kHostToDevice:
      telemetry::Add(Counter::kBytesCopiedH2D, size);
      break;
    case CopyDirection::kDeviceToHost:
      telemetry::Add(Counter::kBytesCopiedD2H, size);
      break;
    case CopyDirection::kDeviceToDevice:
      telemetry::Add(Counter::kBytesCopiedD2D, size);
      break;
    case CopyDirection::kHostToHost:
      telemetry::Add(Counter::kBytesCopiedHost, size);
      break;
  }
}

void CountEventWait(int64_t nanos) {
  telemetry::Add(telemetry::Counter::kEventWaits);
  telemetry::Add(telemetry::Counter::kEventWaitNanos, nanos);
}

}  // namespace internal

// ---- Registry ---------------------------------------------------------------

DeviceRegistry& DeviceRegistry::Global() {
  static DeviceRegistry* registry = new DeviceRegistry();  // never destroyed
  return *registry;
}

DeviceRegistry::DeviceRegistry() { Discover(); }

void DeviceRegistry::Discover() {
  devices_.push_back(internal::MakeCpuDevice());
  for (auto discovery : {internal::DiscoverOpenCL(), internal::DiscoverCuda()}) {
    for (auto& device : discovery.devices) devices_.push_back(std::move(device));
    for (auto& entry : discovery.absent) absent_.push_back(std::move(entry));
  }
}

Result<Device*> DeviceRegistry::Get(DeviceType type, int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  bool any_of_type = false;
  for (const auto& device : devices_) {
    if (device->type() != type) continue;
    any_of_type = true;
    // The CPU (and other id-less devices) match any requested id.
    if (device->id() == id || device->id() == -1) return device.get();
  }
  if (any_of_type) {
    return Status::Invalid(std::string("no ") + DeviceTypeName(type) + " device with id " +
                           std::to_string(id));
  }
  for (const auto& [absent_type, reason] : absent_) {
    if (absent_type == type) {
      return Status::NotImplemented(std::string(DeviceTypeName(type)) + " is absent: " + reason);
    }
  }
  return Status::NotImplemented(std::string("no backend for device type ") + DeviceTypeName(type) +
                                " in this build");
}

Device* DeviceRegistry::cpu() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& device : devices_) {
    if (device->type() == DeviceType::kCpu) return device.get();
  }
  return nullptr;  // unreachable: the CPU is registered at construction
}

std::vector<Device*> DeviceRegistry::Present() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Device*> out;
  for (const auto& device : devices_) out.push_back(device.get());
  return out;
}

std::vector<DeviceRegistry::Entry> DeviceRegistry::List() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Entry> entries;
  for (DeviceType type : AllDeviceTypes()) {
    bool any = false;
    for (const auto& device : devices_) {
      if (device->type() != type) continue;
      entries.push_back({type, device->id(), device->name(), true, ""});
      any = true;
    }
    if (!any) {
      std::string reason = "no backend in this build";
      for (const auto& [absent_type, why] : absent_) {
        if (absent_type == type) reason = why;
      }
      entries.push_back({type, -1, "", false, reason});
    }
  }
  return entries;
}

std::string DeviceRegistry::Describe() {
  std::ostringstream text;
  const std::vector<Entry> entries = List();
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& entry = entries[i];
    const bool first_of_type = i == 0 || entries[i - 1].type != entry.type;
    const bool last_of_type = i + 1 == entries.size() || entries[i + 1].type != entry.type;
    if (first_of_type) text << DeviceTypeName(entry.type) << ": ";
    if (entry.present) {
      text << (first_of_type ? "" : ", ") << entry.name << " (id " << entry.id << ")";
    } else {
      text << "absent (" << entry.reason << ")";
    }
    if (last_of_type) text << '\n';
  }
  return text.str();
}

std::shared_ptr<Device> DeviceRegistry::Register(std::shared_ptr<Device> device) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& existing : devices_) {
    if (existing->type() == device->type() && existing->id() == device->id()) {
      std::swap(existing, device);
      return device;
    }
  }
  devices_.push_back(std::move(device));
  return nullptr;
}

std::shared_ptr<Device> DeviceRegistry::Unregister(DeviceType type, int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = devices_.begin(); it != devices_.end(); ++it) {
    if ((*it)->type() == type && (*it)->id() == id) {
      auto out = *it;
      devices_.erase(it);
      return out;
    }
  }
  return nullptr;
}

// ---- Copies -------------------------------------------------------------------

Status CopyBetween(Device* src_device, const void* src, Device* dst_device, void* dst, int64_t size,
                   Queue* queue) {
  if (src_device == nullptr || dst_device == nullptr) {
    return Status::Invalid("CopyBetween needs both devices");
  }
  if (size < 0) return Status::Invalid("negative copy size " + std::to_string(size));
  if (size == 0) return Status::OK();
  const bool src_host = src_device->host_accessible();
  const bool dst_host = dst_device->host_accessible();
  if (src_host && dst_host) {
    std::memcpy(dst, src, static_cast<size_t>(size));
    internal::CountCopy(CopyDirection::kHostToHost, size);
    return Status::OK();
  }
  if (src_host) {
    Queue* q = queue != nullptr ? queue : dst_device->default_queue();
    return q->Copy(CopyDirection::kHostToDevice, src, dst, size);
  }
  if (dst_host) {
    Queue* q = queue != nullptr ? queue : src_device->default_queue();
    return q->Copy(CopyDirection::kDeviceToHost, src, dst, size);
  }
  if (src_device == dst_device) {
    Queue* q = queue != nullptr ? queue : src_device->default_queue();
    return q->Copy(CopyDirection::kDeviceToDevice, src, dst, size);
  }
  // Different devices without a peer path: stage through host memory.
  FERRY_ASSIGN_OR_RAISE(auto staging, Buffer::Allocate(size));
  FERRY_RETURN_NOT_OK(src_device->default_queue()->Copy(CopyDirection::kDeviceToHost, src,
                                                        staging->mutable_data(), size));
  FERRY_RETURN_NOT_OK(src_device->default_queue()->Synchronize());
  FERRY_RETURN_NOT_OK(
      dst_device->default_queue()->Copy(CopyDirection::kHostToDevice, staging->data(), dst, size));
  return dst_device->default_queue()->Synchronize();
}

namespace {

Result<ArrayDataPtr> CopyArrayData(const ArrayData& data, Device* source, Device* target,
                                   Queue* queue, MemoryPool* host_pool,
                                   std::vector<BufferPtr>* keep_alive) {
  auto out = std::make_shared<ArrayData>(data);
  for (auto& buffer : out->buffers) {
    if (!buffer) continue;
    FERRY_ASSIGN_OR_RAISE(auto copy, host_pool != nullptr
                                         ? Buffer::Allocate(buffer->size(), host_pool)
                                         : target->Allocate(buffer->size()));
    FERRY_RETURN_NOT_OK(
        CopyBetween(source, buffer->data(), target, copy->mutable_data(), buffer->size(), queue));
    keep_alive->push_back(buffer);
    buffer = copy;
  }
  for (auto& child : out->children) {
    FERRY_ASSIGN_OR_RAISE(child,
                          CopyArrayData(*child, source, target, queue, host_pool, keep_alive));
  }
  if (out->dictionary) {
    FERRY_ASSIGN_OR_RAISE(out->dictionary, CopyArrayData(*out->dictionary, source, target, queue,
                                                         host_pool, keep_alive));
  }
  return ArrayDataPtr(out);
}

}  // namespace

Result<DeviceArray> CopyArrayTo(const DeviceArray& array, Device* target,
                                std::chrono::nanoseconds timeout, Queue* queue,
                                MemoryPool* host_pool) {
  if (array.data == nullptr || array.device == nullptr || target == nullptr) {
    return Status::Invalid("CopyArrayTo needs an array, its device and a target device");
  }
  if (host_pool != nullptr && !target->host_accessible()) {
    return Status::Invalid("CopyArrayTo: a host pool needs a host-accessible target, not " +
                           std::string(DeviceTypeName(target->type())));
  }
  FERRY_RETURN_NOT_OK(array.device->CheckHealth());
  FERRY_RETURN_NOT_OK(target->CheckHealth());
  // The copy engine that runs the transfer: the non-host side's queue.
  Device* worker = target->host_accessible() ? array.device : target;
  if (queue == nullptr && !worker->host_accessible()) queue = worker->default_queue();
  if (array.event) {
    if (queue != nullptr && array.event->kind() == worker->event_kind()) {
      FERRY_RETURN_NOT_OK(queue->WaitEvent(array.event->sync_event()));
    } else {
      auto start = std::chrono::steady_clock::now();
      FERRY_RETURN_NOT_OK(array.event->Wait(timeout));
      internal::CountEventWait(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count());
    }
  }
  std::vector<BufferPtr> sources;
  FERRY_ASSIGN_OR_RAISE(
      auto copied, CopyArrayData(*array.data, array.device, target, queue, host_pool, &sources));
  DeviceArray out{copied, target, nullptr};
  if (queue != nullptr) {
    FERRY_ASSIGN_OR_RAISE(out.event, queue->RecordEvent());
    // Host sources must outlive the queued copies: wait before returning.
    FERRY_RETURN_NOT_OK(queue->Synchronize());
  }
  return out;
}

}  // namespace ferry::device
