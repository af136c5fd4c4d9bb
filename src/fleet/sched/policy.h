// Internal seam of the scheduling core: the policy pieces (queue ordering,
// decayed usage, quotas with cohorts, preemption victim choice, the
// fair-share preemption rate limit) that the cycle driver (scheduler.cc)
// calls. Not installed; include/ferry/fleet/sched.h is the public contract.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/fleet/sched.h"

namespace ferry::fleet::sched::internal {

// "tenant", "tenant/team", "tenant/team/user" (an empty team or user is kept
// as an empty segment, so "acme//bob" is a user directly under a tenant).
std::string TenantPath(std::string_view tenant);
std::string TeamPath(std::string_view tenant, std::string_view team);
std::string UserPath(std::string_view tenant, std::string_view team, std::string_view user);

// What a placed job takes, summed over its gang.
struct Demand {
  int gpus = 0;
  double cpus = 0;
  int64_t memory_mb = 0;
};

// ---- Decayed usage (fair share). Lives across cycles inside the Scheduler.
class UsageTracker {
 public:
  void SetHalfLife(double half_life_s);
  // Decays what is stored to snapshot.now_s (factor 0.5^(dt/half_life)) and
  // adds the GPU-seconds every running job used since the previous call (from
  // max(started_s, previous now_s)), to its user, team and tenant paths.
  // The first call only records now_s. A now_s earlier than the previous one
  // is ignored.
  void Advance(const Snapshot& snapshot);
  double Usage(std::string_view path) const;  // 0 when unknown
  const std::unordered_map<std::string, double>& all() const { return usage_; }

 private:
  double half_life_s_ = 7 * 86400;
  std::optional<double> last_s_;
  std::unordered_map<std::string, double> usage_;
};

// ---- Queue ordering. A queue built for one cycle hands out pending jobs in
// policy order; for fair share and DRF the order reacts to what the cycle has
// placed so far (Placed() charges the job's owners).
class JobQueue {
 public:
  virtual ~JobQueue() = default;
  // The next index into snapshot.pending to try, or -1 when none remain.
  // Every candidate is returned exactly once.
  virtual int Next() = 0;
  // The job Next() returned last was placed, taking `total`.
  virtual void Placed(int index, const Demand& total) = 0;
};

// `candidates`: indices into snapshot.pending to order (jobs the driver has
// already ruled out are left out). FIFO: priority desc, submitted_s asc,
// job_id asc. Fair share: Fair Tree over tenant → team → user (shares from
// config.shares, usage from `usage` plus what running jobs hold and this
// cycle places), one user's jobs by priority then age. DRF: the tenant with
// the lowest weighted dominant share (of the schedulable fleet's GPUs, CPUs,
// memory, counting running jobs and this cycle's placements) goes next.
std::unique_ptr<JobQueue> MakeJobQueue(const Config& config, const Snapshot& snapshot,
                                       const UsageTracker& usage,
                                       const std::vector<int>& candidates);

// Fair Tree standings of every path in `usage` and config.shares.
std::vector<ShareStanding> Standings(const Config& config, const UsageTracker& usage);

// ---- Quotas (Kueue-style cohorts), in GPUs.
class QuotaLedger {
 public:
  // Charges every running job (terminating ones too: their GPUs are still held).
  QuotaLedger(const Config& config, const Snapshot& snapshot);

  struct Verdict {
    bool ok = true;          // fits every quota on the path (within nominal or by borrowing)
    bool borrowing = false;  // ok, but some quota goes above its nominal
    std::string
        message;  // when !ok: which quota and why ("acme/vision (H200): 14 of 16 used, ...")
  };
  // Whether `gpus` more GPUs of `model` may be admitted for this owner.
  Verdict CanAdmit(std::string_view tenant, std::string_view team, std::string_view user,
                   std::string_view model, int gpus) const;
  // Whether the owner would stay within nominal on every quota of its path
  // with `gpus` more (then it may reclaim capacity its cohort lent out).
  // False when no quota applies: an owner without quota has no guarantee.
  bool WithinNominal(std::string_view tenant, std::string_view team, std::string_view user,
                     std::string_view model, int gpus) const;
  // Whether some quota on the owner's path is above its nominal now.
  bool Borrowing(std::string_view tenant, std::string_view team, std::string_view user,
                 std::string_view model) const;
  void Charge(std::string_view tenant, std::string_view team, std::string_view user,
              std::string_view model, int gpus);
  void Release(std::string_view tenant, std::string_view team, std::string_view user,
               std::string_view model, int gpus);

  // Submission check: an error when `job` alone needs more than nominal +
  // borrowing limit of a quota on its path (for every model it accepts).
  std::optional<std::string> NeverFits(const PendingJob& job) const;

  // Every quota with what it uses, borrows and lends now (QuotaStanding).
  std::vector<QuotaStanding> Standings() const;

 private:
  // Reads the cohort of each borrowing quota.
  friend std::vector<int> ReclaimCandidates(const Snapshot& snapshot, const QuotaLedger& ledger,
                                            const PendingJob& job, std::string_view model);
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// ---- Preemption.
// Running jobs (indices into snapshot.running) that `job` may preempt by
// priority: preemptible, not terminating, lower priority.
std::vector<int> PriorityCandidates(const Snapshot& snapshot, const PendingJob& job);
// Running jobs `job` may take back by fair-share reclaim: not terminating,
// owned by someone borrowing (QuotaLedger::Borrowing) in a cohort where `job`
// stays within nominal. Only when the ledger says `job` is within nominal.
std::vector<int> ReclaimCandidates(const Snapshot& snapshot, const QuotaLedger& ledger,
                                   const PendingJob& job, std::string_view model);

// Chooses victims among `candidates`: the fewest jobs, then the lowest
// priorities, then the most recently started, such that `fits(victims)` is
// true (the preemptor's gang would fit were they gone). Empty when no subset
// of the candidates works. Calls `fits` O(candidates) times, not 2^n.
std::vector<int> SelectVictims(const Snapshot& snapshot, const std::vector<int>& candidates,
                               const std::function<bool(const std::vector<int>&)>& fits);

// Sliding-window limit on fair-share preemptions.
class RateLimiter {
 public:
  void Configure(int max_events, double window_s);
  // How many more events the window allows at now_s.
  int Available(double now_s);
  void Record(double now_s, int events);

 private:
  int max_events_ = 10;
  double window_s_ = 60;
  std::deque<double> events_;
};

}  // namespace ferry::fleet::sched::internal
