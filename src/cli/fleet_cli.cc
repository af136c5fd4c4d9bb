#include "cli/fleet_cli.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <utility>

#include "base/yaml_tree.h"
#include "cli/dataset_cli.h"
#include "cli/log_lines.h"
#include "ferry/fleet/agent.h"
#include "ferry/fleet/client.h"
#include "ferry/fleet/code_bundle.h"
#include "ferry/fleet/model.h"
#include "ferry/fleet/server.h"
#include "ferry/fleet/staging.h"

namespace ferry::cli {

using ferry::fleet::Client;
using ferry::fleet::ClientOptions;
using ferry::fleet::Request;
using ferry::fleet::Response;
using nlohmann::json;

namespace {

// ---- YAML job files (the base layer's located tree: its limits, file:line:column errors).

bool LooksLikeInteger(const std::string& text) {
  size_t i = (text.size() > 1 && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  if (i >= text.size() || text.size() - i > 18) return false;
  for (; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

bool LooksLikeFloat(const std::string& text, double* out) {
  if (text.empty() || text.size() > 64) return false;
  const char first = text[0];
  if (!std::isdigit(static_cast<unsigned char>(first)) && first != '-' && first != '+' &&
      first != '.') {
    return false;
  }
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return false;
  *out = value;
  return true;
}

const char* KindName(const yaml::Node& node) {
  switch (node.kind) {
    case yaml::Node::Kind::kNull:
      return "null";
    case yaml::Node::Kind::kScalar:
      return "a scalar";
    case yaml::Node::Kind::kSequence:
      return "a list";
    case yaml::Node::Kind::kMapping:
      return "a mapping";
  }
  return "a value";
}

// The JSON form of one value; `path` names it in errors ("env.SEED", "command[2]").
Result<json> YamlToJson(const yaml::Reporter& reporter, const yaml::Ref& ref,
                        const std::string& path, bool strings, int depth) {
  const std::string where = path.empty() ? "(top level)" : path;
  if (depth > 32) return reporter.Error(ref.location, where + ": nested too deeply");
  const yaml::Node& node = *ref.node;
  switch (node.kind) {
    case yaml::Node::Kind::kNull:
      return json(nullptr);
    case yaml::Node::Kind::kScalar: {
      const std::string& text = node.value;
      // Quoted and explicitly tagged scalars stay strings.
      if (strings || !node.is_plain_scalar()) return json(text);
      if (text == "~" || text == "null" || text == "Null" || text == "NULL") return json(nullptr);
      if (text == "true" || text == "True" || text == "TRUE") return json(true);
      if (text == "false" || text == "False" || text == "FALSE") return json(false);
      if (LooksLikeInteger(text)) return json(std::stoll(text));
      double value = 0;
      if (LooksLikeFloat(text, &value)) return json(value);
      return json(text);
    }
    case yaml::Node::Kind::kSequence: {
      json out = json::array();
      for (size_t index = 0; index < node.items.size(); ++index) {
        FERRY_ASSIGN_OR_RAISE(
            json value, YamlToJson(reporter, node.items[index],
                                   path + "[" + std::to_string(index) + "]", strings, depth + 1));
        out.push_back(std::move(value));
      }
      return out;
    }
    case yaml::Node::Kind::kMapping: {
      json out = json::object();
      for (size_t index = 0; index + 1 < node.items.size(); index += 2) {
        const yaml::Ref& key_ref = node.items[index];
        yaml::Ref value_ref = node.items[index + 1];
        if (key_ref.node->kind != yaml::Node::Kind::kScalar) {
          return reporter.Error(key_ref.location, where + ": keys must be plain strings, got " +
                                                      KindName(*key_ref.node));
        }
        const std::string& key = key_ref.node->value;
        const std::string child = path.empty() ? key : path + "." + key;
        // An empty value is placed at the next token; its key says better where it is.
        if (value_ref.node->kind == yaml::Node::Kind::kNull) value_ref.location = key_ref.location;
        // An input's names, URI and digest too (a digest of digits only, a name "1").
        const bool input_field = path.rfind("inputs[", 0) == 0 &&
                                 path.find('.') == std::string::npos &&
                                 (key == "name" || key == "dataset" || key == "uri" ||
                                  key == "sha256" || key == "mode" || key == "manifest_digest");
        const bool child_strings =
            strings || input_field ||
            (path.empty() && (key == "command" || key == "env" || key == "labels" ||
                              key == "gpu_models" || key == "datasets" || key == "image"));
        if (out.contains(key)) return reporter.Error(key_ref.location, child + ": appears twice");
        FERRY_ASSIGN_OR_RAISE(json value,
                              YamlToJson(reporter, value_ref, child, child_strings, depth + 1));
        out[key] = std::move(value);
      }
      return out;
    }
  }
  return reporter.Error(ref.location, where + ": unsupported YAML node");
}

// ---- Output helpers.

std::string Str(const json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

std::string Field(const json& object, const char* key) {
  if (!object.is_object()) return "-";
  auto it = object.find(key);
  return it == object.end() ? "-" : Str(*it);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Age(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "-";
  return FormatAge(ParseTimestamp(it->get<std::string>()), NowMs());
}

std::string Join(const json& array, const std::string& separator = ",") {
  if (!array.is_array()) return "-";
  std::string out;
  for (const auto& item : array) out += (out.empty() ? "" : separator) + Str(item);
  return out;
}

void PrintJson(const json& value) { std::cout << value.dump(2) << "\n"; }

int UsageError(const std::string& message) {
  std::cerr << "ferry: " << message << "\n";
  return kExitUsage;
}

int ApiError(const Status& status) {
  std::cerr << "ferry: " << status.message() << "\n";
  return kExitApiError;
}

std::string GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

Result<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::IOError("cannot read token file " + path);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front())))
    token.erase(0, 1);
  if (token.empty()) return Status::Invalid("token file " + path + " is empty");
  return token;
}

bool ParseJobId(const std::string& text, int64_t* id) {
  if (text.empty() || text.size() > 18) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *id = std::stoll(text);
  return *id > 0;
}

// A node's cache report as two cells: "1.2 GiB/10.0 GiB" and "75%" ("-"
// without a report, or before anything was staged for the ratio).
std::pair<std::string, std::string> CacheCells(const json& node) {
  const json cache = node.value("cache", json());
  if (!cache.is_object()) return {"-", "-"};
  const int64_t bytes = cache.value("bytes", int64_t{0});
  const int64_t quota = cache.value("quota_bytes", int64_t{0});
  std::string ratio = "-";
  if (cache.contains("hit_ratio") && cache["hit_ratio"].is_number()) {
    char text[16];
    std::snprintf(text, sizeof text, "%.0f%%", 100.0 * cache["hit_ratio"].get<double>());
    ratio = text;
  }
  return {fleet::FormatBytes(bytes) + "/" + fleet::FormatBytes(quota), ratio};
}

}  // namespace

Result<json> JobFileToJson(const std::string& yaml_text, const std::string& file_name) {
  const yaml::Reporter reporter(file_name);
  if (yaml_text.size() > yaml::kMaxDocumentBytes) {
    return reporter.FileError("the job file is " + std::to_string(yaml_text.size()) +
                              " bytes; the limit is " + std::to_string(yaml::kMaxDocumentBytes));
  }
  FERRY_ASSIGN_OR_RAISE(const yaml::Document document, yaml::Parse(yaml_text, reporter));
  const yaml::Ref root = document.root();
  if (root.node->kind == yaml::Node::Kind::kNull) {
    return reporter.FileError("a job file is a mapping of fields; this one is empty");
  }
  if (root.node->kind != yaml::Node::Kind::kMapping) {
    return reporter.Error(root.location, std::string("a job file is a mapping of fields, not ") +
                                             KindName(*root.node));
  }
  return YamlToJson(reporter, root, "", false, 0);
}

Result<std::pair<std::string, std::string>> ParseKeyValue(const std::string& text,
                                                          const std::string& what) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::Invalid(what + " expects KEY=VALUE, got '" + text + "'");
  }
  return std::make_pair(text.substr(0, eq), text.substr(eq + 1));
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::optional<int64_t> ParseTimestamp(const std::string& text) {
  std::tm tm{};
  int millis = 0;
  char tail = 0;
  // 2026-11-29T14:41:08.123Z (milliseconds optional)
  int year, month, day, hour, minute, second;
  const int fields = std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &year, &month, &day,
                                 &hour, &minute, &second, &millis, &tail);
  if (fields == 8 && tail == 'Z') {
  } else if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &year, &month, &day, &hour,
                         &minute, &second, &tail) == 7 &&
             tail == 'Z') {
    millis = 0;
  } else {
    return std::nullopt;
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const time_t seconds = timegm(&tm);
  if (seconds == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<int64_t>(seconds) * 1000 + millis;
}

std::string FormatAge(std::optional<int64_t> then_ms, int64_t now_ms) {
  if (!then_ms) return "-";
  const int64_t seconds = std::max<int64_t>(0, (now_ms - *then_ms) / 1000);
  if (seconds < 120) return std::to_string(seconds) + "s";
  if (seconds < int64_t{2} * 3600) return std::to_string(seconds / 60) + "m";
  if (seconds < int64_t{2} * 86400) return std::to_string(seconds / 3600) + "h";
  return std::to_string(seconds / 86400) + "d";
}

std::string AlreadyFinishedMessage(const json& job) {
  if (!job.is_object()) return "";
  auto state = job.find("state");
  if (state == job.end() || !state->is_string()) return "";
  std::optional<fleet::JobState> parsed = fleet::ParseJobState(state->get<std::string>());
  if (!parsed || !fleet::IsTerminal(*parsed)) return "";
  return "job " + Field(job, "id") + " has already finished (" + state->get<std::string>() +
         "); nothing to cancel";
}

// ---- The commands.

struct FleetCommands::State {
  // Shared by the user commands.
  std::string server =
      GetEnv("FERRY_SERVER").empty() ? "http://127.0.0.1:8700" : GetEnv("FERRY_SERVER");
  std::string token;
  std::string token_file;
  std::string ca_file = GetEnv("FERRY_CA_FILE");  // https: the CAs to verify the server with
  bool json_output = false;

  // server
  CLI::App* server_cmd = nullptr;
  fleet::ServerOptions server_options;
  double idempotency_ttl_s = 24 * 3600;

  // agent
  CLI::App* agent_cmd = nullptr;
  fleet::AgentOptions agent_options;
  std::string gpus;
  std::vector<std::string> agent_labels;
  std::string cache_quota;

  // submit
  CLI::App* submit_cmd = nullptr;
  std::string job_file;
  std::vector<std::string> command;
  int gpus_per_task = 0;
  int tasks = 1;
  std::string name;
  int priority = 0;
  std::vector<std::string> env;
  std::vector<std::string> labels;
  std::vector<std::string> gpu_models;
  double cpus = 1;
  int64_t memory_mb = 0;
  int64_t max_runtime_s = 0;
  int max_retries = 3;
  bool preemptible = false;
  std::string working_dir;
  std::string dataflow;
  std::string idempotency_key;
  std::string topology;
  std::vector<std::string> datasets;
  std::vector<std::string> inputs;
  std::string pool_set;
  std::string workdir;
  std::string code_git;
  std::string code_commit;
  std::string image;

  // dataset
  CLI::App* dataset_create_cmd = nullptr;
  CLI::App* dataset_list_cmd = nullptr;
  CLI::App* dataset_show_cmd = nullptr;
  DatasetCreateArgs dataset_create;
  std::string dataset_ref;

  // jobs
  CLI::App* jobs_cmd = nullptr;
  std::vector<std::string> states;
  std::string user;
  std::string team;
  std::vector<std::string> job_labels;
  int limit = 50;

  CLI::App* status_cmd = nullptr;
  CLI::App* logs_cmd = nullptr;
  CLI::App* cancel_cmd = nullptr;
  std::string job_id;
  bool follow = false;
  bool prefix = false;

  CLI::App* nodes_cmd = nullptr;
  CLI::App* drain_cmd = nullptr;
  CLI::App* undrain_cmd = nullptr;
  std::string node_name;
  CLI::App* whoami_cmd = nullptr;
  CLI::App* scheduler_cmd = nullptr;

  CLI::App* admin_cmd = nullptr;
  CLI::App* admin_user_add = nullptr;
  CLI::App* admin_user_list = nullptr;
  CLI::App* admin_user_revoke = nullptr;
  CLI::App* admin_user_token = nullptr;
  std::string admin_list_tenant;  // empty: every tenant
  std::string admin_tenant = "default";
  std::string admin_team = "default";
  std::string admin_name;
  std::string admin_role = "user";

  void AddConnection(CLI::App* command) {
    command->add_option("--server", server,
                        "Server URL (default $FERRY_SERVER or http://127.0.0.1:8700)");
    command->add_option("--token", token, "Bearer token (default $FERRY_TOKEN)");
    command->add_option("--token-file", token_file,
                        "File holding the token (default $FERRY_TOKEN_FILE)");
    command->add_option("--ca-file", ca_file,
                        "PEM CA certificates to verify an https server with (default "
                        "$FERRY_CA_FILE, else the system's)");
    command->add_flag("--json", json_output, "Print the server's JSON instead of a table");
  }

  // The token from the flags, else the environment.
  Result<std::string> ResolveToken() const {
    if (!token.empty()) return token;
    if (!token_file.empty()) return ReadToken(token_file);
    if (!GetEnv("FERRY_TOKEN").empty()) return GetEnv("FERRY_TOKEN");
    if (!GetEnv("FERRY_TOKEN_FILE").empty()) return ReadToken(GetEnv("FERRY_TOKEN_FILE"));
    return Status::Invalid(
        "no token: pass --token or --token-file, or set FERRY_TOKEN or "
        "FERRY_TOKEN_FILE");
  }

  int RunServer();
  int RunAgent();
  int RunUser();
  int Submit(Client& client);
  // Packs `dir` and uploads it (POST /v1/code); its digest.
  Result<std::string> UploadCode(Client& client, const std::string& dir);
  int Jobs(Client& client);
  int JobStatus(Client& client, int64_t id);
  int Logs(Client& client, int64_t id);
  int Cancel(Client& client, int64_t id);
  int Nodes(Client& client);
  int Drain(Client& client, bool drain);
  int Whoami(Client& client);
  int Scheduler(Client& client);
  int AdminUserAdd(Client& client);
  int AdminUserList(Client& client);
  int AdminUserRevoke(Client& client);
  int AdminUserToken(Client& client);
};

FleetCommands::FleetCommands(CLI::App& app) : state_(std::make_unique<State>()) {
  State& s = *state_;
  // The connection may also come before the command (`ferry --token-file F
  // jobs`); the command's own flags, parsed later, take precedence.
  app.add_option("--server", s.server,
                 "Fleet server URL for the fleet commands (default $FERRY_SERVER or "
                 "http://127.0.0.1:8700)")
      ->group("Fleet connection");
  app.add_option("--token", s.token, "Bearer token for the fleet commands (default $FERRY_TOKEN)")
      ->group("Fleet connection");
  app.add_option("--token-file", s.token_file, "File holding the token (default $FERRY_TOKEN_FILE)")
      ->group("Fleet connection");
  app.add_option("--ca-file", s.ca_file,
                 "PEM CA certificates to verify an https server with (default $FERRY_CA_FILE, "
                 "else the system's)")
      ->group("Fleet connection");

  s.server_cmd = app.add_subcommand("server", "Run the fleet control plane (REST API + scheduler)");
  auto& so = s.server_options;
  s.server_cmd->add_option("--store", so.store_url,
                           "sqlite:PATH or postgresql://... (default sqlite:ferry-fleet.db)");
  s.server_cmd->add_option("--host", so.host, "Address to listen on (default 127.0.0.1)");
  s.server_cmd->add_option("--port", so.port, "Port (default 8700; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  s.server_cmd->add_option("--port-file", so.port_file, "Write the bound port here once listening");
  s.server_cmd->add_option("--data-dir", so.data_dir,
                           "Directory for admin.token and agent.token (default .)");
  s.server_cmd->add_option("--lease-ms", so.lease_ms, "Node lease in ms (default 10000)")
      ->check(CLI::Range(int64_t{100}, int64_t{3'600'000}));
  s.server_cmd->add_option("--threads", so.threads, "HTTP worker threads (default 8)")
      ->check(CLI::Range(1, 1024));
  s.server_cmd
      ->add_option("--metrics-refresh-ms", so.metrics_refresh_ms,
                   "Count the /metrics job and node gauges this often (default 5000; 0: at "
                   "every scrape)")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
  s.server_cmd
      ->add_option("--log-format", so.log_format,
                   "text (default) or json: JSON lines, one per request too, with X-Request-Id")
      ->check(CLI::IsMember({"text", "json"}));
  s.server_cmd
      ->add_option("--schedule-interval-ms", so.schedule_interval_ms,
                   "Scheduler pass interval in ms (default 100)")
      ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}));
  s.server_cmd
      ->add_option("--stop-grace-ms", so.stop_grace_ms,
                   "SIGTERM to SIGKILL delay told to agents (default 10000)")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
  s.server_cmd
      ->add_option("--rendezvous-port-min", so.rendezvous_port_min,
                   "Lowest gang MASTER_PORT (default 29500; port = min + job id mod range)")
      ->check(CLI::Range(1, 65535));
  s.server_cmd
      ->add_option("--rendezvous-port-max", so.rendezvous_port_max,
                   "Highest gang MASTER_PORT (default 30499)")
      ->check(CLI::Range(1, 65535));
  s.server_cmd
      ->add_option("--max-watch-streams", so.max_watch_streams,
                   "Open /v1/jobs:watch event streams at most (default 1000; beyond: 503)")
      ->check(CLI::Range(0, 100'000));
  s.server_cmd
      ->add_option("--webhook-retry-base-ms", so.webhook_retry_base_ms,
                   "First webhook retry delay, doubling after (default 2000; at most 10 min)")
      ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}));
  s.server_cmd
      ->add_option("--webhook-max-attempts", so.webhook_max_attempts,
                   "Attempts per webhook delivery before it fails (default 12)")
      ->check(CLI::Range(1, 100));
  s.server_cmd
      ->add_option("--max-body-bytes", so.max_body_bytes, "Largest request body (default 1 MiB)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
  s.server_cmd
      ->add_option("--max-manifest-bytes", so.max_manifest_bytes,
                   "Largest dataset manifest (POST /v1/datasets; default 64 MiB)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32));
  s.server_cmd
      ->add_option("--max-code-bundle-bytes", so.max_code_bundle_bytes,
                   "Largest code bundle (POST /v1/code; default 256 MiB)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 34));
  s.server_cmd
      ->add_option("--prefetch-window-s", so.prefetch_window_s,
                   "Agents fetch a blocked job's inputs ahead on the nodes held for it when "
                   "its planned start is within this many seconds (0: off; default 3600)")
      ->check(CLI::Range(0.0, 30.0 * 86400));
  s.server_cmd
      ->add_option("--rate", so.rate_per_second,
                   "Requests per second per user (0: unlimited; default 200)")
      ->check(CLI::Range(0.0, 1e9));
  s.server_cmd->add_option("--rate-burst", so.rate_burst, "Burst size per user (default 400)")
      ->check(CLI::Range(0.0, 1e9));
  s.server_cmd
      ->add_option("--idempotency-ttl", s.idempotency_ttl_s,
                   "Seconds an Idempotency-Key is remembered (default 86400)")
      ->check(CLI::Range(1.0, 365.0 * 86400));
  s.server_cmd->add_option("--page-size", so.default_page_size, "Default page size (default 50)")
      ->check(CLI::Range(1, 100000));
  s.server_cmd->add_option("--max-page-size", so.max_page_size, "Largest page size (default 500)")
      ->check(CLI::Range(1, 100000));
  s.server_cmd->add_option("--scheduler-config", so.scheduler_config,
                           "Scheduler policies, pools, quotas and providers (YAML, "
                           "docs/fleet-config.md); re-read when it changes");
  s.server_cmd->add_option("--registry-config", so.registry_config,
                           "Container registries job images are resolved at: credentials, "
                           "plain-http registries (YAML, docs/fleet-images.md)");
  s.server_cmd->add_option("--tls-cert", so.tls_cert_file,
                           "Serve HTTPS with this PEM certificate (chain); needs --tls-key");
  s.server_cmd->add_option("--tls-key", so.tls_key_file, "The PEM private key of --tls-cert");
  s.server_cmd->add_option("--ca-file", so.ca_file,
                           "CA file the local provider's agents verify this server with "
                           "(default $FERRY_CA_FILE with --tls-cert)");
  s.server_cmd->add_option("--ui-chart-js", so.ui_chart_js,
                           "Chart.js file the dashboard's charts load (default Debian "
                           "libjs-chart.js's chart.min.js; empty: no charts)");

  s.agent_cmd = app.add_subcommand("agent", "Run a node agent: register GPUs, run assigned tasks");
  auto& ao = s.agent_options;
  s.agent_cmd->add_option("--server", s.server,
                          "Server URL (default $FERRY_SERVER or http://127.0.0.1:8700)");
  s.agent_cmd->add_option("--token", s.token, "Agent token (default $FERRY_TOKEN)");
  s.agent_cmd->add_option("--token-file", s.token_file,
                          "File holding the agent token (default $FERRY_TOKEN_FILE)");
  s.agent_cmd->add_option("--ca-file", s.ca_file,
                          "PEM CA certificates to verify an https server with (default "
                          "$FERRY_CA_FILE, else the system's)");
  s.agent_cmd->add_option("--pool", ao.pool, "Pool of this node (default \"default\")");
  s.agent_cmd->add_option("--name", ao.node_name, "Node name (default: the host name)");
  s.agent_cmd->add_option("--gpus", s.gpus,
                          "Declared GPUs when NVML finds none, e.g. 8xH200 or 4xA100:81920,4xH100");
  s.agent_cmd->add_flag("--ignore-nvml", ao.ignore_nvml, "Use --gpus even where NVML sees GPUs");
  s.agent_cmd->add_option("--work-dir", ao.work_dir,
                          "Directory tasks run in by default; logs go to <dir>/logs (default .)");
  s.agent_cmd->add_option("--label", s.agent_labels, "Node label k=v (repeatable)");
  s.agent_cmd->add_option("--cpus", ao.cpus, "CPUs to offer (default: the machine's)")
      ->check(CLI::Range(0.0, 1e6));
  s.agent_cmd
      ->add_option("--memory-mb", ao.memory_mb, "Memory to offer in MiB (default: the machine's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  s.agent_cmd
      ->add_option("--sync-wait-ms", ao.sync_wait_ms, "Long-poll wait per sync (default 2000)")
      ->check(CLI::Range(int64_t{0}, int64_t{60'000}));
  s.agent_cmd->add_option("--advertise-host", ao.advertise_host,
                          "Address other nodes reach this one at: a gang's MASTER_ADDR "
                          "(default: the local address of the route to the server)");
  s.agent_cmd->add_option("--metrics-listen", ao.metrics_listen,
                          "Serve GET /metrics (Prometheus text) on HOST:PORT, e.g. "
                          "127.0.0.1:9402 (default: off)");
  s.agent_cmd->add_option("--cache-dir", ao.cache_dir,
                          "Node cache of staged job inputs (default <work-dir>/cache)");
  s.agent_cmd->add_option("--cache-quota", s.cache_quota,
                          "Size quota of the node cache: bytes or 500M, 20G, 2T (default 10G)");
  s.agent_cmd->add_option("--storage-config", ao.storage_config,
                          "YAML file naming the S3 endpoints (with credential files), file roots "
                          "and CA file this node stages inputs from (default: none)");
  s.agent_cmd->add_option("--podman", ao.podman,
                          "The podman binary tasks with an image run through (default: podman "
                          "on PATH)");
  s.agent_cmd->add_option("--insecure-registry", ao.insecure_registries,
                          "Registry HOST[:PORT] images are pulled from over plain http "
                          "(repeatable; loopback registries always are)");
  s.agent_cmd->add_option("--registry-auth-file", ao.registry_auth_file,
                          "podman's auth file (containers-auth.json) for private registries");
  s.agent_cmd
      ->add_option("--log-format", ao.log_format,
                   "text (default) or json: JSON lines with the node, job id, task and attempt")
      ->check(CLI::IsMember({"text", "json"}));

  s.submit_cmd = app.add_subcommand(
      "submit", "Submit a job: ferry submit job.yaml, or ferry submit [options] -- command args");
  s.AddConnection(s.submit_cmd);
  s.submit_cmd->add_option("file", s.job_file, "Job file (YAML with the API's fields)");
  s.submit_cmd->add_option("--gpus", s.gpus_per_task, "GPUs per task")->check(CLI::Range(0, 64));
  s.submit_cmd->add_option("--tasks", s.tasks, "Tasks (gang size)")->check(CLI::Range(1, 1024));
  s.submit_cmd->add_option("--name", s.name, "Job name (default: the command's name)");
  s.submit_cmd->add_option("--priority", s.priority, "Priority -1000..1000")
      ->check(CLI::Range(-1000, 1000));
  s.submit_cmd->add_option("--env", s.env, "Environment variable K=V (repeatable)");
  s.submit_cmd->add_option("--label", s.labels, "Label k=v (repeatable)");
  s.submit_cmd->add_option("--gpu-model", s.gpu_models, "Acceptable GPU model (repeatable)");
  s.submit_cmd->add_option("--cpus", s.cpus, "CPUs per task");
  s.submit_cmd->add_option("--memory-mb", s.memory_mb, "Memory per task in MiB");
  s.submit_cmd->add_option("--max-runtime", s.max_runtime_s, "Seconds before the job times out");
  s.submit_cmd->add_option("--max-retries", s.max_retries, "Requeues after node loss/preemption");
  s.submit_cmd->add_flag("--preemptible", s.preemptible, "May be preempted by higher priorities");
  s.submit_cmd->add_option("--working-dir", s.working_dir, "Working directory on the node");
  s.submit_cmd->add_option("--dataflow", s.dataflow, "Run this dataflow file with `ferry run`");
  s.submit_cmd->add_option("--topology", s.topology,
                           "Gang placement preference: same_node or same_domain");
  s.submit_cmd->add_option("--dataset", s.datasets, "Data set the job reads (repeatable)");
  s.submit_cmd->add_option("--pool-set", s.pool_set, "Pool set of the scheduler config");
  s.submit_cmd->add_option("--image", s.image,
                           "Run the tasks in this container image: host[:port]/path[:tag], "
                           "resolved to a digest at submission");
  s.submit_cmd->add_option("--input", s.inputs,
                           "Input staged before the start: NAME=DATASET[@VERSION] or "
                           "NAME=URI#sha256=HEX (repeatable; adds to the file's inputs)");
  s.submit_cmd->add_option("--workdir", s.workdir,
                           "Upload this directory as the job's code (a content-addressed bundle); "
                           "the task runs in it, read-only, at $FERRY_CODE_DIR");
  s.submit_cmd->add_option("--code-git", s.code_git,
                           "Run the job's code from this git repository (with --code-commit)");
  s.submit_cmd->add_option("--code-commit", s.code_commit,
                           "The full commit id of --code-git to check out");
  s.submit_cmd->add_option("--idempotency-key", s.idempotency_key,
                           "Retry-safe key: resubmitting with it returns the same job");

  CLI::App* dataset_cmd =
      app.add_subcommand("dataset", "Register and inspect datasets (versioned manifests)");
  dataset_cmd->require_subcommand(1);
  s.dataset_create_cmd =
      dataset_cmd->add_subcommand("create", "Register a manifest as the next version of a dataset");
  s.AddConnection(s.dataset_create_cmd);
  s.dataset_create_cmd->add_option("name", s.dataset_create.name, "Dataset name")->required();
  s.dataset_create_cmd
      ->add_option("--source", s.dataset_create.source,
                   "Base URI the paths are under, ending in '/' (s3://bucket/prefix/, "
                   "https://host/base/, file:///dir/)")
      ->required();
  s.dataset_create_cmd->add_option("--manifest", s.dataset_create.manifest_file,
                                   "JSON file: {\"objects\": [{\"path\", \"size\", "
                                   "\"sha256\"}]} or the bare array");
  s.dataset_create_cmd->add_option(
      "--from-dir", s.dataset_create.from_dir,
      "Compute the manifest from a local copy of the objects (every regular file, hashed)");
  s.dataset_create_cmd->add_option("--description", s.dataset_create.description,
                                   "What the version holds");
  s.dataset_list_cmd =
      dataset_cmd->add_subcommand("list", "List datasets and their latest version");
  s.AddConnection(s.dataset_list_cmd);
  s.dataset_show_cmd = dataset_cmd->add_subcommand(
      "show", "Show a dataset's versions, or with NAME@VERSION that version's objects");
  s.AddConnection(s.dataset_show_cmd);
  s.dataset_show_cmd->add_option("dataset", s.dataset_ref, "NAME or NAME@VERSION")->required();

  s.jobs_cmd = app.add_subcommand("jobs", "List jobs, newest first");
  s.AddConnection(s.jobs_cmd);
  s.jobs_cmd->add_option("--state", s.states, "Only these states (repeatable or a,b)");
  s.jobs_cmd->add_option("--user", s.user, "Only this user's jobs");
  s.jobs_cmd->add_option("--team", s.team, "Only this team's jobs");
  s.jobs_cmd->add_option("--label", s.job_labels, "Only jobs with label k=v (repeatable)");
  s.jobs_cmd->add_option("--limit", s.limit, "At most this many jobs (default 50)")
      ->check(CLI::Range(1, 1'000'000));

  s.status_cmd = app.add_subcommand("status", "Show a job, its placement and its events");
  s.AddConnection(s.status_cmd);
  s.status_cmd->add_option("id", s.job_id, "Job id")->required();

  s.logs_cmd = app.add_subcommand(
      "logs", "Print a job's output (`ferry logs RUN_ID [NODE]`: a dataflow's logs)");
  s.AddConnection(s.logs_cmd);
  s.logs_cmd->add_option("id", s.job_id, "Job id")->required();
  s.logs_cmd->add_flag("-f,--follow", s.follow, "Keep printing until the job has finished");
  s.logs_cmd->add_flag("--prefix", s.prefix, "Start each piece with [task N stream]");

  s.cancel_cmd = app.add_subcommand("cancel", "Cancel a job");
  s.AddConnection(s.cancel_cmd);
  s.cancel_cmd->add_option("id", s.job_id, "Job id")->required();

  s.nodes_cmd = app.add_subcommand("nodes", "List nodes and their GPUs");
  s.AddConnection(s.nodes_cmd);

  s.drain_cmd = app.add_subcommand(
      "drain", "Stop placing new work on a node; its running jobs go on (platform admins)");
  s.AddConnection(s.drain_cmd);
  s.drain_cmd->add_option("node", s.node_name, "Node name")->required();
  s.undrain_cmd =
      app.add_subcommand("undrain", "Let a drained node take work again (platform admins)");
  s.AddConnection(s.undrain_cmd);
  s.undrain_cmd->add_option("node", s.node_name, "Node name")->required();

  s.whoami_cmd = app.add_subcommand("whoami", "Show the identity of the token");
  s.AddConnection(s.whoami_cmd);

  s.scheduler_cmd = app.add_subcommand(
      "scheduler", "Scheduler state: policies, last cycle, fair share, providers (admins)");
  s.AddConnection(s.scheduler_cmd);

  s.admin_cmd = app.add_subcommand("admin", "Administration (platform admins)");
  s.admin_cmd->require_subcommand(1);
  CLI::App* admin_user = s.admin_cmd->add_subcommand("user", "Users");
  admin_user->require_subcommand(1);
  s.admin_user_add = admin_user->add_subcommand("add", "Create a user and print its token");
  s.AddConnection(s.admin_user_add);
  s.admin_user_add->add_option("--tenant", s.admin_tenant, "Tenant (created when missing)");
  s.admin_user_add->add_option("--team", s.admin_team, "Team (created when missing)");
  s.admin_user_add->add_option("--name", s.admin_name, "User name")->required();
  s.admin_user_add->add_option("--role", s.admin_role,
                               "user, team_admin, platform_admin or agent (default user)");
  s.admin_user_list = admin_user->add_subcommand("list", "List users and their active tokens");
  s.AddConnection(s.admin_user_list);
  s.admin_user_list->add_option("--tenant", s.admin_list_tenant,
                                "Only this tenant's users (default: every tenant)");
  s.admin_user_revoke =
      admin_user->add_subcommand("revoke", "Revoke every token of a user; they get 401 at once");
  s.AddConnection(s.admin_user_revoke);
  s.admin_user_revoke->add_option("name", s.admin_name, "User name")->required();
  s.admin_user_revoke->add_option("--tenant", s.admin_tenant,
                                  "Tenant of the user (default default)");
  s.admin_user_token = admin_user->add_subcommand(
      "token", "Issue a new token for an existing user (after a revoke, or to rotate)");
  s.AddConnection(s.admin_user_token);
  s.admin_user_token->add_option("name", s.admin_name, "User name")->required();
  s.admin_user_token->add_option("--tenant", s.admin_tenant,
                                 "Tenant of the user (default default)");
}

FleetCommands::~FleetCommands() = default;

void FleetCommands::SetSubmitCommand(std::vector<std::string> command) {
  state_->command = std::move(command);
}

int FleetCommands::Run() {
  State& s = *state_;
  if (s.server_cmd->parsed()) return s.RunServer();
  if (s.agent_cmd->parsed()) return s.RunAgent();
  for (CLI::App* command :
       {s.submit_cmd, s.jobs_cmd, s.status_cmd, s.logs_cmd, s.cancel_cmd, s.nodes_cmd, s.drain_cmd,
        s.undrain_cmd, s.whoami_cmd, s.scheduler_cmd, s.admin_user_add, s.admin_user_list,
        s.admin_user_revoke, s.admin_user_token, s.dataset_create_cmd, s.dataset_list_cmd,
        s.dataset_show_cmd}) {
    if (command->parsed()) return s.RunUser();
  }
  return -1;
}

int FleetCommands::State::RunServer() {
  server_options.idempotency_ttl_ms = static_cast<int64_t>(idempotency_ttl_s * 1000);
  if (server_options.ca_file.empty() && !server_options.tls_cert_file.empty()) {
    server_options.ca_file = ca_file;  // the global --ca-file, else $FERRY_CA_FILE
  }
  Status status = fleet::RunServer(server_options);
  if (!status.ok()) return ApiError(status);
  return kExitOk;
}

int FleetCommands::State::RunAgent() {
  agent_options.server_url = server;
  agent_options.ca_file = ca_file;
  auto resolved = ResolveToken();
  if (!resolved.ok()) return UsageError(resolved.status().message());
  agent_options.token = *resolved;
  for (const auto& label : agent_labels) {
    auto pair = ParseKeyValue(label, "--label");
    if (!pair.ok()) return UsageError(pair.status().message());
    agent_options.labels[pair->first] = pair->second;
  }
  if (!cache_quota.empty()) {
    auto quota = fleet::ParseByteSize(cache_quota);
    if (!quota.ok() || *quota <= 0) {
      return UsageError("--cache-quota: " +
                        (quota.ok() ? std::string("must be above 0") : quota.status().message()));
    }
    agent_options.cache_quota_bytes = *quota;
  }
  if (!agent_options.metrics_listen.empty()) {
    auto address = fleet::ParseListenAddress(agent_options.metrics_listen);
    if (!address.ok()) return UsageError("--metrics-listen: " + address.status().message());
  }
  if (!gpus.empty()) {
    std::string node = agent_options.node_name;
    if (node.empty()) {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      node = host;
    }
    auto declared = fleet::ParseGpuDeclaration(gpus, node);
    if (!declared.ok()) return UsageError(declared.status().message());
    agent_options.declared_gpus = *declared;
  }
  Status status = fleet::RunAgent(agent_options);
  if (!status.ok()) return ApiError(status);
  return kExitOk;
}

int FleetCommands::State::RunUser() {
  if (submit_cmd->parsed() && job_file.empty() && command.empty() && dataflow.empty()) {
    return UsageError("nothing to submit: give a job file, --dataflow FILE, or -- command args");
  }
  auto resolved = ResolveToken();
  if (!resolved.ok()) return UsageError(resolved.status().message());
  ClientOptions options;
  options.base_url = server;
  options.token = *resolved;
  options.ca_file = ca_file;
  if (Status usable = fleet::CheckClientOptions(options); !usable.ok()) {
    return UsageError(usable.message());
  }
  Client client(options);
  int64_t id = 0;
  if (status_cmd->parsed() || logs_cmd->parsed() || cancel_cmd->parsed()) {
    if (!ParseJobId(job_id, &id)) return UsageError("bad job id '" + job_id + "'");
  }
  if (submit_cmd->parsed()) return Submit(client);
  if (dataset_create_cmd->parsed()) return DatasetCreate(client, dataset_create, json_output);
  if (dataset_list_cmd->parsed()) return DatasetList(client, json_output);
  if (dataset_show_cmd->parsed()) return DatasetShow(client, dataset_ref, json_output);
  if (jobs_cmd->parsed()) return Jobs(client);
  if (status_cmd->parsed()) return JobStatus(client, id);
  if (logs_cmd->parsed()) return Logs(client, id);
  if (cancel_cmd->parsed()) return Cancel(client, id);
  if (nodes_cmd->parsed()) return Nodes(client);
  if (drain_cmd->parsed()) return Drain(client, true);
  if (undrain_cmd->parsed()) return Drain(client, false);
  if (whoami_cmd->parsed()) return Whoami(client);
  if (scheduler_cmd->parsed()) return Scheduler(client);
  if (admin_user_list->parsed()) return AdminUserList(client);
  if (admin_user_revoke->parsed()) return AdminUserRevoke(client);
  if (admin_user_token->parsed()) return AdminUserToken(client);
  return AdminUserAdd(client);
}

Result<std::string> FleetCommands::State::UploadCode(Client& client, const std::string& dir) {
  std::string pattern = (std::filesystem::temp_directory_path() / "ferry-code-XXXXXX").string();
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) return Status::IOError("cannot create a temporary file for the code bundle");
  ::close(fd);
  struct Remove {
    std::string path;
    ~Remove() { std::remove(path.c_str()); }
  } remove{pattern};
  FERRY_ASSIGN_OR_RAISE(fleet::BundleInfo info, fleet::PackDirectory(dir, pattern));
  std::ifstream in(pattern, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  Request request;
  request.method = "POST";
  request.path = "/v1/code";
  request.raw_body = bytes.str();
  request.content_type = "application/gzip";
  FERRY_ASSIGN_OR_RAISE(Response response, client.Send(request));
  const std::string digest = response.body.value("digest", "");
  if (digest != "sha256:" + info.sha256) {
    return Status::IOError("the server stored the code bundle as " + digest +
                           ", not sha256:" + info.sha256);
  }
  if (!json_output) {
    std::cerr << "code: " << dir << " -> " << digest.substr(0, 19) << " (" << info.files
              << (info.files == 1 ? " entry, " : " entries, ") << fleet::FormatBytes(info.bytes)
              << (response.status == 201 ? " uploaded" : " already on the server") << ")\n";
  }
  return digest;
}

int FleetCommands::State::Submit(Client& client) {
  json body = json::object();
  if (!job_file.empty()) {
    std::ifstream in(job_file);
    if (!in) return UsageError("cannot read job file " + job_file);
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = JobFileToJson(text.str(), job_file);
    if (!parsed.ok()) return UsageError(parsed.status().message());
    body = std::move(*parsed);
  } else if (command.empty() && dataflow.empty()) {
    return UsageError("nothing to submit: give a job file, --dataflow FILE, or -- command args");
  }
  // Flags given on the command line override the file.
  auto given = [&](const char* flag) { return submit_cmd->count(flag) > 0; };
  if (!command.empty()) body["command"] = command;
  if (given("--dataflow")) body["dataflow"] = dataflow;
  if (given("--name")) {
    body["name"] = name;
  } else if (!body.contains("name")) {
    std::vector<std::string> words = command;
    if (words.empty() && body.contains("command") && body["command"].is_array()) {
      for (const auto& word : body["command"]) {
        if (word.is_string()) words.push_back(word.get<std::string>());
      }
    }
    std::string flow = dataflow;
    if (flow.empty() && body.contains("dataflow") && body["dataflow"].is_string()) {
      flow = body["dataflow"].get<std::string>();
    }
    body["name"] = DefaultJobName(words, flow);
  }
  if (given("--gpus")) body["gpus_per_task"] = gpus_per_task;
  if (given("--tasks")) body["tasks"] = tasks;
  if (given("--priority")) body["priority"] = priority;
  if (given("--cpus")) body["cpus_per_task"] = cpus;
  if (given("--memory-mb")) body["memory_mb_per_task"] = memory_mb;
  if (given("--max-runtime")) body["max_runtime_seconds"] = max_runtime_s;
  if (given("--max-retries")) body["max_retries"] = max_retries;
  if (given("--preemptible")) body["preemptible"] = preemptible;
  if (given("--working-dir")) body["working_dir"] = working_dir;
  if (given("--topology")) body["topology"] = topology;
  if (!datasets.empty()) body["datasets"] = datasets;
  if (given("--pool-set")) body["pool_set"] = pool_set;
  if (given("--image")) body["image"] = image;
  for (const std::string& text : inputs) {
    auto input = ParseInputFlag(text);
    if (!input.ok()) return UsageError(input.status().message());
    if (!body["inputs"].is_array()) body["inputs"] = json::array();
    body["inputs"].push_back(std::move(*input));
  }
  if (!gpu_models.empty()) body["gpu_models"] = gpu_models;
  // The job's code: a directory packed and uploaded here, or a git commit.
  std::string code_dir = workdir;
  if (code_dir.empty() && body.contains("workdir")) {
    if (!body["workdir"].is_string() || body["workdir"].get<std::string>().empty()) {
      return UsageError("workdir in " + job_file + " must be a directory name");
    }
    // Relative to the job file, as a user reads it.
    std::filesystem::path dir = body["workdir"].get<std::string>();
    if (dir.is_relative()) dir = std::filesystem::path(job_file).parent_path() / dir;
    code_dir = dir.lexically_normal().string();
  }
  body.erase("workdir");
  if (!code_dir.empty() && !code_git.empty()) {
    return UsageError("--workdir and --code-git are exclusive: the job has one code");
  }
  if (given("--code-commit") && code_git.empty()) {
    return UsageError("--code-commit goes with --code-git");
  }
  if (!code_git.empty()) body["code"] = {{"git", code_git}, {"commit", code_commit}};
  if (!code_dir.empty()) {
    auto uploaded = UploadCode(client, code_dir);
    if (!uploaded.ok()) return ApiError(uploaded.status());
    body["code"] = {{"bundle", *uploaded}};
  }
  for (const auto& [flag, values, field] :
       {std::tuple{"--env", &env, "env"}, std::tuple{"--label", &labels, "labels"}}) {
    for (const auto& item : *values) {
      auto pair = ParseKeyValue(item, flag);
      if (!pair.ok()) return UsageError(pair.status().message());
      if (!body[field].is_object()) body[field] = json::object();
      body[field][pair->first] = pair->second;
    }
  }
  std::map<std::string, std::string> headers;
  if (!idempotency_key.empty()) headers["Idempotency-Key"] = idempotency_key;
  auto response = client.Post("/v1/jobs", body, headers);
  if (!response.ok()) return ApiError(response.status());
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  const json& job = response->body;
  std::cout << "job " << Field(job, "id") << " (" << Field(job, "name")
            << "): " << Field(job, "state") << " " << Field(job, "reason")
            << (response->Header("Idempotent-Replayed") == "true" ? " (already submitted)" : "")
            << "\n";
  return kExitOk;
}

int FleetCommands::State::Jobs(Client& client) {
  std::vector<std::pair<std::string, std::string>> filter;
  for (const auto& state : states) filter.emplace_back("state", state);
  if (!user.empty()) filter.emplace_back("user", user);
  if (!team.empty()) filter.emplace_back("team", team);
  for (const auto& label : job_labels) {
    auto pair = ParseKeyValue(label, "--label");
    if (!pair.ok()) return UsageError(pair.status().message());
    filter.emplace_back("label", label);
  }
  json jobs = json::array();
  std::string page_token;
  while (static_cast<int>(jobs.size()) < limit) {
    auto query = filter;
    query.emplace_back("page_size",
                       std::to_string(std::min(500, limit - static_cast<int>(jobs.size()))));
    if (!page_token.empty()) query.emplace_back("page_token", page_token);
    auto response = client.Get("/v1/jobs", query);
    if (!response.ok()) return ApiError(response.status());
    const json& page = response->body;
    if (!page.is_object() || !page.contains("jobs") || !page["jobs"].is_array()) {
      return ApiError(Status::IOError("unexpected response to GET /v1/jobs"));
    }
    for (const auto& job : page["jobs"]) {
      if (static_cast<int>(jobs.size()) < limit) jobs.push_back(job);
    }
    auto next = page.find("next_page_token");
    if (next == page.end() || !next->is_string() || next->get<std::string>().empty() ||
        page["jobs"].empty()) {
      break;
    }
    page_token = next->get<std::string>();
  }
  if (json_output) {
    PrintJson(json{{"jobs", jobs}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "USER", "STATE", "REASON", "TASKS", "GPUS", "ATTEMPT", "AGE"}};
  for (const auto& job : jobs) {
    const json spec = job.value("spec", json::object());
    rows.push_back({Field(job, "id"), Field(job, "name"), Field(job, "user"), Field(job, "state"),
                    Field(job, "reason"), Field(spec, "tasks"), Field(spec, "gpus_per_task"),
                    Field(job, "attempt"), Age(job, "created_at")});
  }
  std::cout << FormatTable(rows);
  return kExitOk;
}

int FleetCommands::State::JobStatus(Client& client, int64_t id) {
  const std::string path = "/v1/jobs/" + std::to_string(id);
  auto response = client.Get(path);
  if (!response.ok()) return ApiError(response.status());
  auto events = client.Get(path + "/events", {{"limit", "1000"}});
  if (json_output) {
    json out = response->body;
    if (events.ok() && events->body.is_object())
      out["events"] = events->body.value("events", json::array());
    PrintJson(out);
    return kExitOk;
  }
  const json& job = response->body;
  const json spec = job.value("spec", json::object());
  std::cout << "job " << Field(job, "id") << "  " << Field(job, "name") << "  ("
            << Field(job, "tenant") << "/" << Field(job, "team") << "/" << Field(job, "user")
            << ")\n";
  std::cout << "state      " << Field(job, "state") << " (" << Field(job, "reason") << "), attempt "
            << Field(job, "attempt") << "\n";
  // Why it waits, as the scheduler's last cycle gave it, and who preempts it.
  if (job.contains("explanation") && job["explanation"].is_object()) {
    std::cout << "waiting    " << Field(job["explanation"], "summary") << "\n";
  }
  if (job.contains("preemption") && job["preemption"].is_object()) {
    const json& p = job["preemption"];
    std::cout << "preempted  " << Field(p, "rule");
    if (p.contains("for_job") && !p["for_job"].is_null()) {
      std::cout << ", for job " << Field(p, "for_job");
    }
    std::cout << " (stopping)\n";
  }
  if (job.contains("attempts") && job["attempts"].is_array() && job["attempts"].size() > 1) {
    std::cout << "attempts\n";
    for (const auto& attempt : job["attempts"]) {
      std::cout << "  " << Field(attempt, "attempt") << "  " << Field(attempt, "state") << " ("
                << Field(attempt, "reason") << ")";
      if (attempt.contains("preempted_for") && !attempt["preempted_for"].is_null()) {
        std::cout << ", for job " << Field(attempt, "preempted_for");
      }
      std::cout << "\n";
    }
  }
  if (spec.contains("dataflow") && spec["dataflow"].is_string() &&
      !spec["dataflow"].get<std::string>().empty()) {
    std::cout << "dataflow   " << Field(spec, "dataflow") << "\n";
  } else {
    std::cout << "command    " << Join(spec.value("command", json::array()), " ") << "\n";
  }
  if (spec.contains("image") && spec["image"].is_string()) {
    std::cout << "image      " << Field(spec, "image");
    if (spec.contains("image_digest")) std::cout << " (" << Field(spec, "image_digest") << ")";
    std::cout << "\n";
  }
  std::cout << "tasks      " << Field(spec, "tasks") << " x " << Field(spec, "gpus_per_task")
            << " GPU, priority " << Field(spec, "priority") << "\n";
  // What it reads, as resolved at submission (dataset inputs name their version).
  for (const auto& input : spec.value("inputs", json::array())) {
    const bool dataset = input.contains("dataset");
    std::cout << "input      " << Field(input, "name") << ": "
              << (dataset ? Field(input, "dataset") + "@" + Field(input, "version")
                          : Field(input, "uri"))
              << " (" << Field(input, "objects")
              << (Field(input, "objects") == "1" ? " object, " : " objects, ")
              << Field(input, "bytes") << " bytes)\n";
  }
  std::cout << "created    " << Field(job, "created_at") << "\n";
  std::cout << "started    " << Field(job, "started_at") << "\n";
  std::cout << "finished   " << Field(job, "finished_at") << "\n";
  std::cout << "exit code  " << Field(job, "exit_code") << "\n";
  if (job.contains("placement") && job["placement"].is_array() && !job["placement"].empty()) {
    std::cout << "placement\n";
    for (const auto& task : job["placement"]) {
      std::cout << "  task " << Field(task, "task") << " on " << Field(task, "node") << ", GPUs "
                << Join(task.value("gpu_indices", json::array())) << "\n";
    }
  }
  if (events.ok() && events->body.is_object() && events->body.contains("events")) {
    std::vector<std::vector<std::string>> rows = {
        {"  AT", "TYPE", "STATE", "REASON", "BY", "MESSAGE"}};
    for (const auto& event : events->body["events"]) {
      rows.push_back({"  " + Field(event, "at"), Field(event, "type"), Field(event, "state"),
                      Field(event, "reason"), Field(event, "actor"), Field(event, "message")});
    }
    std::cout << "events\n" << FormatTable(rows);
  }
  return kExitOk;
}

int FleetCommands::State::Logs(Client& client, int64_t id) {
  const std::string path = "/v1/jobs/" + std::to_string(id) + "/logs";
  int64_t after = 0;
  constexpr int64_t kWaitMs = 20'000;
  LogLinePrefixer lines;  // with --prefix: whole lines only
  for (;;) {
    Request request;
    request.path = path;
    request.query = {{"after", std::to_string(after)}, {"limit", "1000"}};
    if (follow) {
      request.query.emplace_back("follow", "1");
      request.query.emplace_back("wait_ms", std::to_string(kWaitMs));
      request.extra_read_timeout_ms = kWaitMs;
    }
    auto response = client.Send(request);
    if (!response.ok()) return ApiError(response.status());
    const json& page = response->body;
    if (!page.is_object() || !page.contains("chunks") || !page["chunks"].is_array()) {
      return ApiError(Status::IOError("unexpected response to GET " + path));
    }
    for (const auto& chunk : page["chunks"]) {
      if (json_output) {
        std::cout << chunk.dump() << "\n";
        continue;
      }
      const std::string stream = chunk.value("stream", "stdout");
      std::ostream& out = stream == "stderr" ? std::cerr : std::cout;
      if (prefix) {
        out << lines.Add(chunk.value("attempt", 1), chunk.value("task", 0), stream,
                         chunk.value("data", ""));
      } else {
        out << chunk.value("data", "");
      }
    }
    std::cout.flush();
    std::cerr.flush();
    int64_t next = after;
    if (auto it = page.find("next_after"); it != page.end() && it->is_number_integer()) {
      next = it->get<int64_t>();
    }
    const bool finished = page.value("finished", false);
    const bool progressed = next > after && !page["chunks"].empty();
    after = std::max(after, next);
    if (follow) {
      if (finished && !progressed) break;
    } else if (!progressed) {
      break;
    }
  }
  // A last line without its newline (the task ended, or a job still running
  // has not finished the line yet) is printed on its own line.
  std::cout << lines.Flush("stdout");
  std::cerr << lines.Flush("stderr");
  return kExitOk;
}

int FleetCommands::State::Cancel(Client& client, int64_t id) {
  // The API answers 200 with the unchanged job for a finished one (cancel is
  // idempotent); the command reads the job first to say nothing was cancelled.
  const std::string path = "/v1/jobs/" + std::to_string(id);
  auto before = client.Get(path);
  if (!before.ok()) return ApiError(before.status());
  auto finished = [&](const json& job) {
    if (json_output) PrintJson(job);
    std::cerr << "ferry: " << AlreadyFinishedMessage(job) << "\n";
    return kExitApiError;
  };
  if (!AlreadyFinishedMessage(before->body).empty()) return finished(before->body);
  Request request;
  request.method = "POST";
  request.path = path + ":cancel";
  request.body = json::object();
  auto response = client.Send(request);
  if (!response.ok()) return ApiError(response.status());
  // It may have ended by itself between the two requests.
  if (Field(response->body, "state") != "CANCELLED" &&
      !AlreadyFinishedMessage(response->body).empty()) {
    return finished(response->body);
  }
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  std::cout << "job " << id << ": " << Field(response->body, "state") << " ("
            << Field(response->body, "reason") << ")\n";
  return kExitOk;
}

int FleetCommands::State::Nodes(Client& client) {
  auto response = client.Get("/v1/nodes");
  if (!response.ok()) return ApiError(response.status());
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "POOL", "STATE", "GPUS", "FREE", "MODELS",
                                                 "CPUS", "MEMORY_MB", "CACHE", "HIT", "HEARTBEAT"}};
  for (const auto& node : response->body.value("nodes", json::array())) {
    const json gpus = node.value("gpus", json::array());
    int free = 0;
    std::map<std::string, int> models;
    for (const auto& gpu : gpus) {
      // `allocated`, not `job_id`: another tenant's job shows as allocated
      // without its id; `external`: given to work outside Ferry (Slurm pools).
      const bool held = gpu.value("allocated", false) ||
                        (gpu.contains("job_id") && !gpu["job_id"].is_null()) ||
                        gpu.value("external", false);
      free += held ? 0 : 1;
      ++models[Field(gpu, "model")];
    }
    std::string model_text;
    for (const auto& [model, count] : models) {
      model_text += (model_text.empty() ? "" : ",") + std::to_string(count) + "x" + model;
    }
    std::string state = Field(node, "state");
    if (node.value("drain", false)) state += ",DRAIN";
    if (!node.value("unavailable", std::string()).empty()) state += ",UNAVAILABLE";
    auto [cache, hit] = CacheCells(node);
    rows.push_back({Field(node, "name"), Field(node, "pool"), state, std::to_string(gpus.size()),
                    std::to_string(free), model_text.empty() ? "-" : model_text,
                    Field(node, "cpus"), Field(node, "memory_mb"), std::move(cache), std::move(hit),
                    Age(node, "last_heartbeat")});
  }
  std::cout << FormatTable(rows);
  return kExitOk;
}

int FleetCommands::State::Drain(Client& client, bool drain) {
  if (node_name.empty()) return UsageError("a node name is required");
  Request request;
  request.method = "POST";
  request.path = "/v1/nodes/" + fleet::UrlEncode(node_name) + (drain ? ":drain" : ":undrain");
  request.body = json::object();
  auto response = client.Send(request);
  if (!response.ok()) return ApiError(response.status());
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  const json& node = response->body;
  std::string state = Field(node, "state");
  const bool drained = node.is_object() && node.value("drain", false);
  if (drained) state += ",DRAIN";
  std::cout << "node " << Field(node, "name") << ": " << state
            << (drained ? " (no new work is placed on it; running jobs go on)"
                        : " (takes new work)")
            << "\n";
  return kExitOk;
}

int FleetCommands::State::Scheduler(Client& client) {
  auto response = client.Get("/v1/scheduler");
  if (!response.ok()) return ApiError(response.status());
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  auto fixed = [](const json& object, const char* key, int digits) {
    auto it = object.find(key);
    if (it == object.end() || !it->is_number()) return std::string("-");
    char text[64];
    std::snprintf(text, sizeof(text), "%.*f", digits, it->get<double>());
    return std::string(text);
  };
  const json& body = response->body;
  const json config = body.value("config", json::object());
  std::cout << "ordering " << Field(config, "ordering") << ", default scoring "
            << Field(config, "default_scoring") << ", config "
            << (body.contains("config_file") && body["config_file"].is_string()
                    ? body["config_file"].get<std::string>()
                    : std::string("(built-in defaults)"))
            << "\n";
  if (body.contains("config_error") && body["config_error"].is_string()) {
    std::cout << "config error (previous config in force): "
              << body["config_error"].get<std::string>() << "\n";
  }
  const json cycle = body.value("last_cycle", json::object());
  std::cout << "last cycle: " << Field(cycle, "pending") << " pending, " << Field(cycle, "placed")
            << " placed, " << Field(cycle, "backfilled") << " backfilled, "
            << Field(cycle, "preempted") << " preempted in " << fixed(cycle, "elapsed_ms", 2)
            << " ms; preemptions so far " << Field(body, "preemptions_total") << "\n";
  std::vector<std::vector<std::string>> shares = {{"PATH", "SHARES", "USAGE_GPU_S", "FAIR_SHARE"}};
  for (const auto& entry : body.value("fair_share", json::array())) {
    shares.push_back({Field(entry, "path"), fixed(entry, "shares", 2),
                      fixed(entry, "usage_gpu_seconds", 1), fixed(entry, "fair_share", 3)});
  }
  if (shares.size() > 1) std::cout << "\n" << FormatTable(shares);
  std::vector<std::vector<std::string>> providers = {
      {"PROVIDER", "BREAKER", "CALLS", "RETRIES", "FAILURES", "LIVE_NODES"}};
  for (const auto& p : body.value("providers", json::array())) {
    int live = 0;
    for (const auto& node : p.value("nodes", json::array())) {
      live += node.value("state", "") != "terminated";
    }
    providers.push_back({Field(p, "name"), Field(p, "breaker"), Field(p, "calls"),
                         Field(p, "retries"), Field(p, "failures"), std::to_string(live)});
  }
  if (providers.size() > 1) std::cout << "\n" << FormatTable(providers);
  return kExitOk;
}

int FleetCommands::State::Whoami(Client& client) {
  auto response = client.Get("/v1/whoami");
  if (!response.ok()) return ApiError(response.status());
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  const json& who = response->body;
  std::cout << Field(who, "user") << " (" << Field(who, "role") << ") in " << Field(who, "tenant")
            << "/" << Field(who, "team") << "\n";
  return kExitOk;
}

int FleetCommands::State::AdminUserAdd(Client& client) {
  json body = {
      {"tenant", admin_tenant}, {"team", admin_team}, {"name", admin_name}, {"role", admin_role}};
  auto response = client.Post("/v1/admin/users", body);
  if (!response.ok()) return ApiError(response.status());
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  // Only the token on stdout, so that scripts can capture it.
  std::cout << Field(response->body, "token") << "\n";
  std::cerr << "created " << Field(response->body, "role") << " " << Field(response->body, "user")
            << " in " << Field(response->body, "tenant") << "/" << Field(response->body, "team")
            << "; the token is shown once\n";
  return kExitOk;
}

int FleetCommands::State::AdminUserList(Client& client) {
  std::vector<std::pair<std::string, std::string>> query;
  if (!admin_list_tenant.empty()) query.emplace_back("tenant", admin_list_tenant);
  auto response = client.Get("/v1/admin/users", query);
  if (!response.ok()) return ApiError(response.status());
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "TENANT", "TEAM", "NAME", "ROLE", "TOKENS", "AGE"}};
  for (const auto& user : response->body.value("users", json::array())) {
    rows.push_back({Field(user, "id"), Field(user, "tenant"), Field(user, "team"),
                    Field(user, "name"), Field(user, "role"), Field(user, "active_tokens"),
                    Age(user, "created_at")});
  }
  std::cout << FormatTable(rows);
  return kExitOk;
}

int FleetCommands::State::AdminUserToken(Client& client) {
  auto response =
      client.Post("/v1/admin/users:token", json{{"tenant", admin_tenant}, {"name", admin_name}});
  if (!response.ok()) return ApiError(response.status());
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  // As with `admin user add`: only the token on stdout.
  std::cout << Field(response->body, "token") << "\n";
  std::cerr << "issued a new token for " << Field(response->body, "role") << " "
            << Field(response->body, "user") << " in " << Field(response->body, "tenant") << "/"
            << Field(response->body, "team")
            << "; the token is shown once, and the user's other tokens stay valid\n";
  return kExitOk;
}

int FleetCommands::State::AdminUserRevoke(Client& client) {
  if (admin_name.empty()) return UsageError("a user name is required");
  auto response =
      client.Post("/v1/admin/users:revoke", json{{"tenant", admin_tenant}, {"name", admin_name}});
  if (!response.ok()) return ApiError(response.status());
  if (json_output) {
    PrintJson(response->body);
    return kExitOk;
  }
  const json user = response->body.value("user", json::object());
  const std::string who =
      Field(user, "name") + " in " + Field(user, "tenant") + "/" + Field(user, "team");
  const std::string count = Field(response->body, "revoked_tokens");
  if (count == "0") {
    std::cout << who << " had no active tokens; nothing was revoked\n";
  } else {
    std::cout << "revoked " << count << (count == "1" ? " token" : " tokens") << " of " << who
              << "; they are refused from now on\n";
  }
  return kExitOk;
}

}  // namespace ferry::cli
