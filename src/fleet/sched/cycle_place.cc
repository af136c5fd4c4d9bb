// Booking a placement: the GPUs, CPUs and memory it takes, the quota it
// charges, and the buckets and reservations it changes.
#include "fleet/sched/cycle_run.h"

namespace ferry::fleet::sched::internal {

void CycleRun::Place(int index, const JobInfo& job, int model, const std::vector<Pick>& picks,
                     uint64_t mask) {
  const PendingJob& p = snap_.pending[static_cast<size_t>(index)];
  const Shape& s = job.shape;
  const size_t models = model_names_.size();
  Placement placement;
  placement.job_id = job.job_id;
  placement.attempt = p.attempt;
  placement.tasks.reserve(static_cast<size_t>(s.tasks));
  Hold hold;
  hold.parts.reserve(picks.size());
  hold.end_s = job.max_runtime_s > 0 && std::isfinite(job.max_runtime_s)
                   ? now_ + job.max_runtime_s
                   : std::numeric_limits<double>::infinity();
  int task = 0;
  for (const Pick& pick : picks) {
    IndexedNode& node = nodes_[static_cast<size_t>(pick.node)];
    const NodeInfo& info = *node.info;
    FreeGpus* free = nullptr;
    for (FreeGpus& f : node.free) {
      if (f.model == model) free = &f;
    }
    const int before = free != nullptr ? static_cast<int>(free->positions.size()) : 0;
    NodeChange change{pick.node, model, before, 0, node.cpus_free, 0, node.memory_free, 0};
    size_t next = 0;
    for (int64_t t = 0; t < pick.tasks; ++t) {
      TaskPlacement tp;
      tp.task = task++;
      tp.node_id = info.id;
      tp.node = info.name;
      if (free != nullptr && s.gpus > 0) {
        tp.gpu_ids.reserve(static_cast<size_t>(s.gpus));
        tp.gpu_indices.reserve(static_cast<size_t>(s.gpus));
      }
      for (int g = 0; g < s.gpus && free != nullptr; ++g) {
        const GpuSlot& slot = info.gpus[static_cast<size_t>(free->positions[next++])];
        tp.gpu_ids.push_back(slot.id);
        tp.gpu_indices.push_back(slot.index);
      }
      placement.tasks.push_back(std::move(tp));
    }
    const int64_t gpus = pick.tasks * s.gpus;
    const double cpus = static_cast<double>(pick.tasks) * s.cpus;
    const int64_t memory = pick.tasks * s.memory_mb;
    if (free != nullptr) {
      free->positions.erase(free->positions.begin(),
                            free->positions.begin() + static_cast<std::ptrdiff_t>(next));
      BucketsOf(node.pool, model).Move(pick.node, before, static_cast<int>(free->positions.size()));
      pool_free_[static_cast<size_t>(node.pool) * models + static_cast<size_t>(model)] -= gpus;
      if (node.domain >= 0) {
        domain_free_[static_cast<size_t>(node.domain) * models + static_cast<size_t>(model)] -=
            gpus;
      }
    }
    node.cpus_free -= cpus;
    node.memory_free -= memory;
    node.touched = node.held = true;
    change.gpus_after = free != nullptr ? static_cast<int64_t>(free->positions.size()) : 0;
    change.cpus_after = node.cpus_free;
    change.memory_after = node.memory_free;
    changes_.push_back(change);
    if (node.reservation >= 0 && !((mask >> node.reservation) & 1)) {
      if (model >= 0 && model == reservations_[static_cast<size_t>(node.reservation)].model) {
        node.spare_gpus -= gpus;
      }
      node.spare_cpus -= cpus;
      node.spare_memory -= memory;
    }
    hold.parts.push_back({pick.node, model, static_cast<int>(gpus), cpus, memory});
  }
  holds_.push_back(std::move(hold));
  out_.placements.push_back(std::move(placement));
  placed_[static_cast<size_t>(index)] = 1;
  if (s.gpus > 0) {
    const Owner& o = OwnerOf(job);
    ledger_.Charge(o.tenant, o.team, o.user, ModelName(model), static_cast<int>(s.tasks * s.gpus));
  }
  queue_->Placed(index, Demand{static_cast<int>(s.tasks * s.gpus),
                               static_cast<double>(s.tasks) * s.cpus, s.tasks * s.memory_mb});
  out_.stats.placed++;
  if (!reservations_.empty()) out_.stats.backfilled++;
  epoch_++;
}

}  // namespace ferry::fleet::sched::internal
