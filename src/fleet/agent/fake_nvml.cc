// A stand-in for libnvidia-ml.so.1 with the entry points the agent uses: two
// GPUs, "NVIDIA H200" (141 GiB, 40 GiB used, 87% busy, 312.5 W, 54 C) and
// "NVIDIA H100 80GB HBM3" (idle: 0% busy, nothing used, 75.125 W, 33 C).
//
// Two environment variables steer it, read at every call:
//   FAKE_NVML_FAIL="power:1,temperature:0,events": the telemetry call of that
//     GPU (utilization, memory, power, temperature) fails with
//     NVML_ERROR_UNKNOWN; "events" makes nvmlEventSetCreate fail.
//   FAKE_NVML_XID_FILE=PATH: XID critical errors to deliver, one "INDEX XID"
//     line each; an event-set wait returns the next unread line's event, or
//     NVML_ERROR_TIMEOUT when there is none. Lines appended later are
//     delivered later.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {

struct FakeMemory {
  unsigned long long total, free, used;
};
struct FakeUtilization {
  unsigned gpu, memory;
};
struct FakeEventData {
  void* device;
  unsigned long long event_type, event_data;
  unsigned gpu_instance_id, compute_instance_id;
};

static int g_initialised = 0;
static int g_devices[2] = {0, 1};
static int g_event_sets = 0;
static int g_event_set_token = 0;
static long g_xid_offset = 0;  // bytes of FAKE_NVML_XID_FILE already delivered

constexpr int kSuccess = 0;
constexpr int kErrorUninitialised = 1;
constexpr int kErrorInvalidArgument = 2;
constexpr int kErrorTimeout = 10;
constexpr int kErrorUnknown = 999;

static int Index(void* device) { return *static_cast<int*>(device); }

// Whether FAKE_NVML_FAIL names `call` for GPU `index` (index < 0: the bare word).
static bool Fails(const char* call, int index) {
  const char* text = std::getenv("FAKE_NVML_FAIL");
  if (text == nullptr) return false;
  const std::string wanted = index < 0 ? call : std::string(call) + ":" + std::to_string(index);
  const std::string list = std::string(",") + text + ",";
  return list.find("," + wanted + ",") != std::string::npos;
}

int nvmlInit_v2() {
  ++g_initialised;
  return kSuccess;
}
int nvmlShutdown() {
  --g_initialised;
  return kSuccess;
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  if (g_initialised <= 0) return kErrorUninitialised;
  *count = 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= 2) return kErrorInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}
int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  const char* text = Index(device) == 0 ? "NVIDIA H200" : "NVIDIA H100 80GB HBM3";
  std::strncpy(name, text, length);
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* device, FakeMemory* memory) {
  if (Fails("memory", Index(device))) return kErrorUnknown;
  memory->total = (Index(device) == 0 ? 143771ULL : 81559ULL) << 20;
  memory->used = Index(device) == 0 ? 40960ULL << 20 : 0;
  memory->free = memory->total - memory->used;
  return kSuccess;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned length) {
  std::strncpy(uuid, Index(device) == 0 ? "GPU-aaaa" : "GPU-bbbb", length);
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void* device, FakeUtilization* utilization) {
  if (Fails("utilization", Index(device))) return kErrorUnknown;
  utilization->gpu = Index(device) == 0 ? 87 : 0;
  utilization->memory = Index(device) == 0 ? 40 : 0;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned* milliwatts) {
  if (Fails("power", Index(device))) return kErrorUnknown;
  *milliwatts = Index(device) == 0 ? 312500 : 75125;
  return kSuccess;
}
int nvmlDeviceGetTemperature(void* device, int sensor, unsigned* celsius) {
  if (sensor != 0) return kErrorInvalidArgument;
  if (Fails("temperature", Index(device))) return kErrorUnknown;
  *celsius = Index(device) == 0 ? 54 : 33;
  return kSuccess;
}
int nvmlEventSetCreate(void** set) {
  if (Fails("events", -1)) return kErrorUnknown;
  ++g_event_sets;
  *set = &g_event_set_token;
  return kSuccess;
}
int nvmlDeviceRegisterEvents(void* device, unsigned long long types, void* set) {
  if (set != &g_event_set_token || Index(device) > 1) return kErrorInvalidArgument;
  return (types & 0x8) != 0 ? kSuccess : kErrorInvalidArgument;
}
int nvmlEventSetWait_v2(void* set, FakeEventData* data, unsigned /*timeout_ms*/) {
  if (set != &g_event_set_token) return kErrorInvalidArgument;
  const char* path = std::getenv("FAKE_NVML_XID_FILE");
  if (path == nullptr) return kErrorTimeout;
  std::FILE* file = std::fopen(path, "r");
  if (file == nullptr) return kErrorTimeout;
  int result = kErrorTimeout;
  char line[128];
  if (std::fseek(file, g_xid_offset, SEEK_SET) == 0 && std::fgets(line, sizeof(line), file) &&
      std::strchr(line, '\n') != nullptr) {  // a whole line only
    g_xid_offset = std::ftell(file);
    unsigned index = 0;
    unsigned long long xid = 0;
    if (std::sscanf(line, "%u %llu", &index, &xid) == 2 && index < 2) {
      data->device = &g_devices[index];
      data->event_type = 0x8;  // nvmlEventTypeXidCriticalError
      data->event_data = xid;
      data->gpu_instance_id = data->compute_instance_id = 0xFFFFFFFFu;
      result = kSuccess;
    } else {
      result = kErrorUnknown;
    }
  }
  std::fclose(file);
  return result;
}
int nvmlEventSetFree(void* set) {
  if (set != &g_event_set_token) return kErrorInvalidArgument;
  --g_event_sets;
  return kSuccess;
}

int fake_nvml_initialised() { return g_initialised; }
int fake_nvml_event_sets() { return g_event_sets; }
void fake_nvml_reset_xids() { g_xid_offset = 0; }

}  // extern "C"
