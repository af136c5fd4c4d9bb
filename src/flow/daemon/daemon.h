// The dataflow daemon behind `ferry run`: starts every node of a dataflow,
// forwards their output, holds the start barrier, restarts nodes per their
// policy, stops the graph and reports what happened.
//
// Life of a run:
//   1. A run id ("df-<pid>-<4 hex>" or --name), each node's NodeConfig
//      (plan.h), and the control socket protocol::DaemonSocketName(run id).
//   1b. The nodes' `build:` commands run, in descriptor order (build.h).
//   2. Every node is started (own process group, dies with the daemon) with
//      FERRY_NODE_CONFIG, FERRY_NODE_ID, FERRY_DATAFLOW and its env:.
//   3. Start barrier: once every node said hello and ready, all get start.
//   4. Stop, on SIGINT/SIGTERM/SIGHUP, on `ferry stop <run id>` or when every
//      node finished: live nodes get stop and are killed (SIGKILL to the
//      group) after their stop_grace. A second Ctrl-C kills at once.
//   5. Restarts: on-failure (non-zero exit or a signal) or always, up to
//      max_restarts, after 100 ms doubling up to 5 s; once the new instance is
//      ready, the consumers of its outputs get {"type":"reconnect","input":ID}
//      and it gets start once they answer "reconnected" (at most 10 s). A
//      producer that will not run again sends its consumers "input_closed"
//      (a consumer instance that says hello later gets it right after its
//      hello, so a restarted consumer never waits for a finished producer).
//   6. The summary: per node its end and restarts, per edge its counters.
//
// Besides the messages of protocol.h the daemon understands, from a
// connection that has not said hello:
//   {"type":"stop_dataflow"}  ->  {"type":"stopping","dataflow":RUN_ID}
// and hangs up when the run is over (StopDataflow waits for that), and
//   {"type":"describe_dataflow"}  ->  {"type":"dataflow", ...}  (RunningDataflow)
// after which the connection stays open until the client or the run ends, and
//   {"type":"dataflow_stats"}  ->  {"type":"dataflow_stats", ...}  (DataflowStats)
//
// Thread safety: RunDataflow runs on the calling thread and, with
// handle_signals, installs process-wide signal handlers for its duration;
// run one at a time per process.
#pragma once

#include <chrono>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/flow/dataflow.h"
#include "flow/daemon/plan.h"
#include "flow/daemon/summary.h"
#include "flow/node/protocol.h"

namespace ferry::flow::daemon {

struct DaemonOptions {
  // The run id ("" = GenerateRunId()); checked with CheckRunName.
  std::string run_name;
  // Log files go to <log_dir>/<node>.log ("" = .ferry/logs/<run id>).
  std::string log_dir;
  // Where to write the summary as JSON ("" = nowhere).
  std::string summary_json;
  LaunchSettings launch = DefaultLaunchSettings();
  // How long nodes may take to become ready before the start fails.
  std::chrono::milliseconds start_timeout{60000};
  // Restart back-off: the first delay, doubled per restart up to the maximum.
  std::chrono::milliseconds restart_backoff{100};
  std::chrono::milliseconds restart_backoff_max{5000};
  // Forwarded node stdout and the summary go to `out`; forwarded stderr and
  // the daemon's notes to `err`. Either may be null (silence).
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // SIGINT, SIGTERM and SIGHUP stop the dataflow (a second one kills).
  bool handle_signals = true;
  // Run the nodes' `build:` commands (build.h) before starting anything; a
  // failing build returns its error from RunDataflow. `ferry run --no-build`
  // clears it.
  bool run_builds = true;
  bool print_summary = true;
};

// Runs `dataflow` until it ends. An error before any node started (a bad
// run name, a taken name, a log directory that cannot be created, a
// missing interpreter) is returned as a Status; afterwards the outcome is in
// the summary, whose exit_code is non-zero if the start failed or any node
// failed in the end.
Result<RunSummary> RunDataflow(const Dataflow& dataflow, const DaemonOptions& options);

// Asks the daemon of `run_id` to stop its dataflow, then waits up to `wait`
// for the run to end (TimedOut after that; zero: do not wait). IOError when no
// such run is reachable.
Status StopDataflow(const std::string& run_id, std::chrono::nanoseconds wait);

// A dataflow whose daemon runs on this machine (for `ferry ps`).
struct RunningDataflow {
  std::string run_id;
  // The daemon's answer: {"dataflow", "file", "daemon_pid", "started_unix_ms",
  // "phase", "log_dir" (absolute), "nodes": [{"id", "state", "pid",
  // "restarts", "outputs": [{"id" ("out", or "op/out" for an operator's),
  // "channel"}]}]}; null when it did not answer within the wait (a busy or
  // older daemon).
  nlohmann::json description;
};

// The dataflows running on this machine, found through their daemons'
// sockets, in run id order; each daemon is asked to describe its run and
// given `wait` to answer. IOError when the socket table cannot be read.
Result<std::vector<RunningDataflow>> ListDataflows(std::chrono::milliseconds wait);

// Asks the daemon of `run_id` to describe its run (RunningDataflow::description).
// The connection is returned too, still open: the daemon hangs it up when the
// run ends, so a caller that polls it learns of the end. IOError when no such
// run is reachable; TimedOut when the daemon does not answer within `wait`.
struct DescribedDataflow {
  nlohmann::json description;
  protocol::Connection connection;
};
Result<DescribedDataflow> DescribeDataflow(const std::string& run_id,
                                           std::chrono::milliseconds wait);

// Asks the daemon of `run_id` for its counters (for `ferry top`):
//   {"type":"dataflow_stats", "dataflow", "daemon_pid", "phase", "unix_ms",
//    "nodes": [{"id", "state", "pid" (-1 when not running), "restarts",
//               "instances", "stats_reports", "running_instance_reported",
//               "outputs"/"inputs": {ID: {"messages", "bytes", "bytes_copied", "drops"}}}],
//    "edges": [{"edge", "producer", "output", "consumer", "input", "queue_size",
//               "overflow", "reported", "messages", "bytes", "bytes_copied",
//               "drops", "sent", "received", "lost", "queued"}]}
// The counters are the run summary's at this moment: what node instances
// have reported, which they do in their "stats" message when they end, so a
// running instance's own traffic is not in them yet (unless it has sent
// "stats" already: running_instance_reported; the latest report counts). "queued" is sent -
// received - drops - lost (null while sent or lost is unknown). IOError when
// no such run is reachable, TimedOut after `wait`.
Result<nlohmann::json> DataflowStats(const std::string& run_id, std::chrono::milliseconds wait);

}  // namespace ferry::flow::daemon
