// Test helpers of the scheduling core (scenario and property tests): a small
// mutable world that applies decisions between cycles, and the invariants
// every decision must keep.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/sched.h"

namespace ferry::fleet::sched::testing {

inline std::string OwnerPath(const std::string& tenant, const std::string& team,
                             const std::string& user, int depth) {
  if (depth == 1) return tenant;
  if (depth == 2) return tenant + "/" + team;
  return tenant + "/" + team + "/" + user;
}

// Every rule a decision must keep for `snapshot` under `config`; an empty
// list when all hold.
inline std::vector<std::string> CheckDecision(const Config& config, const Snapshot& snapshot,
                                              const Decision& decision) {
  std::vector<std::string> errors;
  std::map<int64_t, const NodeInfo*> nodes;
  for (const NodeInfo& n : snapshot.nodes) nodes.emplace(n.id, &n);
  std::map<int64_t, const PendingJob*> pending;
  for (const PendingJob& p : snapshot.pending) pending.emplace(p.job_id, &p);

  // GPUs already taken: not free, or held by a running job.
  std::set<std::pair<int64_t, int>> taken;
  for (const NodeInfo& n : snapshot.nodes) {
    for (const GpuSlot& g : n.gpus) {
      if (!g.free) taken.insert({n.id, g.index});
    }
  }
  for (const RunningJob& r : snapshot.running) {
    for (const TaskPlacement& t : r.tasks) {
      for (int i : t.gpu_indices) taken.insert({t.node_id, i});
    }
  }
  std::map<int64_t, double> cpus;
  std::map<int64_t, int64_t> memory;
  for (const NodeInfo& n : snapshot.nodes) {
    cpus[n.id] = n.cpus_used;
    memory[n.id] = n.memory_mb_used;
  }
  // Pool set membership.
  auto set_pools = [&](const std::string& name) -> std::pair<bool, std::vector<std::string>> {
    if (config.pool_sets.empty()) return {true, {}};
    for (const PoolSet& s : config.pool_sets) {
      if (s.name == name || (name.empty() && &s == &config.pool_sets.front()))
        return {true, s.pools};
    }
    return {false, {}};
  };
  // Quota usage per (path, model or "").
  std::map<std::pair<std::string, std::string>, int> used;
  auto charge = [&](const std::string& tenant, const std::string& team, const std::string& user,
                    const std::string& model, int gpus) {
    for (int d = 1; d <= 3; ++d) {
      std::string path = OwnerPath(tenant, team, user, d);
      used[{path, ""}] += gpus;
      used[{path, CanonicalGpuModel(model)}] += gpus;
    }
  };
  auto model_of = [&](int64_t node, int index) -> std::string {
    auto it = nodes.find(node);
    if (it == nodes.end()) return "";
    for (const GpuSlot& g : it->second->gpus) {
      if (g.index == index) return g.model;
    }
    return "";
  };
  for (const RunningJob& r : snapshot.running) {
    for (const TaskPlacement& t : r.tasks) {
      for (int i : t.gpu_indices) charge(r.tenant, r.team, r.user, model_of(t.node_id, i), 1);
    }
  }
  std::set<int64_t> placed;
  for (const Placement& pl : decision.placements) {
    auto pj = pending.find(pl.job_id);
    if (pj == pending.end()) {
      errors.push_back("placed job " + std::to_string(pl.job_id) + " is not pending");
      continue;
    }
    if (!placed.insert(pl.job_id).second) {
      errors.push_back("job " + std::to_string(pl.job_id) + " placed twice");
    }
    const PendingJob& job = *pj->second;
    if (static_cast<int>(pl.tasks.size()) != job.tasks) {
      errors.push_back("job " + std::to_string(pl.job_id) + ": gang incomplete");
    }
    std::set<int> task_ids;
    auto [known_set, pools] = set_pools(job.pool_set);
    for (const TaskPlacement& t : pl.tasks) {
      task_ids.insert(t.task);
      auto n = nodes.find(t.node_id);
      if (n == nodes.end()) {
        errors.push_back("job " + std::to_string(pl.job_id) + ": unknown node");
        continue;
      }
      const NodeInfo& node = *n->second;
      if (!node.schedulable)
        errors.push_back("job " + std::to_string(pl.job_id) + " on unschedulable node");
      if (!known_set ||
          (!pools.empty() && std::find(pools.begin(), pools.end(), node.pool) == pools.end())) {
        errors.push_back("job " + std::to_string(pl.job_id) + " outside its pool set");
      }
      if (static_cast<int>(t.gpu_indices.size()) != job.gpus_per_task) {
        errors.push_back("job " + std::to_string(pl.job_id) + ": wrong GPU count");
      }
      for (int i : t.gpu_indices) {
        if (!taken.insert({t.node_id, i}).second) {
          errors.push_back("GPU " + node.name + "#" + std::to_string(i) + " double-booked (job " +
                           std::to_string(pl.job_id) + ")");
        }
        std::string model = model_of(t.node_id, i);
        if (!job.gpu_models.empty()) {
          bool ok = false;
          for (const std::string& m : job.gpu_models)
            ok = ok || CanonicalGpuModel(m) == CanonicalGpuModel(model);
          if (!ok)
            errors.push_back("job " + std::to_string(pl.job_id) + " on a GPU of another model");
        }
        charge(job.tenant, job.team, job.user, model, 1);
      }
      cpus[t.node_id] += job.cpus_per_task;
      memory[t.node_id] += job.memory_mb_per_task;
    }
    if (static_cast<int>(task_ids.size()) != job.tasks) {
      errors.push_back("job " + std::to_string(pl.job_id) + ": task ids not distinct");
    }
  }
  for (const NodeInfo& n : snapshot.nodes) {
    if (cpus[n.id] > std::max(n.cpus, n.cpus_used) + 1e-6) {
      errors.push_back("node " + n.name + ": CPUs oversubscribed");
    }
    if (memory[n.id] > std::max(n.memory_mb, n.memory_mb_used)) {
      errors.push_back("node " + n.name + ": memory oversubscribed");
    }
  }
  // Quotas: new placements never push a quota past nominal + borrowing limit
  // (quotas already past it before the cycle are only checked not to grow).
  std::map<std::pair<std::string, std::string>, int> before;
  for (const RunningJob& r : snapshot.running) {
    for (const TaskPlacement& t : r.tasks) {
      for (int i : t.gpu_indices) {
        for (int d = 1; d <= 3; ++d) {
          std::string path = OwnerPath(r.tenant, r.team, r.user, d);
          before[{path, ""}] += 1;
          before[{path, CanonicalGpuModel(model_of(t.node_id, i))}] += 1;
        }
      }
    }
  }
  for (const QuotaConfig& q : config.quotas) {
    if (!q.borrowing_limit) continue;
    std::pair<std::string, std::string> key{q.path, CanonicalGpuModel(q.gpu_model)};
    int limit = q.nominal_gpus + *q.borrowing_limit;
    if (used[key] > std::max(limit, before[key])) {
      errors.push_back("quota " + q.path + " (" + q.gpu_model + "): " + std::to_string(used[key]) +
                       " GPUs > " + std::to_string(limit));
    }
  }
  // Victims: running, preemptible or (fair-share) borrowing, each once.
  std::set<int64_t> victims;
  for (const Preemption& p : decision.preemptions) {
    if (!victims.insert(p.job_id).second) {
      errors.push_back("job " + std::to_string(p.job_id) + " preempted twice");
    }
    const RunningJob* run = nullptr;
    for (const RunningJob& r : snapshot.running) {
      if (r.job_id == p.job_id) run = &r;
    }
    if (run == nullptr) {
      errors.push_back("preempted job " + std::to_string(p.job_id) + " is not running");
      continue;
    }
    if (run->terminating)
      errors.push_back("terminating job " + std::to_string(p.job_id) + " preempted");
    if (p.reason == "PREEMPTED_BY_PRIORITY" && !run->preemptible) {
      errors.push_back("non-preemptible job " + std::to_string(p.job_id) +
                       " preempted by priority");
    }
    if (p.reason != "PREEMPTED_BY_PRIORITY" && p.reason != "PREEMPTED_FOR_FAIR_SHARE") {
      errors.push_back("preemption reason " + p.reason);
    }
    if (!pending.count(p.for_job)) errors.push_back("preemption for a job not pending");
  }
  // One reason per pending job not placed, none for placed ones.
  std::map<int64_t, int> reasons;
  for (const PendingReason& r : decision.pending) reasons[r.job_id]++;
  for (const PendingJob& p : snapshot.pending) {
    int n = reasons.count(p.job_id) ? reasons[p.job_id] : 0;
    bool is_placed = placed.count(p.job_id) > 0;
    if (is_placed && n != 0)
      errors.push_back("placed job " + std::to_string(p.job_id) + " has a reason");
    if (!is_placed && n != 1) {
      errors.push_back("job " + std::to_string(p.job_id) + " has " + std::to_string(n) +
                       " reasons");
    }
  }
  if (decision.stats.placed != static_cast<int>(decision.placements.size())) {
    errors.push_back("stats.placed differs from the placements");
  }
  return errors;
}

// A world the tests mutate between cycles: decisions are applied (placements
// become running jobs, preempted jobs start terminating).
struct World {
  Snapshot snapshot;

  NodeInfo* Node(int64_t id) {
    for (NodeInfo& n : snapshot.nodes) {
      if (n.id == id) return &n;
    }
    return nullptr;
  }
  NodeInfo* NodeNamed(const std::string& name) {
    for (NodeInfo& n : snapshot.nodes) {
      if (n.name == name) return &n;
    }
    return nullptr;
  }

  // Applies `decision`: placed jobs start running now; preempted jobs start terminating.
  void Apply(const Decision& decision) {
    std::map<int64_t, PendingJob> pending;
    for (const PendingJob& p : snapshot.pending) pending.emplace(p.job_id, p);
    for (const Placement& pl : decision.placements) {
      const PendingJob& p = pending.at(pl.job_id);
      RunningJob r;
      r.job_id = p.job_id;
      r.attempt = p.attempt;
      r.tenant = p.tenant;
      r.team = p.team;
      r.user = p.user;
      r.priority = p.priority;
      r.preemptible = p.preemptible;
      r.started_s = snapshot.now_s;
      r.max_runtime_s = p.max_runtime_s;
      r.cpus_per_task = p.cpus_per_task;
      r.memory_mb_per_task = p.memory_mb_per_task;
      r.tasks = pl.tasks;
      for (const TaskPlacement& t : pl.tasks) {
        NodeInfo* n = Node(t.node_id);
        for (GpuSlot& g : n->gpus) {
          if (std::find(t.gpu_indices.begin(), t.gpu_indices.end(), g.index) !=
              t.gpu_indices.end()) {
            g.free = false;
          }
        }
        n->cpus_used += p.cpus_per_task;
        n->memory_mb_used += p.memory_mb_per_task;
        n->idle_since_s = -1;
      }
      snapshot.running.push_back(std::move(r));
      pending.erase(pl.job_id);
    }
    std::vector<PendingJob> left;
    for (const PendingJob& p : snapshot.pending) {
      if (pending.count(p.job_id)) left.push_back(p);
    }
    snapshot.pending = std::move(left);
    for (const Preemption& pre : decision.preemptions) {
      for (RunningJob& r : snapshot.running) {
        if (r.job_id == pre.job_id) {
          r.terminating = true;
          r.preempted_for = pre.for_job;
        }
      }
    }
    for (const ProvisionRequest& req : decision.provision)
      snapshot.provisioning[req.pool] += req.nodes;
  }

  // Running job `id` ends: its resources are free again. Preempted jobs go
  // back to pending (attempt + 1) when `requeue`.
  void End(int64_t id, bool requeue) {
    for (size_t i = 0; i < snapshot.running.size(); ++i) {
      RunningJob& r = snapshot.running[i];
      if (r.job_id != id) continue;
      for (const TaskPlacement& t : r.tasks) {
        NodeInfo* n = Node(t.node_id);
        if (n == nullptr) continue;
        for (GpuSlot& g : n->gpus) {
          if (std::find(t.gpu_indices.begin(), t.gpu_indices.end(), g.index) !=
              t.gpu_indices.end()) {
            g.free = true;
          }
        }
        n->cpus_used = std::max(0.0, n->cpus_used - r.cpus_per_task);
        n->memory_mb_used = std::max<int64_t>(0, n->memory_mb_used - r.memory_mb_per_task);
      }
      if (requeue) {
        PendingJob p;
        p.job_id = r.job_id;
        p.attempt = r.attempt + 1;
        p.tenant = r.tenant;
        p.team = r.team;
        p.user = r.user;
        p.priority = r.priority;
        p.preemptible = r.preemptible;
        p.max_runtime_s = r.max_runtime_s;
        p.cpus_per_task = r.cpus_per_task;
        p.memory_mb_per_task = r.memory_mb_per_task;
        p.tasks = static_cast<int>(r.tasks.size());
        p.gpus_per_task = r.tasks.empty() ? 0 : static_cast<int>(r.tasks[0].gpu_indices.size());
        snapshot.pending.push_back(std::move(p));
      }
      snapshot.running.erase(snapshot.running.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    // Nodes with nothing left become idle now.
    for (NodeInfo& n : snapshot.nodes) {
      bool busy = n.cpus_used > 0;
      for (const GpuSlot& g : n.gpus) busy = busy || !g.free;
      if (!busy && n.idle_since_s < 0) n.idle_since_s = snapshot.now_s;
    }
  }
};

}  // namespace ferry::fleet::sched::testing
