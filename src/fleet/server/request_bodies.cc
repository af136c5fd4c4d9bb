#include "fleet/server/request_bodies.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <set>
#include <string_view>

#include "ferry/fleet/model_json.h"
#include "fleet/server/request_parsing.h"
#include "fleet/server/webhooks.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

constexpr size_t kMaxItems = 100'000;

// Reads typed members of one JSON object, recording an error per bad member.
class FieldReader {
 public:
  FieldReader(const json& object, std::string prefix, std::vector<FieldError>* errors)
      : object_(object), prefix_(std::move(prefix)), errors_(errors) {}

  void RejectUnknown(std::initializer_list<std::string_view> known) {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool found = false;
      for (std::string_view name : known) found = found || it.key() == name;
      if (!found) Fail(it.key(), "unknown field");
    }
  }

  const json* Member(const char* key, bool required) {
    auto it = object_.find(key);
    if (it == object_.end() || (it->is_null() && !required)) {
      if (required) Fail(key, "is required");
      return nullptr;
    }
    return &*it;
  }

  std::optional<std::string> String(const char* key, bool required, size_t min_len,
                                    size_t max_len) {
    const json* value = Member(key, required);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string()) return Fail(key, "must be a string"), std::nullopt;
    const auto& text = value->get_ref<const std::string&>();
    const std::optional<size_t> chars = Utf8CodePoints(text);
    if (!chars) return Fail(key, "must be valid UTF-8"), std::nullopt;
    if (*chars < min_len || *chars > max_len) {
      return Fail(key, "must be " + std::to_string(min_len) + " to " + std::to_string(max_len) +
                           " characters"),
             std::nullopt;
    }
    return text;
  }

  std::optional<std::string> Name(const char* key, bool required) {
    const json* value = Member(key, required);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string() || !ValidName(value->get_ref<const std::string&>())) {
      return Fail(key, "must be " + std::string(kNameRule)), std::nullopt;
    }
    return value->get<std::string>();
  }

  std::optional<int64_t> Int(const char* key, bool required, int64_t min, int64_t max) {
    const json* value = Member(key, required);
    if (value == nullptr) return std::nullopt;
    bool in_range = false;
    int64_t number = 0;
    if (value->is_number_unsigned()) {
      const uint64_t raw = value->get<uint64_t>();
      in_range = raw <= static_cast<uint64_t>(max) && static_cast<int64_t>(raw) >= min;
      number = static_cast<int64_t>(raw);
    } else if (value->is_number_integer()) {
      number = value->get<int64_t>();
      in_range = number >= min && number <= max;
    } else {
      return Fail(key, "must be an integer"), std::nullopt;
    }
    if (!in_range) {
      return Fail(key, "must be an integer between " + std::to_string(min) + " and " +
                           std::to_string(max)),
             std::nullopt;
    }
    return number;
  }

  std::optional<double> Number(const char* key, bool required, double min, double max) {
    const json* value = Member(key, required);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number()) return Fail(key, "must be a number"), std::nullopt;
    const double number = value->get<double>();
    if (!(number >= min && number <= max)) {
      return Fail(key, "must be a number between " + std::to_string(min) + " and " +
                           std::to_string(max)),
             std::nullopt;
    }
    return number;
  }

  std::optional<std::map<std::string, std::string>> StringMap(const char* key) {
    const json* value = Member(key, false);
    if (value == nullptr) return std::map<std::string, std::string>{};
    if (!value->is_object()) return Fail(key, "must be an object of strings"), std::nullopt;
    std::map<std::string, std::string> out;
    bool ok = true;
    for (auto it = value->begin(); it != value->end(); ++it) {
      const std::string field = std::string(key) + "." + it.key();
      const std::optional<size_t> key_chars = Utf8CodePoints(it.key());
      if (!key_chars || *key_chars == 0 || *key_chars > 128) {
        ok = false;
        Fail(field, key_chars ? "keys must be 1 to 128 characters" : "keys must be valid UTF-8");
      } else if (const std::optional<size_t> value_chars =
                     it->is_string() ? Utf8CodePoints(it->get_ref<const std::string&>())
                                     : std::nullopt;
                 !value_chars || *value_chars > 4096) {
        ok = false;
        Fail(field, "must be a string of at most 4096 characters");
      } else {
        out[it.key()] = it->get<std::string>();
      }
    }
    if (!ok) return std::nullopt;
    return out;
  }

  std::optional<bool> Bool(const char* key) {
    const json* value = Member(key, false);
    if (value == nullptr) return std::nullopt;
    if (!value->is_boolean()) return Fail(key, "must be true or false"), std::nullopt;
    return value->get<bool>();
  }

  const json* Array(const char* key, size_t max_items) {
    const json* value = Member(key, false);
    if (value == nullptr) return nullptr;
    if (!value->is_array()) return Fail(key, "must be an array"), nullptr;
    if (value->size() > max_items) {
      return Fail(key, "must hold at most " + std::to_string(max_items) + " items"), nullptr;
    }
    return value;
  }

  void Fail(std::string_view key, std::string detail) {
    errors_->push_back({prefix_ + std::string(key), std::move(detail)});
  }

  const std::string& prefix() const { return prefix_; }

 private:
  const json& object_;
  std::string prefix_;
  std::vector<FieldError>* errors_;
};

bool CheckObject(const json& value, const std::string& field, std::vector<FieldError>* errors) {
  if (value.is_object()) return true;
  errors->push_back({field.empty() ? std::string("(body)") : field, "must be an object"});
  return false;
}

// The frame every body parser shares: the body must be an object with only
// the `known` members; `fill` reads them into a fresh `Out`. nullopt when any
// error was recorded.
template <typename Out, typename Fill>
std::optional<Out> ParseBody(const json& body, std::initializer_list<std::string_view> known,
                             std::vector<FieldError>* errors, Fill fill) {
  const size_t before = errors->size();
  if (!CheckObject(body, "", errors)) return std::nullopt;
  FieldReader reader(body, "", errors);
  reader.RejectUnknown(known);
  Out out;
  fill(reader, out);
  if (errors->size() != before) return std::nullopt;
  return out;
}

std::optional<TaskRef> ParseTaskRef(FieldReader& reader) {
  auto job_id = reader.Int("job_id", true, 1, INT64_MAX);
  auto task = reader.Int("task", true, 0, JobSpec::kMaxTasks - 1);
  auto attempt = reader.Int("attempt", true, 1, INT32_MAX);
  if (!job_id || !task || !attempt) return std::nullopt;
  return TaskRef{*job_id, static_cast<int>(*task), static_cast<int>(*attempt)};
}

}  // namespace

std::optional<NodeRegistration> ParseNodeRegistration(const json& body,
                                                      std::vector<FieldError>* errors) {
  return ParseBody<NodeRegistration>(
      body, {"name", "pool", "labels", "cpus", "memory_mb", "instance", "gpus", "address"}, errors,
      [&](FieldReader& reader, NodeRegistration& out) {
        out.name = reader.Name("name", true).value_or("");
        out.pool = reader.Name("pool", false).value_or("default");
        out.labels = reader.StringMap("labels").value_or(std::map<std::string, std::string>{});
        out.cpus = reader.Number("cpus", false, 0, 1e6).value_or(0);
        out.memory_mb = reader.Int("memory_mb", false, 0, INT64_MAX / 2).value_or(0);
        out.instance = reader.String("instance", true, 1, 128).value_or("");
        const json* gpus = reader.Array("gpus", 1024);
        if (gpus == nullptr) return;
        std::set<int> indices;
        for (size_t i = 0; i < gpus->size(); ++i) {
          const std::string field = "gpus[" + std::to_string(i) + "]";
          if (!CheckObject((*gpus)[i], field, errors)) continue;
          FieldReader gpu_reader((*gpus)[i], field + ".", errors);
          gpu_reader.RejectUnknown({"index", "model", "memory_mb", "uuid"});
          GpuInventory gpu;
          auto index = gpu_reader.Int("index", true, 0, 1023);
          gpu.model = gpu_reader.String("model", true, 1, 128).value_or("");
          gpu.memory_mb = gpu_reader.Int("memory_mb", false, 0, INT64_MAX / 2).value_or(0);
          gpu.uuid = gpu_reader.String("uuid", false, 0, 256).value_or("");
          if (!index) continue;
          gpu.index = static_cast<int>(*index);
          if (!indices.insert(gpu.index).second) {
            gpu_reader.Fail("index", "duplicate GPU index " + std::to_string(gpu.index));
            continue;
          }
          if (gpu.uuid.empty()) gpu.uuid = out.name + "-gpu" + std::to_string(gpu.index);
          out.gpus.push_back(std::move(gpu));
        }
      });
}

std::optional<SyncRequest> ParseSyncRequest(const json& body, int64_t now_ms,
                                            std::vector<FieldError>* errors) {
  return ParseBody<SyncRequest>(
      body, {"node", "instance", "running", "reports", "address", "cache", "prefetched"}, errors,
      [&](FieldReader& reader, SyncRequest& out) {
        out.now_ms = now_ms;
        out.node = reader.Name("node", true).value_or("");
        out.instance = reader.String("instance", true, 1, 128).value_or("");
        if (const json* running = reader.Array("running", kMaxItems)) {
          for (size_t i = 0; i < running->size(); ++i) {
            const std::string field = "running[" + std::to_string(i) + "]";
            if (!CheckObject((*running)[i], field, errors)) continue;
            FieldReader ref_reader((*running)[i], field + ".", errors);
            ref_reader.RejectUnknown({"job_id", "task", "attempt"});
            if (auto ref = ParseTaskRef(ref_reader)) out.running.push_back(*ref);
          }
        }
        const json* reports = reader.Array("reports", kMaxItems);
        if (reports == nullptr) return;
        for (size_t i = 0; i < reports->size(); ++i) {
          const std::string field = "reports[" + std::to_string(i) + "]";
          if (!CheckObject((*reports)[i], field, errors)) continue;
          FieldReader report_reader((*reports)[i], field + ".", errors);
          report_reader.RejectUnknown({"job_id", "task", "attempt", "kind", "exit_code", "signal",
                                       "message", "note", "at_ms"});
          TaskReport report;
          auto ref = ParseTaskRef(report_reader);
          auto kind = report_reader.String("kind", true, 1, 32);
          if (kind) {
            if (*kind == "started") {
              report.kind = TaskReport::Kind::kStarted;
            } else if (*kind == "exited") {
              report.kind = TaskReport::Kind::kExited;
            } else if (*kind == "launch_failed") {
              report.kind = TaskReport::Kind::kLaunchFailed;
            } else if (*kind == "staging") {
              report.kind = TaskReport::Kind::kStaging;
            } else if (*kind == "staged") {
              report.kind = TaskReport::Kind::kStaged;
            } else if (*kind == "staging_failed") {
              report.kind = TaskReport::Kind::kStagingFailed;
            } else {
              report_reader.Fail("kind",
                                 "must be \"started\", \"exited\", \"launch_failed\", "
                                 "\"staging\", \"staged\" or \"staging_failed\"");
            }
          }
          if (auto code = report_reader.Int("exit_code", false, -255, 255)) {
            report.exit_code = static_cast<int>(*code);
          }
          if (auto signal = report_reader.Int("signal", false, 1, 128)) {
            report.signal = static_cast<int>(*signal);
          }
          report.message = report_reader.String("message", false, 0, 4096).value_or("");
          report.note = report_reader.String("note", false, 0, 4096).value_or("");
          report.at_ms = report_reader.Int("at_ms", false, 0, INT64_MAX / 2).value_or(now_ms);
          if (report.at_ms == 0) report.at_ms = now_ms;
          if (ref) report.ref = *ref;
          out.reports.push_back(std::move(report));
        }
      });
}

std::optional<std::vector<PrefetchReport>> ParsePrefetchReports(const json& body,
                                                                std::vector<FieldError>* errors) {
  std::vector<PrefetchReport> out;
  auto it = body.find("prefetched");
  if (it == body.end() || it->is_null()) return out;
  const size_t before = errors->size();
  if (!it->is_array() || it->size() > 256) {
    errors->push_back({"prefetched", "must be an array of at most 256 objects"});
    return std::nullopt;
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string field = "prefetched[" + std::to_string(i) + "]";
    if (!CheckObject((*it)[i], field, errors)) continue;
    FieldReader reader((*it)[i], field + ".", errors);
    reader.RejectUnknown({"job_id", "attempt", "message"});
    PrefetchReport report;
    report.job_id = reader.Int("job_id", true, 1, INT64_MAX).value_or(0);
    report.attempt = static_cast<int>(reader.Int("attempt", true, 1, INT32_MAX).value_or(0));
    report.message = reader.String("message", true, 1, 4096).value_or("");
    out.push_back(std::move(report));
  }
  if (errors->size() != before) return std::nullopt;
  return out;
}

std::optional<AgentLogUpload> ParseAgentLogUpload(const json& body,
                                                  std::vector<FieldError>* errors) {
  return ParseBody<AgentLogUpload>(
      body, {"node", "job_id", "attempt", "task", "stream", "data"}, errors,
      [](FieldReader& reader, AgentLogUpload& out) {
        out.node = reader.Name("node", true).value_or("");
        out.job_id = reader.Int("job_id", true, 1, INT64_MAX).value_or(0);
        out.attempt = static_cast<int>(reader.Int("attempt", true, 1, INT32_MAX).value_or(0));
        out.task =
            static_cast<int>(reader.Int("task", true, 0, JobSpec::kMaxTasks - 1).value_or(0));
        out.stream = reader.String("stream", true, 1, 16).value_or("");
        if (!out.stream.empty() && out.stream != "stdout" && out.stream != "stderr") {
          reader.Fail("stream", "must be \"stdout\" or \"stderr\"");
        }
        out.data = reader.String("data", true, 0, SIZE_MAX).value_or("");
      });
}

std::optional<CreateUserRequest> ParseCreateUserRequest(const json& body,
                                                        std::vector<FieldError>* errors) {
  return ParseBody<CreateUserRequest>(
      body, {"tenant", "team", "name", "role"}, errors,
      [](FieldReader& reader, CreateUserRequest& out) {
        out.tenant = reader.Name("tenant", true).value_or("");
        out.team = reader.Name("team", true).value_or("");
        out.name = reader.Name("name", true).value_or("");
        if (auto role = reader.String("role", true, 1, 32)) {
          if (auto parsed = ParseRole(*role)) {
            out.role = *parsed;
          } else {
            reader.Fail("role",
                        "must be \"user\", \"team_admin\", \"platform_admin\" or \"agent\"");
          }
        }
      });
}

std::optional<RevokeUserRequest> ParseRevokeUserRequest(const json& body,
                                                        std::vector<FieldError>* errors) {
  return ParseBody<RevokeUserRequest>(body, {"tenant", "name"}, errors,
                                      [](FieldReader& reader, RevokeUserRequest& out) {
                                        out.tenant = reader.Name("tenant", true).value_or("");
                                        out.name = reader.Name("name", true).value_or("");
                                      });
}

std::optional<CreateWebhookRequest> ParseCreateWebhookRequest(const json& body,
                                                              std::vector<FieldError>* errors) {
  return ParseBody<CreateWebhookRequest>(
      body, {"url", "states", "description", "all_tenants", "job_id"}, errors,
      [](FieldReader& reader, CreateWebhookRequest& out) {
        if (auto url = reader.String("url", true, 1, 2048)) {
          if (Result<WebhookTarget> target = ParseWebhookUrl(*url); !target.ok()) {
            reader.Fail("url", target.status().message());
          }
          out.url = *url;
        }
        if (const json* states = reader.Array("states", 16)) {
          if (states->empty()) reader.Fail("states", "must name at least one state");
          for (size_t i = 0; i < states->size(); ++i) {
            const json& item = (*states)[i];
            std::optional<JobState> state =
                item.is_string() ? ParseJobState(item.get<std::string>()) : std::nullopt;
            if (!state) {
              reader.Fail("states[" + std::to_string(i) + "]", "must be a job state");
            } else if (std::find(out.states.begin(), out.states.end(), *state) ==
                       out.states.end()) {
              out.states.push_back(*state);
            }
          }
        } else if (reader.Member("states", false) == nullptr) {
          out.states = {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled,
                        JobState::kTimeout};
        }
        out.description = reader.String("description", false, 0, 200).value_or("");
        out.all_tenants = reader.Bool("all_tenants").value_or(false);
        out.job_id = reader.Int("job_id", false, 1, INT64_MAX);
      });
}

bool ParseCacheReport(const json& body, int64_t now_ms, std::optional<NodeCache>* cache,
                      std::vector<FieldError>* errors) {
  cache->reset();
  auto it = body.find("cache");
  if (it == body.end() || it->is_null()) return true;
  const size_t before = errors->size();
  if (!CheckObject(*it, "cache", errors)) return false;
  FieldReader reader(*it, "cache.", errors);
  reader.RejectUnknown({"quota_bytes", "bytes", "entries", "hit_bytes", "fetched_bytes", "inputs"});
  constexpr int64_t kMaxBytes = INT64_MAX / 4;
  NodeCache out;
  out.reported_at_ms = now_ms;
  out.quota_bytes = reader.Int("quota_bytes", true, 0, kMaxBytes).value_or(0);
  out.bytes = reader.Int("bytes", true, 0, kMaxBytes).value_or(0);
  out.entries = reader.Int("entries", true, 0, kMaxBytes).value_or(0);
  out.hit_bytes = reader.Int("hit_bytes", true, 0, kMaxBytes).value_or(0);
  out.fetched_bytes = reader.Int("fetched_bytes", true, 0, kMaxBytes).value_or(0);
  if (const json* inputs = reader.Array("inputs", NodeCache::kMaxInputs)) {
    std::set<std::pair<std::string, std::string>> seen;
    for (size_t i = 0; i < inputs->size(); ++i) {
      const std::string field = "cache.inputs[" + std::to_string(i) + "]";
      if (!CheckObject((*inputs)[i], field, errors)) continue;
      FieldReader input_reader((*inputs)[i], field + ".", errors);
      input_reader.RejectUnknown({"tenant", "digest", "bytes", "total_bytes"});
      NodeCache::Input input;
      input.tenant = input_reader.Name("tenant", true).value_or("");
      if (auto digest = input_reader.String("digest", true, 0, 128)) {
        if (digest->rfind("sha256:", 0) != 0 ||
            !CheckSha256(std::string_view(*digest).substr(7)).empty()) {
          input_reader.Fail("digest", "must be \"sha256:\" and 64 lower-case hex digits");
        }
        input.digest = *digest;
      }
      auto bytes = input_reader.Int("bytes", true, 0, kMaxBytes);
      auto total = input_reader.Int("total_bytes", true, 0, kMaxBytes);
      if (bytes && total && *bytes > *total) {
        input_reader.Fail("bytes", "must be at most total_bytes (" + std::to_string(*total) + ")");
      }
      if (!input.tenant.empty() && !input.digest.empty() &&
          !seen.emplace(input.tenant, input.digest).second) {
        input_reader.Fail("digest", "listed twice for tenant " + input.tenant);
      }
      input.bytes = bytes.value_or(0);
      input.total_bytes = total.value_or(0);
      if (input.bytes > 0) out.inputs.push_back(std::move(input));
    }
  }
  if (errors->size() != before) return false;
  *cache = std::move(out);
  return true;
}

std::optional<std::string> ParseAdvertisedAddress(const json& body,
                                                  std::vector<FieldError>* errors) {
  auto it = body.find("address");
  if (it == body.end() || it->is_null()) return std::string();
  const bool ok = it->is_string() && !it->get_ref<const std::string&>().empty() &&
                  it->get_ref<const std::string&>().size() <= 253 &&
                  std::all_of(it->get_ref<const std::string&>().begin(),
                              it->get_ref<const std::string&>().end(), [](char c) {
                                return std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                                       c == '-' || c == ':' || c == '_';
                              });
  if (!ok) {
    errors->push_back({"address",
                       "must be a host name or IP address (1 to 253 characters of "
                       "A-Z a-z 0-9 . - : _)"});
    return std::nullopt;
  }
  return it->get<std::string>();
}

}  // namespace ferry::fleet::server_internal
