// The scheduler thread: a pass loads the store's snapshot, runs one cycle of
// the scheduling core, commits placements and pending reasons, asks the
// victims of preemptions to stop and hands cloud work to the provisioning
// controller.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"

namespace ferry::fleet::server_internal {

namespace {

// With nothing pending, a pass still runs this often: fair-share usage
// advances and idle cloud nodes are found.
constexpr int64_t kIdlePassIntervalMs = 1'000;

}  // namespace

Status FleetServer::SchedulingPass() {
  FERRY_ASSIGN_OR_RAISE(sched::Snapshot snapshot, store_->LoadSchedulingSnapshot());
  const int64_t now = NowMs();
  idle_.Update(snapshot, now);
  if (snapshot.pending.empty() && now - last_pass_ms_ < kIdlePassIntervalMs) {
    return Status::OK();
  }
  last_pass_ms_ = now;
  snapshot.now_s = static_cast<double>(now) / 1000.0;
  if (provisioning_) snapshot.provisioning = provisioning_->Provisioning(snapshot.nodes);
  idle_.Apply(&snapshot);
  caches_.AddCachedBytes(&snapshot);
  sched::Decision decision;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    decision = core_.scheduler->Cycle(snapshot);
    core_.last_stats = decision.stats;
    core_.last_quotas = decision.quotas;
    core_.last_cycle_ms = now;
    core_.preemptions += static_cast<int64_t>(decision.preemptions.size());
  }
  metrics_.Cycle(decision.stats, now);
  for (const sched::Preemption& preemption : decision.preemptions) {
    metrics_.Preempted(preemption.reason);
  }

  std::unordered_map<int64_t, int> attempts;
  for (const sched::PendingJob& job : snapshot.pending) attempts[job.job_id] = job.attempt;
  std::unordered_map<int64_t, std::pair<int, std::string>> reasons;
  std::vector<PendingReason> changed;
  for (const PendingReason& pending : decision.pending) {
    std::pair<int, std::string> entry(attempts[pending.job_id], pending.reason);
    auto previous = written_reasons_.find(pending.job_id);
    if (previous == written_reasons_.end() || previous->second != entry) {
      changed.push_back(pending);
    }
    reasons.emplace(pending.job_id, std::move(entry));
  }
  FERRY_ASSIGN_OR_RAISE(CommitResult commit,
                        store_->CommitPlacements(decision.placements, changed, NowMs()));
  written_reasons_ = std::move(reasons);  // jobs no longer pending drop out
  PlanPrefetches(decision, snapshot);     // before decision.pending moves out below
  std::sort(decision.pending.begin(), decision.pending.end(),
            [](const PendingReason& a, const PendingReason& b) { return a.job_id < b.job_id; });
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    core_.last_pending = std::move(decision.pending);
  }

  ApplyPreemptions(decision.preemptions, snapshot);
  if (provisioning_) provisioning_->Submit(decision.provision, decision.scale_down);

  if (commit.admitted.empty()) return Status::OK();
  std::map<int64_t, std::string> names;
  for (const sched::NodeInfo& node : snapshot.nodes) names[node.id] = node.name;
  std::set<int64_t> admitted(commit.admitted.begin(), commit.admitted.end());
  std::set<std::string> nodes;
  for (const Placement& placement : decision.placements) {
    if (!admitted.count(placement.job_id)) continue;
    for (const TaskPlacement& task : placement.tasks) {
      nodes.insert(task.node.empty() ? names[task.node_id] : task.node);
    }
  }
  nodes.erase("");
  WakeNodes(nodes);
  WakeLogWaiters();
  return Status::OK();
}

void FleetServer::PlanPrefetches(const sched::Decision& decision, const sched::Snapshot& snapshot) {
  std::map<std::string, std::vector<PrefetchOrder>> plan;
  std::set<std::pair<int64_t, int>> nothing_ahead;  // what stays known as nothing to fetch
  if (options_.prefetch_window_s > 0) {
    std::unordered_map<int64_t, const sched::PendingJob*> pending;
    for (const sched::PendingJob& job : snapshot.pending) pending[job.job_id] = &job;
    DatasetCache datasets;
    for (const PendingReason& reason : decision.pending) {
      if (reason.planned_nodes.empty()) continue;
      // A drain has no planned start: the nodes are held for the job all the same.
      if (std::isfinite(reason.planned_start_s) &&
          reason.planned_start_s - snapshot.now_s > options_.prefetch_window_s) {
        continue;
      }
      auto it = pending.find(reason.job_id);
      if (it == pending.end()) continue;
      const int attempt = it->second->attempt;
      // A job with no inputs, bundle or image is read once, not every pass.
      if (nothing_ahead_.count({reason.job_id, attempt})) {
        nothing_ahead.insert({reason.job_id, attempt});
        continue;
      }
      std::optional<PrefetchOrder> order = prefetch_.Find(reason.job_id, attempt);
      if (!order) {
        Result<std::optional<Job>> job = store_->GetJob(Scope::All(), reason.job_id);
        if (!job.ok() || !*job) continue;  // gone meanwhile; a store error shows elsewhere
        Result<std::vector<StagedInput>> inputs =
            InputsOf((*job)->id, (*job)->tenant_id, (*job)->spec, &datasets);
        if (!inputs.ok()) {
          LogError("planning the prefetch of job " + std::to_string(reason.job_id),
                   inputs.status());
          continue;
        }
        order = PrefetchOrder{reason.job_id, attempt, (*job)->tenant, std::move(*inputs)};
        if (!(*job)->spec.code.bundle.empty()) order->code = (*job)->spec.code;
        order->image = (*job)->spec.image;
        order->image_digest = (*job)->spec.image_digest;
        if (order->empty()) {
          nothing_ahead.insert({reason.job_id, attempt});
          continue;
        }
      }
      for (const std::string& node : reason.planned_nodes) plan[node].push_back(*order);
    }
  }
  nothing_ahead_ = std::move(nothing_ahead);
  std::set<std::string> changed = prefetch_.Replace(std::move(plan));
  if (!changed.empty()) WakeNodes(changed);
}

void FleetServer::ApplyPreemptions(const std::vector<sched::Preemption>& preemptions,
                                   const sched::Snapshot& snapshot) {
  if (preemptions.empty()) return;
  std::set<std::string> nodes;
  for (const sched::Preemption& preemption : preemptions) {
    PreemptRequest request;
    request.job_id = preemption.job_id;
    request.attempt = preemption.attempt;
    request.reason = preemption.reason;
    request.for_job = preemption.for_job;
    request.grace_ms = std::max<int64_t>(0, std::llround(preemption.grace_s * 1000.0));
    Result<bool> done = store_->PreemptJob(request, NowMs());
    if (!done.ok()) {
      LogError("preempting job " + std::to_string(preemption.job_id), done.status());
      continue;
    }
    if (!*done) continue;  // it ended meanwhile
    for (const sched::RunningJob& running : snapshot.running) {
      if (running.job_id != preemption.job_id || running.attempt != preemption.attempt) continue;
      for (const TaskPlacement& task : running.tasks) nodes.insert(task.node);
    }
  }
  nodes.erase("");
  // The victims' agents learn of the stop now (with the grace), not at their next poll.
  WakeNodes(nodes);
  WakeLogWaiters();
}

void FleetServer::SchedulerLoop() {
  const auto interval =
      std::chrono::milliseconds(std::max<int64_t>(1, options_.schedule_interval_ms));
  auto last_pass = std::chrono::microseconds(0);
  while (!stopping_.load()) {
    {
      // Wake-ups (submissions, exits) within a pass's own duration of the
      // last one coalesce, so a burst against a long queue keeps the
      // scheduler busy half the time at most. A short pass leaves a short
      // gap: a submission that arrives just after one waits no longer.
      const auto gap = std::min<std::chrono::microseconds>(interval, last_pass);
      std::unique_lock<std::mutex> lock(sched_mu_);
      if (sched_cv_.wait_for(lock, gap, [&] { return stopping_.load(); })) break;
      sched_cv_.wait_for(lock, interval - gap, [&] { return sched_wake_ || stopping_.load(); });
      sched_wake_ = false;
    }
    if (stopping_.load()) break;
    const auto started = std::chrono::steady_clock::now();
    Status status = SchedulingPass();
    if (!status.ok()) LogError("scheduling pass", status);
    last_pass = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - started);
  }
}

}  // namespace ferry::fleet::server_internal
