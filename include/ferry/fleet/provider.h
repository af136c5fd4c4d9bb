// Cloud burst: provider adapters that create and remove GPU nodes, and the
// resilience every adapter gets (retries with exponential back-off and full
// jitter, a circuit breaker). The `local` provider starts real `ferry agent`
// processes on this machine with a configured price, provisioning delay and
// spot-interruption rate, so tests and demos burst onto real agents.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/sched.h"

namespace ferry::fleet {

// A node a provider created (or is creating).
struct CloudNode {
  std::string name;  // the agent's node name (unique across the fleet)
  std::string pool;
  bool spot = false;
  enum class State { kProvisioning, kRunning, kInterrupted, kTerminated };
  State state = State::kProvisioning;
  double requested_s = 0;  // provider clock (seconds)
  double ready_s = 0;      // when it reached kRunning (0 before)
};
std::string_view ToString(CloudNode::State state);  // "provisioning", "running", ...

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string_view name() const = 0;
  // Starts creating `count` nodes of the pool's shape; returns their names at
  // once (they register with the server when ready).
  virtual Result<std::vector<std::string>> Provision(const sched::PoolConfig& pool, int count) = 0;
  // Removes a node (idempotent: an unknown or already removed node is OK).
  virtual Status Deprovision(const std::string& node) = 0;
  virtual Result<std::vector<CloudNode>> List() = 0;
  // Current price per GPU-hour of the pool's capacity (spot or on-demand).
  virtual Result<double> Price(const sched::PoolConfig& pool) = 0;
  // Spot nodes the provider took back since the last call (each reported once).
  virtual std::vector<std::string> TakeInterruptions() = 0;
};

// ---- Resilience.

// Clock and sleep, replaceable in tests.
struct ProviderClock {
  std::function<double()> now_s;                // monotonic seconds
  std::function<void(double seconds)> sleep_s;  // blocks (or advances a fake clock)
  static ProviderClock Real();
};

// Closed → (breaker_failures consecutive failures) → open: calls fail fast
// with kIOError ("circuit open") for breaker_open_s → half-open: one trial call; success
// closes, failure opens again.
class CircuitBreaker {
 public:
  enum class State { kClosed, kOpen, kHalfOpen };
  CircuitBreaker(int failure_threshold, double open_s);
  // Whether a call may go out now (moves open → half-open when the time is up).
  bool Allow(double now_s);
  void RecordSuccess();
  void RecordFailure(double now_s);
  State state() const { return state_; }
  int consecutive_failures() const { return failures_; }

 private:
  int threshold_;
  double open_s_;
  State state_ = State::kClosed;
  int failures_ = 0;
  double opened_at_s_ = 0;
  bool trial_in_flight_ = false;
};
std::string_view ToString(CircuitBreaker::State state);  // "closed", "open", "half_open"

// Wraps a provider: each call is retried up to max_attempts times on
// transient errors, kIOError and kTimedOut (StatusCode has no kUnavailable;
// an unavailable provider answers kIOError), never on kInvalid, sleeping
// uniform(0, min(backoff_max, backoff_base * 2^attempt)) between tries, and
// goes through the circuit breaker (one breaker per provider). Counters for
// metrics: calls, retries, failures, breaker opens.
class ResilientProvider : public Provider {
 public:
  ResilientProvider(std::unique_ptr<Provider> inner, const sched::ProviderConfig& config,
                    ProviderClock clock = ProviderClock::Real(), uint64_t seed = 1);
  ~ResilientProvider() override;
  std::string_view name() const override;
  Result<std::vector<std::string>> Provision(const sched::PoolConfig& pool, int count) override;
  Status Deprovision(const std::string& node) override;
  Result<std::vector<CloudNode>> List() override;
  Result<double> Price(const sched::PoolConfig& pool) override;
  std::vector<std::string> TakeInterruptions() override;

  struct Counters {
    int64_t calls = 0;
    int64_t retries = 0;
    int64_t failures = 0;  // calls that failed after every attempt (or fast-failed)
    int64_t breaker_opens = 0;
  };
  Counters counters() const;
  CircuitBreaker::State breaker_state() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- Provider params.

// Reads a ProviderConfig's `params` (text values) into typed fields, from a
// table of the settings a provider kind knows:
//
//   ProviderParams params("slurm");
//   params.Text("endpoint", &s.endpoint).Number("timeout_s", &s.timeout_s)
//       .Integer("submit_parallelism", &s.submit_parallelism, 1, 64);
//   FERRY_RETURN_NOT_OK(params.Read(config));
//
// Numbers are >= 0 (finite), integers whole and within [min, max]. An
// unknown key or a bad value is kInvalid, prefixed "provider '<name>': "
// and naming the key (an unknown key's message lists the known ones).
class ProviderParams {
 public:
  explicit ProviderParams(std::string kind);
  ProviderParams& Text(std::string key, std::string* out);
  ProviderParams& Number(const std::string& key, double* out);
  ProviderParams& Integer(const std::string& key, int64_t* out, int64_t min = 0,
                          int64_t max = INT64_MAX);
  ProviderParams& Integer(const std::string& key, int* out, int min = 0, int max = INT32_MAX);
  ProviderParams& Integer(const std::string& key, uint64_t* out);
  Status Read(const sched::ProviderConfig& config) const;

 private:
  struct Entry {
    std::string key;
    std::function<Status(const std::string& value)> set;
  };
  ProviderParams& Add(std::string key, std::function<Status(const std::string&)> set);
  std::string kind_;
  std::vector<Entry> entries_;
};

// ---- The local provider.
struct LocalProviderOptions {
  std::string ferry_binary;           // path of `ferry` (runs `ferry agent ...`)
  std::string server_url;             // http://127.0.0.1:PORT (https:// when the server has TLS)
  std::string agent_token_file;       // the agent identity's token
  std::string ca_file;                // the agents' --ca-file for an https server; empty: none
  std::string work_dir;               // each node gets <work_dir>/<node>/
  std::string name_prefix = "cloud";  // nodes are "<prefix>-<pool>-<n>"
  double spot_interruptions_per_hour = 0;  // per running spot node (Poisson)
  uint64_t seed = 1;
  // Fault injection for tests: the next N calls of Provision fail with kIOError
  // ("unavailable", the transient kind).
  int fail_next_provisions = 0;
  // Deprovision: SIGTERM, then SIGKILL after this many seconds.
  double stop_timeout_s = 5;
};

// Provisioning waits pool.provisioning_delay_s (in a background thread)
// before starting the agent with the pool's shape as fake GPUs. A spot
// interruption kills the agent (SIGKILL) and reports the node in
// TakeInterruptions(). Deprovision stops the agent (SIGTERM, then SIGKILL)
// and reaps it. The destructor removes every node.
Result<std::unique_ptr<Provider>> MakeLocalProvider(const LocalProviderOptions& options);

// `base` with the local provider's settings from a ProviderConfig applied:
// its spot_interruptions_per_hour, and the params ferry_binary, server_url,
// agent_token_file, ca_file, work_dir, name_prefix, seed, fail_next_provisions and
// stop_timeout_s. An unknown param or a bad number is kInvalid.
Result<LocalProviderOptions> LocalProviderOptionsFromConfig(const sched::ProviderConfig& config,
                                                            LocalProviderOptions base);

// The adapter a ProviderConfig names (type "local": MakeLocalProvider with
// LocalProviderOptionsFromConfig(config, local_base)), wrapped in a
// ResilientProvider with the config's retry and breaker settings.
Result<std::unique_ptr<Provider>> MakeProvider(const sched::ProviderConfig& config,
                                               const LocalProviderOptions& local_base);

}  // namespace ferry::fleet
