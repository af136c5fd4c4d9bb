// Property tests: random fleets, jobs and configs (fixed seeds). Every cycle
// must keep the invariants of core_test_util.h (no GPU double-booked, CPUs and
// memory within the node, gangs complete or absent, quotas within nominal +
// borrowing limit, victims preemptible or borrowing, one reason per pending
// job, placements only on schedulable nodes of the job's pool set) and be
// deterministic.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/sched.h"
#include "fleet/sched/core_test_util.h"
#include "testing/test_util.h"

namespace ferry::fleet::sched {
namespace {

using testing::World;

class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Int(0, static_cast<int>(v.size()) - 1))];
  }

 private:
  std::mt19937 rng_;
};

const std::vector<std::string> kTenants = {"a", "b", "c"};
const std::vector<std::string> kTeams = {"x", "y"};
const std::vector<std::string> kUsers = {"u1", "u2"};
const std::vector<std::string> kModels = {"H100", "A100", "h100"};

Config RandomConfig(Gen& g) {
  Config c;
  c.ordering = g.Pick(std::vector<Ordering>{Ordering::kFifo, Ordering::kFairShare, Ordering::kDrf});
  const std::vector<Scoring> scorings = {Scoring::kBinPack, Scoring::kSpread, Scoring::kCost,
                                         Scoring::kLatency, Scoring::kLocality};
  c.datasets.push_back({"imagenet", 100});
  c.providers.push_back({});
  c.providers[0].name = "local";
  for (int p = 0; p < 3; ++p) {
    PoolConfig pool;
    pool.name = "p" + std::to_string(p);
    pool.price_per_gpu_hour = g.Int(0, 4);
    pool.cloud = p == 2;
    if (pool.cloud) {
      pool.provider = "local";
      pool.max_nodes = g.Int(0, 6);
      pool.spot = g.Chance(0.5);
      pool.node.gpu_model = g.Pick(kModels);
      pool.node.gpus = g.Pick(std::vector<int>{4, 8});
      pool.idle_timeout_s = g.Int(0, 100);
    }
    if (g.Chance(0.3)) pool.datasets = {"imagenet"};
    c.pools.push_back(pool);
  }
  if (g.Chance(0.7)) {
    c.pool_sets.push_back({"all", {}, g.Pick(scorings)});
    c.pool_sets.push_back({"onprem", {"p0", "p1"}, g.Pick(scorings)});
    c.pool_sets.push_back({"burst", {"p1", "p2"}, g.Pick(scorings)});
  } else {
    c.default_scoring = g.Pick(scorings);
  }
  if (g.Chance(0.7)) {
    for (const std::string& t : kTenants) {
      QuotaConfig q;
      q.path = t;
      q.nominal_gpus = g.Int(0, 24);
      if (g.Chance(0.7)) q.borrowing_limit = g.Int(0, 16);
      if (g.Chance(0.5)) q.lending_limit = g.Int(0, q.nominal_gpus);
      q.cohort = g.Chance(0.8) ? "main" : "other";
      if (g.Chance(0.3)) q.gpu_model = g.Pick(kModels);
      c.quotas.push_back(q);
      if (g.Chance(0.3)) {
        QuotaConfig team;
        team.path = t + "/x";
        team.nominal_gpus = g.Int(0, 12);
        team.borrowing_limit = g.Int(0, 8);
        team.cohort = q.cohort;
        c.quotas.push_back(team);
      }
    }
  }
  if (g.Chance(0.5)) c.shares.push_back({"a", 3});
  c.preemption.priority = g.Chance(0.7);
  c.preemption.reclaim = g.Chance(0.7);
  c.preemption.fair_share_max = g.Int(0, 3);
  c.backfill.enabled = g.Chance(0.7);
  c.backfill.reservations = g.Int(0, 3);
  c.burst.enabled = g.Chance(0.7);
  c.burst.min_pending_s = g.Int(0, 20);
  return c;
}

World RandomWorld(Gen& g, const Config& c) {
  World w;
  w.snapshot.now_s = 100;
  const int nodes = g.Int(1, 16);
  for (int i = 0; i < nodes; ++i) {
    NodeInfo n;
    n.id = i + 1;
    n.name = "n" + std::to_string(i + 1);
    n.pool = g.Chance(0.1) ? "stray" : c.pools[static_cast<size_t>(g.Int(0, 2))].name;
    n.domain = g.Chance(0.7) ? "d" + std::to_string(g.Int(0, 3)) : "";
    n.cpus = g.Pick(std::vector<double>{8, 32, 64});
    n.memory_mb = g.Pick(std::vector<int64_t>{64, 256, 1024}) * 1024;
    n.schedulable = g.Chance(0.85);
    n.idle_since_s = g.Chance(0.5) ? g.Int(0, 100) : -1;
    const std::string model = g.Pick(kModels);
    const int gpus = g.Pick(std::vector<int>{0, 2, 4, 8, 8});
    for (int k = 0; k < gpus; ++k) n.gpus.push_back({n.id * 100 + k, k, model, 80 * 1024, true});
    w.snapshot.nodes.push_back(n);
  }
  // Running jobs on free GPUs.
  int64_t id = 1000;
  const int running = g.Int(0, 12);
  for (int r = 0; r < running; ++r) {
    RunningJob job;
    job.job_id = id++;
    job.tenant = g.Pick(kTenants);
    job.team = g.Pick(kTeams);
    job.user = g.Pick(kUsers);
    job.priority = g.Int(0, 3);
    job.preemptible = g.Chance(0.6);
    job.started_s = g.Int(0, 100);
    job.max_runtime_s = g.Chance(0.6) ? g.Int(10, 500) : 0;
    job.cpus_per_task = g.Int(0, 4);
    job.memory_mb_per_task = g.Int(0, 8) * 1024;
    job.terminating = g.Chance(0.1);
    const int tasks = g.Int(1, 3);
    const int per = g.Int(1, 4);
    for (int t = 0; t < tasks; ++t) {
      NodeInfo& n = w.snapshot.nodes[static_cast<size_t>(g.Int(0, nodes - 1))];
      TaskPlacement tp;
      tp.task = t;
      tp.node_id = n.id;
      tp.node = n.name;
      for (GpuSlot& s : n.gpus) {
        if (static_cast<int>(tp.gpu_indices.size()) == per) break;
        if (!s.free) continue;
        s.free = false;
        tp.gpu_ids.push_back(s.id);
        tp.gpu_indices.push_back(s.index);
      }
      if (n.cpus_used + job.cpus_per_task > n.cpus ||
          n.memory_mb_used + job.memory_mb_per_task > n.memory_mb) {
        job.cpus_per_task = 0;
        job.memory_mb_per_task = 0;
      }
      n.cpus_used += job.cpus_per_task;
      n.memory_mb_used += job.memory_mb_per_task;
      n.idle_since_s = -1;
      job.tasks.push_back(tp);
    }
    if (job.terminating && g.Chance(0.5)) job.preempted_for = 1 + g.Int(0, 5);
    w.snapshot.running.push_back(job);
  }
  const int pending = g.Int(0, 30);
  for (int p = 0; p < pending; ++p) {
    PendingJob job;
    job.job_id = p + 1;
    job.attempt = g.Int(1, 2);
    job.tenant = g.Pick(kTenants);
    job.team = g.Pick(kTeams);
    job.user = g.Pick(kUsers);
    job.tasks = g.Chance(0.03) ? 0 : g.Int(1, 4);
    job.gpus_per_task = g.Pick(std::vector<int>{0, 1, 2, 4, 8});
    if (g.Chance(0.4)) job.gpu_models = {g.Pick(kModels)};
    job.cpus_per_task = g.Int(0, 16);
    job.memory_mb_per_task = g.Int(0, 64) * 1024;
    job.priority = g.Int(0, 4);
    job.preemptible = g.Chance(0.5);
    job.submitted_s = g.Int(0, 100);
    job.max_runtime_s = g.Chance(0.6) ? g.Int(5, 400) : 0;
    if (g.Chance(0.2)) job.datasets = {"imagenet"};
    job.topology = g.Pick(std::vector<std::string>{"", "", "same_node", "same_domain"});
    if (!c.pool_sets.empty() && g.Chance(0.6)) {
      job.pool_set =
          g.Chance(0.05) ? "missing" : c.pool_sets[static_cast<size_t>(g.Int(0, 2))].name;
    }
    w.snapshot.pending.push_back(job);
  }
  if (g.Chance(0.3)) w.snapshot.provisioning["p2"] = g.Int(0, 2);
  return w;
}

std::string Serialize(const Decision& d) {
  std::ostringstream out;
  for (const Placement& p : d.placements) {
    out << "P" << p.job_id << "/" << p.attempt;
    for (const TaskPlacement& t : p.tasks) {
      out << " " << t.task << "@" << t.node << ":";
      for (int i : t.gpu_indices) out << i << ",";
    }
    out << "\n";
  }
  for (const Preemption& p : d.preemptions)
    out << "X" << p.job_id << " " << p.reason << " " << p.for_job << "\n";
  for (const ProvisionRequest& p : d.provision) {
    out << "V" << p.pool << " " << p.nodes;
    for (int64_t j : p.for_jobs) out << " " << j;
    out << "\n";
  }
  for (const ScaleDown& s : d.scale_down) out << "D" << s.node << "\n";
  for (const PendingReason& r : d.pending)
    out << "R" << r.job_id << " " << r.reason << " " << r.message << "\n";
  return out.str();
}

// Fair-share victims must be borrowing: some quota on their path above nominal.
std::vector<std::string> CheckReclaimVictims(const Config& c, const Snapshot& snap,
                                             const Decision& d) {
  std::vector<std::string> errors;
  std::map<std::pair<std::string, std::string>, int> used;
  std::map<int64_t, std::string> model_of;
  for (const NodeInfo& n : snap.nodes) {
    for (const GpuSlot& s : n.gpus) model_of[n.id * 100000 + s.index] = CanonicalGpuModel(s.model);
  }
  for (const RunningJob& r : snap.running) {
    for (const TaskPlacement& t : r.tasks) {
      for (int i : t.gpu_indices) {
        for (int depth = 1; depth <= 3; ++depth) {
          std::string path = testing::OwnerPath(r.tenant, r.team, r.user, depth);
          used[{path, ""}]++;
          used[{path, model_of[t.node_id * 100000 + i]}]++;
        }
      }
    }
  }
  for (const Preemption& p : d.preemptions) {
    if (p.reason != reason::kPreemptedForFairShare) continue;
    const RunningJob* run = nullptr;
    for (const RunningJob& r : snap.running) {
      if (r.job_id == p.job_id) run = &r;
    }
    if (run == nullptr) continue;
    bool borrowing = false;
    for (const QuotaConfig& q : c.quotas) {
      for (int depth = 1; depth <= 3; ++depth) {
        if (q.path != testing::OwnerPath(run->tenant, run->team, run->user, depth)) continue;
        borrowing = borrowing || used[{q.path, CanonicalGpuModel(q.gpu_model)}] > q.nominal_gpus;
      }
    }
    if (!borrowing) {
      std::string info;
      for (const QuotaConfig& q : c.quotas) {
        info += " [" + q.path + " " + q.gpu_model + " nominal " + std::to_string(q.nominal_gpus) +
                " used " + std::to_string(used[{q.path, CanonicalGpuModel(q.gpu_model)}]) +
                " cohort " + q.cohort + "]";
      }
      errors.push_back("fair-share victim " + std::to_string(p.job_id) + " (" + run->tenant + "/" +
                       run->team + "/" + run->user + ") is not borrowing:" + info);
    }
  }
  return errors;
}

TEST(SchedProperties, RandomScenariosKeepInvariants) {
  int placements = 0, preemptions = 0, provisions = 0, reasons = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    Gen g(seed);
    Config config = RandomConfig(g);
    ASSERT_OK(config.Validate());
    World world = RandomWorld(g, config);
    ASSERT_OK_AND_ASSIGN(auto scheduler, Scheduler::Make(config));
    ASSERT_OK_AND_ASSIGN(auto twin, Scheduler::Make(config));
    for (int cycle = 0; cycle < 3; ++cycle) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " cycle " + std::to_string(cycle));
      Decision d = scheduler->Cycle(world.snapshot);
      Decision again = twin->Cycle(world.snapshot);
      EXPECT_EQ(Serialize(d), Serialize(again)) << "not deterministic";
      for (const std::string& e : testing::CheckDecision(config, world.snapshot, d))
        ADD_FAILURE() << e;
      for (const std::string& e : CheckReclaimVictims(config, world.snapshot, d))
        ADD_FAILURE() << e;
      if (::testing::Test::HasFailure()) return;
      placements += static_cast<int>(d.placements.size());
      preemptions += static_cast<int>(d.preemptions.size());
      provisions += static_cast<int>(d.provision.size());
      reasons += static_cast<int>(d.pending.size());
      world.Apply(d);
      // Time passes; some jobs end (preempted ones are requeued).
      world.snapshot.now_s += g.Int(1, 120);
      std::vector<std::pair<int64_t, bool>> ending;
      for (const RunningJob& r : world.snapshot.running) {
        if (r.terminating || g.Chance(0.2)) ending.push_back({r.job_id, r.terminating});
      }
      for (const auto& [id, requeue] : ending) world.End(id, requeue);
    }
  }
  // The random worlds exercise every path.
  EXPECT_GT(placements, 500);
  EXPECT_GT(preemptions, 10);
  EXPECT_GT(provisions, 10);
  EXPECT_GT(reasons, 500);
}

// Data locality (PendingJob::cached_bytes, some nodes unknown or listed
// twice) changes where jobs go, never the rules: the same invariants hold.
// A second generator draws the caches, so the worlds are those above.
TEST(SchedProperties, CachedInputsKeepInvariants) {
  int placements = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    Gen g(seed);
    Gen caches(seed + 100'000);
    Config config = RandomConfig(g);
    World world = RandomWorld(g, config);
    const int nodes = static_cast<int>(world.snapshot.nodes.size());
    for (PendingJob& p : world.snapshot.pending) {
      if (!caches.Chance(0.6)) continue;
      p.input_digests = {"sha256:" + std::string(64, 'e')};
      p.input_bytes = 1 << 20;
      const int held = caches.Int(0, 4);
      for (int k = 0; k < held; ++k) {
        p.cached_bytes.push_back({caches.Int(1, nodes + 2), caches.Int(-5, 1 << 20)});
      }
    }
    ASSERT_OK_AND_ASSIGN(auto scheduler, Scheduler::Make(config));
    ASSERT_OK_AND_ASSIGN(auto twin, Scheduler::Make(config));
    for (int cycle = 0; cycle < 3; ++cycle) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " cycle " + std::to_string(cycle));
      Decision d = scheduler->Cycle(world.snapshot);
      EXPECT_EQ(Serialize(d), Serialize(twin->Cycle(world.snapshot))) << "not deterministic";
      for (const std::string& e : testing::CheckDecision(config, world.snapshot, d))
        ADD_FAILURE() << e;
      if (::testing::Test::HasFailure()) return;
      placements += static_cast<int>(d.placements.size());
      world.Apply(d);
      world.snapshot.now_s += g.Int(1, 120);
      std::vector<std::pair<int64_t, bool>> ending;
      for (const RunningJob& r : world.snapshot.running) {
        if (r.terminating || g.Chance(0.2)) ending.push_back({r.job_id, r.terminating});
      }
      for (const auto& [id, requeue] : ending) world.End(id, requeue);
    }
  }
  EXPECT_GT(placements, 500);
}

// The same world under every ordering and scoring policy, and a big gang on a
// busy fleet: still only complete gangs, no double booking.
TEST(SchedProperties, EveryPolicyOnOneBusyFleet) {
  Gen g(4242);
  Config base = RandomConfig(g);
  World world = RandomWorld(g, base);
  for (Ordering o : {Ordering::kFifo, Ordering::kFairShare, Ordering::kDrf}) {
    for (Scoring s : {Scoring::kBinPack, Scoring::kSpread, Scoring::kCost, Scoring::kLatency,
                      Scoring::kLocality}) {
      Config c = base;
      c.ordering = o;
      c.pool_sets.clear();
      c.default_scoring = s;
      ASSERT_OK_AND_ASSIGN(auto scheduler, Scheduler::Make(c));
      Snapshot snap = world.snapshot;
      for (PendingJob& p : snap.pending) p.pool_set.clear();
      Decision d = scheduler->Cycle(snap);
      for (const std::string& e : testing::CheckDecision(c, snap, d)) {
        ADD_FAILURE() << ToString(o) << "/" << ToString(s) << ": " << e;
      }
    }
  }
}

// A 2-node gang behind a steady stream of 1-GPU jobs without a max runtime:
// no reservation start can be planned, so without draining every GPU that
// frees goes to a small job and the gang starves; with draining (the default)
// the nodes it needs are held and it starts once their jobs have ended.
int CyclesUntilGangStarts(bool drain, int max_steps) {
  Config c;
  c.backfill.drain = drain;
  auto made = Scheduler::Make(c);
  if (!made.ok()) return -2;
  std::unique_ptr<Scheduler> scheduler = std::move(*made);
  World world;
  for (int n = 0; n < 4; ++n) {
    NodeInfo node;
    node.id = n + 1;
    node.name = "n" + std::to_string(n + 1);
    node.cpus = 64;
    node.memory_mb = 1 << 20;
    for (int g = 0; g < 8; ++g) node.gpus.push_back({node.id * 100 + g, g, "H200", 81920, true});
    world.snapshot.nodes.push_back(node);
  }
  std::map<int64_t, double> ends;  // running small job -> when it ends
  int64_t next_id = 2;
  for (int step = 0; step < max_steps; ++step) {
    world.snapshot.now_s = step * 60.0;
    if (step == 1) {  // the gang arrives once small jobs fill the fleet
      PendingJob gang;
      gang.job_id = 1;
      gang.tenant = "big";
      gang.tasks = 2;
      gang.gpus_per_task = 8;
      gang.submitted_s = world.snapshot.now_s;
      world.snapshot.pending.push_back(gang);
    }
    for (auto it = ends.begin(); it != ends.end();) {
      if (it->second <= world.snapshot.now_s) {
        world.End(it->first, false);
        it = ends.erase(it);
      } else {
        ++it;
      }
    }
    // 32 at first, then 4 GPUs a minute for 10+ minutes each: more than 32 GPUs.
    for (int k = 0; k < (step == 0 ? 32 : 4); ++k) {
      PendingJob small;
      small.job_id = next_id++;
      small.tenant = "small";
      small.gpus_per_task = 1;
      small.submitted_s = world.snapshot.now_s;
      world.snapshot.pending.push_back(small);
    }
    Decision d = scheduler->Cycle(world.snapshot);
    for (const std::string& e : testing::CheckDecision(c, world.snapshot, d)) {
      ADD_FAILURE() << e;
    }
    world.Apply(d);
    for (const Placement& p : d.placements) {
      if (p.job_id == 1) return step;
      ends[p.job_id] = world.snapshot.now_s + 600 + 60 * static_cast<double>(p.job_id % 7);
    }
  }
  return -1;
}

TEST(SchedProperties, GangIsNotStarvedByAStreamOfSmallJobs) {
  const int with_drain = CyclesUntilGangStarts(true, 200);
  EXPECT_GE(with_drain, 0) << "the gang never started";
  EXPECT_LE(with_drain, 40);
  EXPECT_EQ(CyclesUntilGangStarts(false, 200), -1) << "without draining the gang starves";
}

}  // namespace
}  // namespace ferry::fleet::sched
