#include "ferry/fleet/model_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>
#include <set>
#include <string_view>

#include "ferry/fleet/image_ref.h"

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
constexpr size_t kMaxDatasets = JobSpec::kMaxDatasets;
constexpr size_t kMaxInputs = JobSpec::kMaxInputs;
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

constexpr int64_t kMaxCount = int64_t{1} << 53;  // exact in a JSON number everywhere

// Reads one item of an array of objects with its own SpecReader, then moves
// its errors out under "<array>[<index>].<field>".
template <typename ReadItem>
void ReadObjectArray(const json& array, const std::string& field, std::vector<FieldError>* errors,
                     const ReadItem& read_item) {
  for (size_t index = 0; index < array.size(); ++index) {
    const std::string path = field + "[" + std::to_string(index) + "]";
    const json& item = array[index];
    if (!item.is_object()) {
      errors->push_back({path, "must be an object"});
      continue;
    }
    std::vector<FieldError> item_errors;
    SpecReader reader(item, &item_errors);
    read_item(reader, index);
    reader.RejectUnknown();
    for (FieldError& error : item_errors) {
      errors->push_back(
          {error.field.empty() ? path : path + "." + error.field, std::move(error.detail)});
    }
  }
}

// A check from model.h ("" or the problem) as a field error.
void Check(SpecReader& reader, const char* field, const std::string& problem) {
  if (!problem.empty()) reader.Fail(field, problem);
}

void ReadInputs(SpecReader& spec_reader, std::vector<FieldError>* errors,
                std::vector<JobInput>* out) {
  const json* inputs = spec_reader.Find("inputs");
  if (inputs == nullptr) return;
  if (!inputs->is_array()) return spec_reader.Fail("inputs", "must be an array of objects");
  if (inputs->size() > kMaxInputs) {
    return spec_reader.Fail("inputs", "must have at most " + std::to_string(kMaxInputs) + " items");
  }
  std::set<std::string, std::less<>> names;
  ReadObjectArray(*inputs, "inputs", errors, [&](SpecReader& reader, size_t) {
    JobInput input;
    reader.String("name", 0, SIZE_MAX, &input.name);
    if (reader.Find("name") == nullptr) {
      reader.Fail("name", "is required");
    } else if (reader.Find("name")->is_string()) {
      Check(reader, "name", CheckInputName(input.name, JobInput::kMaxNameChars));
      if (!input.name.empty() && !names.insert(input.name).second) {
        reader.Fail("name", "duplicate input name \"" + input.name + "\"");
      }
    }
    const bool has_dataset = reader.Find("dataset") != nullptr;
    const bool has_uri = reader.Find("uri") != nullptr;
    if (has_dataset == has_uri) {
      reader.Fail(has_dataset ? "uri" : "dataset", "exactly one of dataset and uri is required");
    }
    reader.String("dataset", 0, SIZE_MAX, &input.dataset);
    if (has_dataset && reader.Find("dataset")->is_string()) {
      Check(reader, "dataset", CheckInputName(input.dataset, DatasetVersion::kMaxNameChars));
    }
    reader.Integer("version", 0, kMaxCount, &input.version);
    reader.String("uri", 0, SIZE_MAX, &input.uri);
    if (has_uri && reader.Find("uri")->is_string()) {
      Check(reader, "uri", CheckObjectUri(input.uri));
    }
    reader.String("sha256", 0, SIZE_MAX, &input.sha256);
    if (reader.Find("sha256") != nullptr && reader.Find("sha256")->is_string()) {
      Check(reader, "sha256", CheckSha256(input.sha256));
    }
    reader.Integer("size", 0, kMaxCount, &input.size);
    if (has_dataset) {
      if (reader.Find("sha256") != nullptr) {
        reader.Fail("sha256", "is for uri inputs (a dataset's manifest has the digests)");
      }
      if (reader.Find("size") != nullptr) reader.Fail("size", "is for uri inputs");
    }
    if (has_uri) {
      if (reader.Find("sha256") == nullptr) reader.Fail("sha256", "is required with uri");
      if (reader.Find("version") != nullptr) reader.Fail("version", "is for dataset inputs");
    }
    reader.String("mode", 0, kMaxNameChars, &input.mode);
    if (input.mode == "stream") {
      reader.Fail("mode", "mode \"stream\" is not implemented; use \"copy\"");
    } else if (input.mode != "copy") {
      reader.Fail("mode", "must be \"copy\"");
    }
    reader.String("manifest_digest", 0, kMaxNameChars, &input.manifest_digest);
    if (!input.manifest_digest.empty() &&
        (input.manifest_digest.rfind("sha256:", 0) != 0 ||
         !CheckSha256(std::string_view(input.manifest_digest).substr(7)).empty())) {
      reader.Fail("manifest_digest", "must be \"sha256:\" and 64 lower-case hex digits");
    }
    reader.Integer("bytes", 0, kMaxCount, &input.bytes);
    reader.Integer("objects", 0, kMaxCount, &input.objects);
    out->push_back(std::move(input));
  });
}

// The `uri` of a checkpoint or outputs: an s3:// or file:/// prefix ending in '/'.
void ReadUploadPrefix(SpecReader& sub, std::string* uri) {
  sub.String("uri", 1, kMaxValueChars, uri);
  if (sub.Find("uri") == nullptr) sub.Fail("uri", "is required");
  if (uri->empty()) return;
  if (uri->rfind("s3://", 0) != 0 && uri->rfind("file:///", 0) != 0) {
    sub.Fail("uri", "must be an s3:// or file:/// URI");
  } else if (uri->back() != '/') {
    sub.Fail("uri", "must end in '/' (a prefix)");
  } else if (uri->rfind("s3://", 0) == 0 && uri->find('/', 5) == 5) {
    sub.Fail("uri", "needs a bucket");
  }
}

// Reads the object at `field` with `read`; its errors are named "<field>.<key>".
template <typename Read>
void ReadObject(SpecReader& reader, std::vector<FieldError>* errors, const char* field, Read read) {
  const json* value = reader.Find(field);
  if (value == nullptr) return;
  if (!value->is_object()) return reader.Fail(field, "must be an object");
  std::vector<FieldError> sub_errors;
  SpecReader sub(*value, &sub_errors);
  read(sub);
  sub.RejectUnknown();
  for (FieldError& error : sub_errors) {
    errors->push_back({std::string(field) + "." + error.field, std::move(error.detail)});
  }
}

// "code": {"bundle": "sha256:<hex>"} or {"git": URL, "commit": <40 hex>}.
void ReadCode(SpecReader& reader, JobSpec::Code* out) {
  const bool has_bundle = reader.Find("bundle") != nullptr;
  const bool has_git = reader.Find("git") != nullptr;
  if (has_bundle == has_git) {
    reader.Fail(has_bundle ? "git" : "bundle", "exactly one of bundle and git is required");
  }
  reader.String("bundle", 0, kMaxNameChars, &out->bundle);
  if (has_bundle && (out->bundle.rfind("sha256:", 0) != 0 ||
                     !CheckSha256(std::string_view(out->bundle).substr(7)).empty())) {
    reader.Fail("bundle", "must be \"sha256:\" and 64 lower-case hex digits (POST /v1/code)");
  }
  reader.Integer("bytes", 0, kMaxCount, &out->bytes);
  reader.String("git", 0, kMaxValueChars, &out->git);
  if (has_git && reader.Find("git")->is_string()) {
    const std::string& url = out->git;
    static constexpr const char* kSchemes[] = {"https://", "http://", "ssh://", "git://",
                                               "file:///"};
    const bool known = std::any_of(std::begin(kSchemes), std::end(kSchemes), [&](const char* s) {
      return url.rfind(s, 0) == 0 && url.size() > std::strlen(s);
    });
    const bool plain = std::all_of(url.begin(), url.end(), [](char c) {
      return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
    });
    if (!known || !plain) {
      reader.Fail("git",
                  "must be an https://, http://, ssh://, git:// or file:/// URL without spaces");
    }
  }
  reader.String("commit", 0, kMaxNameChars, &out->commit);
  if (has_git) {
    const std::string& commit = out->commit;
    const bool hex = commit.size() == 40 && std::all_of(commit.begin(), commit.end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                     });
    if (reader.Find("commit") == nullptr) {
      reader.Fail("commit", "is required with git (the full commit id)");
    } else if (!hex) {
      reader.Fail("commit", "must be a full commit id: 40 lower-case hex digits");
    }
  } else if (reader.Find("commit") != nullptr) {
    reader.Fail("commit", "is for git code");
  }
}

// "image": a reference naming its registry; "image_digest": what the
// server resolved it to (written by the server, read back from the store).
void ReadImage(SpecReader& reader, JobSpec* spec) {
  reader.String("image", 1, ImageRef::kMaxChars, &spec->image);
  if (reader.Find("image") != nullptr && !spec->image.empty()) {
    Result<ImageRef> parsed = ParseImageRef(spec->image);
    if (!parsed.ok()) reader.Fail("image", parsed.status().message());
    if (!spec->dataflow.empty()) {
      reader.Fail("image", "cannot be combined with dataflow (ferry run is not in the image)");
    }
  }
  reader.String("image_digest", 0, kMaxNameChars, &spec->image_digest);
  if (!spec->image_digest.empty()) {
    if (spec->image.empty()) {
      reader.Fail("image_digest", "is only set with image");
    } else if (spec->image_digest.rfind("sha256:", 0) != 0 ||
               !CheckSha256(std::string_view(spec->image_digest).substr(7)).empty()) {
      reader.Fail("image_digest", "must be \"sha256:\" and 64 lower-case hex digits");
    }
  }
}

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
  ReadImage(reader, &spec);
  ReadInputs(reader, errors, &spec.inputs);
  ReadObject(reader, errors, "checkpoint", [&](SpecReader& sub) {
    ReadUploadPrefix(sub, &spec.checkpoint.uri);
    sub.Integer("interval_seconds", 0, kMaxRuntimeSeconds, &spec.checkpoint.interval_seconds);
    if (spec.checkpoint.interval_seconds > 0 &&
        spec.checkpoint.interval_seconds < JobSpec::Checkpoint::kMinIntervalSeconds) {
      sub.Fail("interval_seconds", "must be 0 (when the task ends) or at least " +
                                       std::to_string(JobSpec::Checkpoint::kMinIntervalSeconds));
    }
  });
  ReadObject(reader, errors, "outputs",
             [&](SpecReader& sub) { ReadUploadPrefix(sub, &spec.outputs.uri); });
  ReadObject(reader, errors, "code", [&](SpecReader& sub) { ReadCode(sub, &spec.code); });
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
  if (!spec.image.empty()) out["image"] = spec.image;
  if (!spec.image_digest.empty()) out["image_digest"] = spec.image_digest;
  json inputs = json::array();
  for (const JobInput& input : spec.inputs) inputs.push_back(ToJson(input));
  out["inputs"] = std::move(inputs);
  if (!spec.checkpoint.uri.empty()) {
    out["checkpoint"] = {{"uri", spec.checkpoint.uri},
                         {"interval_seconds", spec.checkpoint.interval_seconds}};
  }
  if (!spec.outputs.uri.empty()) out["outputs"] = {{"uri", spec.outputs.uri}};
  if (!spec.code.bundle.empty()) {
    out["code"] = {{"bundle", spec.code.bundle}, {"bytes", spec.code.bytes}};
  } else if (!spec.code.git.empty()) {
    out["code"] = {{"git", spec.code.git}, {"commit", spec.code.commit}};
  }
  return out;
}

json ToJson(const JobInput& input) {
  json out = {{"name", input.name}};
  if (!input.dataset.empty()) {
    out["dataset"] = input.dataset;
    out["version"] = input.version;
  } else {
    out["uri"] = input.uri;
    out["sha256"] = input.sha256;
    if (input.size >= 0) out["size"] = input.size;
  }
  out["mode"] = input.mode;
  if (!input.manifest_digest.empty()) out["manifest_digest"] = input.manifest_digest;
  out["bytes"] = input.bytes;
  out["objects"] = input.objects;
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
  json inputs = json::array();
  for (const StagedInput& input : assignment.inputs) inputs.push_back(ToJson(input));
  return {{"job_id", assignment.ref.job_id},
          {"task", assignment.ref.task},
          {"attempt", assignment.ref.attempt},
          {"job_name", assignment.job_name},
          {"spec", ToJson(assignment.spec)},
          {"gpu_indices", assignment.gpu_indices},
          {"gpu_uuids", assignment.gpu_uuids},
          {"gang_nodes", assignment.gang_nodes},
          {"gang_addresses", assignment.gang_addresses},
          {"rendezvous_port", assignment.rendezvous_port},
          {"tenant", assignment.tenant},
          {"inputs", inputs}};
}

json ToJson(const StagedInput& input) {
  json objects = json::array();
  for (const StagedObject& object : input.objects) {
    objects.push_back({{"path", object.path},
                       {"uri", object.uri},
                       {"size", object.size},
                       {"sha256", object.sha256}});
  }
  json out = {{"name", input.name}, {"objects", std::move(objects)}};
  if (!input.digest.empty()) out["digest"] = input.digest;
  return out;
}

namespace {

Status FirstError(const std::vector<FieldError>& errors, size_t more = 0) {
  std::string message = errors.front().field.empty()
                            ? errors.front().detail
                            : errors.front().field + ": " + errors.front().detail;
  const size_t rest = errors.size() - 1 + more;
  if (rest > 0) message += " (and " + std::to_string(rest) + " more)";
  return Status::Invalid(message);
}

}  // namespace

Result<std::vector<StagedInput>> ParseStagedInputs(const json& inputs) {
  std::vector<FieldError> errors;
  std::vector<StagedInput> out;
  if (!inputs.is_array()) return Status::Invalid("inputs: must be an array of objects");
  std::set<std::string, std::less<>> names;
  ReadObjectArray(inputs, "inputs", &errors, [&](SpecReader& reader, size_t) {
    StagedInput input;
    reader.String("name", 0, SIZE_MAX, &input.name);
    Check(reader, "name", CheckInputName(input.name, JobInput::kMaxNameChars));
    reader.String("digest", 0, 128, &input.digest);
    if (!input.name.empty() && !names.insert(input.name).second) {
      reader.Fail("name", "duplicate input name \"" + input.name + "\"");
    }
    const json* objects = reader.Find("objects");
    if (objects == nullptr || !objects->is_array() || objects->empty() ||
        objects->size() > DatasetVersion::kMaxObjects) {
      reader.Fail("objects", "must be an array of 1 to " +
                                 std::to_string(DatasetVersion::kMaxObjects) + " objects");
      return;
    }
    std::vector<FieldError> object_errors;
    std::set<std::string, std::less<>> paths;
    ReadObjectArray(*objects, "objects", &object_errors, [&](SpecReader& item, size_t) {
      StagedObject object;
      item.String("path", 0, SIZE_MAX, &object.path);
      Check(item, "path", CheckObjectPath(object.path));
      if (!paths.insert(object.path).second) item.Fail("path", "duplicate path");
      item.String("uri", 0, SIZE_MAX, &object.uri);
      Check(item, "uri", CheckObjectUri(object.uri));
      item.Integer("size", -1, kMaxCount, &object.size);
      item.String("sha256", 0, SIZE_MAX, &object.sha256);
      Check(item, "sha256", CheckSha256(object.sha256));
      input.objects.push_back(std::move(object));
    });
    for (FieldError& error : object_errors) reader.Fail(error.field, std::move(error.detail));
    out.push_back(std::move(input));
  });
  if (!errors.empty()) return FirstError(errors);
  return out;
}

Result<DatasetVersion> ParseDatasetRegistration(const json& body, std::vector<FieldError>* errors) {
  std::vector<FieldError> local_errors;
  if (errors == nullptr) errors = &local_errors;
  errors->clear();
  if (!body.is_object()) {
    errors->push_back({"", "the body must be a JSON object"});
    return Status::Invalid("the dataset must be a JSON object");
  }
  DatasetVersion version;
  SpecReader reader(body, errors);
  reader.String("name", 0, SIZE_MAX, &version.name);
  if (reader.Find("name") == nullptr) {
    reader.Fail("name", "is required");
  } else if (reader.Find("name")->is_string()) {
    Check(reader, "name", CheckInputName(version.name, DatasetVersion::kMaxNameChars));
  }
  reader.String("source", 0, SIZE_MAX, &version.source);
  if (reader.Find("source") == nullptr) {
    reader.Fail("source", "is required");
  } else if (reader.Find("source")->is_string()) {
    Check(reader, "source", CheckDatasetSource(version.source));
  }
  reader.String("description", 0, kMaxValueChars, &version.description);
  const json* objects = reader.Find("objects");
  size_t unlisted = 0;
  if (objects == nullptr) {
    reader.Fail("objects", "is required");
  } else if (!objects->is_array()) {
    reader.Fail("objects", "must be an array of objects");
  } else if (objects->empty() || objects->size() > DatasetVersion::kMaxObjects) {
    reader.Fail("objects", "must have between 1 and " +
                               std::to_string(DatasetVersion::kMaxObjects) + " items");
  } else {
    std::vector<FieldError> object_errors;
    version.objects.reserve(objects->size());
    ReadObjectArray(*objects, "objects", &object_errors, [&](SpecReader& item, size_t) {
      DatasetObject object;
      item.String("path", 0, SIZE_MAX, &object.path);
      if (item.Find("path") == nullptr) {
        item.Fail("path", "is required");
      } else if (item.Find("path")->is_string()) {
        Check(item, "path", CheckObjectPath(object.path));
      }
      if (item.Find("size") == nullptr) item.Fail("size", "is required");
      item.Integer("size", 0, kMaxCount, &object.size);
      item.String("sha256", 0, SIZE_MAX, &object.sha256);
      if (item.Find("sha256") == nullptr) {
        item.Fail("sha256", "is required");
      } else if (item.Find("sha256")->is_string()) {
        Check(item, "sha256", CheckSha256(object.sha256));
      }
      version.objects.push_back(std::move(object));
    });
    if (object_errors.empty()) {
      std::sort(version.objects.begin(), version.objects.end(),
                [](const DatasetObject& a, const DatasetObject& b) { return a.path < b.path; });
      for (size_t index = 1; index < version.objects.size(); ++index) {
        if (version.objects[index].path == version.objects[index - 1].path) {
          object_errors.push_back(
              {"objects", "duplicate path \"" + version.objects[index].path + "\""});
        }
      }
    }
    for (FieldError& error : object_errors) {
      if (errors->size() >= kMaxObjectErrors) {
        ++unlisted;
      } else {
        errors->push_back(std::move(error));
      }
    }
  }
  reader.RejectUnknown();
  if (!errors->empty()) {
    if (unlisted > 0) {
      errors->push_back({"objects", "and " + std::to_string(unlisted) + " more errors"});
    }
    return FirstError(*errors, 0);
  }
  for (const DatasetObject& object : version.objects) version.bytes += object.size;
  version.object_count = static_cast<int64_t>(version.objects.size());
  version.digest = ManifestDigest(version.source, version.objects);
  return version;
}

json ToJson(const DatasetVersion& version, bool with_objects) {
  json out = {{"name", version.name},
              {"version", version.version},
              {"source", version.source},
              {"description", version.description},
              {"bytes", version.bytes},
              {"objects", version.object_count},
              {"digest", version.digest},
              {"created_at", TimestampJson(version.created_at_ms)},
              {"created_at_ms", version.created_at_ms},
              {"created_by", version.created_by}};
  if (!version.tenant.empty()) out["tenant"] = version.tenant;
  if (with_objects) {
    json objects = json::array();
    for (const DatasetObject& object : version.objects) {
      objects.push_back({{"path", object.path}, {"size", object.size}, {"sha256", object.sha256}});
    }
    out["manifest"] = std::move(objects);
  }
  return out;
}

}  // namespace ferry::fleet
