// `ferry sim`: replays a job trace on a simulated cluster with the real
// scheduling core, once per policy, and prints a comparison table
// (docs/fleet-sim.md).
//
//   ferry sim --config cluster.yaml (--trace F.csv|F.json | --philly F | --helios F |
//             --synthetic gen.yaml ...) [--policy fifo,fair_share,drf+cost ...]
//             [--out DIR] [--cycle-s S] [--seed N] [--checkpoint] [--periodic]
//             [--staging start-then-fetch,stage-on-admit,prefetch,off]
//             [--staging-gbps G] [--staging-cache-gb GB] [--prefetch-window-s S]
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/sched.h"

namespace ferry::cli {

// A policy given to --policy: "+"-separated parts, each a queue ordering
// (fifo, fair_share, drf) or a placement scoring (binpack, spread, cost,
// latency, locality), at most one of each; "config" keeps the file's policies.
// Examples: "fair_share", "fifo+cost", "cost", "drf+binpack".
struct SimPolicy {
  std::string label;  // as written
  std::optional<fleet::sched::Ordering> ordering;
  std::optional<fleet::sched::Scoring> scoring;
};
Result<SimPolicy> ParseSimPolicy(std::string_view text);
// Sets the ordering, and the scoring of default_scoring and of every pool set.
void ApplySimPolicy(const SimPolicy& policy, fleet::sched::Config* config);

// A file or directory name for a run label ("a/b+c" -> "a_b+c").
std::string RunDirName(std::string_view label);

// Registers `ferry sim` on `app`.
class SimCommand {
 public:
  explicit SimCommand(CLI::App& app);
  ~SimCommand();
  // After app.parse(): runs the simulations when `sim` was parsed and returns
  // the exit code (0 ok, 1 a file could not be read or a run failed, 2 usage),
  // -1 when it was not.
  int Run(std::ostream& out, std::ostream& err);

 private:
  struct Args;
  std::unique_ptr<Args> args_;
  CLI::App* command_ = nullptr;
};

// The whole command line after "ferry" ("sim", "--config", ...): parses and
// runs; for tests.
int RunSimCommandLine(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ferry::cli
