// An emulated libcuda.so.1 that runs Ferry's CUDA backend on the CPU, to check
// the backend's logic (context push/pop balance, allocation kinds, events,
// kernel argument marshalling) in CI, where no GPU exists. It complements,
// never replaces, the real-GPU run of scripts/gpu-check. At exit it fails the
// process (exit code 86) if the backend misused the driver: a call without a
// current context, unbalanced context pushes and pops, a free of unknown
// memory or with the wrong call, or allocations left behind. Data operations happen
// at once; "delay" kernels make a stream busy until a wall-clock time, and
// events/waits follow that time.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

namespace {

struct FakeContext { int dummy; };
FakeContext g_context;

struct FakeStream { Clock::time_point busy_until; };
struct FakeEvent { Clock::time_point ready_at; bool recorded = false; };
struct FakeModule { int dummy; };
enum Kernel { kFill = 1, kSum, kSumBytes, kDelay };
struct FakeFunction { Kernel kernel; };

std::mutex g_mutex;
std::map<void*, std::pair<char, size_t>> g_allocations;  // 'd' device, 'h' host, 'm' managed
std::vector<FakeStream*> g_streams;
thread_local std::vector<CUcontext> t_stack;
std::atomic<long> g_pushes{0}, g_pops{0}, g_bad{0};
bool g_initialized = false;

int Env(const char* name, int fallback) {
  const char* value = getenv(name);
  return value ? atoi(value) : fallback;
}

bool HaveContext() {
  if (t_stack.empty()) {
    ++g_bad;
    fprintf(stderr, "FAKE CUDA: call without a current context\n");
    return false;
  }
  return true;
}

struct Report {
  ~Report() {
    fprintf(stderr,
            "FAKE CUDA report: pushes=%ld pops=%ld bad=%ld outstanding allocations=%zu "
            "streams=%zu\n",
            g_pushes.load(), g_pops.load(), g_bad.load(), g_allocations.size(), g_streams.size());
    // Streams may remain: each device's default queue lives as long as the
    // process-wide registry, which is never destroyed.
    if (g_bad.load() != 0 || g_pushes.load() != g_pops.load() || !g_allocations.empty()) {
      std::fflush(nullptr);
      std::_Exit(86);
    }
  }
} g_report;

CUresult Allocate(void** out, size_t size, char kind) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (size > (size_t{16} << 30)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = aligned_alloc(256, (size + 255) / 256 * 256);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_allocations[p] = {kind, size};
  *out = p;
  return CUDA_SUCCESS;
}

CUresult Free(void* p, const char* kinds) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocations.find(p);
  if (it == g_allocations.end() || !strchr(kinds, it->second.first)) {
    ++g_bad;
    fprintf(stderr, "FAKE CUDA: bad free %p\n", p);
    return CUDA_ERROR_INVALID_VALUE;
  }
  free(p);
  g_allocations.erase(it);
  return CUDA_SUCCESS;
}

void SleepUntil(Clock::time_point t) {
  auto now = Clock::now();
  if (t > now) std::this_thread::sleep_until(t);
}

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult error, const char** name) {
  switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_READY: *name = "CUDA_ERROR_NOT_READY"; return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_IMAGE: *name = "CUDA_ERROR_INVALID_IMAGE"; return CUDA_SUCCESS;
    default: *name = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
}
CUresult cuGetErrorString(CUresult error, const char** text) {
  *text = "fake driver error text";
  return CUDA_SUCCESS;
}
CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (Env("FAKE_CUDA_INIT_ERROR", 0)) return static_cast<CUresult>(Env("FAKE_CUDA_INIT_ERROR", 0));
  g_initialized = true;
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int* v) { *v = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int* count) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *count = Env("FAKE_CUDA_DEVICES", 1);
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= Env("FAKE_CUDA_DEVICES", 1)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  snprintf(name, len, "Fake GPU");
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = Env("FAKE_CUDA_MANAGED", 1); break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = 1500000; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  *ctx = reinterpret_cast<CUcontext>(&g_context);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }
CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (ctx != reinterpret_cast<CUcontext>(&g_context)) return CUDA_ERROR_INVALID_CONTEXT;
  t_stack.push_back(ctx);
  ++g_pushes;
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (t_stack.empty()) { ++g_bad; return CUDA_ERROR_INVALID_CONTEXT; }
  if (ctx) *ctx = t_stack.back();
  t_stack.pop_back();
  ++g_pops;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize() {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  Clock::time_point latest = Clock::now();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto* s : g_streams) latest = std::max(latest, s->busy_until);
  }
  SleepUntil(latest);
  return CUDA_SUCCESS;
}
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  *free_bytes = size_t{16} << 30;
  *total = size_t{16} << 30;
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) {
  void* out = nullptr;
  CUresult r = Allocate(&out, size, 'd');
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<CUdeviceptr>(out);
  return r;
}
CUresult cuMemFree_v2(CUdeviceptr p) { return Free(reinterpret_cast<void*>(p), "dm"); }
CUresult cuMemAllocHost_v2(void** p, size_t size) { return Allocate(p, size, 'h'); }
CUresult cuMemHostAlloc(void** p, size_t size, unsigned int flags) {
  if (flags & ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  return Allocate(p, size, 'h');
}
CUresult cuMemFreeHost(void* p) { return Free(p, "h"); }
CUresult cuMemAllocManaged(CUdeviceptr* p, size_t size, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL) return CUDA_ERROR_INVALID_VALUE;
  void* out = nullptr;
  CUresult r = Allocate(&out, size, 'm');
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<CUdeviceptr>(out);
  return r;
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), size);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  memset(reinterpret_cast<void*>(dst), value, n);
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  auto* s = new FakeStream{Clock::now()};
  std::lock_guard<std::mutex> lock(g_mutex);
  g_streams.push_back(s);
  *stream = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto* s = reinterpret_cast<FakeStream*>(stream);
  auto it = std::find(g_streams.begin(), g_streams.end(), s);
  if (it == g_streams.end()) { ++g_bad; return CUDA_ERROR_INVALID_HANDLE; }
  g_streams.erase(it);
  delete s;
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  SleepUntil(reinterpret_cast<FakeStream*>(stream)->busy_until);
  return CUDA_SUCCESS;
}
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  auto* s = reinterpret_cast<FakeStream*>(stream);
  auto* e = reinterpret_cast<FakeEvent*>(event);
  if (!e->recorded) return CUDA_SUCCESS;
  s->busy_until = std::max(s->busy_until, e->ready_at);
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  *event = reinterpret_cast<CUevent>(new FakeEvent{});
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  auto* e = reinterpret_cast<FakeEvent*>(event);
  e->ready_at = std::max(Clock::now(), reinterpret_cast<FakeStream*>(stream)->busy_until);
  e->recorded = true;
  return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent event) {
  if (Env("FAKE_CUDA_QUERY_ERROR", 0)) return static_cast<CUresult>(Env("FAKE_CUDA_QUERY_ERROR", 0));
  auto* e = reinterpret_cast<FakeEvent*>(event);
  return Clock::now() >= e->ready_at ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventDestroy_v2(CUevent event) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  delete reinterpret_cast<FakeEvent*>(event);
  return CUDA_SUCCESS;
}
CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  uint32_t magic;
  memcpy(&magic, image, 4);
  if (magic != 0xBA55ED50u) return CUDA_ERROR_INVALID_IMAGE;
  if (reinterpret_cast<uintptr_t>(image) % 8) return CUDA_ERROR_INVALID_IMAGE;
  *module = reinterpret_cast<CUmodule>(new FakeModule{});
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* function, CUmodule, const char* name) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  Kernel k;
  if (!strcmp(name, "ferry_fill_sequence")) k = kFill;
  else if (!strcmp(name, "ferry_sum")) k = kSum;
  else if (!strcmp(name, "ferry_sum_bytes")) k = kSumBytes;
  else if (!strcmp(name, "ferry_delay")) k = kDelay;
  else return CUDA_ERROR_NOT_FOUND;
  static FakeFunction functions[5] = {{kFill}, {kFill}, {kSum}, {kSumBytes}, {kDelay}};
  *function = reinterpret_cast<CUfunction>(&functions[k]);
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule module) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  delete reinterpret_cast<FakeModule*>(module);
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void** params, void** extra) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (Env("FAKE_CUDA_LAUNCH_ERROR", 0)) return static_cast<CUresult>(Env("FAKE_CUDA_LAUNCH_ERROR", 0));
  if (gx == 0 || gx > 2147483647u || gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 ||
      bx > 1024 || extra != nullptr || stream == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  auto* s = reinterpret_cast<FakeStream*>(stream);
  switch (reinterpret_cast<FakeFunction*>(f)->kernel) {
    case kFill: {
      auto* dst = reinterpret_cast<long long*>(*static_cast<CUdeviceptr*>(params[0]));
      long long n = *static_cast<long long*>(params[1]);
      long long start = *static_cast<long long*>(params[2]);
      for (long long i = 0; i < n; ++i) dst[i] = start + i;
      break;
    }
    case kSum:
    case kSumBytes: {
      if (bx != 256) return CUDA_ERROR_INVALID_VALUE;
      auto src = *static_cast<CUdeviceptr*>(params[0]);
      long long n = *static_cast<long long*>(params[1]);
      auto* out = reinterpret_cast<unsigned long long*>(*static_cast<CUdeviceptr*>(params[2]));
      unsigned long long total = 0;
      for (long long i = 0; i < n; ++i) {
        total += reinterpret_cast<FakeFunction*>(f)->kernel == kSum
                     ? static_cast<unsigned long long>(reinterpret_cast<long long*>(src)[i])
                     : reinterpret_cast<unsigned char*>(src)[i];
      }
      *out += total;
      break;
    }
    case kDelay: {
      if (gx != 1 || bx != 1) return CUDA_ERROR_INVALID_VALUE;
      auto ns = *static_cast<unsigned long long*>(params[0]);
      long long cycles = *static_cast<long long*>(params[1]);
      if (cycles <= 0) return CUDA_ERROR_INVALID_VALUE;
      s->busy_until = std::max(s->busy_until, Clock::now()) + std::chrono::nanoseconds(ns);
      break;
    }
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
