// Metrics, CSV, markdown and SVG reports of simulation runs (report.h).
#include "fleet/sim/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>

#include "ferry/base/markup.h"
#include "fleet/sim/trace.h"

namespace ferry::fleet::sim {
namespace {

std::string Num(double value) {
  if (!std::isfinite(value)) return "0";
  if (value == 0) return "0";
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "%.10g", value);
  return buffer;
}

std::string Fixed(double value, int decimals) {
  if (!std::isfinite(value)) value = 0;
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

// Markdown table cells must not break the row.
std::string MdCell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// A duration for people: seconds, minutes or hours.
std::string Duration(double s) {
  if (s < 120) return Fixed(s, 1) + " s";
  if (s < 7200) return Fixed(s / 60, 1) + " min";
  return Fixed(s / 3600, 2) + " h";
}

std::string Money(double value) {
  if (value >= 1e6) return "$" + Fixed(value / 1e6, 3) + "M";
  if (value >= 1e4) return "$" + Fixed(value / 1e3, 1) + "k";
  return "$" + Fixed(value, 2);
}

std::string Percent(double fraction) { return Fixed(100 * fraction, 1) + "%"; }

// Appends one CSV line: the fields (already quoted where they need it)
// joined by commas.
void AppendCsvRow(std::initializer_list<std::string> fields, std::string* out) {
  bool first = true;
  for (const std::string& field : fields) {
    if (!first) out->push_back(',');
    first = false;
    out->append(field);
  }
  out->push_back('\n');
}

}  // namespace

std::string_view PoolKind(const PoolUsage& pool) {
  if (pool.slurm) return "slurm";
  if (pool.cloud) return pool.spot ? "spot" : "cloud";
  return "onprem";
}

std::string_view ToString(JobEnd end) {
  switch (end) {
    case JobEnd::kCompleted:
      return "completed";
    case JobEnd::kTimedOut:
      return "timed_out";
    case JobEnd::kRejected:
      return "rejected";
    case JobEnd::kUnfinished:
      return "unfinished";
  }
  return "unfinished";
}

double JainIndex(const std::vector<double>& values) {
  double sum = 0, squares = 0;
  for (double x : values) {
    sum += x;
    squares += x * x;
  }
  if (values.empty() || squares <= 0) return 1;
  return sum * sum / (static_cast<double>(values.size()) * squares);
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * values.size());
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

RunMetrics ComputeMetrics(const SimResult& result, std::string label) {
  RunMetrics m;
  m.label = std::move(label);
  m.jobs = static_cast<int64_t>(result.jobs.size());
  std::vector<double> jct, queue;
  double slowdown_sum = 0;
  struct TenantSum {
    int64_t jobs = 0;
    double jct = 0, slowdown = 0, gpu_seconds = 0;
  };
  std::map<std::string, TenantSum> tenants;
  for (const JobOutcome& outcome : result.jobs) {
    const TraceJob& job = *outcome.job;
    TenantSum& tenant = tenants[job.tenant];
    tenant.gpu_seconds += outcome.gpu_seconds;
    m.gpu_hours += outcome.gpu_seconds / 3600;
    m.staging_gpu_hours += outcome.staging_gpu_s / 3600;
    m.avg_staging_s += outcome.staging_s;
    m.input_gb += outcome.input_gb;
    m.cached_gb += outcome.cached_gb;
    m.prefetched_gb += outcome.prefetched_gb;
    m.fetched_gb += outcome.fetched_gb;
    if (outcome.first_start_s >= 0) queue.push_back(outcome.first_start_s - job.submit_s);
    switch (outcome.end) {
      case JobEnd::kCompleted: {
        ++m.completed;
        const double t = outcome.end_s - job.submit_s;
        const double slowdown = t / std::max(job.duration_s, kSlowdownFloorS);
        jct.push_back(t);
        slowdown_sum += slowdown;
        ++tenant.jobs;
        tenant.jct += t;
        tenant.slowdown += slowdown;
        break;
      }
      case JobEnd::kTimedOut:
        ++m.timed_out;
        break;
      case JobEnd::kRejected:
        ++m.rejected;
        break;
      case JobEnd::kUnfinished:
        ++m.unfinished;
        break;
    }
  }
  m.failed = m.timed_out + m.rejected;
  m.staging = std::string(ToString(result.staging));
  if (result.placements > 0) m.avg_staging_s /= static_cast<double>(result.placements);
  m.cache_hit_ratio = m.input_gb > 0 ? m.cached_gb / m.input_gb : 0;
  for (double t : jct) m.avg_jct_s += t;
  if (!jct.empty()) m.avg_jct_s /= static_cast<double>(jct.size());
  m.p99_jct_s = Percentile(jct, 99);
  for (double t : queue) m.avg_queue_s += t;
  if (!queue.empty()) m.avg_queue_s /= static_cast<double>(queue.size());
  m.p99_queue_s = Percentile(queue, 99);
  if (!jct.empty()) m.avg_slowdown = slowdown_sum / static_cast<double>(jct.size());
  m.makespan_s = result.end_s - result.start_s;

  double busy_onprem = 0, ready_onprem = 0, busy_cloud = 0, ready_cloud = 0;
  for (const PoolUsage& pool : result.pools) {
    if (pool.cloud) {
      busy_cloud += pool.busy_gpu_s;
      ready_cloud += pool.ready_gpu_s;
      m.cost_cloud += pool.cost;
      m.cloud_gpu_hours += pool.billed_node_s * pool.gpus_per_node / 3600.0;
    } else {
      busy_onprem += pool.busy_gpu_s;
      ready_onprem += pool.ready_gpu_s;
      m.cost_onprem += pool.cost;
    }
  }
  m.util_onprem = ready_onprem > 0 ? busy_onprem / ready_onprem : 0;
  m.util_cloud = ready_cloud > 0 ? busy_cloud / ready_cloud : 0;
  m.util_total = ready_onprem + ready_cloud > 0
                     ? (busy_onprem + busy_cloud) / (ready_onprem + ready_cloud)
                     : 0;
  m.cost_total = m.cost_onprem + m.cost_cloud;

  std::map<std::string, const TenantShare*> shares;
  for (const TenantShare& share : result.tenants) shares[share.tenant] = &share;
  std::vector<double> slowdowns, ratios;
  for (const auto& [name, sum] : tenants) {
    TenantMetrics t;
    t.tenant = name;
    t.jobs = sum.jobs;
    t.gpu_seconds = sum.gpu_seconds;
    if (sum.jobs > 0) {
      t.avg_jct_s = sum.jct / static_cast<double>(sum.jobs);
      t.avg_slowdown = sum.slowdown / static_cast<double>(sum.jobs);
      slowdowns.push_back(t.avg_slowdown);
    }
    if (auto it = shares.find(name); it != shares.end()) {
      t.weight = it->second->weight;
      t.held_gpu_s = it->second->held_gpu_s;
      t.entitled_gpu_s = it->second->entitled_gpu_s;
      if (t.entitled_gpu_s > 0) {
        t.share_ratio = t.held_gpu_s / t.entitled_gpu_s;
        ratios.push_back(t.share_ratio);
      }
    }
    m.per_tenant.push_back(std::move(t));
  }
  m.tenants = static_cast<int>(ratios.size());
  m.jain = JainIndex(ratios);
  m.jain_slowdown = JainIndex(slowdowns);

  m.preemptions = result.preemptions;
  m.spot_interruptions = result.spot_interruptions;
  m.interrupted_jobs = result.interrupted_jobs;
  m.placements = result.placements;
  m.conflicts = result.conflicts;
  m.cycles = result.cycles;
  m.core_ms_avg = result.cycles > 0 ? result.core_ms_total / static_cast<double>(result.cycles) : 0;
  m.core_ms_max = result.core_ms_max;
  m.wall_s = result.wall_s;
  return m;
}

std::string FormatRunsCsv(const std::vector<RunMetrics>& runs) {
  std::string out =
      "run,jobs,completed,failed,timed_out,rejected,unfinished,avg_jct_s,p99_jct_s,avg_queue_s,"
      "p99_queue_s,avg_slowdown,makespan_s,util_onprem,util_cloud,util_total,cost_onprem,"
      "cost_cloud,cost_total,cloud_gpu_hours,jain,jain_slowdown,tenants,preemptions,spot_"
      "interruptions,"
      "interrupted_jobs,placements,conflicts,cycles,core_ms_avg,core_ms_max,wall_s,staging,"
      "gpu_hours,staging_gpu_hours,avg_staging_s,input_gb,cached_gb,prefetched_gb,fetched_gb,"
      "cache_hit_ratio\n";
  for (const RunMetrics& m : runs) {
    const std::initializer_list<std::string> fields = {CsvQuote(m.label),
                                                       std::to_string(m.jobs),
                                                       std::to_string(m.completed),
                                                       std::to_string(m.failed),
                                                       std::to_string(m.timed_out),
                                                       std::to_string(m.rejected),
                                                       std::to_string(m.unfinished),
                                                       Num(m.avg_jct_s),
                                                       Num(m.p99_jct_s),
                                                       Num(m.avg_queue_s),
                                                       Num(m.p99_queue_s),
                                                       Num(m.avg_slowdown),
                                                       Num(m.makespan_s),
                                                       Num(m.util_onprem),
                                                       Num(m.util_cloud),
                                                       Num(m.util_total),
                                                       Num(m.cost_onprem),
                                                       Num(m.cost_cloud),
                                                       Num(m.cost_total),
                                                       Num(m.cloud_gpu_hours),
                                                       Num(m.jain),
                                                       Num(m.jain_slowdown),
                                                       std::to_string(m.tenants),
                                                       std::to_string(m.preemptions),
                                                       std::to_string(m.spot_interruptions),
                                                       std::to_string(m.interrupted_jobs),
                                                       std::to_string(m.placements),
                                                       std::to_string(m.conflicts),
                                                       std::to_string(m.cycles),
                                                       Num(m.core_ms_avg),
                                                       Num(m.core_ms_max),
                                                       Num(m.wall_s),
                                                       m.staging,
                                                       Num(m.gpu_hours),
                                                       Num(m.staging_gpu_hours),
                                                       Num(m.avg_staging_s),
                                                       Num(m.input_gb),
                                                       Num(m.cached_gb),
                                                       Num(m.prefetched_gb),
                                                       Num(m.fetched_gb),
                                                       Num(m.cache_hit_ratio)};
    AppendCsvRow(fields, &out);
  }
  return out;
}

std::string FormatJobsCsv(const SimResult& result) {
  std::string out =
      "id,tenant,team,user,submit_s,duration_s,tasks,gpus_per_task,priority,preemptible,state,"
      "first_start_s,end_s,jct_s,queue_s,attempts,preemptions,interruptions,gpu_seconds,cost,pool,"
      "cloud,reason,staging_s,staging_gpu_s,input_gb,cached_gb,prefetched_gb,fetched_gb\n";
  for (const JobOutcome& o : result.jobs) {
    const TraceJob& j = *o.job;
    const bool started = o.first_start_s >= 0;
    const bool ended = o.end_s >= 0;
    const std::initializer_list<std::string> fields = {
        CsvQuote(j.id),
        CsvQuote(j.tenant),
        CsvQuote(j.team),
        CsvQuote(j.user),
        Num(j.submit_s),
        Num(j.duration_s),
        std::to_string(j.tasks),
        std::to_string(j.gpus_per_task),
        std::to_string(j.priority),
        j.preemptible ? "true" : "false",
        std::string(ToString(o.end)),
        started ? Num(o.first_start_s) : "",
        ended ? Num(o.end_s) : "",
        ended && o.end != JobEnd::kRejected ? Num(o.end_s - j.submit_s) : "",
        started ? Num(o.first_start_s - j.submit_s) : "",
        std::to_string(o.attempts),
        std::to_string(o.preemptions),
        std::to_string(o.interruptions),
        Num(o.gpu_seconds),
        Num(o.cost),
        CsvQuote(o.pool),
        o.cloud ? "true" : "false",
        CsvQuote(o.pending_reason),
        Num(o.staging_s),
        Num(o.staging_gpu_s),
        Num(o.input_gb),
        Num(o.cached_gb),
        Num(o.prefetched_gb),
        Num(o.fetched_gb)};
    AppendCsvRow(fields, &out);
  }
  return out;
}

std::string FormatTenantsCsv(const RunMetrics& metrics) {
  std::string out =
      "tenant,completed,avg_jct_s,avg_slowdown,gpu_seconds,weight,held_gpu_s,entitled_gpu_s,"
      "share_ratio\n";
  for (const TenantMetrics& t : metrics.per_tenant) {
    AppendCsvRow({CsvQuote(t.tenant), std::to_string(t.jobs), Num(t.avg_jct_s), Num(t.avg_slowdown),
                  Num(t.gpu_seconds), Num(t.weight), Num(t.held_gpu_s), Num(t.entitled_gpu_s),
                  Num(t.share_ratio)},
                 &out);
  }
  return out;
}

std::string FormatPoolsCsv(const SimResult& result) {
  std::string out =
      "pool,kind,price_per_gpu_hour,gpus_per_node,queue_delay_s,peak_nodes,nodes_provisioned,"
      "nodes_removed,billed_node_s,ready_gpu_s,busy_gpu_s,util,cost,attempts\n";
  for (const PoolUsage& p : result.pools) {
    AppendCsvRow({CsvQuote(p.name), std::string(PoolKind(p)), Num(p.price_per_gpu_hour),
                  std::to_string(p.gpus_per_node), Num(p.queue_delay_s),
                  std::to_string(p.peak_nodes), std::to_string(p.nodes_provisioned),
                  std::to_string(p.nodes_removed), Num(p.billed_node_s), Num(p.ready_gpu_s),
                  Num(p.busy_gpu_s), Num(p.ready_gpu_s > 0 ? p.busy_gpu_s / p.ready_gpu_s : 0),
                  Num(p.cost), std::to_string(p.attempts)},
                 &out);
  }
  return out;
}

std::string FormatTimelineCsv(const SimResult& result) {
  std::string out = "t_s,onprem_gpus,onprem_busy,cloud_gpus,cloud_busy,pending,running\n";
  for (const TimePoint& p : result.timeline) {
    AppendCsvRow({Num(p.t), std::to_string(p.onprem_gpus), std::to_string(p.onprem_busy),
                  std::to_string(p.cloud_gpus), std::to_string(p.cloud_busy),
                  std::to_string(p.pending), std::to_string(p.running)},
                 &out);
  }
  return out;
}

std::string FormatComparisonMarkdown(const std::vector<RunMetrics>& runs) {
  std::string out =
      "| run | avg JCT | p99 JCT | avg queue | p99 queue | makespan | util on-prem | util cloud "
      "| cost | Jain (share) | Jain (slowdown) | preempt. | spot int. | done / failed / open "
      "| JCT speedup | cost vs 1st |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  if (runs.empty()) return out;
  const RunMetrics& base = runs.front();
  for (const RunMetrics& m : runs) {
    const std::string speedup =
        m.avg_jct_s > 0 ? Fixed(base.avg_jct_s / m.avg_jct_s, 2) + "×" : "-";
    const std::string cost_vs = base.cost_total > 0
                                    ? (m.cost_total >= base.cost_total ? "+" : "") +
                                          Fixed(100 * (m.cost_total / base.cost_total - 1), 1) + "%"
                                    : "-";
    const bool any_cloud = m.cloud_gpu_hours > 0;
    out += "| " + MdCell(m.label) + " | " + Duration(m.avg_jct_s) + " | " + Duration(m.p99_jct_s) +
           " | " + Duration(m.avg_queue_s) + " | " + Duration(m.p99_queue_s) + " | " +
           Duration(m.makespan_s) + " | " + Percent(m.util_onprem) + " | " +
           (any_cloud ? Percent(m.util_cloud) : "-") + " | " + Money(m.cost_total) + " | " +
           Fixed(m.jain, 3) + " | " + Fixed(m.jain_slowdown, 3) + " | " +
           std::to_string(m.preemptions) + " | " + std::to_string(m.spot_interruptions) + " | " +
           std::to_string(m.completed) + " / " + std::to_string(m.failed) + " / " +
           std::to_string(m.unfinished) + " | " + speedup + " | " + cost_vs + " |\n";
  }
  if (std::none_of(runs.begin(), runs.end(),
                   [](const RunMetrics& m) { return m.staging != "off"; })) {
    return out;
  }
  out +=
      "\n| run | staging | inputs | cache hits (bytes) | prefetched | fetched on GPUs | "
      "staging GPU-h | GPU-h held | staging GPU-h saved vs start-then-fetch |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  auto group = [](const RunMetrics& m) { return m.group.empty() ? m.label : m.group; };
  for (const RunMetrics& m : runs) {
    const RunMetrics* baseline = nullptr;
    for (const RunMetrics& other : runs) {
      if (other.staging == "start-then-fetch" && group(other) == group(m)) baseline = &other;
    }
    std::string saved = "-";
    if (baseline != nullptr && baseline != &m) {
      const double hours = baseline->staging_gpu_hours - m.staging_gpu_hours;
      saved = Fixed(hours, 1);
      if (baseline->staging_gpu_hours > 0) {
        saved += " (" + Fixed(100 * hours / baseline->staging_gpu_hours, 1) + "%)";
      }
    }
    auto bytes = [&](double gb) {
      if (m.input_gb <= 0) return std::string("-");
      return Fixed(gb / 1000, 1) + " TB (" + Percent(gb / m.input_gb) + ")";
    };
    out += "| " + MdCell(m.label) + " | " + m.staging + " | " +
           (m.input_gb > 0 ? Fixed(m.input_gb / 1000, 1) + " TB" : "-") + " | " +
           bytes(m.cached_gb) + " | " + bytes(m.prefetched_gb) + " | " + bytes(m.fetched_gb) +
           " | " + Fixed(m.staging_gpu_hours, 1) + " | " + Fixed(m.gpu_hours, 1) + " | " + saved +
           " |\n";
  }
  return out;
}

std::string RenderTimelineSvg(const SimResult& result, std::string_view title) {
  // Time-weighted averages of the step functions over equal time bins.
  constexpr int kBins = 600;
  constexpr double kWidth = 960, kHeight = 560;
  constexpr double kLeft = 70, kRight = 20, kPlotW = kWidth - kLeft - kRight;
  constexpr double kTop1 = 60, kPanelH = 190, kTop2 = kTop1 + kPanelH + 70;
  const double t0 = result.start_s;
  const double t1 = std::max(result.end_s, t0 + 1e-9);
  const double span = t1 - t0;
  const double bin_s = span / kBins;

  struct Bin {
    double busy = 0, avail = 0, busy_onprem = 0, avail_onprem = 0, busy_cloud = 0, avail_cloud = 0,
           pending = 0;
  };
  std::vector<Bin> bins(kBins);
  const auto& points = result.timeline;
  for (size_t i = 0; i < points.size(); ++i) {
    const TimePoint& p = points[i];
    double a = std::max(p.t, t0);
    const double b = std::min(i + 1 < points.size() ? points[i + 1].t : t1, t1);
    while (a < b) {
      const int k = std::min(kBins - 1, static_cast<int>((a - t0) / bin_s));
      const double edge = std::min(b, t0 + (k + 1) * bin_s);
      const double w = std::max(edge - a, 0.0);
      Bin& bin = bins[static_cast<size_t>(k)];
      bin.busy_onprem += w * p.onprem_busy;
      bin.avail_onprem += w * p.onprem_gpus;
      bin.busy_cloud += w * p.cloud_busy;
      bin.avail_cloud += w * p.cloud_gpus;
      bin.busy += w * (p.onprem_busy + p.cloud_busy);
      bin.avail += w * (p.onprem_gpus + p.cloud_gpus);
      bin.pending += w * p.pending;
      if (edge <= a) break;
      a = edge;
    }
  }
  bool any_cloud = false;
  double max_pending = 0;
  for (Bin& bin : bins) {
    bin.pending /= bin_s;
    max_pending = std::max(max_pending, bin.pending);
    any_cloud = any_cloud || bin.avail_cloud > 0;
  }

  // Time axis in a unit that suits the span.
  double unit = 1;
  std::string unit_name = "s";
  if (span >= 3 * 86400) {
    unit = 86400;
    unit_name = "days";
  } else if (span >= 3 * 3600) {
    unit = 3600;
    unit_name = "hours";
  } else if (span >= 180) {
    unit = 60;
    unit_name = "minutes";
  }
  auto nice_step = [](double range, int target) {
    const double raw = range / target;
    const double mag = std::pow(10.0, std::floor(std::log10(raw > 0 ? raw : 1)));
    for (double f : {1.0, 2.0, 5.0, 10.0}) {
      if (raw <= f * mag) return f * mag;
    }
    return 10 * mag;
  };
  const double x_step = nice_step(span / unit, 8);
  double pending_top = max_pending > 0 ? max_pending : 1;
  const double y2_step = nice_step(pending_top, 4);
  pending_top = std::ceil(pending_top / y2_step) * y2_step;

  auto x_of = [&](double t) { return kLeft + (t - t0) / span * kPlotW; };
  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Fixed(kWidth, 0) + "\" height=\"" +
         Fixed(kHeight, 0) + "\" viewBox=\"0 0 " + Fixed(kWidth, 0) + " " + Fixed(kHeight, 0) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + Fixed(kLeft, 0) + "\" y=\"24\" font-size=\"16\">" + markup::Escape(title) +
         "</text>\n";

  // Panel frames, grid and axes.
  auto panel = [&](double top, const std::string& label, double y_max, double y_step,
                   bool percent) {
    svg += "<rect x=\"" + Fixed(kLeft, 1) + "\" y=\"" + Fixed(top, 1) + "\" width=\"" +
           Fixed(kPlotW, 1) + "\" height=\"" + Fixed(kPanelH, 1) +
           "\" fill=\"none\" stroke=\"#444\"/>\n";
    for (double v = 0; v <= y_max + 1e-9; v += y_step) {
      const double y = top + kPanelH - v / y_max * kPanelH;
      svg += "<line x1=\"" + Fixed(kLeft, 1) + "\" y1=\"" + Fixed(y, 1) + "\" x2=\"" +
             Fixed(kLeft + kPlotW, 1) + "\" y2=\"" + Fixed(y, 1) +
             "\" stroke=\"#ddd\"/>\n<text x=\"" + Fixed(kLeft - 6, 1) + "\" y=\"" +
             Fixed(y + 4, 1) + "\" text-anchor=\"end\">" + (percent ? Fixed(v, 0) + "%" : Num(v)) +
             "</text>\n";
    }
    for (double v = 0; v <= span / unit + 1e-9; v += x_step) {
      const double x = x_of(t0 + v * unit);
      svg += "<line x1=\"" + Fixed(x, 1) + "\" y1=\"" + Fixed(top + kPanelH, 1) + "\" x2=\"" +
             Fixed(x, 1) + "\" y2=\"" + Fixed(top + kPanelH + 4, 1) +
             "\" stroke=\"#444\"/>\n<text x=\"" + Fixed(x, 1) + "\" y=\"" +
             Fixed(top + kPanelH + 17, 1) + "\" text-anchor=\"middle\">" + Num(v) + "</text>\n";
    }
    svg += "<text x=\"" + Fixed(kLeft, 1) + "\" y=\"" + Fixed(top - 8, 1) + "\">" +
           markup::Escape(label) + "</text>\n";
    svg += "<text x=\"" + Fixed(kLeft + kPlotW, 1) + "\" y=\"" + Fixed(top + kPanelH + 32, 1) +
           "\" text-anchor=\"end\">time (" + unit_name + ")</text>\n";
  };
  panel(kTop1, "GPU utilisation (busy / available GPUs)", 100, 25, true);
  panel(kTop2, "Queue length (pending jobs)", pending_top, y2_step, false);

  auto polyline = [&](double top, double y_max, const std::string& colour, const auto& value_of,
                      const auto& present) {
    std::string path;
    bool open = false;
    for (int k = 0; k < kBins; ++k) {
      const Bin& bin = bins[static_cast<size_t>(k)];
      if (!present(bin)) {
        open = false;
        continue;
      }
      const double v = std::clamp(value_of(bin), 0.0, y_max);
      const double x = kLeft + (k + 0.5) / kBins * kPlotW;
      const double y = top + kPanelH - v / y_max * kPanelH;
      path += (open ? " L" : " M") + Fixed(x, 1) + " " + Fixed(y, 1);
      open = true;
    }
    if (path.empty()) return;
    svg += "<path d=\"" + path.substr(1) + "\" fill=\"none\" stroke=\"" + colour +
           "\" stroke-width=\"1.5\"/>\n";
  };
  const std::string kAll = "#1f77b4", kOnprem = "#2ca02c", kCloud = "#ff7f0e", kQueue = "#d62728";
  polyline(
      kTop1, 100, kAll, [](const Bin& b) { return 100 * b.busy / b.avail; },
      [](const Bin& b) { return b.avail > 0; });
  if (any_cloud) {
    polyline(
        kTop1, 100, kOnprem, [](const Bin& b) { return 100 * b.busy_onprem / b.avail_onprem; },
        [](const Bin& b) { return b.avail_onprem > 0; });
    polyline(
        kTop1, 100, kCloud, [](const Bin& b) { return 100 * b.busy_cloud / b.avail_cloud; },
        [](const Bin& b) { return b.avail_cloud > 0; });
  }
  polyline(
      kTop2, pending_top, kQueue, [](const Bin& b) { return b.pending; },
      [](const Bin&) { return true; });

  // Legend.
  std::vector<std::pair<std::string, std::string>> legend = {{kAll, "all GPUs"}};
  if (any_cloud) {
    legend.emplace_back(kOnprem, "on-prem");
    legend.emplace_back(kCloud, "cloud (READY nodes)");
  }
  legend.emplace_back(kQueue, "pending jobs");
  double lx = kLeft + 330;
  for (const auto& [colour, name] : legend) {
    svg += "<line x1=\"" + Fixed(lx, 1) + "\" y1=\"" + Fixed(kTop1 - 12, 1) + "\" x2=\"" +
           Fixed(lx + 18, 1) + "\" y2=\"" + Fixed(kTop1 - 12, 1) + "\" stroke=\"" + colour +
           "\" stroke-width=\"3\"/>\n<text x=\"" + Fixed(lx + 22, 1) + "\" y=\"" +
           Fixed(kTop1 - 8, 1) + "\">" + markup::Escape(name) + "</text>\n";
    lx += 40 + 7.0 * static_cast<double>(name.size());
  }
  svg += "</svg>\n";
  return svg;
}

Status WriteTextFile(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IOError(path + ": cannot write: " + std::strerror(errno));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return Status::IOError(path + ": write failed");
  return Status::OK();
}

Status WriteRunReport(const std::string& dir, const SimResult& result, const RunMetrics& metrics) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError(dir + ": cannot create: " + ec.message());
  FERRY_RETURN_NOT_OK(WriteTextFile(dir + "/run.csv", FormatRunsCsv({metrics})));
  FERRY_RETURN_NOT_OK(WriteTextFile(dir + "/jobs.csv", FormatJobsCsv(result)));
  FERRY_RETURN_NOT_OK(WriteTextFile(dir + "/tenants.csv", FormatTenantsCsv(metrics)));
  FERRY_RETURN_NOT_OK(WriteTextFile(dir + "/pools.csv", FormatPoolsCsv(result)));
  FERRY_RETURN_NOT_OK(WriteTextFile(dir + "/timeline.csv", FormatTimelineCsv(result)));
  FERRY_RETURN_NOT_OK(
      WriteTextFile(dir + "/timeline.svg", RenderTimelineSvg(result, metrics.label)));
  return Status::OK();
}

}  // namespace ferry::fleet::sim
