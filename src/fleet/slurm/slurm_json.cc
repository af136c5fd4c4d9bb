#include "fleet/slurm/slurm_json.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

namespace ferry::fleet::slurm::internal {

namespace {

using nlohmann::json;

// Printable, one line, at most `limit` characters: bodies end up in messages.
std::string Shorten(std::string_view text, size_t limit = 160) {
  std::string out;
  for (char c : text) {
    if (out.size() >= limit) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  return out;
}

Result<json> ParseObject(std::string_view body, std::string_view what) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return Status::Invalid(std::string(what) + ": not JSON: \"" + Shorten(body) + "\"");
  }
  if (!doc.is_object()) {
    return Status::Invalid(std::string(what) + ": expected a JSON object, got " + doc.type_name());
  }
  return doc;
}

// A number as any version spells it: 5, 5.0, {"set": true, "infinite":
// false, "number": 5}; nullopt for null, unset or infinite.
std::optional<int64_t> Number(const json& value) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_float()) {
    const double number = value.get<double>();
    // NaN fails both comparisons; the bounds keep the cast defined.
    if (!(number > -9.2e18 && number < 9.2e18)) return std::nullopt;
    return static_cast<int64_t>(number);
  }
  if (value.is_object()) {
    auto set = value.find("set");
    auto infinite = value.find("infinite");
    auto number = value.find("number");
    if (set != value.end() && set->is_boolean() && !set->get<bool>()) return std::nullopt;
    if (infinite != value.end() && infinite->is_boolean() && infinite->get<bool>()) {
      return std::nullopt;
    }
    if (number != value.end()) return Number(*number);
  }
  return std::nullopt;
}

std::optional<int64_t> NumberField(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  return Number(*it);
}

int64_t NumberOr(const json& object, const char* key, int64_t fallback) {
  return NumberField(object, key).value_or(fallback);
}

std::string StringField(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

std::string Upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

// A state as a list of upper-case words: ["MIXED", "DRAIN"] from
// ["MIXED", "DRAIN"] (v0.0.40), "mixed+drain" (v0.0.36) or "RUNNING".
Result<std::vector<std::string>> StateWords(const json& value, std::string_view what,
                                            bool allow_empty = false) {
  std::vector<std::string> words;
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    size_t start = 0;
    while (start <= text.size()) {
      size_t plus = text.find_first_of("+,", start);
      std::string word = text.substr(start, plus == std::string::npos ? plus : plus - start);
      if (!word.empty()) words.push_back(Upper(word));
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
  } else if (value.is_array()) {
    for (const json& item : value) {
      if (!item.is_string()) {
        return Status::Invalid(std::string(what) + ": a state list holds a " + item.type_name());
      }
      words.push_back(Upper(item.get<std::string>()));
    }
  } else {
    return Status::Invalid(std::string(what) + ": state is a " + value.type_name() +
                           ", expected a string or a list");
  }
  if (words.empty() && !allow_empty) return Status::Invalid(std::string(what) + ": empty state");
  return words;
}

std::string Join(const std::vector<std::string>& words, std::string_view separator) {
  std::string out;
  for (const std::string& word : words) {
    if (!out.empty()) out += separator;
    out += word;
  }
  return out;
}

// The array `key` of a response object, or an error naming the shape.
Result<const json*> ArrayField(const json& doc, const char* key, std::string_view what) {
  auto it = doc.find(key);
  if (it == doc.end()) {
    return Status::Invalid(std::string(what) + ": unexpected shape: no \"" + key + "\" list");
  }
  if (!it->is_array()) {
    return Status::Invalid(std::string(what) + ": \"" + key + "\" is a " + it->type_name() +
                           ", expected a list");
  }
  return &*it;
}

std::string ErrorsText(const json& doc) {
  auto it = doc.find("errors");
  if (it == doc.end() || !it->is_array()) return "";
  std::vector<std::string> parts;
  for (const json& error : *it) {
    if (!error.is_object()) {
      parts.push_back(Shorten(error.dump()));
      continue;
    }
    std::string text = StringField(error, "description");
    std::string name = StringField(error, "error");
    if (text.empty()) {
      text = name;
    } else if (!name.empty() && text.find(name) == std::string::npos) {
      text += ": " + name;
    }
    auto code = NumberField(error, "error_number");
    if (!code) code = NumberField(error, "error_code");
    if (code && *code != 0) text += " (" + std::to_string(*code) + ")";
    if (!text.empty()) parts.push_back(text);
  }
  return Join(parts, "; ");
}

// Applies `parse` to a response; nlohmann's type errors on shapes this code
// did not expect become errors too.
template <typename Fn>
auto Guarded(std::string_view what, Fn&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::exception& error) {
    return Status::Invalid(std::string(what) + ": unexpected shape: " + error.what());
  }
}

const std::set<std::string>& NodeBaseStates() {
  static const std::set<std::string> kBase = {"IDLE",    "DOWN",    "ALLOCATED", "ALLOC",
                                              "MIXED",   "ERROR",   "FUTURE",    "UNKNOWN",
                                              "DRAINED", "DRAINING"};
  return kBase;
}

Result<Node> ParseNode(const json& item, std::string_view what) {
  if (!item.is_object()) {
    return Status::Invalid(std::string(what) + ": a node is a " + item.type_name());
  }
  Node node;
  node.name = StringField(item, "name");
  if (node.name.empty()) return Status::Invalid(std::string(what) + ": a node without a name");
  const std::string where = std::string(what) + ": node " + node.name;
  auto state = item.find("state");
  if (state == item.end()) return Status::Invalid(where + ": no state");
  FERRY_ASSIGN_OR_RAISE(std::vector<std::string> words, StateWords(*state, where));
  auto flags = item.find("state_flags");
  if (flags != item.end() && flags->is_array()) {
    FERRY_ASSIGN_OR_RAISE(std::vector<std::string> more,
                          StateWords(*flags, where, /*allow_empty=*/true));
    words.insert(words.end(), more.begin(), more.end());
  } else if (flags != item.end() && !flags->is_null()) {
    return Status::Invalid(where + ": state_flags is a " + flags->type_name());
  }
  for (const std::string& word : words) {
    if (node.state.empty() && NodeBaseStates().count(word) > 0) {
      node.state = word == "ALLOC" ? "ALLOCATED" : word;
    } else if (std::find(node.state_flags.begin(), node.state_flags.end(), word) ==
               node.state_flags.end()) {
      node.state_flags.push_back(word);
    }
  }
  if (node.state.empty()) node.state = words.front();
  auto has = [&](std::string_view word) {
    return node.state == word || std::find(node.state_flags.begin(), node.state_flags.end(),
                                           word) != node.state_flags.end();
  };
  node.idle = has("IDLE");
  node.mixed = has("MIXED");
  node.allocated = has("ALLOCATED");
  node.down = has("DOWN") || has("NOT_RESPONDING");
  node.drain = has("DRAIN") || has("DRAINED") || has("DRAINING");
  node.reason = StringField(item, "reason");
  node.address = StringField(item, "address");
  node.cpus = static_cast<int>(NumberOr(item, "cpus", 0));
  node.alloc_cpus = static_cast<int>(NumberOr(item, "alloc_cpus", 0));
  node.memory_mb = NumberOr(item, "real_memory", 0);
  node.alloc_memory_mb = NumberOr(item, "alloc_memory", 0);
  auto partitions = item.find("partitions");
  if (partitions != item.end() && partitions->is_array()) {
    for (const json& partition : *partitions) {
      if (partition.is_string()) node.partitions.push_back(partition.get<std::string>());
    }
  }
  auto gres = ParseGresList(StringField(item, "gres"));
  if (!gres.ok()) return gres.status().WithPrefix(where + ": ");
  bool first_gpu = true;
  for (const Gres& entry : *gres) {
    if (entry.name != "gpu") continue;
    node.gpus += static_cast<int>(entry.count);
    if (first_gpu) node.gpu_type = entry.type;
    first_gpu = false;
  }
  // gres_used ("gpu:h200:2(IDX:0-1)") is there in every version; the TRES
  // ("...,gres/gpu=2") only with AccountingStorageTRES=gres/gpu.
  auto used = item.find("gres_used");
  if (used != item.end() && used->is_string()) {
    auto in_use = ParseGresList(used->get<std::string>());
    if (!in_use.ok()) return in_use.status().WithPrefix(where + ": gres_used: ");
    for (const Gres& entry : *in_use) {
      if (entry.name == "gpu") node.gpus_allocated += static_cast<int>(entry.count);
    }
  } else {
    static const std::regex kGpuTres(R"((?:^|,)gres/gpu=(\d+))");
    std::smatch match;
    const std::string tres = StringField(item, "tres_used");
    if (std::regex_search(tres, match, kGpuTres)) node.gpus_allocated = std::stoi(match[1]);
  }
  return node;
}

// The job's exit: v0.0.3x give the wait status as a number (768 = exit 3,
// 9 = SIGKILL); v0.0.40+ an object {status: [...], return_code, signal}.
void ParseExit(const json& item, Job* job) {
  auto exit = item.find("exit_code");
  if (exit == item.end()) return;
  if (exit->is_object()) {
    auto status = exit->find("status");
    if (status != exit->end() && status->is_array()) {
      for (const json& word : *status) {
        if (word.is_string() && Upper(word.get<std::string>()) == "PENDING") return;
      }
    }
    job->exit_code = static_cast<int>(NumberOr(*exit, "return_code", 0));
    auto signal = exit->find("signal");
    if (signal != exit->end() && signal->is_object()) {
      job->exit_signal = static_cast<int>(NumberOr(*signal, "id", 0));
    }
    return;
  }
  if (auto raw = Number(*exit)) {
    const int status = static_cast<int>(*raw);
    job->exit_code = (status >> 8) & 0xff;
    job->exit_signal = status & 0x7f;
  }
}

Result<Job> ParseJob(const json& item, std::string_view what) {
  if (!item.is_object())
    return Status::Invalid(std::string(what) + ": a job is a " + item.type_name());
  Job job;
  auto id = NumberField(item, "job_id");
  if (!id || *id <= 0) return Status::Invalid(std::string(what) + ": a job without a job_id");
  job.id = *id;
  const std::string where = std::string(what) + ": job " + std::to_string(job.id);
  auto state = item.find("job_state");
  if (state == item.end()) return Status::Invalid(where + ": no job_state");
  FERRY_ASSIGN_OR_RAISE(std::vector<std::string> words, StateWords(*state, where));
  job.state_text = Join(words, ",");
  // A list is a base state and flags; the flags that change what the job
  // is doing win, as in Slurm's own job_state_string().
  job.state = JobState::kUnknown;
  for (const char* flag : {"COMPLETING", "STAGE_OUT", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD",
                           "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "REVOKED"}) {
    if (words.size() > 1 && std::find(words.begin(), words.end(), flag) != words.end()) {
      job.state = ParseJobState(flag);
      break;
    }
  }
  if (job.state == JobState::kUnknown) {
    for (const std::string& word : words) {
      job.state = ParseJobState(word);
      if (job.state != JobState::kUnknown) break;
    }
  }
  job.name = StringField(item, "name");
  job.comment = StringField(item, "comment");
  job.reason = StringField(item, "state_reason");
  job.nodes = StringField(item, "nodes");
  job.node_count = static_cast<int>(NumberOr(item, "node_count", 0));
  job.partition = StringField(item, "partition");
  job.account = StringField(item, "account");
  job.qos = StringField(item, "qos");
  job.standard_output = StringField(item, "standard_output");
  job.standard_error = StringField(item, "standard_error");
  job.gres_per_node = StringField(item, "tres_per_node");
  job.submit_time = NumberOr(item, "submit_time", 0);
  // A pending job's times are estimates, a running job's end is its limit.
  const bool started = job.state != JobState::kPending && job.state != JobState::kRequeued;
  if (started) job.start_time = NumberOr(item, "start_time", 0);
  if (IsFinished(job.state) || job.state == JobState::kCompleting) {
    job.end_time = NumberOr(item, "end_time", 0);
    ParseExit(item, &job);
  }
  return job;
}

}  // namespace

Result<std::string> ErrorsOf(std::string_view body) {
  FERRY_ASSIGN_OR_RAISE(json doc, ParseObject(body, "slurm response"));
  return ErrorsText(doc);
}

Result<std::vector<Node>> ParseNodes(std::string_view body, std::string_view what) {
  return Guarded(what, [&]() -> Result<std::vector<Node>> {
    FERRY_ASSIGN_OR_RAISE(json doc, ParseObject(body, what));
    std::string errors = ErrorsText(doc);
    if (!errors.empty()) return Status::IOError(std::string(what) + ": " + errors);
    FERRY_ASSIGN_OR_RAISE(const json* items, ArrayField(doc, "nodes", what));
    std::vector<Node> nodes;
    for (const json& item : *items) {
      FERRY_ASSIGN_OR_RAISE(Node node, ParseNode(item, what));
      nodes.push_back(std::move(node));
    }
    return nodes;
  });
}

Result<std::vector<Job>> ParseJobs(std::string_view body, std::string_view what) {
  return Guarded(what, [&]() -> Result<std::vector<Job>> {
    FERRY_ASSIGN_OR_RAISE(json doc, ParseObject(body, what));
    std::string errors = ErrorsText(doc);
    FERRY_ASSIGN_OR_RAISE(const json* items, ArrayField(doc, "jobs", what));
    // GET /job/{id} of an unknown job: an error and an empty list.
    if (!errors.empty() && !items->empty()) {
      return Status::IOError(std::string(what) + ": " + errors);
    }
    if (!errors.empty() && errors.find("(2017)") == std::string::npos) {
      return Status::IOError(std::string(what) + ": " + errors);
    }
    std::vector<Job> jobs;
    for (const json& item : *items) {
      FERRY_ASSIGN_OR_RAISE(Job job, ParseJob(item, what));
      jobs.push_back(std::move(job));
    }
    return jobs;
  });
}

Result<int64_t> ParseSubmitResponse(std::string_view body, std::string_view what) {
  return Guarded(what, [&]() -> Result<int64_t> {
    FERRY_ASSIGN_OR_RAISE(json doc, ParseObject(body, what));
    std::string errors = ErrorsText(doc);
    auto id = NumberField(doc, "job_id");
    if (id && *id > 0) return *id;
    if (!errors.empty()) return Status::Invalid(std::string(what) + ": " + errors);
    return Status::Invalid(std::string(what) + ": unexpected shape: no job_id in \"" +
                           Shorten(body) + "\"");
  });
}

Status ParseEmptyResponse(std::string_view body, std::string_view what) {
  auto done = Guarded(what, [&]() -> Result<bool> {
    FERRY_ASSIGN_OR_RAISE(json doc, ParseObject(body, what));
    std::string errors = ErrorsText(doc);
    if (!errors.empty()) return Status::Invalid(std::string(what) + ": " + errors);
    return true;
  });
  return done.status();
}

Result<ProbeResult> ParsePing(std::string_view body, std::string_view what) {
  return Guarded(what, [&]() -> Result<ProbeResult> {
    FERRY_ASSIGN_OR_RAISE(json doc, ParseObject(body, what));
    ProbeResult probe;
    auto meta = doc.find("meta");
    if (meta != doc.end() && meta->is_object()) {
      auto slurm = meta->find("Slurm");
      if (slurm == meta->end()) slurm = meta->find("slurm");
      if (slurm != meta->end() && slurm->is_object())
        probe.slurm_release = StringField(*slurm, "release");
    }
    std::string errors = ErrorsText(doc);
    FERRY_ASSIGN_OR_RAISE(const json* pings, ArrayField(doc, "pings", what));
    for (const json& ping : *pings) {
      if (!ping.is_object()) continue;
      // "ping": "UP" (v0.0.3x) or "pinged": "UP" / "responding": true (v0.0.40+).
      std::string up = Upper(StringField(ping, "ping"));
      if (up.empty()) up = Upper(StringField(ping, "pinged"));
      auto responding = ping.find("responding");
      if (up == "UP" ||
          (responding != ping.end() && responding->is_boolean() && responding->get<bool>())) {
        probe.controller_up = true;
      }
    }
    if (!probe.controller_up && !errors.empty()) {
      return Status::IOError(std::string(what) + ": " + errors);
    }
    return probe;
  });
}

Result<std::vector<ApiVersion>> ParseServedVersions(std::string_view body) {
  constexpr std::string_view kWhat = "slurmrestd OpenAPI document";
  return Guarded(kWhat, [&]() -> Result<std::vector<ApiVersion>> {
    FERRY_ASSIGN_OR_RAISE(json doc, ParseObject(body, kWhat));
    auto paths = doc.find("paths");
    if (paths == doc.end() || !paths->is_object()) {
      return Status::Invalid(std::string(kWhat) + ": unexpected shape: no \"paths\" object");
    }
    static const std::regex kPing(R"(^/slurm/(v0\.0\.\d+)/ping/?$)");
    std::set<ApiVersion> versions;
    for (const auto& [path, _] : paths->items()) {
      std::smatch match;
      if (std::regex_match(path, match, kPing)) {
        auto version = ParseApiVersion(match[1].str());
        if (version.ok()) versions.insert(*version);
      }
    }
    return std::vector<ApiVersion>(versions.begin(), versions.end());
  });
}

Status ValidateSubmit(const SubmitRequest& request) {
  if (request.script.substr(0, 2) != "#!") {
    return Status::Invalid("slurm submit: the script must start with \"#!\"");
  }
  if (request.working_dir.empty() || request.working_dir.front() != '/') {
    return Status::Invalid("slurm submit: working_dir must be an absolute path");
  }
  if (request.nodes < 1) return Status::Invalid("slurm submit: nodes must be at least 1");
  if (request.tasks_per_node < 1) {
    return Status::Invalid("slurm submit: tasks_per_node must be at least 1");
  }
  if (request.gpus_per_node < 0) return Status::Invalid("slurm submit: gpus_per_node < 0");
  if (request.tasks < 0 || request.gpus_per_task < 0 || request.cpus_per_task < 0 ||
      request.memory_mb_per_node < 0) {
    return Status::Invalid(
        "slurm submit: tasks, gpus_per_task, cpus_per_task and memory must be >= 0");
  }
  if (request.tasks > 0 && request.tasks < request.nodes) {
    return Status::Invalid("slurm submit: fewer tasks than nodes");
  }
  if (request.tasks == 0 && request.gpus_per_task > 0) {
    return Status::Invalid("slurm submit: gpus_per_task needs tasks");
  }
  for (const std::string& node : request.nodelist) {
    if (node.empty() || node.find_first_of(",[] ") != std::string::npos) {
      return Status::Invalid("slurm submit: bad node name \"" + node + "\" in nodelist");
    }
  }
  if (!request.nodelist.empty() && static_cast<int>(request.nodelist.size()) != request.nodes) {
    return Status::Invalid("slurm submit: nodelist must name exactly `nodes` nodes");
  }
  if (request.time_limit_minutes < 0) return Status::Invalid("slurm submit: time limit < 0");
  if (request.gpu_type.find_first_of(":,= ") != std::string::npos) {
    return Status::Invalid("slurm submit: bad GPU type \"" + request.gpu_type + "\"");
  }
  for (const auto& [key, value] : request.environment) {
    if (key.empty() || key.find('=') != std::string::npos || key.find('\0') != std::string::npos ||
        value.find('\0') != std::string::npos) {
      return Status::Invalid("slurm submit: bad environment variable \"" + key + "\"");
    }
  }
  return Status::OK();
}

std::string SubmitBody(const SubmitRequest& request, ApiVersion version) {
  json job = json::object();
  auto put_string = [&](const char* key, const std::string& value) {
    if (!value.empty()) job[key] = value;
  };
  put_string("name", request.name);
  put_string("comment", request.comment);
  put_string("partition", request.partition);
  put_string("account", request.account);
  put_string("qos", request.qos);
  put_string("standard_output", request.stdout_path);
  put_string("standard_error", request.stderr_path);
  job["current_working_directory"] = request.working_dir;
  if (request.tasks > 0) {
    job["tasks"] = request.tasks;
  } else {
    job["tasks_per_node"] = request.tasks_per_node;
  }
  if (request.cpus_per_task > 0) job["cpus_per_task"] = request.cpus_per_task;
  const std::string gpus_per_task = (request.gpu_type.empty() ? "" : request.gpu_type + ":") +
                                    std::to_string(request.gpus_per_task);
  std::string nodelist;
  for (const std::string& node : request.nodelist) {
    nodelist += (nodelist.empty() ? "" : ",") + node;
  }
  job["hold"] = request.hold;
  // Ferry retries on its own terms: Slurm must not requeue behind its back.
  job["requeue"] = false;
  const std::string gpus = (request.gpu_type.empty() ? "" : request.gpu_type + ":") +
                           std::to_string(request.gpus_per_node);
  if (version.data_parser()) {
    job["minimum_nodes"] = request.nodes;
    job["maximum_nodes"] = request.nodes;
    if (request.gpus_per_node > 0) job["tres_per_node"] = "gres/gpu:" + gpus;
    if (request.gpus_per_task > 0) job["tres_per_task"] = "gres/gpu:" + gpus_per_task;
    if (request.memory_mb_per_node > 0) {
      job["memory_per_node"] = {
          {"set", true}, {"infinite", false}, {"number", request.memory_mb_per_node}};
    }
    if (!request.nodelist.empty()) job["required_nodes"] = request.nodelist;
    if (request.time_limit_minutes > 0) {
      job["time_limit"] = {
          {"set", true}, {"infinite", false}, {"number", request.time_limit_minutes}};
    }
    json environment = json::array();
    for (const auto& [key, value] : request.environment) environment.push_back(key + "=" + value);
    job["environment"] = std::move(environment);
    job["script"] = request.script;
    return json{{"job", std::move(job)}}.dump();
  }
  // v0.0.36-v0.0.38: `nodes` is a count, GPUs go as gpus_per_node (the key
  // tres_per_node is refused), the environment is an object and must be
  // present, the script sits beside the job.
  job["nodes"] = request.nodes;
  if (request.gpus_per_node > 0) job["gpus_per_node"] = gpus;
  if (request.gpus_per_task > 0) job["gpus_per_task"] = gpus_per_task;
  if (request.memory_mb_per_node > 0) job["memory_per_node"] = request.memory_mb_per_node;
  if (request.time_limit_minutes > 0) job["time_limit"] = request.time_limit_minutes;
  json environment = json::object();
  for (const auto& [key, value] : request.environment) environment[key] = value;
  job["environment"] = std::move(environment);
  return json{{"script", request.script}, {"job", std::move(job)}}.dump();
}

std::vector<std::string> SbatchArguments(const SubmitRequest& request) {
  std::vector<std::string> args = {"--parsable", "--export=ALL", "--no-requeue"};
  auto add = [&](const char* flag, const std::string& value) {
    if (!value.empty()) args.push_back(std::string(flag) + "=" + value);
  };
  add("--job-name", request.name);
  add("--comment", request.comment);
  add("--partition", request.partition);
  add("--account", request.account);
  add("--qos", request.qos);
  add("--chdir", request.working_dir);
  add("--output", request.stdout_path);
  add("--error", request.stderr_path);
  args.push_back("--nodes=" + std::to_string(request.nodes));
  if (request.tasks > 0) {
    args.push_back("--ntasks=" + std::to_string(request.tasks));
  } else {
    args.push_back("--ntasks-per-node=" + std::to_string(request.tasks_per_node));
  }
  if (request.cpus_per_task > 0) {
    args.push_back("--cpus-per-task=" + std::to_string(request.cpus_per_task));
  }
  if (request.memory_mb_per_node > 0) {
    args.push_back("--mem=" + std::to_string(request.memory_mb_per_node));
  }
  if (!request.nodelist.empty()) {
    std::string nodelist;
    for (const std::string& node : request.nodelist) {
      nodelist += (nodelist.empty() ? "" : ",") + node;
    }
    args.push_back("--nodelist=" + nodelist);
  }
  if (request.gpus_per_task > 0) {
    args.push_back("--gpus-per-task=" + (request.gpu_type.empty() ? "" : request.gpu_type + ":") +
                   std::to_string(request.gpus_per_task));
  }
  if (request.gpus_per_node > 0) {
    args.push_back("--gpus-per-node=" + (request.gpu_type.empty() ? "" : request.gpu_type + ":") +
                   std::to_string(request.gpus_per_node));
  }
  if (request.time_limit_minutes > 0) {
    args.push_back("--time=" + std::to_string(request.time_limit_minutes));
  }
  if (request.hold) args.push_back("--hold");
  return args;
}

}  // namespace ferry::fleet::slurm::internal
