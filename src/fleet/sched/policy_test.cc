// Tests of the policy pieces: paths, decayed usage, queue ordering (FIFO,
// Fair Tree, DRF), quotas with cohorts, preemption candidates and victim
// choice, the fair-share preemption rate limit.
#include "fleet/sched/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace ferry::fleet::sched::internal {
namespace {

PendingJob Job(int64_t id, const std::string& tenant, const std::string& team,
               const std::string& user, int gpus = 1, int priority = 0, double submitted = 0) {
  PendingJob job;
  job.job_id = id;
  job.tenant = tenant;
  job.team = team;
  job.user = user;
  job.tasks = 1;
  job.gpus_per_task = gpus;
  job.priority = priority;
  job.submitted_s = submitted;
  return job;
}

RunningJob Running(int64_t id, const std::string& tenant, const std::string& team,
                   const std::string& user, const std::string& node, std::vector<int> gpu_indices,
                   int priority = 0, double started = 0, bool preemptible = true) {
  RunningJob job;
  job.job_id = id;
  job.tenant = tenant;
  job.team = team;
  job.user = user;
  job.priority = priority;
  job.started_s = started;
  job.preemptible = preemptible;
  TaskPlacement task;
  task.node = node;
  task.gpu_indices = std::move(gpu_indices);
  job.tasks.push_back(task);
  return job;
}

NodeInfo Node(const std::string& name, int gpus, const std::string& model = "H200") {
  NodeInfo node;
  node.name = name;
  node.cpus = 64;
  node.memory_mb = 512 * 1024;
  for (int i = 0; i < gpus; ++i) {
    GpuSlot slot;
    slot.index = i;
    slot.model = model;
    node.gpus.push_back(slot);
  }
  return node;
}

std::vector<int> All(const Snapshot& snapshot) {
  std::vector<int> out;
  for (size_t i = 0; i < snapshot.pending.size(); ++i) out.push_back(static_cast<int>(i));
  return out;
}

// Job ids in the order the queue hands them out; `place` says which get
// placed (Placed() is called with the job's GPUs).
std::vector<int64_t> Drain(JobQueue* queue, const Snapshot& snapshot,
                           const std::function<bool(const PendingJob&)>& place = nullptr) {
  std::vector<int64_t> order;
  for (int index = queue->Next(); index >= 0; index = queue->Next()) {
    const PendingJob& job = snapshot.pending[static_cast<size_t>(index)];
    order.push_back(job.job_id);
    if (place && place(job)) {
      Demand demand;
      demand.gpus = job.tasks * job.gpus_per_task;
      demand.cpus = job.tasks * job.cpus_per_task;
      demand.memory_mb = job.tasks * job.memory_mb_per_task;
      queue->Placed(index, demand);
    }
  }
  return order;
}

// A tracker holding usage[path] = gpus × seconds for each (tenant, team, user, gpus).
UsageTracker UsageOf(
    const std::vector<std::tuple<std::string, std::string, std::string, int>>& jobs,
    double seconds = 100) {
  UsageTracker usage;
  usage.SetHalfLife(1e300);
  Snapshot snapshot;
  snapshot.now_s = 0;
  usage.Advance(snapshot);
  int64_t id = 1;
  for (const auto& [tenant, team, user, gpus] : jobs) {
    std::vector<int> indices;
    for (int g = 0; g < gpus; ++g) indices.push_back(g);
    snapshot.running.push_back(Running(id++, tenant, team, user, "n", indices));
  }
  snapshot.now_s = seconds;
  usage.Advance(snapshot);
  return usage;
}

// ---------------------------------------------------------------- paths, usage

TEST(PolicyPaths, KeepEmptySegments) {
  EXPECT_EQ(TenantPath("acme"), "acme");
  EXPECT_EQ(TeamPath("acme", "vision"), "acme/vision");
  EXPECT_EQ(UserPath("acme", "vision", "ann"), "acme/vision/ann");
  EXPECT_EQ(UserPath("acme", "", "bob"), "acme//bob");
}

TEST(UsageTracker, AddsGpuSecondsToEveryLevelAndDecays) {
  UsageTracker usage;
  usage.SetHalfLife(100);
  Snapshot snapshot;
  snapshot.now_s = 1000;
  snapshot.running.push_back(Running(1, "a", "t", "u", "n", {0, 1}, 0, 900));
  usage.Advance(snapshot);  // the first call only records the time
  EXPECT_EQ(usage.Usage("a"), 0);

  snapshot.now_s = 1100;  // 2 GPUs × 100 s
  usage.Advance(snapshot);
  EXPECT_DOUBLE_EQ(usage.Usage("a"), 200);
  EXPECT_DOUBLE_EQ(usage.Usage("a/t"), 200);
  EXPECT_DOUBLE_EQ(usage.Usage("a/t/u"), 200);
  EXPECT_EQ(usage.Usage("b"), 0);

  snapshot.running.clear();
  snapshot.now_s = 1200;  // one half-life: halves
  usage.Advance(snapshot);
  EXPECT_DOUBLE_EQ(usage.Usage("a/t/u"), 100);
  snapshot.now_s = 1150;  // backwards: ignored
  usage.Advance(snapshot);
  EXPECT_DOUBLE_EQ(usage.Usage("a"), 100);
  snapshot.now_s = NAN;
  usage.Advance(snapshot);
  EXPECT_DOUBLE_EQ(usage.Usage("a"), 100);
  snapshot.now_s = 1400;  // two more half-lives
  usage.Advance(snapshot);
  EXPECT_DOUBLE_EQ(usage.Usage("a"), 25);
}

TEST(UsageTracker, CountsOnlySinceStartAndPreviousCall) {
  UsageTracker usage;
  usage.SetHalfLife(1e300);
  usage.SetHalfLife(0);  // refused: keeps the previous half-life
  usage.SetHalfLife(-5);
  Snapshot snapshot;
  snapshot.now_s = 0;
  usage.Advance(snapshot);
  snapshot.now_s = 100;
  snapshot.running.push_back(Running(1, "a", "t", "u", "n", {0}, 0, 60));  // started at 60
  RunningJob terminating = Running(2, "b", "t", "u", "n", {1, 2, 3}, 0, -50);
  terminating.terminating = true;  // still holds its GPUs
  snapshot.running.push_back(terminating);
  usage.Advance(snapshot);
  EXPECT_DOUBLE_EQ(usage.Usage("a"), 40);
  EXPECT_DOUBLE_EQ(usage.Usage("b"), 300);
  EXPECT_EQ(usage.all().size(), 6u);
}

// ---------------------------------------------------------------- FIFO

TEST(JobQueueFifo, PriorityThenAgeThenId) {
  Config config;
  Snapshot snapshot;
  snapshot.pending = {Job(5, "a", "t", "u", 1, 0, 10), Job(4, "b", "t", "u", 1, 0, 10),
                      Job(3, "a", "t", "u", 1, 5, 50), Job(2, "c", "t", "u", 1, 0, 1),
                      Job(1, "c", "t", "u", 1, 0, 99)};
  UsageTracker usage;
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot, [](const PendingJob&) { return true; }),
            (std::vector<int64_t>{3, 2, 4, 5, 1}));
}

TEST(JobQueueFifo, OnlyValidCandidatesEachOnce) {
  Config config;
  Snapshot snapshot;
  snapshot.pending = {Job(1, "a", "t", "u"), Job(2, "a", "t", "u"), Job(3, "a", "t", "u")};
  UsageTracker usage;
  for (Ordering ordering : {Ordering::kFifo, Ordering::kFairShare, Ordering::kDrf}) {
    config.ordering = ordering;
    auto queue = MakeJobQueue(config, snapshot, usage, {2, -1, 7, 2, 0});
    EXPECT_EQ(Drain(queue.get(), snapshot), (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(queue->Next(), -1);
    auto empty = MakeJobQueue(config, snapshot, usage, {});
    EXPECT_EQ(empty->Next(), -1);
  }
}

// ---------------------------------------------------------------- Fair Tree

// Large queues are sorted by packed integer keys (radix passes over the bytes
// that differ): the order must stay exactly priority desc, submitted_s asc
// (non-finite as 0, -0 equal to +0), job_id asc, then position, with ties,
// negative values and duplicate job ids, candidates in order or shuffled.
TEST(JobQueueFifo, LargeQueuesKeepTheExactOrder) {
  const double kInf = std::numeric_limits<double>::infinity();
  const std::vector<double> ages = {-1.5,          -0.0,  0.0,          3,    3.25,  1e9,
                                    1.7e9 + 0.125, -1e12, std::nan(""), kInf, -kInf, 5e-324};
  std::mt19937 rng(11);
  Snapshot snapshot;
  for (int i = 0; i < 3000; ++i) {
    PendingJob job =
        Job(static_cast<int64_t>(rng() % 500) - 250, "a", "t", "u" + std::to_string(rng() % 3), 1,
            static_cast<int>(rng() % 5) - 2, ages[rng() % ages.size()]);
    if (i % 97 == 0)
      job.priority = i % 2 ? std::numeric_limits<int>::max() : std::numeric_limits<int>::min();
    if (i % 89 == 0)
      job.job_id =
          i % 2 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
    snapshot.pending.push_back(job);
  }
  auto before = [&snapshot](int a, int b) {
    const PendingJob& x = snapshot.pending[static_cast<size_t>(a)];
    const PendingJob& y = snapshot.pending[static_cast<size_t>(b)];
    const double xs = std::isfinite(x.submitted_s) ? x.submitted_s : 0.0;
    const double ys = std::isfinite(y.submitted_s) ? y.submitted_s : 0.0;
    if (x.priority != y.priority) return x.priority > y.priority;
    if (xs != ys) return xs < ys;
    if (x.job_id != y.job_id) return x.job_id < y.job_id;
    return a < b;
  };
  std::vector<int> in_order = All(snapshot);
  std::vector<int> shuffled = in_order;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  std::vector<int> expected = in_order;
  std::sort(expected.begin(), expected.end(), before);
  Config config;
  UsageTracker usage;
  for (const std::vector<int>* candidates : {&in_order, &shuffled}) {
    auto queue = MakeJobQueue(config, snapshot, usage, *candidates);
    std::vector<int> order;
    for (int index = queue->Next(); index >= 0; index = queue->Next()) order.push_back(index);
    EXPECT_EQ(order, expected);
  }
  // Inside one user of Fair Tree: the same order restricted to that user.
  config.ordering = Ordering::kFairShare;
  auto queue = MakeJobQueue(config, snapshot, usage, shuffled);
  std::map<std::string, std::vector<int>> by_user, want;
  for (int index = queue->Next(); index >= 0; index = queue->Next()) {
    by_user[snapshot.pending[static_cast<size_t>(index)].user].push_back(index);
  }
  for (int index : expected)
    want[snapshot.pending[static_cast<size_t>(index)].user].push_back(index);
  EXPECT_EQ(by_user, want);
}

TEST(FairTree, TenantWithTenTimesTheUsageGoesSecond) {
  Config config;
  config.ordering = Ordering::kFairShare;
  Snapshot snapshot;
  snapshot.pending = {Job(1, "heavy", "t", "u", 1, 0, 0), Job(2, "light", "t", "u", 1, 0, 50)};
  const UsageTracker usage = UsageOf({{"heavy", "t", "u", 10}, {"light", "t", "u", 1}});
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot), (std::vector<int64_t>{2, 1}));

  config.ordering = Ordering::kFifo;
  queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot), (std::vector<int64_t>{1, 2}));
}

TEST(FairTree, SharesWeighTheUsage) {
  // a: 150 GPU-s, b: 100. Equal shares: b first (1/100 > 1/150).
  // Shares 2:1: a first (2/150 > 1/100).
  Config config;
  config.ordering = Ordering::kFairShare;
  Snapshot snapshot;
  snapshot.pending = {Job(1, "a", "t", "u"), Job(2, "b", "t", "u")};
  const UsageTracker usage = UsageOf({{"a", "t", "u", 3}, {"b", "t", "u", 2}}, 50);
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot), (std::vector<int64_t>{2, 1}));

  config.shares.push_back(ShareConfig{"a", 2});
  queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot), (std::vector<int64_t>{1, 2}));
}

TEST(FairTree, DepthFirstOverTenantsTeamsUsers) {
  // Tenant t (400) before s (1000). In t: team y (100) before x (300); in y,
  // v1 and v2 tie (50 each) and go by name. One user's jobs by priority, then age.
  Config config;
  config.ordering = Ordering::kFairShare;
  const UsageTracker usage = UsageOf(
      {{"t", "x", "u1", 6}, {"t", "y", "v1", 1}, {"t", "y", "v2", 1}, {"s", "z", "w", 20}}, 50);
  Snapshot snapshot;
  snapshot.pending = {Job(1, "t", "x", "u1"),           Job(2, "t", "y", "v2", 1, 0, 5),
                      Job(3, "t", "y", "v1", 1, 0, 9),  Job(4, "s", "z", "w"),
                      Job(5, "t", "y", "v1", 1, 3, 99), Job(6, "t", "y", "v2", 1, 0, 1)};
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot), (std::vector<int64_t>{5, 3, 6, 2, 1, 4}));
}

TEST(FairTree, OrderReactsWithinTheCycle) {
  Config config;
  config.ordering = Ordering::kFairShare;
  UsageTracker usage;
  Snapshot snapshot;
  for (int i = 0; i < 3; ++i) {
    snapshot.pending.push_back(Job(10 + i, "a", "t", "u", 1, 0, i));
    snapshot.pending.push_back(Job(20 + i, "b", "t", "u", 1, 0, i));
  }
  auto place_all = [](const PendingJob&) { return true; };
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot, place_all),
            (std::vector<int64_t>{10, 20, 11, 21, 12, 22}));

  // Nothing placed: the order does not move (a first by name, all of a).
  queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot), (std::vector<int64_t>{10, 11, 12, 20, 21, 22}));

  // a already holds 2 GPUs: b catches up first, then they alternate.
  snapshot.running.push_back(Running(1, "a", "t", "other", "n", {0, 1}));
  queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot, place_all),
            (std::vector<int64_t>{20, 21, 10, 22, 11, 12}));
}

TEST(FairTree, UsersOfOneTeamTakeTurns) {
  Config config;
  config.ordering = Ordering::kFairShare;
  UsageTracker usage;
  Snapshot snapshot;
  snapshot.pending = {Job(1, "a", "t", "ann", 2), Job(2, "a", "t", "ann", 2),
                      Job(3, "a", "t", "bob", 1), Job(4, "a", "t", "bob", 1),
                      Job(5, "a", "t", "bob", 1)};
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  // ann takes 2 GPUs, then bob catches up with two 1-GPU jobs.
  EXPECT_EQ(Drain(queue.get(), snapshot, [](const PendingJob&) { return true; }),
            (std::vector<int64_t>{1, 3, 4, 2, 5}));
}

TEST(FairTree, ZeroSharesAndEmptyNamesAreHarmless) {
  Config config;
  config.ordering = Ordering::kFairShare;
  config.shares.push_back(ShareConfig{"a", 0});
  config.shares.push_back(ShareConfig{"b", NAN});
  Snapshot snapshot;
  snapshot.pending = {Job(1, "a", "t", "u"), Job(2, "b", "", ""), Job(3, "", "", "")};
  UsageTracker usage;
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  // "" has shares 1 and no usage; a and b (no valid shares) come last, by name.
  EXPECT_EQ(Drain(queue.get(), snapshot, [](const PendingJob&) { return true; }),
            (std::vector<int64_t>{3, 1, 2}));
  for (const ShareStanding& s : Standings(config, UsageOf({{"a", "t", "u", 1}, {"", "", "", 1}}))) {
    EXPECT_TRUE(std::isfinite(s.fair_share)) << s.path;
    EXPECT_GT(s.fair_share, 0) << s.path;
    EXPECT_LE(s.fair_share, 1) << s.path;
  }
}

TEST(FairTree, Standings) {
  Config config;
  config.shares.push_back(ShareConfig{"c/q", 3});  // known only from the config
  const UsageTracker usage = UsageOf({{"a", "x", "u", 1}, {"b", "y", "v", 3}});
  const std::vector<ShareStanding> standings = Standings(config, usage);
  std::vector<std::string> paths;
  for (const auto& s : standings) paths.push_back(s.path);
  // c (no usage) ranks first, then a (100) before b (300).
  EXPECT_EQ(paths,
            (std::vector<std::string>{"c", "c/q", "a", "a/x", "a/x/u", "b", "b/y", "b/y/v"}));
  std::map<std::string, ShareStanding> by_path;
  for (const auto& s : standings) by_path[s.path] = s;
  // Tenants: S = 1/3 each; U = 0, 1/4, 3/4.
  EXPECT_DOUBLE_EQ(by_path["c"].fair_share, 1.0);
  EXPECT_DOUBLE_EQ(by_path["a"].fair_share, std::exp2(-0.75));
  EXPECT_DOUBLE_EQ(by_path["b"].fair_share, std::exp2(-2.25));
  EXPECT_DOUBLE_EQ(by_path["c/q"].shares, 3);
  EXPECT_DOUBLE_EQ(by_path["c/q"].fair_share, 1.0);
  // Users: rank-based over the two users.
  EXPECT_DOUBLE_EQ(by_path["a/x/u"].fair_share, 1.0);
  EXPECT_DOUBLE_EQ(by_path["b/y/v"].fair_share, 0.5);
  EXPECT_DOUBLE_EQ(by_path["b/y/v"].usage, 300);
  EXPECT_DOUBLE_EQ(by_path["a"].shares, 1);
}

TEST(FairTree, ManyCandidatesEachReturnedOnce) {
  Config config;
  config.ordering = Ordering::kFairShare;
  UsageTracker usage;
  Snapshot snapshot;
  for (int i = 0; i < 20000; ++i) {
    snapshot.pending.push_back(Job(i + 1, "t" + std::to_string(i % 7), "m" + std::to_string(i % 5),
                                   "u" + std::to_string(i % 13), 1 + i % 4, i % 3, i));
  }
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  int placed = 0;
  const std::vector<int64_t> order =
      Drain(queue.get(), snapshot, [&placed](const PendingJob&) { return ++placed % 2 == 0; });
  EXPECT_EQ(order.size(), 20000u);
  EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 20000u);
}

// ---------------------------------------------------------------- DRF

TEST(Drf, GhodsiExample) {
  // 9 CPUs and 18 GB; A's tasks need <1 CPU, 4 GB>, B's <3 CPUs, 1 GB>.
  // DRF gives A 3 tasks and B 2 (both dominant shares 2/3).
  Config config;
  config.ordering = Ordering::kDrf;
  Snapshot snapshot;
  NodeInfo node = Node("n", 0);
  node.cpus = 9;
  node.memory_mb = 18 * 1024;
  snapshot.nodes.push_back(node);
  for (int i = 0; i < 10; ++i) {
    PendingJob a = Job(100 + i, "A", "t", "u", 0, 0, i);
    a.cpus_per_task = 1;
    a.memory_mb_per_task = 4 * 1024;
    PendingJob b = Job(200 + i, "B", "t", "u", 0, 0, i);
    b.cpus_per_task = 3;
    b.memory_mb_per_task = 1024;
    snapshot.pending.push_back(a);
    snapshot.pending.push_back(b);
  }
  UsageTracker usage;
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  double cpus = 9;
  int64_t memory = 18 * 1024;
  std::map<std::string, int> tasks;
  const auto order = Drain(queue.get(), snapshot, [&](const PendingJob& job) {
    if (job.cpus_per_task > cpus || job.memory_mb_per_task > memory) return false;
    cpus -= job.cpus_per_task;
    memory -= job.memory_mb_per_task;
    ++tasks[job.tenant];
    return true;
  });
  EXPECT_EQ(tasks["A"], 3);
  EXPECT_EQ(tasks["B"], 2);
  EXPECT_EQ((std::vector<int64_t>(order.begin(), order.begin() + 5)),
            (std::vector<int64_t>{100, 200, 101, 201, 102}));
}

TEST(Drf, WeightedByTenantSharesAndCountsRunningJobs) {
  Config config;
  config.ordering = Ordering::kDrf;
  config.shares.push_back(ShareConfig{"a", 2});
  Snapshot snapshot;
  snapshot.nodes.push_back(Node("n", 6));
  NodeInfo drained = Node("d", 100);
  drained.schedulable = false;  // not in the totals
  snapshot.nodes.push_back(drained);
  for (int i = 0; i < 6; ++i) {
    snapshot.pending.push_back(Job(10 + i, "a", "t", "u", 1, 0, i));
    snapshot.pending.push_back(Job(20 + i, "b", "t", "u", 1, 0, i));
  }
  UsageTracker usage;
  int free_gpus = 6;
  std::map<std::string, int> gpus;
  auto place = [&](const PendingJob& job) {
    if (free_gpus < job.gpus_per_task) return false;
    free_gpus -= job.gpus_per_task;
    gpus[job.tenant] += job.gpus_per_task;
    return true;
  };
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  Drain(queue.get(), snapshot, place);
  EXPECT_EQ(gpus["a"], 4);
  EXPECT_EQ(gpus["b"], 2);

  // b already runs 3 GPUs of 6 (b: 1/2, a: 0): a takes the next three.
  snapshot.nodes[0] = Node("n", 9);
  snapshot.running.push_back(Running(1, "b", "t", "u", "n", {0, 1, 2}));
  config.shares.clear();
  free_gpus = 3;
  gpus.clear();
  queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  Drain(queue.get(), snapshot, place);
  EXPECT_EQ(gpus["a"], 3);
  EXPECT_EQ(gpus["b"], 0);
}

TEST(Drf, ZeroSharesGoLastAndEmptyFleetIsHarmless) {
  Config config;
  config.ordering = Ordering::kDrf;
  config.shares.push_back(ShareConfig{"a", 0});
  Snapshot snapshot;  // no nodes: every total is 0
  snapshot.pending = {Job(1, "a", "t", "u"), Job(2, "b", "t", "u"), Job(3, "a", "t", "u")};
  UsageTracker usage;
  auto queue = MakeJobQueue(config, snapshot, usage, All(snapshot));
  EXPECT_EQ(Drain(queue.get(), snapshot, [](const PendingJob&) { return true; }),
            (std::vector<int64_t>{2, 1, 3}));
}

// ---------------------------------------------------------------- quotas

QuotaConfig Quota(const std::string& path, int nominal, const std::string& cohort = "default",
                  const std::string& model = "") {
  QuotaConfig quota;
  quota.path = path;
  quota.nominal_gpus = nominal;
  quota.cohort = cohort;
  quota.gpu_model = model;
  return quota;
}

TEST(QuotaLedger, NominalAndBorrowingFromTheCohort) {
  Config config;
  config.quotas = {Quota("a", 4), Quota("b", 4)};
  Snapshot snapshot;
  QuotaLedger ledger(config, snapshot);
  auto verdict = ledger.CanAdmit("a", "t", "u", "H200", 4);
  EXPECT_TRUE(verdict.ok);
  EXPECT_FALSE(verdict.borrowing);
  verdict = ledger.CanAdmit("a", "t", "u", "H200", 8);  // borrows all of b's 4
  EXPECT_TRUE(verdict.ok);
  EXPECT_TRUE(verdict.borrowing);
  verdict = ledger.CanAdmit("a", "t", "u", "H200", 9);
  EXPECT_FALSE(verdict.ok);
  EXPECT_NE(verdict.message.find("a (any model): 0 of 4 used"), std::string::npos)
      << verdict.message;
  EXPECT_NE(verdict.message.find("cohort default can lend only 4"), std::string::npos)
      << verdict.message;

  // b uses its nominal: nothing left to lend.
  ledger.Charge("b", "t", "u", "H200", 4);
  EXPECT_TRUE(ledger.CanAdmit("a", "t", "u", "H200", 4).ok);
  verdict = ledger.CanAdmit("a", "t", "u", "H200", 5);
  EXPECT_FALSE(verdict.ok);
  EXPECT_NE(verdict.message.find("can lend only 0"), std::string::npos) << verdict.message;
  ledger.Release("b", "t", "u", "H200", 3);
  EXPECT_TRUE(ledger.CanAdmit("a", "t", "u", "H200", 7).ok);
  EXPECT_FALSE(ledger.CanAdmit("a", "t", "u", "H200", 8).ok);
  ledger.Release("b", "t", "u", "H200", 100);  // never below zero
  EXPECT_TRUE(ledger.CanAdmit("a", "t", "u", "H200", 8).ok);
  EXPECT_TRUE(ledger.CanAdmit("a", "t", "u", "H200", 0).ok);
  EXPECT_TRUE(ledger.CanAdmit("a", "t", "u", "H200", -3).ok);
}

TEST(QuotaLedger, BorrowingAndLendingLimits) {
  Config config;
  config.quotas = {Quota("a", 4), Quota("b", 4), Quota("c", 4)};
  config.quotas[0].borrowing_limit = 1;
  config.quotas[1].lending_limit = 1;
  Snapshot snapshot;
  QuotaLedger ledger(config, snapshot);
  EXPECT_TRUE(ledger.CanAdmit("a", "t", "u", "x", 5).ok);
  auto verdict = ledger.CanAdmit("a", "t", "u", "x", 6);
  EXPECT_FALSE(verdict.ok);
  EXPECT_NE(verdict.message.find("borrowing limit 1"), std::string::npos) << verdict.message;

  // c may borrow b's 1 (lending limit) and a's 4.
  EXPECT_TRUE(ledger.CanAdmit("c", "t", "u", "x", 9).ok);
  EXPECT_FALSE(ledger.CanAdmit("c", "t", "u", "x", 10).ok);
  // Once a borrows 1, c may borrow one less.
  ledger.Charge("a", "t", "u", "x", 5);
  EXPECT_TRUE(ledger.Borrowing("a", "t", "u", "x"));
  EXPECT_FALSE(ledger.Borrowing("c", "t", "u", "x"));
  EXPECT_TRUE(ledger.CanAdmit("c", "t", "u", "x", 4).ok);  // its own nominal stays
  EXPECT_TRUE(ledger.CanAdmit("c", "t", "u", "x", 4).ok);
  EXPECT_FALSE(ledger.CanAdmit("c", "t", "u", "x", 5).ok);  // a: 0 spare; b lends 1, a borrows 1
}

TEST(QuotaLedger, WorkedExampleOfTheDocs) {
  // docs/fleet-policies.md, "Quotas and cohorts".
  Config config;
  config.quotas = {Quota("vision", 16, "gpu", "H200"), Quota("speech", 8, "gpu", "H200"),
                   Quota("search", 8, "gpu", "H200")};
  config.quotas[0].borrowing_limit = 8;
  config.quotas[1].lending_limit = 2;
  QuotaLedger ledger(config, Snapshot{});
  ledger.Charge("vision", "t", "u", "H200", 10);
  ledger.Charge("speech", "t", "u", "H200", 2);
  ledger.Charge("search", "t", "u", "H200", 8);
  EXPECT_TRUE(ledger.WithinNominal("vision", "t", "u", "H200", 6));
  EXPECT_FALSE(ledger.CanAdmit("vision", "t", "u", "H200", 12).ok);
  EXPECT_TRUE(ledger.CanAdmit("vision", "t", "u", "H200", 8).ok);
  EXPECT_TRUE(ledger.CanAdmit("search", "t", "u", "H200", 4).ok);
  ledger.Charge("vision", "t", "u", "H200", 8);
  EXPECT_TRUE(ledger.Borrowing("vision", "t", "u", "H200"));
  EXPECT_FALSE(ledger.CanAdmit("search", "t", "u", "H200", 1).ok);
  PendingJob big = Job(1, "vision", "t", "u", 25);
  big.gpu_models = {"H200"};
  EXPECT_TRUE(ledger.NeverFits(big).has_value());
  big.gpus_per_task = 24;
  EXPECT_EQ(ledger.NeverFits(big), std::nullopt);
}

TEST(QuotaLedger, StandingsShowUseBorrowingAndLending) {
  Config config;
  config.quotas = {Quota("vision", 16, "gpu", "H200"), Quota("speech", 8, "gpu", "H200"),
                   Quota("search", 8, "gpu", "H200"), Quota("other", 3, "solo")};
  config.quotas[0].borrowing_limit = 8;
  config.quotas[1].lending_limit = 4;
  QuotaLedger ledger(config, Snapshot{});
  ledger.Charge("vision", "t", "u", "H200", 19);  // borrows 3
  ledger.Charge("speech", "t", "u", "H200", 2);   // can lend min(6, 4) = 4
  ledger.Charge("search", "t", "u", "H200", 6);   // can lend 2
  const std::vector<QuotaStanding> standings = ledger.Standings();
  ASSERT_EQ(standings.size(), 4u);
  EXPECT_EQ(standings[0].path, "vision");
  EXPECT_EQ(standings[0].gpu_model, "H200");
  EXPECT_EQ(standings[0].cohort, "gpu");
  EXPECT_EQ(standings[0].nominal, 16);
  EXPECT_EQ(standings[0].borrowing_limit, 8);
  EXPECT_EQ(standings[0].used, 19);
  EXPECT_EQ(standings[0].borrowed, 3);
  EXPECT_DOUBLE_EQ(standings[0].lent, 0);
  // The 3 borrowed GPUs come from speech and search in proportion 4 : 2.
  EXPECT_EQ(standings[1].lending_limit, 4);
  EXPECT_EQ(standings[1].borrowed, 0);
  EXPECT_DOUBLE_EQ(standings[1].lent, 2);
  EXPECT_DOUBLE_EQ(standings[2].lent, 1);
  // Another cohort lends nothing to this one.
  EXPECT_EQ(standings[3].used, 0);
  EXPECT_DOUBLE_EQ(standings[3].lent, 0);
  EXPECT_FALSE(standings[3].borrowing_limit.has_value());
}

TEST(QuotaLedger, CohortsAreSeparate) {
  Config config;
  config.quotas = {Quota("a", 2, "one"), Quota("b", 8, "two")};
  QuotaLedger ledger(config, Snapshot{});
  EXPECT_TRUE(ledger.CanAdmit("a", "t", "u", "x", 2).ok);
  EXPECT_FALSE(ledger.CanAdmit("a", "t", "u", "x", 3).ok);
  // No quota on the path: unlimited.
  EXPECT_TRUE(ledger.CanAdmit("z", "t", "u", "x", 1000).ok);
  EXPECT_FALSE(ledger.CanAdmit("z", "t", "u", "x", 1000).borrowing);
}

TEST(QuotaLedger, PerModelAndAnyModelQuotas) {
  Config config;
  config.quotas = {Quota("a", 2, "x", "H200"), Quota("a", 10, "y"), Quota("a/t", 3, "z")};
  Snapshot snapshot;
  snapshot.nodes.push_back(Node("n1", 8, "H200"));
  snapshot.nodes.push_back(Node("n2", 8, "A100"));
  snapshot.running.push_back(Running(1, "a", "t", "u", "n1", {0}));        // 1 H200
  snapshot.running.push_back(Running(2, "a", "s", "u", "n2", {0, 1, 2}));  // 3 A100
  QuotaLedger ledger(config, snapshot);
  // H200 quota: 1 of 2 used (case-insensitive model).
  EXPECT_TRUE(ledger.CanAdmit("a", "s", "u", "h200", 1).ok);
  auto verdict = ledger.CanAdmit("a", "s", "u", "h200", 2);
  EXPECT_FALSE(verdict.ok);
  EXPECT_NE(verdict.message.find("a (H200): 1 of 2 used"), std::string::npos) << verdict.message;
  // A100: only the any-model quota (4 of 10 used).
  EXPECT_TRUE(ledger.CanAdmit("a", "s", "u", "A100", 6).ok);
  EXPECT_FALSE(ledger.CanAdmit("a", "s", "u", "A100", 7).ok);
  // Team quota a/t: 1 of 3 used.
  EXPECT_TRUE(ledger.CanAdmit("a", "t", "u", "A100", 2).ok);
  verdict = ledger.CanAdmit("a", "t", "u", "A100", 3);
  EXPECT_FALSE(verdict.ok);
  EXPECT_NE(verdict.message.find("a/t (any model)"), std::string::npos) << verdict.message;

  EXPECT_TRUE(ledger.WithinNominal("a", "s", "u", "H200", 1));
  EXPECT_FALSE(ledger.WithinNominal("a", "s", "u", "H200", 2));
  EXPECT_FALSE(ledger.WithinNominal("nobody", "s", "u", "H200", 1));  // no quota: no guarantee
  EXPECT_FALSE(ledger.Borrowing("a", "s", "u", "H200"));
}

TEST(QuotaLedger, NeverFits) {
  Config config;
  config.quotas = {Quota("a", 4), Quota("b", 2, "default", "H200"), Quota("c", 1)};
  config.quotas[0].borrowing_limit = 2;
  config.quotas[1].borrowing_limit = 0;
  QuotaLedger ledger(config, Snapshot{});
  PendingJob job = Job(1, "a", "t", "u", 3);
  job.tasks = 2;  // 6 GPUs: nominal 4 + 2 borrowed
  EXPECT_EQ(ledger.NeverFits(job), std::nullopt);
  job.tasks = 3;
  const auto message = ledger.NeverFits(job);
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("needs 9 GPUs"), std::string::npos) << *message;
  EXPECT_NE(message->find("at most 6"), std::string::npos) << *message;

  PendingJob h200 = Job(2, "b", "t", "u", 3);
  h200.gpu_models = {"h200"};
  EXPECT_TRUE(ledger.NeverFits(h200).has_value());
  h200.gpu_models = {"H200", "A100"};  // A100 has no quota
  EXPECT_EQ(ledger.NeverFits(h200), std::nullopt);
  h200.gpu_models.clear();  // any model, fleet unknown
  EXPECT_EQ(ledger.NeverFits(h200), std::nullopt);
  Snapshot h200_fleet;
  h200_fleet.nodes.push_back(Node("n", 8, "H200"));
  QuotaLedger fleet_ledger(config, h200_fleet);
  EXPECT_TRUE(fleet_ledger.NeverFits(h200).has_value());  // only H200 exists

  EXPECT_EQ(ledger.NeverFits(Job(3, "c", "t", "u", 100)), std::nullopt);  // no limit
  EXPECT_EQ(ledger.NeverFits(Job(4, "z", "t", "u", 100)), std::nullopt);  // no quota
  EXPECT_EQ(ledger.NeverFits(Job(5, "a", "t", "u", 0)), std::nullopt);
}

// The ledger caches its answers per owner and model; a ledger charged step
// by step must answer exactly as one built afresh from the same running jobs
// (found by node id, by node name, by GPU index or by GPU id; models in any
// case).
TEST(QuotaLedger, LongLivedLedgerAgreesWithFreshOnes) {
  Config config;
  config.quotas = {Quota("a", 6, "c1"), Quota("a/t1", 3, "c1", "H200"), Quota("a/t1/u1", 2, "c1"),
                   Quota("b", 4, "c1"), Quota("b", 2, "c2", "a100"),    Quota("c/t2", 5, "c2")};
  config.quotas[0].borrowing_limit = 3;
  config.quotas[3].lending_limit = 1;
  Snapshot snapshot;
  snapshot.nodes.push_back(Node("h", 64, "H200"));
  snapshot.nodes.push_back(Node("x", 64, "A100"));
  snapshot.nodes.push_back(Node("h-again", 64, "A100"));  // same id as "h": never found by id
  for (size_t n = 0; n < snapshot.nodes.size(); ++n) {
    snapshot.nodes[n].id = n == 2 ? 1 : static_cast<int64_t>(n + 1);
    for (GpuSlot& gpu : snapshot.nodes[n].gpus) gpu.id = 1000 * (n + 1) + gpu.index;
  }
  const std::vector<std::string> tenants = {"a", "b", "c", "d"}, teams = {"t1", "t2"},
                                 users = {"u1", "u2"},
                                 models = {"H200", "h200", "A100", "a100", ""};
  std::mt19937 rng(7);
  auto pick = [&rng](const std::vector<std::string>& from) -> const std::string& {
    return from[rng() % from.size()];
  };
  QuotaLedger live(config, snapshot);
  std::vector<int> next_gpu = {0, 0};
  for (int step = 0; step < 60; ++step) {
    const std::string &tenant = pick(tenants), &team = pick(teams), &user = pick(users);
    const int node = static_cast<int>(rng() % 2);  // 0: H200, 1: A100
    const int gpus = 1 + static_cast<int>(rng() % 3);
    if (next_gpu[static_cast<size_t>(node)] + gpus > 64) break;
    RunningJob job = Running(step + 1, tenant, team, user, "", {});
    TaskPlacement& task = job.tasks[0];
    if (step % 2 == 0) {
      task.node_id = node + 1;
    } else {
      task.node = snapshot.nodes[static_cast<size_t>(node)].name;
    }
    for (int g = 0; g < gpus; ++g) {
      const int index = next_gpu[static_cast<size_t>(node)]++;
      if (step % 3 == 0) {
        task.gpu_ids.push_back(1000 * (node + 1) + index);
      } else {
        task.gpu_indices.push_back(index);
      }
    }
    snapshot.running.push_back(job);
    live.Charge(tenant, team, user, node == 0 ? "h200" : "A100", gpus);

    const QuotaLedger fresh(config, snapshot);
    for (const std::string& t : tenants) {
      for (const std::string& m : models) {
        for (int want : {1, 3, 7}) {
          const auto a = live.CanAdmit(t, "t1", "u1", m, want);
          const auto b = fresh.CanAdmit(t, "t1", "u1", m, want);
          ASSERT_EQ(a.ok, b.ok) << step << " " << t << " " << m << " " << want;
          EXPECT_EQ(a.borrowing, b.borrowing);
          EXPECT_EQ(a.message, b.message);
          EXPECT_EQ(live.WithinNominal(t, "t2", "u2", m, want),
                    fresh.WithinNominal(t, "t2", "u2", m, want));
        }
        EXPECT_EQ(live.Borrowing(t, "t1", "u2", m), fresh.Borrowing(t, "t1", "u2", m));
      }
    }
  }
  ASSERT_GT(snapshot.running.size(), 20u);
  // Releasing everything leaves a ledger that agrees with an idle fleet.
  for (const RunningJob& job : snapshot.running) {
    const bool h200 = job.tasks[0].node_id == 1 || job.tasks[0].node == "h";
    live.Release(
        job.tenant, job.team, job.user, h200 ? "H200" : "a100",
        static_cast<int>(std::max(job.tasks[0].gpu_ids.size(), job.tasks[0].gpu_indices.size())));
  }
  snapshot.running.clear();
  const QuotaLedger idle(config, snapshot);
  for (const std::string& t : tenants) {
    EXPECT_EQ(live.CanAdmit(t, "t1", "u1", "H200", 9).message,
              idle.CanAdmit(t, "t1", "u1", "H200", 9).message);
  }
}

// ---------------------------------------------------------------- preemption

TEST(Preemption, PriorityCandidates) {
  Snapshot snapshot;
  snapshot.running = {
      Running(1, "a", "t", "u", "n", {0}, 1), Running(2, "a", "t", "u", "n", {1}, 5),
      Running(3, "a", "t", "u", "n", {2}, 1, 0, false), Running(4, "a", "t", "u", "n", {3}, 0)};
  snapshot.running[3].terminating = true;
  EXPECT_EQ(PriorityCandidates(snapshot, Job(9, "b", "t", "u", 1, 5)), (std::vector<int>{0}));
  EXPECT_EQ(PriorityCandidates(snapshot, Job(9, "b", "t", "u", 1, 6)), (std::vector<int>{0, 1}));
  EXPECT_TRUE(PriorityCandidates(snapshot, Job(9, "b", "t", "u", 1, 1)).empty());
}

TEST(Preemption, ReclaimCandidates) {
  Config config;
  config.quotas = {Quota("a", 4), Quota("b", 4), Quota("e", 4, "other")};
  Snapshot snapshot;
  snapshot.nodes.push_back(Node("n", 16));
  snapshot.running = {Running(1, "b", "t", "u", "n", {0, 1, 2, 3}),
                      Running(2, "b", "t", "v", "n", {4, 5}), Running(3, "b", "t", "u", "n", {6}),
                      Running(4, "a", "t", "u", "n", {7})};
  snapshot.running[2].terminating = true;
  QuotaLedger ledger(config, snapshot);  // b: 7 of 4 (borrowing), a: 1 of 4
  EXPECT_TRUE(ledger.Borrowing("b", "t", "u", "H200"));
  EXPECT_EQ(ReclaimCandidates(snapshot, ledger, Job(9, "a", "t", "u", 3), "H200"),
            (std::vector<int>{0, 1}));
  const Snapshot copy = snapshot;  // not the ledger's own snapshot: looked up afresh
  EXPECT_EQ(ReclaimCandidates(copy, ledger, Job(9, "a", "t", "u", 3), "h200"),
            (std::vector<int>{0, 1}));
  // Beyond its nominal, or without any quota: nothing to reclaim.
  EXPECT_TRUE(ReclaimCandidates(snapshot, ledger, Job(9, "a", "t", "u", 4), "H200").empty());
  EXPECT_TRUE(ReclaimCandidates(snapshot, ledger, Job(9, "z", "t", "u", 1), "H200").empty());
  // Another cohort does not take back what b borrowed in "default".
  EXPECT_TRUE(ReclaimCandidates(snapshot, ledger, Job(9, "e", "t", "u", 1), "H200").empty());
}

struct VictimCase {
  Snapshot snapshot;
  std::vector<int> gpus;  // per running job
  int calls = 0;
  std::function<bool(const std::vector<int>&)> Fits(int need) {
    return [this, need](const std::vector<int>& victims) {
      ++calls;
      int freed = 0;
      for (int v : victims) freed += gpus[static_cast<size_t>(v)];
      return freed >= need;
    };
  }
};

VictimCase MakeVictims(const std::vector<std::tuple<int64_t, int, double, int>>& jobs) {
  VictimCase c;
  for (const auto& [id, priority, started, gpus] : jobs) {
    c.snapshot.running.push_back(Running(id, "a", "t", "u", "n", {0}, priority, started));
    c.gpus.push_back(gpus);
  }
  return c;
}

std::set<int> AsSet(const std::vector<int>& v) { return std::set<int>(v.begin(), v.end()); }

TEST(Preemption, SelectVictimsSingleBestFirst) {
  // (job id, priority, started, GPUs)
  VictimCase c = MakeVictims({{1, 1, 10, 4}, {2, 0, 5, 2}, {3, 0, 20, 2}, {4, 0, 20, 4}});
  const std::vector<int> all{0, 1, 2, 3};
  // Lowest priority, then latest start, then highest id: job 4.
  EXPECT_EQ(SelectVictims(c.snapshot, all, c.Fits(2)), (std::vector<int>{3}));
  // Only the priority-1 job would do alone? No: job 4 has 4 GPUs too.
  EXPECT_EQ(SelectVictims(c.snapshot, all, c.Fits(4)), (std::vector<int>{3}));
  // Restricted to 0..2: single jobs of priority 0 hold 2; job 1 (priority 1) holds 4.
  EXPECT_EQ(SelectVictims(c.snapshot, {0, 1, 2}, c.Fits(3)), (std::vector<int>{0}));
  // Later start wins among equal priorities.
  EXPECT_EQ(SelectVictims(c.snapshot, {1, 2}, c.Fits(2)), (std::vector<int>{2}));
}

TEST(Preemption, SelectVictimsSeveralAndMinimal) {
  VictimCase c = MakeVictims({{1, 0, 30, 1}, {2, 1, 20, 1}, {3, 2, 10, 4}, {4, 0, 5, 2}});
  const std::vector<int> all{0, 1, 2, 3};
  c.calls = 0;
  // Need 5: greedy order 0 (1), 3 (2), 1 (1), 2 (4) reaches 8; dropping the
  // higher priorities first leaves {0, 2} (5 GPUs), which is minimal.
  const std::vector<int> victims = SelectVictims(c.snapshot, all, c.Fits(5));
  EXPECT_EQ(AsSet(victims), (std::set<int>{0, 2}));
  EXPECT_LE(c.calls, 3 * 4);
  // Need 6: greedy takes all four (8); dropping 1 leaves 7, then 0 is spare
  // too (3 and 2 hold exactly 6).
  EXPECT_EQ(AsSet(SelectVictims(c.snapshot, all, c.Fits(6))), (std::set<int>{3, 2}));
  // More than all of them hold: none.
  EXPECT_TRUE(SelectVictims(c.snapshot, all, c.Fits(9)).empty());
  EXPECT_TRUE(SelectVictims(c.snapshot, {}, c.Fits(1)).empty());
  // Bad indices and duplicates are ignored.
  EXPECT_EQ(SelectVictims(c.snapshot, {-1, 7, 1, 1}, c.Fits(1)), (std::vector<int>{1}));
}

TEST(Preemption, SelectVictimsIsMinimalOnRandomCases) {
  uint64_t seed = 12345;
  auto next = [&seed]() {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((seed >> 33) % 1000);
  };
  for (int round = 0; round < 200; ++round) {
    std::vector<std::tuple<int64_t, int, double, int>> jobs;
    const int n = 1 + next() % 8;
    int total = 0;
    for (int i = 0; i < n; ++i) {
      jobs.emplace_back(i + 1, next() % 3, next() % 50, 1 + next() % 8);
      total += std::get<3>(jobs.back());
    }
    VictimCase c = MakeVictims(jobs);
    std::vector<int> all;
    for (int i = 0; i < n; ++i) all.push_back(i);
    const int need = 1 + next() % (total + 2);
    c.calls = 0;
    const std::vector<int> victims = SelectVictims(c.snapshot, all, c.Fits(need));
    EXPECT_LE(c.calls, 3 * n);
    if (need > total) {
      EXPECT_TRUE(victims.empty());
      continue;
    }
    ASSERT_FALSE(victims.empty());
    auto fits = c.Fits(need);
    EXPECT_TRUE(fits(victims));
    for (size_t k = 0; k < victims.size(); ++k) {  // no victim is spare
      std::vector<int> without = victims;
      without.erase(without.begin() + static_cast<std::ptrdiff_t>(k));
      EXPECT_FALSE(fits(without));
    }
    // One victim whenever one suffices.
    bool single = false;
    for (int i = 0; i < n; ++i) single = single || c.gpus[static_cast<size_t>(i)] >= need;
    if (single) {
      EXPECT_EQ(victims.size(), 1u);
    }
  }
}

// ---------------------------------------------------------------- rate limit

TEST(RateLimiter, SlidingWindow) {
  RateLimiter limiter;
  limiter.Configure(3, 60);
  EXPECT_EQ(limiter.Available(0), 3);
  limiter.Record(0, 2);
  EXPECT_EQ(limiter.Available(10), 1);
  limiter.Record(30, 1);
  EXPECT_EQ(limiter.Available(59.5), 0);
  EXPECT_EQ(limiter.Available(60), 2);  // the two at 0 left the window
  EXPECT_EQ(limiter.Available(90), 3);
  limiter.Record(100, 1000);
  EXPECT_EQ(limiter.Available(100), 0);
  EXPECT_EQ(limiter.Available(159), 0);
  EXPECT_EQ(limiter.Available(160), 3);
  limiter.Record(200, 0);
  limiter.Record(200, -4);
  limiter.Record(NAN, 1);
  EXPECT_EQ(limiter.Available(200), 3);

  limiter.Configure(0, 60);
  EXPECT_EQ(limiter.Available(300), 0);
  limiter.Configure(-2, -1);
  EXPECT_EQ(limiter.Available(300), 0);
  limiter.Configure(2, 0);  // a zero window keeps nothing
  limiter.Record(400, 2);
  EXPECT_EQ(limiter.Available(400), 2);
}

}  // namespace
}  // namespace ferry::fleet::sched::internal
