// Preemption: victims for a job that does not fit, by priority or by
// fair-share reclaim (fewest, lowest-priority, most recent; whole gangs).
#include "fleet/sched/cycle_run.h"

namespace ferry::fleet::sched::internal {

bool CycleRun::TryPriority(int index, const JobInfo& job, const std::vector<int>& models) {
  const PendingJob& p = snap_.pending[static_cast<size_t>(index)];
  if (!config_.preemption.priority || job.priority <= min_preemptible_priority_) return false;
  const MemoKey key{job.key, job.shape.tasks,
                    static_cast<uint64_t>(static_cast<int64_t>(p.priority))};
  if (priority_failed_.count(key)) return false;
  // The candidates depend only on the priority: asked once per priority.
  auto cached = priority_candidates_.find(p.priority);
  if (cached == priority_candidates_.end()) {
    cached = priority_candidates_.emplace(p.priority, VictimIndex{}).first;
    IndexVictims(PriorityCandidates(snap_, p), &cached->second);
  }
  for (int m : models) {
    std::vector<int> candidates = Preselect(job, m, &cached->second);
    if (candidates.empty()) continue;
    std::vector<int> victims = SelectVictims(snap_, candidates, [&](const std::vector<int>& v) {
      return VictimsFit(job, p, m, false, v);
    });
    if (!victims.empty()) {
      Preempt(index, victims, reason::kPreemptedByPriority);
      return true;
    }
  }
  priority_failed_.emplace(key, 1);
  return false;
}

bool CycleRun::TryReclaim(int index, const JobInfo& job, const std::vector<int>& models,
                          bool* rate_limited) {
  const PendingJob& p = snap_.pending[static_cast<size_t>(index)];
  if (!config_.preemption.reclaim || job.shape.gpus == 0) return false;
  if (!any_borrowing_) return false;
  // A reclaim that found nothing stays fruitless for this owner and shape
  // (capacity only shrinks, the owner's use only grows).
  const std::string key =
      UserPathKey(p) + "|" + std::to_string(job.key) + "|" + std::to_string(job.shape.tasks);
  if (reclaim_failed_.count(key)) return false;
  const int gpus = static_cast<int>(job.shape.tasks * job.shape.gpus);
  for (int m : models) {
    if (!ledger_.WithinNominal(p.tenant, p.team, p.user, ModelName(m), gpus)) continue;
    std::vector<int> borrowed;
    for (int r : ReclaimCandidates(snap_, ledger_, p, ModelName(m))) {
      if (r < 0 || static_cast<size_t>(r) >= holds_.size()) continue;
      const RunningJob& run = snap_.running[static_cast<size_t>(r)];
      if (run.terminating) continue;
      // Borrowing already before this cycle: a placement of the same owner
      // made just now does not turn its running jobs into victims.
      if (BorrowedBefore(r)) borrowed.push_back(r);
    }
    VictimIndex by_node;
    IndexVictims(borrowed, &by_node);
    std::vector<int> candidates = Preselect(job, m, &by_node);
    if (candidates.empty()) continue;
    std::vector<int> victims = SelectVictims(snap_, candidates, [&](const std::vector<int>& v) {
      return VictimsFit(job, p, m, true, v);
    });
    if (victims.empty()) continue;
    if (static_cast<int>(victims.size()) > limiter_->Available(now_)) {
      *rate_limited = true;
      continue;
    }
    limiter_->Record(now_, static_cast<int>(victims.size()));
    Preempt(index, victims, reason::kPreemptedForFairShare);
    return true;
  }
  if (!*rate_limited) reclaim_failed_.insert(key);
  return false;
}

// Candidates of one preemption kind grouped by node, the nodes in the order
// victims are best taken from: lowest highest-priority first, then fewest
// jobs, then the most recently started (as SelectVictims prefers).
const CycleRun::VictimIndex& CycleRun::IndexVictims(const std::vector<int>& candidates,
                                                    VictimIndex* index) {
  std::vector<std::pair<int, int>> by_node;  // (node, running job)
  for (int r : candidates) {
    if (r < 0 || static_cast<size_t>(r) >= holds_.size()) continue;
    int last = -1;
    for (const HoldPart& part : holds_[static_cast<size_t>(r)].parts) {
      if (part.node == last || !nodes_[static_cast<size_t>(part.node)].schedulable) continue;
      by_node.push_back({part.node, r});
      last = part.node;
    }
  }
  std::sort(by_node.begin(), by_node.end());
  by_node.erase(std::unique(by_node.begin(), by_node.end()), by_node.end());
  struct Key {
    int max_priority;
    size_t jobs;
    double latest_start;
    int64_t latest_id;
    int node;
    size_t begin, end;
  };
  std::vector<Key> keys;
  for (size_t i = 0; i < by_node.size();) {
    size_t j = i;
    Key k{std::numeric_limits<int>::min(),
          0,
          -std::numeric_limits<double>::infinity(),
          std::numeric_limits<int64_t>::min(),
          by_node[i].first,
          0,
          0};
    for (; j < by_node.size() && by_node[j].first == by_node[i].first; ++j) {
      const RunningJob& run = snap_.running[static_cast<size_t>(by_node[j].second)];
      k.max_priority = std::max(k.max_priority, run.priority);
      k.latest_start = std::max(k.latest_start, run.started_s);
      k.latest_id = std::max(k.latest_id, run.job_id);
    }
    k.jobs = j - i;
    k.begin = i;
    k.end = j;
    keys.push_back(k);
    i = j;
  }
  std::sort(keys.begin(), keys.end(), [](const Key& x, const Key& y) {
    if (x.max_priority != y.max_priority) return x.max_priority < y.max_priority;
    if (x.jobs != y.jobs) return x.jobs < y.jobs;
    if (x.latest_start != y.latest_start) return x.latest_start > y.latest_start;
    if (x.latest_id != y.latest_id) return x.latest_id > y.latest_id;
    return x.node < y.node;
  });
  index->nodes.clear();
  index->offsets.clear();
  index->jobs.clear();
  index->gpus.clear();
  index->shape_cursor.clear();
  index->offsets.push_back(0);
  for (const Key& k : keys) {
    index->nodes.push_back(k.node);
    int64_t gpus = 0;
    for (size_t i = k.begin; i < k.end; ++i) {
      const int r = by_node[i].second;
      index->jobs.push_back(r);
      for (const HoldPart& part : holds_[static_cast<size_t>(r)].parts) {
        if (part.node == k.node) gpus += part.gpus;
      }
    }
    index->gpus.push_back(gpus);
    index->offsets.push_back(index->jobs.size());
  }
  index->cursor = 0;
  return *index;
}

// Running jobs of `index` worth offering to SelectVictims: those on the first
// nodes (in the index's order) that free room for the gang, just enough of
// them. Empty when even all of them would not make room.
std::vector<int> CycleRun::Preselect(const JobInfo& job, int model, VictimIndex* index) {
  const Shape& s = job.shape;
  const int64_t base = BaseCapacity(job, model);
  int64_t total = base;
  std::vector<int> taken;
  // Nodes at the front whose candidates are all preempted stay skipped.
  auto exhausted = [&](size_t k) {
    for (size_t i = index->offsets[k]; i < index->offsets[k + 1]; ++i) {
      if (!preempted_[static_cast<size_t>(index->jobs[i])]) return false;
    }
    return true;
  };
  while (index->cursor < index->nodes.size() && exhausted(index->cursor)) index->cursor++;
  size_t& shape_cursor = index->shape_cursor[MemoKey{job.key, model, 0}];
  shape_cursor = std::max(shape_cursor, index->cursor);
  bool prefix = true;  // every node so far freed nothing for this shape
  for (size_t k = shape_cursor; k < index->nodes.size() && total < s.tasks; ++k) {
    if (prefix) shape_cursor = k;
    const int n = index->nodes[k];
    const IndexedNode& node = nodes_[static_cast<size_t>(n)];
    if (!InSet(job, node.pool)) continue;
    if (model >= 0 && FreeGpusOf(node, model) + index->gpus[k] < s.gpus) continue;
    int64_t gpus = 0, memory = 0;
    double cpus = 0;
    for (size_t i = index->offsets[k]; i < index->offsets[k + 1]; ++i) {
      const int r = index->jobs[i];
      if (preempted_[static_cast<size_t>(r)]) continue;
      for (const HoldPart& part : holds_[static_cast<size_t>(r)].parts) {
        if (part.node != n) continue;
        if (model >= 0 && part.model == model) gpus += part.gpus;
        cpus += part.cpus;
        memory += part.memory_mb;
      }
    }
    const int64_t before = TasksFitting(node, model, s, ~uint64_t{0}, s.tasks);
    const int64_t free_gpus = model >= 0 ? FreeGpusOf(node, model) + gpus : 0;
    const int64_t after =
        TasksThatFit(s, free_gpus, node.cpus_free + cpus, node.memory_free + memory, s.tasks);
    if (after <= before) continue;
    prefix = false;
    total += after - before;
    taken.push_back(static_cast<int>(k));
  }
  if (total < s.tasks) return {};
  std::vector<int> out;
  for (int k : taken) {
    for (size_t i = index->offsets[static_cast<size_t>(k)];
         i < index->offsets[static_cast<size_t>(k) + 1]; ++i) {
      const int r = index->jobs[i];
      if (preempted_[static_cast<size_t>(r)] || mark_job_[static_cast<size_t>(r)]) continue;
      mark_job_[static_cast<size_t>(r)] = 1;
      out.push_back(r);
    }
  }
  for (int r : out) mark_job_[static_cast<size_t>(r)] = 0;
  std::sort(out.begin(), out.end());
  return out;
}

// Tasks of the job's shape that fit the set's schedulable nodes now,
// reservations aside (preemption looks past them).
int64_t CycleRun::BaseCapacity(const JobInfo& job, int model) {
  auto& slot = base_cap_[MemoKey{job.key, model, 0}];
  const Shape& s = job.shape;
  if (slot.first > 0) {
    // Apply what placements changed since: only the nodes they touched.
    bool exact = true;
    int64_t total = slot.second;
    for (size_t i = slot.first - 1; i < changes_.size() && exact; ++i) {
      const NodeChange& c = changes_[i];
      const IndexedNode& node = nodes_[static_cast<size_t>(c.node)];
      if (!node.schedulable || !InSet(job, node.pool)) continue;
      if (model >= 0 && c.model != model) {
        exact = FreeGpusOf(node, model) == 0;  // another model's GPUs: recount unless none of ours
        if (!exact) break;
        continue;
      }
      const int64_t gb = model >= 0 ? c.gpus_before : 0, ga = model >= 0 ? c.gpus_after : 0;
      total += TasksThatFit(s, ga, c.cpus_after, c.memory_after, kMaxTasks) -
               TasksThatFit(s, gb, c.cpus_before, c.memory_before, kMaxTasks);
    }
    if (exact) {
      slot = {changes_.size() + 1, total};
      return total;
    }
  }
  int64_t total = 0;
  if (model < 0) {
    for (const IndexedNode& node : nodes_) {
      if (node.schedulable && InSet(job, node.pool))
        total += TasksFitting(node, -1, s, ~uint64_t{0}, kMaxTasks);
    }
  } else {
    for (int p : sets_[static_cast<size_t>(job.set)].pools) {
      Buckets& b = BucketsOf(p, model);
      for (int c = std::max(s.gpus, 0); c <= b.Max(); ++c) {
        for (int n : b.by_free[static_cast<size_t>(c)]) {
          total += TasksFitting(nodes_[static_cast<size_t>(n)], model, s, ~uint64_t{0}, kMaxTasks);
        }
      }
    }
  }
  slot = {changes_.size() + 1, total};
  return total;
}

bool CycleRun::VictimsFit(const JobInfo& job, const PendingJob& pending, int model,
                          bool check_quota, const std::vector<int>& victims) {
  const Shape& s = job.shape;
  struct Extra {
    int node;
    int64_t gpus;
    double cpus;
    int64_t memory;
  };
  std::vector<Extra> extra;
  for (int v : victims) {
    for (const HoldPart& part : holds_[static_cast<size_t>(v)].parts) {
      const IndexedNode& node = nodes_[static_cast<size_t>(part.node)];
      if (!node.schedulable || !InSet(job, node.pool)) continue;
      int& slot = extra_slot_[static_cast<size_t>(part.node)];
      if (slot < 0) {
        slot = static_cast<int>(extra.size());
        extra.push_back({part.node, 0, 0, 0});
      }
      Extra& e = extra[static_cast<size_t>(slot)];
      if (model >= 0 && part.model == model) e.gpus += part.gpus;
      e.cpus += part.cpus;
      e.memory += part.memory_mb;
    }
  }
  int64_t total = BaseCapacity(job, model);
  for (const Extra& e : extra) {
    extra_slot_[static_cast<size_t>(e.node)] = -1;
    const IndexedNode& node = nodes_[static_cast<size_t>(e.node)];
    int64_t before = TasksFitting(node, model, s, ~uint64_t{0}, kMaxTasks);
    int64_t gpus = model >= 0 ? FreeGpusOf(node, model) + e.gpus : 0;
    total +=
        TasksThatFit(s, gpus, node.cpus_free + e.cpus, node.memory_free + e.memory, kMaxTasks) -
        before;
  }
  if (total < s.tasks) return false;
  if (!check_quota || s.gpus == 0) return true;
  for (int v : victims) {
    const RunningJob& run = snap_.running[static_cast<size_t>(v)];
    for (const auto& [m, n] : running_models_[static_cast<size_t>(v)]) {
      ledger_.Release(run.tenant, run.team, run.user, ModelName(m), n);
    }
  }
  bool ok = ledger_
                .CanAdmit(pending.tenant, pending.team, pending.user, ModelName(model),
                          static_cast<int>(s.tasks * s.gpus))
                .ok;
  for (int v : victims) {
    const RunningJob& run = snap_.running[static_cast<size_t>(v)];
    for (const auto& [m, n] : running_models_[static_cast<size_t>(v)]) {
      ledger_.Charge(run.tenant, run.team, run.user, ModelName(m), n);
    }
  }
  return ok;
}

void CycleRun::Preempt(int index, const std::vector<int>& victims, std::string_view why) {
  const PendingJob& p = snap_.pending[static_cast<size_t>(index)];
  std::string ids;
  for (int v : victims) {
    const RunningJob& run = snap_.running[static_cast<size_t>(v)];
    Preemption pre;
    pre.job_id = run.job_id;
    pre.attempt = run.attempt;
    pre.reason = std::string(why);
    pre.for_job = p.job_id;
    pre.grace_s = config_.preemption.grace_s;
    out_.preemptions.push_back(std::move(pre));
    preempted_[static_cast<size_t>(v)] = 1;
    out_.stats.preempted++;
    ids += (ids.empty() ? "" : ", ") + std::to_string(run.job_id);
  }
  SetReason(index, reason::kWaitingForPreemption,
            std::string(why == reason::kPreemptedByPriority ? "preempting by priority"
                                                            : "reclaiming borrowed GPUs from") +
                " job(s) " + ids + "; waiting for them to end");
}

}  // namespace ferry::fleet::sched::internal
