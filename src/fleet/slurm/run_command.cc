#include "fleet/slurm/run_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

namespace ferry::fleet::slurm::internal {

namespace {

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// Writes to the child's stdin without SIGPIPE killing this process when the
// child has closed it: the signal is blocked in this thread and a pending
// one is taken back afterwards.
ssize_t WriteNoSigpipe(int fd, const char* data, size_t size) {
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  ssize_t written = ::write(fd, data, size);
  const int saved_errno = errno;
  if (written < 0 && saved_errno == EPIPE) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = saved_errno;
  return written;
}

}  // namespace

Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& environment,
                                 const std::string& input, double timeout_s) {
  if (argv.empty() || argv[0].empty() || argv[0].front() != '/') {
    return Status::Invalid("run: the program must be an absolute path");
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  env_strings.reserve(environment.size());
  for (const auto& [key, value] : environment) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);

  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0 ||
      ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int saved = errno;
    for (int* fd :
         {&in_pipe[0], &in_pipe[1], &out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1]}) {
      CloseFd(fd);
    }
    return Status::IOError(std::string("run: pipe: ") + std::strerror(saved));
  }
  // posix_spawn rather than fork: glibc starts the child with vfork
  // semantics, so a server with a large address space and many threads does
  // not pay for copying its page tables on every sbatch (docs/benchmarks.md,
  // "Slurm pools").
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attributes);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  sigset_t none, pipe_only;
  sigemptyset(&none);
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &pipe_only);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    for (int* fd :
         {&in_pipe[0], &in_pipe[1], &out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1]}) {
      CloseFd(fd);
    }
    if (spawned == ENOENT || spawned == EACCES || spawned == ENOEXEC) {
      // What a shell would say: the program could not be run.
      CommandResult result;
      result.exit_code = 127;
      result.err = "exec failed: " + std::string(std::strerror(spawned)) + "\n";
      return result;
    }
    return Status::IOError(std::string("run: posix_spawn: ") + std::strerror(spawned));
  }
  CloseFd(&in_pipe[0]);
  CloseFd(&out_pipe[1]);
  CloseFd(&err_pipe[1]);
  int in_fd = in_pipe[1], out_fd = out_pipe[0], err_fd = err_pipe[0];
  ::fcntl(in_fd, F_SETFL, O_NONBLOCK);
  if (input.empty()) CloseFd(&in_fd);

  CommandResult result;
  size_t input_done = 0;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  bool timed_out = false;
  while (out_fd >= 0 || err_fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[3];
    int count = 0;
    int out_index = -1, err_index = -1, in_index = -1;
    if (out_fd >= 0) {
      out_index = count;
      fds[count++] = {out_fd, POLLIN, 0};
    }
    if (err_fd >= 0) {
      err_index = count;
      fds[count++] = {err_fd, POLLIN, 0};
    }
    if (in_fd >= 0) {
      in_index = count;
      fds[count++] = {in_fd, POLLOUT, 0};
    }
    const int ready = ::poll(fds, count, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[16384];
    auto drain = [&](int index, int* fd, std::string* sink) {
      if (index < 0 || fds[index].revents == 0) return;
      const ssize_t got = ::read(*fd, buffer, sizeof(buffer));
      if (got > 0) {
        sink->append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        CloseFd(fd);
      }
    };
    drain(out_index, &out_fd, &result.out);
    drain(err_index, &err_fd, &result.err);
    if (in_index >= 0 && fds[in_index].revents != 0) {
      const ssize_t wrote =
          WriteNoSigpipe(in_fd, input.data() + input_done, input.size() - input_done);
      if (wrote > 0) input_done += static_cast<size_t>(wrote);
      if ((wrote < 0 && errno != EAGAIN && errno != EINTR) || input_done == input.size()) {
        CloseFd(&in_fd);
      }
    }
  }
  CloseFd(&in_fd);
  CloseFd(&out_fd);
  CloseFd(&err_fd);
  if (timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::TimedOut("run: " + argv[0] + " did not finish within " +
                            std::to_string(timeout_s) + " s (killed)");
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace ferry::fleet::slurm::internal
