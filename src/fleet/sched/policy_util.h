// Small helpers shared by the policy_*.cc files (not part of policy.h's seam).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fleet/sched/policy.h"

namespace ferry::fleet::sched::internal {

// Lower-cased copy: GPU models compare case-insensitively.
std::string LowerModel(std::string_view model);

// GPUs a running job holds (over all its tasks).
int RunningGpus(const RunningJob& job);

// What a running job holds in GPUs, CPUs and memory.
Demand RunningDemand(const RunningJob& job);

// Maps the GPUs of running jobs to their models, through the snapshot's nodes.
class GpuModelIndex {
 public:
  explicit GpuModelIndex(const Snapshot& snapshot);
  // GPUs held by `job`, per lower-cased model ("" where the node or GPU is
  // not in the snapshot).
  std::vector<std::pair<std::string, int>> ModelsOf(const RunningJob& job) const;

 private:
  const NodeInfo* FindNode(const TaskPlacement& task) const;

  const Snapshot* snapshot_;
  std::unordered_map<int64_t, int> by_id_;
  std::unordered_map<std::string, int> by_name_;
};

// Shares configured for `path` (1 when unlisted); never negative or NaN.
class ShareTable {
 public:
  explicit ShareTable(const Config& config);
  double Shares(const std::string& path) const;

 private:
  std::unordered_map<std::string, double> shares_;
};

}  // namespace ferry::fleet::sched::internal
