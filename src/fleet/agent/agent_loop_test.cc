// RunAgent against a small in-process stand-in for the server's agent endpoints.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "ferry/fleet/agent.h"
#include "testing/test_util.h"

namespace ferry::fleet {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

class FakeServer {
 public:
  FakeServer() {
    server_.Post("/v1/agent/register", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mutex_);
      registrations_.push_back(json::parse(req.body));
      changed_.notify_all();
      res.set_content(R"({"node": {}, "lease_ms": 4000})", "application/json");
    });
    server_.Post("/v1/agent/sync", [this](const httplib::Request& req, httplib::Response& res) {
      const int64_t wait_ms = std::stoll(req.get_param_value("wait_ms"));
      json body = json::parse(req.body);
      std::unique_lock<std::mutex> lock(mutex_);
      for (const auto& report : body["reports"]) {
        report_log_.push_back({report, static_cast<int64_t>(log_events_)});
      }
      for (const auto& ref : body["running"]) last_running_.push_back(ref);
      // Like the real server: starts and stops repeat until the agent reports on them.
      auto same = [](const json& a, const json& b) {
        return a["job_id"] == b["job_id"] && a["task"] == b["task"] && a["attempt"] == b["attempt"];
      };
      for (const auto& report : body["reports"]) {
        auto drop = [&](json* list) {
          json kept = json::array();
          for (const auto& entry : *list) {
            if (!same(entry, report)) kept.push_back(entry);
          }
          *list = kept;
        };
        drop(&start_);
        if (report["kind"] != "started") drop(&stop_);
      }
      ++syncs_;
      changed_.notify_all();
      changed_.wait_for(lock, milliseconds(std::min<int64_t>(wait_ms, 1000)),
                        [&] { return news_; });
      news_ = false;
      json out = {{"registered", !unregister_},
                  {"lease_expires_at_ms", 0},
                  {"stop_grace_ms", 200},
                  {"start", start_},
                  {"stop", stop_}};
      unregister_ = false;
      res.set_content(out.dump(), "application/json");
    });
    server_.Post("/v1/agent/logs", [this](const httplib::Request& req, httplib::Response& res) {
      json body = json::parse(req.body);
      std::lock_guard<std::mutex> lock(mutex_);
      logs_[body["job_id"].get<int64_t>()] += body["data"].get<std::string>();
      ++log_events_;
      changed_.notify_all();
      res.status = 204;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void Start(json assignment) {
    std::lock_guard<std::mutex> lock(mutex_);
    start_.push_back(std::move(assignment));
    news_ = true;
    changed_.notify_all();
  }
  void Stop(json ref) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.push_back(std::move(ref));
    news_ = true;
    changed_.notify_all();
  }
  void Unregister() {
    std::lock_guard<std::mutex> lock(mutex_);
    unregister_ = true;
    news_ = true;
    changed_.notify_all();
  }

  // Waits (bounded) until `done` holds under the lock.
  template <typename Predicate>
  bool WaitFor(Predicate done) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, seconds(20), [&] { return done(*this); });
  }

  // The report of `kind` for job `job`, if seen; `logs_before` gets how many
  // log posts had arrived when it came.
  std::optional<json> Report(int64_t job, const std::string& kind,
                             int64_t* logs_before = nullptr) const {
    for (const auto& [report, logs] : report_log_) {
      if (report["job_id"] == job && report["kind"] == kind) {
        if (logs_before) *logs_before = logs;
        return report;
      }
    }
    return std::nullopt;
  }

  std::vector<json> registrations_;
  std::vector<std::pair<json, int64_t>> report_log_;
  std::vector<json> last_running_;
  std::map<int64_t, std::string> logs_;
  int64_t log_events_ = 0;
  int64_t syncs_ = 0;

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  json start_ = json::array();
  json stop_ = json::array();
  bool unregister_ = false;
  bool news_ = false;  // something to tell the agent: answer the long poll now
};

json Assignment(int64_t job, const std::string& script, json gpu_indices = json::array()) {
  return {{"job_id", job},
          {"task", 0},
          {"attempt", 1},
          {"job_name", "j" + std::to_string(job)},
          {"spec",
           {{"name", "j"},
            {"command", {"sh", "-c", script}},
            {"env", {{"MSG", "hi"}}},
            {"tasks", 1},
            {"gpus_per_task", gpu_indices.size()}}},
          {"gpu_indices", gpu_indices},
          {"gpu_uuids", json::array()},
          {"gang_nodes", {"node-a"}}};
}

class AgentThread {
 public:
  AgentThread(const std::string& url, const std::string& work_dir,
              const std::string& log_format = "text") {
    options_.log_format = log_format;
    options_.server_url = url;
    options_.token = "fy_agent";
    options_.node_name = "node-a";
    options_.pool = "p1";
    options_.ignore_nvml = true;
    options_.work_dir = work_dir;
    options_.sync_wait_ms = 500;
    auto gpus = ParseGpuDeclaration("2xH200", "node-a");
    options_.declared_gpus = *gpus;
    thread_ = std::thread([this] { status_ = RunAgent(options_, &stop_, false); });
  }
  Status Finish() {
    stop_ = true;
    thread_.join();
    return status_;
  }
  ~AgentThread() {
    if (thread_.joinable()) (void)Finish();
  }

 private:
  AgentOptions options_;
  std::atomic<bool> stop_{false};
  Status status_;
  std::thread thread_;
};

std::string TempDir(const std::string& name) {
  auto dir = (std::filesystem::path(::testing::TempDir()) / name).lexically_normal();
  std::filesystem::remove_all(dir);
  return dir.string();
}

TEST(AgentLoop, RunsAssignmentsAndReportsAfterTheOutput) {
  FakeServer server;
  const std::string work_dir = TempDir("ferry-agent-loop-1");
  AgentThread agent(server.url(), work_dir);
  ASSERT_TRUE(server.WaitFor([](FakeServer& s) { return !s.registrations_.empty(); }));
  {
    const json& registration = server.registrations_[0];
    EXPECT_EQ(registration["name"], "node-a");
    EXPECT_EQ(registration["pool"], "p1");
    EXPECT_EQ(registration["gpus"].size(), 2u);
    EXPECT_EQ(registration["gpus"][1]["model"], "H200");
    EXPECT_EQ(registration["instance"].get<std::string>().size(), 32u);
  }
  server.Start(Assignment(1,
                          "echo \"$MSG $CUDA_VISIBLE_DEVICES $FERRY_TASK_INDEX $FERRY_NODE\"; "
                          "echo to-stderr >&2; exit 4",
                          {1}));
  ASSERT_TRUE(server.WaitFor([](FakeServer& s) { return s.Report(1, "exited").has_value(); }));
  int64_t logs_before_exit = 0;
  auto exited = server.Report(1, "exited", &logs_before_exit);
  EXPECT_EQ((*exited)["exit_code"], 4);
  EXPECT_TRUE((*exited)["signal"].is_null());
  EXPECT_TRUE(server.Report(1, "started").has_value());
  // Every piece of output reached the server before the exit report.
  EXPECT_EQ(logs_before_exit, server.log_events_);
  const std::string logs = server.logs_[1];
  EXPECT_NE(logs.find("hi 1 0 node-a\n"), std::string::npos) << logs;
  EXPECT_NE(logs.find("to-stderr\n"), std::string::npos) << logs;
  std::ifstream file(work_dir + "/logs/1-1-0.log");
  EXPECT_TRUE(file.good());

  // Told it is unknown, the agent registers again with the same instance.
  server.Unregister();
  ASSERT_TRUE(server.WaitFor([](FakeServer& s) { return s.registrations_.size() >= 2; }));
  EXPECT_EQ(server.registrations_[1]["instance"], server.registrations_[0]["instance"]);
  ASSERT_OK(agent.Finish());
}

TEST(AgentLoop, StopsTasksWithEscalationAndOnShutdown) {
  FakeServer server;
  AgentThread agent(server.url(), TempDir("ferry-agent-loop-2"));
  server.Start(Assignment(2, "trap '' TERM; echo ready; while :; do sleep 0.05; done"));
  server.Start(Assignment(3, "echo up; exec sleep 30"));
  ASSERT_TRUE(server.WaitFor([](FakeServer& s) {
    return s.logs_[2].find("ready") != std::string::npos &&
           s.logs_[3].find("up") != std::string::npos;
  }));
  // Running tasks are listed in every sync.
  ASSERT_TRUE(server.WaitFor([](FakeServer& s) {
    for (const auto& ref : s.last_running_) {
      if (ref["job_id"] == 3) return true;
    }
    return false;
  }));
  server.Stop({{"job_id", 2}, {"task", 0}, {"attempt", 1}});
  ASSERT_TRUE(server.WaitFor([](FakeServer& s) { return s.Report(2, "exited").has_value(); }));
  EXPECT_EQ((*server.Report(2, "exited"))["signal"], SIGKILL);

  // A launch failure is reported as such.
  json missing = Assignment(4, "");
  missing["spec"]["command"] = {"/nonexistent/ferry-tool"};
  server.Start(missing);
  ASSERT_TRUE(server.WaitFor([](FakeServer& s) {
    return s.Report(4, "launch_failed").has_value();
  })) <<
      [&] {
        std::string text;
        for (const auto& [report, logs] : server.report_log_) text += report.dump() + "\n";
        return text;
      }();

  const std::string started = (*server.Report(3, "started"))["message"];
  const pid_t pid = std::stoi(started.substr(4));
  ASSERT_OK(agent.Finish());
  // Shutdown killed and reaped job 3.
  EXPECT_NE(kill(pid, 0), 0);
}

TEST(AgentLoop, JsonLogLinesCarryTheNodeAndTheTask) {
  FakeServer server;
  const std::string work_dir = TempDir("ferry-agent-loop-json-log");
  ::testing::internal::CaptureStderr();
  {
    AgentThread agent(server.url(), work_dir, "json");
    server.WaitFor([](FakeServer& s) { return !s.registrations_.empty(); });
    server.Start(Assignment(7, "echo out; exit 3"));
    server.WaitFor([](FakeServer& s) { return s.Report(7, "exited").has_value(); });
    (void)agent.Finish();
  }
  const std::string text = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(server.Report(7, "exited").has_value());
  std::vector<json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    json parsed = json::parse(line, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << "not a JSON line: " << line;
    EXPECT_EQ(parsed["component"], "agent") << line;
    EXPECT_TRUE(parsed["ts"].is_string()) << line;
    lines.push_back(std::move(parsed));
  }
  auto find = [&](const std::string& message) -> const json* {
    for (const json& line : lines) {
      if (line["msg"].get<std::string>().rfind(message, 0) == 0) return &line;
    }
    return nullptr;
  };
  const json* registered = find("registered node node-a");
  ASSERT_NE(registered, nullptr) << text;
  EXPECT_EQ((*registered)["level"], "info");
  EXPECT_EQ((*registered)["node"], "node-a");
  EXPECT_EQ((*registered)["pool"], "p1");
  EXPECT_EQ((*registered)["gpus"], 2);
  const json* started = find("task started");
  ASSERT_NE(started, nullptr) << text;
  EXPECT_EQ((*started)["job_id"], 7);
  EXPECT_EQ((*started)["task"], 0);
  EXPECT_EQ((*started)["attempt"], 1);
  const json* exited = find("task exited");
  ASSERT_NE(exited, nullptr) << text;
  EXPECT_EQ((*exited)["job_id"], 7);
  EXPECT_EQ((*exited)["exit_code"], 3);
  EXPECT_EQ((*exited)["node"], "node-a");

  AgentOptions bad;
  bad.log_format = "yaml";
  Status status = RunAgent(bad, nullptr, false);
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_NE(status.message().find("yaml"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace ferry::fleet
