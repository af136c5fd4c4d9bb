// Data locality from the node caches (PendingJob::cached_bytes): among the
// nodes a cycle would choose between in one tier, those holding more of the
// job's input bytes win; tiers, room and reservations still come first, and a
// job no node holds data for is placed exactly as before.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/sched.h"
#include "fleet/sched/core_test_util.h"
#include "testing/test_util.h"

namespace ferry::fleet::sched {
namespace {

NodeInfo MakeNode(int64_t id, int gpus, const std::string& pool = "p") {
  NodeInfo n;
  n.id = id;
  n.name = "n" + std::to_string(id);
  n.pool = pool;
  n.cpus = 64;
  n.memory_mb = 512 * 1024;
  for (int g = 0; g < gpus; ++g) n.gpus.push_back({id * 100 + g, g, "H200", 80 * 1024, true});
  return n;
}

PendingJob Job(int64_t id, int tasks, int gpus, std::vector<std::pair<int64_t, int64_t>> cached) {
  PendingJob p;
  p.job_id = id;
  p.tenant = "acme";
  p.team = "vision";
  p.user = "ann";
  p.tasks = tasks;
  p.gpus_per_task = gpus;
  p.submitted_s = static_cast<double>(id);
  if (!cached.empty()) {
    p.input_digests = {"sha256:" + std::string(64, 'a')};
    p.input_bytes = 1000;
  }
  p.cached_bytes = std::move(cached);
  return p;
}

// Node id -> tasks placed there, for job `job_id` of `decision`.
std::map<int64_t, int> TasksByNode(const Decision& decision, int64_t job_id) {
  std::map<int64_t, int> out;
  for (const Placement& placement : decision.placements) {
    if (placement.job_id != job_id) continue;
    for (const TaskPlacement& task : placement.tasks) out[task.node_id]++;
  }
  return out;
}

Decision RunOnce(const Config& config, const Snapshot& snapshot) {
  auto made = Scheduler::Make(config);
  EXPECT_TRUE(made.ok()) << made.status().message();
  Decision decision = (*made)->Cycle(snapshot);
  for (const std::string& error : testing::CheckDecision(config, snapshot, decision)) {
    ADD_FAILURE() << error;
  }
  return decision;
}

TEST(SchedLocality, TwoIdenticalFreeNodesTheOneHoldingTheDataWins) {
  Snapshot snap;
  snap.nodes = {MakeNode(1, 8), MakeNode(2, 8)};
  snap.pending = {Job(1, 1, 4, {})};
  // Without inputs the tie goes to the first node.
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{1, 1}}));
  snap.pending = {Job(1, 1, 4, {{2, 1000}})};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{2, 1}}));
  // More bytes beat fewer.
  snap.pending = {Job(1, 1, 4, {{1, 10}, {2, 900}})};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{2, 1}}));
  snap.pending = {Job(1, 1, 4, {{1, 900}, {2, 10}})};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{1, 1}}));
}

TEST(SchedLocality, DataBeatsBinPackInsideATier) {
  Snapshot snap;
  snap.nodes = {MakeNode(1, 8), MakeNode(2, 8)};
  snap.nodes[0].gpus[0].free = false;  // node 1 is fuller: bin-pack's choice
  snap.pending = {Job(1, 1, 4, {})};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{1, 1}}));
  snap.pending = {Job(1, 1, 4, {{2, 1}})};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{2, 1}}));
}

TEST(SchedLocality, GangOfTwoOnThreeNodesTakesTheTwoHoldingData) {
  Snapshot snap;
  snap.nodes = {MakeNode(1, 8), MakeNode(2, 8), MakeNode(3, 8)};
  snap.pending = {Job(1, 2, 8, {})};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{1, 1}, {2, 1}}));
  snap.pending = {Job(1, 2, 8, {{2, 500}, {3, 700}})};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{2, 1}, {3, 1}}));
  // Data on one node only: that node and one other.
  snap.pending = {Job(1, 2, 8, {{3, 700}})};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{1, 1}, {3, 1}}));
}

TEST(SchedLocality, SameNodeGangGoesWholeToTheNodeHoldingData) {
  Snapshot snap;
  snap.nodes = {MakeNode(1, 8), MakeNode(2, 8)};
  PendingJob job = Job(1, 2, 4, {{2, 100}});
  job.topology = "same_node";
  snap.pending = {job};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{2, 2}}));
  // Bin-pack without topology fills the holding node first too.
  job.topology.clear();
  snap.pending = {job};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{2, 2}}));
}

TEST(SchedLocality, SpreadPutsOneTaskOnEachHoldingNode) {
  Config config;
  config.default_scoring = Scoring::kSpread;
  Snapshot snap;
  snap.nodes = {MakeNode(1, 8), MakeNode(2, 8), MakeNode(3, 8)};
  snap.nodes[0].gpus[0].free = false;  // node 1 the fullest: spread's last choice
  snap.pending = {Job(1, 2, 2, {})};
  EXPECT_EQ(TasksByNode(RunOnce(config, snap), 1), (std::map<int64_t, int>{{2, 1}, {3, 1}}));
  snap.pending = {Job(1, 2, 2, {{1, 100}})};
  const std::map<int64_t, int> placed = TasksByNode(RunOnce(config, snap), 1);
  EXPECT_EQ(placed.count(1), 1u);
  EXPECT_EQ(placed.at(1), 1);
}

TEST(SchedLocality, FullCachedNodeMeansTheOtherNodeNow) {
  Snapshot snap;
  snap.nodes = {MakeNode(1, 8), MakeNode(2, 8)};
  for (GpuSlot& gpu : snap.nodes[1].gpus) gpu.free = false;
  snap.pending = {Job(1, 1, 4, {{2, 1000}})};
  const Decision decision = RunOnce(Config{}, snap);
  EXPECT_EQ(TasksByNode(decision, 1), (std::map<int64_t, int>{{1, 1}}));
  EXPECT_TRUE(decision.pending.empty());
  // Room for part of the gang only: the rest goes elsewhere.
  for (size_t g = 0; g < 4; ++g) snap.nodes[1].gpus[g].free = true;
  snap.pending = {Job(1, 2, 4, {{2, 1000}})};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{1, 1}, {2, 1}}));
}

TEST(SchedLocality, TiersComeBeforeData) {
  Config config;
  config.pools = {{}, {}};
  config.pools[0].name = "cheap";
  config.pools[0].price_per_gpu_hour = 1;
  config.pools[1].name = "dear";
  config.pools[1].price_per_gpu_hour = 2;
  config.pool_sets = {{"main", {"cheap", "dear"}, Scoring::kCost}};
  Snapshot snap;
  snap.nodes = {MakeNode(1, 8, "cheap"), MakeNode(2, 8, "dear"), MakeNode(3, 8, "cheap")};
  snap.pending = {Job(1, 1, 8, {{2, 1000}, {3, 10}})};
  EXPECT_EQ(TasksByNode(RunOnce(config, snap), 1), (std::map<int64_t, int>{{3, 1}}));
  // The dear pool only when the cheap one is full.
  for (GpuSlot& gpu : snap.nodes[0].gpus) gpu.free = false;
  for (GpuSlot& gpu : snap.nodes[2].gpus) gpu.free = false;
  EXPECT_EQ(TasksByNode(RunOnce(config, snap), 1), (std::map<int64_t, int>{{2, 1}}));
}

TEST(SchedLocality, DrainedOrUnknownNodesAreIgnored) {
  Snapshot snap;
  snap.nodes = {MakeNode(1, 8), MakeNode(2, 8)};
  snap.nodes[1].schedulable = false;
  snap.pending = {Job(1, 1, 4, {{2, 1000}, {99, 5000}, {1, -3}})};
  const Decision decision = RunOnce(Config{}, snap);
  EXPECT_EQ(TasksByNode(decision, 1), (std::map<int64_t, int>{{1, 1}}));
}

TEST(SchedLocality, CpuOnlyJobsPreferTheNodeHoldingData) {
  Snapshot snap;
  snap.nodes = {MakeNode(1, 0), MakeNode(2, 0)};
  PendingJob job = Job(1, 1, 0, {{2, 1000}});
  job.cpus_per_task = 4;
  snap.pending = {job};
  EXPECT_EQ(TasksByNode(RunOnce(Config{}, snap), 1), (std::map<int64_t, int>{{2, 1}}));
}

TEST(SchedLocality, ReservationsStillHold) {
  // Node 2 holds the data but is reserved for a blocked gang: a job that
  // would outlive the reservation's start goes to node 1.
  Config config;
  config.backfill.enabled = true;
  Snapshot snap;
  snap.now_s = 0;
  snap.nodes = {MakeNode(1, 8), MakeNode(2, 8)};
  RunningJob running;
  running.job_id = 50;
  running.tenant = "acme";
  running.team = "vision";
  running.user = "ann";
  running.max_runtime_s = 100;
  running.tasks.push_back({});
  running.tasks[0].node_id = 2;
  running.tasks[0].node = "n2";
  running.tasks[0].gpu_indices = {0, 1, 2, 3};
  for (int g = 0; g < 4; ++g) snap.nodes[1].gpus[static_cast<size_t>(g)].free = false;
  snap.running = {running};
  for (int g = 0; g < 4; ++g) snap.nodes[0].gpus[static_cast<size_t>(g)].free = false;
  PendingJob blocked = Job(1, 1, 8, {});
  blocked.priority = 10;
  PendingJob later = Job(2, 1, 4, {{2, 1000}});
  later.max_runtime_s = 1000;  // ends after the reservation's start (t=100)
  snap.pending = {blocked, later};
  const Decision decision = RunOnce(config, snap);
  EXPECT_TRUE(TasksByNode(decision, 1).empty());
  const std::map<int64_t, int> placed = TasksByNode(decision, 2);
  EXPECT_EQ(placed, (std::map<int64_t, int>{{1, 1}}));
  EXPECT_EQ(decision.stats.backfilled, 1);
}

// Jobs whose inputs no node holds take exactly the old path: the same
// decision with or without input digests.
TEST(SchedLocality, JobsWithoutCachedDataAreUnchanged) {
  Snapshot plain;
  for (int64_t n = 1; n <= 12; ++n) {
    plain.nodes.push_back(MakeNode(n, 8));
    plain.nodes.back().domain = n <= 6 ? "d1" : "d2";
  }
  plain.nodes[2].gpus[0].free = false;
  plain.nodes[5].gpus[3].free = false;
  for (int64_t j = 1; j <= 40; ++j) {
    PendingJob p = Job(j, 1 + static_cast<int>(j % 3), 1 << (j % 4), {});
    if (j % 5 == 0) p.topology = "same_domain";
    if (j % 7 == 0) p.topology = "same_node";
    plain.pending.push_back(p);
  }
  Snapshot with_inputs = plain;
  for (PendingJob& p : with_inputs.pending) {
    p.input_digests = {"sha256:" + std::string(64, 'b')};
    p.input_bytes = 12345;
  }
  for (Scoring scoring : {Scoring::kBinPack, Scoring::kSpread}) {
    Config config;
    config.default_scoring = scoring;
    const Decision a = RunOnce(config, plain);
    const Decision b = RunOnce(config, with_inputs);
    ASSERT_EQ(a.placements.size(), b.placements.size());
    for (size_t i = 0; i < a.placements.size(); ++i) {
      EXPECT_EQ(a.placements[i].job_id, b.placements[i].job_id);
      ASSERT_EQ(a.placements[i].tasks.size(), b.placements[i].tasks.size());
      for (size_t t = 0; t < a.placements[i].tasks.size(); ++t) {
        EXPECT_EQ(a.placements[i].tasks[t].node_id, b.placements[i].tasks[t].node_id);
        EXPECT_EQ(a.placements[i].tasks[t].gpu_indices, b.placements[i].tasks[t].gpu_indices);
      }
    }
    EXPECT_EQ(a.pending.size(), b.pending.size());
  }
}

}  // namespace
}  // namespace ferry::fleet::sched
