#include "fleet/agent/task_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/test_util.h"

namespace ferry::fleet {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Collects output and reports; every wait is bounded.
class Harness {
 public:
  Harness() {
    TaskRunner::Options options;
    options.on_output = [this](const TaskRef& ref, const char* stream, std::string data) {
      std::lock_guard<std::mutex> lock(mutex_);
      output_[{ref.job_id, std::string(stream)}] += data;
      changed_.notify_all();
    };
    options.on_report = [this] {
      std::lock_guard<std::mutex> lock(mutex_);
      changed_.notify_all();
    };
    runner_ = std::make_unique<TaskRunner>(std::move(options));
  }

  TaskRunner& runner() { return *runner_; }

  std::string Output(int64_t job, const std::string& stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    return output_[{job, stream}];
  }

  bool WaitForOutput(int64_t job, const std::string& stream, const std::string& text) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, seconds(20), [&] {
      return output_[{job, stream}].find(text) != std::string::npos;
    });
  }

  // Waits for a report of `kind` for job `job` (reports taken accumulate in reports_).
  std::optional<TaskReport> WaitForReport(int64_t job, TaskReport::Kind kind) {
    const auto deadline = std::chrono::steady_clock::now() + seconds(20);
    for (;;) {
      for (auto& report : runner_->TakeReports()) reports_.push_back(report);
      for (const auto& report : reports_) {
        if (report.ref.job_id == job && report.kind == kind) return report;
      }
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait_for(lock, milliseconds(20));
    }
  }

  const std::vector<TaskReport>& reports() const { return reports_; }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::pair<int64_t, std::string>, std::string> output_;
  std::vector<TaskReport> reports_;
  std::unique_ptr<TaskRunner> runner_;
};

LaunchSpec Shell(int64_t job, const std::string& script) {
  LaunchSpec spec;
  spec.ref = {job, 0, 1};
  spec.argv = {"sh", "-c", script};
  spec.env = {{"PATH", "/usr/bin:/bin"}};
  return spec;
}

bool ProcessGone(pid_t pid) {
  // Gone, or a zombie left to init (not ours to reap).
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

bool WaitGone(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    if (ProcessGone(pid)) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

TEST(TaskRunner, RunsATaskWithItsEnvironmentAndCapturesOutput) {
  Harness harness;
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / "ferry-runner-env")
                              .lexically_normal()
                              .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  LaunchSpec spec =
      Shell(1, "echo \"seed=$SEED gpus=$CUDA_VISIBLE_DEVICES\"; pwd; echo oops >&2; exit 3");
  spec.env["SEED"] = "7";
  spec.env["CUDA_VISIBLE_DEVICES"] = "2,3";
  spec.working_dir = dir;
  spec.log_path = dir + "/logs/1-1-0.log";
  harness.runner().Start(spec);

  auto started = harness.WaitForReport(1, TaskReport::Kind::kStarted);
  ASSERT_TRUE(started.has_value());
  auto exited = harness.WaitForReport(1, TaskReport::Kind::kExited);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(exited->exit_code, 3);
  EXPECT_FALSE(exited->signal.has_value());
  EXPECT_EQ(exited->message, "exited with 3");
  // All output arrives before the exit report.
  EXPECT_EQ(harness.Output(1, "stdout"), "seed=7 gpus=2,3\n" + dir + "\n");
  EXPECT_EQ(harness.Output(1, "stderr"), "oops\n");
  std::ifstream log(spec.log_path);
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_NE(text.str().find("seed=7"), std::string::npos);
  EXPECT_NE(text.str().find("oops"), std::string::npos);
  EXPECT_TRUE(harness.runner().Running().empty());
  // Reaped: not our child any more.
  const pid_t pid = std::stoi(started->message.substr(4));
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(TaskRunner, TheEnvironmentIsExactlyTheSpecs) {
  Harness harness;
  LaunchSpec spec = Shell(2, "env | sort");
  spec.env["ONLY"] = "this";
  harness.runner().Start(spec);
  ASSERT_TRUE(harness.WaitForReport(2, TaskReport::Kind::kExited).has_value());
  const std::string out = harness.Output(2, "stdout");
  EXPECT_NE(out.find("ONLY=this\n"), std::string::npos);
  EXPECT_EQ(out.find("HOME="), std::string::npos) << out;
}

TEST(TaskRunner, LaunchFailures) {
  Harness harness;
  LaunchSpec missing = Shell(3, "");
  missing.argv = {"/nonexistent/bin/tool", "--flag"};
  harness.runner().Start(missing);
  auto report = harness.WaitForReport(3, TaskReport::Kind::kLaunchFailed);
  ASSERT_TRUE(report.has_value());
  EXPECT_NE(report->message.find("cannot execute /nonexistent/bin/tool"), std::string::npos)
      << report->message;

  LaunchSpec not_in_path = Shell(4, "");
  not_in_path.argv = {"ferry-no-such-command"};
  harness.runner().Start(not_in_path);
  report = harness.WaitForReport(4, TaskReport::Kind::kLaunchFailed);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->message, "ferry-no-such-command: command not found in PATH");

  LaunchSpec bad_dir = Shell(5, "true");
  bad_dir.working_dir = "/nonexistent/dir";
  harness.runner().Start(bad_dir);
  report = harness.WaitForReport(5, TaskReport::Kind::kLaunchFailed);
  ASSERT_TRUE(report.has_value());
  EXPECT_NE(report->message.find("working directory /nonexistent/dir"), std::string::npos);

  const std::string plain_file =
      (std::filesystem::path(::testing::TempDir()) / "ferry-runner-not-executable").string();
  std::ofstream(plain_file) << "data\n";
  std::filesystem::permissions(
      plain_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  LaunchSpec not_executable = Shell(6, "");
  not_executable.argv = {plain_file};
  harness.runner().Start(not_executable);
  report = harness.WaitForReport(6, TaskReport::Kind::kLaunchFailed);
  ASSERT_TRUE(report.has_value());
  EXPECT_NE(report->message.find("Permission denied"), std::string::npos) << report->message;

  LaunchSpec empty = Shell(7, "");
  empty.argv.clear();
  harness.runner().Start(empty);
  report = harness.WaitForReport(7, TaskReport::Kind::kLaunchFailed);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->message, "empty command");

  for (const auto& r : harness.reports()) EXPECT_NE(r.kind, TaskReport::Kind::kStarted);
  EXPECT_TRUE(harness.runner().Running().empty());
}

TEST(TaskRunner, StopSendsSigtermToTheGroup) {
  Harness harness;
  harness.runner().Start(Shell(8, "echo ready; sleep 30"));
  ASSERT_TRUE(harness.WaitForOutput(8, "stdout", "ready"));
  harness.runner().Stop({8, 0, 1}, seconds(30));
  auto exited = harness.WaitForReport(8, TaskReport::Kind::kExited);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(exited->signal, SIGTERM);
  EXPECT_FALSE(exited->exit_code.has_value());
}

TEST(TaskRunner, SigkillAfterTheGraceWhenSigtermIsIgnored) {
  Harness harness;
  harness.runner().Start(Shell(
      9, "n=0; trap 'n=$((n+1)); echo term$n' TERM; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(harness.WaitForOutput(9, "stdout", "ready"));
  harness.runner().Stop({9, 0, 1}, seconds(30));
  ASSERT_TRUE(harness.WaitForOutput(9, "stdout", "term1"));
  harness.runner().Stop({9, 0, 1}, milliseconds(200));  // shortens the grace, no second SIGTERM
  auto exited = harness.WaitForReport(9, TaskReport::Kind::kExited);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(exited->signal, SIGKILL);
  EXPECT_EQ(exited->message.rfind("killed by signal 9", 0), 0u) << exited->message;
  EXPECT_EQ(harness.Output(9, "stdout").find("term2"), std::string::npos);
}

TEST(TaskRunner, LeftoverProcessesOfAnEndedTaskAreKilled) {
  Harness harness;
  harness.runner().Start(Shell(10, "sleep 30 & echo $!"));
  auto exited = harness.WaitForReport(10, TaskReport::Kind::kExited);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(exited->exit_code, 0);
  const std::string out = harness.Output(10, "stdout");
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(WaitGone(std::stoi(out)));
}

TEST(TaskRunner, MemoryLimit) {
  Harness harness;
  LaunchSpec spec = Shell(11, "ulimit -v");
  spec.memory_limit_mb = 256;
  harness.runner().Start(spec);
  ASSERT_TRUE(harness.WaitForReport(11, TaskReport::Kind::kExited).has_value());
  EXPECT_EQ(harness.Output(11, "stdout"), "262144\n");
}

// The staged inputs are read-only to the task even when it runs as root (a
// bind mount in its own mount namespace, not just permission bits); the
// agent's view of the directory stays writable.
TEST(TaskRunner, TheInputsDirectoryIsMountedReadOnly) {
  Harness harness;
  const std::string dir =
      (std::filesystem::path(::testing::TempDir()) / "ferry-runner-ro").lexically_normal().string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/inputs");
  std::filesystem::create_directories(dir + "/code");
  std::ofstream(dir + "/inputs/data") << "original";
  std::ofstream(dir + "/code/train.py") << "code";
  LaunchSpec spec = Shell(12,
                          "if echo changed > \"$1/inputs/data\" 2>/dev/null; then echo WROTE; "
                          "else echo REFUSED; fi; cat \"$1/inputs/data\"; echo; "
                          "if touch \"$1/code/new\" 2>/dev/null; then echo CODE-WROTE; "
                          "else echo CODE-REFUSED; fi; "
                          "touch \"$1/outside\" && echo OUTSIDE-OK");
  spec.argv.push_back("sh");
  spec.argv.push_back(dir);
  spec.read_only_dirs = {dir + "/inputs", dir + "/code"};
  harness.runner().Start(spec);
  auto exited = harness.WaitForReport(12, TaskReport::Kind::kExited);
  ASSERT_TRUE(exited.has_value());
  const std::string out = harness.Output(12, "stdout");
  EXPECT_NE(out.find("REFUSED"), std::string::npos) << out;
  EXPECT_NE(out.find("original"), std::string::npos) << out;
  EXPECT_NE(out.find("CODE-REFUSED"), std::string::npos) << out;
  EXPECT_NE(out.find("OUTSIDE-OK"), std::string::npos) << out;
  // Outside the task, nothing was mounted over the directory.
  std::ofstream(dir + "/inputs/agent-side") << "x";
  EXPECT_TRUE(std::filesystem::exists(dir + "/inputs/agent-side"));
  std::filesystem::remove_all(dir);
}

TEST(TaskRunner, ARefStartsOnce) {
  Harness harness;
  harness.runner().Start(Shell(12, "echo once"));
  harness.runner().Start(Shell(12, "echo twice"));
  ASSERT_TRUE(harness.WaitForReport(12, TaskReport::Kind::kExited).has_value());
  int started = 0;
  for (const auto& report : harness.reports()) started += report.kind == TaskReport::Kind::kStarted;
  EXPECT_EQ(started, 1);
  EXPECT_EQ(harness.Output(12, "stdout"), "once\n");
  // Stopping a finished or unknown task does nothing.
  harness.runner().Stop({12, 0, 1}, milliseconds(0));
  harness.runner().Stop({99, 0, 1}, milliseconds(0));
}

TEST(TaskRunner, StopAllAndDestructionLeaveNoProcesses) {
  pid_t first = -1, second = -1;
  {
    Harness harness;
    harness.runner().Start(Shell(13, "sleep 30"));
    harness.runner().Start(Shell(14, "trap '' TERM; echo ready; sleep 30"));
    ASSERT_TRUE(harness.WaitForOutput(14, "stdout", "ready"));
    first = harness.runner().Pid({13, 0, 1});
    second = harness.runner().Pid({14, 0, 1});
    ASSERT_GT(first, 0);
    ASSERT_GT(second, 0);
    EXPECT_EQ(harness.runner().Running().size(), 2u);
    harness.runner().StopAll(milliseconds(100));
    EXPECT_TRUE(harness.runner().Running().empty());

    harness.runner().Start(Shell(15, "sleep 30"));
    ASSERT_TRUE(harness.WaitForReport(15, TaskReport::Kind::kStarted).has_value());
    second = harness.runner().Pid({15, 0, 1});
  }  // the destructor kills job 15
  EXPECT_TRUE(WaitGone(first));
  EXPECT_TRUE(WaitGone(second));
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // no child of ours is left
}

TEST(TaskRunner, DescribeWaitStatus) {
  EXPECT_EQ(DescribeWaitStatus(0), "exited with 0");
  EXPECT_EQ(DescribeWaitStatus(2 << 8), "exited with 2");
  EXPECT_EQ(DescribeWaitStatus(SIGKILL).rfind("killed by signal 9", 0), 0u);
}

}  // namespace
}  // namespace ferry::fleet
