// Reports of simulation runs: the metrics of one run, CSV files (one row per
// run, one row per job, the timeline), an SVG plot of GPU utilisation and
// queue length over time, and a comparison table across runs (markdown, CSV).
// Every metric is defined in docs/fleet-sim.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"
#include "fleet/sim/simulator.h"

namespace ferry::fleet::sim {

// Slowdowns divide by at least this run time, so very short jobs do not dominate.
inline constexpr double kSlowdownFloorS = 10;

struct TenantMetrics {
  std::string tenant;
  int64_t jobs = 0;  // completed
  double avg_jct_s = 0;
  double avg_slowdown = 0;    // mean of (end - submit) / max(duration, kSlowdownFloorS)
  double gpu_seconds = 0;     // held, all attempts
  double weight = 1;          // fair-share weight
  double held_gpu_s = 0;      // ∫ GPUs held dt
  double entitled_gpu_s = 0;  // ∫ weighted max-min fair share of the GPUs dt
  double share_ratio = 0;     // held / entitled (1: got exactly its fair share)
};

struct RunMetrics {
  std::string label;
  int64_t jobs = 0;
  int64_t completed = 0;
  int64_t failed = 0;  // timed out + rejected
  int64_t timed_out = 0;
  int64_t rejected = 0;
  int64_t unfinished = 0;
  double avg_jct_s = 0;  // completed jobs: end - submit
  double p99_jct_s = 0;
  double avg_queue_s = 0;  // jobs that started: first start - submit
  double p99_queue_s = 0;
  double avg_slowdown = 0;  // completed jobs
  double makespan_s = 0;    // last end - first submission
  double util_onprem = 0;   // busy / available GPU-seconds, on-prem pools
  double util_cloud = 0;    // cloud pools (available: while READY); 0 without cloud time
  double util_total = 0;
  double cost_onprem = 0;  // on-prem GPUs × price × makespan
  double cost_cloud = 0;   // cloud node-hours (request to removal) × GPUs × price
  double cost_total = 0;
  double cloud_gpu_hours = 0;  // billed
  double jain = 1;             // Jain's index over tenants' share ratios (held / entitled)
  double jain_slowdown = 1;    // Jain's index over tenants' average slowdowns
  int tenants = 0;             // tenants with an entitlement (that asked for GPUs)
  int64_t preemptions = 0;
  int64_t spot_interruptions = 0;
  int64_t interrupted_jobs = 0;
  int64_t placements = 0;
  int64_t conflicts = 0;
  int64_t cycles = 0;
  double core_ms_avg = 0;  // wall time per Scheduler::Cycle
  double core_ms_max = 0;
  double wall_s = 0;                      // wall time of the simulation
  std::vector<TenantMetrics> per_tenant;  // by tenant name
  // Staging of job inputs (SimOptions::staging; zeros when "off"), over all attempts.
  std::string staging = "off";  // ToString(Staging)
  // Runs that differ only by their staging share a group; the caller sets it
  // (empty: the label). The markdown compares each run with the group's
  // start-then-fetch run.
  std::string group;
  double gpu_hours = 0;          // held by jobs, all attempts
  double staging_gpu_hours = 0;  // of which idle waiting for inputs
  double avg_staging_s = 0;      // per attempt placed
  double input_gb = 0;           // inputs needed, per node and attempt
  double cached_gb = 0;          // found in the node cache
  double prefetched_gb = 0;      // fetched while queued
  double fetched_gb = 0;         // fetched on the GPUs' time
  double cache_hit_ratio = 0;    // cached_gb / input_gb (bytes; 0 without inputs)
};

// Jain's fairness index (Σx)² / (n·Σx²) of non-negative values: 1 when all are
// equal, 1/n when one value holds everything. 1 for no values or all zeros.
double JainIndex(const std::vector<double>& values);

// Nearest-rank percentile (p in [0, 100]) of unsorted values; 0 for none.
double Percentile(std::vector<double> values, double p);

RunMetrics ComputeMetrics(const SimResult& result, std::string label);

// One header line and one line per run (the comparison CSV).
std::string FormatRunsCsv(const std::vector<RunMetrics>& runs);
// One line per job of a run.
std::string FormatJobsCsv(const SimResult& result);
// One line per tenant.
std::string FormatTenantsCsv(const RunMetrics& metrics);
// One line per pool: its kind (PoolKind), price, nodes, available and busy
// GPU-seconds, utilisation, cost and the attempts placed there.
std::string FormatPoolsCsv(const SimResult& result);
// The timeline as recorded (t, GPUs, busy GPUs, pending, running).
std::string FormatTimelineCsv(const SimResult& result);
// A markdown table: one row per run; the first run is the baseline for the
// "JCT speedup" and "cost" columns. When a run modelled staging, a second
// table follows: inputs, cache hits, prefetched and fetched bytes, GPU-hours
// idle staging and those saved against the group's start-then-fetch run.
std::string FormatComparisonMarkdown(const std::vector<RunMetrics>& runs);

// A standalone SVG: GPU utilisation (all, on-prem, cloud) and queue length over time.
std::string RenderTimelineSvg(const SimResult& result, std::string_view title);

// Writes `text` to `path`, replacing it.
Status WriteTextFile(const std::string& path, std::string_view text);

// Writes run.csv, jobs.csv, tenants.csv, pools.csv, timeline.csv and timeline.svg into `dir`
// (created when missing).
Status WriteRunReport(const std::string& dir, const SimResult& result, const RunMetrics& metrics);

}  // namespace ferry::fleet::sim
