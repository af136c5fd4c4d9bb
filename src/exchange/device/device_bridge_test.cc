// Unit tests of the C Device Data bridge that need no device but the CPU:
// the checks on foreign input, the struct fields, release rules, guard
// mode, the leak check, leases, negotiation on the CPU, device streams, and
// the device-memory import path of the C Data bridge (driven by a reader
// that serves host memory, counting what is read). The same behaviour on
// real devices is in conformance_test.cc.
#include "ferry/device/device_bridge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exchange/bridge_internal.h"
#include "ferry/base/telemetry.h"
#include "ferry/device/fault.h"
#include "ferry/exchange/bridge.h"
#include "ferry/exchange/builder.h"
#include "testing/test_util.h"

namespace ferry::device {
namespace {

using ::ferry::testing::CounterDelta;
using telemetry::Counter;
using telemetry::FallbackReason;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

Device* Cpu() { return DeviceRegistry::Global().cpu(); }

ArrayDataPtr Int64s(const std::vector<int64_t>& values) {
  Int64Builder builder;
  EXPECT_TRUE(builder.AppendValues(values).ok());
  auto finished = builder.Finish();
  EXPECT_TRUE(finished.ok()) << finished.status().ToString();
  return *finished;
}

ArrayDataPtr Strings(const std::vector<std::string>& values) {
  Utf8Builder builder;
  for (const auto& value : values) EXPECT_TRUE(builder.Append(value).ok());
  auto finished = builder.Finish();
  EXPECT_TRUE(finished.ok()) << finished.status().ToString();
  return *finished;
}

// list<int64> with the given elements.
ArrayDataPtr Lists(const std::vector<std::vector<int64_t>>& elements) {
  ListBuilder builder(list(field("item", int64())));
  auto* values = static_cast<FixedWidthBuilder<int64_t>*>(builder.value_builder());
  for (const auto& element : elements) {
    EXPECT_TRUE(builder.Append().ok());
    for (int64_t value : element) EXPECT_TRUE(values->Append(value).ok());
  }
  auto finished = builder.Finish();
  EXPECT_TRUE(finished.ok()) << finished.status().ToString();
  return *finished;
}

// utf8_view with small blocks, so that long values spread over several
// variadic data buffers.
ArrayDataPtr StringViews(const std::vector<std::string>& values) {
  Utf8ViewBuilder builder(default_memory_pool(), /*block_size=*/64);
  for (const auto& value : values) EXPECT_TRUE(builder.Append(value).ok());
  auto finished = builder.Finish();
  EXPECT_TRUE(finished.ok()) << finished.status().ToString();
  return *finished;
}

RecordBatchPtr Batch(std::vector<std::string> names, std::vector<ArrayDataPtr> columns) {
  auto schema = std::make_shared<Schema>();
  for (size_t i = 0; i < names.size(); ++i) {
    schema->fields.push_back(field(names[i], columns[i]->type));
  }
  auto batch = RecordBatch::Make(schema, columns.empty() ? 0 : columns[0]->length, columns);
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return *batch;
}

RecordBatchPtr SampleBatch() {
  return Batch({"a", "b"}, {Int64s({1, 2, 3, 4}), Int64s({10, 20, 30, 40})});
}

DeviceArray OnCpu(const RecordBatchPtr& batch) {
  return DeviceArray{batch->ToStructArray(), Cpu(), nullptr};
}

bool IsOutstanding(size_t count_before) { return OutstandingExports().size() > count_before; }

// ---- Export -------------------------------------------------------------------

TEST(DeviceBridgeTest, ExportFillsTheDeviceFieldsAndCountsAZeroCopyExport) {
  CounterDelta delta;
  const auto batch = SampleBatch();
  ArrowDeviceArray exported;
  std::memset(&exported, 0xAB, sizeof(exported));  // garbage in: every field must be set
  ArrowSchema schema{};
  ASSERT_OK(ExportDeviceArray(OnCpu(batch), &exported, &schema));
  EXPECT_EQ(exported.device_type, ARROW_DEVICE_CPU);
  EXPECT_EQ(exported.device_id, -1);
  EXPECT_EQ(exported.sync_event, nullptr);
  EXPECT_EQ(exported.reserved[0], 0);
  EXPECT_EQ(exported.reserved[1], 0);
  EXPECT_EQ(exported.reserved[2], 0);
  EXPECT_EQ(exported.array.length, 4);
  EXPECT_EQ(exported.array.n_children, 2);
  EXPECT_EQ(delta(Counter::kZeroCopyExports), 1);

  auto imported = ImportDeviceArray(&exported, &schema);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  schema.release(&schema);
  EXPECT_EQ(exported.array.release, nullptr);  // moved into the import
  EXPECT_EQ(imported->device, Cpu());
  EXPECT_EQ(imported->event, nullptr);
  EXPECT_TRUE(ArrayEquals(*imported->data, *batch->ToStructArray()));
  EXPECT_EQ(delta(Counter::kZeroCopyImports), 1);
  EXPECT_EQ(delta(Counter::kBytesCopiedHost), 0);
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), 0);
}

TEST(DeviceBridgeTest, ExportRejectsMissingPiecesAndMismatchedEvents) {
  ArrowDeviceArray out{};
  Status status = ExportDeviceArray(OnCpu(SampleBatch()), nullptr);
  EXPECT_THAT(status.message(), HasSubstr("output ArrowDeviceArray is NULL"));

  status = ExportDeviceArray(DeviceArray{nullptr, Cpu(), nullptr}, &out);
  EXPECT_THAT(status.message(), HasSubstr("has no data"));
  EXPECT_EQ(out.array.release, nullptr);

  status = ExportDeviceArray(DeviceArray{Int64s({1}), nullptr, nullptr}, &out);
  EXPECT_THAT(status.message(), HasSubstr("has no device"));

  // An OpenCL-kind event cannot describe CPU data.
  class OpenCLKindEvent final : public Event {
   public:
    EventKind kind() const override { return EventKind::kOpenCL; }
    void* sync_event() override { return &handle_; }
    Status Wait(std::chrono::nanoseconds) override { return Status::OK(); }

   private:
    void* handle_ = nullptr;
  };
  status =
      ExportDeviceArray(DeviceArray{Int64s({1}), Cpu(), std::make_shared<OpenCLKindEvent>()}, &out);
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_THAT(status.message(), HasSubstr("the array's event is a opencl event"));
  EXPECT_EQ(out.array.release, nullptr);
}

TEST(DeviceBridgeTest, ExportOnALostDeviceFails) {
  ScopedDeviceOverride scope(DeviceType::kCpu, -1);
  auto faulty = scope.InstallFaulty();
  ASSERT_TRUE(faulty.ok()) << faulty.status().ToString();
  (*faulty)->LoseNow();
  ArrowDeviceArray out{};
  Status status = ExportDeviceArray(DeviceArray{Int64s({1, 2}), faulty->get(), nullptr}, &out);
  EXPECT_THAT(status.message(), HasSubstr("device lost"));
  EXPECT_EQ(out.array.release, nullptr);
}

TEST(DeviceBridgeTest, ReleaseRunsOnceAndASecondCallIsCountedAsAnError) {
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(OnCpu(SampleBatch()), &exported));
  auto release = exported.array.release;
  CounterDelta delta;
  release(&exported.array);
  EXPECT_EQ(exported.array.release, nullptr);
  EXPECT_EQ(delta(Counter::kReleases), 3);  // the root and its two children, once each
  release(&exported.array);                 // through a saved pointer: counted, nothing touched
  EXPECT_EQ(delta(Counter::kReleaseErrors), 1);
}

TEST(DeviceBridgeTest, ChildrenMovedOutOutliveTheParent) {
  const auto batch = SampleBatch();
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(OnCpu(batch), &exported));
  ArrowArray child{};
  MoveArray(exported.array.children[1], &child);
  exported.array.release(&exported.array);
  auto imported = ImportArray(&child, int64());
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_TRUE(ArrayEquals(**imported, *batch->column(1)));
}

// ---- Import: bad input ------------------------------------------------------------

class ImportBadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    outstanding_before_ = OutstandingExports().size();
    ASSERT_OK(ExportDeviceArray(OnCpu(SampleBatch()), &exported_));
    type_ = SampleBatch()->ToStructArray()->type;
  }
  // The import released the producer's export, as it must on failure.
  void ExpectReleased() {
    EXPECT_EQ(exported_.array.release, nullptr);
    EXPECT_FALSE(IsOutstanding(outstanding_before_));
  }
  void TearDown() override {
    if (exported_.array.release != nullptr) exported_.array.release(&exported_.array);
  }

  ArrowDeviceArray exported_{};
  TypePtr type_;
  size_t outstanding_before_ = 0;
};

TEST_F(ImportBadInputTest, NullPointer) {
  auto imported = ImportDeviceArray(nullptr, type_);
  EXPECT_THAT(imported.status().message(), HasSubstr("ArrowDeviceArray pointer is NULL"));
}

TEST_F(ImportBadInputTest, AlreadyReleased) {
  exported_.array.release(&exported_.array);
  CounterDelta delta;
  auto imported = ImportDeviceArray(&exported_, type_);
  EXPECT_EQ(imported.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(imported.status().message(), HasSubstr("already released"));
  EXPECT_EQ(delta(Counter::kReleaseErrors), 1);
}

TEST_F(ImportBadInputTest, UnknownDeviceType) {
  exported_.device_type = 5;  // between OPENCL (4) and VULKAN (7): not in the spec
  CounterDelta delta;
  auto imported = ImportDeviceArray(&exported_, type_);
  EXPECT_EQ(imported.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(imported.status().message(), HasSubstr("unknown Arrow device type 5"));
  EXPECT_EQ(delta(Counter::kValidationErrors), 1);
  ExpectReleased();
}

TEST_F(ImportBadInputTest, ReservedWordsAreIgnoredUnlessStrict) {
  // Arrow C++ producers leave the reserved words uninitialised.
  exported_.reserved[0] = 0x5eed;
  auto imported = ImportDeviceArray(&exported_, type_);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(exported_.array.release, nullptr);
}

TEST_F(ImportBadInputTest, NonZeroReservedWord) {
  exported_.reserved[1] = 7;
  ImportOptions strict;
  strict.strict_reserved = true;
  auto imported = ImportDeviceArray(&exported_, type_, strict);
  EXPECT_EQ(imported.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(imported.status().message(), HasSubstr("reserved[1] is 7"));
  ExpectReleased();
}

TEST_F(ImportBadInputTest, SyncEventOnTheCpu) {
  void* handle = nullptr;
  exported_.sync_event = &handle;
  auto imported = ImportDeviceArray(&exported_, type_);
  EXPECT_EQ(imported.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(imported.status().message(), HasSubstr("sync_event is set, but cpu arrays"));
  ExpectReleased();
}

TEST_F(ImportBadInputTest, DeviceWithoutABackendIsNamed) {
  exported_.device_type = ARROW_DEVICE_VULKAN;
  exported_.device_id = 0;
  auto imported = ImportDeviceArray(&exported_, type_);
  EXPECT_EQ(imported.status().code(), StatusCode::kNotImplemented);
  EXPECT_THAT(imported.status().message(),
              HasSubstr("the array's device, vulkan device 0, is not available"));
  ExpectReleased();
}

TEST_F(ImportBadInputTest, AbsentCpu) {
  ScopedDeviceOverride scope(DeviceType::kCpu, -1);
  scope.MakeAbsent();
  auto imported = ImportDeviceArray(&exported_, type_);
  EXPECT_FALSE(imported.ok());
  EXPECT_THAT(imported.status().message(), HasSubstr("the array's device, cpu, is not available"));
  ExpectReleased();
}

TEST_F(ImportBadInputTest, NullType) {
  auto imported = ImportDeviceArray(&exported_, TypePtr());
  EXPECT_THAT(imported.status().message(), HasSubstr("no type"));
  ExpectReleased();
}

TEST_F(ImportBadInputTest, BadSchema) {
  ArrowSchema schema{};
  ASSERT_OK(ExportType(*int64(), &schema));
  schema.format = "Q";  // not a format string
  auto imported = ImportDeviceArray(&exported_, &schema);
  schema.format = "l";
  schema.release(&schema);
  EXPECT_THAT(imported.status().message(), HasSubstr("unknown format string 'Q'"));
  ExpectReleased();
}

TEST_F(ImportBadInputTest, TypeThatDoesNotMatchTheArray) {
  auto imported = ImportDeviceArray(&exported_, int64());
  EXPECT_THAT(imported.status().message(),
              HasSubstr("cpu: array: n_buffers is 1 but type int64 needs 2"));
  ExpectReleased();
}

TEST_F(ImportBadInputTest, LostDevice) {
  ScopedDeviceOverride scope(DeviceType::kCpu, -1);
  auto faulty = scope.InstallFaulty();
  ASSERT_TRUE(faulty.ok());
  (*faulty)->LoseNow();
  auto imported = ImportDeviceArray(&exported_, type_);
  EXPECT_EQ(imported.status().code(), StatusCode::kIOError);
  EXPECT_THAT(imported.status().message(), HasSubstr("cpu is not usable"));
  EXPECT_THAT(imported.status().message(), HasSubstr("device lost"));
  ExpectReleased();
}

// ---- Guard mode -----------------------------------------------------------------

TEST(DeviceBridgeGuardTest, ReportsTheColumnAConsumerWroteInto) {
  ClearGuardViolations();
  const auto batch =
      Batch({"a", "b", "tags"}, {Int64s({1, 2, 3}), Int64s({4, 5, 6}), Lists({{1}, {2, 3}, {}})});
  ExportOptions options;
  options.guard = true;
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(OnCpu(batch), &exported, nullptr, options));
  // A misbehaving consumer writes into column 'b' and into the list values.
  auto* b_values = static_cast<int64_t*>(const_cast<void*>(exported.array.children[1]->buffers[1]));
  b_values[1] = 99;
  const ArrowArray* list_values = exported.array.children[2]->children[0];
  static_cast<int64_t*>(const_cast<void*>(list_values->buffers[1]))[0] = -1;
  exported.array.release(&exported.array);

  const auto violations = GuardViolations();
  ASSERT_THAT(violations, SizeIs(2));
  EXPECT_EQ(violations[0].column_path, "col 'b'");
  EXPECT_EQ(violations[0].buffer_index, 1);
  EXPECT_EQ(violations[0].device, "cpu");
  EXPECT_THAT(violations[0].message, HasSubstr("changed between export and release"));
  EXPECT_EQ(violations[1].column_path, "col 'tags'.item");
  ClearGuardViolations();
  EXPECT_THAT(GuardViolations(), IsEmpty());
}

TEST(DeviceBridgeGuardTest, AnUntouchedExportHasNoViolation) {
  ClearGuardViolations();
  ExportOptions options;
  options.guard = true;
  ArrowDeviceArray exported{};
  ASSERT_OK(ExportDeviceArray(OnCpu(SampleBatch()), &exported, nullptr, options));
  auto imported = ImportDeviceArray(&exported, SampleBatch()->ToStructArray()->type);
  ASSERT_TRUE(imported.ok());
  imported = Status::Cancelled("drop the import");  // releases the export
  EXPECT_THAT(GuardViolations(), IsEmpty());
}

TEST(DeviceBridgeGuardTest, NonBatchRootIsNamedArray) {
  ClearGuardViolations();
  ExportOptions options;
  options.guard = true;
  ArrowDeviceArray exported{};
  ASSERT_OK(
      ExportDeviceArray(DeviceArray{Int64s({7, 8}), Cpu(), nullptr}, &exported, nullptr, options));
  static_cast<int64_t*>(const_cast<void*>(exported.array.buffers[1]))[0] = 0;
  exported.array.release(&exported.array);
  const auto violations = GuardViolations();
  ASSERT_THAT(violations, SizeIs(1));
  EXPECT_EQ(violations[0].column_path, "array");
  ClearGuardViolations();
}

// ---- Leak check -------------------------------------------------------------------

TEST(DeviceBridgeLeakTest, AConsumerThatNeverReleasesIsReported) {
  const size_t before = OutstandingExports().size();
  ArrowDeviceArray forgotten{};
  ASSERT_OK(ExportDeviceArray(OnCpu(SampleBatch()), &forgotten));
  const auto outstanding = OutstandingExports();
  ASSERT_EQ(outstanding.size(), before + 1);
  const OutstandingExport& entry = outstanding.back();
  EXPECT_EQ(entry.device_type, DeviceType::kCpu);
  EXPECT_EQ(entry.num_columns, 2);
  EXPECT_EQ(entry.bytes, 2 * 4 * 8);
  const std::string report = LeakReport();
  EXPECT_THAT(report, HasSubstr("never released"));
  EXPECT_THAT(report, HasSubstr("export #" + std::to_string(entry.id) +
                                ": cpu (cpu), 2 columns, "
                                "64 bytes"));
  forgotten.array.release(&forgotten.array);
  EXPECT_EQ(OutstandingExports().size(), before);
  if (before == 0) {
    EXPECT_EQ(LeakReport(), "no outstanding device exports\n");
  }
}

// Exports a batch that nobody releases and exits; the export stays reachable
// from a static so that LeakSanitizer does not count it.
void ExitWithAnOutstandingExport(const char* mode) {
  setenv("FERRY_LEAK_CHECK", mode, 1);
  static auto* kept = new ArrowDeviceArray{};
  if (!ExportDeviceArray(OnCpu(SampleBatch()), kept).ok()) std::_Exit(3);
  std::exit(0);
}

TEST(DeviceBridgeLeakDeathTest, LeakCheckAtExitPrintsTheReport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExitWithAnOutstandingExport("1"), ::testing::ExitedWithCode(0),
              "ferry: leak check: 1 device export was never released");
}

TEST(DeviceBridgeLeakDeathTest, LeakCheckAbortExitsNonZero) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExitWithAnOutstandingExport("abort"), ::testing::ExitedWithCode(1),
              "never released by their consumer|was never released");
}

// ---- Leases and negotiation on the CPU -------------------------------------------------

TEST(DeviceBridgeLeaseTest, OneLeaseAtATime) {
  const DeviceArray array = OnCpu(SampleBatch());
  auto first = ExclusiveLease::Grant(array);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE((*first)->Covers(array));
  EXPECT_FALSE((*first)->Covers(OnCpu(SampleBatch())));
  auto second = ExclusiveLease::Grant(array);
  EXPECT_EQ(second.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(second.status().message(), HasSubstr("already leased"));
  first = Status::Cancelled("lease ended");
  auto again = ExclusiveLease::Grant(array);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_THAT(ExclusiveLease::Grant(DeviceArray{}).status().message(), HasSubstr("no data"));
}

TEST(DeviceBridgeLeaseTest, AWriterWithALeaseGetsZeroCopyAndOneWithoutIsRefused) {
  const DeviceArray array = OnCpu(SampleBatch());
  ConsumerCapabilities writer;
  writer.needs_write = true;
  writer.exclusive_lease = true;
  ArrowDeviceArray out{};
  auto refused = ExportDeviceArrayFor(array, writer, &out);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(refused.status().message(), HasSubstr("ExclusiveLease::Grant"));
  EXPECT_EQ(out.array.release, nullptr);

  ClearGuardViolations();
  auto lease = ExclusiveLease::Grant(array);
  ASSERT_TRUE(lease.ok());
  ExportOptions options;
  options.lease = *lease;
  options.guard = true;  // writes under a lease are allowed: no violation
  CounterDelta delta;
  auto plan = ExportDeviceArrayFor(array, writer, &out, nullptr, options);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->mode, ExchangeMode::kZeroCopy);
  EXPECT_EQ(delta(Counter::kBytesCopiedHost), 0);
  // The export holds the lease: a second one is refused until release.
  lease = Status::Cancelled("the producer drops its reference");
  options.lease = nullptr;
  EXPECT_FALSE(ExclusiveLease::Grant(array).ok());
  static_cast<int64_t*>(const_cast<void*>(out.array.children[0]->buffers[1]))[0] = 5;
  out.array.release(&out.array);
  EXPECT_THAT(GuardViolations(), IsEmpty());
  EXPECT_TRUE(ExclusiveLease::Grant(array).ok());
}

TEST(DeviceBridgeNegotiationTest, CpuToCpuIsZeroCopy) {
  CounterDelta delta;
  ArrowDeviceArray out{};
  auto plan = ExportDeviceArrayFor(OnCpu(SampleBatch()), ConsumerCapabilities{}, &out);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->mode, ExchangeMode::kZeroCopy);
  EXPECT_EQ(out.device_type, ARROW_DEVICE_CPU);
  EXPECT_EQ(delta(Counter::kBytesCopiedHost), 0);
  out.array.release(&out.array);
}

TEST(DeviceBridgeNegotiationTest, AWriterWithoutALeaseGetsACountedOwnedCopy) {
  const auto batch = SampleBatch();
  ConsumerCapabilities writer;
  writer.needs_write = true;
  CounterDelta delta;
  const int64_t write_fallbacks = telemetry::GetFallback(FallbackReason::kConsumerNeedsWrite);
  ArrowDeviceArray out{};
  auto plan = ExportDeviceArrayFor(OnCpu(batch), writer, &out);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->mode, ExchangeMode::kCopy);
  EXPECT_EQ(plan->reason, FallbackReason::kConsumerNeedsWrite);
  EXPECT_EQ(delta(Counter::kBytesCopiedHost), 2 * 4 * 8);  // both int64 columns, once
  EXPECT_EQ(telemetry::GetFallback(FallbackReason::kConsumerNeedsWrite), write_fallbacks + 1);
  // The copy is the consumer's own: writing into it leaves the batch as it was.
  EXPECT_NE(out.array.children[0]->buffers[1], batch->column(0)->buffers[1]->data());
  auto imported = ImportDeviceArray(&out, batch->ToStructArray()->type);
  ASSERT_TRUE(imported.ok());
  EXPECT_TRUE(ArrayEquals(*imported->data, *batch->ToStructArray()));
}

TEST(DeviceBridgeNegotiationTest, RefusalCarriesThePlansExplanation) {
  ConsumerCapabilities vulkan_only;
  vulkan_only.device_types = {DeviceType::kVulkan};
  ArrowDeviceArray out{};
  const int64_t unsupported = telemetry::GetFallback(FallbackReason::kUnsupportedDeviceType);
  auto plan = ExportDeviceArrayFor(OnCpu(SampleBatch()), vulkan_only, &out);
  EXPECT_EQ(plan.status().code(), StatusCode::kNotImplemented);
  EXPECT_THAT(plan.status().message(), HasSubstr("ExportDeviceArrayFor: "));
  EXPECT_THAT(plan.status().message(), HasSubstr("unsupported_device_type"));
  EXPECT_EQ(telemetry::GetFallback(FallbackReason::kUnsupportedDeviceType), unsupported + 1);
  EXPECT_EQ(out.array.release, nullptr);

  ConsumerCapabilities no_copies;
  no_copies.needs_write = true;
  no_copies.allow_copy = false;
  plan = ExportDeviceArrayFor(OnCpu(SampleBatch()), no_copies, &out);
  EXPECT_EQ(plan.status().code(), StatusCode::kNotImplemented);
  EXPECT_THAT(plan.status().message(), HasSubstr("consumer_needs_write"));
}

// ---- Device streams on the CPU ----------------------------------------------------------

SchemaPtr SampleSchema() { return SampleBatch()->schema(); }

TEST(DeviceStreamTest, RoundTripOfEveryChunkThenTheEnd) {
  std::vector<DeviceBatch> batches;
  std::vector<RecordBatchPtr> originals;
  for (int64_t chunk = 0; chunk < 3; ++chunk) {
    originals.push_back(Batch({"a", "b"}, {Int64s({chunk, chunk + 1}), Int64s({7, 8})}));
    batches.push_back(DeviceBatch{originals.back(), Cpu(), nullptr});
  }
  auto reader = DeviceBatchReader::FromBatches(SampleSchema(), DeviceType::kCpu, batches);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ArrowDeviceArrayStream stream{};
  ASSERT_OK(ExportDeviceBatchReader(*reader, &stream));
  EXPECT_EQ(stream.device_type, ARROW_DEVICE_CPU);
  CounterDelta delta;
  auto imported = ImportDeviceBatchReader(&stream);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(stream.release, nullptr);
  EXPECT_EQ((*imported)->device_type(), DeviceType::kCpu);
  EXPECT_TRUE((*imported)->schema()->Equals(*SampleSchema(), false));
  for (const auto& original : originals) {
    auto next = (*imported)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    ASSERT_NE(next->batch, nullptr);
    EXPECT_EQ(next->device, Cpu());
    EXPECT_TRUE(next->batch->Equals(*original));
  }
  for (int repeat = 0; repeat < 2; ++repeat) {
    auto end = (*imported)->Next();
    ASSERT_TRUE(end.ok());
    EXPECT_EQ(end->batch, nullptr);
  }
  EXPECT_EQ(delta(Counter::kStreamBatchesExported), 3);
  EXPECT_EQ(delta(Counter::kStreamBatchesImported), 3);
}

TEST(DeviceStreamTest, FromBatchesChecksEveryBatch) {
  const auto batch = SampleBatch();
  auto null_batch = DeviceBatchReader::FromBatches(SampleSchema(), DeviceType::kCpu,
                                                   {DeviceBatch{nullptr, Cpu(), nullptr}});
  EXPECT_THAT(null_batch.status().message(), HasSubstr("batch 0 is null"));
  auto no_device = DeviceBatchReader::FromBatches(SampleSchema(), DeviceType::kCpu,
                                                  {DeviceBatch{batch, nullptr, nullptr}});
  EXPECT_THAT(no_device.status().message(), HasSubstr("has no device"));
  auto other_type = DeviceBatchReader::FromBatches(SampleSchema(), DeviceType::kOpenCL,
                                                   {DeviceBatch{batch, Cpu(), nullptr}});
  EXPECT_THAT(other_type.status().message(),
              HasSubstr("is on cpu, but the reader's device type is opencl"));
  auto other_schema = DeviceBatchReader::FromBatches(
      SampleSchema(), DeviceType::kCpu,
      {DeviceBatch{Batch({"s"}, {Strings({"x", "y", "z", "w"})}), Cpu(), nullptr}});
  EXPECT_THAT(other_schema.status().message(), HasSubstr("does not match the reader's schema"));
  EXPECT_THAT(DeviceBatchReader::FromBatches(nullptr, DeviceType::kCpu, {}).status().message(),
              HasSubstr("schema is null"));
}

// A reader whose chunks are given as results, device type declared apart.
class ScriptedReader final : public DeviceBatchReader {
 public:
  ScriptedReader(DeviceType type, std::vector<Result<DeviceBatch>> chunks)
      : type_(type), chunks_(std::move(chunks)) {}
  SchemaPtr schema() const override { return SampleSchema(); }
  DeviceType device_type() const override { return type_; }
  Result<DeviceBatch> Next() override {
    if (next_ >= chunks_.size()) return DeviceBatch{};
    return chunks_[next_++];
  }

 private:
  DeviceType type_;
  std::vector<Result<DeviceBatch>> chunks_;
  size_t next_ = 0;
};

TEST(DeviceStreamTest, ProducerErrorsTravelAsErrnoAndLastError) {
  auto reader = std::make_shared<ScriptedReader>(
      DeviceType::kCpu, std::vector<Result<DeviceBatch>>{Status::IOError("disk gone")});
  ArrowDeviceArrayStream stream{};
  ASSERT_OK(ExportDeviceBatchReader(reader, &stream));
  ArrowDeviceArray chunk;
  std::memset(&chunk, 0xCD, sizeof(chunk));
  EXPECT_EQ(stream.get_next(&stream, &chunk), EIO);
  EXPECT_EQ(chunk.array.release, nullptr);
  EXPECT_STREQ(stream.get_last_error(&stream), "disk gone");
  EXPECT_EQ(stream.get_next(&stream, &chunk), 0);  // the end
  EXPECT_EQ(chunk.array.release, nullptr);
  EXPECT_EQ(stream.get_last_error(&stream), nullptr);
  stream.release(&stream);
  EXPECT_EQ(stream.release, nullptr);

  reader = std::make_shared<ScriptedReader>(
      DeviceType::kCpu, std::vector<Result<DeviceBatch>>{Status::IOError("disk gone")});
  ASSERT_OK(ExportDeviceBatchReader(reader, &stream));
  auto imported = ImportDeviceBatchReader(&stream);
  ASSERT_TRUE(imported.ok());
  for (int repeat = 0; repeat < 2; ++repeat) {  // sticky
    auto next = (*imported)->Next();
    EXPECT_EQ(next.status().code(), StatusCode::kIOError);
    EXPECT_THAT(next.status().message(), HasSubstr("get_next failed"));
    EXPECT_THAT(next.status().message(), HasSubstr("disk gone"));
  }
}

TEST(DeviceStreamTest, AChunkOnAnotherDeviceTypeIsAnError) {
  auto reader = std::make_shared<ScriptedReader>(
      DeviceType::kOpenCL,
      std::vector<Result<DeviceBatch>>{DeviceBatch{SampleBatch(), Cpu(), nullptr}});
  ArrowDeviceArrayStream stream{};
  ASSERT_OK(ExportDeviceBatchReader(reader, &stream));
  EXPECT_EQ(stream.device_type, ARROW_DEVICE_OPENCL);
  ArrowDeviceArray chunk{};
  EXPECT_EQ(stream.get_next(&stream, &chunk), EINVAL);
  EXPECT_THAT(stream.get_last_error(&stream),
              HasSubstr("chunk 0 is on cpu, but the stream's device type is opencl"));
  stream.release(&stream);
}

TEST(DeviceStreamTest, ImportChecksEachChunksDeviceTypeAgainstTheStreams) {
  auto reader = DeviceBatchReader::FromBatches(SampleSchema(), DeviceType::kCpu,
                                               {DeviceBatch{SampleBatch(), Cpu(), nullptr}});
  ASSERT_TRUE(reader.ok());
  ArrowDeviceArrayStream stream{};
  ASSERT_OK(ExportDeviceBatchReader(*reader, &stream));
  stream.device_type = ARROW_DEVICE_OPENCL;  // a producer that lies about its chunks
  const size_t before = OutstandingExports().size();
  auto imported = ImportDeviceBatchReader(&stream);
  ASSERT_TRUE(imported.ok());
  auto next = (*imported)->Next();
  EXPECT_EQ(next.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(next.status().message(),
              HasSubstr("its device_type is cpu, but the stream's is opencl"));
  EXPECT_EQ(OutstandingExports().size(), before);  // the chunk was released
}

TEST(DeviceStreamTest, ImportRejectsBadStreams) {
  EXPECT_THAT(ImportDeviceBatchReader(nullptr).status().message(), HasSubstr("stream is NULL"));
  ArrowDeviceArrayStream released{};
  EXPECT_THAT(ImportDeviceBatchReader(&released).status().message(), HasSubstr("already released"));
  auto reader = DeviceBatchReader::FromBatches(SampleSchema(), DeviceType::kCpu, {});
  ASSERT_TRUE(reader.ok());
  ArrowDeviceArrayStream stream{};
  ASSERT_OK(ExportDeviceBatchReader(*reader, &stream));
  stream.device_type = 6;
  auto imported = ImportDeviceBatchReader(&stream);
  EXPECT_THAT(imported.status().message(), HasSubstr("unknown Arrow device type 6"));
  EXPECT_EQ(stream.release, nullptr);  // released (moved) on failure too
  EXPECT_THAT(ExportDeviceBatchReader(nullptr, &stream).message(), HasSubstr("reader is null"));
}

// ---- The device-memory import path of the C Data bridge ----------------------------------

// Serves reads from host memory, remembering them, as a device reader would
// fetch them from device memory.
struct CountingReader {
  std::vector<ferry::internal::ValueRead> reads;
  int calls = 0;
  Status failure;

  ferry::internal::ValueReader AsReader() {
    return [this](const std::vector<ferry::internal::ValueRead>& requested,
                  std::vector<int64_t>* values) -> Status {
      ++calls;
      if (!failure.ok()) return failure;
      reads = requested;
      for (const auto& read : requested) {
        if (read.width == 4) {
          int32_t value;
          std::memcpy(&value, read.address, sizeof(value));
          values->push_back(value);
        } else {
          int64_t value;
          std::memcpy(&value, read.address, sizeof(value));
          values->push_back(value);
        }
      }
      return Status::OK();
    };
  }
};

Result<ArrayDataPtr> ImportAsDevice(const ArrayDataPtr& data, CountingReader* counting) {
  ArrowArray exported{};
  FERRY_RETURN_NOT_OK(ExportArray(data, &exported));
  auto holder = std::make_shared<ferry::internal::ImportedArrayHolder>(&exported);
  const ferry::internal::ValueReader reader = counting->AsReader();
  return ferry::internal::ImportHeldArray(holder, data->type, &reader);
}

TEST(DeviceMemoryImportTest, FetchesOnlyLastOffsetsAndViewSizesInOneCall) {
  const auto batch = Batch({"n", "s", "l", "v"},
                           {Int64s({1, 2, 3}), Strings({"ab", "", "cde"}), Lists({{1, 2}, {}, {3}}),
                            StringViews({"short", std::string(40, 'x'), std::string(50, 'y')})});
  ASSERT_EQ(batch->column(3)->buffers.size(), 4u);  // two variadic data buffers
  CountingReader counting;
  auto imported = ImportAsDevice(batch->ToStructArray(), &counting);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(counting.calls, 1);
  ASSERT_THAT(counting.reads, SizeIs(4));
  EXPECT_EQ(counting.reads[0].width, 4);  // utf8 last offset
  EXPECT_EQ(counting.reads[1].width, 4);  // list last offset
  EXPECT_EQ(counting.reads[2].width, 8);  // view data buffer sizes
  EXPECT_EQ(counting.reads[3].width, 8);
  EXPECT_TRUE(ArrayEquals(**imported, *batch->ToStructArray()));
  // Sizes come from the fetched values: the utf8 data buffer holds 5 bytes.
  EXPECT_EQ((*imported)->children[1]->buffers[2]->size(), 5);
}

TEST(DeviceMemoryImportTest, NothingIsFetchedForFixedWidthOrEmptyArrays) {
  CountingReader counting;
  auto imported =
      ImportAsDevice(Batch({"n", "s"}, {Int64s({}), Strings({})})->ToStructArray(), &counting);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(counting.calls, 0);
  EXPECT_EQ((*imported)->children[1]->length, 0);
}

TEST(DeviceMemoryImportTest, SlicesReadTheLastOffsetOfTheirEnd) {
  const ArrayDataPtr strings = Strings({"a", "bb", "ccc", "dddd"});
  CountingReader counting;
  auto imported = ImportAsDevice(Slice(strings, 1, 2), &counting);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  ASSERT_THAT(counting.reads, SizeIs(1));
  const auto* offsets = strings->buffers[1]->data();
  EXPECT_EQ(counting.reads[0].address, offsets + 3 * 4);  // offset 1 + length 2
  EXPECT_TRUE(ArrayEquals(**imported, *Slice(strings, 1, 2)));
}

TEST(DeviceMemoryImportTest, AListWhoseLastOffsetPassesItsChildIsRejected) {
  // offsets [0, 2, 9] over a child of 3 values.
  const std::vector<int32_t> offsets = {0, 2, 9};
  auto offsets_buffer = Buffer::CopyOf(offsets.data(), 12);
  ASSERT_TRUE(offsets_buffer.ok());
  auto bad = std::make_shared<ArrayData>();
  bad->type = list(field("item", int64()));
  bad->length = 2;
  bad->buffers = {nullptr, *offsets_buffer};
  bad->children = {Int64s({1, 2, 3})};
  CountingReader counting;
  CounterDelta delta;
  auto imported = ImportAsDevice(bad, &counting);
  EXPECT_EQ(imported.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(imported.status().message(),
              HasSubstr("array: last offset exceeds the child length: offsets[2]=9 > 3"));
  EXPECT_EQ(delta(Counter::kValidationErrors), 1);

  // The host path rejects it too (ValidateStructural).
  ArrowArray exported{};
  ASSERT_OK(ExportArray(bad, &exported));
  EXPECT_FALSE(ImportArray(&exported, bad->type).ok());
}

TEST(DeviceMemoryImportTest, StructChildrenMustCoverTheParent) {
  auto bad = std::make_shared<ArrayData>();
  bad->type = struct_({field("x", int64())});
  bad->length = 3;
  bad->buffers = {nullptr};
  bad->children = {Int64s({1, 2})};
  CountingReader counting;
  auto imported = ImportAsDevice(bad, &counting);
  EXPECT_THAT(imported.status().message(),
              HasSubstr("child 0 ('x') is too short: offset + length needs length 3"));
}

TEST(DeviceMemoryImportTest, AReaderFailureFailsTheImportAndReleasesTheArray) {
  CountingReader counting;
  counting.failure = Status::IOError("device lost while reading");
  CounterDelta delta;
  auto imported = ImportAsDevice(Strings({"x"}), &counting);
  EXPECT_EQ(imported.status().code(), StatusCode::kIOError);
  EXPECT_THAT(imported.status().message(), HasSubstr("device lost while reading"));
  EXPECT_EQ(delta(Counter::kForeignReleases), 1);
}

TEST(DeviceMemoryImportTest, UnknownNullCountIsExportedAsIsForDeviceMemory) {
  // A slice of an array with nulls has an unknown null count; the host path
  // counts it, the device path must not read the bitmap.
  Int64Builder builder;
  ASSERT_OK(builder.Append(1));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append(3));
  auto data = builder.Finish();
  ASSERT_TRUE(data.ok());
  const ArrayDataPtr sliced = Slice(*data, 1, 2);
  ASSERT_EQ(sliced->null_count, kUnknownNullCount);
  ArrowArray host{};
  ASSERT_OK(ExportArray(sliced, &host));
  EXPECT_EQ(host.null_count, 1);
  host.release(&host);
  ArrowArray device{};
  ferry::internal::ArrayExportOptions memory;
  memory.host_readable = false;
  ASSERT_OK(ferry::internal::ExportArrayWith(sliced, &device, memory));
  EXPECT_EQ(device.null_count, -1);
  device.release(&device);
}

}  // namespace
}  // namespace ferry::device
