// What the server adds around the scheduling core: idle times in the store's
// snapshot, the nodes of the submission check and the GET /v1/scheduler JSON
// pieces. (Converting nodes and jobs is tested in src/fleet/model/snapshot_test.cc.)
#include "fleet/server/scheduler_view.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>

namespace ferry::fleet::server_internal {
namespace {

sched::NodeInfo MakeNode(int64_t id, const std::string& name, int gpus, int64_t first_gpu_id) {
  sched::NodeInfo node;
  node.id = id;
  node.name = name;
  node.pool = "onprem";
  node.cpus = 32;
  node.memory_mb = 65536;
  for (int i = 0; i < gpus; ++i) node.gpus.push_back({first_gpu_id + i, i, "H200", 141000, true});
  return node;
}

// The store's snapshot as the scheduling pass completes it: idle times in
// seconds, -1 for busy nodes (a taken GPU, or a task of a running job).
TEST(IdleTracker, IdleTimesInTheSnapshot) {
  sched::Snapshot snapshot;
  sched::NodeInfo a = MakeNode(1, "gpu-a", 2, 10);
  a.gpus[0].free = false;
  sched::NodeInfo drained = MakeNode(2, "gpu-b", 2, 20);
  drained.schedulable = false;
  snapshot.nodes = {a, drained};
  sched::RunningJob run;
  run.job_id = 7;
  run.tasks = {{0, 1, "gpu-a", {10}, {0}}};
  snapshot.running = {run};
  IdleTracker idle;
  idle.Update(snapshot, 10'000);
  idle.Apply(&snapshot);
  EXPECT_DOUBLE_EQ(snapshot.nodes[0].idle_since_s, -1);  // busy
  EXPECT_DOUBLE_EQ(snapshot.nodes[1].idle_since_s, 10.0);
}

TEST(IdleTracker, CountsFromWhenANodeWasFirstSeenFree) {
  IdleTracker idle;
  sched::Snapshot snapshot;
  snapshot.nodes = {MakeNode(1, "a", 1, 10), MakeNode(2, "b", 1, 20)};
  sched::RunningJob cpu_only;  // a CPU-only allocation on b
  cpu_only.job_id = 3;
  cpu_only.tasks = {{0, 2, "b", {}, {}}};
  snapshot.running = {cpu_only};
  idle.Update(snapshot, 1'000);
  EXPECT_EQ(idle.IdleSinceMs(1), 1'000);
  EXPECT_EQ(idle.IdleSinceMs(2), -1);  // a CPU-only allocation
  idle.Update(snapshot, 2'000);
  EXPECT_EQ(idle.IdleSinceMs(1), 1'000);  // still idle: unchanged
  snapshot.nodes[0].gpus[0].free = false;
  snapshot.running.clear();
  idle.Update(snapshot, 3'000);
  EXPECT_EQ(idle.IdleSinceMs(1), -1);
  EXPECT_EQ(idle.IdleSinceMs(2), 3'000);
  snapshot.nodes[0].gpus[0].free = true;
  idle.Update(snapshot, 4'000);
  EXPECT_EQ(idle.IdleSinceMs(1), 4'000);  // free again: counts anew
  snapshot.nodes = {snapshot.nodes[1]};
  idle.Update(snapshot, 5'000);
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
