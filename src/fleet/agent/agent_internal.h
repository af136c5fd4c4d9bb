// Pieces of the agent that tests reach without a server: NVML loading from a
// chosen library, the JSON forms of the agent protocol and how an assignment
// becomes a LaunchSpec.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/store.h"
#include "fleet/agent/input_stager.h"
#include "fleet/agent/task_runner.h"

namespace ferry::fleet::agent_internal {

// DiscoverNvmlGpus with the library path given; empty when it cannot be
// loaded, lacks a symbol, or NVML fails to initialise.
std::vector<GpuInventory> DiscoverNvmlGpusFrom(const char* library);

// "NVIDIA H200" -> "H200"; "NVIDIA GeForce RTX 4090" -> "GeForce-RTX-4090".
std::string ModelFromNvmlName(const std::string& name);

// What the agent knows about itself when it launches a task.
struct NodeContext {
  std::string node_name;
  std::string work_dir;                         // absolute
  std::string ferry_binary;                     // runs `dataflow` specs
  std::map<std::string, std::string> base_env;  // the agent's own environment
  std::string address;  // advertised to the server; MASTER_ADDR when task 0 runs here
};

// One `start` entry of a sync response. Lenient about fields it does not use.
Result<TaskAssignment> ParseAssignment(const nlohmann::json& json);

// One `prefetch` entry of a sync response (inputs to fetch ahead for a job
// that waits); an error names what is missing or malformed.
Result<InputStager::PrefetchOrder> ParsePrefetchOrder(const nlohmann::json& json);

// argv, environment (base env, then spec env, then CUDA_VISIBLE_DEVICES,
// FERRY_* and the rendezvous variables of PyTorch, JAX and MPI-style
// launchers), working directory, memory limit and log path of a task.
LaunchSpec BuildLaunchSpec(const TaskAssignment& assignment, const NodeContext& node);

// The MPI-style hostfile of the task's gang: one line per node, in node-rank
// order, "<address> slots=<tasks there>". BuildLaunchSpec names its path in
// FERRY_HOSTFILE; the agent writes it before starting the task.
std::string GangHostfile(const TaskAssignment& assignment, const NodeContext& node);

// The local address of the route to `server_url`'s host (no packet is sent),
// e.g. "10.0.3.7"; empty when the host cannot be resolved or routed.
std::string LocalAddressToward(const std::string& server_url);

nlohmann::json ToJson(const TaskReport& report);
nlohmann::json ToJson(const TaskRef& ref);

// The process environment as a map.
std::map<std::string, std::string> CurrentEnvironment();

}  // namespace ferry::fleet::agent_internal
