// The agent's process supervisor: starts each task as its own process group,
// captures its stdout/stderr through pipes, reaps it and turns what happened
// into TaskReports (started, exited, launch_failed). Stop() sends SIGTERM to
// the group and SIGKILL after the grace period. When a task's main process
// exits, whatever is left of its process group is killed, so a task never
// outlives its report. Knows nothing about HTTP: the agent feeds it
// LaunchSpecs and ships what it reports.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ferry/fleet/store.h"

namespace ferry::fleet {

struct LaunchSpec {
  TaskRef ref;
  std::vector<std::string> argv;           // argv[0] is looked up in env's PATH unless it has a '/'
  std::map<std::string, std::string> env;  // the complete environment of the task
  std::string working_dir;                 // empty: the agent's current directory
  int64_t memory_limit_mb = 0;             // RLIMIT_AS of the task's processes; 0: none
  std::string log_path;                    // output is also appended here; empty: no file
  // Directories the task sees read-only (its staged inputs, its code):
  // bind-mounted read-only in a mount namespace of the task's own (with a
  // user namespace that maps the agent's uid to itself when the agent is not
  // root). Where neither namespace can be made, the directories' permission
  // bits are all that protect them.
  std::vector<std::string> read_only_dirs;
};

class TaskRunner {
 public:
  struct Options {
    // Output as it arrives ("stdout"/"stderr"), on the runner's thread. Every
    // chunk of a task is delivered before its exit report is queued. Must not
    // call back into the runner.
    std::function<void(const TaskRef& ref, const char* stream, std::string data)> on_output;
    // Called (on any thread) after reports were queued: a wake-up for the caller.
    std::function<void()> on_report;
    // How long output of a task is still collected after its main process exited.
    std::chrono::milliseconds drain_timeout{500};
  };

  explicit TaskRunner(Options options);
  // Kills every task's process group (SIGKILL) and reaps them.
  ~TaskRunner();
  TaskRunner(const TaskRunner&) = delete;
  TaskRunner& operator=(const TaskRunner&) = delete;

  // Starts a task and queues its "started" report, or a "launch_failed"
  // report when it cannot be started (empty argv, program not found, bad
  // working directory, exec error). A ref already known is ignored: a task
  // attempt runs at most once per runner.
  void Start(const LaunchSpec& spec);

  // SIGTERM to the task's process group now, SIGKILL when it is still alive
  // after `grace`. No effect on tasks that are not running; a second call
  // sends no second SIGTERM and may only shorten the grace.
  void Stop(const TaskRef& ref, std::chrono::milliseconds grace);

  // Stops every task and waits until all were reaped (SIGKILL after `grace`).
  void StopAll(std::chrono::milliseconds grace);

  // Reports queued since the last call, oldest first.
  std::vector<TaskReport> TakeReports();

  // Tasks started whose exit has not been reported yet (queued in TakeReports).
  std::vector<TaskRef> Running() const;

  // The main process id of a running task, or -1.
  pid_t Pid(const TaskRef& ref) const;

  // Waits until no task runs or `timeout` passes; true when none runs.
  bool WaitIdle(std::chrono::milliseconds timeout);

 private:
  struct Task;
  void Loop();
  void Wake();
  void Finish(Task& task, std::vector<TaskReport>* reports);
  void QueueReports(std::vector<TaskReport> reports);

  Options options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::unique_ptr<Task>> tasks_;  // GUARDED_BY(mutex_)
  std::vector<TaskReport> reports_;           // GUARDED_BY(mutex_)
  std::vector<TaskRef> known_;                // GUARDED_BY(mutex_): every ref ever started
  bool shutting_down_ = false;                // GUARDED_BY(mutex_)
  int wake_fd_ = -1;
  std::thread thread_;
};

// The exit message the agent reports: "exited with 3", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

}  // namespace ferry::fleet
