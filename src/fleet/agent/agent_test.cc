#include "ferry/fleet/agent.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include "fleet/agent/agent_internal.h"
#include "testing/test_util.h"

namespace ferry::fleet {
namespace {

using agent_internal::BuildLaunchSpec;
using agent_internal::ParseAssignment;

TEST(ParseGpuDeclaration, CountModelAndMemory) {
  ASSERT_OK_AND_ASSIGN(auto gpus, ParseGpuDeclaration("8xH200", "gpu-a"));
  ASSERT_EQ(gpus.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(gpus[i].index, i);
    EXPECT_EQ(gpus[i].model, "H200");
    EXPECT_EQ(gpus[i].memory_mb, 0);
    EXPECT_EQ(gpus[i].uuid, "gpu-a-gpu" + std::to_string(i));
  }
  ASSERT_OK_AND_ASSIGN(auto mixed, ParseGpuDeclaration(" 2xA100-80GB:81920 , 1XH100 ", "n"));
  ASSERT_EQ(mixed.size(), 3u);
  EXPECT_EQ(mixed[0].model, "A100-80GB");
  EXPECT_EQ(mixed[1].memory_mb, 81920);
  EXPECT_EQ(mixed[2].model, "H100");
  EXPECT_EQ(mixed[2].index, 2);
  EXPECT_EQ(mixed[2].memory_mb, 0);
  ASSERT_OK_AND_ASSIGN(auto none, ParseGpuDeclaration("  ", "n"));
  EXPECT_TRUE(none.empty());
}

TEST(ParseGpuDeclaration, RefusesBadInput) {
  for (const char* text :
       {"H200", "x8", "0xH200", "8x", "8xH200:", "8xH200:0", "8xH200:abc", "8xH 200", "8xH200,",
        ",8xH200", "2000xH200", "600xA,600xB", "99999999999999999999xH200",
        "8xH200:99999999999999999999", "-1xH200", "8x\xff"}) {
    auto result = ParseGpuDeclaration(text, "n");
    EXPECT_FALSE(result.ok()) << text;
    if (!result.ok()) {
      EXPECT_NE(result.status().message().find("GPU declaration"), std::string::npos) << text;
    }
  }
}

TEST(Nvml, AbsentLibraryMeansNoGpus) {
  // No NVIDIA driver on the test machines; where there is one this still must not fail.
  if (dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD) == nullptr) {
    void* probe = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (probe == nullptr) {
      EXPECT_TRUE(DiscoverNvmlGpus().empty());
    } else {
      dlclose(probe);
    }
  }
  EXPECT_TRUE(agent_internal::DiscoverNvmlGpusFrom("/nonexistent/libnvidia-ml.so.1").empty());
  // A library without the NVML symbols.
  EXPECT_TRUE(agent_internal::DiscoverNvmlGpusFrom("libm.so.6").empty());
}

TEST(Nvml, ReadsDevicesThroughTheLibrary) {
  auto gpus = agent_internal::DiscoverNvmlGpusFrom(FERRY_FAKE_NVML);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[0].model, "H200");
  EXPECT_EQ(gpus[0].memory_mb, 143771);
  EXPECT_EQ(gpus[0].uuid, "GPU-aaaa");
  EXPECT_EQ(gpus[1].model, "H100");
  EXPECT_EQ(gpus[1].memory_mb, 81559);
  EXPECT_EQ(gpus[1].uuid, "GPU-bbbb");
  // Init and shutdown are paired.
  void* library = dlopen(FERRY_FAKE_NVML, RTLD_NOW);
  ASSERT_NE(library, nullptr);
  auto initialised = reinterpret_cast<int (*)()>(dlsym(library, "fake_nvml_initialised"));
  ASSERT_NE(initialised, nullptr);
  EXPECT_EQ(initialised(), 0);
  dlclose(library);
}

TEST(Nvml, ModelNames) {
  EXPECT_EQ(agent_internal::ModelFromNvmlName("NVIDIA H200"), "H200");
  EXPECT_EQ(agent_internal::ModelFromNvmlName("NVIDIA A100-SXM4-80GB"), "A100-SXM4-80GB");
  EXPECT_EQ(agent_internal::ModelFromNvmlName("NVIDIA L40S"), "L40S");
  EXPECT_EQ(agent_internal::ModelFromNvmlName("Tesla T4"), "Tesla-T4");
  EXPECT_EQ(agent_internal::ModelFromNvmlName("NVIDIA GeForce RTX 4090"), "GeForce-RTX-4090");
  EXPECT_EQ(agent_internal::ModelFromNvmlName(""), "unknown");
}

nlohmann::json SampleAssignment() {
  return nlohmann::json::parse(R"({
    "job_id": 42, "task": 1, "attempt": 2, "job_name": "train",
    "spec": {"name": "train", "command": ["python", "train.py"], "env": {"SEED": "7", "FERRY_NODE": "spoof"},
             "working_dir": "", "dataflow": "", "tasks": 2, "gpus_per_task": 2,
             "gpu_models": ["H200"], "cpus_per_task": 1.0, "memory_mb_per_task": 1024,
             "priority": 0, "preemptible": false, "max_runtime_seconds": 0, "max_retries": 3,
             "labels": {}, "future_field": true},
    "gpu_indices": [4, 5], "gpu_uuids": ["GPU-4", "GPU-5"], "gang_nodes": ["gpu-a", "gpu-b"]})");
}

TEST(Assignment, ParsesAndBuildsTheLaunch) {
  ASSERT_OK_AND_ASSIGN(TaskAssignment assignment, ParseAssignment(SampleAssignment()));
  EXPECT_EQ(assignment.ref, (TaskRef{42, 1, 2}));
  EXPECT_EQ(assignment.gpu_indices, (std::vector<int>{4, 5}));
  agent_internal::NodeContext node{
      "gpu-b", "/var/lib/ferry/agent", "/opt/ferry", {{"PATH", "/bin"}, {"SEED", "1"}}};
  LaunchSpec launch = BuildLaunchSpec(assignment, node);
  EXPECT_EQ(launch.argv, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(launch.env["PATH"], "/bin");
  EXPECT_EQ(launch.env["SEED"], "7");  // the spec wins over the agent's environment
  EXPECT_EQ(launch.env["CUDA_VISIBLE_DEVICES"], "4,5");
  EXPECT_EQ(launch.env["FERRY_JOB_ID"], "42");
  EXPECT_EQ(launch.env["FERRY_JOB_NAME"], "train");
  EXPECT_EQ(launch.env["FERRY_TASK_INDEX"], "1");
  EXPECT_EQ(launch.env["FERRY_TASK_COUNT"], "2");
  EXPECT_EQ(launch.env["FERRY_ATTEMPT"], "2");
  EXPECT_EQ(launch.env["FERRY_NODE"], "gpu-b");  // FERRY_* cannot be overridden
  EXPECT_EQ(launch.env["FERRY_GANG_NODES"], "gpu-a,gpu-b");
  EXPECT_EQ(launch.working_dir, "/var/lib/ferry/agent");
  EXPECT_EQ(launch.memory_limit_mb, 1024);
  EXPECT_EQ(launch.log_path, "/var/lib/ferry/agent/logs/42-2-1.log");
}

TEST(Assignment, RendezvousVariablesForAGang) {
  // Four tasks on two nodes: 0 and 2 on gpu-a (task 0's node is the master),
  // 1 and 3 on gpu-b; this agent runs task 3.
  nlohmann::json json = SampleAssignment();
  json["task"] = 3;
  json["spec"]["tasks"] = 4;
  json["gang_nodes"] = {"gpu-a", "gpu-b", "gpu-a", "gpu-b"};
  json["gang_addresses"] = {"10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.2"};
  json["rendezvous_port"] = 29542;
  json["spec"]["env"]["MASTER_PORT"] = "1";  // the spec cannot override it
  ASSERT_OK_AND_ASSIGN(TaskAssignment assignment, ParseAssignment(json));
  agent_internal::NodeContext node{"gpu-b", "/var/lib/ferry/agent", "/opt/ferry", {}, "10.0.0.2"};
  LaunchSpec launch = BuildLaunchSpec(assignment, node);
  EXPECT_EQ(launch.env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(launch.env["MASTER_PORT"], "29542");
  EXPECT_EQ(launch.env["WORLD_SIZE"], "4");
  EXPECT_EQ(launch.env["RANK"], "3");
  EXPECT_EQ(launch.env["LOCAL_RANK"], "1");
  EXPECT_EQ(launch.env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(launch.env["NODE_RANK"], "1");
  EXPECT_EQ(launch.env["GROUP_RANK"], "1");
  EXPECT_EQ(launch.env["JAX_COORDINATOR_ADDRESS"], "10.0.0.1:29542");
  EXPECT_EQ(launch.env["JAX_NUM_PROCESSES"], "4");
  EXPECT_EQ(launch.env["JAX_PROCESS_ID"], "3");
  EXPECT_EQ(launch.env["FERRY_GANG_ADDRESSES"], "10.0.0.1,10.0.0.2,10.0.0.1,10.0.0.2");
  EXPECT_EQ(launch.env["FERRY_HOSTFILE"], "/var/lib/ferry/agent/logs/42-2.hosts");
  EXPECT_EQ(agent_internal::GangHostfile(assignment, node), "10.0.0.1 slots=2\n10.0.0.2 slots=2\n");

  // A server that sent no addresses: node names, and this agent's own address
  // for its own node; an IPv6 master is bracketed for JAX.
  json.erase("gang_addresses");
  json["task"] = 0;
  ASSERT_OK_AND_ASSIGN(TaskAssignment unnamed, ParseAssignment(json));
  agent_internal::NodeContext v6{"gpu-a", "/var/lib/ferry/agent", "/opt/ferry", {}, "fd00::1"};
  LaunchSpec first = BuildLaunchSpec(unnamed, v6);
  EXPECT_EQ(first.env["MASTER_ADDR"], "fd00::1");
  EXPECT_EQ(first.env["JAX_COORDINATOR_ADDRESS"], "[fd00::1]:29542");
  EXPECT_EQ(first.env["FERRY_GANG_ADDRESSES"], "fd00::1,gpu-b,fd00::1,gpu-b");
  EXPECT_EQ(first.env["LOCAL_RANK"], "0");
  EXPECT_EQ(first.env["NODE_RANK"], "0");

  json["rendezvous_port"] = 70000;
  EXPECT_FALSE(ParseAssignment(json).ok());
}

TEST(Assignment, LocalAddressTowardTheServer) {
  EXPECT_EQ(agent_internal::LocalAddressToward("http://127.0.0.1:8700"), "127.0.0.1");
  EXPECT_EQ(agent_internal::LocalAddressToward("https://127.0.0.1/v1"), "127.0.0.1");
  EXPECT_EQ(agent_internal::LocalAddressToward("http://"), "");
  EXPECT_EQ(agent_internal::LocalAddressToward("http://no-such-host.invalid:1"), "");
}

TEST(Assignment, DataflowRunsThroughTheFerryBinary) {
  nlohmann::json json = SampleAssignment();
  json["spec"]["command"] = nlohmann::json::array();
  json["spec"]["dataflow"] = "flows/demo.yml";
  json["spec"]["working_dir"] = "/data/run";
  json["gpu_indices"] = nlohmann::json::array();
  ASSERT_OK_AND_ASSIGN(TaskAssignment assignment, ParseAssignment(json));
  LaunchSpec launch = BuildLaunchSpec(assignment, {"n", "/var/lib/ferry/agent", "/opt/ferry", {}});
  EXPECT_EQ(launch.argv, (std::vector<std::string>{"/opt/ferry", "run", "flows/demo.yml"}));
  EXPECT_EQ(launch.working_dir, "/data/run");
  EXPECT_EQ(launch.env["CUDA_VISIBLE_DEVICES"], "");  // no GPUs: none visible
}

TEST(Assignment, RefusesMalformedEntries) {
  EXPECT_FALSE(ParseAssignment(nlohmann::json::parse(R"({"task": 1, "attempt": 1})")).ok());
  EXPECT_FALSE(
      ParseAssignment(nlohmann::json::parse(R"({"job_id": 1, "task": 1, "attempt": 1})")).ok());
  EXPECT_FALSE(
      ParseAssignment(nlohmann::json::parse(
                          R"({"job_id": 1, "task": 1, "attempt": 1, "spec": {"command": [1]}})"))
          .ok());
  EXPECT_FALSE(
      ParseAssignment(
          nlohmann::json::parse(
              R"({"job_id": 1, "task": 1, "attempt": 1, "spec": {}, "gpu_indices": ["0"]})"))
          .ok());
  EXPECT_FALSE(ParseAssignment(nlohmann::json::array()).ok());
}

TEST(PrefetchOrders, InputsCodeAndImage) {
  const std::string digest = "sha256:" + std::string(64, 'a');
  auto order = agent_internal::ParsePrefetchOrder(nlohmann::json::parse(
      R"({"job_id": 7, "attempt": 2, "tenant": "acme", "inputs": [],
          "code": {"bundle": ")" +
      digest + R"(", "bytes": 1234}, "image": "localhost:5000/x:1",
          "image_digest": "sha256:feed"})"));
  ASSERT_TRUE(order.ok()) << order.status().message();
  EXPECT_EQ(order->job_id, 7);
  EXPECT_EQ(order->attempt, 2);
  EXPECT_EQ(order->tenant, "acme");
  EXPECT_TRUE(order->inputs.empty());
  EXPECT_EQ(order->code_bundle, digest);
  EXPECT_EQ(order->code_bytes, 1234);
  EXPECT_EQ(order->image, "localhost:5000/x:1");
  EXPECT_EQ(order->image_digest, "sha256:feed");
  EXPECT_FALSE(order->empty());
  // An image alone, without the inputs key.
  auto image_only = agent_internal::ParsePrefetchOrder(
      nlohmann::json::parse(R"({"job_id": 1, "attempt": 1, "tenant": "t", "image": "busybox"})"));
  ASSERT_TRUE(image_only.ok()) << image_only.status().message();
  EXPECT_EQ(image_only->image, "busybox");
}

TEST(PrefetchOrders, RefusesMalformedOrders) {
  for (const char* bad : {
           R"({"attempt": 1, "tenant": "t", "image": "x"})",
           R"({"job_id": 1, "attempt": 1, "image": "x"})",
           R"({"job_id": 1, "attempt": 1, "tenant": "t"})",
           R"({"job_id": 1, "attempt": 1, "tenant": "t", "inputs": []})",
           R"({"job_id": 1, "attempt": 1, "tenant": "t", "image": 5})",
           R"({"job_id": 1, "attempt": 1, "tenant": "t", "code": "sha256:ab"})",
           R"({"job_id": 1, "attempt": 1, "tenant": "t", "code": {"bundle": "sha256:ab"}})",
           R"({"job_id": 1, "attempt": 1, "tenant": "t", "code": {"bundle": "../../etc"}})",
       }) {
    auto order = agent_internal::ParsePrefetchOrder(nlohmann::json::parse(bad));
    EXPECT_FALSE(order.ok()) << bad;
  }
  // Upper-case hex or a path after the digest would end up in the URL.
  const std::string upper = "sha256:" + std::string(64, 'A');
  EXPECT_FALSE(agent_internal::ParsePrefetchOrder(nlohmann::json{{"job_id", 1},
                                                                 {"attempt", 1},
                                                                 {"tenant", "t"},
                                                                 {"code", {{"bundle", upper}}}})
                   .ok());
  EXPECT_FALSE(agent_internal::ParsePrefetchOrder(
                   nlohmann::json{{"job_id", 1},
                                  {"attempt", 1},
                                  {"tenant", "t"},
                                  {"code", {{"bundle", "sha256:" + std::string(64, 'a') + "/x"}}}})
                   .ok());
}

TEST(Reports, WireForm) {
  TaskReport exited;
  exited.ref = {3, 0, 1};
  exited.kind = TaskReport::Kind::kExited;
  exited.signal = 9;
  exited.message = "killed by signal 9 (Killed)";
  exited.at_ms = 1234;
  EXPECT_EQ(agent_internal::ToJson(exited),
            nlohmann::json::parse(R"json({"job_id": 3, "task": 0, "attempt": 1, "kind": "exited",
              "exit_code": null, "signal": 9, "message": "killed by signal 9 (Killed)", "at_ms": 1234})json"));
  TaskReport failed;
  failed.kind = TaskReport::Kind::kLaunchFailed;
  EXPECT_EQ(agent_internal::ToJson(failed)["kind"], "launch_failed");
}

TEST(RunAgent, UnreachableServerRetriesUntilStopped) {
  // Nothing listens on port 1: the agent retries until told to stop.
  std::atomic<bool> stop{false};
  AgentOptions options;
  options.server_url = "http://127.0.0.1:1";
  options.node_name = "lonely";
  options.ignore_nvml = true;
  options.work_dir = ::testing::TempDir() + "/ferry-agent-unreachable";
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
  });
  Status status = RunAgent(options, &stop, /*handle_signals=*/false);
  stopper.join();
  EXPECT_TRUE(status.ok()) << status.ToString();
}

}  // namespace
}  // namespace ferry::fleet
