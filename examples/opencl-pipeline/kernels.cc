#include "kernels.h"

#include <string>
#include <utility>

#include "exchange/device/testing/kernels.h"

#ifdef FERRY_HAVE_OPENCL
#include <CL/cl.h>
#endif

namespace ferry_example {
namespace {

using ferry::Result;
using ferry::Status;
using ferry::device::Queue;

// CPU: the data is ordinary memory.
class CpuKernels final : public PipelineKernels {
 public:
  Status Fill(Queue*, void* dst, int64_t n, int64_t start) override {
    auto* values = static_cast<int64_t*>(dst);
    for (int64_t i = 0; i < n; ++i) values[i] = start + i;
    return Status::OK();
  }
  Result<int64_t> Sum(Queue*, const void* src, int64_t n) override {
    const auto* values = static_cast<const int64_t*>(src);
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) total += values[i];
    return total;
  }
};

// CUDA (and any backend Ferry has test kernels for).
class TestingKernels final : public PipelineKernels {
 public:
  explicit TestingKernels(std::unique_ptr<ferry::device::testing::Kernels> kernels)
      : kernels_(std::move(kernels)) {}
  Status Fill(Queue* queue, void* dst, int64_t n, int64_t start) override {
    return kernels_->FillSequence(queue, dst, n, start);
  }
  Result<int64_t> Sum(Queue* queue, const void* src, int64_t n) override {
    return kernels_->Sum(queue, src, n);
  }

 private:
  std::unique_ptr<ferry::device::testing::Kernels> kernels_;
};

#ifdef FERRY_HAVE_OPENCL

constexpr const char* kSource = R"CLC(
__kernel void fill(__global long* dst, long start) {
  long i = (long)get_global_id(0);
  dst[i] = start + i;
}

// Work-item k sums the k-th chunk of src into partial[k].
__kernel void partial_sums(__global const long* src, long n, long chunk, __global long* partial) {
  long k = (long)get_global_id(0);
  long end = min((k + 1) * chunk, n);
  long total = 0;
  for (long i = k * chunk; i < end; ++i) total += src[i];
  partial[k] = total;
}

// One work-item adds the partial sums up into partial[count].
__kernel void total(__global long* partial, long count) {
  long sum = 0;
  for (long k = 0; k < count; ++k) sum += partial[k];
  partial[count] = sum;
}
)CLC";

constexpr int64_t kPartials = 256;

Status Check(cl_int code, const char* call) {
  if (code == CL_SUCCESS) return Status::OK();
  return Status::IOError(std::string(call) + " failed with OpenCL error " + std::to_string(code));
}

class OpenCLKernels final : public PipelineKernels {
 public:
  static Result<std::unique_ptr<PipelineKernels>> Make(ferry::device::Device* device,
                                                       Queue* queue) {
    // The runtime's context: memory and events of every operator live there.
    auto* native = static_cast<cl_command_queue>(queue->native());
    cl_context context = nullptr;
    cl_device_id device_id = nullptr;
    FERRY_RETURN_NOT_OK(
        Check(clGetCommandQueueInfo(native, CL_QUEUE_CONTEXT, sizeof(context), &context, nullptr),
              "clGetCommandQueueInfo"));
    FERRY_RETURN_NOT_OK(Check(
        clGetCommandQueueInfo(native, CL_QUEUE_DEVICE, sizeof(device_id), &device_id, nullptr),
        "clGetCommandQueueInfo"));
    std::unique_ptr<OpenCLKernels> kernels(new OpenCLKernels());
    cl_int error = CL_SUCCESS;
    const char* source = kSource;
    kernels->program_ = clCreateProgramWithSource(context, 1, &source, nullptr, &error);
    FERRY_RETURN_NOT_OK(Check(error, "clCreateProgramWithSource"));
    FERRY_RETURN_NOT_OK(Check(
        clBuildProgram(kernels->program_, 1, &device_id, "", nullptr, nullptr), "clBuildProgram"));
    for (auto [slot, name] :
         {std::pair{&kernels->fill_, "fill"}, std::pair{&kernels->partial_sums_, "partial_sums"},
          std::pair{&kernels->total_, "total"}}) {
      *slot = clCreateKernel(kernels->program_, name, &error);
      FERRY_RETURN_NOT_OK(Check(error, "clCreateKernel"));
    }
    // Scratch for the partial sums and the total: device memory from Ferry.
    FERRY_ASSIGN_OR_RAISE(kernels->scratch_, device->Allocate((kPartials + 1) * 8));
    return std::unique_ptr<PipelineKernels>(std::move(kernels));
  }

  ~OpenCLKernels() override {
    for (cl_kernel kernel : {fill_, partial_sums_, total_}) {
      if (kernel != nullptr) clReleaseKernel(kernel);
    }
    if (program_ != nullptr) clReleaseProgram(program_);
  }

  Status Fill(Queue* queue, void* dst, int64_t n, int64_t start) override {
    if (n == 0) return Status::OK();
    cl_long first = start;
    FERRY_RETURN_NOT_OK(Check(clSetKernelArgSVMPointer(fill_, 0, dst), "clSetKernelArgSVMPointer"));
    FERRY_RETURN_NOT_OK(Check(clSetKernelArg(fill_, 1, sizeof(first), &first), "clSetKernelArg"));
    return Launch(queue, fill_, static_cast<size_t>(n));
  }

  Result<int64_t> Sum(Queue* queue, const void* src, int64_t n) override {
    if (n == 0) return int64_t{0};
    const int64_t chunk = (n + kPartials - 1) / kPartials;
    const cl_long count = (n + chunk - 1) / chunk;
    const cl_long length = n;
    const cl_long chunk_arg = chunk;
    void* partial = scratch_->mutable_data();
    FERRY_RETURN_NOT_OK(
        Check(clSetKernelArgSVMPointer(partial_sums_, 0, src), "clSetKernelArgSVMPointer"));
    FERRY_RETURN_NOT_OK(
        Check(clSetKernelArg(partial_sums_, 1, sizeof(length), &length), "clSetKernelArg"));
    FERRY_RETURN_NOT_OK(
        Check(clSetKernelArg(partial_sums_, 2, sizeof(chunk_arg), &chunk_arg), "clSetKernelArg"));
    FERRY_RETURN_NOT_OK(
        Check(clSetKernelArgSVMPointer(partial_sums_, 3, partial), "clSetKernelArgSVMPointer"));
    FERRY_RETURN_NOT_OK(Launch(queue, partial_sums_, static_cast<size_t>(count)));
    FERRY_RETURN_NOT_OK(
        Check(clSetKernelArgSVMPointer(total_, 0, partial), "clSetKernelArgSVMPointer"));
    FERRY_RETURN_NOT_OK(Check(clSetKernelArg(total_, 1, sizeof(count), &count), "clSetKernelArg"));
    FERRY_RETURN_NOT_OK(Launch(queue, total_, 1));
    // The 8 bytes of the result come back to the host (a counted D2H copy).
    int64_t result = 0;
    FERRY_RETURN_NOT_OK(queue->Copy(ferry::device::CopyDirection::kDeviceToHost,
                                    static_cast<const int64_t*>(partial) + count, &result, 8));
    FERRY_RETURN_NOT_OK(queue->Synchronize());
    return result;
  }

 private:
  OpenCLKernels() = default;

  static Status Launch(Queue* queue, cl_kernel kernel, size_t items) {
    return Check(clEnqueueNDRangeKernel(static_cast<cl_command_queue>(queue->native()), kernel, 1,
                                        nullptr, &items, nullptr, 0, nullptr, nullptr),
                 "clEnqueueNDRangeKernel");
  }

  cl_program program_ = nullptr;
  cl_kernel fill_ = nullptr;
  cl_kernel partial_sums_ = nullptr;
  cl_kernel total_ = nullptr;
  ferry::BufferPtr scratch_;
};

#endif  // FERRY_HAVE_OPENCL

}  // namespace

Result<std::unique_ptr<PipelineKernels>> MakeKernels(ferry::device::Device* device, Queue* queue) {
  switch (device->type()) {
    case ferry::device::DeviceType::kCpu:
      return std::unique_ptr<PipelineKernels>(new CpuKernels());
#ifdef FERRY_HAVE_OPENCL
    case ferry::device::DeviceType::kOpenCL:
      return OpenCLKernels::Make(device, queue);
#endif
    default: {
      FERRY_ASSIGN_OR_RAISE(auto kernels, ferry::device::testing::KernelsFor(device));
      return std::unique_ptr<PipelineKernels>(new TestingKernels(std::move(kernels)));
    }
  }
}

}  // namespace ferry_example
