// CUDA test kernels: the fat binary built from cuda_kernels.cu (embedded at
// build time when nvcc is found) loaded into the GPU's primary context, and
// launched on the caller's CUstream. Results are read back with raw driver
// calls, not Queue::Copy, so that kernels never show up in copy telemetry.
#include <algorithm>
#include <mutex>

#include "exchange/device/testing/kernels.h"

#ifdef FERRY_HAVE_CUDA_KERNELS
#include "exchange/device/cuda_driver.h"
#endif

namespace ferry::device::testing {

#ifdef FERRY_HAVE_CUDA_KERNELS

// Generated from cuda_kernels.cu (see src/CMakeLists.txt).
extern const unsigned char kCudaKernelImage[];
extern const size_t kCudaKernelImageSize;

namespace {

using internal::cuda::CudaStatus;
using internal::cuda::Gpu;
using internal::cuda::ScopedContext;

constexpr unsigned int kThreadsPerBlock = 256;  // FERRY_THREADS_PER_BLOCK in the .cu
constexpr long long kMaxBlocks = 65535;

unsigned int BlocksFor(int64_t n) {
  return static_cast<unsigned int>(
      std::clamp<long long>((n + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, kMaxBlocks));
}

class CudaKernels final : public Kernels {
 public:
  static Result<std::unique_ptr<Kernels>> Create(Device* device) {
    FERRY_ASSIGN_OR_RAISE(auto gpu, internal::cuda::GpuForOrdinal(device->id()));
    FERRY_RETURN_NOT_OK(device->CheckHealth());
    std::unique_ptr<CudaKernels> kernels(new CudaKernels(std::move(gpu)));
    FERRY_RETURN_NOT_OK(kernels->Load());
    return std::unique_ptr<Kernels>(std::move(kernels));
  }

  ~CudaKernels() override {
    ScopedContext scope(*gpu_);
    if (!scope.status().ok()) return;
    const auto* api = gpu_->api;
    // A kernel may still be running on some stream: unloading its module
    // under it is undefined, so drain the context first.
    (void)api->cuCtxSynchronize();
    if (result_ != 0) (void)api->cuMemFree_v2(result_);
    if (result_host_ != nullptr) (void)api->cuMemFreeHost(result_host_);
    if (module_ != nullptr) (void)api->cuModuleUnload(module_);
  }

  Status FillSequence(Queue* queue, void* dst, int64_t n, int64_t start) override {
    if (n < 0) return Status::Invalid("FillSequence: negative count " + std::to_string(n));
    FERRY_ASSIGN_OR_RAISE(CUstream stream, StreamOf(queue));
    if (n == 0) return Status::OK();
    if (dst == nullptr) return Status::Invalid("FillSequence: null destination");
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    auto address = reinterpret_cast<CUdeviceptr>(dst);
    long long count = n;
    long long first = start;
    void* args[] = {&address, &count, &first};
    return Launch(fill_sequence_, BlocksFor(n), kThreadsPerBlock, stream, args);
  }

  Result<int64_t> Sum(Queue* queue, const void* src, int64_t n) override {
    return SumWith(sum_, queue, src, n);
  }

  Result<int64_t> SumBytes(Queue* queue, const void* src, int64_t n) override {
    return SumWith(sum_bytes_, queue, src, n);
  }

  Status Delay(Queue* queue, std::chrono::milliseconds duration) override {
    if (duration.count() < 0) return Status::Invalid("Delay: negative duration");
    FERRY_ASSIGN_OR_RAISE(CUstream stream, StreamOf(queue));
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    unsigned long long nanoseconds =
        std::chrono::duration_cast<std::chrono::nanoseconds>(duration).count();
    // A backstop in clock cycles, four times the duration at the GPU's typical
    // clock (2 GHz when unknown): only reached if the nanosecond timer stalls.
    const long long kilohertz = gpu_->clock_khz > 0 ? gpu_->clock_khz : 2'000'000;
    long long max_cycles = 4 * (static_cast<long long>(duration.count()) + 1) * kilohertz;
    void* args[] = {&nanoseconds, &max_cycles};
    return Launch(delay_, 1, 1, stream, args);
  }

 private:
  explicit CudaKernels(std::shared_ptr<Gpu> gpu) : gpu_(std::move(gpu)) {}

  Status Load() {
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    const auto* api = gpu_->api;
    FERRY_RETURN_NOT_OK(CudaStatus(api, api->cuModuleLoadData(&module_, kCudaKernelImage),
                                   "cuModuleLoadData(test kernels)", &gpu_->health));
    struct Entry {
      CUfunction* function;
      const char* name;
    };
    for (const Entry& entry :
         {Entry{&fill_sequence_, "ferry_fill_sequence"}, Entry{&sum_, "ferry_sum"},
          Entry{&sum_bytes_, "ferry_sum_bytes"}, Entry{&delay_, "ferry_delay"}}) {
      FERRY_RETURN_NOT_OK(
          CudaStatus(api, api->cuModuleGetFunction(entry.function, module_, entry.name),
                     std::string("cuModuleGetFunction(") + entry.name + ")", &gpu_->health));
    }
    FERRY_RETURN_NOT_OK(CudaStatus(api, api->cuMemAlloc_v2(&result_, sizeof(unsigned long long)),
                                   "cuMemAlloc_v2(sum result)", &gpu_->health));
    void* host_word = nullptr;
    FERRY_RETURN_NOT_OK(CudaStatus(api,
                                   api->cuMemHostAlloc(&host_word, sizeof(unsigned long long), 0),
                                   "cuMemHostAlloc(sum result)", &gpu_->health));
    result_host_ = static_cast<unsigned long long*>(host_word);
    return Status::OK();
  }

  // The CUstream of a queue that belongs to one of this GPU's devices.
  Result<CUstream> StreamOf(Queue* queue) const {
    if (queue == nullptr || queue->device() == nullptr) {
      return Status::Invalid("CUDA test kernels need a queue");
    }
    const DeviceType type = queue->device()->type();
    const bool cuda_kind = type == DeviceType::kCuda || type == DeviceType::kCudaHost ||
                           type == DeviceType::kCudaManaged;
    if (!cuda_kind || queue->device()->id() != gpu_->ordinal || queue->native() == nullptr) {
      return Status::Invalid(std::string("CUDA test kernels need a CUDA queue of ") +
                             gpu_->Describe() + ", not one of " + DeviceTypeName(type) +
                             " device " + std::to_string(queue->device()->id()));
    }
    FERRY_RETURN_NOT_OK(queue->device()->CheckHealth());
    return static_cast<CUstream>(queue->native());
  }

  Status Launch(CUfunction function, unsigned int blocks, unsigned int threads, CUstream stream,
                void** args) {
    return CudaStatus(gpu_->api,
                      gpu_->api->cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1,
                                                /*sharedMemBytes=*/0, stream, args,
                                                /*extra=*/nullptr),
                      "cuLaunchKernel", &gpu_->health);
  }

  Result<int64_t> SumWith(CUfunction function, Queue* queue, const void* src, int64_t n) {
    if (n < 0) return Status::Invalid("Sum: negative count " + std::to_string(n));
    FERRY_ASSIGN_OR_RAISE(CUstream stream, StreamOf(queue));
    if (n > 0 && src == nullptr) return Status::Invalid("Sum: null source");
    // One result word per Kernels object: sums on different queues take turns.
    std::lock_guard<std::mutex> lock(result_mutex_);
    ScopedContext scope(*gpu_);
    FERRY_RETURN_NOT_OK(scope.status());
    const auto* api = gpu_->api;
    FERRY_RETURN_NOT_OK(
        CudaStatus(api, api->cuMemsetD8Async(result_, 0, sizeof(unsigned long long), stream),
                   "cuMemsetD8Async", &gpu_->health));
    if (n > 0) {
      auto address = reinterpret_cast<CUdeviceptr>(src);
      long long count = n;
      CUdeviceptr out = result_;
      void* args[] = {&address, &count, &out};
      FERRY_RETURN_NOT_OK(Launch(function, BlocksFor(n), kThreadsPerBlock, stream, args));
    }
    // Read back into pinned memory this object owns: should the sync below
    // fail, the copy may still land later, and it must land somewhere valid.
    FERRY_RETURN_NOT_OK(CudaStatus(api,
                                   api->cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(result_host_),
                                                      result_, sizeof(unsigned long long), stream),
                                   "cuMemcpyAsync(sum result)", &gpu_->health));
    FERRY_RETURN_NOT_OK(
        CudaStatus(api, api->cuStreamSynchronize(stream), "cuStreamSynchronize", &gpu_->health));
    return static_cast<int64_t>(*result_host_);
  }

  std::shared_ptr<Gpu> gpu_;
  CUmodule module_ = nullptr;
  CUfunction fill_sequence_ = nullptr;
  CUfunction sum_ = nullptr;
  CUfunction sum_bytes_ = nullptr;
  CUfunction delay_ = nullptr;
  std::mutex result_mutex_;
  CUdeviceptr result_ = 0;                     // where the sum kernels add up
  unsigned long long* result_host_ = nullptr;  // pinned; where the sum is read back
};

}  // namespace

Result<std::unique_ptr<Kernels>> MakeCudaKernels(Device* device) {
  if (device == nullptr) return Status::Invalid("no device");
  return CudaKernels::Create(device);
}

#else  // !FERRY_HAVE_CUDA_KERNELS

Result<std::unique_ptr<Kernels>> MakeCudaKernels(Device* device) {
  return Status::NotImplemented(
      "CUDA test kernels were not built (nvcc was not found or could not compile "
      "src/exchange/device/testing/cuda_kernels.cu when Ferry was configured)");
}

#endif  // FERRY_HAVE_CUDA_KERNELS

}  // namespace ferry::device::testing
