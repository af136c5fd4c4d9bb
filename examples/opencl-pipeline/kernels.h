// The two kernels of the pipeline, per device: fill n int64 values with
// start, start+1, ... and sum n int64 values, both on the device, enqueued
// on the caller's queue (so they are ordered after any wait enqueued there).
// OpenCL runs the OpenCL C kernels of kernels.cc; CUDA runs Ferry's CUDA
// test kernels (src/exchange/device/testing); the CPU runs plain loops.
#pragma once

#include <cstdint>
#include <memory>

#include "ferry/device/device.h"

namespace ferry_example {

class PipelineKernels {
 public:
  virtual ~PipelineKernels() = default;
  // Enqueues the fill; returns at once.
  virtual ferry::Status Fill(ferry::device::Queue* queue, void* dst, int64_t n, int64_t start) = 0;
  // Enqueues the sum and returns it once the queue has computed it.
  virtual ferry::Result<int64_t> Sum(ferry::device::Queue* queue, const void* src, int64_t n) = 0;
};

// Kernels for `device`, built against the context of `queue` (one of the
// device's queues).
ferry::Result<std::unique_ptr<PipelineKernels>> MakeKernels(ferry::device::Device* device,
                                                            ferry::device::Queue* queue);

}  // namespace ferry_example
