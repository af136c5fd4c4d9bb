// Tests of the CUDA backend. Those that need a GPU skip, saying why, when the
// registry has none (no driver, no GPU); scripts/gpu-check runs them on a
// lent GPU. Those about discovery, errors and waiting run everywhere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ostream>
#include <vector>

#include "exchange/device/testing/child_process.h"
#include "exchange/device/testing/kernel_device_test.h"
#include "exchange/device/testing/kernels.h"
#include "ferry/base/telemetry.h"
#include "ferry/device/device.h"
#include "testing/test_util.h"

#ifdef FERRY_HAVE_CUDA
#include <dlfcn.h>

#include "exchange/device/cuda_driver.h"
#endif

namespace ferry::device {
namespace {

using ::ferry::testing::CounterDelta;
using ::ferry::testing::SequenceSum;
using telemetry::Counter;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr DeviceType kCudaKinds[] = {DeviceType::kCuda, DeviceType::kCudaHost,
                                     DeviceType::kCudaManaged};

// ---- Without a GPU: discovery reports why, errors and waits behave ----------------

#ifdef FERRY_HAVE_CUDA
bool DriverLoadable() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}
#endif

TEST(CudaRegistry, AbsentCudaIsReportedWithItsReasonAndGetSaysNotImplemented) {
  auto& registry = DeviceRegistry::Global();
  auto found = registry.Get(DeviceType::kCuda, 0);
#ifdef FERRY_HAVE_CUDA
  if (DriverLoadable()) {
    // A driver is installed: the GPU is there, or the reason names the driver's answer.
    if (!found.ok()) {
      EXPECT_EQ(found.status().code(), StatusCode::kNotImplemented);
      EXPECT_THAT(found.status().message(), HasSubstr("libcuda.so.1 is loaded but"));
    }
    return;
  }
#endif
  for (DeviceType kind : kCudaKinds) {
    SCOPED_TRACE(DeviceTypeName(kind));
    for (int64_t id : {int64_t{0}, int64_t{1}, int64_t{-1}}) {
      auto device = registry.Get(kind, id);
      ASSERT_FALSE(device.ok());
      EXPECT_EQ(device.status().code(), StatusCode::kNotImplemented);
      EXPECT_THAT(device.status().message(),
                  HasSubstr(std::string(DeviceTypeName(kind)) + " is absent: "));
#ifdef FERRY_HAVE_CUDA
      EXPECT_THAT(device.status().message(), HasSubstr("libcuda.so.1 could not be loaded"));
#else
      EXPECT_THAT(device.status().message(), HasSubstr("without CUDA"));
#endif
    }
    EXPECT_THAT(registry.Describe(), HasSubstr(std::string(DeviceTypeName(kind)) + ": absent ("));
  }
  for (Device* device : registry.Present()) {
    EXPECT_NE(device->type(), DeviceType::kCuda);
    EXPECT_NE(device->type(), DeviceType::kCudaHost);
    EXPECT_NE(device->type(), DeviceType::kCudaManaged);
  }
}

#ifdef FERRY_HAVE_CUDA

TEST(CudaDiscovery, AMissingDriverLibraryMakesEveryKindAbsentNamingIt) {
  auto discovery = internal::cuda::DiscoverCudaFrom("libferry-no-such-cuda-driver.so.1");
  EXPECT_TRUE(discovery.devices.empty());
  ASSERT_EQ(discovery.absent.size(), 3u);
  for (size_t index = 0; index < 3; ++index) {
    EXPECT_EQ(discovery.absent[index].first, kCudaKinds[index]);
    EXPECT_THAT(
        discovery.absent[index].second,
        HasSubstr("the CUDA driver libferry-no-such-cuda-driver.so.1 could not be loaded: "));
    // dlerror's own words follow.
    EXPECT_THAT(discovery.absent[index].second, HasSubstr("libferry-no-such-cuda-driver.so.1:"));
  }
}

TEST(CudaDiscovery, ALibraryThatIsNotACudaDriverIsRefusedByEntryPoint) {
  auto loaded = internal::cuda::LoadDriver("libm.so.6");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotImplemented);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("libm.so.6 lacks the CUDA driver entry point cuGetErrorName"));
  auto discovery = internal::cuda::DiscoverCudaFrom("libm.so.6");
  EXPECT_TRUE(discovery.devices.empty());
  ASSERT_EQ(discovery.absent.size(), 3u);
  EXPECT_THAT(discovery.absent[0].second, HasSubstr("lacks the CUDA driver entry point"));
}

TEST(CudaErrors, StatusNamesTheCallAndTheError) {
  using internal::cuda::CudaStatus;
  EXPECT_TRUE(CudaStatus(nullptr, CUDA_SUCCESS, "cuInit").ok());

  Status oom = CudaStatus(nullptr, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2");
  EXPECT_EQ(oom.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(oom.message(), "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY");

  Status invalid = CudaStatus(nullptr, CUDA_ERROR_INVALID_VALUE, "cuMemcpyAsync");
  EXPECT_EQ(invalid.code(), StatusCode::kInvalid);
  EXPECT_THAT(invalid.message(), HasSubstr("cuMemcpyAsync failed: CUDA_ERROR_INVALID_VALUE"));

  Status no_binary = CudaStatus(nullptr, CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData");
  EXPECT_EQ(no_binary.code(), StatusCode::kNotImplemented);

  // A code outside the built-in table still says which code it was.
  Status odd = CudaStatus(nullptr, static_cast<CUresult>(12345), "cuEventQuery");
  EXPECT_EQ(odd.code(), StatusCode::kIOError);
  EXPECT_THAT(odd.message(), HasSubstr("cuEventQuery failed: CUresult 12345"));
}

TEST(CudaErrors, StickyErrorsMarkTheGpuLostAndOthersDoNot) {
  using internal::cuda::CudaStatus;
  internal::cuda::GpuHealth health;
  EXPECT_TRUE(health.status().ok());
  EXPECT_FALSE(CudaStatus(nullptr, CUDA_ERROR_INVALID_VALUE, "cuMemcpyAsync", &health).ok());
  EXPECT_FALSE(CudaStatus(nullptr, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2", &health).ok());
  EXPECT_TRUE(health.status().ok());

  for (CUresult loss : {CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED,
                        CUDA_ERROR_ECC_UNCORRECTABLE, CUDA_ERROR_HARDWARE_STACK_ERROR}) {
    EXPECT_TRUE(internal::cuda::IsDeviceLoss(loss)) << loss;
  }
  EXPECT_FALSE(internal::cuda::IsDeviceLoss(CUDA_ERROR_NOT_READY));
  EXPECT_FALSE(internal::cuda::IsDeviceLoss(CUDA_ERROR_OUT_OF_MEMORY));

  Status lost = CudaStatus(nullptr, CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize", &health);
  EXPECT_EQ(lost.code(), StatusCode::kIOError);
  ASSERT_FALSE(health.status().ok());
  EXPECT_THAT(health.status().message(),
              HasSubstr("device lost: cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS"));
  // The first cause is kept.
  (void)CudaStatus(nullptr, CUDA_ERROR_LAUNCH_FAILED, "cuLaunchKernel", &health);
  EXPECT_THAT(health.status().message(), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
  EXPECT_THAT(health.status().message(), ::testing::Not(HasSubstr("LAUNCH_FAILED")));
}

TEST(CudaPolling, PendingQueriesTimeOutWithoutHanging) {
  int queries = 0;
  const auto start = std::chrono::steady_clock::now();
  Status status = internal::cuda::PollUntilReady(
      [&queries] {
        ++queries;
        return CUDA_ERROR_NOT_READY;
      },
      5ms, nullptr, "cuEventQuery");
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.code(), StatusCode::kTimedOut);
  EXPECT_THAT(status.message(), HasSubstr("cuEventQuery: CUDA event not complete after 5.000 ms"));
  EXPECT_GE(waited, 5ms);
  EXPECT_LT(waited, 2s);
  EXPECT_GT(queries, 1);

  // A zero timeout still asks once.
  queries = 0;
  EXPECT_EQ(internal::cuda::PollUntilReady(
                [&queries] {
                  ++queries;
                  return CUDA_ERROR_NOT_READY;
                },
                0ns, nullptr, "cuEventQuery")
                .code(),
            StatusCode::kTimedOut);
  EXPECT_EQ(queries, 1);
}

TEST(CudaPolling, CompletesWhenTheQuerySaysSoAndReportsErrors) {
  int queries = 0;
  Status done = internal::cuda::PollUntilReady(
      [&queries] { return ++queries < 200 ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS; }, 30s, nullptr,
      "cuEventQuery");
  EXPECT_TRUE(done.ok()) << done.ToString();
  EXPECT_EQ(queries, 200);

  // No deadline at all must not overflow the clock.
  queries = 0;
  EXPECT_TRUE(internal::cuda::PollUntilReady(
                  [&queries] { return ++queries < 3 ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS; },
                  std::chrono::nanoseconds::max(), nullptr, "cuEventQuery")
                  .ok());

  internal::cuda::GpuHealth health;
  Status failed = internal::cuda::PollUntilReady([] { return CUDA_ERROR_LAUNCH_FAILED; }, 30s,
                                                 nullptr, "cuEventQuery", &health);
  EXPECT_EQ(failed.code(), StatusCode::kIOError);
  EXPECT_THAT(failed.message(), HasSubstr("cuEventQuery failed: CUDA_ERROR_LAUNCH_FAILED"));
  EXPECT_FALSE(health.status().ok());
}

#endif  // FERRY_HAVE_CUDA

// ---- With a GPU ----------------------------------------------------------------------

// A memory kind, printed by name in test names and failure messages.
struct Kind {
  DeviceType type;
  friend void PrintTo(const Kind& kind, std::ostream* out) { *out << DeviceTypeName(kind.type); }
};

// The device of one memory kind on GPU 0, with its test kernels.
class CudaTest : public device::testing::KernelDeviceTest<::testing::TestWithParam<Kind>> {
 protected:
  void SetUp() override {
    Open(DeviceRegistry::Global().Get(GetParam().type, 0),
         "no CUDA device: ", {EventKind::kCuda, "CUDA queue", "negative count", "null CUevent"});
  }
};

std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  return DeviceTypeName(info.param.type);
}

INSTANTIATE_TEST_SUITE_P(CudaKinds, CudaTest,
                         ::testing::Values(Kind{DeviceType::kCuda}, Kind{DeviceType::kCudaHost},
                                           Kind{DeviceType::kCudaManaged}),
                         KindName);

TEST_P(CudaTest, DevicesOfOneGpuShareItsIdAndName) {
  EXPECT_EQ(device_->type(), GetParam().type);
  EXPECT_EQ(device_->id(), 0);
  EXPECT_EQ(device_->event_kind(), EventKind::kCuda);
  EXPECT_EQ(device_->host_accessible(), GetParam().type != DeviceType::kCuda);
  EXPECT_TRUE(device_->CheckHealth().ok());
  auto plain = DeviceRegistry::Global().Get(DeviceType::kCuda, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(device_->name(), HasSubstr((*plain)->name()));
  EXPECT_THAT(
      DeviceRegistry::Global().Describe(),
      HasSubstr(std::string(DeviceTypeName(GetParam().type)) + ": " + device_->name() + " (id 0)"));
  auto missing = DeviceRegistry::Global().Get(GetParam().type, 4096);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(
      missing.status().message(),
      HasSubstr(std::string("no ") + DeviceTypeName(GetParam().type) + " device with id 4096"));
}

TEST_P(CudaTest, QueuesAreSeparateStreams) { CheckQueuesAreSeparate(); }

TEST_P(CudaTest, CopiesRoundTripWithExactCountsPerDirection) {
  CheckCopiesRoundTrip({1, 63, 64, 65, 4096, (int64_t{3} << 20) + 5});
}

TEST_P(CudaTest, ZeroSizeAllocationsHaveDistinctAlignedAddresses) { CheckZeroSizeAllocations(); }

TEST_P(CudaTest, AllocationFailuresAreErrorsNotCrashes) {
  // A petabyte: device memory is refused by the driver, managed and pinned
  // memory by Ferry before the driver is asked (asking could wedge the GPU
  // or the host).
  CheckAllocationFailures();
}

TEST_P(CudaTest, BadCopiesAreRefusedAndNotCounted) { CheckBadCopiesRefused(); }

TEST_P(CudaTest, ConsumerStreamWaitsOnDeviceForTheProducersEvent) {
  CheckConsumerWaitsOnDeviceForTheProducersEvent();
}

TEST_P(CudaTest, KernelsSumTenMillionValuesAndSlices) {
  CheckKernelsSumTenMillionValuesAndSlices();
}

TEST_P(CudaTest, KernelsRefuseForeignQueuesAndBadCounts) {
  CheckKernelsRefuseForeignQueuesAndBadCounts();
  EXPECT_FALSE(kernels_->Delay(device_->default_queue(), -1ms).ok());
}

TEST_P(CudaTest, HostWaitReturnsOnceTheDelayedWorkCompletes) {
  CheckHostWaitReturnsOnceTheDelayedWorkCompletes();
}

TEST_P(CudaTest, HostWaitTimesOutInsteadOfHangingThenCompletes) {
  CheckHostWaitTimesOutInsteadOfHangingThenCompletes();
}

TEST_P(CudaTest, TwoStreamsOrderEachOtherThroughEvents) {
  CheckTwoQueuesOrderEachOtherThroughEvents();
}

TEST_P(CudaTest, NullEventsAreReadyAndNullHandlesRefused) {
  CheckNullEventsAreReadyAndNullHandlesRefused();
}

TEST_P(CudaTest, CudaEventsCannotBeWaitedOnByTheCpu) { CheckEventsCannotBeWaitedOnByTheCpu(); }

TEST_P(CudaTest, HostAccessibleKindsAreReadAndWrittenByTheHostDirectly) {
  constexpr int64_t kCount = 100'000;
  BufferPtr values = MustAllocate(kCount * 8);
  ASSERT_TRUE(values);
  if (!device_->host_accessible()) {
    EXPECT_EQ(GetParam().type, DeviceType::kCuda);
    GTEST_SKIP() << "plain CUDA device memory is not host accessible (checked above)";
  }
  Queue* queue = device_->default_queue();
  // The GPU writes, the host reads in place after the event: no copy.
  ASSERT_TRUE(kernels_->FillSequence(queue, values->mutable_data(), kCount, 40).ok());
  auto event = queue->RecordEvent();
  ASSERT_TRUE(event.ok());
  ASSERT_TRUE(device_->HostWait((*event)->sync_event(), 30s).ok());
  CounterDelta delta;
  const auto* read = values->data_as<int64_t>();
  for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(read[i], 40 + i) << i;
  // The host writes in place, the GPU sums what it wrote.
  auto* write = reinterpret_cast<int64_t*>(values->mutable_data());
  for (int64_t i = 0; i < kCount; ++i) write[i] = 2 * i;
  auto sum = kernels_->Sum(queue, values->data(), kCount);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(*sum, 2 * SequenceSum(kCount, 0));
  EXPECT_EQ(delta(Counter::kBytesCopiedH2D) + delta(Counter::kBytesCopiedD2H) +
                delta(Counter::kBytesCopiedD2D) + delta(Counter::kBytesCopiedHost),
            0);
}

TEST_P(CudaTest, CopyArrayToMovesAnArrayFromTheCpuAndBack) {
  CheckCopyArrayToTheDeviceAndBack(/*event_required=*/false);
}

TEST_P(CudaTest, CopyArrayToWaitsForTheProducersKernel) {
  CheckCopyArrayToWaitsForTheProducersKernel();
}

TEST_P(CudaTest, CopyBetweenKindsOfOneGpu) {
  // Device memory <-> pinned and managed memory of the same GPU.
  constexpr int64_t kCount = 10'000;
  auto plain = DeviceRegistry::Global().Get(DeviceType::kCuda, 0);
  ASSERT_TRUE(plain.ok());
  auto source = (*plain)->Allocate(kCount * 8);
  ASSERT_TRUE(source.ok());
  ASSERT_TRUE(
      kernels_->FillSequence((*plain)->default_queue(), (*source)->mutable_data(), kCount, -7)
          .ok());
  ASSERT_TRUE((*plain)->default_queue()->Synchronize().ok());
  BufferPtr target = MustAllocate(kCount * 8);
  ASSERT_TRUE(target);
  CounterDelta delta;
  ASSERT_TRUE(
      CopyBetween(*plain, (*source)->data(), device_, target->mutable_data(), kCount * 8).ok());
  ASSERT_TRUE((*plain)->default_queue()->Synchronize().ok());
  ASSERT_TRUE(device_->default_queue()->Synchronize().ok());
  if (device_->host_accessible()) {
    EXPECT_EQ(delta(Counter::kBytesCopiedD2H), kCount * 8);
  } else {
    EXPECT_EQ(delta(Counter::kBytesCopiedD2D), kCount * 8);
  }
  auto sum = kernels_->Sum(device_->default_queue(), target->data(), kCount);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(*sum, SequenceSum(kCount, -7));
}

TEST_P(CudaTest, BuffersAndEventsMayOutliveTheirQueue) {
  BufferPtr values = MustAllocate(1 << 16);
  ASSERT_TRUE(values);
  EventPtr event;
  {
    auto queue = device_->CreateQueue();
    ASSERT_TRUE(queue.ok());
    ASSERT_TRUE(kernels_->Delay(queue->get(), 20ms).ok());
    ASSERT_TRUE(kernels_->FillSequence(queue->get(), values->mutable_data(), 1 << 13, 0).ok());
    auto recorded = (*queue)->RecordEvent();
    ASSERT_TRUE(recorded.ok());
    event = *recorded;
  }  // the stream is destroyed with work still queued
  EXPECT_TRUE(event->Wait(30s).ok());
  auto sum = kernels_->Sum(device_->default_queue(), values->data(), 1 << 13);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, SequenceSum(1 << 13, 0));
  values.reset();  // freeing drains the GPU's work first
  EXPECT_TRUE(device_->CheckHealth().ok());
}

// ---- Interprocess handles ---------------------------------------------------------

TEST(CudaIpcWithoutGpu, DevicesWithoutAnIpcMechanismSayNotImplemented) {
  for (Device* device : DeviceRegistry::Global().Present()) {
    if (device->SupportsIpc()) continue;
    SCOPED_TRACE(device->name());
    auto buffer = device->Allocate(64);
    ASSERT_OK(buffer);
    auto exported = device->ExportIpcMemory((*buffer)->data(), 64);
    ASSERT_FALSE(exported.ok());
    EXPECT_EQ(exported.status().code(), StatusCode::kNotImplemented);
    if (device->type() == DeviceType::kCpu) {
      EXPECT_EQ(exported.status().message(),
                "cpu devices cannot export memory across processes (no IPC mechanism)");
    }
    EXPECT_EQ(device->OpenIpcMemory(IpcMemoryHandle{}).status().code(),
              StatusCode::kNotImplemented);
    EXPECT_EQ(device->ExportIpcEvent(nullptr, nullptr).status().code(),
              StatusCode::kNotImplemented);
    EXPECT_EQ(device->OpenIpcEvent(IpcEventHandle{}).status().code(), StatusCode::kNotImplemented);
  }
}

// Plain CUDA device memory of GPU 0, when its driver supports IPC.
Result<Device*> CudaIpcDevice() {
  FERRY_ASSIGN_OR_RAISE(Device * device, DeviceRegistry::Global().Get(DeviceType::kCuda, 0));
  if (!device->SupportsIpc()) {
    return Status::NotImplemented(device->name() + " does not support interprocess handles");
  }
  return device;
}

TEST(CudaIpc, PinnedAndManagedMemoryHaveNoHandles) {
  for (DeviceType kind : {DeviceType::kCudaHost, DeviceType::kCudaManaged}) {
    auto device = DeviceRegistry::Global().Get(kind, 0);
    if (!device.ok()) GTEST_SKIP() << "no CUDA device: " << device.status().message();
    SCOPED_TRACE(DeviceTypeName(kind));
    EXPECT_FALSE((*device)->SupportsIpc());
    auto buffer = (*device)->Allocate(256);
    ASSERT_OK(buffer);
    auto exported = (*device)->ExportIpcMemory((*buffer)->data(), 256);
    ASSERT_FALSE(exported.ok());
    EXPECT_EQ(exported.status().code(), StatusCode::kNotImplemented);
    EXPECT_THAT(exported.status().message(), HasSubstr("only plain CUDA device memory does"));
  }
}

TEST(CudaIpc, ExportNamesTheWholeAllocationAndRefusesOtherMemory) {
  auto found = CudaIpcDevice();
  if (!found.ok()) GTEST_SKIP() << "no CUDA IPC: " << found.status().message();
  Device* device = *found;
  ASSERT_OK_AND_ASSIGN(BufferPtr buffer, device->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(IpcMemoryHandle whole, device->ExportIpcMemory(buffer->data(), 4096));
  EXPECT_GE(whole.allocation_size, 4096);
  EXPECT_EQ(whole.offset, 0);
  EXPECT_EQ(whole.size, 4096);
  ASSERT_OK_AND_ASSIGN(IpcMemoryHandle part, device->ExportIpcMemory(buffer->data() + 1024, 512));
  EXPECT_EQ(part.offset, 1024);
  EXPECT_EQ(part.size, 512);
  EXPECT_EQ(part.allocation_size, whole.allocation_size);

  std::vector<uint8_t> host(64);
  EXPECT_FALSE(device->ExportIpcMemory(host.data(), 64).ok());
  auto past = device->ExportIpcMemory(buffer->data() + 4000, whole.allocation_size);
  ASSERT_FALSE(past.ok());
  EXPECT_THAT(past.status().message(), HasSubstr("run past the allocation"));
  EXPECT_EQ(device->ExportIpcMemory(buffer->data(), -1).status().code(), StatusCode::kInvalid);

  // Malformed handles are refused before the driver sees them.
  IpcMemoryHandle bad = whole;
  bad.offset = whole.allocation_size;
  bad.size = 1;
  auto malformed = device->OpenIpcMemory(bad);
  ASSERT_FALSE(malformed.ok());
  EXPECT_THAT(malformed.status().message(), HasSubstr("malformed handle"));
  bad = whole;
  bad.allocation_size = 0;
  EXPECT_EQ(device->OpenIpcMemory(bad).status().code(), StatusCode::kInvalid);
  // CUDA does not open a handle in the process that exported it.
  EXPECT_FALSE(device->OpenIpcMemory(whole).ok());
  IpcEventHandle garbage;
  garbage.bytes.fill(0x5a);
  EXPECT_FALSE(device->OpenIpcEvent(garbage).ok());
  EXPECT_TRUE(device->CheckHealth().ok());
}

constexpr int64_t kIpcValues = 1 << 16;
constexpr int64_t kIpcSkipped = 1000;  // the exported range starts after these values

// The parent fills device memory behind a delay, exports the tail of the
// allocation and an event recorded after the fill; a child process opens
// both, waits on the event on its own stream, checks the values with a
// kernel, overwrites them, and the parent sees what the child wrote.
TEST(CudaIpc, AnotherProcessReadsAndWritesTheMemoryAfterTheEvent) {
  auto found = CudaIpcDevice();
  if (!found.ok()) GTEST_SKIP() << "no CUDA IPC: " << found.status().message();
  Device* device = *found;
  ASSERT_OK_AND_ASSIGN(auto kernels, device::testing::KernelsFor(device));
  ASSERT_OK_AND_ASSIGN(BufferPtr values, device->Allocate(kIpcValues * 8));
  ASSERT_OK_AND_ASSIGN(QueuePtr queue, device->CreateQueue());
  ASSERT_OK(kernels->Delay(queue.get(), 30ms));
  ASSERT_OK(kernels->FillSequence(queue.get(), values->mutable_data(), kIpcValues, 5));
  ASSERT_OK_AND_ASSIGN(EventPtr filled, queue->RecordEvent());

  const int64_t exported_bytes = (kIpcValues - kIpcSkipped) * 8;
  ASSERT_OK_AND_ASSIGN(IpcMemoryHandle memory,
                       device->ExportIpcMemory(values->data() + kIpcSkipped * 8, exported_bytes));
  auto exported_event = device->ExportIpcEvent(nullptr, filled);
  ASSERT_OK(exported_event);
  EXPECT_EQ(exported_event->first->kind(), EventKind::kCuda);

  auto child = device::testing::RunTestInChild(
      "CudaIpcChild.OpensTheParentsMemoryAndEvent",
      {{"FERRY_CUDA_IPC_MEMORY", device::testing::ToHex(&memory, sizeof(memory))},
       {"FERRY_CUDA_IPC_EVENT",
        device::testing::ToHex(exported_event->second.bytes.data(), IpcEventHandle::kBytes)}});
  ASSERT_EQ(child.exit_code, 0) << child.output;
  EXPECT_THAT(child.output, HasSubstr("[  PASSED  ] 1 test"));

  // The child wrote 1000, 1001, ... over the range it was given.
  ASSERT_OK_AND_ASSIGN(int64_t head, kernels->Sum(queue.get(), values->data(), kIpcSkipped));
  EXPECT_EQ(head, SequenceSum(kIpcSkipped, 5));
  ASSERT_OK_AND_ASSIGN(int64_t tail, kernels->Sum(queue.get(), values->data() + kIpcSkipped * 8,
                                                  kIpcValues - kIpcSkipped));
  EXPECT_EQ(tail, SequenceSum(kIpcValues - kIpcSkipped, 1000));
}

// Runs only as the child of the test above.
TEST(CudaIpcChild, OpensTheParentsMemoryAndEvent) {
  const char* memory_hex = std::getenv("FERRY_CUDA_IPC_MEMORY");
  const char* event_hex = std::getenv("FERRY_CUDA_IPC_EVENT");
  if (memory_hex == nullptr || event_hex == nullptr) {
    GTEST_SKIP() << "runs only as the child process of CudaIpc.AnotherProcessReads...";
  }
  IpcMemoryHandle memory;
  IpcEventHandle event_handle;
  ASSERT_TRUE(device::testing::FromHex(memory_hex, &memory, sizeof(memory)));
  ASSERT_TRUE(
      device::testing::FromHex(event_hex, event_handle.bytes.data(), IpcEventHandle::kBytes));
  ASSERT_OK_AND_ASSIGN(Device * device, CudaIpcDevice());
  ASSERT_OK_AND_ASSIGN(auto kernels, device::testing::KernelsFor(device));

  // A handle that claims more memory than the allocation has is refused.
  IpcMemoryHandle inflated = memory;
  inflated.allocation_size = memory.allocation_size + (int64_t{1} << 30);
  inflated.size = inflated.allocation_size - inflated.offset;
  auto refused = device->OpenIpcMemory(inflated);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("claims an allocation of"));

  ASSERT_OK_AND_ASSIGN(BufferPtr values, device->OpenIpcMemory(memory));
  EXPECT_EQ(values->size(), memory.size);
  ASSERT_OK_AND_ASSIGN(EventPtr filled, device->OpenIpcEvent(event_handle));
  EXPECT_EQ(filled->kind(), EventKind::kCuda);
  ASSERT_OK_AND_ASSIGN(QueuePtr queue, device->CreateQueue());
  CounterDelta delta;
  ASSERT_OK(queue->WaitEvent(filled->sync_event()));
  EXPECT_EQ(delta(Counter::kEventWaits), 1);
  const int64_t count = memory.size / 8;
  ASSERT_OK_AND_ASSIGN(int64_t sum, kernels->Sum(queue.get(), values->data(), count));
  EXPECT_EQ(sum, SequenceSum(count, 5 + kIpcSkipped));
  std::vector<int64_t> first(4);
  ASSERT_OK(queue->Copy(CopyDirection::kDeviceToHost, values->data(), first.data(), 32));
  ASSERT_OK(queue->Synchronize());
  EXPECT_EQ(first, (std::vector<int64_t>{1005, 1006, 1007, 1008}));
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), 32);  // only what the test read back

  ASSERT_OK(kernels->FillSequence(queue.get(), values->mutable_data(), count, 1000));
  ASSERT_OK(queue->Synchronize());
}

}  // namespace
}  // namespace ferry::device
