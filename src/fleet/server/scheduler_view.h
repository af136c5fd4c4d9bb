// What the server adds around the scheduling core (include/ferry/fleet/sched.h):
// the idle time of nodes in the store's snapshot, the nodes of the submission
// check, and the JSON of GET /v1/scheduler. Internal to src/fleet/server;
// free of HTTP state so the tests reach it.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/sched.h"

namespace ferry::fleet::server_internal {

// Since when each node has held no allocation. A node seen busy forgets its
// time; a node first seen free (new, or free when the server started) counts
// from that moment, so a restart never scales a node down early.
class IdleTracker {
 public:
  // A node is busy while a GPU of it is taken or a running job has a task on
  // it (CPU-only tasks too).
  void Update(const sched::Snapshot& snapshot, int64_t now_ms);
  // -1 while busy or unknown.
  int64_t IdleSinceMs(int64_t node_id) const;
  // Sets every node's idle_since_s (seconds; -1 while busy or unknown).
  void Apply(sched::Snapshot* snapshot) const;

 private:
  std::unordered_map<int64_t, int64_t> idle_since_ms_;
};

// The nodes that count for "could this job ever run" at submission: every
// node that is not LOST (drained ones may be undrained), as the core sees them.
std::vector<sched::NodeInfo> CapacityNodes(const std::vector<Node>& nodes);

// ---- GET /v1/scheduler.
nlohmann::json SchedulerConfigJson(const sched::Config& config);
nlohmann::json CycleStatsJson(const sched::CycleStats& stats);
nlohmann::json FairShareJson(const std::vector<sched::ShareStanding>& standings);

}  // namespace ferry::fleet::server_internal
