// Child processes: pipes, process groups, exit statuses, exec failures.
#include "flow/daemon/process.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "testing/test_util.h"

namespace ferry::flow::daemon {
namespace {

// Everything a pipe delivers until end of stream (bounded by 10 s).
std::string ReadAll(int fd) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, 100) <= 0) continue;
    char chunk[4096];
    ssize_t count = ::read(fd, chunk, sizeof(chunk));
    if (count == 0) break;
    if (count > 0) text.append(chunk, static_cast<size_t>(count));
  }
  return text;
}

// Waits (bounded by 10 s) for the child to end.
ExitStatus Reap(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto reaped = TryReap(pid);
    EXPECT_TRUE(reaped.ok()) << reaped.status().ToString();
    if (!reaped.ok()) break;
    if (reaped->has_value()) return **reaped;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  auto last = TryReap(pid);
  ADD_FAILURE() << "child " << pid << " did not end";
  return last.ok() && last->has_value() ? **last : ExitStatus{};
}

SpawnRequest Shell(const std::string& script,
                   std::vector<std::pair<std::string, std::string>> env = {}) {
  SpawnRequest request;
  request.program = "/bin/sh";
  request.argv = {"sh", "-c", script};
  request.env = MergeEnvironment(env);
  return request;
}

TEST(ProcessTest, PipesEnvironmentAndExitCode) {
  SpawnRequest request = Shell("echo \"out $FERRY_TEST_VALUE\"; echo err >&2; pwd; exit 3",
                               {{"FERRY_TEST_VALUE", "42"}});
  request.working_directory = "/tmp";
  ASSERT_OK_AND_ASSIGN(ChildProcess child, Spawn(request));
  EXPECT_EQ(ReadAll(child.stdout_fd.get()), "out 42\n/tmp\n");
  EXPECT_EQ(ReadAll(child.stderr_fd.get()), "err\n");
  ExitStatus status = Reap(child.pid);
  EXPECT_TRUE(status.exited);
  EXPECT_EQ(status.code, 3);
  EXPECT_FALSE(status.success());
  EXPECT_EQ(status.ToString(), "exit 3");
}

TEST(ProcessTest, ChildHasItsOwnProcessGroupAndStdinIsEmpty) {
  ASSERT_OK_AND_ASSIGN(ChildProcess child, Spawn(Shell("cat; sleep 30 & wait")));
  EXPECT_EQ(::getpgid(child.pid), child.pid);
  EXPECT_NE(::getpgid(child.pid), ::getpgrp());
  // The whole group goes: the shell and its sleeping child.
  SignalGroup(child.pid, SIGKILL);
  ExitStatus status = Reap(child.pid);
  EXPECT_FALSE(status.exited);
  EXPECT_EQ(status.signal, SIGKILL);
  EXPECT_NE(status.ToString().find("signal 9"), std::string::npos);
  // Both pipes reach end of stream, so no process of the group holds them.
  EXPECT_EQ(ReadAll(child.stdout_fd.get()), "");
}

TEST(ProcessTest, ExecFailureIsReportedOnStderr) {
  SpawnRequest request;
  request.program = "/nonexistent/program";
  request.argv = {"program"};
  request.env = MergeEnvironment({});
  ASSERT_OK_AND_ASSIGN(ChildProcess child, Spawn(request));
  EXPECT_NE(ReadAll(child.stderr_fd.get()).find("ferry: cannot execute /nonexistent/program"),
            std::string::npos);
  ExitStatus status = Reap(child.pid);
  EXPECT_TRUE(status.exited);
  EXPECT_EQ(status.code, 127);
}

TEST(ProcessTest, BadWorkingDirectoryIsReported) {
  SpawnRequest request = Shell("exit 0");
  request.working_directory = "/nonexistent/dir";
  ASSERT_OK_AND_ASSIGN(ChildProcess child, Spawn(request));
  EXPECT_NE(ReadAll(child.stderr_fd.get()).find("cannot enter directory /nonexistent/dir"),
            std::string::npos);
  EXPECT_EQ(Reap(child.pid).code, 127);
}

TEST(ProcessTest, MergeEnvironmentOverrides) {
  ::setenv("FERRY_MERGE_TEST", "old", 1);
  auto env = MergeEnvironment({{"FERRY_MERGE_TEST", "new"}, {"FERRY_MERGE_ADDED", "x"}});
  ::unsetenv("FERRY_MERGE_TEST");
  int found = 0;
  for (const auto& entry : env) {
    if (entry.rfind("FERRY_MERGE_TEST=", 0) == 0) {
      EXPECT_EQ(entry, "FERRY_MERGE_TEST=new");
      ++found;
    }
    if (entry == "FERRY_MERGE_ADDED=x") ++found;
  }
  EXPECT_EQ(found, 2);
}

}  // namespace
}  // namespace ferry::flow::daemon
