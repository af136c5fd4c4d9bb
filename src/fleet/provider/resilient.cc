// Resilience shared by every provider adapter: the circuit breaker and the
// retrying wrapper, plus the factory that builds an adapter from its config.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <utility>

#include "ferry/fleet/provider.h"

namespace ferry::fleet {

std::string_view ToString(CloudNode::State state) {
  switch (state) {
    case CloudNode::State::kProvisioning:
      return "provisioning";
    case CloudNode::State::kRunning:
      return "running";
    case CloudNode::State::kInterrupted:
      return "interrupted";
    case CloudNode::State::kTerminated:
      return "terminated";
  }
  return "unknown";
}

std::string_view ToString(CircuitBreaker::State state) {
  switch (state) {
    case CircuitBreaker::State::kClosed:
      return "closed";
    case CircuitBreaker::State::kOpen:
      return "open";
    case CircuitBreaker::State::kHalfOpen:
      return "half_open";
  }
  return "unknown";
}

ProviderClock ProviderClock::Real() {
  ProviderClock clock;
  clock.now_s = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  clock.sleep_s = [](double seconds) {
    if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  };
  return clock;
}

// ---------------------------------------------------------------- breaker

CircuitBreaker::CircuitBreaker(int failure_threshold, double open_s)
    : threshold_(std::max(1, failure_threshold)), open_s_(std::max(0.0, open_s)) {}

bool CircuitBreaker::Allow(double now_s) {
  switch (state_) {
    case State::kClosed:
      return true;
    case State::kOpen:
      if (now_s - opened_at_s_ < open_s_) return false;
      state_ = State::kHalfOpen;
      trial_in_flight_ = true;
      return true;
    case State::kHalfOpen:
      // One trial at a time; the others fail fast until it has an answer.
      if (trial_in_flight_) return false;
      trial_in_flight_ = true;
      return true;
  }
  return false;
}

void CircuitBreaker::RecordSuccess() {
  state_ = State::kClosed;
  failures_ = 0;
  trial_in_flight_ = false;
}

void CircuitBreaker::RecordFailure(double now_s) {
  ++failures_;
  if (state_ == State::kHalfOpen || (state_ == State::kClosed && failures_ >= threshold_)) {
    state_ = State::kOpen;
    opened_at_s_ = now_s;
  }
  // A failure of a call that went out before the circuit opened leaves the
  // open period as it was.
  trial_in_flight_ = false;
}

// ---------------------------------------------------------------- retries

namespace {

// Errors worth another try: the provider could not be reached or did not
// answer in time. Anything else (kInvalid: a bad request) fails at once.
bool IsTransient(const Status& status) {
  return status.code() == StatusCode::kIOError || status.code() == StatusCode::kTimedOut;
}

template <typename T>
const Status& StatusOf(const Result<T>& result) {
  return result.status();
}
inline const Status& StatusOf(const Status& status) { return status; }

}  // namespace

struct ResilientProvider::Impl {
  std::unique_ptr<Provider> inner;
  sched::ProviderConfig config;
  ProviderClock clock;
  std::string name;

  mutable std::mutex mutex;  // guards what follows
  CircuitBreaker breaker;
  std::mt19937_64 rng;
  Counters counters;

  Impl(std::unique_ptr<Provider> p, const sched::ProviderConfig& c, ProviderClock k, uint64_t seed)
      : inner(std::move(p)),
        config(c),
        clock(std::move(k)),
        breaker(c.breaker_failures, c.breaker_open_s),
        rng(seed) {
    name = config.name.empty() ? std::string(inner->name()) : config.name;
  }

  // Runs `call` through the breaker, retrying transient errors. The inner
  // provider is called without the lock (it is thread-safe itself), so a slow
  // call never blocks another thread's bookkeeping.
  template <typename F>
  auto Run(std::string_view what, F call) -> decltype(call()) {
    const int attempts = std::max(1, config.max_attempts);
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++counters.calls;
    }
    Status last;
    for (int attempt = 0;; ++attempt) {
      double delay = 0;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!breaker.Allow(clock.now_s())) {
          ++counters.failures;
          std::string message = "provider '" + name + "': " + std::string(what) +
                                ": circuit breaker open after " +
                                std::to_string(breaker.consecutive_failures()) +
                                " consecutive failures; failing fast";
          if (!last.ok()) message += " (last error: " + last.message() + ")";
          return Status::IOError(std::move(message));
        }
      }
      auto result = call();
      const Status& status = StatusOf(result);
      std::unique_lock<std::mutex> lock(mutex);
      if (status.ok() || !IsTransient(status)) {
        // The provider answered (perhaps "bad request"): it is reachable.
        breaker.RecordSuccess();
        if (!status.ok()) ++counters.failures;
        return result;
      }
      const bool was_open = breaker.state() == CircuitBreaker::State::kOpen;
      breaker.RecordFailure(clock.now_s());
      if (!was_open && breaker.state() == CircuitBreaker::State::kOpen) ++counters.breaker_opens;
      last = status;
      if (attempt + 1 >= attempts) {
        ++counters.failures;
        return status.WithPrefix("provider '" + name + "': " + std::string(what) + ": after " +
                                 std::to_string(attempts) + " attempt(s): ");
      }
      // Full jitter: uniform over [0, min(max, base * 2^attempt)).
      const double cap = std::min(config.backoff_max_s,
                                  config.backoff_base_s * std::ldexp(1.0, std::min(attempt, 60)));
      if (cap > 0) delay = std::uniform_real_distribution<double>(0, cap)(rng);
      ++counters.retries;
      lock.unlock();
      clock.sleep_s(delay);
    }
  }
};

ResilientProvider::ResilientProvider(std::unique_ptr<Provider> inner,
                                     const sched::ProviderConfig& config, ProviderClock clock,
                                     uint64_t seed)
    : impl_(std::make_unique<Impl>(std::move(inner), config, std::move(clock), seed)) {}

ResilientProvider::~ResilientProvider() = default;

std::string_view ResilientProvider::name() const { return impl_->name; }

Result<std::vector<std::string>> ResilientProvider::Provision(const sched::PoolConfig& pool,
                                                              int count) {
  return impl_->Run("provision", [&] { return impl_->inner->Provision(pool, count); });
}

Status ResilientProvider::Deprovision(const std::string& node) {
  return impl_->Run("deprovision", [&] { return impl_->inner->Deprovision(node); });
}

Result<std::vector<CloudNode>> ResilientProvider::List() {
  return impl_->Run("list", [&] { return impl_->inner->List(); });
}

Result<double> ResilientProvider::Price(const sched::PoolConfig& pool) {
  return impl_->Run("price", [&] { return impl_->inner->Price(pool); });
}

std::vector<std::string> ResilientProvider::TakeInterruptions() {
  return impl_->inner->TakeInterruptions();
}

ResilientProvider::Counters ResilientProvider::counters() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->counters;
}

CircuitBreaker::State ResilientProvider::breaker_state() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->breaker.state();
}

// ---------------------------------------------------------------- factory

Result<std::unique_ptr<Provider>> MakeProvider(const sched::ProviderConfig& config,
                                               const LocalProviderOptions& local_base) {
  if (config.type != "local") {
    return Status::Invalid("provider '" + config.name + "': unknown type '" + config.type +
                           "' (supported: local)");
  }
  FERRY_ASSIGN_OR_RAISE(LocalProviderOptions options,
                        LocalProviderOptionsFromConfig(config, local_base));
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<Provider> local, MakeLocalProvider(options));
  return std::unique_ptr<Provider>(std::make_unique<ResilientProvider>(
      std::move(local), config, ProviderClock::Real(), options.seed));
}

}  // namespace ferry::fleet
