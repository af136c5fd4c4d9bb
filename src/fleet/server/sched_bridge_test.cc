// The store → scheduling-core bridge: snapshot building, idle times, the
// nodes of the submission check and the GET /v1/scheduler JSON pieces.
#include "fleet/server/sched_bridge.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>

namespace ferry::fleet::server_internal {
namespace {

Node MakeNode(int64_t id, const std::string& name, int gpus, int64_t first_gpu_id) {
  Node node;
  node.id = id;
  node.name = name;
  node.pool = "onprem";
  node.cpus = 32;
  node.memory_mb = 65536;
  for (int i = 0; i < gpus; ++i) {
    Gpu gpu;
    gpu.id = first_gpu_id + i;
    gpu.index = i;
    gpu.model = "H200";
    gpu.memory_mb = 141000;
    node.gpus.push_back(gpu);
  }
  return node;
}

Job MakeJob(int64_t id, int priority) {
  Job job;
  job.id = id;
  job.tenant = "acme";
  job.team = "vision";
  job.user = "ana";
  job.attempt = 2;
  job.created_at_ms = 5'500;
  job.spec.name = "j" + std::to_string(id);
  job.spec.command = {"true"};
  job.spec.tasks = 2;
  job.spec.gpus_per_task = 1;
  job.spec.gpu_models = {"H200"};
  job.spec.cpus_per_task = 4;
  job.spec.memory_mb_per_task = 1024;
  job.spec.priority = priority;
  job.spec.preemptible = true;
  job.spec.max_runtime_seconds = 600;
  job.spec.topology = "same_domain";
  job.spec.datasets = {"c4"};
  job.spec.pool_set = "training";
  return job;
}

TEST(BuildSnapshot, NodesRunningAndPendingJobs) {
  SchedulingSnapshot in;
  Node a = MakeNode(1, "gpu-a", 2, 10);
  a.labels["domain"] = "nvl-1";
  a.gpus[0].job_id = 7;
  Node drained = MakeNode(2, "gpu-b", 2, 20);
  drained.drain = true;
  Node lost = MakeNode(3, "gpu-c", 1, 30);
  lost.state = NodeState::kLost;
  in.all_nodes = {a, drained, lost};
  in.usage[1] = NodeUsage{4, 1024};
  in.pending = {MakeJob(8, 5)};
  ActiveAttempt active;
  active.job = MakeJob(7, -3);
  active.job.state = JobState::kRunning;
  active.attempt = 2;
  active.admitted_at_ms = 9'000;
  active.tasks = {{0, 1, "gpu-a", {10}, {0}}};
  active.terminating = true;
  active.preempt_reason = std::string(reason::kPreemptedByPriority);
  active.preempted_for = 8;
  in.active = {active};

  IdleTracker idle;
  idle.Update(in.all_nodes, in.usage, 10'000);
  const sched::Snapshot out = BuildSnapshot(in, 12'000, {{"cloud", 2}}, idle);
  EXPECT_DOUBLE_EQ(out.now_s, 12.0);
  EXPECT_EQ(out.provisioning.at("cloud"), 2);
  ASSERT_EQ(out.nodes.size(), 3u);
  const sched::NodeInfo& na = out.nodes[0];
  EXPECT_EQ(na.id, 1);
  EXPECT_EQ(na.name, "gpu-a");
  EXPECT_EQ(na.pool, "onprem");
  EXPECT_EQ(na.domain, "nvl-1");
  ASSERT_EQ(na.gpus.size(), 2u);
  EXPECT_FALSE(na.gpus[0].free);
  EXPECT_TRUE(na.gpus[1].free);
  EXPECT_EQ(na.gpus[1].id, 11);
  EXPECT_EQ(na.gpus[1].index, 1);
  EXPECT_EQ(na.gpus[1].model, "H200");
  EXPECT_DOUBLE_EQ(na.cpus, 32);
  EXPECT_DOUBLE_EQ(na.cpus_used, 4);
  EXPECT_EQ(na.memory_mb_used, 1024);
  EXPECT_TRUE(na.schedulable);
  EXPECT_DOUBLE_EQ(na.idle_since_s, -1);  // busy
  EXPECT_EQ(out.nodes[1].domain, "");
  EXPECT_FALSE(out.nodes[1].schedulable);  // drained
  EXPECT_DOUBLE_EQ(out.nodes[1].idle_since_s, 10.0);
  EXPECT_FALSE(out.nodes[2].schedulable);  // lost

  ASSERT_EQ(out.running.size(), 1u);
  const sched::RunningJob& run = out.running[0];
  EXPECT_EQ(run.job_id, 7);
  EXPECT_EQ(run.attempt, 2);
  EXPECT_EQ(run.tenant, "acme");
  EXPECT_EQ(run.team, "vision");
  EXPECT_EQ(run.user, "ana");
  EXPECT_EQ(run.priority, -3);
  EXPECT_TRUE(run.preemptible);
  EXPECT_DOUBLE_EQ(run.started_s, 9.0);
  EXPECT_DOUBLE_EQ(run.max_runtime_s, 600);
  EXPECT_DOUBLE_EQ(run.cpus_per_task, 4);
  EXPECT_EQ(run.memory_mb_per_task, 1024);
  ASSERT_EQ(run.tasks.size(), 1u);
  EXPECT_EQ(run.tasks[0].gpu_ids, std::vector<int64_t>{10});
  EXPECT_TRUE(run.terminating);
  EXPECT_EQ(run.preempted_for, 8);

  ASSERT_EQ(out.pending.size(), 1u);
  const sched::PendingJob& p = out.pending[0];
  EXPECT_EQ(p.job_id, 8);
  EXPECT_EQ(p.attempt, 2);
  EXPECT_EQ(p.tasks, 2);
  EXPECT_EQ(p.gpus_per_task, 1);
  EXPECT_EQ(p.gpu_models, std::vector<std::string>{"H200"});
  EXPECT_EQ(p.priority, 5);
  EXPECT_DOUBLE_EQ(p.submitted_s, 5.5);
  EXPECT_DOUBLE_EQ(p.max_runtime_s, 600);
  EXPECT_EQ(p.topology, "same_domain");
  EXPECT_EQ(p.datasets, std::vector<std::string>{"c4"});
  EXPECT_EQ(p.pool_set, "training");
}

TEST(IdleTracker, CountsFromWhenANodeWasFirstSeenFree) {
  IdleTracker idle;
  std::vector<Node> nodes = {MakeNode(1, "a", 1, 10), MakeNode(2, "b", 1, 20)};
  std::map<int64_t, NodeUsage> busy = {{2, NodeUsage{1, 0}}};
  idle.Update(nodes, busy, 1'000);
  EXPECT_EQ(idle.IdleSinceMs(1), 1'000);
  EXPECT_EQ(idle.IdleSinceMs(2), -1);  // a CPU-only allocation
  idle.Update(nodes, busy, 2'000);
  EXPECT_EQ(idle.IdleSinceMs(1), 1'000);  // still idle: unchanged
  nodes[0].gpus[0].job_id = 4;
  idle.Update(nodes, {}, 3'000);
  EXPECT_EQ(idle.IdleSinceMs(1), -1);
  EXPECT_EQ(idle.IdleSinceMs(2), 3'000);
  nodes[0].gpus[0].job_id.reset();
  idle.Update(nodes, {}, 4'000);
  EXPECT_EQ(idle.IdleSinceMs(1), 4'000);  // free again: counts anew
  idle.Update({nodes[1]}, {}, 5'000);
  EXPECT_EQ(idle.IdleSinceMs(1), -1);  // gone
  EXPECT_EQ(idle.IdleSinceMs(99), -1);
}

Node CapacityTestNode(const std::string& name, const std::string& model, int gpus,
                      NodeState state) {
  Node node;
  node.id = static_cast<int64_t>(name.size());
  node.name = name;
  node.pool = "onprem";
  node.state = state;
  node.cpus = 64;
  node.memory_mb = 1 << 20;
  for (int g = 0; g < gpus; ++g) {
    Gpu gpu;
    gpu.index = g;
    gpu.model = model;
    node.gpus.push_back(gpu);
  }
  return node;
}

// Admission counts nodes that are not LOST plus the cloud pools at their
// max_nodes, with the core's own reasoning (Scheduler::CheckCapacity).
TEST(CapacityNodes, LostNodesAndFullCloudPoolsDecideAdmission) {
  sched::Config config;
  sched::PoolConfig onprem;
  onprem.name = "onprem";
  sched::PoolConfig cloud;
  cloud.name = "cloud";
  cloud.cloud = true;
  cloud.provider = "local";
  cloud.max_nodes = 3;
  cloud.node.gpus = 4;
  cloud.node.gpu_model = "H100";
  config.pools = {onprem, cloud};
  sched::ProviderConfig local;
  local.name = "local";
  config.providers.push_back(local);
  Node drained = CapacityTestNode("ready", "H200", 8, NodeState::kReady);
  drained.drain = true;
  std::vector<Node> nodes = {drained, CapacityTestNode("lost", "H200", 8, NodeState::kLost)};
  std::vector<sched::NodeInfo> capacity = CapacityNodes(nodes);
  ASSERT_EQ(capacity.size(), 1u);  // the LOST node does not count, the drained one does
  EXPECT_EQ(capacity[0].name, "ready");
  Result<std::unique_ptr<sched::Scheduler>> scheduler = sched::Scheduler::Make(config);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().message();
  auto job = [](int tasks, int gpus, const std::string& model) {
    sched::PendingJob p;
    p.job_id = 1;
    p.tasks = tasks;
    p.gpus_per_task = gpus;
    p.gpu_models = {model};
    return p;
  };
  EXPECT_EQ((*scheduler)->CheckCapacity(job(1, 8, "H200"), capacity), std::nullopt);
  std::optional<std::string> two = (*scheduler)->CheckCapacity(job(2, 8, "H200"), capacity);
  ASSERT_TRUE(two.has_value());
  EXPECT_NE(two->find("could ever hold"), std::string::npos) << *two;
  EXPECT_EQ((*scheduler)->CheckCapacity(job(3, 4, "H100"), capacity), std::nullopt);
  EXPECT_TRUE((*scheduler)->CheckCapacity(job(4, 4, "H100"), capacity).has_value());
  EXPECT_TRUE((*scheduler)->CheckCapacity(job(1, 5, "H100"), capacity).has_value());
  config.burst.enabled = false;  // cloud pools add nothing without burst
  ASSERT_TRUE((*scheduler)->Reconfigure(config).ok());
  EXPECT_TRUE((*scheduler)->CheckCapacity(job(1, 4, "H100"), capacity).has_value());
}

TEST(SchedulerJson, ConfigStatsAndStandings) {
  sched::Config config;
  config.ordering = sched::Ordering::kFairShare;
  sched::QuotaConfig quota;
  quota.path = "acme";
  quota.nominal_gpus = 8;
  quota.borrowing_limit = 4;
  config.quotas = {quota};
  nlohmann::json out = SchedulerConfigJson(config);
  EXPECT_EQ(out["ordering"], "fair_share");
  EXPECT_EQ(out["default_scoring"], "binpack");
  ASSERT_EQ(out["quotas"].size(), 1u);
  EXPECT_EQ(out["quotas"][0]["nominal_gpus"], 8);
  EXPECT_EQ(out["quotas"][0]["borrowing_limit"], 4);
  EXPECT_TRUE(out["quotas"][0]["lending_limit"].is_null());
  EXPECT_EQ(out["preemption"]["grace_s"], 30);
  sched::CycleStats stats;
  stats.placed = 3;
  EXPECT_EQ(CycleStatsJson(stats)["placed"], 3);
  nlohmann::json shares = FairShareJson({{"acme", 2, 10, 0.5}});
  EXPECT_EQ(shares[0]["path"], "acme");
  EXPECT_EQ(shares[0]["fair_share"], 0.5);
}

}  // namespace
}  // namespace ferry::fleet::server_internal
