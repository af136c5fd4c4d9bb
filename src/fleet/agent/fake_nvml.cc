// A stand-in for libnvidia-ml.so.1 with the seven entry points the agent
// uses: two GPUs, "NVIDIA H200" (141 GiB) and "NVIDIA H100 80GB HBM3".
#include <cstring>

extern "C" {

struct FakeMemory {
  unsigned long long total, free, used;
};

static int g_initialised = 0;
static int g_devices[2] = {0, 1};

int nvmlInit_v2() {
  ++g_initialised;
  return 0;
}
int nvmlShutdown() {
  --g_initialised;
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  if (g_initialised <= 0) return 1;  // NVML_ERROR_UNINITIALIZED
  *count = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= 2) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &g_devices[index];
  return 0;
}
int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  const char* text = *static_cast<int*>(device) == 0 ? "NVIDIA H200" : "NVIDIA H100 80GB HBM3";
  std::strncpy(name, text, length);
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, FakeMemory* memory) {
  memory->total = (*static_cast<int*>(device) == 0 ? 143771ULL : 81559ULL) << 20;
  memory->free = memory->total;
  memory->used = 0;
  return 0;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned length) {
  std::strncpy(uuid, *static_cast<int*>(device) == 0 ? "GPU-aaaa" : "GPU-bbbb", length);
  return 0;
}
int fake_nvml_initialised() { return g_initialised; }

}  // extern "C"
