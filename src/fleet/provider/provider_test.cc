// Provider adapters: the circuit breaker and retries against a scripted fake
// provider on a fake clock, and the local provider with real `ferry agent`
// processes registering with a real server running in this process.
#include "ferry/fleet/provider.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/fleet/server.h"
#include "testing/test_util.h"

namespace ferry::fleet {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------- fakes

struct FakeClock {
  double now = 1000;
  std::vector<double> sleeps;
  std::mutex mutex;

  ProviderClock clock() {
    ProviderClock c;
    c.now_s = [this] {
      std::lock_guard<std::mutex> lock(mutex);
      return now;
    };
    c.sleep_s = [this](double seconds) {
      std::lock_guard<std::mutex> lock(mutex);
      sleeps.push_back(seconds);
      now += seconds;
    };
    return c;
  }
  void Advance(double seconds) {
    std::lock_guard<std::mutex> lock(mutex);
    now += seconds;
  }
};

// Answers each call with the next scripted status (OK once the script is empty).
class ScriptedProvider : public Provider {
 public:
  explicit ScriptedProvider(std::deque<Status> script = {}) : script_(std::move(script)) {}
  std::string_view name() const override { return "scripted"; }
  Result<std::vector<std::string>> Provision(const sched::PoolConfig& pool, int count) override {
    FERRY_RETURN_NOT_OK(Next());
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i) names.push_back(pool.name + "-" + std::to_string(i));
    return names;
  }
  Status Deprovision(const std::string&) override { return Next(); }
  Result<std::vector<CloudNode>> List() override {
    FERRY_RETURN_NOT_OK(Next());
    return std::vector<CloudNode>{};
  }
  Result<double> Price(const sched::PoolConfig& pool) override {
    FERRY_RETURN_NOT_OK(Next());
    return pool.price_per_gpu_hour;
  }
  std::vector<std::string> TakeInterruptions() override { return {"spot-1"}; }

  void Push(Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    script_.push_back(std::move(status));
  }
  void set_default(Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    default_ = std::move(status);
  }
  int calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

 private:
  Status Next() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls_;
    if (script_.empty()) return default_;
    Status status = script_.front();
    script_.pop_front();
    return status;
  }
  mutable std::mutex mutex_;
  std::deque<Status> script_;
  Status default_;
  int calls_ = 0;
};

sched::ProviderConfig RetryConfig(int attempts = 4, int breaker_failures = 100) {
  sched::ProviderConfig config;
  config.name = "test";
  config.max_attempts = attempts;
  config.backoff_base_s = 0.5;
  config.backoff_max_s = 3;
  config.breaker_failures = breaker_failures;
  config.breaker_open_s = 30;
  return config;
}

sched::PoolConfig Pool(const std::string& name) {
  sched::PoolConfig pool;
  pool.name = name;
  pool.cloud = true;
  pool.provider = "local";
  pool.price_per_gpu_hour = 2.5;
  pool.max_nodes = 4;
  return pool;
}

// ---------------------------------------------------------------- breaker

TEST(CircuitBreaker, OpensAfterConsecutiveFailuresAndRecovers) {
  CircuitBreaker breaker(3, 10);
  EXPECT_EQ(breaker.state(), CircuitBreaker::State::kClosed);
  EXPECT_EQ(ToString(breaker.state()), "closed");

  // A success resets the count: failures must be consecutive.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(breaker.Allow(0));
    breaker.RecordFailure(0);
  }
  breaker.RecordSuccess();
  EXPECT_EQ(breaker.consecutive_failures(), 0);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(breaker.Allow(1));
    breaker.RecordFailure(1);
  }
  EXPECT_EQ(breaker.state(), CircuitBreaker::State::kClosed);
  ASSERT_TRUE(breaker.Allow(2));
  breaker.RecordFailure(2);
  EXPECT_EQ(breaker.state(), CircuitBreaker::State::kOpen);
  EXPECT_EQ(ToString(breaker.state()), "open");

  // Open: calls fail fast until open_s has passed.
  EXPECT_FALSE(breaker.Allow(2));
  EXPECT_FALSE(breaker.Allow(11.9));
  EXPECT_EQ(breaker.state(), CircuitBreaker::State::kOpen);

  // Half-open: one trial; a concurrent second call still fails fast.
  EXPECT_TRUE(breaker.Allow(12));
  EXPECT_EQ(breaker.state(), CircuitBreaker::State::kHalfOpen);
  EXPECT_EQ(ToString(breaker.state()), "half_open");
  EXPECT_FALSE(breaker.Allow(12));

  // The trial fails: open again, for another full period from now.
  breaker.RecordFailure(12);
  EXPECT_EQ(breaker.state(), CircuitBreaker::State::kOpen);
  EXPECT_FALSE(breaker.Allow(21.9));
  EXPECT_TRUE(breaker.Allow(22));
  EXPECT_EQ(breaker.state(), CircuitBreaker::State::kHalfOpen);

  // The trial succeeds: closed, and calls flow again.
  breaker.RecordSuccess();
  EXPECT_EQ(breaker.state(), CircuitBreaker::State::kClosed);
  EXPECT_TRUE(breaker.Allow(22));
  EXPECT_TRUE(breaker.Allow(22));
}

TEST(CircuitBreaker, ThresholdBelowOneMeansOne) {
  CircuitBreaker breaker(0, 5);
  ASSERT_TRUE(breaker.Allow(0));
  breaker.RecordFailure(0);
  EXPECT_EQ(breaker.state(), CircuitBreaker::State::kOpen);
}

// ---------------------------------------------------------------- retries

TEST(ResilientProvider, RetriesTransientErrorsWithBoundedJitteredBackoff) {
  FakeClock fake;
  auto inner = std::make_unique<ScriptedProvider>(
      std::deque<Status>{Status::IOError("connection refused"), Status::TimedOut("no answer"),
                         Status::IOError("503")});
  ScriptedProvider* scripted = inner.get();
  ResilientProvider provider(std::move(inner), RetryConfig(4), fake.clock(), /*seed=*/42);
  EXPECT_EQ(provider.name(), "test");

  ASSERT_OK_AND_ASSIGN(auto names, provider.Provision(Pool("burst"), 2));
  EXPECT_EQ(names, (std::vector<std::string>{"burst-0", "burst-1"}));
  EXPECT_EQ(scripted->calls(), 4);
  ASSERT_EQ(fake.sleeps.size(), 3u);
  // Full jitter: sleep k is in [0, min(max, base * 2^k)).
  const double caps[] = {0.5, 1.0, 2.0};
  for (size_t k = 0; k < fake.sleeps.size(); ++k) {
    EXPECT_GE(fake.sleeps[k], 0) << k;
    EXPECT_LT(fake.sleeps[k], caps[k]) << k;
  }
  auto counters = provider.counters();
  EXPECT_EQ(counters.calls, 1);
  EXPECT_EQ(counters.retries, 3);
  EXPECT_EQ(counters.failures, 0);
  EXPECT_EQ(provider.breaker_state(), CircuitBreaker::State::kClosed);
}

TEST(ResilientProvider, BackoffIsCappedAndJitterVaries) {
  FakeClock fake;
  auto inner = std::make_unique<ScriptedProvider>();
  inner->set_default(Status::IOError("down"));
  sched::ProviderConfig config = RetryConfig(12);
  ResilientProvider provider(std::move(inner), config, fake.clock(), /*seed=*/7);
  auto result = provider.Provision(Pool("burst"), 1);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kIOError);
  EXPECT_NE(result.status().message().find("after 12 attempt(s)"), std::string::npos)
      << result.status().message();
  EXPECT_NE(result.status().message().find("down"), std::string::npos);
  ASSERT_EQ(fake.sleeps.size(), 11u);
  std::set<double> distinct;
  for (size_t k = 0; k < fake.sleeps.size(); ++k) {
    const double cap = std::min(config.backoff_max_s, config.backoff_base_s * (1 << k));
    EXPECT_GE(fake.sleeps[k], 0);
    EXPECT_LT(fake.sleeps[k], cap);
    distinct.insert(fake.sleeps[k]);
  }
  // Random, not a fixed schedule.
  EXPECT_GT(distinct.size(), 5u);
  EXPECT_EQ(provider.counters().failures, 1);
  EXPECT_EQ(provider.counters().retries, 11);

  // The same seed gives the same delays; another seed gives others.
  FakeClock again;
  auto inner2 = std::make_unique<ScriptedProvider>();
  inner2->set_default(Status::IOError("down"));
  ResilientProvider same(std::move(inner2), config, again.clock(), /*seed=*/7);
  (void)same.Provision(Pool("burst"), 1);
  EXPECT_EQ(again.sleeps, fake.sleeps);
  FakeClock other;
  auto inner3 = std::make_unique<ScriptedProvider>();
  inner3->set_default(Status::IOError("down"));
  ResilientProvider different(std::move(inner3), config, other.clock(), /*seed=*/8);
  (void)different.Provision(Pool("burst"), 1);
  EXPECT_NE(other.sleeps, fake.sleeps);
}

TEST(ResilientProvider, NoRetryOnInvalid) {
  FakeClock fake;
  auto inner = std::make_unique<ScriptedProvider>(
      std::deque<Status>{Status::Invalid("unknown instance type")});
  ScriptedProvider* scripted = inner.get();
  ResilientProvider provider(std::move(inner), RetryConfig(4, 1), fake.clock());
  Status status = provider.Deprovision("node-1");
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_EQ(status.message(), "unknown instance type");
  EXPECT_EQ(scripted->calls(), 1);
  EXPECT_TRUE(fake.sleeps.empty());
  // The provider answered: a bad request does not count against the breaker.
  EXPECT_EQ(provider.breaker_state(), CircuitBreaker::State::kClosed);
  EXPECT_EQ(provider.counters().retries, 0);
  EXPECT_EQ(provider.counters().failures, 1);
}

TEST(ResilientProvider, EveryCallKindGoesThroughRetries) {
  FakeClock fake;
  auto inner = std::make_unique<ScriptedProvider>();
  ScriptedProvider* scripted = inner.get();
  ResilientProvider provider(std::move(inner), RetryConfig(3), fake.clock());
  scripted->Push(Status::IOError("blip"));
  ASSERT_OK(provider.List());
  scripted->Push(Status::IOError("blip"));
  ASSERT_OK_AND_ASSIGN(double price, provider.Price(Pool("p")));
  EXPECT_DOUBLE_EQ(price, 2.5);
  scripted->Push(Status::IOError("blip"));
  ASSERT_OK(provider.Deprovision("x"));
  EXPECT_EQ(scripted->calls(), 6);
  EXPECT_EQ(provider.counters().calls, 3);
  EXPECT_EQ(provider.counters().retries, 3);
  // Interruptions pass straight through.
  EXPECT_EQ(provider.TakeInterruptions(), std::vector<std::string>{"spot-1"});
}

// A provider that fails, then recovers, at the adapter level.
TEST(ResilientProvider, FailsThenRecoversThroughTheCircuitBreaker) {
  FakeClock fake;
  auto inner = std::make_unique<ScriptedProvider>();
  ScriptedProvider* scripted = inner.get();
  scripted->set_default(Status::IOError("region unavailable"));
  sched::ProviderConfig config = RetryConfig(/*attempts=*/2, /*breaker_failures=*/4);
  ResilientProvider provider(std::move(inner), config, fake.clock());

  // Two calls of two failed attempts each: four consecutive failures open it.
  EXPECT_EQ(provider.Provision(Pool("p"), 1).status().code(), StatusCode::kIOError);
  EXPECT_EQ(provider.breaker_state(), CircuitBreaker::State::kClosed);
  EXPECT_EQ(provider.Provision(Pool("p"), 1).status().code(), StatusCode::kIOError);
  EXPECT_EQ(provider.breaker_state(), CircuitBreaker::State::kOpen);
  EXPECT_EQ(provider.counters().breaker_opens, 1);
  EXPECT_EQ(scripted->calls(), 4);

  // Open: fails fast, without reaching the provider or sleeping.
  const size_t sleeps = fake.sleeps.size();
  auto fast = provider.Provision(Pool("p"), 1);
  ASSERT_FALSE(fast.ok());
  EXPECT_EQ(fast.status().code(), StatusCode::kIOError);
  EXPECT_NE(fast.status().message().find("circuit breaker open"), std::string::npos)
      << fast.status().message();
  EXPECT_EQ(scripted->calls(), 4);
  EXPECT_EQ(fake.sleeps.size(), sleeps);

  // The provider recovers; once open_s has passed, the half-open trial
  // succeeds and closes the circuit.
  scripted->set_default(Status::OK());
  fake.Advance(config.breaker_open_s);
  ASSERT_OK_AND_ASSIGN(auto names, provider.Provision(Pool("p"), 2));
  EXPECT_EQ(names.size(), 2u);
  EXPECT_EQ(provider.breaker_state(), CircuitBreaker::State::kClosed);
  EXPECT_EQ(scripted->calls(), 5);
  ASSERT_OK(provider.List());

  auto counters = provider.counters();
  EXPECT_EQ(counters.calls, 5);
  EXPECT_EQ(counters.failures, 3);
  EXPECT_EQ(counters.breaker_opens, 1);
  EXPECT_EQ(counters.retries, 2);
}

TEST(ResilientProvider, FailedTrialReopens) {
  FakeClock fake;
  auto inner = std::make_unique<ScriptedProvider>();
  inner->set_default(Status::IOError("down"));
  ScriptedProvider* scripted = inner.get();
  ResilientProvider provider(std::move(inner), RetryConfig(5, 2), fake.clock());
  // Attempts 1 and 2 fail and open the breaker; attempt 3 fails fast.
  auto result = provider.List();
  EXPECT_NE(result.status().message().find("circuit breaker open"), std::string::npos);
  EXPECT_NE(result.status().message().find("last error: down"), std::string::npos)
      << result.status().message();
  EXPECT_EQ(scripted->calls(), 2);
  fake.Advance(31);
  // The trial fails: open again; the retry after it fails fast.
  EXPECT_FALSE(provider.List().ok());
  EXPECT_EQ(scripted->calls(), 3);
  EXPECT_EQ(provider.breaker_state(), CircuitBreaker::State::kOpen);
  EXPECT_EQ(provider.counters().breaker_opens, 2);
}

TEST(ResilientProvider, ConcurrentCallersKeepCountersConsistent) {
  auto inner = std::make_unique<ScriptedProvider>();
  ScriptedProvider* scripted = inner.get();
  for (int i = 0; i < 100; ++i) scripted->Push(i % 3 == 0 ? Status::IOError("x") : Status::OK());
  ProviderClock clock = ProviderClock::Real();
  clock.sleep_s = [](double) {};  // real time, no real sleeping
  ResilientProvider provider(std::move(inner), RetryConfig(10, 1000), clock);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        if (provider.Price(Pool("p")).ok()) ++ok;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), 100);
  auto counters = provider.counters();
  EXPECT_EQ(counters.calls, 100);
  EXPECT_EQ(counters.retries + counters.calls, scripted->calls());
  EXPECT_EQ(counters.failures, 0);
}

TEST(ProviderStrings, States) {
  EXPECT_EQ(ToString(CloudNode::State::kProvisioning), "provisioning");
  EXPECT_EQ(ToString(CloudNode::State::kRunning), "running");
  EXPECT_EQ(ToString(CloudNode::State::kInterrupted), "interrupted");
  EXPECT_EQ(ToString(CloudNode::State::kTerminated), "terminated");
}

// ---------------------------------------------------------------- local: options

TEST(LocalProviderOptions, FromConfigParams) {
  sched::ProviderConfig config;
  config.name = "lab";
  config.spot_interruptions_per_hour = 2.5;
  config.params = {{"ferry_binary", "/usr/bin/ferry"},
                   {"server_url", "http://127.0.0.1:1"},
                   {"agent_token_file", "/tmp/t"},
                   {"ca_file", "/tmp/ca.pem"},
                   {"work_dir", "/tmp/w"},
                   {"name_prefix", "lab"},
                   {"seed", "99"},
                   {"fail_next_provisions", "2"},
                   {"stop_timeout_s", "1.5"}};
  ASSERT_OK_AND_ASSIGN(LocalProviderOptions options,
                       LocalProviderOptionsFromConfig(config, LocalProviderOptions{}));
  EXPECT_EQ(options.ferry_binary, "/usr/bin/ferry");
  EXPECT_EQ(options.server_url, "http://127.0.0.1:1");
  EXPECT_EQ(options.agent_token_file, "/tmp/t");
  EXPECT_EQ(options.ca_file, "/tmp/ca.pem");
  EXPECT_EQ(options.work_dir, "/tmp/w");
  EXPECT_EQ(options.name_prefix, "lab");
  EXPECT_EQ(options.seed, 99u);
  EXPECT_EQ(options.fail_next_provisions, 2);
  EXPECT_DOUBLE_EQ(options.stop_timeout_s, 1.5);
  EXPECT_DOUBLE_EQ(options.spot_interruptions_per_hour, 2.5);

  config.params = {{"sead", "1"}};
  auto typo = LocalProviderOptionsFromConfig(config, {});
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().code(), StatusCode::kInvalid);
  EXPECT_NE(typo.status().message().find("provider 'lab': params.sead: unknown"), std::string::npos)
      << typo.status().message();
  config.params = {{"stop_timeout_s", "soon"}};
  EXPECT_FALSE(LocalProviderOptionsFromConfig(config, {}).ok());
  config.params = {{"seed", "-1"}};
  EXPECT_FALSE(LocalProviderOptionsFromConfig(config, {}).ok());
}

TEST(ProviderParams, ReadsTheTableAndNamesTheKeyOfEveryError) {
  std::string text;
  double number = 0;
  int small = 0;
  int64_t big = 0;
  ProviderParams params("test");
  params.Text("name", &text)
      .Number("rate", &number)
      .Integer("width", &small, 1, 8)
      .Integer("count", &big);
  sched::ProviderConfig config;
  config.name = "p";
  config.params = {{"name", "x y"}, {"rate", "0.25"}, {"width", "8"}, {"count", "12"}};
  ASSERT_OK(params.Read(config));
  EXPECT_EQ(text, "x y");
  EXPECT_DOUBLE_EQ(number, 0.25);
  EXPECT_EQ(small, 8);
  EXPECT_EQ(big, 12);

  auto error = [&](std::map<std::string, std::string> values) {
    config.params = std::move(values);
    Status status = params.Read(config);
    EXPECT_EQ(status.code(), StatusCode::kInvalid);
    return status.message();
  };
  EXPECT_EQ(error({{"nmae", "x"}}),
            "provider 'p': params.nmae: unknown setting of the test provider (expected name, "
            "rate, width or count)");
  EXPECT_EQ(error({{"rate", "fast"}}),
            "provider 'p': params.rate: expected a number >= 0, got 'fast'");
  EXPECT_EQ(error({{"rate", "-1"}}), "provider 'p': params.rate: expected a number >= 0, got '-1'");
  EXPECT_EQ(error({{"rate", "inf"}}),
            "provider 'p': params.rate: expected a number >= 0, got 'inf'");
  EXPECT_EQ(error({{"width", "9"}}),
            "provider 'p': params.width: expected an integer from 1 to 8, got '9'");
  EXPECT_EQ(error({{"width", "2.5"}}),
            "provider 'p': params.width: expected an integer from 1 to 8, got '2.5'");
  EXPECT_EQ(error({{"count", ""}}), "provider 'p': params.count: expected an integer >= 0, got ''");
  EXPECT_EQ(error({{"count", "99999999999999999999"}}),
            "provider 'p': params.count: expected an integer >= 0, got '99999999999999999999'");
  // A refused value is not stored.
  EXPECT_EQ(small, 8);
}

TEST(LocalProviderOptions, MakeRefusesIncompleteOptions) {
  LocalProviderOptions options;
  EXPECT_EQ(MakeLocalProvider(options).status().code(), StatusCode::kInvalid);
  options.ferry_binary = "/nonexistent/ferry";
  options.server_url = "http://127.0.0.1:1";
  options.agent_token_file = "/tmp/none";
  options.work_dir = "/tmp";
  auto missing = MakeLocalProvider(options);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("not an executable"), std::string::npos);
  options.ferry_binary = FERRY_BINARY;
  options.name_prefix = "bad/prefix";
  EXPECT_FALSE(MakeLocalProvider(options).ok());
  options.name_prefix = "ok";
  options.spot_interruptions_per_hour = -1;
  EXPECT_FALSE(MakeLocalProvider(options).ok());

  sched::ProviderConfig config;
  config.name = "cloud";
  config.type = "aws";
  auto unknown = MakeProvider(config, options);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown type 'aws'"), std::string::npos);
}

// ---------------------------------------------------------------- local: real agents

using ferry::testing::ReadFile;
using ferry::testing::WaitFor;

// Live (non-zombie) processes whose command line holds "--name <node>".
std::vector<pid_t> AgentPids(const std::string& node) {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename();
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), ::isdigit)) continue;
    const std::string cmdline = ReadFile(entry.path() / "cmdline");
    std::vector<std::string> args;
    std::string arg;
    for (char c : cmdline) {
      if (c == '\0') {
        args.push_back(arg);
        arg.clear();
      } else {
        arg += c;
      }
    }
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--name" && args[i + 1] == node && args[0] == FERRY_BINARY) {
        pids.push_back(std::atoi(pid.c_str()));
      }
    }
  }
  return pids;
}
int CountAgentProcesses(const std::string& node) {
  return static_cast<int>(AgentPids(node).size());
}

// A server in a thread over an in-memory store, for the agents to register with.
class TestServer {
 public:
  explicit TestServer(const std::string& dir) {
    options_.store_url = "sqlite::memory:";
    options_.port = 0;
    options_.port_file = dir + "/port";
    options_.data_dir = dir;
    options_.threads = 4;
    options_.rate_per_second = 0;
    thread_ = std::thread([this] {
      status_ = RunServer(options_, &stop_, /*handle_signals=*/false);
      finished_ = true;
    });
    WaitFor([&] { return finished_.load() || !ReadFile(options_.port_file).empty(); });
    port_ = std::atoi(ReadFile(options_.port_file).c_str());
    admin_token_ = ReadFile(dir + "/admin.token");
    while (!admin_token_.empty() && std::isspace(static_cast<unsigned char>(admin_token_.back()))) {
      admin_token_.pop_back();
    }
  }
  ~TestServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  bool ok() const { return port_ > 0 && !finished_.load(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  Status status() const { return status_; }

  // Node name → state, from GET /v1/nodes.
  std::map<std::string, std::string> Nodes() const {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(5);
    client.set_read_timeout(10);
    auto result = client.Get("/v1/nodes", {{"Authorization", "Bearer " + admin_token_}});
    std::map<std::string, std::string> out;
    if (!result || result->status != 200) return out;
    json body = json::parse(result->body, nullptr, false);
    if (!body.is_object() || !body["nodes"].is_array()) return out;
    for (const auto& node : body["nodes"]) {
      out[node.value("name", "")] = node.value("state", "");
      gpus_[node.value("name", "")] = node["gpus"].is_array() ? node["gpus"].size() : 0;
      pools_[node.value("name", "")] = node.value("pool", "");
    }
    return out;
  }
  size_t gpus(const std::string& node) const { return gpus_[node]; }
  std::string pool(const std::string& node) const { return pools_[node]; }

 private:
  ServerOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  Status status_;
  std::thread thread_;
  int port_ = 0;
  std::string admin_token_;
  mutable std::map<std::string, size_t> gpus_;
  mutable std::map<std::string, std::string> pools_;
};

class LocalProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(scratch_.ok());
    dir_ = scratch_.path();
    // Unique per process, so that concurrent test runs never see each other's agents.
    prefix_ = "pt" + std::to_string(getpid());
  }

  LocalProviderOptions Options(const std::string& server_url) const {
    LocalProviderOptions options;
    options.ferry_binary = FERRY_BINARY;
    options.server_url = server_url;
    options.agent_token_file = dir_ + "/agent.token";
    options.work_dir = dir_ + "/nodes";
    options.name_prefix = prefix_;
    options.stop_timeout_s = 5;
    return options;
  }

  static sched::PoolConfig CloudPool(const std::string& name, bool spot, double delay_s) {
    sched::PoolConfig pool = Pool(name);
    pool.spot = spot;
    pool.provisioning_delay_s = delay_s;
    pool.node.gpu_model = "L4";
    pool.node.gpus = 2;
    pool.node.gpu_memory_mb = 23034;
    pool.node.cpus = 4;
    pool.node.memory_mb = 8192;
    return pool;
  }

  static std::map<std::string, CloudNode::State> States(Provider& provider) {
    std::map<std::string, CloudNode::State> out;
    auto list = provider.List();
    if (list.ok()) {
      for (const auto& node : *list) out[node.name] = node.state;
    }
    return out;
  }

  ferry::testing::ScratchDir scratch_{"ferry-provider-test"};
  std::string dir_;
  std::string prefix_;
};

TEST_F(LocalProviderTest, ProvisionedAgentsRegisterAndDeprovisionStopsThem) {
  TestServer server(dir_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<std::string> names;
  {
    ASSERT_OK_AND_ASSIGN(auto provider, MakeLocalProvider(Options(server.url())));
    EXPECT_EQ(provider->name(), "local");
    const sched::PoolConfig pool = CloudPool("gpu", /*spot=*/false, 0.2);
    ASSERT_OK_AND_ASSIGN(double price, provider->Price(pool));
    EXPECT_DOUBLE_EQ(price, 2.5);

    ASSERT_OK_AND_ASSIGN(names, provider->Provision(pool, 2));
    ASSERT_EQ(names, (std::vector<std::string>{prefix_ + "-gpu-1", prefix_ + "-gpu-2"}));
    // Names come back at once, before the agents start.
    ASSERT_OK_AND_ASSIGN(auto listed, provider->List());
    ASSERT_EQ(listed.size(), 2u);
    for (const auto& node : listed) {
      EXPECT_EQ(node.pool, "gpu");
      EXPECT_FALSE(node.spot);
      EXPECT_GT(node.requested_s, 0);
    }

    // Both agents register with the server, with the pool's shape.
    ASSERT_TRUE(WaitFor([&] {
      auto nodes = server.Nodes();
      return nodes[names[0]] == "READY" && nodes[names[1]] == "READY";
    })) << ReadFile(dir_ + "/nodes/" + names[0] + "/agent.log");
    EXPECT_EQ(server.gpus(names[0]), 2u);
    EXPECT_EQ(server.pool(names[1]), "gpu");
    auto states = States(*provider);
    EXPECT_EQ(states[names[0]], CloudNode::State::kRunning);
    EXPECT_EQ(states[names[1]], CloudNode::State::kRunning);
    ASSERT_OK_AND_ASSIGN(listed, provider->List());
    for (const auto& node : listed) EXPECT_GE(node.ready_s, node.requested_s);
    EXPECT_EQ(CountAgentProcesses(names[0]), 1);
    EXPECT_EQ(CountAgentProcesses(names[1]), 1);

    // max_nodes (4) bounds the active nodes of the pool.
    auto too_many = provider->Provision(pool, 3);
    EXPECT_EQ(too_many.status().code(), StatusCode::kInvalid);

    // Deprovision stops and reaps the agent; again is fine, as is an unknown node.
    ASSERT_OK(provider->Deprovision(names[0]));
    EXPECT_EQ(CountAgentProcesses(names[0]), 0);
    EXPECT_EQ(States(*provider)[names[0]], CloudNode::State::kTerminated);
    ASSERT_OK(provider->Deprovision(names[0]));
    ASSERT_OK(provider->Deprovision("no-such-node"));
    EXPECT_EQ(CountAgentProcesses(names[1]), 1);
    EXPECT_TRUE(provider->TakeInterruptions().empty());
  }
  // The destructor stopped the other one.
  EXPECT_EQ(CountAgentProcesses(names[1]), 0);
}

TEST_F(LocalProviderTest, SpotNodesAreInterruptedAndReportedOnce) {
  TestServer server(dir_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  LocalProviderOptions options = Options(server.url());
  options.spot_interruptions_per_hour = 36000;  // about 0.1 s per node
  options.seed = 3;
  ASSERT_OK_AND_ASSIGN(auto provider, MakeLocalProvider(options));

  // On-demand nodes of the same provider are never interrupted.
  ASSERT_OK_AND_ASSIGN(auto steady, provider->Provision(CloudPool("od", false, 0), 1));
  ASSERT_OK_AND_ASSIGN(auto spot, provider->Provision(CloudPool("spot", true, 0), 1));
  ASSERT_EQ(spot.size(), 1u);

  std::vector<std::string> interrupted;
  ASSERT_TRUE(WaitFor([&] {
    for (auto& name : provider->TakeInterruptions()) interrupted.push_back(name);
    return !interrupted.empty();
  }));
  EXPECT_EQ(interrupted, spot);
  EXPECT_EQ(States(*provider)[spot[0]], CloudNode::State::kInterrupted);
  EXPECT_EQ(CountAgentProcesses(spot[0]), 0);
  EXPECT_TRUE(provider->TakeInterruptions().empty());  // reported once
  ASSERT_TRUE(WaitFor([&] { return States(*provider)[steady[0]] == CloudNode::State::kRunning; }));
  EXPECT_EQ(CountAgentProcesses(steady[0]), 1);
  ASSERT_OK(provider->Deprovision(spot[0]));  // removing an interrupted node is fine
  provider.reset();
  EXPECT_EQ(CountAgentProcesses(steady[0]), 0);
}

TEST_F(LocalProviderTest, InjectedFailuresAreRetriedByTheResilientWrapper) {
  // No server needed: the nodes are removed before their (long) delay ends.
  LocalProviderOptions options = Options("http://127.0.0.1:9");
  options.fail_next_provisions = 2;
  ASSERT_OK_AND_ASSIGN(auto local, MakeLocalProvider(options));
  FakeClock fake;
  ResilientProvider provider(std::move(local), RetryConfig(3, 10), fake.clock());
  ASSERT_OK_AND_ASSIGN(auto names, provider.Provision(CloudPool("slow", false, 3600), 1));
  EXPECT_EQ(provider.counters().retries, 2);
  EXPECT_EQ(fake.sleeps.size(), 2u);
  EXPECT_EQ(States(provider)[names[0]], CloudNode::State::kProvisioning);
  ASSERT_OK(provider.Deprovision(names[0]));
  EXPECT_EQ(States(provider)[names[0]], CloudNode::State::kTerminated);
  // A bad request is not retried.
  EXPECT_EQ(provider.Provision(CloudPool("slow", false, 1), 0).status().code(),
            StatusCode::kInvalid);
  EXPECT_EQ(provider.counters().retries, 2);
}

TEST_F(LocalProviderTest, DestructorStopsAgentsThatAreStillStarting) {
  TestServer server(dir_);
  ASSERT_TRUE(server.ok());
  std::vector<std::string> names;
  {
    ASSERT_OK_AND_ASSIGN(auto provider, MakeLocalProvider(Options(server.url())));
    ASSERT_OK_AND_ASSIGN(names, provider->Provision(CloudPool("mix", false, 0), 2));
    ASSERT_OK_AND_ASSIGN(auto later, provider->Provision(CloudPool("late", false, 3600), 1));
    ASSERT_TRUE(WaitFor(
        [&] { return CountAgentProcesses(names[0]) == 1 && CountAgentProcesses(names[1]) == 1; }));
    names.push_back(later[0]);
  }
  for (const auto& name : names) EXPECT_EQ(CountAgentProcesses(name), 0) << name;
}

TEST_F(LocalProviderTest, AnAgentThatDiesIsReportedTerminated) {
  TestServer server(dir_);
  ASSERT_TRUE(server.ok());
  ASSERT_OK_AND_ASSIGN(auto provider, MakeLocalProvider(Options(server.url())));
  ASSERT_OK_AND_ASSIGN(auto names, provider->Provision(CloudPool("crash", false, 0), 1));
  ASSERT_TRUE(WaitFor([&] { return CountAgentProcesses(names[0]) == 1; }));
  const std::string log = dir_ + "/nodes/" + names[0] + "/agent.log";
  EXPECT_TRUE(fs::exists(log));
  // The agent crashes: the provider notices, reaps it and says so.
  ASSERT_EQ(kill(AgentPids(names[0]).at(0), SIGKILL), 0);
  ASSERT_TRUE(
      WaitFor([&] { return States(*provider)[names[0]] == CloudNode::State::kTerminated; }));
  EXPECT_EQ(CountAgentProcesses(names[0]), 0);
  EXPECT_TRUE(provider->TakeInterruptions().empty());  // a crash is no spot interruption
  // Its slot is free again.
  sched::PoolConfig one = CloudPool("crash", false, 3600);
  one.max_nodes = 1;
  ASSERT_OK(provider->Provision(one, 1));
}

}  // namespace
}  // namespace ferry::fleet
