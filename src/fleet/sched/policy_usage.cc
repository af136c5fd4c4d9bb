// Decayed GPU usage per tenant, team and user (the fair-share history).
#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>

#include "fleet/sched/policy.h"
#include "fleet/sched/policy_util.h"

namespace ferry::fleet::sched::internal {

void UsageTracker::SetHalfLife(double half_life_s) {
  // Config::Validate refuses a non-positive half-life; keep the old one.
  if (std::isfinite(half_life_s) && half_life_s > 0) half_life_s_ = half_life_s;
}

void UsageTracker::Advance(const Snapshot& snapshot) {
  const double now = snapshot.now_s;
  if (!std::isfinite(now)) return;
  if (!last_s_.has_value()) {
    last_s_ = now;
    return;
  }
  if (now < *last_s_) return;
  const double previous = *last_s_;
  last_s_ = now;
  const double elapsed = now - previous;
  if (elapsed > 0) {
    const double factor = std::exp2(-elapsed / half_life_s_);
    for (auto& [path, value] : usage_) value *= factor;
  }
  // GPU-seconds since the previous call, counted undecayed: a cycle interval
  // is short next to any sensible half-life. The three entries of each owner
  // are found once per call (map nodes never move); every entry still adds
  // its jobs one by one in snapshot order, so the sums come out bit for bit
  // as when each job looked its paths up.
  std::unordered_map<OwnerView, std::array<double*, 3>, OwnerViewHash> owners;
  for (const RunningJob& job : snapshot.running) {
    const double from = std::isfinite(job.started_s) ? std::max(job.started_s, previous) : previous;
    if (now <= from) continue;
    const int gpus = RunningGpus(job);
    if (gpus <= 0) continue;
    const double gpu_seconds = gpus * (now - from);
    auto [it, added] = owners.try_emplace(OwnerView{job.tenant, job.team, job.user});
    std::array<double*, 3>& slots = it->second;
    if (added) {
      slots[0] = &usage_[TenantPath(job.tenant)];
      slots[1] = &usage_[TeamPath(job.tenant, job.team)];
      slots[2] = &usage_[UserPath(job.tenant, job.team, job.user)];
    }
    for (double* slot : slots) *slot += gpu_seconds;
  }
}

double UsageTracker::Usage(std::string_view path) const {
  auto it = usage_.find(std::string(path));
  return it == usage_.end() ? 0.0 : it->second;
}

}  // namespace ferry::fleet::sched::internal
