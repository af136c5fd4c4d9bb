// Fault injection on every present backend that can run here: the CPU
// always, OpenCL (PoCL) and CUDA when present. Each fault must surface as a
// Status with a clear message through the public entry points (Allocate,
// CopyBetween, CopyArrayTo, HostWait, queues and events), never as a crash
// or a hang, and the device must work again once the fault is cleared.
#include "ferry/device/fault.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "ferry/device/device.h"
#include "ferry/device/negotiate.h"
#include "ferry/exchange/type.h"

namespace ferry::device {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr int64_t kValues = 1000;
constexpr int64_t kBytes = kValues * static_cast<int64_t>(sizeof(int64_t));

std::vector<int64_t> Sequence(int64_t start) {
  std::vector<int64_t> values(kValues);
  std::iota(values.begin(), values.end(), start);
  return values;
}

struct DeviceUnderTest {
  DeviceType type;
  int64_t id;
};

std::string DeviceParamName(const ::testing::TestParamInfo<DeviceUnderTest>& info) {
  return DeviceTypeName(info.param.type);
}

class FaultyDeviceTest : public ::testing::TestWithParam<DeviceUnderTest> {
 protected:
  void SetUp() override {
    const DeviceUnderTest& param = GetParam();
    auto found = DeviceRegistry::Global().Get(param.type, param.id);
    if (!found.ok()) {
      GTEST_SKIP() << DeviceTypeName(param.type) << " is not present: " << found.status().message();
    }
    host_ = DeviceRegistry::Global().cpu();
    scope_ = std::make_unique<ScopedDeviceOverride>(param.type, (*found)->id());
    ASSERT_NE(scope_->original(), nullptr);
    auto wrapped = FaultyDevice::Wrap(scope_->original());
    ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
    faulty_ = *wrapped;
  }

  // Copies host values into device memory through the faulty device. Copies
  // between two host-accessible devices never reach a device (CopyBetween
  // memcpys them), so host memory goes through the device's queue instead.
  Status Upload(const std::vector<int64_t>& values, Buffer* dst) {
    const int64_t size = static_cast<int64_t>(values.size() * sizeof(int64_t));
    Queue* queue = faulty_->default_queue();
    if (faulty_->host_accessible()) {
      FERRY_RETURN_NOT_OK(
          queue->Copy(CopyDirection::kHostToDevice, values.data(), dst->mutable_data(), size));
    } else {
      FERRY_RETURN_NOT_OK(
          CopyBetween(host_, values.data(), faulty_.get(), dst->mutable_data(), size));
    }
    return queue->Synchronize();
  }

  Result<std::vector<int64_t>> Download(const Buffer& src) {
    std::vector<int64_t> values(static_cast<size_t>(src.size()) / sizeof(int64_t));
    Queue* queue = faulty_->default_queue();
    if (faulty_->host_accessible()) {
      FERRY_RETURN_NOT_OK(
          queue->Copy(CopyDirection::kDeviceToHost, src.data(), values.data(), src.size()));
    } else {
      FERRY_RETURN_NOT_OK(CopyBetween(faulty_.get(), src.data(), host_, values.data(), src.size()));
    }
    FERRY_RETURN_NOT_OK(queue->Synchronize());
    return values;
  }

  // Allocates, uploads and downloads through the faulty device: the proof
  // that it works (again).
  void ExpectRoundTrip(int64_t start) {
    auto buffer = faulty_->Allocate(kBytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    ASSERT_TRUE(Upload(Sequence(start), buffer->get()).ok());
    auto back = Download(**buffer);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, Sequence(start));
  }

  static DeviceArray Int64Array(BufferPtr values, Device* device, EventPtr event) {
    auto data = std::make_shared<ArrayData>();
    data->type = int64();
    data->length = kValues;
    data->buffers = {nullptr, std::move(values)};
    return DeviceArray{data, device, std::move(event)};
  }

  // kValues int64 on the faulty device, with an event recorded after the upload.
  DeviceArray MakeDeviceArray(int64_t start) {
    auto buffer = faulty_->Allocate(kBytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    if (!buffer.ok()) return {};
    EXPECT_TRUE(Upload(Sequence(start), buffer->get()).ok());
    auto event = faulty_->default_queue()->RecordEvent();
    EXPECT_TRUE(event.ok()) << event.status().ToString();
    return Int64Array(*buffer, faulty_.get(), event.ok() ? *event : nullptr);
  }

  // kValues int64 in host memory.
  DeviceArray MakeHostArray(int64_t start) {
    auto buffer = Buffer::Allocate(kBytes);
    EXPECT_TRUE(buffer.ok());
    auto values = Sequence(start);
    std::memcpy((*buffer)->mutable_data(), values.data(), static_cast<size_t>(kBytes));
    return Int64Array(*buffer, host_, nullptr);
  }

  std::vector<int64_t> ValuesOf(const DeviceArray& array) {
    const BufferPtr& buffer = array.data->buffers[1];
    std::vector<int64_t> values(kValues);
    std::memcpy(values.data(), buffer->data(), static_cast<size_t>(kBytes));
    return values;
  }

  Device* host_ = nullptr;
  std::unique_ptr<ScopedDeviceOverride> scope_;
  std::shared_ptr<FaultyDevice> faulty_;
};

// ---- Without faults the wrapper is the wrapped device ---------------------------

TEST_P(FaultyDeviceTest, ForwardsIdentityAndWork) {
  const Device& inner = *scope_->original();
  EXPECT_EQ(faulty_->type(), inner.type());
  EXPECT_EQ(faulty_->id(), inner.id());
  EXPECT_EQ(faulty_->name(), inner.name());
  EXPECT_EQ(faulty_->event_kind(), inner.event_kind());
  EXPECT_EQ(faulty_->host_accessible(), inner.host_accessible());
  EXPECT_EQ(faulty_->default_queue()->device(), faulty_.get());
  EXPECT_TRUE(faulty_->CheckHealth().ok());
  EXPECT_FALSE(faulty_->lost());

  const int64_t before = faulty_->operation_count();
  ExpectRoundTrip(7);
  EXPECT_GT(faulty_->operation_count(), before);

  auto queue = faulty_->CreateQueue();
  ASSERT_TRUE(queue.ok()) << queue.status().ToString();
  EXPECT_EQ((*queue)->device(), faulty_.get());
  auto event = (*queue)->RecordEvent();
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  EXPECT_EQ((*event)->kind(), faulty_->event_kind());
  EXPECT_TRUE((*event)->Wait(5s).ok());
  EXPECT_TRUE(faulty_->HostWait((*event)->sync_event(), 5s).ok());
  EXPECT_TRUE((*queue)->WaitEvent((*event)->sync_event()).ok());
  EXPECT_TRUE((*queue)->Synchronize().ok());

  DeviceArray array = MakeDeviceArray(100);
  auto copied = CopyArrayTo(array, host_, 5s);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(ValuesOf(*copied), Sequence(100));
}

// ---- Allocation failure -------------------------------------------------------

TEST_P(FaultyDeviceTest, FailNextAllocationsFailsExactlyThatMany) {
  faulty_->FailNextAllocations(2);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto buffer = faulty_->Allocate(kBytes);
    ASSERT_FALSE(buffer.ok());
    EXPECT_EQ(buffer.status().code(), StatusCode::kOutOfMemory);
    EXPECT_THAT(buffer.status().message(), HasSubstr("out of memory allocating 8000 bytes"));
    EXPECT_THAT(buffer.status().message(), HasSubstr("injected"));
    EXPECT_THAT(buffer.status().message(), HasSubstr(DeviceTypeName(faulty_->type())));
  }
  EXPECT_TRUE(faulty_->Allocate(kBytes).ok());
  EXPECT_TRUE(faulty_->CheckHealth().ok());  // out of memory is not a sick device
}

TEST_P(FaultyDeviceTest, AllocationFailurePropagatesThroughCopyArrayTo) {
  DeviceArray host_array = MakeHostArray(3);
  faulty_->FailNextAllocations(1);
  auto copied = CopyArrayTo(host_array, faulty_.get(), 5s);
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(copied.status().message(), HasSubstr("injected"));

  auto again = CopyArrayTo(host_array, faulty_.get(), 5s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto back = Download(*again->data->buffers[1]);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, Sequence(3));
}

// ---- Event waits that time out or never complete ------------------------------------

TEST_P(FaultyDeviceTest, WaitsTimeOutAtOnce) {
  DeviceArray array = MakeDeviceArray(1);
  ASSERT_NE(array.event, nullptr);
  const EventPtr* event = &array.event;
  faulty_->SetWaitsTimeOut(true);

  const auto start = std::chrono::steady_clock::now();
  Status waited = (*event)->Wait(10s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(waited.code(), StatusCode::kTimedOut);
  EXPECT_THAT(waited.message(), HasSubstr("event wait timed out (injected"));

  auto copied = CopyArrayTo(array, host_, 10s);
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), StatusCode::kTimedOut);

  if (void* sync_event = (*event)->sync_event(); sync_event != nullptr) {
    Status host_wait = faulty_->HostWait(sync_event, 10s);
    EXPECT_EQ(host_wait.code(), StatusCode::kTimedOut);
    EXPECT_THAT(host_wait.message(), HasSubstr("host wait timed out"));
    Status device_wait = faulty_->default_queue()->WaitEvent(sync_event);
    EXPECT_EQ(device_wait.code(), StatusCode::kTimedOut);
    EXPECT_THAT(device_wait.message(), HasSubstr("device-side event wait timed out"));
  }
  // A null event means ready data; no fault can make it late.
  EXPECT_TRUE(faulty_->HostWait(nullptr, 10s).ok());

  faulty_->ClearFaults();
  EXPECT_TRUE((*event)->Wait(5s).ok());
  auto copied_again = CopyArrayTo(array, host_, 5s);
  ASSERT_TRUE(copied_again.ok()) << copied_again.status().ToString();
  EXPECT_EQ(ValuesOf(*copied_again), Sequence(1));
}

TEST_P(FaultyDeviceTest, EventsThatNeverCompleteTimeOutAfterTheTimeout) {
  DeviceArray array = MakeDeviceArray(5);
  ASSERT_NE(array.event, nullptr);
  const EventPtr* event = &array.event;
  faulty_->SetEventsNeverComplete(true);

  const auto start = std::chrono::steady_clock::now();
  Status waited = (*event)->Wait(50ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  EXPECT_EQ(waited.code(), StatusCode::kTimedOut);
  EXPECT_THAT(waited.message(), HasSubstr("did not complete within 50 ms"));

  // On a device queue the device-side wait leaves the queue stuck, and the
  // copy behind it reports that; on the CPU the host wait times out.
  auto copied = CopyArrayTo(array, host_, 20ms);
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), StatusCode::kTimedOut);
  EXPECT_THAT(copied.status().message(), HasSubstr("never complete"));

  if (void* sync_event = (*event)->sync_event(); sync_event != nullptr) {
    Status host_wait = faulty_->HostWait(sync_event, 20ms);
    EXPECT_EQ(host_wait.code(), StatusCode::kTimedOut);
    EXPECT_THAT(host_wait.message(), HasSubstr("never complete"));
  }
  faulty_->SetEventsNeverComplete(false);
  EXPECT_TRUE((*event)->Wait(5s).ok());
  ExpectRoundTrip(9);
  auto copied_again = CopyArrayTo(array, host_, 5s);
  ASSERT_TRUE(copied_again.ok()) << copied_again.status().ToString();
  EXPECT_EQ(ValuesOf(*copied_again), Sequence(5));
}

TEST_P(FaultyDeviceTest, ClearingTheFaultReleasesABlockedWaiter) {
  auto event = faulty_->default_queue()->RecordEvent();
  ASSERT_TRUE(event.ok());
  faulty_->SetEventsNeverComplete(true);
  std::atomic<bool> done{false};
  Status waited;
  std::thread waiter([&] {
    waited = (*event)->Wait(60s);
    done = true;
  });
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(done.load());
  const auto start = std::chrono::steady_clock::now();
  faulty_->ClearFaults();
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_TRUE(waited.ok()) << waited.ToString();
}

TEST_P(FaultyDeviceTest, LossWakesABlockedWaiterWithDeviceLost) {
  auto event = faulty_->default_queue()->RecordEvent();
  ASSERT_TRUE(event.ok());
  faulty_->SetEventsNeverComplete(true);
  Status waited;
  std::thread waiter([&] { waited = (*event)->Wait(60s); });
  std::this_thread::sleep_for(20ms);
  faulty_->LoseNow();
  waiter.join();
  EXPECT_THAT(waited.message(), HasSubstr("device lost"));
}

// ---- Failed copies ------------------------------------------------------------------

TEST_P(FaultyDeviceTest, CopiesFailWithoutCopying) {
  auto buffer = faulty_->Allocate(kBytes);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(Upload(Sequence(0), buffer->get()).ok());
  faulty_->SetCopiesFail(true);

  Status upload = Upload(Sequence(50), buffer->get());
  EXPECT_EQ(upload.code(), StatusCode::kIOError);
  EXPECT_THAT(upload.message(), HasSubstr("copy of 8000 bytes failed (injected fault)"));
  auto download = Download(**buffer);
  ASSERT_FALSE(download.ok());
  EXPECT_THAT(download.status().message(), HasSubstr("failed (injected fault)"));

  if (!faulty_->host_accessible()) {
    // CopyArrayTo runs its copies on the device's queue, so the fault shows.
    auto copied = CopyArrayTo(Int64Array(*buffer, faulty_.get(), nullptr), host_, 5s);
    ASSERT_FALSE(copied.ok());
    EXPECT_THAT(copied.status().message(), HasSubstr("d2h copy of 8000 bytes failed"));
  }

  faulty_->SetCopiesFail(false);
  auto back = Download(**buffer);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, Sequence(0));  // the failed upload wrote nothing
}

// ---- Device loss ----------------------------------------------------------------------

TEST_P(FaultyDeviceTest, LoseAfterLetsExactlyThatManyOperationsThrough) {
  faulty_->LoseAfter(2);
  EXPECT_TRUE(faulty_->Allocate(64).ok());
  EXPECT_FALSE(faulty_->lost());
  EXPECT_TRUE(faulty_->Allocate(64).ok());
  EXPECT_TRUE(faulty_->CheckHealth().ok());  // not an operation: the loss is still ahead
  auto third = faulty_->Allocate(64);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kIOError);
  EXPECT_THAT(third.status().message(), HasSubstr("device lost"));
  EXPECT_THAT(third.status().message(), HasSubstr("allocation failed"));
  EXPECT_TRUE(faulty_->lost());
}

TEST_P(FaultyDeviceTest, EveryOperationFailsAfterLoss) {
  auto buffer = faulty_->Allocate(kBytes);
  ASSERT_TRUE(buffer.ok());
  auto queue = faulty_->CreateQueue();
  ASSERT_TRUE(queue.ok());
  auto event = (*queue)->RecordEvent();
  ASSERT_TRUE(event.ok());
  DeviceArray array = MakeDeviceArray(11);
  faulty_->LoseNow();

  auto lost = [](const Status& status) {
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("device lost"));
  };
  lost(faulty_->CheckHealth());
  lost(faulty_->Allocate(kBytes).status());
  lost(faulty_->CreateQueue().status());
  lost(faulty_->HostWait(nullptr, 1s));
  lost(Upload(Sequence(0), buffer->get()));
  lost(Download(**buffer).status());
  lost((*queue)->RecordEvent().status());
  lost((*queue)->WaitEvent(nullptr));
  lost((*queue)->Synchronize());
  lost(faulty_->default_queue()->Synchronize());
  lost((*event)->Wait(1s));
  lost(CopyArrayTo(array, host_, 1s).status());
  lost(CopyArrayTo(MakeHostArray(0), faulty_.get(), 1s).status());

  faulty_->ClearFaults();
  EXPECT_TRUE(faulty_->CheckHealth().ok());
  // Cleared, not reset: what existed before the loss is still good.
  auto back = Download(*array.data->buffers[1]);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, Sequence(11));
  EXPECT_TRUE((*queue)->Synchronize().ok());
  ExpectRoundTrip(12);
}

TEST_P(FaultyDeviceTest, LossMidExchangeStopsCopyArrayTo) {
  DeviceArray array = MakeDeviceArray(20);
  faulty_->LoseNow();
  auto to_host = CopyArrayTo(array, host_, 1s);
  ASSERT_FALSE(to_host.ok());
  EXPECT_THAT(to_host.status().message(), HasSubstr("device lost"));
  faulty_->ClearFaults();

  // Healthy when CopyArrayTo starts; the target allocation is the last
  // operation that succeeds, so the copy onto the device finds it lost.
  faulty_->LoseAfter(1);
  auto to_device = CopyArrayTo(MakeHostArray(21), faulty_.get(), 1s);
  if (faulty_->host_accessible()) {
    // Host-to-host copies are memcpys that never reach the device.
    EXPECT_TRUE(to_device.ok()) << to_device.status().ToString();
  } else {
    ASSERT_FALSE(to_device.ok());
    EXPECT_THAT(to_device.status().message(), HasSubstr("device lost"));
    EXPECT_THAT(to_device.status().message(), HasSubstr("copy failed"));
  }
  faulty_->ClearFaults();
  auto copied = CopyArrayTo(array, host_, 5s);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(ValuesOf(*copied), Sequence(20));
}

// ---- Device reset -----------------------------------------------------------------------

TEST_P(FaultyDeviceTest, ResetInvalidatesEverythingFromBefore) {
  auto old_buffer = faulty_->Allocate(kBytes);
  ASSERT_TRUE(old_buffer.ok());
  ASSERT_TRUE(Upload(Sequence(0), old_buffer->get()).ok());
  auto old_queue = faulty_->CreateQueue();
  ASSERT_TRUE(old_queue.ok());
  auto old_event = faulty_->default_queue()->RecordEvent();
  ASSERT_TRUE(old_event.ok());
  faulty_->LoseNow();
  EXPECT_FALSE(faulty_->CheckHealth().ok());

  faulty_->Reset();
  EXPECT_FALSE(faulty_->lost());
  EXPECT_TRUE(faulty_->CheckHealth().ok());

  Status upload = Upload(Sequence(1), old_buffer->get());
  EXPECT_EQ(upload.code(), StatusCode::kInvalid);
  EXPECT_THAT(upload.message(), HasSubstr("allocated before the device reset"));
  auto download = Download(**old_buffer);
  ASSERT_FALSE(download.ok());
  EXPECT_THAT(download.status().message(), HasSubstr("source buffer was allocated before"));
  // An interior pointer (a slice) is caught too.
  std::vector<int64_t> scratch(4);
  Status slice_copy = faulty_->default_queue()->Copy(
      CopyDirection::kDeviceToHost, (*old_buffer)->data() + 16, scratch.data(), 32);
  EXPECT_THAT(slice_copy.message(), HasSubstr("before the device reset"));

  Status stale_queue = (*old_queue)->Synchronize();
  EXPECT_THAT(stale_queue.message(), HasSubstr("created before the device reset"));
  Status stale_event = (*old_event)->Wait(1s);
  EXPECT_THAT(stale_event.message(), HasSubstr("created before the device reset"));

  // The device itself works: new memory, new queues, the default queue.
  ExpectRoundTrip(30);
  auto new_queue = faulty_->CreateQueue();
  ASSERT_TRUE(new_queue.ok());
  EXPECT_TRUE((*new_queue)->Synchronize().ok());
  DeviceArray array = MakeDeviceArray(31);
  auto copied = CopyArrayTo(array, host_, 5s);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(ValuesOf(*copied), Sequence(31));
}

// ---- Absence and the registry -------------------------------------------------------------

TEST_P(FaultyDeviceTest, MakeAbsentHidesTheDeviceUntilRestored) {
  const DeviceUnderTest& param = GetParam();
  scope_->MakeAbsent();
  auto missing = DeviceRegistry::Global().Get(param.type, param.id);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr(DeviceTypeName(param.type)));
  if (param.type != DeviceType::kCpu) {
    // Negotiation sees the absence: the data can no longer be copied out.
    ProducerInfo producer;
    producer.device_type = param.type;
    producer.device_id = param.id;
    ExchangePlan plan = Negotiate(producer, ConsumerCapabilities{});
    EXPECT_EQ(plan.mode, ExchangeMode::kRefused) << plan.explanation;
  }
  scope_->Restore();
  auto back = DeviceRegistry::Global().Get(param.type, param.id);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, scope_->original().get());
}

TEST_P(FaultyDeviceTest, InstalledWrapperIsWhatTheRegistryResolves) {
  const DeviceUnderTest& param = GetParam();
  {
    ScopedDeviceOverride scope(param.type, scope_->original()->id());
    auto installed = scope.InstallFaulty();
    ASSERT_TRUE(installed.ok()) << installed.status().ToString();
    auto resolved = DeviceRegistry::Global().Get(param.type, param.id);
    ASSERT_TRUE(resolved.ok());
    EXPECT_EQ(*resolved, installed->get());
    (*installed)->LoseNow();
    Status health = (*resolved)->CheckHealth();
    EXPECT_THAT(health.message(), HasSubstr("device lost"));
    EXPECT_THAT((*resolved)->HostWait(nullptr, 1s).message(), HasSubstr("device lost"));
  }
  auto restored = DeviceRegistry::Global().Get(param.type, param.id);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored, scope_->original().get());
  EXPECT_TRUE((*restored)->CheckHealth().ok());
}

// ---- Thread safety ---------------------------------------------------------------------------

TEST_P(FaultyDeviceTest, FaultsCanBeSwitchedWhileOtherThreadsWork) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> failures{0};
  std::atomic<int64_t> successes{0};
  std::vector<std::thread> workers;
  for (int worker = 0; worker < 3; ++worker) {
    workers.emplace_back([&] {
      while (!stop) {
        auto buffer = faulty_->Allocate(256);
        if (!buffer.ok()) {
          EXPECT_THAT(buffer.status().code(),
                      AnyOf(StatusCode::kOutOfMemory, StatusCode::kIOError));
          ++failures;
          continue;
        }
        ++successes;
        Status health = faulty_->CheckHealth();
        (void)health;
      }
    });
  }
  for (int round = 0; round < 50; ++round) {
    faulty_->FailNextAllocations(3);
    faulty_->LoseAfter(5);
    std::this_thread::sleep_for(1ms);
    faulty_->ClearFaults();
  }
  stop = true;
  for (auto& worker : workers) worker.join();
  EXPECT_GT(successes.load(), 0);
  EXPECT_TRUE(faulty_->CheckHealth().ok());
  ExpectRoundTrip(40);
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultyDeviceTest,
                         ::testing::Values(DeviceUnderTest{DeviceType::kCpu, -1},
                                           DeviceUnderTest{DeviceType::kOpenCL, 0},
                                           DeviceUnderTest{DeviceType::kCuda, 0}),
                         DeviceParamName);

// ---- Not tied to one backend ------------------------------------------------------------------

TEST(FaultyDevice, WrapRejectsNull) {
  auto wrapped = FaultyDevice::Wrap(nullptr);
  ASSERT_FALSE(wrapped.ok());
  EXPECT_THAT(wrapped.status().message(), HasSubstr("needs a device"));
}

TEST(FaultyDevice, BuffersAndQueuesOutliveTheWrapper) {
  ScopedDeviceOverride scope(DeviceType::kCpu, -1);
  auto faulty = FaultyDevice::Wrap(scope.original());
  ASSERT_TRUE(faulty.ok());
  auto buffer = (*faulty)->Allocate(128);
  ASSERT_TRUE(buffer.ok());
  auto event = (*faulty)->default_queue()->RecordEvent();
  ASSERT_TRUE(event.ok());
  faulty->reset();
  std::memset((*buffer)->mutable_data(), 7, 128);
  EXPECT_EQ((*buffer)->data()[127], 7);
  EXPECT_TRUE((*event)->Wait(1s).ok());
}

TEST(ScopedDeviceOverride, KeepsTheRegistryOrder) {
  const std::vector<Device*> before = DeviceRegistry::Global().Present();
  {
    ScopedDeviceOverride scope(DeviceType::kCpu, -1);
    auto faulty = scope.InstallFaulty();
    ASSERT_TRUE(faulty.ok()) << faulty.status().ToString();
    std::vector<Device*> during = DeviceRegistry::Global().Present();
    ASSERT_EQ(during.size(), before.size());
    for (size_t index = 0; index < before.size(); ++index) {
      EXPECT_EQ(during[index],
                before[index] == scope.original().get() ? faulty->get() : before[index]);
    }
  }
  EXPECT_EQ(DeviceRegistry::Global().Present(), before);
}

TEST(ScopedDeviceOverride, InstallChecksTypeAndId) {
  ScopedDeviceOverride scope(DeviceType::kCpu, -1);
  Status null_device = scope.Install(nullptr);
  EXPECT_THAT(null_device.message(), HasSubstr("needs a device"));

  ScopedDeviceOverride other(DeviceType::kOpenCL, 7);
  Status mismatch = other.Install(scope.original());
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalid);
  EXPECT_THAT(mismatch.message(), HasSubstr("cannot install a cpu device"));
}

TEST(ScopedDeviceOverride, InstallFaultyNeedsARegisteredDevice) {
  ScopedDeviceOverride scope(DeviceType::kMetal, 0);
  EXPECT_EQ(scope.original(), nullptr);
  auto faulty = scope.InstallFaulty();
  ASSERT_FALSE(faulty.ok());
  EXPECT_THAT(faulty.status().message(), HasSubstr("cannot wrap a device in fault injection"));
  EXPECT_THAT(faulty.status().message(), HasSubstr("metal"));
}

// A device of a type without a backend here, to install where nothing was.
class FakeMetalDevice final : public Device {
 public:
  DeviceType type() const override { return DeviceType::kMetal; }
  int64_t id() const override { return 0; }
  std::string name() const override { return "fake metal"; }
  EventKind event_kind() const override { return EventKind::kNone; }
  Result<BufferPtr> Allocate(int64_t size) override { return Buffer::Allocate(size); }
  Result<QueuePtr> CreateQueue() override { return Status::NotImplemented("fake"); }
  Queue* default_queue() override { return nullptr; }
  Status HostWait(void*, std::chrono::nanoseconds) override { return Status::OK(); }
  Status CheckHealth() override { return Status::OK(); }
};

TEST(ScopedDeviceOverride, InstallingWhereNothingWasIsUndoneOnExit) {
  ASSERT_FALSE(DeviceRegistry::Global().Get(DeviceType::kMetal, 0).ok());
  {
    ScopedDeviceOverride scope(DeviceType::kMetal, 0);
    EXPECT_EQ(scope.original(), nullptr);
    auto faulty = FaultyDevice::Wrap(std::make_shared<FakeMetalDevice>());
    ASSERT_TRUE(faulty.ok());
    EXPECT_EQ((*faulty)->type(), DeviceType::kMetal);
    EXPECT_EQ((*faulty)->name(), "fake metal");
    ASSERT_TRUE(scope.Install(*faulty).ok());
    auto resolved = DeviceRegistry::Global().Get(DeviceType::kMetal, 0);
    ASSERT_TRUE(resolved.ok());
    EXPECT_EQ(*resolved, faulty->get());
    (*faulty)->FailNextAllocations(1);
    auto buffer = (*resolved)->Allocate(16);
    ASSERT_FALSE(buffer.ok());
    EXPECT_THAT(buffer.status().message(),
                HasSubstr("metal device 0 (fake metal): out of memory allocating 16 bytes"));
  }
  EXPECT_FALSE(DeviceRegistry::Global().Get(DeviceType::kMetal, 0).ok());
}

}  // namespace
}  // namespace ferry::device
