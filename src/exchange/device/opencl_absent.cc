// Linked when Ferry is built without OpenCL headers and loader.
#include "exchange/device/backend.h"

namespace ferry::device::internal {
Discovery DiscoverOpenCL() {
  Discovery out;
  out.absent.emplace_back(DeviceType::kOpenCL, "Ferry was built without OpenCL (FERRY_OPENCL=OFF)");
  return out;
}
}  // namespace ferry::device::internal
