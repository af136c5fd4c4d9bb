// Owner paths and the small helpers the policy pieces share.
#include <algorithm>
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

int ModelKeys::Lookup(std::string_view model) {
  std::string key = CanonicalGpuModel(model);
  auto [it, added] = key_ids_.emplace(key, static_cast<int>(keys_.size()));
  if (added) keys_.push_back(std::move(key));
  return it->second;
}

namespace {
uint64_t MixId(int64_t id) { return static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull; }
}  // namespace

GpuModelIndex::GpuModelIndex(const Snapshot& snapshot, ModelKeys* keys)
    : snapshot_(&snapshot), keys_(keys) {
  const size_t nodes = snapshot.nodes.size();
  size_t capacity = 16;
  while (capacity < 2 * nodes) capacity *= 2;
  by_id_.assign(capacity, {0, 0});
  id_mask_ = capacity - 1;
  first_.resize(nodes + 1);
  size_t gpus = 0;
  for (const NodeInfo& node : snapshot.nodes) gpus += node.gpus.size();
  slots_.reserve(gpus);
  for (size_t i = 0; i < nodes; ++i) {
    const NodeInfo& node = snapshot.nodes[i];
    if (node.id != 0) {
      for (uint64_t h = MixId(node.id) >> 32;; ++h) {
        auto& entry = by_id_[h & id_mask_];
        if (entry.first == node.id) break;  // an id seen before: the first node keeps it
        if (entry.first == 0) {
          entry = {node.id, static_cast<int>(i)};
          break;
        }
      }
    }
    first_[i] = static_cast<uint32_t>(slots_.size());
    for (const GpuSlot& gpu : node.gpus) {
      const int model = keys->Id(gpu.model);
      slots_.push_back(Slot{gpu.id, gpu.index, model});
      if (static_cast<size_t>(model) >= in_fleet_.size()) in_fleet_.resize(model + 1, 0);
      in_fleet_[static_cast<size_t>(model)] = 1;
    }
  }
  first_[nodes] = static_cast<uint32_t>(slots_.size());
}

int GpuModelIndex::FindNode(const TaskPlacement& task) const {
  if (task.node_id != 0) {
    for (uint64_t h = MixId(task.node_id) >> 32;; ++h) {
      const auto& entry = by_id_[h & id_mask_];
      if (entry.first == task.node_id) return entry.second;
      if (entry.first == 0) break;
    }
  }
  if (!names_built_) {
    names_built_ = true;
    by_name_.reserve(snapshot_->nodes.size());
    for (size_t i = 0; i < snapshot_->nodes.size(); ++i) {
      by_name_.emplace(snapshot_->nodes[i].name, static_cast<int>(i));  // the first of a name
    }
  }
  auto it = by_name_.find(task.node);
  return it != by_name_.end() ? it->second : -1;
}

void GpuModelIndex::ModelIdsOf(const RunningJob& job, std::vector<std::pair<int, int>>* out) const {
  out->clear();
  auto add = [out](int model, int count) {
    for (auto& [id, n] : *out) {
      if (id == model) {
        n += count;
        return;
      }
    }
    out->emplace_back(model, count);
  };
  for (const auto& task : job.tasks) {
    const int node = FindNode(task);
    const int count = TaskGpus(task);
    if (node < 0) {
      if (count > 0) add(keys_->Id(""), count);
      continue;
    }
    const Slot* slots = slots_.data() + first_[static_cast<size_t>(node)];
    const size_t size = first_[static_cast<size_t>(node) + 1] - first_[static_cast<size_t>(node)];
    // One model per GPU: by index on the node when given, else by store id.
    for (int k = 0; k < count; ++k) {
      const Slot* slot = nullptr;
      if (static_cast<size_t>(k) < task.gpu_indices.size()) {
        const int index = task.gpu_indices[static_cast<size_t>(k)];
        if (index >= 0 && static_cast<size_t>(index) < size &&
            slots[static_cast<size_t>(index)].index == index) {
          slot = &slots[static_cast<size_t>(index)];
        } else {
          for (size_t g = 0; g < size; ++g) {
            if (slots[g].index == index) {
              slot = &slots[g];
              break;
            }
          }
        }
      } else {
        const int64_t id = task.gpu_ids[static_cast<size_t>(k)];
        for (size_t g = 0; g < size; ++g) {
          if (slots[g].id == id) {
            slot = &slots[g];
            break;
          }
        }
      }
      add(slot != nullptr ? slot->model : keys_->Id(""), 1);
    }
  }
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
