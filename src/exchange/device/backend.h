// Internal: how backends plug into the DeviceRegistry. Each backend file
// defines its Discover function; a backend that is not compiled in is
// replaced by a file that reports the type absent with the reason
// (opencl_absent.cc, cuda_absent.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ferry/device/device.h"

namespace ferry::device::internal {

struct Discovery {
  std::vector<std::shared_ptr<Device>> devices;
  // (type, reason) for types this backend serves but could not provide.
  std::vector<std::pair<DeviceType, std::string>> absent;
};

std::shared_ptr<Device> MakeCpuDevice();
// OpenCL through the ICD loader: every GPU/CPU/accelerator device of every
// platform, ids in discovery order.
Discovery DiscoverOpenCL();
// CUDA through the driver API loaded at run time (libcuda.so.1): for each
// GPU a CUDA, a CUDA_HOST and a CUDA_MANAGED device with that GPU's id.
Discovery DiscoverCuda();

// OpenCL helpers shared by the backend and its test kernels (defined only
// when the OpenCL backend is built).
// The symbolic name of an OpenCL error code ("CL_INVALID_VALUE"), or
// "CL_UNKNOWN_ERROR" for codes outside the table.
const char* OpenCLErrorName(int32_t code);
// OK for CL_SUCCESS; otherwise an error naming `call` and the error code.
Status OpenCLStatus(int32_t code, const char* call);
// The SVM kind behind `device`'s allocations ("fine-grained buffer" or
// "coarse-grained buffer"); nullptr when it is not an OpenCL backend device.
const char* OpenCLSvmKind(const Device* device);

// Counts telemetry bytes for a copy in `direction`.
void CountCopy(CopyDirection direction, int64_t size);
// Records one event wait of `nanos` nanoseconds.
void CountEventWait(int64_t nanos);

}  // namespace ferry::device::internal
