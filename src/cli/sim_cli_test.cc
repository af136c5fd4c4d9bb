// `ferry sim`: policy syntax, bad input (exit 2 for usage, 1 for bad files),
// and a whole run on a small example.
#include "cli/sim_cli.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "testing/test_util.h"

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int code = 0;
  std::string out, err;
};

Outcome Sim(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  std::vector<std::string> all = {"sim"};
  all.insert(all.end(), args.begin(), args.end());
  Outcome outcome;
  outcome.code = RunSimCommandLine(all, out, err);
  outcome.out = out.str();
  outcome.err = err.str();
  return outcome;
}

TEST(SimPolicy, Syntax) {
  ASSERT_OK_AND_ASSIGN(SimPolicy fair, ParseSimPolicy("fair_share"));
  EXPECT_EQ(fair.ordering, fleet::sched::Ordering::kFairShare);
  EXPECT_FALSE(fair.scoring);
  ASSERT_OK_AND_ASSIGN(SimPolicy both, ParseSimPolicy("fifo+cost"));
  EXPECT_EQ(both.ordering, fleet::sched::Ordering::kFifo);
  EXPECT_EQ(both.scoring, fleet::sched::Scoring::kCost);
  ASSERT_OK_AND_ASSIGN(SimPolicy scoring, ParseSimPolicy("binpack+drf"));
  EXPECT_EQ(scoring.ordering, fleet::sched::Ordering::kDrf);
  EXPECT_EQ(scoring.scoring, fleet::sched::Scoring::kBinPack);
  ASSERT_OK_AND_ASSIGN(SimPolicy keep, ParseSimPolicy("config"));
  EXPECT_FALSE(keep.ordering);
  EXPECT_FALSE(keep.scoring);

  for (const char* bad :
       {"", "fifo+", "+fifo", "fifo+drf", "cost+spread", "lottery", "config+fifo", "fifo++cost"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(ParseSimPolicy(bad).ok());
  }
  EXPECT_NE(ParseSimPolicy("lottery").status().message().find("unknown part 'lottery'"),
            std::string::npos);

  fleet::sched::Config config;
  config.pool_sets = {{"a", {}, fleet::sched::Scoring::kSpread}};
  ApplySimPolicy(both, &config);
  EXPECT_EQ(config.ordering, fleet::sched::Ordering::kFifo);
  EXPECT_EQ(config.default_scoring, fleet::sched::Scoring::kCost);
  EXPECT_EQ(config.pool_sets[0].scoring, fleet::sched::Scoring::kCost);

  EXPECT_EQ(RunDirName("burst-cost/fair_share+cost"), "burst-cost_fair_share+cost");
  EXPECT_EQ(RunDirName(".."), "run");
}

constexpr char kCluster[] = R"(
ordering: fifo
pools:
  - name: rack
    price_per_gpu_hour: 1.0
    nodes: 2
    node: {gpu_model: H200, gpus: 2}
)";

constexpr char kTrace[] =
    "id,tenant,submit_s,duration_s,tasks,gpus_per_task\n"
    "j1,a,0,100,1,2\n"
    "j2,b,0,50,1,2\n"
    "j3,a,10,30,1,2\n"
    "j4,b,20,20,2,2\n";

TEST(SimCli, UsageErrorsExitTwo) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string config = dir.Write("cluster.yaml", kCluster);
  const std::string trace = dir.Write("trace.csv", kTrace);
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--trace", trace}, "--config"},        // required
      {{"--config", config}, "give a trace"},  // no trace
      {{"--config", config, "--trace", trace, "--philly", trace}, "one kind of trace"},
      {{"--config", config, "--trace", trace, "--policy", "lottery"}, "unknown part"},
      {{"--config", config, "--trace", trace, "--policy", "fifo,+drf"}, "empty part"},
      {{"--config", config, "--trace", trace, "--cycle-s", "-1"}, "cycle-s"},
      {{"--config", config, "--trace", trace, "--periodic", "--cycle-s", "0"}, "--periodic"},
      {{"--config", config, "--trace", trace, "--max-jobs", "5"}, "--max-jobs"},
      {{"--config", config, "--trace", trace, "--bogus"}, "bogus"},
      {{"--config", config, "--trace", trace, "--staging", "eager"}, "unknown model 'eager'"},
      {{"--config", config, "--trace", trace, "--staging", "prefetch,prefetch"}, "given twice"},
      {{"--config", config, "--trace", trace, "--staging-gbps", "0"}, "staging-gbps"},
      {{"--config", config, "--trace", trace, "--staging-cache-gb", "-1"}, "staging-cache-gb"},
      {{"--config", config, "--trace", trace, "--prefetch-window-s", "-5"}, "prefetch-window-s"},
  };
  for (const Case& c : cases) {
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    SCOPED_TRACE(joined);
    Outcome outcome = Sim(c.args);
    EXPECT_EQ(outcome.code, 2) << outcome.err;
    EXPECT_NE(outcome.err.find(c.message), std::string::npos) << outcome.err;
    EXPECT_TRUE(outcome.out.empty()) << outcome.out;
  }
}

TEST(SimCli, BadFilesExitOne) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string config = dir.Write("cluster.yaml", kCluster);
  const std::string trace = dir.Write("trace.csv", kTrace);
  const std::string broken_config = dir.Write("broken.yaml", "pools: [\n");
  const std::string typo = dir.Write("typo.yaml", "ordering: fifo\ncolour: red\n");
  const std::string broken_trace = dir.Write("broken.csv", "id,tenant\nx,y\n");
  const std::string broken_gen = dir.Write("gen.yaml", "jobs: many\n");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--config", dir / "missing.yaml", "--trace", trace}, "missing.yaml"},
      {{"--config", broken_config, "--trace", trace}, "broken.yaml"},
      {{"--config", typo, "--trace", trace}, "colour"},
      {{"--config", config, "--trace", dir / "missing.csv"}, "missing.csv"},
      {{"--config", config, "--trace", broken_trace}, "broken.csv"},
      {{"--config", config, "--synthetic", broken_gen}, "gen.yaml:1:7: jobs"},
      {{"--config", config, "--philly", trace}, "trace.csv"},
      {{"--config", config, "--helios", dir / "none.csv"}, "none.csv"},
  };
  for (const Case& c : cases) {
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    SCOPED_TRACE(joined);
    Outcome outcome = Sim(c.args);
    EXPECT_EQ(outcome.code, 1) << outcome.err;
    EXPECT_NE(outcome.err.find(c.message), std::string::npos) << outcome.err;
  }
}

TEST(SimCli, RunsEveryPolicyAndWritesReports) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string config = dir.Write("cluster.yaml", kCluster);
  const std::string trace = dir.Write("trace.csv", kTrace);
  const std::string out_dir = dir / "out";
  Outcome outcome = Sim({"--config", config, "--trace", trace, "--policy", "fifo,fair_share+spread",
                         "--policy", "drf", "--cycle-s", "0", "--out", out_dir});
  ASSERT_EQ(outcome.code, 0) << outcome.err;
  // The table: header, separator, one row per policy.
  EXPECT_NE(outcome.out.find("| fifo | 80.0 s |"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("| fair_share+spread |"), std::string::npos);
  EXPECT_NE(outcome.out.find("| drf |"), std::string::npos);
  for (const char* file : {"runs.csv", "comparison.md", "fifo/jobs.csv", "fifo/run.csv",
                           "fifo/timeline.svg", "fifo/timeline.csv", "fifo/tenants.csv",
                           "fair_share+spread/timeline.svg", "drf/jobs.csv"}) {
    EXPECT_TRUE(fs::is_regular_file(out_dir + "/" + file)) << file;
  }
  std::ifstream runs(out_dir + "/runs.csv");
  std::string line;
  int lines = 0;
  while (std::getline(runs, line)) ++lines;
  EXPECT_EQ(lines, 4);

  // Without --policy: one run with the config's own policies.
  Outcome plain = Sim({"--config", config, "--trace", trace, "--quiet"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.out.find("| fifo+binpack |"), std::string::npos) << plain.out;
  EXPECT_TRUE(plain.err.empty()) << plain.err;
  // A pool set that scores its own way is named in the label.
  const std::string tiers = dir.Write(
      "tiers.yaml", std::string(kCluster) + "pool_sets:\n  - {name: fast, scoring: latency}\n");
  Outcome tiered = Sim({"--config", tiers, "--trace", trace, "--quiet"});
  ASSERT_EQ(tiered.code, 0) << tiered.err;
  EXPECT_NE(tiered.out.find("| fifo+binpack,fast=latency |"), std::string::npos) << tiered.out;
}

TEST(SimCli, MergesSyntheticWorkloadsAndComparesConfigs) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string a = dir.Write("a.yaml", kCluster);
  const std::string b = dir.Write("b.yaml", std::string(kCluster) + "backfill: {enabled: false}\n");
  const std::string small = dir.Write("small.yaml",
                                      "jobs: 20\narrival_rate_per_s: 0.1\nseed: 3\n"
                                      "tenants: [{name: s}]\nduration: {median_s: 60}\n");
  const std::string big =
      dir.Write("big.yaml",
                "jobs: 5\narrival_rate_per_s: 0.01\nseed: 4\n"
                "tenants: [{name: b}]\ngpus_per_task: [{gpus: 2, probability: 1}]\n");
  const std::string out_dir = dir / "out";
  Outcome outcome = Sim({"--config", a, "--config", b, "--synthetic", small, "--synthetic", big,
                         "--policy", "fifo", "--out", out_dir});
  ASSERT_EQ(outcome.code, 0) << outcome.err;
  EXPECT_NE(outcome.err.find("trace: 25 jobs"), std::string::npos) << outcome.err;
  EXPECT_NE(outcome.out.find("| a/fifo |"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("| b/fifo |"), std::string::npos) << outcome.out;
  std::ifstream jobs(out_dir + "/a_fifo/jobs.csv");
  std::stringstream text;
  text << jobs.rdbuf();
  EXPECT_NE(text.str().find("small-syn-000001"), std::string::npos);
  EXPECT_NE(text.str().find("big-syn-000005"), std::string::npos);
}

TEST(SimCli, Examples) {
  // The example configs and workloads parse and run (shortened).
  const std::string examples = FERRY_SIM_EXAMPLES;
  Outcome outcome = Sim({"--config", examples + "/burst/cost.yaml", "--config",
                         examples + "/burst/onprem-first.yaml", "--synthetic",
                         examples + "/burst/steady.yaml", "--max-time-s", "20000", "--quiet"});
  ASSERT_EQ(outcome.code, 0) << outcome.err;
  EXPECT_NE(outcome.out.find("| cost/"), std::string::npos) << outcome.out;
  Outcome contended = Sim({"--config", examples + "/contended/cluster.yaml", "--synthetic",
                           examples + "/contended/tenant-llm.yaml", "--policy", "fifo,fair_share",
                           "--max-time-s", "50000", "--quiet"});
  ASSERT_EQ(contended.code, 0) << contended.err;
}

// Staging on one node of 2 GPUs at 8 Gbit/s (1 GB/s), data set d = 100 GB:
// j1 (d, 60 s) and j2 (d, 50 s) both need the whole node.
//   start-then-fetch: j1 [0, 100) fetching, runs to 160; j2 fetches again
//     [160, 260), runs to 310. Idle: 2 × 100 s × 2 GPUs = 400 GPU-s.
//   prefetch: j1 fetches [0, 100) (no wait to hide it), runs to 160; j2 finds
//     d in the cache: runs [160, 210]. Idle: 200 GPU-s: 200 GPU-s saved, 50%.
TEST(SimCli, StagingComparison) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string config = dir.Write(
      "one.yaml",
      "ordering: fifo\npools:\n  - name: rack\n    nodes: 1\n    node: {gpu_model: H200, gpus: 2}\n"
      "datasets:\n  - {name: d, size_gb: 100}\n");
  const std::string trace = dir.Write("staged.csv",
                                      "id,tenant,submit_s,duration_s,tasks,gpus_per_task,datasets\n"
                                      "j1,a,0,60,1,2,d\n"
                                      "j2,a,0,50,1,2,d\n");
  const std::string out_dir = dir / "out";
  Outcome outcome =
      Sim({"--config", config, "--trace", trace, "--policy", "fifo", "--staging",
           "start-then-fetch,prefetch", "--staging-gbps", "8", "--cycle-s", "0", "--out", out_dir});
  ASSERT_EQ(outcome.code, 0) << outcome.err;
  EXPECT_NE(outcome.out.find("| fifo/start-then-fetch |"), std::string::npos) << outcome.out;
  // 200 GPU-s saved of 400: 0.06 GPU-h, 50%.
  EXPECT_NE(outcome.out.find("| fifo/prefetch | prefetch | 0.2 TB | 0.1 TB (50.0%) | 0.0 TB "
                             "(0.0%) | 0.1 TB (50.0%) | 0.1 | 0.1 | 0.1 (50.0%) |"),
            std::string::npos)
      << outcome.out;
  std::ifstream runs(out_dir + "/runs.csv");
  std::stringstream text;
  text << runs.rdbuf();
  // staging, gpu_hours, staging_gpu_hours, avg_staging_s, input_gb, cached_gb, prefetched_gb,
  // fetched_gb, cache_hit_ratio: GPU time held 2 × (100 + 60) + 2 × 50 = 420 GPU-s.
  EXPECT_NE(text.str().find(",prefetch,0.1166666667,0.05555555556,50,200,100,0,100,0.5\n"),
            std::string::npos)
      << text.str();
  EXPECT_TRUE(fs::is_regular_file(out_dir + "/fifo_prefetch/jobs.csv"));
  std::ifstream jobs(out_dir + "/fifo_start-then-fetch/jobs.csv");
  std::stringstream job_lines;
  job_lines << jobs.rdbuf();
  // j2: staging_s 100, staging_gpu_s 200, input 100 GB, none cached or prefetched, 100 fetched.
  EXPECT_NE(job_lines.str().find(",100,200,100,0,0,100\n"), std::string::npos) << job_lines.str();
}

}  // namespace
}  // namespace ferry::cli
