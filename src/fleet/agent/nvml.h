// NVML (libnvidia-ml.so.1) loaded at run time: the agent's GPU discovery and
// the per-GPU readings of its metrics (docs/fleet-metrics.md). nvml.h is not
// needed at build time; the few declarations used live in nvml.cc. Internal
// to src/fleet/agent.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/fleet/store.h"

namespace ferry::fleet::agent_internal {

// One device's telemetry; a field is empty when its NVML call failed.
struct GpuReading {
  std::optional<double> utilization;  // 0..1, the GPU's busy share over NVML's last sample
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_free_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<double> power_watts;
  std::optional<double> temperature_celsius;
  // The NVML functions that failed (or that the library lacks), by name.
  std::vector<std::string> failed_calls;
};

// An XID critical error event: the device's index and the XID (999: unknown).
struct XidEvent {
  int index = 0;
  uint64_t xid = 0;
};

// An initialised NVML: nvmlInit_v2 on Open, nvmlShutdown and dlclose when
// destroyed. Not thread-safe: callers serialise their calls.
class Nvml {
 public:
  // nullptr when the library cannot be loaded, lacks a discovery symbol, or
  // NVML fails to initialise.
  static std::unique_ptr<Nvml> Open(const char* library);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The devices NVML sees (at most 1,024), as the agent registers them.
  const std::vector<GpuInventory>& devices() const { return devices_; }

  GpuReading Read(int index);

  // Registers every device for XID critical error events; TakeXids then
  // returns those that happened since.
  void WatchXids();

  // XID critical errors since the last call, at most `max` (polled with a
  // zero timeout, so it never blocks). Empty when the driver does not
  // deliver events; `failed_calls` then names the NVML function that failed.
  std::vector<XidEvent> TakeXids(size_t max, std::vector<std::string>* failed_calls);

 private:
  struct Api;
  Nvml(void* handle, std::unique_ptr<Api> api);
  void ListDevices();

  void* handle_;
  std::unique_ptr<Api> api_;
  std::vector<void*> device_handles_;  // by index
  std::vector<GpuInventory> devices_;
  void* event_set_ = nullptr;
  std::string event_setup_failure_;  // the call that failed when events are unavailable
};

}  // namespace ferry::fleet::agent_internal
