// Tests of the OpenCL backend against a real OpenCL device (PoCL in CI). They
// skip, saying why, only when no OpenCL device is present.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "exchange/device/backend.h"
#include "exchange/device/testing/kernel_device_test.h"
#include "exchange/device/testing/kernels.h"
#include "ferry/base/telemetry.h"
#include "ferry/device/device.h"
#include "testing/test_util.h"

#ifdef FERRY_HAVE_OPENCL
#include <CL/cl.h>
#include <CL/cl_ext.h>
#endif

namespace ferry::device {
namespace {

using ::ferry::testing::CounterDelta;
using ::ferry::testing::SequenceSum;
using telemetry::Counter;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

#ifdef FERRY_HAVE_OPENCL
// The context or device behind an OpenCL device's default queue.
template <typename Handle>
Handle DefaultQueueHandle(Device* device, cl_command_queue_info info) {
  Handle handle = nullptr;
  const size_t size = sizeof(Handle);  // NOLINT(bugprone-sizeof-expression): a handle, by value
  EXPECT_EQ(clGetCommandQueueInfo(static_cast<cl_command_queue>(device->default_queue()->native()),
                                  info, size, &handle, nullptr),
            CL_SUCCESS);
  return handle;
}
#endif  // FERRY_HAVE_OPENCL

class OpenCLTest : public device::testing::KernelDeviceTest<::testing::Test> {
 protected:
  void SetUp() override {
    Open(DeviceRegistry::Global().Get(DeviceType::kOpenCL, 0), "no OpenCL device present: ",
         {EventKind::kOpenCL, "OpenCL queue", "negative element count", "null cl_event"});
  }
};

// ---- Discovery -----------------------------------------------------------

TEST_F(OpenCLTest, DevicesHaveDenseIdsAndNamesWithTheirPlatform) {
  std::vector<Device*> opencl;
  for (Device* device : DeviceRegistry::Global().Present()) {
    if (device->type() == DeviceType::kOpenCL) opencl.push_back(device);
  }
  ASSERT_FALSE(opencl.empty());
  for (size_t index = 0; index < opencl.size(); ++index) {
    Device* device = opencl[index];
    EXPECT_EQ(device->id(), static_cast<int64_t>(index));
    EXPECT_EQ(device->event_kind(), EventKind::kOpenCL);
    EXPECT_FALSE(device->host_accessible());
    EXPECT_THAT(device->name(), HasSubstr(" ("));
    EXPECT_EQ(device->name().back(), ')');
    EXPECT_TRUE(device->CheckHealth().ok());
  }
  auto missing =
      DeviceRegistry::Global().Get(DeviceType::kOpenCL, static_cast<int64_t>(opencl.size()));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("no opencl device with id"));

#ifdef FERRY_HAVE_OPENCL
  // The same order and names straight from the ICD loader.
  std::vector<std::string> expected;
  cl_uint platform_count = 0;
  ASSERT_EQ(clGetPlatformIDs(0, nullptr, &platform_count), CL_SUCCESS);
  std::vector<cl_platform_id> platforms(platform_count);
  ASSERT_EQ(clGetPlatformIDs(platform_count, platforms.data(), nullptr), CL_SUCCESS);
  for (cl_platform_id platform : platforms) {
    char platform_name[256] = {};
    clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof(platform_name) - 1, platform_name,
                      nullptr);
    cl_uint device_count = 0;
    if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &device_count) != CL_SUCCESS) {
      continue;
    }
    std::vector<cl_device_id> devices(device_count);
    clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, device_count, devices.data(), nullptr);
    for (cl_device_id device : devices) {
      cl_device_svm_capabilities svm = 0;
      if (clGetDeviceInfo(device, CL_DEVICE_SVM_CAPABILITIES, sizeof(svm), &svm, nullptr) !=
              CL_SUCCESS ||
          svm == 0) {
        continue;
      }
      char device_name[256] = {};
      clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof(device_name) - 1, device_name, nullptr);
      expected.push_back(std::string(device_name) + " (" + platform_name + ")");
    }
  }
  ASSERT_EQ(expected.size(), opencl.size());
  for (size_t index = 0; index < opencl.size(); ++index) {
    EXPECT_EQ(opencl[index]->name(), expected[index]);
  }
#endif
}

TEST_F(OpenCLTest, RegistryDescribesTheDevice) {
  std::string text = DeviceRegistry::Global().Describe();
  EXPECT_THAT(text, HasSubstr("opencl: " + device_->name() + " (id 0)"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("opencl: absent")));
}

#ifdef FERRY_HAVE_OPENCL
TEST_F(OpenCLTest, SvmKindFollowsTheDeviceCapabilities) {
  const char* kind = internal::OpenCLSvmKind(device_);
  ASSERT_NE(kind, nullptr);
  EXPECT_EQ(internal::OpenCLSvmKind(DeviceRegistry::Global().cpu()), nullptr);
  auto native = DefaultQueueHandle<cl_device_id>(device_, CL_QUEUE_DEVICE);
  cl_device_svm_capabilities svm = 0;
  ASSERT_EQ(clGetDeviceInfo(native, CL_DEVICE_SVM_CAPABILITIES, sizeof(svm), &svm, nullptr),
            CL_SUCCESS);
  EXPECT_STREQ(kind, (svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) ? "fine-grained buffer"
                                                             : "coarse-grained buffer");
}
#endif  // FERRY_HAVE_OPENCL

TEST_F(OpenCLTest, QueuesAreSeparateInOrderNativeQueues) { CheckQueuesAreSeparate(); }

// ---- Memory and copies -------------------------------------------------------

TEST_F(OpenCLTest, CopiesRoundTripWithExactCountsPerDirection) {
  CheckCopiesRoundTrip({1, 7, 63, 64, 65, 1000, 4096, int64_t{1} << 20, (int64_t{3} << 20) + 5});
}

TEST_F(OpenCLTest, ZeroSizeAllocationsHaveDistinctAlignedAddresses) { CheckZeroSizeAllocations(); }

TEST_F(OpenCLTest, AllocationFailuresAreOutOfMemory) { CheckAllocationFailures(); }

TEST_F(OpenCLTest, BadCopiesAreRefusedAndNotCounted) {
  CheckBadCopiesRefused([](Queue* queue, Buffer* buffer) {
    // OpenCL itself refuses overlapping ranges; the error names the call and code.
    Status overlap =
        queue->Copy(CopyDirection::kDeviceToDevice, buffer->data(), buffer->mutable_data() + 8, 64);
    EXPECT_EQ(overlap.code(), StatusCode::kIOError);
    EXPECT_THAT(overlap.message(), HasSubstr("clEnqueueSVMMemcpy failed: CL_MEM_COPY_OVERLAP"));
  });
}

TEST_F(OpenCLTest, FreeingWaitsForQueuedWorkThatUsesTheMemory) {
  auto queue = device_->CreateQueue();
  ASSERT_TRUE(queue.ok());
  BufferPtr buffer = MustAllocate(int64_t{8} * 1024);
  ASSERT_TRUE(buffer);
  ASSERT_TRUE(kernels_->Delay(queue->get(), 50ms).ok());
  ASSERT_TRUE(kernels_->FillSequence(queue->get(), buffer->mutable_data(), 1024, 0).ok());
  auto event = (*queue)->RecordEvent();
  ASSERT_TRUE(event.ok());
  buffer.reset();  // the free drains the device's queues first
  EXPECT_TRUE(device_->HostWait((*event)->sync_event(), 0ns).ok());
}

// ---- Kernels, events and waits -------------------------------------------------

TEST_F(OpenCLTest, ConsumerQueueWaitsOnDeviceForTheProducersEvent) {
  CheckConsumerWaitsOnDeviceForTheProducersEvent();
}

TEST_F(OpenCLTest, KernelsSumTenMillionValues) { CheckKernelsSumTenMillionValuesAndSlices(); }

TEST_F(OpenCLTest, KernelsRefuseForeignQueuesAndBadCounts) {
  CheckKernelsRefuseForeignQueuesAndBadCounts();
#ifdef FERRY_HAVE_OPENCL
  auto for_cpu = device::testing::MakeOpenCLKernels(DeviceRegistry::Global().cpu());
  ASSERT_FALSE(for_cpu.ok());
  EXPECT_THAT(for_cpu.status().message(), HasSubstr("need an OpenCL device"));
#endif
}

TEST_F(OpenCLTest, HostWaitReturnsOnceTheDelayedWorkCompletes) {
  CheckHostWaitReturnsOnceTheDelayedWorkCompletes();
}

TEST_F(OpenCLTest, HostWaitTimesOutInsteadOfHangingThenCompletes) {
  CheckHostWaitTimesOutInsteadOfHangingThenCompletes();
}

TEST_F(OpenCLTest, TwoQueuesOrderEachOtherThroughEvents) {
  CheckTwoQueuesOrderEachOtherThroughEvents();
}

TEST_F(OpenCLTest, NullEventsAreReadyAndNullHandlesRefused) {
  // A pointer to a null cl_event is refused. Any other non-null pointer is
  // trusted to point to the producer's live cl_event: it cannot be validated.
  CheckNullEventsAreReadyAndNullHandlesRefused();
}

TEST_F(OpenCLTest, CpuEventsCannotBeWaitedOnByOpenCLQueuesAndViceVersa) {
  CheckEventsCannotBeWaitedOnByTheCpu();
}

// ---- Copies between devices ------------------------------------------------

TEST_F(OpenCLTest, CopyBetweenCpuAndOpenCLCountsEachDirection) {
  Device* cpu = DeviceRegistry::Global().cpu();
  constexpr int64_t kSize = 10'000;
  auto host = cpu->Allocate(kSize);
  auto host_back = cpu->Allocate(kSize);
  ASSERT_TRUE(host.ok() && host_back.ok());
  for (int64_t i = 0; i < kSize; ++i) (*host)->mutable_data()[i] = static_cast<uint8_t>(i % 251);
  BufferPtr on_device = MustAllocate(kSize);
  BufferPtr on_device_copy = MustAllocate(kSize);
  ASSERT_TRUE(on_device && on_device_copy);

  CounterDelta delta;
  ASSERT_TRUE(CopyBetween(cpu, (*host)->data(), device_, on_device->mutable_data(), kSize).ok());
  ASSERT_TRUE(
      CopyBetween(device_, on_device->data(), device_, on_device_copy->mutable_data(), kSize).ok());
  auto queue = device_->CreateQueue();
  ASSERT_TRUE(queue.ok());
  // An explicit queue must see the default queue's copies first.
  auto copied = device_->default_queue()->RecordEvent();
  ASSERT_TRUE(copied.ok());
  ASSERT_TRUE((*queue)->WaitEvent((*copied)->sync_event()).ok());
  ASSERT_TRUE(CopyBetween(device_, on_device_copy->data(), cpu, (*host_back)->mutable_data(), kSize,
                          queue->get())
                  .ok());
  ASSERT_TRUE((*queue)->Synchronize().ok());
  EXPECT_TRUE((*host_back)->Equals(**host));
  EXPECT_EQ(delta(Counter::kBytesCopiedH2D), kSize);
  EXPECT_EQ(delta(Counter::kBytesCopiedD2D), kSize);
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), kSize);
  EXPECT_EQ(delta(Counter::kBytesCopiedHost), 0);
  EXPECT_FALSE(CopyBetween(cpu, (*host)->data(), device_, on_device->mutable_data(), -1).ok());
}

TEST_F(OpenCLTest, CopyArrayToMovesAnArrayToTheDeviceAndBack) {
  CheckCopyArrayToTheDeviceAndBack(/*event_required=*/true);
}

TEST_F(OpenCLTest, CopyArrayToWaitsForTheProducersKernel) {
  CheckCopyArrayToWaitsForTheProducersKernel();
}

#ifdef FERRY_HAVE_OPENCL

// ---- Native events: user events give exact control over completion ----------

cl_context ContextOf(Device* device) {
  return DefaultQueueHandle<cl_context>(device, CL_QUEUE_CONTEXT);
}

// Completes (or fails) a user event when the test leaves, even on a failed
// assertion: work waiting on it would otherwise never finish.
class UserEvent {
 public:
  explicit UserEvent(cl_context context) {
    cl_int error = CL_SUCCESS;
    event_ = clCreateUserEvent(context, &error);
    EXPECT_EQ(error, CL_SUCCESS);
  }
  ~UserEvent() {
    Finish(CL_COMPLETE);
    clReleaseEvent(event_);
  }
  void Finish(cl_int status) {
    if (!finished_) clSetUserEventStatus(event_, status);
    finished_ = true;
  }
  void* sync_event() { return &event_; }

 private:
  cl_event event_ = nullptr;
  bool finished_ = false;
};

TEST_F(OpenCLTest, DeviceSideWaitHoldsWorkUntilTheEventCompletes) {
  constexpr int64_t kCount = 1000;
  BufferPtr values = MustAllocate(kCount * 8);  // outlives the user event
  ASSERT_TRUE(values);
  auto queue = device_->CreateQueue();
  ASSERT_TRUE(queue.ok());
  UserEvent gate(ContextOf(device_));

  EXPECT_EQ(device_->HostWait(gate.sync_event(), 2ms).code(), StatusCode::kTimedOut);
  ASSERT_TRUE((*queue)->WaitEvent(gate.sync_event()).ok());
  ASSERT_TRUE(kernels_->FillSequence(queue->get(), values->mutable_data(), kCount, 7).ok());
  auto filled = (*queue)->RecordEvent();
  ASSERT_TRUE(filled.ok());
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ((*filled)->Wait(1ms).code(), StatusCode::kTimedOut);  // still held by the gate
  gate.Finish(CL_COMPLETE);
  ASSERT_TRUE(device_->HostWait((*filled)->sync_event(), 30s).ok());
  auto sum = kernels_->Sum(queue->get(), values->data(), kCount);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, SequenceSum(kCount, 7));
}

TEST_F(OpenCLTest, FailedEventsBecomeIOErrorsNamingTheCode) {
  UserEvent failed(ContextOf(device_));
  failed.Finish(CL_OUT_OF_RESOURCES);
  Status status = device_->HostWait(failed.sync_event(), 1s);
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_THAT(status.message(), HasSubstr("CL_OUT_OF_RESOURCES"));
}

TEST_F(OpenCLTest, EventsOfAnotherContextAreRefusedByName) {
  auto native = DefaultQueueHandle<cl_device_id>(device_, CL_QUEUE_DEVICE);
  cl_int error = CL_SUCCESS;
  cl_context other = clCreateContext(nullptr, 1, &native, nullptr, nullptr, &error);
  ASSERT_EQ(error, CL_SUCCESS);
  {
    UserEvent foreign(other);
    foreign.Finish(CL_COMPLETE);
    Status status = device_->default_queue()->WaitEvent(foreign.sync_event());
    EXPECT_EQ(status.code(), StatusCode::kInvalid);
    EXPECT_THAT(status.message(),
                HasSubstr("clEnqueueBarrierWithWaitList failed: CL_INVALID_CONTEXT"));
    // A host wait needs no shared context.
    EXPECT_TRUE(device_->HostWait(foreign.sync_event(), 1s).ok());
  }
  clReleaseContext(other);
}

TEST_F(OpenCLTest, TheEventOwnsAndReleasesItsClEvent) {
  auto event = device_->default_queue()->RecordEvent();
  ASSERT_TRUE(event.ok());
  // Once complete, the runtime holds no references of its own that could change.
  ASSERT_TRUE(device_->default_queue()->Synchronize().ok());
  cl_event handle = *static_cast<cl_event*>((*event)->sync_event());
  ASSERT_EQ(clRetainEvent(handle), CL_SUCCESS);  // keeps the handle valid to query
  cl_uint while_owned = 0;
  clGetEventInfo(handle, CL_EVENT_REFERENCE_COUNT, sizeof(while_owned), &while_owned, nullptr);
  event->reset();
  cl_uint after_release = 0;
  clGetEventInfo(handle, CL_EVENT_REFERENCE_COUNT, sizeof(after_release), &after_release, nullptr);
  EXPECT_EQ(after_release, while_owned - 1);
  EXPECT_GE(after_release, 1u);
  clReleaseEvent(handle);
}

TEST(OpenCLErrors, EveryCoreCodeHasItsNameAndAStatusKind) {
  std::vector<std::string> names;
  for (int32_t code = -1; code >= -72; --code) {
    if (code < -19 && code > -30) continue;  // unassigned codes
    std::string name = internal::OpenCLErrorName(code);
    EXPECT_THAT(name, ::testing::StartsWith("CL_")) << code;
    EXPECT_NE(name, "CL_UNKNOWN_ERROR") << code;
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
  EXPECT_STREQ(internal::OpenCLErrorName(-25), "CL_UNKNOWN_ERROR");
  EXPECT_STREQ(internal::OpenCLErrorName(CL_PLATFORM_NOT_FOUND_KHR), "CL_PLATFORM_NOT_FOUND_KHR");

  EXPECT_TRUE(internal::OpenCLStatus(CL_SUCCESS, "clFinish").ok());
  Status invalid = internal::OpenCLStatus(CL_INVALID_CONTEXT, "clFoo");
  EXPECT_EQ(invalid.code(), StatusCode::kInvalid);
  EXPECT_EQ(invalid.message(), "clFoo failed: CL_INVALID_CONTEXT (-34)");
  EXPECT_EQ(internal::OpenCLStatus(CL_OUT_OF_HOST_MEMORY, "clBar").code(),
            StatusCode::kOutOfMemory);
  EXPECT_EQ(internal::OpenCLStatus(CL_DEVICE_NOT_AVAILABLE, "clBaz").code(), StatusCode::kIOError);
  EXPECT_THAT(internal::OpenCLStatus(-12345, "clQux").message(),
              HasSubstr("CL_UNKNOWN_ERROR (-12345)"));
}

#endif  // FERRY_HAVE_OPENCL

}  // namespace
}  // namespace ferry::device
