// The cycle driver's API: config validation (Make/Reconfigure), policy names,
// bad snapshots (a reason, never a crash), CheckSubmission and FairShare.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/sched.h"
#include "fleet/sched/core_test_util.h"
#include "testing/test_util.h"

namespace ferry::fleet::sched {
namespace {

NodeInfo MakeNode(int64_t id, const std::string& pool, int gpus,
                  const std::string& model = "H200") {
  NodeInfo n;
  n.id = id;
  n.name = "n" + std::to_string(id);
  n.pool = pool;
  n.cpus = 64;
  n.memory_mb = 512 * 1024;
  for (int g = 0; g < gpus; ++g) n.gpus.push_back({id * 100 + g, g, model, 80 * 1024, true});
  return n;
}

PendingJob Job(int64_t id, int tasks, int gpus) {
  PendingJob p;
  p.job_id = id;
  p.tenant = "acme";
  p.team = "vision";
  p.user = "ann";
  p.tasks = tasks;
  p.gpus_per_task = gpus;
  return p;
}

std::string MessageOf(Config config) {
  auto made = Scheduler::Make(std::move(config));
  return made.ok() ? "" : made.status().message();
}

TEST(SchedConfig, PolicyNamesRoundTrip) {
  for (Ordering o : {Ordering::kFifo, Ordering::kFairShare, Ordering::kDrf}) {
    EXPECT_EQ(ParseOrdering(ToString(o)), o);
  }
  for (Scoring s : {Scoring::kBinPack, Scoring::kSpread, Scoring::kCost, Scoring::kLatency,
                    Scoring::kLocality}) {
    EXPECT_EQ(ParseScoring(ToString(s)), s);
  }
  EXPECT_EQ(ToString(Ordering::kFairShare), "fair_share");
  EXPECT_EQ(ToString(Scoring::kBinPack), "binpack");
  EXPECT_FALSE(ParseOrdering("FIFO").has_value());
  EXPECT_FALSE(ParseScoring("").has_value());
}

TEST(SchedConfig, DefaultIsValid) {
  ASSERT_OK(Config{}.Validate());
  ASSERT_OK(Scheduler::Make(Config{}));
}

TEST(SchedConfig, MessagesNameTheField) {
  Config c;
  c.pools.push_back({});
  c.pools[0].name = "a";
  c.pools.push_back(c.pools[0]);
  c.pools[1].name = "b";
  c.pools.push_back(c.pools[0]);
  c.pools[2].name = "c";
  c.pools[2].price_per_gpu_hour = -1;
  EXPECT_EQ(MessageOf(c), "pools[2].price_per_gpu_hour: must be >= 0");

  c.pools[2].price_per_gpu_hour = 1;
  c.pools[2].name = "a";
  EXPECT_NE(MessageOf(c).find("pools[2].name: duplicate 'a'"), std::string::npos) << MessageOf(c);

  c.pools[2].name = "c";
  c.pools[2].cloud = true;
  c.pools[2].provider = "nowhere";
  EXPECT_NE(MessageOf(c).find("pools[2].provider"), std::string::npos) << MessageOf(c);
  c.providers.push_back({});
  c.providers[0].name = "nowhere";
  EXPECT_EQ(MessageOf(c), "");

  c.pool_sets.push_back({"gpu", {"a", "zz"}, Scoring::kCost});
  EXPECT_NE(MessageOf(c).find("pool_sets[0].pools[1]: no pool named 'zz'"), std::string::npos);
  c.pool_sets[0].pools = {"a"};
  c.pool_sets.push_back({"gpu", {}, Scoring::kCost});
  EXPECT_NE(MessageOf(c).find("pool_sets[1].name: duplicate"), std::string::npos);
  c.pool_sets.pop_back();

  QuotaConfig q;
  q.path = "acme";
  q.nominal_gpus = -2;
  c.quotas.push_back(q);
  EXPECT_EQ(MessageOf(c), "quotas[0].nominal_gpus: must be >= 0");
  c.quotas[0].nominal_gpus = 4;
  c.quotas[0].lending_limit = 5;
  EXPECT_EQ(MessageOf(c), "quotas[0].lending_limit: must be <= nominal_gpus");
  c.quotas[0].lending_limit.reset();
  c.quotas[0].path = "";
  EXPECT_NE(MessageOf(c).find("quotas[0].path"), std::string::npos);
  c.quotas[0].path = "a/b/c/d";
  EXPECT_NE(MessageOf(c).find("quotas[0].path"), std::string::npos);
  c.quotas[0].path = "acme";
  c.quotas.push_back(c.quotas[0]);
  EXPECT_NE(MessageOf(c).find("quotas[1]"), std::string::npos);
  c.quotas.pop_back();

  c.shares.push_back({"acme", 0});
  EXPECT_EQ(MessageOf(c), "shares[0].shares: must be > 0");
  c.shares[0].shares = 2;

  c.preemption.fair_share_window_s = 0;
  EXPECT_EQ(MessageOf(c), "preemption.fair_share_window_s: must be > 0");
  c.preemption.fair_share_window_s = 60;
  c.preemption.grace_s = std::nan("");
  EXPECT_EQ(MessageOf(c), "preemption.grace_s: must be a finite number");
  c.preemption.grace_s = 30;
  c.backfill.reservations = -1;
  EXPECT_EQ(MessageOf(c), "backfill.reservations: must be >= 0");
  c.backfill.reservations = 1;
  c.usage_half_life_s = 0;
  EXPECT_EQ(MessageOf(c), "usage_half_life_s: must be > 0");
  c.usage_half_life_s = 100;
  c.pools[0].datasets = {"imagenet"};
  EXPECT_NE(MessageOf(c).find("pools[0].datasets[0]"), std::string::npos);
  c.datasets.push_back({"imagenet", 10});
  EXPECT_EQ(MessageOf(c), "");
}

TEST(SchedConfig, ReconfigureRefusesInvalidAndKeepsOld) {
  Config c;
  c.ordering = Ordering::kDrf;
  ASSERT_OK_AND_ASSIGN(auto s, Scheduler::Make(c));
  Config bad;
  bad.burst.min_pending_s = -5;
  Status st = s->Reconfigure(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("burst.min_pending_s"), std::string::npos);
  EXPECT_EQ(s->config().ordering, Ordering::kDrf);
  Config good;
  good.ordering = Ordering::kFairShare;
  ASSERT_OK(s->Reconfigure(good));
  EXPECT_EQ(s->config().ordering, Ordering::kFairShare);
}

// Snapshots a buggy caller could send: every job gets a reason, nothing crashes.
TEST(SchedReasons, QueuePositionsCountJobsAheadInAllAndInTheTeam) {
  ASSERT_OK_AND_ASSIGN(auto s, Scheduler::Make(Config{}));
  Snapshot snap;
  snap.now_s = 100;
  snap.nodes.push_back(MakeNode(1, "main", 4));
  // FIFO: older first. Job 1 fits; 2..5 wait; 6 can never fit.
  std::vector<std::pair<int64_t, std::string>> jobs = {
      {1, "vision"}, {2, "speech"}, {3, "vision"}, {4, "vision"}, {5, "speech"}};
  for (const auto& [id, team] : jobs) {
    PendingJob p = Job(id, 1, 4);
    p.team = team;
    p.submitted_s = static_cast<double>(id);
    snap.pending.push_back(p);
  }
  snap.pending.push_back(Job(6, 1, 64));
  Decision d = s->Cycle(snap);
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].job_id, 1);
  std::map<int64_t, std::pair<int, int>> spots;
  for (const PendingReason& r : d.pending) spots[r.job_id] = {r.queue_position, r.ahead_in_team};
  EXPECT_EQ(spots[2], std::make_pair(0, 0));
  EXPECT_EQ(spots[3], std::make_pair(1, 0));
  EXPECT_EQ(spots[4], std::make_pair(2, 1));
  EXPECT_EQ(spots[5], std::make_pair(3, 1));
  EXPECT_EQ(spots[6], std::make_pair(-1, -1));  // refused before the queue
}

TEST(SchedBadInput, OddSnapshotsGetReasons) {
  Config c;
  c.pools.push_back({});
  c.pools[0].name = "main";
  c.pool_sets.push_back({"main", {"main"}, Scoring::kBinPack});
  ASSERT_OK_AND_ASSIGN(auto s, Scheduler::Make(c));
  Snapshot snap;
  snap.now_s = 10;
  snap.nodes.push_back(MakeNode(1, "main", 4));
  snap.nodes.push_back(MakeNode(2, "unknown-pool", 4));  // not in any listed set
  // Duplicate GPU ids and indices: those slots are never handed out.
  NodeInfo dup = MakeNode(3, "main", 2);
  dup.gpus[1].id = dup.gpus[0].id;
  dup.gpus.push_back(dup.gpus[0]);
  snap.nodes.push_back(dup);
  snap.nodes.push_back(MakeNode(3, "main", 8));  // duplicate node id: ignored
  PendingJob zero = Job(1, 0, 1);
  PendingJob negative = Job(2, 1, -3);
  PendingJob bad_set = Job(3, 1, 1);
  bad_set.pool_set = "nope";
  PendingJob nan_cpu = Job(4, 1, 1);
  nan_cpu.cpus_per_task = std::nan("");
  PendingJob topology = Job(5, 1, 1);
  topology.topology = "same_rack";
  PendingJob unknown_model = Job(6, 1, 1);
  unknown_model.gpu_models = {"TPU"};
  PendingJob huge = Job(7, 2'000'000'000, 1);
  PendingJob ok = Job(8, 1, 4);
  PendingJob too_big = Job(9, 1, 8);  // only the ignored duplicate node has 8
  snap.pending = {zero, negative, bad_set, nan_cpu, topology, unknown_model, huge, ok, too_big};
  snap.pending.push_back(Job(8, 1, 1));  // listed twice: counts once
  RunningJob ghost;                      // on a node that does not exist
  ghost.job_id = 50;
  ghost.tasks.push_back({0, 999, "ghost", {1}, {0}});
  snap.running.push_back(ghost);

  Decision d = s->Cycle(snap);
  std::map<int64_t, std::string> reasons;
  for (const PendingReason& r : d.pending) reasons[r.job_id] = r.reason;
  for (int64_t id : {1, 2, 3, 4, 5, 6, 7, 9}) {
    EXPECT_EQ(reasons[id], reason::kUnsatisfiable) << "job " << id;
  }
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].job_id, 8);
  EXPECT_EQ(d.placements[0].tasks[0].node, "n1");
  EXPECT_EQ(reasons.count(8), 0u);
  // A job with 3 GPUs per task: node 3 has 1 usable GPU, node 1 none free.
  for (GpuSlot& g : snap.nodes[0].gpus) g.free = false;
  snap.pending = {Job(20, 1, 3)};
  d = s->Cycle(snap);
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, reason::kNoCapacity) << d.pending[0].message;
}

TEST(SchedBadInput, UnknownPoolNodesArePricedZeroOnPrem) {
  // No pools configured: every node (its pool unknown) is on-prem at price 0.
  ASSERT_OK_AND_ASSIGN(auto s, Scheduler::Make(Config{}));
  Snapshot snap;
  snap.nodes.push_back(MakeNode(1, "whatever", 8));
  snap.pending = {Job(1, 2, 4)};
  Decision d = s->Cycle(snap);
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_TRUE(testing::CheckDecision(s->config(), snap, d).empty());
}

TEST(SchedSubmission, SoftQuotaCheck) {
  Config c;
  QuotaConfig q;
  q.path = "acme/vision";
  q.nominal_gpus = 8;
  q.borrowing_limit = 4;
  c.quotas.push_back(q);
  ASSERT_OK_AND_ASSIGN(auto s, Scheduler::Make(c));
  EXPECT_FALSE(s->CheckSubmission(Job(1, 3, 4)).has_value());
  auto too_many = s->CheckSubmission(Job(2, 2, 8));
  ASSERT_TRUE(too_many.has_value());
  EXPECT_NE(too_many->find("acme/vision"), std::string::npos) << *too_many;
  EXPECT_FALSE(s->CheckSubmission(Job(3, 100, 0)).has_value());
  EXPECT_TRUE(s->CheckSubmission(Job(4, 0, 1)).has_value());
}

TEST(SchedFairShare, UsageAccumulatesAcrossCycles) {
  Config c;
  c.ordering = Ordering::kFairShare;
  c.shares.push_back({"acme", 2});
  ASSERT_OK_AND_ASSIGN(auto s, Scheduler::Make(c));
  testing::World w;
  w.snapshot.nodes.push_back(MakeNode(1, "p", 8));
  w.snapshot.pending = {Job(1, 1, 4)};
  PendingJob other = Job(2, 1, 4);
  other.tenant = "beta";
  w.snapshot.pending.push_back(other);
  w.snapshot.now_s = 0;
  Decision d = s->Cycle(w.snapshot);
  EXPECT_EQ(d.placements.size(), 2u);
  w.Apply(d);
  w.snapshot.now_s = 3600;
  s->Cycle(w.snapshot);
  std::map<std::string, ShareStanding> standings;
  for (const ShareStanding& st : s->FairShare()) standings[st.path] = st;
  ASSERT_TRUE(standings.count("acme"));
  ASSERT_TRUE(standings.count("beta"));
  EXPECT_GT(standings["acme"].usage, 0);
  EXPECT_DOUBLE_EQ(standings["acme"].shares, 2);
  // Same usage, twice the shares: further below its share.
  EXPECT_GT(standings["acme"].fair_share, standings["beta"].fair_share);
}

TEST(SchedCycle, StatsCountWhatHappened) {
  ASSERT_OK_AND_ASSIGN(auto s, Scheduler::Make(Config{}));
  Snapshot snap;
  snap.nodes.push_back(MakeNode(1, "p", 8));
  for (int i = 1; i <= 5; ++i) snap.pending.push_back(Job(i, 1, 4));
  Decision d = s->Cycle(snap);
  EXPECT_EQ(d.stats.pending, 5);
  EXPECT_EQ(d.stats.considered, 5);
  EXPECT_EQ(d.stats.placed, 2);
  EXPECT_EQ(d.pending.size(), 3u);
  EXPECT_GE(d.stats.elapsed_ms, 0);
}

}  // namespace
}  // namespace ferry::fleet::sched
