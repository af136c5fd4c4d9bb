// Process-level tests of the daemon: each test writes a dataflow.yml into a
// temporary directory, runs the real `ferry` binary on it with the
// configurable test node (testing/test_node.cc) and checks its output, the
// log files and the JSON summary. Every wait is bounded; every process is
// reaped (and `ferry` dies with the test: PR_SET_PDEATHSIG, its nodes with it).
#include "flow/daemon/daemon.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "ferry/flow/dataflow.h"
#include "flow/daemon/process.h"
#include "testing/test_util.h"

namespace ferry::flow::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

constexpr auto kRunTimeout = std::chrono::seconds(60);
// Inputs of a sink that runs until the daemon stops it (a timer never ends).
constexpr const char* kSinkUntilStopped =
    "    inputs:\n      in: source/out\n      tick: ferry/timer/millis/600000\n";

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/ferry-daemon-test-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& text) const {
    std::string file = path_ + "/" + name;
    std::ofstream(file) << text;
    return file;
  }

 private:
  std::string path_;
};

// One `ferry ...` process with its output collected.
class FerryProcess {
 public:
  FerryProcess(std::vector<std::string> args, const std::string& directory) {
    SpawnRequest request;
    request.program = FERRY_EXE;
    request.argv = {"ferry"};
    request.argv.insert(request.argv.end(), args.begin(), args.end());
    request.env = MergeEnvironment({{"FERRY_PYTHON", "python3"}});
    request.working_directory = directory;
    auto child = Spawn(request);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    if (child.ok()) child_ = std::move(child).MoveValueUnsafe();
  }
  ~FerryProcess() {
    if (!ended_ && child_.pid > 0) {
      SignalGroup(child_.pid, SIGKILL);
      Wait(std::chrono::seconds(10));
    }
  }

  void Signal(int signal_number) { ::kill(child_.pid, signal_number); }

  // Reads output until `text` shows up on stdout or stderr (false after `timeout`).
  bool WaitForOutput(const std::string& text,
                     std::chrono::seconds timeout = std::chrono::seconds(30)) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (out_.find(text) != std::string::npos || err_.find(text) != std::string::npos) return true;
      if (!Pump(std::chrono::milliseconds(50)) && ended_) break;
    }
    return out_.find(text) != std::string::npos || err_.find(text) != std::string::npos;
  }

  // Waits for the process to end; its exit code (-1 on timeout, 128+n for a signal).
  int Wait(std::chrono::nanoseconds timeout = kRunTimeout) {
    const auto deadline = Clock::now() + timeout;
    while (!ended_ && Clock::now() < deadline) {
      Pump(std::chrono::milliseconds(20));
      auto reaped = TryReap(child_.pid);
      if (reaped.ok() && reaped->has_value()) {
        ended_ = true;
        status_ = **reaped;
      }
    }
    if (!ended_) {
      ADD_FAILURE() << "ferry did not end in time; output so far:\n" << out_ << err_;
      SignalGroup(child_.pid, SIGKILL);
      for (int tries = 0; tries < 500 && !ended_; ++tries) {
        auto reaped = TryReap(child_.pid);
        if (reaped.ok() && reaped->has_value()) ended_ = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return -1;
    }
    // The pipes end with the process (its nodes are reaped by then).
    while (Pump(std::chrono::milliseconds(200))) {
    }
    return status_.exited ? status_.code : 128 + status_.signal;
  }

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  // Reads what is available; false when both pipes are closed or nothing came.
  bool Pump(std::chrono::milliseconds timeout) {
    pollfd fds[2] = {{child_.stdout_fd.get(), POLLIN, 0}, {child_.stderr_fd.get(), POLLIN, 0}};
    if (!child_.stdout_fd.valid() && !child_.stderr_fd.valid()) return false;
    if (::poll(fds, 2, static_cast<int>(timeout.count())) <= 0) return false;
    bool got = false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      internal::UniqueFd& fd = i == 0 ? child_.stdout_fd : child_.stderr_fd;
      char chunk[8192];
      ssize_t count = ::read(fd.get(), chunk, sizeof(chunk));
      if (count > 0) {
        (i == 0 ? out_ : err_).append(chunk, static_cast<size_t>(count));
        got = true;
      } else if (count == 0) {
        fd.reset();
      }
    }
    return got || child_.stdout_fd.valid() || child_.stderr_fd.valid();
  }

  ChildProcess child_;
  bool ended_ = false;
  ExitStatus status_;
  std::string out_, err_;
};

class DaemonTest : public ::testing::Test {
 protected:
  // A node running the test node program with `args`.
  static std::string TestNode(const std::string& id, const std::string& args,
                              const std::string& extra = "") {
    return "  - id: " + id + "\n    path: " + FERRY_TEST_NODE + "\n    args: \"" + args + "\"\n" +
           extra;
  }

  std::string WriteDataflow(const std::string& nodes) {
    return dir_.Write("dataflow.yml", "nodes:\n" + nodes);
  }

  // `ferry run dataflow.yml` with the logs and summary inside the test's directory.
  std::unique_ptr<FerryProcess> Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"run",
                                     "dataflow.yml",
                                     "--log-dir",
                                     dir_.path() + "/logs",
                                     "--summary-json",
                                     dir_.path() + "/summary.json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<FerryProcess>(args, dir_.path());
  }

  std::string Log(const std::string& node) {
    return ReadFile(dir_.path() + "/logs/" + node + ".log");
  }

  nlohmann::json Summary() {
    auto json = nlohmann::json::parse(ReadFile(dir_.path() + "/summary.json"), nullptr, false);
    EXPECT_FALSE(json.is_discarded()) << "no summary written";
    return json.is_discarded() ? nlohmann::json::object() : json;
  }

  static nlohmann::json Find(const nlohmann::json& list, const char* key,
                             const std::string& value) {
    for (const auto& entry : list) {
      if (entry.value(key, std::string()) == value) return entry;
    }
    ADD_FAILURE() << "no entry with " << key << " = " << value << " in " << list.dump();
    return nlohmann::json::object();
  }

  TempDir dir_;
};

TEST_F(DaemonTest, StartBarrierForwardingLogsAndSummary) {
  WriteDataflow(TestNode("source", "--send 5 --stdout hello-from-source --stderr careful",
                         "    outputs: [out]\n") +
                TestNode("sink", "--print", "    inputs:\n      in: source/out\n"));
  auto run = Start();
  ASSERT_EQ(run->Wait(), 0) << run->out() << run->err();

  // Forwarded with a prefix; stderr marked.
  EXPECT_THAT(run->out(), HasSubstr("[source] hello-from-source\n"));
  EXPECT_THAT(run->err(), HasSubstr("[source] (stderr) careful\n"));
  EXPECT_THAT(run->out(), HasSubstr("[sink] TOTAL messages=5 rows=20 sum=190\n"));
  // The source sends right after start and the sink still gets message 1:
  // it was connected before anyone started.
  const std::string sink_log = Log("sink");
  EXPECT_THAT(sink_log, HasSubstr("INPUT in seq=1 rows=4 sum=6\n"));
  EXPECT_THAT(sink_log, HasSubstr("INPUT in seq=5 rows=4 sum=70\n"));
  EXPECT_THAT(sink_log, HasSubstr("INPUT_CLOSED in\n"));
  EXPECT_THAT(sink_log, HasSubstr("[ferry] exited: exit 0\n"));
  // The log has both streams, unprefixed, and the daemon's notes.
  const std::string source_log = Log("source");
  EXPECT_THAT(source_log, HasSubstr("hello-from-source\n"));
  EXPECT_THAT(source_log, HasSubstr("careful\n"));
  EXPECT_THAT(source_log, HasSubstr("[ferry] started, pid "));

  nlohmann::json summary = Summary();
  EXPECT_EQ(summary["exit_code"], 0);
  EXPECT_EQ(summary["stop_reason"], "all nodes finished");
  nlohmann::json edge = Find(summary["edges"], "edge", "source/out -> sink/in");
  EXPECT_EQ(edge["messages"], 5);
  EXPECT_EQ(edge["bytes"], 5 * 4 * 8);
  EXPECT_EQ(edge["bytes_copied"], 0);  // built in the output's shared memory
  EXPECT_EQ(edge["drops"], 0);
  EXPECT_EQ(Find(summary["nodes"], "id", "sink")["status"], "exit 0");
  EXPECT_THAT(run->out(), HasSubstr("source/out -> sink/in"));
}

TEST_F(DaemonTest, SummaryCountsCopiesOfPrivateBatches) {
  WriteDataflow(
      TestNode("source", "--send 7 --rows 3 --copy", "    outputs: [out]\n") +
      TestNode("relay", "--forward", "    inputs:\n      in: source/out\n    outputs: [out]\n") +
      TestNode("sink", "", "    inputs:\n      in: relay/out\n"));
  auto run = Start();
  ASSERT_EQ(run->Wait(), 0) << run->out() << run->err();
  EXPECT_THAT(run->out(), HasSubstr("[sink] TOTAL messages=7 rows=21 sum=210\n"));
  nlohmann::json summary = Summary();
  nlohmann::json first = Find(summary["edges"], "edge", "source/out -> relay/in");
  EXPECT_EQ(first["messages"], 7);
  EXPECT_EQ(first["bytes"], 7 * 3 * 8);
  EXPECT_EQ(first["bytes_copied"], 7 * 3 * 8);
  nlohmann::json second = Find(summary["edges"], "edge", "relay/out -> sink/in");
  EXPECT_EQ(second["messages"], 7);
}

TEST_F(DaemonTest, CtrlCStopsEveryNode) {
  // The sink's timer keeps it running until it is stopped.
  WriteDataflow(TestNode("source", "--send 2 --linger", "    outputs: [out]\n") +
                TestNode("sink", "--print", kSinkUntilStopped));
  auto run = Start();
  ASSERT_TRUE(run->WaitForOutput("[sink] INPUT in seq=2")) << run->out() << run->err();
  run->Signal(SIGINT);
  EXPECT_EQ(run->Wait(), 0) << run->out() << run->err();
  EXPECT_THAT(run->out(), HasSubstr("[sink] STOP ctrl-c\n"));
  EXPECT_THAT(run->out(), HasSubstr("[sink] TOTAL messages=2 rows=8 sum=28\n"));
  nlohmann::json summary = Summary();
  EXPECT_EQ(summary["stop_reason"], "ctrl-c");
  EXPECT_EQ(Find(summary["nodes"], "id", "source")["status"], "exit 0");
}

TEST_F(DaemonTest, FerryStopStopsANamedRun) {
  const std::string name = "stop-test-" + std::to_string(::getpid());
  WriteDataflow(TestNode("source", "--send 1 --linger", "    outputs: [out]\n") +
                TestNode("sink", "--print", kSinkUntilStopped));
  auto run = Start({"--name", name});
  ASSERT_TRUE(run->WaitForOutput("[sink] INPUT in seq=1")) << run->out() << run->err();

  // The name is taken while the run lasts.
  FerryProcess twin({"run", "dataflow.yml", "--name", name, "--log-dir", dir_.path() + "/logs2"},
                    dir_.path());
  EXPECT_EQ(twin.Wait(), 1);
  EXPECT_THAT(twin.err(), HasSubstr("a dataflow named '" + name + "' is already running"));

  FerryProcess stop({"stop", name}, dir_.path());
  EXPECT_EQ(stop.Wait(), 0) << stop.err();
  EXPECT_THAT(stop.out(), HasSubstr("dataflow " + name + " stopped"));
  EXPECT_EQ(run->Wait(), 0) << run->out() << run->err();
  EXPECT_THAT(run->out(), HasSubstr("[sink] STOP ferry stop\n"));
  EXPECT_EQ(Summary()["stop_reason"], "ferry stop");

  // Nothing left to stop.
  FerryProcess again({"stop", name}, dir_.path());
  EXPECT_EQ(again.Wait(), 1);
  EXPECT_THAT(again.err(), HasSubstr("no dataflow '" + name + "' is running"));
}

TEST_F(DaemonTest, DataflowStatsDescribeARunningGraph) {
  const std::string name = "stats-test-" + std::to_string(::getpid());
  // The first source instance crashes after sending (no report), the second lingers.
  WriteDataflow(TestNode("source", "--send 3 --fail-runs 1 --linger",
                         "    outputs: [out]\n    restart: on-failure\n") +
                TestNode("sink", "--print",
                         "    inputs:\n      in: {source: source/out, queue_size: 8, overflow: "
                         "drop_oldest}\n      tick: ferry/timer/millis/600000\n"));
  auto run = Start({"--name", name});
  ASSERT_TRUE(run->WaitForOutput("[sink] INPUT in seq=1")) << run->out() << run->err();
  nlohmann::json stats;
  for (int attempt = 0; attempt < 200; ++attempt) {
    auto answer = DataflowStats(name, std::chrono::seconds(5));
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
    stats = *answer;
    const nlohmann::json source = Find(stats["nodes"], "id", "source");
    if (source["restarts"] == 1 && source["state"] == "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(stats["dataflow"], name);
  EXPECT_EQ(stats["phase"], "running");
  nlohmann::json source = Find(stats["nodes"], "id", "source");
  nlohmann::json sink = Find(stats["nodes"], "id", "sink");
  EXPECT_EQ(source["state"], "running");
  EXPECT_EQ(source["restarts"], 1);
  EXPECT_EQ(source["instances"], 2);
  EXPECT_GT(source["pid"].get<int64_t>(), 0);
  EXPECT_GT(sink["pid"].get<int64_t>(), 0);
  EXPECT_EQ(sink["restarts"], 0);
  nlohmann::json edge = Find(stats["edges"], "edge", "source/out -> sink/in");
  EXPECT_EQ(edge["queue_size"], 8);
  EXPECT_EQ(edge["overflow"], "drop_oldest");
  // The crashed instance never reported: what it sent is unknown.
  EXPECT_TRUE(edge["sent"].is_null());
  EXPECT_TRUE(edge["queued"].is_null());

  // The pids are the ones `ferry ps` lists.
  ASSERT_OK_AND_ASSIGN(auto runs, ListDataflows(std::chrono::seconds(5)));
  for (const auto& listed : runs) {
    if (listed.run_id != name) continue;
    EXPECT_EQ(Find(listed.description["nodes"], "id", "source")["pid"], source["pid"]);
    EXPECT_EQ(listed.description["log_dir"].get<std::string>().front(), '/');
  }

  FerryProcess stop({"stop", name}, dir_.path());
  EXPECT_EQ(stop.Wait(), 0) << stop.err();
  EXPECT_EQ(run->Wait(), 0) << run->out() << run->err();
  auto gone = DataflowStats(name, std::chrono::seconds(1));
  EXPECT_EQ(gone.status().code(), StatusCode::kIOError);
  EXPECT_THAT(gone.status().message(), HasSubstr("no dataflow '" + name + "' is running here"));
}

TEST_F(DaemonTest, NodeIgnoringStopIsKilledAfterItsGrace) {
  WriteDataflow(TestNode("deaf", "--linger --ignore-stop --print", "    stop_grace_ms: 200\n") +
                TestNode("polite", "--linger --print"));
  auto run = Start();
  ASSERT_TRUE(run->WaitForOutput("all 2 nodes ready")) << run->out() << run->err();
  run->Signal(SIGTERM);
  EXPECT_EQ(run->Wait(), 1) << run->out() << run->err();
  EXPECT_THAT(run->out(), HasSubstr("[deaf] STOP signal"));
  EXPECT_THAT(Log("deaf"), HasSubstr("did not stop within 200 ms; killing it"));
  nlohmann::json summary = Summary();
  nlohmann::json deaf = Find(summary["nodes"], "id", "deaf");
  EXPECT_EQ(deaf["killed_after_grace"], true);
  EXPECT_EQ(deaf["signal"], SIGKILL);
  EXPECT_EQ(deaf["failed"], true);
  EXPECT_EQ(Find(summary["nodes"], "id", "polite")["status"], "exit 0");
}

// True once `pid` is gone or a zombie (bounded by 20 s).
bool ProcessEnds(pid_t pid) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    size_t paren = stat.rfind(')');
    if (stat.empty() ||
        (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z')) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST_F(DaemonTest, NodesDieWithAKilledDaemon) {
  WriteDataflow(TestNode("lingerer", "--linger --print --ignore-stop"));
  auto run = Start();
  ASSERT_TRUE(run->WaitForOutput("all 1 nodes ready")) << run->out() << run->err();
  ASSERT_TRUE(run->WaitForOutput("[lingerer] RUN 0 pid=")) << run->out();
  const size_t at = run->out().find("pid=") + 4;
  const pid_t node_pid = static_cast<pid_t>(std::stol(run->out().substr(at)));
  ASSERT_GT(node_pid, 0);
  run->Signal(SIGKILL);
  EXPECT_EQ(run->Wait(), 128 + SIGKILL);
  EXPECT_TRUE(ProcessEnds(node_pid)) << "node " << node_pid << " outlived the daemon";
}

TEST_F(DaemonTest, OnFailureRestartsWithBackoffAndReconnects) {
  // Each instance sends 3 batches; the first two crash afterwards (exit 3).
  // A restarted instance waits for the sink to reconnect before sending.
  WriteDataflow(
      TestNode("source", "--send 3 --fail-runs 2 --wait-subscribers 1",
               "    outputs: [out]\n    restart: on-failure\n    max_restarts: 3\n") +
      TestNode("sink", "--print --expect 9",
               "    inputs:\n      in: source/out\n      tick: ferry/timer/millis/60000\n"));
  auto run = Start();
  ASSERT_EQ(run->Wait(), 0) << run->out() << run->err();
  EXPECT_THAT(run->out(), HasSubstr("[sink] TOTAL messages=9 rows=36 sum=")) << run->out();
  const std::string source_log = Log("source");
  EXPECT_THAT(source_log, HasSubstr("exit 3; restarting in 100 ms (restart 1 of 3)"));
  EXPECT_THAT(source_log, HasSubstr("exit 3; restarting in 200 ms (restart 2 of 3)"));
  EXPECT_THAT(source_log, HasSubstr("restart 2\n"));
  EXPECT_THAT(source_log, Not(HasSubstr("restart 3 of 3")));
  nlohmann::json summary = Summary();
  nlohmann::json source = Find(summary["nodes"], "id", "source");
  EXPECT_EQ(source["restarts"], 2);
  EXPECT_EQ(source["instances"], 3);
  EXPECT_EQ(source["status"], "exit 0");
  EXPECT_EQ(source["failed"], false);
  EXPECT_EQ(Find(summary["edges"], "edge", "source/out -> sink/in")["messages"], 9);
  // The sink's input was reconnected twice.
  EXPECT_EQ(Find(summary["nodes"], "id", "sink")["restarts"], 0);
}

TEST_F(DaemonTest, ConsumerOfOnlyARestartingProducerWaitsAndLosesNothing) {
  // The sink's only input is the restarting source, and the source sends as
  // soon as it is started: the daemon starts a restarted instance only after
  // the sink has reconnected, and the sink's stream ends with the last one.
  WriteDataflow(TestNode("source", "--send 3 --fail-runs 2",
                         "    outputs: [out]\n    restart: on-failure\n    max_restarts: 3\n") +
                TestNode("sink", "--print", "    inputs:\n      in: source/out\n"));
  auto run = Start();
  ASSERT_EQ(run->Wait(), 0) << run->out() << run->err();
  const std::string out = run->out();
  EXPECT_THAT(out, HasSubstr("[sink] TOTAL messages=9 rows=36 sum=198\n")) << out;
  // One INPUT_CLOSED, after the last instance's messages.
  const size_t closed = out.find("[sink] INPUT_CLOSED in\n");
  ASSERT_NE(closed, std::string::npos) << out;
  EXPECT_EQ(out.find("[sink] INPUT_CLOSED in\n", closed + 1), std::string::npos) << out;
  EXPECT_LT(out.rfind("[sink] INPUT in "), closed) << out;
  const std::string source_log = Log("source");
  EXPECT_THAT(source_log, HasSubstr("restart 2\n"));
  EXPECT_THAT(source_log, Not(HasSubstr("starting anyway")));
  nlohmann::json summary = Summary();
  EXPECT_EQ(Find(summary["nodes"], "id", "source")["instances"], 3);
  EXPECT_EQ(Find(summary["nodes"], "id", "sink")["failed"], false);
  EXPECT_EQ(Find(summary["edges"], "edge", "source/out -> sink/in")["messages"], 9);
}

TEST_F(DaemonTest, ProducerDyingBeforeTheStartIsReconnectedToItsConsumers) {
  // The sink connects to the source at once; the source dies while the slow
  // node keeps the graph from starting. The restarted source is started only
  // after the sink has moved to its new publisher, so nothing is lost.
  WriteDataflow(TestNode("source", "--send 3 --crash-before-start 1",
                         "    outputs: [out]\n    restart: on-failure\n    max_restarts: 2\n") +
                TestNode("sink", "--print", "    inputs:\n      in: source/out\n") +
                TestNode("slow", "--delay-ready 1500"));
  auto run = Start();
  ASSERT_EQ(run->Wait(), 0) << run->out() << run->err();
  const std::string out = run->out();
  EXPECT_THAT(out, HasSubstr("[sink] TOTAL messages=3 rows=12 sum=66\n")) << out;
  EXPECT_THAT(Log("source"), Not(HasSubstr("starting anyway")));
  nlohmann::json summary = Summary();
  EXPECT_EQ(Find(summary["nodes"], "id", "source")["instances"], 2);
  EXPECT_EQ(Find(summary["edges"], "edge", "source/out -> sink/in")["messages"], 3);
}

TEST_F(DaemonTest, ConsumerRestartedAfterItsProducerFinishedSeesItsInputClosed) {
  // The sink crashes at once (exit 3, no statistics); the source sends 3
  // batches and finishes long before the restart 100 ms later. The new sink
  // instance must not wait for a publisher that is gone: the daemon closes
  // its input, the sink ends normally and so does the run.
  WriteDataflow(TestNode("source", "--send 3", "    outputs: [out]\n") +
                TestNode("sink", "--print --fail-runs 1",
                         "    inputs:\n      in: source/out\n    restart: on-failure\n"
                         "    max_restarts: 2\n"));
  auto run = Start();
  ASSERT_EQ(run->Wait(), 0) << run->out() << run->err();
  const std::string out = run->out();
  EXPECT_THAT(out, HasSubstr("[sink] RUN 1 pid=")) << out;
  EXPECT_THAT(out, HasSubstr("[sink] INPUT_CLOSED in\n")) << out;
  EXPECT_THAT(out, HasSubstr("[sink] TOTAL messages=0 rows=0 sum=0\n")) << out;
  EXPECT_THAT(run->err(), Not(HasSubstr("Timed out")));
  nlohmann::json summary = Summary();
  EXPECT_EQ(summary["exit_code"], 0);
  nlohmann::json sink = Find(summary["nodes"], "id", "sink");
  EXPECT_EQ(sink["restarts"], 1);
  EXPECT_EQ(sink["status"], "exit 0");
  // The 3 messages went to the instance that crashed without reporting: lost.
  nlohmann::json edge = Find(summary["edges"], "edge", "source/out -> sink/in");
  EXPECT_EQ(edge["sent"], 3);
  EXPECT_EQ(edge["received"], 0);
  EXPECT_EQ(edge["drops"], 0);
  EXPECT_EQ(edge["lost"], 3);
  EXPECT_THAT(out, HasSubstr("source/out -> sink/in")) << out;
}

TEST_F(DaemonTest, RestartsRunOutAndTheRunFails) {
  WriteDataflow(TestNode("flaky", "--fail-runs 9 --fail-code 4",
                         "    restart: on-failure\n    max_restarts: 2\n"));
  auto run = Start();
  EXPECT_EQ(run->Wait(), 1) << run->out() << run->err();
  EXPECT_THAT(run->err(), HasSubstr("no restarts left (2 used)"));
  nlohmann::json flaky = Find(Summary()["nodes"], "id", "flaky");
  EXPECT_EQ(flaky["restarts"], 2);
  EXPECT_EQ(flaky["exit_code"], 4);
  EXPECT_EQ(flaky["failed"], true);
}

TEST_F(DaemonTest, CrashedProducerClosesItsConsumersInputAndTheRestCarriesOn) {
  WriteDataflow(TestNode("crasher", "--send 2 --fail-runs 1", "    outputs: [out]\n") +
                TestNode("orphan", "--print", "    inputs:\n      in: crasher/out\n") +
                TestNode("source", "--send 4", "    outputs: [out]\n") +
                TestNode("sink", "--print", "    inputs:\n      in: source/out\n"));
  auto run = Start();
  EXPECT_EQ(run->Wait(), 1) << run->out() << run->err();
  EXPECT_THAT(run->out(), HasSubstr("[orphan] INPUT_CLOSED in\n"));
  EXPECT_THAT(run->out(), HasSubstr("[orphan] TOTAL messages=2 rows=8 sum=28\n"));
  EXPECT_THAT(run->out(), HasSubstr("[sink] TOTAL messages=4 rows=16 sum=120\n"));
  nlohmann::json summary = Summary();
  EXPECT_EQ(summary["exit_code"], 1);
  nlohmann::json crasher = Find(summary["nodes"], "id", "crasher");
  EXPECT_EQ(crasher["exit_code"], 3);
  EXPECT_EQ(crasher["failed"], true);
  EXPECT_EQ(Find(summary["nodes"], "id", "orphan")["failed"], false);
  EXPECT_EQ(Find(summary["nodes"], "id", "sink")["failed"], false);
  // What the crashed node sent is still counted, from its consumer's side.
  EXPECT_EQ(Find(summary["edges"], "edge", "crasher/out -> orphan/in")["messages"], 2);
}

TEST_F(DaemonTest, RuntimeNodeHostsOperatorsUnderFerryRuntime) {
  // source -> [first -> second] -> sink: the relays pass batches on
  // in-process inside one `ferry runtime` process.
  const std::string relay = FERRY_TEST_RELAY_OPERATOR;
  WriteDataflow(TestNode("source", "--send 6", "    outputs: [out]\n") +
                "  - id: relays\n    operators:\n"
                "      - id: first\n        shared-library: " +
                relay +
                "\n"
                "        inputs: {in: source/out}\n        outputs: [out]\n"
                "      - id: second\n        shared-library: " +
                relay +
                "\n"
                "        inputs: {in: relays/first/out}\n        outputs: [out]\n" +
                TestNode("sink", "--print", "    inputs:\n      in: relays/second/out\n"));
  auto run = Start();
  ASSERT_EQ(run->Wait(), 0) << run->out() << run->err();
  EXPECT_THAT(run->out(), HasSubstr("[sink] TOTAL messages=6 rows=24 sum=276\n"));
  nlohmann::json summary = Summary();
  EXPECT_EQ(Find(summary["edges"], "edge", "source/out -> relays/first/in")["messages"], 6);
  EXPECT_EQ(Find(summary["edges"], "edge", "relays/second/out -> sink/in")["messages"], 6);
  EXPECT_EQ(summary["edges"].size(), 2u);  // first -> second is in-process
  EXPECT_EQ(Find(summary["nodes"], "id", "relays")["status"], "exit 0");
}

TEST_F(DaemonTest, MalformedDescriptorGivesTheParsersExactError) {
  const std::string file =
      WriteDataflow(TestNode("sink", "", "    inputs:\n      in: nowhere/out\n"));
  auto parsed = ParseDataflow(file);
  ASSERT_FALSE(parsed.ok());
  const std::string expected = parsed.status().message();
  EXPECT_THAT(expected, HasSubstr(":6:11: "));

  FerryProcess check({"check", file}, dir_.path());
  EXPECT_EQ(check.Wait(), 1);
  EXPECT_EQ(check.err(), expected + "\n");
  FerryProcess run({"run", file}, dir_.path());
  EXPECT_EQ(run.Wait(), 1);
  EXPECT_EQ(run.err(), expected + "\n");
}

TEST_F(DaemonTest, CheckPrintsTheGraph) {
  const std::string file =
      WriteDataflow(TestNode("source", "--send 1", "    outputs: [out]\n    restart: always\n") +
                    TestNode("sink", "",
                             "    inputs:\n      in: {source: source/out, queue_size: 4, overflow: "
                             "drop_oldest}\n      tick: ferry/timer/hz/10\n"));
  FerryProcess check({"check", file}, dir_.path());
  ASSERT_EQ(check.Wait(), 0) << check.err();
  EXPECT_THAT(check.out(), HasSubstr("ok, 2 nodes, 1 edge\n"));
  EXPECT_THAT(check.out(), HasSubstr("node source ("));
  EXPECT_THAT(check.out(), HasSubstr("restart: always (max 5)"));
  EXPECT_THAT(check.out(), HasSubstr("input  in <- source/out (queue 4, drop_oldest)\n"));
  EXPECT_THAT(check.out(), HasSubstr("input  tick <- ferry/timer/hz/10\n"));
  EXPECT_THAT(check.out(), HasSubstr("outputs out\n"));
}

TEST_F(DaemonTest, PythonNodeExceptionEndsInTheLog) {
  dir_.Write("broken.py",
             "import sys\nprint('about to fail')\nraise ValueError('boom ' + sys.argv[1])\n");
  WriteDataflow("  - id: broken\n    path: broken.py\n    args: [42]\n");
  auto run = Start();
  EXPECT_EQ(run->Wait(), 1) << run->out() << run->err();
  const std::string log = Log("broken");
  EXPECT_THAT(log, HasSubstr("about to fail\n"));
  EXPECT_THAT(log, HasSubstr("Traceback (most recent call last):"));
  EXPECT_THAT(log, HasSubstr("ValueError: boom 42"));
  EXPECT_THAT(run->err(), HasSubstr("[broken] (stderr) ValueError: boom 42"));
  nlohmann::json broken = Find(Summary()["nodes"], "id", "broken");
  EXPECT_EQ(broken["exit_code"], 1);
  EXPECT_EQ(broken["failed"], true);
}

TEST_F(DaemonTest, UsageErrors) {
  FerryProcess nothing({}, dir_.path());
  EXPECT_EQ(nothing.Wait(), 2);
  EXPECT_THAT(nothing.err() + nothing.out(), HasSubstr("subcommand"));
  FerryProcess no_file({"run"}, dir_.path());
  EXPECT_EQ(no_file.Wait(), 2);
  EXPECT_THAT(no_file.err(), HasSubstr("file is required"));
  FerryProcess bad_name({"run", WriteDataflow(TestNode("a", "")), "--name", "no spaces"},
                        dir_.path());
  EXPECT_EQ(bad_name.Wait(), 1);
  EXPECT_THAT(bad_name.err(), HasSubstr("may hold only letters, digits"));
  FerryProcess unknown({"fly"}, dir_.path());
  EXPECT_EQ(unknown.Wait(), 2);
  FerryProcess version({"version"}, dir_.path());
  EXPECT_EQ(version.Wait(), 0);
  EXPECT_THAT(version.out(), HasSubstr("ferry "));
}

TEST_F(DaemonTest, BuildsRunFirstAndAFailingBuildStartsNothing) {
  // The test node's program is made by the build.
  const std::string node_copy = dir_.path() + "/bin/node";
  WriteDataflow("  - id: made\n    build: mkdir -p bin && cp " + std::string(FERRY_TEST_NODE) +
                " bin/node && echo copied\n    path: bin/node\n");
  auto run = Start();
  ASSERT_EQ(run->Wait(), 0) << run->out() << run->err();
  EXPECT_THAT(run->out(), HasSubstr("[made] (build) copied\n"));
  EXPECT_THAT(Log("made"), HasSubstr("(build) copied\n"));
  EXPECT_TRUE(std::filesystem::exists(node_copy));

  // --no-build: nothing makes the program, so nothing starts.
  std::filesystem::remove_all(dir_.path() + "/bin");
  auto skipped = Start({"--no-build"});
  EXPECT_EQ(skipped->Wait(), 1);
  EXPECT_THAT(skipped->out(), Not(HasSubstr("(build)")));
  EXPECT_THAT(skipped->err(), HasSubstr("bin/node"));
  EXPECT_FALSE(std::filesystem::exists(node_copy));

  WriteDataflow(TestNode("first", "--send 1", "    outputs: [out]\n") +
                "  - id: broken\n    build: echo oops >&2; exit 4\n    path: " + FERRY_TEST_NODE +
                "\n");
  auto failed = Start();
  EXPECT_EQ(failed->Wait(), 1);
  EXPECT_THAT(failed->err(), HasSubstr("[broken] (stderr) (build) oops\n"));
  EXPECT_THAT(failed->err(), HasSubstr("node 'broken': build 'echo oops >&2; exit 4' failed "
                                       "(exit 4); nothing was started"));
  EXPECT_THAT(failed->err(), Not(HasSubstr("starting")));
}

}  // namespace
}  // namespace ferry::flow::daemon
