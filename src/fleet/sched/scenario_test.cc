// Scenario files (scenarios/*.yaml, format in docs/fleet-scheduler.md): a
// cluster, running and pending jobs, a config, and the decision expected of
// one cycle or of several ("then:" steps that change the config, end jobs or
// let time pass). Every cycle is also checked against the invariants of
// core_test_util.h.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/sched.h"
#include "fleet/sched/core_test_util.h"
#include "testing/test_util.h"

namespace ferry::fleet::sched {
namespace {

namespace fs = std::filesystem;
using testing::World;

template <typename T>
T Get(const YAML::Node& node, const char* key, T fallback) {
  return node[key] ? node[key].as<T>() : fallback;
}

std::vector<std::string> Strings(const YAML::Node& node) {
  std::vector<std::string> out;
  if (!node) return out;
  if (node.IsScalar()) return {node.as<std::string>()};
  for (const auto& n : node) out.push_back(n.as<std::string>());
  return out;
}

Scoring ScoringOf(const YAML::Node& node, Scoring fallback) {
  if (!node) return fallback;
  auto s = ParseScoring(node.as<std::string>());
  if (!s) throw std::runtime_error("unknown scoring " + node.as<std::string>());
  return *s;
}

Config ParseConfig(const YAML::Node& y) {
  Config c;
  if (!y) return c;
  if (y["ordering"]) {
    auto o = ParseOrdering(y["ordering"].as<std::string>());
    if (!o) throw std::runtime_error("unknown ordering");
    c.ordering = *o;
  }
  c.default_scoring = ScoringOf(y["default_scoring"], Scoring::kBinPack);
  for (const auto& p : y["pools"]) {
    PoolConfig pool;
    pool.name = p["name"].as<std::string>();
    pool.cloud = Get(p, "cloud", false);
    pool.provider = Get<std::string>(p, "provider", "");
    pool.price_per_gpu_hour = Get(p, "price", 0.0);
    pool.spot = Get(p, "spot", false);
    pool.provisioning_delay_s = Get(p, "provisioning_delay_s", 0.0);
    pool.max_nodes = Get(p, "max_nodes", 0);
    pool.idle_timeout_s = Get(p, "idle_timeout_s", 300.0);
    pool.datasets = Strings(p["datasets"]);
    // `slurm: true`, or `slurm: {partition: ...}`: a Slurm pool.
    if (const YAML::Node slurm = p["slurm"]; slurm && (!slurm.IsScalar() || slurm.as<bool>())) {
      pool.slurm.emplace();
      if (slurm.IsMap()) pool.slurm->partition = Get<std::string>(slurm, "partition", "");
    }
    pool.queue_delay_s = Get(p, "queue_delay_s", 0.0);
    if (p["node"]) {
      pool.node.gpu_model = Get<std::string>(p["node"], "model", "H200");
      pool.node.gpus = Get(p["node"], "gpus", 8);
      pool.node.cpus = Get(p["node"], "cpus", 64.0);
      pool.node.memory_mb = Get<int64_t>(p["node"], "memory_mb", 1024 * 1024);
    }
    c.pools.push_back(pool);
  }
  for (const auto& s : y["pool_sets"]) {
    c.pool_sets.push_back({s["name"].as<std::string>(), Strings(s["pools"]),
                           ScoringOf(s["scoring"], Scoring::kBinPack)});
  }
  for (const auto& q : y["quotas"]) {
    QuotaConfig quota;
    quota.path = q["path"].as<std::string>();
    quota.gpu_model = Get<std::string>(q, "model", "");
    quota.nominal_gpus = Get(q, "nominal", 0);
    if (q["borrowing_limit"]) quota.borrowing_limit = q["borrowing_limit"].as<int>();
    if (q["lending_limit"]) quota.lending_limit = q["lending_limit"].as<int>();
    quota.cohort = Get<std::string>(q, "cohort", "default");
    c.quotas.push_back(quota);
  }
  for (const auto& s : y["shares"])
    c.shares.push_back({s["path"].as<std::string>(), s["shares"].as<double>()});
  for (const auto& d : y["datasets"])
    c.datasets.push_back({d["name"].as<std::string>(), d["size_gb"].as<double>()});
  c.transfer_cost_per_gb = Get(y, "transfer_cost_per_gb", c.transfer_cost_per_gb);
  c.usage_half_life_s = Get(y, "usage_half_life_s", c.usage_half_life_s);
  if (auto p = y["preemption"]) {
    c.preemption.priority = Get(p, "priority", true);
    c.preemption.reclaim = Get(p, "reclaim", true);
    c.preemption.grace_s = Get(p, "grace_s", 30.0);
    c.preemption.fair_share_max = Get(p, "fair_share_max", 10);
    c.preemption.fair_share_window_s = Get(p, "fair_share_window_s", 60.0);
  }
  if (auto b = y["backfill"]) {
    c.backfill.enabled = Get(b, "enabled", true);
    c.backfill.reservations = Get(b, "reservations", 1);
    c.backfill.drain = Get(b, "drain", true);
  }
  if (auto b = y["burst"]) {
    c.burst.enabled = Get(b, "enabled", true);
    c.burst.min_pending_s = Get(b, "min_pending_s", 0.0);
  }
  for (const auto& p : y["providers"]) {
    ProviderConfig provider;
    provider.name = p["name"].as<std::string>();
    provider.type = Get<std::string>(p, "type", "local");
    c.providers.push_back(provider);
  }
  return c;
}

void AddNodes(World* world, const YAML::Node& list) {
  for (const auto& n : list) {
    const int count = Get(n, "count", 0);
    const std::string base = n["name"].as<std::string>();
    for (int k = 0; k < std::max(count, 1); ++k) {
      NodeInfo node;
      node.id = static_cast<int64_t>(world->snapshot.nodes.size()) + 1;
      node.name = count > 0 ? base + std::to_string(k + 1) : base;
      node.pool = Get<std::string>(n, "pool", "default");
      node.domain = Get<std::string>(n, "domain", "");
      node.cpus = Get(n, "cpus", 64.0);
      node.memory_mb = Get<int64_t>(n, "memory_mb", 1024 * 1024);
      node.cpus_used = Get(n, "cpus_used", 0.0);
      node.memory_mb_used = Get<int64_t>(n, "memory_mb_used", 0);
      node.schedulable = Get(n, "schedulable", true);
      node.idle_since_s = Get(n, "idle_since", -1.0);
      // `gpu_models` lists the model of every GPU (a node of mixed models);
      // otherwise `gpus` GPUs of `model`.
      std::vector<std::string> models = Strings(n["gpu_models"]);
      if (models.empty()) {
        models.assign(static_cast<size_t>(Get(n, "gpus", 8)), Get<std::string>(n, "model", "H200"));
      }
      const int gpus = static_cast<int>(models.size());
      for (int g = 0; g < gpus; ++g) {
        GpuSlot slot;
        slot.id = node.id * 1000 + g;
        slot.index = g;
        slot.model = models[static_cast<size_t>(g)];
        slot.memory_mb = 80 * 1024;
        node.gpus.push_back(slot);
      }
      world->snapshot.nodes.push_back(std::move(node));
    }
  }
}

void AddRunning(World* world, const YAML::Node& list) {
  for (const auto& r : list) {
    RunningJob job;
    job.job_id = r["job"].as<int64_t>();
    job.attempt = Get(r, "attempt", 1);
    job.tenant = Get<std::string>(r, "tenant", "t");
    job.team = Get<std::string>(r, "team", "");
    job.user = Get<std::string>(r, "user", "");
    job.priority = Get(r, "priority", 0);
    job.preemptible = Get(r, "preemptible", false);
    job.started_s = Get(r, "started", 0.0);
    job.max_runtime_s = Get(r, "max_runtime", 0.0);
    job.cpus_per_task = Get(r, "cpus_per_task", 0.0);
    job.memory_mb_per_task = Get<int64_t>(r, "memory_mb_per_task", 0);
    job.terminating = Get(r, "terminating", false);
    job.preempted_for = Get<int64_t>(r, "preempted_for", 0);
    int task = 0;
    for (const auto& t : r["tasks"]) {
      NodeInfo* node = world->NodeNamed(t["node"].as<std::string>());
      if (node == nullptr) throw std::runtime_error("running task on unknown node");
      TaskPlacement tp;
      tp.task = task++;
      tp.node_id = node->id;
      tp.node = node->name;
      int want = Get(t, "gpus", 0);
      for (GpuSlot& g : node->gpus) {
        if (want == 0) break;
        if (!g.free) continue;
        g.free = false;
        tp.gpu_ids.push_back(g.id);
        tp.gpu_indices.push_back(g.index);
        --want;
      }
      if (want > 0) throw std::runtime_error("running task needs more GPUs than free on its node");
      node->cpus_used += job.cpus_per_task;
      node->memory_mb_used += job.memory_mb_per_task;
      node->idle_since_s = -1;
      job.tasks.push_back(std::move(tp));
    }
    world->snapshot.running.push_back(std::move(job));
  }
}

void AddPending(World* world, const YAML::Node& list) {
  for (const auto& p : list) {
    PendingJob job;
    job.job_id = p["job"].as<int64_t>();
    job.attempt = Get(p, "attempt", 1);
    job.tenant = Get<std::string>(p, "tenant", "t");
    job.team = Get<std::string>(p, "team", "");
    job.user = Get<std::string>(p, "user", "");
    job.tasks = Get(p, "tasks", 1);
    job.gpus_per_task = Get(p, "gpus", 0);
    job.gpu_models = Strings(p["models"]);
    job.cpus_per_task = Get(p, "cpus", 0.0);
    job.memory_mb_per_task = Get<int64_t>(p, "memory_mb", 0);
    job.priority = Get(p, "priority", 0);
    job.preemptible = Get(p, "preemptible", false);
    job.submitted_s = Get(p, "submitted", 0.0);
    job.max_runtime_s = Get(p, "max_runtime", 0.0);
    job.datasets = Strings(p["datasets"]);
    job.topology = Get<std::string>(p, "topology", "");
    job.pool_set = Get<std::string>(p, "pool_set", "");
    // cached: {node name: bytes of the job's inputs its cache holds}
    for (const auto& entry : p["cached"]) {
      const std::string name = entry.first.as<std::string>();
      const NodeInfo* node = world->NodeNamed(name);
      if (node == nullptr) throw std::runtime_error("cached: no node " + name);
      job.cached_bytes.emplace_back(node->id, entry.second.as<int64_t>());
    }
    if (!job.cached_bytes.empty()) job.input_digests = {"sha256:" + std::string(64, '0')};
    world->snapshot.pending.push_back(std::move(job));
  }
}

std::string Show(const Decision& d) {
  std::ostringstream out;
  for (const Placement& p : d.placements) {
    out << "  placed " << p.job_id << ":";
    for (const TaskPlacement& t : p.tasks) out << " " << t.node << "x" << t.gpu_indices.size();
    out << "\n";
  }
  for (const Preemption& p : d.preemptions) {
    out << "  preempt " << p.job_id << " " << p.reason << " for " << p.for_job << "\n";
  }
  for (const ProvisionRequest& p : d.provision)
    out << "  provision " << p.pool << " " << p.nodes << "\n";
  for (const ScaleDown& s : d.scale_down) out << "  scale down " << s.node << "\n";
  for (const PendingReason& r : d.pending) {
    out << "  pending " << r.job_id << " " << r.reason << ": " << r.message << "\n";
  }
  return out.str();
}

// Compares one decision with `expect`; absent keys expect nothing (no
// placements, preemptions, ...), so every scenario states all it expects.
void Expect(const std::string& where, const World& world, const Decision& d,
            const YAML::Node& expect) {
  SCOPED_TRACE(where + "\n" + Show(d));
  // Placements: job -> {node: GPUs on that node (tasks for CPU-only jobs)},
  // or `placed: [ids]` when where does not matter.
  std::map<int64_t, std::map<std::string, int>> got;
  std::map<int64_t, int> gpus_per_task;
  for (const PendingJob& p : world.snapshot.pending) gpus_per_task[p.job_id] = p.gpus_per_task;
  for (const Placement& p : d.placements) {
    auto& nodes = got[p.job_id];
    for (const TaskPlacement& t : p.tasks) {
      nodes[t.node] += gpus_per_task[p.job_id] > 0 ? static_cast<int>(t.gpu_indices.size()) : 1;
    }
  }
  std::set<int64_t> want_placed;
  for (const auto& p : expect["placements"]) {
    int64_t job = p.first.as<int64_t>();
    want_placed.insert(job);
    if (p.second.IsMap()) {
      std::map<std::string, int> nodes;
      for (const auto& n : p.second) nodes[n.first.as<std::string>()] = n.second.as<int>();
      EXPECT_EQ(got[job], nodes) << "placement of job " << job;
    }
  }
  for (const auto& p : expect["placed"]) want_placed.insert(p.as<int64_t>());
  std::set<int64_t> got_placed;
  for (const auto& [job, nodes] : got) got_placed.insert(job);
  EXPECT_EQ(got_placed, want_placed) << "placed jobs";

  std::set<std::string> want_pre, got_pre;
  for (const auto& p : expect["preemptions"]) {
    want_pre.insert(p["job"].as<std::string>() + " " + p["reason"].as<std::string>() + " for " +
                    p["for"].as<std::string>());
  }
  for (const Preemption& p : d.preemptions) {
    got_pre.insert(std::to_string(p.job_id) + " " + p.reason + " for " + std::to_string(p.for_job));
  }
  EXPECT_EQ(got_pre, want_pre) << "preemptions";

  std::set<std::string> want_prov, got_prov;
  for (const auto& p : expect["provision"]) {
    std::string jobs;
    for (const auto& j : p["for"]) jobs += " " + j.as<std::string>();
    want_prov.insert(p["pool"].as<std::string>() + " " + p["nodes"].as<std::string>() + jobs);
  }
  for (const ProvisionRequest& p : d.provision) {
    std::string jobs;
    for (int64_t j : p.for_jobs) jobs += " " + std::to_string(j);
    got_prov.insert(p.pool + " " + std::to_string(p.nodes) + jobs);
  }
  EXPECT_EQ(got_prov, want_prov) << "provision requests";

  const std::vector<std::string> down = Strings(expect["scale_down"]);
  const std::set<std::string> want_down(down.begin(), down.end());
  std::set<std::string> got_down;
  for (const ScaleDown& s : d.scale_down) got_down.insert(s.node);
  EXPECT_EQ(got_down, want_down) << "scale-downs";

  std::map<int64_t, std::string> want_reason, got_reason;
  std::map<int64_t, std::string> messages;
  for (const auto& r : expect["pending"])
    want_reason[r.first.as<int64_t>()] = r.second.as<std::string>();
  for (const PendingReason& r : d.pending) {
    got_reason[r.job_id] = r.reason;
    messages[r.job_id] = r.message;
  }
  EXPECT_EQ(got_reason, want_reason) << "pending reasons";
  for (const auto& m : expect["messages"]) {
    int64_t job = m.first.as<int64_t>();
    EXPECT_NE(messages[job].find(m.second.as<std::string>()), std::string::npos)
        << "message of job " << job << ": " << messages[job];
  }
  // planned: {job: [nodes]}: the nodes held for blocked jobs (any order),
  // checked only where a scenario states it ({} expects none).
  if (expect["planned"]) {
    std::map<int64_t, std::set<std::string>> want_planned, got_planned;
    for (const auto& p : expect["planned"]) {
      const std::vector<std::string> nodes = Strings(p.second);
      want_planned[p.first.as<int64_t>()] = {nodes.begin(), nodes.end()};
    }
    for (const PendingReason& r : d.pending) {
      if (!r.planned_nodes.empty())
        got_planned[r.job_id] = {r.planned_nodes.begin(), r.planned_nodes.end()};
    }
    EXPECT_EQ(got_planned, want_planned) << "nodes held for blocked jobs";
  }
  if (auto s = expect["stats"]) {
    if (s["backfilled"]) EXPECT_EQ(d.stats.backfilled, s["backfilled"].as<int>());
    if (s["preempted"]) EXPECT_EQ(d.stats.preempted, s["preempted"].as<int>());
    if (s["placed"]) EXPECT_EQ(d.stats.placed, s["placed"].as<int>());
  }
}

void RunScenario(const fs::path& path) {
  YAML::Node doc = YAML::LoadFile(path.string());
  World world;
  AddNodes(&world, doc["nodes"]);
  AddRunning(&world, doc["running"]);
  AddPending(&world, doc["pending"]);
  for (const auto& p : doc["provisioning"]) {
    world.snapshot.provisioning[p.first.as<std::string>()] = p.second.as<int>();
  }
  world.snapshot.now_s = Get(doc, "now", 0.0);
  Config config = ParseConfig(doc["config"]);
  auto made = Scheduler::Make(config);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Scheduler> scheduler = std::move(made).MoveValueUnsafe();

  // Step 0 is the document itself; "then" steps follow.
  std::vector<YAML::Node> steps{doc};
  for (const auto& s : doc["then"]) steps.push_back(s);
  for (size_t i = 0; i < steps.size(); ++i) {
    const YAML::Node& step = steps[i];
    const std::string where = path.filename().string() + " step " + std::to_string(i);
    if (i > 0) {
      if (step["config"]) {
        Status st = scheduler->Reconfigure(ParseConfig(step["config"]));
        if (step["config_error"]) {
          ASSERT_FALSE(st.ok()) << where;
          EXPECT_NE(st.message().find(step["config_error"].as<std::string>()), std::string::npos)
              << st.ToString();
        } else {
          ASSERT_TRUE(st.ok()) << where << ": " << st.ToString();
        }
      }
      if (step["now"]) world.snapshot.now_s = step["now"].as<double>();
      for (const auto& id : step["end"]) world.End(id.as<int64_t>(), false);
      for (const auto& id : step["requeue"]) world.End(id.as<int64_t>(), true);
      AddNodes(&world, step["add_nodes"]);
      AddRunning(&world, step["add_running"]);
      AddPending(&world, step["add_pending"]);
      for (const auto& p : step["provisioning"]) {
        world.snapshot.provisioning[p.first.as<std::string>()] = p.second.as<int>();
      }
    }
    if (!step["expect"]) continue;
    Decision d = scheduler->Cycle(world.snapshot);
    for (const std::string& e : testing::CheckDecision(scheduler->config(), world.snapshot, d)) {
      ADD_FAILURE() << where << ": " << e;
    }
    Expect(where, world, d, step["expect"]);
    world.Apply(d);
  }
}

std::vector<fs::path> Scenarios() {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(FERRY_SCHED_SCENARIOS)) {
    if (entry.path().extension() == ".yaml") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class ScenarioTest : public ::testing::TestWithParam<fs::path> {};

TEST_P(ScenarioTest, Runs) {
  try {
    RunScenario(GetParam());
  } catch (const std::exception& e) {
    FAIL() << GetParam().filename() << ": " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Files, ScenarioTest, ::testing::ValuesIn(Scenarios()),
                         [](const ::testing::TestParamInfo<fs::path>& info) {
                           std::string name = info.param.stem().string();
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(ScenarioFiles, Exist) { EXPECT_GE(Scenarios().size(), 20u); }

}  // namespace
}  // namespace ferry::fleet::sched
