// Launch planning: NodeConfigs, command lines and edges (plan.h).
#include "flow/daemon/plan.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <tuple>

#include "flow/node/protocol.h"
#include "flow/operator/operator_list.h"

#ifndef FERRY_DEFAULT_PYTHON
#define FERRY_DEFAULT_PYTHON "python3"
#endif
#ifndef FERRY_DEFAULT_PYTHONPATH
#define FERRY_DEFAULT_PYTHONPATH ""
#endif

namespace ferry::flow::daemon {
namespace {

// The transport's limit on channel names (transport.h).
constexpr size_t kMaxChannelName = 100;
constexpr size_t kMaxRunName = 48;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

bool IsExecutable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

// `program` itself when it has a '/', else the first executable of that name on PATH.
Result<std::string> ResolveProgram(const std::string& program, const std::string& what) {
  if (program.empty()) return Status::Invalid(what + " is empty");
  if (program.find('/') != std::string::npos) {
    if (!IsExecutable(program)) {
      return Status::Invalid(what + " '" + program + "' is not an executable file");
    }
    return program;
  }
  const std::string path_list = EnvOr("PATH", "/usr/local/bin:/usr/bin:/bin");
  size_t begin = 0;
  while (begin <= path_list.size()) {
    size_t end = path_list.find(':', begin);
    if (end == std::string::npos) end = path_list.size();
    std::string directory = path_list.substr(begin, end - begin);
    if (directory.empty()) directory = ".";
    std::string candidate = directory + "/" + program;
    if (IsExecutable(candidate)) return candidate;
    begin = end + 1;
  }
  return Status::Invalid(what + " '" + program + "' was not found on PATH");
}

std::string SourceChannel(const std::string& run_id, const InputSource& source) {
  return protocol::ChannelName(run_id, source.node, source.operator_id, source.output);
}

// The output id a source names in its producer's NodeConfig.
std::string ProducerOutputId(const InputSource& source) {
  return source.operator_id.empty() ? source.output
                                    : OperatorPortId(source.operator_id, source.output);
}

Status CheckChannel(const std::string& channel) {
  if (channel.size() > kMaxChannelName) {
    return Status::Invalid("channel name '" + channel + "' is longer than " +
                           std::to_string(kMaxChannelName) +
                           " characters; use a shorter run name or shorter ids");
  }
  return Status::OK();
}

Result<NodeConfig::Input> MakeInput(const std::string& run_id, const std::string& id,
                                    const InputSpec& spec) {
  NodeConfig::Input input;
  input.id = id;
  if (spec.source.kind == InputSource::Kind::kTimer) {
    input.timer_interval = spec.source.interval;
    return input;
  }
  input.channel = SourceChannel(run_id, spec.source);
  FERRY_RETURN_NOT_OK(CheckChannel(input.channel));
  input.queue_size = spec.queue_size;
  input.overflow = spec.overflow;
  return input;
}

// An operator input fed by another operator of the same runtime node.
bool IsInternal(const NodeSpec& node, const InputSpec& input) {
  return node.is_runtime() && input.source.kind == InputSource::Kind::kOutput &&
         input.source.node == node.id;
}

bool HasPythonOperator(const NodeSpec& node) {
  for (const auto& op : node.operators) {
    if (op.kind == OperatorSpec::Kind::kPython) return true;
  }
  return false;
}

}  // namespace

std::string DoraShimPath(const std::string& python_path) {
  return python_path + "/ferry/_dora_shim";
}

std::string InstalledPythonPath(const std::string& ferry_exe) {
  const std::filesystem::path bin = std::filesystem::path(ferry_exe).parent_path();
  std::error_code ec;
  // cmake --install: <prefix>/bin/ferry beside <prefix>/lib/ferry/python/ferry.
  for (const char* libdir : {"lib", "lib64"}) {
    const std::filesystem::path python = bin.parent_path() / libdir / "ferry" / "python";
    if (std::filesystem::exists(python / "ferry" / "__init__.py", ec)) return python.string();
  }
  // A wheel: <site-packages>/ferry/bin/ferry inside the package itself.
  const std::filesystem::path package = bin.parent_path();
  if (bin.filename() == "bin" && package.filename() == "ferry" &&
      std::filesystem::exists(package / "__init__.py", ec)) {
    return package.parent_path().string();
  }
  return "";
}

LaunchSettings DefaultLaunchSettings() {
  LaunchSettings settings;
  char buffer[4096];
  ssize_t length = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  settings.ferry_exe =
      length > 0 ? std::string(buffer, static_cast<size_t>(length)) : std::string("/proc/self/exe");
  // An installed ferry uses the package installed with it and the python3 on
  // PATH; only a build tree's ferry falls back to the checkout and the
  // interpreter the build was configured with.
  const std::string installed = InstalledPythonPath(settings.ferry_exe);
  std::string python = installed.empty() ? FERRY_DEFAULT_PYTHON : "python3";
  if (python.find('/') != std::string::npos && !IsExecutable(python)) python = "python3";
  settings.python = EnvOr("FERRY_PYTHON", python);
  settings.python_path =
      EnvOr("FERRY_PYTHONPATH", installed.empty() ? FERRY_DEFAULT_PYTHONPATH : installed);
  return settings;
}

std::string GenerateRunId() {
  std::random_device device;
  const unsigned suffix = device() & 0xffffu;
  char hex[8];
  std::snprintf(hex, sizeof(hex), "%04x", suffix);
  return "df-" + std::to_string(::getpid()) + "-" + hex;
}

Status CheckRunName(const std::string& name) {
  if (name.empty()) return Status::Invalid("the run name is empty");
  if (name.size() > kMaxRunName) {
    return Status::Invalid("the run name '" + name + "' is longer than " +
                           std::to_string(kMaxRunName) + " characters");
  }
  if (name[0] == '.' || name[0] == '-') {
    return Status::Invalid("the run name '" + name + "' must not start with '.' or '-'");
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) {
      return Status::Invalid("the run name '" + name +
                             "' may hold only letters, digits, '_', '-' and '.'");
    }
  }
  return Status::OK();
}

std::string OperatorPortId(const std::string& operator_id, const std::string& port) {
  return operator_id + "/" + port;
}

Result<Plan> PlanDataflow(const Dataflow& dataflow, const std::string& run_id,
                          const LaunchSettings& settings) {
  FERRY_RETURN_NOT_OK(CheckRunName(run_id));
  Plan plan;
  plan.run_id = run_id;
  const std::string working_directory = dataflow.directory.empty() ? "." : dataflow.directory;
  std::map<std::string, size_t> index_of;
  // Operator outputs that another node consumes: (node, operator, output).
  std::set<std::tuple<std::string, std::string, std::string>> consumed;
  auto note_consumer = [&](const NodeSpec& consumer, const InputSpec& input) {
    if (input.source.kind == InputSource::Kind::kOutput && !IsInternal(consumer, input)) {
      consumed.insert({input.source.node, input.source.operator_id, input.source.output});
    }
  };
  for (const NodeSpec& spec : dataflow.nodes) {
    for (const InputSpec& input : spec.inputs) note_consumer(spec, input);
    for (const OperatorSpec& op : spec.operators) {
      for (const InputSpec& input : op.inputs) note_consumer(spec, input);
    }
  }

  for (const NodeSpec& spec : dataflow.nodes) {
    NodeLaunch launch;
    launch.node = spec.id;
    launch.working_directory = working_directory;
    launch.env = spec.env;
    NodeConfig& config = launch.config;
    config.dataflow = run_id;
    config.node = spec.id;
    config.daemon_socket = protocol::DaemonSocketName(run_id);

    if (spec.is_runtime()) {
      // Only what crosses the runtime's boundary is a NodeConfig port
      // (runtime_main.h): operators of one runtime talk in-process.
      for (const OperatorSpec& op : spec.operators) {
        for (const InputSpec& input : op.inputs) {
          if (IsInternal(spec, input)) continue;
          FERRY_ASSIGN_OR_RAISE(auto made,
                                MakeInput(run_id, OperatorPortId(op.id, input.id), input));
          config.inputs.push_back(std::move(made));
        }
        for (const std::string& output : op.outputs) {
          if (consumed.count({spec.id, op.id, output}) == 0) continue;
          NodeConfig::Output made{OperatorPortId(op.id, output),
                                  protocol::ChannelName(run_id, spec.id, op.id, output)};
          FERRY_RETURN_NOT_OK(CheckChannel(made.channel));
          config.outputs.push_back(std::move(made));
        }
      }
      launch.env[kOperatorsEnv] = OperatorListToJson(OperatorDefinitionsOf(spec));
      if (HasPythonOperator(spec)) {
        FERRY_ASSIGN_OR_RAISE(launch.program,
                              ResolveProgram(settings.python, "Python interpreter"));
        launch.argv = {settings.python, "-u", "-m", "ferry.runtime"};
      } else {
        FERRY_ASSIGN_OR_RAISE(launch.program,
                              ResolveProgram(settings.ferry_exe, "the ferry executable"));
        launch.argv = {settings.ferry_exe, "runtime"};
      }
    } else {
      for (const InputSpec& input : spec.inputs) {
        FERRY_ASSIGN_OR_RAISE(auto made, MakeInput(run_id, input.id, input));
        config.inputs.push_back(std::move(made));
      }
      for (const std::string& output : spec.outputs) {
        // The daemon owns the output that carries the node's stdout (daemon.h).
        if (output == spec.send_stdout_as) continue;
        NodeConfig::Output made{output, protocol::ChannelName(run_id, spec.id, "", output)};
        FERRY_RETURN_NOT_OK(CheckChannel(made.channel));
        config.outputs.push_back(std::move(made));
      }
      if (spec.python) {
        FERRY_ASSIGN_OR_RAISE(launch.program,
                              ResolveProgram(settings.python, "Python interpreter"));
        launch.argv = {settings.python, "-u", spec.path};
      } else {
        FERRY_ASSIGN_OR_RAISE(launch.program,
                              ResolveProgram(spec.path, "the program of node '" + spec.id + "'"));
        launch.argv = {spec.path};
      }
      launch.argv.insert(launch.argv.end(), spec.args.begin(), spec.args.end());
    }

    launch.env["FERRY_NODE_ID"] = spec.id;
    launch.env["FERRY_DATAFLOW"] = run_id;
    if (!dataflow.path.empty()) launch.env["FERRY_DESCRIPTOR"] = dataflow.path;
    if (spec.python || HasPythonOperator(spec)) {
      launch.env["PYTHONUNBUFFERED"] = "1";
      if (!settings.python_path.empty()) {
        // The node's own PYTHONPATH, else the daemon's, comes after the package,
        // and the `dora` shim before everything: `from dora import Node` runs
        // on Ferry even where the dora-rs package is installed (docs/dora.md).
        auto own = spec.env.find("PYTHONPATH");
        std::string rest = own != spec.env.end() ? own->second : EnvOr("PYTHONPATH", "");
        const std::string ours = DoraShimPath(settings.python_path) + ":" + settings.python_path;
        launch.env["PYTHONPATH"] = rest.empty() ? ours : ours + ":" + rest;
      }
    }
    index_of[spec.id] = plan.nodes.size();
    plan.nodes.push_back(std::move(launch));
  }

  // Edges, and each producer's list of consumers.
  auto add_edge = [&](const NodeSpec& consumer, const std::string& consumer_input,
                      const std::string& consumer_label, const InputSpec& input) -> Status {
    if (input.source.kind != InputSource::Kind::kOutput || IsInternal(consumer, input)) {
      return Status::OK();
    }
    auto producer = index_of.find(input.source.node);
    if (producer == index_of.end()) {
      return Status::Invalid("input '" + consumer_label + "' refers to unknown node '" +
                             input.source.node + "'");
    }
    Edge edge;
    edge.producer = input.source.node;
    edge.producer_output = ProducerOutputId(input.source);
    edge.consumer = consumer.id;
    edge.consumer_input = consumer_input;
    edge.label = input.source.text + " -> " + consumer_label;
    // A producer that may restart: the consumer waits for the daemon's word
    // before closing the input (protocol.h).
    const NodeSpec* producer_spec = nullptr;
    for (const NodeSpec& candidate : dataflow.nodes) {
      if (candidate.id == input.source.node) producer_spec = &candidate;
    }
    if (producer_spec != nullptr && producer_spec->restart != RestartPolicy::kNever) {
      for (NodeConfig::Input& made : plan.nodes[index_of.at(consumer.id)].config.inputs) {
        if (made.id == consumer_input) made.producer_may_restart = true;
      }
    }
    plan.nodes[producer->second].consumers.push_back(edge);
    plan.edges.push_back(std::move(edge));
    return Status::OK();
  };
  for (const NodeSpec& spec : dataflow.nodes) {
    if (spec.is_runtime()) {
      for (const OperatorSpec& op : spec.operators) {
        for (const InputSpec& input : op.inputs) {
          FERRY_RETURN_NOT_OK(add_edge(spec, OperatorPortId(op.id, input.id),
                                       spec.id + "/" + op.id + "/" + input.id, input));
        }
      }
    } else {
      for (const InputSpec& input : spec.inputs) {
        FERRY_RETURN_NOT_OK(add_edge(spec, input.id, spec.id + "/" + input.id, input));
      }
    }
  }
  return plan;
}

}  // namespace ferry::flow::daemon
