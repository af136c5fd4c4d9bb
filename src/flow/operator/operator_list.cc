#include "flow/operator/operator_list.h"

#include <nlohmann/json.hpp>
#include <set>

namespace ferry::flow {
namespace {

using nlohmann::json;

bool IsIdentifier(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Result<std::string> StringField(const json& object, const char* key, const std::string& where) {
  auto found = object.find(key);
  if (found == object.end()) return Status::Invalid(where + ": '" + key + "' is missing");
  if (!found->is_string()) return Status::Invalid(where + ": '" + key + "' must be a string");
  return found->get<std::string>();
}

Result<OperatorDefinition::Input> ParseInput(const json& entry, const std::string& where) {
  if (!entry.is_object()) return Status::Invalid(where + ": each input must be an object");
  OperatorDefinition::Input input;
  FERRY_ASSIGN_OR_RAISE(input.id, StringField(entry, "id", where));
  const std::string named = where + ": input '" + input.id + "'";
  if (!IsIdentifier(input.id)) {
    return Status::Invalid(named + ": ids are letters, digits, '_' and '-'");
  }
  FERRY_ASSIGN_OR_RAISE(input.source, StringField(entry, "source", named));
  if (input.source != kExternalSource) {
    const size_t slash = input.source.find('/');
    if (slash == std::string::npos || input.source.find('/', slash + 1) != std::string::npos ||
        !IsIdentifier(input.source.substr(0, slash)) ||
        !IsIdentifier(input.source.substr(slash + 1))) {
      return Status::Invalid(named +
                             ": source must be \"external\" or \"<operator>/<output>\", not '" +
                             input.source + "'");
    }
  }
  if (auto size = entry.find("queue_size"); size != entry.end()) {
    if (!size->is_number_integer() || size->get<int64_t>() < 1 ||
        size->get<int64_t>() > int64_t{1} << 20) {
      return Status::Invalid(named + ": queue_size must be an integer from 1 to 1048576");
    }
    input.queue_size = static_cast<uint32_t>(size->get<int64_t>());
  }
  if (auto overflow = entry.find("overflow"); overflow != entry.end()) {
    if (!overflow->is_string()) return Status::Invalid(named + ": overflow must be a string");
    input.overflow = overflow->get<std::string>();
    if (input.overflow != "block" && input.overflow != "drop_oldest" &&
        input.overflow != "drop_newest") {
      return Status::Invalid(named + ": overflow must be block, drop_oldest or drop_newest, not '" +
                             input.overflow + "'");
    }
  }
  return input;
}

Result<OperatorDefinition> ParseOne(const json& entry, size_t index) {
  std::string where = "operator " + std::to_string(index + 1);
  if (!entry.is_object()) return Status::Invalid(where + ": must be an object");
  OperatorDefinition op;
  FERRY_ASSIGN_OR_RAISE(op.id, StringField(entry, "id", where));
  where += " ('" + op.id + "')";
  if (!IsIdentifier(op.id))
    return Status::Invalid(where + ": ids are letters, digits, '_' and '-'");
  FERRY_ASSIGN_OR_RAISE(std::string kind, StringField(entry, "kind", where));
  if (kind == "shared-library") {
    op.kind = OperatorSpec::Kind::kSharedLibrary;
  } else if (kind == "python") {
    op.kind = OperatorSpec::Kind::kPython;
  } else {
    return Status::Invalid(where + ": kind must be \"shared-library\" or \"python\", not '" + kind +
                           "'");
  }
  FERRY_ASSIGN_OR_RAISE(op.path, StringField(entry, "path", where));
  if (op.path.empty()) return Status::Invalid(where + ": 'path' is empty");
  if (auto inputs = entry.find("inputs"); inputs != entry.end()) {
    if (!inputs->is_array()) return Status::Invalid(where + ": 'inputs' must be a list");
    std::set<std::string> seen;
    for (const json& item : *inputs) {
      FERRY_ASSIGN_OR_RAISE(auto input, ParseInput(item, where));
      if (!seen.insert(input.id).second) {
        return Status::Invalid(where + ": input '" + input.id + "' appears twice");
      }
      op.inputs.push_back(std::move(input));
    }
  }
  if (auto outputs = entry.find("outputs"); outputs != entry.end()) {
    if (!outputs->is_array()) return Status::Invalid(where + ": 'outputs' must be a list");
    std::set<std::string> seen;
    for (const json& item : *outputs) {
      if (!item.is_string() || !IsIdentifier(item.get<std::string>())) {
        return Status::Invalid(where + ": outputs are ids (letters, digits, '_' and '-')");
      }
      if (!seen.insert(item.get<std::string>()).second) {
        return Status::Invalid(where + ": output '" + item.get<std::string>() + "' appears twice");
      }
      op.outputs.push_back(item.get<std::string>());
    }
  }
  if (auto config = entry.find("config"); config != entry.end() && !config->is_null()) {
    if (!config->is_object()) return Status::Invalid(where + ": 'config' must be an object");
    op.config_json = config->dump();
  }
  return op;
}

}  // namespace

Result<std::vector<OperatorDefinition>> ParseOperatorList(const std::string& text) {
  json parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded())
    return Status::Invalid(std::string(kOperatorsEnv) + " is not valid JSON");
  if (!parsed.is_array())
    return Status::Invalid(std::string(kOperatorsEnv) + " must be a JSON list");
  std::vector<OperatorDefinition> out;
  std::set<std::string> ids;
  for (size_t i = 0; i < parsed.size(); ++i) {
    FERRY_ASSIGN_OR_RAISE(auto op, ParseOne(parsed[i], i));
    if (!ids.insert(op.id).second) {
      return Status::Invalid("operator id '" + op.id + "' appears twice");
    }
    out.push_back(std::move(op));
  }
  return out;
}

std::string OperatorListToJson(const std::vector<OperatorDefinition>& operators) {
  json list = json::array();
  for (const auto& op : operators) {
    json inputs = json::array();
    for (const auto& input : op.inputs) {
      inputs.push_back({{"id", input.id},
                        {"source", input.source},
                        {"queue_size", input.queue_size},
                        {"overflow", input.overflow}});
    }
    json config = json::parse(op.config_json, nullptr, false);
    if (config.is_discarded() || !config.is_object()) config = json::object();
    list.push_back({{"id", op.id},
                    {"kind", op.kind == OperatorSpec::Kind::kPython ? "python" : "shared-library"},
                    {"path", op.path},
                    {"inputs", std::move(inputs)},
                    {"outputs", op.outputs},
                    {"config", std::move(config)}});
  }
  return list.dump();
}

std::vector<OperatorDefinition> OperatorDefinitionsOf(const NodeSpec& runtime_node) {
  std::vector<OperatorDefinition> out;
  for (const OperatorSpec& spec : runtime_node.operators) {
    OperatorDefinition op;
    op.id = spec.id;
    op.kind = spec.kind;
    op.path = spec.path;
    op.outputs = spec.outputs;
    op.config_json = spec.config_json.empty() ? "{}" : spec.config_json;
    for (const InputSpec& input : spec.inputs) {
      OperatorDefinition::Input made;
      made.id = input.id;
      const InputSource& source = input.source;
      if (source.kind == InputSource::Kind::kOutput && source.node == runtime_node.id &&
          !source.operator_id.empty()) {
        made.source = source.operator_id + "/" + source.output;
      }
      made.queue_size = input.queue_size;
      made.overflow = input.overflow;
      op.inputs.push_back(std::move(made));
    }
    out.push_back(std::move(op));
  }
  return out;
}

}  // namespace ferry::flow
