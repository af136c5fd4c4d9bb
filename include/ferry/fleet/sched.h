// The scheduling core: one library used by `ferry server` and by
// the simulator (`ferry sim`) alike. Each cycle takes a snapshot of the world
// (nodes and their GPUs, running jobs, pending jobs, capacity being
// provisioned) and returns what to do: placements, preemptions, provisioning
// requests, idle cloud nodes to scale down, and a reason for every job left
// pending. The policies (queue ordering, quotas, placement scoring,
// preemption, backfill, burst) come from a Config that can be replaced at any
// time without losing the state that spans cycles (decayed usage for fair
// share, the fair-share preemption rate limit).
//
// Times are seconds as doubles on the caller's clock (Unix time in the server,
// simulated time in the simulator). The core reads no clock of its own except
// to measure its own run time (CycleStats).
//
// Not thread-safe: one thread drives a Scheduler.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/snapshot.h"  // Snapshot, Placement, PendingReason

namespace ferry::fleet::sched {

// ---------------------------------------------------------------- config

// The order in which pending jobs are considered.
enum class Ordering {
  kFifo,       // priority (higher first), then submission time (older first)
  kFairShare,  // Slurm Fair Tree: tenant → team → user by shares over decayed usage;
               // inside one user, priority then age
  kDrf,        // Dominant Resource Fairness across GPUs, CPUs and memory, by tenant
               // (weighted by tenant shares); inside a tenant, priority then age
};
std::string_view ToString(Ordering ordering);  // "fifo", "fair_share", "drf"
std::optional<Ordering> ParseOrdering(std::string_view text);

// How a placement is chosen among the nodes (and pools) that fit.
enum class Scoring {
  kBinPack,   // the node left fullest (fewest free GPUs after placing); on-prem before cloud
  kSpread,    // the node left emptiest
  kCost,      // cheapest GPU-hour among pools meeting the constraints (spot for
              // preemptible jobs when offered); bin-pack inside a pool
  kLatency,   // earliest start: free capacity now beats provisioning; between cloud
              // pools the shortest provisioning delay; bin-pack inside a pool
  kLocality,  // pools holding all of the job's data sets first; otherwise the
              // transfer cost (size × transfer_cost_per_gb) is added to the price
};
std::string_view ToString(Scoring scoring);  // "binpack", "spread", "cost", "latency", "locality"
std::optional<Scoring> ParseScoring(std::string_view text);

// What a node of a pool looks like (cloud pools: what a provider creates;
// on-prem pools in the simulator: every node).
struct NodeShape {
  std::string gpu_model = "H200";
  int gpus = 8;
  int64_t gpu_memory_mb = int64_t{141} * 1024;
  double cpus = 64;
  int64_t memory_mb = int64_t{1024} * 1024;
};

// The Slurm account and QoS for the jobs of a tenant, team or user
// ("tenant", "tenant/team" or "tenant/team/user").
struct SlurmAccountConfig {
  std::string path;
  std::string account;  // empty: the pool's account
  std::string qos;      // empty: the pool's qos
};

// What makes a pool a Slurm cluster's (docs/slurm.md): its nodes, GPUs and
// their use come from Slurm, and jobs placed on it run as Slurm jobs.
struct SlurmPoolConfig {
  std::string partition;  // empty: the cluster's default partition, and every node it lists
  std::string account;    // for jobs no `accounts` entry covers; empty: Slurm's default
  std::string qos;
  std::vector<SlurmAccountConfig> accounts;  // the longest matching path wins
  // The Slurm time limit of jobs without max_runtime_seconds; 0: the partition's.
  int time_limit_minutes = 0;

  // The account and QoS for a job of tenant/team/user.
  std::pair<std::string, std::string> AccountFor(const std::string& tenant, const std::string& team,
                                                 const std::string& user) const;
};

struct PoolConfig {
  std::string name;
  bool cloud = false;               // nodes come from a provider on demand
  std::string provider;             // cloud pools: a ProviderConfig name
  double price_per_gpu_hour = 0;    // on-prem: amortized cost; cloud: what the provider charges
  bool spot = false;                // spot capacity: cheaper, may be interrupted
  double provisioning_delay_s = 0;  // expected time from request to a READY node (cloud)
  int max_nodes = 0;                // cloud: most nodes at once (0: none may be provisioned)
  int nodes = 0;                    // on-prem, simulator only: how many nodes of `node` shape
  int nodes_per_domain = 0;         // simulator only: interconnect domain size (0: one domain)
  NodeShape node;
  std::vector<std::string> datasets;  // data sets held in this pool (for kLocality)
  double idle_timeout_s = 300;        // cloud: nodes idle this long are scaled down
  // Set: a Slurm pool, reached through `provider` (a ProviderConfig of type "slurm").
  std::optional<SlurmPoolConfig> slurm;
  // Slurm pools: the expected wait in Slurm's own queue once Ferry hands a
  // job over (latency scoring counts it like a provisioning delay; `ferry
  // sim` starts jobs on the pool this much later).
  double queue_delay_s = 0;
};

// Jobs choose a pool set by name (JobSpec::pool_set / PendingJob::pool_set);
// the set's scoring policy ranks the nodes of its pools.
struct PoolSet {
  std::string name;
  std::vector<std::string> pools;  // empty: every pool
  Scoring scoring = Scoring::kBinPack;
};

// A GPU quota (Kueue-style). `path` is "tenant", "tenant/team" or
// "tenant/team/user"; a job must fit every quota on its path. Quotas of one
// cohort lend unused nominal capacity to each other.
struct QuotaConfig {
  std::string path;
  std::string gpu_model;  // empty: all models counted together
  int nominal_gpus = 0;   // guaranteed (when the fleet has it)
  std::optional<int>
      borrowing_limit;  // most GPUs above nominal borrowed from the cohort; unset: no limit
  std::optional<int> lending_limit;  // most of its unused nominal lent out; unset: all of it
  std::string cohort = "default";
};

// Fair-share weight of a tenant, team or user (same path form). Unlisted: 1.
struct ShareConfig {
  std::string path;
  double shares = 1;
};

struct DatasetConfig {
  std::string name;
  double size_gb = 0;
};

struct PreemptionConfig {
  bool priority = true;  // a pending job may preempt preemptible jobs of lower priority
  bool reclaim = true;  // a job within its nominal quota may preempt jobs running on borrowed quota
  double grace_s = 30;  // between the signal (SIGTERM) and the kill, for checkpointing
  // Fair-share (reclaim) preemptions allowed per window; priority preemptions are not limited.
  int fair_share_max = 10;
  double fair_share_window_s = 60;
};

struct BackfillConfig {
  bool enabled = true;
  int reservations = 1;  // blocked jobs (in queue order) that get a reserved start
  // When a blocked job's start cannot be planned (the capacity it needs is held
  // by jobs without a max runtime), still hold the nodes it would use: jobs
  // behind it may take only what the blocked job will not need there (drain).
  // false: no reservation then, and nothing behind it is held back.
  bool drain = true;
};

struct BurstConfig {
  bool enabled = true;
  double min_pending_s =
      0;  // a job waits this long on on-prem before cloud nodes are requested for it
};

// Provider adapters (include/ferry/fleet/provider.h).
struct ProviderConfig {
  std::string name;
  // "local": real `ferry agent` processes on this machine (cloud pools);
  // "slurm": a Slurm cluster (Slurm pools; params in docs/slurm.md).
  std::string type = "local";
  int max_attempts = 4;  // per call, with exponential back-off and full jitter
  double backoff_base_s = 0.2;
  double backoff_max_s = 5;
  int breaker_failures = 5;                   // consecutive failed calls that open the circuit
  double breaker_open_s = 30;                 // then one trial call (half-open)
  double spot_interruptions_per_hour = 0;     // local: per spot node
  std::map<std::string, std::string> params;  // type-specific settings
};

struct Config {
  Ordering ordering = Ordering::kFifo;
  std::vector<PoolConfig> pools;   // nodes of unlisted pools: on-prem, price 0
  std::vector<PoolSet> pool_sets;  // empty: one set "default" of every pool, default_scoring
  Scoring default_scoring = Scoring::kBinPack;
  std::vector<QuotaConfig> quotas;
  std::vector<ShareConfig> shares;
  std::vector<DatasetConfig> datasets;
  double transfer_cost_per_gb = 0.02;
  double usage_half_life_s = 7 * 86400;  // fair-share usage decay
  PreemptionConfig preemption;
  BackfillConfig backfill;
  BurstConfig burst;
  std::vector<ProviderConfig> providers;

  // Names unique, references resolve (pool sets → pools, cloud pools →
  // providers), numbers in range. The message names the field
  // ("pools[2].price_per_gpu_hour: must be >= 0").
  Status Validate() const;
};

// The snapshot (GpuSlot, NodeInfo, RunningJob, PendingJob, Snapshot) is in
// ferry/fleet/snapshot.h: the store loads it and the server and the simulator fill it in.

// ---------------------------------------------------------------- decision

struct Preemption {
  int64_t job_id = 0;
  int attempt = 1;
  std::string reason;   // reason::kPreemptedByPriority or reason::kPreemptedForFairShare
  int64_t for_job = 0;  // the pending job it makes room for
  double grace_s = 0;   // signal now, kill after this
};

struct ProvisionRequest {
  std::string pool;
  int nodes = 0;
  std::vector<int64_t> for_jobs;
};

struct ScaleDown {
  std::string pool;
  std::string node;
  double idle_s = 0;
};

struct CycleStats {
  int pending = 0;     // jobs in the snapshot
  int considered = 0;  // jobs the cycle tried to place
  int placed = 0;
  int backfilled = 0;  // placed ahead of a reservation
  int preempted = 0;
  double elapsed_ms = 0;  // wall time of Cycle()
};

// A quota after a cycle's placements and preemptions, in GPUs (metrics and
// GET /v1/scheduler). `lent`: the share of what the rest of its (cohort,
// model) group borrows that this quota's unused nominal covers, split over
// the group's lenders in proportion to what each can lend.
struct QuotaStanding {
  std::string path;
  std::string gpu_model;  // empty: all models
  std::string cohort;
  int64_t nominal = 0;
  std::optional<int64_t> borrowing_limit;
  std::optional<int64_t> lending_limit;
  int64_t used = 0;
  int64_t borrowed = 0;  // used above nominal
  double lent = 0;
};

struct Decision {
  std::vector<Placement> placements;        // all tasks of each gang, or the job is absent
  std::vector<Preemption> preemptions;      // running jobs to signal (each job once)
  std::vector<ProvisionRequest> provision;  // cloud nodes to request now
  std::vector<ScaleDown> scale_down;        // idle cloud nodes to give back
  std::vector<PendingReason> pending;       // one per pending job not placed
  std::vector<QuotaStanding> quotas;        // every configured quota, in config order
  CycleStats stats;
};

// A tenant, team or user with its fair-share standing (for reports and tests).
struct ShareStanding {
  std::string path;
  double shares = 1;
  double usage = 0;  // decayed GPU-seconds
  double fair_share =
      0;  // Fair Tree factor in (0, 1]: higher is further below its share, served sooner
};

class Scheduler {
 public:
  // Fails with the Validate() message when the config is invalid.
  static Result<std::unique_ptr<Scheduler>> Make(Config config);
  virtual ~Scheduler() = default;

  // Replaces the policies. Usage history and the preemption rate limit carry
  // over. An invalid config is refused and the old one stays.
  virtual Status Reconfigure(Config config) = 0;
  virtual const Config& config() const = 0;

  // One scheduling cycle. Also advances decayed usage to snapshot.now_s from
  // the running jobs (so call it with non-decreasing now_s).
  virtual Decision Cycle(const Snapshot& snapshot) = 0;

  // The soft quota check at submission: an error text when the job can never
  // run under its quotas (more GPUs than nominal + borrowing limit on some
  // quota of its path), nullopt otherwise. Scheduling checks quotas hard.
  virtual std::optional<std::string> CheckSubmission(const PendingJob& job) const = 0;

  // The capacity check at submission, with the reasoning of a cycle: an
  // error text when neither `nodes` (pass those that may take work again: all
  // but LOST nodes) nor the cloud pools of the job's pool set at their
  // max_nodes (counted only with burst enabled) could ever hold the whole
  // gang; nullopt otherwise (also for jobs a cycle refuses as malformed, such
  // as an unknown pool set). The text is the CONSTRAINT_UNSATISFIABLE message
  // a cycle would give.
  virtual std::optional<std::string> CheckCapacity(const PendingJob& job,
                                                   const std::vector<NodeInfo>& nodes) const = 0;

  // Fair-share standing of every tenant, team and user seen so far.
  virtual std::vector<ShareStanding> FairShare() const = 0;
};

}  // namespace ferry::fleet::sched
