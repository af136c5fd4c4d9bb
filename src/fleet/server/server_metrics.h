// What `GET /metrics` serves (docs/fleet-metrics.md): the server's own
// counters and histograms, updated where things happen (requests, scheduler
// passes, preemptions), and gauges read from the store when a scrape asks
// (jobs by state and reason, nodes, GPUs per pool). Internal to src/fleet/server.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ferry/base/metrics.h"
#include "ferry/fleet/sched.h"
#include "ferry/fleet/store.h"
#include "fleet/server/provisioning.h"
#include "fleet/server/slurm_pools.h"

namespace ferry::fleet::server_internal {

// What a scrape shows besides the store: copies taken under the locks of
// their owners (the scheduling core, the provisioning controller).
struct ScrapeInputs {
  std::vector<sched::QuotaStanding> quotas;
  std::vector<sched::ShareStanding> shares;
  std::vector<ProvisioningController::ProviderMetrics> providers;  // Slurm clusters too
  std::vector<SlurmController::ClusterMetrics> slurm;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // One finished request: `route` is the route's pattern ("/v1/jobs/{}"), or
  // "unmatched" when none matched, so that paths never become labels.
  void Request(std::string_view method, std::string_view route, int status, double seconds);
  metrics::Gauge& in_flight() { return *in_flight_; }
  void RateLimited() { rate_limited_->Add(); }
  // For parts that register their own families (the watch hub).
  metrics::Registry& registry() { return registry_; }
  void IdempotentReplay() { replays_->Add(); }
  // One scheduling cycle at `now_ms`.
  void Cycle(const sched::CycleStats& stats, int64_t now_ms);
  void Preempted(const std::string& reason) { preemptions_->With({reason}).Add(); }
  void LeaseExpired(int64_t nodes) { lease_expiries_->Add(static_cast<double>(nodes)); }
  // Job events in id order (the maintenance loop reads them from the
  // store): admissions, starts, completions by outcome, requeues by reason,
  // and the waits from submission (or requeue) to admission and to start.
  void JobEvents(const std::vector<WatchedEvent>& events);

  // The text of a scrape: these metrics, the store-backed gauges, the
  // process telemetry. A store that fails leaves its gauges out and counts
  // the failure in ferry_metrics_store_errors_total.
  std::string Render(Store& store, const ScrapeInputs& inputs);
  // With `cached`, Render shows the store-backed gauges of the last
  // RefreshStoreGauges instead of reading the store (a large store costs
  // hundreds of ms to count; the maintenance thread refreshes them).
  void set_cached(bool cached) { cached_ = cached; }
  void RefreshStoreGauges(Store& store);

 private:
  metrics::Registry registry_;
  metrics::Family<metrics::Counter>* requests_;
  metrics::Family<metrics::Histogram>* request_seconds_;
  metrics::Gauge* in_flight_;
  metrics::Counter* rate_limited_;
  metrics::Counter* replays_;
  metrics::Family<metrics::Histogram>* cycle_seconds_;
  metrics::Gauge* cycle_pending_;
  metrics::Gauge* cycle_considered_;
  metrics::Gauge* cycle_placed_;
  metrics::Counter* placed_total_;
  metrics::Counter* backfilled_total_;
  metrics::Gauge* last_cycle_;
  metrics::Family<metrics::Counter>* preemptions_;
  // The store-backed gauges as text (jobs, pending reasons, nodes, GPUs).
  std::string StoreGauges(Store& store);

  bool cached_ = false;
  std::mutex gauges_mu_;
  std::string gauges_;  // the last refresh
  metrics::Counter* store_errors_;
  metrics::Counter* lease_expiries_;
  metrics::Counter* admissions_;
  metrics::Counter* starts_;
  metrics::Family<metrics::Counter>* completions_;
  metrics::Family<metrics::Counter>* requeues_;
  metrics::Family<metrics::Histogram>* admission_wait_;
  metrics::Family<metrics::Histogram>* start_wait_;
  // Job → when it last became pending (submission or requeue), in ms; a
  // job leaves at its start or end. Only JobEvents (one thread) touches it.
  std::unordered_map<int64_t, int64_t> pending_since_;
};

}  // namespace ferry::fleet::server_internal
