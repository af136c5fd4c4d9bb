// The scheduling core's cycle driver (include/ferry/fleet/sched.h): keeps
// what spans cycles (the config, decayed usage, the fair-share preemption
// rate limit) and runs one cycle per snapshot (cycle.cc).
#include <memory>
#include <utility>

#include "ferry/fleet/sched.h"
#include "fleet/sched/cycle.h"
#include "fleet/sched/policy.h"

namespace ferry::fleet::sched {
namespace {

class CoreScheduler final : public Scheduler {
 public:
  explicit CoreScheduler(Config config) : config_(std::move(config)) { Apply(); }

  Status Reconfigure(Config config) override {
    Status valid = config.Validate();
    if (!valid.ok()) return valid;
    config_ = std::move(config);
    Apply();
    return Status::OK();
  }

  const Config& config() const override { return config_; }

  Decision Cycle(const Snapshot& snapshot) override {
    usage_.Advance(snapshot);
    return internal::RunCycle(config_, snapshot, usage_, &limiter_);
  }

  std::optional<std::string> CheckSubmission(const PendingJob& job) const override {
    if (job.tasks < 1) return "tasks must be >= 1";
    if (job.gpus_per_task < 0) return "gpus_per_task must be >= 0";
    if (job.gpus_per_task == 0) return std::nullopt;  // GPU quotas only
    Snapshot empty;
    internal::QuotaLedger ledger(config_, empty);
    return ledger.NeverFits(job);
  }

  std::optional<std::string> CheckCapacity(const PendingJob& job,
                                           const std::vector<NodeInfo>& nodes) const override {
    Snapshot snapshot;
    snapshot.nodes = nodes;
    snapshot.pending.push_back(job);
    return internal::CapacityRefusal(config_, snapshot);
  }

  std::vector<ShareStanding> FairShare() const override {
    return internal::Standings(config_, usage_);
  }

 private:
  void Apply() {
    usage_.SetHalfLife(config_.usage_half_life_s);
    limiter_.Configure(config_.preemption.fair_share_max, config_.preemption.fair_share_window_s);
  }

  Config config_;
  internal::UsageTracker usage_;
  internal::RateLimiter limiter_;
};

}  // namespace

Result<std::unique_ptr<Scheduler>> Scheduler::Make(Config config) {
  Status valid = config.Validate();
  if (!valid.ok()) return valid;
  return std::unique_ptr<Scheduler>(std::make_unique<CoreScheduler>(std::move(config)));
}

}  // namespace ferry::fleet::sched
