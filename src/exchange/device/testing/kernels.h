// Test and benchmark support: small compute kernels per backend, so that a
// test can act as a real producer (a kernel writes device memory and the
// event is recorded after it) and a real consumer (a kernel reads device
// memory after waiting on the producer's event). Not installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "ferry/device/device.h"

namespace ferry::device::testing {

class Kernels {
 public:
  virtual ~Kernels() = default;
  // Enqueues on `queue`: dst[i] = start + i for i in [0, n), int64 values.
  virtual Status FillSequence(Queue* queue, void* dst, int64_t n, int64_t start) = 0;
  // Enqueues on `queue` a kernel summing n int64 values at `src` and returns
  // the sum once the queue reaches it (the read happens on the device).
  virtual Result<int64_t> Sum(Queue* queue, const void* src, int64_t n) = 0;
  // As Sum, over n bytes (unsigned) at `src`: for variable-length data.
  virtual Result<int64_t> SumBytes(Queue* queue, const void* src, int64_t n) = 0;
  // Enqueues work that keeps `queue` busy for about `duration`, so that an
  // event recorded after it is not yet complete (event wait and timeout tests).
  virtual Status Delay(Queue* queue, std::chrono::milliseconds duration) = 0;
};

// Kernels for `device`; NotImplemented when its backend has none.
Result<std::unique_ptr<Kernels>> KernelsFor(Device* device);

// Implemented by the backends' kernel files (declared here, defined only when
// the backend is built).
Result<std::unique_ptr<Kernels>> MakeOpenCLKernels(Device* device);
Result<std::unique_ptr<Kernels>> MakeCudaKernels(Device* device);

}  // namespace ferry::device::testing
