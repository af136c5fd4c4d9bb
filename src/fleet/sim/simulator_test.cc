// The simulator with the real scheduling core: hand-computed scenarios,
// preemption, spot interruptions, cloud provisioning, timeouts, determinism.
#include "fleet/sim/simulator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fleet/sim/report.h"
#include "testing/test_util.h"

namespace ferry::fleet::sim {
namespace {

sched::PoolConfig OnPrem(const std::string& name, int nodes, int gpus, double price) {
  sched::PoolConfig pool;
  pool.name = name;
  pool.nodes = nodes;
  pool.node.gpus = gpus;
  pool.price_per_gpu_hour = price;
  return pool;
}

sched::PoolConfig Cloud(const std::string& name, int gpus, double price, double delay_s,
                        int max_nodes, bool spot = false) {
  sched::PoolConfig pool;
  pool.name = name;
  pool.cloud = true;
  pool.provider = "local";
  pool.spot = spot;
  pool.node.gpus = gpus;
  pool.price_per_gpu_hour = price;
  pool.provisioning_delay_s = delay_s;
  pool.max_nodes = max_nodes;
  pool.idle_timeout_s = 60;
  return pool;
}

sched::ProviderConfig Provider(double spot_interruptions_per_hour) {
  sched::ProviderConfig provider;
  provider.name = "local";
  provider.spot_interruptions_per_hour = spot_interruptions_per_hour;
  return provider;
}

// A Slurm cluster's pool: `nodes` permanent nodes, jobs run `queue_delay_s`
// after their placement. Its provider (type slurm) is never contacted.
sched::PoolConfig Slurm(const std::string& name, int nodes, int gpus, double price,
                        double queue_delay_s) {
  sched::PoolConfig pool = OnPrem(name, nodes, gpus, price);
  pool.provider = "hpc";
  pool.slurm.emplace();
  pool.slurm->partition = "gpu";
  pool.queue_delay_s = queue_delay_s;
  return pool;
}

sched::ProviderConfig SlurmProvider() {
  sched::ProviderConfig provider;
  provider.name = "hpc";
  provider.type = "slurm";
  provider.params["url"] = "http://slurm.invalid:6820";
  return provider;
}

TraceJob Job(const std::string& id, double submit_s, double duration_s, int tasks, int gpus,
             const std::string& tenant = "t") {
  TraceJob job;
  job.id = id;
  job.tenant = tenant;
  job.submit_s = submit_s;
  job.duration_s = duration_s;
  job.tasks = tasks;
  job.gpus_per_task = gpus;
  return job;
}

SimOptions Instant() {
  SimOptions options;
  options.cycle_s = 0;  // a cycle at every instant something changed
  return options;
}

// 2 nodes × 2 GPUs at $1/GPU-hour, FIFO:
//   j1 t=0  1×2 GPUs 100 s  → [0, 100]
//   j2 t=0  1×2 GPUs  50 s  → [0, 50]
//   j3 t=10 1×2 GPUs  30 s  → waits for j2: [50, 80]
//   j4 t=20 2×2 GPUs  20 s  → needs both nodes: [100, 120]
TEST(Simulator, TinyScenarioByHand) {
  sched::Config config;
  config.pools = {OnPrem("rack", 2, 2, 1.0)};
  std::vector<TraceJob> trace = {Job("j1", 0, 100, 1, 2), Job("j2", 0, 50, 1, 2),
                                 Job("j3", 10, 30, 1, 2), Job("j4", 20, 20, 2, 2)};
  ASSERT_OK_AND_ASSIGN(SimResult result, Simulate(config, trace, Instant()));
  ASSERT_EQ(result.jobs.size(), 4u);
  const double starts[] = {0, 0, 50, 100};
  const double ends[] = {100, 50, 80, 120};
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(trace[i].id);
    EXPECT_EQ(result.jobs[i].end, JobEnd::kCompleted);
    EXPECT_DOUBLE_EQ(result.jobs[i].first_start_s, starts[i]);
    EXPECT_DOUBLE_EQ(result.jobs[i].end_s, ends[i]);
    EXPECT_EQ(result.jobs[i].attempts, 1);
  }
  EXPECT_EQ(result.conflicts, 0);
  EXPECT_FALSE(result.stopped_early);

  RunMetrics m = ComputeMetrics(result, "fifo");
  EXPECT_DOUBLE_EQ(m.avg_jct_s, (100 + 50 + 70 + 100) / 4.0);
  EXPECT_DOUBLE_EQ(m.p99_jct_s, 100);
  EXPECT_DOUBLE_EQ(m.avg_queue_s, (0 + 0 + 40 + 80) / 4.0);
  EXPECT_DOUBLE_EQ(m.makespan_s, 120);
  // Busy: 2·100 + 2·50 + 2·30 + 4·20 = 440 GPU-s of 4·120 = 480.
  EXPECT_DOUBLE_EQ(m.util_onprem, 440.0 / 480.0);
  EXPECT_DOUBLE_EQ(m.util_cloud, 0);
  EXPECT_NEAR(m.cost_onprem, 4 * 1.0 * 120 / 3600.0, 1e-12);
  EXPECT_DOUBLE_EQ(m.cost_cloud, 0);
  EXPECT_DOUBLE_EQ(m.jain, 1.0);  // one tenant
  EXPECT_EQ(m.completed, 4);

  // The timeline: 4 GPUs throughout; all busy at t=0, 2 pending after t=20.
  ASSERT_FALSE(result.timeline.empty());
  for (const TimePoint& p : result.timeline) {
    EXPECT_EQ(p.onprem_gpus, 4);
    EXPECT_LE(p.onprem_busy, 4);
    EXPECT_GE(p.onprem_busy, 0);
  }
  EXPECT_EQ(result.timeline.back().onprem_busy, 0);
  EXPECT_DOUBLE_EQ(result.timeline.back().t, 120);
}

// Share-based fairness by hand: 2 GPUs, tenant a asks for two 1-GPU jobs and
// b for one, all at t=0 for 100 s. Max-min fair: one GPU each while both ask.
TEST(Simulator, FairShareIndexByHand) {
  sched::Config config;
  config.pools = {OnPrem("rack", 1, 2, 1.0)};
  std::vector<TraceJob> trace = {Job("a1", 0, 100, 1, 1, "a"), Job("a2", 0, 100, 1, 1, "a"),
                                 Job("b1", 0, 100, 1, 1, "b")};
  // FIFO (by job order at equal age) runs a1 and a2 first: a holds 200 GPU-s
  // against 100 entitled; b holds 100 against 200 (1 of 2 GPUs during [0, 100],
  // then 1 of 1 asked during [100, 200]).
  ASSERT_OK_AND_ASSIGN(SimResult fifo, Simulate(config, trace, Instant()));
  ASSERT_EQ(fifo.tenants.size(), 2u);
  EXPECT_DOUBLE_EQ(fifo.tenants[0].held_gpu_s, 200);
  EXPECT_DOUBLE_EQ(fifo.tenants[0].entitled_gpu_s, 100);
  EXPECT_DOUBLE_EQ(fifo.tenants[0].demand_gpu_s, 200);
  EXPECT_DOUBLE_EQ(fifo.tenants[1].held_gpu_s, 100);
  EXPECT_DOUBLE_EQ(fifo.tenants[1].entitled_gpu_s, 200);
  EXPECT_DOUBLE_EQ(ComputeMetrics(fifo, "fifo").jain, 2.5 * 2.5 / (2 * (4 + 0.25)));

  // Fair share runs a1 and b1 first: each tenant gets exactly its share.
  config.ordering = sched::Ordering::kFairShare;
  ASSERT_OK_AND_ASSIGN(SimResult fair, Simulate(config, trace, Instant()));
  EXPECT_DOUBLE_EQ(fair.jobs[2].first_start_s, 0);
  EXPECT_DOUBLE_EQ(fair.tenants[0].held_gpu_s, 200);
  EXPECT_DOUBLE_EQ(fair.tenants[0].entitled_gpu_s, 200);
  EXPECT_DOUBLE_EQ(fair.tenants[1].held_gpu_s, 100);
  EXPECT_DOUBLE_EQ(fair.tenants[1].entitled_gpu_s, 100);
  EXPECT_DOUBLE_EQ(ComputeMetrics(fair, "fair").jain, 1.0);

  // Weights count: with b weighing 3, b is entitled to 1.5 GPUs but asks for 1.
  config.shares = {{"b", 3}};
  ASSERT_OK_AND_ASSIGN(SimResult weighted, Simulate(config, trace, Instant()));
  EXPECT_DOUBLE_EQ(weighted.tenants[1].weight, 3);
  EXPECT_DOUBLE_EQ(weighted.tenants[1].entitled_gpu_s, 100);
}

// A high-priority job preempts a preemptible one; the victim gets its grace
// period, is requeued with its submission time and runs again from zero.
TEST(Simulator, PreemptionRequeuesTheVictim) {
  sched::Config config;
  config.pools = {OnPrem("rack", 1, 2, 1.0)};
  config.preemption.grace_s = 5;
  TraceJob low = Job("low", 0, 100, 1, 2);
  low.preemptible = true;
  TraceJob high = Job("high", 10, 30, 1, 2);
  high.priority = 10;
  std::vector<TraceJob> trace = {low, high};

  ASSERT_OK_AND_ASSIGN(SimResult restart, Simulate(config, trace, Instant()));
  EXPECT_EQ(restart.preemptions, 1);
  const JobOutcome& victim = restart.jobs[0];
  EXPECT_EQ(victim.end, JobEnd::kCompleted);
  EXPECT_EQ(victim.attempts, 2);
  EXPECT_EQ(victim.preemptions, 1);
  EXPECT_DOUBLE_EQ(victim.first_start_s, 0);
  // Signalled at 10, killed at 15; high runs [15, 45]; low restarts at 45 for 100 s.
  EXPECT_DOUBLE_EQ(restart.jobs[1].first_start_s, 15);
  EXPECT_DOUBLE_EQ(restart.jobs[1].end_s, 45);
  EXPECT_DOUBLE_EQ(victim.last_start_s, 45);
  EXPECT_DOUBLE_EQ(victim.end_s, 145);
  EXPECT_DOUBLE_EQ(victim.gpu_seconds, 2 * (15 + 100));  // the lost work counts
  RunMetrics m = ComputeMetrics(restart, "x");
  EXPECT_EQ(m.preemptions, 1);
  EXPECT_DOUBLE_EQ(m.avg_jct_s, (145 + 35) / 2.0);  // the victim keeps its submit time

  // With checkpointing it resumes: 15 s done, 85 s left.
  SimOptions options = Instant();
  options.checkpoint = true;
  ASSERT_OK_AND_ASSIGN(SimResult resume, Simulate(config, trace, options));
  EXPECT_DOUBLE_EQ(resume.jobs[0].end_s, 130);
  EXPECT_EQ(resume.jobs[0].attempts, 2);
}

sched::Config SpotOnly(double interruptions_per_hour) {
  sched::Config config;
  config.pools = {Cloud("spot", 8, 1.0, 30, 4, true)};
  config.default_scoring = sched::Scoring::kCost;
  config.providers = {Provider(interruptions_per_hour)};
  return config;
}

// Spot nodes are taken back at random; the job on one is requeued, gets a new
// node and still completes.
TEST(Simulator, SpotInterruptionRequeuesAndCompletes) {
  TraceJob job = Job("train", 0, 1800, 1, 8);
  job.preemptible = true;
  std::vector<TraceJob> trace = {job};
  int interrupted_seeds = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(seed);
    SimOptions options = Instant();
    options.seed = seed;
    options.checkpoint = true;  // progress is kept, so the job finishes even at a high rate
    ASSERT_OK_AND_ASSIGN(SimResult result, Simulate(SpotOnly(4), trace, options));
    const JobOutcome& outcome = result.jobs[0];
    ASSERT_EQ(outcome.end, JobEnd::kCompleted);
    EXPECT_EQ(outcome.interruptions, result.interrupted_jobs);
    EXPECT_EQ(outcome.attempts, outcome.interruptions + 1);
    EXPECT_GE(result.spot_interruptions, outcome.interruptions);
    EXPECT_EQ(result.pools[0].nodes_provisioned, outcome.attempts);
    // Each attempt waits 30 s for its node; 1800 s of work in all.
    EXPECT_NEAR(outcome.end_s, 30.0 * outcome.attempts + 1800, 1e-6 + 30.0 * outcome.attempts);
    EXPECT_GE(outcome.end_s, 30.0 * outcome.attempts + 1800 - 1e-6);
    interrupted_seeds += outcome.interruptions > 0;
  }
  // At 4 interruptions an hour, most 30-minute runs are hit at least once.
  EXPECT_GE(interrupted_seeds, 3);

  // Without interruptions nothing is lost.
  ASSERT_OK_AND_ASSIGN(SimResult calm, Simulate(SpotOnly(0), trace, Instant()));
  EXPECT_EQ(calm.spot_interruptions, 0);
  EXPECT_DOUBLE_EQ(calm.jobs[0].end_s, 30 + 1800);
}

// Cloud capacity appears only after the provisioning delay, is billed from the
// request, and idle nodes go away.
TEST(Simulator, CloudProvisioningDelayRespected) {
  sched::Config config;
  config.pools = {OnPrem("rack", 1, 8, 1.0), Cloud("od", 8, 3.0, 120, 2)};
  config.providers = {Provider(0)};
  config.burst.min_pending_s = 0;
  // The rack is busy with a long job; the second job bursts to the cloud.
  std::vector<TraceJob> trace = {Job("long", 0, 1000, 1, 8), Job("burst", 10, 100, 1, 8)};
  ASSERT_OK_AND_ASSIGN(SimResult result, Simulate(config, trace, Instant()));
  const JobOutcome& burst = result.jobs[1];
  ASSERT_EQ(burst.end, JobEnd::kCompleted);
  EXPECT_TRUE(burst.cloud);
  EXPECT_EQ(burst.pool, "od");
  EXPECT_DOUBLE_EQ(burst.first_start_s, 130);  // requested at 10, READY at 130
  EXPECT_DOUBLE_EQ(burst.end_s, 230);
  EXPECT_EQ(result.pools[1].nodes_provisioned, 1);
  EXPECT_EQ(result.pools[1].nodes_removed, 1);  // scaled down after its idle timeout
  // Billed from the request (10) to the scale-down (230 + 60 s idle, at the next cycle).
  EXPECT_GE(result.pools[1].billed_node_s, 280 - 1e-6);
  EXPECT_LE(result.pools[1].billed_node_s, 280 + 1);
  EXPECT_NEAR(result.pools[1].busy_gpu_s, 800, 1e-6);
  RunMetrics m = ComputeMetrics(result, "burst");
  EXPECT_NEAR(m.cost_cloud, result.pools[1].billed_node_s * 8 * 3.0 / 3600, 1e-9);
  EXPECT_GT(m.util_cloud, 0);
  EXPECT_LE(m.util_cloud, 1);

  // No cloud node at all when bursting is off: the job waits for the rack.
  config.burst.enabled = false;
  ASSERT_OK_AND_ASSIGN(SimResult local, Simulate(config, trace, Instant()));
  EXPECT_DOUBLE_EQ(local.jobs[1].first_start_s, 1000);
  EXPECT_EQ(local.pools[1].nodes_provisioned, 0);
}

// A Slurm pool of one 8-GPU node with a 120 s queue:
//   j1 t=0  8 GPUs 100 s → placed at 0, runs [120, 220]
//   j2 t=0  8 GPUs  50 s → placed at 220 when j1 frees the node, runs [340, 390]
// The GPUs are held (and counted busy) from the placement.
TEST(Simulator, SlurmQueueDelayStartsTheRunLater) {
  sched::Config config;
  config.pools = {Slurm("hpc", 1, 8, 1.0, 120)};
  config.providers = {SlurmProvider()};
  std::vector<TraceJob> trace = {Job("j1", 0, 100, 1, 8), Job("j2", 0, 50, 1, 8)};
  ASSERT_OK_AND_ASSIGN(SimResult result, Simulate(config, trace, Instant()));
  ASSERT_EQ(result.jobs[0].end, JobEnd::kCompleted);
  ASSERT_EQ(result.jobs[1].end, JobEnd::kCompleted);
  EXPECT_DOUBLE_EQ(result.jobs[0].last_placed_s, 0);
  EXPECT_DOUBLE_EQ(result.jobs[0].first_start_s, 120);
  EXPECT_DOUBLE_EQ(result.jobs[0].end_s, 220);
  EXPECT_DOUBLE_EQ(result.jobs[1].last_placed_s, 220);
  EXPECT_DOUBLE_EQ(result.jobs[1].first_start_s, 340);
  EXPECT_DOUBLE_EQ(result.jobs[1].end_s, 390);
  EXPECT_EQ(result.jobs[0].pool, "hpc");
  EXPECT_FALSE(result.jobs[0].cloud);
  EXPECT_DOUBLE_EQ(result.jobs[0].gpu_seconds, 8 * 220);
  EXPECT_DOUBLE_EQ(result.jobs[1].gpu_seconds, 8 * 170);
  EXPECT_EQ(result.conflicts, 0);

  ASSERT_EQ(result.pools.size(), 1u);
  EXPECT_TRUE(result.pools[0].slurm);
  EXPECT_EQ(PoolKind(result.pools[0]), "slurm");
  EXPECT_EQ(result.pools[0].attempts, 2);
  EXPECT_DOUBLE_EQ(result.pools[0].busy_gpu_s, 8 * 390);
  RunMetrics m = ComputeMetrics(result, "slurm");
  EXPECT_DOUBLE_EQ(m.avg_queue_s, (120 + 340) / 2.0);  // waits count until the run starts
  EXPECT_DOUBLE_EQ(m.util_onprem, 1.0);                // a Slurm pool is on-prem capacity
  const std::string pools = FormatPoolsCsv(result);
  EXPECT_NE(pools.find("\nhpc,slurm,1,8,120,1,0,0,"), std::string::npos) << pools;
}

// Latency scoring: a free Slurm node behind a 300 s queue loses to a cloud
// node ready in 60 s; behind a 10 s queue it wins. Cost scoring keeps the job
// on the cheaper Slurm pool whatever its queue.
TEST(Simulator, SlurmQueueVersusCloudBurst) {
  auto run = [](double queue_delay_s, sched::Scoring scoring) {
    sched::Config config;
    config.pools = {Slurm("hpc", 1, 8, 1.0, queue_delay_s), Cloud("fast", 8, 4.0, 60, 2)};
    config.providers = {SlurmProvider(), Provider(0)};
    config.default_scoring = scoring;
    std::vector<TraceJob> trace = {Job("j", 0, 100, 1, 8)};
    auto result = Simulate(config, trace, Instant());
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    return result.ok() ? result->jobs[0] : JobOutcome{};
  };
  const JobOutcome slow = run(300, sched::Scoring::kLatency);
  EXPECT_EQ(slow.pool, "fast");
  EXPECT_TRUE(slow.cloud);
  EXPECT_DOUBLE_EQ(slow.first_start_s, 60);
  EXPECT_DOUBLE_EQ(slow.end_s, 160);

  const JobOutcome quick = run(10, sched::Scoring::kLatency);
  EXPECT_EQ(quick.pool, "hpc");
  EXPECT_FALSE(quick.cloud);
  EXPECT_DOUBLE_EQ(quick.first_start_s, 10);
  EXPECT_DOUBLE_EQ(quick.end_s, 110);

  const JobOutcome cheap = run(300, sched::Scoring::kCost);
  EXPECT_EQ(cheap.pool, "hpc");
  EXPECT_DOUBLE_EQ(cheap.first_start_s, 300);
  EXPECT_DOUBLE_EQ(cheap.end_s, 400);
}

TEST(Simulator, MaxRuntimeKillsAndFails) {
  sched::Config config;
  config.pools = {OnPrem("rack", 1, 4, 1.0)};
  TraceJob job = Job("slow", 0, 100, 1, 1);
  job.max_runtime_s = 40;
  std::vector<TraceJob> trace = {job, Job("ok", 0, 10, 1, 1)};
  ASSERT_OK_AND_ASSIGN(SimResult result, Simulate(config, trace, Instant()));
  EXPECT_EQ(result.jobs[0].end, JobEnd::kTimedOut);
  EXPECT_DOUBLE_EQ(result.jobs[0].end_s, 40);
  EXPECT_EQ(result.jobs[1].end, JobEnd::kCompleted);
  RunMetrics m = ComputeMetrics(result, "x");
  EXPECT_EQ(m.timed_out, 1);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.completed, 1);
  EXPECT_DOUBLE_EQ(m.makespan_s, 40);
}

TEST(Simulator, QuotaRejectsAndUnsatisfiableStops) {
  sched::Config config;
  config.pools = {OnPrem("rack", 1, 4, 1.0)};
  sched::QuotaConfig quota;
  quota.path = "small";
  quota.nominal_gpus = 2;
  quota.borrowing_limit = 0;
  config.quotas = {quota};
  std::vector<TraceJob> trace = {Job("too-big-for-quota", 0, 10, 1, 3, "small"),
                                 Job("too-big-for-cluster", 0, 10, 2, 4, "other"),
                                 Job("fine", 5, 10, 1, 1, "other")};
  ASSERT_OK_AND_ASSIGN(SimResult result, Simulate(config, trace, Instant()));
  EXPECT_EQ(result.jobs[0].end, JobEnd::kRejected);
  EXPECT_FALSE(result.jobs[0].pending_reason.empty());
  EXPECT_EQ(result.jobs[1].end, JobEnd::kUnfinished);
  EXPECT_EQ(result.jobs[1].pending_reason, reason::kUnsatisfiable);
  EXPECT_EQ(result.jobs[2].end, JobEnd::kCompleted);
  EXPECT_TRUE(result.stopped_early);
  RunMetrics m = ComputeMetrics(result, "x");
  EXPECT_EQ(m.rejected, 1);
  EXPECT_EQ(m.unfinished, 1);
}

TEST(Simulator, MaxTimeStopsTheRun) {
  sched::Config config;
  config.pools = {OnPrem("rack", 1, 1, 1.0)};
  std::vector<TraceJob> trace = {Job("a", 0, 100, 1, 1), Job("b", 0, 100, 1, 1)};
  SimOptions options = Instant();
  options.max_time_s = 150;
  ASSERT_OK_AND_ASSIGN(SimResult result, Simulate(config, trace, options));
  EXPECT_TRUE(result.stopped_early);
  EXPECT_DOUBLE_EQ(result.end_s, 150);
  int completed = 0, unfinished = 0;
  for (const auto& job : result.jobs) {
    completed += job.end == JobEnd::kCompleted;
    unfinished += job.end == JobEnd::kUnfinished;
  }
  EXPECT_EQ(completed, 1);
  EXPECT_EQ(unfinished, 1);
  // The running job's GPU time so far is counted: 1 GPU busy all 150 s.
  EXPECT_DOUBLE_EQ(ComputeMetrics(result, "x").util_onprem, 1.0);
}

std::vector<TraceJob> Workload(int jobs, uint64_t seed) {
  SyntheticOptions options;
  options.jobs = jobs;
  options.arrival_rate_per_s = 1.0 / 20;
  options.tenants = {{"a", 1, {}}, {"b", 1, {}}, {"c", 1, {}}};
  options.gang_sizes = {{1, 0.7}, {2, 0.2}, {4, 0.1}};
  options.gpus_per_task = {{1, 0.5}, {4, 0.3}, {8, 0.2}};
  options.duration_median_s = 1200;
  options.duration_sigma = 1;
  options.priorities = {{0, 0.8}, {10, 0.2}};
  options.preemptible_fraction = 0.5;
  options.seed = seed;
  auto generated = GenerateSynthetic(options);
  return generated.ok() ? *generated : std::vector<TraceJob>{};
}

sched::Config Mixed() {
  sched::Config config;
  config.ordering = sched::Ordering::kFairShare;
  config.default_scoring = sched::Scoring::kCost;
  config.pools = {OnPrem("rack", 8, 8, 1.0), Cloud("od", 8, 3.0, 60, 4),
                  Cloud("spot", 8, 1.2, 90, 4, true)};
  config.providers = {Provider(1)};
  config.burst.min_pending_s = 120;
  return config;
}

TEST(Simulator, SameSeedSameReport) {
  const std::vector<TraceJob> trace = Workload(60, 3);
  ASSERT_EQ(trace.size(), 60u);
  SimOptions options;
  options.cycle_s = 30;
  options.seed = 9;
  ASSERT_OK_AND_ASSIGN(SimResult first, Simulate(Mixed(), trace, options));
  ASSERT_OK_AND_ASSIGN(SimResult second, Simulate(Mixed(), trace, options));
  EXPECT_EQ(FormatJobsCsv(first), FormatJobsCsv(second));
  EXPECT_EQ(FormatTimelineCsv(first), FormatTimelineCsv(second));
  RunMetrics a = ComputeMetrics(first, "x"), b = ComputeMetrics(second, "x");
  a.wall_s = b.wall_s = a.core_ms_avg = b.core_ms_avg = a.core_ms_max = b.core_ms_max = 0;
  EXPECT_EQ(FormatRunsCsv({a}), FormatRunsCsv({b}));
  EXPECT_EQ(first.conflicts, 0);
  EXPECT_EQ(a.completed + a.failed + a.unfinished, 60);
  EXPECT_EQ(a.unfinished, 0);
}

// Invariants over a busier run: capacity never exceeded, every job accounted
// for, utilisation and fairness in range, and periodic cycles agree on totals.
TEST(Simulator, InvariantsOnAMixedWorkload) {
  const std::vector<TraceJob> trace = Workload(80, 5);
  for (CycleMode mode : {CycleMode::kOnChange, CycleMode::kPeriodic}) {
    SCOPED_TRACE(mode == CycleMode::kPeriodic ? "periodic" : "on change");
    SimOptions options;
    options.cycle_s = mode == CycleMode::kPeriodic ? 60 : 15;
    options.cycle_mode = mode;
    ASSERT_OK_AND_ASSIGN(SimResult result, Simulate(Mixed(), trace, options));
    EXPECT_EQ(result.conflicts, 0);
    for (const TimePoint& p : result.timeline) {
      ASSERT_LE(p.onprem_busy, p.onprem_gpus);
      ASSERT_LE(p.cloud_busy, p.cloud_gpus);
      ASSERT_GE(p.cloud_gpus, 0);
      ASSERT_LE(p.cloud_gpus, 8 * 8);
    }
    for (const JobOutcome& job : result.jobs) {
      ASSERT_NE(job.end, JobEnd::kUnfinished) << job.job->id << " " << job.pending_reason;
      if (job.end == JobEnd::kCompleted) {
        ASSERT_GE(job.first_start_s, job.job->submit_s);
        ASSERT_GE(job.end_s, job.last_start_s + job.job->duration_s - 1e-6);
      }
    }
    RunMetrics m = ComputeMetrics(result, "x");
    EXPECT_GT(m.util_onprem, 0);
    EXPECT_LE(m.util_onprem, 1 + 1e-9);
    EXPECT_LE(m.util_cloud, 1 + 1e-9);
    EXPECT_GT(m.jain, 1.0 / 3 - 1e-9);
    EXPECT_LE(m.jain, 1 + 1e-9);
    EXPECT_GT(m.cycles, 0);
  }
}

TEST(Simulator, RefusesBadInput) {
  sched::Config config;
  config.pools = {OnPrem("rack", 1, 1, 1.0)};
  SimOptions options;
  options.cycle_s = -1;
  EXPECT_FALSE(Simulate(config, {}, options).ok());
  options.cycle_s = 0;
  options.cycle_mode = CycleMode::kPeriodic;
  EXPECT_FALSE(Simulate(config, {}, options).ok());
  TraceJob bad = Job("x", 0, 10, 0, 1);  // tasks must be >= 1
  auto refused = Simulate(config, {bad}, Instant());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tasks"), std::string::npos);
  config.pools[0].price_per_gpu_hour = -1;  // the core's Validate refuses it
  EXPECT_FALSE(Simulate(config, {}, Instant()).ok());
  // An empty trace is a valid, empty run.
  config.pools[0].price_per_gpu_hour = 1;
  ASSERT_OK_AND_ASSIGN(SimResult empty, Simulate(config, {}, Instant()));
  EXPECT_TRUE(empty.jobs.empty());
  EXPECT_DOUBLE_EQ(empty.end_s, 0);
}

// ---- Staging of job inputs. Data sets a = 100 GB, b = 50 GB; 8 Gbit/s per
// node = 1 GB/s, so a takes 100 s to fetch and b 50 s.

TraceJob WithData(TraceJob job, std::vector<std::string> datasets) {
  job.datasets = std::move(datasets);
  return job;
}

sched::Config StagingCluster(int nodes, int gpus) {
  sched::Config config;
  config.pools = {OnPrem("rack", nodes, gpus, 1.0)};
  config.datasets = {{"a", 100}, {"b", 50}};
  return config;
}

SimOptions WithStaging(Staging policy, double cache_gb = 2000) {
  SimOptions options = Instant();
  options.staging.policy = policy;
  options.staging.gbps = 8;
  options.staging.cache_gb = cache_gb;
  return options;
}

TEST(SimulatorStaging, ParseAndPrint) {
  for (Staging s :
       {Staging::kOff, Staging::kStartThenFetch, Staging::kStageOnAdmit, Staging::kPrefetch}) {
    EXPECT_EQ(ParseStaging(ToString(s)), s);
  }
  EXPECT_FALSE(ParseStaging("eager"));
  SimOptions bad = WithStaging(Staging::kPrefetch);
  bad.staging.gbps = 0;
  EXPECT_FALSE(Simulate(StagingCluster(1, 2), {Job("j", 0, 1, 1, 1)}, bad).ok());
}

// One node, 2 GPUs; j1 and j2 both read a and each need the whole node:
//   stage-on-admit: j1 placed 0, fetches a [0, 100], runs [100, 200]; j2 placed
//     200, a is cached: runs [200, 250]. Idle staging: 100 s × 2 GPUs = 200 GPU-s.
//   start-then-fetch: no cache: j1 [0, 200], j2 fetches again [200, 300], runs
//     [300, 350]. Idle: 2 × 100 s × 2 GPUs = 400 GPU-s.
TEST(SimulatorStaging, SharedDataSetIsFetchedOnceWithTheCache) {
  const sched::Config config = StagingCluster(1, 2);
  const std::vector<TraceJob> trace = {WithData(Job("j1", 0, 100, 1, 2), {"a"}),
                                       WithData(Job("j2", 0, 50, 1, 2), {"a"})};
  ASSERT_OK_AND_ASSIGN(SimResult admit,
                       Simulate(config, trace, WithStaging(Staging::kStageOnAdmit)));
  EXPECT_EQ(admit.staging, Staging::kStageOnAdmit);
  EXPECT_DOUBLE_EQ(admit.jobs[0].first_start_s, 0);  // start = GPUs handed over
  EXPECT_DOUBLE_EQ(admit.jobs[0].end_s, 200);
  EXPECT_DOUBLE_EQ(admit.jobs[0].staging_s, 100);
  EXPECT_DOUBLE_EQ(admit.jobs[0].staging_gpu_s, 200);
  EXPECT_DOUBLE_EQ(admit.jobs[0].fetched_gb, 100);
  EXPECT_DOUBLE_EQ(admit.jobs[0].gpu_seconds, 400);  // (100 staging + 100 run) × 2
  EXPECT_DOUBLE_EQ(admit.jobs[1].first_start_s, 200);
  EXPECT_DOUBLE_EQ(admit.jobs[1].end_s, 250);
  EXPECT_DOUBLE_EQ(admit.jobs[1].staging_s, 0);
  EXPECT_DOUBLE_EQ(admit.jobs[1].cached_gb, 100);
  RunMetrics m = ComputeMetrics(admit, "admit");
  EXPECT_EQ(m.staging, "stage-on-admit");
  EXPECT_DOUBLE_EQ(m.input_gb, 200);
  EXPECT_DOUBLE_EQ(m.cache_hit_ratio, 0.5);
  EXPECT_DOUBLE_EQ(m.staging_gpu_hours, 200.0 / 3600);
  EXPECT_DOUBLE_EQ(m.avg_staging_s, 50);  // (100 + 0) / 2 attempts

  ASSERT_OK_AND_ASSIGN(SimResult fetch,
                       Simulate(config, trace, WithStaging(Staging::kStartThenFetch)));
  EXPECT_DOUBLE_EQ(fetch.jobs[0].end_s, 200);
  EXPECT_DOUBLE_EQ(fetch.jobs[1].first_start_s, 200);
  EXPECT_DOUBLE_EQ(fetch.jobs[1].end_s, 350);
  EXPECT_DOUBLE_EQ(fetch.jobs[1].staging_s, 100);
  EXPECT_DOUBLE_EQ(fetch.jobs[1].cached_gb, 0);
  RunMetrics f = ComputeMetrics(fetch, "fetch");
  EXPECT_DOUBLE_EQ(f.staging_gpu_hours, 400.0 / 3600);
  EXPECT_DOUBLE_EQ(f.cache_hit_ratio, 0);

  // Tenants never share cache entries: j2 of another tenant fetches a again: [200, 300], to 350.
  std::vector<TraceJob> two_tenants = trace;
  two_tenants[1].tenant = "u";
  ASSERT_OK_AND_ASSIGN(SimResult apart,
                       Simulate(config, two_tenants, WithStaging(Staging::kStageOnAdmit)));
  EXPECT_DOUBLE_EQ(apart.jobs[1].cached_gb, 0);
  EXPECT_DOUBLE_EQ(apart.jobs[1].end_s, 350);

  // Without staging the same trace ends at 100 and 150, as before.
  ASSERT_OK_AND_ASSIGN(SimResult off, Simulate(config, trace, Instant()));
  EXPECT_DOUBLE_EQ(off.jobs[1].end_s, 150);
  EXPECT_DOUBLE_EQ(off.jobs[1].input_gb, 0);
}

// One node, 2 GPUs. j1 (60 s, no inputs) holds it from 0; j2 (a, 50 s) waits
// 60 s, j3 (b, 10 s) waits for j2.
//   stage-on-admit: j2 placed 60, fetches a [60, 160], runs [160, 210]; j3
//     placed 210, fetches b [210, 260], runs [260, 270].
//   prefetch: j2's 60 s wait hides min(60, 100) = 60 s (60 GB): it fetches the
//     other 40 GB [60, 100], runs [100, 150]. j3 waited 150 s >= 50 s: b is
//     there, it runs [150, 160]. Saved: (60 + 50) s × 2 GPUs = 220 GPU-s.
TEST(SimulatorStaging, PrefetchHidesTheQueueWait) {
  const sched::Config config = StagingCluster(1, 2);
  const std::vector<TraceJob> trace = {Job("j1", 0, 60, 1, 2),
                                       WithData(Job("j2", 0, 50, 1, 2), {"a"}),
                                       WithData(Job("j3", 0, 10, 1, 2), {"b"})};
  ASSERT_OK_AND_ASSIGN(SimResult admit,
                       Simulate(config, trace, WithStaging(Staging::kStageOnAdmit)));
  EXPECT_DOUBLE_EQ(admit.jobs[1].end_s, 210);
  EXPECT_DOUBLE_EQ(admit.jobs[2].first_start_s, 210);
  EXPECT_DOUBLE_EQ(admit.jobs[2].end_s, 270);

  ASSERT_OK_AND_ASSIGN(SimResult pre, Simulate(config, trace, WithStaging(Staging::kPrefetch)));
  EXPECT_DOUBLE_EQ(pre.jobs[1].first_start_s, 60);
  EXPECT_DOUBLE_EQ(pre.jobs[1].staging_s, 40);
  EXPECT_DOUBLE_EQ(pre.jobs[1].prefetched_gb, 60);
  EXPECT_DOUBLE_EQ(pre.jobs[1].fetched_gb, 40);
  EXPECT_DOUBLE_EQ(pre.jobs[1].end_s, 150);
  EXPECT_DOUBLE_EQ(pre.jobs[2].first_start_s, 150);
  EXPECT_DOUBLE_EQ(pre.jobs[2].staging_s, 0);
  EXPECT_DOUBLE_EQ(pre.jobs[2].prefetched_gb, 50);
  EXPECT_DOUBLE_EQ(pre.jobs[2].end_s, 160);
  // A 20 s prefetch window: j2 hides 20 GB, fetches 80 [60, 140], runs to 190;
  // j3 waited 190 s but hides only 20 of b's 50 GB: 30 s [190, 220], runs to 230.
  SimOptions window = WithStaging(Staging::kPrefetch);
  window.staging.prefetch_window_s = 20;
  ASSERT_OK_AND_ASSIGN(SimResult near, Simulate(config, trace, window));
  EXPECT_DOUBLE_EQ(near.jobs[1].staging_s, 80);
  EXPECT_DOUBLE_EQ(near.jobs[1].end_s, 190);
  EXPECT_DOUBLE_EQ(near.jobs[2].prefetched_gb, 20);
  EXPECT_DOUBLE_EQ(near.jobs[2].end_s, 230);
  const RunMetrics a = ComputeMetrics(admit, "admit");
  const RunMetrics p = ComputeMetrics(pre, "prefetch");
  EXPECT_DOUBLE_EQ((a.staging_gpu_hours - p.staging_gpu_hours) * 3600, 220);
  EXPECT_DOUBLE_EQ(p.prefetched_gb, 110);
  EXPECT_DOUBLE_EQ(p.fetched_gb, 40);
}

// Two nodes of 1 GPU. j0 (a, 10 s) and j0' (b, 70 s) take one node each:
// node X fetches a [0, 100] and runs j0 to 110; node Y fetches b [0, 50] and
// runs j0' to 120. The gang g (2 × 1 GPU, a and b) is placed at 120: X lacks
// b (50 s), Y lacks a (100 s); the gang starts when Y is done, at 220, and
// ends at 250. Both GPUs idle 100 s: 200 GPU-s.
TEST(SimulatorStaging, GangWaitsForItsSlowestNode) {
  const sched::Config config = StagingCluster(2, 1);
  const std::vector<TraceJob> trace = {WithData(Job("j0", 0, 10, 1, 1), {"a"}),
                                       WithData(Job("j0'", 0, 70, 1, 1), {"b"}),
                                       WithData(Job("g", 0, 30, 2, 1), {"a", "b"})};
  ASSERT_OK_AND_ASSIGN(SimResult result,
                       Simulate(config, trace, WithStaging(Staging::kStageOnAdmit)));
  EXPECT_DOUBLE_EQ(result.jobs[0].end_s, 110);
  EXPECT_DOUBLE_EQ(result.jobs[1].end_s, 120);
  const JobOutcome& gang = result.jobs[2];
  EXPECT_DOUBLE_EQ(gang.first_start_s, 120);
  EXPECT_DOUBLE_EQ(gang.staging_s, 100);
  EXPECT_DOUBLE_EQ(gang.staging_gpu_s, 200);
  EXPECT_DOUBLE_EQ(gang.end_s, 250);
  EXPECT_DOUBLE_EQ(gang.input_gb, 300);  // a and b on each of the two nodes
  EXPECT_DOUBLE_EQ(gang.cached_gb, 150);
  EXPECT_DOUBLE_EQ(gang.fetched_gb, 150);
}

// One node, 1 GPU; j1 (a), j2 (b), j3 (a), 10 s each, all at 0.
//   cache 200 GB: j1 fetches a [0, 100] → 110; j2 fetches b [110, 160] → 170;
//     j3 finds a: [170, 180].
//   cache 120 GB: a (100) + b (50) do not fit: j2 evicts a; j3 fetches a
//     again [170, 270] (evicting b) → 280.
TEST(SimulatorStaging, CacheCapacityForcesRestaging) {
  const sched::Config config = StagingCluster(1, 1);
  const std::vector<TraceJob> trace = {WithData(Job("j1", 0, 10, 1, 1), {"a"}),
                                       WithData(Job("j2", 0, 10, 1, 1), {"b"}),
                                       WithData(Job("j3", 0, 10, 1, 1), {"a"})};
  ASSERT_OK_AND_ASSIGN(SimResult big,
                       Simulate(config, trace, WithStaging(Staging::kStageOnAdmit, 200)));
  EXPECT_DOUBLE_EQ(big.jobs[1].end_s, 170);
  EXPECT_DOUBLE_EQ(big.jobs[2].cached_gb, 100);
  EXPECT_DOUBLE_EQ(big.jobs[2].end_s, 180);
  ASSERT_OK_AND_ASSIGN(SimResult small,
                       Simulate(config, trace, WithStaging(Staging::kStageOnAdmit, 120)));
  EXPECT_DOUBLE_EQ(small.jobs[1].end_s, 170);
  EXPECT_DOUBLE_EQ(small.jobs[2].cached_gb, 0);
  EXPECT_DOUBLE_EQ(small.jobs[2].staging_s, 100);
  EXPECT_DOUBLE_EQ(small.jobs[2].end_s, 280);
  // A cache of 0 keeps nothing: like start-then-fetch, but the time limit is the job's own.
  ASSERT_OK_AND_ASSIGN(SimResult none,
                       Simulate(config, trace, WithStaging(Staging::kStageOnAdmit, 0)));
  EXPECT_DOUBLE_EQ(none.jobs[2].end_s, 280);
}

// A job that downloads its own inputs spends its time limit on them: j (b,
// 100 s, max_runtime_s 120) times out at 120 under start-then-fetch (50 s
// fetching + 70 s of work); staged by the agent it runs [50, 150] and completes.
TEST(SimulatorStaging, StartThenFetchSpendsTheTimeLimit) {
  const sched::Config config = StagingCluster(1, 1);
  TraceJob job = WithData(Job("j", 0, 100, 1, 1), {"b"});
  job.max_runtime_s = 120;
  ASSERT_OK_AND_ASSIGN(SimResult fetch,
                       Simulate(config, {job}, WithStaging(Staging::kStartThenFetch)));
  EXPECT_EQ(fetch.jobs[0].end, JobEnd::kTimedOut);
  EXPECT_DOUBLE_EQ(fetch.jobs[0].end_s, 120);
  EXPECT_DOUBLE_EQ(fetch.jobs[0].staging_s, 50);
  ASSERT_OK_AND_ASSIGN(SimResult admit,
                       Simulate(config, {job}, WithStaging(Staging::kStageOnAdmit)));
  EXPECT_EQ(admit.jobs[0].end, JobEnd::kCompleted);
  EXPECT_DOUBLE_EQ(admit.jobs[0].end_s, 150);
}

}  // namespace
}  // namespace ferry::fleet::sim
