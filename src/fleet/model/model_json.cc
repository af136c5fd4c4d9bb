#include "ferry/fleet/model_json.h"

#include <cmath>
#include <cstdint>
#include <ctime>
#include <limits>
#include <optional>
#include <set>
#include <string_view>

namespace ferry::fleet {

std::optional<size_t> Utf8CodePoints(std::string_view text) {
  size_t count = 0;
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    uint32_t code = 0;
    if (lead < 0x80) {
      length = 1;
      code = lead;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
      code = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      code = lead & 0x0Fu;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      code = lead & 0x07u;
    } else {
      return std::nullopt;  // a continuation byte first, or a lead no code point uses
    }
    if (i + length > text.size()) return std::nullopt;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0u) != 0x80u) return std::nullopt;
      code = (code << 6) | (next & 0x3Fu);
    }
    if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000) || code > 0x10FFFF ||
        (code >= 0xD800 && code <= 0xDFFF)) {
      return std::nullopt;  // overlong, past Unicode, or a surrogate
    }
    i += length;
    count++;
  }
  return count;
}

namespace {

// Checks a string's length in code points: "" when it is within
// [min_chars, max_chars], else the problem.
std::string CheckChars(std::string_view text, size_t min_chars, size_t max_chars,
                       const std::string& rule) {
  std::optional<size_t> chars = Utf8CodePoints(text);
  if (!chars) return "must be valid UTF-8";
  if (*chars < min_chars || *chars > max_chars) return rule;
  return "";
}

using nlohmann::json;

constexpr size_t kMaxNameChars = 128;
constexpr size_t kMaxKeyChars = 128;
constexpr size_t kMaxValueChars = 4096;
constexpr size_t kMaxMapEntries = 256;
constexpr size_t kMaxGpuModels = 16;
constexpr size_t kMaxDatasets = 64;
constexpr int64_t kMaxMemoryMb = int64_t{1} << 40;
constexpr int64_t kMaxRuntimeSeconds = int64_t{10} * 365 * 24 * 3600;

// Collects field errors while reading one body, so a caller sees them all.
class SpecReader {
 public:
  SpecReader(const json& body, std::vector<FieldError>* errors) : body_(body), errors_(errors) {}

  void Fail(std::string field, std::string detail) {
    errors_->push_back({std::move(field), std::move(detail)});
  }

  const json* Find(const char* field) {
    seen_.insert(field);
    auto it = body_.find(field);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  void String(const char* field, size_t min_chars, size_t max_chars, std::string* out) {
    const json* value = Find(field);
    if (value == nullptr) return;
    if (!value->is_string()) return Fail(field, "must be a string");
    const auto& text = value->get_ref<const std::string&>();
    std::string problem = CheckChars(text, min_chars, max_chars,
                                     "must have between " + std::to_string(min_chars) + " and " +
                                         std::to_string(max_chars) + " characters");
    if (!problem.empty()) return Fail(field, std::move(problem));
    *out = text;
  }

  template <typename Int>
  void Integer(const char* field, int64_t min, int64_t max, Int* out) {
    const json* value = Find(field);
    if (value == nullptr) return;
    bool in_range = false;
    if (value->is_number_unsigned()) {
      uint64_t number = value->get<uint64_t>();
      in_range = number <= static_cast<uint64_t>(max) && static_cast<int64_t>(number) >= min;
      if (in_range) *out = static_cast<Int>(number);
    } else if (value->is_number_integer()) {
      int64_t number = value->get<int64_t>();
      in_range = number >= min && number <= max;
      if (in_range) *out = static_cast<Int>(number);
    }
    if (!in_range) {
      Fail(field,
           "must be an integer between " + std::to_string(min) + " and " + std::to_string(max));
    }
  }

  void Number(const char* field, double min, double max, double* out) {
    const json* value = Find(field);
    if (value == nullptr) return;
    if (!value->is_number() || !std::isfinite(value->get<double>()) || value->get<double>() < min ||
        value->get<double>() > max) {
      char range[96];
      std::snprintf(range, sizeof(range), "must be a number between %g and %g", min, max);
      return Fail(field, range);
    }
    *out = value->get<double>();
  }

  void Bool(const char* field, bool* out) {
    const json* value = Find(field);
    if (value == nullptr) return;
    if (!value->is_boolean()) return Fail(field, "must be true or false");
    *out = value->get<bool>();
  }

  void StringMap(const char* field, std::map<std::string, std::string>* out) {
    const json* value = Find(field);
    if (value == nullptr) return;
    if (!value->is_object()) return Fail(field, "must be an object of strings");
    if (value->size() > kMaxMapEntries) {
      return Fail(field, "must have at most " + std::to_string(kMaxMapEntries) + " entries");
    }
    for (const auto& [key, item] : value->items()) {
      std::string path = std::string(field) + "." + key;
      std::string key_problem = CheckChars(
          key, 1, kMaxKeyChars,
          "keys must have between 1 and " + std::to_string(kMaxKeyChars) + " characters");
      if (!key_problem.empty()) {
        Fail(path, key_problem == "must be valid UTF-8" ? "keys must be valid UTF-8"
                                                        : std::move(key_problem));
      } else if (!item.is_string()) {
        Fail(path, "must be a string");
      } else if (std::string value_problem = CheckChars(
                     item.get_ref<const std::string&>(), 0, kMaxValueChars,
                     "must have at most " + std::to_string(kMaxValueChars) + " characters");
                 !value_problem.empty()) {
        Fail(path, std::move(value_problem));
      } else {
        (*out)[key] = item.get<std::string>();
      }
    }
  }

  void StringList(const char* field, size_t max_items, size_t max_chars,
                  std::vector<std::string>* out) {
    const json* value = Find(field);
    if (value == nullptr) return;
    if (!value->is_array()) return Fail(field, "must be an array of strings");
    if (value->size() > max_items) {
      return Fail(field, "must have at most " + std::to_string(max_items) + " items");
    }
    for (size_t index = 0; index < value->size(); ++index) {
      const json& item = (*value)[index];
      std::string path = std::string(field) + "[" + std::to_string(index) + "]";
      if (!item.is_string()) {
        Fail(path, "must be a string");
      } else if (std::string problem =
                     CheckChars(item.get_ref<const std::string&>(), 0, max_chars,
                                "must have at most " + std::to_string(max_chars) + " characters");
                 !problem.empty()) {
        Fail(path, std::move(problem));
      } else {
        out->push_back(item.get<std::string>());
      }
    }
  }

  void RejectUnknown() {
    for (const auto& [key, item] : body_.items()) {
      if (seen_.count(key) == 0) Fail(key, "unknown field");
    }
  }

 private:
  const json& body_;
  std::vector<FieldError>* errors_;
  std::set<std::string, std::less<>> seen_;
};

json StringMapJson(const std::map<std::string, std::string>& map) {
  json object = json::object();
  for (const auto& [key, value] : map) object[key] = value;
  return object;
}

json OptionalInt(const std::optional<int>& value) { return value ? json(*value) : json(nullptr); }

}  // namespace

Result<JobSpec> ParseJobSpec(const json& body, std::vector<FieldError>* errors) {
  std::vector<FieldError> local_errors;
  if (errors == nullptr) errors = &local_errors;
  errors->clear();
  if (!body.is_object()) {
    errors->push_back({"", "the body must be a JSON object"});
    return Status::Invalid("the job specification must be a JSON object");
  }
  JobSpec spec;
  SpecReader reader(body, errors);
  reader.String("name", 1, kMaxNameChars, &spec.name);
  if (reader.Find("name") == nullptr) reader.Fail("name", "is required");
  reader.StringList("command", JobSpec::kMaxArgs, kMaxValueChars, &spec.command);
  reader.String("dataflow", 1, kMaxValueChars, &spec.dataflow);
  bool has_command = reader.Find("command") != nullptr;
  bool has_dataflow = reader.Find("dataflow") != nullptr;
  if (has_command && has_dataflow) {
    reader.Fail("dataflow", "command and dataflow are mutually exclusive");
  } else if (!has_command && !has_dataflow) {
    reader.Fail("command", "is required (or dataflow)");
  } else if (has_command && reader.Find("command")->is_array()) {
    if (reader.Find("command")->empty()) {
      reader.Fail("command", "must have at least one item");
    } else if (!spec.command.empty() && spec.command.front().empty()) {
      reader.Fail("command[0]", "must not be empty");
    }
  }
  reader.StringMap("env", &spec.env);
  reader.String("working_dir", 1, kMaxValueChars, &spec.working_dir);
  reader.Integer("tasks", 1, JobSpec::kMaxTasks, &spec.tasks);
  reader.Integer("gpus_per_task", 0, JobSpec::kMaxGpusPerTask, &spec.gpus_per_task);
  reader.StringList("gpu_models", kMaxGpuModels, kMaxNameChars, &spec.gpu_models);
  for (size_t index = 0; index < spec.gpu_models.size(); ++index) {
    if (spec.gpu_models[index].empty()) {
      reader.Fail("gpu_models[" + std::to_string(index) + "]", "must not be empty");
    }
  }
  reader.Number("cpus_per_task", 0, 1024, &spec.cpus_per_task);
  reader.Integer("memory_mb_per_task", 0, kMaxMemoryMb, &spec.memory_mb_per_task);
  reader.Integer("priority", -1000, 1000, &spec.priority);
  reader.Bool("preemptible", &spec.preemptible);
  reader.Integer("max_runtime_seconds", 0, kMaxRuntimeSeconds, &spec.max_runtime_seconds);
  reader.Integer("max_retries", 0, 100, &spec.max_retries);
  reader.StringMap("labels", &spec.labels);
  reader.String("topology", 0, kMaxNameChars, &spec.topology);
  if (!spec.topology.empty() && spec.topology != "same_node" && spec.topology != "same_domain") {
    reader.Fail("topology", "must be \"\", \"same_node\" or \"same_domain\"");
  }
  reader.StringList("datasets", kMaxDatasets, kMaxNameChars, &spec.datasets);
  for (size_t index = 0; index < spec.datasets.size(); ++index) {
    if (spec.datasets[index].empty()) {
      reader.Fail("datasets[" + std::to_string(index) + "]", "must not be empty");
    }
  }
  reader.String("pool_set", 0, kMaxNameChars, &spec.pool_set);
  reader.RejectUnknown();
  if (!errors->empty()) {
    std::string message = errors->front().field.empty()
                              ? errors->front().detail
                              : errors->front().field + ": " + errors->front().detail;
    if (errors->size() > 1) message += " (and " + std::to_string(errors->size() - 1) + " more)";
    return Status::Invalid(message);
  }
  return spec;
}

json ToJson(const JobSpec& spec) {
  json out = {
      {"name", spec.name},
      {"env", StringMapJson(spec.env)},
      {"tasks", spec.tasks},
      {"gpus_per_task", spec.gpus_per_task},
      {"gpu_models", spec.gpu_models},
      {"cpus_per_task", spec.cpus_per_task},
      {"memory_mb_per_task", spec.memory_mb_per_task},
      {"priority", spec.priority},
      {"preemptible", spec.preemptible},
      {"max_runtime_seconds", spec.max_runtime_seconds},
      {"max_retries", spec.max_retries},
      {"labels", StringMapJson(spec.labels)},
      {"topology", spec.topology},
      {"datasets", spec.datasets},
      {"pool_set", spec.pool_set},
  };
  // command and dataflow are exclusive; write only the one in use so the
  // result parses back with ParseJobSpec.
  if (!spec.dataflow.empty()) {
    out["dataflow"] = spec.dataflow;
  } else {
    out["command"] = spec.command;
  }
  if (!spec.working_dir.empty()) out["working_dir"] = spec.working_dir;
  return out;
}

json ToJson(const TaskPlacement& placement) {
  return {
      {"task", placement.task}, {"node", placement.node}, {"gpu_indices", placement.gpu_indices}};
}

json TimestampJson(int64_t unix_ms) {
  if (unix_ms <= 0) return nullptr;
  std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[64];
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(unix_ms % 1000));
  return text;
}

namespace {
json PlacementJson(const std::vector<TaskPlacement>& placement) {
  json out = json::array();
  for (const auto& task : placement) out.push_back(ToJson(task));
  return out;
}
}  // namespace

json ToJson(const Job& job, bool with_attempts) {
  json out = {
      {"id", job.id},
      {"name", job.spec.name},
      {"tenant", job.tenant},
      {"team", job.team},
      {"user", job.user},
      {"state", ToString(job.state)},
      {"reason", job.reason},
      {"attempt", job.attempt},
      {"spec", ToJson(job.spec)},
      {"placement", PlacementJson(job.placement)},
      {"created_at", TimestampJson(job.created_at_ms)},
      {"admitted_at", TimestampJson(job.admitted_at_ms)},
      {"started_at", TimestampJson(job.started_at_ms)},
      {"finished_at", TimestampJson(job.finished_at_ms)},
      {"exit_code", OptionalInt(job.exit_code)},
  };
  if (with_attempts) {
    json attempts = json::array();
    for (const auto& attempt : job.attempts) {
      attempts.push_back({
          {"attempt", attempt.attempt},
          {"state", ToString(attempt.state)},
          {"reason", attempt.reason},
          {"admitted_at", TimestampJson(attempt.admitted_at_ms)},
          {"started_at", TimestampJson(attempt.started_at_ms)},
          {"ended_at", TimestampJson(attempt.ended_at_ms)},
          {"exit_code", OptionalInt(attempt.exit_code)},
          {"preempted_for",
           attempt.preempted_for > 0 ? json(attempt.preempted_for) : json(nullptr)},
          {"placement", PlacementJson(attempt.placement)},
      });
    }
    out["attempts"] = std::move(attempts);
    // A preemption in progress (the attempt runs out its grace period).
    out["preemption"] =
        job.preempt_reason.empty()
            ? json(nullptr)
            : json{{"rule", job.preempt_reason},
                   {"for_job", job.preempted_for > 0 ? json(job.preempted_for) : json(nullptr)}};
  }
  return out;
}

json ToJson(const JobEvent& event) {
  json out = {{"id", event.id},         {"at", TimestampJson(event.at_ms)}, {"type", event.type},
              {"reason", event.reason}, {"message", event.message},         {"actor", event.actor}};
  out["state"] = event.state ? json(ToString(*event.state)) : json(nullptr);
  return out;
}

json ToJson(const Node& node) {
  json gpus = json::array();
  for (const auto& gpu : node.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"model", gpu.model},
                    {"memory_mb", gpu.memory_mb},
                    {"uuid", gpu.uuid},
                    {"allocated", gpu.job_id.has_value() || gpu.job_tenant_id.has_value()},
                    {"external", gpu.external},
                    {"job_id", gpu.job_id ? json(*gpu.job_id) : json(nullptr)}});
  }
  return {{"name", node.name},
          {"pool", node.pool},
          {"labels", StringMapJson(node.labels)},
          {"cpus", node.cpus},
          {"memory_mb", node.memory_mb},
          {"state", ToString(node.state)},
          {"drain", node.drain},
          {"unavailable", node.unavailable},
          {"external_cpus", node.external_cpus},
          {"external_memory_mb", node.external_memory_mb},
          {"registered_at", TimestampJson(node.registered_at_ms)},
          {"last_heartbeat", TimestampJson(node.last_heartbeat_ms)},
          {"lease_expires_at", TimestampJson(node.lease_expires_at_ms)},
          {"gpus", std::move(gpus)}};
}

json ToJson(const Pool& pool) {
  json by_model = json::object();
  for (const auto& [model, count] : pool.gpus_by_model) by_model[model] = count;
  return {
      {"name", pool.name}, {"nodes", pool.nodes},         {"nodes_ready", pool.nodes_ready},
      {"gpus", pool.gpus}, {"gpus_free", pool.gpus_free}, {"gpus_by_model", std::move(by_model)}};
}

json ToJson(const TaskAssignment& assignment) {
  return {{"job_id", assignment.ref.job_id},
          {"task", assignment.ref.task},
          {"attempt", assignment.ref.attempt},
          {"job_name", assignment.job_name},
          {"spec", ToJson(assignment.spec)},
          {"gpu_indices", assignment.gpu_indices},
          {"gpu_uuids", assignment.gpu_uuids},
          {"gang_nodes", assignment.gang_nodes},
          {"gang_addresses", assignment.gang_addresses},
          {"rendezvous_port", assignment.rendezvous_port}};
}

}  // namespace ferry::fleet
