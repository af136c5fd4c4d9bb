// One scheduling cycle in order (index, usage and quotas, the queue, burst,
// scale-down) and the job loop: for each job in policy order, placement,
// else preemption, else a backfill reservation.
#include "fleet/sched/cycle_run.h"

namespace ferry::fleet::sched::internal {

// ---------------------------------------------------------------- the job loop

void CycleRun::Schedule(int index) {
  const PendingJob& p = snap_.pending[static_cast<size_t>(index)];
  const JobInfo& job = jobs_[static_cast<size_t>(index)];
  const Shape& s = job.shape;

  // Models the fleet could ever give this gang, then the quota (hard).
  const Owner& owner = OwnerOf(job);
  std::vector<int>& possible = scratch_possible_;
  std::vector<int>& admitted = scratch_admitted_;
  possible.clear();
  admitted.clear();
  std::string quota_message;
  for (int m : Models(job)) {
    if (EverCapacity(job, m) < s.tasks) continue;
    possible.push_back(m);
    if (s.gpus == 0) {
      admitted.push_back(m);
      continue;
    }
    // The ledger only changes when a job is placed: until then an owner's
    // verdict for the same model and size is the same.
    auto& memo = quota_memo_[MemoKey{job.owner, m, static_cast<uint64_t>(s.tasks * s.gpus)}];
    if (memo.first != epoch_ + 1) {
      memo = {epoch_ + 1, ledger_.CanAdmit(owner.tenant, owner.team, owner.user, ModelName(m),
                                           static_cast<int>(s.tasks * s.gpus))};
    }
    const QuotaLedger::Verdict& v = memo.second;
    if (v.ok) {
      admitted.push_back(m);
    } else if (quota_message.empty()) {
      quota_message = v.message;
    }
  }
  if (admitted.empty()) {
    bool limited = false;
    if (TryReclaim(index, job, possible, &limited)) return;
    if (limited) {
      const std::string& limit = LimitText();
      std::string message;
      message.reserve(limit.size() + 2 + quota_message.size());
      message.append(limit).append("; ").append(quota_message);
      SetReason(index, reason::kPolicy, std::move(message));
      return;
    }
    SetReason(index, reason::kQuotaExceeded, quota_message);
    return;
  }

  // The best placement over the admitted models: lowest tiers first, then
  // (a job with cached inputs) the most input bytes already on its nodes,
  // then the order the job lists its models in.
  const uint64_t mask = MaskFor(job);
  std::vector<Pick>& picks = scratch_picks_;
  std::vector<Pick>& best = scratch_best_;
  best.clear();
  int best_model = -1;
  bool have_best = false;
  const bool local = !p.cached_bytes.empty();
  int64_t best_score = 0, best_local = 0, found_most = 0;
  for (int m : admitted) {
    int64_t found = 0;
    if (!Search(job, p, m, mask, &picks, &found)) {
      found_most = std::max(found_most, found);
      continue;
    }
    const Tiers& tiers = TiersFor(job, p);
    int64_t score = 0;
    for (const Pick& pick : picks) {
      score +=
          tiers.tier_of_pool[static_cast<size_t>(nodes_[static_cast<size_t>(pick.node)].pool)] *
          pick.tasks;
    }
    const int64_t local_bytes = local ? LocalBytes(scratch_local_, picks) : 0;
    if (!have_best || score < best_score || (score == best_score && local_bytes > best_local)) {
      have_best = true;
      best = picks;
      best_model = m;
      best_score = score;
      best_local = local_bytes;
    }
    // Nothing beats the lowest tiers, unless another model finds more cached bytes.
    if (score == 0 && (!local || scratch_local_.empty())) break;
  }
  if (have_best) {
    Place(index, job, best_model, best, mask);
    return;
  }

  // Held back only by a backfill reservation?
  const uint64_t all =
      reservations_.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << reservations_.size()) - 1;
  if (!reservations_.empty() && mask != all) {
    for (int m : admitted) {
      int64_t found = 0;
      if (Search(job, p, m, all, &picks, &found)) {
        for (size_t r = 0; r < reservations_.size(); ++r) {
          if ((mask >> r) & 1) continue;
          const std::string& held = ReservedText(r);
          if (!std::isfinite(reservations_[r].start_s)) {
            SetReason(index, reason::kPolicy, held);
            return;
          }
          std::string message;
          if (p.max_runtime_s > 0) {
            const std::string end = FormatNumber(now_ + p.max_runtime_s);
            message.reserve(held.size() + 30 + end.size());
            message.append(held).append("; this job would end at t=").append(end);
          } else {
            message.reserve(held.size() + 30);
            message.append(held).append("; this job has no max runtime");
          }
          SetReason(index, reason::kPolicy, std::move(message));
          return;
        }
      }
    }
  }

  auto waiting = waiting_for_.empty() ? waiting_for_.end() : waiting_for_.find(job.job_id);
  if (waiting != waiting_for_.end()) {
    SetReason(index, reason::kWaitingForPreemption,
              "waiting for " + std::to_string(waiting->second) +
                  " preempted job(s) to release their resources");
    return;
  }
  if (TryPriority(index, job, admitted)) return;
  bool limited = false;
  if (TryReclaim(index, job, admitted, &limited)) return;
  if (limited) {
    SetReason(index, reason::kPolicy, LimitText());
    return;
  }
  if (found_most > 0) {
    const std::string& what = ShapeText(index);
    const std::string count = std::to_string(found_most);
    std::string message;
    message.reserve(what.size() + count.size() + 17);
    message.append("only ").append(count).append(" of ").append(what).append(" fit now");
    SetReason(index, reason::kGangIncomplete, std::move(message));
  } else {
    SetReason(index, reason::kNoCapacity, NoCapacityMessage(index));
  }
  if (config_.backfill.enabled &&
      static_cast<int>(reservations_.size()) < config_.backfill.reservations &&
      reserve_attempts_ < 4 * config_.backfill.reservations + 4) {
    TryReserve(index, job, admitted);
  }
}

Decision CycleRun::Run() {
  const auto start = std::chrono::steady_clock::now();
  IndexPools();
  IndexNodes();
  IndexRunning();
  NoteBorrowing();
  PrepareJobs();
  out_.stats.pending = static_cast<int>(snap_.pending.size());
  queue_ = MakeJobQueue(config_, snap_, usage_, queue_candidates_);
  for (int i = queue_->Next(); i >= 0; i = queue_->Next()) {
    const size_t k = static_cast<size_t>(i);
    if (k >= jobs_.size() || !jobs_[k].ok || placed_[k] || has_reason_[k]) continue;
    out_.stats.considered++;
    considered_order_.push_back(i);
    Schedule(i);
  }
  Burst();
  ScaleDowns();
  for (size_t i = 0; i < jobs_.size(); ++i) {
    if (placed_[i] || has_reason_[i] == 2) continue;
    if (has_reason_[i] == 0) {
      // The queue left it out (it should not): still one reason per job.
      SetReason(static_cast<int>(i), reason::kPolicy, "not considered in this cycle");
    }
  }
  NoteQueuePositions();
  out_.quotas = ledger_.Standings();
  out_.stats.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return std::move(out_);
}

void CycleRun::NoteQueuePositions() {
  std::unordered_map<OwnerKey, int, OwnerKeyHash> team_ahead;
  int position = 0;
  for (const int i : considered_order_) {
    const size_t k = static_cast<size_t>(i);
    if (placed_[k] || reason_slot_[k] < 0) continue;
    const Owner& owner = OwnerOf(jobs_[k]);
    PendingReason& r = ReasonOf(k);
    r.queue_position = position++;
    r.ahead_in_team = team_ahead[OwnerKey{owner.tenant, owner.team, {}}]++;
  }
}

std::optional<std::string> CycleRun::CapacityRefusal() {
  IndexPools();
  IndexNodes();
  PrepareJobs();
  if (never_holds_.empty()) return std::nullopt;
  return ReasonOf(static_cast<size_t>(never_holds_.front())).message;
}

std::optional<std::string> CapacityRefusal(const Config& config, const Snapshot& snapshot) {
  UsageTracker usage;
  return CycleRun(config, snapshot, usage, nullptr).CapacityRefusal();
}

Decision RunCycle(const Config& config, const Snapshot& snapshot, const UsageTracker& usage,
                  RateLimiter* limiter) {
  return CycleRun(config, snapshot, usage, limiter).Run();
}

}  // namespace ferry::fleet::sched::internal
