#include "fleet/server/server_metrics.h"

#include <map>
#include <tuple>
#include <vector>

#include "ferry/base/telemetry.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet::server_internal {
namespace {

std::string StatusClass(int status) {
  if (status < 100 || status > 599) return "other";
  return std::to_string(status / 100) + "xx";
}

// Request latencies from 1 ms to ~16 s; scheduler cycles from 0.1 ms to ~3 s.
const std::vector<double> kRequestBuckets = metrics::ExponentialBuckets(0.001, 2, 15);
const std::vector<double> kCycleBuckets = metrics::ExponentialBuckets(0.0001, 2, 15);

}  // namespace

ServerMetrics::ServerMetrics()
    : requests_(&registry_.AddCounter("ferry_http_requests_total",
                                      "API requests answered, by method, route and status class.",
                                      {"method", "route", "code"})),
      request_seconds_(&registry_.AddHistogram(
          "ferry_http_request_duration_seconds",
          "Time from routing a request to its answer, by method, route and status class.",
          {"method", "route", "code"}, kRequestBuckets)),
      in_flight_(&registry_
                      .AddGauge("ferry_http_requests_in_flight",
                                "API requests being handled now (long polls included).")
                      .With()),
      rate_limited_(&registry_
                         .AddCounter("ferry_http_rate_limited_requests_total",
                                     "API requests refused with 429 by the per-user rate limit.")
                         .With()),
      replays_(&registry_
                    .AddCounter("ferry_idempotent_replays_total",
                                "Submissions answered from an earlier one with the same "
                                "Idempotency-Key.")
                    .With()),
      cycle_seconds_(&registry_.AddHistogram("ferry_scheduler_cycle_duration_seconds",
                                             "Wall time of one scheduling cycle.", {},
                                             kCycleBuckets)),
      cycle_pending_(&registry_
                          .AddGauge("ferry_scheduler_cycle_pending_jobs",
                                    "Pending jobs the last scheduling cycle saw.")
                          .With()),
      cycle_considered_(&registry_
                             .AddGauge("ferry_scheduler_cycle_considered_jobs",
                                       "Jobs the last scheduling cycle tried to place.")
                             .With()),
      cycle_placed_(&registry_
                         .AddGauge("ferry_scheduler_cycle_placed_jobs",
                                   "Jobs the last scheduling cycle placed.")
                         .With()),
      placed_total_(&registry_
                         .AddCounter("ferry_scheduler_placements_total",
                                     "Jobs placed by the scheduler (each attempt once).")
                         .With()),
      backfilled_total_(&registry_
                             .AddCounter("ferry_scheduler_backfilled_total",
                                         "Jobs placed ahead of a reservation (backfill).")
                             .With()),
      last_cycle_(&registry_
                       .AddGauge("ferry_scheduler_last_cycle_timestamp_seconds",
                                 "Unix time of the last scheduling cycle.")
                       .With()),
      preemptions_(&registry_.AddCounter("ferry_scheduler_preemptions_total",
                                         "Running jobs the scheduler preempted, by reason.",
                                         {"reason"})),
      store_errors_(&registry_
                         .AddCounter("ferry_metrics_store_errors_total",
                                     "Scrapes whose store-backed gauges could not be read.")
                         .With()) {}

void ServerMetrics::Request(std::string_view method, std::string_view route, int status,
                            double seconds) {
  const std::vector<std::string> labels{std::string(method), std::string(route),
                                        StatusClass(status)};
  requests_->With(labels).Add();
  request_seconds_->With(labels).Observe(seconds);
}

void ServerMetrics::Cycle(const sched::CycleStats& stats, int64_t now_ms) {
  cycle_seconds_->With().Observe(stats.elapsed_ms / 1000.0);
  cycle_pending_->Set(stats.pending);
  cycle_considered_->Set(stats.considered);
  cycle_placed_->Set(stats.placed);
  placed_total_->Add(stats.placed);
  backfilled_total_->Add(stats.backfilled);
  last_cycle_->Set(static_cast<double>(now_ms) / 1000.0);
}

std::string ServerMetrics::Render(Store& store) {
  metrics::Writer writer;
  Result<std::vector<JobCount>> jobs = store.CountJobs();
  Result<std::vector<Node>> nodes = store.ListNodes();
  Result<std::vector<Pool>> pools = store.ListPools();
  if (!jobs.ok() || !nodes.ok() || !pools.ok()) store_errors_->Add();
  writer.Append(registry_.Render());

  if (jobs.ok()) {
    // Terminal jobs keep every reason; the gauge sums over reasons, and
    // pending jobs get their own family by reason.
    std::map<std::tuple<std::string, std::string, std::string>, int64_t> by_state;
    writer.Family("ferry_pending_jobs", "gauge",
                  "Pending jobs by the reason the scheduler last gave, tenant and team.");
    for (const JobCount& count : *jobs) {
      by_state[{count.state, count.tenant, count.team}] += count.jobs;
      if (count.state == "PENDING") {
        writer.Sample("ferry_pending_jobs",
                      {{"reason", count.reason}, {"tenant", count.tenant}, {"team", count.team}},
                      static_cast<double>(count.jobs));
      }
    }
    writer.Family("ferry_jobs", "gauge", "Jobs in the store by state, tenant and team.");
    for (const auto& [key, n] : by_state) {
      writer.Sample(
          "ferry_jobs",
          {{"state", std::get<0>(key)}, {"tenant", std::get<1>(key)}, {"team", std::get<2>(key)}},
          static_cast<double>(n));
    }
  }
  if (nodes.ok()) {
    std::map<std::pair<std::string, std::string>, int64_t> by_state;
    for (const Node& node : *nodes) {
      ++by_state[{node.pool, node.drain ? "DRAINING" : std::string(ToString(node.state))}];
    }
    writer.Family("ferry_nodes", "gauge",
                  "Registered nodes by pool and state (draining counts apart).");
    for (const auto& [key, n] : by_state) {
      writer.Sample("ferry_nodes", {{"pool", key.first}, {"state", key.second}},
                    static_cast<double>(n));
    }
  }
  if (pools.ok()) {
    writer.Family("ferry_gpus", "gauge", "GPUs of registered nodes by pool and model.");
    for (const Pool& pool : *pools) {
      for (const auto& [model, n] : pool.gpus_by_model) {
        writer.Sample("ferry_gpus", {{"pool", pool.name}, {"model", model}},
                      static_cast<double>(n));
      }
    }
    writer.Family("ferry_gpus_free", "gauge",
                  "GPUs free for new work (ready, undrained nodes, no job) by pool.");
    for (const Pool& pool : *pools) {
      writer.Sample("ferry_gpus_free", {{"pool", pool.name}}, pool.gpus_free);
    }
  }
  writer.Append(telemetry::ToPrometheus());
  return writer.Take();
}

}  // namespace ferry::fleet::server_internal
