// The scheduler against scenario files (scenarios/*.yaml: nodes, usage and
// pending jobs with the placements and reasons they must produce), a
// randomized property test of its invariants, and a fleet-sized run.
#include "ferry/fleet/scheduler.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace ferry::fleet {
namespace {

namespace fs = std::filesystem;

// ---- Scenario files.
//
//   nodes:
//     - name: a            # ids are assigned in order; GPU ids are node*100+index
//       cpus: 64
//       memory_mb: 1000000
//       gpus: [H200, H200]  # models by index, or "8xH200" / "4xA100,4xH100"
//       busy: [0, 1]        # GPU indices already allocated (to job 9999)
//       cpus_used: 4
//       memory_mb_used: 0
//       state: LOST         # or drain: true; such nodes are only in all_nodes
//   jobs:                   # any order; scheduled by priority, then created_at_ms
//     - {id: 1, tasks: 2, gpus_per_task: 4, gpu_models: [H200], cpus_per_task: 1,
//        memory_mb_per_task: 0, priority: 0, created_at_ms: 1}
//   expect:
//     placements:
//       - {job: 1, tasks: [{node: a, gpus: [0, 1, 2, 3]}, {node: b}]}  # gpus optional
//     pending:
//       - {job: 2, reason: NO_CAPACITY}
//
// Every job must be listed under exactly one of placements and pending.

std::vector<std::string> ParseModels(const YAML::Node& gpus) {
  std::vector<std::string> models;
  if (!gpus) return models;
  if (gpus.IsSequence()) {
    for (const auto& g : gpus) models.push_back(g.as<std::string>());
    return models;
  }
  std::string text = gpus.as<std::string>();
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t x = part.find('x');
    int count = std::stoi(part.substr(0, x));
    for (int i = 0; i < count; ++i) models.push_back(part.substr(x + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return models;
}

struct Scenario {
  SchedulingSnapshot snapshot;
  YAML::Node expect;
};

Scenario LoadScenario(const fs::path& path) {
  YAML::Node doc = YAML::LoadFile(path.string());
  Scenario scenario;
  SchedulingSnapshot& snap = scenario.snapshot;
  int64_t node_id = 0;
  for (const auto& n : doc["nodes"]) {
    Node node;
    node.id = ++node_id;
    node.name = n["name"].as<std::string>();
    node.pool = n["pool"].as<std::string>("default");
    node.cpus = n["cpus"].as<double>(64);
    node.memory_mb = n["memory_mb"].as<int64_t>(1'000'000);
    node.drain = n["drain"].as<bool>(false);
    node.state =
        n["state"].as<std::string>("READY") == "LOST" ? NodeState::kLost : NodeState::kReady;
    std::set<int> busy;
    if (n["busy"]) {
      for (const auto& b : n["busy"]) busy.insert(b.as<int>());
    }
    std::vector<std::string> models = ParseModels(n["gpus"]);
    for (size_t i = 0; i < models.size(); ++i) {
      Gpu gpu;
      gpu.id = node.id * 100 + static_cast<int64_t>(i);
      gpu.index = static_cast<int>(i);
      gpu.model = models[i];
      gpu.uuid = node.name + "-gpu" + std::to_string(i);
      if (busy.count(static_cast<int>(i))) gpu.job_id = 9999;
      node.gpus.push_back(gpu);
    }
    snap.all_nodes.push_back(node);
    // The store hands the scheduler only READY, undrained nodes; `offer: true`
    // passes the others too (the scheduler must still skip them).
    bool usable = node.state == NodeState::kReady && !node.drain;
    if (usable || n["offer"].as<bool>(false)) snap.nodes.push_back(node);
    NodeUsage usage;
    usage.cpus_used = n["cpus_used"].as<double>(0);
    usage.memory_mb_used = n["memory_mb_used"].as<int64_t>(0);
    if (usage.cpus_used != 0 || usage.memory_mb_used != 0) snap.usage[node.id] = usage;
  }
  int64_t job_id = 0;
  for (const auto& j : doc["jobs"]) {
    Job job;
    job.id = j["id"].as<int64_t>(job_id + 1);
    job_id = job.id;
    job.attempt = j["attempt"].as<int>(1);
    job.created_at_ms = j["created_at_ms"].as<int64_t>(job.id);
    job.spec.name = "job" + std::to_string(job.id);
    job.spec.command = {"true"};
    job.spec.tasks = j["tasks"].as<int>(1);
    job.spec.gpus_per_task = j["gpus_per_task"].as<int>(0);
    if (j["gpu_models"]) {
      for (const auto& m : j["gpu_models"]) job.spec.gpu_models.push_back(m.as<std::string>());
    }
    job.spec.cpus_per_task = j["cpus_per_task"].as<double>(1.0);
    job.spec.memory_mb_per_task = j["memory_mb_per_task"].as<int64_t>(0);
    job.spec.priority = j["priority"].as<int>(0);
    snap.pending.push_back(job);
  }
  scenario.expect = doc["expect"];
  return scenario;
}

std::vector<fs::path> ScenarioFiles() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(FERRY_SCHEDULER_SCENARIOS)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class ScenarioTest : public ::testing::TestWithParam<fs::path> {};

TEST_P(ScenarioTest, ProducesExpectedDecision) {
  Scenario scenario = LoadScenario(GetParam());
  ScheduleDecision decision = Schedule(scenario.snapshot);

  std::map<int64_t, const Placement*> placed;
  for (const auto& p : decision.placements) {
    EXPECT_TRUE(placed.emplace(p.job_id, &p).second) << "job " << p.job_id << " placed twice";
  }
  std::map<int64_t, const PendingReason*> pending;
  for (const auto& r : decision.pending) {
    EXPECT_TRUE(pending.emplace(r.job_id, &r).second) << "job " << r.job_id << " pending twice";
    EXPECT_FALSE(r.message.empty()) << "job " << r.job_id;
  }

  std::set<int64_t> expected_jobs;
  const YAML::Node& expect = scenario.expect;
  if (expect["placements"]) {
    for (const auto& e : expect["placements"]) {
      int64_t job = e["job"].as<int64_t>();
      expected_jobs.insert(job);
      auto it = placed.find(job);
      if (it == placed.end()) {
        std::string why =
            pending.count(job) ? pending[job]->reason + ": " + pending[job]->message : "absent";
        ADD_FAILURE() << "job " << job << " not placed (" << why << ")";
        continue;
      }
      const Placement& p = *it->second;
      ASSERT_EQ(p.tasks.size(), e["tasks"].size()) << "job " << job;
      for (size_t t = 0; t < p.tasks.size(); ++t) {
        const YAML::Node& et = e["tasks"][t];
        EXPECT_EQ(p.tasks[t].task, static_cast<int>(t));
        EXPECT_EQ(p.tasks[t].node, et["node"].as<std::string>()) << "job " << job << " task " << t;
        if (et["gpus"]) {
          EXPECT_EQ(p.tasks[t].gpu_indices, et["gpus"].as<std::vector<int>>())
              << "job " << job << " task " << t;
        }
      }
    }
  }
  if (expect["pending"]) {
    for (const auto& e : expect["pending"]) {
      int64_t job = e["job"].as<int64_t>();
      expected_jobs.insert(job);
      auto it = pending.find(job);
      if (it == pending.end()) {
        ADD_FAILURE() << "job " << job << " should be pending";
        continue;
      }
      EXPECT_EQ(it->second->reason, e["reason"].as<std::string>())
          << "job " << job << ": " << it->second->message;
    }
  }
  for (const auto& [job, p] : placed) {
    EXPECT_TRUE(expected_jobs.count(job)) << "job " << job << " placed but not expected";
  }
  for (const auto& [job, r] : pending) {
    EXPECT_TRUE(expected_jobs.count(job))
        << "job " << job << " pending (" << r->reason << ") but not expected";
  }
  EXPECT_EQ(placed.size() + pending.size(), scenario.snapshot.pending.size());
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ScenarioTest, ::testing::ValuesIn(ScenarioFiles()),
                         [](const ::testing::TestParamInfo<fs::path>& info) {
                           std::string name = info.param.stem().string();
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// ---- GangCouldEverFit.

Node MakeNode(int64_t id, const std::string& name, int gpus, const std::string& model,
              double cpus = 64, int64_t memory_mb = 1'000'000) {
  Node node;
  node.id = id;
  node.name = name;
  node.cpus = cpus;
  node.memory_mb = memory_mb;
  for (int i = 0; i < gpus; ++i) {
    Gpu gpu;
    gpu.id = id * 1000 + i;
    gpu.index = i;
    gpu.model = model;
    node.gpus.push_back(gpu);
  }
  return node;
}

TEST(GangCouldEverFit, CountsWholeTasksPerNode) {
  std::vector<Node> nodes = {MakeNode(1, "a", 8, "H200"), MakeNode(2, "b", 6, "H200")};
  JobSpec spec;
  spec.gpus_per_task = 4;
  spec.tasks = 3;  // a holds 2, b holds 1
  EXPECT_TRUE(GangCouldEverFit(spec, nodes));
  spec.tasks = 4;
  EXPECT_FALSE(GangCouldEverFit(spec, nodes));
  spec.tasks = 1;
  spec.gpus_per_task = 9;  // no node has 9
  EXPECT_FALSE(GangCouldEverFit(spec, nodes));
}

TEST(GangCouldEverFit, HonoursModelsCpusAndMemory) {
  std::vector<Node> nodes = {MakeNode(1, "a", 8, "A100", 16, 1000),
                             MakeNode(2, "b", 8, "H200", 4, 1000)};
  JobSpec spec;
  spec.gpus_per_task = 1;
  spec.gpu_models = {"h200"};  // models compare case-insensitively
  spec.tasks = 4;
  spec.cpus_per_task = 1;
  EXPECT_TRUE(GangCouldEverFit(spec, nodes));
  spec.tasks = 5;  // b has 8 H200 but only 4 CPUs
  EXPECT_FALSE(GangCouldEverFit(spec, nodes));
  spec.gpu_models = {"H200", "A100"};
  EXPECT_TRUE(GangCouldEverFit(spec, nodes));
  spec.memory_mb_per_task = 600;  // one task per node by memory
  EXPECT_FALSE(GangCouldEverFit(spec, nodes));
  spec.tasks = 2;
  EXPECT_TRUE(GangCouldEverFit(spec, nodes));
  spec.gpu_models = {"B200"};
  EXPECT_FALSE(GangCouldEverFit(spec, nodes));
  EXPECT_FALSE(GangCouldEverFit(spec, {}));
}

TEST(GangCouldEverFit, CpuOnlyTasks) {
  std::vector<Node> nodes = {MakeNode(1, "a", 0, "", 2, 100)};
  JobSpec spec;
  spec.tasks = 2;
  spec.cpus_per_task = 1;
  EXPECT_TRUE(GangCouldEverFit(spec, nodes));
  spec.tasks = 3;
  EXPECT_FALSE(GangCouldEverFit(spec, nodes));
  spec.cpus_per_task = 0;  // nothing required: any node holds any number
  spec.tasks = JobSpec::kMaxTasks;
  EXPECT_TRUE(GangCouldEverFit(spec, nodes));
}

// ---- Randomized invariants.

struct Invariants {
  // Checks the decision against its snapshot; returns the number of placed jobs.
  static size_t Check(const SchedulingSnapshot& snap, const ScheduleDecision& decision) {
    std::map<int64_t, const Job*> jobs;
    for (const auto& j : snap.pending) jobs[j.id] = &j;
    std::map<int64_t, const Node*> nodes;
    std::map<int64_t, std::pair<const Node*, const Gpu*>> gpus;
    for (const auto& n : snap.nodes) {
      nodes[n.id] = &n;
      for (const auto& g : n.gpus) gpus[g.id] = {&n, &g};
    }
    std::set<int64_t> seen_jobs;
    std::set<int64_t> used_gpus;
    std::map<int64_t, double> cpus;
    std::map<int64_t, int64_t> memory;
    std::map<int64_t, double> added_cpus;
    std::map<int64_t, int64_t> added_memory;
    for (const auto& [id, u] : snap.usage) {
      cpus[id] = u.cpus_used;
      memory[id] = u.memory_mb_used;
    }
    for (const auto& p : decision.placements) {
      EXPECT_TRUE(seen_jobs.insert(p.job_id).second);
      const Job* job = jobs.at(p.job_id);
      EXPECT_EQ(p.attempt, job->attempt);
      // The gang is complete: one placement per task, in order.
      EXPECT_EQ(p.tasks.size(), static_cast<size_t>(job->spec.tasks));
      for (size_t t = 0; t < p.tasks.size(); ++t) {
        const TaskPlacement& tp = p.tasks[t];
        EXPECT_EQ(tp.task, static_cast<int>(t));
        EXPECT_EQ(tp.gpu_ids.size(), static_cast<size_t>(job->spec.gpus_per_task));
        EXPECT_EQ(tp.gpu_indices.size(), tp.gpu_ids.size());
        const Node* node = nodes.at(tp.node_id);
        EXPECT_EQ(node->name, tp.node);
        cpus[node->id] += job->spec.cpus_per_task;
        memory[node->id] += job->spec.memory_mb_per_task;
        added_cpus[node->id] += job->spec.cpus_per_task;
        added_memory[node->id] += job->spec.memory_mb_per_task;
        for (size_t k = 0; k < tp.gpu_ids.size(); ++k) {
          auto [gnode, gpu] = gpus.at(tp.gpu_ids[k]);
          EXPECT_EQ(gnode, node) << "GPU on another node";
          EXPECT_EQ(gpu->index, tp.gpu_indices[k]);
          EXPECT_FALSE(gpu->job_id.has_value()) << "GPU already allocated";
          EXPECT_TRUE(used_gpus.insert(gpu->id).second) << "GPU " << gpu->id << " double-booked";
          if (!job->spec.gpu_models.empty()) {
            EXPECT_NE(
                std::find(job->spec.gpu_models.begin(), job->spec.gpu_models.end(), gpu->model),
                job->spec.gpu_models.end());
          }
        }
      }
    }
    for (const auto& [id, node] : nodes) {
      // Usage may already exceed a node (the generator allows it); what the
      // decision adds must fit what was left.
      if (added_cpus[id] > 0) {
        EXPECT_LE(cpus[id], node->cpus + 1e-6) << node->name;
      }
      if (added_memory[id] > 0) {
        EXPECT_LE(memory[id], node->memory_mb) << node->name;
      }
    }
    for (const auto& r : decision.pending) {
      EXPECT_TRUE(seen_jobs.insert(r.job_id).second) << "job " << r.job_id << " twice";
      const Job* job = jobs.at(r.job_id);
      bool ever = GangCouldEverFit(job->spec, snap.all_nodes);
      if (ever) {
        EXPECT_TRUE(r.reason == reason::kNoCapacity || r.reason == reason::kGangIncomplete)
            << r.reason;
      } else {
        EXPECT_EQ(r.reason, reason::kUnsatisfiable);
      }
    }
    EXPECT_EQ(seen_jobs.size(), jobs.size());
    return decision.placements.size();
  }
};

SchedulingSnapshot RandomSnapshot(std::mt19937_64& rng, int nodes, int jobs) {
  const std::vector<std::string> models = {"H200", "H100", "A100"};
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  SchedulingSnapshot snap;
  for (int n = 0; n < nodes; ++n) {
    Node node = MakeNode(n + 1, "n" + std::to_string(n), pick(0, 8), models[pick(0, 2)],
                         pick(1, 32), pick(1, 64) * 1024);
    if (pick(0, 3) == 0 && node.gpus.size() > 1) node.gpus.back().model = models[pick(0, 2)];
    for (auto& g : node.gpus) {
      if (pick(0, 4) == 0) g.job_id = 9999;
    }
    if (pick(0, 2) == 0) {
      snap.usage[node.id] = {static_cast<double>(pick(0, static_cast<int>(node.cpus))),
                             pick(0, 8) * 1024};
    }
    snap.all_nodes.push_back(node);
    if (pick(0, 9) != 0) snap.nodes.push_back(node);  // some are drained or lost
  }
  for (int j = 0; j < jobs; ++j) {
    Job job;
    job.id = j + 1;
    job.attempt = pick(1, 3);
    job.created_at_ms = pick(0, 1000);
    job.spec.tasks = pick(1, 6);
    job.spec.gpus_per_task = pick(0, 8);
    if (pick(0, 1)) job.spec.gpu_models.push_back(models[pick(0, 2)]);
    if (pick(0, 3) == 0) job.spec.gpu_models.push_back(models[pick(0, 2)]);
    job.spec.cpus_per_task = pick(0, 8) / 2.0;
    job.spec.memory_mb_per_task = pick(0, 3) * 4096;
    job.spec.priority = pick(-2, 2);
    snap.pending.push_back(job);
  }
  return snap;
}

TEST(SchedulerProperty, RandomFleetsKeepInvariants) {
  std::mt19937_64 rng(20261129);
  size_t placed = 0;
  size_t total = 0;
  for (int round = 0; round < 300; ++round) {
    SchedulingSnapshot snap = RandomSnapshot(rng, 1 + round % 20, 1 + round % 40);
    ScheduleDecision decision = Schedule(snap);
    placed += Invariants::Check(snap, decision);
    total += snap.pending.size();
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "round " << round;
      return;
    }
  }
  // The generator must exercise both outcomes.
  EXPECT_GT(placed, 0u);
  EXPECT_LT(placed, total);
}

TEST(SchedulerProperty, PriorityWinsContestedCapacity) {
  // One free GPU, many one-GPU jobs: the highest priority, then the oldest, gets it.
  SchedulingSnapshot snap;
  snap.nodes.push_back(MakeNode(1, "a", 1, "H200"));
  snap.all_nodes = snap.nodes;
  std::mt19937_64 rng(7);
  for (int j = 0; j < 50; ++j) {
    Job job;
    job.id = j + 1;
    job.created_at_ms = std::uniform_int_distribution<int>(0, 100)(rng);
    job.spec.gpus_per_task = 1;
    job.spec.priority = std::uniform_int_distribution<int>(-5, 5)(rng);
    snap.pending.push_back(job);
  }
  const Job* best = &snap.pending[0];
  for (const auto& j : snap.pending) {
    if (j.spec.priority > best->spec.priority ||
        (j.spec.priority == best->spec.priority && j.created_at_ms < best->created_at_ms)) {
      best = &j;
    }
  }
  ScheduleDecision decision = Schedule(snap);
  ASSERT_EQ(decision.placements.size(), 1u);
  EXPECT_EQ(decision.placements[0].job_id, best->id);
  for (const auto& r : decision.pending) EXPECT_EQ(r.reason, reason::kNoCapacity);
}

// A fleet-sized decision: 10,000 nodes of 8 GPUs, half of them busy, and
// 5,000 pending jobs of mixed shapes. Asserts the invariants; the time is
// printed for the record, not asserted.
TEST(SchedulerScale, TenThousandNodes) {
  std::mt19937_64 rng(1);
  const std::vector<std::string> models = {"H200", "H100"};
  SchedulingSnapshot snap;
  for (int n = 0; n < 10'000; ++n) {
    Node node = MakeNode(n + 1, "node-" + std::to_string(n), 8, models[n % 2], 128, 2'000'000);
    for (auto& g : node.gpus) {
      if (std::uniform_int_distribution<int>(0, 1)(rng)) g.job_id = 1'000'000;
    }
    snap.nodes.push_back(std::move(node));
  }
  snap.all_nodes = snap.nodes;
  const int shapes[][2] = {{1, 1}, {1, 2}, {1, 4}, {2, 4}, {4, 8}, {16, 8}, {1, 3}};
  for (int j = 0; j < 5'000; ++j) {
    Job job;
    job.id = j + 1;
    job.created_at_ms = j;
    const auto& shape = shapes[j % 7];
    job.spec.tasks = shape[0];
    job.spec.gpus_per_task = shape[1];
    if (j % 3 == 0) job.spec.gpu_models = {models[j % 2]};
    job.spec.priority = j % 5;
    snap.pending.push_back(std::move(job));
  }
  auto start = std::chrono::steady_clock::now();
  ScheduleDecision decision = Schedule(snap);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("scheduler: 10000 nodes x 8 GPUs, 5000 pending: %zu placed, %zu pending in %.1f ms\n",
              decision.placements.size(), decision.pending.size(), ms);
  size_t placed = Invariants::Check(snap, decision);
  EXPECT_GT(placed, 1000u);
  EXPECT_EQ(decision.placements.size() + decision.pending.size(), 5'000u);
}

}  // namespace
}  // namespace ferry::fleet
