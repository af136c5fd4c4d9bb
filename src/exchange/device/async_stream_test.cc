// Tests of the Arrow C Async Device Stream interface: Ferry's producer and
// consumer with each other, with a hand-written C-style handler and a
// hand-written C-style producer, over CPU batches and (when present) OpenCL
// and CUDA batches. Waits for other threads use generous timeouts; nothing
// asserts speed. The few short sleeps only give a misbehaving producer the
// chance to show itself: they can hide a bug, never fail a correct
// implementation.
#include "ferry/device/async_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exchange/device/testing/kernels.h"
#include "ferry/base/telemetry.h"
#include "ferry/exchange/builder.h"

namespace ferry::device {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr auto kGenerous = 30s;

// ---- Ferry-side data ----------------------------------------------------------

SchemaPtr TwoColumnSchema() {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("x", int64()), field("name", utf8())};
  schema->metadata = {{"origin", "async_stream_test"}};
  return schema;
}

// Rows x = start .. start+length-1 and name = "row<x>", on the CPU.
DeviceBatch MakeCpuBatch(int64_t start, int64_t length) {
  std::vector<std::optional<int64_t>> xs;
  std::vector<std::optional<std::string>> names;
  for (int64_t i = 0; i < length; ++i) {
    xs.emplace_back(start + i);
    names.emplace_back("row" + std::to_string(start + i));
  }
  auto x = MakeInt64Array(xs);
  auto name = MakeUtf8Array(names);
  EXPECT_TRUE(x.ok() && name.ok());
  auto batch = RecordBatch::Make(TwoColumnSchema(), length, {*x, *name});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return DeviceBatch{*batch, DeviceRegistry::Global().cpu(), nullptr};
}

void ExpectCpuRows(const DeviceBatch& batch, int64_t start, int64_t length) {
  ASSERT_NE(batch.batch, nullptr);
  EXPECT_EQ(batch.device, DeviceRegistry::Global().cpu());
  EXPECT_TRUE(batch.batch->Equals(*MakeCpuBatch(start, length).batch)) << batch.batch->ToString();
}

// Hands out prepared batches, optionally failing at one index; counts pulls.
class VectorReader : public DeviceBatchReader {
 public:
  VectorReader(SchemaPtr schema, std::vector<DeviceBatch> batches,
               DeviceType type = DeviceType::kCpu)
      : schema_(std::move(schema)), batches_(std::move(batches)), type_(type) {}

  void FailAt(int64_t index, Status status) {
    fail_at_ = index;
    failure_ = std::move(status);
  }
  int64_t next_calls() const { return next_calls_.load(); }

  SchemaPtr schema() const override { return schema_; }
  DeviceType device_type() const override { return type_; }
  Result<DeviceBatch> Next() override {
    const int64_t index = next_calls_.fetch_add(1);
    if (index == fail_at_) return failure_;
    if (index >= static_cast<int64_t>(batches_.size())) return DeviceBatch{};
    return batches_[static_cast<size_t>(index)];
  }

 private:
  SchemaPtr schema_;
  std::vector<DeviceBatch> batches_;
  DeviceType type_;
  int64_t fail_at_ = -1;
  Status failure_;
  std::atomic<int64_t> next_calls_{0};
};

// Never ends: batch k holds rows 4k .. 4k+3.
class EndlessReader : public DeviceBatchReader {
 public:
  SchemaPtr schema() const override { return TwoColumnSchema(); }
  DeviceType device_type() const override { return DeviceType::kCpu; }
  Result<DeviceBatch> Next() override { return MakeCpuBatch(4 * next_calls_.fetch_add(1), 4); }
  int64_t next_calls() const { return next_calls_.load(); }

 private:
  std::atomic<int64_t> next_calls_{0};
};

// ---- A spy between a producer and a handler (C-style functions) ---------------

// Forwards every callback to `inner` and every request/cancel to the real
// producer, recording the sequence ("S" schema, "T" task, "E" end, "X" error,
// "R" release) and checking that tasks never outrun requests.
struct Spy {
  explicit Spy(ArrowAsyncDeviceStreamHandler* inner_handler) : inner(inner_handler) {
    handler.on_schema = &OnSchema;
    handler.on_next_task = &OnNextTask;
    handler.on_error = &OnError;
    handler.release = &Release;
    handler.private_data = this;
  }

  std::string sequence() {
    std::lock_guard<std::mutex> lock(mutex);
    return sequence_;
  }
  bool WaitReleased() {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, kGenerous, [&] { return releases.load() > 0; });
  }

  ArrowAsyncDeviceStreamHandler handler{};
  ArrowAsyncDeviceStreamHandler* inner;
  ArrowAsyncProducer* real_producer = nullptr;
  ArrowAsyncProducer spy_producer{};
  std::atomic<int64_t> requested{0};
  std::atomic<int64_t> tasks{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int64_t> releases{0};
  std::atomic<int64_t> cancels{0};
  std::atomic<bool> over_delivered{false};
  int error_code = 0;         // guarded by mutex
  std::string error_message;  // guarded by mutex
  std::mutex mutex;
  std::condition_variable changed;

 private:
  static Spy* Of(ArrowAsyncDeviceStreamHandler* self) {
    return static_cast<Spy*>(self->private_data);
  }
  void Record(const char* event) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      sequence_ += event;
    }
    changed.notify_all();
  }

  static int OnSchema(ArrowAsyncDeviceStreamHandler* self, ArrowSchema* schema) {
    Spy* spy = Of(self);
    spy->real_producer = self->producer;
    spy->spy_producer = *self->producer;
    spy->spy_producer.request = &Request;
    spy->spy_producer.cancel = &Cancel;
    spy->spy_producer.private_data = spy;
    spy->inner->producer = &spy->spy_producer;
    spy->Record("S");
    return spy->inner->on_schema(spy->inner, schema);
  }
  static int OnNextTask(ArrowAsyncDeviceStreamHandler* self, ArrowAsyncTask* task,
                        const char* metadata) {
    Spy* spy = Of(self);
    if (task != nullptr) {
      if (spy->tasks.fetch_add(1) + 1 > spy->requested.load()) spy->over_delivered = true;
      spy->Record("T");
    } else {
      spy->Record("E");
    }
    return spy->inner->on_next_task(spy->inner, task, metadata);
  }
  static void OnError(ArrowAsyncDeviceStreamHandler* self, int code, const char* message,
                      const char* metadata) {
    Spy* spy = Of(self);
    {
      std::lock_guard<std::mutex> lock(spy->mutex);
      spy->error_code = code;
      spy->error_message = message != nullptr ? message : "";
    }
    spy->errors.fetch_add(1);
    spy->Record("X");
    spy->inner->on_error(spy->inner, code, message, metadata);
  }
  static void Release(ArrowAsyncDeviceStreamHandler* self) {
    Spy* spy = Of(self);
    spy->inner->release(spy->inner);
    self->release = nullptr;
    spy->releases.fetch_add(1);
    spy->Record("R");
  }
  static void Request(ArrowAsyncProducer* self, int64_t n) {
    Spy* spy = static_cast<Spy*>(self->private_data);
    if (n > 0) spy->requested.fetch_add(n);
    spy->real_producer->request(spy->real_producer, n);
  }
  static void Cancel(ArrowAsyncProducer* self) {
    Spy* spy = static_cast<Spy*>(self->private_data);
    spy->cancels.fetch_add(1);
    spy->real_producer->cancel(spy->real_producer);
  }

  std::string sequence_;
};

// ---- A hand-written C-style consumer ------------------------------------------

// Plain callbacks over private_data, as a C library would write them. It
// keeps the tasks it receives for the test to extract.
struct CConsumer {
  CConsumer() {
    handler.on_schema = &OnSchema;
    handler.on_next_task = &OnNextTask;
    handler.on_error = &OnError;
    handler.release = &Release;
    handler.private_data = this;
  }
  ~CConsumer() {
    for (ArrowAsyncTask& task : tasks) task.extract_data(&task, nullptr);
  }

  // Behaviour, set before the handler is handed over.
  int64_t request_in_on_schema = 0;  // 0: none
  bool cancel_in_on_schema = false;  // then also request(5) and request(-1): no-ops
  int on_schema_result = 0;
  int64_t refuse_task = -1;  // index of the task answered with EIO (after discarding it)

  template <typename Predicate>
  bool WaitFor(Predicate predicate) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, kGenerous, predicate);
  }
  bool WaitReleased() {
    return WaitFor([&] { return released; });
  }
  void Request(int64_t n) { producer->request(producer, n); }
  ArrowAsyncTask TakeTask() {
    std::lock_guard<std::mutex> lock(mutex);
    ArrowAsyncTask task = tasks.front();
    tasks.pop_front();
    return task;
  }

  ArrowAsyncDeviceStreamHandler handler{};
  std::mutex mutex;
  std::condition_variable changed;
  // Observations, guarded by mutex.
  std::string sequence;
  std::deque<ArrowAsyncTask> tasks;
  int64_t tasks_received = 0;
  std::string schema_format;
  int64_t schema_children = 0;
  ArrowAsyncProducer* producer = nullptr;
  ArrowDeviceType producer_device_type = 0;
  int error_code = 0;
  std::string error_message;
  bool released = false;

 private:
  static CConsumer* Of(ArrowAsyncDeviceStreamHandler* self) {
    return static_cast<CConsumer*>(self->private_data);
  }
  static int OnSchema(ArrowAsyncDeviceStreamHandler* self, ArrowSchema* schema) {
    CConsumer* consumer = Of(self);
    {
      std::lock_guard<std::mutex> lock(consumer->mutex);
      consumer->sequence += "S";
      consumer->schema_format = schema->format;
      consumer->schema_children = schema->n_children;
      consumer->producer = self->producer;
      consumer->producer_device_type = self->producer->device_type;
    }
    schema->release(schema);
    if (consumer->cancel_in_on_schema) {
      self->producer->cancel(self->producer);
      self->producer->cancel(self->producer);
      self->producer->request(self->producer, 5);
      self->producer->request(self->producer, -1);
    } else if (consumer->request_in_on_schema != 0) {
      self->producer->request(self->producer, consumer->request_in_on_schema);
    }
    consumer->changed.notify_all();
    return consumer->on_schema_result;
  }
  static int OnNextTask(ArrowAsyncDeviceStreamHandler* self, ArrowAsyncTask* task,
                        const char* /*metadata*/) {
    CConsumer* consumer = Of(self);
    int result = 0;
    {
      std::lock_guard<std::mutex> lock(consumer->mutex);
      if (task == nullptr) {
        consumer->sequence += "E";
      } else if (consumer->tasks_received++ == consumer->refuse_task) {
        task->extract_data(task, nullptr);  // every task is extracted, even a refused one
        consumer->sequence += "!";
        result = EIO;
      } else {
        consumer->sequence += "T";
        consumer->tasks.push_back(*task);
      }
    }
    consumer->changed.notify_all();
    return result;
  }
  static void OnError(ArrowAsyncDeviceStreamHandler* self, int code, const char* message,
                      const char* /*metadata*/) {
    CConsumer* consumer = Of(self);
    {
      std::lock_guard<std::mutex> lock(consumer->mutex);
      consumer->sequence += "X";
      consumer->error_code = code;
      consumer->error_message = message != nullptr ? message : "";
    }
    consumer->changed.notify_all();
  }
  static void Release(ArrowAsyncDeviceStreamHandler* self) {
    CConsumer* consumer = Of(self);
    {
      std::lock_guard<std::mutex> lock(consumer->mutex);
      consumer->sequence += "R";
      consumer->released = true;
      self->release = nullptr;
    }
    consumer->changed.notify_all();
  }
};

// Checks a CPU chunk exported by Ferry, reading the C structs directly.
void ExpectCpuChunk(const ArrowDeviceArray& chunk, int64_t start, int64_t length) {
  EXPECT_EQ(chunk.device_type, ARROW_DEVICE_CPU);
  EXPECT_EQ(chunk.device_id, -1);
  EXPECT_EQ(chunk.sync_event, nullptr);
  EXPECT_EQ(chunk.reserved[0], 0);
  EXPECT_EQ(chunk.reserved[1], 0);
  EXPECT_EQ(chunk.reserved[2], 0);
  ASSERT_NE(chunk.array.release, nullptr);
  ASSERT_EQ(chunk.array.length, length);
  ASSERT_EQ(chunk.array.n_children, 2);
  const ArrowArray* xs = chunk.array.children[0];
  ASSERT_EQ(xs->n_buffers, 2);
  const auto* values = static_cast<const int64_t*>(xs->buffers[1]) + xs->offset;
  for (int64_t i = 0; i < length; ++i) EXPECT_EQ(values[i], start + i) << i;
}

// ---- A hand-written C-style producer ------------------------------------------

// One int64 column "x" in a struct, built from plain C structs with their own
// release callbacks, counted so that tests can prove every one is released.
struct CSchemaPrivate {
  ArrowSchema child;
  ArrowSchema* children[1];
  std::atomic<int64_t>* released;
};

void ReleaseCChildSchema(ArrowSchema* schema) { schema->release = nullptr; }

void ReleaseCSchema(ArrowSchema* schema) {
  auto* owned = static_cast<CSchemaPrivate*>(schema->private_data);
  if (owned->child.release != nullptr) owned->child.release(&owned->child);
  owned->released->fetch_add(1);
  delete owned;
  schema->release = nullptr;
}

void MakeCSchema(const char* format, std::atomic<int64_t>* released, ArrowSchema* out) {
  auto* owned = new CSchemaPrivate{};
  owned->released = released;
  // Fields not set here stay zero (value-initialised above).
  owned->child.format = "l";
  owned->child.name = "x";
  owned->child.flags = ARROW_FLAG_NULLABLE;
  owned->child.release = &ReleaseCChildSchema;
  owned->children[0] = &owned->child;
  const bool is_struct = std::strcmp(format, "+s") == 0;
  std::memset(out, 0, sizeof(*out));
  out->format = format;
  out->name = "";
  out->n_children = is_struct ? 1 : 0;
  out->children = is_struct ? owned->children : nullptr;
  out->release = &ReleaseCSchema;
  out->private_data = owned;
}

struct CArrayPrivate {
  ArrowArray child;
  ArrowArray* children[1];
  const void* struct_buffers[1];
  const void* child_buffers[2];
  std::vector<int64_t> values;
  std::atomic<int64_t>* released;
};

void ReleaseCChildArray(ArrowArray* array) { array->release = nullptr; }

void ReleaseCArray(ArrowArray* array) {
  auto* owned = static_cast<CArrayPrivate*>(array->private_data);
  if (owned->child.release != nullptr) owned->child.release(&owned->child);
  owned->released->fetch_add(1);
  delete owned;
  array->release = nullptr;
}

void MakeCArray(int64_t start, int64_t length, std::atomic<int64_t>* released, ArrowArray* out) {
  auto* owned = new CArrayPrivate{};
  owned->released = released;
  for (int64_t i = 0; i < length; ++i) owned->values.push_back(start + i);
  owned->child_buffers[0] = nullptr;
  owned->child_buffers[1] = owned->values.data();
  owned->struct_buffers[0] = nullptr;
  owned->child.length = length;
  owned->child.n_buffers = 2;
  owned->child.buffers = owned->child_buffers;
  owned->child.release = &ReleaseCChildArray;
  owned->children[0] = &owned->child;
  std::memset(out, 0, sizeof(*out));
  out->length = length;
  out->n_buffers = 1;
  out->n_children = 1;
  out->buffers = owned->struct_buffers;
  out->children = owned->children;
  out->release = &ReleaseCArray;
  out->private_data = owned;
}

struct CProducer;

struct CTaskPrivate {
  CProducer* producer;
  int64_t start;
  int64_t length;
  ArrowDeviceType device_type;
};

// The producer side written as a C library would: an ArrowAsyncProducer with
// plain request/cancel functions, and steps (Send*) that whichever thread
// plays the producer calls on the handler.
struct CProducer {
  CProducer() {
    producer.device_type = ARROW_DEVICE_CPU;
    producer.request = &Request;
    producer.cancel = &Cancel;
    producer.additional_metadata = nullptr;
    producer.private_data = this;
  }

  void Attach(ArrowAsyncDeviceStreamHandler* target) {
    handler = target;
    handler->producer = &producer;
  }
  int SendSchema(const char* format = "+s") {
    ArrowSchema schema{};
    MakeCSchema(format, &schemas_released, &schema);
    const int result = handler->on_schema(handler, &schema);
    if (schema.release != nullptr) schema.release(&schema);  // not moved: ours to release
    return result;
  }
  int SendTask(int64_t start, int64_t length, ArrowDeviceType chunk_type = ARROW_DEVICE_CPU) {
    ArrowAsyncTask task{&Extract, new CTaskPrivate{this, start, length, chunk_type}};
    tasks_made.fetch_add(1);
    return handler->on_next_task(handler, &task, nullptr);
  }
  int SendEnd() { return handler->on_next_task(handler, nullptr, nullptr); }
  void SendError(int code, const char* message) {
    handler->on_error(handler, code, message, nullptr);
  }
  void Release() { handler->release(handler); }

  // Waits for the consumer to request a task (or cancel): true with one
  // credit taken, false when cancelled.
  bool TakeCredit() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, kGenerous, [&] { return credit_ > 0 || cancelled_; });
    if (cancelled_ || credit_ == 0) return false;
    --credit_;
    return true;
  }
  int64_t requested_total() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requested_;
  }
  int64_t cancel_calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancels_;
  }

  ArrowAsyncProducer producer{};
  ArrowAsyncDeviceStreamHandler* handler = nullptr;
  std::atomic<int64_t> tasks_made{0};
  std::atomic<int64_t> tasks_extracted{0};
  std::atomic<int64_t> arrays_made{0};
  std::atomic<int64_t> arrays_released{0};
  std::atomic<int64_t> schemas_released{0};

 private:
  static int Extract(ArrowAsyncTask* self, ArrowDeviceArray* out) {
    if (self->private_data == nullptr) return EINVAL;
    auto* task = static_cast<CTaskPrivate*>(self->private_data);
    self->private_data = nullptr;
    task->producer->tasks_extracted.fetch_add(1);
    if (out != nullptr) {
      std::memset(out, 0, sizeof(*out));
      MakeCArray(task->start, task->length, &task->producer->arrays_released, &out->array);
      task->producer->arrays_made.fetch_add(1);
      out->device_id = -1;
      out->device_type = task->device_type;
    }
    delete task;
    return 0;
  }
  static void Request(ArrowAsyncProducer* self, int64_t n) {
    auto* owner = static_cast<CProducer*>(self->private_data);
    {
      std::lock_guard<std::mutex> lock(owner->mutex_);
      if (owner->cancelled_) return;
      owner->credit_ += n;
      owner->requested_ += n;
    }
    owner->changed_.notify_all();
  }
  static void Cancel(ArrowAsyncProducer* self) {
    auto* owner = static_cast<CProducer*>(self->private_data);
    {
      std::lock_guard<std::mutex> lock(owner->mutex_);
      owner->cancelled_ = true;
      ++owner->cancels_;
    }
    owner->changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t credit_ = 0;      // guarded by mutex_
  int64_t requested_ = 0;   // guarded by mutex_
  int64_t cancels_ = 0;     // guarded by mutex_
  bool cancelled_ = false;  // guarded by mutex_
};

// ---- Fixture --------------------------------------------------------------------

class AsyncStreamTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Every producer joins its thread when destroyed.
    EXPECT_EQ(RunningAsyncProducerThreads(), 0);
  }

  static std::unique_ptr<AsyncDeviceStreamConsumer> MakeConsumer(int64_t window = 4) {
    AsyncConsumerOptions options;
    options.window = window;
    auto consumer = AsyncDeviceStreamConsumer::Make(options);
    EXPECT_TRUE(consumer.ok()) << consumer.status().ToString();
    return consumer.ok() ? std::move(*consumer) : nullptr;
  }

  static std::unique_ptr<AsyncDeviceStreamProducer> MustExport(
      std::shared_ptr<DeviceBatchReader> source, ArrowAsyncDeviceStreamHandler* handler,
      AsyncExportOptions options = {}) {
    auto producer = ExportAsyncDeviceStream(std::move(source), handler, std::move(options));
    EXPECT_TRUE(producer.ok()) << producer.status().ToString();
    return producer.ok() ? std::move(*producer) : nullptr;
  }

  static std::vector<DeviceBatch> CpuBatches(int64_t count, int64_t rows) {
    std::vector<DeviceBatch> batches;
    for (int64_t i = 0; i < count; ++i) batches.push_back(MakeCpuBatch(i * rows, rows));
    return batches;
  }
};

// ---- Ferry producer → Ferry consumer ----------------------------------------------

TEST_F(AsyncStreamTest, FerryToFerryDeliversCpuBatchesInOrderThenTheEnd) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(10, 5));
  auto consumer = MakeConsumer(3);
  AsyncExportOptions options;
  options.additional_metadata = {{"total_batches", "10"}};
  auto producer = MustExport(reader, consumer->handler(), options);
  ASSERT_TRUE(producer);

  auto schema = consumer->schema();
  ASSERT_TRUE(schema.ok()) << schema.status().ToString();
  EXPECT_TRUE((*schema)->Equals(*TwoColumnSchema()));
  EXPECT_EQ(consumer->device_type(), DeviceType::kCpu);
  EXPECT_EQ(consumer->additional_metadata(), (Metadata{{"total_batches", "10"}}));
  const int64_t imported_before = telemetry::Get(telemetry::Counter::kStreamBatchesImported);
  for (int64_t i = 0; i < 10; ++i) {
    auto batch = consumer->Next();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    ExpectCpuRows(*batch, i * 5, 5);
  }
  auto end = consumer->Next();
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(end->batch, nullptr);
  // The end stays the end.
  auto again = consumer->Next();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->batch, nullptr);
  EXPECT_EQ(telemetry::Get(telemetry::Counter::kStreamBatchesImported) - imported_before, 10);

  EXPECT_TRUE(consumer->WaitReleased().ok());
  EXPECT_TRUE(consumer->released());
  EXPECT_TRUE(producer->Wait().ok());
  EXPECT_TRUE(producer->finished());
  EXPECT_EQ(producer->tasks_sent(), 10);
  EXPECT_EQ(reader->next_calls(), 11);  // ten batches and the end
}

TEST_F(AsyncStreamTest, AnEmptyStreamEndsRightAfterTheSchema) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), std::vector<DeviceBatch>{});
  auto consumer = MakeConsumer();
  auto producer = MustExport(reader, consumer->handler());
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer->schema().ok());
  auto end = consumer->Next();
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(end->batch, nullptr);
  EXPECT_TRUE(producer->Wait().ok());
  EXPECT_EQ(producer->tasks_sent(), 0);
  EXPECT_TRUE(consumer->additional_metadata().empty());
}

TEST_F(AsyncStreamTest, BatchesOutliveTheProducerAndTheConsumer) {
  std::vector<DeviceBatch> received;
  {
    auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(3, 2));
    auto consumer = MakeConsumer();
    auto producer = MustExport(reader, consumer->handler());
    ASSERT_TRUE(producer);
    for (int i = 0; i < 3; ++i) {
      auto batch = consumer->Next();
      ASSERT_TRUE(batch.ok()) << batch.status().ToString();
      received.push_back(*batch);
    }
  }
  ASSERT_EQ(received.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) ExpectCpuRows(received[static_cast<size_t>(i)], i * 2, 2);
}

// ---- Back-pressure ------------------------------------------------------------------

TEST_F(AsyncStreamTest, TheProducerSendsOnlyWhatWasRequested) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(6, 3));
  CConsumer consumer;
  consumer.request_in_on_schema = 2;
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);

  ASSERT_TRUE(consumer.WaitFor([&] { return consumer.tasks_received == 2; }));
  // A window for a third, unrequested task to show up: there must be none,
  // and the source must not have been read ahead either.
  std::this_thread::sleep_for(50ms);
  {
    std::lock_guard<std::mutex> lock(consumer.mutex);
    EXPECT_EQ(consumer.tasks_received, 2);
    EXPECT_EQ(consumer.sequence, "STT");
  }
  EXPECT_EQ(reader->next_calls(), 2);
  EXPECT_EQ(producer->tasks_sent(), 2);

  consumer.Request(3);
  ASSERT_TRUE(consumer.WaitFor([&] { return consumer.tasks_received == 5; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(producer->tasks_sent(), 5);
  EXPECT_EQ(reader->next_calls(), 5);
  EXPECT_FALSE(producer->finished());

  // The end marker is an on_next_task call too: it needs its own request.
  consumer.Request(2);
  ASSERT_TRUE(consumer.WaitReleased());
  EXPECT_EQ(consumer.sequence, "STTTTTTER");
  EXPECT_TRUE(producer->Wait().ok());

  // Each task yields its batch, exported by Ferry as a CPU ArrowDeviceArray.
  for (int64_t i = 0; i < 6; ++i) {
    ArrowAsyncTask task = consumer.TakeTask();
    ArrowDeviceArray chunk{};
    ASSERT_EQ(task.extract_data(&task, &chunk), 0);
    ExpectCpuChunk(chunk, i * 3, 3);
    chunk.array.release(&chunk.array);
  }
}

TEST_F(AsyncStreamTest, ASlowConsumerKeepsAtMostItsWindowInFlight) {
  constexpr int64_t kWindow = 3;
  constexpr int64_t kBatches = 20;
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(kBatches, 2));
  auto consumer = MakeConsumer(kWindow);
  Spy spy(consumer->handler());
  auto producer = MustExport(reader, &spy.handler);
  ASSERT_TRUE(producer);

  int64_t consumed = 0;
  int64_t most_in_flight = 0;
  while (true) {
    std::this_thread::sleep_for(2ms);  // slow: the producer must wait for us
    auto batch = consumer->Next();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    if (batch->batch == nullptr) break;
    ExpectCpuRows(*batch, consumed * 2, 2);
    ++consumed;
    most_in_flight = std::max(most_in_flight, spy.tasks.load() - consumed);
    EXPECT_LE(reader->next_calls(), spy.requested.load());
  }
  EXPECT_EQ(consumed, kBatches);
  EXPECT_FALSE(spy.over_delivered.load());
  EXPECT_LE(most_in_flight, kWindow);
  EXPECT_GE(spy.requested.load(), kBatches + 1);  // every batch and the end were asked for
  EXPECT_LE(spy.requested.load(), kWindow + kBatches);
  EXPECT_TRUE(spy.WaitReleased());
  EXPECT_EQ(spy.sequence(), "S" + std::string(kBatches, 'T') + "ER");
  EXPECT_EQ(spy.cancels.load(), 0);
}

TEST_F(AsyncStreamTest, AProducerThatIgnoresBackPressureIsRejected) {
  CProducer c_producer;
  auto consumer = MakeConsumer(1);
  c_producer.Attach(consumer->handler());
  ASSERT_EQ(c_producer.SendSchema(), 0);
  EXPECT_EQ(c_producer.requested_total(), 1);
  EXPECT_EQ(c_producer.SendTask(0, 3), 0);
  EXPECT_EQ(c_producer.SendTask(3, 3), EINVAL);  // only one was requested
  c_producer.Release();

  auto next = consumer->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(next.status().message(), HasSubstr("back-pressure violated"));
  EXPECT_THAT(next.status().message(), HasSubstr("only 1 were requested"));
  // Both tasks were extracted (discarded) so the producer could free them.
  EXPECT_EQ(c_producer.tasks_extracted.load(), 2);
  EXPECT_EQ(c_producer.arrays_made.load(), 0);
  EXPECT_EQ(c_producer.cancel_calls(), 0);
}

// ---- Cancellation -------------------------------------------------------------------

TEST_F(AsyncStreamTest, CancelMidStreamStopsTheProducerWithoutOnError) {
  auto reader = std::make_shared<EndlessReader>();
  auto consumer = MakeConsumer(2);
  Spy spy(consumer->handler());
  auto producer = MustExport(reader, &spy.handler);
  ASSERT_TRUE(producer);
  for (int64_t i = 0; i < 3; ++i) {
    auto batch = consumer->Next();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    ExpectCpuRows(*batch, 4 * i, 4);
  }
  consumer->Cancel();
  consumer->Cancel();  // idempotent
  auto next = consumer->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kCancelled);

  EXPECT_TRUE(consumer->WaitReleased().ok());
  Status outcome = producer->Wait();
  EXPECT_EQ(outcome.code(), StatusCode::kCancelled) << outcome.ToString();
  EXPECT_TRUE(spy.WaitReleased());
  EXPECT_EQ(spy.releases.load(), 1);
  EXPECT_EQ(spy.errors.load(), 0);
  EXPECT_EQ(spy.cancels.load(), 1);
  EXPECT_FALSE(spy.over_delivered.load());
  // Bounded by what was requested: the window, one more per batch read.
  EXPECT_LE(reader->next_calls(), spy.requested.load());
  EXPECT_LE(spy.requested.load(), 2 + 3);
  const std::string sequence = spy.sequence();
  EXPECT_EQ(sequence.front(), 'S');
  EXPECT_EQ(sequence.back(), 'R');
  EXPECT_EQ(sequence.find_first_of("XE"), std::string::npos) << sequence;
  producer.reset();
  EXPECT_EQ(RunningAsyncProducerThreads(), 0);
}

TEST_F(AsyncStreamTest, DestroyingTheConsumerCancelsAndTheProducerStillReleases) {
  auto reader = std::make_shared<EndlessReader>();
  auto consumer = MakeConsumer(4);
  Spy spy(consumer->handler());
  auto producer = MustExport(reader, &spy.handler);
  ASSERT_TRUE(producer);
  auto first = consumer->Next();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  consumer.reset();  // the handler lives on until the producer releases it
  EXPECT_EQ(producer->Wait().code(), StatusCode::kCancelled);
  EXPECT_TRUE(spy.WaitReleased());
  EXPECT_EQ(spy.releases.load(), 1);
  EXPECT_EQ(spy.errors.load(), 0);
}

TEST_F(AsyncStreamTest, DestroyingTheProducerCancelsJoinsAndReleases) {
  auto reader = std::make_shared<EndlessReader>();
  auto consumer = MakeConsumer(2);
  auto producer = MustExport(reader, consumer->handler());
  ASSERT_TRUE(producer);
  auto first = consumer->Next();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  producer.reset();
  EXPECT_EQ(RunningAsyncProducerThreads(), 0);
  EXPECT_TRUE(consumer->released());
  // Batches already buffered are still delivered; then the early release shows.
  Result<DeviceBatch> next = consumer->Next();
  while (next.ok() && next->batch != nullptr) next = consumer->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_THAT(next.status().message(), HasSubstr("without ending the stream"));
}

// A handler whose release destroys the producer object, on the producer's own thread.
struct SelfDestroyingHandler {
  SelfDestroyingHandler() {
    handler.on_schema = [](ArrowAsyncDeviceStreamHandler*, ArrowSchema* schema) {
      schema->release(schema);
      return ECANCELED;
    };
    handler.on_next_task = [](ArrowAsyncDeviceStreamHandler*, ArrowAsyncTask*, const char*) {
      return EINVAL;
    };
    handler.on_error = [](ArrowAsyncDeviceStreamHandler*, int, const char*, const char*) {};
    handler.release = [](ArrowAsyncDeviceStreamHandler* self) {
      auto* owner = static_cast<SelfDestroyingHandler*>(self->private_data);
      std::unique_ptr<AsyncDeviceStreamProducer> producer;
      {
        std::unique_lock<std::mutex> lock(owner->mutex);
        owner->changed.wait_for(lock, kGenerous, [&] { return owner->producer != nullptr; });
        producer = std::move(owner->producer);
      }
      producer.reset();
      std::lock_guard<std::mutex> lock(owner->mutex);
      owner->destroyed = true;
      owner->changed.notify_all();
    };
    handler.private_data = this;
  }
  ArrowAsyncDeviceStreamHandler handler{};
  std::mutex mutex;
  std::condition_variable changed;
  std::unique_ptr<AsyncDeviceStreamProducer> producer;  // guarded by mutex
  bool destroyed = false;                               // guarded by mutex
};

TEST_F(AsyncStreamTest, TheProducerMayBeDestroyedFromItsOwnThread) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(1, 1));
  SelfDestroyingHandler owner;
  auto producer = ExportAsyncDeviceStream(reader, &owner.handler);
  ASSERT_TRUE(producer.ok()) << producer.status().ToString();
  {
    std::unique_lock<std::mutex> lock(owner.mutex);
    owner.producer = std::move(*producer);
    owner.changed.notify_all();
    ASSERT_TRUE(owner.changed.wait_for(lock, kGenerous, [&] { return owner.destroyed; }));
  }
  // The thread detached itself and ends on its own.
  const auto deadline = std::chrono::steady_clock::now() + kGenerous;
  while (RunningAsyncProducerThreads() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(RunningAsyncProducerThreads(), 0);
}

TEST_F(AsyncStreamTest, CancelBeforeTheSchemaRefusesIt) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(2, 2));
  auto consumer = MakeConsumer();
  consumer->Cancel();
  auto producer = MustExport(reader, consumer->handler());
  ASSERT_TRUE(producer);
  Status outcome = producer->Wait();
  EXPECT_EQ(outcome.code(), StatusCode::kInvalid);
  EXPECT_THAT(outcome.message(), HasSubstr("on_schema returned ECANCELED"));
  EXPECT_EQ(reader->next_calls(), 0);
  EXPECT_EQ(consumer->schema().status().code(), StatusCode::kCancelled);
  EXPECT_EQ(consumer->Next().status().code(), StatusCode::kCancelled);
}

TEST_F(AsyncStreamTest, RequestAfterCancelIsANoOp) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(4, 2));
  CConsumer consumer;
  consumer.cancel_in_on_schema = true;  // cancel twice, then request(5) and request(-1)
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer.WaitReleased());
  EXPECT_EQ(consumer.sequence, "SR");  // no task, no on_error for request(-1)
  EXPECT_EQ(reader->next_calls(), 0);
  EXPECT_EQ(producer->Wait().code(), StatusCode::kCancelled);
}

// ---- Errors -------------------------------------------------------------------------

TEST_F(AsyncStreamTest, ASourceErrorBecomesOnErrorThenRelease) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(5, 2));
  reader->FailAt(2, Status::IOError("disk vanished"));
  auto consumer = MakeConsumer(8);
  Spy spy(consumer->handler());
  auto producer = MustExport(reader, &spy.handler);
  ASSERT_TRUE(producer);

  // Batches that arrived before the error are delivered, then the error.
  for (int64_t i = 0; i < 2; ++i) {
    auto batch = consumer->Next();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    ExpectCpuRows(*batch, i * 2, 2);
  }
  auto failed = consumer->Next();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIOError);
  EXPECT_THAT(failed.status().message(), HasSubstr("disk vanished"));
  EXPECT_THAT(failed.status().message(), HasSubstr("EIO"));
  EXPECT_EQ(consumer->Next().status(), failed.status());  // sticky

  EXPECT_TRUE(spy.WaitReleased());
  EXPECT_EQ(spy.sequence(), "STTXR");
  {
    std::lock_guard<std::mutex> lock(spy.mutex);
    EXPECT_EQ(spy.error_code, EIO);
    EXPECT_THAT(spy.error_message, HasSubstr("batch 2: disk vanished"));
  }
  Status outcome = producer->Wait();
  EXPECT_EQ(outcome.code(), StatusCode::kIOError);
  EXPECT_THAT(outcome.message(), HasSubstr("disk vanished"));
}

TEST_F(AsyncStreamTest, ABatchOnAnotherDeviceTypeIsAnError) {
  // The source announces OpenCL but yields a CPU batch: no OpenCL device needed.
  auto reader =
      std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(1, 2), DeviceType::kOpenCL);
  CConsumer consumer;
  consumer.request_in_on_schema = 4;
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer.WaitReleased());
  EXPECT_EQ(consumer.sequence, "SXR");
  EXPECT_EQ(consumer.producer_device_type, ARROW_DEVICE_OPENCL);
  EXPECT_EQ(consumer.error_code, EINVAL);
  EXPECT_THAT(consumer.error_message,
              HasSubstr("batch 0 is on cpu, but the stream's device type is opencl"));
}

TEST_F(AsyncStreamTest, ABatchWithAnotherSchemaIsAnError) {
  auto other = std::make_shared<Schema>();
  other->fields = {field("y", int64()), field("name", utf8())};
  auto reader = std::make_shared<VectorReader>(other, CpuBatches(1, 2));
  CConsumer consumer;
  consumer.request_in_on_schema = 1;
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer.WaitReleased());
  EXPECT_EQ(consumer.sequence, "SXR");
  EXPECT_THAT(consumer.error_message, HasSubstr("batch 0 has schema"));
  EXPECT_EQ(producer->Wait().code(), StatusCode::kInvalid);
}

TEST_F(AsyncStreamTest, RequestingZeroIsAnError) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(2, 2));
  CConsumer consumer;
  consumer.request_in_on_schema = 0;
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer.WaitFor([&] { return consumer.producer != nullptr; }));
  consumer.Request(0);
  ASSERT_TRUE(consumer.WaitReleased());
  EXPECT_EQ(consumer.sequence, "SXR");
  EXPECT_EQ(consumer.error_code, EINVAL);
  EXPECT_THAT(consumer.error_message, HasSubstr("request needs n > 0, got 0"));
  EXPECT_EQ(reader->next_calls(), 0);
}

TEST_F(AsyncStreamTest, ANonZeroOnSchemaStopsTheProducer) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(2, 2));
  CConsumer consumer;
  consumer.request_in_on_schema = 2;
  consumer.on_schema_result = EIO;
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer.WaitReleased());
  EXPECT_EQ(consumer.sequence, "SR");
  EXPECT_EQ(consumer.schema_format, "+s");
  EXPECT_EQ(consumer.schema_children, 2);
  EXPECT_EQ(reader->next_calls(), 0);
  Status outcome = producer->Wait();
  EXPECT_EQ(outcome.code(), StatusCode::kInvalid);
  EXPECT_THAT(outcome.message(), HasSubstr("on_schema returned EIO"));
}

TEST_F(AsyncStreamTest, ANonZeroOnNextTaskStopsTheProducer) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(6, 2));
  CConsumer consumer;
  consumer.request_in_on_schema = 10;
  consumer.refuse_task = 1;
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer.WaitReleased());
  EXPECT_EQ(consumer.sequence, "ST!R");  // no on_error after a consumer's refusal
  EXPECT_EQ(reader->next_calls(), 2);
  Status outcome = producer->Wait();
  EXPECT_EQ(outcome.code(), StatusCode::kInvalid);
  EXPECT_THAT(outcome.message(), HasSubstr("on_next_task returned EIO (5) for batch 1"));
}

TEST_F(AsyncStreamTest, ExtractDataWorksExactlyOnce) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(2, 4));
  CConsumer consumer;
  consumer.request_in_on_schema = 3;
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer.WaitReleased());
  ASSERT_EQ(consumer.sequence, "STTER");
  producer.reset();  // tasks do not depend on the producer object

  ArrowAsyncTask task = consumer.TakeTask();
  ArrowDeviceArray chunk{};
  ASSERT_EQ(task.extract_data(&task, &chunk), 0);
  ExpectCpuChunk(chunk, 0, 4);
  ArrowDeviceArray second{};
  EXPECT_EQ(task.extract_data(&task, &second), EINVAL);
  EXPECT_EQ(second.array.release, nullptr);  // untouched
  chunk.array.release(&chunk.array);

  // Discarding (out == NULL) counts as the one extraction too.
  ArrowAsyncTask discarded = consumer.TakeTask();
  EXPECT_EQ(discarded.extract_data(&discarded, nullptr), 0);
  EXPECT_EQ(discarded.extract_data(&discarded, &second), EINVAL);
  EXPECT_EQ(second.array.release, nullptr);
}

// A batch whose int64 column lacks its values buffer: exporting it fails.
DeviceBatch MakeMalformedBatch() {
  auto data = std::make_shared<ArrayData>();
  data->type = int64();
  data->length = 3;
  data->buffers = {nullptr};
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("x", int64())};
  auto batch = RecordBatch::Make(schema, 3, {data});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return DeviceBatch{*batch, DeviceRegistry::Global().cpu(), nullptr};
}

TEST_F(AsyncStreamTest, AFailedExtractionIsFollowedByOnErrorThenRelease) {
  DeviceBatch malformed = MakeMalformedBatch();
  auto reader = std::make_shared<VectorReader>(malformed.batch->schema(),
                                               std::vector<DeviceBatch>{malformed});
  CConsumer consumer;
  consumer.request_in_on_schema = 1;  // the producer then waits: the error cannot race the end
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer.WaitFor([&] { return consumer.tasks_received == 1; }));
  ArrowAsyncTask task = consumer.TakeTask();
  ArrowDeviceArray chunk{};
  EXPECT_EQ(task.extract_data(&task, &chunk), EINVAL);
  EXPECT_EQ(chunk.array.release, nullptr);
  ASSERT_TRUE(consumer.WaitReleased());
  EXPECT_EQ(consumer.sequence, "STXR");
  EXPECT_EQ(consumer.error_code, EINVAL);
  EXPECT_THAT(consumer.error_message, HasSubstr("extract_data of task 0: "));
  Status outcome = producer->Wait();
  EXPECT_EQ(outcome.code(), StatusCode::kInvalid);
  EXPECT_THAT(outcome.message(), HasSubstr("extract_data of task 0"));
}

TEST_F(AsyncStreamTest, TheFerryConsumerReportsAFailedExtractionAndCancels) {
  DeviceBatch malformed = MakeMalformedBatch();
  auto reader = std::make_shared<VectorReader>(malformed.batch->schema(),
                                               std::vector<DeviceBatch>{malformed});
  auto consumer = MakeConsumer(1);
  Spy spy(consumer->handler());
  auto producer = MustExport(reader, &spy.handler);
  ASSERT_TRUE(producer);
  auto next = consumer->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(next.status().message(), HasSubstr("extract_data of task 0 returned EINVAL"));
  EXPECT_EQ(consumer->Next().status(), next.status());  // the stream stays failed
  EXPECT_TRUE(consumer->WaitReleased().ok());
  EXPECT_TRUE(spy.WaitReleased());
  // The consumer asked for one more task before extracting, so the producer
  // may already have ended the stream; otherwise it learns of the failure
  // from extract_data itself and reports it, whether or not the consumer's
  // cancel reached it first.
  EXPECT_THAT(spy.sequence(), ::testing::AnyOf("STXR", "STER"));
  EXPECT_LE(spy.cancels.load(), 1);
  EXPECT_EQ(spy.releases.load(), 1);
}

TEST_F(AsyncStreamTest, BadArgumentsAreRejectedAndTheHandlerReleased) {
  auto reader = std::make_shared<VectorReader>(TwoColumnSchema(), CpuBatches(1, 1));
  auto no_handler = ExportAsyncDeviceStream(reader, nullptr);
  ASSERT_FALSE(no_handler.ok());
  EXPECT_THAT(no_handler.status().message(), HasSubstr("handler is null"));

  CConsumer consumer;
  auto no_source = ExportAsyncDeviceStream(nullptr, &consumer.handler);
  ASSERT_FALSE(no_source.ok());
  EXPECT_THAT(no_source.status().message(), HasSubstr("source is null"));
  EXPECT_EQ(consumer.sequence, "R");

  CConsumer incomplete;
  incomplete.handler.on_next_task = nullptr;
  auto missing = ExportAsyncDeviceStream(reader, &incomplete.handler);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("lacks on_schema, on_next_task or on_error"));
  EXPECT_EQ(incomplete.sequence, "R");

  // An already released handler is refused without calling anything.
  auto released = ExportAsyncDeviceStream(reader, &consumer.handler);
  ASSERT_FALSE(released.ok());
  EXPECT_THAT(released.status().message(), HasSubstr("released"));
  EXPECT_EQ(consumer.sequence, "R");
  EXPECT_EQ(reader->next_calls(), 0);
}

// ---- Foreign C producer → Ferry consumer --------------------------------------------

TEST_F(AsyncStreamTest, AForeignCProducerFeedsTheFerryConsumer) {
  constexpr int64_t kBatches = 7;
  CProducer c_producer;
  auto consumer = MakeConsumer(2);
  c_producer.Attach(consumer->handler());
  std::thread producer_thread([&] {
    if (c_producer.SendSchema() != 0) {
      c_producer.Release();
      return;
    }
    for (int64_t i = 0; i < kBatches; ++i) {
      if (!c_producer.TakeCredit()) break;
      if (c_producer.SendTask(i * 10, 10) != 0) break;
    }
    c_producer.SendEnd();
    c_producer.Release();
  });

  auto schema = consumer->schema();
  ASSERT_TRUE(schema.ok()) << schema.status().ToString();
  ASSERT_EQ((*schema)->num_fields(), 1);
  EXPECT_EQ((*schema)->fields[0].name, "x");
  for (int64_t i = 0; i < kBatches; ++i) {
    auto batch = consumer->Next();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    ASSERT_NE(batch->batch, nullptr);
    ASSERT_EQ(batch->batch->num_rows(), 10);
    const int64_t* values = batch->batch->column(0)->GetValues<int64_t>(1);
    for (int64_t row = 0; row < 10; ++row) ASSERT_EQ(values[row], i * 10 + row);
  }
  auto end = consumer->Next();
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(end->batch, nullptr);
  producer_thread.join();
  EXPECT_TRUE(consumer->released());
  EXPECT_EQ(c_producer.tasks_extracted.load(), kBatches);
  EXPECT_EQ(c_producer.cancel_calls(), 0);
  EXPECT_LE(c_producer.requested_total(), 2 + kBatches);
  EXPECT_EQ(c_producer.schemas_released.load(), 0);  // the consumer keeps the stream's schema
  consumer.reset();
  EXPECT_EQ(c_producer.schemas_released.load(), 1);
  // The imported batches were dropped above: every foreign array was released.
  EXPECT_EQ(c_producer.arrays_released.load(), c_producer.arrays_made.load());
}

TEST_F(AsyncStreamTest, AForeignProducersErrorReachesTheConsumerAfterItsBatches) {
  CProducer c_producer;
  auto consumer = MakeConsumer(4);
  c_producer.Attach(consumer->handler());
  ASSERT_EQ(c_producer.SendSchema(), 0);
  ASSERT_EQ(c_producer.SendTask(0, 3), 0);
  c_producer.SendError(EIO, "sensor offline");
  c_producer.Release();
  auto first = consumer->Next();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->batch->num_rows(), 3);
  auto failed = consumer->Next();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIOError);
  EXPECT_THAT(failed.status().message(), HasSubstr("sensor offline"));
  EXPECT_TRUE(consumer->schema().ok());  // the schema stays available
}

TEST_F(AsyncStreamTest, ConsumerCancelReachesAForeignProducerOnce) {
  CProducer c_producer;
  auto consumer = MakeConsumer(2);
  c_producer.Attach(consumer->handler());
  ASSERT_EQ(c_producer.SendSchema(), 0);
  ASSERT_EQ(c_producer.SendTask(0, 1), 0);
  consumer->Cancel();
  consumer->Cancel();
  EXPECT_EQ(c_producer.cancel_calls(), 1);
  // The buffered task was discarded; one still in flight after cancel is accepted.
  EXPECT_EQ(c_producer.tasks_extracted.load(), 1);
  EXPECT_EQ(c_producer.SendTask(1, 1), 0);
  EXPECT_EQ(c_producer.tasks_extracted.load(), 2);
  c_producer.Release();
  EXPECT_TRUE(consumer->released());
  EXPECT_EQ(c_producer.arrays_made.load(), 0);
}

TEST_F(AsyncStreamTest, ProtocolViolationsOfAForeignProducerAreNamed) {
  struct Case {
    const char* name;
    std::function<void(CProducer&)> play;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"task before schema", [](CProducer& p) { EXPECT_EQ(p.SendTask(0, 1), EINVAL); },
       "on_next_task was called before on_schema"},
      {"schema twice",
       [](CProducer& p) {
         EXPECT_EQ(p.SendSchema(), 0);
         EXPECT_EQ(p.SendSchema(), EINVAL);
       },
       "on_schema was called twice"},
      {"schema not a struct", [](CProducer& p) { EXPECT_EQ(p.SendSchema("l"), EINVAL); },
       "on_schema: "},
      {"unknown device type",
       [](CProducer& p) {
         p.producer.device_type = 5;
         EXPECT_EQ(p.SendSchema(), EINVAL);
       },
       "ArrowAsyncProducer::device_type"},
      {"task after the end",
       [](CProducer& p) {
         EXPECT_EQ(p.SendSchema(), 0);
         EXPECT_EQ(p.SendEnd(), 0);
         EXPECT_EQ(p.SendTask(0, 1), EINVAL);
       },
       "after the end of the stream"},
      {"chunk on another device type",
       [](CProducer& p) {
         EXPECT_EQ(p.SendSchema(), 0);
         EXPECT_EQ(p.SendTask(0, 1, ARROW_DEVICE_OPENCL), 0);
       },
       "task 0 is on device type opencl, but the producer announced cpu"},
      {"release without end", [](CProducer& p) { EXPECT_EQ(p.SendSchema(), 0); },
       "without ending the stream"},
      {"release without schema", [](CProducer&) {}, "without calling on_schema"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CProducer c_producer;
    auto consumer = MakeConsumer(2);
    c_producer.Attach(consumer->handler());
    c.play(c_producer);
    c_producer.Release();
    auto next = consumer->Next();
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status().code(), StatusCode::kInvalid);
    EXPECT_THAT(next.status().message(), HasSubstr(c.expected));
    consumer.reset();
    EXPECT_EQ(c_producer.tasks_extracted.load(), c_producer.tasks_made.load());
    EXPECT_EQ(c_producer.arrays_released.load(), c_producer.arrays_made.load());
  }
}

// ---- The consumer on its own --------------------------------------------------------

TEST_F(AsyncStreamTest, ConsumerOptionsAreChecked) {
  AsyncConsumerOptions options;
  options.window = 0;
  auto consumer = AsyncDeviceStreamConsumer::Make(options);
  ASSERT_FALSE(consumer.ok());
  EXPECT_THAT(consumer.status().message(), HasSubstr("window must be at least 1, got 0"));
  options.window = 1;
  EXPECT_TRUE(AsyncDeviceStreamConsumer::Make(options).ok());
}

TEST_F(AsyncStreamTest, NextTimesOutWithoutDataAndStaysUsable) {
  CProducer c_producer;
  auto consumer = MakeConsumer(1);
  c_producer.Attach(consumer->handler());
  EXPECT_EQ(consumer->schema(10ms).status().code(), StatusCode::kTimedOut);
  ASSERT_EQ(c_producer.SendSchema(), 0);
  auto waited = consumer->Next(10ms);
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().code(), StatusCode::kTimedOut);
  EXPECT_THAT(waited.status().message(), HasSubstr("no batch"));
  ASSERT_EQ(c_producer.SendTask(5, 2), 0);
  auto batch = consumer->Next();
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->batch->num_rows(), 2);
  EXPECT_EQ(c_producer.requested_total(), 2);  // the window, then one for the batch taken
  ASSERT_EQ(c_producer.SendEnd(), 0);
  c_producer.Release();
  auto end = consumer->Next();
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->batch, nullptr);
}

TEST_F(AsyncStreamTest, AHandlerNeverHandedOverCanBeReleasedByItsOwner) {
  auto consumer = MakeConsumer();
  ArrowAsyncDeviceStreamHandler* handler = consumer->handler();
  EXPECT_EQ(consumer->handler(), handler);
  consumer.reset();              // the handler keeps the state alive ...
  handler->release(handler);     // ... until its release (LeakSanitizer checks it is freed)
  auto unused = MakeConsumer();  // a consumer whose handler was never asked for
}

// ---- Devices: OpenCL (PoCL in CI) and CUDA (when a GPU is present) -----------------------

class AsyncStreamDeviceTest : public AsyncStreamTest,
                              public ::testing::WithParamInterface<DeviceType> {
 protected:
  void SetUp() override {
    auto found = DeviceRegistry::Global().Get(GetParam(), 0);
    if (!found.ok()) {
      GTEST_SKIP() << "no " << DeviceTypeName(GetParam())
                   << " device present: " << found.status().message();
    }
    device_ = *found;
    auto kernels = testing::KernelsFor(device_);
    ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
    kernels_ = std::move(*kernels);
  }

  // A batch whose int64 column "x" a kernel fills with start, start+1, ...
  // on the device; the event is recorded after the kernel.
  DeviceBatch MakeDeviceBatch(Queue* queue, int64_t start, int64_t length) {
    auto values = device_->Allocate(length * 8);
    EXPECT_TRUE(values.ok()) << values.status().ToString();
    EXPECT_TRUE(kernels_->FillSequence(queue, (*values)->mutable_data(), length, start).ok());
    auto event = queue->RecordEvent();
    EXPECT_TRUE(event.ok()) << event.status().ToString();
    auto data = std::make_shared<ArrayData>();
    data->type = int64();
    data->length = length;
    data->buffers = {nullptr, *values};
    auto schema = std::make_shared<Schema>();
    schema->fields = {field("x", int64())};
    auto batch = RecordBatch::Make(schema, length, {data});
    EXPECT_TRUE(batch.ok()) << batch.status().ToString();
    return DeviceBatch{*batch, device_, *event};
  }

  Device* device_ = nullptr;
  std::unique_ptr<testing::Kernels> kernels_;
};

TEST_P(AsyncStreamDeviceTest, DeviceBatchesCrossWithoutCopies) {
  constexpr int64_t kLength = 4096;
  constexpr int64_t kBatches = 4;
  auto queue = device_->CreateQueue();
  ASSERT_TRUE(queue.ok()) << queue.status().ToString();
  std::vector<DeviceBatch> batches;
  for (int64_t i = 0; i < kBatches; ++i) {
    batches.push_back(MakeDeviceBatch(queue->get(), i * kLength, kLength));
  }
  auto reader = std::make_shared<VectorReader>(batches[0].batch->schema(), batches, GetParam());
  auto consumer = MakeConsumer(2);
  Spy spy(consumer->handler());

  using telemetry::Counter;
  const int64_t h2d = telemetry::Get(Counter::kBytesCopiedH2D);
  const int64_t d2h = telemetry::Get(Counter::kBytesCopiedD2H);
  const int64_t d2d = telemetry::Get(Counter::kBytesCopiedD2D);
  const int64_t host = telemetry::Get(Counter::kBytesCopiedHost);
  auto producer = MustExport(reader, &spy.handler);
  ASSERT_TRUE(producer);
  std::vector<DeviceBatch> received;
  while (true) {
    auto batch = consumer->Next();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    if (batch->batch == nullptr) break;
    received.push_back(*batch);
  }
  EXPECT_EQ(consumer->device_type(), GetParam());
  EXPECT_EQ(telemetry::Get(Counter::kBytesCopiedH2D), h2d);
  EXPECT_EQ(telemetry::Get(Counter::kBytesCopiedD2H), d2h);
  EXPECT_EQ(telemetry::Get(Counter::kBytesCopiedD2D), d2d);
  EXPECT_EQ(telemetry::Get(Counter::kBytesCopiedHost), host);
  EXPECT_TRUE(producer->Wait().ok());
  EXPECT_FALSE(spy.over_delivered.load());

  ASSERT_EQ(received.size(), static_cast<size_t>(kBatches));
  auto reader_queue = device_->CreateQueue();
  ASSERT_TRUE(reader_queue.ok());
  for (int64_t i = 0; i < kBatches; ++i) {
    const DeviceBatch& got = received[static_cast<size_t>(i)];
    EXPECT_EQ(got.device, device_);
    const auto& column = got.batch->column(0);
    // The very same device memory: zero-copy.
    EXPECT_EQ(column->buffers[1]->data(),
              batches[static_cast<size_t>(i)].batch->column(0)->buffers[1]->data());
    if (got.event != nullptr) {
      ASSERT_TRUE((*reader_queue)->WaitEvent(got.event->sync_event()).ok());
    }
    auto sum = kernels_->Sum(reader_queue->get(), column->buffers[1]->data(), kLength);
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    const int64_t start = i * kLength;
    EXPECT_EQ(*sum, kLength * start + kLength * (kLength - 1) / 2);
  }
}

TEST_P(AsyncStreamDeviceTest, AForeignConsumerSeesTheDeviceAndTheEvent) {
  auto queue = device_->CreateQueue();
  ASSERT_TRUE(queue.ok()) << queue.status().ToString();
  DeviceBatch batch = MakeDeviceBatch(queue->get(), 100, 256);
  auto reader = std::make_shared<VectorReader>(batch.batch->schema(),
                                               std::vector<DeviceBatch>{batch}, GetParam());
  CConsumer consumer;
  consumer.request_in_on_schema = 2;
  auto producer = MustExport(reader, &consumer.handler);
  ASSERT_TRUE(producer);
  ASSERT_TRUE(consumer.WaitReleased());
  ASSERT_EQ(consumer.sequence, "STER");
  EXPECT_EQ(consumer.producer_device_type, static_cast<ArrowDeviceType>(GetParam()));
  ArrowAsyncTask task = consumer.TakeTask();
  ArrowDeviceArray chunk{};
  ASSERT_EQ(task.extract_data(&task, &chunk), 0);
  EXPECT_EQ(chunk.device_type, static_cast<ArrowDeviceType>(GetParam()));
  EXPECT_EQ(chunk.device_id, device_->id());
  EXPECT_NE(chunk.sync_event, nullptr);
  EXPECT_EQ(chunk.array.children[0]->buffers[1], batch.batch->column(0)->buffers[1]->data());
  // The consumer waits on the producer's event, then reads on the device.
  auto reader_queue = device_->CreateQueue();
  ASSERT_TRUE(reader_queue.ok());
  ASSERT_TRUE((*reader_queue)->WaitEvent(chunk.sync_event).ok());
  auto sum = kernels_->Sum(reader_queue->get(), chunk.array.children[0]->buffers[1], 256);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(*sum, 256 * 100 + 256 * 255 / 2);
  chunk.array.release(&chunk.array);
}

INSTANTIATE_TEST_SUITE_P(Devices, AsyncStreamDeviceTest,
                         ::testing::Values(DeviceType::kOpenCL, DeviceType::kCuda),
                         [](const ::testing::TestParamInfo<DeviceType>& info) {
                           return std::string(DeviceTypeName(info.param));
                         });

}  // namespace
}  // namespace ferry::device
