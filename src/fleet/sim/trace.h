// Workload traces for the fleet simulator: the job model, Ferry's own CSV/JSON trace format,
// importers for the public Philly and Helios logs, and a synthetic workload generator.
// The format and the importer mappings are documented in docs/fleet-traces.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"

namespace ferry::fleet::sim {

// One job of a trace: when it arrives, what it asks for and how long it runs once placed.
struct TraceJob {
  std::string id;
  std::string tenant, team, user;
  double submit_s = 0;    // seconds since the start of the trace
  double duration_s = 0;  // run time on its GPUs once all tasks are placed
  int tasks = 1;          // gang size: all tasks start together
  int gpus_per_task = 0;
  std::string gpu_model;  // empty: any model
  double cpus_per_task = 0;
  int64_t memory_mb_per_task = 0;
  int priority = 0;
  bool preemptible = false;
  double max_runtime_s = 0;  // 0: no limit
  std::vector<std::string> datasets;

  bool operator==(const TraceJob&) const = default;
};

// ---- Ferry's trace format

// Reads a trace file; the extension picks the format (.csv or .json). Every job is validated;
// the first error is returned as "file:line: column: message" (CSV) or
// "file: jobs[3].tasks: message" (JSON). Jobs come back sorted by submit_s (stable).
Result<std::vector<TraceJob>> ReadTrace(const std::string& path);
// The same from text; `name` stands for the file in error messages.
Result<std::vector<TraceJob>> ParseTraceCsv(std::string_view text, std::string_view name);
Result<std::vector<TraceJob>> ParseTraceJson(std::string_view text, std::string_view name);

// Writes jobs as CSV or JSON (by extension). Numbers are written so they read back exactly.
// Jobs that would not pass validation are refused before anything is written.
Status WriteTrace(const std::string& path, const std::vector<TraceJob>& jobs);
std::string FormatTraceCsv(const std::vector<TraceJob>& jobs);
std::string FormatTraceJson(const std::vector<TraceJob>& jobs);

// One CSV field (RFC 4180): quoted when it holds a comma, quote, line break or
// leading/trailing blank, with quotes doubled; as is otherwise.
std::string CsvQuote(std::string_view text);

// Checks one job against the format's rules; the message names the field ("tasks: ...").
Status ValidateJob(const TraceJob& job);

// ---- Importers for public cluster logs

struct ImportOptions {
  int64_t max_jobs = 0;  // keep at most this many (earliest first); 0: all
  // Keep jobs submitted in [window_start_s, window_end_s), measured from the earliest
  // submission in the file; window_end_s 0: no end.
  double window_start_s = 0;
  double window_end_s = 0;
  std::string gpu_model;  // assigned to every imported job (empty: any)
};

struct ImportStats {
  int64_t read = 0;  // job records in the file
  int64_t kept = 0;
  // Skipped records by reason: "never_ran", "no_end_time", "no_gpus", "bad_time",
  // "malformed", "outside_window", "over_max_jobs".
  std::map<std::string, int64_t> skipped;
  int64_t skipped_total() const;
};

// Microsoft Philly `cluster_job_log` (a JSON array of jobs with attempts).
Result<std::vector<TraceJob>> ImportPhilly(const std::string& path, const ImportOptions& options,
                                           ImportStats* stats = nullptr);
// S-Lab/SenseTime Helios `cluster_log.csv`.
Result<std::vector<TraceJob>> ImportHelios(const std::string& path, const ImportOptions& options,
                                           ImportStats* stats = nullptr);

// ---- Synthetic workloads

struct TenantSpec {
  std::string name;
  double weight = 1;               // share of arrivals, relative to the other tenants
  std::vector<std::string> teams;  // empty: the job's team is empty
};

// One outcome of a discrete distribution: `value` with `probability`.
struct Choice {
  int value = 1;
  double probability = 1;
};

// A data set a synthetic job reads, with the probability that a job reads it.
struct DatasetChoice {
  std::string name;
  double probability = 1;
};

struct SyntheticOptions {
  double arrival_rate_per_s = 1;  // Poisson arrivals
  int jobs = 1000;
  std::vector<TenantSpec> tenants = {{"default", 1, {}}};
  int users_per_team = 4;                     // users are "<tenant>-<team>-u<k>"
  std::vector<Choice> gang_sizes = {{1, 1}};  // tasks per job
  std::vector<Choice> gpus_per_task = {{1, 1}};
  // Lognormal run time with this median and sigma (of the underlying normal), clipped.
  double duration_median_s = 3600;
  double duration_sigma = 1;
  double duration_min_s = 60;
  double duration_max_s = 7 * 86400;
  std::vector<Choice> priorities = {{0, 1}};
  double preemptible_fraction = 0;
  std::string gpu_model;
  double cpus_per_gpu = 0;
  int64_t memory_mb_per_gpu = 0;
  uint64_t seed = 1;
  // Declared time limits (max_runtime_s), as users give them: factor × run time,
  // rounded up to the smallest of runtime_limit_steps_s that is at least that
  // (none: the product itself). 0: jobs declare no limit. Draws no random numbers,
  // so the rest of the trace is the same with or without it.
  double runtime_limit_factor = 0;
  std::vector<double> runtime_limit_steps_s;
  // Each job reads one of these data sets (empty: none; the probabilities sum
  // to 1). Drawn from a stream of their own, so the rest of the trace is the
  // same with or without them.
  std::vector<DatasetChoice> datasets;
};

// Slurm-style rounded limits: 1 h, 2 h, 4 h, 8 h, 24 h, 72 h, 7 days.
std::vector<double> SlurmRuntimeLimitSteps();

// Checks ranges, and that every distribution's probabilities are positive and sum to 1.
Status ValidateSyntheticOptions(const SyntheticOptions& options);
// Generates options.jobs jobs; the same options (seed included) give the same jobs on every
// platform. Options that fail ValidateSyntheticOptions are refused with its error.
Result<std::vector<TraceJob>> GenerateSynthetic(const SyntheticOptions& options);
// Parses a YAML generator config (keys as in SyntheticOptions; see docs/fleet-traces.md)
// through the base layer's YAML tree (its size, depth and alias limits). Errors read
// "<file_name>:<line>:<column>: <key path>: <message>", or "<line>:<column>: ..." when
// `file_name` is empty; unknown and repeated keys are errors.
Result<SyntheticOptions> ParseSyntheticOptions(std::string_view yaml_text,
                                               const std::string& file_name = "");

}  // namespace ferry::fleet::sim
