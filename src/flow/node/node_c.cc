// The C node API (include/ferry/c/ferry_node.h) over ferry::flow::Node. Every
// entry point catches every exception, so only return codes cross the C
// boundary; the message of the last failure is kept per thread.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>

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

// The metadata JSON of the C API: an object of typed values (ferry_node.h),
// read and written by the typed metadata's own JSON (node.h).
Result<ferry::Metadata> MetadataFromJson(const char* text) {
  if (text == nullptr || *text == '\0') return ferry::Metadata();
  // The object is a level of its own: its values may nest kMaxMetadataDepth deep.
  Result<ferry::flow::MetadataValue> document =
      ferry::flow::MetadataValueFromJson(text, ferry::flow::kMaxMetadataDepth + 1);
  if (!document.ok()) {
    if (document.status().message().find("nesting deeper") != std::string::npos) {
      return Status::Invalid("metadata values nest deeper than " +
                             std::to_string(ferry::flow::kMaxMetadataDepth) + " levels (" +
                             document.status().message() + ", the object included)");
    }
    return Status::Invalid("metadata must be a JSON object: " + document.status().message());
  }
  auto* values = std::get_if<ferry::flow::MetadataMap>(&*document);
  if (values == nullptr) {
    return Status::Invalid("metadata must be a JSON object, got '" + std::string(text) + "'");
  }
  return ferry::flow::EncodeTypedMetadata(*values);
}

std::string MetadataToJson(const ferry::Metadata& metadata) {
  return ferry::flow::MetadataValueToJson(
      ferry::flow::MetadataValue(ferry::flow::DecodeTypedMetadata(metadata)));
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

// ---- Typed metadata access for C (ferry_metadata_*) ------------------------------

const char* TypeWord(const ferry::flow::MetadataValue& value) {
  static const char* const kWords[] = {"a string",  "an integer", "a float",
                                       "a boolean", "a list",     "a map"};
  return kWords[value.index()];
}

// The value at `path` of `metadata_json` into *found (nullptr when there is
// none); Invalid for bad JSON or a NULL argument.
Status Lookup(const char* metadata_json, const char* path, ferry::flow::MetadataValue* document,
              const ferry::flow::MetadataValue** found) {
  *found = nullptr;
  if (path == nullptr) return Status::Invalid("path must not be NULL");
  FERRY_ASSIGN_OR_RAISE(ferry::Metadata metadata, MetadataFromJson(metadata_json));
  *document = ferry::flow::MetadataValue(ferry::flow::DecodeTypedMetadata(metadata));
  const ferry::flow::MetadataValue* current = document;
  std::string_view rest(path);
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    std::string step(rest.substr(0, slash));
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    for (size_t at = 0; (at = step.find('~', at)) != std::string::npos; ++at) {
      if (at + 1 < step.size() && (step[at + 1] == '0' || step[at + 1] == '1')) {
        step.replace(at, 2, step[at + 1] == '0' ? "~" : "/");
      }
    }
    if (const auto* map = std::get_if<ferry::flow::MetadataMap>(current)) {
      const ferry::flow::MetadataValue* next = nullptr;
      for (const auto& [key, value] : *map) {
        if (key == step) next = &value;
      }
      if (next == nullptr) return Status::OK();
      current = next;
    } else if (const auto* list = std::get_if<ferry::flow::MetadataList>(current)) {
      size_t index = 0;
      auto [end, error] = std::from_chars(step.data(), step.data() + step.size(), index);
      if (step.empty() || error != std::errc() || end != step.data() + step.size() ||
          index >= list->size()) {
        return Status::OK();
      }
      current = &(*list)[index];
    } else {
      return Status::OK();
    }
  }
  *found = current;
  return Status::OK();
}

// Runs `read` on the value at `path`: ENOENT when there is none.
template <typename Read>
int WithValue(const char* metadata_json, const char* path, Read&& read) noexcept {
  bool missing = false;
  const int code = Guard([&]() -> Status {
    ferry::flow::MetadataValue document;
    const ferry::flow::MetadataValue* value = nullptr;
    FERRY_RETURN_NOT_OK(Lookup(metadata_json, path, &document, &value));
    if (value == nullptr) {
      missing = true;
      return Status::OK();
    }
    return read(*value);
  });
  if (code == 0 && missing) {
    last_error = "no metadata value at '" + std::string(path) + "'";
    return ENOENT;
  }
  return code;
}

Status WrongType(const char* path, const ferry::flow::MetadataValue& value, const char* wanted) {
  return Status::Invalid("metadata value '" + std::string(path) + "' is " + TypeWord(value) +
                         ", not " + wanted);
}

void CopyText(const std::string& text, char* out, size_t out_size, size_t* out_length) {
  if (out_length != nullptr) *out_length = text.size();
  if (out != nullptr && out_size > 0) {
    const size_t count = std::min(text.size(), out_size - 1);
    std::memcpy(out, text.data(), count);
    out[count] = '\0';
  }
}

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

int ferry_metadata_type(const char* metadata_json, const char* path) {
  int type = FERRY_METADATA_NONE;
  const int code = WithValue(metadata_json, path, [&](const ferry::flow::MetadataValue& value) {
    static const int kTypes[] = {FERRY_METADATA_STRING, FERRY_METADATA_INT,  FERRY_METADATA_FLOAT,
                                 FERRY_METADATA_BOOL,   FERRY_METADATA_LIST, FERRY_METADATA_MAP};
    type = kTypes[value.index()];
    return Status::OK();
  });
  return code == 0 ? type : FERRY_METADATA_NONE;
}

int ferry_metadata_get_int(const char* metadata_json, const char* path, int64_t* out) {
  return WithValue(metadata_json, path, [&](const ferry::flow::MetadataValue& value) {
    if (out == nullptr) return Status::Invalid("out must not be NULL");
    const auto* integer = std::get_if<int64_t>(&value);
    if (integer == nullptr) return WrongType(path, value, "an integer");
    *out = *integer;
    return Status::OK();
  });
}

int ferry_metadata_get_float(const char* metadata_json, const char* path, double* out) {
  return WithValue(metadata_json, path, [&](const ferry::flow::MetadataValue& value) {
    if (out == nullptr) return Status::Invalid("out must not be NULL");
    if (const auto* number = std::get_if<double>(&value)) {
      *out = *number;
    } else if (const auto* integer = std::get_if<int64_t>(&value)) {
      *out = static_cast<double>(*integer);
    } else {
      return WrongType(path, value, "a number");
    }
    return Status::OK();
  });
}

int ferry_metadata_get_bool(const char* metadata_json, const char* path, int* out) {
  return WithValue(metadata_json, path, [&](const ferry::flow::MetadataValue& value) {
    if (out == nullptr) return Status::Invalid("out must not be NULL");
    const auto* flag = std::get_if<bool>(&value);
    if (flag == nullptr) return WrongType(path, value, "a boolean");
    *out = *flag ? 1 : 0;
    return Status::OK();
  });
}

int ferry_metadata_get_string(const char* metadata_json, const char* path, char* out,
                              size_t out_size, size_t* out_length) {
  return WithValue(metadata_json, path, [&](const ferry::flow::MetadataValue& value) {
    const auto* text = std::get_if<std::string>(&value);
    if (text == nullptr) return WrongType(path, value, "a string");
    CopyText(*text, out, out_size, out_length);
    return Status::OK();
  });
}

int ferry_metadata_length(const char* metadata_json, const char* path, int64_t* out) {
  return WithValue(metadata_json, path, [&](const ferry::flow::MetadataValue& value) {
    if (out == nullptr) return Status::Invalid("out must not be NULL");
    if (const auto* list = std::get_if<ferry::flow::MetadataList>(&value)) {
      *out = static_cast<int64_t>(list->size());
    } else if (const auto* map = std::get_if<ferry::flow::MetadataMap>(&value)) {
      *out = static_cast<int64_t>(map->size());
    } else {
      return WrongType(path, value, "a list or a map");
    }
    return Status::OK();
  });
}

int ferry_metadata_key(const char* metadata_json, const char* path, int64_t index, char* out,
                       size_t out_size, size_t* out_length) {
  return WithValue(metadata_json, path, [&](const ferry::flow::MetadataValue& value) {
    const auto* map = std::get_if<ferry::flow::MetadataMap>(&value);
    if (map == nullptr) return WrongType(path, value, "a map");
    if (index < 0 || static_cast<uint64_t>(index) >= map->size()) {
      return Status::Invalid("metadata map '" + std::string(path) + "' has " +
                             std::to_string(map->size()) + " entries, not " +
                             std::to_string(index + 1));
    }
    CopyText((*map)[static_cast<size_t>(index)].first, out, out_size, out_length);
    return Status::OK();
  });
}

}  // extern "C"
