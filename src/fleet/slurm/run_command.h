// Runs a program without a shell and collects what it prints, with a
// deadline: the CLI client's way to call sbatch, squeue, sinfo and scancel.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ferry/base/status.h"

namespace ferry::fleet::slurm::internal {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out, err;
};

// Runs argv[0] (an absolute path) with `argv`, `input` on its stdin and
// exactly `environment` as its environment. Past `timeout_s` the child (and
// its process group) get SIGKILL and the call fails with kTimedOut. Errors
// only for failures to run it; a non-zero exit is a result. Thread-safe.
Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& environment,
                                 const std::string& input, double timeout_s);

}  // namespace ferry::fleet::slurm::internal
