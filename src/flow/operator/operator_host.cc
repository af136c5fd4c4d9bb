#include "flow/operator/operator_host.h"

#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "ferry/base/telemetry.h"
#include "ferry/device/device.h"
#include "ferry/device/device_bridge.h"
#include "ferry/device/negotiate.h"
#include "ferry/exchange/bridge.h"
#include "ferry/flow/operator.h"
#include "flow/operator/metadata_json.h"
#include "flow/operator/schema_cache.h"
#include "flow/operator/shared_array.h"

#ifdef FERRY_HAVE_OPENCL
#include <CL/cl.h>
#endif

namespace ferry::flow {

using internal::ImportedSchemaPtr;
using internal::OwnedDeviceArray;
using internal::SchemaCache;
using internal::SharedDeviceArray;

// ---- Shared libraries ---------------------------------------------------------

namespace {

constexpr size_t kErrorSize = 4096;

class LibraryOperator final : public OperatorInstance {
 public:
  LibraryOperator(FerryOperatorInitFn init, FerryOperatorOnEventFn on_event,
                  FerryOperatorDropFn drop)
      : init_(init), on_event_(on_event), drop_(drop) {}

  int Init(const FerryOperatorHost* host, const std::string& config_json,
           std::string* error) override {
    char message[kErrorSize] = "";
    const int code = init_(host, config_json.c_str(), &state_, message, sizeof(message));
    if (code != 0) {
      *error =
          message[0] ? message : "init returned " + std::to_string(code) + " without a message";
      return FERRY_OPERATOR_ERROR;
    }
    initialised_ = true;
    return 0;
  }

  int OnEvent(const FerryOperatorEvent& event, const FerryOperatorHost* host,
              std::string* error) override {
    // Not zeroed as a whole (this runs per event); the last byte bounds a
    // message an operator forgot to terminate.
    char message[kErrorSize];
    message[0] = '\0';
    message[kErrorSize - 1] = '\0';
    const int code = on_event_(state_, &event, host, message, sizeof(message));
    if (code == FERRY_OPERATOR_ERROR) {
      *error = message[0] ? message : "on_event returned an error without a message";
    }
    return code;
  }

  void Drop() override {
    if (initialised_) drop_(state_);
    initialised_ = false;
  }

 private:
  FerryOperatorInitFn init_;
  FerryOperatorOnEventFn on_event_;
  FerryOperatorDropFn drop_;
  void* state_ = nullptr;
  bool initialised_ = false;
};

}  // namespace

Result<std::unique_ptr<OperatorInstance>> OpenOperatorLibrary(const std::string& path) {
  const std::string named = "operator library '" + path + "'";
  // RTLD_LOCAL: each library keeps its own copy of whatever it links.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return Status::Invalid("cannot open " + named + ": " + (why ? why : "unknown dlopen error"));
  }
  auto refuse = [&](const std::string& message) {
    ::dlclose(handle);
    return Status::Invalid(named + " " + message);
  };
  auto symbol = [&](const char* name) { return ::dlsym(handle, name); };
  const char* kNames[] = {"ferry_operator_abi_version", "ferry_operator_init",
                          "ferry_operator_on_event", "ferry_operator_drop"};
  void* found[4];
  for (int i = 0; i < 4; ++i) {
    found[i] = symbol(kNames[i]);
    if (found[i] == nullptr) {
      return refuse(std::string("does not export ") + kNames[i] +
                    " (build it with FERRY_EXPORT_OPERATOR, or export the four functions of "
                    "ferry/c/ferry_operator.h)");
    }
  }
  const int32_t version = reinterpret_cast<FerryOperatorAbiVersionFn>(found[0])();
  if (version != FERRY_OPERATOR_ABI_VERSION) {
    return refuse("was built for operator ABI version " + std::to_string(version) +
                  ", this runtime speaks version " + std::to_string(FERRY_OPERATOR_ABI_VERSION));
  }
  return std::unique_ptr<OperatorInstance>(
      new LibraryOperator(reinterpret_cast<FerryOperatorInitFn>(found[1]),
                          reinterpret_cast<FerryOperatorOnEventFn>(found[2]),
                          reinterpret_cast<FerryOperatorDropFn>(found[3])));
}

// ---- The host -------------------------------------------------------------------

class OperatorHost::Impl {
 public:
  enum class State : uint8_t { kCreated, kRunning, kStopped, kFailed };

  // An input of an operator fed in-process: where its batches come from.
  struct Target {
    size_t slot;
    size_t input;
  };

  struct Slot {
    Impl* host = nullptr;
    size_t index = 0;
    OperatorDefinition definition;
    std::unique_ptr<OperatorInstance> instance;
    FerryOperatorHost c_host{};
    State state = State::kCreated;
    bool in_call = false;
    std::string last_error;
    std::vector<bool> input_open;
    std::vector<uint32_t> pending;            // queued INPUT deliveries per input
    std::vector<uint64_t> output_sequence;    // per output
    std::vector<std::vector<Target>> routes;  // per output: in-process consumers
    std::vector<bool> publish;                // per output: the node has "<op>/<output>"
    std::vector<SchemaCache> output_schemas;  // per output: the schema it last sent
    std::vector<SchemaCache> input_schemas;   // per input fed by the node
    std::map<device::Device*, device::QueuePtr> queues;
    OperatorStats stats;

    bool alive() const { return state == State::kRunning || state == State::kCreated; }
  };

  struct Delivery {
    enum class Kind : uint8_t { kInput, kClosed, kError };
    Kind kind = Kind::kInput;
    size_t slot = 0;
    size_t input = 0;
    OwnedDeviceArray array;
    ImportedSchemaPtr schema;  // with its C export, lent to the consumer
    std::string metadata_json;
    uint64_t sequence = 0;
    std::string text;  // kError: the message
  };

  explicit Impl(OperatorHostOptions options) : options_(options) {}

  ~Impl() {
    pending_.clear();
    for (auto& slot : slots_) {
      if (slot->alive()) DropSlot(*slot);
    }
  }

  Status Add(const OperatorDefinition& definition, std::unique_ptr<OperatorInstance> instance) {
    const std::string named = "operator '" + definition.id + "': ";
    if (ran_) return Status::Invalid(named + "operators are added before Run");
    for (const auto& slot : slots_) {
      if (slot->definition.id == definition.id) {
        return Status::Invalid(named + "the id appears twice");
      }
    }
    auto slot = std::make_unique<Slot>();
    slot->host = this;
    slot->index = slots_.size();
    slot->definition = definition;
    slot->instance = std::move(instance);
    slot->input_open.assign(definition.inputs.size(), true);
    slot->pending.assign(definition.inputs.size(), 0);
    slot->output_sequence.assign(definition.outputs.size(), 0);
    slot->routes.assign(definition.outputs.size(), {});
    slot->publish.assign(definition.outputs.size(), false);
    slot->output_schemas.assign(definition.outputs.size(), SchemaCache(/*export_c=*/true));
    slot->input_schemas.assign(definition.inputs.size(), SchemaCache(/*export_c=*/true));
    slot->stats.id = definition.id;
    FerryOperatorHost& c_host = slot->c_host;
    c_host.abi_version = FERRY_OPERATOR_ABI_VERSION;
    c_host.context = slot.get();
    c_host.send_output = &Impl::SendOutputThunk;
    c_host.last_error = &Impl::LastErrorThunk;
    c_host.operator_id = slot->definition.id.c_str();
    c_host.get_device = &Impl::GetDeviceThunk;
    c_host.add_telemetry = &Impl::AddTelemetryThunk;
    c_host.cxx_tag = FERRY_OPERATOR_CXX_TAG;

    std::string error;
    const int code = slot->instance->Init(&slot->c_host, definition.config_json, &error);
    if (code != 0) {
      return Status::Invalid(named + "init failed: " + error);
    }
    slot->state = State::kCreated;
    slots_.push_back(std::move(slot));
    return Status::OK();
  }

  Status Run(Node* node) {
    if (ran_) return Status::Invalid("the operator host runs once");
    ran_ = true;
    if (node == nullptr) return Status::Invalid("the operator host needs a node");
    node_ = node;
    FERRY_RETURN_NOT_OK(Prepare());
    for (auto& slot : slots_) slot->state = State::kRunning;

    Status outcome;
    std::string reason = "all inputs closed";
    bool node_done = false;
    while (true) {
      Drain();
      if (std::none_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->alive(); })) {
        break;
      }
      if (node_done) break;
      auto next = node_->Next();
      if (!next.ok()) {
        outcome = next.status().WithPrefix("the node failed: ");
        reason = "the node failed";
        break;
      }
      if (!next->has_value()) {
        node_done = true;
        continue;
      }
      Event& event = **next;
      switch (event.type) {
        case EventType::kInput:
          RouteExternal(event);
          break;
        case EventType::kInputClosed:
          CloseExternal(event.id);
          break;
        case EventType::kStop:
          reason = event.id.empty() ? "stopped" : event.id;
          node_done = true;
          break;
        case EventType::kError:
          for (auto& slot : slots_) {
            if (!slot->alive()) continue;
            Delivery delivery;
            delivery.kind = Delivery::Kind::kError;
            delivery.slot = slot->index;
            delivery.text = event.error;
            pending_.push_back(std::move(delivery));
          }
          break;
      }
    }
    Drain();
    // What is still alive stops now, producers first.
    for (size_t index : order_) {
      Slot& slot = *slots_[index];
      if (!slot.alive()) continue;
      FerryOperatorEvent event{};
      event.type = FERRY_EVENT_STOP;
      event.id = reason.c_str();
      Call(slot, event);
      if (slot.alive()) StopSlot(slot, State::kStopped);
      Drain();
    }
    return outcome;
  }

  std::vector<OperatorError> errors() const { return errors_; }

  std::vector<OperatorStats> stats() const {
    std::vector<OperatorStats> out;
    for (const auto& slot : slots_) {
      OperatorStats stats = slot->stats;
      switch (slot->state) {
        case State::kCreated:
        case State::kRunning:
          stats.state = "running";
          break;
        case State::kStopped:
          stats.state = "stopped";
          break;
        case State::kFailed:
          stats.state = "failed";
          break;
      }
      out.push_back(std::move(stats));
    }
    return out;
  }

 private:
  // ---- Graph ------------------------------------------------------------------

  Status Prepare() {
    std::map<std::string, std::pair<size_t, size_t>> outputs;  // "op/out" -> (slot, output)
    for (auto& slot : slots_) {
      for (size_t o = 0; o < slot->definition.outputs.size(); ++o) {
        outputs[slot->definition.id + "/" + slot->definition.outputs[o]] = {slot->index, o};
      }
    }
    const NodeConfig& config = node_->config();
    auto node_has_input = [&](const std::string& id) {
      return std::any_of(config.inputs.begin(), config.inputs.end(),
                         [&](const NodeConfig::Input& input) { return input.id == id; });
    };
    std::vector<std::vector<size_t>> consumers_of(slots_.size());
    std::vector<size_t> producers_count(slots_.size(), 0);
    for (auto& slot : slots_) {
      const auto& definition = slot->definition;
      for (size_t i = 0; i < definition.inputs.size(); ++i) {
        const auto& input = definition.inputs[i];
        const std::string port = definition.id + "/" + input.id;
        if (definition.external(input)) {
          if (!node_has_input(port)) {
            return Status::Invalid("operator '" + definition.id + "': input '" + input.id +
                                   "' is fed from outside the runtime, but node '" + config.node +
                                   "' has no input '" + port + "'");
          }
          external_[port] = Target{slot->index, i};
          continue;
        }
        auto source = outputs.find(input.source);
        if (source == outputs.end()) {
          return Status::Invalid("operator '" + definition.id + "': input '" + input.id +
                                 "' refers to '" + input.source +
                                 "', which no operator of this runtime outputs");
        }
        auto [producer, output] = source->second;
        slots_[producer]->routes[output].push_back(Target{slot->index, i});
        consumers_of[producer].push_back(slot->index);
        ++producers_count[slot->index];
        internal_ports_.insert(port);
      }
    }
    for (auto& slot : slots_) {
      for (size_t o = 0; o < slot->definition.outputs.size(); ++o) {
        const std::string port = slot->definition.id + "/" + slot->definition.outputs[o];
        slot->publish[o] =
            std::any_of(config.outputs.begin(), config.outputs.end(),
                        [&](const NodeConfig::Output& output) { return output.id == port; });
      }
    }
    // Kahn's algorithm: producers before consumers; what is left is a cycle.
    std::vector<size_t> ready;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (producers_count[i] == 0) ready.push_back(i);
    }
    while (!ready.empty()) {
      size_t index = ready.front();
      ready.erase(ready.begin());
      order_.push_back(index);
      for (size_t consumer : consumers_of[index]) {
        if (--producers_count[consumer] == 0) ready.push_back(consumer);
      }
    }
    if (order_.size() != slots_.size()) {
      std::string cycle;
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (producers_count[i] > 0)
          cycle += (cycle.empty() ? "'" : ", '") + slots_[i]->definition.id + "'";
      }
      return Status::Invalid("the operators " + cycle + " feed each other in a cycle");
    }
    return Status::OK();
  }

  // ---- Events -----------------------------------------------------------------

  void Drain() {
    while (!pending_.empty()) {
      Delivery delivery = std::move(pending_.front());
      pending_.pop_front();
      Deliver(delivery);
    }
  }

  void Deliver(Delivery& delivery) {
    Slot& slot = *slots_[delivery.slot];
    if (delivery.kind == Delivery::Kind::kInput) --slot.pending[delivery.input];
    if (!slot.alive()) return;  // the batch is released with the delivery
    FerryOperatorEvent event{};
    switch (delivery.kind) {
      case Delivery::Kind::kInput: {
        event.type = FERRY_EVENT_INPUT;
        event.id = slot.definition.inputs[delivery.input].id.c_str();
        event.array = delivery.array.get();
        // Exported once per producer schema and lent to every consumer.
        event.schema = &delivery.schema->exported;
        event.metadata_json = delivery.metadata_json.c_str();
        event.sequence = delivery.sequence;
        Call(slot, event);
        delivery.array.Reset();  // unless the operator moved it
        break;
      }
      case Delivery::Kind::kClosed: {
        event.type = FERRY_EVENT_INPUT_CLOSED;
        event.id = slot.definition.inputs[delivery.input].id.c_str();
        Call(slot, event);
        MaybeFinish(slot);
        break;
      }
      case Delivery::Kind::kError: {
        event.type = FERRY_EVENT_ERROR;
        event.error = delivery.text.c_str();
        Call(slot, event);
        break;
      }
    }
  }

  // Calls the operator and acts on its answer.
  void Call(Slot& slot, const FerryOperatorEvent& event) {
    std::string error;
    slot.in_call = true;
    const int code = slot.instance->OnEvent(event, &slot.c_host, &error);
    slot.in_call = false;
    ++slot.stats.events;
    if (code == FERRY_OPERATOR_CONTINUE) return;
    if (code == FERRY_OPERATOR_STOP) {
      StopSlot(slot, State::kStopped);
      return;
    }
    if (code != FERRY_OPERATOR_ERROR) {
      error = "on_event returned " + std::to_string(code) +
              ", which is none of CONTINUE (0), STOP (1) and ERROR (-1)";
    }
    Report(slot, error);
  }

  // Records an operator's failure and stops it; the others carry on.
  void Report(Slot& slot, const std::string& message) {
    errors_.push_back(OperatorError{slot.definition.id, message});
    if (options_.log_errors) {
      std::fprintf(stderr, "ferry runtime: operator '%s' failed: %s\n", slot.definition.id.c_str(),
                   message.c_str());
    }
    if (slot.alive()) StopSlot(slot, State::kFailed);
  }

  // An operator whose every input has closed is told to stop.
  void MaybeFinish(Slot& slot) {
    if (slot.state != State::kRunning || slot.definition.inputs.empty()) return;
    if (std::any_of(slot.input_open.begin(), slot.input_open.end(),
                    [](bool open) { return open; })) {
      return;
    }
    FerryOperatorEvent event{};
    event.type = FERRY_EVENT_STOP;
    event.id = "all inputs closed";
    Call(slot, event);
    if (slot.alive()) StopSlot(slot, State::kStopped);
  }

  void DropSlot(Slot& slot) {
    slot.instance->Drop();
    // Queues of this operator: their work is done before memory goes away.
    for (auto& [device, queue] : slot.queues) (void)queue->Synchronize();
    slot.queues.clear();
  }

  // The operator is done: drop it, close what it fed.
  void StopSlot(Slot& slot, State state) {
    slot.state = state;
    DropSlot(slot);
    for (size_t o = 0; o < slot.routes.size(); ++o) {
      for (const Target& target : slot.routes[o]) CloseInput(target);
      if (slot.publish[o]) {
        Status closed = node_->CloseOutput(slot.definition.id + "/" + slot.definition.outputs[o]);
        if (!closed.ok() && options_.log_errors) {
          std::fprintf(stderr, "ferry runtime: closing output '%s/%s': %s\n",
                       slot.definition.id.c_str(), slot.definition.outputs[o].c_str(),
                       closed.ToString().c_str());
        }
      }
    }
  }

  void CloseInput(const Target& target) {
    Slot& slot = *slots_[target.slot];
    if (!slot.alive() || !slot.input_open[target.input]) return;
    slot.input_open[target.input] = false;
    Delivery delivery;
    delivery.kind = Delivery::Kind::kClosed;
    delivery.slot = target.slot;
    delivery.input = target.input;
    pending_.push_back(std::move(delivery));
  }

  // Queues a batch for one input, applying the input's overflow policy.
  void Enqueue(const Target& target, OwnedDeviceArray array, ImportedSchemaPtr schema,
               std::string metadata_json, uint64_t sequence) {
    Slot& slot = *slots_[target.slot];
    if (!slot.alive() || !slot.input_open[target.input]) return;
    const auto& input = slot.definition.inputs[target.input];
    if (slot.pending[target.input] >= input.queue_size) {
      if (input.overflow == "drop_newest") {
        ++slot.stats.inputs_dropped;
        return;
      }
      if (input.overflow == "drop_oldest") {
        auto oldest = std::find_if(pending_.begin(), pending_.end(), [&](const Delivery& d) {
          return d.kind == Delivery::Kind::kInput && d.slot == target.slot &&
                 d.input == target.input;
        });
        if (oldest != pending_.end()) {
          pending_.erase(oldest);
          --slot.pending[target.input];
          ++slot.stats.inputs_dropped;
        }
      }
      // "block": one thread runs producer and consumer, so nothing is dropped.
    }
    Delivery delivery;
    delivery.kind = Delivery::Kind::kInput;
    delivery.slot = target.slot;
    delivery.input = target.input;
    delivery.array = std::move(array);
    delivery.schema = std::move(schema);
    delivery.metadata_json = std::move(metadata_json);
    delivery.sequence = sequence;
    ++slot.pending[target.input];
    pending_.push_back(std::move(delivery));
  }

  // ---- The node's side ----------------------------------------------------------

  void RouteExternal(Event& event) {
    auto found = external_.find(event.id);
    if (found == external_.end()) {
      // Inputs fed in-process may also reach the node through the transport
      // (a daemon that subscribes the runtime to its own outputs): ignored.
      if (internal_ports_.count(event.id) == 0 && warned_.insert(event.id).second &&
          options_.log_errors) {
        std::fprintf(stderr, "ferry runtime: input '%s' of the node feeds no operator\n",
                     event.id.c_str());
      }
      return;
    }
    const Target target = found->second;
    Slot& slot = *slots_[target.slot];
    if (!slot.alive() || !slot.input_open[target.input]) return;
    RecordBatchPtr batch = event.value;
    if (batch == nullptr) {
      // A message without a payload (a timer tick): an empty batch.
      auto empty = RecordBatch::Make(std::make_shared<Schema>(), 0, {});
      if (!empty.ok()) return;
      batch = *empty;
    }
    ArrowDeviceArray exported{};
    Status status = device::ExportDeviceArray(
        device::DeviceArray{batch->ToStructArray(), device::DeviceRegistry::Global().cpu(),
                            nullptr},
        &exported);
    if (!status.ok()) {
      Report(slot, "its input '" + slot.definition.inputs[target.input].id +
                       "' could not be handed over: " + status.message());
      return;
    }
    OwnedDeviceArray owned(&exported);
    auto schema = slot.input_schemas[target.input].Wrap(batch->schema());
    if (!schema.ok()) {
      Report(slot, "its input '" + slot.definition.inputs[target.input].id +
                       "' could not be handed over: " + schema.status().message());
      return;
    }
    ++slot.stats.inputs_external;
    Enqueue(target, std::move(owned), std::move(*schema), internal::MetadataToJson(event.metadata),
            event.sequence);
  }

  void CloseExternal(const std::string& id) {
    auto found = external_.find(id);
    if (found != external_.end()) CloseInput(found->second);
  }

  // Publishes a batch on the node output "<op>/<output>".
  Status Publish(Slot& slot, size_t output, OwnedDeviceArray array,
                 const ImportedSchemaPtr& schemas, const std::string& metadata_json) {
    const SchemaPtr& schema = schemas->schema;
    const std::string port = slot.definition.id + "/" + slot.definition.outputs[output];
    FERRY_ASSIGN_OR_RAISE(device::DeviceType type,
                          device::DeviceTypeFromCode(array.get()->device_type));
    const int64_t device_id = array.get()->device_id;
    const bool has_event = array.get()->sync_event != nullptr;
    device::ImportOptions options;
    options.timeout = options_.wait_timeout;
    FERRY_ASSIGN_OR_RAISE(device::DeviceArray imported,
                          device::ImportDeviceArray(array.get(), schemas->struct_type, options));
    ArrayDataPtr data = imported.data;
    if (!device::IsHostAccessible(type)) {
      // Another process cannot map this memory: one counted copy to the host,
      // straight into the output's shared memory when the node lends it.
      device::ProducerInfo producer;
      producer.device_type = type;
      producer.device_id = device_id;
      producer.event_kind = has_event ? imported.device->event_kind() : device::EventKind::kNone;
      producer.crosses_process = true;
      device::ExchangePlan plan = device::Negotiate(producer, device::ConsumerCapabilities{});
      device::RecordPlan(plan);
      if (plan.mode != device::ExchangeMode::kCopy) {
        return Status::NotImplemented("output '" + port + "': " + plan.explanation);
      }
      MemoryPool* pool = node_->OutputPool(port);
      if (pool == nullptr) pool = default_memory_pool();
      device::Queue* queue = imported.device->default_queue();
      int64_t bytes = 0;
      FERRY_ASSIGN_OR_RAISE(data, CopyToHost(imported.data, queue, pool, &bytes, 0));
      FERRY_RETURN_NOT_OK(queue->Synchronize());
      slot.stats.bytes_copied += bytes;
    }
    FERRY_ASSIGN_OR_RAISE(RecordBatchPtr batch,
                          RecordBatch::FromStructArray(data, schema->metadata));
    FERRY_ASSIGN_OR_RAISE(Metadata metadata, internal::MetadataFromJson(metadata_json.c_str()));
    FERRY_RETURN_NOT_OK(node_->SendOutput(port, *batch, metadata));
    ++slot.stats.outputs_published;
    return Status::OK();
  }

  // Copies every buffer of `data` (children and dictionary too) from the
  // device behind `queue` into `pool`; the copies are done once the queue is.
  static Result<ArrayDataPtr> CopyToHost(const ArrayDataPtr& data, device::Queue* queue,
                                         MemoryPool* pool, int64_t* bytes, int depth) {
    if (depth > 64) return Status::Invalid("the batch nests deeper than 64 levels");
    auto out = std::make_shared<ArrayData>(*data);
    for (auto& buffer : out->buffers) {
      if (buffer == nullptr) continue;
      FERRY_ASSIGN_OR_RAISE(BufferPtr host, Buffer::Allocate(buffer->size(), pool));
      if (buffer->size() > 0) {
        FERRY_RETURN_NOT_OK(queue->Copy(device::CopyDirection::kDeviceToHost, buffer->data(),
                                        host->mutable_data(), buffer->size()));
        *bytes += buffer->size();
      }
      buffer = std::move(host);
    }
    for (auto& child : out->children) {
      FERRY_ASSIGN_OR_RAISE(child, CopyToHost(child, queue, pool, bytes, depth + 1));
    }
    if (out->dictionary) {
      FERRY_ASSIGN_OR_RAISE(out->dictionary,
                            CopyToHost(out->dictionary, queue, pool, bytes, depth + 1));
    }
    return ArrayDataPtr(std::move(out));
  }

  // ---- What operators call ---------------------------------------------------------

  Status Send(Slot& slot, const char* output_id, OwnedDeviceArray array,
              const ArrowSchema* c_schema, const char* metadata_json) {
    if (output_id == nullptr) return Status::Invalid("send_output needs an output id");
    if (!slot.in_call) {
      return Status::Invalid("outputs are sent from on_event (not from init or drop)");
    }
    const auto& outputs = slot.definition.outputs;
    size_t o = 0;
    while (o < outputs.size() && std::strcmp(outputs[o].c_str(), output_id) != 0) ++o;
    if (o == outputs.size()) {
      std::string listed;
      for (const auto& name : outputs) listed += (listed.empty() ? "" : ", ") + name;
      return Status::Invalid("operator '" + slot.definition.id + "' has no output '" + output_id +
                             "' (outputs: " + (listed.empty() ? "none" : listed) + ")");
    }
    // Messages are built only on failure: this runs per batch.
    auto named = [&](const std::string& message) {
      return Status::Invalid("output '" + outputs[o] + "': " + message);
    };
    if (!array.valid()) return named("the array is released (NULL release)");
    if (c_schema == nullptr) return named("the schema is NULL");
    // Imported again only when the producer's schema changed.
    auto schema = slot.output_schemas[o].Import(c_schema);
    if (!schema.ok()) {
      return named("a batch must be a struct array (record batch): " + schema.status().message());
    }
    const ArrowArray& root = array.get()->array;
    const int num_fields = (*schema)->schema->num_fields();
    if (root.length < 0 || root.n_children != num_fields) {
      return named("the array does not match its schema (" + std::to_string(root.n_children) +
                   " children, " + std::to_string(num_fields) + " fields, length " +
                   std::to_string(root.length) + ")");
    }
    auto type = device::DeviceTypeFromCode(array.get()->device_type);
    if (!type.ok()) return named(type.status().message());
    // Metadata already in its normal form (what operators send nearly
    // always) travels as it is; anything else is parsed and written again.
    std::string metadata_text;
    const size_t metadata_size = metadata_json ? std::strlen(metadata_json) : 0;
    if (internal::IsCanonicalMetadataJson(metadata_json, metadata_size)) {
      metadata_text.assign(metadata_json, metadata_size);
    } else {
      Metadata metadata;
      Status parsed = internal::MetadataFromJson(metadata_json, &metadata);
      if (!parsed.ok()) return named(parsed.message());
      internal::MetadataToJson(metadata, &metadata_text);
    }

    const uint64_t sequence = ++slot.output_sequence[o];
    ++slot.stats.outputs_sent;
    size_t listening = 0;
    const Target* only = nullptr;
    for (const Target& target : slot.routes[o]) {
      const Slot& consumer = *slots_[target.slot];
      if (consumer.alive() && consumer.input_open[target.input]) {
        ++listening;
        only = &target;
      }
    }
    const bool publish = slot.publish[o];
    if (listening == 0 && !publish) return Status::OK();  // nobody listens: released here
    if (listening == 1 && !publish) {
      const Target target = *only;
      ++slots_[target.slot]->stats.inputs_moved;
      Enqueue(target, std::move(array), std::move(*schema), std::move(metadata_text), sequence);
      return Status::OK();
    }
    // Several consumers: collected first, as enqueueing may change who listens.
    std::vector<Target> targets;
    targets.reserve(listening);
    for (const Target& target : slot.routes[o]) {
      const Slot& consumer = *slots_[target.slot];
      if (consumer.alive() && consumer.input_open[target.input]) targets.push_back(target);
    }
    auto shared = SharedDeviceArray::Adopt(std::move(array));
    for (const Target& target : targets) {
      ArrowDeviceArray view{};
      FERRY_RETURN_NOT_OK(shared->Share(&view));
      ++slots_[target.slot]->stats.inputs_shared;
      Enqueue(target, OwnedDeviceArray(&view), *schema, metadata_text, sequence);
    }
    if (publish) {
      ArrowDeviceArray view{};
      FERRY_RETURN_NOT_OK(shared->Share(&view));
      FERRY_RETURN_NOT_OK(Publish(slot, o, OwnedDeviceArray(&view), *schema, metadata_text)
                              .WithPrefix("publishing on the node: "));
    }
    return Status::OK();
  }

  Status DescribeDevice(Slot& slot, int32_t device_type, int64_t device_id,
                        FerryOperatorDevice* out) {
    if (out == nullptr) return Status::Invalid("get_device needs an output struct");
    FERRY_ASSIGN_OR_RAISE(device::DeviceType type, device::DeviceTypeFromCode(device_type));
    FERRY_ASSIGN_OR_RAISE(device::Device * device,
                          device::DeviceRegistry::Global().Get(type, device_id));
    auto found = slot.queues.find(device);
    if (found == slot.queues.end()) {
      FERRY_ASSIGN_OR_RAISE(device::QueuePtr queue, device->CreateQueue());
      found = slot.queues.emplace(device, std::move(queue)).first;
    }
    std::memset(out, 0, sizeof(*out));
    out->device_type = device_type;
    out->device_id = device->id();
    out->native_queue = found->second->native();
    out->cxx_device = device;
#ifdef FERRY_HAVE_OPENCL
    if (type == device::DeviceType::kOpenCL && out->native_queue != nullptr) {
      auto* queue = static_cast<cl_command_queue>(out->native_queue);
      cl_context context = nullptr;
      cl_device_id native_device = nullptr;
      // cl_context and cl_device_id are opaque handles: their size is what is asked.
      // NOLINTNEXTLINE(bugprone-sizeof-expression)
      if (clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof(context), &context, nullptr) !=
              CL_SUCCESS ||
          // NOLINTNEXTLINE(bugprone-sizeof-expression)
          clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof(native_device), &native_device,
                                nullptr) != CL_SUCCESS) {
        return Status::IOError("the OpenCL queue does not describe its context");
      }
      out->native_context = context;
      out->native_device = native_device;
    }
#endif
    return Status::OK();
  }

  // ---- C callbacks --------------------------------------------------------------------

  static int SendOutputThunk(void* context, const char* output_id, ArrowDeviceArray* array,
                             const ArrowSchema* schema, const char* metadata_json) {
    auto* slot = static_cast<Slot*>(context);
    // Moved in first: released on every path, as the ABI promises.
    OwnedDeviceArray owned;
    if (array != nullptr && array->array.release != nullptr) owned = OwnedDeviceArray(array);
    if (slot == nullptr) return EINVAL;
    Status status;
    try {
      status = slot->host->Send(*slot, output_id, std::move(owned), schema, metadata_json);
    } catch (const std::exception& caught) {
      status = Status::UnknownError(caught.what());
    }
    if (status.ok()) return 0;
    slot->last_error = status.message();
    return status.ToErrno() != 0 ? status.ToErrno() : EIO;
  }

  static const char* LastErrorThunk(void* context) {
    auto* slot = static_cast<Slot*>(context);
    return slot ? slot->last_error.c_str() : "no operator context";
  }

  static int GetDeviceThunk(void* context, int32_t device_type, int64_t device_id,
                            FerryOperatorDevice* out) {
    auto* slot = static_cast<Slot*>(context);
    if (slot == nullptr) return EINVAL;
    Status status;
    try {
      status = slot->host->DescribeDevice(*slot, device_type, device_id, out);
    } catch (const std::exception& caught) {
      status = Status::UnknownError(caught.what());
    }
    if (status.ok()) return 0;
    slot->last_error = status.message();
    return status.code() == StatusCode::kNotImplemented || status.code() == StatusCode::kInvalid
               ? ENODEV
               : (status.ToErrno() != 0 ? status.ToErrno() : EIO);
  }

  static void AddTelemetryThunk(void* context, const char* counter, int64_t value) {
    if (counter == nullptr) return;
    for (int i = 0; i < static_cast<int>(telemetry::Counter::kCount); ++i) {
      const auto which = static_cast<telemetry::Counter>(i);
      if (std::strcmp(counter, telemetry::CounterName(which)) == 0) {
        telemetry::Add(which, value);
        return;
      }
    }
    constexpr const char* kPrefix = "fallback_";
    if (std::strncmp(counter, kPrefix, std::strlen(kPrefix)) != 0) return;
    for (int i = 0; i < static_cast<int>(telemetry::FallbackReason::kCount); ++i) {
      const auto reason = static_cast<telemetry::FallbackReason>(i);
      if (std::strcmp(counter + std::strlen(kPrefix), telemetry::FallbackReasonName(reason)) == 0) {
        telemetry::AddFallback(reason, value);
        return;
      }
    }
  }

  OperatorHostOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::deque<Delivery> pending_;
  std::vector<size_t> order_;               // producers before consumers
  std::map<std::string, Target> external_;  // node input id -> operator input
  std::set<std::string> internal_ports_;    // operator inputs fed in-process
  std::set<std::string> warned_;            // unknown node inputs already reported
  std::vector<OperatorError> errors_;
  Node* node_ = nullptr;
  bool ran_ = false;
};

OperatorHost::OperatorHost(OperatorHostOptions options) : impl_(std::make_unique<Impl>(options)) {}

OperatorHost::~OperatorHost() = default;

Status OperatorHost::Add(const OperatorDefinition& definition) {
  if (definition.kind != OperatorSpec::Kind::kSharedLibrary) {
    return Status::Invalid("operator '" + definition.id +
                           "' is a Python operator: runtimes with Python operators run under "
                           "`python -m ferry.runtime`");
  }
  auto instance = OpenOperatorLibrary(definition.path);
  if (!instance.ok()) return instance.status().WithPrefix("operator '" + definition.id + "': ");
  return impl_->Add(definition, std::move(*instance));
}

Status OperatorHost::Add(const OperatorDefinition& definition,
                         std::unique_ptr<OperatorInstance> instance) {
  if (instance == nullptr) return Status::Invalid("operator '" + definition.id + "': no instance");
  return impl_->Add(definition, std::move(instance));
}

Status OperatorHost::Run(Node* node) { return impl_->Run(node); }

std::vector<OperatorError> OperatorHost::errors() const { return impl_->errors(); }

std::vector<OperatorStats> OperatorHost::stats() const { return impl_->stats(); }

std::string OperatorHost::StatsJson() const {
  nlohmann::json operators = nlohmann::json::array();
  for (const OperatorStats& stats : impl_->stats()) {
    operators.push_back({{"id", stats.id},
                         {"state", stats.state},
                         {"events", stats.events},
                         {"inputs_moved", stats.inputs_moved},
                         {"inputs_shared", stats.inputs_shared},
                         {"inputs_external", stats.inputs_external},
                         {"inputs_dropped", stats.inputs_dropped},
                         {"outputs_sent", stats.outputs_sent},
                         {"outputs_published", stats.outputs_published},
                         {"bytes_copied", stats.bytes_copied}});
  }
  nlohmann::json errors = nlohmann::json::array();
  for (const OperatorError& error : impl_->errors()) {
    errors.push_back({{"operator", error.operator_id}, {"message", error.message}});
  }
  return nlohmann::json{{"operators", std::move(operators)}, {"errors", std::move(errors)}}.dump();
}

}  // namespace ferry::flow
