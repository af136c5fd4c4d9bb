// The maintenance thread: node lease and job runtime expiry, reloading a
// changed --scheduler-config and purging old idempotency keys.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"

namespace ferry::fleet::server_internal {

namespace {

constexpr int64_t kPurgeIntervalMs = 60'000;

}  // namespace

void FleetServer::MaintenanceLoop() {
  const int64_t tick_ms = std::clamp<int64_t>(options_.lease_ms / 4, 50, 1000);
  int64_t last_purge_ms = 0;
  while (!WaitForStop(tick_ms)) {
    const int64_t now = NowMs();
    Result<ExpiryResult> expired = store_->ExpireLeases(now);
    if (!expired.ok()) {
      LogError("lease expiry", expired.status());
    } else if (!expired->lost_nodes.empty() || !expired->requeued_jobs.empty() ||
               !expired->failed_jobs.empty()) {
      for (const std::string& node : expired->lost_nodes) {
        std::fprintf(stderr, "ferry server: node %s lost (lease expired)\n", node.c_str());
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
    if (now - last_purge_ms >= kPurgeIntervalMs) {
      last_purge_ms = now;
      Result<int64_t> purged = store_->PurgeIdempotencyKeys(now, options_.idempotency_ttl_ms);
      if (!purged.ok()) LogError("idempotency key purge", purged.status());
    }
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
    std::fprintf(stderr,
                 "ferry server: scheduler config not reloaded, keeping the current one: %s\n",
                 polled.status().message().c_str());
    return;
  }
  if (!polled->has_value()) return;
  sched::Config config = std::move(**polled);
  Status applied;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    applied = core_.scheduler->Reconfigure(config);
    if (applied.ok()) {
      core_.config_error.clear();
      core_.config_loaded_ms = NowMs();
    } else {
      core_.config_error = applied.message();
    }
  }
  if (!applied.ok()) {
    std::fprintf(stderr, "ferry server: scheduler config refused, keeping the current one: %s\n",
                 applied.message().c_str());
    return;
  }
  std::fprintf(stderr, "ferry server: scheduler config reloaded from %s (%zu pools, %zu quotas)\n",
               options_.scheduler_config.c_str(), config.pools.size(), config.quotas.size());
  if (provisioning_) {
    Status providers = provisioning_->Configure(config);
    if (!providers.ok()) LogError("providers", providers);
  }
  WakeScheduler();
}

}  // namespace ferry::fleet::server_internal
