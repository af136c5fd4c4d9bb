// Conformance of the C Device Data bridge on every device of this machine:
// the CPU, each present non-CPU device (OpenCL through PoCL in CI), and the
// CUDA device kinds, which skip with the reason when there is no GPU. A
// producer kernel writes, records its event and exports; a consumer imports,
// waits (on its own queue or on the host) and reads with its own kernel.
// Copy counters are checked to the byte: zero on zero-copy paths, exactly
// the fetched offsets and sizes on import, exactly the buffers on copies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "exchange/device/testing/kernels.h"
#include "ferry/base/telemetry.h"
#include "ferry/device/device_bridge.h"
#include "ferry/device/fault.h"
#include "ferry/exchange/builder.h"
#include "testing/test_util.h"

namespace ferry::device {
namespace {

using ::ferry::testing::CounterDelta;
using ::ferry::testing::SequenceSum;
using telemetry::Counter;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using namespace std::chrono_literals;

// Bytes CopyArrayTo moves for `data`: every present buffer, whole.
int64_t BufferBytes(const ArrayData& data) {
  int64_t bytes = 0;
  for (const auto& buffer : data.buffers) bytes += buffer ? buffer->size() : 0;
  for (const auto& child : data.children) bytes += BufferBytes(*child);
  if (data.dictionary) bytes += BufferBytes(*data.dictionary);
  return bytes;
}

// Variadic data buffers of the view arrays in the tree.
int64_t VariadicBufferCount(const ArrayData& data) {
  int64_t count = 0;
  if (data.type->id == TypeId::kBinaryView || data.type->id == TypeId::kUtf8View) {
    count += static_cast<int64_t>(data.buffers.size()) - 2;
  }
  for (const auto& child : data.children) count += VariadicBufferCount(*child);
  return count;
}

// ---- The devices under test ---------------------------------------------------

struct DeviceCase {
  DeviceType type;
  int64_t id;
};

std::vector<DeviceCase> ConformanceDevices() {
  std::vector<DeviceCase> cases = {{DeviceType::kCpu, -1}};
  for (Device* device : DeviceRegistry::Global().Present()) {
    if (device->type() != DeviceType::kCpu) cases.push_back({device->type(), device->id()});
  }
  // CUDA is always listed, so that a machine without a GPU says so.
  for (DeviceType cuda : {DeviceType::kCuda, DeviceType::kCudaHost, DeviceType::kCudaManaged}) {
    bool listed = false;
    for (const auto& known : cases) listed |= known.type == cuda;
    if (!listed) cases.push_back({cuda, 0});
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<DeviceCase>& info) {
  std::string name = DeviceTypeName(info.param.type);
  if (info.param.id >= 0) name += "_" + std::to_string(info.param.id);
  return name;
}

class DeviceConformanceTest : public ::testing::TestWithParam<DeviceCase> {
 protected:
  void SetUp() override {
    const DeviceCase& param = GetParam();
    auto found = DeviceRegistry::Global().Get(param.type, param.id);
    if (!found.ok()) {
      GTEST_SKIP() << DeviceTypeName(param.type) << " device " << param.id
                   << " is not present, so its conformance tests do not run here: "
                   << found.status().message();
    }
    device_ = *found;
    auto kernels = testing::KernelsFor(device_);
    ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
    kernels_ = std::move(*kernels);
    ClearGuardViolations();
    outstanding_before_ = OutstandingExports().size();
  }

  void TearDown() override {
    if (device_ != nullptr) {
      EXPECT_EQ(OutstandingExports().size(), outstanding_before_) << LeakReport();
    }
  }

  bool has_events() const { return device_->event_kind() != EventKind::kNone; }
  bool host_readable() const { return device_->host_accessible(); }
  Device* cpu() const { return DeviceRegistry::Global().cpu(); }

  QueuePtr NewQueue(Device* device) {
    auto queue = device->CreateQueue();
    EXPECT_TRUE(queue.ok()) << queue.status().ToString();
    return queue.ok() ? *queue : nullptr;
  }

  static SchemaPtr Int64Schema(int columns) {
    auto schema = std::make_shared<Schema>();
    for (int column = 0; column < columns; ++column) {
      schema->fields.push_back(field("c" + std::to_string(column), int64(), false));
    }
    return schema;
  }

  // `columns` int64 columns of `rows` rows on `device`, column c holding
  // first + c * 1000 + row, written by the device's kernel on `queue` (after
  // a delay kernel when asked), with the event recorded after the writes.
  static Result<DeviceArray> Produce(Device* device, testing::Kernels* kernels, Queue* queue,
                                     int64_t rows, int columns, int64_t first = 0,
                                     std::chrono::milliseconds delay = 0ms) {
    if (delay > 0ms) FERRY_RETURN_NOT_OK(kernels->Delay(queue, delay));
    std::vector<ArrayDataPtr> data;
    for (int column = 0; column < columns; ++column) {
      FERRY_ASSIGN_OR_RAISE(BufferPtr values, device->Allocate(rows * 8));
      FERRY_RETURN_NOT_OK(
          kernels->FillSequence(queue, values->mutable_data(), rows, first + column * 1000));
      auto column_data = std::make_shared<ArrayData>();
      column_data->type = int64();
      column_data->length = rows;
      column_data->buffers = {nullptr, values};
      data.push_back(column_data);
    }
    FERRY_ASSIGN_OR_RAISE(EventPtr event, queue->RecordEvent());
    FERRY_ASSIGN_OR_RAISE(auto batch, RecordBatch::Make(Int64Schema(columns), rows, data));
    return DeviceArray{batch->ToStructArray(), device, event};
  }

  // The int64 values of column `column`, where a kernel reads them.
  static const void* ColumnValues(const DeviceArray& array, int column) {
    const ArrayData& data = *array.data->children[static_cast<size_t>(column)];
    return data.buffers[1]->data() + data.offset * 8;
  }

  // A batch built on the host with builders: the nested and variable-length
  // columns (with nulls) that travel to the device.
  static RecordBatchPtr VariableLengthBatch() {
    Utf8Builder names;
    for (int row = 0; row < 20; ++row) {
      EXPECT_TRUE(
          (row % 7 == 3 ? names.AppendNull() : names.Append("name-" + std::to_string(row))).ok());
    }
    ListBuilder lists(list(field("item", int64())));
    auto* items = static_cast<FixedWidthBuilder<int64_t>*>(lists.value_builder());
    for (int row = 0; row < 20; ++row) {
      EXPECT_TRUE(lists.Append().ok());
      for (int item = 0; item < row % 4; ++item) EXPECT_TRUE(items->Append(row * 10 + item).ok());
    }
    Utf8ViewBuilder views(default_memory_pool(), /*block_size=*/128);
    BinaryViewBuilder blobs(binary_view(), default_memory_pool(), /*block_size=*/64);
    LargeUtf8Builder large;
    for (int row = 0; row < 20; ++row) {
      // Every third value is longer than 12 bytes: it lives out of line.
      EXPECT_TRUE(views
                      .Append(row % 3 == 0 ? "a long value, row " + std::to_string(row)
                                           : "v" + std::to_string(row))
                      .ok());
      EXPECT_TRUE(blobs.Append(std::string(static_cast<size_t>(row % 5) * 9, 'b')).ok());
      EXPECT_TRUE(large.Append(std::string(static_cast<size_t>(row % 3), 'l')).ok());
    }
    auto point_type = struct_({field("label", utf8())});
    Utf8Builder labels;
    for (int row = 0; row < 20; ++row) EXPECT_TRUE(labels.Append("p" + std::to_string(row)).ok());
    auto label_data = labels.Finish();
    auto point = std::make_shared<ArrayData>();
    point->type = point_type;
    point->length = 20;
    point->buffers = {nullptr};
    point->children = {*label_data};

    std::vector<ArrayDataPtr> columns = {*names.Finish(), *lists.Finish(), *views.Finish(),
                                         *blobs.Finish(), *large.Finish(), point};
    auto schema = std::make_shared<Schema>();
    const char* column_names[] = {"name", "list", "view", "blob", "large", "point"};
    for (size_t i = 0; i < columns.size(); ++i) {
      schema->fields.push_back(field(column_names[i], columns[i]->type));
    }
    auto batch = RecordBatch::Make(schema, 20, columns);
    EXPECT_TRUE(batch.ok()) << batch.status().ToString();
    return *batch;
  }

  // D2H bytes import must fetch for VariableLengthBatch (or a slice of it
  // with values): the last offsets of name, list, large and point.label and
  // 8 bytes per variadic buffer.
  static int64_t FetchedBytes(const ArrayData& batch_struct) {
    return 4 + 4 + 8 + 4 + 8 * VariadicBufferCount(batch_struct);
  }

  // Whether import fetches offsets and sizes from device memory after a
  // wait on the producer's event (else there is nothing to fault there).
  bool fetches_from_device_memory() const { return has_events() && !host_readable(); }
  static constexpr const char* kNeedsDeviceMemory =
      "needs device memory with events (nothing is fetched from host memory)";

  // What ImportThroughFault saw: the import's status and the bytes of
  // offsets and sizes import fetches for the batch.
  struct FaultedImport {
    Status status;
    int64_t fetched_bytes = 0;
  };

  // Installs a faulty wrapper of device_, copies VariableLengthBatch from the
  // host onto it (the copy carries an event), exports that, creates a
  // consumer queue on the wrapper, applies `fault` and imports on that queue.
  // Expects the import to have released the array; clears the faults.
  Result<FaultedImport> ImportThroughFault(const std::function<void(FaultyDevice&)>& fault) {
    ScopedDeviceOverride scope(device_->type(), device_->id());
    FERRY_ASSIGN_OR_RAISE(std::shared_ptr<FaultyDevice> faulty, scope.InstallFaulty());
    FERRY_ASSIGN_OR_RAISE(
        DeviceArray on_device,
        CopyArrayTo(DeviceArray{VariableLengthBatch()->ToStructArray(), cpu(), nullptr},
                    faulty.get()));
    if (on_device.event == nullptr) return Status::Invalid("the copy to the device has no event");
    ArrowDeviceArray exported{};
    FERRY_RETURN_NOT_OK(ExportDeviceArray(on_device, &exported));
    QueuePtr consumer_queue = NewQueue(faulty.get());
    fault(*faulty);
    ImportOptions options;
    options.queue = consumer_queue.get();
    auto imported = ImportDeviceArray(&exported, on_device.data->type, options);
    EXPECT_EQ(exported.array.release, nullptr);
    faulty->ClearFaults();
    return FaultedImport{imported.status(), FetchedBytes(*on_device.data)};
  }

  Result<DeviceArray> ToDevice(const RecordBatchPtr& batch) {
    return CopyArrayTo(DeviceArray{batch->ToStructArray(), cpu(), nullptr}, device_);
  }

  Result<DeviceArray> ToHost(const DeviceArray& array) { return CopyArrayTo(array, cpu()); }

  Device* device_ = nullptr;
  std::unique_ptr<testing::Kernels> kernels_;
  size_t outstanding_before_ = 0;
};

// ---- Producer kernel → consumer kernel ----------------------------------------------

TEST_P(DeviceConformanceTest, ConsumerWaitsOnItsOwnQueueAndSumsWithItsKernel) {
  constexpr int64_t kRows = 1 << 16;
  QueuePtr producer_queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced,
                       Produce(device_, kernels_.get(), producer_queue.get(), kRows, 3));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  EXPECT_EQ(exported.device_type, static_cast<int32_t>(device_->type()));
  EXPECT_EQ(exported.device_id, device_->id());
  EXPECT_EQ(exported.sync_event, produced.event->sync_event());
  EXPECT_EQ(exported.sync_event != nullptr, has_events());
  EXPECT_EQ(exported.reserved[0] | exported.reserved[1] | exported.reserved[2], 0);

  QueuePtr consumer_queue = NewQueue(device_);
  CounterDelta delta;
  ImportOptions options;
  options.queue = consumer_queue.get();
  ASSERT_OK_AND_ASSIGN(DeviceArray imported,
                       ImportDeviceArray(&exported, produced.data->type, options));
  EXPECT_EQ(imported.device, device_);
  // Buffers stay where they are: the consumer sees the producer's addresses.
  EXPECT_EQ(ColumnValues(imported, 2), ColumnValues(produced, 2));
  if (has_events() && !host_readable()) {
    ASSERT_NE(imported.event, nullptr);
    EXPECT_EQ(imported.event->sync_event(), exported.sync_event);
  }
  for (int column = 0; column < 3; ++column) {
    ASSERT_OK_AND_ASSIGN(
        int64_t sum, kernels_->Sum(consumer_queue.get(), ColumnValues(imported, column), kRows));
    EXPECT_EQ(sum, SequenceSum(kRows, column * 1000)) << "column " << column;
  }
  EXPECT_EQ(delta(Counter::kZeroCopyImports), 1);
  EXPECT_EQ(delta(Counter::kEventWaits), has_events() ? 1 : 0);
  for (Counter copied : {Counter::kBytesCopiedD2H, Counter::kBytesCopiedH2D,
                         Counter::kBytesCopiedD2D, Counter::kBytesCopiedHost}) {
    EXPECT_EQ(delta(copied), 0) << telemetry::CounterName(copied);
  }
}

TEST_P(DeviceConformanceTest, ConsumerWaitsOnTheHostThenSums) {
  constexpr int64_t kRows = 1 << 15;
  QueuePtr producer_queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced,
                       Produce(device_, kernels_.get(), producer_queue.get(), kRows, 2, 7));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  CounterDelta delta;
  ASSERT_OK_AND_ASSIGN(DeviceArray imported, ImportDeviceArray(&exported, produced.data->type));
  EXPECT_EQ(imported.event, nullptr);  // the host waited: the data is ready
  EXPECT_EQ(delta(Counter::kEventWaits), has_events() ? 1 : 0);
  QueuePtr consumer_queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(int64_t sum,
                       kernels_->Sum(consumer_queue.get(), ColumnValues(imported, 1), kRows));
  EXPECT_EQ(sum, SequenceSum(kRows, 7 + 1000));
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), 0);
}

// ---- Release order ------------------------------------------------------------------

TEST_P(DeviceConformanceTest, ConsumerReleasesBeforeTheProducerDropsItsReferences) {
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced,
                       Produce(device_, kernels_.get(), queue.get(), 1000, 2));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  EXPECT_EQ(OutstandingExports().size(), outstanding_before_ + 1);
  ASSERT_OK_AND_ASSIGN(DeviceArray imported, ImportDeviceArray(&exported, produced.data->type));
  CounterDelta delta;
  imported = DeviceArray{};  // the consumer is done: the export is released now
  EXPECT_EQ(delta(Counter::kForeignReleases), 1);
  EXPECT_EQ(delta(Counter::kReleases), 3);  // root and two columns
  EXPECT_EQ(OutstandingExports().size(), outstanding_before_);
  // The producer's data is untouched by the release.
  ASSERT_OK_AND_ASSIGN(int64_t sum, kernels_->Sum(queue.get(), ColumnValues(produced, 1), 1000));
  EXPECT_EQ(sum, SequenceSum(1000, 1000));
}

TEST_P(DeviceConformanceTest, ProducerDropsItsReferencesBeforeTheConsumerReleases) {
  ArrowDeviceArray exported{};
  TypePtr type;
  {
    QueuePtr queue = NewQueue(device_);
    ASSERT_OK_AND_ASSIGN(DeviceArray produced,
                         Produce(device_, kernels_.get(), queue.get(), 4096, 2, 3));
    type = produced.data->type;
    ASSERT_OK(ExportDeviceArray(produced, &exported));
  }  // the producer's array, event and queue are gone; the export keeps what it needs
  QueuePtr consumer_queue = NewQueue(device_);
  ImportOptions options;
  options.queue = consumer_queue.get();
  ASSERT_OK_AND_ASSIGN(DeviceArray imported, ImportDeviceArray(&exported, type, options));
  ASSERT_OK_AND_ASSIGN(int64_t sum,
                       kernels_->Sum(consumer_queue.get(), ColumnValues(imported, 0), 4096));
  EXPECT_EQ(sum, SequenceSum(4096, 3));
  // A slice of a column outlives the rest of the import.
  ArrayDataPtr column = Slice(imported.data->children[1], 10, 20);
  imported = DeviceArray{};
  EXPECT_EQ(OutstandingExports().size(), outstanding_before_ + 1);
  ASSERT_OK_AND_ASSIGN(sum, kernels_->Sum(consumer_queue.get(),
                                          column->buffers[1]->data() + column->offset * 8, 20));
  EXPECT_EQ(sum, SequenceSum(20, 3 + 1000 + 10));
  CounterDelta delta;
  column.reset();
  EXPECT_EQ(delta(Counter::kForeignReleases), 1);
  EXPECT_EQ(OutstandingExports().size(), outstanding_before_);
}

TEST_P(DeviceConformanceTest, ConsumerReleasesWithoutImporting) {
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(), queue.get(), 64, 1));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  produced = DeviceArray{};
  exported.array.release(&exported.array);
  EXPECT_EQ(exported.array.release, nullptr);
}

// ---- Empty batches ---------------------------------------------------------------------

TEST_P(DeviceConformanceTest, EmptyBatchesCrossWithoutFetchingAnything) {
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(), queue.get(), 0, 2));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  ASSERT_OK_AND_ASSIGN(DeviceArray imported, ImportDeviceArray(&exported, produced.data->type));
  EXPECT_EQ(imported.data->length, 0);

  const RecordBatchPtr empty = VariableLengthBatch()->Slice(0, 0);
  ASSERT_OK_AND_ASSIGN(DeviceArray on_device, ToDevice(empty));
  CounterDelta delta;
  ASSERT_OK(ExportDeviceArray(on_device, &exported));
  ASSERT_OK_AND_ASSIGN(imported, ImportDeviceArray(&exported, on_device.data->type));
  // Nothing is fetched for the empty columns; the child of the empty struct
  // column "point" keeps its 20 labels, so their last offset is read.
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), host_readable() ? 0 : 4);
  EXPECT_EQ(imported.data->length, 0);
  ASSERT_OK_AND_ASSIGN(DeviceArray back, ToHost(imported));
  EXPECT_TRUE(ArrayEquals(*back.data, *empty->ToStructArray()));
}

// ---- Nested and variable-length columns, null bitmaps, slices --------------------------

TEST_P(DeviceConformanceTest, NestedAndVariableLengthColumnsFetchOnlyLastOffsetsAndViewSizes) {
  const RecordBatchPtr batch = VariableLengthBatch();
  const ArrayDataPtr host = batch->ToStructArray();
  ASSERT_OK_AND_ASSIGN(DeviceArray on_device, ToDevice(batch));
  ASSERT_EQ(on_device.device, device_);
  const int64_t variadic = VariadicBufferCount(*host);
  ASSERT_GE(variadic, 3);

  CounterDelta export_delta;
  ArrowDeviceArray exported{};
  ArrowSchema schema{};
  ASSERT_OK(ExportDeviceArray(on_device, &exported, &schema));
  // Only the variadic sizes of views travel to memory the host cannot read.
  EXPECT_EQ(export_delta(Counter::kBytesCopiedH2D), host_readable() ? 0 : 8 * variadic);
  EXPECT_EQ(export_delta(Counter::kBytesCopiedD2H), 0);

  CounterDelta import_delta;
  ASSERT_OK_AND_ASSIGN(DeviceArray imported, ImportDeviceArray(&exported, &schema));
  schema.release(&schema);
  EXPECT_EQ(import_delta(Counter::kBytesCopiedD2H), host_readable() ? 0 : FetchedBytes(*host));
  EXPECT_EQ(import_delta(Counter::kBytesCopiedH2D), 0);
  EXPECT_EQ(import_delta(Counter::kBytesCopiedHost), 0);
  // Data buffer sizes come from the fetched values.
  const ArrayData& names = *imported.data->children[0];
  EXPECT_EQ(names.buffers[2]->size(), host->children[0]->buffers[2]->size());
  EXPECT_EQ(names.null_count, host->children[0]->null_count);

  // The consumer reads on the device with its kernel.
  QueuePtr queue = NewQueue(device_);
  const BufferPtr& name_bytes = host->children[0]->buffers[2];
  int64_t expected_bytes_sum = 0;
  for (int64_t i = 0; i < name_bytes->size(); ++i) expected_bytes_sum += name_bytes->data()[i];
  ASSERT_OK_AND_ASSIGN(int64_t sum, kernels_->SumBytes(queue.get(), names.buffers[2]->data(),
                                                       names.buffers[2]->size()));
  EXPECT_EQ(sum, expected_bytes_sum);
  const ArrayData& list_items = *imported.data->children[1]->children[0];
  int64_t expected_items = 0;
  for (int64_t i = 0; i < list_items.length; ++i) {
    expected_items += host->children[1]->children[0]->GetValues<int64_t>(1)[i];
  }
  ASSERT_OK_AND_ASSIGN(
      sum, kernels_->Sum(queue.get(), list_items.buffers[1]->data(), list_items.length));
  EXPECT_EQ(sum, expected_items);

  ASSERT_OK_AND_ASSIGN(DeviceArray back, ToHost(imported));
  EXPECT_TRUE(ArrayEquals(*back.data, *host)) << ArrayToString(*back.data);
}

TEST_P(DeviceConformanceTest, NullBitmapsTravelWithTheirCounts) {
  Int64Builder builder;
  for (int64_t row = 0; row < 100; ++row) {
    ASSERT_OK(row % 3 == 0 ? builder.AppendNull() : builder.Append(row));
  }
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, builder.Finish());
  ASSERT_EQ(values->null_count, 34);
  ASSERT_OK_AND_ASSIGN(DeviceArray on_device,
                       CopyArrayTo(DeviceArray{values, cpu(), nullptr}, device_));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(on_device, &exported));
  EXPECT_EQ(exported.array.null_count, 34);
  CounterDelta delta;
  ASSERT_OK_AND_ASSIGN(DeviceArray imported, ImportDeviceArray(&exported, int64()));
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), 0);
  EXPECT_EQ(imported.data->null_count, 34);
  ASSERT_NE(imported.data->buffers[0], nullptr);
  EXPECT_EQ(imported.data->buffers[0]->size(), BytesForBits(100));
  ASSERT_OK_AND_ASSIGN(DeviceArray back, ToHost(imported));
  EXPECT_TRUE(ArrayEquals(*back.data, *values));
}

TEST_P(DeviceConformanceTest, SlicesFetchTheLastOffsetOfTheirEnd) {
  const RecordBatchPtr batch = VariableLengthBatch();
  ASSERT_OK_AND_ASSIGN(DeviceArray on_device, ToDevice(batch));
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr device_batch, RecordBatch::FromStructArray(on_device.data));
  const RecordBatchPtr sliced = device_batch->Slice(5, 10);
  ArrowDeviceArray exported{};
  ASSERT_OK(
      ExportDeviceArray(DeviceArray{sliced->ToStructArray(), device_, on_device.event}, &exported));
  const ArrowArray& names = *exported.array.children[0];
  EXPECT_EQ(names.offset, 5);
  // The host cannot count nulls in device memory: an unknown count stays -1.
  EXPECT_EQ(names.null_count,
            host_readable() ? batch->Slice(5, 10)->column(0)->GetNullCount() : -1);
  CounterDelta delta;
  ASSERT_OK_AND_ASSIGN(DeviceArray imported,
                       ImportDeviceArray(&exported, sliced->ToStructArray()->type));
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H),
            host_readable() ? 0 : FetchedBytes(*batch->ToStructArray()));
  ASSERT_OK_AND_ASSIGN(DeviceArray back, ToHost(imported));
  EXPECT_TRUE(ArrayEquals(*back.data, *batch->Slice(5, 10)->ToStructArray()));
}

// ---- Event timeouts ------------------------------------------------------------------

TEST_P(DeviceConformanceTest, AnEventThatNeverCompletesTimesOutAndReleasesTheArray) {
  if (!has_events()) GTEST_SKIP() << DeviceTypeName(device_->type()) << " arrays carry no event";
  ScopedDeviceOverride scope(device_->type(), device_->id());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<FaultyDevice> faulty, scope.InstallFaulty());
  ASSERT_OK_AND_ASSIGN(auto kernels, testing::KernelsFor(faulty.get()));
  QueuePtr queue = NewQueue(faulty.get());
  ASSERT_OK_AND_ASSIGN(DeviceArray produced,
                       Produce(faulty.get(), kernels.get(), queue.get(), 256, 1));
  faulty->SetEventsNeverComplete(true);
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  ImportOptions options;
  options.timeout = 20ms;
  const auto start = std::chrono::steady_clock::now();
  auto imported = ImportDeviceArray(&exported, produced.data->type, options);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
  EXPECT_EQ(imported.status().code(), StatusCode::kTimedOut);
  EXPECT_THAT(imported.status().message(), HasSubstr("host wait on the producer's sync event"));
  EXPECT_EQ(exported.array.release, nullptr);
  EXPECT_EQ(OutstandingExports().size(), outstanding_before_);
  faulty->ClearFaults();
}

TEST_P(DeviceConformanceTest, AStuckDeviceSideWaitFailsTheFetchCleanly) {
  if (!fetches_from_device_memory()) GTEST_SKIP() << kNeedsDeviceMemory;
  ASSERT_OK_AND_ASSIGN(FaultedImport stuck, ImportThroughFault([](FaultyDevice& faulty) {
                         faulty.SetEventsNeverComplete(true);
                       }));
  EXPECT_EQ(stuck.status.code(), StatusCode::kTimedOut);
  EXPECT_THAT(stuck.status.message(), HasSubstr("reading " + std::to_string(stuck.fetched_bytes) +
                                                " bytes of offsets and sizes"));
}

TEST_P(DeviceConformanceTest, AProducerStillRunningTimesOutAHostWait) {
  if (!has_events()) GTEST_SKIP() << DeviceTypeName(device_->type()) << " arrays carry no event";
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced,
                       Produce(device_, kernels_.get(), queue.get(), 128, 1, 0, 400ms));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  ImportOptions options;
  options.timeout = 1ms;
  auto imported = ImportDeviceArray(&exported, produced.data->type, options);
  EXPECT_EQ(imported.status().code(), StatusCode::kTimedOut);
  EXPECT_EQ(exported.array.release, nullptr);
  // The producer finishes later; its own wait succeeds.
  ASSERT_OK(produced.event->Wait(30s));
}

// ---- Device loss and absence -----------------------------------------------------------

TEST_P(DeviceConformanceTest, ADeviceLostAfterExportFailsTheImportCleanly) {
  ScopedDeviceOverride scope(device_->type(), device_->id());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<FaultyDevice> faulty, scope.InstallFaulty());
  ASSERT_OK_AND_ASSIGN(auto kernels, testing::KernelsFor(faulty.get()));
  QueuePtr queue = NewQueue(faulty.get());
  ASSERT_OK_AND_ASSIGN(DeviceArray produced,
                       Produce(faulty.get(), kernels.get(), queue.get(), 100, 2));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  faulty->LoseNow();
  auto imported = ImportDeviceArray(&exported, produced.data->type);
  EXPECT_EQ(imported.status().code(), StatusCode::kIOError);
  EXPECT_THAT(imported.status().message(), HasSubstr("device lost"));
  EXPECT_EQ(exported.array.release, nullptr);
  EXPECT_EQ(OutstandingExports().size(), outstanding_before_);

  // A consumer's queue of the lost device fails its wait instead of hanging.
  if (has_events()) {
    ASSERT_NE(produced.event->sync_event(), nullptr);
    Status waited = queue->WaitEvent(produced.event->sync_event());
    EXPECT_EQ(waited.code(), StatusCode::kIOError);
    EXPECT_THAT(waited.message(), HasSubstr("device lost"));
  }
  faulty->ClearFaults();
}

TEST_P(DeviceConformanceTest, ADeviceLostWhileImportReadsFailsCleanly) {
  if (!fetches_from_device_memory()) GTEST_SKIP() << kNeedsDeviceMemory;
  // The device-side wait goes through; the reads find the device lost.
  ASSERT_OK_AND_ASSIGN(FaultedImport lost,
                       ImportThroughFault([](FaultyDevice& faulty) { faulty.LoseAfter(1); }));
  EXPECT_EQ(lost.status.code(), StatusCode::kIOError);
  EXPECT_THAT(lost.status.message(), HasSubstr("device lost"));
}

TEST_P(DeviceConformanceTest, AnAbsentDeviceIsNamedAndTheArrayReleased) {
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(), queue.get(), 10, 1));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  ScopedDeviceOverride scope(device_->type(), device_->id());
  scope.MakeAbsent();
  auto imported = ImportDeviceArray(&exported, produced.data->type);
  EXPECT_FALSE(imported.ok());
  EXPECT_THAT(imported.status().message(),
              HasSubstr(std::string("the array's device, ") + DeviceTypeName(device_->type())));
  EXPECT_THAT(imported.status().message(), HasSubstr("is not available"));
  EXPECT_EQ(exported.array.release, nullptr);
}

TEST_P(DeviceConformanceTest, AQueueOfAnotherDeviceIsRefused) {
  if (device_->type() == DeviceType::kCpu) GTEST_SKIP() << "needs a device other than the CPU";
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(), queue.get(), 10, 1));
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported));
  QueuePtr cpu_queue = NewQueue(cpu());
  ImportOptions options;
  options.queue = cpu_queue.get();
  auto imported = ImportDeviceArray(&exported, produced.data->type, options);
  EXPECT_EQ(imported.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(imported.status().message(), HasSubstr("options.queue belongs to cpu"));
  EXPECT_EQ(exported.array.release, nullptr);
}

TEST_P(DeviceConformanceTest, BadDeviceFieldsAreRejected) {
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(), queue.get(), 10, 1));
  for (int variant = 0; variant < 2; ++variant) {
    ArrowDeviceArray exported{};
    ASSERT_OK(ExportDeviceArray(produced, &exported));
    if (variant == 0) exported.device_type = 5;
    if (variant == 1) exported.reserved[2] = -1;
    ImportOptions strict;
    strict.strict_reserved = true;
    auto imported = ImportDeviceArray(&exported, produced.data->type, strict);
    EXPECT_EQ(imported.status().code(), StatusCode::kInvalid);
    EXPECT_THAT(imported.status().message(),
                HasSubstr(variant == 0 ? "unknown Arrow device type 5" : "reserved[2] is -1"));
    EXPECT_EQ(exported.array.release, nullptr);
  }
}

// ---- Negotiated exports: exact copy counters ------------------------------------------

TEST_P(DeviceConformanceTest, ZeroCopyForAConsumerOfTheDeviceMovesNoBytes) {
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(), queue.get(), 512, 2));
  ConsumerCapabilities consumer;
  consumer.device_types = {device_->type()};
  if (has_events()) consumer.event_kinds = {device_->event_kind()};
  CounterDelta delta;
  ArrowDeviceArray exported{};
  ASSERT_OK_AND_ASSIGN(ExchangePlan plan, ExportDeviceArrayFor(produced, consumer, &exported));
  EXPECT_EQ(plan.mode, has_events() ? ExchangeMode::kZeroCopyDeviceWait : ExchangeMode::kZeroCopy);
  for (Counter copied : {Counter::kBytesCopiedD2H, Counter::kBytesCopiedH2D,
                         Counter::kBytesCopiedD2D, Counter::kBytesCopiedHost}) {
    EXPECT_EQ(delta(copied), 0) << telemetry::CounterName(copied);
  }
  EXPECT_EQ(exported.array.children[0]->buffers[1], ColumnValues(produced, 0));
  exported.array.release(&exported.array);
}

TEST_P(DeviceConformanceTest, CopyToTheHostCountsExactlyTheBuffersD2H) {
  if (host_readable()) GTEST_SKIP() << "host-accessible memory is read in place, not copied";
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(), queue.get(), 777, 2));
  CounterDelta delta;
  ArrowDeviceArray exported{};
  ASSERT_OK_AND_ASSIGN(ExchangePlan plan,
                       ExportDeviceArrayFor(produced, ConsumerCapabilities{}, &exported));
  EXPECT_EQ(plan.mode, ExchangeMode::kCopy);
  EXPECT_EQ(plan.direction, CopyDirection::kDeviceToHost);
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), 2 * 777 * 8);
  EXPECT_EQ(delta(Counter::kBytesCopiedH2D), 0);
  EXPECT_EQ(delta(Counter::kBytesCopiedD2D), 0);
  EXPECT_EQ(exported.device_type, ARROW_DEVICE_CPU);
  EXPECT_EQ(exported.sync_event, nullptr);
  ASSERT_OK_AND_ASSIGN(DeviceArray imported, ImportDeviceArray(&exported, produced.data->type));
  const int64_t* values = imported.data->children[1]->GetValues<int64_t>(1);
  EXPECT_EQ(std::accumulate(values, values + 777, int64_t{0}), SequenceSum(777, 1000));
}

TEST_P(DeviceConformanceTest, CopyFromTheHostCountsExactlyTheBuffersH2D) {
  if (host_readable()) GTEST_SKIP() << "host-accessible memory needs no upload";
  const RecordBatchPtr batch = VariableLengthBatch();
  const DeviceArray on_host{batch->ToStructArray(), cpu(), nullptr};
  ConsumerCapabilities consumer;
  consumer.device_types = {device_->type()};
  consumer.device_ids = {device_->id()};
  CounterDelta delta;
  ArrowDeviceArray exported{};
  ASSERT_OK_AND_ASSIGN(ExchangePlan plan, ExportDeviceArrayFor(on_host, consumer, &exported));
  EXPECT_EQ(plan.mode, ExchangeMode::kCopy);
  EXPECT_EQ(plan.direction, CopyDirection::kHostToDevice);
  // The buffers, plus the variadic sizes the device export places there.
  EXPECT_EQ(delta(Counter::kBytesCopiedH2D),
            BufferBytes(*on_host.data) + 8 * VariadicBufferCount(*on_host.data));
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), 0);
  EXPECT_EQ(exported.device_type, static_cast<int32_t>(device_->type()));
  ASSERT_OK_AND_ASSIGN(DeviceArray imported, ImportDeviceArray(&exported, on_host.data->type));
  ASSERT_OK_AND_ASSIGN(DeviceArray back, ToHost(imported));
  EXPECT_TRUE(ArrayEquals(*back.data, *on_host.data));
}

TEST_P(DeviceConformanceTest, AWriterWithoutALeaseGetsAnOwnedCopyOnTheDevice) {
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(), queue.get(), 300, 2));
  ConsumerCapabilities writer;
  writer.device_types = {device_->type()};
  if (has_events()) writer.event_kinds = {device_->event_kind()};
  writer.needs_write = true;
  CounterDelta delta;
  ArrowDeviceArray exported{};
  ASSERT_OK_AND_ASSIGN(ExchangePlan plan, ExportDeviceArrayFor(produced, writer, &exported));
  EXPECT_EQ(plan.mode, ExchangeMode::kCopy);
  const Counter expected = host_readable() ? Counter::kBytesCopiedHost : Counter::kBytesCopiedD2D;
  EXPECT_EQ(delta(expected), 2 * 300 * 8);
  EXPECT_NE(exported.array.children[0]->buffers[1], ColumnValues(produced, 0));
  exported.array.release(&exported.array);

  // With a lease the same writer gets the producer's buffers.
  ASSERT_OK_AND_ASSIGN(auto lease, ExclusiveLease::Grant(produced));
  writer.exclusive_lease = true;
  ExportOptions options;
  options.lease = lease;
  CounterDelta leased_delta;
  ASSERT_OK_AND_ASSIGN(plan, ExportDeviceArrayFor(produced, writer, &exported, nullptr, options));
  EXPECT_NE(plan.mode, ExchangeMode::kCopy);
  EXPECT_EQ(leased_delta(expected), 0);
  EXPECT_EQ(exported.array.children[0]->buffers[1], ColumnValues(produced, 0));
  exported.array.release(&exported.array);
}

// ---- Guard mode ----------------------------------------------------------------------------

TEST_P(DeviceConformanceTest, GuardNamesTheColumnAConsumerWroteInto) {
  constexpr int64_t kRows = 2048;
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced,
                       Produce(device_, kernels_.get(), queue.get(), kRows, 2));
  ExportOptions options;
  options.guard = true;
  CounterDelta delta;
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported, nullptr, options));
  // Guard mode copies device memory to the host to checksum it: counted.
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), host_readable() ? 0 : 2 * kRows * 8);

  QueuePtr consumer_queue = NewQueue(device_);
  ImportOptions import_options;
  import_options.queue = consumer_queue.get();
  ASSERT_OK_AND_ASSIGN(DeviceArray imported,
                       ImportDeviceArray(&exported, produced.data->type, import_options));
  // A misbehaving consumer overwrites column c1 with its own kernel.
  void* c1 = const_cast<void*>(ColumnValues(imported, 1));
  ASSERT_OK(kernels_->FillSequence(consumer_queue.get(), c1, kRows, -5));
  ASSERT_OK(consumer_queue->Synchronize());
  imported = DeviceArray{};  // release: the guard verifies

  const auto violations = GuardViolations();
  ASSERT_THAT(violations, SizeIs(1));
  EXPECT_EQ(violations[0].column_path, "col 'c1'");
  EXPECT_EQ(violations[0].buffer_index, 1);
  EXPECT_THAT(violations[0].message, HasSubstr("changed between export and release"));
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), host_readable() ? 0 : 2 * 2 * kRows * 8);
  ClearGuardViolations();
}

TEST_P(DeviceConformanceTest, GuardIsQuietWhenNobodyWrites) {
  QueuePtr queue = NewQueue(device_);
  ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(), queue.get(), 100, 3));
  ExportOptions options;
  options.guard = true;
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(produced, &exported, nullptr, options));
  exported.array.release(&exported.array);
  EXPECT_THAT(GuardViolations(), IsEmpty());
}

// ---- Device streams ---------------------------------------------------------------------

TEST_P(DeviceConformanceTest, AStreamOfKernelBatchesArrivesInOrder) {
  constexpr int64_t kRows = 1000;
  QueuePtr producer_queue = NewQueue(device_);
  std::vector<DeviceBatch> batches;
  for (int chunk = 0; chunk < 3; ++chunk) {
    ASSERT_OK_AND_ASSIGN(DeviceArray produced, Produce(device_, kernels_.get(),
                                                       producer_queue.get(), kRows, 2, chunk * 7));
    ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, RecordBatch::FromStructArray(produced.data));
    batches.push_back(DeviceBatch{batch, device_, produced.event});
  }
  ASSERT_OK_AND_ASSIGN(auto reader,
                       DeviceBatchReader::FromBatches(Int64Schema(2), device_->type(), batches));
  batches.clear();
  ArrowDeviceArrayStream stream{};
  ASSERT_OK(ExportDeviceBatchReader(reader, &stream));
  EXPECT_EQ(stream.device_type, static_cast<int32_t>(device_->type()));
  QueuePtr consumer_queue = NewQueue(device_);
  ImportOptions options;
  options.queue = consumer_queue.get();
  ASSERT_OK_AND_ASSIGN(auto imported, ImportDeviceBatchReader(&stream, options));
  for (int chunk = 0; chunk < 3; ++chunk) {
    ASSERT_OK_AND_ASSIGN(DeviceBatch next, imported->Next());
    ASSERT_NE(next.batch, nullptr);
    EXPECT_EQ(next.device, device_);
    const ArrayData& column = *next.batch->column(1);
    ASSERT_OK_AND_ASSIGN(int64_t sum,
                         kernels_->Sum(consumer_queue.get(), column.buffers[1]->data(), kRows));
    EXPECT_EQ(sum, SequenceSum(kRows, chunk * 7 + 1000)) << "chunk " << chunk;
  }
  ASSERT_OK_AND_ASSIGN(DeviceBatch end, imported->Next());
  EXPECT_EQ(end.batch, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceConformanceTest, ::testing::ValuesIn(ConformanceDevices()),
                         CaseName);

}  // namespace
}  // namespace ferry::device
