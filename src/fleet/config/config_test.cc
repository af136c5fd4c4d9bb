// The scheduler config file: every section parses into sched::Config, every
// error names the file, line, column and key path, and the watcher notices
// changes (also within one second) and reports a broken file once.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ferry/fleet/sched_config.h"
#include "testing/test_util.h"

namespace ferry::fleet {
namespace {

namespace fs = std::filesystem;
using sched::Ordering;
using sched::Scoring;

// The error message of parsing `text` as "t.yaml" (empty when it parsed).
std::string ErrorOf(const std::string& text) {
  auto result = ParseSchedulerConfig(text, "t.yaml");
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), StatusCode::kInvalid) << result.status().ToString();
  return result.status().message();
}

constexpr const char* kFull = R"(ordering: drf
default_scoring: spread
transfer_cost_per_gb: 0.05
usage_half_life_s: 3600
pools:
  - name: onprem
    price_per_gpu_hour: 1.5
    nodes: 4
    nodes_per_domain: 2
    node:
      gpu_model: A100
      gpus: 4
      gpu_memory_mb: 81920
      cpus: 32.5
      memory_mb: 262144
    datasets: [imagenet]
  - name: burst
    cloud: true
    provider: lab
    price_per_gpu_hour: 0.9
    spot: true
    provisioning_delay_s: 45
    max_nodes: 6
    idle_timeout_s: 120
pool_sets:
  - name: main
    pools: [onprem, burst]
    scoring: cost
  - {name: near, pools: [onprem], scoring: locality}
  - {name: quick, scoring: latency}
  - {name: packed, scoring: binpack}
quotas:
  - path: acme
    gpu_model: A100
    nominal_gpus: 8
    borrowing_limit: 4
    lending_limit: 2
    cohort: lab
  - path: acme/vision/ann
    nominal_gpus: 2
    borrowing_limit: null
shares:
  - {path: acme, shares: 3}
  - {path: acme/vision, shares: 0.5}
datasets:
  - {name: imagenet, size_gb: 150.5}
preemption:
  priority: false
  reclaim: false
  grace_s: 12
  fair_share_max: 3
  fair_share_window_s: 90
backfill:
  enabled: false
  reservations: 5
  drain: false
burst:
  enabled: false
  min_pending_s: 20
providers:
  - name: lab
    type: local
    max_attempts: 7
    backoff_base_s: 0.1
    backoff_max_s: 2
    breaker_failures: 3
    breaker_open_s: 15
    spot_interruptions_per_hour: 1.5
    params:
      seed: 42
      name_prefix: lab
)";

TEST(SchedConfig, FullConfigParsesEveryField) {
  ASSERT_OK_AND_ASSIGN(sched::Config c, ParseSchedulerConfig(kFull, "full.yaml"));
  EXPECT_EQ(c.ordering, Ordering::kDrf);
  EXPECT_EQ(c.default_scoring, Scoring::kSpread);
  EXPECT_DOUBLE_EQ(c.transfer_cost_per_gb, 0.05);
  EXPECT_DOUBLE_EQ(c.usage_half_life_s, 3600);

  ASSERT_EQ(c.pools.size(), 2u);
  const sched::PoolConfig& onprem = c.pools[0];
  EXPECT_EQ(onprem.name, "onprem");
  EXPECT_FALSE(onprem.cloud);
  EXPECT_DOUBLE_EQ(onprem.price_per_gpu_hour, 1.5);
  EXPECT_EQ(onprem.nodes, 4);
  EXPECT_EQ(onprem.nodes_per_domain, 2);
  EXPECT_EQ(onprem.node.gpu_model, "A100");
  EXPECT_EQ(onprem.node.gpus, 4);
  EXPECT_EQ(onprem.node.gpu_memory_mb, 81920);
  EXPECT_DOUBLE_EQ(onprem.node.cpus, 32.5);
  EXPECT_EQ(onprem.node.memory_mb, 262144);
  EXPECT_EQ(onprem.datasets, std::vector<std::string>{"imagenet"});
  EXPECT_DOUBLE_EQ(onprem.idle_timeout_s, 300);  // default
  const sched::PoolConfig& burst = c.pools[1];
  EXPECT_TRUE(burst.cloud);
  EXPECT_EQ(burst.provider, "lab");
  EXPECT_TRUE(burst.spot);
  EXPECT_DOUBLE_EQ(burst.provisioning_delay_s, 45);
  EXPECT_EQ(burst.max_nodes, 6);
  EXPECT_DOUBLE_EQ(burst.idle_timeout_s, 120);
  EXPECT_EQ(burst.node.gpu_model, "H200");  // the default shape
  EXPECT_EQ(burst.node.gpus, 8);

  ASSERT_EQ(c.pool_sets.size(), 4u);
  EXPECT_EQ(c.pool_sets[0].name, "main");
  EXPECT_EQ(c.pool_sets[0].pools, (std::vector<std::string>{"onprem", "burst"}));
  EXPECT_EQ(c.pool_sets[0].scoring, Scoring::kCost);
  EXPECT_EQ(c.pool_sets[1].scoring, Scoring::kLocality);
  EXPECT_TRUE(c.pool_sets[2].pools.empty());
  EXPECT_EQ(c.pool_sets[2].scoring, Scoring::kLatency);
  EXPECT_EQ(c.pool_sets[3].scoring, Scoring::kBinPack);

  ASSERT_EQ(c.quotas.size(), 2u);
  EXPECT_EQ(c.quotas[0].path, "acme");
  EXPECT_EQ(c.quotas[0].gpu_model, "A100");
  EXPECT_EQ(c.quotas[0].nominal_gpus, 8);
  EXPECT_EQ(c.quotas[0].borrowing_limit, 4);
  EXPECT_EQ(c.quotas[0].lending_limit, 2);
  EXPECT_EQ(c.quotas[0].cohort, "lab");
  EXPECT_EQ(c.quotas[1].path, "acme/vision/ann");
  EXPECT_FALSE(c.quotas[1].borrowing_limit.has_value());
  EXPECT_FALSE(c.quotas[1].lending_limit.has_value());
  EXPECT_EQ(c.quotas[1].cohort, "default");

  ASSERT_EQ(c.shares.size(), 2u);
  EXPECT_EQ(c.shares[1].path, "acme/vision");
  EXPECT_DOUBLE_EQ(c.shares[1].shares, 0.5);
  ASSERT_EQ(c.datasets.size(), 1u);
  EXPECT_EQ(c.datasets[0].name, "imagenet");
  EXPECT_DOUBLE_EQ(c.datasets[0].size_gb, 150.5);

  EXPECT_FALSE(c.preemption.priority);
  EXPECT_FALSE(c.preemption.reclaim);
  EXPECT_DOUBLE_EQ(c.preemption.grace_s, 12);
  EXPECT_EQ(c.preemption.fair_share_max, 3);
  EXPECT_DOUBLE_EQ(c.preemption.fair_share_window_s, 90);
  EXPECT_FALSE(c.backfill.enabled);
  EXPECT_EQ(c.backfill.reservations, 5);
  EXPECT_FALSE(c.backfill.drain);
  EXPECT_FALSE(c.burst.enabled);
  EXPECT_DOUBLE_EQ(c.burst.min_pending_s, 20);

  ASSERT_EQ(c.providers.size(), 1u);
  const sched::ProviderConfig& p = c.providers[0];
  EXPECT_EQ(p.name, "lab");
  EXPECT_EQ(p.type, "local");
  EXPECT_EQ(p.max_attempts, 7);
  EXPECT_DOUBLE_EQ(p.backoff_base_s, 0.1);
  EXPECT_DOUBLE_EQ(p.backoff_max_s, 2);
  EXPECT_EQ(p.breaker_failures, 3);
  EXPECT_DOUBLE_EQ(p.breaker_open_s, 15);
  EXPECT_DOUBLE_EQ(p.spot_interruptions_per_hour, 1.5);
  EXPECT_EQ(p.params, (std::map<std::string, std::string>{{"seed", "42"}, {"name_prefix", "lab"}}));
}

TEST(SchedConfig, EmptyFileIsTheDefaultConfig) {
  for (const char* text : {"", "# nothing yet\n", "{}\n"}) {
    ASSERT_OK_AND_ASSIGN(sched::Config c, ParseSchedulerConfig(text, "empty.yaml"));
    const sched::Config defaults;
    EXPECT_EQ(c.ordering, defaults.ordering);
    EXPECT_TRUE(c.pools.empty());
    EXPECT_DOUBLE_EQ(c.usage_half_life_s, defaults.usage_half_life_s);
    EXPECT_TRUE(c.preemption.priority);
  }
  // Sections may be left empty.
  ASSERT_OK_AND_ASSIGN(sched::Config c, ParseSchedulerConfig("preemption:\npools:\n", "e.yaml"));
  EXPECT_TRUE(c.preemption.reclaim);
}

TEST(SchedConfig, EachSectionAlone) {
  ASSERT_OK_AND_ASSIGN(auto ordering, ParseSchedulerConfig("ordering: fair_share\n", "a"));
  EXPECT_EQ(ordering.ordering, Ordering::kFairShare);
  ASSERT_OK_AND_ASSIGN(auto fifo, ParseSchedulerConfig("ordering: fifo\n", "a"));
  EXPECT_EQ(fifo.ordering, Ordering::kFifo);
  ASSERT_OK_AND_ASSIGN(auto backfill, ParseSchedulerConfig("backfill: {reservations: 0}\n", "a"));
  EXPECT_EQ(backfill.backfill.reservations, 0);
  EXPECT_TRUE(backfill.backfill.enabled);
  EXPECT_TRUE(backfill.backfill.drain);  // the default
  ASSERT_OK_AND_ASSIGN(auto burst, ParseSchedulerConfig("burst: {enabled: False}\n", "a"));
  EXPECT_FALSE(burst.burst.enabled);
  ASSERT_OK_AND_ASSIGN(auto shares,
                       ParseSchedulerConfig("shares:\n  - {path: a/b/c, shares: 2}\n", "a"));
  EXPECT_EQ(shares.shares.at(0).path, "a/b/c");
  ASSERT_OK_AND_ASSIGN(auto quota,
                       ParseSchedulerConfig("quotas:\n  - path: t\n    nominal_gpus: +3\n", "a"));
  EXPECT_EQ(quota.quotas.at(0).nominal_gpus, 3);
  ASSERT_OK_AND_ASSIGN(auto provider, ParseSchedulerConfig("providers:\n  - name: p\n", "a"));
  EXPECT_EQ(provider.providers.at(0).type, "local");
  EXPECT_EQ(provider.providers.at(0).max_attempts, 4);
  ASSERT_OK_AND_ASSIGN(auto datasets,
                       ParseSchedulerConfig("datasets: [{name: d, size_gb: 1e3}]\n", "a"));
  EXPECT_DOUBLE_EQ(datasets.datasets.at(0).size_gb, 1000);
  // Anchors and aliases work like everywhere in YAML.
  ASSERT_OK_AND_ASSIGN(auto aliased,
                       ParseSchedulerConfig("pools:\n"
                                            "  - name: a\n"
                                            "    node: &shape {gpu_model: L4, gpus: 2}\n"
                                            "  - name: b\n"
                                            "    node: *shape\n",
                                            "a"));
  EXPECT_EQ(aliased.pools.at(1).node.gpu_model, "L4");
  EXPECT_EQ(aliased.pools.at(1).node.gpus, 2);
}

TEST(SchedConfig, ExampleFileParses) {
  ASSERT_OK_AND_ASSIGN(sched::Config c, LoadSchedulerConfig(FERRY_EXAMPLE_CONFIG));
  EXPECT_EQ(c.ordering, Ordering::kFairShare);
  ASSERT_EQ(c.pools.size(), 4u);
  int on_prem = 0, on_demand = 0, spot = 0;
  for (const auto& pool : c.pools) {
    if (!pool.cloud) {
      ++on_prem;
    } else {
      EXPECT_EQ(pool.provider, "local");
      ++(pool.spot ? spot : on_demand);
    }
  }
  EXPECT_EQ(on_prem, 2);
  EXPECT_EQ(on_demand, 1);
  EXPECT_EQ(spot, 1);
  EXPECT_GE(c.pool_sets.size(), 2u);
  ASSERT_GE(c.quotas.size(), 2u);
  std::set<std::string> tenants;
  for (const auto& quota : c.quotas) {
    EXPECT_EQ(quota.cohort, "research");
    tenants.insert(quota.path.substr(0, quota.path.find('/')));
  }
  EXPECT_EQ(tenants.size(), 2u);
  EXPECT_FALSE(c.shares.empty());
  EXPECT_FALSE(c.datasets.empty());
  ASSERT_EQ(c.providers.size(), 1u);
  EXPECT_EQ(c.providers[0].type, "local");
}

// ---------------------------------------------------------------- errors

TEST(SchedConfigErrors, UnknownKeysNameTheirPlace) {
  EXPECT_EQ(ErrorOf("ordering: fifo\norderng: drf\n").substr(0, 35),
            "t.yaml:2:1: orderng: unknown key (e");
  const std::string nested = ErrorOf("pools:\n  - name: a\n    nmae: b\n");
  EXPECT_EQ(nested.rfind("t.yaml:3:5: pools[0].nmae: unknown key (expected name, cloud", 0), 0u)
      << nested;
  EXPECT_EQ(ErrorOf("preemption:\n  grace: 3\n").rfind("t.yaml:2:3: preemption.grace: unknown", 0),
            0u);
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    node: {gpu: 1}\n")
                .rfind("t.yaml:3:12: pools[0].node.gpu: unknown key", 0),
            0u)
      << ErrorOf("pools:\n  - name: a\n    node: {gpu: 1}\n");
  EXPECT_EQ(ErrorOf("quotas:\n  - path: a\n    borrow: 1\n")
                .rfind("t.yaml:3:5: quotas[0].borrow: unknown key", 0),
            0u);
  EXPECT_EQ(ErrorOf("providers:\n  - name: p\n    retries: 1\n")
                .rfind("t.yaml:3:5: providers[0].retries: unknown key", 0),
            0u);
}

TEST(SchedConfigErrors, WrongTypes) {
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    max_nodes: ten\n"),
            "t.yaml:3:16: pools[0].max_nodes: expected an integer, got 'ten'");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    max_nodes: 2.5\n"),
            "t.yaml:3:16: pools[0].max_nodes: expected an integer, got '2.5'");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    price_per_gpu_hour: \"3\"\n"),
            "t.yaml:3:25: pools[0].price_per_gpu_hour: expected a number, got the string '3'");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    cloud: yes\n"),
            "t.yaml:3:12: pools[0].cloud: expected true or false, got 'yes'");
  EXPECT_EQ(ErrorOf("pools: {name: a}\n"), "t.yaml:1:8: pools: expected a list, got a mapping");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    node: [1, 2]\n"),
            "t.yaml:3:11: pools[0].node: expected a mapping, got a list");
  EXPECT_EQ(ErrorOf("pools:\n  - name: [a]\n"),
            "t.yaml:2:11: pools[0].name: expected a string, got a list");
  EXPECT_EQ(ErrorOf("pools:\n  - name:\n"),
            "t.yaml:2:5: pools[0].name: expected a string, got null");
  EXPECT_EQ(ErrorOf("pools:\n  - a\n"), "t.yaml:2:5: pools[0]: expected a mapping, got a scalar");
  EXPECT_EQ(ErrorOf("- ordering: fifo\n"),
            "t.yaml:1:1: (top level): expected a mapping, got a list");
  EXPECT_EQ(ErrorOf("quotas:\n  - path: a\n    nominal_gpus: 99999999999\n"),
            "t.yaml:3:19: quotas[0].nominal_gpus: integer out of range");
  EXPECT_EQ(ErrorOf("quotas:\n  - path: a\n    nominal_gpus: 99999999999999999999999\n"),
            "t.yaml:3:19: quotas[0].nominal_gpus: integer out of range");
  EXPECT_EQ(ErrorOf("transfer_cost_per_gb: .nan\n"),
            "t.yaml:1:23: transfer_cost_per_gb: expected a number, got '.nan'");
  EXPECT_EQ(ErrorOf("usage_half_life_s: 1e999\n"),
            "t.yaml:1:20: usage_half_life_s: number out of range");
  EXPECT_EQ(ErrorOf("providers:\n  - name: p\n    params: {a: [1]}\n"),
            "t.yaml:3:17: providers[0].params.a: expected a string, got a list");
  EXPECT_EQ(ErrorOf("providers:\n  - name: p\n    params: [a]\n"),
            "t.yaml:3:13: providers[0].params: expected a mapping, got a list");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    datasets: [x, {y: 1}]\n"),
            "t.yaml:3:19: pools[0].datasets[1]: expected a string, got a mapping");
}

TEST(SchedConfigErrors, BadPolicyNames) {
  EXPECT_EQ(ErrorOf("ordering: lifo\n"),
            "t.yaml:1:11: ordering: unknown ordering 'lifo' (expected fifo, fair_share or drf)");
  EXPECT_EQ(ErrorOf("pool_sets:\n  - name: s\n    scoring: cheapest\n"),
            "t.yaml:3:14: pool_sets[0].scoring: unknown scoring policy 'cheapest' (expected "
            "binpack, spread, cost, latency or locality)");
  EXPECT_EQ(ErrorOf("default_scoring: FIFO\n").rfind("t.yaml:1:18: default_scoring: unknown", 0),
            0u);
}

TEST(SchedConfigErrors, DuplicateKeysAndBadYaml) {
  EXPECT_EQ(ErrorOf("ordering: fifo\nordering: drf\n"), "t.yaml:2:1: ordering: duplicate key");
  EXPECT_EQ(ErrorOf("burst: {enabled: true, enabled: false}\n"),
            "t.yaml:1:24: burst.enabled: duplicate key");
  const std::string syntax = ErrorOf("pools: [a\n");
  EXPECT_EQ(syntax.rfind("t.yaml:", 0), 0u) << syntax;
  EXPECT_NE(syntax.find("invalid YAML"), std::string::npos) << syntax;
  const std::string two = ErrorOf("ordering: fifo\n---\nordering: drf\n");
  EXPECT_EQ(two.rfind("t.yaml:", 0), 0u) << two;
}

// Validate's field paths are mapped back to where the field was written.
TEST(SchedConfigErrors, ValidationErrorsNameTheLine) {
  EXPECT_EQ(ErrorOf("quotas:\n  - path: a\n    nominal_gpus: 1\n  - path: b\n"
                    "    nominal_gpus: -1\n"),
            "t.yaml:5:19: quotas[1].nominal_gpus: must be >= 0");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n  - name: b\npool_sets:\n  - name: s\n"
                    "    pools: [a, c]\n"),
            "t.yaml:6:16: pool_sets[0].pools[1]: no pool named 'c'");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n  - name: a\n"),
            "t.yaml:3:11: pools[1].name: duplicate 'a'");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    cloud: true\n    provider: aws\n"),
            "t.yaml:4:15: pools[0].provider: no provider named 'aws'");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    price_per_gpu_hour: -2\n"),
            "t.yaml:3:25: pools[0].price_per_gpu_hour: must be >= 0");
  EXPECT_EQ(ErrorOf("pools:\n  - name: a\n    node: {gpus: -1}\n"),
            "t.yaml:3:18: pools[0].node.gpus: must be >= 0");
  EXPECT_EQ(ErrorOf("providers:\n  - name: p\n    max_attempts: 0\n"),
            "t.yaml:3:19: providers[0].max_attempts: must be >= 1");
  // A field left out is located at its closest written parent.
  EXPECT_EQ(ErrorOf("pools:\n  - cloud: false\n"), "t.yaml:2:5: pools[0].name: must not be empty");
  EXPECT_EQ(ErrorOf("shares:\n  - {path: a, shares: 0}\n"),
            "t.yaml:2:23: shares[0].shares: must be > 0");
}

TEST(SchedConfig, SlurmPoolParsesAndMapsAccounts) {
  auto config = ParseSchedulerConfig(R"(
providers:
  - {name: hpc, type: slurm, params: {endpoint: "unix:/run/slurmrestd.sock"}}
pools:
  - name: hpc
    provider: hpc
    price_per_gpu_hour: 1.5
    queue_delay_s: 45
    slurm:
      partition: gpu
      account: general
      qos: normal
      time_limit_minutes: 120
      accounts:
        - {path: acme, account: acme-gpu}
        - {path: acme/vision, qos: high}
        - {path: acme/vision/ana, account: ana-private}
)",
                                     "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->pools.size(), 1u);
  const sched::PoolConfig& pool = config->pools[0];
  ASSERT_TRUE(pool.slurm.has_value());
  EXPECT_FALSE(pool.cloud);
  EXPECT_EQ(pool.queue_delay_s, 45);
  EXPECT_EQ(pool.slurm->partition, "gpu");
  EXPECT_EQ(pool.slurm->time_limit_minutes, 120);
  EXPECT_EQ(config->providers[0].type, "slurm");
  using Pair = std::pair<std::string, std::string>;
  EXPECT_EQ(pool.slurm->AccountFor("other", "t", "u"), Pair("general", "normal"));
  EXPECT_EQ(pool.slurm->AccountFor("acme", "nlp", "bo"), Pair("acme-gpu", "normal"));
  EXPECT_EQ(pool.slurm->AccountFor("acme", "vision", "bo"), Pair("acme-gpu", "high"));
  EXPECT_EQ(pool.slurm->AccountFor("acme", "vision", "ana"), Pair("ana-private", "high"));
  // A pool without a `slurm` section is not a Slurm pool.
  auto plain = ParseSchedulerConfig("pools:\n  - name: a\n", "t.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->pools[0].slurm.has_value());
}

TEST(SchedConfigErrors, SlurmPoolsAreChecked) {
  const std::string provider = "providers:\n  - {name: hpc, type: slurm}\n  - {name: l}\n";
  EXPECT_EQ(ErrorOf(provider + "pools:\n  - name: a\n    slurm: {}\n"),
            "t.yaml:5:5: pools[0].provider: a Slurm pool needs a provider of type slurm");
  EXPECT_EQ(ErrorOf(provider + "pools:\n  - name: a\n    provider: l\n    slurm: {}\n"),
            "t.yaml:6:15: pools[0].provider: provider 'l' is not of type slurm");
  EXPECT_EQ(ErrorOf(provider + "pools:\n  - name: a\n    provider: hpc\n"),
            "t.yaml:6:15: pools[0].provider: provider 'hpc' is of type slurm: the pool needs a "
            "`slurm` section");
  EXPECT_EQ(ErrorOf(provider + "pools:\n  - name: a\n    provider: hpc\n    cloud: true\n"
                               "    slurm: {}\n"),
            "t.yaml:7:12: pools[0].cloud: a Slurm pool is not a cloud pool");
  EXPECT_EQ(ErrorOf(provider + "pools:\n  - name: a\n    provider: hpc\n"
                               "    slurm: {accounts: [{path: /x, account: y}]}\n"),
            "t.yaml:7:31: pools[0].slurm.accounts[0].path: must be tenant, tenant/team or "
            "tenant/team/user");
  EXPECT_EQ(ErrorOf(provider + "pools:\n  - name: a\n    provider: hpc\n"
                               "    slurm: {parition: x}\n"),
            "t.yaml:7:13: pools[0].slurm.parition: unknown key (expected partition, account, "
            "qos, accounts or time_limit_minutes)");
  EXPECT_EQ(ErrorOf(provider + "pools:\n  - name: a\n    provider: hpc\n    queue_delay_s: -1\n"
                               "    slurm: {}\n"),
            "t.yaml:7:20: pools[0].queue_delay_s: must be >= 0");
  EXPECT_EQ(ErrorOf("providers:\n  - {name: p, type: aws}\n"),
            "t.yaml:2:21: providers[0].type: unknown provider type 'aws' (expected local or "
            "slurm)");
}

TEST(SchedConfigErrors, LoadNamesTheFile) {
  auto missing = LoadSchedulerConfig("/nonexistent/fleet.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIOError);
  EXPECT_NE(missing.status().message().find("/nonexistent/fleet.yaml"), std::string::npos);

  const std::string path = (fs::temp_directory_path() / "ferry-config-load.yaml").string();
  std::ofstream(path) << "ordering: fifo\nbackfill: {reservations: x}\n";
  auto bad = LoadSchedulerConfig(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            path + ":2:26: backfill.reservations: expected an integer, got 'x'");
  fs::remove(path);
}

// ---------------------------------------------------------------- watcher

class WatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(scratch_.ok());
    dir_ = scratch_.path();
    path_ = scratch_ / "fleet.yaml";
  }

  // Writes `text` and, when `mtime` is given, sets that modification time.
  void Write(const std::string& text, const struct timespec* mtime = nullptr) {
    std::ofstream(path_, std::ios::trunc) << text;
    if (mtime != nullptr) {
      struct timespec times[2] = {*mtime, *mtime};
      ASSERT_EQ(utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
    }
  }
  struct timespec MTime() const {
    struct stat info {};
    EXPECT_EQ(stat(path_.c_str(), &info), 0);
    return info.st_mtim;
  }

  ferry::testing::ScratchDir scratch_{"ferry-watch"};
  std::string dir_, path_;
};

TEST_F(WatcherTest, SeesChangesReportsBrokenOnceThenTheFix) {
  Write("ordering: fifo\n");
  ConfigWatcher watcher(path_);
  EXPECT_EQ(watcher.path(), path_);

  // The first poll always reads.
  ASSERT_OK_AND_ASSIGN(auto first, watcher.Poll());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->ordering, Ordering::kFifo);
  ASSERT_OK_AND_ASSIGN(auto unchanged, watcher.Poll());
  EXPECT_FALSE(unchanged.has_value());

  // Same size, same modification time, other content: a rewrite within the
  // same second (or timestamp tick) is still seen.
  const struct timespec mtime = MTime();
  Write("ordering: drf \n", &mtime);
  ASSERT_OK_AND_ASSIGN(auto drf, watcher.Poll());
  ASSERT_TRUE(drf.has_value());
  EXPECT_EQ(drf->ordering, Ordering::kDrf);

  // Touched, same content: nothing to report.
  Write("ordering: drf \n");
  ASSERT_OK_AND_ASSIGN(auto touched, watcher.Poll());
  EXPECT_FALSE(touched.has_value());

  // A broken file is reported once; the caller keeps its config.
  Write("ordering: drf\npools: [{name: a, gpus: 8}]\n");
  auto broken = watcher.Poll();
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().message().rfind(path_ + ":2:19: pools[0].gpus: unknown key", 0), 0u)
      << broken.status().message();
  ASSERT_OK_AND_ASSIGN(auto quiet, watcher.Poll());
  EXPECT_FALSE(quiet.has_value());
  ASSERT_OK_AND_ASSIGN(auto still_quiet, watcher.Poll());
  EXPECT_FALSE(still_quiet.has_value());

  // The fix is picked up.
  Write("ordering: fair_share\npools: [{name: a, node: {gpus: 8}}]\n");
  ASSERT_OK_AND_ASSIGN(auto fixed, watcher.Poll());
  ASSERT_TRUE(fixed.has_value());
  EXPECT_EQ(fixed->ordering, Ordering::kFairShare);
  ASSERT_EQ(fixed->pools.size(), 1u);
  EXPECT_EQ(fixed->pools[0].node.gpus, 8);
}

TEST_F(WatcherTest, MissingFileIsReportedOnceThenItsReturn) {
  ConfigWatcher watcher(path_);
  auto missing = watcher.Poll();
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path_), std::string::npos);
  ASSERT_OK_AND_ASSIGN(auto quiet, watcher.Poll());
  EXPECT_FALSE(quiet.has_value());

  Write("ordering: drf\n");
  ASSERT_OK_AND_ASSIGN(auto back, watcher.Poll());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->ordering, Ordering::kDrf);

  fs::remove(path_);
  EXPECT_FALSE(watcher.Poll().ok());
  Write("ordering: drf\n");  // the same content as before it went away
  ASSERT_OK_AND_ASSIGN(auto again, watcher.Poll());
  EXPECT_TRUE(again.has_value());
}

}  // namespace
}  // namespace ferry::fleet
