// `ferry top [RUN] [--once] [--json] [--interval S]`: per node of the running
// dataflows (or of one), its state, restarts, CPU and memory (from /proc, the
// node's whole process group) and its message counters (from the daemon's
// `dataflow_stats` answer, daemon.h), refreshed every interval.
//
// Thread safety: thread-compatible plain functions and values.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace ferry::cli {

// CPU time and resident memory of one process group at one moment.
struct GroupUsage {
  int64_t cpu_ticks = 0;  // utime + stime of its processes, in clock ticks
  int64_t rss_bytes = 0;
  int processes = 0;
};

// Reads /proc/<pid>/stat of every process whose process group is one of
// `groups`; a group with no process left is absent from the result.
std::map<int64_t, GroupUsage> ReadGroupUsage(const std::vector<int64_t>& groups);

// What taps on a node's outputs counted so far: messages by the producers'
// sequence numbers (so those a tap missed count too) and the bytes of the
// messages the taps received.
struct TappedCount {
  int64_t messages = 0;
  int64_t bytes = 0;
};

// One sample of a dataflow: the daemon's stats answer, the usage of its
// nodes' groups and, when its outputs are tapped, their counts per node,
// taken at `at`.
struct TopSample {
  nlohmann::json stats;
  std::map<int64_t, GroupUsage> usage;
  std::map<std::string, TappedCount> tapped;
  std::chrono::steady_clock::time_point at;
};

// The rows `ferry top --json` prints for one dataflow, from two samples of it
// (`before` may be empty: no rates then, null): per node "id", "state",
// "pid", "restarts", "cpu_percent", "rss_bytes", "processes", "messages"
// (sent on its outputs, as reported to the daemon), "messages_per_s",
// "bytes", "bytes_per_s" (from the taps' counts when both samples have them,
// else from the reported counters when the running instance has reported:
// daemon.h's running_instance_reported; else null),
// "bytes_copied", "drops" (on its inputs), "queued" (waiting in its inputs'
// queues, null when unknown), plus the daemon's "edges".
nlohmann::json TopRows(const TopSample* before, const TopSample& after, int64_t ticks_per_second);

// The table of one dataflow's rows.
std::string FormatTop(const nlohmann::json& dataflow);

// A byte count in binary units: "512 B", "1.5 MiB" (ferry top and ferry topic).
std::string FormatBytes(double bytes);

struct TopOptions {
  std::string run_id;  // "" = every dataflow running here
  bool once = false;
  bool json = false;
  // Tap every output (as `ferry topic hz` does) for live messages/s and bytes/s.
  bool taps = true;
  std::chrono::milliseconds interval{1000};
};

// Runs the command: live, a refreshed screen until Ctrl-C or the dataflows
// end; with once, two samples one interval apart (--once: at most 1 s) and
// one table or JSON document. Returns the exit code (1 when the run named is
// not running, with the reason on `err`).
int RunTop(const TopOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::cli
