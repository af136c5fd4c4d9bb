#include "ferry/fleet/agent.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "ferry/base/log.h"
#include "ferry/fleet/client.h"
#include "ferry/fleet/model_json.h"
#include "fleet/agent/agent_internal.h"
#include "fleet/agent/agent_metrics.h"
#include "fleet/agent/container.h"
#include "fleet/agent/input_stager.h"
#include "fleet/agent/nvml.h"
#include "fleet/agent/task_runner.h"

extern char** environ;

namespace ferry::fleet {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::string Trim(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

// A non-negative decimal integer no larger than `max`.
bool ParseCount(const std::string& text, int64_t max, int64_t* out) {
  if (text.empty() || text.size() > 18) return false;
  int64_t value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    value = value * 10 + (c - '0');
  }
  if (value > max) return false;
  *out = value;
  return true;
}

// The agent's log on stderr: "ferry agent: ..." text lines, or JSON lines
// with --log-format json. RunAgent sets the format before anything is written.
logging::Logger& AgentLog() {
  static logging::Logger log("agent");
  return log;
}

void Log(std::string_view message, std::initializer_list<logging::Field> fields = {}) {
  AgentLog().Info(message, fields);
}
void Warn(std::string_view message, std::initializer_list<logging::Field> fields = {}) {
  AgentLog().Warn(message, fields);
}

}  // namespace

Result<std::vector<GpuInventory>> ParseGpuDeclaration(const std::string& text,
                                                      const std::string& node_name) {
  constexpr int64_t kMaxGpus = 1024;
  std::vector<GpuInventory> gpus;
  const std::string all = Trim(text);
  if (all.empty()) return gpus;
  size_t start = 0;
  while (start <= all.size()) {
    size_t comma = all.find(',', start);
    if (comma == std::string::npos) comma = all.size();
    const std::string item = Trim(all.substr(start, comma - start));
    auto bad = [&](const std::string& why) {
      return Status::Invalid("bad GPU declaration '" + item + "': " + why +
                             " (expected COUNTxMODEL[:MEMORY_MIB], e.g. 8xH200 or 8xH200:141312)");
    };
    if (item.empty()) return Status::Invalid("bad GPU declaration '" + all + "': empty item");
    size_t digits = 0;
    while (digits < item.size() && std::isdigit(static_cast<unsigned char>(item[digits]))) ++digits;
    if (digits == 0 || digits >= item.size() || (item[digits] != 'x' && item[digits] != 'X')) {
      return bad("no count");
    }
    int64_t count = 0;
    if (!ParseCount(item.substr(0, digits), kMaxGpus, &count) || count < 1) {
      return bad("count must be between 1 and " + std::to_string(kMaxGpus));
    }
    std::string model = item.substr(digits + 1);
    int64_t memory_mb = 0;
    if (auto colon = model.find(':'); colon != std::string::npos) {
      if (!ParseCount(model.substr(colon + 1), int64_t{1} << 40, &memory_mb) || memory_mb < 1) {
        return bad("memory must be a positive number of MiB");
      }
      model = model.substr(0, colon);
    }
    if (model.empty() || model.size() > 64) return bad("model must be 1 to 64 characters");
    for (char c : model) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
        return bad("model may hold letters, digits, '-', '_' and '.'");
      }
    }
    if (static_cast<int64_t>(gpus.size()) + count > kMaxGpus) {
      return Status::Invalid("bad GPU declaration '" + all + "': more than " +
                             std::to_string(kMaxGpus) + " GPUs");
    }
    for (int64_t i = 0; i < count; ++i) {
      GpuInventory gpu;
      gpu.index = static_cast<int>(gpus.size());
      gpu.model = model;
      gpu.memory_mb = memory_mb;
      gpu.uuid = node_name + "-gpu" + std::to_string(gpu.index);
      gpus.push_back(std::move(gpu));
    }
    start = comma + 1;
  }
  return gpus;
}

namespace agent_internal {

std::string ModelFromNvmlName(const std::string& name) {
  std::string model = Trim(name);
  constexpr std::string_view kVendor = "NVIDIA ";
  if (model.compare(0, kVendor.size(), kVendor) == 0) model = Trim(model.substr(kVendor.size()));
  // Data-center parts: the first word is the model ("H100 80GB HBM3" -> "H100").
  std::string first = model.substr(0, model.find(' '));
  const bool part_number = first.size() >= 2 && first.size() <= 8 &&
                           std::isupper(static_cast<unsigned char>(first[0])) &&
                           std::isdigit(static_cast<unsigned char>(first[1]));
  if (part_number) return first;
  std::string out;
  for (char c : model) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

namespace {

template <typename T>
bool ReadNumber(const json& object, const char* key, T* out) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return false;
  *out = it->get<T>();
  return true;
}

std::string ReadString(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

Result<TaskRef> ParseRef(const json& object) {
  TaskRef ref;
  if (!object.is_object() || !ReadNumber(object, "job_id", &ref.job_id) ||
      !ReadNumber(object, "task", &ref.task) || !ReadNumber(object, "attempt", &ref.attempt)) {
    return Status::Invalid("task entry without job_id, task and attempt: " + object.dump());
  }
  return ref;
}

}  // namespace

Result<TaskAssignment> ParseAssignment(const json& object) {
  FERRY_ASSIGN_OR_RAISE(TaskRef ref, ParseRef(object));
  TaskAssignment assignment;
  assignment.ref = ref;
  assignment.job_name = ReadString(object, "job_name");
  auto spec = object.find("spec");
  if (spec == object.end() || !spec->is_object()) {
    return Status::Invalid("assignment without a spec");
  }
  JobSpec& out = assignment.spec;
  out.name = ReadString(*spec, "name");
  out.working_dir = ReadString(*spec, "working_dir");
  out.dataflow = ReadString(*spec, "dataflow");
  out.image = ReadString(*spec, "image");
  out.image_digest = ReadString(*spec, "image_digest");
  ReadNumber(*spec, "tasks", &out.tasks);
  ReadNumber(*spec, "gpus_per_task", &out.gpus_per_task);
  ReadNumber(*spec, "memory_mb_per_task", &out.memory_mb_per_task);
  if (auto checkpoint = spec->find("checkpoint");
      checkpoint != spec->end() && checkpoint->is_object()) {
    out.checkpoint.uri = ReadString(*checkpoint, "uri");
    ReadNumber(*checkpoint, "interval_seconds", &out.checkpoint.interval_seconds);
  }
  if (auto outputs = spec->find("outputs"); outputs != spec->end() && outputs->is_object()) {
    out.outputs.uri = ReadString(*outputs, "uri");
  }
  if (auto code = spec->find("code"); code != spec->end() && code->is_object()) {
    out.code.bundle = ReadString(*code, "bundle");
    out.code.git = ReadString(*code, "git");
    out.code.commit = ReadString(*code, "commit");
    ReadNumber(*code, "bytes", &out.code.bytes);
  }
  if (auto command = spec->find("command"); command != spec->end() && command->is_array()) {
    for (const auto& arg : *command) {
      if (!arg.is_string()) return Status::Invalid("assignment command holds a non-string");
      out.command.push_back(arg.get<std::string>());
    }
  }
  if (auto env = spec->find("env"); env != spec->end() && env->is_object()) {
    for (const auto& [key, value] : env->items()) {
      if (value.is_string()) out.env[key] = value.get<std::string>();
    }
  }
  auto strings = [&](const char* key, std::vector<std::string>* into) {
    if (auto it = object.find(key); it != object.end() && it->is_array()) {
      for (const auto& item : *it) {
        if (item.is_string()) into->push_back(item.get<std::string>());
      }
    }
  };
  if (auto it = object.find("gpu_indices"); it != object.end() && it->is_array()) {
    for (const auto& index : *it) {
      if (!index.is_number_integer()) return Status::Invalid("gpu_indices holds a non-integer");
      assignment.gpu_indices.push_back(index.get<int>());
    }
  }
  strings("gpu_uuids", &assignment.gpu_uuids);
  strings("gang_nodes", &assignment.gang_nodes);
  strings("gang_addresses", &assignment.gang_addresses);
  assignment.tenant = ReadString(object, "tenant");
  if (auto inputs = object.find("inputs"); inputs != object.end() && !inputs->is_null()) {
    FERRY_ASSIGN_OR_RAISE(assignment.inputs, ParseStagedInputs(*inputs));
  }
  if (auto it = object.find("rendezvous_port"); it != object.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 65535) {
      return Status::Invalid("rendezvous_port must be an integer between 0 and 65535");
    }
    assignment.rendezvous_port = it->get<int>();
  }
  return assignment;
}

Result<InputStager::PrefetchOrder> ParsePrefetchOrder(const json& object) {
  if (!object.is_object()) return Status::Invalid("a prefetch order must be an object");
  InputStager::PrefetchOrder order;
  auto job = object.find("job_id");
  auto attempt = object.find("attempt");
  auto tenant = object.find("tenant");
  auto inputs = object.find("inputs");
  if (job == object.end() || !job->is_number_integer() || job->get<int64_t>() < 1 ||
      attempt == object.end() || !attempt->is_number_integer() || attempt->get<int64_t>() < 1 ||
      attempt->get<int64_t>() > INT32_MAX) {
    return Status::Invalid("a prefetch order needs job_id and attempt (integers >= 1)");
  }
  const std::string what = "prefetch order of job " + std::to_string(job->get<int64_t>());
  if (tenant == object.end() || !tenant->is_string()) {
    return Status::Invalid(what + ": needs a tenant");
  }
  order.job_id = job->get<int64_t>();
  order.attempt = static_cast<int>(attempt->get<int64_t>());
  order.tenant = tenant->get<std::string>();
  if (inputs != object.end()) {
    FERRY_ASSIGN_OR_RAISE(order.inputs, ParseStagedInputs(*inputs));
  }
  if (auto code = object.find("code"); code != object.end()) {
    auto bundle = code->is_object() ? code->find("bundle") : code->end();
    auto bytes = code->is_object() ? code->find("bytes") : code->end();
    // The digest goes into the URL the bundle is fetched from.
    auto is_digest = [](const std::string& text) {
      if (text.size() != 71 || text.rfind("sha256:", 0) != 0) return false;
      return std::all_of(text.begin() + 7, text.end(),
                         [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
    };
    if (!code->is_object() || bundle == code->end() || !bundle->is_string() ||
        !is_digest(bundle->get<std::string>()) ||
        (bytes != code->end() && (!bytes->is_number_integer() || bytes->get<int64_t>() < 0))) {
      return Status::Invalid(what +
                             ": code must be {\"bundle\": \"sha256:<64 hex>\", \"bytes\": N}");
    }
    order.code_bundle = bundle->get<std::string>();
    if (bytes != code->end()) order.code_bytes = bytes->get<int64_t>();
  }
  for (auto [key, field] :
       {std::pair{"image", &order.image}, std::pair{"image_digest", &order.image_digest}}) {
    auto value = object.find(key);
    if (value == object.end()) continue;
    if (!value->is_string()) return Status::Invalid(what + ": " + key + " must be a string");
    *field = value->get<std::string>();
  }
  if (order.empty()) return Status::Invalid(what + ": names nothing to fetch");
  return order;
}

namespace {

// Where the gang's tasks run, seen from one task: the nodes in order of their
// first task (node rank), and this task's place on its node.
struct GangLayout {
  std::vector<std::string> nodes;  // node names by node rank
  std::vector<int> slots;          // tasks on each
  int node_rank = 0;
  int local_rank = 0;
  int local_world_size = 1;
};

GangLayout LayoutOf(const TaskAssignment& assignment, const NodeContext& node) {
  GangLayout out;
  const std::vector<std::string>& by_task = assignment.gang_nodes;
  const size_t me = static_cast<size_t>(std::max(assignment.ref.task, 0));
  if (me >= by_task.size()) {  // no gang list (or a short one): a gang of one node
    out.nodes = {node.node_name};
    out.slots = {1};
    return out;
  }
  out.local_world_size = 0;
  for (size_t task = 0; task < by_task.size(); ++task) {
    auto it = std::find(out.nodes.begin(), out.nodes.end(), by_task[task]);
    if (it == out.nodes.end()) {
      out.nodes.push_back(by_task[task]);
      out.slots.push_back(0);
      it = out.nodes.end() - 1;
    }
    out.slots[static_cast<size_t>(it - out.nodes.begin())]++;
    if (by_task[task] == by_task[me]) {
      out.local_world_size++;
      if (task < me) out.local_rank++;
    }
  }
  out.node_rank = static_cast<int>(std::find(out.nodes.begin(), out.nodes.end(), by_task[me]) -
                                   out.nodes.begin());
  return out;
}

// The address of the node that runs `task`: what the server sent, else this
// agent's own address for its own tasks, else the node name.
std::string AddressOfTask(const TaskAssignment& assignment, const NodeContext& node, size_t task) {
  if (task < assignment.gang_addresses.size() && !assignment.gang_addresses[task].empty()) {
    return assignment.gang_addresses[task];
  }
  std::string name =
      task < assignment.gang_nodes.size() ? assignment.gang_nodes[task] : node.node_name;
  if (name == node.node_name && !node.address.empty()) return node.address;
  return name;
}

std::string HostfilePath(const TaskAssignment& assignment, const NodeContext& node) {
  return node.work_dir + "/logs/" + std::to_string(assignment.ref.job_id) + "-" +
         std::to_string(assignment.ref.attempt) + ".hosts";
}

}  // namespace

std::string GangHostfile(const TaskAssignment& assignment, const NodeContext& node) {
  const GangLayout layout = LayoutOf(assignment, node);
  std::string text;
  for (size_t rank = 0; rank < layout.nodes.size(); ++rank) {
    // The address of the node's first task.
    size_t first = 0;
    while (first < assignment.gang_nodes.size() &&
           assignment.gang_nodes[first] != layout.nodes[rank]) {
      first++;
    }
    text += AddressOfTask(assignment, node, first) +
            " slots=" + std::to_string(layout.slots[rank]) + "\n";
  }
  return text;
}

std::string LocalAddressToward(const std::string& server_url) {
  std::string_view rest = server_url;
  if (size_t scheme = rest.find("://"); scheme != std::string_view::npos) {
    rest.remove_prefix(scheme + 3);
  }
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) rest.remove_prefix(at + 1);
  std::string host, port = server_url.rfind("https", 0) == 0 ? "443" : "80";
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return "";
    host = std::string(rest.substr(1, close - 1));
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port = rest.substr(colon + 1);
  }
  if (host.empty()) return "";
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return "";
  std::string out;
  for (addrinfo* ai = found; ai != nullptr && out.empty(); ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    // Connecting a UDP socket only picks the route and the local address.
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* where =
          local.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, where, text, sizeof(text)) != nullptr) out = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return out;
}

LaunchSpec BuildLaunchSpec(const TaskAssignment& assignment, const NodeContext& node) {
  const TaskRef& ref = assignment.ref;
  const JobSpec& spec = assignment.spec;
  LaunchSpec launch;
  launch.ref = ref;
  if (!spec.dataflow.empty()) {
    launch.argv = {node.ferry_binary, "run", spec.dataflow};
  } else {
    launch.argv = spec.command;
  }
  launch.env = node.base_env;
  for (const auto& [key, value] : spec.env) launch.env[key] = value;
  std::string devices;
  for (int index : assignment.gpu_indices) {
    devices += (devices.empty() ? "" : ",") + std::to_string(index);
  }
  std::string gang;
  for (const auto& name : assignment.gang_nodes) gang += (gang.empty() ? "" : ",") + name;
  launch.env["CUDA_VISIBLE_DEVICES"] = devices;
  launch.env["FERRY_JOB_ID"] = std::to_string(ref.job_id);
  launch.env["FERRY_JOB_NAME"] = assignment.job_name.empty() ? spec.name : assignment.job_name;
  launch.env["FERRY_TASK_INDEX"] = std::to_string(ref.task);
  launch.env["FERRY_TASK_COUNT"] = std::to_string(std::max(spec.tasks, 1));
  launch.env["FERRY_ATTEMPT"] = std::to_string(ref.attempt);
  launch.env["FERRY_NODE"] = node.node_name;
  launch.env["FERRY_GANG_NODES"] = gang;
  // Rendezvous, as torchrun, jax.distributed and MPI launchers expect it: one
  // process per task, task 0's node is the master.
  const GangLayout layout = LayoutOf(assignment, node);
  const int world = std::max(spec.tasks, 1);
  const std::string master = AddressOfTask(assignment, node, 0);
  std::string addresses;
  for (size_t task = 0; task < assignment.gang_nodes.size(); ++task) {
    addresses += (addresses.empty() ? "" : ",") + AddressOfTask(assignment, node, task);
  }
  launch.env["FERRY_GANG_ADDRESSES"] = addresses.empty() ? master : addresses;
  launch.env["MASTER_ADDR"] = master;
  launch.env["WORLD_SIZE"] = std::to_string(world);
  launch.env["RANK"] = std::to_string(ref.task);
  launch.env["LOCAL_RANK"] = std::to_string(layout.local_rank);
  launch.env["LOCAL_WORLD_SIZE"] = std::to_string(layout.local_world_size);
  launch.env["NODE_RANK"] = std::to_string(layout.node_rank);
  launch.env["GROUP_RANK"] = std::to_string(layout.node_rank);
  launch.env["JAX_NUM_PROCESSES"] = std::to_string(world);
  launch.env["JAX_PROCESS_ID"] = std::to_string(ref.task);
  if (assignment.rendezvous_port > 0) {
    const std::string port = std::to_string(assignment.rendezvous_port);
    launch.env["MASTER_PORT"] = port;
    const bool ipv6 = master.find(':') != std::string::npos;
    launch.env["JAX_COORDINATOR_ADDRESS"] = (ipv6 ? "[" + master + "]" : master) + ":" + port;
  }
  launch.env["FERRY_HOSTFILE"] = HostfilePath(assignment, node);
  launch.working_dir = spec.working_dir.empty() ? node.work_dir : spec.working_dir;
  launch.memory_limit_mb = std::max<int64_t>(spec.memory_mb_per_task, 0);
  launch.log_path = node.work_dir + "/logs/" + std::to_string(ref.job_id) + "-" +
                    std::to_string(ref.attempt) + "-" + std::to_string(ref.task) + ".log";
  return launch;
}

json ToJson(const TaskRef& ref) {
  return {{"job_id", ref.job_id}, {"task", ref.task}, {"attempt", ref.attempt}};
}

json ToJson(const TaskReport& report) {
  json out = ToJson(report.ref);
  switch (report.kind) {
    case TaskReport::Kind::kStarted:
      out["kind"] = "started";
      break;
    case TaskReport::Kind::kExited:
      out["kind"] = "exited";
      break;
    case TaskReport::Kind::kLaunchFailed:
      out["kind"] = "launch_failed";
      break;
    case TaskReport::Kind::kStaging:
      out["kind"] = "staging";
      break;
    case TaskReport::Kind::kStaged:
      out["kind"] = "staged";
      break;
    case TaskReport::Kind::kStagingFailed:
      out["kind"] = "staging_failed";
      break;
    default:  // resource managers' reports; agents do not send them
      out["kind"] = "unknown";
      break;
  }
  out["exit_code"] = report.exit_code ? json(*report.exit_code) : json(nullptr);
  out["signal"] = report.signal ? json(*report.signal) : json(nullptr);
  out["message"] = report.message;
  if (!report.note.empty()) out["note"] = report.note;
  out["at_ms"] = report.at_ms;
  return out;
}

}  // namespace agent_internal

std::vector<GpuInventory> DiscoverNvmlGpus() {
  return agent_internal::DiscoverNvmlGpusFrom("libnvidia-ml.so.1");
}

namespace {

using agent_internal::ToJson;

std::atomic<bool> g_signalled{false};
void OnStopSignal(int) { g_signalled.store(true); }

constexpr auto kShutdownGrace = std::chrono::seconds(5);
constexpr auto kMaxBackoff = std::chrono::milliseconds(2'000);
constexpr auto kMaxLogHold = std::chrono::seconds(10);

// Ships task output to /v1/agent/logs on its own thread and connection, in
// order, merging neighbouring pieces of the same stream. Counts pieces so
// that the agent can hold an exit report until the task's output is out.
class LogShipper {
 public:
  static constexpr size_t kMaxPost = size_t{128} * 1024;
  static constexpr size_t kMaxQueued = size_t{32} * 1024 * 1024;

  LogShipper(ClientOptions client_options, std::string node, std::function<void()> on_progress)
      : client_(std::move(client_options)),
        node_(std::move(node)),
        on_progress_(std::move(on_progress)),
        thread_([this] { Loop(); }) {}

  ~LogShipper() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    client_.Interrupt();
    thread_.join();
  }

  void Add(const TaskRef& ref, const char* stream, std::string data) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queued_bytes_ += data.size();
      queue_.push_back({ref, stream, std::move(data), Clock::now()});
      ++enqueued_;
      // Past the cap (a long outage) the oldest output goes; the node's log file keeps it.
      while (queued_bytes_ > kMaxQueued && queue_.size() > 1) {
        dropped_bytes_ += queue_.front().data.size();
        dropped_total_ += queue_.front().data.size();
        queued_bytes_ -= queue_.front().data.size();
        queue_.pop_front();
        ++shipped_;
      }
    }
    changed_.notify_all();
  }

  uint64_t enqueued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return enqueued_;
  }
  uint64_t shipped() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return shipped_;
  }

  agent_internal::LogBacklog Backlog() const {
    std::lock_guard<std::mutex> lock(mutex_);
    agent_internal::LogBacklog backlog;
    backlog.unshipped_bytes = queued_bytes_;
    backlog.unshipped_chunks = queue_.size();
    if (!queue_.empty()) {
      backlog.oldest_age_seconds =
          std::chrono::duration<double>(Clock::now() - queue_.front().queued).count();
    }
    backlog.shipped_bytes = shipped_bytes_;
    backlog.dropped_bytes = dropped_total_;
    return backlog;
  }

  // Waits until everything queued so far was shipped, at most `timeout`.
  void Flush(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t target = enqueued_;
    changed_.wait_for(lock, timeout, [&] { return shipped_ >= target; });
  }

 private:
  struct Piece {
    TaskRef ref;
    const char* stream;
    std::string data;
    Clock::time_point queued;
  };

  void Loop() {
    auto backoff = std::chrono::milliseconds(100);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      if (dropped_bytes_ > 0) {
        Warn("dropped " + std::to_string(dropped_bytes_) +
                 " bytes of task output while the server was unreachable (kept in the log files)",
             {{"node", node_}, {"bytes", static_cast<uint64_t>(dropped_bytes_)}});
        dropped_bytes_ = 0;
      }
      // Merge the head with following pieces of the same task and stream.
      Piece head = queue_.front();
      size_t merged = 1;
      while (merged < queue_.size() && queue_[merged].ref == head.ref &&
             queue_[merged].stream == head.stream &&
             head.data.size() + queue_[merged].data.size() <= kMaxPost) {
        head.data += queue_[merged].data;
        ++merged;
      }
      lock.unlock();
      json body = {
          {"node", node_},         {"job_id", head.ref.job_id}, {"attempt", head.ref.attempt},
          {"task", head.ref.task}, {"stream", head.stream},     {"data", head.data}};
      Request request;
      request.method = "POST";
      request.path = "/v1/agent/logs";
      request.body = std::move(body);
      request.allow_error_status = true;
      auto result = client_.Send(request);
      const bool retry =
          !result.ok() || result->status >= 500 || result->status == 429 || result->status == 401;
      lock.lock();
      if (stopping_) return;
      if (!retry) {
        if (result->status >= 400) {
          Warn("server refused task output (" +
                   DescribeErrorResponse(result->status, result->Header("content-type"),
                                         result->raw_body) +
                   "); dropped",
               {{"node", node_},
                {"job_id", head.ref.job_id},
                {"task", head.ref.task},
                {"attempt", head.ref.attempt},
                {"status", result->status}});
        }
        // The queue only grows at the back (drops at the front count as shipped).
        const size_t done = std::min(merged, queue_.size());
        for (size_t i = 0; i < done; ++i) {
          queued_bytes_ -= queue_.front().data.size();
          if (result->status < 400) shipped_bytes_ += queue_.front().data.size();
          queue_.pop_front();
        }
        shipped_ += done;
        backoff = std::chrono::milliseconds(100);
        lock.unlock();
        changed_.notify_all();
        if (on_progress_) on_progress_();
        lock.lock();
      } else {
        changed_.wait_for(lock, backoff, [&] { return stopping_; });
        backoff = std::min(backoff * 2, kMaxBackoff);
      }
    }
  }

  Client client_;
  const std::string node_;
  std::function<void()> on_progress_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Piece> queue_;
  size_t queued_bytes_ = 0;
  size_t dropped_bytes_ = 0;  // not logged yet
  uint64_t dropped_total_ = 0;
  uint64_t shipped_bytes_ = 0;
  uint64_t enqueued_ = 0;
  uint64_t shipped_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

std::string RandomInstance() {
  std::random_device device;
  std::string text;
  static const char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 4; ++i) {
    uint32_t word = device();
    for (int j = 0; j < 8; ++j) text += kHex[(word >> (4 * j)) & 15];
  }
  return text;
}

class Agent {
 public:
  Agent(AgentOptions options, std::atomic<bool>* external_stop)
      : options_(std::move(options)), external_stop_(external_stop) {}

  Status Run();

 private:
  struct PendingReport {
    TaskReport report;
    uint64_t log_target = 0;  // pieces of output that must be shipped first
    Clock::time_point queued;
  };

  bool Stopping() const { return stopping_.load(); }
  void Sleep(std::chrono::milliseconds duration);
  void Wake();
  Status Prepare();
  // Registers (retrying through outages); false when stopping first.
  Result<bool> Register();
  // Writes a gang's hostfile (replacing it whole, so tasks of one job on this
  // node never see half of it); a failure is logged, the task still starts.
  void WriteHostfile(const std::string& path, const std::string& text);
  void HandleSyncResponse(const json& body);
  // Starts a task whose inputs (if any) are staged.
  void Launch(const agent_internal::InputStager::Ready& ready);
  // Starts the --metrics-listen listener, if asked for.
  Status StartMetrics();
  // One line per task start, exit or launch failure.
  void LogReport(const TaskReport& report) const;
  // Counts one exchange with the server in the metrics.
  void CountExchange(bool ok, bool long_poll, Clock::time_point started);

  AgentOptions options_;
  std::atomic<bool>* external_stop_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> wake_{false};
  std::atomic<bool> in_long_poll_{false};
  std::atomic<bool> waiting_for_logs_{false};  // an exit report waits for its output
  std::mutex sleep_mutex_;
  std::condition_variable sleep_cv_;

  agent_internal::NodeContext node_;
  std::string instance_;
  std::vector<GpuInventory> gpus_;
  int64_t lease_ms_ = 10'000;
  int64_t stop_grace_ms_ = 10'000;
  bool cache_report_due_ = true;  // send the cache report with the next sync
  bool cache_reports_on_ = true;  // off after the server refused one
  std::deque<PendingReport> pending_;
  std::vector<TaskReport> held_exits_;  // waiting for their final checkpoint upload

  // Destroyed in reverse: the metrics listener (which reads the runner, the
  // shipper and NVML) goes first, then the runner (whose callbacks use the
  // shipper and the sync client).
  std::unique_ptr<agent_internal::Nvml> nvml_;  // kept open for the metrics only
  std::unique_ptr<agent_internal::AgentMetrics> metrics_;
  std::unique_ptr<Client> sync_client_;
  std::unique_ptr<LogShipper> shipper_;
  std::unique_ptr<TaskRunner> runner_;
  std::unique_ptr<agent_internal::InputStager> stager_;  // its threads call Wake()
  std::vector<json> prefetched_;  // prefetch reports the server has not taken yet
  std::unique_ptr<agent_internal::MetricsListener> metrics_listener_;
  std::unique_ptr<agent_internal::ContainerJanitor> containers_;  // tasks in images
};

void Agent::Sleep(std::chrono::milliseconds duration) {
  std::unique_lock<std::mutex> lock(sleep_mutex_);
  sleep_cv_.wait_for(lock, duration, [&] { return Stopping() || wake_.load(); });
}

void Agent::Wake() {
  wake_.store(true);
  if (in_long_poll_.load() && sync_client_) sync_client_->Interrupt();
  std::lock_guard<std::mutex> lock(sleep_mutex_);
  sleep_cv_.notify_all();
}

Status Agent::Prepare() {
  if (!options_.metrics_listen.empty()) {
    FERRY_RETURN_NOT_OK(ParseListenAddress(options_.metrics_listen).status());
  }
  if (options_.node_name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
      return Status::Invalid("cannot read the host name; pass --name");
    }
    options_.node_name = host;
  }
  if (options_.cpus <= 0)
    options_.cpus = static_cast<double>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  if (options_.memory_mb <= 0) {
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) {
      options_.memory_mb = static_cast<int64_t>(pages) * page_size / (int64_t{1024} * 1024);
    }
  }
  std::error_code error;
  std::filesystem::path work_dir = std::filesystem::absolute(
      options_.work_dir.empty() ? std::filesystem::path(".")
                                : std::filesystem::path(options_.work_dir),
      error);
  if (!error) std::filesystem::create_directories(work_dir / "logs", error);
  if (error) {
    return Status::IOError("cannot create the work directory " + options_.work_dir + ": " +
                           error.message());
  }
  node_.node_name = options_.node_name;
  node_.address = options_.advertise_host;
  if (node_.address.empty())
    node_.address = agent_internal::LocalAddressToward(options_.server_url);
  if (node_.address.empty()) node_.address = options_.node_name;
  node_.work_dir = work_dir.lexically_normal().string();
  while (node_.work_dir.size() > 1 && node_.work_dir.back() == '/') node_.work_dir.pop_back();
  node_.base_env = agent_internal::CurrentEnvironment();
  std::error_code exe_error;
  node_.ferry_binary = std::filesystem::read_symlink("/proc/self/exe", exe_error).string();
  if (exe_error) node_.ferry_binary = "ferry";

  if (!options_.ignore_nvml) {
    nvml_ = agent_internal::Nvml::Open("libnvidia-ml.so.1");
    if (nvml_) gpus_ = nvml_->devices();
    if (nvml_ && (options_.metrics_listen.empty() || gpus_.empty())) nvml_.reset();
  }
  agent_internal::ContainerOptions containers;
  if (!options_.podman.empty()) containers.podman = options_.podman;
  containers.insecure_registries = options_.insecure_registries;
  containers.auth_file = options_.registry_auth_file;
  containers.node_name = options_.node_name;
  containers.cdi_gpus = !gpus_.empty();  // found by NVML, not declared
  containers.state_dir = node_.work_dir;
  agent_internal::ContainerOptions pull_options = containers;
  containers_ = std::make_unique<agent_internal::ContainerJanitor>(std::move(containers));
  // A new instance runs none of its predecessor's tasks: the server writes
  // them off, and their containers go (a killed agent could not remove them).
  Result<int> removed = containers_->RemoveLeftovers();
  if (!removed.ok()) {
    Warn("could not remove the containers an earlier agent left: " + removed.status().message(),
         {{"node", options_.node_name}});
  } else if (*removed > 0) {
    Log("removed " + std::to_string(*removed) + " container(s) an earlier agent of this node left",
        {{"node", options_.node_name}});
  }
  if (gpus_.empty()) gpus_ = options_.declared_gpus;
  instance_ = RandomInstance();

  ClientOptions client_options;
  client_options.base_url = options_.server_url;
  client_options.token = options_.token;
  client_options.connect_timeout_ms = 2'000;
  client_options.read_timeout_ms = 10'000;
  client_options.ca_file = options_.ca_file;
  // A malformed URL or an unusable CA file does not get better by retrying.
  FERRY_RETURN_NOT_OK(CheckClientOptions(client_options));
  sync_client_ = std::make_unique<Client>(client_options);
  shipper_ = std::make_unique<LogShipper>(client_options, options_.node_name, [this] {
    if (waiting_for_logs_.load()) Wake();
  });
  TaskRunner::Options runner_options;
  runner_options.on_output = [this](const TaskRef& ref, const char* stream, std::string data) {
    shipper_->Add(ref, stream, std::move(data));
  };
  runner_options.on_report = [this] { Wake(); };
  runner_ = std::make_unique<TaskRunner>(std::move(runner_options));
  agent_internal::InputStager::Options stager_options;
  stager_options.work_dir = node_.work_dir;
  stager_options.cache_dir = options_.cache_dir;
  stager_options.cache_quota_bytes = options_.cache_quota_bytes;
  stager_options.storage_config = options_.storage_config;
  stager_options.server_url = options_.server_url;
  stager_options.server_token = options_.token;
  stager_options.server_ca_file = options_.ca_file;
  stager_options.node_name = options_.node_name;
  stager_options.containers = std::move(pull_options);
  stager_options.wake = [this] { Wake(); };
  FERRY_ASSIGN_OR_RAISE(stager_, agent_internal::InputStager::Open(std::move(stager_options)));
  return StartMetrics();
}

Status Agent::StartMetrics() {
  if (options_.metrics_listen.empty()) return Status::OK();
  FERRY_ASSIGN_OR_RAISE(ListenAddress address, ParseListenAddress(options_.metrics_listen));
  if (nvml_) nvml_->WatchXids();
  metrics_ = std::make_unique<agent_internal::AgentMetrics>(options_.node_name, options_.pool,
                                                            nvml_.get());
  FERRY_ASSIGN_OR_RAISE(metrics_listener_, agent_internal::MetricsListener::Start(address, [this] {
                          agent_internal::AgentSnapshot snapshot;
                          snapshot.tasks_running = static_cast<int64_t>(runner_->Running().size());
                          snapshot.logs = shipper_->Backlog();
                          if (stager_) snapshot.cache = stager_->Stats();
                          return metrics_->Render(snapshot);
                        }));
  const bool v6 = address.host.find(':') != std::string::npos;
  Log("metrics on http://" + (v6 ? "[" + address.host + "]" : address.host) + ":" +
          std::to_string(metrics_listener_->port()) + "/metrics" +
          (nvml_ ? " (GPUs through NVML)" : " (no NVML: no GPU series)"),
      {{"node", options_.node_name}, {"port", metrics_listener_->port()}});
  return Status::OK();
}

void Agent::LogReport(const TaskReport& report) const {
  const TaskRef& ref = report.ref;
  switch (report.kind) {
    case TaskReport::Kind::kStarted:
      Log("task started", {{"node", options_.node_name},
                           {"job_id", ref.job_id},
                           {"task", ref.task},
                           {"attempt", ref.attempt}});
      break;
    case TaskReport::Kind::kExited:
      if (report.exit_code) {
        Log("task exited", {{"node", options_.node_name},
                            {"job_id", ref.job_id},
                            {"task", ref.task},
                            {"attempt", ref.attempt},
                            {"exit_code", *report.exit_code}});
      } else {
        Log("task killed", {{"node", options_.node_name},
                            {"job_id", ref.job_id},
                            {"task", ref.task},
                            {"attempt", ref.attempt},
                            {"signal", report.signal.value_or(0)}});
      }
      break;
    case TaskReport::Kind::kLaunchFailed:
      Warn("task launch failed: " + report.message, {{"node", options_.node_name},
                                                     {"job_id", ref.job_id},
                                                     {"task", ref.task},
                                                     {"attempt", ref.attempt}});
      break;
    case TaskReport::Kind::kStaging:
    case TaskReport::Kind::kStaged:
      Log(std::string(report.kind == TaskReport::Kind::kStaging ? "staging inputs: "
                                                                : "inputs staged: ") +
              report.message,
          {{"node", options_.node_name},
           {"job_id", ref.job_id},
           {"task", ref.task},
           {"attempt", ref.attempt}});
      break;
    case TaskReport::Kind::kStagingFailed:
      Warn("staging failed: " + report.message, {{"node", options_.node_name},
                                                 {"job_id", ref.job_id},
                                                 {"task", ref.task},
                                                 {"attempt", ref.attempt}});
      break;
    default:
      break;
  }
}

void Agent::CountExchange(bool ok, bool long_poll, Clock::time_point started) {
  if (!metrics_) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  metrics_->Exchange(ok, long_poll, seconds, now_ms);
}

void Agent::WriteHostfile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) {
      Warn("cannot write the gang hostfile " + tmp, {{"node", options_.node_name}});
      return;
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    Warn("cannot write the gang hostfile " + path + ": " + error.message(),
         {{"node", options_.node_name}});
  }
}

Result<bool> Agent::Register() {
  json gpus = json::array();
  for (const auto& gpu : gpus_) {
    gpus.push_back({{"index", gpu.index},
                    {"model", gpu.model},
                    {"memory_mb", gpu.memory_mb},
                    {"uuid", gpu.uuid}});
  }
  json body = {{"name", options_.node_name},      {"pool", options_.pool},
               {"labels", options_.labels},       {"cpus", options_.cpus},
               {"memory_mb", options_.memory_mb}, {"instance", instance_},
               {"address", node_.address},        {"gpus", gpus}};
  auto backoff = std::chrono::milliseconds(200);
  bool reported_outage = false;
  while (!Stopping()) {
    Request request;
    request.method = "POST";
    request.path = "/v1/agent/register";
    request.body = body;
    request.allow_error_status = true;
    const auto started = Clock::now();
    auto result = sync_client_->Send(request);
    if (Stopping() && !result.ok()) break;
    CountExchange(result.ok() && result->status == 200, false, started);
    if (result.ok() && result->status == 200) {
      int64_t lease_ms = 0;
      if (result->body.is_object() && result->body.contains("lease_ms") &&
          result->body["lease_ms"].is_number_integer()) {
        lease_ms = result->body["lease_ms"].get<int64_t>();
      }
      if (lease_ms > 0) lease_ms_ = lease_ms;
      Log("registered node " + options_.node_name + " in pool " + options_.pool + " (instance " +
              instance_ + ", " + std::to_string(gpus_.size()) + " GPUs) with " +
              options_.server_url,
          {{"node", options_.node_name},
           {"pool", options_.pool},
           {"instance", instance_},
           {"gpus", static_cast<int64_t>(gpus_.size())}});
      return true;
    }
    if (result.ok()) {
      const std::string message =
          DescribeErrorResponse(result->status, result->Header("content-type"), result->raw_body);
      // A refused registration does not get better by retrying.
      if (result->status >= 400 && result->status < 500 && result->status != 429 &&
          result->status != 408) {
        return Status::Invalid("registration refused: " + message);
      }
      if (!reported_outage) {
        Warn("registration failed (" + message + "); retrying",
             {{"node", options_.node_name}, {"status", result->status}});
      }
    } else if (!reported_outage) {
      Warn(result.status().message() + "; retrying", {{"node", options_.node_name}});
    }
    reported_outage = true;
    Sleep(backoff);
    wake_.store(false);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  return false;
}

void Agent::HandleSyncResponse(const json& body) {
  if (auto it = body.find("stop_grace_ms"); it != body.end() && it->is_number_integer()) {
    stop_grace_ms_ = std::max<int64_t>(0, it->get<int64_t>());
  }
  // The full list each time (absent from an older server: none).
  std::vector<agent_internal::InputStager::PrefetchOrder> orders;
  if (auto prefetch = body.find("prefetch"); prefetch != body.end() && prefetch->is_array()) {
    for (const auto& entry : *prefetch) {
      Result<agent_internal::InputStager::PrefetchOrder> order =
          agent_internal::ParsePrefetchOrder(entry);
      if (!order.ok()) {
        Warn("bad prefetch order from the server: " + order.status().message(),
             {{"node", options_.node_name}});
        continue;
      }
      orders.push_back(std::move(*order));
    }
  }
  for (const auto& [job, attempt] : stager_->Prefetch(std::move(orders))) {
    Log("fetching what job " + std::to_string(job) + " needs ahead (it waits for this node)",
        {{"node", options_.node_name}, {"job_id", job}, {"attempt", attempt}});
  }
  if (auto stop = body.find("stop"); stop != body.end() && stop->is_array()) {
    for (const auto& entry : *stop) {
      auto ref = agent_internal::ParseRef(entry);
      if (ref.ok()) {
        stager_->Stop(*ref);
        runner_->Stop(*ref, std::chrono::milliseconds(stop_grace_ms_));
      }
    }
  }
  if (auto start = body.find("start"); start != body.end() && start->is_array()) {
    for (const auto& entry : *start) {
      auto assignment = agent_internal::ParseAssignment(entry);
      if (!assignment.ok()) {
        auto ref = agent_internal::ParseRef(entry);
        if (!ref.ok()) {
          Warn("bad assignment from the server: " + assignment.status().message(),
               {{"node", options_.node_name}});
          continue;
        }
        Warn("bad assignment from the server: " + assignment.status().message(),
             {{"node", options_.node_name},
              {"job_id", ref->job_id},
              {"task", ref->task},
              {"attempt", ref->attempt}});
        // Report it so the job fails instead of waiting forever.
        TaskReport report;
        report.ref = *ref;
        report.kind = TaskReport::Kind::kLaunchFailed;
        report.message = "bad assignment: " + assignment.status().message();
        report.at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
        pending_.push_back({report, 0, Clock::now()});
        continue;
      }
      std::vector<agent_internal::InputStager::Ready> ready;
      stager_->Offer(std::move(*assignment), &ready);
      for (const auto& task : ready) Launch(task);
    }
  }
}

void Agent::Launch(const agent_internal::InputStager::Ready& ready) {
  LaunchSpec launch = agent_internal::BuildLaunchSpec(ready.assignment, node_);
  if (!ready.inputs_dir.empty()) {
    launch.env["FERRY_INPUTS_DIR"] = ready.inputs_dir;
    launch.read_only_dirs.push_back(ready.inputs_dir);
  }
  if (!ready.code_dir.empty()) {
    launch.env["FERRY_CODE_DIR"] = ready.code_dir;
    launch.read_only_dirs.push_back(ready.code_dir);
    if (ready.assignment.spec.working_dir.empty()) launch.working_dir = ready.code_dir;
  }
  if (!ready.assignment.spec.checkpoint.uri.empty()) {
    const std::string dir =
        stager_->checkpoints()->Dir(ready.assignment.ref.job_id, ready.assignment.ref.task);
    std::error_code ignored;
    std::filesystem::create_directories(dir, ignored);
    launch.env["FERRY_CHECKPOINT_DIR"] = dir;
  }
  if (!ready.assignment.spec.outputs.uri.empty()) {
    // Empty at the start: what the task leaves here is what it produced.
    const std::string dir = stager_->checkpoints()->OutputsDir(ready.assignment.ref);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    std::filesystem::create_directories(dir, ignored);
    launch.env["FERRY_OUTPUTS_DIR"] = dir;
  }
  WriteHostfile(launch.env["FERRY_HOSTFILE"],
                agent_internal::GangHostfile(ready.assignment, node_));
  if (!ready.assignment.spec.image.empty()) {
    agent_internal::ContainerMounts mounts;
    mounts.read_only = launch.read_only_dirs;
    launch.read_only_dirs.clear();  // podman mounts them read-only
    for (const char* writable : {"FERRY_CHECKPOINT_DIR", "FERRY_OUTPUTS_DIR"}) {
      if (auto dir = launch.env.find(writable); dir != launch.env.end()) {
        mounts.writable.push_back(dir->second);
      }
    }
    mounts.read_only_files.push_back(launch.env["FERRY_HOSTFILE"]);
    agent_internal::WrapInContainer(containers_->options(), ready.assignment.spec,
                                    ready.assignment.gpu_indices, mounts, node_.base_env, &launch);
    containers_->Started(ready.assignment.ref);
  }
  runner_->Start(launch);
  stager_->checkpoints()->Started(ready.assignment);
}

Status Agent::Run() {
  FERRY_RETURN_NOT_OK(Prepare());
  // Turns the external stop flag and the signal flag into a prompt wake-up.
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load()) {
      if ((external_stop_ != nullptr && external_stop_->load()) || g_signalled.load()) {
        stopping_.store(true);
        sync_client_->Interrupt();
        std::lock_guard<std::mutex> lock(sleep_mutex_);
        sleep_cv_.notify_all();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  Status status;
  bool registered = false;
  auto backoff = std::chrono::milliseconds(200);
  bool outage = false;
  while (!Stopping()) {
    if (!registered) {
      auto result = Register();
      if (!result.ok()) {
        status = result.status();
        break;
      }
      if (!*result) break;
      registered = true;
      cache_report_due_ = true;
    }
    // Staging that ended: its tasks start (after their `staged` reports).
    std::vector<agent_internal::InputStager::Ready> staged;
    stager_->Poll(&staged);
    for (const auto& task : staged) Launch(task);
    for (auto& report : stager_->TakeReports()) {
      LogReport(report);
      pending_.push_back({std::move(report), 0, Clock::now()});
    }
    // Running() before TakeReports(): a task ending in between is in one of them.
    std::vector<TaskRef> running = runner_->Running();
    stager_->Sweep(running);
    for (const TaskRef& held : stager_->Held()) running.push_back(held);
    // An ended task's exit report waits for its last checkpoint upload.
    stager_->checkpoints()->Tick();
    for (const std::string& error : stager_->checkpoints()->TakeErrors()) {
      Warn(error, {{"node", options_.node_name}});
    }
    for (const auto& [done, failed] : stager_->checkpoints()->TakeFinished()) {
      for (auto it = held_exits_.begin(); it != held_exits_.end(); ++it) {
        if (it->ref == done) {
          // The timeline says what could not be kept (the exit decides the state).
          if (!failed.empty()) it->note = failed;
          pending_.push_back({std::move(*it), shipper_->enqueued(), Clock::now()});
          held_exits_.erase(it);
          break;
        }
      }
    }
    for (const TaskReport& held : held_exits_) running.push_back(held.ref);
    for (auto& report : runner_->TakeReports()) {
      if (report.kind != TaskReport::Kind::kStarted) containers_->Ended(report.ref);
      if (report.kind != TaskReport::Kind::kStarted && stager_->checkpoints()->Ended(report.ref)) {
        LogReport(report);
        running.push_back(report.ref);
        held_exits_.push_back(std::move(report));
        continue;
      }
      LogReport(report);
      const bool ended = report.kind != TaskReport::Kind::kStarted;
      pending_.push_back({std::move(report), ended ? shipper_->enqueued() : 0, Clock::now()});
    }
    // Reports go in order; an exit waits (bounded) until its output was shipped.
    const uint64_t shipped = shipper_->shipped();
    const auto now = Clock::now();
    size_t sendable = 0;
    while (sendable < pending_.size() && (pending_[sendable].log_target <= shipped ||
                                          now - pending_[sendable].queued > kMaxLogHold)) {
      ++sendable;
    }
    json reports = json::array();
    for (size_t i = 0; i < sendable; ++i) reports.push_back(ToJson(pending_[i].report));
    // Tasks whose exit the server has not heard of yet still count as running.
    for (size_t i = sendable; i < pending_.size(); ++i) {
      const TaskReport& report = pending_[i].report;
      if (report.kind != TaskReport::Kind::kStarted &&
          std::find(running.begin(), running.end(), report.ref) == running.end()) {
        running.push_back(report.ref);
      }
    }
    json running_json = json::array();
    for (const auto& ref : running) running_json.push_back(ToJson(ref));

    wake_.store(false);
    int64_t wait_ms = std::min(options_.sync_wait_ms, lease_ms_ / 2);
    if (sendable > 0) wait_ms = 0;
    if (sendable < pending_.size()) wait_ms = std::min<int64_t>(wait_ms, 200);
    wait_ms = std::max<int64_t>(wait_ms, 0);

    waiting_for_logs_.store(sendable < pending_.size());
    // A wake-up that came before the long poll was in flight cuts it short here.
    in_long_poll_.store(wait_ms > 0);
    if (wait_ms > 0 && wake_.load()) {
      in_long_poll_.store(false);
      wait_ms = 0;
    }
    Request request;
    request.method = "POST";
    request.path = "/v1/agent/sync";
    request.query = {{"wait_ms", std::to_string(wait_ms)}};
    request.body = json{{"node", options_.node_name},
                        {"instance", instance_},
                        {"address", node_.address},
                        {"running", running_json},
                        {"reports", reports}};
    // What was fetched ahead for waiting jobs; kept until a sync carrying it succeeds.
    for (json& report : stager_->TakePrefetchReports()) prefetched_.push_back(std::move(report));
    const size_t prefetched_sent = prefetched_.size();
    if (!prefetched_.empty()) (*request.body)["prefetched"] = prefetched_;
    // What the node cache holds, when it changed (and after each registration).
    std::optional<json> cache_report;
    if (cache_reports_on_) cache_report = stager_->CacheReport(cache_report_due_);
    if (cache_report) {
      (*request.body)["cache"] = std::move(*cache_report);
      cache_report_due_ = true;  // until a sync carrying it succeeds
    }
    request.extra_read_timeout_ms = wait_ms;
    request.allow_error_status = true;
    const auto sync_started = std::chrono::steady_clock::now();
    auto result = sync_client_->Send(request);
    in_long_poll_.store(false);
    if (Stopping()) break;
    // An interruption on purpose (a task started or ended) says nothing about the server.
    if (result.ok() || !wake_.load()) {
      CountExchange(result.ok() && result->status == 200 && result->body.is_object(), wait_ms > 0,
                    sync_started);
    }

    if (result.ok() && result->status == 200 && result->body.is_object()) {
      if (outage) Log("server reachable again", {{"node", options_.node_name}});
      outage = false;
      backoff = std::chrono::milliseconds(200);
      const json& body = result->body;
      auto registered_it = body.find("registered");
      if (registered_it != body.end() && registered_it->is_boolean() &&
          !registered_it->get<bool>()) {
        Warn(
            "the server does not know this node (restarted or declared it lost); registering "
            "again",
            {{"node", options_.node_name}});
        registered = false;
        continue;  // the reports stay queued and go with the next sync
      }
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(sendable));
      prefetched_.erase(prefetched_.begin(),
                        prefetched_.begin() + static_cast<std::ptrdiff_t>(prefetched_sent));
      if (cache_report) cache_report_due_ = false;
      HandleSyncResponse(body);
      // A server with every long-poll slot taken answers at once with nothing
      // to do: pause briefly instead of spinning on it.
      auto empty_list = [&body](const char* key) {
        auto it = body.find(key);
        return it == body.end() || !it->is_array() || it->empty();
      };
      const bool nothing = empty_list("start") && empty_list("stop");
      const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - sync_started);
      if (nothing && wait_ms > 0 && elapsed.count() < wait_ms / 4 && !wake_.load()) {
        Sleep(std::chrono::milliseconds(std::min<int64_t>(wait_ms / 4, 250)));
      }
      continue;
    }
    // Interrupted on purpose (a task started or ended): sync again right away.
    if (!result.ok() && wake_.load()) continue;
    if (result.ok() && result->status == 422 && cache_report && cache_reports_on_) {
      // A server that refuses the cache report (an older one, or a rule this
      // agent breaks) must not cost the node its lease: go on without it.
      Warn("the server refused the node cache report (" +
               DescribeErrorResponse(result->status, result->Header("content-type"),
                                     result->raw_body) +
               "); syncing without it",
           {{"node", options_.node_name}});
      cache_reports_on_ = false;
      continue;
    }
    std::string message =
        result.ok() ? DescribeErrorResponse(result->status, result->Header("content-type"),
                                            result->raw_body)
                    : result.status().message();
    if (!outage) {
      Warn("sync failed (" + message + "); tasks keep running, retrying",
           {{"node", options_.node_name}});
    }
    outage = true;
    Sleep(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }

  if (!runner_->Running().empty()) {
    Log("stopping " + std::to_string(runner_->Running().size()) + " task(s)",
        {{"node", options_.node_name}, {"tasks", static_cast<int64_t>(runner_->Running().size())}});
  }
  runner_->StopAll(kShutdownGrace);
  shipper_->Flush(std::chrono::seconds(2));
  done.store(true);
  watcher.join();
  metrics_listener_.reset();
  stager_.reset();
  runner_.reset();
  shipper_.reset();
  return status;
}

}  // namespace

Status RunAgent(const AgentOptions& options, std::atomic<bool>* stop, bool handle_signals) {
  Result<logging::Format> log_format = logging::ParseFormat(options.log_format);
  if (!log_format.ok()) return log_format.status().WithPrefix("agent: ");
  AgentLog().set_format(*log_format);
  struct sigaction old_int {
  }, old_term{}, old_pipe{};
  if (handle_signals) {
    g_signalled.store(false);
    struct sigaction action {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int);
    sigaction(SIGTERM, &action, &old_term);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_pipe);
  }
  Status status = Agent(options, stop).Run();
  if (handle_signals) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGPIPE, &old_pipe, nullptr);
  }
  return status;
}

}  // namespace ferry::fleet
