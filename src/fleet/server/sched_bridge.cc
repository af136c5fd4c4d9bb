#include "fleet/server/sched_bridge.h"

#include <algorithm>

namespace ferry::fleet::server_internal {

using nlohmann::json;

void IdleTracker::Update(const std::vector<Node>& nodes, const std::map<int64_t, NodeUsage>& busy,
                         int64_t now_ms) {
  std::unordered_map<int64_t, int64_t> next;
  next.reserve(nodes.size());
  for (const Node& node : nodes) {
    bool held = busy.count(node.id) > 0;
    for (const Gpu& gpu : node.gpus) held = held || gpu.job_id.has_value();
    if (held) continue;
    auto it = idle_since_ms_.find(node.id);
    next[node.id] = it == idle_since_ms_.end() ? now_ms : it->second;
  }
  idle_since_ms_ = std::move(next);
}

int64_t IdleTracker::IdleSinceMs(int64_t node_id) const {
  auto it = idle_since_ms_.find(node_id);
  return it == idle_since_ms_.end() ? -1 : it->second;
}

sched::PendingJob ToPendingJob(const Job& job) {
  sched::PendingJob out;
  out.job_id = job.id;
  out.attempt = job.attempt;
  out.tenant = job.tenant;
  out.team = job.team;
  out.user = job.user;
  out.tasks = job.spec.tasks;
  out.gpus_per_task = job.spec.gpus_per_task;
  out.gpu_models = job.spec.gpu_models;
  out.cpus_per_task = job.spec.cpus_per_task;
  out.memory_mb_per_task = job.spec.memory_mb_per_task;
  out.priority = job.spec.priority;
  out.preemptible = job.spec.preemptible;
  out.submitted_s = static_cast<double>(job.created_at_ms) / 1000.0;
  out.max_runtime_s = static_cast<double>(job.spec.max_runtime_seconds);
  out.datasets = job.spec.datasets;
  out.topology = job.spec.topology;
  out.pool_set = job.spec.pool_set;
  return out;
}

sched::Snapshot BuildSnapshot(const SchedulingSnapshot& in, int64_t now_ms,
                              const std::map<std::string, int>& provisioning,
                              const IdleTracker& idle) {
  sched::Snapshot out;
  out.now_s = static_cast<double>(now_ms) / 1000.0;
  out.provisioning = provisioning;
  out.nodes.reserve(in.all_nodes.size());
  for (const Node& node : in.all_nodes) {
    sched::NodeInfo info;
    info.id = node.id;
    info.name = node.name;
    info.pool = node.pool;
    if (auto it = node.labels.find("domain"); it != node.labels.end()) info.domain = it->second;
    info.gpus.reserve(node.gpus.size());
    for (const Gpu& gpu : node.gpus) {
      info.gpus.push_back({gpu.id, gpu.index, gpu.model, gpu.memory_mb, !gpu.job_id.has_value()});
    }
    info.cpus = node.cpus;
    info.memory_mb = node.memory_mb;
    if (auto it = in.usage.find(node.id); it != in.usage.end()) {
      info.cpus_used = it->second.cpus_used;
      info.memory_mb_used = it->second.memory_mb_used;
    }
    info.schedulable = node.state == NodeState::kReady && !node.drain;
    const int64_t idle_ms = idle.IdleSinceMs(node.id);
    info.idle_since_s = idle_ms < 0 ? -1 : static_cast<double>(idle_ms) / 1000.0;
    out.nodes.push_back(std::move(info));
  }
  out.running.reserve(in.active.size());
  for (const ActiveAttempt& active : in.active) {
    sched::RunningJob run;
    run.job_id = active.job.id;
    run.attempt = active.attempt;
    run.tenant = active.job.tenant;
    run.team = active.job.team;
    run.user = active.job.user;
    run.priority = active.job.spec.priority;
    run.preemptible = active.job.spec.preemptible;
    run.started_s = static_cast<double>(active.admitted_at_ms) / 1000.0;
    run.max_runtime_s = static_cast<double>(active.job.spec.max_runtime_seconds);
    run.cpus_per_task = active.job.spec.cpus_per_task;
    run.memory_mb_per_task = active.job.spec.memory_mb_per_task;
    run.tasks = active.tasks;
    run.terminating = active.terminating;
    run.preempted_for = active.preempted_for;
    out.running.push_back(std::move(run));
  }
  out.pending.reserve(in.pending.size());
  for (const Job& job : in.pending) out.pending.push_back(ToPendingJob(job));
  return out;
}

std::vector<sched::NodeInfo> CapacityNodes(const std::vector<Node>& nodes) {
  std::vector<sched::NodeInfo> out;
  out.reserve(nodes.size());
  for (const Node& node : nodes) {
    if (node.state == NodeState::kLost) continue;
    sched::NodeInfo info;
    info.id = node.id;
    info.name = node.name;
    info.pool = node.pool;
    info.gpus.reserve(node.gpus.size());
    for (const Gpu& gpu : node.gpus)
      info.gpus.push_back({gpu.id, gpu.index, gpu.model, gpu.memory_mb, true});
    info.cpus = node.cpus;
    info.memory_mb = node.memory_mb;
    info.schedulable = !node.drain;
    out.push_back(std::move(info));
  }
  return out;
}

namespace {
json OptionalIntJson(const std::optional<int>& value) {
  return value ? json(*value) : json(nullptr);
}
}  // namespace

json SchedulerConfigJson(const sched::Config& config) {
  json pools = json::array();
  for (const sched::PoolConfig& pool : config.pools) {
    pools.push_back({{"name", pool.name},
                     {"cloud", pool.cloud},
                     {"provider", pool.provider},
                     {"price_per_gpu_hour", pool.price_per_gpu_hour},
                     {"spot", pool.spot},
                     {"provisioning_delay_s", pool.provisioning_delay_s},
                     {"max_nodes", pool.max_nodes},
                     {"idle_timeout_s", pool.idle_timeout_s},
                     {"node",
                      {{"gpu_model", pool.node.gpu_model},
                       {"gpus", pool.node.gpus},
                       {"cpus", pool.node.cpus},
                       {"memory_mb", pool.node.memory_mb}}},
                     {"datasets", pool.datasets}});
  }
  json pool_sets = json::array();
  for (const sched::PoolSet& set : config.pool_sets) {
    pool_sets.push_back(
        {{"name", set.name}, {"pools", set.pools}, {"scoring", sched::ToString(set.scoring)}});
  }
  json quotas = json::array();
  for (const sched::QuotaConfig& quota : config.quotas) {
    quotas.push_back({{"path", quota.path},
                      {"gpu_model", quota.gpu_model},
                      {"nominal_gpus", quota.nominal_gpus},
                      {"borrowing_limit", OptionalIntJson(quota.borrowing_limit)},
                      {"lending_limit", OptionalIntJson(quota.lending_limit)},
                      {"cohort", quota.cohort}});
  }
  json shares = json::array();
  for (const sched::ShareConfig& share : config.shares) {
    shares.push_back({{"path", share.path}, {"shares", share.shares}});
  }
  return {{"ordering", sched::ToString(config.ordering)},
          {"default_scoring", sched::ToString(config.default_scoring)},
          {"pools", std::move(pools)},
          {"pool_sets", std::move(pool_sets)},
          {"quotas", std::move(quotas)},
          {"shares", std::move(shares)},
          {"preemption",
           {{"priority", config.preemption.priority},
            {"reclaim", config.preemption.reclaim},
            {"grace_s", config.preemption.grace_s},
            {"fair_share_max", config.preemption.fair_share_max},
            {"fair_share_window_s", config.preemption.fair_share_window_s}}},
          {"backfill",
           {{"enabled", config.backfill.enabled}, {"reservations", config.backfill.reservations}}},
          {"burst",
           {{"enabled", config.burst.enabled}, {"min_pending_s", config.burst.min_pending_s}}}};
}

json CycleStatsJson(const sched::CycleStats& stats) {
  return {{"pending", stats.pending},     {"considered", stats.considered},
          {"placed", stats.placed},       {"backfilled", stats.backfilled},
          {"preempted", stats.preempted}, {"elapsed_ms", stats.elapsed_ms}};
}

json FairShareJson(const std::vector<sched::ShareStanding>& standings) {
  json out = json::array();
  for (const sched::ShareStanding& s : standings) {
    out.push_back({{"path", s.path},
                   {"shares", s.shares},
                   {"usage_gpu_seconds", s.usage},
                   {"fair_share", s.fair_share}});
  }
  return out;
}

}  // namespace ferry::fleet::server_internal
