// Discrete-event simulation of a GPU cluster driven by the real scheduling
// core (include/ferry/fleet/sched.h): a trace of jobs arrives, the Scheduler
// places, preempts and bursts to the cloud, and the simulator plays out what
// follows (completions, preemption kills after the grace period, cloud nodes
// coming up after their provisioning delay, spot interruptions, timeouts).
// The event model and its simplifications are described in docs/fleet-sim.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/sched.h"
#include "fleet/sim/trace.h"

namespace ferry::fleet::sim {

// When the simulator runs a scheduling cycle.
enum class CycleMode {
  // After something changed (arrival, completion, kill, node up or gone) or a
  // timed condition came due (burst min_pending_s, idle cloud node, a job held
  // by a policy), but at most one cycle every cycle_s.
  kOnChange,
  // Every cycle_s while work remains, whether or not anything changed.
  kPeriodic,
};

// How a job's inputs reach the nodes it is placed on. A job's inputs are its
// data sets, each as large as the config's `datasets[].size_gb` (unlisted: 0).
enum class Staging : uint8_t {
  kOff,             // inputs cost nothing (no staging modelled)
  kStartThenFetch,  // the job holds its GPUs and its clock runs while it downloads
                    // every input itself, on every attempt (no node cache)
  kStageOnAdmit,    // the agent fetches what the node cache lacks once the job is
                    // placed, then starts it (Ferry's agents today)
  kPrefetch,        // as kStageOnAdmit, but the fetch onto the job's nodes began when the
                    // job was queued: only what the wait could not hide is left at placement
};
// "off", "start-then-fetch", "stage-on-admit", "prefetch".
std::string_view ToString(Staging staging);
std::optional<Staging> ParseStaging(std::string_view text);

struct StagingOptions {
  Staging policy = Staging::kOff;
  double gbps = 10;        // fetch bandwidth of one node, Gbit/s (> 0)
  double cache_gb = 2000;  // node cache capacity, GB (10^9 bytes); 0: nothing is kept
  // kPrefetch: at most this many seconds of a job's wait, the last before its
  // placement, are used to fetch (0: the whole wait, as if the nodes were known
  // at submission). Models how far ahead the scheduler knows the job's nodes.
  double prefetch_window_s = 0;
};

struct SimOptions {
  double cycle_s = 5;  // >= 0; 0 with kOnChange: a cycle at every instant something changed
  CycleMode cycle_mode = CycleMode::kOnChange;
  // What a preempted or spot-interrupted job keeps: false (the default) restarts it from
  // zero; true resumes it with the work it had done (as if it checkpointed in its grace period).
  bool checkpoint = false;
  uint64_t seed = 1;      // spot interruptions
  double max_time_s = 0;  // stop the run at this simulated time (0: when no work remains)
  StagingOptions staging;
};

// How a job ended up.
enum class JobEnd {
  kCompleted,   // ran its whole duration
  kTimedOut,    // killed at max_runtime_s (failed)
  kRejected,    // refused at submission: can never fit its quotas (failed)
  kUnfinished,  // still pending or running when the run stopped
};
std::string_view ToString(JobEnd end);  // "completed", "timed_out", "rejected", "unfinished"

struct JobOutcome {
  const TraceJob* job = nullptr;  // into the trace passed to Simulate (must outlive the result)
  JobEnd end = JobEnd::kUnfinished;
  double first_start_s = -1;   // first attempt admitted (-1: never)
  double last_start_s = -1;    // start of the last attempt
  double end_s = -1;           // completed, timed out or rejected (-1: unfinished)
  int attempts = 0;            // attempts started
  int preemptions = 0;         // attempts ended by preemption
  int interruptions = 0;       // attempts ended by a spot interruption
  double gpu_seconds = 0;      // GPU time held over all attempts (lost work included)
  double cost = 0;             // gpu_seconds priced at each node's pool price
  std::string pool;            // pool of the last attempt's first task
  bool cloud = false;          // whether the last attempt ran (partly) on cloud nodes
  std::string pending_reason;  // unfinished jobs: the core's last reason
  // Start times count from when an attempt really runs: on a Slurm pool's
  // nodes, queue_delay_s after its placement (its GPUs are held from the placement).
  double last_placed_s = -1;  // placement of the last attempt (-1: never placed)
  // Staging, summed over attempts (all 0 with Staging::kOff). A gang's attempt stages
  // until its slowest node is done; its GPUs idle meanwhile.
  double staging_s = 0;      // seconds attempts held their GPUs waiting for inputs
  double staging_gpu_s = 0;  // GPU-seconds idle while staging
  double input_gb = 0;       // inputs needed, per node and attempt
  double cached_gb = 0;      // of which already in the node cache at placement
  double prefetched_gb = 0;  // fetched while the job was queued (hidden by the wait)
  double fetched_gb = 0;     // fetched after placement, on the GPUs' time
};

// The cluster's state after the events of one instant.
struct TimePoint {
  double t = 0;
  int onprem_gpus = 0, onprem_busy = 0;
  int cloud_gpus = 0, cloud_busy = 0;  // cloud_gpus: on READY nodes
  int pending = 0;                     // jobs waiting (submitted, not running)
  int running = 0;                     // jobs holding GPUs (terminating ones too)
};

// What one pool cost and delivered.
struct PoolUsage {
  std::string name;
  bool cloud = false;
  bool spot = false;
  bool slurm = false;        // a Slurm cluster's pool (on-prem-like: its nodes always exist)
  double queue_delay_s = 0;  // Slurm: from placement to the start of the run
  double price_per_gpu_hour = 0;
  int gpus_per_node = 0;
  int64_t nodes_provisioned = 0;  // cloud: nodes requested and created
  int64_t nodes_removed = 0;      // cloud: scaled down or interrupted
  int peak_nodes = 0;
  double billed_node_s = 0;  // on-prem: nodes × run time; cloud: request to removal
  double ready_gpu_s = 0;    // GPU-seconds on READY nodes (available capacity)
  double busy_gpu_s = 0;     // GPU-seconds held by jobs
  double cost = 0;           // billed_node_s × gpus_per_node × price / 3600
  int64_t attempts = 0;      // attempts placed with their first task here
};

// "onprem", "slurm", "cloud" or "spot".
std::string_view PoolKind(const PoolUsage& pool);

// A tenant's GPU share over the run, for the share-based fairness index.
struct TenantShare {
  std::string tenant;
  double weight = 1;          // its fair-share weight (config `shares`, path = tenant)
  double held_gpu_s = 0;      // ∫ GPUs its jobs held dt
  double demand_gpu_s = 0;    // ∫ GPUs its submitted, unfinished jobs asked for dt
  double entitled_gpu_s = 0;  // ∫ its weighted max-min fair share of the READY GPUs dt
};

struct SimResult {
  Staging staging = Staging::kOff;   // the model the run used
  std::vector<JobOutcome> jobs;      // in trace order
  std::vector<TenantShare> tenants;  // by name
  std::vector<TimePoint> timeline;   // one point per instant at which the state changed
  std::vector<PoolUsage> pools;      // in config order
  double start_s = 0;                // earliest submission
  double end_s = 0;                  // last job end (or where the run stopped)
  int64_t cycles = 0;
  int64_t placements = 0;
  int64_t preemptions = 0;         // victims killed after their grace period
  int64_t spot_interruptions = 0;  // spot nodes taken back
  int64_t interrupted_jobs = 0;    // attempts ended by those interruptions
  int64_t conflicts = 0;           // placements the cluster refused (GPU not free; a core bug)
  bool stopped_early = false;      // max_time_s reached, or pending jobs could never run
  double core_ms_total = 0;        // wall time inside Scheduler::Cycle
  double core_ms_max = 0;
  double wall_s = 0;  // wall time of the whole simulation
};

// Runs `trace` (any order; replayed by submit_s) on a cluster built from `config`.
// On-prem and Slurm pools: PoolConfig.nodes nodes of PoolConfig.node, in interconnect
// domains of nodes_per_domain. Cloud pools start empty. Spot pools are interrupted at
// their provider's spot_interruptions_per_hour. A job placed on a Slurm pool holds its
// GPUs from the placement and runs queue_delay_s later. No provider is contacted.
// Fails on an invalid config or trace.
Result<SimResult> Simulate(const sched::Config& config, const std::vector<TraceJob>& trace,
                           const SimOptions& options);

}  // namespace ferry::fleet::sim
