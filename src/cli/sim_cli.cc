// `ferry sim` (sim_cli.h, docs/fleet-sim.md).
#include "cli/sim_cli.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "ferry/fleet/sched_config.h"
#include "fleet/sim/report.h"
#include "fleet/sim/simulator.h"
#include "fleet/sim/trace.h"

namespace ferry::cli {

namespace sched = fleet::sched;
namespace sim = fleet::sim;

namespace {

// The policies a config runs with: its ordering and default scoring, plus
// each pool set that scores differently ("fifo+binpack,burst=latency").
std::string ConfigLabel(const sched::Config& config) {
  std::string label = std::string(sched::ToString(config.ordering)) + "+" +
                      std::string(sched::ToString(config.default_scoring));
  for (const sched::PoolSet& set : config.pool_sets) {
    if (set.scoring != config.default_scoring) {
      label += "," + set.name + "=" + std::string(sched::ToString(set.scoring));
    }
  }
  return label;
}

constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kUsage = 2;

Result<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::IOError(path + ": no such file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open");
  std::string text;
  char buffer[65536];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > limit)
      return Status::Invalid(path + ": larger than " + std::to_string(limit) + " bytes");
  }
  return text;
}

std::string Stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

}  // namespace

Result<SimPolicy> ParseSimPolicy(std::string_view text) {
  SimPolicy policy;
  policy.label = std::string(text);
  if (text.empty()) return Status::Invalid("empty policy");
  bool keep_config = false;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t plus = text.find('+', start);
    const std::string_view part =
        text.substr(start, plus == std::string_view::npos ? std::string_view::npos : plus - start);
    if (part.empty()) return Status::Invalid("policy '" + policy.label + "': empty part");
    if (part == "config") {
      keep_config = true;
    } else if (auto ordering = sched::ParseOrdering(part)) {
      if (policy.ordering) {
        return Status::Invalid("policy '" + policy.label + "': two queue orderings");
      }
      policy.ordering = ordering;
    } else if (auto scoring = sched::ParseScoring(part)) {
      if (policy.scoring) return Status::Invalid("policy '" + policy.label + "': two scorings");
      policy.scoring = scoring;
    } else {
      return Status::Invalid("policy '" + policy.label + "': unknown part '" + std::string(part) +
                             "' (orderings: fifo, fair_share, drf; scorings: binpack, spread, "
                             "cost, latency, locality; or config)");
    }
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
  if (keep_config && (policy.ordering || policy.scoring)) {
    return Status::Invalid("policy '" + policy.label + "': 'config' stands alone");
  }
  return policy;
}

void ApplySimPolicy(const SimPolicy& policy, sched::Config* config) {
  if (policy.ordering) config->ordering = *policy.ordering;
  if (policy.scoring) {
    config->default_scoring = *policy.scoring;
    for (sched::PoolSet& set : config->pool_sets) set.scoring = *policy.scoring;
  }
}

std::string RunDirName(std::string_view label) {
  std::string out;
  for (char c : label) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-' || c == '+';
    out.push_back(keep ? c : '_');
  }
  if (out.empty() || out == "." || out == "..") out = "run";
  return out;
}

struct SimCommand::Args {
  std::vector<std::string> configs;
  std::string trace, philly, helios;
  std::vector<std::string> synthetic;
  std::vector<std::string> policies;
  std::string out_dir;
  double cycle_s = 5;
  uint64_t seed = 1;
  bool checkpoint = false;
  bool periodic = false;
  double max_time_s = 0;
  int64_t max_jobs = 0;
  std::string gpu_model;
  bool quiet = false;
  std::vector<std::string> staging;
  double staging_gbps = 10;
  double staging_cache_gb = 2000;
  double prefetch_window_s = 0;
};

SimCommand::SimCommand(CLI::App& app) : args_(std::make_unique<Args>()) {
  Args& a = *args_;
  command_ = app.add_subcommand(
      "sim", "Simulate a cluster and a job trace with the scheduler; compare policies");
  command_
      ->add_option("--config", a.configs,
                   "Scheduler config file (pools, policies, quotas); repeat to compare configs")
      ->required();
  command_->add_option("--trace", a.trace, "A Ferry trace (.csv or .json; docs/fleet-traces.md)");
  command_->add_option("--philly", a.philly, "A Philly cluster_job_log to import");
  command_->add_option("--helios", a.helios, "A Helios cluster_log.csv to import");
  command_->add_option("--synthetic", a.synthetic,
                       "A synthetic generator config (YAML); repeat to merge workloads");
  command_
      ->add_option("--policy", a.policies,
                   "Policies to compare, comma-separated: ordering[+scoring], e.g. "
                   "fifo,fair_share,drf,fifo+cost (default: the config's)")
      ->delimiter(',');
  command_->add_option("--out", a.out_dir, "Write CSV and SVG reports into this directory");
  command_
      ->add_option("--cycle-s", a.cycle_s,
                   "Seconds between scheduling cycles, at most one per this (default 5)")
      ->check(CLI::Range(0.0, 86400.0));
  command_->add_option("--seed", a.seed, "Seed for spot interruptions (default 1)");
  command_->add_flag("--checkpoint", a.checkpoint,
                     "Preempted/interrupted jobs resume their work (default: restart from zero)");
  command_->add_flag("--periodic", a.periodic,
                     "A cycle every --cycle-s seconds (default: only when something changed)");
  command_->add_option("--max-time-s", a.max_time_s, "Stop at this simulated time (0: run out)")
      ->check(CLI::Range(0.0, 1e12));
  command_->add_option("--max-jobs", a.max_jobs, "Philly/Helios: keep the earliest N jobs")
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  command_->add_option("--gpu-model", a.gpu_model, "Philly/Helios: GPU model of every job");
  command_->add_flag("--quiet", a.quiet, "Print only the comparison table");
  command_
      ->add_option("--staging", a.staging,
                   "Model fetching job inputs, comma-separated to compare: start-then-fetch, "
                   "stage-on-admit, prefetch, off (default: off)")
      ->delimiter(',');
  command_
      ->add_option("--staging-gbps", a.staging_gbps,
                   "Fetch bandwidth of one node in Gbit/s (default 10)")
      ->check(CLI::Range(1e-6, 1e6));
  command_
      ->add_option("--staging-cache-gb", a.staging_cache_gb,
                   "Node cache capacity in GB (default 2000; 0: nothing kept)")
      ->check(CLI::Range(0.0, 1e9));
  command_
      ->add_option("--prefetch-window-s", a.prefetch_window_s,
                   "prefetch: use at most the last S seconds of a job's wait (default 0: all)")
      ->check(CLI::Range(0.0, 1e9));
}

SimCommand::~SimCommand() = default;

int SimCommand::Run(std::ostream& out, std::ostream& err) {
  if (!command_->parsed()) return -1;
  const Args& a = *args_;
  auto usage = [&](const std::string& message) {
    err << "ferry sim: " << message << "\n";
    return kUsage;
  };
  auto fail = [&](const std::string& message) {
    err << "ferry sim: " << message << "\n";
    return kFailed;
  };

  const int sources =
      !a.trace.empty() + !a.philly.empty() + !a.helios.empty() + !a.synthetic.empty();
  if (sources == 0) return usage("give a trace: --trace, --philly, --helios or --synthetic");
  if (sources > 1)
    return usage("give one kind of trace (--trace, --philly, --helios or --synthetic)");
  if (a.periodic && a.cycle_s <= 0) return usage("--periodic needs --cycle-s > 0");
  if ((a.max_jobs > 0 || !a.gpu_model.empty()) && a.philly.empty() && a.helios.empty()) {
    return usage("--max-jobs and --gpu-model apply to --philly and --helios");
  }

  std::vector<SimPolicy> policies;
  for (const std::string& text : a.policies) {
    auto policy = ParseSimPolicy(text);
    if (!policy.ok()) return usage(policy.status().message());
    policies.push_back(*policy);
  }
  if (policies.empty()) policies.push_back(SimPolicy{"config", std::nullopt, std::nullopt});
  std::vector<sim::Staging> stagings;
  for (const std::string& text : a.staging) {
    auto staging = sim::ParseStaging(text);
    if (!staging) {
      return usage("--staging: unknown model '" + text +
                   "' (start-then-fetch, stage-on-admit, prefetch, off)");
    }
    if (std::find(stagings.begin(), stagings.end(), *staging) != stagings.end()) {
      return usage("--staging: '" + text + "' given twice");
    }
    stagings.push_back(*staging);
  }
  const bool label_staging = !stagings.empty();
  if (stagings.empty()) stagings.push_back(sim::Staging::kOff);

  std::vector<sched::Config> configs;
  for (const std::string& path : a.configs) {
    auto config = fleet::LoadSchedulerConfig(path);
    if (!config.ok()) return fail(config.status().message());
    configs.push_back(std::move(*config));
  }

  // The trace.
  std::vector<sim::TraceJob> jobs;
  if (!a.trace.empty()) {
    auto trace = sim::ReadTrace(a.trace);
    if (!trace.ok()) return fail(trace.status().message());
    jobs = std::move(*trace);
  } else if (!a.philly.empty() || !a.helios.empty()) {
    sim::ImportOptions options;
    options.max_jobs = a.max_jobs;
    options.gpu_model = a.gpu_model;
    sim::ImportStats stats;
    auto imported = !a.philly.empty() ? sim::ImportPhilly(a.philly, options, &stats)
                                      : sim::ImportHelios(a.helios, options, &stats);
    if (!imported.ok()) return fail(imported.status().message());
    jobs = std::move(*imported);
    if (!a.quiet) {
      err << "imported " << stats.kept << " of " << stats.read << " jobs";
      for (const auto& [reason, count] : stats.skipped) err << ", " << count << " " << reason;
      err << "\n";
    }
  } else {
    for (const std::string& path : a.synthetic) {
      auto text = ReadSmallFile(path, 1 << 20);
      if (!text.ok()) return fail(text.status().message());
      auto options = sim::ParseSyntheticOptions(*text, path);
      if (!options.ok()) return fail(options.status().message());
      auto generated = sim::GenerateSynthetic(*options);
      if (!generated.ok()) return fail(path + ": " + generated.status().message());
      const std::string prefix = a.synthetic.size() > 1 ? Stem(path) + "-" : "";
      for (sim::TraceJob& job : *generated) {
        job.id = prefix + job.id;
        jobs.push_back(std::move(job));
      }
    }
    std::stable_sort(jobs.begin(), jobs.end(), [](const sim::TraceJob& l, const sim::TraceJob& r) {
      return l.submit_s < r.submit_s;
    });
  }
  if (!a.quiet) err << "trace: " << jobs.size() << " jobs\n";

  sim::SimOptions options;
  options.cycle_s = a.cycle_s;
  options.cycle_mode = a.periodic ? sim::CycleMode::kPeriodic : sim::CycleMode::kOnChange;
  options.checkpoint = a.checkpoint;
  options.seed = a.seed;
  options.max_time_s = a.max_time_s;
  options.staging.gbps = a.staging_gbps;
  options.staging.cache_gb = a.staging_cache_gb;
  options.staging.prefetch_window_s = a.prefetch_window_s;

  if (!a.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.out_dir, ec);
    if (ec) return fail(a.out_dir + ": cannot create: " + ec.message());
  }

  std::vector<sim::RunMetrics> runs;
  for (size_t c = 0; c < configs.size(); ++c) {
    for (const SimPolicy& policy : policies) {
      sched::Config config = configs[c];
      ApplySimPolicy(policy, &config);
      std::string group = policy.label;
      if (group == "config") group = ConfigLabel(config);
      if (configs.size() > 1) group = Stem(a.configs[c]) + "/" + group;
      for (const sim::Staging staging : stagings) {
        const std::string label =
            label_staging ? group + "/" + std::string(sim::ToString(staging)) : group;
        options.staging.policy = staging;
        auto result = sim::Simulate(config, jobs, options);
        if (!result.ok()) return fail(label + ": " + result.status().message());
        sim::RunMetrics metrics = sim::ComputeMetrics(*result, label);
        metrics.group = group;
        if (!a.quiet) {
          err << "run " << label << ": " << metrics.completed << " completed, " << metrics.failed
              << " failed, " << metrics.unfinished << " unfinished; " << metrics.cycles
              << " cycles, " << metrics.wall_s << " s\n";
        }
        if (!a.out_dir.empty()) {
          Status status =
              sim::WriteRunReport(a.out_dir + "/" + RunDirName(label), *result, metrics);
          if (!status.ok()) return fail(status.message());
        }
        runs.push_back(std::move(metrics));
      }
    }
  }

  const std::string table = sim::FormatComparisonMarkdown(runs);
  out << table;
  if (!a.out_dir.empty()) {
    Status status = sim::WriteTextFile(a.out_dir + "/runs.csv", sim::FormatRunsCsv(runs));
    if (status.ok()) status = sim::WriteTextFile(a.out_dir + "/comparison.md", table);
    if (!status.ok()) return fail(status.message());
    if (!a.quiet) err << "reports in " << a.out_dir << "\n";
  }
  return kOk;
}

int RunSimCommandLine(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"ferry", "ferry"};
  app.require_subcommand(1);
  SimCommand command(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error, out, err);
    return code == 0 ? 0 : kUsage;
  }
  return command.Run(out, err);
}

}  // namespace ferry::cli
