// What one scheduling cycle reads and what it decides per job, as plain
// values: the snapshot of the world (nodes with their GPUs, running jobs with
// their allocations, pending jobs, capacity being provisioned) and the
// placements and pending reasons a cycle returns. The scheduling core
// (ferry/fleet/sched.h) reads these; the store commits placements and
// reasons; the server and the simulator build snapshots. No behaviour here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ferry/fleet/model.h"  // TaskPlacement

namespace ferry::fleet {

// A gang placed whole: one TaskPlacement per task.
struct Placement {
  int64_t job_id = 0;
  int attempt = 0;
  std::vector<TaskPlacement> tasks;  // one per task of the gang
};

// Why a pending job was not placed (one per job and cycle).
struct PendingReason {
  int64_t job_id = 0;
  std::string reason;  // reason::kNoCapacity, ...
  std::string message;
  // Where the job stood in the cycle's queue order among the jobs it did not
  // place: how many were ahead of it in all, and how many of its own team
  // (tenant/team). -1 when the job never reached the queue (refused before
  // it, e.g. CONSTRAINT_UNSATISFIABLE).
  int queue_position = -1;
  int ahead_in_team = -1;
  // The nodes the cycle holds for it: a backfill reservation (planned_start_s
  // is when it starts there) or a drain (planned_start_s is infinity: it
  // starts once enough of the jobs there ended). Empty: no node is held for
  // it. Agents prefetch its inputs on these nodes while it waits.
  std::vector<std::string> planned_nodes;
  double planned_start_s = 0;
};

}  // namespace ferry::fleet

namespace ferry::fleet::sched {

struct GpuSlot {
  int64_t id = 0;     // store id (0 in the simulator is fine)
  int index = 0;      // on its node
  std::string model;  // compared case-insensitively (CanonicalGpuModel)
  int64_t memory_mb = 0;
  bool free = true;  // no open allocation
};

struct NodeInfo {
  int64_t id = 0;
  std::string name;
  std::string pool;
  std::string domain;  // interconnect domain (NVLink/IB island); empty: the node alone
  std::vector<GpuSlot> gpus;
  double cpus = 0;        // total
  int64_t memory_mb = 0;  // total
  double cpus_used = 0;   // by open allocations
  int64_t memory_mb_used = 0;
  bool schedulable = true;   // READY and not drained (others count only for "could ever fit")
  double idle_since_s = -1;  // when its last task ended (-1: busy, or never used)
};

struct RunningJob {
  int64_t job_id = 0;
  int attempt = 1;
  std::string tenant, team, user;
  int priority = 0;
  bool preemptible = false;
  double started_s = 0;      // when this attempt was admitted
  double max_runtime_s = 0;  // 0: unlimited (never ends, for backfill planning)
  double cpus_per_task = 0;
  int64_t memory_mb_per_task = 0;
  std::vector<TaskPlacement> tasks;  // node_id/node and gpu_ids/gpu_indices as placed
  bool terminating = false;          // signalled (preempted or stopping), resources not yet free
  int64_t preempted_for = 0;         // when terminating by preemption: the job it makes room for
  std::string preempt_reason;        // when terminating by preemption: reason::kPreemptedBy...
};

struct PendingJob {
  int64_t job_id = 0;
  int attempt = 1;
  std::string tenant, team, user;
  int tasks = 1;
  int gpus_per_task = 0;
  std::vector<std::string> gpu_models;  // any of these; empty: any
  double cpus_per_task = 0;
  int64_t memory_mb_per_task = 0;
  int priority = 0;
  bool preemptible = false;
  double submitted_s = 0;    // first submission (age; attempts keep it)
  double max_runtime_s = 0;  // 0: unlimited (never backfilled ahead of a reservation)
  std::vector<std::string> datasets;
  std::string topology;  // "" (none), "same_node" or "same_domain": a preference, not a rule
  std::string pool_set;  // "" : the first pool set
  // Data locality. input_digests: what the job reads, one digest per input
  // (InputDigest, model.h), and input_bytes their total size; ToPendingJob
  // fills both. cached_bytes: per node (NodeInfo::id), the bytes of those
  // inputs its cache holds now, only nodes holding some; the server fills it
  // from the agents' cache reports (the simulator may too). Empty: no node
  // holds any, and the cycle places the job exactly as without inputs.
  std::vector<std::string> input_digests;
  int64_t input_bytes = 0;
  std::vector<std::pair<int64_t, int64_t>> cached_bytes;  // (node id, bytes > 0)
};

// The store loads nodes, running and pending jobs (Store::LoadSchedulingSnapshot);
// the caller sets the clock (now_s), the nodes being provisioned and each
// node's idle_since_s. The simulator builds the same shape from its own world.
struct Snapshot {
  double now_s = 0;
  std::vector<NodeInfo> nodes;              // every node, schedulable or not
  std::vector<RunningJob> running;          // open allocations, by job
  std::vector<PendingJob> pending;          // any order: the policy orders them
  std::map<std::string, int> provisioning;  // pool → nodes requested and not yet registered
};

// ---- From the fleet model to what a cycle reads (the store and the server
// use these; times become seconds).

// A registered node: schedulable when READY, not drained and not made
// unavailable by its resource manager; a GPU free when no open allocation
// and no outside (resource manager) use holds it; its "domain" label as its
// interconnect domain. Usage (cpus_used, memory_mb_used) starts at the
// outside use; the store adds its open allocations. idle_since_s keeps its default.
NodeInfo ToNodeInfo(const Node& node);

// An attempt of `job` holding open allocations (`tasks`), admitted at
// `admitted_at_ms`. Not terminating: the caller knows whether it is.
RunningJob ToRunningJob(const Job& job, int attempt, std::vector<TaskPlacement> tasks,
                        int64_t admitted_at_ms);

// A job waiting (or about to be submitted): its spec, owners, and first
// submission time.
PendingJob ToPendingJob(const Job& job);

}  // namespace ferry::fleet::sched
