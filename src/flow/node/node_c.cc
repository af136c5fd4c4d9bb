// The C node API (include/ferry/c/ferry_node.h) over ferry::flow::Node. Every
// entry point catches every exception, so only return codes cross the C
// boundary; the message of the last failure is kept per thread.
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>

#include "ferry/c/ferry_node.h"
#include "ferry/exchange/bridge.h"
#include "ferry/flow/node.h"

struct FerryNode {
  std::unique_ptr<ferry::flow::Node> node;
};

namespace {

using ferry::Result;
using ferry::Status;
using json = nlohmann::json;

thread_local std::string last_error;

int Fail(const Status& status) {
  last_error = status.ToString();
  return status.ToErrno();
}

// Runs `body` (returning a Status), turning exceptions into error codes.
template <typename Body>
int Guard(Body&& body) noexcept {
  try {
    Status status = body();
    return status.ok() ? 0 : Fail(status);
  } catch (const std::bad_alloc&) {
    last_error = "Out of memory";
    return ENOMEM;
  } catch (const std::exception& error) {
    try {
      last_error = std::string("Unknown error: ") + error.what();
    } catch (...) {
    }
    return EIO;
  } catch (...) {
    return EIO;
  }
}

std::chrono::nanoseconds Timeout(int64_t timeout_ns) {
  return timeout_ns < 0 ? std::chrono::nanoseconds::max() : std::chrono::nanoseconds(timeout_ns);
}

ferry::flow::NodeOptions Options(int64_t startup_timeout_ns) {
  ferry::flow::NodeOptions options;
  if (startup_timeout_ns > 0)
    options.startup_timeout = std::chrono::nanoseconds(startup_timeout_ns);
  return options;
}

Status CheckNode(const FerryNode* node) {
  if (node == nullptr || node->node == nullptr) return Status::Invalid("node must not be NULL");
  return Status::OK();
}

Status CheckName(const char* name, const char* what) {
  if (name == nullptr) return Status::Invalid(std::string(what) + " must not be NULL");
  return Status::OK();
}

Result<ferry::Metadata> MetadataFromJson(const char* text) {
  if (text == nullptr || *text == '\0') return ferry::Metadata();
  const json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded() || !document.is_object()) {
    return Status::Invalid("metadata must be a JSON object, got '" + std::string(text) + "'");
  }
  ferry::flow::TypedMetadata values;
  for (const auto& [key, value] : document.items()) {
    if (value.is_string()) {
      values.emplace_back(key, value.get<std::string>());
    } else if (value.is_boolean()) {
      values.emplace_back(key, value.get<bool>());
    } else if (value.is_number_unsigned()) {
      const uint64_t number = value.get<uint64_t>();
      if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Status::Invalid("metadata value of '" + key + "' does not fit in 64-bit integers");
      }
      values.emplace_back(key, static_cast<int64_t>(number));
    } else if (value.is_number_integer()) {
      values.emplace_back(key, value.get<int64_t>());
    } else if (value.is_number_float()) {
      values.emplace_back(key, value.get<double>());
    } else {
      return Status::Invalid("metadata value of '" + key +
                             "' must be a string, a number or a boolean, got " + value.dump());
    }
  }
  return ferry::flow::EncodeTypedMetadata(values);
}

std::string MetadataToJson(const ferry::Metadata& metadata) {
  json document = json::object();
  for (const auto& [key, value] : ferry::flow::DecodeTypedMetadata(metadata)) {
    std::visit([&](const auto& typed) { document[key] = typed; }, value);
  }
  return document.dump(-1, ' ', false, json::error_handler_t::replace);
}

// What an event owns besides the array and schema.
struct EventStrings {
  std::string id;
  std::string metadata = "{}";
  std::string error;
};

void ClearEvent(FerryNodeEvent* event) {
  std::memset(event, 0, sizeof(*event));
  static const char kEmpty[] = "";
  event->id = kEmpty;
  event->metadata_json = "{}";
  event->error = kEmpty;
}

Status FillEvent(std::optional<ferry::flow::Event> next, FerryNodeEvent* out) {
  if (!next.has_value()) {
    out->type = FERRY_NODE_EVENT_END;
    return Status::OK();
  }
  ferry::flow::Event& event = *next;
  auto strings = std::make_unique<EventStrings>();
  strings->id = std::move(event.id);
  strings->error = std::move(event.error);
  switch (event.type) {
    case ferry::flow::EventType::kInput:
      out->type = FERRY_NODE_EVENT_INPUT;
      break;
    case ferry::flow::EventType::kInputClosed:
      out->type = FERRY_NODE_EVENT_INPUT_CLOSED;
      break;
    case ferry::flow::EventType::kStop:
      out->type = FERRY_NODE_EVENT_STOP;
      break;
    case ferry::flow::EventType::kError:
      out->type = FERRY_NODE_EVENT_ERROR;
      break;
  }
  if (event.type == ferry::flow::EventType::kInput && event.value != nullptr) {
    if (ferry::ArrayDataPtr array = ferry::flow::ArrayOfMessage(*event.value, event.metadata)) {
      FERRY_RETURN_NOT_OK(ferry::ExportArray(array, &out->array, &out->schema));
      out->is_batch = 0;
    } else {
      FERRY_RETURN_NOT_OK(ferry::ExportRecordBatch(*event.value, &out->array, &out->schema));
      out->is_batch = 1;
    }
    strings->metadata = MetadataToJson(event.metadata);
    out->sequence = event.sequence;
  }
  out->id = strings->id.c_str();
  out->metadata_json = strings->metadata.c_str();
  out->error = strings->error.c_str();
  out->private_data = strings.release();
  return Status::OK();
}

// Releases a schema the caller handed over, whatever happens to the array.
struct SchemaOwner {
  ArrowSchema schema{};
  ~SchemaOwner() {
    if (schema.release != nullptr) schema.release(&schema);
  }
};

}  // namespace

extern "C" {

const char* ferry_node_last_error(void) { return last_error.c_str(); }

int ferry_node_from_env(int64_t startup_timeout_ns, FerryNode** out) {
  return Guard([&]() -> Status {
    if (out == nullptr) return Status::Invalid("out must not be NULL");
    *out = nullptr;
    FERRY_ASSIGN_OR_RAISE(auto node,
                          ferry::flow::Node::FromEnvironment(Options(startup_timeout_ns)));
    *out = new FerryNode{std::move(node)};
    return Status::OK();
  });
}

int ferry_node_from_config(const char* config_json, int64_t startup_timeout_ns, FerryNode** out) {
  return Guard([&]() -> Status {
    if (out == nullptr) return Status::Invalid("out must not be NULL");
    *out = nullptr;
    FERRY_RETURN_NOT_OK(CheckName(config_json, "config_json"));
    FERRY_ASSIGN_OR_RAISE(ferry::flow::NodeConfig config,
                          ferry::flow::NodeConfig::FromJson(config_json));
    FERRY_ASSIGN_OR_RAISE(
        auto node, ferry::flow::Node::FromConfig(std::move(config), Options(startup_timeout_ns)));
    *out = new FerryNode{std::move(node)};
    return Status::OK();
  });
}

void ferry_node_free(FerryNode* node) {
  try {
    delete node;
  } catch (...) {
  }
}

const char* ferry_node_id(const FerryNode* node) {
  if (node == nullptr || node->node == nullptr) return "";
  return node->node->id().c_str();
}

int ferry_node_next(FerryNode* node, int64_t timeout_ns, FerryNodeEvent* out) {
  if (out == nullptr) return Fail(Status::Invalid("out must not be NULL"));
  ClearEvent(out);
  return Guard([&]() -> Status {
    FERRY_RETURN_NOT_OK(CheckNode(node));
    FERRY_ASSIGN_OR_RAISE(std::optional<ferry::flow::Event> next,
                          node->node->Next(Timeout(timeout_ns)));
    Status filled = FillEvent(std::move(next), out);
    if (!filled.ok()) {
      ferry_node_event_release(out);
      ClearEvent(out);
    }
    return filled;
  });
}

void ferry_node_event_release(FerryNodeEvent* event) {
  if (event == nullptr) return;
  if (event->array.release != nullptr) event->array.release(&event->array);
  if (event->schema.release != nullptr) event->schema.release(&event->schema);
  delete static_cast<EventStrings*>(event->private_data);
  ClearEvent(event);
}

int ferry_node_send_output(FerryNode* node, const char* output, ArrowArray* array,
                           ArrowSchema* schema, const char* metadata_json) {
  // Ownership moves in first, so that every path below releases both.
  ArrowArray owned_array{};
  SchemaOwner owned_schema;
  if (array != nullptr) ferry::MoveArray(array, &owned_array);
  if (schema != nullptr) ferry::MoveSchema(schema, &owned_schema.schema);
  return Guard([&]() -> Status {
    struct ArrayOwner {
      ArrowArray* array;
      ~ArrayOwner() {
        if (array->release != nullptr) array->release(array);
      }
    } array_owner{&owned_array};
    FERRY_RETURN_NOT_OK(CheckNode(node));
    FERRY_RETURN_NOT_OK(CheckName(output, "output"));
    if (array == nullptr || schema == nullptr) {
      return Status::Invalid("array and schema must not be NULL");
    }
    if (owned_array.release == nullptr || owned_schema.schema.release == nullptr) {
      return Status::Invalid("array or schema is already released");
    }
    FERRY_ASSIGN_OR_RAISE(ferry::Metadata metadata, MetadataFromJson(metadata_json));
    const char* format = owned_schema.schema.format;
    if (format != nullptr && std::strcmp(format, "+s") == 0) {
      FERRY_ASSIGN_OR_RAISE(ferry::RecordBatchPtr batch,
                            ferry::ImportRecordBatch(&owned_array, &owned_schema.schema));
      return node->node->SendOutput(output, *batch, metadata);
    }
    FERRY_ASSIGN_OR_RAISE(ferry::Field field, ferry::ImportField(&owned_schema.schema));
    FERRY_ASSIGN_OR_RAISE(ferry::ArrayDataPtr data,
                          ferry::ImportArray(&owned_array, &owned_schema.schema));
    FERRY_ASSIGN_OR_RAISE(ferry::RecordBatchPtr batch,
                          ferry::flow::ArrayAsBatch(data, field.nullable));
    metadata.emplace_back(std::string(ferry::flow::kArrayMetadataKey), "1");
    return node->node->SendOutput(output, *batch, metadata);
  });
}

int ferry_node_loan(FerryNode* node, const char* output, int64_t size, FerryNodeLoan* out) {
  return Guard([&]() -> Status {
    if (out == nullptr) return Status::Invalid("out must not be NULL");
    std::memset(out, 0, sizeof(*out));
    FERRY_RETURN_NOT_OK(CheckNode(node));
    FERRY_RETURN_NOT_OK(CheckName(output, "output"));
    if (size < 0) return Status::Invalid("loan size must be >= 0, got " + std::to_string(size));
    ferry::MemoryPool* pool = node->node->OutputPool(output);
    if (pool == nullptr) {
      return Status::Invalid("node '" + node->node->id() + "' has no open output '" +
                             std::string(output) + "'");
    }
    FERRY_ASSIGN_OR_RAISE(ferry::BufferPtr buffer, ferry::Buffer::Allocate(size, pool));
    out->data = buffer->mutable_data();
    out->size = size;
    out->private_data = new ferry::BufferPtr(std::move(buffer));
    return Status::OK();
  });
}

void ferry_node_loan_release(FerryNodeLoan* loan) {
  if (loan == nullptr) return;
  delete static_cast<ferry::BufferPtr*>(loan->private_data);
  std::memset(loan, 0, sizeof(*loan));
}

int ferry_node_close_output(FerryNode* node, const char* output) {
  return Guard([&]() -> Status {
    FERRY_RETURN_NOT_OK(CheckNode(node));
    FERRY_RETURN_NOT_OK(CheckName(output, "output"));
    return node->node->CloseOutput(output);
  });
}

int ferry_node_wait_for_subscribers(FerryNode* node, const char* output, int count,
                                    int64_t timeout_ns) {
  return Guard([&]() -> Status {
    FERRY_RETURN_NOT_OK(CheckNode(node));
    FERRY_RETURN_NOT_OK(CheckName(output, "output"));
    return node->node->WaitForSubscribers(output, count, Timeout(timeout_ns));
  });
}

int ferry_node_stats_json(const FerryNode* node, char* out, size_t out_size, size_t* out_length) {
  return Guard([&]() -> Status {
    FERRY_RETURN_NOT_OK(CheckNode(node));
    const std::string text = node->node->StatsJson();
    if (out_length != nullptr) *out_length = text.size();
    if (out != nullptr && out_size > 0) {
      const size_t count = std::min(text.size(), out_size - 1);
      std::memcpy(out, text.data(), count);
      out[count] = '\0';
    }
    return Status::OK();
  });
}

}  // extern "C"
