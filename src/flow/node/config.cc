// NodeConfig's JSON form, the array convention and typed metadata (node.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <system_error>

#include "ferry/flow/node.h"
#include "ferry/flow/transport.h"
#include "flow/transport/protocol.h"

namespace ferry::flow {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr uint32_t kMaxQueueSize = uint32_t{1} << 20;

Status FieldError(const std::string& path, const std::string& what) {
  return Status::Invalid("node config: " + path + ": " + what);
}

// A member of `object`: nullptr when absent.
const json* Member(const json& object, const char* key) {
  auto found = object.find(key);
  return found == object.end() ? nullptr : &*found;
}

Result<std::string> StringMember(const json& object, const char* key, const std::string& path,
                                 bool required) {
  const json* value = Member(object, key);
  if (value == nullptr) {
    if (required) return FieldError(path, "missing (expected a string)");
    return std::string();
  }
  if (!value->is_string()) return FieldError(path, "expected a string, got " + value->dump());
  return value->get<std::string>();
}

// A non-negative integer member; nullopt when absent.
Result<std::optional<uint64_t>> UnsignedMember(const json& object, const char* key,
                                               const std::string& path) {
  const json* value = Member(object, key);
  if (value == nullptr) return std::optional<uint64_t>();
  if (value->is_number_unsigned()) return std::optional<uint64_t>(value->get<uint64_t>());
  return FieldError(path, "expected a non-negative integer, got " + value->dump());
}

std::string Preview(const std::string& text) {
  return text.size() <= 80 ? text : text.substr(0, 80) + "...";
}

Result<NodeConfig::Input> ParseInput(const json& entry, const std::string& path) {
  if (!entry.is_object()) return FieldError(path, "expected an object, got " + entry.dump());
  NodeConfig::Input input;
  FERRY_ASSIGN_OR_RAISE(input.id, StringMember(entry, "id", path + ".id", true));
  const bool has_channel = Member(entry, "channel") != nullptr;
  const bool has_timer = Member(entry, "timer_ns") != nullptr;
  if (has_channel == has_timer) {
    return FieldError(path,
                      "needs exactly one of \"channel\" (a producer's output) and "
                      "\"timer_ns\" (a timer)");
  }
  if (has_channel) {
    FERRY_ASSIGN_OR_RAISE(input.channel, StringMember(entry, "channel", path + ".channel", true));
    FERRY_ASSIGN_OR_RAISE(std::optional<uint64_t> queue_size,
                          UnsignedMember(entry, "queue_size", path + ".queue_size"));
    if (queue_size.has_value()) {
      if (*queue_size < 1 || *queue_size > kMaxQueueSize) {
        return FieldError(path + ".queue_size", "must be in [1, " + std::to_string(kMaxQueueSize) +
                                                    "], got " + std::to_string(*queue_size));
      }
      input.queue_size = static_cast<uint32_t>(*queue_size);
    }
    if (Member(entry, "overflow") != nullptr) {
      FERRY_ASSIGN_OR_RAISE(input.overflow,
                            StringMember(entry, "overflow", path + ".overflow", true));
    }
    if (const json* may_restart = Member(entry, "producer_may_restart")) {
      if (!may_restart->is_boolean()) {
        return FieldError(path + ".producer_may_restart",
                          "expected true or false, got " + may_restart->dump());
      }
      input.producer_may_restart = may_restart->get<bool>();
    }
  } else {
    FERRY_ASSIGN_OR_RAISE(std::optional<uint64_t> timer_ns,
                          UnsignedMember(entry, "timer_ns", path + ".timer_ns"));
    if (*timer_ns == 0 ||
        *timer_ns > static_cast<uint64_t>(std::chrono::nanoseconds::max().count())) {
      return FieldError(path + ".timer_ns", "must be a positive number of nanoseconds");
    }
    input.timer_interval = std::chrono::nanoseconds(static_cast<int64_t>(*timer_ns));
  }
  return input;
}

Result<NodeConfig::Output> ParseOutput(const json& entry, const std::string& path) {
  if (!entry.is_object()) return FieldError(path, "expected an object, got " + entry.dump());
  NodeConfig::Output output;
  FERRY_ASSIGN_OR_RAISE(output.id, StringMember(entry, "id", path + ".id", true));
  FERRY_ASSIGN_OR_RAISE(output.channel, StringMember(entry, "channel", path + ".channel", true));
  return output;
}

}  // namespace

const char* EventTypeName(EventType type) {
  switch (type) {
    case EventType::kInput:
      return "INPUT";
    case EventType::kInputClosed:
      return "INPUT_CLOSED";
    case EventType::kStop:
      return "STOP";
    case EventType::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

// ---- NodeConfig ----------------------------------------------------------------

Result<NodeConfig> NodeConfig::FromJson(const std::string& text) {
  const json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) {
    return Status::Invalid("node config is not valid JSON: '" + Preview(text) + "'");
  }
  if (!document.is_object()) return FieldError("(top level)", "expected a JSON object");
  NodeConfig config;
  FERRY_ASSIGN_OR_RAISE(config.dataflow, StringMember(document, "dataflow", "dataflow", false));
  FERRY_ASSIGN_OR_RAISE(config.node, StringMember(document, "node", "node", true));
  FERRY_ASSIGN_OR_RAISE(config.daemon_socket, StringMember(document, "daemon", "daemon", false));
  if (const json* inputs = Member(document, "inputs")) {
    if (!inputs->is_array()) return FieldError("inputs", "expected an array");
    for (size_t index = 0; index < inputs->size(); ++index) {
      FERRY_ASSIGN_OR_RAISE(NodeConfig::Input input,
                            ParseInput((*inputs)[index], "inputs[" + std::to_string(index) + "]"));
      config.inputs.push_back(std::move(input));
    }
  }
  if (const json* outputs = Member(document, "outputs")) {
    if (!outputs->is_array()) return FieldError("outputs", "expected an array");
    for (size_t index = 0; index < outputs->size(); ++index) {
      FERRY_ASSIGN_OR_RAISE(
          NodeConfig::Output output,
          ParseOutput((*outputs)[index], "outputs[" + std::to_string(index) + "]"));
      config.outputs.push_back(std::move(output));
    }
  }
  FERRY_ASSIGN_OR_RAISE(std::optional<uint64_t> restarts,
                        UnsignedMember(document, "restart_count", "restart_count"));
  if (restarts.has_value()) {
    if (*restarts > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return FieldError("restart_count", "too large");
    }
    config.restart_count = static_cast<int>(*restarts);
  }
  FERRY_RETURN_NOT_OK(config.Validate());
  return config;
}

std::string NodeConfig::ToJson() const {
  ordered_json document = ordered_json::object();
  document["dataflow"] = dataflow;
  document["node"] = node;
  document["daemon"] = daemon_socket;
  ordered_json input_list = ordered_json::array();
  for (const Input& input : inputs) {
    ordered_json entry = ordered_json::object();
    entry["id"] = input.id;
    if (input.channel.empty()) {
      entry["timer_ns"] = input.timer_interval.count();
    } else {
      entry["channel"] = input.channel;
      entry["queue_size"] = input.queue_size;
      entry["overflow"] = input.overflow;
      if (input.producer_may_restart) entry["producer_may_restart"] = true;
    }
    input_list.push_back(std::move(entry));
  }
  document["inputs"] = std::move(input_list);
  ordered_json output_list = ordered_json::array();
  for (const Output& output : outputs) {
    output_list.push_back(ordered_json{{"id", output.id}, {"channel", output.channel}});
  }
  document["outputs"] = std::move(output_list);
  document["restart_count"] = restart_count;
  return document.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

Status NodeConfig::Validate() const {
  if (node.empty()) return FieldError("node", "must not be empty");
  if (restart_count < 0) return FieldError("restart_count", "must be >= 0");
  std::set<std::string> input_ids;
  for (size_t index = 0; index < inputs.size(); ++index) {
    const Input& input = inputs[index];
    const std::string path = "inputs[" + std::to_string(index) + "]";
    if (input.id.empty()) return FieldError(path + ".id", "must not be empty");
    if (!input_ids.insert(input.id).second) {
      return FieldError(path + ".id", "input '" + input.id + "' is listed twice");
    }
    if (input.channel.empty()) {
      if (input.timer_interval.count() <= 0) {
        return FieldError(
            path, "input '" + input.id + "' has neither a channel nor a positive timer interval");
      }
      continue;
    }
    if (input.timer_interval.count() != 0) {
      return FieldError(path, "input '" + input.id + "' has both a channel and a timer");
    }
    Status name = internal::ValidateChannelName(input.channel);
    if (!name.ok()) return FieldError(path + ".channel", name.message());
    if (input.queue_size < 1 || input.queue_size > kMaxQueueSize) {
      return FieldError(path + ".queue_size", "must be in [1, " + std::to_string(kMaxQueueSize) +
                                                  "], got " + std::to_string(input.queue_size));
    }
    Result<OverflowPolicy> policy = OverflowPolicyFromName(input.overflow);
    if (!policy.ok()) return FieldError(path + ".overflow", policy.status().message());
  }
  std::set<std::string> output_ids;
  for (size_t index = 0; index < outputs.size(); ++index) {
    const Output& output = outputs[index];
    const std::string path = "outputs[" + std::to_string(index) + "]";
    if (output.id.empty()) return FieldError(path + ".id", "must not be empty");
    if (!output_ids.insert(output.id).second) {
      return FieldError(path + ".id", "output '" + output.id + "' is listed twice");
    }
    Status name = internal::ValidateChannelName(output.channel);
    if (!name.ok()) return FieldError(path + ".channel", name.message());
  }
  return Status::OK();
}

// ---- The array convention --------------------------------------------------

Result<RecordBatchPtr> ArrayAsBatch(const ArrayDataPtr& array, bool nullable) {
  if (array == nullptr || array->type == nullptr) {
    return Status::Invalid("cannot send a null array");
  }
  auto schema = std::make_shared<Schema>();
  schema->fields.push_back(
      field(std::string(kArrayFieldName), array->type, nullable || array->null_count != 0));
  return RecordBatch::Make(std::move(schema), array->length, {array});
}

bool IsArrayMessage(const Metadata& metadata) {
  return std::any_of(metadata.begin(), metadata.end(), [](const auto& entry) {
    return entry.first == kArrayMetadataKey && entry.second == "1";
  });
}

ArrayDataPtr ArrayOfMessage(const RecordBatch& batch, const Metadata& metadata) {
  if (!IsArrayMessage(metadata) || batch.num_columns() != 1) return nullptr;
  return batch.column(0);
}

Status Node::SendArray(const std::string& output, const ArrayDataPtr& array,
                       const Metadata& metadata) {
  FERRY_ASSIGN_OR_RAISE(RecordBatchPtr batch, ArrayAsBatch(array));
  Metadata marked;
  marked.reserve(metadata.size() + 1);
  for (const auto& entry : metadata) {
    if (entry.first != kArrayMetadataKey) marked.push_back(entry);
  }
  marked.emplace_back(std::string(kArrayMetadataKey), "1");
  return SendOutput(output, *batch, marked);
}

}  // namespace ferry::flow
