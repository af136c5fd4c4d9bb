// Child processes of the daemon (process.h).
#include "flow/daemon/process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

extern char** environ;

namespace ferry::flow::daemon {
namespace {

// Writes a whole string from the forked child (async-signal-safe).
void ChildWrite(int fd, const char* text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    ssize_t written = ::write(fd, text, length);
    if (written <= 0) {
      if (written < 0 && errno == EINTR) continue;
      return;
    }
    text += written;
    length -= static_cast<size_t>(written);
  }
}

Status MakePipe(internal::UniqueFd* read_end, internal::UniqueFd* write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return internal::ErrnoStatus("pipe2", errno);
  read_end->reset(fds[0]);
  write_end->reset(fds[1]);
  int flags = ::fcntl(fds[0], F_GETFL);
  if (flags < 0 || ::fcntl(fds[0], F_SETFL, flags | O_NONBLOCK) != 0) {
    return internal::ErrnoStatus("fcntl O_NONBLOCK", errno);
  }
  return Status::OK();
}

// In the child between fork and exec: only async-signal-safe calls.
[[noreturn]] void ExecChild(const char* program, char* const* argv, char* const* envp,
                            const char* working_directory, int stdin_fd, int stdout_fd,
                            int stderr_fd, pid_t daemon_pid) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The daemon may have died between fork and prctl.
  if (::getppid() != daemon_pid) ::_exit(127);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int signal_number = 1; signal_number < NSIG; ++signal_number) {
    if (signal_number == SIGKILL || signal_number == SIGSTOP) continue;
    ::sigaction(signal_number, &default_action, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(stdin_fd, 0) < 0 || ::dup2(stdout_fd, 1) < 0 || ::dup2(stderr_fd, 2) < 0) {
    ::_exit(127);
  }
  if (working_directory[0] != '\0' && ::chdir(working_directory) != 0) {
    const char* reason = std::strerror(errno);
    ChildWrite(2, "ferry: cannot enter directory ");
    ChildWrite(2, working_directory);
    ChildWrite(2, ": ");
    ChildWrite(2, reason);
    ChildWrite(2, "\n");
    ::_exit(127);
  }
  // Only 0, 1 and 2 survive the exec (a descriptor someone else opened
  // without O_CLOEXEC included).
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < 4096; ++fd) {
      int flags = ::fcntl(fd, F_GETFD);
      if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
  }
  ::execve(program, argv, envp);
  const char* reason = std::strerror(errno);
  ChildWrite(2, "ferry: cannot execute ");
  ChildWrite(2, program);
  ChildWrite(2, ": ");
  ChildWrite(2, reason);
  ChildWrite(2, "\n");
  ::_exit(127);
}

}  // namespace

std::string ExitStatus::ToString() const {
  if (exited) return "exit " + std::to_string(code);
  const char* name = ::strsignal(signal);
  return "signal " + std::to_string(signal) +
         (name != nullptr ? std::string(" (") + name + ")" : "");
}

std::vector<std::string> MergeEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::map<std::string, std::string> merged;
  std::vector<std::string> order;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string text = *entry;
    size_t equals = text.find('=');
    if (equals == std::string::npos || equals == 0) continue;
    std::string name = text.substr(0, equals);
    if (merged.emplace(name, text.substr(equals + 1)).second) order.push_back(name);
  }
  for (const auto& [name, value] : overrides) {
    if (merged.find(name) == merged.end()) order.push_back(name);
    merged[name] = value;
  }
  std::vector<std::string> result;
  result.reserve(order.size());
  for (const std::string& name : order) result.push_back(name + "=" + merged[name]);
  return result;
}

Result<ChildProcess> Spawn(const SpawnRequest& request) {
  if (request.argv.empty()) return Status::Invalid("empty command line");
  internal::UniqueFd stdout_read, stdout_write, stderr_read, stderr_write;
  FERRY_RETURN_NOT_OK(MakePipe(&stdout_read, &stdout_write));
  FERRY_RETURN_NOT_OK(MakePipe(&stderr_read, &stderr_write));
  internal::UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return internal::ErrnoStatus("open /dev/null", errno);

  // Everything the child touches is prepared before fork.
  std::vector<char*> argv;
  for (const std::string& arg : request.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& entry : request.env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  const pid_t daemon_pid = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) return internal::ErrnoStatus("fork", errno);
  if (pid == 0) {
    ExecChild(request.program.c_str(), argv.data(), envp.data(), request.working_directory.c_str(),
              dev_null.get(), stdout_write.get(), stderr_write.get(), daemon_pid);
  }
  // Also from this side, so that a signal to the group works at once.
  ::setpgid(pid, pid);
  ChildProcess child;
  child.pid = pid;
  child.stdout_fd = std::move(stdout_read);
  child.stderr_fd = std::move(stderr_read);
  auto pidfd = internal::OpenPidfd(pid);
  if (pidfd.ok()) child.pidfd = std::move(pidfd).MoveValueUnsafe();
  return child;
}

Result<std::optional<ExitStatus>> TryReap(pid_t pid) {
  int status = 0;
  for (;;) {
    pid_t reaped = ::waitpid(pid, &status, WNOHANG);
    if (reaped == 0) return std::optional<ExitStatus>();
    if (reaped < 0) {
      if (errno == EINTR) continue;
      return internal::ErrnoStatus("waitpid " + std::to_string(pid), errno);
    }
    ExitStatus result;
    if (WIFEXITED(status)) {
      result.exited = true;
      result.code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      result.signal = WTERMSIG(status);
    } else {
      continue;  // stopped or continued: still alive
    }
    return std::optional<ExitStatus>(result);
  }
}

void SignalGroup(pid_t pid, int signal) {
  if (pid <= 0) return;
  // The child itself too, should it have left its group.
  ::kill(-pid, signal);
  ::kill(pid, signal);
}

void KillLeftovers(pid_t pid) {
  if (pid > 0) ::kill(-pid, SIGKILL);
}

}  // namespace ferry::flow::daemon
