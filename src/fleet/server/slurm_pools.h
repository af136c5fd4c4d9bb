// Slurm pools (docs/slurm.md): the server's controller for every provider of
// type "slurm". One thread per cluster keeps Ferry's view of the cluster and
// Slurm's jobs in step:
//
//  - capacity: the cluster's nodes (in the pools' partitions) are registered
//    as Ferry nodes of their pool, their leases renewed by this controller;
//    what Slurm has given to others (GPUs, CPUs, memory) is recorded as
//    outside use (Store::SetExternalUse), so the scheduler never places on
//    it; a node Slurm drains is unavailable, one it reports down is lost
//    (its jobs requeued);
//  - jobs: an attempt placed on Slurm nodes becomes one Slurm batch job
//    (tagged "ferry:<tag>:<job>:<attempt>" in its comment), whose state is
//    mirrored into the attempt: pending reasons, start, per-task exit codes
//    (from files the job's wrapper writes), TIMEOUT, NODE_FAIL (lost and
//    requeued), PREEMPTED; its output files become the job's logs; a stop
//    is a "stop" file in the attempt's run directory, which makes the task
//    wrappers send SIGTERM, then Slurm's cancel after the grace period;
//  - failures: the Slurm calls go through a circuit breaker; while the
//    controller is unreachable the nodes take no new work, running jobs
//    stay as they are, and attempts not yet handed over go back to the
//    queue after `unreachable_requeue_s`;
//  - restarts: every tagged Slurm job is adopted (its attempt still live) or
//    cancelled (stale); markers in the attempt's run directory make sure an
//    attempt is submitted at most once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/sched.h"
#include "ferry/fleet/slurm.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet::server_internal {

// A `slurm` provider's params (docs/slurm.md#configuration).
struct SlurmSettings {
  std::string endpoint = "cli";  // "cli", "unix:/path.sock", "http(s)://host:port"
  std::string user_name;         // REST with rest_auth/jwt
  std::string token_file;        // holds the JWT
  std::string api_version;       // REST: talk this version instead of probing
  std::string slurm_conf;        // CLI: SLURM_CONF for the tools (and the jobs' scontrol)
  std::string bin_dir;           // CLI: where sbatch & co. live
  double timeout_s = 10;         // per Slurm call
  std::string work_dir;          // shared with the compute nodes: scripts, output, exit codes
  double sync_interval_s = 0.5;  // how often Slurm is read
  std::string node_prefix;       // Ferry node name = prefix + Slurm node name
  std::string tag;               // jobs carry "ferry:<tag>:" in their comment
  std::string path = "/usr/local/bin:/usr/bin:/bin";  // the jobs' PATH
  double unreachable_requeue_s = 60;
  int submit_parallelism = 4;  // Slurm submissions in flight at once
  // Fault injection for tests: the server kills itself (SIGKILL) right after
  // Slurm accepted its Nth submission, before anything of it is recorded.
  int fault_kill_after_submit = 0;
};

// The settings from a provider's params, with defaults that depend on it:
// work_dir <data_dir>/slurm/<name>, node_prefix "<name>-", tag <name>. An
// unknown param or a bad number is kInvalid.
Result<SlurmSettings> SlurmSettingsFromConfig(const sched::ProviderConfig& config,
                                              const std::string& data_dir);

// The client the settings describe (CLI or REST).
Result<std::unique_ptr<slurm::SlurmClient>> MakeSlurmClient(const SlurmSettings& settings);

// Slurm's pending reason as a Ferry reason code: Resources → NO_CAPACITY,
// QOS and association limits → QUOTA_EXCEEDED, BadConstraints →
// CONSTRAINT_UNSATISFIABLE, anything else (Priority, holds, dependencies,
// reservations) → POLICY.
std::string_view FerryReasonForSlurm(std::string_view slurm_reason);

// What one attempt's Slurm job runs: the batch script (srun of the task
// wrapper on every task; it records srun's status) and the task wrapper (the
// FERRY_* and torch-style variables, its own GPU slice when several tasks
// share a node, SIGTERM passed on once (also when <run_dir>/stop appears:
// Ferry's stop), the exit code written to
// <run_dir>/exit.<task>).
struct SlurmScripts {
  std::string batch;
  std::string task;
};
SlurmScripts MakeSlurmScripts(const std::string& run_dir, const std::string& title,
                              const std::vector<std::string>& command, int gpus_per_task,
                              int tasks_per_node);

class SlurmController {
 public:
  struct Options {
    std::string data_dir = ".";
    int64_t lease_ms = 10'000;
    int64_t stop_grace_ms = 10'000;  // when a stop comes without a grace of its own
    int rendezvous_port_min = 29500;
    int rendezvous_port_max = 30499;
    // Called from a cluster's thread when capacity or jobs changed (the
    // scheduler and the agents' long polls should look) and when logs were
    // appended.
    std::function<void()> on_change;
    std::function<void()> on_logs;
    std::function<void(const std::string& what, const Status& status)> log_error;
    std::function<void(const std::string& line)> log_info;
  };

  SlurmController(Store* store, Options options);
  ~SlurmController();  // Stop()

  // A cluster for each provider of type slurm that has none yet (an
  // existing one keeps its settings until the server stops) and the pools
  // each serves from now on. Errors name the provider.
  Status Configure(const sched::Config& config);
  void Start();
  void Stop();
  // Something changed for these nodes (an admission, a cancel, a
  // preemption): their clusters sync now.
  void Wake(const std::set<std::string>& nodes);
  void WakeAll();

  // GET /v1/scheduler: one entry per cluster.
  nlohmann::json StatusJson();
  struct ClusterMetrics {
    std::string name;
    std::string breaker;  // "closed", "open", "half_open"
    bool reachable = false;
    int64_t calls = 0, failures = 0, breaker_opens = 0, submitted = 0;
    int64_t nodes = 0, jobs = 0;
  };
  std::vector<ClusterMetrics> Metrics();

 private:
  class Cluster;
  Store* store_;
  Options options_;
  std::mutex mu_;
  bool started_ = false;
  std::map<std::string, std::unique_ptr<Cluster>> clusters_;
};

}  // namespace ferry::fleet::server_internal
