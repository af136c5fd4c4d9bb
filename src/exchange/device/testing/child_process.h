// Test helper: runs one test of the current test binary in a fresh process.
//
// Tests of interprocess sharing need a second process with its own device
// context. fork() alone cannot give one: a CUDA driver initialised in the
// parent is unusable in a forked child. So the parent starts this binary
// again (through /proc/self/exe) with a --gtest_filter naming one child test
// and the handles in environment variables; the child test skips unless its
// variable is set. Header-only; Linux.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace ferry::device::testing {

struct ChildResult {
  // The exit code; 128 + signal when killed; -1 when it could not start or
  // overran its time (it is killed then).
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// A child started by StartTestInChild: its pid and the read end of its
// output pipe. Finish it with WaitForChild (always, so that it is reaped).
struct RunningChild {
  pid_t pid = -1;
  int output_fd = -1;
  std::string error;  // why it could not start
};

// Starts `test_name` ("Suite.Name") of this binary with `env` added to the
// environment; its stdout and stderr go to a pipe.
inline RunningChild StartTestInChild(const std::string& test_name,
                                     const std::vector<std::pair<std::string, std::string>>& env) {
  RunningChild child;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    child.error = std::string("pipe2: ") + std::strerror(errno);
    return child;
  }
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    // The child must not write the parent's gtest report.
    if (std::string_view(*entry).rfind("GTEST_OUTPUT=", 0) == 0) continue;
    environment.emplace_back(*entry);
  }
  for (const auto& [name, value] : env) environment.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string program = "/proc/self/exe";
  std::string filter = "--gtest_filter=" + test_name;
  std::string color = "--gtest_color=no";
  char* argv[] = {program.data(), filter.data(), color.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  const int spawned =
      ::posix_spawn(&child.pid, program.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    child.pid = -1;
    child.error = std::string("posix_spawn: ") + std::strerror(spawned);
    return child;
  }
  child.output_fd = fds[0];
  return child;
}

// Collects the child's output until it closes it, then reaps the child;
// past `timeout` the child is killed (and still reaped).
inline ChildResult WaitForChild(RunningChild& child,
                                std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  ChildResult result;
  if (child.pid < 0) {
    result.output = child.error;
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool overran = false;
  char chunk[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      overran = true;
      break;
    }
    pollfd readable{child.output_fd, POLLIN, 0};
    if (::poll(&readable, 1, static_cast<int>(std::min<int64_t>(left.count(), 100))) <= 0) {
      continue;
    }
    const ssize_t got = ::read(child.output_fd, chunk, sizeof(chunk));
    if (got <= 0) break;
    result.output.append(chunk, static_cast<size_t>(got));
  }
  ::close(child.output_fd);
  child.output_fd = -1;
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child.pid, &status, overran ? 0 : WNOHANG);
    if (done == child.pid) break;
    if (overran || std::chrono::steady_clock::now() > deadline) {
      overran = true;
      ::kill(child.pid, SIGKILL);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  child.pid = -1;
  if (overran) {
    result.output +=
        "\n[child overran its " + std::to_string(timeout.count()) + " ms and was killed]";
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

// StartTestInChild, then WaitForChild.
inline ChildResult RunTestInChild(const std::string& test_name,
                                  const std::vector<std::pair<std::string, std::string>>& env,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  RunningChild child = StartTestInChild(test_name, env);
  return WaitForChild(child, timeout);
}

// Bytes as lower-case hex and back, for handles in environment variables.
inline std::string ToHex(const void* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t index = 0; index < size; ++index) {
    out.push_back(kDigits[bytes[index] >> 4]);
    out.push_back(kDigits[bytes[index] & 15]);
  }
  return out;
}

// False unless `hex` is exactly 2 * size hex digits.
inline bool FromHex(std::string_view hex, void* out, size_t size) {
  if (hex.size() != 2 * size) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  auto* bytes = static_cast<uint8_t*>(out);
  for (size_t index = 0; index < size; ++index) {
    const int high = digit(hex[2 * index]);
    const int low = digit(hex[2 * index + 1]);
    if (high < 0 || low < 0) return false;
    bytes[index] = static_cast<uint8_t>(high << 4 | low);
  }
  return true;
}

}  // namespace ferry::device::testing
