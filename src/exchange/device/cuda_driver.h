// Internal: the CUDA driver API as the CUDA backend (cuda.cc) and its test
// kernels (testing/cuda_kernels.cc) use it. Ferry never links libcuda: the
// driver is opened with dlopen at discovery and its entry points are resolved
// by their exported names, so a build made with the toolkit runs (and reports
// CUDA as absent) on a machine without a driver. <cuda.h> supplies types,
// constants and prototypes only.
#pragma once

#include <cuda.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "exchange/device/backend.h"
#include "ferry/device/device.h"

namespace ferry::device::internal::cuda {

// Every driver entry point Ferry calls, by the name libcuda exports (the _v2
// names are the ABI that <cuda.h>'s macros select; the unversioned ones have
// no newer ABI). Adding a call means adding it here.
#define FERRY_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuGetErrorName)                    \
  X(cuGetErrorString)                  \
  X(cuInit)                            \
  X(cuDriverGetVersion)                \
  X(cuDeviceGetCount)                  \
  X(cuDeviceGet)                       \
  X(cuDeviceGetName)                   \
  X(cuDeviceGetAttribute)              \
  X(cuDevicePrimaryCtxRetain)          \
  X(cuDevicePrimaryCtxRelease_v2)      \
  X(cuCtxPushCurrent_v2)               \
  X(cuCtxPopCurrent_v2)                \
  X(cuCtxSynchronize)                  \
  X(cuMemGetInfo_v2)                   \
  X(cuMemAlloc_v2)                     \
  X(cuMemFree_v2)                      \
  X(cuMemHostAlloc)                    \
  X(cuMemFreeHost)                     \
  X(cuMemAllocManaged)                 \
  X(cuMemcpyAsync)                     \
  X(cuMemsetD8Async)                   \
  X(cuStreamCreate)                    \
  X(cuStreamDestroy_v2)                \
  X(cuStreamSynchronize)               \
  X(cuStreamWaitEvent)                 \
  X(cuEventCreate)                     \
  X(cuEventRecord)                     \
  X(cuEventQuery)                      \
  X(cuEventDestroy_v2)                 \
  X(cuModuleLoadData)                  \
  X(cuModuleGetFunction)               \
  X(cuModuleUnload)                    \
  X(cuLaunchKernel)                    \
  X(cuMemGetAddressRange_v2)           \
  X(cuIpcGetMemHandle)                 \
  X(cuIpcOpenMemHandle_v2)             \
  X(cuIpcCloseMemHandle)               \
  X(cuIpcGetEventHandle)               \
  X(cuIpcOpenEventHandle)

// Function pointers into one loaded driver. Immutable once loaded.
struct DriverApi {
#define FERRY_CUDA_DECLARE_ENTRY(name) decltype(&::name) name = nullptr;
  FERRY_CUDA_DRIVER_FUNCTIONS(FERRY_CUDA_DECLARE_ENTRY)
#undef FERRY_CUDA_DECLARE_ENTRY
  std::string library;  // the name it was opened by, for messages
};

// Opens `library` and resolves every entry point. NotImplemented naming the
// library (and dlerror's reason, or the missing entry point) when that fails.
// The returned table and the library stay loaded for the life of the process.
Result<const DriverApi*> LoadDriver(const char* library);

// Whether a GPU is still usable. A sticky driver error (illegal address,
// launch failure, ECC error, ...) leaves its context unusable until the
// process ends, so the first one is kept and reported from then on.
// Thread-safe.
class GpuHealth {
 public:
  Status status() const;
  void MarkLost(const Status& cause);

 private:
  mutable std::mutex mutex_;
  Status lost_;  // OK while healthy
};

// True for the driver errors after which a context cannot be used again.
bool IsDeviceLoss(CUresult result);

// The Status for `result` returned by driver call `call`: OK for
// CUDA_SUCCESS, else an error naming the call and the driver's error name
// (from `api` when given, else from a built-in table). Device-loss errors also
// mark `health` lost when it is given.
Status CudaStatus(const DriverApi* api, CUresult result, std::string_view call,
                  GpuHealth* health = nullptr);

// One GPU: its primary context (retained for the life of the process) and
// what the three Ferry devices of that GPU (CUDA, CUDA_HOST, CUDA_MANAGED)
// share. Thread-safe.
struct Gpu {
  const DriverApi* api = nullptr;
  int ordinal = -1;
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::string name;
  int clock_khz = 0;  // the typical SM clock, 0 when the driver does not say
  bool ipc = false;   // memory and events can be shared with other processes
  GpuHealth health;

  // "CUDA device 0 (NVIDIA H200)".
  std::string Describe() const;
};

// The GPU with this ordinal, as discovered by the process-wide registry;
// NotImplemented when the driver or the GPU is absent.
Result<std::shared_ptr<Gpu>> GpuForOrdinal(int64_t ordinal);

// Makes a GPU's primary context current on this thread for the scope and
// restores the previous one afterwards, so that driver calls work from any
// thread. Check status() before making calls.
class ScopedContext {
 public:
  explicit ScopedContext(const Gpu& gpu);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
  const Status& status() const { return status_; }

 private:
  const Gpu& gpu_;
  Status status_;
};

// Polls `query` (CUDA_SUCCESS: done, CUDA_ERROR_NOT_READY: pending, anything
// else: an error from `call`) with a growing pause until it is done or
// `timeout` has passed (TimedOut). Queries at least once, never blocks in the
// driver, so a wait never hangs.
Status PollUntilReady(const std::function<CUresult()>& query, std::chrono::nanoseconds timeout,
                      const DriverApi* api, std::string_view call, GpuHealth* health = nullptr);

// Discovery against a given driver library: DiscoverCuda() uses
// "libcuda.so.1" and records the GPUs it finds for GpuForOrdinal; other
// names (tests) only report what they find.
Discovery DiscoverCudaFrom(const char* library);

}  // namespace ferry::device::internal::cuda
