// The maintenance thread: node lease and job runtime expiry, reloading a
// changed --scheduler-config and purging old idempotency keys.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/server_log.h"

namespace ferry::fleet::server_internal {

namespace {

constexpr int64_t kPurgeIntervalMs = 60'000;

}  // namespace

void FleetServer::MaintenanceLoop() {
  const int64_t tick_ms = std::clamp<int64_t>(options_.lease_ms / 4, 50, 1000);
  int64_t last_purge_ms = 0;
  int64_t last_gauges_ms = NowMs();  // Run counted them just before this loop
  while (!WaitForStop(tick_ms)) {
    const int64_t now = NowMs();
    Result<ExpiryResult> expired = store_->ExpireLeases(now);
    if (!expired.ok()) {
      LogError("lease expiry", expired.status());
    } else if (!expired->lost_nodes.empty() || !expired->requeued_jobs.empty() ||
               !expired->failed_jobs.empty()) {
      metrics_.LeaseExpired(static_cast<int64_t>(expired->lost_nodes.size()));
      checker_.NodesChanged();
      for (const std::string& node : expired->lost_nodes) {
        caches_.Forget(node);
        ServerLog().Warn("node " + node + " lost (lease expired)", {{"node", node}});
      }
      // Gang peers of lost tasks run on healthy nodes: every agent re-syncs.
      WakeAllNodes();
      WakeLogWaiters();
      WakeScheduler();
    }
    Result<std::vector<int64_t>> timed_out = store_->ExpireRuntimes(now);
    if (!timed_out.ok()) {
      LogError("runtime expiry", timed_out.status());
    } else if (!timed_out->empty()) {
      std::set<std::string> nodes;
      for (int64_t job_id : *timed_out) {
        for (const std::string& node : NodesOfJob(job_id)) nodes.insert(node);
      }
      WakeNodes(nodes);
      WakeLogWaiters();
    }
    ReloadConfig();
    TailJobEventsForMetrics();
    if (options_.metrics_refresh_ms > 0 && now - last_gauges_ms >= options_.metrics_refresh_ms) {
      last_gauges_ms = now;
      metrics_.RefreshStoreGauges(*store_);
    }
    if (now - last_purge_ms >= kPurgeIntervalMs) {
      last_purge_ms = now;
      Result<int64_t> purged = store_->PurgeIdempotencyKeys(now, options_.idempotency_ttl_ms);
      if (!purged.ok()) LogError("idempotency key purge", purged.status());
    }
  }
}

// Feeds the job events written since the last tick to the lifecycle
// metrics (admissions, starts, completions, requeues, waits). The first tick
// starts at the newest event: what happened before this server started is
// not counted again.
void FleetServer::TailJobEventsForMetrics() {
  constexpr int kBatch = 5000;
  if (metrics_event_cursor_ < 0) {
    Result<int64_t> head = store_->LatestEventId();
    if (!head.ok()) return LogError("metrics event tail", head.status());
    metrics_event_cursor_ = *head;
    return;
  }
  for (int batch = 0; batch < 20; ++batch) {  // at most 100,000 events a tick
    Result<std::vector<WatchedEvent>> events =
        store_->ListEventsSince(Scope::All(), metrics_event_cursor_, {}, kBatch);
    if (!events.ok()) return LogError("metrics event tail", events.status());
    if (events->empty()) return;
    metrics_.JobEvents(*events);
    metrics_event_cursor_ = events->back().event.id;
    if (static_cast<int>(events->size()) < kBatch) return;
  }
}

// Applies a changed --scheduler-config file: a valid one replaces the
// policies at once (usage history carries over), an invalid one is logged
// once and the current config stays.
void FleetServer::ReloadConfig() {
  Result<std::optional<sched::Config>> polled = std::optional<sched::Config>();
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    if (!core_.watcher) return;
    polled = core_.watcher->Poll();
  }
  if (!polled.ok()) {
    {
      std::lock_guard<std::mutex> lock(core_.mu);
      core_.config_error = polled.status().message();
    }
    ServerLog().Error("scheduler config not reloaded, keeping the current one: " +
                      polled.status().message());
    return;
  }
  if (!polled->has_value()) return;
  sched::Config config = std::move(**polled);
  Status applied;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    applied = core_.scheduler->Reconfigure(config);
    if (applied.ok()) applied = checker_.Configure(config);
    if (applied.ok()) {
      core_.config_error.clear();
      core_.config_loaded_ms = NowMs();
    } else {
      core_.config_error = applied.message();
    }
  }
  if (!applied.ok()) {
    ServerLog().Error("scheduler config refused, keeping the current one: " + applied.message());
    return;
  }
  ServerLog().Info("scheduler config reloaded from " + options_.scheduler_config + " (" +
                   std::to_string(config.pools.size()) + " pools, " +
                   std::to_string(config.quotas.size()) + " quotas)");
  if (provisioning_) {
    Status providers = provisioning_->Configure(config);
    if (!providers.ok()) LogError("providers", providers);
  }
  if (slurm_) {
    Status clusters = slurm_->Configure(config);
    if (!clusters.ok()) LogError("Slurm pools", clusters);
  }
  WakeScheduler();
}

}  // namespace ferry::fleet::server_internal
