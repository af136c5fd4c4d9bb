// Linked when Ferry is built without the CUDA toolkit's headers.
#include "exchange/device/backend.h"

namespace ferry::device::internal {
Discovery DiscoverCuda() {
  Discovery out;
  for (DeviceType type : {DeviceType::kCuda, DeviceType::kCudaHost, DeviceType::kCudaManaged}) {
    out.absent.emplace_back(type, "Ferry was built without CUDA (FERRY_CUDA=OFF)");
  }
  return out;
}
}  // namespace ferry::device::internal
