#include "ferry/device/async_stream.h"

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "ferry/base/telemetry.h"
#include "ferry/exchange/bridge.h"

namespace ferry::device {
namespace {

std::atomic<int64_t> g_running_producer_threads{0};

// "EINVAL (22)" for the codes Ferry maps, the number otherwise: messages stay
// readable without strerror, which is not thread-safe.
std::string DescribeErrno(int code) {
  const char* name = nullptr;
  switch (code) {
    case EINVAL:
      name = "EINVAL";
      break;
    case ENOMEM:
      name = "ENOMEM";
      break;
    case ENOSYS:
      name = "ENOSYS";
      break;
    case EIO:
      name = "EIO";
      break;
    case ECANCELED:
      name = "ECANCELED";
      break;
    case ETIMEDOUT:
      name = "ETIMEDOUT";
      break;
    default:
      break;
  }
  std::string number = std::to_string(code);
  return name ? std::string(name) + " (" + number + ")" : "code " + number;
}

// A Status for an errno-style code; 0 (which the C side should never use for
// a failure) still gives an error.
Status StatusFromCode(int code, std::string message) {
  if (code == 0) return Status::UnknownError(std::move(message));
  return Status::FromErrno(code, std::move(message));
}

std::string Milliseconds(std::chrono::nanoseconds duration) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(duration).count()) +
         " ms";
}

// A deadline that does not overflow for "wait forever"-sized timeouts.
std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::nanoseconds timeout) {
  const auto now = std::chrono::steady_clock::now();
  if (timeout > std::chrono::hours(24 * 365)) return now + std::chrono::hours(24 * 365);
  return now + timeout;
}

// Discards a task the consumer does not want: extract_data(NULL) is how the
// producer frees it.
void DiscardTask(ArrowAsyncTask* task) {
  if (task != nullptr && task->extract_data != nullptr) task->extract_data(task, nullptr);
}

void DiscardTasks(std::deque<ArrowAsyncTask>* tasks) {
  for (ArrowAsyncTask& task : *tasks) DiscardTask(&task);
  tasks->clear();
}

}  // namespace

int64_t RunningAsyncProducerThreads() { return g_running_producer_threads.load(); }

// ---- Producer ---------------------------------------------------------------

class AsyncDeviceStreamProducer::Core : public std::enable_shared_from_this<Core> {
 public:
  Core(std::shared_ptr<DeviceBatchReader> source, ArrowAsyncDeviceStreamHandler* handler,
       AsyncExportOptions options)
      : source_(std::move(source)), handler_(handler), options_(std::move(options)) {
    encoded_metadata_ = EncodeMetadata(options_.additional_metadata);
    c_producer_.device_type = static_cast<ArrowDeviceType>(source_->device_type());
    c_producer_.request = &Core::RequestThunk;
    c_producer_.cancel = &Core::CancelThunk;
    c_producer_.additional_metadata =
        options_.additional_metadata.empty() ? nullptr : encoded_metadata_.c_str();
    c_producer_.private_data = this;
  }

  Status StartThread() {
    g_running_producer_threads.fetch_add(1);
    try {
      thread_ = std::thread([self = shared_from_this()] { self->Run(); });
    } catch (const std::system_error& error) {
      g_running_producer_threads.fetch_sub(1);
      return Status::IOError(std::string("cannot start the async producer thread: ") +
                             error.what());
    }
    return Status::OK();
  }

  // Cancels and joins, or detaches when called on the producer thread itself.
  void Stop() {
    Cancel();
    if (!thread_.joinable()) return;
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();  // the thread holds its own reference to the core
    } else {
      thread_.join();
    }
  }

  void Cancel() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cancelled_) return;
      cancelled_ = true;
    }
    wake_.notify_all();
  }

  void Request(int64_t n) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cancelled_ || released_) return;
      if (n <= 0) {
        if (pending_error_.ok()) {
          pending_error_ =
              Status::Invalid("ArrowAsyncProducer::request needs n > 0, got " + std::to_string(n));
        }
      } else if (credit_ > std::numeric_limits<int64_t>::max() - n) {
        credit_ = std::numeric_limits<int64_t>::max();
      } else {
        credit_ += n;
      }
    }
    wake_.notify_all();
  }

  // A task's extract_data failed: the spec wants on_error to follow, which
  // only the producer thread may call.
  void ReportTaskFailure(const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (released_ || !pending_error_.ok()) return;
      pending_error_ = status;
    }
    wake_.notify_all();
  }

  Status Wait(std::chrono::nanoseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!finished_cv_.wait_until(lock, DeadlineAfter(timeout), [&] { return released_; })) {
      return Status::TimedOut("the async producer is still running after " + Milliseconds(timeout));
    }
    return outcome_;
  }

  bool finished() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return released_;
  }
  int64_t tasks_sent() const { return tasks_sent_.load(); }

 private:
  struct Task {
    DeviceBatch batch;
    int64_t index = 0;
    ExportOptions export_options;
    std::weak_ptr<Core> core;
  };

  static Core* FromProducer(ArrowAsyncProducer* self) {
    return self == nullptr ? nullptr : static_cast<Core*>(self->private_data);
  }
  static void RequestThunk(ArrowAsyncProducer* self, int64_t n) {
    if (Core* core = FromProducer(self)) core->Request(n);
  }
  static void CancelThunk(ArrowAsyncProducer* self) {
    if (Core* core = FromProducer(self)) core->Cancel();
  }

  // Frees the task on every call with private_data set; a second call on the
  // same struct finds it NULL and fails without touching `out`.
  static int ExtractThunk(ArrowAsyncTask* self, ArrowDeviceArray* out) {
    if (self == nullptr || self->private_data == nullptr) return EINVAL;
    std::unique_ptr<Task> task(static_cast<Task*>(self->private_data));
    self->private_data = nullptr;
    if (out == nullptr) return 0;
    const DeviceBatch& batch = task->batch;
    Status status =
        ExportDeviceArray(DeviceArray{batch.batch->ToStructArray(), batch.device, batch.event}, out,
                          nullptr, task->export_options);
    if (!status.ok()) {
      status = status.WithPrefix("extract_data of task " + std::to_string(task->index) + ": ");
      if (auto core = task->core.lock()) core->ReportTaskFailure(status);
      return status.ToErrno();
    }
    telemetry::Add(telemetry::Counter::kStreamBatchesExported);
    return 0;
  }

  void Run() {
    Status outcome = Stream();
    handler_->release(handler_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
      outcome_ = std::move(outcome);
    }
    finished_cv_.notify_all();
    g_running_producer_threads.fetch_sub(1);
  }

  bool IsCancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
  }

  void SendError(const Status& status) {
    handler_->on_error(handler_, status.ToErrno(), status.message().c_str(), nullptr);
  }

  // Waits for credit; returns false (with `stop` set) when the stream must
  // end instead.
  bool AwaitCredit(Status* stop, bool* report) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return credit_ > 0 || cancelled_ || !pending_error_.ok(); });
    if (!pending_error_.ok()) {
      *stop = pending_error_;
      *report = true;
      return false;
    }
    if (cancelled_) {
      *stop = Status::Cancelled("the async stream was cancelled");
      *report = false;
      return false;
    }
    --credit_;
    return true;
  }

  Status CheckBatch(const DeviceBatch& batch, int64_t index, const Schema& schema) const {
    const std::string which = "batch " + std::to_string(index);
    if (batch.device == nullptr) return Status::Invalid(which + " has no device");
    if (batch.device->type() != source_->device_type()) {
      return Status::Invalid(which + " is on " + DeviceTypeName(batch.device->type()) +
                             ", but the stream's device type is " +
                             DeviceTypeName(source_->device_type()));
    }
    if (!batch.batch->schema()->Equals(schema, /*check_metadata=*/false)) {
      return Status::Invalid(which + " has schema " + batch.batch->schema()->ToString() +
                             ", but the stream's schema is " + schema.ToString());
    }
    return Status::OK();
  }

  // Everything up to (not including) release; returns the outcome.
  Status Stream() {
    handler_->producer = &c_producer_;
    SchemaPtr schema = source_->schema();
    if (schema == nullptr) {
      Status status = Status::Invalid("the async stream's source has no schema");
      SendError(status);
      return status;
    }
    ArrowSchema c_schema{};
    Status exported = ExportSchema(*schema, &c_schema);
    if (!exported.ok()) {
      SendError(exported);
      return exported;
    }
    const int schema_code = handler_->on_schema(handler_, &c_schema);
    // A handler must move or release the schema; one that did neither would leak it.
    if (c_schema.release != nullptr) c_schema.release(&c_schema);
    if (schema_code != 0) {
      return Status::Invalid("the consumer's on_schema returned " + DescribeErrno(schema_code) +
                             "; the stream stopped before any batch");
    }

    for (int64_t index = 0;; ++index) {
      Status stop;
      bool report = false;
      if (!AwaitCredit(&stop, &report)) {
        if (report) SendError(stop);
        return stop;
      }
      Result<DeviceBatch> next = source_->Next();
      if (!next.ok()) {
        Status status = next.status().WithPrefix("batch " + std::to_string(index) + ": ");
        SendError(status);
        return status;
      }
      if (next->batch == nullptr) {
        handler_->on_next_task(handler_, nullptr, nullptr);
        return Status::OK();
      }
      if (IsCancelled()) return Status::Cancelled("the async stream was cancelled");
      Status checked = CheckBatch(*next, index, *schema);
      if (!checked.ok()) {
        SendError(checked);
        return checked;
      }
      auto task_state = std::make_unique<Task>();
      task_state->batch = std::move(*next);
      task_state->index = index;
      task_state->export_options = options_.export_options;
      task_state->core = weak_from_this();
      ArrowAsyncTask task{&Core::ExtractThunk, task_state.release()};
      tasks_sent_.fetch_add(1);
      const int task_code = handler_->on_next_task(handler_, &task, nullptr);
      if (task_code != 0) {
        return Status::Invalid("the consumer's on_next_task returned " + DescribeErrno(task_code) +
                               " for batch " + std::to_string(index) + "; the stream stopped");
      }
    }
  }

  const std::shared_ptr<DeviceBatchReader> source_;
  ArrowAsyncDeviceStreamHandler* const handler_;
  const AsyncExportOptions options_;
  std::string encoded_metadata_;
  ArrowAsyncProducer c_producer_{};
  std::thread thread_;
  std::atomic<int64_t> tasks_sent_{0};

  mutable std::mutex mutex_;
  std::condition_variable wake_;         // credit, cancellation or an error to report
  std::condition_variable finished_cv_;  // the handler was released
  int64_t credit_ = 0;                   // guarded by mutex_
  bool cancelled_ = false;               // guarded by mutex_
  bool released_ = false;                // guarded by mutex_
  Status pending_error_;                 // guarded by mutex_
  Status outcome_;                       // guarded by mutex_
};

namespace {

Status RejectHandler(ArrowAsyncDeviceStreamHandler* handler, Status status) {
  if (handler != nullptr && handler->release != nullptr) handler->release(handler);
  return status;
}

}  // namespace

Result<std::unique_ptr<AsyncDeviceStreamProducer>> ExportAsyncDeviceStream(
    std::shared_ptr<DeviceBatchReader> source, ArrowAsyncDeviceStreamHandler* handler,
    AsyncExportOptions options) {
  if (handler == nullptr) return Status::Invalid("ExportAsyncDeviceStream: handler is null");
  if (handler->release == nullptr) {
    return Status::Invalid("ExportAsyncDeviceStream: the handler is released (release is null)");
  }
  if (handler->on_schema == nullptr || handler->on_next_task == nullptr ||
      handler->on_error == nullptr) {
    return RejectHandler(handler, Status::Invalid("ExportAsyncDeviceStream: the handler lacks "
                                                  "on_schema, on_next_task or on_error"));
  }
  if (source == nullptr) {
    return RejectHandler(handler, Status::Invalid("ExportAsyncDeviceStream: source is null"));
  }
  auto core = std::make_shared<AsyncDeviceStreamProducer::Core>(std::move(source), handler,
                                                                std::move(options));
  Status started = core->StartThread();
  if (!started.ok()) return RejectHandler(handler, started);
  return std::unique_ptr<AsyncDeviceStreamProducer>(new AsyncDeviceStreamProducer(std::move(core)));
}

AsyncDeviceStreamProducer::AsyncDeviceStreamProducer(std::shared_ptr<Core> core)
    : core_(std::move(core)) {}
AsyncDeviceStreamProducer::~AsyncDeviceStreamProducer() { core_->Stop(); }
void AsyncDeviceStreamProducer::Cancel() { core_->Cancel(); }
Status AsyncDeviceStreamProducer::Wait(std::chrono::nanoseconds timeout) {
  return core_->Wait(timeout);
}
bool AsyncDeviceStreamProducer::finished() const { return core_->finished(); }
int64_t AsyncDeviceStreamProducer::tasks_sent() const { return core_->tasks_sent(); }

// ---- Consumer ---------------------------------------------------------------

class AsyncDeviceStreamConsumer::State : public std::enable_shared_from_this<State> {
 public:
  explicit State(AsyncConsumerOptions options) : options_(options) {
    handler_.on_schema = &State::OnSchemaThunk;
    handler_.on_next_task = &State::OnNextTaskThunk;
    handler_.on_error = &State::OnErrorThunk;
    handler_.release = &State::ReleaseThunk;
    handler_.producer = nullptr;
    handler_.private_data = nullptr;
  }

  ~State() {
    DiscardTasks(&tasks_);
    if (c_schema_.release != nullptr) c_schema_.release(&c_schema_);
  }

  ArrowAsyncDeviceStreamHandler* Handler() {
    std::lock_guard<std::mutex> lock(mutex_);
    // The handler's own reference keeps this state alive until release.
    if (!handed_out_) {
      handler_.private_data = new std::shared_ptr<State>(shared_from_this());
      handed_out_ = true;
    }
    return &handler_;
  }

  Result<SchemaPtr> GetSchema(std::chrono::nanoseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_until(lock, DeadlineAfter(timeout), [&] {
      return schema_ != nullptr || !error_.ok() || released_ || cancelled_;
    });
    if (schema_ != nullptr) return schema_;
    if (!error_.ok()) return error_;
    if (cancelled_) return Status::Cancelled("the consumer cancelled the async stream");
    if (released_) {
      return Status::Invalid("the producer released the handler without calling on_schema");
    }
    return Status::TimedOut("no schema from the async producer within " + Milliseconds(timeout));
  }

  DeviceType device_type() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return device_type_;
  }
  Metadata additional_metadata() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return additional_metadata_;
  }

  Result<DeviceBatch> Next(std::chrono::nanoseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool ready = changed_.wait_until(lock, DeadlineAfter(timeout), [&] {
      return cancelled_ || failed_ || !tasks_.empty() || end_received_ || !error_.ok() || released_;
    });
    if (!ready) {
      return Status::TimedOut("no batch from the async producer within " + Milliseconds(timeout));
    }
    if (cancelled_) return Status::Cancelled("the consumer cancelled the async stream");
    if (failed_) return error_;
    if (!tasks_.empty()) {
      ArrowAsyncTask task = tasks_.front();
      tasks_.pop_front();
      const int64_t index = consumed_++;
      const bool ask_more = !end_received_ && error_.ok() && !released_;
      if (ask_more) ++requested_;
      lock.unlock();
      if (ask_more) RequestFromProducer(1);
      return Extract(&task, index);
    }
    if (!error_.ok()) return error_;
    if (end_received_) return DeviceBatch{};
    if (schema_ == nullptr) {
      return Status::Invalid("the producer released the handler without calling on_schema");
    }
    return Status::Invalid(
        "the producer released the handler without ending the stream (no on_next_task(NULL), "
        "no on_error)");
  }

  void Cancel() {
    std::deque<ArrowAsyncTask> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cancelled_) return;
      cancelled_ = true;
      dropped.swap(tasks_);
    }
    changed_.notify_all();
    DiscardTasks(&dropped);
    CancelProducer();
  }

  Status WaitReleased(std::chrono::nanoseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_until(lock, DeadlineAfter(timeout), [&] { return released_; })) {
      return Status::TimedOut("the async producer did not release the handler within " +
                              Milliseconds(timeout));
    }
    return Status::OK();
  }

  bool released() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return released_;
  }

 private:
  static State* FromHandler(ArrowAsyncDeviceStreamHandler* self) {
    if (self == nullptr || self->private_data == nullptr) return nullptr;
    return static_cast<std::shared_ptr<State>*>(self->private_data)->get();
  }

  static int OnSchemaThunk(ArrowAsyncDeviceStreamHandler* self, ArrowSchema* schema) {
    State* state = FromHandler(self);
    if (state == nullptr) {
      if (schema != nullptr && schema->release != nullptr) schema->release(schema);
      return EINVAL;
    }
    return state->OnSchema(self->producer, schema);
  }
  static int OnNextTaskThunk(ArrowAsyncDeviceStreamHandler* self, ArrowAsyncTask* task,
                             const char* /*metadata*/) {
    State* state = FromHandler(self);
    if (state == nullptr) {
      DiscardTask(task);
      return EINVAL;
    }
    return state->OnNextTask(task);
  }
  static void OnErrorThunk(ArrowAsyncDeviceStreamHandler* self, int code, const char* message,
                           const char* /*metadata*/) {
    if (State* state = FromHandler(self)) state->OnError(code, message);
  }
  static void ReleaseThunk(ArrowAsyncDeviceStreamHandler* self) {
    State* state = FromHandler(self);
    if (state == nullptr) {
      telemetry::Add(telemetry::Counter::kReleaseErrors);
      return;
    }
    auto* holder = static_cast<std::shared_ptr<State>*>(self->private_data);
    {
      // Waits for a request or cancel in flight: the producer may free its
      // ArrowAsyncProducer as soon as release returns.
      std::lock_guard<std::recursive_mutex> calls(state->producer_calls_);
      std::lock_guard<std::mutex> lock(state->mutex_);
      state->released_ = true;
      state->producer_ = nullptr;
      self->release = nullptr;
      self->private_data = nullptr;
    }
    state->changed_.notify_all();
    delete holder;  // may destroy the state when the consumer is gone
  }

  // A failure on the consumer's side (a protocol violation, a failed
  // extraction or import): the stream fails with `status` and buffered tasks
  // are dropped. The first such failure wins, also over an on_error that
  // raced with it, so that Next() keeps returning what it returned first.
  // Returns the tasks to discard outside the lock.
  std::deque<ArrowAsyncTask> FailLocked(Status status) {
    if (!failed_) error_ = std::move(status);
    failed_ = true;
    std::deque<ArrowAsyncTask> dropped;
    dropped.swap(tasks_);
    return dropped;
  }

  int OnSchema(ArrowAsyncProducer* producer, ArrowSchema* schema) {
    ArrowSchema owned{};
    if (schema != nullptr && schema->release != nullptr) MoveSchema(schema, &owned);
    // Released on every path that does not keep it.
    struct SchemaGuard {
      ArrowSchema* schema;
      ~SchemaGuard() {
        if (schema->release != nullptr) schema->release(schema);
      }
    } guard{&owned};

    std::deque<ArrowAsyncTask> dropped;
    int code = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (schema_received_) {
        dropped =
            FailLocked(Status::Invalid("on_schema was called twice; the spec allows it once"));
        code = EINVAL;
      } else {
        schema_received_ = true;
        if (cancelled_) {
          code = ECANCELED;
        } else if (owned.release == nullptr) {
          dropped = FailLocked(Status::Invalid("on_schema received a null or released schema"));
          code = EINVAL;
        } else if (Status accepted = AcceptSchemaLocked(producer, &owned); !accepted.ok()) {
          dropped = FailLocked(std::move(accepted));
          code = EINVAL;
        } else {
          requested_ = options_.window;
        }
      }
    }
    changed_.notify_all();
    DiscardTasks(&dropped);
    if (code == 0) RequestFromProducer(options_.window);
    return code;
  }

  Status AcceptSchemaLocked(ArrowAsyncProducer* producer, ArrowSchema* owned) {
    if (producer == nullptr) {
      return Status::Invalid("the producer did not set handler->producer before on_schema");
    }
    if (producer->request == nullptr || producer->cancel == nullptr) {
      return Status::Invalid("the producer's ArrowAsyncProducer lacks request or cancel");
    }
    auto type = DeviceTypeFromCode(producer->device_type);
    if (!type.ok()) return type.status().WithPrefix("ArrowAsyncProducer::device_type: ");
    auto metadata = DecodeMetadata(producer->additional_metadata);
    if (!metadata.ok()) {
      return metadata.status().WithPrefix("ArrowAsyncProducer::additional_metadata: ");
    }
    auto schema = ImportSchema(owned);
    if (!schema.ok()) return schema.status().WithPrefix("on_schema: ");
    producer_ = producer;
    device_type_ = *type;
    additional_metadata_ = std::move(*metadata);
    schema_ = std::move(*schema);
    MoveSchema(owned, &c_schema_);
    return Status::OK();
  }

  int OnNextTask(ArrowAsyncTask* task) {
    std::deque<ArrowAsyncTask> dropped;
    int code = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!schema_received_) {
        dropped = FailLocked(Status::Invalid("on_next_task was called before on_schema"));
        code = EINVAL;
      } else if (schema_ == nullptr) {
        code = EINVAL;  // on_schema was refused: only release may follow
      } else if (task == nullptr) {
        end_received_ = true;
      } else if (end_received_) {
        dropped = FailLocked(
            Status::Invalid("on_next_task delivered a task after the end of the stream"));
        code = EINVAL;
      } else if (++received_ > requested_) {
        dropped = FailLocked(Status::Invalid(
            "back-pressure violated: the producer delivered task " + std::to_string(received_) +
            " but only " + std::to_string(requested_) + " were requested"));
        code = EINVAL;
      } else if (task->extract_data == nullptr) {
        dropped = FailLocked(Status::Invalid("on_next_task received a task without extract_data"));
        code = EINVAL;
        task = nullptr;  // nothing can free it
      } else if (cancelled_ || failed_) {
        code = 0;  // unwanted now: discarded below
      } else {
        tasks_.push_back(*task);  // the struct itself lives only during this call
        task = nullptr;
      }
    }
    changed_.notify_all();
    DiscardTasks(&dropped);
    DiscardTask(task);
    return code;
  }

  void OnError(int code, const char* message) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error_.ok()) {
        error_ = StatusFromCode(code, "async producer error " + DescribeErrno(code) + ": " +
                                          (message != nullptr ? message : "(no message)"));
      }
    }
    changed_.notify_all();
  }

  Result<DeviceBatch> Extract(ArrowAsyncTask* task, int64_t index) {
    const std::string which = "task " + std::to_string(index);
    ArrowDeviceArray array{};
    const int code = task->extract_data(task, &array);
    if (code != 0) {
      return FailAndCancel(
          StatusFromCode(code, "extract_data of " + which + " returned " + DescribeErrno(code)));
    }
    if (array.array.release == nullptr) {
      return FailAndCancel(
          Status::Invalid("extract_data of " + which + " returned a released array"));
    }
    const DeviceType expected = device_type();
    if (array.device_type != static_cast<ArrowDeviceType>(expected)) {
      const int32_t got = array.device_type;
      array.array.release(&array.array);
      auto got_type = DeviceTypeFromCode(got);
      return FailAndCancel(Status::Invalid(
          which + " is on device type " +
          (got_type.ok() ? std::string(DeviceTypeName(*got_type)) : std::to_string(got)) +
          ", but the producer announced " + DeviceTypeName(expected)));
    }
    // c_schema_ is written once, in on_schema, before any task is accepted.
    auto imported = ImportDeviceArray(&array, &c_schema_, options_.import_options);
    if (!imported.ok()) return FailAndCancel(imported.status().WithPrefix(which + ": "));
    auto batch = RecordBatch::FromStructArray(imported->data, schema_->metadata);
    if (!batch.ok()) return FailAndCancel(batch.status().WithPrefix(which + ": "));
    telemetry::Add(telemetry::Counter::kStreamBatchesImported);
    return DeviceBatch{std::move(*batch), imported->device, std::move(imported->event)};
  }

  Status FailAndCancel(Status status) {
    std::deque<ArrowAsyncTask> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dropped = FailLocked(std::move(status));
      status = error_;
    }
    changed_.notify_all();
    DiscardTasks(&dropped);
    CancelProducer();
    return status;
  }

  void RequestFromProducer(int64_t n) {
    std::lock_guard<std::recursive_mutex> calls(producer_calls_);
    ArrowAsyncProducer* producer = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (released_ || cancelled_ || producer_ == nullptr) return;
      producer = producer_;
    }
    producer->request(producer, n);
  }

  void CancelProducer() {
    std::lock_guard<std::recursive_mutex> calls(producer_calls_);
    ArrowAsyncProducer* producer = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (released_ || producer_cancelled_ || producer_ == nullptr) return;
      producer_cancelled_ = true;
      producer = producer_;
    }
    // Not under mutex_: a producer may call on_error from inside cancel.
    producer->cancel(producer);
  }

  const AsyncConsumerOptions options_;
  ArrowAsyncDeviceStreamHandler handler_{};

  // Held around every call into the producer and by release, so release
  // never overlaps such a call. Recursive, so a producer that (against the
  // spec) releases from inside cancel does not deadlock.
  std::recursive_mutex producer_calls_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool handed_out_ = false;                    // guarded by mutex_
  ArrowAsyncProducer* producer_ = nullptr;     // guarded by mutex_; null after release
  bool schema_received_ = false;               // guarded by mutex_
  SchemaPtr schema_;                           // guarded by mutex_
  ArrowSchema c_schema_{};                     // written once under mutex_, then read-only
  DeviceType device_type_ = DeviceType::kCpu;  // guarded by mutex_
  Metadata additional_metadata_;               // guarded by mutex_
  std::deque<ArrowAsyncTask> tasks_;           // guarded by mutex_
  int64_t requested_ = 0;                      // guarded by mutex_
  int64_t received_ = 0;                       // guarded by mutex_
  int64_t consumed_ = 0;                       // guarded by mutex_
  bool end_received_ = false;                  // guarded by mutex_
  bool cancelled_ = false;                     // guarded by mutex_
  bool producer_cancelled_ = false;            // guarded by mutex_
  bool failed_ = false;                        // guarded by mutex_: a consumer-side failure
  bool released_ = false;                      // guarded by mutex_
  Status error_;                               // guarded by mutex_
};

Result<std::unique_ptr<AsyncDeviceStreamConsumer>> AsyncDeviceStreamConsumer::Make(
    AsyncConsumerOptions options) {
  if (options.window < 1) {
    return Status::Invalid("AsyncConsumerOptions::window must be at least 1, got " +
                           std::to_string(options.window));
  }
  return std::unique_ptr<AsyncDeviceStreamConsumer>(
      new AsyncDeviceStreamConsumer(std::make_shared<State>(options)));
}

AsyncDeviceStreamConsumer::AsyncDeviceStreamConsumer(std::shared_ptr<State> state)
    : state_(std::move(state)) {}
AsyncDeviceStreamConsumer::~AsyncDeviceStreamConsumer() { state_->Cancel(); }
ArrowAsyncDeviceStreamHandler* AsyncDeviceStreamConsumer::handler() { return state_->Handler(); }
Result<SchemaPtr> AsyncDeviceStreamConsumer::schema(std::chrono::nanoseconds timeout) {
  return state_->GetSchema(timeout);
}
DeviceType AsyncDeviceStreamConsumer::device_type() const { return state_->device_type(); }
Metadata AsyncDeviceStreamConsumer::additional_metadata() const {
  return state_->additional_metadata();
}
Result<DeviceBatch> AsyncDeviceStreamConsumer::Next(std::chrono::nanoseconds timeout) {
  return state_->Next(timeout);
}
void AsyncDeviceStreamConsumer::Cancel() { state_->Cancel(); }
Status AsyncDeviceStreamConsumer::WaitReleased(std::chrono::nanoseconds timeout) {
  return state_->WaitReleased(timeout);
}
bool AsyncDeviceStreamConsumer::released() const { return state_->released(); }

}  // namespace ferry::device
