#include "fleet/server/scheduler_view.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

namespace ferry::fleet::server_internal {

using nlohmann::json;

void IdleTracker::Update(const sched::Snapshot& snapshot, int64_t now_ms) {
  std::unordered_set<int64_t> busy;
  for (const sched::RunningJob& running : snapshot.running) {
    for (const TaskPlacement& task : running.tasks) busy.insert(task.node_id);
  }
  std::unordered_map<int64_t, int64_t> next;
  next.reserve(snapshot.nodes.size());
  for (const sched::NodeInfo& node : snapshot.nodes) {
    bool held = busy.count(node.id) > 0;
    for (const sched::GpuSlot& gpu : node.gpus) held = held || !gpu.free;
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

void IdleTracker::Apply(sched::Snapshot* snapshot) const {
  for (sched::NodeInfo& node : snapshot->nodes) {
    const int64_t idle_ms = IdleSinceMs(node.id);
    node.idle_since_s = idle_ms < 0 ? -1 : static_cast<double>(idle_ms) / 1000.0;
  }
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

Status SubmissionChecker::Configure(const sched::Config& config) {
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<sched::Scheduler> core, sched::Scheduler::Make(config));
  std::lock_guard<std::mutex> lock(mu_);
  core_ = std::move(core);
  verdicts_.clear();  // pools and providers may have changed
  return Status::OK();
}

std::string SubmissionChecker::ShapeKey(const sched::PendingJob& job) {
  // Everything of a job the capacity check reads; not its owner, priority or age.
  nlohmann::json key = {
      job.tasks,    job.gpus_per_task, job.gpu_models, job.cpus_per_task, job.memory_mb_per_task,
      job.datasets, job.topology,      job.pool_set};
  return key.dump();
}

Result<SubmissionChecker::Verdict> SubmissionChecker::Check(
    const sched::PendingJob& job, const std::function<Result<std::vector<Node>>()>& load_nodes,
    int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  if (core_ == nullptr) return Status::Invalid("the submission check has no config");
  Verdict verdict;
  verdict.over_quota = core_->CheckSubmission(job);
  if (verdict.over_quota) return verdict;
  if (!loaded_ || now_ms - loaded_ms_ >= refresh_ms_ || now_ms < loaded_ms_) {
    FERRY_ASSIGN_OR_RAISE(std::vector<Node> nodes, load_nodes());
    capacity_ = CapacityNodes(nodes);
    loaded_ms_ = now_ms;
    loaded_ = true;
    verdicts_.clear();
  }
  // With no node yet, every valid job may wait for one.
  if (capacity_.empty()) return verdict;
  const std::string key = ShapeKey(job);
  auto it = verdicts_.find(key);
  if (it == verdicts_.end()) {
    if (verdicts_.size() >= 4096) verdicts_.clear();  // many shapes: start over
    it = verdicts_.emplace(key, core_->CheckCapacity(job, capacity_)).first;
  }
  verdict.unsatisfiable = it->second;
  return verdict;
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
