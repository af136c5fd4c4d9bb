// Tests of the OpenCL backend against a real OpenCL device (PoCL in CI). They
// skip, saying why, only when no OpenCL device is present.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "exchange/device/backend.h"
#include "exchange/device/testing/kernels.h"
#include "ferry/device/device.h"
#include "ferry/base/telemetry.h"
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

class OpenCLTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto found = DeviceRegistry::Global().Get(DeviceType::kOpenCL, 0);
    if (!found.ok()) {
      GTEST_SKIP() << "no OpenCL device present: " << found.status().message();
    }
    device_ = *found;
    auto kernels = device::testing::KernelsFor(device_);
    ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
    kernels_ = std::move(*kernels);
  }

  BufferPtr MustAllocate(int64_t size) {
    auto buffer = device_->Allocate(size);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    return buffer.ok() ? *buffer : nullptr;
  }

  Device* device_ = nullptr;
  std::unique_ptr<device::testing::Kernels> kernels_;
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

TEST_F(OpenCLTest, QueuesAreSeparateInOrderNativeQueues) {
  auto queue = device_->CreateQueue();
  ASSERT_TRUE(queue.ok()) << queue.status().ToString();
  EXPECT_NE((*queue)->native(), nullptr);
  EXPECT_NE((*queue)->native(), device_->default_queue()->native());
  EXPECT_EQ((*queue)->device(), device_);
  EXPECT_EQ(device_->default_queue()->device(), device_);
  EXPECT_TRUE((*queue)->Synchronize().ok());
}

// ---- Memory and copies -------------------------------------------------------

TEST_F(OpenCLTest, CopiesRoundTripWithExactCountsPerDirection) {
  for (int64_t size : {int64_t{1}, int64_t{7}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{1000},
                       int64_t{4096}, int64_t{1} << 20, (int64_t{3} << 20) + 5}) {
    SCOPED_TRACE(size);
    std::vector<uint8_t> source(static_cast<size_t>(size));
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 31 + 7);
    std::vector<uint8_t> back(source.size(), 0);
    BufferPtr first = MustAllocate(size);
    BufferPtr second = MustAllocate(size);
    ASSERT_TRUE(first && second);
    EXPECT_EQ(first->size(), size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first->data()) % kBufferAlignment, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(second->data()) % kBufferAlignment, 0u);

    CounterDelta delta;
    Queue* queue = device_->default_queue();
    ASSERT_TRUE(
        queue->Copy(CopyDirection::kHostToDevice, source.data(), first->mutable_data(), size).ok());
    ASSERT_TRUE(
        queue->Copy(CopyDirection::kDeviceToDevice, first->data(), second->mutable_data(), size)
            .ok());
    // The device reads the second buffer through its Arrow address.
    auto device_sum = kernels_->SumBytes(queue, second->data(), size);
    ASSERT_TRUE(device_sum.ok()) << device_sum.status().ToString();
    EXPECT_EQ(*device_sum, std::accumulate(source.begin(), source.end(), int64_t{0}));
    ASSERT_TRUE(queue->Copy(CopyDirection::kDeviceToHost, second->data(), back.data(), size).ok());
    ASSERT_TRUE(queue->Synchronize().ok());
    EXPECT_EQ(back, source);
    EXPECT_EQ(delta(Counter::kBytesCopiedH2D), size);
    EXPECT_EQ(delta(Counter::kBytesCopiedD2D), size);
    EXPECT_EQ(delta(Counter::kBytesCopiedD2H), size);
    EXPECT_EQ(delta(Counter::kBytesCopiedHost), 0);
  }
}

TEST_F(OpenCLTest, ZeroSizeAllocationsHaveDistinctAlignedAddresses) {
  BufferPtr first = MustAllocate(0);
  BufferPtr second = MustAllocate(0);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->size(), 0);
  EXPECT_NE(first->data(), nullptr);
  EXPECT_NE(first->data(), second->data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first->data()) % kBufferAlignment, 0u);
  CounterDelta delta;
  EXPECT_TRUE(device_->default_queue()
                  ->Copy(CopyDirection::kDeviceToDevice, first->data(), second->mutable_data(), 0)
                  .ok());
  EXPECT_EQ(delta(Counter::kBytesCopiedD2D), 0);
  auto sum = kernels_->Sum(device_->default_queue(), first->data(), 0);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 0);
}

TEST_F(OpenCLTest, AllocationFailuresAreOutOfMemory) {
  auto negative = device_->Allocate(-1);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(negative.status().message(), HasSubstr("negative allocation size -1"));

  auto huge = device_->Allocate(int64_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(huge.status().message(), HasSubstr(device_->name()));
}

TEST_F(OpenCLTest, BadCopiesAreRefusedAndNotCounted) {
  BufferPtr buffer = MustAllocate(256);
  ASSERT_TRUE(buffer);
  Queue* queue = device_->default_queue();
  CounterDelta delta;
  Status negative =
      queue->Copy(CopyDirection::kDeviceToDevice, buffer->data(), buffer->mutable_data(), -5);
  EXPECT_EQ(negative.code(), StatusCode::kInvalid);
  EXPECT_THAT(negative.message(), HasSubstr("negative copy size -5"));
  Status null_source =
      queue->Copy(CopyDirection::kHostToDevice, nullptr, buffer->mutable_data(), 8);
  EXPECT_THAT(null_source.message(), HasSubstr("null source"));
  Status null_destination = queue->Copy(CopyDirection::kDeviceToHost, buffer->data(), nullptr, 8);
  EXPECT_THAT(null_destination.message(), HasSubstr("null destination"));
  // OpenCL itself refuses overlapping ranges; the error names the call and code.
  Status overlap =
      queue->Copy(CopyDirection::kDeviceToDevice, buffer->data(), buffer->mutable_data() + 8, 64);
  EXPECT_EQ(overlap.code(), StatusCode::kIOError);
  EXPECT_THAT(overlap.message(), HasSubstr("clEnqueueSVMMemcpy failed: CL_MEM_COPY_OVERLAP"));
  EXPECT_EQ(delta(Counter::kBytesCopiedD2D), 0);
  EXPECT_EQ(delta(Counter::kBytesCopiedH2D), 0);
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), 0);
  // A valid copy still works afterwards.
  EXPECT_TRUE(
      queue->Copy(CopyDirection::kDeviceToDevice, buffer->data(), buffer->mutable_data() + 128, 64)
          .ok());
  EXPECT_TRUE(queue->Synchronize().ok());
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
  constexpr int64_t kCount = 1 << 20;
  BufferPtr values = MustAllocate(kCount * 8);
  ASSERT_TRUE(values);
  auto producer = device_->CreateQueue();
  auto consumer = device_->CreateQueue();
  ASSERT_TRUE(producer.ok() && consumer.ok());
  // The delay makes a consumer that did not wait read before the fill.
  ASSERT_TRUE(kernels_->Delay(producer->get(), 30ms).ok());
  ASSERT_TRUE(kernels_->FillSequence(producer->get(), values->mutable_data(), kCount, 5).ok());
  auto event = (*producer)->RecordEvent();
  ASSERT_TRUE(event.ok());
  EXPECT_EQ((*event)->kind(), EventKind::kOpenCL);
  void* sync_event = (*event)->sync_event();
  ASSERT_NE(sync_event, nullptr);
  EXPECT_NE(*static_cast<void**>(sync_event), nullptr);

  CounterDelta delta;
  ASSERT_TRUE((*consumer)->WaitEvent(sync_event).ok());
  EXPECT_EQ(delta(Counter::kEventWaits), 1);
  EXPECT_EQ(delta(Counter::kEventWaitNanos), 0);  // the host did not wait
  auto sum = kernels_->Sum(consumer->get(), values->data(), kCount);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(*sum, SequenceSum(kCount, 5));
}

TEST_F(OpenCLTest, KernelsSumTenMillionValues) {
  constexpr int64_t kCount = 10'000'000;
  BufferPtr values = MustAllocate(kCount * 8);
  ASSERT_TRUE(values);
  Queue* queue = device_->default_queue();
  ASSERT_TRUE(kernels_->FillSequence(queue, values->mutable_data(), kCount, -3).ok());
  auto sum = kernels_->Sum(queue, values->data(), kCount);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(*sum, SequenceSum(kCount, -3));
  // A slice: the kernels take interior SVM addresses too.
  auto tail = kernels_->Sum(queue, values->data() + int64_t{8} * 1000, kCount - 1000);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(*tail, SequenceSum(kCount - 1000, 997));
}

TEST_F(OpenCLTest, KernelsRefuseForeignQueuesAndBadCounts) {
  BufferPtr buffer = MustAllocate(64);
  ASSERT_TRUE(buffer);
  Queue* cpu_queue = DeviceRegistry::Global().cpu()->default_queue();
  auto on_cpu = kernels_->Sum(cpu_queue, buffer->data(), 8);
  ASSERT_FALSE(on_cpu.ok());
  EXPECT_THAT(on_cpu.status().message(), HasSubstr("OpenCL queue"));
  Status negative = kernels_->FillSequence(device_->default_queue(), buffer->mutable_data(), -1, 0);
  EXPECT_THAT(negative.message(), HasSubstr("negative element count"));
#ifdef FERRY_HAVE_OPENCL
  auto for_cpu = device::testing::MakeOpenCLKernels(DeviceRegistry::Global().cpu());
  ASSERT_FALSE(for_cpu.ok());
  EXPECT_THAT(for_cpu.status().message(), HasSubstr("need an OpenCL device"));
#endif
}

TEST_F(OpenCLTest, HostWaitReturnsOnceTheDelayedWorkCompletes) {
  auto queue = device_->CreateQueue();
  ASSERT_TRUE(queue.ok());
  ASSERT_TRUE(kernels_->Delay(queue->get(), 40ms).ok());
  auto event = (*queue)->RecordEvent();
  ASSERT_TRUE(event.ok());
  CounterDelta delta;
  Status waited = device_->HostWait((*event)->sync_event(), 30s);
  ASSERT_TRUE(waited.ok()) << waited.ToString();
  EXPECT_EQ(delta(Counter::kEventWaits), 1);
  EXPECT_GT(delta(Counter::kEventWaitNanos), 0);
  EXPECT_TRUE((*event)->Wait(0ns).ok());  // complete now: no time needed
}

TEST_F(OpenCLTest, HostWaitTimesOutInsteadOfHangingThenCompletes) {
  auto queue = device_->CreateQueue();
  ASSERT_TRUE(queue.ok());
  ASSERT_TRUE(kernels_->Delay(queue->get(), 400ms).ok());
  auto event = (*queue)->RecordEvent();
  ASSERT_TRUE(event.ok());
  CounterDelta delta;
  Status early = device_->HostWait((*event)->sync_event(), 1ms);
  EXPECT_EQ(early.code(), StatusCode::kTimedOut) << early.ToString();
  EXPECT_THAT(early.message(), HasSubstr("not complete after 1.000 ms"));
  EXPECT_EQ(delta(Counter::kEventWaits), 1);
  Status event_early = (*event)->Wait(1ms);
  EXPECT_EQ(event_early.code(), StatusCode::kTimedOut);
  Status later = device_->HostWait((*event)->sync_event(), 30s);
  EXPECT_TRUE(later.ok()) << later.ToString();
  EXPECT_EQ(delta(Counter::kEventWaits), 2);
}

TEST_F(OpenCLTest, TwoQueuesOrderEachOtherThroughEvents) {
  constexpr int64_t kCount = 4096;
  BufferPtr shared = MustAllocate(kCount * 8);
  BufferPtr snapshot = MustAllocate(kCount * 8);
  ASSERT_TRUE(shared && snapshot);
  auto first = device_->CreateQueue();
  auto second = device_->CreateQueue();
  ASSERT_TRUE(first.ok() && second.ok());
  // Known contents, so that a read out of order shows.
  ASSERT_TRUE(kernels_->FillSequence(first->get(), shared->mutable_data(), kCount, -100000).ok());
  ASSERT_TRUE((*first)->Synchronize().ok());

  // first: slow, then writes 1, 2, ...; second copies that and then overwrites
  // with 1000, 1001, ...; first then sums what second wrote.
  ASSERT_TRUE(kernels_->Delay(first->get(), 60ms).ok());
  ASSERT_TRUE(kernels_->FillSequence(first->get(), shared->mutable_data(), kCount, 1).ok());
  auto first_done = (*first)->RecordEvent();
  ASSERT_TRUE(first_done.ok());
  ASSERT_TRUE((*second)->WaitEvent((*first_done)->sync_event()).ok());
  ASSERT_TRUE((*second)
                  ->Copy(CopyDirection::kDeviceToDevice, shared->data(), snapshot->mutable_data(),
                         kCount * 8)
                  .ok());
  ASSERT_TRUE(kernels_->FillSequence(second->get(), shared->mutable_data(), kCount, 1000).ok());
  auto second_done = (*second)->RecordEvent();
  ASSERT_TRUE(second_done.ok());
  ASSERT_TRUE((*first)->WaitEvent((*second_done)->sync_event()).ok());

  auto overwritten = kernels_->Sum(first->get(), shared->data(), kCount);
  ASSERT_TRUE(overwritten.ok());
  EXPECT_EQ(*overwritten, SequenceSum(kCount, 1000));
  auto copied = kernels_->Sum(second->get(), snapshot->data(), kCount);
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(*copied, SequenceSum(kCount, 1));
}

TEST_F(OpenCLTest, NullEventsAreReadyAndNullHandlesRefused) {
  CounterDelta delta;
  EXPECT_TRUE(device_->default_queue()->WaitEvent(nullptr).ok());
  EXPECT_TRUE(device_->HostWait(nullptr, 1ms).ok());
  EXPECT_EQ(delta(Counter::kEventWaits), 0);
  // A pointer to a null cl_event is refused. Any other non-null pointer is
  // trusted to point to the producer's live cl_event: it cannot be validated.
  void* null_handle = nullptr;
  Status device_side = device_->default_queue()->WaitEvent(&null_handle);
  EXPECT_EQ(device_side.code(), StatusCode::kInvalid);
  EXPECT_THAT(device_side.message(), HasSubstr("null cl_event"));
  Status host_side = device_->HostWait(&null_handle, 1ms);
  EXPECT_EQ(host_side.code(), StatusCode::kInvalid);
  EXPECT_THAT(host_side.message(), HasSubstr("null cl_event"));
  EXPECT_EQ(delta(Counter::kEventWaits), 0);
}

TEST_F(OpenCLTest, CpuEventsCannotBeWaitedOnByOpenCLQueuesAndViceVersa) {
  auto event = device_->default_queue()->RecordEvent();
  ASSERT_TRUE(event.ok());
  Device* cpu = DeviceRegistry::Global().cpu();
  Status on_cpu = cpu->HostWait((*event)->sync_event(), 1s);
  EXPECT_FALSE(on_cpu.ok());
  EXPECT_TRUE(device_->HostWait((*event)->sync_event(), 30s).ok());
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

ArrayDataPtr Int64ArrayWithNulls(int64_t length) {
  auto values = Buffer::Allocate(length * 8);
  auto validity = Buffer::Allocate(BytesForBits(length));
  EXPECT_TRUE(values.ok() && validity.ok());
  std::memset((*validity)->mutable_data(), 0, static_cast<size_t>((*validity)->size()));
  auto* out = reinterpret_cast<int64_t*>((*values)->mutable_data());
  int64_t nulls = 0;
  for (int64_t i = 0; i < length; ++i) {
    out[i] = i * 3 - 50;
    if (i % 7 == 3) {
      ++nulls;
    } else {
      SetBit((*validity)->mutable_data(), i);
    }
  }
  auto data = std::make_shared<ArrayData>();
  data->type = int64();
  data->length = length;
  data->null_count = nulls;
  data->buffers = {*validity, *values};
  return data;
}

TEST_F(OpenCLTest, CopyArrayToMovesAnArrayToTheDeviceAndBack) {
  constexpr int64_t kLength = 1000;
  ArrayDataPtr original = Int64ArrayWithNulls(kLength);
  const int64_t bytes = BytesForBits(kLength) + kLength * 8;
  Device* cpu = DeviceRegistry::Global().cpu();

  CounterDelta to_device;
  auto on_device = CopyArrayTo(DeviceArray{original, cpu, nullptr}, device_);
  ASSERT_TRUE(on_device.ok()) << on_device.status().ToString();
  EXPECT_EQ(on_device->device, device_);
  ASSERT_NE(on_device->event, nullptr);
  EXPECT_EQ(on_device->event->kind(), EventKind::kOpenCL);
  EXPECT_EQ(to_device(Counter::kBytesCopiedH2D), bytes);
  EXPECT_EQ(to_device(Counter::kBytesCopiedD2H), 0);
  EXPECT_EQ(to_device(Counter::kBytesCopiedHost), 0);
  // The values really are on the device: a kernel sums them there.
  auto queue = device_->CreateQueue();
  ASSERT_TRUE(queue.ok());
  ASSERT_TRUE((*queue)->WaitEvent(on_device->event->sync_event()).ok());
  auto sum = kernels_->Sum(queue->get(), on_device->data->buffers[1]->data(), kLength);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, SequenceSum(kLength, 0) * 3 - 50 * kLength);

  CounterDelta to_host;
  auto back = CopyArrayTo(*on_device, cpu);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->device, cpu);
  EXPECT_EQ(to_host(Counter::kBytesCopiedD2H), bytes);
  EXPECT_EQ(to_host(Counter::kBytesCopiedH2D), 0);
  EXPECT_EQ(to_host(Counter::kEventWaits), 1);  // on the device, before the copies
  EXPECT_TRUE(ArrayEquals(*back->data, *original));
}

TEST_F(OpenCLTest, CopyArrayToWaitsForTheProducersKernel) {
  constexpr int64_t kLength = 50'000;
  BufferPtr values = MustAllocate(kLength * 8);
  ASSERT_TRUE(values);
  auto producer = device_->CreateQueue();
  ASSERT_TRUE(producer.ok());
  ASSERT_TRUE(kernels_->Delay(producer->get(), 30ms).ok());
  ASSERT_TRUE(kernels_->FillSequence(producer->get(), values->mutable_data(), kLength, 11).ok());
  auto event = (*producer)->RecordEvent();
  ASSERT_TRUE(event.ok());
  auto data = std::make_shared<ArrayData>();
  data->type = int64();
  data->length = kLength;
  data->buffers = {nullptr, values};

  CounterDelta delta;
  auto on_host = CopyArrayTo(DeviceArray{data, device_, *event}, DeviceRegistry::Global().cpu());
  ASSERT_TRUE(on_host.ok()) << on_host.status().ToString();
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), kLength * 8);
  EXPECT_EQ(delta(Counter::kEventWaits), 1);
  const auto* copied = on_host->data->GetValues<int64_t>(1);
  for (int64_t i = 0; i < kLength; ++i) ASSERT_EQ(copied[i], 11 + i) << i;
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
