// Starting and ending node processes. Each child runs in a process group of
// its own (Ctrl-C in the terminal reaches only the daemon, which stops the
// graph in order), dies with the daemon (PR_SET_PDEATHSIG), has stdin on
// /dev/null and its stdout and stderr on pipes that the daemon reads.
//
// Thread-compatible: a ChildProcess is a move-only value.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "flow/transport/shm.h"

namespace ferry::flow::daemon {

struct SpawnRequest {
  std::string program;            // executable path (no PATH search)
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // complete environment, "NAME=value"
  std::string working_directory;  // "" = the daemon's
};

struct ChildProcess {
  pid_t pid = -1;
  internal::UniqueFd pidfd;      // readable once the child exited (may be invalid: poll waitpid)
  internal::UniqueFd stdout_fd;  // read ends, non-blocking
  internal::UniqueFd stderr_fd;
};

// How a child ended.
struct ExitStatus {
  bool exited = false;  // exit() or return from main
  int code = 0;         // with exited
  int signal = 0;       // killed by this signal (when !exited)

  bool success() const { return exited && code == 0; }
  // "exit 0", "exit 3", "signal 9 (Killed)".
  std::string ToString() const;
};

// Forks and executes. If the program cannot be executed, the child writes
// "ferry: cannot execute <program>: <reason>" to its stderr and exits 127.
Result<ChildProcess> Spawn(const SpawnRequest& request);

// Reaps `pid` if it has exited: the status, or nullopt while it runs.
Result<std::optional<ExitStatus>> TryReap(pid_t pid);

// Sends `signal` to the child's whole process group (the child too). Only
// for a child not reaped yet: its pid cannot have been reused.
void SignalGroup(pid_t pid, int signal);
// Kills what is left of the process group of a reaped child (nothing when
// the group is empty).
void KillLeftovers(pid_t pid);

// The environment of this process merged with `overrides` ("NAME=value" each).
std::vector<std::string> MergeEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides);

}  // namespace ferry::flow::daemon
