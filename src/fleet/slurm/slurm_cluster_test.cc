// Both clients against a real Slurm 22.05 cluster: every test starts its own
// private cluster (scripts/slurm-test-cluster: 1 node, 4 fake h200 GPUs) and
// stops it by PID in TearDown, so tests run in parallel and leave nothing
// behind; a watcher stops it too if this process dies first. Without the
// Slurm packages (or root) the tests skip and say why.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "ferry/fleet/slurm.h"

namespace ferry::fleet::slurm {
namespace {

enum class Kind { kRest, kCli };

std::string KindName(const testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kRest ? "Rest" : "Cli";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class SlurmClusterTest : public testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ferry-slurm-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    cluster_dir_ = base_ + "/c";
    work_dir_ = base_ + "/w";
    std::filesystem::create_directories(work_dir_);
    const std::string command = "SLURM_TEST_OWNER_PID=" + std::to_string(::getpid()) + " " +
                                FERRY_SLURM_TEST_CLUSTER + " start " + cluster_dir_;
    const auto started = std::chrono::steady_clock::now();
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    char line[1024];
    while (std::fgets(line, sizeof(line), pipe) != nullptr) {
      std::string text = line;
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      const size_t equals = text.find('=');
      if (equals != std::string::npos) env_[text.substr(0, equals)] = text.substr(equals + 1);
    }
    const int status = ::pclose(pipe);
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (rc == 3) {
      std::filesystem::remove_all(base_);
      base_.clear();
      GTEST_SKIP() << "Slurm is not available here (scripts/slurm-test-cluster exited 3: the "
                      "packages slurmctld slurmd slurmrestd slurm-client munge, or root, are "
                      "missing); skipping the real-cluster tests";
    }
    started_ = true;
    ASSERT_EQ(rc, 0) << "scripts/slurm-test-cluster start failed; its output is above";
    std::fprintf(stderr, "cluster up in %.2f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    ASSERT_FALSE(env_["SLURM_CONF"].empty());
    ASSERT_FALSE(env_["SLURMRESTD_SOCKET"].empty());
    if (GetParam() == Kind::kRest) {
      RestOptions options;
      options.endpoint = "unix:" + env_["SLURMRESTD_SOCKET"];
      auto made = MakeRestClient(options);
      ASSERT_TRUE(made.ok()) << made.status().ToString();
      client_ = made.MoveValueUnsafe();
    } else {
      CliOptions options;
      options.slurm_conf = env_["SLURM_CONF"];
      auto made = MakeCliClient(options);
      ASSERT_TRUE(made.ok()) << made.status().ToString();
      client_ = made.MoveValueUnsafe();
    }
  }

  void TearDown() override {
    client_.reset();
    if (started_) {
      const std::string command = std::string(FERRY_SLURM_TEST_CLUSTER) + " stop " + cluster_dir_;
      EXPECT_EQ(std::system(command.c_str()), 0) << "stopping the cluster failed";
    }
    if (!base_.empty()) std::filesystem::remove_all(base_);
  }

  SubmitRequest Request(const std::string& tag, const std::string& script) {
    SubmitRequest request;
    request.name = tag;
    request.comment = tag;
    request.working_dir = work_dir_;
    request.stdout_path = work_dir_ + "/" + tag + ".out";
    request.environment = {{"PATH", "/usr/bin:/bin"}, {"FERRY_JOB_ID", tag}};
    request.script = "#!/bin/sh\n" + script + "\n";
    return request;
  }

  // Polls the job until `done` holds (or 60 s pass); returns the last view.
  Job WaitFor(int64_t id, const std::function<bool(const Job&)>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    Job last;
    while (std::chrono::steady_clock::now() < deadline) {
      auto job = client_->GetJob(id);
      EXPECT_TRUE(job.ok()) << job.status().ToString();
      if (job.ok() && job->has_value()) {
        last = **job;
        if (done(last)) return last;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "job " << id << " stayed " << ToString(last.state) << " (" << last.reason
                  << ")";
    return last;
  }

  Job WaitFinished(int64_t id) {
    return WaitFor(id, [](const Job& job) { return IsFinished(job.state); });
  }

  std::string base_, cluster_dir_, work_dir_;
  std::map<std::string, std::string> env_;
  bool started_ = false;
  std::unique_ptr<SlurmClient> client_;
};

TEST_P(SlurmClusterTest, ProbeAndNodes) {
  auto probe = client_->Probe();
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_TRUE(probe->controller_up);
  EXPECT_EQ(probe->slurm_release.substr(0, 5), "22.05");
  if (GetParam() == Kind::kRest) {
    EXPECT_EQ(probe->version, ApiVersion{38});  // the newest 22.05 serves
    EXPECT_EQ(probe->served, (std::vector<ApiVersion>{{36}, {37}, {38}}));
    EXPECT_NE(client_->Describe().find("v0.0.38"), std::string::npos) << client_->Describe();
  }
  auto nodes = client_->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 1u);
  const Node& node = (*nodes)[0];
  EXPECT_EQ(node.name, env_["SLURM_TEST_NODE"]);
  EXPECT_EQ(node.gpus, 4);
  EXPECT_EQ(node.gpu_type, env_["SLURM_TEST_GPU_TYPE"]);
  EXPECT_EQ(node.gpus_allocated, 0);
  EXPECT_TRUE(node.idle) << node.state;
  EXPECT_FALSE(node.down);
  EXPECT_FALSE(node.drain);
  EXPECT_GE(node.cpus, 1);
  EXPECT_GT(node.memory_mb, 0);
  std::vector<std::string> partitions = node.partitions;
  std::sort(partitions.begin(), partitions.end());
  std::vector<std::string> expected = {env_["SLURM_TEST_PARTITION"],
                                       env_["SLURM_TEST_URGENT_PARTITION"]};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(partitions, expected);
}

TEST_P(SlurmClusterTest, GpuJobCompletesWithItsOutput) {
  SubmitRequest request =
      Request("ferry:gpu:0", "echo \"CUDA=$CUDA_VISIBLE_DEVICES FERRY=$FERRY_JOB_ID\"");
  request.gpus_per_node = 2;
  request.gpu_type = env_["SLURM_TEST_GPU_TYPE"];
  request.time_limit_minutes = 5;
  auto id = client_->Submit(request);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  Job job = WaitFinished(*id);
  EXPECT_EQ(job.state, JobState::kCompleted) << job.state_text << " " << job.reason;
  EXPECT_EQ(job.exit_code, 0);
  EXPECT_EQ(job.exit_signal, 0);
  EXPECT_EQ(job.nodes, env_["SLURM_TEST_NODE"]);
  EXPECT_EQ(job.name, "ferry:gpu:0");
  EXPECT_EQ(job.comment, "ferry:gpu:0");
  EXPECT_GT(job.start_time, 0);
  EXPECT_GE(job.end_time, job.start_time);
  EXPECT_NE(job.gres_per_node.find("gpu:" + env_["SLURM_TEST_GPU_TYPE"] + ":2"), std::string::npos)
      << job.gres_per_node;
  EXPECT_EQ(job.standard_output, request.stdout_path);
  EXPECT_EQ(ReadFile(request.stdout_path), "CUDA=0,1 FERRY=ferry:gpu:0\n");
}

TEST_P(SlurmClusterTest, NonZeroExitFails) {
  auto id = client_->Submit(Request("ferry:exit3:0", "echo bye; exit 3"));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  Job job = WaitFinished(*id);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.exit_code, 3);
  EXPECT_EQ(job.reason, "NonZeroExitCode");
}

TEST_P(SlurmClusterTest, PendingReasons) {
  // More GPUs than the node has: refused at submission.
  SubmitRequest too_big = Request("ferry:toobig:0", "true");
  too_big.gpus_per_node = 8;
  auto refused = client_->Submit(too_big);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("Requested node configuration is not available"),
            std::string::npos)
      << refused.status().message();

  SubmitRequest held = Request("ferry:held:0", "true");
  held.hold = true;
  auto held_id = client_->Submit(held);
  ASSERT_TRUE(held_id.ok()) << held_id.status().ToString();
  Job held_job = WaitFor(*held_id, [](const Job& job) { return job.reason == "JobHeldUser"; });
  EXPECT_EQ(held_job.state, JobState::kPending);

  // Two GPUs busy: a job for all four waits for Resources.
  SubmitRequest busy = Request("ferry:busy:0", "sleep 300");
  busy.gpus_per_node = 2;
  auto busy_id = client_->Submit(busy);
  ASSERT_TRUE(busy_id.ok()) << busy_id.status().ToString();
  WaitFor(*busy_id, [](const Job& job) { return job.state == JobState::kRunning; });
  auto nodes = client_->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ((*nodes)[0].gpus_allocated, 2);
  EXPECT_TRUE((*nodes)[0].mixed) << (*nodes)[0].state;
  SubmitRequest all = Request("ferry:all:0", "true");
  all.gpus_per_node = 4;
  auto all_id = client_->Submit(all);
  ASSERT_TRUE(all_id.ok()) << all_id.status().ToString();
  Job waiting = WaitFor(*all_id, [](const Job& job) { return job.reason == "Resources"; });
  EXPECT_EQ(waiting.state, JobState::kPending);
  EXPECT_EQ(waiting.start_time, 0);
  EXPECT_FALSE(waiting.exit_code.has_value());
}

TEST_P(SlurmClusterTest, CancelAndSignal) {
  auto id = client_->Submit(Request("ferry:sleep:0", "sleep 300"));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  WaitFor(*id, [](const Job& job) { return job.state == JobState::kRunning; });
  ASSERT_TRUE(client_->Cancel(*id).ok());
  Job cancelled = WaitFinished(*id);
  EXPECT_EQ(cancelled.state, JobState::kCancelled);
  // Idempotent: again, and for a job Slurm never had.
  EXPECT_TRUE(client_->Cancel(*id).ok());
  EXPECT_TRUE(client_->Cancel(987654).ok());

  // A signal reaches the batch script, which decides how the job ends.
  auto trapped = client_->Submit(
      Request("ferry:trap:0", "trap 'echo got-term; exit 0' TERM\nsleep 300 &\nwait"));
  ASSERT_TRUE(trapped.ok()) << trapped.status().ToString();
  WaitFor(*trapped, [](const Job& job) { return job.state == JobState::kRunning; });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the trap be set
  ASSERT_TRUE(client_->Cancel(*trapped, SIGTERM).ok());
  Job ended = WaitFinished(*trapped);
  EXPECT_EQ(ended.state, JobState::kCompleted) << ended.state_text;
  // slurmstepd also writes "*** JOB n ON node CANCELLED AT ... ***" into the
  // output when it delivers the signal, although the job then completes.
  const std::string output = ReadFile(work_dir_ + "/ferry:trap:0.out");
  EXPECT_NE(output.find("got-term\n"), std::string::npos) << output;
}

TEST_P(SlurmClusterTest, ListByTagAndGetUnknown) {
  auto first = client_->Submit(Request("ferry:7:0", "true"));
  auto second = client_->Submit(Request("ferry:7:1", "true"));
  SubmitRequest other = Request("other", "true");
  other.comment = "not ours";
  auto third = client_->Submit(other);
  ASSERT_TRUE(first.ok() && second.ok() && third.ok());
  WaitFinished(*third);
  JobFilter filter;
  filter.comment_prefix = "ferry:7:";
  auto ours = client_->ListJobs(filter);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  ASSERT_EQ(ours->size(), 2u);
  for (const Job& job : *ours) EXPECT_TRUE(job.id == *first || job.id == *second) << job.id;
  JobFilter by_name;
  by_name.name_prefix = "ferry:";
  auto named = client_->ListJobs(by_name);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->size(), 2u);
  auto all = client_->ListJobs(JobFilter());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 3u);
  auto unknown = client_->GetJob(987654);
  ASSERT_TRUE(unknown.ok()) << unknown.status().ToString();
  EXPECT_FALSE(unknown->has_value());
}

INSTANTIATE_TEST_SUITE_P(Clients, SlurmClusterTest, testing::Values(Kind::kRest, Kind::kCli),
                         KindName);

}  // namespace
}  // namespace ferry::fleet::slurm
