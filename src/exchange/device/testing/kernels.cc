#include "exchange/device/testing/kernels.h"

#include <thread>

namespace ferry::device::testing {
namespace {

// Host "kernels" for host-accessible memory (CPU, CUDA_HOST, CUDA_MANAGED).
class HostKernels final : public Kernels {
 public:
  Status FillSequence(Queue* queue, void* dst, int64_t n, int64_t start) override {
    FERRY_RETURN_NOT_OK(queue->Synchronize());
    auto* out = static_cast<int64_t*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = start + i;
    return Status::OK();
  }
  Result<int64_t> Sum(Queue* queue, const void* src, int64_t n) override {
    FERRY_RETURN_NOT_OK(queue->Synchronize());
    const auto* in = static_cast<const int64_t*>(src);
    int64_t sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += in[i];
    return sum;
  }
  Result<int64_t> SumBytes(Queue* queue, const void* src, int64_t n) override {
    FERRY_RETURN_NOT_OK(queue->Synchronize());
    const auto* in = static_cast<const uint8_t*>(src);
    int64_t sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += in[i];
    return sum;
  }
  Status Delay(Queue* queue, std::chrono::milliseconds duration) override {
    std::this_thread::sleep_for(duration);
    return Status::OK();
  }
};

}  // namespace

Result<std::unique_ptr<Kernels>> KernelsFor(Device* device) {
  if (device == nullptr) return Status::Invalid("no device");
  switch (device->type()) {
    case DeviceType::kCpu:
      return std::unique_ptr<Kernels>(std::make_unique<HostKernels>());
#ifdef FERRY_HAVE_OPENCL
    case DeviceType::kOpenCL:
      return MakeOpenCLKernels(device);
#endif
#ifdef FERRY_HAVE_CUDA
    case DeviceType::kCuda:
    case DeviceType::kCudaHost:
    case DeviceType::kCudaManaged:
      return MakeCudaKernels(device);
#endif
    default:
      return Status::NotImplemented(std::string("no test kernels for ") +
                                    DeviceTypeName(device->type()));
  }
}

}  // namespace ferry::device::testing
