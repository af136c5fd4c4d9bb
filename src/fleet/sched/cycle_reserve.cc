// Backfill: reservations for blocked jobs, why a start cannot be planned,
// and draining nodes for a job that can never start otherwise.
#include <algorithm>

#include "fleet/sched/cycle_run.h"

namespace ferry::fleet::sched::internal {

void CycleRun::TryReserve(int index, const JobInfo& job, const std::vector<int>& models) {
  reserve_attempts_++;
  const Shape& s = job.shape;
  std::vector<int> events;
  for (size_t h = 0; h < holds_.size(); ++h) {
    if (std::isfinite(holds_[h].end_s)) events.push_back(static_cast<int>(h));
  }
  std::stable_sort(events.begin(), events.end(), [&](int a, int b) {
    return holds_[static_cast<size_t>(a)].end_s < holds_[static_cast<size_t>(b)].end_s;
  });
  struct Future {
    int64_t gpus;
    double cpus;
    int64_t memory;
  };
  auto eligible = [&](const IndexedNode& node) {
    return node.schedulable && node.reservation < 0 && InSet(job, node.pool);
  };
  double best_start = std::numeric_limits<double>::infinity();
  int best_model = -1;
  std::unordered_map<int, Future> best_future;
  for (int m : models) {
    std::unordered_map<int, Future> future;
    auto cap_of = [&](const Future& f) {
      return TasksThatFit(s, f.gpus, f.cpus, f.memory, s.tasks);
    };
    int64_t total = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const IndexedNode& node = nodes_[i];
      if (eligible(node))
        total += TasksThatFit(s, m >= 0 ? FreeGpusOf(node, m) : 0, node.cpus_free, node.memory_free,
                              s.tasks);
    }
    double start = std::numeric_limits<double>::infinity();
    for (size_t e = 0; e < events.size() && total < s.tasks; ++e) {
      const Hold& hold = holds_[static_cast<size_t>(events[e])];
      if (hold.end_s >= best_start) break;
      for (const HoldPart& part : hold.parts) {
        const IndexedNode& node = nodes_[static_cast<size_t>(part.node)];
        if (!eligible(node)) continue;
        auto it = future.find(part.node);
        if (it == future.end()) {
          it = future
                   .emplace(part.node, Future{m >= 0 ? FreeGpusOf(node, m) : 0, node.cpus_free,
                                              node.memory_free})
                   .first;
        }
        int64_t before = cap_of(it->second);
        if (m >= 0 && part.model == m) it->second.gpus += part.gpus;
        it->second.cpus += part.cpus;
        it->second.memory += part.memory_mb;
        total += cap_of(it->second) - before;
      }
      const bool group_end =
          e + 1 == events.size() || holds_[static_cast<size_t>(events[e + 1])].end_s != hold.end_s;
      if (group_end && total >= s.tasks) start = hold.end_s;
    }
    if (start < best_start) {
      best_start = start;
      best_model = m;
      best_future = std::move(future);
    }
  }
  if (!std::isfinite(best_start)) {
    PendingReason& r = ReasonOf(static_cast<size_t>(index));
    const NoStart why = WhyNoStart(job, models);
    if (!why.held_by_unlimited) {
      r.message += "; no start can be planned: " + why.text;
      return;
    }
    if (BurstCouldHold(job, models)) {
      // Holding on-prem nodes for it as well would only idle them.
      r.message += "; no start can be planned on the current nodes (" + why.text +
                   "); cloud burst can hold it";
      return;
    }
    if (config_.backfill.drain) {
      Drain(index, job, models);
      return;
    }
    r.message += "; no reservation: " + why.text;
    return;
  }
  // Where: the nodes with the most room at that time.
  struct DomainCandidate {
    int node;
    int64_t cap;
    Future f;
  };
  std::vector<DomainCandidate> candidates;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const IndexedNode& node = nodes_[i];
    if (!eligible(node)) continue;
    auto it = best_future.find(static_cast<int>(i));
    Future f = it != best_future.end() ? it->second
                                       : Future{best_model >= 0 ? FreeGpusOf(node, best_model) : 0,
                                                node.cpus_free, node.memory_free};
    int64_t k = TasksThatFit(s, f.gpus, f.cpus, f.memory, s.tasks);
    if (k > 0) candidates.push_back({static_cast<int>(i), k, f});
  }
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const DomainCandidate& a, const DomainCandidate& b) { return a.cap > b.cap; });
  const int id = static_cast<int>(reservations_.size());
  int64_t remaining = s.tasks;
  int used = 0;
  std::vector<std::string> planned;
  for (const DomainCandidate& c : candidates) {
    if (remaining == 0) break;
    int64_t k = std::min(c.cap, remaining);
    IndexedNode& node = nodes_[static_cast<size_t>(c.node)];
    node.reservation = id;
    planned.push_back(node.info->name);
    node.spare_gpus = c.f.gpus - k * s.gpus;
    node.spare_cpus = c.f.cpus - static_cast<double>(k) * s.cpus;
    node.spare_memory = c.f.memory - k * s.memory_mb;
    remaining -= k;
    used++;
  }
  reservations_.push_back(
      {snap_.pending[static_cast<size_t>(index)].job_id, best_start, best_model});
  reservation_of_job_[static_cast<size_t>(index)] = id;
  PendingReason& reason = ReasonOf(static_cast<size_t>(index));
  // Relative: the server's clock is epoch seconds (explanation.planned_start
  // gives the time of day), the simulator's the trace's.
  reason.message += "; reserved to start in " + FormatNumber(std::max(0.0, best_start - now_)) +
                    " s on " + std::to_string(used) + " node(s)";
  reason.planned_nodes = std::move(planned);
  reason.planned_start_s = best_start;
}

CycleRun::NoStart CycleRun::WhyNoStart(const JobInfo& job, const std::vector<int>& models) {
  const Shape& s = job.shape;
  auto eligible = [&](const IndexedNode& node) {
    return node.schedulable && node.reservation < 0 && InSet(job, node.pool);
  };
  // Per model: tasks the eligible nodes would hold once every job on them ended.
  int64_t best_total = -1;
  int best_model = models.empty() ? -1 : models.front();
  for (int m : models) {
    std::unordered_map<int, Spare> held;  // node -> what its holds would give back
    for (const Hold& hold : holds_) {
      for (const HoldPart& part : hold.parts) {
        if (!eligible(nodes_[static_cast<size_t>(part.node)])) continue;
        Spare& h = held[part.node];
        h.gpus += (m >= 0 && part.model == m) ? part.gpus : 0;
        h.cpus += part.cpus;
        h.memory += part.memory_mb;
      }
    }
    int64_t total = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const IndexedNode& node = nodes_[i];
      if (!eligible(node)) continue;
      Spare room{m >= 0 ? FreeGpusOf(node, m) : 0, node.cpus_free, node.memory_free};
      if (auto it = held.find(static_cast<int>(i)); it != held.end()) {
        room.gpus += it->second.gpus;
        room.cpus += it->second.cpus;
        room.memory += it->second.memory;
      }
      total += TasksThatFit(s, room.gpus, room.cpus, room.memory, s.tasks);
    }
    if (total > best_total) {
      best_total = total;
      best_model = m;
    }
  }
  NoStart out;
  if (best_total >= s.tasks) {
    // Jobs that end (finite holds) were replayed and did not free enough, so
    // what is missing is held by jobs that never end.
    out.held_by_unlimited = true;
    out.text = "the capacity it needs is held by jobs without a max runtime";
    return out;
  }
  // Even an empty fleet of schedulable nodes is too small: say where the
  // rest of the capacity is.
  int64_t down = 0, reserved = 0;
  std::string down_names;
  int named = 0, unnamed = 0;
  for (const IndexedNode& node : nodes_) {
    if (!InSet(job, node.pool) || eligible(node)) continue;
    if (node.total.empty() && !node.info->gpus.empty() && !node.schedulable) continue;  // duplicate
    int64_t gpus = 0;
    for (const auto& [model, n] : node.total) gpus += model == best_model ? n : 0;
    const int64_t k = TasksThatFit(s, gpus, node.info->cpus, node.info->memory_mb, s.tasks);
    if (k == 0) continue;
    if (!node.schedulable) {
      down += k;
      if (named < 3) {
        down_names += (named ? ", " : "") + node.info->name;
        named++;
      } else {
        unnamed++;
      }
    } else {
      reserved += k;
    }
  }
  if (unnamed > 0) down_names += " and " + std::to_string(unnamed) + " more";
  out.text = "with every running job ended, the schedulable nodes of pool set '" +
             sets_[static_cast<size_t>(job.set)].name + "' would hold only " +
             std::to_string(std::max<int64_t>(best_total, 0)) + " of its " +
             std::to_string(s.tasks) + " task(s)";
  if (down > 0) {
    out.text += "; nodes that are not ready or drained could hold " + std::to_string(down) +
                " more (" + down_names + ")";
  }
  if (reserved > 0) {
    out.text +=
        "; nodes held for other blocked jobs could hold " + std::to_string(reserved) + " more";
  }
  const int64_t cloud = CloudCapacity(job, best_model, s.tasks);
  if (cloud > 0) {
    out.text += "; cloud pools of its set could add room for " + std::to_string(cloud) + " more";
  }
  return out;
}

int64_t CycleRun::FreeCapacity(const JobInfo& job, int model) const {
  const Shape& s = job.shape;
  int64_t total = 0;
  for (const IndexedNode& node : nodes_) {
    if (total >= s.tasks) break;
    if (!node.schedulable || node.reservation >= 0 || !InSet(job, node.pool)) continue;
    total += TasksThatFit(s, model >= 0 ? FreeGpusOf(node, model) : 0, node.cpus_free,
                          node.memory_free, s.tasks - total);
  }
  return total;
}

bool CycleRun::BurstCouldHold(const JobInfo& job, const std::vector<int>& models) const {
  if (!config_.burst.enabled) return false;
  for (int m : models) {
    const int64_t cloud = CloudCapacity(job, m, job.shape.tasks);
    if (cloud > 0 && FreeCapacity(job, m) + cloud >= job.shape.tasks) return true;
  }
  return false;
}

// No start can be planned: some of the capacity the job needs is held by jobs
// without a max runtime. Hold (drain) the nodes it would use anyway, so that
// jobs behind it in the queue cannot keep taking what frees up there; it
// starts once enough of them have ended. Nodes are chosen by what they will
// offer soonest: capacity free now or held by jobs that do end, then free
// capacity now (nodes already draining rank first on the next cycle, so the
// choice stays put while they drain).
void CycleRun::Drain(int index, const JobInfo& job, const std::vector<int>& models) {
  const Shape& s = job.shape;
  struct Room {
    int64_t gpus = 0;
    double cpus = 0;
    int64_t memory = 0;
  };
  auto eligible = [&](const IndexedNode& node) {
    return node.schedulable && node.reservation < 0 && InSet(job, node.pool);
  };
  for (int m : models) {
    // Per node: room now, room once the jobs that do end have ended, room
    // once every job on it has ended.
    std::unordered_map<int, std::pair<Room, Room>> later;  // node -> (finite, all)
    for (const Hold& hold : holds_) {
      for (const HoldPart& part : hold.parts) {
        if (!eligible(nodes_[static_cast<size_t>(part.node)])) continue;
        auto& [finite, all] = later[part.node];
        const int64_t gpus = (m >= 0 && part.model == m) ? part.gpus : 0;
        all.gpus += gpus;
        all.cpus += part.cpus;
        all.memory += part.memory_mb;
        if (std::isfinite(hold.end_s)) {
          finite.gpus += gpus;
          finite.cpus += part.cpus;
          finite.memory += part.memory_mb;
        }
      }
    }
    struct DomainCandidate {
      int node;
      int64_t eventual, soon, now;
      Room room;  // once every job on it has ended
    };
    std::vector<DomainCandidate> candidates;
    int64_t total = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const IndexedNode& node = nodes_[i];
      if (!eligible(node)) continue;
      const Room free{m >= 0 ? FreeGpusOf(node, m) : 0, node.cpus_free, node.memory_free};
      Room soon = free, all = free;
      auto it = later.find(static_cast<int>(i));
      if (it != later.end()) {
        soon.gpus += it->second.first.gpus;
        soon.cpus += it->second.first.cpus;
        soon.memory += it->second.first.memory;
        all.gpus += it->second.second.gpus;
        all.cpus += it->second.second.cpus;
        all.memory += it->second.second.memory;
      }
      const int64_t eventual = TasksThatFit(s, all.gpus, all.cpus, all.memory, s.tasks);
      if (eventual == 0) continue;
      candidates.push_back({static_cast<int>(i), eventual,
                            TasksThatFit(s, soon.gpus, soon.cpus, soon.memory, s.tasks),
                            TasksThatFit(s, free.gpus, free.cpus, free.memory, s.tasks), all});
      total += eventual;
    }
    if (total < s.tasks) continue;
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](const DomainCandidate& a, const DomainCandidate& b) {
                       if (a.soon != b.soon) return a.soon > b.soon;
                       if (a.now != b.now) return a.now > b.now;
                       if (a.eventual != b.eventual) return a.eventual > b.eventual;
                       const IndexedNode& na = nodes_[static_cast<size_t>(a.node)];
                       const IndexedNode& nb = nodes_[static_cast<size_t>(b.node)];
                       const int64_t fa = m >= 0 ? FreeGpusOf(na, m) : 0,
                                     fb = m >= 0 ? FreeGpusOf(nb, m) : 0;
                       return fa > fb;
                     });
    const int id = static_cast<int>(reservations_.size());
    int64_t remaining = s.tasks;
    int used = 0;
    std::vector<std::string> planned;
    for (const DomainCandidate& c : candidates) {
      if (remaining == 0) break;
      const int64_t k = std::min(c.eventual, remaining);
      IndexedNode& node = nodes_[static_cast<size_t>(c.node)];
      node.reservation = id;
      planned.push_back(node.info->name);
      node.spare_gpus = c.room.gpus - k * s.gpus;
      node.spare_cpus = c.room.cpus - static_cast<double>(k) * s.cpus;
      node.spare_memory = c.room.memory - k * s.memory_mb;
      remaining -= k;
      used++;
    }
    reservations_.push_back({snap_.pending[static_cast<size_t>(index)].job_id,
                             std::numeric_limits<double>::infinity(), m});
    reservation_of_job_[static_cast<size_t>(index)] = id;
    PendingReason& reason = ReasonOf(static_cast<size_t>(index));
    reason.message +=
        "; no start can be planned (jobs without a max runtime hold the capacity it needs): "
        "draining " +
        std::to_string(used) + " node(s) for it";
    reason.planned_nodes = std::move(planned);
    reason.planned_start_s = std::numeric_limits<double>::infinity();
    return;
  }
  ReasonOf(static_cast<size_t>(index)).message +=
      "; no reservation: not enough eligible nodes to drain";
}

}  // namespace ferry::fleet::sched::internal
