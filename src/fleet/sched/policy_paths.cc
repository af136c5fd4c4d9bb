// Owner paths and the small helpers the policy pieces share.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <utility>

#include "fleet/sched/policy.h"
#include "fleet/sched/policy_util.h"

namespace ferry::fleet::sched::internal {

std::string TenantPath(std::string_view tenant) { return std::string(tenant); }

std::string TeamPath(std::string_view tenant, std::string_view team) {
  std::string path;
  path.reserve(tenant.size() + team.size() + 1);
  path.append(tenant).append("/").append(team);
  return path;
}

std::string UserPath(std::string_view tenant, std::string_view team, std::string_view user) {
  std::string path;
  path.reserve(tenant.size() + team.size() + user.size() + 2);
  path.append(tenant).append("/").append(team).append("/").append(user);
  return path;
}

std::string LowerModel(std::string_view model) {
  std::string out(model);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

namespace {
int TaskGpus(const TaskPlacement& task) {
  return static_cast<int>(std::max(task.gpu_ids.size(), task.gpu_indices.size()));
}
}  // namespace

int RunningGpus(const RunningJob& job) {
  int gpus = 0;
  for (const auto& task : job.tasks) gpus += TaskGpus(task);
  return gpus;
}

Demand RunningDemand(const RunningJob& job) {
  Demand demand;
  demand.gpus = RunningGpus(job);
  const double tasks = static_cast<double>(job.tasks.size());
  demand.cpus = std::isfinite(job.cpus_per_task) ? std::max(0.0, job.cpus_per_task) * tasks : 0;
  demand.memory_mb =
      std::max<int64_t>(0, job.memory_mb_per_task) * static_cast<int64_t>(job.tasks.size());
  return demand;
}

GpuModelIndex::GpuModelIndex(const Snapshot& snapshot) : snapshot_(&snapshot) {
  for (size_t i = 0; i < snapshot.nodes.size(); ++i) {
    const NodeInfo& node = snapshot.nodes[i];
    if (node.id != 0) by_id_.emplace(node.id, static_cast<int>(i));
    by_name_.emplace(node.name, static_cast<int>(i));
  }
}

const NodeInfo* GpuModelIndex::FindNode(const TaskPlacement& task) const {
  if (task.node_id != 0) {
    auto it = by_id_.find(task.node_id);
    if (it != by_id_.end()) return &snapshot_->nodes[static_cast<size_t>(it->second)];
  }
  auto it = by_name_.find(task.node);
  if (it != by_name_.end()) return &snapshot_->nodes[static_cast<size_t>(it->second)];
  return nullptr;
}

std::vector<std::pair<std::string, int>> GpuModelIndex::ModelsOf(const RunningJob& job) const {
  std::vector<std::pair<std::string, int>> out;
  auto add = [&out](std::string_view model, int count) {
    std::string key = LowerModel(model);
    for (auto& [name, n] : out) {
      if (name == key) {
        n += count;
        return;
      }
    }
    out.emplace_back(std::move(key), count);
  };
  for (const auto& task : job.tasks) {
    const NodeInfo* node = FindNode(task);
    const int count = TaskGpus(task);
    if (node == nullptr) {
      if (count > 0) add("", count);
      continue;
    }
    // One model per GPU: by index on the node when given, else by store id.
    for (int k = 0; k < count; ++k) {
      const GpuSlot* slot = nullptr;
      if (static_cast<size_t>(k) < task.gpu_indices.size()) {
        const int index = task.gpu_indices[static_cast<size_t>(k)];
        if (index >= 0 && static_cast<size_t>(index) < node->gpus.size() &&
            node->gpus[static_cast<size_t>(index)].index == index) {
          slot = &node->gpus[static_cast<size_t>(index)];
        } else {
          for (const auto& gpu : node->gpus) {
            if (gpu.index == index) {
              slot = &gpu;
              break;
            }
          }
        }
      } else {
        const int64_t id = task.gpu_ids[static_cast<size_t>(k)];
        for (const auto& gpu : node->gpus) {
          if (gpu.id == id) {
            slot = &gpu;
            break;
          }
        }
      }
      add(slot != nullptr ? std::string_view(slot->model) : std::string_view(), 1);
    }
  }
  return out;
}

ShareTable::ShareTable(const Config& config) {
  for (const auto& share : config.shares) {
    // Zero, negative or NaN shares are refused by Config::Validate; here they
    // become 0 so that no arithmetic sees them.
    const double value = std::isfinite(share.shares) && share.shares > 0 ? share.shares : 0.0;
    shares_[share.path] = value;
  }
}

double ShareTable::Shares(const std::string& path) const {
  auto it = shares_.find(path);
  return it == shares_.end() ? 1.0 : it->second;
}

}  // namespace ferry::fleet::sched::internal
