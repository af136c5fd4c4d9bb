// Preemption: which running jobs a pending job may displace, the choice of
// victims, and the sliding-window limit on fair-share preemptions.
#include <algorithm>
#include <cmath>

#include "fleet/sched/policy.h"
#include "fleet/sched/policy_util.h"

namespace ferry::fleet::sched::internal {

std::vector<int> PriorityCandidates(const Snapshot& snapshot, const PendingJob& job) {
  std::vector<int> out;
  for (size_t i = 0; i < snapshot.running.size(); ++i) {
    const RunningJob& running = snapshot.running[i];
    if (running.preemptible && !running.terminating && running.priority < job.priority) {
      out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

std::vector<int> SelectVictims(const Snapshot& snapshot, const std::vector<int>& candidates,
                               const std::function<bool(const std::vector<int>&)>& fits) {
  // Best victims first: lowest priority, then the most recently started
  // (least work lost), then the highest job id; duplicates and indices
  // outside snapshot.running are dropped.
  std::vector<int> order;
  order.reserve(candidates.size());
  for (int index : candidates) {
    if (index >= 0 && static_cast<size_t>(index) < snapshot.running.size()) order.push_back(index);
  }
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  std::sort(order.begin(), order.end(), [&snapshot](int a, int b) {
    const RunningJob& x = snapshot.running[static_cast<size_t>(a)];
    const RunningJob& y = snapshot.running[static_cast<size_t>(b)];
    if (x.priority != y.priority) return x.priority < y.priority;
    if (x.started_s != y.started_s) return x.started_s > y.started_s;
    if (x.job_id != y.job_id) return x.job_id > y.job_id;
    return a < b;
  });
  if (order.empty()) return {};

  // One victim, when one is enough: the best such.
  std::vector<int> trial(1);
  for (int index : order) {
    trial[0] = index;
    if (fits(trial)) return trial;
  }
  if (order.size() == 1) return {};

  // Grow in preference order until the gang fits.
  std::vector<int> victims;
  bool fit = false;
  for (int index : order) {
    victims.push_back(index);
    if (fits(victims)) {
      fit = true;
      break;
    }
  }
  if (!fit) return {};

  // Make the set minimal. The last one added is needed (the set before it did
  // not fit); walking back from the one before it drops higher priorities
  // first, so the victims that stay are the cheapest ones.
  for (size_t k = victims.size() - 1; k-- > 0;) {
    std::vector<int> without;
    without.reserve(victims.size() - 1);
    for (size_t j = 0; j < victims.size(); ++j) {
      if (j != k) without.push_back(victims[j]);
    }
    if (fits(without)) victims = std::move(without);
  }
  return victims;
}

void RateLimiter::Configure(int max_events, double window_s) {
  max_events_ = std::max(0, max_events);
  window_s_ = std::isfinite(window_s) ? std::max(0.0, window_s) : 0.0;
}

int RateLimiter::Available(double now_s) {
  if (std::isfinite(now_s)) {
    // An event at t counts while now - t < window.
    while (!events_.empty() && now_s - events_.front() >= window_s_) events_.pop_front();
  }
  const int used =
      static_cast<int>(std::min<size_t>(events_.size(), static_cast<size_t>(max_events_)));
  return max_events_ - used;
}

void RateLimiter::Record(double now_s, int events) {
  if (!std::isfinite(now_s) || events <= 0) return;
  // Events of one call expire together, so storing more than the limit of
  // them changes nothing Available() can tell.
  while (!events_.empty() && now_s - events_.front() >= window_s_) events_.pop_front();
  const int count = std::min(events, max_events_);
  // Keep the deque sorted even when now_s goes backwards.
  for (int i = 0; i < count; ++i) {
    auto pos = std::upper_bound(events_.begin(), events_.end(), now_s);
    events_.insert(pos, now_s);
  }
}

}  // namespace ferry::fleet::sched::internal
