// OpenCL test kernels: real OpenCL C kernels that read and write SVM memory
// through the pointers Ferry's buffers carry. The program is built once per
// (context, device) and cached for the process; the delay kernel's speed is
// measured once per device.
#include <CL/cl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "exchange/device/backend.h"
#include "exchange/device/testing/kernels.h"

namespace ferry::device::testing {
namespace {

using internal::OpenCLStatus;

constexpr const char* kKernelSource = R"CLC(
__kernel void fill_sequence(__global long* dst, long start) {
  long i = (long)get_global_id(0);
  dst[i] = start + i;
}

// Each work-item sums one contiguous chunk: contiguous reads suit CPU devices,
// and a few hundred partials are cheap to add up on the host.
__kernel void sum_i64(__global const long* src, long n, long chunk, __global long* partial) {
  long item = (long)get_global_id(0);
  long begin = item * chunk;
  long end = min(begin + chunk, n);
  long total = 0;
  for (long i = begin; i < end; ++i) total += src[i];
  partial[item] = total;
}

__kernel void sum_u8(__global const uchar* src, long n, long chunk, __global long* partial) {
  long item = (long)get_global_id(0);
  long begin = item * chunk;
  long end = min(begin + chunk, n);
  long total = 0;
  for (long i = begin; i < end; ++i) total += (long)src[i];
  partial[item] = total;
}

// A xorshift chain: each step depends on the last, so the compiler can neither
// vectorise nor fold the loop, and the time it takes grows with `iterations`.
__kernel void spin(long iterations, __global long* sink) {
  ulong state = 0x9E3779B97F4A7C15UL ^ (ulong)iterations;
  for (long i = 0; i < iterations; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
  }
  sink[0] = (long)state;
}
)CLC";

constexpr int64_t kMaxPartials = 256;

// A built program and the measured speed of its spin kernel, per device.
struct CachedProgram {
  cl_program program = nullptr;
  double spin_iterations_per_ms = 0;  // 0 until measured
};

std::mutex& CacheMutex() {
  static std::mutex mutex;
  return mutex;
}

// Programs live for the process: building one runs the device compiler,
// which is far too slow to repeat per test.
std::map<std::pair<cl_context, cl_device_id>, CachedProgram>& Cache() {
  static auto* cache = new std::map<std::pair<cl_context, cl_device_id>, CachedProgram>();
  return *cache;
}

Result<cl_program> BuildProgram(cl_context context, cl_device_id device) {
  std::lock_guard<std::mutex> lock(CacheMutex());
  auto& entry = Cache()[{context, device}];
  if (entry.program != nullptr) return entry.program;
  const char* source = kKernelSource;
  cl_int error = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &error);
  FERRY_RETURN_NOT_OK(OpenCLStatus(error, "clCreateProgramWithSource"));
  error = clBuildProgram(program, 1, &device, "", nullptr, nullptr);
  if (error != CL_SUCCESS) {
    size_t log_size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_size);
    std::string log(log_size, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, log_size, log.data(), nullptr);
    clReleaseProgram(program);
    Status failed = OpenCLStatus(error, "clBuildProgram");
    return Status(failed.code(), "test kernels: " + failed.message() + "\n" + log);
  }
  entry.program = program;
  return program;
}

// A handle-valued property of a command queue (its context or device).
template <typename Handle>
Result<Handle> QueueInfo(cl_command_queue queue, cl_command_queue_info info) {
  Handle value = nullptr;
  const size_t size = sizeof(Handle);  // NOLINT(bugprone-sizeof-expression): a handle, by value
  FERRY_RETURN_NOT_OK(OpenCLStatus(clGetCommandQueueInfo(queue, info, size, &value, nullptr),
                                   "clGetCommandQueueInfo"));
  return value;
}

class OpenCLKernels final : public Kernels {
 public:
  static Result<std::unique_ptr<Kernels>> Make(Device* device) {
    if (device == nullptr || device->type() != DeviceType::kOpenCL) {
      return Status::Invalid("OpenCL test kernels need an OpenCL device");
    }
    auto* queue = static_cast<cl_command_queue>(device->default_queue()->native());
    if (queue == nullptr) return Status::Invalid("the OpenCL device has no native queue");
    FERRY_ASSIGN_OR_RAISE(auto context, QueueInfo<cl_context>(queue, CL_QUEUE_CONTEXT));
    FERRY_ASSIGN_OR_RAISE(auto device_id, QueueInfo<cl_device_id>(queue, CL_QUEUE_DEVICE));
    FERRY_ASSIGN_OR_RAISE(cl_program program, BuildProgram(context, device_id));
    std::unique_ptr<OpenCLKernels> kernels(new OpenCLKernels(context, device_id));
    for (auto [slot, name] :
         {std::pair{&kernels->fill_, "fill_sequence"}, std::pair{&kernels->sum_i64_, "sum_i64"},
          std::pair{&kernels->sum_u8_, "sum_u8"}, std::pair{&kernels->spin_, "spin"}}) {
      cl_int error = CL_SUCCESS;
      *slot = clCreateKernel(program, name, &error);
      FERRY_RETURN_NOT_OK(
          OpenCLStatus(error, "clCreateKernel").WithPrefix(std::string(name) + ": "));
    }
    // Partial sums, then one slot the spin kernel writes to.
    kernels->scratch_ = static_cast<int64_t*>(
        clSVMAlloc(context, CL_MEM_READ_WRITE, (kMaxPartials + 1) * sizeof(int64_t), 0));
    if (kernels->scratch_ == nullptr) {
      return Status::OutOfMemory("clSVMAlloc of the test kernels' scratch memory failed");
    }
    return std::unique_ptr<Kernels>(std::move(kernels));
  }

  ~OpenCLKernels() override {
    // Kernels still queued may use the scratch memory: wait for every queue
    // this object enqueued on before freeing it.
    for (cl_command_queue queue : used_queues_) {
      clFinish(queue);
      clReleaseCommandQueue(queue);
    }
    if (scratch_ != nullptr) clSVMFree(context_, scratch_);
    for (cl_kernel kernel : {fill_, sum_i64_, sum_u8_, spin_}) {
      if (kernel != nullptr) clReleaseKernel(kernel);
    }
  }

  Status FillSequence(Queue* queue, void* dst, int64_t n, int64_t start) override {
    if (n < 0) return Status::Invalid("negative element count " + std::to_string(n));
    if (n == 0) return Status::OK();
    std::lock_guard<std::mutex> lock(mutex_);
    FERRY_ASSIGN_OR_RAISE(cl_command_queue native, Use(queue));
    cl_long first = start;
    FERRY_RETURN_NOT_OK(
        OpenCLStatus(clSetKernelArgSVMPointer(fill_, 0, dst), "clSetKernelArgSVMPointer"));
    FERRY_RETURN_NOT_OK(
        OpenCLStatus(clSetKernelArg(fill_, 1, sizeof(first), &first), "clSetKernelArg"));
    return Launch(native, fill_, static_cast<size_t>(n));
  }

  Result<int64_t> Sum(Queue* queue, const void* src, int64_t n) override {
    return Reduce(queue, sum_i64_, src, n);
  }

  Result<int64_t> SumBytes(Queue* queue, const void* src, int64_t n) override {
    return Reduce(queue, sum_u8_, src, n);
  }

  Status Delay(Queue* queue, std::chrono::milliseconds duration) override {
    std::lock_guard<std::mutex> lock(mutex_);
    FERRY_ASSIGN_OR_RAISE(cl_command_queue native, Use(queue));
    FERRY_ASSIGN_OR_RAISE(double per_ms, SpinIterationsPerMs());
    const auto iterations =
        static_cast<cl_long>(per_ms * static_cast<double>(std::max<int64_t>(duration.count(), 0)));
    FERRY_RETURN_NOT_OK(EnqueueSpin(native, iterations));
    // Start now, so that the delay runs while the caller goes on.
    return OpenCLStatus(clFlush(native), "clFlush");
  }

 private:
  OpenCLKernels(cl_context context, cl_device_id device) : context_(context), device_(device) {}

  // The native queue behind `queue`, which must belong to this device; it is
  // retained so the destructor can wait for it.
  Result<cl_command_queue> Use(Queue* queue) {
    if (queue == nullptr || queue->native() == nullptr) {
      return Status::Invalid("OpenCL test kernels need an OpenCL queue");
    }
    auto* native = static_cast<cl_command_queue>(queue->native());
    if (queue->device()->type() != DeviceType::kOpenCL) {
      return Status::Invalid(std::string("OpenCL test kernels cannot run on a ") +
                             DeviceTypeName(queue->device()->type()) + " queue");
    }
    FERRY_ASSIGN_OR_RAISE(auto owner, QueueInfo<cl_device_id>(native, CL_QUEUE_DEVICE));
    if (owner != device_) {
      return Status::Invalid("the queue belongs to another OpenCL device than these kernels");
    }
    if (std::find(used_queues_.begin(), used_queues_.end(), native) == used_queues_.end()) {
      FERRY_RETURN_NOT_OK(OpenCLStatus(clRetainCommandQueue(native), "clRetainCommandQueue"));
      used_queues_.push_back(native);
    }
    return native;
  }

  static Status Launch(cl_command_queue queue, cl_kernel kernel, size_t global_size) {
    return OpenCLStatus(clEnqueueNDRangeKernel(queue, kernel, 1, nullptr, &global_size, nullptr, 0,
                                               nullptr, nullptr),
                        "clEnqueueNDRangeKernel");
  }

  Result<int64_t> Reduce(Queue* queue, cl_kernel kernel, const void* src, int64_t n) {
    if (n < 0) return Status::Invalid("negative element count " + std::to_string(n));
    if (n == 0) return int64_t{0};
    std::lock_guard<std::mutex> lock(mutex_);
    FERRY_ASSIGN_OR_RAISE(cl_command_queue native, Use(queue));
    const int64_t chunk = (n + kMaxPartials - 1) / kMaxPartials;
    const int64_t items = (n + chunk - 1) / chunk;
    cl_long count = n;
    cl_long chunk_arg = chunk;
    FERRY_RETURN_NOT_OK(
        OpenCLStatus(clSetKernelArgSVMPointer(kernel, 0, src), "clSetKernelArgSVMPointer"));
    FERRY_RETURN_NOT_OK(
        OpenCLStatus(clSetKernelArg(kernel, 1, sizeof(count), &count), "clSetKernelArg"));
    FERRY_RETURN_NOT_OK(
        OpenCLStatus(clSetKernelArg(kernel, 2, sizeof(chunk_arg), &chunk_arg), "clSetKernelArg"));
    FERRY_RETURN_NOT_OK(
        OpenCLStatus(clSetKernelArgSVMPointer(kernel, 3, scratch_), "clSetKernelArgSVMPointer"));
    FERRY_RETURN_NOT_OK(Launch(native, kernel, static_cast<size_t>(items)));
    // A blocking read on the same in-order queue, deliberately outside
    // Queue::Copy: the kernels' own traffic must not show in the telemetry
    // that tests check.
    std::vector<int64_t> partials(static_cast<size_t>(items));
    FERRY_RETURN_NOT_OK(
        OpenCLStatus(clEnqueueSVMMemcpy(native, CL_TRUE, partials.data(), scratch_,
                                        partials.size() * sizeof(int64_t), 0, nullptr, nullptr),
                     "clEnqueueSVMMemcpy"));
    int64_t total = 0;
    for (int64_t partial : partials) total += partial;
    return total;
  }

  Status EnqueueSpin(cl_command_queue queue, cl_long iterations) {
    FERRY_RETURN_NOT_OK(
        OpenCLStatus(clSetKernelArg(spin_, 0, sizeof(iterations), &iterations), "clSetKernelArg"));
    FERRY_RETURN_NOT_OK(OpenCLStatus(clSetKernelArgSVMPointer(spin_, 1, scratch_ + kMaxPartials),
                                     "clSetKernelArgSVMPointer"));
    return Launch(queue, spin_, 1);
  }

  // Measures the spin kernel on a private queue (so that the caller's queued
  // work does not distort it), growing the loop until one run takes long
  // enough to time. Cached per device.
  Result<double> SpinIterationsPerMs() {
    {
      std::lock_guard<std::mutex> lock(CacheMutex());
      double known = Cache()[{context_, device_}].spin_iterations_per_ms;
      if (known > 0) return known;
    }
    cl_int error = CL_SUCCESS;
    cl_command_queue queue = clCreateCommandQueueWithProperties(context_, device_, nullptr, &error);
    FERRY_RETURN_NOT_OK(OpenCLStatus(error, "clCreateCommandQueueWithProperties"));
    auto timed_run = [&](cl_long iterations) -> Result<double> {
      const auto start = std::chrono::steady_clock::now();
      FERRY_RETURN_NOT_OK(EnqueueSpin(queue, iterations));
      FERRY_RETURN_NOT_OK(OpenCLStatus(clFinish(queue), "clFinish"));
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();
    };
    double per_ms = 0;
    // The first run includes the kernel's just-in-time compilation.
    auto measured = timed_run(1024);
    for (cl_long iterations = 1 << 16; measured.ok(); iterations *= 4) {
      measured = timed_run(iterations);
      if (measured.ok() && *measured >= 20.0) {
        per_ms = static_cast<double>(iterations) / *measured;
        break;
      }
    }
    clReleaseCommandQueue(queue);
    FERRY_RETURN_NOT_OK(measured.status());
    std::lock_guard<std::mutex> lock(CacheMutex());
    Cache()[{context_, device_}].spin_iterations_per_ms = per_ms;
    return per_ms;
  }

  cl_context context_;
  cl_device_id device_;
  std::mutex mutex_;  // kernel arguments and scratch memory are shared state
  cl_kernel fill_ = nullptr;
  cl_kernel sum_i64_ = nullptr;
  cl_kernel sum_u8_ = nullptr;
  cl_kernel spin_ = nullptr;
  int64_t* scratch_ = nullptr;
  std::vector<cl_command_queue> used_queues_;  // retained
};

}  // namespace

Result<std::unique_ptr<Kernels>> MakeOpenCLKernels(Device* device) {
  return OpenCLKernels::Make(device);
}

}  // namespace ferry::device::testing
