// The test bodies shared by the backends that run kernels (CUDA and
// OpenCL): a fixture mixin holding the device under test and its kernels,
// and checks of queues, memory, copies, kernels, events and waits that every
// such backend must pass. Each backend's test file names the tests and adds
// what only it does. Header-only, test-only.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exchange/device/testing/kernels.h"
#include "ferry/base/telemetry.h"
#include "ferry/device/device.h"
#include "testing/test_util.h"

namespace ferry::device::testing {

// What the shared checks expect to differ between backends.
struct BackendTraits {
  EventKind event_kind = EventKind::kNone;
  // In the message of a kernel given a queue of another backend.
  const char* kernel_queue = "";
  // In the message of a kernel given a negative element count.
  const char* negative_count = "";
  // In the message of a wait on a pointer to a null native event.
  const char* null_event = "";
};

// An int64 array of `length` values i * 3 - 50 with every seventh value
// (i % 7 == 3) null, in CPU memory.
inline ArrayDataPtr Int64ArrayWithNulls(int64_t length) {
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

// A fixture (over ::testing::Test or TestWithParam<T>) whose SetUp calls
// Open: the device under test, its kernels and the shared checks.
template <typename Base>
class KernelDeviceTest : public Base {
 protected:
  // Skips the test, saying `absent` and why, when `found` is an error.
  void Open(const Result<Device*>& found, std::string_view absent, BackendTraits traits) {
    if (!found.ok()) GTEST_SKIP() << absent << found.status().message();
    device_ = *found;
    traits_ = traits;
    auto kernels = KernelsFor(device_);
    ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
    kernels_ = std::move(*kernels);
  }

  BufferPtr MustAllocate(int64_t size) {
    auto buffer = device_->Allocate(size);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    return buffer.ok() ? *buffer : nullptr;
  }

  // ---- Queues and memory ----------------------------------------------------------

  void CheckQueuesAreSeparate() {
    auto queue = device_->CreateQueue();
    ASSERT_TRUE(queue.ok()) << queue.status().ToString();
    EXPECT_NE((*queue)->native(), nullptr);
    EXPECT_NE((*queue)->native(), device_->default_queue()->native());
    EXPECT_EQ((*queue)->device(), device_);
    EXPECT_EQ(device_->default_queue()->device(), device_);
    EXPECT_TRUE((*queue)->Synchronize().ok());
  }

  // Host -> device -> device -> host round trips of each size, read on the
  // device by a kernel on the way, each direction counted to the byte.
  void CheckCopiesRoundTrip(const std::vector<int64_t>& sizes) {
    for (int64_t size : sizes) {
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

      ::ferry::testing::CounterDelta delta;
      Queue* queue = device_->default_queue();
      ASSERT_TRUE(
          queue->Copy(CopyDirection::kHostToDevice, source.data(), first->mutable_data(), size)
              .ok());
      ASSERT_TRUE(
          queue->Copy(CopyDirection::kDeviceToDevice, first->data(), second->mutable_data(), size)
              .ok());
      // The device reads the second buffer through its Arrow address.
      auto device_sum = kernels_->SumBytes(queue, second->data(), size);
      ASSERT_TRUE(device_sum.ok()) << device_sum.status().ToString();
      EXPECT_EQ(*device_sum, std::accumulate(source.begin(), source.end(), int64_t{0}));
      ASSERT_TRUE(
          queue->Copy(CopyDirection::kDeviceToHost, second->data(), back.data(), size).ok());
      ASSERT_TRUE(queue->Synchronize().ok());
      EXPECT_EQ(back, source);
      EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedH2D), size);
      EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedD2D), size);
      EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedD2H), size);
      EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedHost), 0);
    }
  }

  void CheckZeroSizeAllocations() {
    BufferPtr first = MustAllocate(0);
    BufferPtr second = MustAllocate(0);
    ASSERT_TRUE(first && second);
    EXPECT_EQ(first->size(), 0);
    EXPECT_NE(first->data(), nullptr);
    EXPECT_NE(first->data(), second->data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first->data()) % kBufferAlignment, 0u);
    ::ferry::testing::CounterDelta delta;
    EXPECT_TRUE(device_->default_queue()
                    ->Copy(CopyDirection::kDeviceToDevice, first->data(), second->mutable_data(), 0)
                    .ok());
    EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedD2D), 0);
    auto sum = kernels_->Sum(device_->default_queue(), first->data(), 0);
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    EXPECT_EQ(*sum, 0);
  }

  // A negative size is invalid, a petabyte is out of memory naming the
  // device, and the device stays healthy and usable.
  void CheckAllocationFailures() {
    auto negative = device_->Allocate(-1);
    ASSERT_FALSE(negative.ok());
    EXPECT_EQ(negative.status().code(), StatusCode::kInvalid);
    EXPECT_THAT(negative.status().message(), ::testing::HasSubstr("negative allocation size -1"));
    auto huge = device_->Allocate(int64_t{1} << 50);
    ASSERT_FALSE(huge.ok());
    EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory);
    EXPECT_THAT(huge.status().message(), ::testing::HasSubstr(device_->name()));
    EXPECT_TRUE(device_->CheckHealth().ok());
    EXPECT_TRUE(MustAllocate(1024) != nullptr);  // still usable
  }

  // Negative sizes and null pointers are refused, and so is whatever
  // `backend_refusals` tries on a 256-byte buffer; none of it is counted,
  // and a valid copy still works afterwards.
  void CheckBadCopiesRefused(const std::function<void(Queue*, Buffer*)>& backend_refusals = {}) {
    BufferPtr buffer = MustAllocate(256);
    ASSERT_TRUE(buffer);
    Queue* queue = device_->default_queue();
    ::ferry::testing::CounterDelta delta;
    Status negative =
        queue->Copy(CopyDirection::kDeviceToDevice, buffer->data(), buffer->mutable_data(), -5);
    EXPECT_EQ(negative.code(), StatusCode::kInvalid);
    EXPECT_THAT(negative.message(), ::testing::HasSubstr("negative copy size -5"));
    Status null_source =
        queue->Copy(CopyDirection::kHostToDevice, nullptr, buffer->mutable_data(), 8);
    EXPECT_THAT(null_source.message(), ::testing::HasSubstr("null source"));
    Status null_destination = queue->Copy(CopyDirection::kDeviceToHost, buffer->data(), nullptr, 8);
    EXPECT_THAT(null_destination.message(), ::testing::HasSubstr("null destination"));
    if (backend_refusals) backend_refusals(queue, buffer.get());
    EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedD2D), 0);
    EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedH2D), 0);
    EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedD2H), 0);
    EXPECT_TRUE(
        queue
            ->Copy(CopyDirection::kDeviceToDevice, buffer->data(), buffer->mutable_data() + 128, 64)
            .ok());
    EXPECT_TRUE(queue->Synchronize().ok());
  }

  // ---- Kernels, events and waits ------------------------------------------------------

  // A consumer queue waits on the device for a delayed producer's event: the
  // host does not wait and nothing is copied.
  void CheckConsumerWaitsOnDeviceForTheProducersEvent() {
    constexpr int64_t kCount = 1 << 20;
    BufferPtr values = MustAllocate(kCount * 8);
    ASSERT_TRUE(values);
    auto producer = device_->CreateQueue();
    auto consumer = device_->CreateQueue();
    ASSERT_TRUE(producer.ok() && consumer.ok());
    // The delay makes a consumer that did not wait read before the fill.
    ASSERT_TRUE(kernels_->Delay(producer->get(), std::chrono::milliseconds(30)).ok());
    ASSERT_TRUE(kernels_->FillSequence(producer->get(), values->mutable_data(), kCount, 5).ok());
    auto event = (*producer)->RecordEvent();
    ASSERT_TRUE(event.ok()) << event.status().ToString();
    EXPECT_EQ((*event)->kind(), traits_.event_kind);
    void* sync_event = (*event)->sync_event();
    ASSERT_NE(sync_event, nullptr);
    EXPECT_NE(*static_cast<void**>(sync_event), nullptr);
    EXPECT_EQ((*event)->sync_event(), sync_event);  // stable for the Event's life

    ::ferry::testing::CounterDelta delta;
    ASSERT_TRUE((*consumer)->WaitEvent(sync_event).ok());
    EXPECT_EQ(delta(telemetry::Counter::kEventWaits), 1);
    EXPECT_EQ(delta(telemetry::Counter::kEventWaitNanos), 0);  // the host did not wait
    auto sum = kernels_->Sum(consumer->get(), values->data(), kCount);
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    EXPECT_EQ(*sum, ::ferry::testing::SequenceSum(kCount, 5));
    EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedH2D) +
                  delta(telemetry::Counter::kBytesCopiedD2H) +
                  delta(telemetry::Counter::kBytesCopiedD2D) +
                  delta(telemetry::Counter::kBytesCopiedHost),
              0);
  }

  // Ten million values filled and summed on the device, and a slice of them
  // (the kernels take interior addresses too).
  void CheckKernelsSumTenMillionValuesAndSlices() {
    constexpr int64_t kCount = 10'000'000;
    BufferPtr values = MustAllocate(kCount * 8);
    ASSERT_TRUE(values);
    Queue* queue = device_->default_queue();
    ASSERT_TRUE(kernels_->FillSequence(queue, values->mutable_data(), kCount, -3).ok());
    auto sum = kernels_->Sum(queue, values->data(), kCount);
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    EXPECT_EQ(*sum, ::ferry::testing::SequenceSum(kCount, -3));
    auto tail = kernels_->Sum(queue, values->data() + int64_t{8} * 1000, kCount - 1000);
    ASSERT_TRUE(tail.ok());
    EXPECT_EQ(*tail, ::ferry::testing::SequenceSum(kCount - 1000, 997));
  }

  void CheckKernelsRefuseForeignQueuesAndBadCounts() {
    BufferPtr buffer = MustAllocate(64);
    ASSERT_TRUE(buffer);
    Queue* cpu_queue = DeviceRegistry::Global().cpu()->default_queue();
    auto on_cpu = kernels_->Sum(cpu_queue, buffer->data(), 8);
    ASSERT_FALSE(on_cpu.ok());
    EXPECT_THAT(on_cpu.status().message(), ::testing::HasSubstr(traits_.kernel_queue));
    Status negative =
        kernels_->FillSequence(device_->default_queue(), buffer->mutable_data(), -1, 0);
    EXPECT_THAT(negative.message(), ::testing::HasSubstr(traits_.negative_count));
  }

  void CheckHostWaitReturnsOnceTheDelayedWorkCompletes() {
    auto queue = device_->CreateQueue();
    ASSERT_TRUE(queue.ok());
    ASSERT_TRUE(kernels_->Delay(queue->get(), std::chrono::milliseconds(40)).ok());
    auto event = (*queue)->RecordEvent();
    ASSERT_TRUE(event.ok());
    ::ferry::testing::CounterDelta delta;
    Status waited = device_->HostWait((*event)->sync_event(), std::chrono::seconds(30));
    ASSERT_TRUE(waited.ok()) << waited.ToString();
    EXPECT_EQ(delta(telemetry::Counter::kEventWaits), 1);
    EXPECT_GT(delta(telemetry::Counter::kEventWaitNanos), 0);
    EXPECT_TRUE((*event)->Wait(std::chrono::nanoseconds(0)).ok());  // complete: no time needed
  }

  void CheckHostWaitTimesOutInsteadOfHangingThenCompletes() {
    auto queue = device_->CreateQueue();
    ASSERT_TRUE(queue.ok());
    ASSERT_TRUE(kernels_->Delay(queue->get(), std::chrono::milliseconds(400)).ok());
    auto event = (*queue)->RecordEvent();
    ASSERT_TRUE(event.ok());
    ::ferry::testing::CounterDelta delta;
    Status early = device_->HostWait((*event)->sync_event(), std::chrono::milliseconds(1));
    EXPECT_EQ(early.code(), StatusCode::kTimedOut) << early.ToString();
    EXPECT_THAT(early.message(), ::testing::HasSubstr("not complete after 1.000 ms"));
    EXPECT_EQ(delta(telemetry::Counter::kEventWaits), 1);
    Status event_early = (*event)->Wait(std::chrono::milliseconds(1));
    EXPECT_EQ(event_early.code(), StatusCode::kTimedOut);
    Status later = device_->HostWait((*event)->sync_event(), std::chrono::seconds(30));
    EXPECT_TRUE(later.ok()) << later.ToString();
    EXPECT_EQ(delta(telemetry::Counter::kEventWaits), 2);
    EXPECT_TRUE(device_->CheckHealth().ok());  // a timeout is not a loss
  }

  // Two queues order each other's kernels and copies through events.
  void CheckTwoQueuesOrderEachOtherThroughEvents() {
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

    // first: slow, then writes 1, 2, ...; second copies that and then
    // overwrites with 1000, 1001, ...; first then sums what second wrote.
    ASSERT_TRUE(kernels_->Delay(first->get(), std::chrono::milliseconds(60)).ok());
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
    EXPECT_EQ(*overwritten, ::ferry::testing::SequenceSum(kCount, 1000));
    auto copied = kernels_->Sum(second->get(), snapshot->data(), kCount);
    ASSERT_TRUE(copied.ok());
    EXPECT_EQ(*copied, ::ferry::testing::SequenceSum(kCount, 1));
  }

  // A null sync event is ready at once; a pointer to a null native event is
  // refused on the device and on the host. Neither counts as a wait.
  void CheckNullEventsAreReadyAndNullHandlesRefused() {
    ::ferry::testing::CounterDelta delta;
    EXPECT_TRUE(device_->default_queue()->WaitEvent(nullptr).ok());
    EXPECT_TRUE(device_->HostWait(nullptr, std::chrono::milliseconds(1)).ok());
    EXPECT_EQ(delta(telemetry::Counter::kEventWaits), 0);
    void* null_handle = nullptr;
    Status device_side = device_->default_queue()->WaitEvent(&null_handle);
    EXPECT_EQ(device_side.code(), StatusCode::kInvalid);
    EXPECT_THAT(device_side.message(), ::testing::HasSubstr(traits_.null_event));
    Status host_side = device_->HostWait(&null_handle, std::chrono::milliseconds(1));
    EXPECT_EQ(host_side.code(), StatusCode::kInvalid);
    EXPECT_THAT(host_side.message(), ::testing::HasSubstr(traits_.null_event));
    EXPECT_EQ(delta(telemetry::Counter::kEventWaits), 0);
  }

  // The CPU waits on this device's events neither on the host nor on its
  // queue; the device itself does.
  void CheckEventsCannotBeWaitedOnByTheCpu() {
    auto event = device_->default_queue()->RecordEvent();
    ASSERT_TRUE(event.ok());
    Device* cpu = DeviceRegistry::Global().cpu();
    EXPECT_FALSE(cpu->HostWait((*event)->sync_event(), std::chrono::seconds(1)).ok());
    EXPECT_FALSE(cpu->default_queue()->WaitEvent((*event)->sync_event()).ok());
    EXPECT_TRUE(device_->HostWait((*event)->sync_event(), std::chrono::seconds(30)).ok());
  }

  // ---- Arrays ---------------------------------------------------------------------------

  // An int64 array with nulls moves from the CPU to the device, where a
  // kernel sums it, and back. Host-accessible memory is filled by a host
  // memcpy, device memory by H2D and D2H copies. With `event_required`, the
  // array on the device carries an event and the copy back waits on it.
  void CheckCopyArrayToTheDeviceAndBack(bool event_required) {
    constexpr int64_t kLength = 1000;
    ArrayDataPtr original = Int64ArrayWithNulls(kLength);
    const int64_t bytes = BytesForBits(kLength) + kLength * 8;
    Device* cpu = DeviceRegistry::Global().cpu();
    const bool host = device_->host_accessible();

    ::ferry::testing::CounterDelta to_device;
    auto on_device = CopyArrayTo(DeviceArray{original, cpu, nullptr}, device_);
    ASSERT_TRUE(on_device.ok()) << on_device.status().ToString();
    EXPECT_EQ(on_device->device, device_);
    EXPECT_EQ(to_device(telemetry::Counter::kBytesCopiedH2D), host ? 0 : bytes);
    EXPECT_EQ(to_device(telemetry::Counter::kBytesCopiedHost), host ? bytes : 0);
    EXPECT_EQ(to_device(telemetry::Counter::kBytesCopiedD2H), 0);
    // The values really are where the device reads them: a kernel sums them.
    auto queue = device_->CreateQueue();
    ASSERT_TRUE(queue.ok());
    if (event_required) {
      ASSERT_NE(on_device->event, nullptr);
    }
    if (on_device->event) {
      EXPECT_EQ(on_device->event->kind(), traits_.event_kind);
      ASSERT_TRUE((*queue)->WaitEvent(on_device->event->sync_event()).ok());
    }
    auto sum = kernels_->Sum(queue->get(), on_device->data->buffers[1]->data(), kLength);
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    EXPECT_EQ(*sum, ::ferry::testing::SequenceSum(kLength, 0) * 3 - 50 * kLength);

    ::ferry::testing::CounterDelta to_host;
    auto back = CopyArrayTo(*on_device, cpu);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->device, cpu);
    EXPECT_EQ(to_host(telemetry::Counter::kBytesCopiedD2H), host ? 0 : bytes);
    EXPECT_EQ(to_host(telemetry::Counter::kBytesCopiedHost), host ? bytes : 0);
    EXPECT_EQ(to_host(telemetry::Counter::kBytesCopiedH2D), 0);
    if (event_required) {
      EXPECT_EQ(to_host(telemetry::Counter::kEventWaits), 1);  // on the device, before the copies
    }
    EXPECT_TRUE(ArrayEquals(*back->data, *original));
  }

  // CopyArrayTo the CPU waits for the delayed kernel that wrote the array.
  void CheckCopyArrayToWaitsForTheProducersKernel() {
    constexpr int64_t kLength = 50'000;
    BufferPtr values = MustAllocate(kLength * 8);
    ASSERT_TRUE(values);
    auto producer = device_->CreateQueue();
    ASSERT_TRUE(producer.ok());
    ASSERT_TRUE(kernels_->Delay(producer->get(), std::chrono::milliseconds(30)).ok());
    ASSERT_TRUE(kernels_->FillSequence(producer->get(), values->mutable_data(), kLength, 11).ok());
    auto event = (*producer)->RecordEvent();
    ASSERT_TRUE(event.ok());
    auto data = std::make_shared<ArrayData>();
    data->type = int64();
    data->length = kLength;
    data->buffers = {nullptr, values};

    ::ferry::testing::CounterDelta delta;
    auto on_host = CopyArrayTo(DeviceArray{data, device_, *event}, DeviceRegistry::Global().cpu());
    ASSERT_TRUE(on_host.ok()) << on_host.status().ToString();
    EXPECT_EQ(delta(telemetry::Counter::kEventWaits), 1);
    if (device_->host_accessible()) {
      EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedHost), kLength * 8);
    } else {
      EXPECT_EQ(delta(telemetry::Counter::kBytesCopiedD2H), kLength * 8);
    }
    const auto* copied = on_host->data->GetValues<int64_t>(1);
    for (int64_t i = 0; i < kLength; ++i) ASSERT_EQ(copied[i], 11 + i) << i;
  }

  Device* device_ = nullptr;
  std::unique_ptr<Kernels> kernels_;
  BackendTraits traits_;
};

}  // namespace ferry::device::testing
