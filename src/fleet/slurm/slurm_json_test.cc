// The parsers on JSON captured from real Slurm 22.05 daemons (testdata/, see
// its README), on the data_parser shape of v0.0.40+, and on bad input.
#include "fleet/slurm/slurm_json.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ferry/fleet/slurm.h"
#include "fleet/slurm/run_command.h"

namespace ferry::fleet::slurm {
namespace {

using internal::ParseJobs;
using internal::ParseNodes;

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(FERRY_SLURM_TESTDATA) + "/" + name);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const Job* Find(const std::vector<Job>& jobs, const std::string& name) {
  for (const Job& job : jobs) {
    if (job.name == name) return &job;
  }
  return nullptr;
}

// ---- Nodes.

TEST(SlurmNodes, EveryVersionOf2205ShowsFourGpusTwoInUse) {
  for (const char* name :
       {"nodes_v0.0.36.json", "nodes_v0.0.37.json", "nodes_v0.0.38.json", "sinfo_22.05.json"}) {
    SCOPED_TRACE(name);
    auto nodes = ParseNodes(Fixture(name), name);
    ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
    ASSERT_EQ(nodes->size(), 1u);
    const Node& node = (*nodes)[0];
    EXPECT_EQ(node.name, "ferry-node1");
    EXPECT_EQ(node.gpus, 4);
    EXPECT_EQ(node.gpu_type, "h200");
    EXPECT_EQ(node.gpus_allocated, 2);
    EXPECT_EQ(node.cpus, 2);
    EXPECT_GT(node.memory_mb, 1000);
    EXPECT_EQ(node.address, "127.0.0.1");
    EXPECT_FALSE(node.down);
    EXPECT_FALSE(node.drain);
    EXPECT_FALSE(node.idle);
    // v0.0.36 knows no MIXED: a node with any allocation is "allocated".
    if (std::string(name) == "nodes_v0.0.36.json") {
      EXPECT_EQ(node.state, "ALLOCATED");
      EXPECT_TRUE(node.allocated);
    } else {
      EXPECT_EQ(node.state, "MIXED");
      EXPECT_TRUE(node.mixed);
      EXPECT_EQ(node.alloc_cpus, 1);
      EXPECT_EQ(node.alloc_memory_mb, 100);
      EXPECT_EQ(node.partitions, std::vector<std::string>{"ferry"});
    }
  }
}

TEST(SlurmNodes, DrainedAndDownFromStateFlags) {
  const std::string body = R"js({"errors": [], "nodes": [
    {"name": "a", "state": "idle", "state_flags": ["DRAIN"], "reason": "maintenance",
     "cpus": 8, "real_memory": 1000, "gres": "gpu:a100:8(S:0-1)", "gres_used": "gpu:a100:0(IDX:N/A)"},
    {"name": "b", "state": "down", "state_flags": ["NOT_RESPONDING"], "gres": "(null)"},
    {"name": "c", "state": "idle+drain", "gres": "gpu:2,gpu:h100:2"}]})js";
  auto nodes = ParseNodes(body, "test");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_TRUE((*nodes)[0].drain);
  EXPECT_TRUE((*nodes)[0].idle);
  EXPECT_EQ((*nodes)[0].reason, "maintenance");
  EXPECT_EQ((*nodes)[0].gpus, 8);
  EXPECT_EQ((*nodes)[0].gpus_allocated, 0);
  EXPECT_TRUE((*nodes)[1].down);
  EXPECT_EQ((*nodes)[1].gpus, 0);
  EXPECT_TRUE((*nodes)[2].drain);
  EXPECT_EQ((*nodes)[2].state, "IDLE");
  EXPECT_EQ((*nodes)[2].gpus, 4);
  EXPECT_EQ((*nodes)[2].gpu_type, "");
}

TEST(SlurmNodes, DataParserShape) {
  auto nodes = ParseNodes(Fixture("nodes_v0.0.40.json"), "v0.0.40");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].state, "MIXED");
  EXPECT_EQ((*nodes)[0].gpus, 4);
  EXPECT_EQ((*nodes)[0].gpus_allocated, 2);
  EXPECT_EQ((*nodes)[1].state, "IDLE");
  EXPECT_TRUE((*nodes)[1].drain);
  EXPECT_EQ((*nodes)[1].gpus, 8);
  EXPECT_EQ((*nodes)[1].gpu_type, "h100");
}

// ---- Jobs.

void ExpectStatesOf2205(const std::vector<Job>& jobs) {
  const Job* ok = Find(jobs, "ferry:ok:0");
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->state, JobState::kCompleted);
  EXPECT_EQ(ok->exit_code, 0);
  EXPECT_GT(ok->start_time, 0);
  EXPECT_GE(ok->end_time, ok->start_time);
  const Job* failed = Find(jobs, "ferry:fail:0");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->state, JobState::kFailed);
  EXPECT_EQ(failed->exit_code, 3);  // Slurm's 768: a wait status
  EXPECT_EQ(failed->reason, "NonZeroExitCode");
  const Job* cancelled = Find(jobs, "ferry:cancel:0");
  ASSERT_NE(cancelled, nullptr);
  EXPECT_EQ(cancelled->state, JobState::kCancelled);
  EXPECT_EQ(cancelled->exit_signal, 15);  // Slurm's cancel sends SIGTERM first
  const Job* timeout = Find(jobs, "ferry:timeout:0");
  ASSERT_NE(timeout, nullptr);
  EXPECT_EQ(timeout->state, JobState::kTimeout);
  const Job* held = Find(jobs, "ferry:held:0");
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->state, JobState::kPending);
  EXPECT_EQ(held->reason, "JobHeldUser");
  EXPECT_EQ(held->start_time, 0);  // an estimate while pending: not reported
  EXPECT_FALSE(held->exit_code.has_value());
  const Job* waiting = Find(jobs, "ferry:wait:0");
  ASSERT_NE(waiting, nullptr);
  EXPECT_EQ(waiting->state, JobState::kPending);
  EXPECT_EQ(waiting->reason, "Resources");
  EXPECT_EQ(waiting->gres_per_node, "gres:gpu:h200:4");
  const Job* running = Find(jobs, "ferry:run:0");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->state, JobState::kRunning);
  EXPECT_EQ(running->nodes, "ferry-node1");
  EXPECT_EQ(running->comment, "ferry:run:0");
  EXPECT_EQ(running->partition, "ferry");
  EXPECT_EQ(running->end_time, 0);  // the time limit, not an end
  EXPECT_FALSE(running->exit_code.has_value());
}

TEST(SlurmJobs, StatesOf2205Rest) {
  for (const char* name : {"jobs_v0.0.38.json", "jobs_v0.0.36.json", "squeue_22.05.json"}) {
    SCOPED_TRACE(name);
    auto jobs = ParseJobs(Fixture(name), name);
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    ExpectStatesOf2205(*jobs);
  }
}

TEST(SlurmJobs, UnknownJobIsAnEmptyList) {
  auto jobs = ParseJobs(Fixture("job_unknown_v0.0.38.json"), "GET /job/9999");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_TRUE(jobs->empty());
}

TEST(SlurmJobs, DataParserShape) {
  auto jobs = ParseJobs(Fixture("jobs_v0.0.40.json"), "v0.0.40");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 4u);
  EXPECT_EQ((*jobs)[0].state, JobState::kRunning);
  EXPECT_EQ((*jobs)[0].start_time, 1700000100);
  EXPECT_FALSE((*jobs)[0].exit_code.has_value());
  EXPECT_EQ((*jobs)[1].state, JobState::kFailed);
  EXPECT_EQ((*jobs)[1].exit_code, 3);
  EXPECT_EQ((*jobs)[1].end_time, 1700000200);
  EXPECT_EQ((*jobs)[2].state, JobState::kPending);
  EXPECT_EQ((*jobs)[2].reason, "Resources");
  EXPECT_EQ((*jobs)[3].state, JobState::kCompleting);
  EXPECT_EQ((*jobs)[3].state_text, "CANCELLED,COMPLETING");
  EXPECT_EQ((*jobs)[3].exit_signal, 9);
}

TEST(SlurmJobs, FilterByTag) {
  auto jobs = ParseJobs(Fixture("jobs_v0.0.38.json"), "jobs");
  ASSERT_TRUE(jobs.ok());
  JobFilter filter;
  filter.name_prefix = "ferry:run:";
  int matched = 0;
  for (const Job& job : *jobs) matched += filter.Matches(job) ? 1 : 0;
  EXPECT_EQ(matched, 1);
  JobFilter by_comment;
  by_comment.comment_prefix = "ferry:";
  matched = 0;
  for (const Job& job : *jobs) matched += by_comment.Matches(job) ? 1 : 0;
  EXPECT_GE(matched, 2);
  EXPECT_LT(matched, static_cast<int>(jobs->size()));  // the others have no comment
}

// ---- Submission, cancel, ping, probe.

TEST(SlurmResponses, Submit) {
  auto ok = internal::ParseSubmitResponse(Fixture("submit_ok_v0.0.38.json"), "submit");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, 10);
  // A held job comes back with an "error" and its id: a success.
  auto held = internal::ParseSubmitResponse(Fixture("submit_held_v0.0.38.json"), "submit");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(*held, 12);
  struct Case {
    const char* fixture;
    const char* message;
  };
  for (const Case& c : {Case{"submit_tres_per_node_v0.0.38.json", "Unknown key \"tres_per_node\""},
                        Case{"submit_no_environment_v0.0.38.json", "environment must be set"},
                        Case{"submit_too_many_gpus_v0.0.38.json",
                             "Requested node configuration is not available (2014)"}}) {
    auto refused = internal::ParseSubmitResponse(Fixture(c.fixture), "submit");
    ASSERT_FALSE(refused.ok()) << c.fixture;
    EXPECT_NE(refused.status().message().find(c.message), std::string::npos)
        << refused.status().message();
  }
}

TEST(SlurmResponses, CancelPingAndVersions) {
  EXPECT_TRUE(internal::ParseEmptyResponse(Fixture("cancel_ok_v0.0.38.json"), "cancel").ok());
  Status unknown = internal::ParseEmptyResponse(Fixture("cancel_unknown_v0.0.38.json"), "cancel");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("(2017)"), std::string::npos) << unknown.message();

  auto ping = internal::ParsePing(Fixture("ping_v0.0.38.json"), "ping");
  ASSERT_TRUE(ping.ok()) << ping.status().ToString();
  EXPECT_TRUE(ping->controller_up);
  EXPECT_EQ(ping->slurm_release, "22.05.8");

  auto versions = internal::ParseServedVersions(Fixture("openapi_paths_22.05.json"));
  ASSERT_TRUE(versions.ok()) << versions.status().ToString();
  EXPECT_EQ(*versions, (std::vector<ApiVersion>{{36}, {37}, {38}}));
  auto newer = internal::ParseServedVersions(
      R"js({"paths": {"/slurm/v0.0.40/ping": {}, "/slurm/v0.0.41/ping/": {}, "/slurmdb/v0.0.41/ping": {},
          "/slurm/v0.0.41/jobs": {}}})js");
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(*newer, (std::vector<ApiVersion>{{40}, {41}}));
}

// ---- Building requests.

SubmitRequest Gang() {
  SubmitRequest request;
  request.name = "ferry:42:1";
  request.comment = "ferry:42:1";
  request.partition = "gpu";
  request.nodes = 2;
  request.gpus_per_node = 4;
  request.gpu_type = "h200";
  request.time_limit_minutes = 30;
  request.working_dir = "/srv/job";
  request.stdout_path = "/logs/%j.out";
  request.environment = {{"FERRY_JOB_ID", "42"}, {"PATH", "/usr/bin:/bin"}};
  request.script = "#!/bin/sh\nexec train\n";
  return request;
}

TEST(SlurmRequests, SubmitBodyPerVersion) {
  auto old = nlohmann::json::parse(internal::SubmitBody(Gang(), ApiVersion{38}));
  EXPECT_EQ(old["script"], "#!/bin/sh\nexec train\n");
  EXPECT_EQ(old["job"]["nodes"], 2);
  EXPECT_EQ(old["job"]["gpus_per_node"], "h200:4");
  EXPECT_FALSE(old["job"].contains("tres_per_node"));
  EXPECT_EQ(old["job"]["environment"]["FERRY_JOB_ID"], "42");
  EXPECT_EQ(old["job"]["time_limit"], 30);
  EXPECT_EQ(old["job"]["requeue"], false);
  SubmitRequest bare = Gang();
  bare.environment.clear();
  auto empty_env = nlohmann::json::parse(internal::SubmitBody(bare, ApiVersion{37}));
  EXPECT_TRUE(empty_env["job"]["environment"].is_object());  // must be there, even empty

  auto current = nlohmann::json::parse(internal::SubmitBody(Gang(), ApiVersion{41}));
  EXPECT_FALSE(current.contains("script"));
  EXPECT_EQ(current["job"]["script"], "#!/bin/sh\nexec train\n");
  EXPECT_EQ(current["job"]["tres_per_node"], "gres/gpu:h200:4");
  EXPECT_EQ(current["job"]["minimum_nodes"], 2);
  EXPECT_EQ(current["job"]["environment"],
            (nlohmann::json::array({"FERRY_JOB_ID=42", "PATH=/usr/bin:/bin"})));
  EXPECT_EQ(current["job"]["time_limit"]["number"], 30);
}

TEST(SlurmRequests, SbatchArguments) {
  std::vector<std::string> args = internal::SbatchArguments(Gang());
  for (const char* want :
       {"--parsable", "--export=ALL", "--job-name=ferry:42:1", "--comment=ferry:42:1",
        "--partition=gpu", "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=h200:4",
        "--time=30", "--chdir=/srv/job", "--output=/logs/%j.out", "--no-requeue"}) {
    EXPECT_NE(std::find(args.begin(), args.end(), want), args.end()) << want;
  }
}

TEST(SlurmRequests, SpreadTasksCpusMemoryAndNodelist) {
  SubmitRequest spread = Gang();
  spread.gpus_per_node = 0;
  spread.tasks = 3;
  spread.gpus_per_task = 1;
  spread.cpus_per_task = 4;
  spread.memory_mb_per_node = 8192;
  spread.nodelist = {"n1", "n2"};
  auto old = nlohmann::json::parse(internal::SubmitBody(spread, ApiVersion{38}));
  EXPECT_EQ(old["job"]["tasks"], 3);
  EXPECT_FALSE(old["job"].contains("tasks_per_node"));
  EXPECT_EQ(old["job"]["gpus_per_task"], "h200:1");
  EXPECT_FALSE(old["job"].contains("gpus_per_node"));
  EXPECT_EQ(old["job"]["cpus_per_task"], 4);
  EXPECT_EQ(old["job"]["memory_per_node"], 8192);
  EXPECT_FALSE(old["job"].contains("required_nodes"));  // v0.0.38 has no such field
  auto current = nlohmann::json::parse(internal::SubmitBody(spread, ApiVersion{40}));
  EXPECT_EQ(current["job"]["tres_per_task"], "gres/gpu:h200:1");
  EXPECT_EQ(current["job"]["memory_per_node"]["number"], 8192);
  EXPECT_EQ(current["job"]["required_nodes"], (nlohmann::json::array({"n1", "n2"})));
  std::vector<std::string> args = internal::SbatchArguments(spread);
  for (const char* want : {"--ntasks=3", "--gpus-per-task=h200:1", "--cpus-per-task=4",
                           "--mem=8192", "--nodelist=n1,n2"}) {
    EXPECT_NE(std::find(args.begin(), args.end(), want), args.end()) << want;
  }
  EXPECT_EQ(std::find(args.begin(), args.end(), std::string("--ntasks-per-node=1")), args.end());
  EXPECT_TRUE(internal::ValidateSubmit(spread).ok());
  spread.nodelist = {"n1"};  // two nodes asked, one named
  EXPECT_FALSE(internal::ValidateSubmit(spread).ok());
  spread.nodelist = {"n1", "n[2-3]"};
  EXPECT_FALSE(internal::ValidateSubmit(spread).ok());
  spread.nodelist.clear();
  spread.tasks = 1;  // fewer tasks than nodes
  EXPECT_FALSE(internal::ValidateSubmit(spread).ok());
  spread.tasks = 0;  // GPUs per task without a task count
  EXPECT_FALSE(internal::ValidateSubmit(spread).ok());
}

TEST(SlurmVocabulary, HostLists) {
  using V = std::vector<std::string>;
  EXPECT_EQ(*ExpandHostList("n1"), V{"n1"});
  EXPECT_EQ(*ExpandHostList(""), V{});
  EXPECT_EQ(*ExpandHostList("a,b"), (V{"a", "b"}));
  EXPECT_EQ(*ExpandHostList("n[1-3,7]"), (V{"n1", "n2", "n3", "n7"}));
  EXPECT_EQ(*ExpandHostList("gpu-[08-10]-ib,x"), (V{"gpu-08-ib", "gpu-09-ib", "gpu-10-ib", "x"}));
  EXPECT_EQ(*ExpandHostList("ferry-node1"), V{"ferry-node1"});
  for (const char* bad : {"n[1-", "n]", "n[]", "n[3-1]", "n[a-b]", "n[1-2][3]", "n[0-999999]"}) {
    EXPECT_FALSE(ExpandHostList(bad).ok()) << bad;
  }
}

TEST(SlurmRequests, Validation) {
  SubmitRequest request = Gang();
  EXPECT_TRUE(internal::ValidateSubmit(request).ok());
  request.script = "train";
  EXPECT_FALSE(internal::ValidateSubmit(request).ok());
  request = Gang();
  request.working_dir = "relative";
  EXPECT_FALSE(internal::ValidateSubmit(request).ok());
  request = Gang();
  request.nodes = 0;
  EXPECT_FALSE(internal::ValidateSubmit(request).ok());
  request = Gang();
  request.gpu_type = "h200:8";
  EXPECT_FALSE(internal::ValidateSubmit(request).ok());
  request = Gang();
  request.environment["A=B"] = "c";
  EXPECT_FALSE(internal::ValidateSubmit(request).ok());
}

// ---- Vocabulary.

TEST(SlurmVocabulary, JobStates) {
  EXPECT_EQ(ParseJobState("RUNNING"), JobState::kRunning);
  EXPECT_EQ(ParseJobState("CANCELLED by 0"), JobState::kCancelled);
  EXPECT_EQ(ParseJobState("cd"), JobState::kCompleted);
  EXPECT_EQ(ParseJobState("NODE_FAIL"), JobState::kNodeFail);
  EXPECT_EQ(ParseJobState("OUT_OF_MEMORY"), JobState::kOutOfMemory);
  EXPECT_EQ(ParseJobState("OOM"), JobState::kOutOfMemory);
  EXPECT_EQ(ParseJobState("PREEMPTED"), JobState::kPreempted);
  EXPECT_EQ(ParseJobState("BOOT_FAIL"), JobState::kBootFail);
  EXPECT_EQ(ParseJobState("DEADLINE"), JobState::kDeadline);
  EXPECT_EQ(ParseJobState("REQUEUE_HOLD"), JobState::kRequeued);
  EXPECT_EQ(ParseJobState("CONFIGURING"), JobState::kPending);
  EXPECT_EQ(ParseJobState("WARPING"), JobState::kUnknown);
  EXPECT_EQ(ParseJobState(""), JobState::kUnknown);
  EXPECT_TRUE(IsFinished(JobState::kTimeout));
  EXPECT_FALSE(IsFinished(JobState::kCompleting));
  EXPECT_FALSE(IsFinished(JobState::kRequeued));
  EXPECT_EQ(ToString(JobState::kOutOfMemory), "OUT_OF_MEMORY");
}

TEST(SlurmVocabulary, Gres) {
  auto gres = ParseGresList("gpu:h200:3(IDX:0,2-3),gpu:2,shard:8,gres/gpu:a100:1");
  ASSERT_TRUE(gres.ok()) << gres.status().ToString();
  ASSERT_EQ(gres->size(), 4u);
  EXPECT_EQ((*gres)[0].type, "h200");
  EXPECT_EQ((*gres)[0].count, 3);
  EXPECT_EQ((*gres)[1].type, "");
  EXPECT_EQ((*gres)[1].count, 2);
  EXPECT_EQ((*gres)[2].name, "shard");
  EXPECT_EQ((*gres)[3].type, "a100");
  EXPECT_TRUE(ParseGresList("(null)")->empty());
  EXPECT_TRUE(ParseGresList("N/A")->empty());
  for (const char* bad : {"gpu:h200:4(IDX:0", "gpu:a:b:c", ",gpu:1", "gpu:h200:-1", ":4"}) {
    EXPECT_FALSE(ParseGresList(bad).ok()) << bad;
  }
}

TEST(SlurmVocabulary, Versions) {
  EXPECT_EQ(ParseApiVersion("v0.0.38")->number, 38);
  EXPECT_EQ(ParseApiVersion("0.0.41")->number, 41);
  for (const char* bad : {"", "v1", "v0.0.", "v0.0.x", "v0.1.38", "v0.0.-1"}) {
    EXPECT_FALSE(ParseApiVersion(bad).ok()) << bad;
  }
  EXPECT_TRUE(ApiVersion{40}.data_parser());
  EXPECT_FALSE(ApiVersion{38}.data_parser());
  EXPECT_EQ(ApiVersion{38}.ToString(), "v0.0.38");
}

// ---- Bad input: errors, never a crash.

TEST(SlurmBadInput, Nodes) {
  const char* cases[] = {
      "",
      "not json",
      "{\"nodes\": [",
      "[]",
      "42",
      "{}",
      R"js({"nodes": {}})js",
      R"js({"nodes": ["a"]})js",
      R"js({"nodes": [{"state": "idle"}]})js",
      R"js({"nodes": [{"name": "a"}]})js",
      R"js({"nodes": [{"name": "a", "state": 5}]})js",
      R"js({"nodes": [{"name": "a", "state": [1]}]})js",
      R"js({"nodes": [{"name": "a", "state": []}]})js",
      R"js({"nodes": [{"name": "a", "state": "idle", "state_flags": "DRAIN"}]})js",
      R"js({"nodes": [{"name": "a", "state": "idle", "gres": "gpu:(x"}]})js",
      R"js({"nodes": [{"name": "a", "state": "idle", "gres_used": "gpu:x:y:z"}]})js",
      R"js({"errors": [{"error": "Unable to contact slurm controller", "error_number": 1007}], "nodes": []})js",
  };
  for (const char* body : cases) {
    auto nodes = ParseNodes(body, "nodes");
    EXPECT_FALSE(nodes.ok()) << body;
    if (!nodes.ok()) {
      EXPECT_NE(nodes.status().message().find("nodes"), std::string::npos);
    }
  }
  auto refused = ParseNodes(cases[16], "nodes");
  EXPECT_NE(refused.status().message().find("Unable to contact slurm controller (1007)"),
            std::string::npos);
  // Wrong types where numbers belong are read as absent, not fatal.
  auto odd = ParseNodes(
      R"js({"nodes": [{"name": "a", "state": "idle", "cpus": "x", "real_memory": null}]})js",
      "nodes");
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  EXPECT_EQ((*odd)[0].cpus, 0);
}

TEST(SlurmBadInput, JobsAndResponses) {
  const char* cases[] = {
      "{\"jobs\": [{\"job_id\": 1,",
      R"js({"jobs": null})js",
      R"js({"jobs": [null]})js",
      R"js({"jobs": [{"name": "x", "job_state": "RUNNING"}]})js",
      R"js({"jobs": [{"job_id": -4, "job_state": "RUNNING"}]})js",
      R"js({"jobs": [{"job_id": 1}]})js",
      R"js({"jobs": [{"job_id": 1, "job_state": {"current": "RUNNING"}}]})js",
      R"js({"jobs": [{"job_id": {"set": false}, "job_state": "RUNNING"}]})js",
      R"js({"errors": [{"error": "boom"}], "jobs": [{"job_id": 1, "job_state": "RUNNING"}]})js",
      R"js({"errors": ["plain text"], "jobs": []})js",
  };
  for (const char* body : cases) EXPECT_FALSE(ParseJobs(body, "jobs").ok()) << body;
  for (const char* body : {"", "{}", R"js({"job_id": "7"})js", R"js({"job_id": 0, "errors": []})js",
                           R"js({"errors": [{"description": "denied"}]})js", "[1]"}) {
    EXPECT_FALSE(internal::ParseSubmitResponse(body, "submit").ok()) << body;
  }
  for (const char* body : {"", "{}", R"js({"pings": 1})js", "<html>"}) {
    EXPECT_FALSE(internal::ParsePing(body, "ping").ok()) << body;
  }
  for (const char* body : {"", "{}", R"js({"paths": []})js"}) {
    EXPECT_FALSE(internal::ParseServedVersions(body).ok()) << body;
  }
  EXPECT_FALSE(internal::ParseEmptyResponse("nope", "cancel").ok());
  // A deep nesting or a huge number must not crash either.
  std::string deep(100000, '[');
  EXPECT_FALSE(ParseJobs(deep, "jobs").ok());
  auto huge = ParseJobs(R"js({"jobs": [{"job_id": 1, "job_state": "PENDING", "submit_time": 1e300,
                                      "node_count": 99999999999999999999}]})js",
                        "jobs");
  EXPECT_TRUE(huge.ok()) << huge.status().ToString();
}

// ---- Running the tools.

TEST(SlurmRunCommand, OutputExitStdinAndTimeout) {
  auto echo = internal::RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 4"}, {}, "", 10);
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  EXPECT_EQ(echo->out, "out\n");
  EXPECT_EQ(echo->err, "err\n");
  EXPECT_EQ(echo->exit_code, 4);

  std::string input(1 << 20, 'x');  // more than a pipe holds
  auto cat = internal::RunCommand({"/bin/cat"}, {}, input, 10);
  ASSERT_TRUE(cat.ok());
  EXPECT_EQ(cat->out.size(), input.size());

  auto env = internal::RunCommand({"/usr/bin/env"}, {{"ONLY", "this"}}, "", 10);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->out, "ONLY=this\n");

  auto closed = internal::RunCommand({"/bin/true"}, {}, input, 10);  // never reads stdin
  ASSERT_TRUE(closed.ok()) << closed.status().ToString();
  EXPECT_EQ(closed->exit_code, 0);

  const auto start = std::chrono::steady_clock::now();
  auto slow = internal::RunCommand({"/bin/sleep", "30"}, {}, "", 0.3);
  EXPECT_EQ(slow.status().code(), StatusCode::kTimedOut);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  EXPECT_FALSE(internal::RunCommand({"sleep"}, {}, "", 1).ok());
  auto missing = internal::RunCommand({"/nonexistent/tool"}, {}, "", 5);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->exit_code, 127);
}

RestOptions Rest(std::string endpoint, std::string user = "", std::string token = "") {
  RestOptions options;
  options.endpoint = std::move(endpoint);
  options.user_name = std::move(user);
  options.token = std::move(token);
  options.timeout_s = 2;
  return options;
}

CliOptions Cli(std::string bin_dir) {
  CliOptions options;
  options.bin_dir = std::move(bin_dir);
  return options;
}

TEST(SlurmClients, OptionsAreChecked) {
  EXPECT_FALSE(MakeRestClient(Rest("localhost:6820")).ok());
  EXPECT_FALSE(MakeRestClient(Rest("unix:relative.sock")).ok());
  EXPECT_FALSE(MakeRestClient(Rest("unix:/" + std::string(200, 'a'))).ok());
  EXPECT_FALSE(MakeRestClient(Rest("http://h:1", "u")).ok());
  EXPECT_TRUE(MakeRestClient(Rest("http://h:1", "u", "t")).ok());
  EXPECT_FALSE(MakeCliClient(Cli("usr/bin")).ok());
  // Nothing listens: a clear IOError, as the provider's breaker needs.
  auto client = MakeRestClient(Rest("unix:/nonexistent/slurmrestd.sock"));
  ASSERT_TRUE(client.ok());
  auto probe = (*client)->Probe();
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), StatusCode::kIOError);
  EXPECT_NE(probe.status().message().find("unreachable"), std::string::npos)
      << probe.status().message();
  auto cli = MakeCliClient(Cli("/nonexistent"));
  ASSERT_TRUE(cli.ok());
  EXPECT_EQ((*cli)->ListNodes().status().code(), StatusCode::kNotImplemented);
}

}  // namespace
}  // namespace ferry::fleet::slurm
