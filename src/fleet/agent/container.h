// Tasks in container images (docs/fleet-images.md): a task whose job names
// an `image` runs as `podman run` of the image by its digest, with the
// task's working directory, inputs (read-only), checkpoint directory and
// hostfile mounted at the same paths as on the node, the FERRY_* and
// rendezvous environment and the spec's env passed in, the host network,
// and the node's GPUs by CDI. The podman process is the task's process for
// the TaskRunner: its signals reach the container (podman proxies them,
// through an init process in the container), its exit code is the
// container's. ContainerJanitor removes a container whose podman process
// was killed before the container ended. Not thread-safe: the agent's loop
// owns both.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/store.h"
#include "fleet/agent/task_runner.h"

namespace ferry::fleet::agent_internal {

struct ContainerOptions {
  std::string podman = "podman";  // looked up in the task's PATH unless it has a '/'
  // Registries (host[:port]) pulled from with --tls-verify=false besides
  // loopback ones.
  std::vector<std::string> insecure_registries;
  std::string auth_file;  // podman --authfile; empty: podman's default
  std::string node_name;  // labels the containers this agent starts
  // The agent's work directory: a marker there says containers were
  // started, so that the next agent there removes what a killed one left.
  std::string state_dir;
  // The node's GPUs are real (NVML): pass the task's ones as CDI devices
  // nvidia.com/gpu=<index>. False for declared GPUs (tests, partial nodes).
  bool cdi_gpus = false;
};

// What a container task mounts besides its working directory.
struct ContainerMounts {
  std::vector<std::string> read_only;        // inputs, code: mounted :ro
  std::vector<std::string> writable;         // the checkpoint directory
  std::vector<std::string> read_only_files;  // the hostfile, when it exists
};

// "ferry-<job>-<attempt>-<task>": one container per task attempt.
std::string ContainerName(const TaskRef& ref);

// The image podman runs: <registry>/<repository>@<digest> when the server
// resolved a digest, else the reference as given.
std::string ImageToRun(const JobSpec& spec);

// Turns `launch`, built for a process (BuildLaunchSpec, then the staging
// variables), into the `podman run` of the same command in the spec's
// image. `base_env` is the agent's own environment: the container gets
// every variable of launch->env that differs from it, and the spec's env;
// podman itself keeps the whole environment (PATH, HOME, XDG_RUNTIME_DIR,
// CONTAINERS_CONF). The memory limit becomes the container's RLIMIT_AS, as
// a process task's is, and no longer applies to podman.
void WrapInContainer(const ContainerOptions& options, const JobSpec& spec,
                     const std::vector<int>& gpu_indices, const ContainerMounts& mounts,
                     const std::map<std::string, std::string>& base_env, LaunchSpec* launch);

// podman pull of ImageToRun(spec), with the registry flags `podman run`
// gets: the agent pulls while staging, so the timeline shows it apart from
// the task's own time.
std::vector<std::string> PullArgv(const ContainerOptions& options, const JobSpec& spec);

// podman rm --force --time 0 <names...>
std::vector<std::string> RemoveContainersArgv(const ContainerOptions& options,
                                              const std::vector<std::string>& names);

// `program` as an absolute path: kept when it has a '/', else found in PATH.
Result<std::string> FindProgram(const std::string& program);

// This process's environment as a map (what podman is started with).
std::map<std::string, std::string> ProcessEnvironment();

class ContainerJanitor {
 public:
  explicit ContainerJanitor(ContainerOptions options) : options_(std::move(options)) {}

  // A container task was started (the first one also writes the marker).
  void Started(const TaskRef& ref);
  // At the agent's start: when the marker says an earlier agent in this
  // work directory started containers, removes every container labelled
  // with this node's name (an agent killed with SIGKILL leaves its tasks'
  // containers running; the server has written those attempts off) and
  // drops the marker. Returns how many it removed; no podman call without
  // the marker.
  Result<int> RemoveLeftovers();
  // A task's exit (or launch failure) was reported: when it was a container
  // task, its container is removed in the background (a no-op when podman's
  // --rm already did). Tasks without a container are ignored.
  void Ended(const TaskRef& ref);
  bool Knows(const TaskRef& ref) const { return started_.count(ContainerName(ref)) > 0; }

  const ContainerOptions& options() const { return options_; }

 private:
  std::string Marker() const;

  ContainerOptions options_;
  std::set<std::string> started_;
  bool marked_ = false;
};

// Runs argv with stdin, stdout and stderr on /dev/null and waits for it on a
// detached thread (the agent does not wait for a cleanup).
void RunDetached(const std::vector<std::string>& argv);

}  // namespace ferry::fleet::agent_internal
