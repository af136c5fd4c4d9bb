#include "fleet/server/server_metrics.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
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
// Waits for capacity: 0.1 s to ~3.6 h.
const std::vector<double> kWaitBuckets = metrics::ExponentialBuckets(0.1, 2, 18);

std::string ParentPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

const char* LevelOf(const std::string& path) {
  const auto slashes = std::count(path.begin(), path.end(), '/');
  return slashes == 0 ? "tenant" : slashes == 1 ? "team" : "user";
}

void RenderQuotas(const std::vector<sched::QuotaStanding>& quotas, metrics::Writer* w) {
  if (quotas.empty()) return;
  using Labels = std::vector<std::pair<std::string, std::string>>;
  auto labels = [](const sched::QuotaStanding& q) -> Labels {
    return {{"quota", q.path},
            {"model", q.gpu_model.empty() ? "any" : q.gpu_model},
            {"cohort", q.cohort}};
  };
  struct Series {
    const char* name;
    const char* help;
    double (*value)(const sched::QuotaStanding&);
  };
  const Series series[] = {
      {"ferry_quota_nominal_gpus",
       "GPUs a quota guarantees (nominal), by quota path, model "
       "and cohort.",
       [](const sched::QuotaStanding& q) { return static_cast<double>(q.nominal); }},
      {"ferry_quota_used_gpus", "GPUs held by running jobs charged on a quota.",
       [](const sched::QuotaStanding& q) { return static_cast<double>(q.used); }},
      {"ferry_quota_borrowed_gpus",
       "GPUs a quota uses above its nominal (borrowed from its "
       "cohort).",
       [](const sched::QuotaStanding& q) { return static_cast<double>(q.borrowed); }},
      {"ferry_quota_lent_gpus",
       "Unused nominal GPUs of a quota that others of its cohort "
       "borrow (split over the lenders in proportion to what each "
       "can lend).",
       [](const sched::QuotaStanding& q) { return q.lent; }},
  };
  for (const Series& s : series) {
    w->Family(s.name, "gauge", s.help);
    for (const sched::QuotaStanding& q : quotas) w->Sample(s.name, labels(q), s.value(q));
  }
  w->Family("ferry_quota_borrowing_limit_gpus", "gauge",
            "Most GPUs a quota may borrow (quotas without a limit are left out).");
  for (const sched::QuotaStanding& q : quotas) {
    if (q.borrowing_limit) {
      w->Sample("ferry_quota_borrowing_limit_gpus", labels(q),
                static_cast<double>(*q.borrowing_limit));
    }
  }
  w->Family("ferry_quota_lending_limit_gpus", "gauge",
            "Most unused nominal GPUs a quota lends (quotas without a limit are left out).");
  for (const sched::QuotaStanding& q : quotas) {
    if (q.lending_limit) {
      w->Sample("ferry_quota_lending_limit_gpus", labels(q), static_cast<double>(*q.lending_limit));
    }
  }
}

// Fair share per tenant, team and user. The weighted share compares a
// path's part of its siblings' usage with its part of their shares: 1 is
// exactly its share, 2 twice it, 0 no usage (Kueue's weighted share plays
// the same role for cluster queues).
void RenderShares(const std::vector<sched::ShareStanding>& shares, metrics::Writer* w) {
  if (shares.empty()) return;
  std::map<std::string, std::pair<double, double>> siblings;  // parent → (usage, shares)
  for (const sched::ShareStanding& s : shares) {
    auto& sum = siblings[ParentPath(s.path)];
    sum.first += s.usage;
    sum.second += s.shares;
  }
  auto labels = [](const sched::ShareStanding& s) {
    return std::vector<std::pair<std::string, std::string>>{{"path", s.path},
                                                            {"level", LevelOf(s.path)}};
  };
  w->Family("ferry_fair_share_shares", "gauge",
            "Configured fair-share weight of a tenant, team or user path.");
  for (const auto& s : shares) w->Sample("ferry_fair_share_shares", labels(s), s.shares);
  w->Family("ferry_fair_share_usage_gpu_seconds", "gauge",
            "Decayed GPU-seconds a path has used (the fair-share usage).");
  for (const auto& s : shares) w->Sample("ferry_fair_share_usage_gpu_seconds", labels(s), s.usage);
  w->Family("ferry_fair_share_factor", "gauge",
            "Fair Tree factor in (0, 1]: higher is further below its share and served sooner.");
  for (const auto& s : shares) w->Sample("ferry_fair_share_factor", labels(s), s.fair_share);
  w->Family("ferry_fair_share_weighted_share", "gauge",
            "A path's part of its siblings' usage over its part of their shares (1: at its "
            "share).");
  for (const auto& s : shares) {
    const auto& [usage, weight] = siblings[ParentPath(s.path)];
    double value = 0;
    if (usage > 0 && weight > 0 && s.shares > 0) value = (s.usage / usage) / (s.shares / weight);
    w->Sample("ferry_fair_share_weighted_share", labels(s), value);
  }
}

void RenderProviders(const std::vector<ProvisioningController::ProviderMetrics>& providers,
                     metrics::Writer* w) {
  if (providers.empty()) return;
  using Counters = ResilientProvider::Counters;
  struct Series {
    const char* name;
    const char* help;
    int64_t Counters::*field;
  };
  const Series series[] = {
      {"ferry_provider_calls_total", "Calls to a cloud provider's API.", &Counters::calls},
      {"ferry_provider_retries_total", "Provider calls tried again after a failure.",
       &Counters::retries},
      {"ferry_provider_failures_total",
       "Provider calls that failed after every attempt, or were refused by the open breaker.",
       &Counters::failures},
      {"ferry_provider_breaker_opens_total", "Times a provider's circuit breaker opened.",
       &Counters::breaker_opens},
  };
  for (const Series& s : series) {
    w->Family(s.name, "counter", s.help);
    for (const auto& p : providers) {
      w->Sample(s.name, {{"provider", p.name}, {"type", p.type}},
                static_cast<double>(p.counters.*(s.field)));
    }
  }
  w->Family("ferry_provider_breaker_state", "gauge",
            "1 for the state a provider's circuit breaker is in (closed, open, half_open).");
  for (const auto& p : providers) {
    if (p.breaker.empty()) continue;
    for (const char* state : {"closed", "open", "half_open"}) {
      w->Sample("ferry_provider_breaker_state", {{"provider", p.name}, {"state", state}},
                p.breaker == state ? 1 : 0);
    }
  }
  w->Family("ferry_provider_nodes", "gauge",
            "Cloud nodes a provider listed last, by state (provisioning, running, ...).");
  for (const auto& p : providers) {
    for (const auto& [state, n] : p.nodes) {
      w->Sample("ferry_provider_nodes", {{"provider", p.name}, {"state", state}},
                static_cast<double>(n));
    }
  }
}

void RenderSlurm(const std::vector<SlurmController::ClusterMetrics>& clusters, metrics::Writer* w) {
  if (clusters.empty()) return;
  w->Family("ferry_slurm_reachable", "gauge",
            "1 while the last read of a Slurm cluster's nodes and jobs succeeded.");
  for (const auto& c : clusters) {
    w->Sample("ferry_slurm_reachable", {{"provider", c.name}}, c.reachable ? 1 : 0);
  }
  w->Family("ferry_slurm_jobs", "gauge", "Slurm jobs a Slurm pool's controller follows now.");
  for (const auto& c : clusters) {
    w->Sample("ferry_slurm_jobs", {{"provider", c.name}}, static_cast<double>(c.jobs));
  }
  w->Family("ferry_slurm_submitted_total", "counter",
            "Slurm jobs submitted by this server process.");
  for (const auto& c : clusters) {
    w->Sample("ferry_slurm_submitted_total", {{"provider", c.name}},
              static_cast<double>(c.submitted));
  }
}

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
                         .With()),
      lease_expiries_(&registry_
                           .AddCounter("ferry_node_lease_expiries_total",
                                       "Nodes declared LOST because their lease ran out.")
                           .With()),
      admissions_(&registry_
                       .AddCounter("ferry_job_admissions_total",
                                   "Job attempts admitted (placed on GPUs) by the scheduler.")
                       .With()),
      starts_(&registry_
                   .AddCounter("ferry_job_starts_total",
                               "Job attempts that reached RUNNING (their tasks started).")
                   .With()),
      completions_(&registry_.AddCounter(
          "ferry_job_completions_total",
          "Jobs that ended, by outcome (SUCCEEDED, FAILED, CANCELLED, TIMEOUT).", {"outcome"})),
      requeues_(&registry_.AddCounter(
          "ferry_job_requeues_total",
          "Jobs put back in the queue after an attempt was preempted or lost, by reason.",
          {"reason"})),
      admission_wait_(&registry_.AddHistogram(
          "ferry_job_admission_wait_seconds",
          "Time from submission (or requeue) to admission, per attempt.", {}, kWaitBuckets)),
      start_wait_(&registry_.AddHistogram(
          "ferry_job_start_wait_seconds",
          "Time from submission (or requeue) to RUNNING, per attempt.", {}, kWaitBuckets)) {}

void ServerMetrics::JobEvents(const std::vector<WatchedEvent>& events) {
  for (const WatchedEvent& w : events) {
    const JobEvent& e = w.event;
    if (e.type != "state" || !e.state) continue;
    auto since = [&]() -> int64_t {
      auto it = pending_since_.find(e.job_id);
      return it != pending_since_.end() ? it->second : w.job_created_ms;
    };
    switch (*e.state) {
      case JobState::kPending:
        pending_since_[e.job_id] = e.at_ms;
        if (e.reason != reason::kSubmitted) requeues_->With({e.reason}).Add();
        break;
      case JobState::kAdmitted:
        admissions_->Add();
        admission_wait_->With().Observe(static_cast<double>(e.at_ms - since()) / 1000.0);
        break;
      case JobState::kRunning:
        starts_->Add();
        start_wait_->With().Observe(static_cast<double>(e.at_ms - since()) / 1000.0);
        pending_since_.erase(e.job_id);
        break;
      case JobState::kSucceeded:
      case JobState::kFailed:
      case JobState::kCancelled:
      case JobState::kTimeout:
        completions_->With({std::string(ToString(*e.state))}).Add();
        pending_since_.erase(e.job_id);
        break;
      case JobState::kPreempted:
      case JobState::kLost:
        break;  // the requeue (PENDING) or the failure that follows counts
    }
  }
}

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

std::string ServerMetrics::StoreGauges(Store& store) {
  metrics::Writer writer;
  Result<std::vector<JobCount>> jobs = store.CountJobs();
  Result<std::vector<Node>> nodes = store.ListNodes();
  if (!jobs.ok() || !nodes.ok()) store_errors_->Add();

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
  Result<std::vector<AllocationCount>> held = store.CountAllocations();
  if (!held.ok()) store_errors_->Add();
  if (held.ok()) {
    writer.Family("ferry_pool_jobs", "gauge",
                  "Jobs holding allocations in each pool by state, tenant and team (a gang over"
                  " pools counts in each).");
    for (const AllocationCount& count : *held) {
      writer.Sample("ferry_pool_jobs",
                    {{"pool", count.pool},
                     {"state", count.state},
                     {"tenant", count.tenant},
                     {"team", count.team}},
                    static_cast<double>(count.jobs));
    }
    writer.Family("ferry_gpus_allocated", "gauge",
                  "GPUs held by open allocations by pool, tenant and team.");
    std::map<std::tuple<std::string, std::string, std::string>, int64_t> gpus;
    for (const AllocationCount& count : *held) {
      gpus[{count.pool, count.tenant, count.team}] += count.gpus;
    }
    for (const auto& [key, n] : gpus) {
      writer.Sample(
          "ferry_gpus_allocated",
          {{"pool", std::get<0>(key)}, {"tenant", std::get<1>(key)}, {"team", std::get<2>(key)}},
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
  if (nodes.ok()) {
    const std::vector<Pool> pools = SummarisePools(*nodes);
    writer.Family("ferry_gpus", "gauge", "GPUs of registered nodes by pool and model.");
    for (const Pool& pool : pools) {
      for (const auto& [model, n] : pool.gpus_by_model) {
        writer.Sample("ferry_gpus", {{"pool", pool.name}, {"model", model}},
                      static_cast<double>(n));
      }
    }
    writer.Family("ferry_gpus_free", "gauge",
                  "GPUs free for new work (ready, undrained nodes, no job) by pool.");
    for (const Pool& pool : pools) {
      writer.Sample("ferry_gpus_free", {{"pool", pool.name}}, pool.gpus_free);
    }
  }
  return writer.Take();
}

void ServerMetrics::RefreshStoreGauges(Store& store) {
  std::string text = StoreGauges(store);
  std::lock_guard<std::mutex> lock(gauges_mu_);
  gauges_ = std::move(text);
}

std::string ServerMetrics::Render(Store& store, const ScrapeInputs& inputs) {
  metrics::Writer writer;
  writer.Append(registry_.Render());
  writer.Append(store.RenderMetrics());
  if (cached_) {
    std::lock_guard<std::mutex> lock(gauges_mu_);
    writer.Append(gauges_);
  } else {
    writer.Append(StoreGauges(store));
  }
  RenderQuotas(inputs.quotas, &writer);
  RenderShares(inputs.shares, &writer);
  RenderProviders(inputs.providers, &writer);
  RenderSlurm(inputs.slurm, &writer);
  writer.Append(telemetry::ToPrometheus());
  return writer.Take();
}

}  // namespace ferry::fleet::server_internal
