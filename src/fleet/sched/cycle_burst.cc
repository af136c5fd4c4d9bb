// After the queue: cloud burst for jobs still waiting for capacity, then
// scale-down of idle cloud nodes.
#include "fleet/sched/cycle_run.h"

namespace ferry::fleet::sched::internal {

void CycleRun::Burst() {
  if (!config_.burst.enabled) return;
  struct PoolBurst {
    bool init = false;
    std::vector<Spare> nodes;  // in flight, then requested now: what is left on each
    int in_flight = 0;
    int added = 0;
    std::vector<int64_t> for_jobs;
  };
  std::vector<PoolBurst> state(pools_.size());
  // Free capacity of existing nodes that earlier bursts of this cycle count
  // on, so two jobs never count the same free GPUs: [node * models + model].
  std::unordered_map<size_t, Spare> promised;
  const size_t model_count = std::max<size_t>(model_names_.size(), 1);
  auto room_of = [&](int node_index, int model) {
    const size_t key =
        static_cast<size_t>(node_index) * model_count + static_cast<size_t>(std::max(model, 0));
    auto it = promised.find(key);
    if (it != promised.end()) return it->second;
    const IndexedNode& node = nodes_[static_cast<size_t>(node_index)];
    return Spare{model >= 0 ? FreeGpusOf(node, model) : 0, node.cpus_free, node.memory_free};
  };
  for (int index : considered_order_) {
    const size_t i = static_cast<size_t>(index);
    if (placed_[i] || has_reason_[i] != 1) continue;
    const std::string& code = ReasonOf(i).reason;
    if (code != reason::kNoCapacity && code != reason::kGangIncomplete) continue;
    const PendingJob& p = snap_.pending[i];
    const JobInfo& job = jobs_[i];
    const Shape& s = job.shape;
    const SetInfo& set = sets_[static_cast<size_t>(job.set)];
    bool any_cloud = false;
    std::vector<int> options;
    for (int pid : set.pools) {
      const IndexedPool& pool = pools_[static_cast<size_t>(pid)];
      if (pool.config == nullptr || !pool.cloud) continue;
      any_cloud = true;
      const NodeShape& shape = pool.config->node;
      if (s.gpus > 0) {
        int m = shape.gpus > 0 ? ModelId(CanonicalGpuModel(shape.gpu_model)) : -1;
        if (m < 0 || std::find(Models(job).begin(), Models(job).end(), m) == Models(job).end())
          continue;
      }
      if (TasksThatFit(s, shape.gpus, shape.cpus, shape.memory_mb, 1) < 1) continue;
      options.push_back(pid);
    }
    if (!any_cloud) continue;
    if (options.empty()) {
      ReasonOf(i).message +=
          "; no cloud pool of its set has a node shape that holds one of its tasks";
      continue;
    }
    if (now_ - p.submitted_s < config_.burst.min_pending_s) {
      ReasonOf(i).message += "; cloud burst only after it has waited " +
                             FormatNumber(config_.burst.min_pending_s) + " s (burst.min_pending_s)";
      continue;
    }
    auto key = [&](int pid) {
      const IndexedPool& pool = pools_[static_cast<size_t>(pid)];
      switch (set.scoring) {
        case Scoring::kCost:
          return std::make_tuple(p.preemptible != pool.spot ? 1 : 0, pool.price, 0.0);
        case Scoring::kLatency:
          return std::make_tuple(0, pool.config->provisioning_delay_s, pool.price);
        default:
          return std::make_tuple(0, pool.price, 0.0);
      }
    };
    std::stable_sort(options.begin(), options.end(), [&](int a, int b) { return key(a) < key(b); });
    if (set.scoring == Scoring::kLatency && reservation_of_job_[i] >= 0) {
      // On-prem frees up sooner than a cloud node would arrive: wait for it.
      double delay = pools_[static_cast<size_t>(options.front())].config->provisioning_delay_s;
      double start = reservations_[static_cast<size_t>(reservation_of_job_[i])].start_s;
      if (start - now_ <= delay) {
        ReasonOf(i).message +=
            "; on-prem frees sooner than cloud provisioning (" + FormatNumber(delay) + " s)";
        continue;
      }
    }
    // A gang uses one GPU model: try the models of the options in their
    // order. The free nodes of the set take what they can now (placement
    // fills existing nodes first), then nodes already on the way, then new
    // nodes up to each pool's max_nodes, pool after pool.
    std::vector<int> tried;
    bool covered = false;
    int64_t best_free = 0, best_cloud = 0;
    for (int first : options) {
      const int m = s.gpus > 0 ? ModelId(CanonicalGpuModel(
                                     pools_[static_cast<size_t>(first)].config->node.gpu_model))
                               : -1;
      if (std::find(tried.begin(), tried.end(), m) != tried.end()) continue;
      tried.push_back(m);
      int64_t remaining = s.tasks;
      std::vector<std::pair<size_t, Spare>> onprem;
      // Latency scoring: free nodes of Slurm pools the cloud beats are not counted
      // on (placement leaves them out too).
      int left_out = 0;
      const Tiers* latency =
          set.scoring == Scoring::kLatency ? &SearchTiers(job, p, m, &left_out) : nullptr;
      for (size_t n = 0; n < nodes_.size() && remaining > 0; ++n) {
        const IndexedNode& node = nodes_[n];
        if (!node.schedulable || !InSet(job, node.pool)) continue;
        if (latency != nullptr && latency->tier_of_pool[static_cast<size_t>(node.pool)] < 0) {
          continue;
        }
        if (node.reservation >= 0 && node.reservation != reservation_of_job_[i]) continue;
        Spare room = room_of(static_cast<int>(n), m);
        const int64_t k = TasksThatFit(s, room.gpus, room.cpus, room.memory, remaining);
        if (k == 0) continue;
        room.gpus -= k * s.gpus;
        room.cpus -= static_cast<double>(k) * s.cpus;
        room.memory -= k * s.memory_mb;
        remaining -= k;
        onprem.emplace_back(n * model_count + static_cast<size_t>(std::max(m, 0)), room);
      }
      const int64_t free_now = s.tasks - remaining;
      struct PoolTrial {
        int pid;
        std::vector<Spare> nodes;
        int added;
      };
      std::vector<PoolTrial> trials;
      for (int pid : options) {
        if (remaining == 0) break;
        const IndexedPool& pool = pools_[static_cast<size_t>(pid)];
        const NodeShape& shape = pool.config->node;
        if (s.gpus > 0 && ModelId(CanonicalGpuModel(shape.gpu_model)) != m) continue;
        PoolBurst& b = state[static_cast<size_t>(pid)];
        if (!b.init) {
          b.init = true;
          auto it = snap_.provisioning.find(pool.name);
          b.in_flight = it == snap_.provisioning.end() ? 0 : std::max(0, it->second);
          b.nodes.assign(static_cast<size_t>(b.in_flight),
                         Spare{shape.gpus, shape.cpus, shape.memory_mb});
        }
        PoolTrial trial{pid, b.nodes, 0};
        const int64_t before = remaining;
        for (Spare& v : trial.nodes) {
          if (remaining == 0) break;
          int64_t k = TasksThatFit(s, v.gpus, v.cpus, v.memory, remaining);
          v.gpus -= k * s.gpus;
          v.cpus -= static_cast<double>(k) * s.cpus;
          v.memory -= k * s.memory_mb;
          remaining -= k;
        }
        const int room = pool.config->max_nodes - pool.nodes - b.in_flight - b.added;
        const int64_t per_node = TasksThatFit(s, shape.gpus, shape.cpus, shape.memory_mb, s.tasks);
        while (remaining > 0 && trial.added < room && per_node > 0) {
          int64_t k = std::min(per_node, remaining);
          trial.nodes.push_back({shape.gpus - k * s.gpus,
                                 shape.cpus - static_cast<double>(k) * s.cpus,
                                 shape.memory_mb - k * s.memory_mb});
          remaining -= k;
          trial.added++;
        }
        if (remaining < before) trials.push_back(std::move(trial));
      }
      const int64_t from_cloud = s.tasks - free_now - remaining;
      if (remaining > 0 || from_cloud == 0) {
        if (free_now + from_cloud > best_free + best_cloud) {
          best_free = free_now;
          best_cloud = from_cloud;
        }
        continue;
      }
      // Covered: commit what it counted on.
      for (auto& [slot, room] : onprem) promised[slot] = room;
      std::string requested, pools_on_the_way;
      double delay = 0;
      for (PoolTrial& trial : trials) {
        PoolBurst& b = state[static_cast<size_t>(trial.pid)];
        const IndexedPool& pool = pools_[static_cast<size_t>(trial.pid)];
        b.nodes = std::move(trial.nodes);
        b.added += trial.added;
        if (trial.added > 0) {
          b.for_jobs.push_back(p.job_id);
          requested += (requested.empty() ? "" : ", ") + std::to_string(trial.added) +
                       " node(s) in cloud pool '" + pool.name + "'";
          delay = std::max(delay, pool.config->provisioning_delay_s);
        } else {
          pools_on_the_way += (pools_on_the_way.empty() ? "'" : ", '") + pool.name + "'";
        }
      }
      if (!requested.empty()) {
        SetReason(index, reason::kWaitingForProvisioning,
                  "requested " + requested + " (ready in about " + FormatNumber(delay) + " s)");
      } else {
        SetReason(
            index, reason::kWaitingForProvisioning,
            "nodes already being provisioned in cloud pool " + pools_on_the_way + " will hold it");
      }
      covered = true;
      break;
    }
    if (!covered) {
      ReasonOf(i).message += "; cloud burst cannot hold it: " + std::to_string(best_free) +
                             " task(s) fit the free nodes now and its cloud pools can add room "
                             "for " +
                             std::to_string(best_cloud) + " more (at most max_nodes each), of " +
                             std::to_string(s.tasks) + " needed";
    }
  }
  for (size_t pid = 0; pid < state.size(); ++pid) {
    if (state[pid].added > 0) {
      out_.provision.push_back({pools_[pid].name, state[pid].added, state[pid].for_jobs});
    }
  }
}

void CycleRun::ScaleDowns() {
  for (const IndexedNode& node : nodes_) {
    const IndexedPool& pool = pools_[static_cast<size_t>(node.pool)];
    if (pool.config == nullptr || !pool.cloud) continue;
    if (!node.schedulable || node.held || node.touched) continue;
    const NodeInfo& info = *node.info;
    if (info.idle_since_s < 0 || !std::isfinite(info.idle_since_s)) continue;
    const double idle = now_ - info.idle_since_s;
    if (idle >= pool.config->idle_timeout_s)
      out_.scale_down.push_back({pool.name, info.name, idle});
  }
}

}  // namespace ferry::fleet::sched::internal
