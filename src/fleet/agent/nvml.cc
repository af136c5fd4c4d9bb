#include "fleet/agent/nvml.h"

#include <dlfcn.h>

#include <algorithm>

#include "fleet/agent/agent_internal.h"

namespace ferry::fleet::agent_internal {

namespace {

// The few NVML declarations used, as NVIDIA's nvml.h has them.
using NvmlReturn = int;
using NvmlDevice = void*;
using NvmlEventSet = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlUtilization {
  unsigned gpu;  // percent of the last sample period the GPU was busy
  unsigned memory;
};
struct NvmlEventData {
  NvmlDevice device;
  unsigned long long event_type;
  unsigned long long event_data;  // the XID for an XID critical error
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlErrorTimeout = 10;
constexpr unsigned kNvmlNameBuffer = 96;
constexpr unsigned kNvmlUuidBuffer = 96;
constexpr int kNvmlTemperatureGpu = 0;
constexpr unsigned long long kNvmlEventTypeXidCriticalError = 0x8;
constexpr unsigned kMaxDevices = 1024;

template <typename F>
F Symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(dlsym(handle, name));
}

}  // namespace

struct Nvml::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*get_count)(unsigned*) = nullptr;
  NvmlReturn (*get_handle)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*get_name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*get_memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*get_uuid)(NvmlDevice, char*, unsigned) = nullptr;
  // Telemetry: optional, a missing one leaves its series out.
  NvmlReturn (*get_utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*get_power)(NvmlDevice, unsigned*) = nullptr;  // milliwatts
  NvmlReturn (*get_temperature)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*event_set_create)(NvmlEventSet*) = nullptr;
  NvmlReturn (*register_events)(NvmlDevice, unsigned long long, NvmlEventSet) = nullptr;
  NvmlReturn (*event_set_wait)(NvmlEventSet, NvmlEventData*, unsigned) = nullptr;
  NvmlReturn (*event_set_free)(NvmlEventSet) = nullptr;
};

std::unique_ptr<Nvml> Nvml::Open(const char* library) {
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  auto api = std::make_unique<Api>();
  api->init = Symbol<decltype(api->init)>(handle, "nvmlInit_v2");
  api->shutdown = Symbol<decltype(api->shutdown)>(handle, "nvmlShutdown");
  api->get_count = Symbol<decltype(api->get_count)>(handle, "nvmlDeviceGetCount_v2");
  api->get_handle = Symbol<decltype(api->get_handle)>(handle, "nvmlDeviceGetHandleByIndex_v2");
  api->get_name = Symbol<decltype(api->get_name)>(handle, "nvmlDeviceGetName");
  api->get_memory = Symbol<decltype(api->get_memory)>(handle, "nvmlDeviceGetMemoryInfo");
  api->get_uuid = Symbol<decltype(api->get_uuid)>(handle, "nvmlDeviceGetUUID");
  api->get_utilization =
      Symbol<decltype(api->get_utilization)>(handle, "nvmlDeviceGetUtilizationRates");
  api->get_power = Symbol<decltype(api->get_power)>(handle, "nvmlDeviceGetPowerUsage");
  api->get_temperature = Symbol<decltype(api->get_temperature)>(handle, "nvmlDeviceGetTemperature");
  api->event_set_create = Symbol<decltype(api->event_set_create)>(handle, "nvmlEventSetCreate");
  api->register_events = Symbol<decltype(api->register_events)>(handle, "nvmlDeviceRegisterEvents");
  api->event_set_wait = Symbol<decltype(api->event_set_wait)>(handle, "nvmlEventSetWait_v2");
  api->event_set_free = Symbol<decltype(api->event_set_free)>(handle, "nvmlEventSetFree");
  if (!api->init || !api->shutdown || !api->get_count || !api->get_handle || !api->get_name ||
      !api->get_memory || !api->get_uuid || api->init() != kNvmlSuccess) {
    dlclose(handle);
    return nullptr;
  }
  std::unique_ptr<Nvml> nvml(new Nvml(handle, std::move(api)));
  nvml->ListDevices();
  return nvml;
}

Nvml::Nvml(void* handle, std::unique_ptr<Api> api) : handle_(handle), api_(std::move(api)) {}

Nvml::~Nvml() {
  if (event_set_ != nullptr && api_->event_set_free) api_->event_set_free(event_set_);
  api_->shutdown();
  dlclose(handle_);
}

void Nvml::ListDevices() {
  unsigned count = 0;
  if (api_->get_count(&count) != kNvmlSuccess) return;
  count = std::min(count, kMaxDevices);
  for (unsigned index = 0; index < count; ++index) {
    NvmlDevice device = nullptr;
    if (api_->get_handle(index, &device) != kNvmlSuccess) continue;
    char name[kNvmlNameBuffer + 1] = {};
    char uuid[kNvmlUuidBuffer + 1] = {};
    NvmlMemory memory{};
    GpuInventory gpu;
    gpu.index = static_cast<int>(index);
    gpu.model = ModelFromNvmlName(api_->get_name(device, name, kNvmlNameBuffer) == kNvmlSuccess
                                      ? std::string(name)
                                      : std::string());
    if (api_->get_memory(device, &memory) == kNvmlSuccess) {
      gpu.memory_mb = static_cast<int64_t>(memory.total >> 20);
    }
    if (api_->get_uuid(device, uuid, kNvmlUuidBuffer) == kNvmlSuccess) gpu.uuid = uuid;
    if (device_handles_.size() <= index) device_handles_.resize(index + 1, nullptr);
    device_handles_[index] = device;
    devices_.push_back(std::move(gpu));
  }
}

void Nvml::WatchXids() {
  if (devices_.empty() || event_set_ != nullptr) return;
  if (!api_->event_set_create || !api_->register_events || !api_->event_set_wait ||
      !api_->event_set_free) {
    event_setup_failure_ = "nvmlEventSetCreate";
    return;
  }
  if (api_->event_set_create(&event_set_) != kNvmlSuccess) {
    event_set_ = nullptr;
    event_setup_failure_ = "nvmlEventSetCreate";
    return;
  }
  bool any = false;
  for (void* device : device_handles_) {
    if (device == nullptr) continue;
    // Devices without event support (some consumer parts) answer NOT_SUPPORTED.
    if (api_->register_events(device, kNvmlEventTypeXidCriticalError, event_set_) == kNvmlSuccess) {
      any = true;
    } else {
      event_setup_failure_ = "nvmlDeviceRegisterEvents";
    }
  }
  if (!any) {
    api_->event_set_free(event_set_);
    event_set_ = nullptr;
  }
}

GpuReading Nvml::Read(int index) {
  GpuReading reading;
  void* device = index >= 0 && static_cast<size_t>(index) < device_handles_.size()
                     ? device_handles_[static_cast<size_t>(index)]
                     : nullptr;
  if (device == nullptr) {
    reading.failed_calls.emplace_back("nvmlDeviceGetHandleByIndex_v2");
    return reading;
  }
  NvmlUtilization utilization{};
  if (api_->get_utilization && api_->get_utilization(device, &utilization) == kNvmlSuccess) {
    reading.utilization = std::min(utilization.gpu, 100u) / 100.0;
  } else {
    reading.failed_calls.emplace_back("nvmlDeviceGetUtilizationRates");
  }
  NvmlMemory memory{};
  if (api_->get_memory(device, &memory) == kNvmlSuccess) {
    reading.memory_used_bytes = memory.used;
    reading.memory_free_bytes = memory.free;
    reading.memory_total_bytes = memory.total;
  } else {
    reading.failed_calls.emplace_back("nvmlDeviceGetMemoryInfo");
  }
  unsigned milliwatts = 0;
  if (api_->get_power && api_->get_power(device, &milliwatts) == kNvmlSuccess) {
    reading.power_watts = milliwatts / 1000.0;
  } else {
    reading.failed_calls.emplace_back("nvmlDeviceGetPowerUsage");
  }
  unsigned celsius = 0;
  if (api_->get_temperature &&
      api_->get_temperature(device, kNvmlTemperatureGpu, &celsius) == kNvmlSuccess) {
    reading.temperature_celsius = celsius;
  } else {
    reading.failed_calls.emplace_back("nvmlDeviceGetTemperature");
  }
  return reading;
}

std::vector<XidEvent> Nvml::TakeXids(size_t max, std::vector<std::string>* failed_calls) {
  std::vector<XidEvent> events;
  if (!event_setup_failure_.empty()) {
    // Said once: an unsupported event set stays unsupported.
    failed_calls->push_back(event_setup_failure_);
    event_setup_failure_.clear();
  }
  if (event_set_ == nullptr) return events;
  while (events.size() < max) {
    NvmlEventData data{};
    const NvmlReturn result = api_->event_set_wait(event_set_, &data, 0);
    if (result == kNvmlErrorTimeout) break;
    if (result != kNvmlSuccess) {
      failed_calls->emplace_back("nvmlEventSetWait_v2");
      break;
    }
    if ((data.event_type & kNvmlEventTypeXidCriticalError) == 0 || data.device == nullptr) continue;
    auto it = std::find(device_handles_.begin(), device_handles_.end(), data.device);
    if (it == device_handles_.end()) continue;
    events.push_back({static_cast<int>(it - device_handles_.begin()), data.event_data});
  }
  return events;
}

std::vector<GpuInventory> DiscoverNvmlGpusFrom(const char* library) {
  std::unique_ptr<Nvml> nvml = Nvml::Open(library);
  return nvml ? nvml->devices() : std::vector<GpuInventory>{};
}

}  // namespace ferry::fleet::agent_internal
