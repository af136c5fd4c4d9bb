// What the server adds around the scheduling core (include/ferry/fleet/sched.h):
// the idle time of nodes in the store's snapshot, the nodes of the submission
// check, and the JSON of GET /v1/scheduler. Internal to src/fleet/server;
// free of HTTP state so the tests reach it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
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

// The checks of a submission (quotas, "could it ever run"), kept off the
// scheduler's lock and off the store: a scheduling core of its own with the
// same config, the capacity nodes re-read at most every `refresh_ms`, and the
// capacity verdict remembered per job shape until they are. A fleet of 10,000
// nodes then costs a submission a map lookup instead of a read of every node
// and an index of them. A node that joins or leaves counts within refresh_ms.
class SubmissionChecker {
 public:
  explicit SubmissionChecker(int64_t refresh_ms = 1000) : refresh_ms_(refresh_ms) {}

  // The config the checks follow (at start and after every reload).
  Status Configure(const sched::Config& config);

  struct Verdict {
    std::optional<std::string> over_quota;     // a quota could never give it
    std::optional<std::string> unsatisfiable;  // no node or cloud pool could ever hold it
  };
  // The next Check reads the nodes again (a node registered, was drained,
  // lost or removed).
  void NodesChanged() {
    std::lock_guard<std::mutex> lock(mu_);
    loaded_ = false;
  }
  // `load_nodes` is called when the nodes are older than refresh_ms or
  // NodesChanged was called since.
  Result<Verdict> Check(const sched::PendingJob& job,
                        const std::function<Result<std::vector<Node>>()>& load_nodes,
                        int64_t now_ms);

 private:
  static std::string ShapeKey(const sched::PendingJob& job);

  const int64_t refresh_ms_;
  std::mutex mu_;
  std::unique_ptr<sched::Scheduler> core_;
  std::vector<sched::NodeInfo> capacity_;
  int64_t loaded_ms_ = 0;
  bool loaded_ = false;
  std::unordered_map<std::string, std::optional<std::string>> verdicts_;
};

// ---- GET /v1/scheduler.
nlohmann::json SchedulerConfigJson(const sched::Config& config);
nlohmann::json CycleStatsJson(const sched::CycleStats& stats);
nlohmann::json FairShareJson(const std::vector<sched::ShareStanding>& standings);

}  // namespace ferry::fleet::server_internal
