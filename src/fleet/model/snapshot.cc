#include "ferry/fleet/snapshot.h"

#include <algorithm>
#include <utility>

namespace ferry::fleet::sched {

NodeInfo ToNodeInfo(const Node& node) {
  NodeInfo info;
  info.id = node.id;
  info.name = node.name;
  info.pool = node.pool;
  if (auto it = node.labels.find("domain"); it != node.labels.end()) info.domain = it->second;
  info.gpus.reserve(node.gpus.size());
  for (const Gpu& gpu : node.gpus) {
    info.gpus.push_back(
        {gpu.id, gpu.index, gpu.model, gpu.memory_mb, !gpu.job_id.has_value() && !gpu.external});
  }
  info.cpus = node.cpus;
  info.memory_mb = node.memory_mb;
  info.schedulable = node.state == NodeState::kReady && !node.drain && node.unavailable.empty();
  // What the resource manager gave to others counts as used; the store adds
  // Ferry's own allocations.
  info.cpus_used = node.external_cpus;
  info.memory_mb_used = node.external_memory_mb;
  return info;
}

RunningJob ToRunningJob(const Job& job, int attempt, std::vector<TaskPlacement> tasks,
                        int64_t admitted_at_ms) {
  RunningJob run;
  run.job_id = job.id;
  run.attempt = attempt;
  run.tenant = job.tenant;
  run.team = job.team;
  run.user = job.user;
  run.priority = job.spec.priority;
  run.preemptible = job.spec.preemptible;
  run.started_s = static_cast<double>(admitted_at_ms) / 1000.0;
  run.max_runtime_s = static_cast<double>(job.spec.max_runtime_seconds);
  run.cpus_per_task = job.spec.cpus_per_task;
  run.memory_mb_per_task = job.spec.memory_mb_per_task;
  run.tasks = std::move(tasks);
  return run;
}

PendingJob ToPendingJob(const Job& job) {
  PendingJob out;
  out.job_id = job.id;
  out.attempt = job.attempt;
  out.tenant = job.tenant;
  out.team = job.team;
  out.user = job.user;
  out.tasks = job.spec.tasks;
  out.gpus_per_task = job.spec.gpus_per_task;
  out.gpu_models = job.spec.gpu_models;
  out.cpus_per_task = job.spec.cpus_per_task;
  out.memory_mb_per_task = job.spec.memory_mb_per_task;
  out.priority = job.spec.priority;
  out.preemptible = job.spec.preemptible;
  out.submitted_s = static_cast<double>(job.created_at_ms) / 1000.0;
  out.max_runtime_s = static_cast<double>(job.spec.max_runtime_seconds);
  out.datasets = job.spec.datasets;
  out.topology = job.spec.topology;
  out.pool_set = job.spec.pool_set;
  for (const JobInput& input : job.spec.inputs) {
    std::string digest = InputDigest(input);
    if (!digest.empty()) out.input_digests.push_back(std::move(digest));
    out.input_bytes += std::max<int64_t>(input.bytes, 0);
  }
  return out;
}

}  // namespace ferry::fleet::sched
