// `ferry logs RUN [NODE] [--follow] [--log-dir DIR]`: the log files of a
// dataflow's nodes (<log dir>/<node>.log, written by the daemon: what each
// node printed plus the daemon's notes about it).
//
// `ferry logs` is also the fleet command (`ferry logs JOB_ID`); main() asks
// IsDataflowLogsRequest which one is meant before parsing. The rule: a first
// argument that names a dataflow running here, that is not a fleet job id (a
// positive integer), or a --log-dir option, means a dataflow; otherwise it is
// a fleet job.
//
// Thread safety: the functions are thread-compatible (they read files and
// talk to daemons; RunDataflowLogs writes to the given streams).
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/base/status.h"

namespace ferry::cli {

// `args`: the words after "logs". True when they ask for a dataflow's logs
// (the rule above); the daemon of a running dataflow is looked up by name.
bool IsDataflowLogsRequest(const std::vector<std::string>& args);

struct DataflowLogsOptions {
  std::string run_id;
  std::string node;  // "" = every node
  bool follow = false;
  // Where the logs are ("" = ask the daemon, else .ferry/logs/<run id>).
  std::string log_dir;
  // How often --follow looks for new lines.
  std::chrono::milliseconds poll_interval{200};
};

// Prints the logs: one node's file as it is, or every node's lines with
// "[node] " in front, node after node in the dataflow's order. With follow,
// then prints new lines as they are written (prefixed when several nodes are
// shown) until the dataflow ends. Returns the exit code: 0, or 1 with a
// message on `err` (no such run or log directory, no such node).
int RunDataflowLogs(const DataflowLogsOptions& options, std::ostream& out, std::ostream& err);

// The whole `ferry logs` dataflow command line (`args`: the words after
// "logs"); 2 for bad usage, with CLI11's message.
int RunDataflowLogsCommandLine(const std::vector<std::string>& args, std::ostream& out,
                               std::ostream& err);

}  // namespace ferry::cli
