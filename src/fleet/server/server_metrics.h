// What `GET /metrics` serves (docs/fleet-metrics.md): the server's own
// counters and histograms, updated where things happen (requests, scheduler
// passes, preemptions), and gauges read from the store when a scrape asks
// (jobs by state and reason, nodes, GPUs per pool). Internal to src/fleet/server.
#pragma once

#include <string>
#include <string_view>

#include "ferry/base/metrics.h"
#include "ferry/fleet/sched.h"

namespace ferry::fleet {
class Store;
}

namespace ferry::fleet::server_internal {

class ServerMetrics {
 public:
  ServerMetrics();

  // One finished request: `route` is the route's pattern ("/v1/jobs/{}"), or
  // "unmatched" when none matched, so that paths never become labels.
  void Request(std::string_view method, std::string_view route, int status, double seconds);
  metrics::Gauge& in_flight() { return *in_flight_; }
  void RateLimited() { rate_limited_->Add(); }
  void IdempotentReplay() { replays_->Add(); }
  // One scheduling cycle at `now_ms`.
  void Cycle(const sched::CycleStats& stats, int64_t now_ms);
  void Preempted(const std::string& reason) { preemptions_->With({reason}).Add(); }

  // The text of a scrape: these metrics, the store-backed gauges, the
  // process telemetry. A store that fails leaves its gauges out and counts
  // the failure in ferry_metrics_store_errors_total.
  std::string Render(Store& store);

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
  metrics::Counter* store_errors_;
};

}  // namespace ferry::fleet::server_internal
