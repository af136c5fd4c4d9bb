#include "fleet/agent/task_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

namespace ferry::fleet {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = size_t{64} * 1024;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

// What the child writes to the status pipe when it cannot exec.
struct ChildFailure {
  int stage = 0;  // 1 chdir, 2 rlimit, 3 exec
  int error = 0;
};

// Child side of Start: only async-signal-safe calls between fork and exec.
// What the child writes to become root of nothing but its own mount
// namespace: "<uid> <uid> 1" and "<gid> <gid> 1", prepared before fork.
struct IdMaps {
  std::string uid_map;
  std::string gid_map;
};

// Writes `text` to a /proc file; async-signal-safe.
bool WriteProc(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// In the child: each of `dirs` (null-terminated) bind-mounted read-only in a
// private mount namespace. Returns false when the mounts failed after the
// namespace was made (the launch fails); true when done, or when no
// namespace could be made at all (permission bits protect the trees then).
bool MountReadOnly(const char* const* dirs, const IdMaps& maps) {
  if (unshare(CLONE_NEWNS) != 0) {
    if (geteuid() == 0 || unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return true;
    if (!WriteProc("/proc/self/setgroups", "deny") ||
        !WriteProc("/proc/self/uid_map", maps.uid_map) ||
        !WriteProc("/proc/self/gid_map", maps.gid_map)) {
      return false;
    }
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  for (const char* const* dir = dirs; *dir != nullptr; ++dir) {
    if (mount(*dir, *dir, nullptr, MS_BIND | MS_REC, nullptr) != 0) return false;
    if (mount(nullptr, *dir, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              nullptr) != 0) {
      return false;
    }
  }
  return true;
}

[[noreturn]] void ExecChild(pid_t parent, int null_fd, int out_fd, int err_fd, int status_fd,
                            const char* cwd, const struct rlimit* limit,
                            const char* const* read_only, const IdMaps& maps, const char* exe,
                            char* const* argv, char* const* envp) {
  auto fail = [status_fd](int stage) {
    ChildFailure failure{stage, errno};
    ssize_t ignored = write(status_fd, &failure, sizeof(failure));
    (void)ignored;
    _exit(127);
  };
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigaction(sig, &action, nullptr);  // fails harmlessly for SIGKILL, SIGSTOP
  }
  setsid();
  // The task dies with the agent, as a new agent instance means its tasks are gone.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  dup2(null_fd, STDIN_FILENO);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */) != 0)
#endif
  {
    const long max_fd = std::min<long>(sysconf(_SC_OPEN_MAX), 65536);
    for (int fd = 3; fd < max_fd; ++fd) {
      if (fd != status_fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  if (read_only[0] != nullptr && !MountReadOnly(read_only, maps)) fail(4);
  if (cwd != nullptr && chdir(cwd) != 0) fail(1);
  if (limit != nullptr && setrlimit(RLIMIT_AS, limit) != 0) fail(2);
  execve(exe, argv, envp);
  fail(3);
  _exit(127);
}

// argv[0] as execve needs it: kept when it has a '/', else found in PATH.
std::optional<std::string> ResolveProgram(const std::string& program,
                                          const std::map<std::string, std::string>& env) {
  if (program.find('/') != std::string::npos) return program;
  auto it = env.find("PATH");
  const std::string path = it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    struct stat info {};
    if (stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return std::nullopt;
}

TaskReport MakeReport(const TaskRef& ref, TaskReport::Kind kind, std::string message) {
  TaskReport report;
  report.ref = ref;
  report.kind = kind;
  report.message = std::move(message);
  report.at_ms = NowUnixMs();
  return report;
}

}  // namespace

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* name = strsignal(sig);
    return "killed by signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
  }
  return "ended with wait status " + std::to_string(wait_status);
}

struct TaskRunner::Task {
  TaskRef ref;
  pid_t pid = -1;
  int pidfd = -1;
  int out_fd = -1;
  int err_fd = -1;
  int log_fd = -1;
  std::optional<Clock::time_point> kill_at;
  bool term_sent = false;
  bool exited = false;  // the main process was reaped
  int wait_status = 0;
  Clock::time_point drain_until;
  bool finished = false;  // its exit report is on its way to reports_
};

TaskRunner::TaskRunner(Options options) : options_(std::move(options)) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { Loop(); });
}

TaskRunner::~TaskRunner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutting_down_ = true;
    for (auto& task : tasks_) {
      if (!task->exited) {
        kill(-task->pid, SIGKILL);
        task->kill_at = Clock::now();
      }
    }
  }
  Wake();
  thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void TaskRunner::Wake() {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void TaskRunner::QueueReports(std::vector<TaskReport> reports) {
  if (reports.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& report : reports) reports_.push_back(std::move(report));
    std::erase_if(tasks_, [](const std::unique_ptr<Task>& task) { return task->finished; });
  }
  changed_.notify_all();
  if (options_.on_report) options_.on_report();
}

void TaskRunner::Start(const LaunchSpec& spec) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shutting_down_) return;
    if (std::find(known_.begin(), known_.end(), spec.ref) != known_.end()) return;
    known_.push_back(spec.ref);
  }
  auto launch_failed = [&](std::string message) {
    QueueReports({MakeReport(spec.ref, TaskReport::Kind::kLaunchFailed, std::move(message))});
  };
  if (spec.argv.empty() || spec.argv[0].empty()) return launch_failed("empty command");
  std::optional<std::string> exe = ResolveProgram(spec.argv[0], spec.env);
  if (!exe) return launch_failed(spec.argv[0] + ": command not found in PATH");

  // Everything the child needs, prepared before fork (the child may not allocate).
  std::vector<char*> argv;
  for (const auto& arg : spec.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [key, value] : spec.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  struct rlimit limit {};
  if (spec.memory_limit_mb > 0) {
    limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(spec.memory_limit_mb) << 20;
  }

  int log_fd = -1;
  if (!spec.log_path.empty()) {
    std::error_code ignored;
    std::filesystem::create_directories(std::filesystem::path(spec.log_path).parent_path(),
                                        ignored);
    log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, status_pipe[2] = {-1, -1};
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto close_all = [&] {
    for (int* fd : {&out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1], &status_pipe[0],
                    &status_pipe[1], &log_fd}) {
      CloseFd(fd);
    }
    if (null_fd >= 0) close(null_fd);
  };
  if (null_fd < 0 || pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
      pipe2(status_pipe, O_CLOEXEC) != 0) {
    const std::string error = std::strerror(errno);
    close_all();
    return launch_failed("cannot create pipes: " + error);
  }

  const IdMaps maps{std::to_string(geteuid()) + " " + std::to_string(geteuid()) + " 1",
                    std::to_string(getegid()) + " " + std::to_string(getegid()) + " 1"};
  std::vector<const char*> read_only;
  std::string read_only_list;
  for (const std::string& dir : spec.read_only_dirs) {
    read_only.push_back(dir.c_str());
    read_only_list += (read_only_list.empty() ? "" : ", ") + dir;
  }
  read_only.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const std::string error = std::strerror(errno);
    close_all();
    return launch_failed("fork failed: " + error);
  }
  if (pid == 0) {
    ExecChild(parent, null_fd, out_pipe[1], err_pipe[1], status_pipe[1],
              spec.working_dir.empty() ? nullptr : spec.working_dir.c_str(),
              spec.memory_limit_mb > 0 ? &limit : nullptr, read_only.data(), maps, exe->c_str(),
              argv.data(), envp.data());
  }
  CloseFd(&out_pipe[1]);
  CloseFd(&err_pipe[1]);
  CloseFd(&status_pipe[1]);
  close(null_fd);

  ChildFailure failure;
  ssize_t got;
  do {
    got = read(status_pipe[0], &failure, sizeof(failure));
  } while (got < 0 && errno == EINTR);
  CloseFd(&status_pipe[0]);
  if (got > 0) {
    int ignored_status = 0;
    while (waitpid(pid, &ignored_status, 0) < 0 && errno == EINTR) {
    }
    CloseFd(&out_pipe[0]);
    CloseFd(&err_pipe[0]);
    CloseFd(&log_fd);
    const std::string error = std::strerror(failure.error);
    switch (failure.stage) {
      case 1:
        return launch_failed("cannot enter working directory " + spec.working_dir + ": " + error);
      case 2:
        return launch_failed("cannot set the memory limit: " + error);
      case 4:
        return launch_failed("cannot mount " + read_only_list + " read-only: " + error);
      default:
        return launch_failed("cannot execute " + *exe + ": " + error);
    }
  }

  auto task = std::make_unique<Task>();
  task->ref = spec.ref;
  task->pid = pid;
  task->pidfd = PidfdOpen(pid);
  task->out_fd = out_pipe[0];
  task->err_fd = err_pipe[0];
  task->log_fd = log_fd;
  fcntl(task->out_fd, F_SETFL, O_NONBLOCK);
  fcntl(task->err_fd, F_SETFL, O_NONBLOCK);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    reports_.push_back(
        MakeReport(spec.ref, TaskReport::Kind::kStarted, "pid " + std::to_string(pid)));
  }
  changed_.notify_all();
  Wake();
  if (options_.on_report) options_.on_report();
}

void TaskRunner::Stop(const TaskRef& ref, std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& task : tasks_) {
      if (task->ref != ref || task->exited) continue;
      // One SIGTERM per task: the server repeats a stop until the exit is reported.
      if (!task->term_sent) kill(-task->pid, SIGTERM);
      task->term_sent = true;
      const auto deadline = Clock::now() + std::max(grace, std::chrono::milliseconds(0));
      if (!task->kill_at || deadline < *task->kill_at) task->kill_at = deadline;
    }
  }
  Wake();
}

void TaskRunner::StopAll(std::chrono::milliseconds grace) {
  for (const TaskRef& ref : Running()) Stop(ref, grace);
  WaitIdle(grace + options_.drain_timeout + std::chrono::seconds(10));
}

std::vector<TaskReport> TaskRunner::TakeReports() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TaskReport> reports;
  reports.swap(reports_);
  return reports;
}

std::vector<TaskRef> TaskRunner::Running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TaskRef> refs;
  for (const auto& task : tasks_) refs.push_back(task->ref);
  return refs;
}

pid_t TaskRunner::Pid(const TaskRef& ref) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& task : tasks_) {
    if (task->ref == ref && !task->exited) return task->pid;
  }
  return -1;
}

bool TaskRunner::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [this] { return tasks_.empty(); });
}

void TaskRunner::Finish(Task& task, std::vector<TaskReport>* reports) {
  CloseFd(&task.out_fd);
  CloseFd(&task.err_fd);
  CloseFd(&task.log_fd);
  TaskReport report =
      MakeReport(task.ref, TaskReport::Kind::kExited, DescribeWaitStatus(task.wait_status));
  if (WIFSIGNALED(task.wait_status)) {
    report.signal = WTERMSIG(task.wait_status);
  } else {
    report.exit_code = WIFEXITED(task.wait_status) ? WEXITSTATUS(task.wait_status) : 255;
  }
  task.finished = true;
  reports->push_back(std::move(report));
}

void TaskRunner::Loop() {
  struct Output {
    TaskRef ref;
    const char* stream;
    std::string data;
  };
  std::vector<char> buffer(kReadChunk);
  for (;;) {
    std::vector<pollfd> fds;
    int timeout_ms = 1000;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (shutting_down_ && tasks_.empty()) break;
      fds.push_back({wake_fd_, POLLIN, 0});
      const auto now = Clock::now();
      auto until = [&](Clock::time_point when) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(when - now).count() + 1;
        timeout_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, timeout_ms));
      };
      for (const auto& task : tasks_) {
        if (task->finished) continue;
        if (task->out_fd >= 0) fds.push_back({task->out_fd, POLLIN, 0});
        if (task->err_fd >= 0) fds.push_back({task->err_fd, POLLIN, 0});
        if (task->exited) {
          until(task->drain_until);
          continue;
        }
        if (task->pidfd >= 0) {
          fds.push_back({task->pidfd, POLLIN, 0});
        } else {
          timeout_ms = std::min(timeout_ms, 20);  // no pidfd: poll for the exit
        }
        if (task->kill_at) until(*task->kill_at);
      }
    }
    if (poll(fds.data(), fds.size(), timeout_ms) > 0 && (fds[0].revents & POLLIN)) {
      uint64_t count;
      ssize_t ignored = read(wake_fd_, &count, sizeof(count));
      (void)ignored;
    }

    std::vector<Output> outputs;
    std::vector<TaskReport> reports;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto now = Clock::now();
      for (auto& task_ptr : tasks_) {
        Task& task = *task_ptr;
        if (task.finished) continue;
        for (auto [fd, stream] : {std::pair{&task.out_fd, "stdout"}, {&task.err_fd, "stderr"}}) {
          if (*fd < 0) continue;
          const ssize_t n = read(*fd, buffer.data(), buffer.size());
          if (n > 0) {
            if (task.log_fd >= 0) {
              ssize_t ignored = write(task.log_fd, buffer.data(), static_cast<size_t>(n));
              (void)ignored;
            }
            outputs.push_back(
                {task.ref, stream, std::string(buffer.data(), static_cast<size_t>(n))});
          } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            CloseFd(fd);
          }
        }
        if (!task.exited) {
          siginfo_t info{};
          if (waitid(P_PID, static_cast<id_t>(task.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
              info.si_pid == task.pid) {
            // Still a zombie, so the group id cannot be reused yet: end the
            // rest of the task's processes, then reap it.
            kill(-task.pid, SIGKILL);
            int status = 0;
            while (waitpid(task.pid, &status, 0) < 0 && errno == EINTR) {
            }
            task.exited = true;
            task.wait_status = status;
            task.drain_until = now + options_.drain_timeout;
            CloseFd(&task.pidfd);
          } else if (task.kill_at && now >= *task.kill_at) {
            kill(-task.pid, SIGKILL);
            task.kill_at.reset();
          }
        }
        if (task.exited && ((task.out_fd < 0 && task.err_fd < 0) || now >= task.drain_until)) {
          Finish(task, &reports);
        }
      }
    }
    if (options_.on_output) {
      for (auto& output : outputs)
        options_.on_output(output.ref, output.stream, std::move(output.data));
    }
    QueueReports(std::move(reports));
  }
}

}  // namespace ferry::fleet
