// From the fleet model to what a scheduling cycle reads: nodes, running
// attempts and pending jobs (ferry/fleet/snapshot.h).
#include "ferry/fleet/snapshot.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::fleet::sched {
namespace {

Node MakeNode(int64_t id, const std::string& name, int gpus, int64_t first_gpu_id) {
  Node node;
  node.id = id;
  node.name = name;
  node.pool = "onprem";
  node.cpus = 32;
  node.memory_mb = 65536;
  for (int i = 0; i < gpus; ++i) {
    Gpu gpu;
    gpu.id = first_gpu_id + i;
    gpu.index = i;
    gpu.model = "H200";
    gpu.memory_mb = 141000;
    node.gpus.push_back(gpu);
  }
  return node;
}

Job MakeJob(int64_t id, int priority) {
  Job job;
  job.id = id;
  job.tenant = "acme";
  job.team = "vision";
  job.user = "ana";
  job.attempt = 2;
  job.created_at_ms = 5'500;
  job.spec.name = "j" + std::to_string(id);
  job.spec.command = {"true"};
  job.spec.tasks = 2;
  job.spec.gpus_per_task = 1;
  job.spec.gpu_models = {"H200"};
  job.spec.cpus_per_task = 4;
  job.spec.memory_mb_per_task = 1024;
  job.spec.priority = priority;
  job.spec.preemptible = true;
  job.spec.max_runtime_seconds = 600;
  job.spec.topology = "same_domain";
  job.spec.datasets = {"c4"};
  job.spec.pool_set = "training";
  return job;
}

TEST(ToNodeInfo, DomainFreeGpusAndSchedulable) {
  Node a = MakeNode(1, "gpu-a", 2, 10);
  a.labels["domain"] = "nvl-1";
  a.gpus[0].job_id = 7;
  Node drained = MakeNode(2, "gpu-b", 2, 20);
  drained.drain = true;
  Node lost = MakeNode(3, "gpu-c", 1, 30);
  lost.state = NodeState::kLost;

  const NodeInfo na = ToNodeInfo(a);
  EXPECT_EQ(na.id, 1);
  EXPECT_EQ(na.name, "gpu-a");
  EXPECT_EQ(na.pool, "onprem");
  EXPECT_EQ(na.domain, "nvl-1");
  ASSERT_EQ(na.gpus.size(), 2u);
  EXPECT_FALSE(na.gpus[0].free);
  EXPECT_TRUE(na.gpus[1].free);
  EXPECT_EQ(na.gpus[1].id, 11);
  EXPECT_EQ(na.gpus[1].index, 1);
  EXPECT_EQ(na.gpus[1].model, "H200");
  EXPECT_DOUBLE_EQ(na.cpus, 32);
  EXPECT_DOUBLE_EQ(na.cpus_used, 0);  // the store adds usage from open allocations
  EXPECT_TRUE(na.schedulable);
  EXPECT_DOUBLE_EQ(na.idle_since_s, -1);  // the server adds idle times
  const NodeInfo nb = ToNodeInfo(drained);
  EXPECT_EQ(nb.domain, "");
  EXPECT_FALSE(nb.schedulable);  // drained
  EXPECT_FALSE(ToNodeInfo(lost).schedulable);

  // A Slurm node: what Slurm gave to others is neither free nor schedulable.
  Node slurm = MakeNode(4, "hpc-n1", 2, 40);
  slurm.gpus[1].external = true;
  slurm.external_cpus = 6;
  slurm.external_memory_mb = 2048;
  const NodeInfo ns = ToNodeInfo(slurm);
  EXPECT_TRUE(ns.gpus[0].free);
  EXPECT_FALSE(ns.gpus[1].free);
  EXPECT_DOUBLE_EQ(ns.cpus_used, 6);
  EXPECT_EQ(ns.memory_mb_used, 2048);
  EXPECT_TRUE(ns.schedulable);
  slurm.unavailable = "slurm: DRAIN (maintenance)";
  EXPECT_FALSE(ToNodeInfo(slurm).schedulable);
}

TEST(ToRunningJob, OwnersSpecAndStart) {
  Job job = MakeJob(7, -3);
  job.state = JobState::kRunning;
  const RunningJob run = ToRunningJob(job, 2, {{0, 1, "gpu-a", {10}, {0}}}, 9'000);
  EXPECT_EQ(run.job_id, 7);
  EXPECT_EQ(run.attempt, 2);
  EXPECT_EQ(run.tenant, "acme");
  EXPECT_EQ(run.team, "vision");
  EXPECT_EQ(run.user, "ana");
  EXPECT_EQ(run.priority, -3);
  EXPECT_TRUE(run.preemptible);
  EXPECT_DOUBLE_EQ(run.started_s, 9.0);
  EXPECT_DOUBLE_EQ(run.max_runtime_s, 600);
  EXPECT_DOUBLE_EQ(run.cpus_per_task, 4);
  EXPECT_EQ(run.memory_mb_per_task, 1024);
  ASSERT_EQ(run.tasks.size(), 1u);
  EXPECT_EQ(run.tasks[0].gpu_ids, std::vector<int64_t>{10});
  EXPECT_FALSE(run.terminating);  // the store marks stopping attempts
  EXPECT_EQ(run.preempted_for, 0);
}

TEST(ToPendingJob, ShapeOwnersAndPreferences) {
  const PendingJob p = ToPendingJob(MakeJob(8, 5));
  EXPECT_EQ(p.job_id, 8);
  EXPECT_EQ(p.attempt, 2);
  EXPECT_EQ(p.tenant, "acme");
  EXPECT_EQ(p.tasks, 2);
  EXPECT_EQ(p.gpus_per_task, 1);
  EXPECT_EQ(p.gpu_models, std::vector<std::string>{"H200"});
  EXPECT_DOUBLE_EQ(p.cpus_per_task, 4);
  EXPECT_EQ(p.memory_mb_per_task, 1024);
  EXPECT_EQ(p.priority, 5);
  EXPECT_TRUE(p.preemptible);
  EXPECT_DOUBLE_EQ(p.submitted_s, 5.5);
  EXPECT_DOUBLE_EQ(p.max_runtime_s, 600);
  EXPECT_EQ(p.topology, "same_domain");
  EXPECT_EQ(p.datasets, std::vector<std::string>{"c4"});
  EXPECT_EQ(p.pool_set, "training");
}

TEST(ToPendingJob, InputDigestsAndBytes) {
  Job job = MakeJob(9, 0);
  EXPECT_TRUE(ToPendingJob(job).input_digests.empty());
  JobInput dataset;
  dataset.name = "train";
  dataset.dataset = "imagenet";
  dataset.manifest_digest = "sha256:" + std::string(64, '1');
  dataset.bytes = 1000;
  JobInput object;
  object.name = "vocab";
  object.uri = "https://h/vocab.txt";
  object.sha256 = std::string(64, '2');
  object.bytes = 20;
  JobInput unresolved;  // a dataset input the server has not resolved: no digest
  unresolved.name = "later";
  unresolved.dataset = "other";
  job.spec.inputs = {dataset, object, unresolved};
  const PendingJob p = ToPendingJob(job);
  EXPECT_EQ(p.input_digests, (std::vector<std::string>{"sha256:" + std::string(64, '1'),
                                                       "sha256:" + std::string(64, '2')}));
  EXPECT_EQ(p.input_bytes, 1020);
  EXPECT_TRUE(p.cached_bytes.empty());  // the server fills it
  EXPECT_EQ(InputDigest(object), "sha256:" + std::string(64, '2'));
  EXPECT_EQ(InputDigest(unresolved), "");
}

TEST(CanonicalGpuModel, OneSpellingPerModel) {
  EXPECT_EQ(CanonicalGpuModel("h100"), "H100");
  EXPECT_EQ(CanonicalGpuModel("H100"), "H100");
  EXPECT_EQ(CanonicalGpuModel("rtx_6000-ada"), "RTX_6000-ADA");
  EXPECT_EQ(CanonicalGpuModel(""), "");
}

}  // namespace
}  // namespace ferry::fleet::sched
