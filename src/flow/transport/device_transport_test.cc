// Publisher::SendDevice across processes. The publisher runs in the test
// process; each subscriber is this binary started again (a CUDA context does
// not survive fork), running one DeviceTransportChild test, which skips
// unless its environment names a channel. The CUDA tests skip without a CUDA
// driver with IPC support; CI runs them against the emulated driver
// (ctest cuda.emulated_transport).
#include "flow/transport/device_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "exchange/device/testing/child_process.h"
#include "exchange/device/testing/kernels.h"
#include "ferry/base/telemetry.h"
#include "ferry/device/device.h"
#include "ferry/device/device_bridge.h"
#include "ferry/flow/transport.h"
#include "flow/transport/batch_header.h"
#include "flow/transport/transport_test_util.h"
#include "testing/test_util.h"

namespace ferry::flow {
namespace {

using device::Device;
using device::DeviceBatch;
using device::DeviceRegistry;
using device::DeviceType;
using ::ferry::testing::CounterDelta;
using telemetry::Counter;
using telemetry::FallbackReason;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr int64_t kRows = 3000;
constexpr int64_t kSeed = 41;
constexpr int kSends = 3;

constexpr char kChannelVariable[] = "FERRY_DEVICE_TRANSPORT_CHANNEL";
constexpr char kAllocationsVariable[] = "FERRY_DEVICE_TRANSPORT_ALLOCATIONS";

int64_t CopiedBytes(const CounterDelta& delta) {
  return delta(Counter::kBytesCopiedH2D) + delta(Counter::kBytesCopiedD2H) +
         delta(Counter::kBytesCopiedD2D) + delta(Counter::kBytesCopiedHost);
}

// Copies `size` bytes of device memory to the host on `queue` (counted D2H).
std::vector<uint8_t> ReadBack(device::Queue* queue, const Buffer& buffer, int64_t size) {
  std::vector<uint8_t> out(static_cast<size_t>(size));
  if (size == 0) return out;
  Status copied =
      queue->Copy(device::CopyDirection::kDeviceToHost, buffer.data(), out.data(), size);
  if (copied.ok()) copied = queue->Synchronize();
  EXPECT_TRUE(copied.ok()) << copied.ToString();
  return out;
}

Result<Device*> CudaWithIpc() {
  FERRY_ASSIGN_OR_RAISE(Device * cuda, DeviceRegistry::Global().Get(DeviceType::kCuda, 0));
  if (!cuda->SupportsIpc()) {
    return Status::NotImplemented(cuda->name() + " does not support interprocess handles");
  }
  return cuda;
}

// Copies a host array tree to `target` on `queue` (counted H2D).
Result<ArrayDataPtr> CopyToDevice(const ArrayDataPtr& host, Device* target, device::Queue* queue) {
  FERRY_ASSIGN_OR_RAISE(
      device::DeviceArray copied,
      device::CopyArrayTo(device::DeviceArray{host, DeviceRegistry::Global().cpu(), nullptr},
                          target, 30s, queue));
  return copied.data;
}

// The CUDA batch the parent sends: "id" (kSeed + row) and "big" (10 * kSeed
// + row), two int64 columns in ONE allocation, filled by kernels behind a
// delay, and "text" (utf8 "v<kSeed + row>"), copied from the host, one
// allocation per buffer. `allocations` receives how many allocations the
// buffers span.
struct CudaBatch {
  DeviceBatch batch;
  int allocations = 0;
};

Result<CudaBatch> MakeCudaBatch(Device* cuda, device::Queue* queue) {
  FERRY_ASSIGN_OR_RAISE(auto kernels, device::testing::KernelsFor(cuda));
  FERRY_ASSIGN_OR_RAISE(BufferPtr shared, cuda->Allocate(2 * kRows * 8));
  FERRY_ASSIGN_OR_RAISE(RecordBatchPtr host,
                        testing::MakeBatch(default_memory_pool(), kRows, kSeed));
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr text, CopyToDevice(host->column(1), cuda, queue));
  FERRY_RETURN_NOT_OK(kernels->Delay(queue, 20ms));
  FERRY_RETURN_NOT_OK(kernels->FillSequence(queue, shared->mutable_data(), kRows, kSeed));
  FERRY_RETURN_NOT_OK(
      kernels->FillSequence(queue, shared->mutable_data() + kRows * 8, kRows, 10 * kSeed));
  CudaBatch out;
  FERRY_ASSIGN_OR_RAISE(out.batch.event, queue->RecordEvent());
  auto column = [&](int64_t offset) {
    auto data = std::make_shared<ArrayData>();
    data->type = int64();
    data->length = kRows;
    data->null_count = 0;
    data->buffers = {nullptr, Buffer::SliceOf(shared, offset, kRows * 8)};
    return ArrayDataPtr(data);
  };
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("id", int64(), false), field("big", int64(), false),
                    host->schema()->fields[1]};
  FERRY_ASSIGN_OR_RAISE(out.batch.batch, RecordBatch::Make(std::move(schema), kRows,
                                                           {column(0), column(kRows * 8), text}));
  out.batch.device = cuda;
  out.allocations = 1;
  for (const BufferPtr& buffer : text->buffers) {
    if (buffer != nullptr && buffer->size() > 0) ++out.allocations;
  }
  return out;
}

// Waits (bounded) until the publisher got every drop token back.
void ExpectAllDropped(Publisher& publisher) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (publisher.stats().memory_in_use != 0 && std::chrono::steady_clock::now() < deadline) {
    ASSERT_OK(publisher.Poll());
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(publisher.stats().memory_in_use, 0);
}

// ---- CUDA: IPC handles ------------------------------------------------------------

TEST(DeviceTransportCuda, AnotherProcessReceivesTheBatchOnTheDeviceWithoutACopy) {
  auto found = CudaWithIpc();
  if (!found.ok()) GTEST_SKIP() << "no CUDA IPC: " << found.status().message();
  Device* cuda = *found;
  const std::string channel = testing::UniqueChannel("cuda");
  ASSERT_OK_AND_ASSIGN(auto publisher, Publisher::Create(channel));
  ASSERT_OK_AND_ASSIGN(device::QueuePtr queue, cuda->CreateQueue());
  ASSERT_OK_AND_ASSIGN(CudaBatch sent, MakeCudaBatch(cuda, queue.get()));

  auto child = device::testing::StartTestInChild(
      "DeviceTransportChild.ReceivesCudaBatches",
      {{kChannelVariable, channel}, {kAllocationsVariable, std::to_string(sent.allocations)}});
  Status joined = publisher->WaitForSubscribers(1, 30s);
  if (!joined.ok()) {
    auto result = device::testing::WaitForChild(child);
    FAIL() << joined.ToString() << "\n" << result.output;
  }
  const internal::DeviceIpcCounts before = internal::GetDeviceIpcCounts();
  const int64_t fallbacks = telemetry::GetFallback(FallbackReason::kCrossesProcess);
  CounterDelta delta;
  for (int round = 0; round < kSends; ++round) {
    ASSERT_OK(publisher->SendDevice(sent.batch, {{"round", std::to_string(round)}}));
  }
  EXPECT_EQ(CopiedBytes(delta), 0);
  EXPECT_EQ(telemetry::GetFallback(FallbackReason::kCrossesProcess), fallbacks);
  EXPECT_EQ(delta(Counter::kZeroCopyExports), kSends);
  const internal::DeviceIpcCounts after = internal::GetDeviceIpcCounts();
  // One handle per allocation, reused by the later sends; one event per send.
  EXPECT_EQ(after.memory_exports - before.memory_exports, sent.allocations);
  EXPECT_EQ(after.event_exports - before.event_exports, kSends);
  EXPECT_EQ(publisher->stats().sent, kSends);
  EXPECT_EQ(publisher->stats().bytes_copied, 0);
  // The publisher alone keeps the device memory alive from here on.
  sent.batch = DeviceBatch{};
  queue.reset();

  auto result = device::testing::WaitForChild(child);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("[  PASSED  ] 1 test"));
  ExpectAllDropped(*publisher);
}

TEST(DeviceTransportChild, ReceivesCudaBatches) {
  const char* channel = std::getenv(kChannelVariable);
  const char* allocations = std::getenv(kAllocationsVariable);
  if (channel == nullptr || allocations == nullptr) {
    GTEST_SKIP() << "runs only as the subscriber process of DeviceTransportCuda.*";
  }
  ASSERT_OK_AND_ASSIGN(Device * cuda, CudaWithIpc());
  ASSERT_OK_AND_ASSIGN(auto subscriber, Subscriber::Connect(channel));
  ASSERT_OK_AND_ASSIGN(device::QueuePtr queue, cuda->CreateQueue());
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr expected,
                       testing::MakeBatch(default_memory_pool(), kRows, kSeed));
  const ArrayData& expected_text = *expected->column(1);
  const internal::DeviceIpcCounts before = internal::GetDeviceIpcCounts();
  std::vector<Message> held;  // all stay alive: their allocations stay open
  for (int round = 0; round < kSends; ++round) {
    SCOPED_TRACE(round);
    CounterDelta delta;
    ASSERT_OK_AND_ASSIGN(Message message, subscriber->Receive(30s));
    EXPECT_EQ(CopiedBytes(delta), 0);
    EXPECT_EQ(message.batch, nullptr);
    ASSERT_TRUE(message.device_batch.has_value());
    EXPECT_EQ(message.metadata, (Metadata{{"round", std::to_string(round)}}));
    const DeviceBatch& batch = *message.device_batch;
    EXPECT_EQ(batch.device, cuda);
    ASSERT_NE(batch.batch, nullptr);
    EXPECT_EQ(batch.batch->num_rows(), kRows);
    ASSERT_EQ(batch.batch->num_columns(), 3);
    EXPECT_EQ(batch.batch->schema()->fields[0].name, "id");
    EXPECT_EQ(batch.batch->schema()->fields[1].name, "big");
    EXPECT_TRUE(batch.batch->schema()->fields[2].Equals(expected->schema()->fields[1]));
    ASSERT_NE(batch.event, nullptr);
    EXPECT_EQ(batch.event->kind(), device::EventKind::kCuda);

    // The consumer's stream waits for the producer's event, then reads.
    ASSERT_OK(queue->WaitEvent(batch.event->sync_event()));
    EXPECT_EQ(delta(Counter::kEventWaits), 1);
    const Buffer& ids = *batch.batch->column(0)->buffers[1];
    const Buffer& bigs = *batch.batch->column(1)->buffers[1];
    EXPECT_EQ(bigs.data(), ids.data() + kRows * 8);  // one allocation, as sent
    std::vector<uint8_t> id_bytes = ReadBack(queue.get(), ids, kRows * 8);
    std::vector<uint8_t> big_bytes = ReadBack(queue.get(), bigs, kRows * 8);
    const auto* id_values = reinterpret_cast<const int64_t*>(id_bytes.data());
    const auto* big_values = reinterpret_cast<const int64_t*>(big_bytes.data());
    for (int64_t row = 0; row < kRows; ++row) {
      ASSERT_EQ(id_values[row], kSeed + row) << row;
      ASSERT_EQ(big_values[row], 10 * kSeed + row) << row;
    }
    const ArrayData& text = *batch.batch->column(2);
    ASSERT_EQ(text.buffers.size(), expected_text.buffers.size());
    for (size_t index = 0; index < text.buffers.size(); ++index) {
      if (expected_text.buffers[index] == nullptr) continue;
      ASSERT_NE(text.buffers[index], nullptr);
      const int64_t size = expected_text.buffers[index]->size();
      ASSERT_EQ(text.buffers[index]->size(), size);
      EXPECT_EQ(ReadBack(queue.get(), *text.buffers[index], size),
                std::vector<uint8_t>(expected_text.buffers[index]->data(),
                                     expected_text.buffers[index]->data() + size))
          << "text buffer " << index;
    }
    if (!held.empty()) {  // the same allocations, opened once
      EXPECT_EQ(ids.data(), held.front().device_batch->batch->column(0)->buffers[1]->data());
    }
    held.push_back(std::move(message));
  }
  const internal::DeviceIpcCounts after = internal::GetDeviceIpcCounts();
  EXPECT_EQ(after.memory_opens - before.memory_opens, std::atoi(allocations));
  EXPECT_EQ(after.event_opens - before.event_opens, kSends);
}

TEST(DeviceTransportCuda, ASubscriberInThePublishersOwnProcessGetsAClearError) {
  auto found = CudaWithIpc();
  if (!found.ok()) GTEST_SKIP() << "no CUDA IPC: " << found.status().message();
  Device* cuda = *found;
  const std::string channel = testing::UniqueChannel("cuda-self");
  ASSERT_OK_AND_ASSIGN(auto publisher, Publisher::Create(channel));
  auto connecting = std::async(std::launch::async, [&] { return Subscriber::Connect(channel); });
  ASSERT_OK(publisher->WaitForSubscribers(1, 10s));
  ASSERT_OK_AND_ASSIGN(auto subscriber, connecting.get());
  {
    ASSERT_OK_AND_ASSIGN(device::QueuePtr queue, cuda->CreateQueue());
    ASSERT_OK_AND_ASSIGN(CudaBatch sent, MakeCudaBatch(cuda, queue.get()));
    ASSERT_OK(publisher->SendDevice(sent.batch));
  }
  // CUDA opens no handle in the process that exported it.
  auto received = subscriber->Receive(10s);
  ASSERT_FALSE(received.ok());
  EXPECT_THAT(received.status().message(), HasSubstr("device message: allocation 0: "));
  // The channel goes on, and the refused message was given back.
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr host, testing::MakeBatch(publisher->LoanPool(), 10, 3));
  ASSERT_OK(publisher->Send(*host));
  ASSERT_OK_AND_ASSIGN(Message message, subscriber->Receive(10s));
  ASSERT_NE(message.batch, nullptr);
  EXPECT_TRUE(testing::BatchMatches(*message.batch, 10, 3));
  EXPECT_FALSE(message.device_batch.has_value());
  message = Message{};
  host.reset();
  ExpectAllDropped(*publisher);
}

// ---- Devices without IPC: the counted copy ------------------------------------------

struct Kind {
  DeviceType type;
  friend void PrintTo(const Kind& kind, std::ostream* out) {
    *out << device::DeviceTypeName(kind.type);
  }
};

class DeviceTransportFallback : public ::testing::TestWithParam<Kind> {};

INSTANTIATE_TEST_SUITE_P(WithoutIpc, DeviceTransportFallback,
                         ::testing::Values(Kind{DeviceType::kOpenCL}, Kind{DeviceType::kCudaHost},
                                           Kind{DeviceType::kCudaManaged}),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return std::string(device::DeviceTypeName(info.param.type));
                         });

TEST_P(DeviceTransportFallback, TheBatchIsCopiedToSharedMemoryWithItsReason) {
  auto found = DeviceRegistry::Global().Get(GetParam().type, 0);
  if (!found.ok()) GTEST_SKIP() << "no such device: " << found.status().message();
  Device* device = *found;
  ASSERT_FALSE(device->SupportsIpc());
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr host,
                       testing::MakeBatch(default_memory_pool(), kRows, kSeed));
  DeviceBatch batch;
  batch.device = device;
  {
    std::vector<ArrayDataPtr> columns;
    for (const ArrayDataPtr& column : host->columns()) {
      ASSERT_OK_AND_ASSIGN(
          device::DeviceArray copied,
          device::CopyArrayTo(device::DeviceArray{column, DeviceRegistry::Global().cpu(), nullptr},
                              device));
      columns.push_back(copied.data);
      if (copied.event != nullptr) batch.event = copied.event;
    }
    ASSERT_OK_AND_ASSIGN(batch.batch, RecordBatch::Make(host->schema(), kRows, columns));
  }
  const std::string channel = testing::UniqueChannel("fallback");
  ASSERT_OK_AND_ASSIGN(auto publisher, Publisher::Create(channel));
  auto child = device::testing::StartTestInChild("DeviceTransportChild.ReceivesHostBatches",
                                                 {{kChannelVariable, channel}});
  Status joined = publisher->WaitForSubscribers(1, 30s);
  if (!joined.ok()) {
    auto result = device::testing::WaitForChild(child);
    FAIL() << joined.ToString() << "\n" << result.output;
  }
  const int64_t fallbacks = telemetry::GetFallback(FallbackReason::kCrossesProcess);
  CounterDelta delta;
  ASSERT_OK(publisher->SendDevice(batch, {{"kind", device::DeviceTypeName(GetParam().type)}}));
  EXPECT_EQ(telemetry::GetFallback(FallbackReason::kCrossesProcess) - fallbacks, 1);
  const int64_t bytes = testing::BufferBytes(*host);
  // One copy, straight into the channel's shared memory: D2H from device
  // memory, a host memcpy from host-accessible memory, nothing else.
  if (device->host_accessible()) {
    EXPECT_EQ(delta(Counter::kBytesCopiedHost), bytes);
    EXPECT_EQ(delta(Counter::kBytesCopiedD2H), 0);
  } else {
    EXPECT_EQ(delta(Counter::kBytesCopiedD2H), bytes);
    EXPECT_EQ(delta(Counter::kBytesCopiedHost), 0);
  }
  EXPECT_EQ(delta(Counter::kBytesCopiedH2D), 0);
  EXPECT_EQ(publisher->stats().bytes_copied, 0);  // Send itself copied nothing more
  auto result = device::testing::WaitForChild(child);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("[  PASSED  ] 1 test"));
  ExpectAllDropped(*publisher);
}

TEST(DeviceTransportChild, ReceivesHostBatches) {
  const char* channel = std::getenv(kChannelVariable);
  if (channel == nullptr) {
    GTEST_SKIP() << "runs only as the subscriber process of DeviceTransportFallback.*";
  }
  ASSERT_OK_AND_ASSIGN(auto subscriber, Subscriber::Connect(channel));
  ASSERT_OK_AND_ASSIGN(Message message, subscriber->Receive(30s));
  EXPECT_FALSE(message.device_batch.has_value());
  ASSERT_NE(message.batch, nullptr);
  EXPECT_TRUE(testing::BatchMatches(*message.batch, kRows, kSeed));
  ASSERT_EQ(message.metadata.size(), 1u);
  EXPECT_EQ(message.metadata[0].first, "kind");
  // The buffers are the publisher's shared memory, mapped read-only here.
  auto mapping = testing::FindMapping(message.batch->column(0)->buffers[1]->data());
  ASSERT_TRUE(mapping.has_value());
  EXPECT_EQ(mapping->permissions.substr(0, 2), "r-");
}

// ---- Bad input ------------------------------------------------------------------------

// A fake event of a kind no CUDA device uses.
class OpenCLKindEvent final : public device::Event {
 public:
  device::EventKind kind() const override { return device::EventKind::kOpenCL; }
  void* sync_event() override { return &handle_; }
  Status Wait(std::chrono::nanoseconds) override { return Status::OK(); }

 private:
  void* handle_ = nullptr;
};

TEST(DeviceTransport, SendDeviceRefusesAnIncompleteBatchAndSendsCpuBatchesAsSendCopy) {
  const std::string channel = testing::UniqueChannel("refuse");
  ASSERT_OK_AND_ASSIGN(auto publisher, Publisher::Create(channel));
  Status missing = publisher->SendDevice(DeviceBatch{});
  EXPECT_EQ(missing.code(), StatusCode::kInvalid);
  EXPECT_THAT(missing.message(), HasSubstr("the batch, its schema or its device is missing"));

  // A CPU batch travels as SendCopy sends it.
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr host, testing::MakeBatch(default_memory_pool(), 10, 1));
  ASSERT_OK(publisher->SendDevice(DeviceBatch{host, DeviceRegistry::Global().cpu(), nullptr}));
  EXPECT_EQ(publisher->stats().sent, 1);
}

TEST(DeviceTransportCuda, SendDeviceRefusesHostMemoryAndForeignEvents) {
  auto found = CudaWithIpc();
  if (!found.ok()) GTEST_SKIP() << "no CUDA IPC: " << found.status().message();
  Device* cuda = *found;
  const std::string channel = testing::UniqueChannel("refuse-cuda");
  ASSERT_OK_AND_ASSIGN(auto publisher, Publisher::Create(channel));
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr host, testing::MakeBatch(default_memory_pool(), 10, 1));
  // Host memory in a CUDA batch has no handle: the column is named.
  DeviceBatch mixed{host, cuda, nullptr};
  Status foreign = publisher->SendDevice(mixed);
  ASSERT_FALSE(foreign.ok());
  EXPECT_THAT(foreign.message(), HasSubstr("column 'id': "));
  EXPECT_THAT(foreign.message(), HasSubstr("not a CUDA allocation"));
  DeviceBatch wrong_event{host, cuda, std::make_shared<OpenCLKindEvent>()};
  Status kind = publisher->SendDevice(wrong_event);
  EXPECT_EQ(kind.code(), StatusCode::kInvalid);
  EXPECT_THAT(kind.message(), HasSubstr("event is a opencl event"));
  EXPECT_EQ(publisher->stats().sent, 0);
}

// A carrier batch with arbitrary envelope bytes, as a hostile publisher
// could send it.
Result<RecordBatchPtr> Carrier(const std::vector<uint8_t>& envelope) {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("ferry.device_message", uint8(), false)};
  schema->metadata = {{"ferry.transport", "device_message"}};
  auto column = std::make_shared<ArrayData>();
  column->type = uint8();
  column->length = static_cast<int64_t>(envelope.size());
  column->null_count = 0;
  FERRY_ASSIGN_OR_RAISE(BufferPtr bytes, Buffer::CopyOf(envelope.data(), column->length));
  column->buffers = {nullptr, bytes};
  return RecordBatch::Make(std::move(schema), column->length, {column});
}

std::vector<uint8_t> Prefix(int32_t device_type, int64_t device_id, uint32_t allocations,
                            uint64_t schema_bytes, uint64_t header_bytes) {
  std::vector<uint8_t> out(128, 0);
  const uint32_t magic = internal::kDeviceEnvelopeMagic;
  const uint16_t version = internal::kDeviceEnvelopeVersion;
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &version, 2);
  std::memcpy(out.data() + 8, &device_type, 4);
  std::memcpy(out.data() + 12, &allocations, 4);
  std::memcpy(out.data() + 16, &device_id, 8);
  std::memcpy(out.data() + 24, &schema_bytes, 8);
  std::memcpy(out.data() + 32, &header_bytes, 8);
  return out;
}

TEST(DeviceTransport, HostileEnvelopesAreRefusedAndTheChannelGoesOn) {
  const std::string channel = testing::UniqueChannel("hostile");
  ASSERT_OK_AND_ASSIGN(auto publisher, Publisher::Create(channel));
  auto connecting = std::async(std::launch::async, [&] { return Subscriber::Connect(channel); });
  ASSERT_OK(publisher->WaitForSubscribers(1, 10s));
  ASSERT_OK_AND_ASSIGN(auto subscriber, connecting.get());

  std::vector<uint8_t> bad_magic = Prefix(2, 0, 0, 0, 0);
  bad_magic[0] ^= 0xff;
  std::vector<uint8_t> bad_version = Prefix(2, 0, 0, 0, 0);
  bad_version[4] = 9;
  std::vector<uint8_t> reserved = Prefix(2, 0, 0, 0, 0);
  reserved[40] = 1;
  std::vector<uint8_t> too_short = Prefix(2, 0, 0, 64, 0);  // claims a schema it lacks
  std::vector<uint8_t> huge_count = Prefix(2, 0, 0xFFFFFFFFu, 0, 0);
  std::vector<uint8_t> bad_type = Prefix(99, 0, 0, 0, 0);
  std::vector<uint8_t> no_device = Prefix(static_cast<int32_t>(DeviceType::kVulkan), 7, 0, 0, 0);
  const std::vector<std::pair<std::vector<uint8_t>, std::string>> cases = {
      {std::vector<uint8_t>(10, 0), "the envelope is truncated"},
      {bad_magic, "bad magic"},
      {bad_version, "unsupported version 9"},
      {reserved, "reserved bytes set"},
      {too_short, "the envelope has 128 bytes but its sections need 192"},
      {huge_count, "section sizes out of range"},
      {bad_type, "device message: unknown Arrow device type 99"},
      {no_device, "device message on vulkan device 7, not available here"},
  };
  for (const auto& [bytes, expected] : cases) {
    SCOPED_TRACE(expected);
    ASSERT_OK_AND_ASSIGN(RecordBatchPtr carrier, Carrier(bytes));
    ASSERT_OK(publisher->SendCopy(*carrier));
    auto received = subscriber->Receive(10s);
    ASSERT_FALSE(received.ok());
    EXPECT_THAT(received.status().message(), HasSubstr(expected));
  }
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr host, testing::MakeBatch(publisher->LoanPool(), 5, 9));
  ASSERT_OK(publisher->Send(*host));
  ASSERT_OK_AND_ASSIGN(Message message, subscriber->Receive(10s));
  ASSERT_NE(message.batch, nullptr);
  EXPECT_TRUE(testing::BatchMatches(*message.batch, 5, 9));
  message = Message{};
  host.reset();
  ExpectAllDropped(*publisher);
}

// The header of a device message is decoded without touching the payload:
// here the "device memory" is a mapping the host cannot read at all.
TEST(DeviceTransportWire, ADeviceHeaderIsDecodedWithoutReadingThePayload) {
  constexpr int64_t kSegment = int64_t{1} << 20;
  void* unreadable = ::mmap(nullptr, kSegment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(unreadable, MAP_FAILED);
  const auto* base = static_cast<const uint8_t*>(unreadable);
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, testing::MakeBatch(default_memory_pool(), 100, 5));
  auto encode = [&](const RecordBatch& source) -> Result<std::vector<uint8_t>> {
    uint64_t next = 0;
    auto locate = [&](const Buffer& buffer) -> Result<wire::BufferLocation> {
      wire::BufferLocation location{0, next, static_cast<uint64_t>(buffer.size())};
      next += static_cast<uint64_t>(PaddedSize(buffer.size()));
      return location;
    };
    FERRY_ASSIGN_OR_RAISE(int64_t size, wire::EncodedHeaderSize(source, {}));
    std::vector<uint8_t> header(static_cast<size_t>(size));
    FERRY_RETURN_NOT_OK(wire::EncodeHeader(source, {}, locate, header.data(), size).status());
    return header;
  };
  auto decode = [&](const std::vector<uint8_t>& header, const SchemaPtr& schema) {
    auto lookup = [&](uint32_t) -> Result<wire::SegmentView> {
      return wire::SegmentView{base, kSegment};
    };
    wire::DecodeOptions options;
    options.payload_on_device = true;
    options.validate_full = true;  // ignored for device payloads
    return wire::DecodeHeader(header.data(), static_cast<int64_t>(header.size()), schema, lookup,
                              nullptr, nullptr, options);
  };

  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, encode(*batch));
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr decoded, decode(header, batch->schema()));
  EXPECT_EQ(decoded->num_rows(), 100);
  EXPECT_EQ(decoded->column(1)->buffers[1]->size(), batch->column(1)->buffers[1]->size());
  EXPECT_GE(decoded->column(0)->buffers[1]->data(), base);

  // The layout is still checked: an offsets buffer too small for its rows.
  auto text = std::make_shared<ArrayData>(*batch->column(1));
  text->buffers[1] = Buffer::SliceOf(text->buffers[1], 0, 16);
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr short_offsets,
                       RecordBatch::Make(batch->schema(), 100, {batch->column(0), text}));
  ASSERT_OK_AND_ASSIGN(header, encode(*short_offsets));
  auto refused = decode(header, batch->schema());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("col 'text': offsets buffer (buffer 1) is too small"));
  ::munmap(unreadable, kSegment);
}

}  // namespace
}  // namespace ferry::flow
