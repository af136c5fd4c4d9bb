// Where a gang fits now: one node, one interconnect domain, or across the
// tiers of its pool set (bin-pack or spread); CPU-only jobs apart. Under
// latency scoring the tiers also weigh Slurm pools' queue delays.
#include "fleet/sched/cycle_run.h"

namespace ferry::fleet::sched::internal {

int64_t CycleRun::TasksFitting(const IndexedNode& node, int model, const Shape& s, uint64_t mask,
                               int64_t cap) const {
  int64_t gpus = model >= 0 ? FreeGpusOf(node, model) : 0;
  int64_t k = TasksThatFit(s, gpus, node.cpus_free, node.memory_free, cap);
  if (k > 0 && node.reservation >= 0 && !((mask >> node.reservation) & 1)) {
    const Reservation& r = reservations_[static_cast<size_t>(node.reservation)];
    int64_t spare = (model >= 0 && model == r.model) ? node.spare_gpus : kHuge;
    k = std::min(k, TasksThatFit(s, spare, node.spare_cpus, node.spare_memory, cap));
  }
  return k;
}

// The node of `tier_pools` that holds `need` tasks and has the fewest (or the
// most) free GPUs of `model`; -1 when none.
int CycleRun::FindSingleNode(const std::vector<int>& tier_pools, int model, const Shape& s,
                             int64_t need, uint64_t mask, bool most_free_first) {
  const int64_t need_gpus = need * s.gpus;
  int max_c = -1;
  for (int p : tier_pools) max_c = std::max(max_c, BucketsOf(p, model).Max());
  if (need_gpus > max_c) return -1;
  const int lo = static_cast<int>(need_gpus);
  for (int step = 0; step <= max_c - lo; ++step) {
    const int c = most_free_first ? max_c - step : lo + step;
    for (int p : tier_pools) {
      Buckets& b = BucketsOf(p, model);
      if (c > b.Max()) continue;
      for (int n : b.by_free[static_cast<size_t>(c)]) {
        if (mark_[static_cast<size_t>(n)]) continue;
        if (TasksFitting(nodes_[static_cast<size_t>(n)], model, s, mask, need) >= need) return n;
      }
    }
  }
  return -1;
}

const Tiers& CycleRun::SearchTiers(const JobInfo& job, const PendingJob& pending, int model,
                                   int* left_out) {
  *left_out = 0;
  const size_t set_index = static_cast<size_t>(job.set);
  const SetInfo& set = sets_[set_index];
  if (set.scoring != Scoring::kLatency) return TiersFor(job, pending);
  if (set_queues_.size() < sets_.size()) set_queues_.assign(sets_.size(), -1);
  if (set_queues_[set_index] < 0) {
    set_queues_[set_index] = 0;
    for (int p : set.pools) {
      if (StartDelay(pools_[static_cast<size_t>(p)]) > 0) set_queues_[set_index] = 1;
    }
  }
  if (set_queues_[set_index] == 0) return TiersFor(job, pending);
  // Before burst.min_pending_s no cloud node may be requested for the job:
  // nothing beats the Slurm queue then.
  const bool may_burst = now_ - pending.submitted_s >= config_.burst.min_pending_s;
  const MemoKey key{job.key, model, may_burst ? static_cast<uint64_t>(job.shape.tasks) : 0};
  auto it = latency_tiers_.find(key);
  if (it == latency_tiers_.end()) {
    std::vector<std::pair<double, int>> keyed;  // (start delay, pool)
    int out = 0;
    for (int p : set.pools) {
      const double delay = StartDelay(pools_[static_cast<size_t>(p)]);
      if (delay > 0 && may_burst &&
          CloudCapacity(job, model, job.shape.tasks, delay) >= job.shape.tasks) {
        ++out;
        continue;
      }
      keyed.emplace_back(delay, p);
    }
    it = latency_tiers_
             .emplace(key, std::make_pair(GroupTiers(std::move(keyed), pools_.size()), out))
             .first;
  }
  *left_out = it->second.second;
  return it->second.first;
}

const std::vector<LocalNode>& CycleRun::LocalNodes(const PendingJob& pending, int model,
                                                   bool spread) {
  std::vector<LocalNode>& local = scratch_local_;
  local.clear();
  if (pending.cached_bytes.empty()) return local;
  if (!node_of_id_built_) {
    node_of_id_built_ = true;
    node_of_id_.reserve(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const int64_t id = nodes_[i].info->id;
      if (id != 0) node_of_id_.try_emplace(id, static_cast<int>(i));  // the first, as indexed
    }
  }
  for (const auto& [node_id, bytes] : pending.cached_bytes) {
    if (bytes <= 0) continue;
    auto it = node_of_id_.find(node_id);
    if (it == node_of_id_.end() || !nodes_[static_cast<size_t>(it->second)].schedulable) continue;
    local.push_back({it->second, bytes});
  }
  // A node listed twice holds the sum.
  std::sort(local.begin(), local.end(),
            [](const LocalNode& a, const LocalNode& b) { return a.node < b.node; });
  size_t kept = 0;
  for (size_t i = 0; i < local.size(); ++i) {
    if (kept > 0 && local[kept - 1].node == local[i].node) {
      local[kept - 1].bytes += local[i].bytes;
    } else {
      local[kept++] = local[i];
    }
  }
  local.resize(kept);
  std::sort(local.begin(), local.end(), [&](const LocalNode& a, const LocalNode& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (model >= 0) {
      const int fa = FreeGpusOf(nodes_[static_cast<size_t>(a.node)], model);
      const int fb = FreeGpusOf(nodes_[static_cast<size_t>(b.node)], model);
      if (fa != fb) return spread ? fa > fb : fa < fb;
    }
    return a.node < b.node;
  });
  return local;
}

int CycleRun::LocalNodeHolding(const std::vector<LocalNode>& local, const Tiers& tiers, size_t tier,
                               int model, const Shape& s, int64_t need, uint64_t mask) const {
  for (const LocalNode& l : local) {
    const IndexedNode& node = nodes_[static_cast<size_t>(l.node)];
    if (mark_[static_cast<size_t>(l.node)]) continue;
    if (tiers.tier_of_pool[static_cast<size_t>(node.pool)] != static_cast<int>(tier)) continue;
    if (TasksFitting(node, model, s, mask, need) >= need) return l.node;
  }
  return -1;
}

int64_t CycleRun::LocalBytes(const std::vector<LocalNode>& local, const std::vector<Pick>& picks) {
  int64_t bytes = 0;
  for (const Pick& pick : picks) {
    for (const LocalNode& l : local) {
      if (l.node == pick.node) bytes += l.bytes;
    }
  }
  return bytes;
}

bool CycleRun::SearchCpuOnly(const JobInfo& job, const Tiers& tiers, uint64_t mask,
                             const std::vector<LocalNode>& local, std::vector<Pick>* picks,
                             int64_t* found) {
  int64_t remaining = job.shape.tasks;
  for (size_t t = 0; t < tiers.pools.size(); ++t) {
    const std::vector<int>& tier = tiers.pools[t];
    // Nodes holding the job's inputs first, then the others in node order.
    for (const LocalNode& l : local) {
      if (remaining == 0) break;
      const IndexedNode& node = nodes_[static_cast<size_t>(l.node)];
      if (mark_[static_cast<size_t>(l.node)] ||
          tiers.tier_of_pool[static_cast<size_t>(node.pool)] != static_cast<int>(t)) {
        continue;
      }
      int64_t k = TasksFitting(node, -1, job.shape, mask, remaining);
      if (k > 0) {
        picks->push_back({l.node, k});
        mark_[static_cast<size_t>(l.node)] = 1;
        remaining -= k;
      }
    }
    for (size_t i = 0; i < nodes_.size() && remaining > 0; ++i) {
      const IndexedNode& node = nodes_[i];
      if (!node.schedulable || mark_[i]) continue;
      if (std::find(tier.begin(), tier.end(), node.pool) == tier.end()) continue;
      int64_t k = TasksFitting(node, -1, job.shape, mask, remaining);
      if (k > 0) {
        picks->push_back({static_cast<int>(i), k});
        remaining -= k;
      }
    }
  }
  for (const LocalNode& l : local) mark_[static_cast<size_t>(l.node)] = 0;
  *found = job.shape.tasks - remaining;
  return remaining == 0;
}

bool CycleRun::SearchDomain(const JobInfo& job, const Tiers& tiers, int model, const MemoKey& memo,
                            uint64_t mask, bool spread, std::vector<Pick>* picks) {
  const Shape& s = job.shape;
  const size_t models = model_names_.size();
  // A gang of this shape found no domain: nor will a bigger one, later.
  auto failed = domain_fail_.find(memo);
  if (failed != domain_fail_.end() && failed->second <= s.tasks) return false;
  // Domains with enough free GPUs, in preference order (lowest tier of the
  // domain's first node, then tightest for bin-pack or emptiest for spread);
  // the first whose nodes really hold the gang wins.
  using Option = DomainOption;
  std::vector<Option>& options = scratch_domains_;
  options.clear();
  for (size_t d = 0; d < domain_nodes_.size(); ++d) {
    const int64_t free = domain_free_[d * models + static_cast<size_t>(model)];
    if (free < s.tasks * s.gpus) continue;
    const IndexedNode& first = nodes_[static_cast<size_t>(domain_nodes_[d].front())];
    const int tier = tiers.tier_of_pool[static_cast<size_t>(first.pool)];
    options.push_back(
        {static_cast<int>(d), tier < 0 ? std::numeric_limits<int>::max() : tier, free});
  }
  auto better = [spread](const Option& a, const Option& b) {
    if (a.tier != b.tier) return a.tier < b.tier;
    if (a.free != b.free) return spread ? a.free > b.free : a.free < b.free;
    return a.domain < b.domain;
  };
  int best = -1;
  while (!options.empty()) {
    size_t pick = 0;
    for (size_t i = 1; i < options.size(); ++i) {
      if (better(options[i], options[pick])) pick = i;
    }
    const int d = options[pick].domain;
    options[pick] = options.back();
    options.pop_back();
    int64_t sum = 0;
    for (int n : domain_nodes_[static_cast<size_t>(d)]) {
      const IndexedNode& node = nodes_[static_cast<size_t>(n)];
      if (!node.schedulable || tiers.tier_of_pool[static_cast<size_t>(node.pool)] < 0) continue;
      sum += TasksFitting(node, model, s, mask, s.tasks);
      if (sum >= s.tasks) break;
    }
    if (sum >= s.tasks) {
      best = d;
      break;
    }
  }
  if (best < 0) {
    auto& slot = domain_fail_[memo];
    if (slot == 0 || s.tasks < slot) slot = s.tasks;
    return false;
  }
  struct DomainCandidate {
    int node;
    int tier;
    int64_t free;
    int64_t cap;
  };
  std::vector<DomainCandidate> candidates;
  for (int n : domain_nodes_[static_cast<size_t>(best)]) {
    const IndexedNode& node = nodes_[static_cast<size_t>(n)];
    if (!node.schedulable) continue;
    int t = tiers.tier_of_pool[static_cast<size_t>(node.pool)];
    if (t < 0) continue;
    int64_t k = TasksFitting(node, model, s, mask, s.tasks);
    if (k > 0) candidates.push_back({n, t, FreeGpusOf(node, model), k});
  }
  std::vector<int64_t> take(candidates.size(), 0);
  int64_t remaining = s.tasks;
  if (spread) {
    // One task at a time to the emptiest node (lowest tier first).
    while (remaining > 0) {
      int pick = -1;
      for (size_t i = 0; i < candidates.size(); ++i) {
        if (take[i] >= candidates[i].cap) continue;
        if (pick < 0) {
          pick = static_cast<int>(i);
          continue;
        }
        const DomainCandidate& a = candidates[i];
        const DomainCandidate& b = candidates[static_cast<size_t>(pick)];
        int64_t fa = a.free - take[i] * s.gpus,
                fb = b.free - take[static_cast<size_t>(pick)] * s.gpus;
        if (a.tier < b.tier || (a.tier == b.tier && fa > fb)) pick = static_cast<int>(i);
      }
      if (pick < 0) break;
      take[static_cast<size_t>(pick)]++;
      remaining--;
    }
  } else {
    // Lowest tier first; a node that holds the whole remainder (the fullest
    // such), else the emptiest node.
    while (remaining > 0) {
      int tier = std::numeric_limits<int>::max();
      for (size_t i = 0; i < candidates.size(); ++i) {
        if (take[i] == 0) tier = std::min(tier, candidates[i].tier);
      }
      int fit = -1, most = -1;
      for (size_t i = 0; i < candidates.size(); ++i) {
        const DomainCandidate& a = candidates[i];
        if (take[i] > 0 || a.tier != tier) continue;
        if (a.cap >= remaining && (fit < 0 || a.free < candidates[static_cast<size_t>(fit)].free)) {
          fit = static_cast<int>(i);
        }
        if (most < 0 || a.free > candidates[static_cast<size_t>(most)].free)
          most = static_cast<int>(i);
      }
      const int chosen = fit >= 0 ? fit : most;
      if (chosen < 0) break;
      const int64_t k = std::min(candidates[static_cast<size_t>(chosen)].cap, remaining);
      take[static_cast<size_t>(chosen)] = k;
      remaining -= k;
    }
  }
  if (remaining > 0) return false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (take[i] > 0) picks->push_back({candidates[i].node, take[i]});
  }
  return true;
}

bool CycleRun::Search(const JobInfo& job, const PendingJob& pending, int model, uint64_t mask,
                      std::vector<Pick>* picks, int64_t* found) {
  picks->clear();
  *found = 0;
  const Shape& s = job.shape;
  int left_out = 0;
  const Tiers& tiers = SearchTiers(job, pending, model, &left_out);
  const bool spread = sets_[static_cast<size_t>(job.set)].scoring == Scoring::kSpread;
  if (model < 0) {
    return SearchCpuOnly(job, tiers, mask, LocalNodes(pending, model, spread), picks, found);
  }
  const size_t models = model_names_.size();
  int64_t total_free = 0;
  for (int p : sets_[static_cast<size_t>(job.set)].pools) {
    total_free += pool_free_[static_cast<size_t>(p) * models + static_cast<size_t>(model)];
  }
  if (total_free < s.tasks * s.gpus) {
    *found = std::min(s.tasks - 1, total_free / s.gpus);
    return false;
  }
  // A bigger gang may leave fewer Slurm pools out: other tiers, another memo entry.
  const MemoKey memo{job.key, model + (int64_t{left_out} << 32), mask};
  auto failed = no_fit_.find(memo);
  if (failed != no_fit_.end() && failed->second <= s.tasks) {
    *found = std::min(s.tasks - 1, failed->second - 1);
    return false;
  }
  // Where the job's inputs are (after the checks above: whether a gang fits
  // does not depend on it). Empty for every job without cached inputs: the
  // search below is then the plain one.
  const std::vector<LocalNode>& local = LocalNodes(pending, model, spread);

  if (job.topology != 0) {
    for (size_t t = 0; t < tiers.pools.size(); ++t) {
      int n = local.empty() ? -1 : LocalNodeHolding(local, tiers, t, model, s, s.tasks, mask);
      if (n < 0) n = FindSingleNode(tiers.pools[t], model, s, s.tasks, mask, spread);
      if (n >= 0) {
        picks->push_back({n, s.tasks});
        return true;
      }
    }
    if (job.topology == 2 && SearchDomain(job, tiers, model, memo, mask, spread, picks)) {
      return true;
    }
  }

  int64_t remaining = s.tasks;
  std::vector<int>& used = scratch_used_;  // Search never runs inside itself
  used.clear();
  auto take = [&](int n, int64_t k) {
    picks->push_back({n, k});
    mark_[static_cast<size_t>(n)] = 1;
    used.push_back(n);
    remaining -= k;
  };
  for (size_t t = 0; t < tiers.pools.size(); ++t) {
    const std::vector<int>& tier = tiers.pools[t];
    if (remaining == 0) break;
    // Nodes of this tier holding the job's inputs first, most bytes first: as
    // many tasks as each holds (one each under spread), the rest as usual.
    for (const LocalNode& l : local) {
      if (remaining == 0) break;
      const IndexedNode& node = nodes_[static_cast<size_t>(l.node)];
      if (mark_[static_cast<size_t>(l.node)] ||
          tiers.tier_of_pool[static_cast<size_t>(node.pool)] != static_cast<int>(t)) {
        continue;
      }
      const int64_t k = TasksFitting(node, model, s, mask, spread ? 1 : remaining);
      if (k > 0) take(l.node, k);
    }
    if (remaining == 0) break;
    int max_c = -1;
    for (int p : tier) max_c = std::max(max_c, BucketsOf(p, model).Max());
    if (spread) {
      // The emptiest nodes, one task at a time to whichever is emptiest now.
      struct DomainCandidate {
        int64_t free;
        int order;
        int node;
        int64_t cap;
      };
      std::vector<DomainCandidate> candidates;
      for (int c = max_c; c >= s.gpus && static_cast<int64_t>(candidates.size()) < remaining; --c) {
        for (int p : tier) {
          Buckets& b = BucketsOf(p, model);
          if (c > b.Max()) continue;
          for (int n : b.by_free[static_cast<size_t>(c)]) {
            if (mark_[static_cast<size_t>(n)]) continue;
            int64_t k = TasksFitting(nodes_[static_cast<size_t>(n)], model, s, mask, remaining);
            if (k <= 0) continue;
            candidates.push_back({c, static_cast<int>(candidates.size()), n, k});
            if (static_cast<int64_t>(candidates.size()) >= remaining) break;
          }
          if (static_cast<int64_t>(candidates.size()) >= remaining) break;
        }
      }
      auto less = [](const DomainCandidate& a, const DomainCandidate& b) {
        return a.free != b.free ? a.free < b.free : a.order > b.order;
      };
      std::priority_queue<DomainCandidate, std::vector<DomainCandidate>, decltype(less)> heap(
          less, candidates);
      std::vector<int64_t> count(candidates.size(), 0);
      while (remaining > 0 && !heap.empty()) {
        DomainCandidate top = heap.top();
        heap.pop();
        count[static_cast<size_t>(top.order)]++;
        remaining--;
        top.free -= s.gpus;
        if (--top.cap > 0) heap.push(top);
      }
      for (size_t i = 0; i < candidates.size(); ++i) {
        if (count[i] > 0) {
          picks->push_back({candidates[i].node, count[i]});
          mark_[static_cast<size_t>(candidates[i].node)] = 1;
          used.push_back(candidates[i].node);
        }
      }
      continue;
    }
    // Bin-pack: the whole remainder on the fullest node that holds it, else
    // the emptiest node (fewest nodes for a big gang) and try again.
    int n = FindSingleNode(tier, model, s, remaining, mask, false);
    if (n >= 0) {
      take(n, remaining);
      break;
    }
    bool done = false;
    for (int c = max_c; c >= s.gpus && !done; --c) {
      for (int p : tier) {
        if (done) break;
        Buckets& b = BucketsOf(p, model);
        if (c > b.Max()) continue;
        for (int node : b.by_free[static_cast<size_t>(c)]) {
          if (mark_[static_cast<size_t>(node)]) continue;
          int64_t k = TasksFitting(nodes_[static_cast<size_t>(node)], model, s, mask, remaining);
          if (k <= 0) continue;
          take(node, k);
          if (remaining == 0) {
            done = true;
            break;
          }
          int fit = FindSingleNode(tier, model, s, remaining, mask, false);
          if (fit >= 0) {
            take(fit, remaining);
            done = true;
            break;
          }
        }
      }
    }
  }
  for (int n : used) mark_[static_cast<size_t>(n)] = 0;
  if (remaining > 0) {
    *found = s.tasks - remaining;
    auto& slot = no_fit_[memo];
    if (slot == 0 || s.tasks < slot) slot = s.tasks;
    picks->clear();
    return false;
  }
  return true;
}

uint64_t CycleRun::MaskFor(const JobInfo& job) const {
  uint64_t mask = 0;
  if (!(job.max_runtime_s > 0) || !std::isfinite(job.max_runtime_s)) return 0;
  for (size_t r = 0; r < reservations_.size(); ++r) {
    // A draining reservation (no planned start) lets nothing ahead of it.
    const double start = reservations_[r].start_s;
    if (std::isfinite(start) && now_ + job.max_runtime_s <= start) mask |= uint64_t{1} << r;
  }
  return mask;
}

}  // namespace ferry::fleet::sched::internal
