// The C++ operator helper (ferry/flow/operator.h): the bodies of the C entry
// points that FERRY_EXPORT_OPERATOR defines. This file is linked into every
// operator library, so each library holds its own copy of Ferry's code; what
// must be one per runtime is taken from the host instead: its devices (so
// that events and memory are valid across operators) and its telemetry
// (copies made here are forwarded to the host's counters).
#include "ferry/flow/operator.h"

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ferry/base/telemetry.h"
#include "ferry/device/negotiate.h"
#include "ferry/exchange/bridge.h"
#include "flow/operator/metadata_json.h"
#include "flow/operator/schema_cache.h"

namespace ferry::flow {
namespace internal {
namespace {

using device::DeviceRegistry;
using device::DeviceType;

// What this copy of Ferry learned about its host, once per library.
struct HostLink {
  std::mutex mutex;
  bool linked = false;
  // The host is this very copy (the operator was linked into the runtime):
  // nothing to share, nothing to forward.
  bool same_copy = false;
  // Telemetry values already forwarded, per counter and per fallback reason.
  std::vector<int64_t> forwarded_counters;
  std::vector<int64_t> forwarded_fallbacks;
  // Read without the mutex (see ForwardTelemetry): whether there is anything
  // to forward to (linked to a host that is another copy), the events since
  // the last forwarding, and the sum of the copy counters then.
  std::atomic<bool> forwarding{false};
  std::atomic<uint32_t> unforwarded_events{0};
  std::atomic<int64_t> forwarded_copies{0};
};

// Copies are forwarded to the host as soon as they happen; the counters that
// move with every batch (exports, imports, releases, event waits) only every
// kForwardEvery events, and at every init, drop and event other than INPUT.
constexpr uint32_t kForwardEvery = 64;

// The sum of what a copy or a refused exchange counts: any change is one.
int64_t CopyCounters() {
  using telemetry::Counter;
  int64_t sum =
      telemetry::Get(Counter::kBytesCopiedH2D) + telemetry::Get(Counter::kBytesCopiedD2H) +
      telemetry::Get(Counter::kBytesCopiedD2D) + telemetry::Get(Counter::kBytesCopiedHost) +
      telemetry::Get(Counter::kValidationErrors) + telemetry::Get(Counter::kReleaseErrors);
  for (int i = 0; i < static_cast<int>(telemetry::FallbackReason::kCount); ++i) {
    sum += telemetry::GetFallback(static_cast<telemetry::FallbackReason>(i));
  }
  return sum;
}

HostLink& Link() {
  static auto* link = new HostLink();  // never destroyed: release callbacks may outlive main
  return *link;
}

// Replaces each device of this copy's registry with the host's object for
// the same (type, id), so that every device call lands in the host's code.
Status LinkToHost(const FerryOperatorHost* host) {
  HostLink& link = Link();
  std::lock_guard<std::mutex> lock(link.mutex);
  if (link.linked) return Status::OK();
  if (host->abi_version < 1 || host->cxx_tag == nullptr || host->get_device == nullptr) {
    return Status::Invalid("the runtime does not offer its devices to C++ operators");
  }
  if (std::strcmp(host->cxx_tag, FERRY_OPERATOR_CXX_TAG) != 0) {
    return Status::Invalid(std::string("this operator was built with Ferry's C++ helper '") +
                           FERRY_OPERATOR_CXX_TAG + "' but the runtime has '" + host->cxx_tag +
                           "': rebuild it against the runtime's Ferry (operators written "
                           "against the C ABI alone have no such constraint)");
  }
  DeviceRegistry& registry = DeviceRegistry::Global();
  for (device::Device* local : registry.Present()) {
    FerryOperatorDevice described{};
    if (host->get_device(host->context, static_cast<int32_t>(local->type()), local->id(),
                         &described) != 0 ||
        described.cxx_device == nullptr) {
      continue;  // a device only this copy found: it stays this copy's own
    }
    auto* shared = static_cast<device::Device*>(described.cxx_device);
    if (shared == local) {
      link.same_copy = true;
      break;
    }
    // The host owns the device; the registry only borrows it.
    registry.Register(std::shared_ptr<device::Device>(shared, [](device::Device*) {}));
  }
  link.forwarded_counters.assign(static_cast<size_t>(telemetry::Counter::kCount), 0);
  link.forwarded_fallbacks.assign(static_cast<size_t>(telemetry::FallbackReason::kCount), 0);
  for (size_t i = 0; i < link.forwarded_counters.size(); ++i) {
    link.forwarded_counters[i] = telemetry::Get(static_cast<telemetry::Counter>(i));
  }
  for (size_t i = 0; i < link.forwarded_fallbacks.size(); ++i) {
    link.forwarded_fallbacks[i] = telemetry::GetFallback(static_cast<telemetry::FallbackReason>(i));
  }
  link.forwarded_copies.store(CopyCounters(), std::memory_order_relaxed);
  link.linked = true;
  link.forwarding.store(!link.same_copy, std::memory_order_release);
  return Status::OK();
}

// Adds what this copy counted since the last forwarding to the host's
// counters: always when `now`, else when a copy was counted or kForwardEvery
// events went by.
void ForwardTelemetry(const FerryOperatorHost* host, bool now = true) {
  HostLink& link = Link();
  if (!link.forwarding.load(std::memory_order_acquire)) return;
  if (!now && link.unforwarded_events.fetch_add(1, std::memory_order_relaxed) + 1 < kForwardEvery &&
      CopyCounters() == link.forwarded_copies.load(std::memory_order_relaxed)) {
    return;
  }
  std::lock_guard<std::mutex> lock(link.mutex);
  link.unforwarded_events.store(0, std::memory_order_relaxed);
  if (!link.linked || link.same_copy || host->add_telemetry == nullptr) return;
  link.forwarded_copies.store(CopyCounters(), std::memory_order_relaxed);
  for (size_t i = 0; i < link.forwarded_counters.size(); ++i) {
    const auto counter = static_cast<telemetry::Counter>(i);
    const int64_t now = telemetry::Get(counter);
    if (now != link.forwarded_counters[i]) {
      host->add_telemetry(host->context, telemetry::CounterName(counter),
                          now - link.forwarded_counters[i]);
      link.forwarded_counters[i] = now;
    }
  }
  for (size_t i = 0; i < link.forwarded_fallbacks.size(); ++i) {
    const auto reason = static_cast<telemetry::FallbackReason>(i);
    const int64_t now = telemetry::GetFallback(reason);
    if (now != link.forwarded_fallbacks[i]) {
      const std::string name = std::string("fallback_") + telemetry::FallbackReasonName(reason);
      host->add_telemetry(host->context, name.c_str(), now - link.forwarded_fallbacks[i]);
      link.forwarded_fallbacks[i] = now;
    }
  }
}

int Fail(const Status& status, char* error, size_t error_size) {
  WriteError(error, error_size, status.message().c_str());
  return FERRY_OPERATOR_ERROR;
}

int Code(const Result<OperatorStatus>& result, char* error, size_t error_size) {
  if (!result.ok()) return Fail(result.status(), error, error_size);
  return static_cast<int>(*result);
}

}  // namespace

// One operator instance and what the helper keeps for it.
class OperatorAdapter {
 public:
  OperatorAdapter(std::unique_ptr<Operator> op, const FerryOperatorHost* host)
      : op_(std::move(op)), host_(host), id_(host->operator_id ? host->operator_id : "") {
    op_->adapter_ = this;
  }

  ~OperatorAdapter() {
    for (SentSchema& sent : sent_schemas_) sent.c_schema.release(&sent.c_schema);
    op_.reset();
    // Work still queued may use memory the operator held: finish it first.
    for (auto& [device, queue] : queues_) (void)queue->Synchronize();
    queues_.clear();
  }

  Operator& op() { return *op_; }
  const FerryOperatorHost* host() const { return host_; }
  const std::string& id() const { return id_; }

  Result<device::Queue*> GetQueue(device::Device* device) {
    if (device == nullptr) return Status::Invalid("GetQueue needs a device");
    auto found = queues_.find(device);
    if (found != queues_.end()) return found->second.get();
    FERRY_ASSIGN_OR_RAISE(device::QueuePtr queue, device->CreateQueue());
    device::Queue* raw = queue.get();
    queues_.emplace(device, std::move(queue));
    return raw;
  }

  Result<OperatorStatus> DeliverInput(const FerryOperatorEvent& event) {
    if (event.array == nullptr || event.schema == nullptr ||
        event.array->array.release == nullptr) {
      return Status::Invalid("an INPUT event without a batch");
    }
    Input& input = FindInput(event.id ? event.id : "");
    // Imported again only when the producer's schema changed.
    FERRY_ASSIGN_OR_RAISE(ImportedSchemaPtr schema, input.schemas.Import(event.schema));
    FERRY_ASSIGN_OR_RAISE(DeviceType type, device::DeviceTypeFromCode(event.array->device_type));
    FERRY_ASSIGN_OR_RAISE(device::Device * device,
                          DeviceRegistry::Global().Get(type, event.array->device_id));
    device::ImportOptions options;
    if (op_->input_wait() == Operator::InputWait::kDevice && !device->host_accessible()) {
      FERRY_ASSIGN_OR_RAISE(options.queue, GetQueue(device));
    }
    FERRY_ASSIGN_OR_RAISE(device::DeviceArray array,
                          device::ImportDeviceArray(event.array, schema->struct_type, options));
    FERRY_ASSIGN_OR_RAISE(RecordBatchPtr batch,
                          RecordBatch::FromStructArray(array.data, schema->schema->metadata));
    // Parsed into the entries of the last event's metadata (no allocation
    // when keys and values fit where the previous ones were).
    FERRY_RETURN_NOT_OK(MetadataFromJson(event.metadata_json, &metadata_));
    op_->sequence_ = event.sequence;
    return op_->OnInput(input.id, device::DeviceBatch{std::move(batch), array.device, array.event},
                        metadata_);
  }

  Status Send(const std::string& output, const device::DeviceBatch& batch,
              const Metadata& metadata) {
    if (batch.batch == nullptr) return Status::Invalid("SendOutput needs a batch");
    device::Device* device = batch.device ? batch.device : DeviceRegistry::Global().cpu();
    ArrowDeviceArray c_array{};
    FERRY_RETURN_NOT_OK(device::ExportDeviceArray(
        device::DeviceArray{batch.batch->ToStructArray(), device, batch.event}, &c_array));
    auto c_schema = ExportedSchema(batch.batch->schema());
    if (!c_schema.ok()) {
      c_array.array.release(&c_array.array);
      return c_schema.status();
    }
    // Written into the same buffer every time. Sending from inside OnInput
    // never touches metadata_ (the input's), so an operator may send that.
    MetadataToJson(metadata, &metadata_json_);
    const int code = host_->send_output(host_->context, output.c_str(), &c_array, *c_schema,
                                        metadata_json_.c_str());
    // The host moves the array even on error; a host that did not is covered.
    if (c_array.array.release != nullptr) c_array.array.release(&c_array.array);
    if (code != 0) {
      const char* message = host_->last_error ? host_->last_error(host_->context) : nullptr;
      return Status::FromErrno(
          code, "sending on output '" + output + "': " + (message ? message : "failed"));
    }
    return Status::OK();
  }

 private:
  // A schema this operator sent, exported once (send_output only borrows
  // it). Held by its SchemaPtr, so the object cannot change or be replaced
  // by another at the same address while it is here.
  struct SentSchema {
    SchemaPtr schema;
    ArrowSchema c_schema;
  };
  static constexpr size_t kSentSchemas = 8;

  Result<const ArrowSchema*> ExportedSchema(const SchemaPtr& schema) {
    if (schema == nullptr) return Status::Invalid("the batch has no schema");
    for (SentSchema& sent : sent_schemas_) {
      if (sent.schema == schema) return &sent.c_schema;
    }
    SentSchema sent{schema, {}};
    FERRY_RETURN_NOT_OK(ExportSchema(*schema, &sent.c_schema));
    if (sent_schemas_.size() == kSentSchemas) {
      sent_schemas_.front().c_schema.release(&sent_schemas_.front().c_schema);
      sent_schemas_.erase(sent_schemas_.begin());
    }
    sent_schemas_.push_back(std::move(sent));
    return &sent_schemas_.back().c_schema;
  }

  // What the helper keeps per input: its id as OnInput takes it, and the
  // import of the schema its producer sends.
  struct Input {
    std::string id;
    SchemaCache schemas;
  };

  Input& FindInput(const char* id) {
    for (auto& input : inputs_) {
      if (input->id == id) return *input;
    }
    inputs_.push_back(std::make_unique<Input>(Input{id, SchemaCache()}));
    return *inputs_.back();
  }

  std::unique_ptr<Operator> op_;
  const FerryOperatorHost* host_;
  std::string id_;
  std::map<device::Device*, device::QueuePtr> queues_;
  std::vector<std::unique_ptr<Input>> inputs_;
  std::vector<SentSchema> sent_schemas_;
  Metadata metadata_;          // the input event's, reused
  std::string metadata_json_;  // what Send writes, reused
};

void WriteError(char* error, size_t size, const char* message) noexcept {
  if (error == nullptr || size == 0) return;
  if (message == nullptr) message = "";
  const size_t length = std::min(std::strlen(message), size - 1);
  std::memcpy(error, message, length);
  error[length] = '\0';
}

void WriteException(char* error, size_t size, std::exception_ptr exception) noexcept {
  try {
    std::rethrow_exception(std::move(exception));
  } catch (const std::exception& caught) {
    WriteError(error, size, (std::string("C++ exception: ") + caught.what()).c_str());
  } catch (...) {
    WriteError(error, size, "unknown C++ exception");
  }
}

int OperatorInit(OperatorFactory make, const FerryOperatorHost* host, const char* config_json,
                 void** state, char* error, size_t error_size) {
  try {
    if (host == nullptr || state == nullptr) {
      return Fail(Status::Invalid("init needs a host and a state pointer"), error, error_size);
    }
    *state = nullptr;
    if (host->abi_version != FERRY_OPERATOR_ABI_VERSION) {
      return Fail(
          Status::Invalid("the runtime speaks operator ABI " + std::to_string(host->abi_version) +
                          ", this operator " + std::to_string(FERRY_OPERATOR_ABI_VERSION)),
          error, error_size);
    }
    Status linked = LinkToHost(host);
    if (!linked.ok()) return Fail(linked, error, error_size);
    auto adapter = std::make_unique<OperatorAdapter>(make(), host);
    Status initialised = adapter->op().Init(config_json ? config_json : "{}");
    ForwardTelemetry(host);
    if (!initialised.ok()) return Fail(initialised, error, error_size);
    *state = adapter.release();
    return 0;
  } catch (...) {
    WriteException(error, error_size, std::current_exception());
    return FERRY_OPERATOR_ERROR;
  }
}

int OperatorOnEvent(void* state, const FerryOperatorEvent* event, char* error, size_t error_size) {
  try {
    if (state == nullptr || event == nullptr) {
      return Fail(Status::Invalid("on_event needs the state and an event"), error, error_size);
    }
    auto* adapter = static_cast<OperatorAdapter*>(state);
    const std::string id = event->id ? event->id : "";
    int code = FERRY_OPERATOR_CONTINUE;
    switch (event->type) {
      case FERRY_EVENT_INPUT:
        code = Code(adapter->DeliverInput(*event), error, error_size);
        break;
      case FERRY_EVENT_INPUT_CLOSED:
        code = Code(adapter->op().OnInputClosed(id), error, error_size);
        break;
      case FERRY_EVENT_STOP: {
        Status stopped = adapter->op().OnStop(id);
        code = stopped.ok() ? FERRY_OPERATOR_STOP : Fail(stopped, error, error_size);
        break;
      }
      case FERRY_EVENT_ERROR:
        code = Code(adapter->op().OnError(event->error ? event->error : ""), error, error_size);
        break;
      default:
        break;  // event types of later ABI versions: nothing to do
    }
    // Batched for INPUT events: they come by the thousand.
    ForwardTelemetry(adapter->host(), /*now=*/event->type != FERRY_EVENT_INPUT);
    return code;
  } catch (...) {
    WriteException(error, error_size, std::current_exception());
    return FERRY_OPERATOR_ERROR;
  }
}

void OperatorDrop(void* state) {
  auto* adapter = static_cast<OperatorAdapter*>(state);
  if (adapter == nullptr) return;
  const FerryOperatorHost* host = adapter->host();
  delete adapter;
  ForwardTelemetry(host);
}

}  // namespace internal

using device::DeviceRegistry;

Status Operator::SendOutput(const std::string& output, const device::DeviceBatch& batch,
                            const Metadata& metadata) {
  if (adapter_ == nullptr) {
    return Status::Invalid("SendOutput is for the event methods (not the constructor)");
  }
  return adapter_->Send(output, batch, metadata);
}

Status Operator::SendOutput(const std::string& output, const RecordBatch& batch,
                            const Metadata& metadata) {
  // The batch is shared from here on: an aliasing pointer that owns nothing.
  RecordBatchPtr shared(std::shared_ptr<RecordBatch>(), const_cast<RecordBatch*>(&batch));
  return SendOutput(output, device::DeviceBatch{shared, DeviceRegistry::Global().cpu(), nullptr},
                    metadata);
}

Result<device::Device*> Operator::GetDevice(device::DeviceType type, int64_t id) {
  return DeviceRegistry::Global().Get(type, type == device::DeviceType::kCpu ? -1 : id);
}

Result<device::Queue*> Operator::GetQueue(device::Device* device) {
  if (adapter_ == nullptr) return Status::Invalid("GetQueue is for the event methods");
  return adapter_->GetQueue(device);
}

Result<RecordBatchPtr> Operator::ToHost(const device::DeviceBatch& batch) {
  if (batch.batch == nullptr) return Status::Invalid("ToHost needs a batch");
  device::Device* device = batch.device ? batch.device : DeviceRegistry::Global().cpu();
  if (device->host_accessible()) {
    if (batch.event) FERRY_RETURN_NOT_OK(batch.event->Wait(std::chrono::seconds(30)));
    return batch.batch;
  }
  device::ProducerInfo producer;
  producer.device_type = device->type();
  producer.device_id = device->id();
  producer.event_kind = batch.event ? batch.event->kind() : device::EventKind::kNone;
  device::ExchangePlan plan = device::Negotiate(producer, device::ConsumerCapabilities{});
  if (plan.mode == device::ExchangeMode::kRefused) {
    device::RecordPlan(plan);
    return Status::NotImplemented(plan.explanation);
  }
  device::RecordPlan(plan);
  FERRY_ASSIGN_OR_RAISE(
      device::DeviceArray copied,
      device::CopyArrayTo(device::DeviceArray{batch.batch->ToStructArray(), device, batch.event},
                          DeviceRegistry::Global().cpu()));
  if (copied.event) FERRY_RETURN_NOT_OK(copied.event->Wait(std::chrono::seconds(30)));
  return RecordBatch::FromStructArray(copied.data, batch.batch->schema()->metadata);
}

const std::string& Operator::id() const {
  static const std::string kNone;
  return adapter_ ? adapter_->id() : kNone;
}

}  // namespace ferry::flow
