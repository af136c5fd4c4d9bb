// What the daemon starts for each node of a dataflow: the node's NodeConfig
// (channel names, timer inputs, queues), its command line, environment and
// working directory, and the edges of the graph (who consumes what), computed
// once before anything runs. Pure functions of the descriptor and the
// settings, so they are tested without starting a process.
//
// Thread safety: the functions are thread-safe; the structs are plain values.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/flow/dataflow.h"
#include "ferry/flow/node.h"

namespace ferry::flow::daemon {

// Where the programs that nodes need are found.
struct LaunchSettings {
  // The `ferry` executable that hosts runtime nodes (`ferry runtime`).
  std::string ferry_exe;
  // The Python interpreter for .py nodes and runtimes with Python operators
  // (a path, or a name looked up on PATH).
  std::string python;
  // The directory that holds the `ferry` Python package; prepended to PYTHONPATH.
  std::string python_path;
};

// $FERRY_PYTHON, else for an installed ferry (InstalledPythonPath) "python3"
// and for a build tree's the interpreter the build was configured with when
// it exists, else "python3"; $FERRY_PYTHONPATH, else the installed package's
// directory or the checkout's python/; `ferry_exe` is /proc/self/exe resolved.
LaunchSettings DefaultLaunchSettings();

// The directory to put on PYTHONPATH for a ferry installed at `ferry_exe`
// (`cmake --install`: <prefix>/lib/ferry/python; a wheel: the site-packages
// holding the ferry package), or "" for a build tree's ferry.
std::string InstalledPythonPath(const std::string& ferry_exe);

// The directory holding Ferry's `dora` package (the dora-rs Python API on
// Ferry's node API) inside the ferry package found at `python_path`; it comes
// first on the PYTHONPATH of Python nodes and Python runtimes.
std::string DoraShimPath(const std::string& python_path);

// One producer -> consumer connection.
struct Edge {
  std::string producer;         // node id
  std::string producer_output;  // output id in the producer's NodeConfig
  std::string consumer;         // node id
  std::string consumer_input;   // input id in the consumer's NodeConfig
  // "camera/image -> sink/image" ("runtime/detect/boxes -> sink/boxes").
  std::string label;
};

struct NodeLaunch {
  std::string node;
  // restart_count is filled in at each start.
  NodeConfig config;
  // The executable (absolute) and its argv (argv[0] included).
  std::string program;
  std::vector<std::string> argv;
  // Variables set on top of the daemon's environment (FERRY_* and the node's env:).
  std::map<std::string, std::string> env;
  std::string working_directory;
  // Inputs of other nodes fed by this node's outputs (sent `reconnect` after a restart).
  std::vector<Edge> consumers;
};

struct Plan {
  std::string run_id;
  std::vector<NodeLaunch> nodes;  // in descriptor order
  std::vector<Edge> edges;        // in descriptor order of the consumers
};

// "df-<pid>-<4 hex digits>".
std::string GenerateRunId();
// A run name given with --name: 1..48 characters of letters, digits, '_',
// '-' and '.', not starting with '.' or '-'. Invalid saying why.
Status CheckRunName(const std::string& name);

// Input and output ids of a runtime node's NodeConfig: "<operator>/<id>".
std::string OperatorPortId(const std::string& operator_id, const std::string& port);

// Builds every node's launch. Invalid when a channel name would be too long
// for the transport or an interpreter cannot be found.
Result<Plan> PlanDataflow(const Dataflow& dataflow, const std::string& run_id,
                          const LaunchSettings& settings);

}  // namespace ferry::flow::daemon
