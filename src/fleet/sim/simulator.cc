// The discrete-event engine behind `ferry sim` (simulator.h, docs/fleet-sim.md).
//
// The scheduler's Snapshot is kept as live state and edited in place as
// events happen (a GPU taken, a job requeued, a node gone), so a cycle costs
// the core's work and nothing here is rebuilt per cycle: nodes, running jobs
// and pending jobs sit in vectors with an index from id to slot and are
// removed by swapping with the last element.
#include "fleet/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <unordered_map>
#include <utility>

#include "ferry/fleet/model.h"

namespace ferry::fleet::sim {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();
// GPU store ids in the simulator: node id × this + index on the node.
constexpr int64_t kGpuIdStride = 1024;

// At one instant, state changes come before the cycle that reacts to them.
enum class EventKind : uint8_t {
  kArrival,      // a = job index
  kEnd,          // a = job index, b = attempt: completion or timeout
  kKill,         // a = job index, b = attempt: preemption grace period over
  kProvisioned,  // a = pool index, x = request time
  kSpot,         // a = node id
  kWakeup,       // a timed condition comes due: ask for a cycle
  kCycle,        // b = generation (a newer request replaces an older one)
};

struct Event {
  double t = 0;
  EventKind kind = EventKind::kArrival;
  uint64_t seq = 0;
  int64_t a = 0;
  int64_t b = 0;
  double x = 0;
};

struct EventLater {
  bool operator()(const Event& l, const Event& r) const {
    if (l.t != r.t) return l.t > r.t;
    if (l.kind != r.kind) return l.kind > r.kind;
    return l.seq > r.seq;
  }
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A uniform draw in (0, 1) from (seed, key), the same on every platform.
double Uniform(uint64_t seed, uint64_t key) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ SplitMix64(key * 0x2545F4914F6CDD1DULL));
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

struct PoolState {
  const sched::PoolConfig* config = nullptr;
  double spot_rate_per_s = 0;  // spot interruptions per node and second
  int alive = 0;               // nodes READY
  int provisioning = 0;        // requested, not yet READY
  int64_t created = 0;         // nodes ever created (names, domains)
};

// A data set in a node's cache, by tenant (tenants never share entries).
struct CacheEntry {
  double size_gb = 0;
  double ready_s = 0;     // its download ends here (a later job on the node waits for it)
  uint64_t last_use = 0;  // LRU order
  int pins = 0;           // attempts on the node using it (never evicted while > 0)
};

struct SimNode {
  int pool = 0;
  bool alive = false;
  double requested_s = 0;  // billing starts (cloud: the request)
  double ready_s = 0;
  int gpus = 0;
  int busy_gpus = 0;
  std::vector<int> jobs;                    // job indices with tasks here
  std::map<std::string, CacheEntry> cache;  // "<tenant>\n<data set>" → entry
  double cache_used_gb = 0;
};

enum class Phase : uint8_t { kFuture, kPending, kRunning, kDone };

struct SimJob {
  Phase phase = Phase::kFuture;
  int attempt = 1;
  double remaining_s = 0;  // work left (the whole duration unless checkpointing)
  double placed_s = 0;     // this attempt holds its GPUs from here
  double run_start_s = 0;  // and runs from here (later on a Slurm pool: its queue delay)
  bool times_out = false;  // this attempt ends by its time limit
  bool terminating = false;
  double queued_s = 0;       // joined the pending jobs (submission or requeue)
  double stage_start_s = 0;  // staging runs from here (after a Slurm queue delay)
  double staging_s = 0;      // for staging_s, until its slowest node has its inputs
  std::vector<std::pair<int64_t, std::string>> pins;  // (node, cache key) held by this attempt
};

class Engine {
 public:
  Engine(const sched::Config& config, const std::vector<TraceJob>& trace, const SimOptions& options,
         std::unique_ptr<sched::Scheduler> scheduler)
      : config_(config), trace_(trace), options_(options), scheduler_(std::move(scheduler)) {}

  Result<SimResult> Run();

 private:
  void Push(double t, EventKind kind, int64_t a = 0, int64_t b = 0, double x = 0) {
    queue_.push(Event{t, kind, seq_++, a, b, x});
  }
  void RequestCycle(double at);
  void RunCycle();
  void Arrive(int job);
  void ApplyPlacement(const Placement& placement);
  // Frees what a running job holds and charges its GPU time; `lost_node` (if
  // any) is being taken away, so its GPUs are not returned.
  void Release(int job, int64_t lost_node = 0);
  void Requeue(int job, bool interrupted);
  void Finish(int job, JobEnd end);
  void AddNode(int pool, double requested_s);
  void RemoveNode(int64_t node_id);
  void Interrupt(int64_t node_id);
  void Record();
  // Fetches what node `id` lacks of the job's inputs from `start` on (the
  // policy's part hidden by the queue wait already done); returns when the
  // node has them all.
  double StageOnNode(int job, int64_t id, double start);
  // Makes room for `gb` in the node's cache by evicting unpinned entries, least
  // recently used first; false when it cannot.
  bool MakeRoom(SimNode& host, double gb);
  void Unpin(int job);
  // Adds the part of the current attempt's staging before `until` to the job's idle time.
  void ChargeStaging(int job, double until);
  sched::PendingJob MakePending(int job) const;
  // Adds [share_t_, now) to the tenants' held, demanded and entitled GPU-seconds.
  void AccumulateShares(double until);
  int Gpus(int job) const {
    const TraceJob& t = trace_[static_cast<size_t>(job)];
    return t.tasks * t.gpus_per_task;
  }
  bool Stalled() const;

  SimNode& node(int64_t id) { return nodes_[static_cast<size_t>(id - 1)]; }
  sched::NodeInfo& info(int64_t id) {
    return snapshot_.nodes[static_cast<size_t>(node_slot_[static_cast<size_t>(id - 1)])];
  }

  const sched::Config& config_;
  const std::vector<TraceJob>& trace_;
  const SimOptions& options_;
  std::unique_ptr<sched::Scheduler> scheduler_;

  std::priority_queue<Event, std::vector<Event>, EventLater> queue_;
  uint64_t seq_ = 0;
  double now_ = 0;

  sched::Snapshot snapshot_;
  std::vector<PoolState> pools_;
  std::unordered_map<std::string, int> pool_index_;
  std::vector<SimNode> nodes_;  // by node id - 1
  std::vector<int> node_slot_;  // node id - 1 → index in snapshot_.nodes (-1: gone)
  std::unordered_map<std::string, int64_t> node_by_name_;
  std::vector<SimJob> jobs_;
  std::vector<int> pending_slot_;  // job → index in snapshot_.pending (-1: none)
  std::vector<int> running_slot_;  // job → index in snapshot_.running (-1: none)

  double last_cycle_ = -kInf;
  double next_cycle_ = kInf;
  uint64_t cycle_gen_ = 0;
  bool last_cycle_acted_ = true;  // the last cycle placed, preempted or provisioned
  double min_pending_s_ = 0;      // burst wakeups (0: none needed)
  int64_t future_arrivals_ = 0;
  int64_t kills_in_flight_ = 0;
  int64_t provisioning_in_flight_ = 0;
  int64_t finished_ = 0;
  int onprem_gpus_ = 0, onprem_busy_ = 0, cloud_gpus_ = 0, cloud_busy_ = 0;
  std::vector<PendingReason> last_reasons_;
  std::vector<int> tenant_of_;                        // job → index in result_.tenants
  std::vector<int64_t> tenant_demand_, tenant_held_;  // GPUs now
  double share_t_ = 0;
  std::vector<int> fill_order_;                         // scratch for AccumulateShares
  std::unordered_map<std::string, double> dataset_gb_;  // config data set sizes
  uint64_t cache_uses_ = 0;

  SimResult result_;
};

Result<SimResult> Engine::Run() {
  const auto wall_start = Clock::now();
  const size_t n = trace_.size();
  result_.jobs.resize(n);
  result_.staging = options_.staging.policy;
  for (const sched::DatasetConfig& dataset : config_.datasets) {
    dataset_gb_[dataset.name] = std::max(0.0, dataset.size_gb);
  }
  jobs_.resize(n);
  pending_slot_.assign(n, -1);
  running_slot_.assign(n, -1);

  // Pools, and the on-prem nodes that exist from the start.
  pools_.resize(config_.pools.size());
  result_.pools.resize(config_.pools.size());
  bool any_cloud = false;
  for (size_t p = 0; p < config_.pools.size(); ++p) {
    const sched::PoolConfig& pool = config_.pools[p];
    pools_[p].config = &pool;
    pool_index_[pool.name] = static_cast<int>(p);
    PoolUsage& usage = result_.pools[p];
    usage.name = pool.name;
    usage.cloud = pool.cloud;
    usage.spot = pool.spot;
    usage.slurm = pool.slurm.has_value();
    usage.queue_delay_s = pool.slurm ? std::max(0.0, pool.queue_delay_s) : 0;
    usage.price_per_gpu_hour = pool.price_per_gpu_hour;
    usage.gpus_per_node = pool.node.gpus;
    if (pool.cloud) {
      any_cloud = true;
      if (pool.spot) {
        for (const sched::ProviderConfig& provider : config_.providers) {
          if (provider.name == pool.provider) {
            pools_[p].spot_rate_per_s = provider.spot_interruptions_per_hour / 3600.0;
          }
        }
      }
    }
  }

  double start = kInf;
  for (const TraceJob& job : trace_) start = std::min(start, job.submit_s);
  if (n == 0) start = 0;
  result_.start_s = start;
  now_ = start;
  for (size_t p = 0; p < config_.pools.size(); ++p) {
    if (config_.pools[p].cloud) continue;
    for (int k = 0; k < config_.pools[p].nodes; ++k) AddNode(static_cast<int>(p), start);
  }

  if (config_.burst.enabled && any_cloud) min_pending_s_ = config_.burst.min_pending_s;

  // Tenants, their weights and the share integrals.
  {
    std::map<std::string, int> index;
    for (const TraceJob& job : trace_) index.emplace(job.tenant, 0);
    for (auto& [name, i] : index) {
      i = static_cast<int>(result_.tenants.size());
      TenantShare share;
      share.tenant = name;
      for (const sched::ShareConfig& s : config_.shares) {
        if (s.path == name && s.shares > 0) share.weight = s.shares;
      }
      result_.tenants.push_back(std::move(share));
    }
    tenant_of_.resize(n);
    for (size_t j = 0; j < n; ++j) tenant_of_[j] = index[trace_[j].tenant];
    tenant_demand_.assign(result_.tenants.size(), 0);
    tenant_held_.assign(result_.tenants.size(), 0);
    share_t_ = start;
  }

  for (size_t j = 0; j < n; ++j) {
    jobs_[j].remaining_s = trace_[j].duration_s;
    result_.jobs[j].job = &trace_[j];
    Push(trace_[j].submit_s, EventKind::kArrival, static_cast<int64_t>(j));
  }
  future_arrivals_ = static_cast<int64_t>(n);
  if (options_.cycle_mode == CycleMode::kPeriodic) Push(start, EventKind::kCycle, 0, 0);
  Record();

  while (!queue_.empty() && finished_ < static_cast<int64_t>(n)) {
    const Event event = queue_.top();
    if (options_.max_time_s > 0 && event.t > options_.max_time_s) {
      now_ = std::max(now_, options_.max_time_s);
      result_.stopped_early = true;
      break;
    }
    queue_.pop();
    if (event.t > share_t_) AccumulateShares(event.t);
    now_ = event.t;
    const int job = static_cast<int>(event.a);
    switch (event.kind) {
      case EventKind::kArrival:
        --future_arrivals_;
        Arrive(job);
        break;
      case EventKind::kEnd:
        if (jobs_[job].phase == Phase::kRunning && jobs_[job].attempt == event.b) {
          const bool timed_out = jobs_[job].times_out;
          Release(job);
          Finish(job, timed_out ? JobEnd::kTimedOut : JobEnd::kCompleted);
          RequestCycle(now_);
        }
        break;
      case EventKind::kKill:
        if (jobs_[job].phase == Phase::kRunning && jobs_[job].attempt == event.b &&
            jobs_[job].terminating) {
          Release(job);
          ++result_.preemptions;
          ++result_.jobs[job].preemptions;
          Requeue(job, false);
          RequestCycle(now_);
        }
        break;
      case EventKind::kProvisioned: {
        --provisioning_in_flight_;
        PoolState& pool = pools_[static_cast<size_t>(event.a)];
        --pool.provisioning;
        auto it = snapshot_.provisioning.find(pool.config->name);
        if (it != snapshot_.provisioning.end() && --it->second <= 0) {
          snapshot_.provisioning.erase(it);
        }
        AddNode(static_cast<int>(event.a), event.x);
        RequestCycle(now_);
        break;
      }
      case EventKind::kSpot:
        if (node(event.a).alive) {
          Interrupt(event.a);
          RequestCycle(now_);
        }
        break;
      case EventKind::kWakeup:
        RequestCycle(now_);
        break;
      case EventKind::kCycle:
        if (options_.cycle_mode == CycleMode::kPeriodic) {
          RunCycle();
          if (finished_ < static_cast<int64_t>(n) && !Stalled()) {
            Push(now_ + options_.cycle_s, EventKind::kCycle);
          }
        } else if (static_cast<uint64_t>(event.b) == cycle_gen_) {
          next_cycle_ = kInf;
          RunCycle();
        }
        break;
    }
    if (queue_.empty() || queue_.top().t > now_) {
      Record();
      if (options_.cycle_mode == CycleMode::kOnChange && next_cycle_ == kInf && Stalled()) break;
    }
  }

  Record();
  if (now_ > share_t_) AccumulateShares(now_);
  // The run ends at the last job's end; jobs still open are unfinished.
  double end = start;
  for (const JobOutcome& outcome : result_.jobs) end = std::max(end, outcome.end_s);
  if (finished_ < static_cast<int64_t>(n)) {
    end = std::max(end, now_);
    result_.stopped_early = true;
    std::unordered_map<int64_t, const PendingReason*> reasons;
    for (const auto& reason : last_reasons_) reasons[reason.job_id] = &reason;
    for (size_t j = 0; j < n; ++j) {
      if (jobs_[j].phase == Phase::kDone) continue;
      JobOutcome& outcome = result_.jobs[j];
      outcome.end = JobEnd::kUnfinished;
      if (jobs_[j].phase == Phase::kRunning) {
        // Charge the GPU time held so far, without ending anything.
        for (const TaskPlacement& task :
             snapshot_.running[static_cast<size_t>(running_slot_[j])].tasks) {
          const SimNode& host = node(task.node_id);
          const double held =
              (end - jobs_[j].placed_s) * static_cast<double>(task.gpu_indices.size());
          outcome.gpu_seconds += held;
          outcome.cost +=
              held * pools_[static_cast<size_t>(host.pool)].config->price_per_gpu_hour / 3600.0;
          result_.pools[static_cast<size_t>(host.pool)].busy_gpu_s += held;
        }
        ChargeStaging(static_cast<int>(j), end);
        outcome.pending_reason = "RUNNING";
      } else if (auto it = reasons.find(static_cast<int64_t>(j) + 1); it != reasons.end()) {
        outcome.pending_reason = it->second->reason;
      }
    }
  }
  result_.end_s = end;

  // Bill what is still up at the end.
  for (SimNode& host : nodes_) {
    if (!host.alive) continue;
    PoolUsage& usage = result_.pools[static_cast<size_t>(host.pool)];
    usage.billed_node_s += std::max(0.0, end - host.requested_s);
    usage.ready_gpu_s += std::max(0.0, end - host.ready_s) * host.gpus;
  }
  for (PoolUsage& usage : result_.pools) {
    usage.cost = usage.billed_node_s * usage.gpus_per_node * usage.price_per_gpu_hour / 3600.0;
  }
  result_.wall_s = std::chrono::duration<double>(Clock::now() - wall_start).count();
  return std::move(result_);
}

void Engine::RequestCycle(double at) {
  if (options_.cycle_mode == CycleMode::kPeriodic) return;
  at = std::max({at, now_, last_cycle_ + options_.cycle_s});
  if (at >= next_cycle_) return;
  next_cycle_ = at;
  Push(at, EventKind::kCycle, 0, static_cast<int64_t>(++cycle_gen_));
}

sched::PendingJob Engine::MakePending(int job) const {
  const TraceJob& t = trace_[static_cast<size_t>(job)];
  sched::PendingJob pending;
  pending.job_id = job + 1;
  pending.attempt = jobs_[static_cast<size_t>(job)].attempt;
  pending.tenant = t.tenant;
  pending.team = t.team;
  pending.user = t.user;
  pending.tasks = t.tasks;
  pending.gpus_per_task = t.gpus_per_task;
  if (!t.gpu_model.empty()) pending.gpu_models = {t.gpu_model};
  pending.cpus_per_task = t.cpus_per_task;
  pending.memory_mb_per_task = t.memory_mb_per_task;
  pending.priority = t.priority;
  pending.preemptible = t.preemptible;
  pending.submitted_s = t.submit_s;
  pending.max_runtime_s = t.max_runtime_s;
  pending.datasets = t.datasets;
  return pending;
}

void Engine::Arrive(int job) {
  sched::PendingJob pending = MakePending(job);
  if (auto refusal = scheduler_->CheckSubmission(pending)) {
    result_.jobs[static_cast<size_t>(job)].pending_reason = *refusal;
    Finish(job, JobEnd::kRejected);
    return;
  }
  jobs_[static_cast<size_t>(job)].phase = Phase::kPending;
  jobs_[static_cast<size_t>(job)].queued_s = now_;
  pending_slot_[static_cast<size_t>(job)] = static_cast<int>(snapshot_.pending.size());
  snapshot_.pending.push_back(std::move(pending));
  tenant_demand_[static_cast<size_t>(tenant_of_[static_cast<size_t>(job)])] += Gpus(job);
  RequestCycle(now_);
  if (min_pending_s_ > 0) {
    const double due = trace_[static_cast<size_t>(job)].submit_s + min_pending_s_;
    if (due > now_) Push(due, EventKind::kWakeup);
  }
}

void Engine::Requeue(int job, bool interrupted) {
  SimJob& state = jobs_[static_cast<size_t>(job)];
  const double ran = std::max(0.0, now_ - state.run_start_s);
  state.remaining_s = options_.checkpoint ? std::max(0.0, state.remaining_s - ran)
                                          : trace_[static_cast<size_t>(job)].duration_s;
  state.attempt += 1;
  state.phase = Phase::kPending;
  state.terminating = false;
  state.queued_s = now_;
  if (interrupted) ++result_.jobs[static_cast<size_t>(job)].interruptions;
  pending_slot_[static_cast<size_t>(job)] = static_cast<int>(snapshot_.pending.size());
  snapshot_.pending.push_back(MakePending(job));
  if (min_pending_s_ > 0) {
    const double due = trace_[static_cast<size_t>(job)].submit_s + min_pending_s_;
    if (due > now_) Push(due, EventKind::kWakeup);
  }
}

void Engine::Finish(int job, JobEnd end) {
  if (end != JobEnd::kRejected) {
    tenant_demand_[static_cast<size_t>(tenant_of_[static_cast<size_t>(job)])] -= Gpus(job);
  }
  jobs_[static_cast<size_t>(job)].phase = Phase::kDone;
  JobOutcome& outcome = result_.jobs[static_cast<size_t>(job)];
  outcome.end = end;
  outcome.end_s = now_;
  ++finished_;
}

void Engine::AddNode(int pool_index, double requested_s) {
  PoolState& pool = pools_[static_cast<size_t>(pool_index)];
  const sched::PoolConfig& config = *pool.config;
  const int64_t id = static_cast<int64_t>(nodes_.size()) + 1;
  const int64_t k = pool.created++;

  SimNode host;
  host.pool = pool_index;
  host.alive = true;
  host.requested_s = requested_s;
  host.ready_s = now_;
  host.gpus = config.node.gpus;
  nodes_.push_back(std::move(host));
  node_slot_.push_back(static_cast<int>(snapshot_.nodes.size()));

  sched::NodeInfo info;
  info.id = id;
  info.name = config.name + "-" + std::to_string(k);
  info.pool = config.name;
  info.domain = config.nodes_per_domain > 0
                    ? config.name + "/d" + std::to_string(k / config.nodes_per_domain)
                    : config.name;
  info.gpus.resize(static_cast<size_t>(config.node.gpus));
  for (int g = 0; g < config.node.gpus; ++g) {
    sched::GpuSlot& slot = info.gpus[static_cast<size_t>(g)];
    slot.id = id * kGpuIdStride + g;
    slot.index = g;
    slot.model = config.node.gpu_model;
    slot.memory_mb = config.node.gpu_memory_mb;
  }
  info.cpus = config.node.cpus;
  info.memory_mb = config.node.memory_mb;
  info.idle_since_s = config.cloud ? now_ : -1;
  node_by_name_[info.name] = id;
  snapshot_.nodes.push_back(std::move(info));

  ++pool.alive;
  PoolUsage& usage = result_.pools[static_cast<size_t>(pool_index)];
  usage.peak_nodes = std::max(usage.peak_nodes, pool.alive);
  if (config.cloud) {
    ++usage.nodes_provisioned;
    cloud_gpus_ += config.node.gpus;
    // A cycle when it has been idle long enough to be scaled down.
    Push(now_ + config.idle_timeout_s, EventKind::kWakeup);
    if (pool.spot_rate_per_s > 0) {
      const double u = Uniform(options_.seed, static_cast<uint64_t>(id));
      Push(now_ - std::log(u) / pool.spot_rate_per_s, EventKind::kSpot, id);
    }
  } else {
    onprem_gpus_ += config.node.gpus;
  }
}

void Engine::RemoveNode(int64_t id) {
  SimNode& host = node(id);
  PoolState& pool = pools_[static_cast<size_t>(host.pool)];
  PoolUsage& usage = result_.pools[static_cast<size_t>(host.pool)];
  usage.billed_node_s += now_ - host.requested_s;
  usage.ready_gpu_s += (now_ - host.ready_s) * host.gpus;
  ++usage.nodes_removed;
  --pool.alive;
  if (pool.config->cloud) {
    cloud_gpus_ -= host.gpus;
    cloud_busy_ -= host.busy_gpus;
  } else {
    onprem_gpus_ -= host.gpus;
    onprem_busy_ -= host.busy_gpus;
  }
  host.alive = false;
  host.cache.clear();  // the node's disk goes with it
  host.cache_used_gb = 0;

  const size_t slot = static_cast<size_t>(node_slot_[static_cast<size_t>(id - 1)]);
  node_by_name_.erase(snapshot_.nodes[slot].name);
  const size_t last = snapshot_.nodes.size() - 1;
  if (slot != last) {
    snapshot_.nodes[slot] = std::move(snapshot_.nodes[last]);
    node_slot_[static_cast<size_t>(snapshot_.nodes[slot].id - 1)] = static_cast<int>(slot);
  }
  snapshot_.nodes.pop_back();
  node_slot_[static_cast<size_t>(id - 1)] = -1;
}

void Engine::Interrupt(int64_t id) {
  ++result_.spot_interruptions;
  // Every job with a task here loses its attempt.
  const std::vector<int> victims = node(id).jobs;
  for (int job : victims) {
    Release(job, id);
    ++result_.interrupted_jobs;
    Requeue(job, true);
  }
  RemoveNode(id);
}

void Engine::ApplyPlacement(const Placement& placement) {
  const int64_t job_id = placement.job_id;
  if (job_id < 1 || job_id > static_cast<int64_t>(jobs_.size())) {
    ++result_.conflicts;
    return;
  }
  const int job = static_cast<int>(job_id - 1);
  SimJob& state = jobs_[static_cast<size_t>(job)];
  const TraceJob& t = trace_[static_cast<size_t>(job)];
  if (state.phase != Phase::kPending || static_cast<int>(placement.tasks.size()) != t.tasks) {
    ++result_.conflicts;
    return;
  }

  // Every task's node must be up with its GPUs free, CPUs and memory left.
  std::vector<std::vector<int>> indices(placement.tasks.size());
  std::vector<int64_t> ids(placement.tasks.size());
  std::unordered_map<int64_t, std::pair<double, int64_t>> extra;  // node → cpus, memory added
  std::vector<std::pair<int64_t, int>> taken;                     // (node, gpu index)
  for (size_t i = 0; i < placement.tasks.size(); ++i) {
    const TaskPlacement& task = placement.tasks[i];
    int64_t id = task.node_id;
    if (id == 0) {  // named only
      auto it = node_by_name_.find(task.node);
      if (it != node_by_name_.end()) id = it->second;
    }
    ids[i] = id;
    if (id < 1 || id > static_cast<int64_t>(nodes_.size()) || !node(id).alive) {
      ++result_.conflicts;
      return;
    }
    const sched::NodeInfo& host = info(id);
    if (!task.gpu_indices.empty()) {
      indices[i] = task.gpu_indices;
    } else {
      for (int64_t gpu : task.gpu_ids)
        indices[i].push_back(static_cast<int>(gpu - id * kGpuIdStride));
    }
    if (static_cast<int>(indices[i].size()) != t.gpus_per_task) {
      ++result_.conflicts;
      return;
    }
    for (int g : indices[i]) {
      if (g < 0 || g >= static_cast<int>(host.gpus.size()) ||
          !host.gpus[static_cast<size_t>(g)].free ||
          std::find(taken.begin(), taken.end(), std::make_pair(id, g)) != taken.end()) {
        ++result_.conflicts;
        return;
      }
      taken.emplace_back(id, g);
    }
    auto& [cpus, memory] = extra[id];
    cpus += t.cpus_per_task;
    memory += t.memory_mb_per_task;
    if (host.cpus_used + cpus > host.cpus + 1e-9 || host.memory_mb_used + memory > host.memory_mb) {
      ++result_.conflicts;
      return;
    }
  }

  // A Slurm pool runs the job after its queue delay (the longest of the gang's pools).
  double queue_delay = 0;
  for (const int64_t id : ids) {
    queue_delay =
        std::max(queue_delay, result_.pools[static_cast<size_t>(node(id).pool)].queue_delay_s);
  }
  const double limit = t.max_runtime_s;

  // Staging: every node of the gang fetches what it lacks; the gang runs when the slowest is done.
  const Staging staging = options_.staging.policy;
  const double stage_start = now_ + queue_delay;
  double staged = stage_start;
  if (staging != Staging::kOff) {
    std::vector<int64_t> hosts = ids;
    std::sort(hosts.begin(), hosts.end());
    hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
    for (const int64_t id : hosts) staged = std::max(staged, StageOnNode(job, id, stage_start));
  }
  const double staging_s = staged - stage_start;
  // A job that downloads its own inputs spends its time limit on them; the agent
  // stages before the job's clock starts.
  const double limited_staging_s = staging == Staging::kStartThenFetch ? staging_s : 0;

  // Take it.
  sched::RunningJob running;
  running.job_id = job_id;
  running.attempt = state.attempt;
  running.tenant = t.tenant;
  running.team = t.team;
  running.user = t.user;
  running.priority = t.priority;
  running.preemptible = t.preemptible;
  running.started_s = now_;
  // The core plans with started_s + max_runtime_s: the hold lasts the queue delay longer.
  running.max_runtime_s = limit > 0 ? limit + queue_delay + (staging_s - limited_staging_s) : 0;
  running.cpus_per_task = t.cpus_per_task;
  running.memory_mb_per_task = t.memory_mb_per_task;
  running.tasks.reserve(placement.tasks.size());
  bool on_cloud = false;
  for (size_t i = 0; i < placement.tasks.size(); ++i) {
    const int64_t id = ids[i];
    SimNode& host = node(id);
    sched::NodeInfo& hinfo = info(id);
    TaskPlacement task;
    task.task = static_cast<int>(i);
    task.node_id = id;
    task.node = hinfo.name;
    for (int g : indices[i]) {
      hinfo.gpus[static_cast<size_t>(g)].free = false;
      task.gpu_indices.push_back(g);
      task.gpu_ids.push_back(id * kGpuIdStride + g);
    }
    hinfo.cpus_used += t.cpus_per_task;
    hinfo.memory_mb_used += t.memory_mb_per_task;
    hinfo.idle_since_s = -1;
    host.busy_gpus += static_cast<int>(indices[i].size());
    const bool cloud = pools_[static_cast<size_t>(host.pool)].config->cloud;
    on_cloud = on_cloud || cloud;
    (cloud ? cloud_busy_ : onprem_busy_) += static_cast<int>(indices[i].size());
    if (std::find(host.jobs.begin(), host.jobs.end(), job) == host.jobs.end()) {
      host.jobs.push_back(job);
    }
    running.tasks.push_back(std::move(task));
  }

  // Out of the pending list (swap with the last), into the running one.
  const size_t slot = static_cast<size_t>(pending_slot_[static_cast<size_t>(job)]);
  const size_t last = snapshot_.pending.size() - 1;
  if (slot != last) {
    snapshot_.pending[slot] = std::move(snapshot_.pending[last]);
    pending_slot_[static_cast<size_t>(snapshot_.pending[slot].job_id - 1)] = static_cast<int>(slot);
  }
  snapshot_.pending.pop_back();
  pending_slot_[static_cast<size_t>(job)] = -1;
  running_slot_[static_cast<size_t>(job)] = static_cast<int>(snapshot_.running.size());
  snapshot_.running.push_back(std::move(running));

  const double run_start = now_ + queue_delay;
  JobOutcome& outcome = result_.jobs[static_cast<size_t>(job)];
  if (outcome.first_start_s < 0) outcome.first_start_s = run_start;
  outcome.last_start_s = run_start;
  outcome.last_placed_s = now_;
  ++outcome.attempts;
  const int first_pool = node(ids[0]).pool;
  outcome.pool = pools_[static_cast<size_t>(first_pool)].config->name;
  outcome.cloud = on_cloud;
  ++result_.pools[static_cast<size_t>(first_pool)].attempts;
  ++result_.placements;
  tenant_held_[static_cast<size_t>(tenant_of_[static_cast<size_t>(job)])] += Gpus(job);

  state.phase = Phase::kRunning;
  state.placed_s = now_;
  state.stage_start_s = stage_start;
  state.staging_s = staging_s;
  state.run_start_s = staged;  // work starts once the inputs are there
  state.terminating = false;
  state.times_out = limit > 0 && limited_staging_s + state.remaining_s > limit;
  const double limit_start = staging == Staging::kStartThenFetch ? stage_start : staged;
  Push(state.times_out ? limit_start + limit : staged + state.remaining_s, EventKind::kEnd, job,
       state.attempt);
}

void Engine::Release(int job, int64_t lost_node) {
  SimJob& state = jobs_[static_cast<size_t>(job)];
  const size_t slot = static_cast<size_t>(running_slot_[static_cast<size_t>(job)]);
  JobOutcome& outcome = result_.jobs[static_cast<size_t>(job)];
  const double held_s = now_ - state.placed_s;
  const TraceJob& t = trace_[static_cast<size_t>(job)];
  ChargeStaging(job, now_);
  Unpin(job);
  for (const TaskPlacement& task : snapshot_.running[slot].tasks) {
    SimNode& host = node(task.node_id);
    const int gpus = static_cast<int>(task.gpu_indices.size());
    const double gpu_s = held_s * gpus;
    const sched::PoolConfig& pool = *pools_[static_cast<size_t>(host.pool)].config;
    outcome.gpu_seconds += gpu_s;
    outcome.cost += gpu_s * pool.price_per_gpu_hour / 3600.0;
    result_.pools[static_cast<size_t>(host.pool)].busy_gpu_s += gpu_s;
    auto where = std::find(host.jobs.begin(), host.jobs.end(), job);
    if (where != host.jobs.end()) {
      *where = host.jobs.back();
      host.jobs.pop_back();
    }
    if (task.node_id == lost_node) continue;  // the node goes away with its GPUs
    sched::NodeInfo& hinfo = info(task.node_id);
    for (int g : task.gpu_indices) hinfo.gpus[static_cast<size_t>(g)].free = true;
    hinfo.cpus_used = std::max(0.0, hinfo.cpus_used - t.cpus_per_task);
    hinfo.memory_mb_used = std::max<int64_t>(0, hinfo.memory_mb_used - t.memory_mb_per_task);
    host.busy_gpus -= gpus;
    (pool.cloud ? cloud_busy_ : onprem_busy_) -= gpus;
    if (host.busy_gpus == 0) {
      hinfo.idle_since_s = now_;
      if (pool.cloud) Push(now_ + pool.idle_timeout_s, EventKind::kWakeup);
    }
  }

  const size_t last = snapshot_.running.size() - 1;
  if (slot != last) {
    snapshot_.running[slot] = std::move(snapshot_.running[last]);
    running_slot_[static_cast<size_t>(snapshot_.running[slot].job_id - 1)] = static_cast<int>(slot);
  }
  snapshot_.running.pop_back();
  running_slot_[static_cast<size_t>(job)] = -1;
  tenant_held_[static_cast<size_t>(tenant_of_[static_cast<size_t>(job)])] -= Gpus(job);
  if (state.terminating) --kills_in_flight_;  // its kill event, if still ahead, is stale now
  state.terminating = false;
}

void Engine::RunCycle() {
  snapshot_.now_s = now_;
  last_cycle_ = now_;
  ++result_.cycles;
  const auto cycle_start = Clock::now();
  sched::Decision decision = scheduler_->Cycle(snapshot_);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - cycle_start).count();
  result_.core_ms_total += ms;
  result_.core_ms_max = std::max(result_.core_ms_max, ms);

  const int64_t placed_before = result_.placements;
  for (const Placement& placement : decision.placements) ApplyPlacement(placement);
  bool acted = result_.placements != placed_before;

  for (const sched::Preemption& preemption : decision.preemptions) {
    const int64_t job_id = preemption.job_id;
    if (job_id < 1 || job_id > static_cast<int64_t>(jobs_.size())) continue;
    const int job = static_cast<int>(job_id - 1);
    SimJob& state = jobs_[static_cast<size_t>(job)];
    if (state.phase != Phase::kRunning || state.terminating) continue;
    state.terminating = true;
    sched::RunningJob& running =
        snapshot_.running[static_cast<size_t>(running_slot_[static_cast<size_t>(job)])];
    running.terminating = true;
    running.preempted_for = preemption.for_job;
    ++kills_in_flight_;
    Push(now_ + std::max(0.0, preemption.grace_s), EventKind::kKill, job, state.attempt);
    acted = true;
  }

  for (const sched::ProvisionRequest& request : decision.provision) {
    auto it = pool_index_.find(request.pool);
    if (it == pool_index_.end()) continue;
    PoolState& pool = pools_[static_cast<size_t>(it->second)];
    if (!pool.config->cloud) continue;
    const int room = pool.config->max_nodes - pool.alive - pool.provisioning;
    const int count = std::min(request.nodes, room);
    for (int k = 0; k < count; ++k) {
      Push(now_ + pool.config->provisioning_delay_s, EventKind::kProvisioned, it->second, 0, now_);
    }
    if (count > 0) {
      pool.provisioning += count;
      provisioning_in_flight_ += count;
      snapshot_.provisioning[pool.config->name] += count;
      acted = true;
    }
  }

  for (const sched::ScaleDown& down : decision.scale_down) {
    auto it = node_by_name_.find(down.node);
    if (it == node_by_name_.end()) continue;
    const SimNode& host = node(it->second);
    if (!host.alive || host.busy_gpus > 0 ||
        !pools_[static_cast<size_t>(host.pool)].config->cloud) {
      continue;
    }
    RemoveNode(it->second);
  }

  // A job held by a policy may be let go as time passes (the fair-share
  // preemption window slides), except behind a backfill reservation, which
  // only an event (a job ending) can release.
  if (!snapshot_.running.empty()) {
    for (const PendingReason& reason : decision.pending) {
      if (reason.reason == reason::kPolicy && reason.message.rfind("reserved for", 0) != 0) {
        Push(now_ + std::max(options_.cycle_s, 1.0), EventKind::kWakeup);
        break;
      }
    }
  }
  last_cycle_acted_ = acted;
  last_reasons_ = std::move(decision.pending);
}

double Engine::StageOnNode(int job, int64_t id, double start) {
  const TraceJob& t = trace_[static_cast<size_t>(job)];
  SimJob& state = jobs_[static_cast<size_t>(job)];
  JobOutcome& outcome = result_.jobs[static_cast<size_t>(job)];
  SimNode& host = node(id);
  const StagingOptions& staging = options_.staging;
  const double gb_per_s = staging.gbps / 8;
  const bool cached = staging.policy != Staging::kStartThenFetch;
  double ready = start;  // also waits for entries another job is still fetching
  double missing_gb = 0;
  std::vector<std::pair<std::string, double>> fetch;  // (cache key, GB) in fetch order
  std::vector<std::string_view> seen;
  for (const std::string& name : t.datasets) {
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.emplace_back(name);
    auto size = dataset_gb_.find(name);
    if (size == dataset_gb_.end() || size->second <= 0) continue;
    const double gb = size->second;
    outcome.input_gb += gb;
    std::string key = t.tenant + "\n" + name;
    if (cached) {
      auto entry = host.cache.find(key);
      if (entry != host.cache.end()) {
        entry->second.last_use = ++cache_uses_;
        ++entry->second.pins;
        state.pins.emplace_back(id, std::move(key));
        outcome.cached_gb += gb;
        ready = std::max(ready, entry->second.ready_s);
        continue;
      }
    }
    missing_gb += gb;
    fetch.emplace_back(std::move(key), gb);
  }
  // Prefetch: the node fetched at full bandwidth since the job was queued (or
  // since the node came up, if later).
  double hidden_gb = 0;
  if (staging.policy == Staging::kPrefetch) {
    double window_s = std::max(0.0, start - std::max(state.queued_s, host.ready_s));
    if (staging.prefetch_window_s > 0) window_s = std::min(window_s, staging.prefetch_window_s);
    hidden_gb = std::min(missing_gb, window_s * gb_per_s);
  }
  outcome.prefetched_gb += hidden_gb;
  outcome.fetched_gb += missing_gb - hidden_gb;
  // Missing data sets arrive one after the other; each is kept if the cache has room.
  double fetched_gb = 0;
  for (auto& [key, gb] : fetch) {
    fetched_gb += gb;
    const double done = start + std::max(0.0, fetched_gb - hidden_gb) / gb_per_s;
    if (cached && MakeRoom(host, gb)) {
      host.cache[key] = CacheEntry{gb, done, ++cache_uses_, 1};
      host.cache_used_gb += gb;
      state.pins.emplace_back(id, std::move(key));
    }
  }
  return std::max(ready, start + (missing_gb - hidden_gb) / gb_per_s);
}

bool Engine::MakeRoom(SimNode& host, double gb) {
  const double capacity = options_.staging.cache_gb;
  if (gb > capacity) return false;
  while (host.cache_used_gb + gb > capacity + 1e-9) {
    auto victim = host.cache.end();
    for (auto it = host.cache.begin(); it != host.cache.end(); ++it) {
      if (it->second.pins == 0 &&
          (victim == host.cache.end() || it->second.last_use < victim->second.last_use)) {
        victim = it;
      }
    }
    if (victim == host.cache.end()) return false;
    host.cache_used_gb -= victim->second.size_gb;
    host.cache.erase(victim);
  }
  return true;
}

void Engine::Unpin(int job) {
  SimJob& state = jobs_[static_cast<size_t>(job)];
  for (const auto& [id, key] : state.pins) {
    SimNode& host = node(id);
    if (!host.alive) continue;
    auto entry = host.cache.find(key);
    if (entry != host.cache.end() && entry->second.pins > 0) --entry->second.pins;
  }
  state.pins.clear();
}

void Engine::ChargeStaging(int job, double until) {
  const SimJob& state = jobs_[static_cast<size_t>(job)];
  const double idle_s = std::clamp(until - state.stage_start_s, 0.0, state.staging_s);
  JobOutcome& outcome = result_.jobs[static_cast<size_t>(job)];
  outcome.staging_s += idle_s;
  outcome.staging_gpu_s += idle_s * Gpus(job);
}

// Nothing can change any more: nothing runs, arrives, ends or is coming up,
// and the last cycle did nothing (so pending jobs can never be placed).
bool Engine::Stalled() const {
  if (last_cycle_acted_ || future_arrivals_ > 0 || !snapshot_.running.empty() ||
      kills_in_flight_ > 0 || provisioning_in_flight_ > 0) {
    return false;
  }
  if (snapshot_.pending.empty()) return true;
  if (last_cycle_ < now_) return false;  // state changed after the last cycle
  if (min_pending_s_ > 0) {
    for (const sched::PendingJob& job : snapshot_.pending) {
      if (job.submitted_s + min_pending_s_ > now_) return false;
    }
  }
  return true;
}

// Weighted max-min fairness ("water filling") of the READY GPUs over the
// tenants' current demands: a tenant asking less than its weighted level gets
// what it asks, the rest share what is left by weight.
void Engine::AccumulateShares(double until) {
  const double dt = until - share_t_;
  share_t_ = until;
  const size_t n = result_.tenants.size();
  fill_order_.clear();
  for (size_t i = 0; i < n; ++i) {
    result_.tenants[i].held_gpu_s += static_cast<double>(tenant_held_[i]) * dt;
    result_.tenants[i].demand_gpu_s += static_cast<double>(tenant_demand_[i]) * dt;
    if (tenant_demand_[i] > 0) fill_order_.push_back(static_cast<int>(i));
  }
  if (fill_order_.empty()) return;
  auto level = [&](int i) {
    return static_cast<double>(tenant_demand_[static_cast<size_t>(i)]) /
           result_.tenants[static_cast<size_t>(i)].weight;
  };
  std::sort(fill_order_.begin(), fill_order_.end(),
            [&](int a, int b) { return level(a) < level(b) || (level(a) == level(b) && a < b); });
  double left = static_cast<double>(onprem_gpus_ + cloud_gpus_);
  double weight_left = 0;
  for (int i : fill_order_) weight_left += result_.tenants[static_cast<size_t>(i)].weight;
  for (int i : fill_order_) {
    TenantShare& tenant = result_.tenants[static_cast<size_t>(i)];
    const double fair = weight_left > 0 ? left * tenant.weight / weight_left : 0;
    const double granted =
        std::min(static_cast<double>(tenant_demand_[static_cast<size_t>(i)]), std::max(0.0, fair));
    tenant.entitled_gpu_s += granted * dt;
    left -= granted;
    weight_left -= tenant.weight;
  }
}

void Engine::Record() {
  TimePoint point;
  point.t = now_;
  point.onprem_gpus = onprem_gpus_;
  point.onprem_busy = onprem_busy_;
  point.cloud_gpus = cloud_gpus_;
  point.cloud_busy = cloud_busy_;
  point.pending = static_cast<int>(snapshot_.pending.size());
  point.running = static_cast<int>(snapshot_.running.size());
  auto& timeline = result_.timeline;
  if (!timeline.empty()) {
    const TimePoint& back = timeline.back();
    const bool same = back.onprem_gpus == point.onprem_gpus &&
                      back.onprem_busy == point.onprem_busy &&
                      back.cloud_gpus == point.cloud_gpus && back.cloud_busy == point.cloud_busy &&
                      back.pending == point.pending && back.running == point.running;
    if (same) return;
    if (back.t == point.t) {
      timeline.back() = point;
      return;
    }
  }
  timeline.push_back(point);
}

}  // namespace

std::string_view ToString(Staging staging) {
  switch (staging) {
    case Staging::kOff:
      return "off";
    case Staging::kStartThenFetch:
      return "start-then-fetch";
    case Staging::kStageOnAdmit:
      return "stage-on-admit";
    case Staging::kPrefetch:
      return "prefetch";
  }
  return "off";
}

std::optional<Staging> ParseStaging(std::string_view text) {
  for (Staging staging :
       {Staging::kOff, Staging::kStartThenFetch, Staging::kStageOnAdmit, Staging::kPrefetch}) {
    if (text == ToString(staging)) return staging;
  }
  return std::nullopt;
}

Result<SimResult> Simulate(const sched::Config& config, const std::vector<TraceJob>& trace,
                           const SimOptions& options) {
  if (!(options.cycle_s >= 0) || !std::isfinite(options.cycle_s)) {
    return Status::Invalid("cycle_s: must be a finite number >= 0");
  }
  if (options.cycle_mode == CycleMode::kPeriodic && options.cycle_s <= 0) {
    return Status::Invalid("cycle_s: must be > 0 for periodic cycles");
  }
  if (!(options.max_time_s >= 0)) return Status::Invalid("max_time_s: must be >= 0");
  if (!(options.staging.gbps > 0) || !std::isfinite(options.staging.gbps)) {
    return Status::Invalid("staging.gbps: must be a finite number > 0");
  }
  if (!(options.staging.cache_gb >= 0) || !std::isfinite(options.staging.cache_gb)) {
    return Status::Invalid("staging.cache_gb: must be a finite number >= 0");
  }
  if (!(options.staging.prefetch_window_s >= 0) ||
      !std::isfinite(options.staging.prefetch_window_s)) {
    return Status::Invalid("staging.prefetch_window_s: must be a finite number >= 0");
  }
  for (size_t j = 0; j < trace.size(); ++j) {
    Status status = ValidateJob(trace[j]);
    if (!status.ok()) {
      return Status::Invalid("job " + std::to_string(j) + " ('" + trace[j].id +
                             "'): " + status.message());
    }
  }
  for (const sched::PoolConfig& pool : config.pools) {
    if (pool.node.gpus < 0 || pool.node.gpus >= kGpuIdStride) {
      return Status::Invalid("pool '" + pool.name + "': node.gpus must be in [0, " +
                             std::to_string(kGpuIdStride - 1) + "]");
    }
    if (!pool.cloud && pool.nodes < 0) {
      return Status::Invalid("pool '" + pool.name + "': nodes must be >= 0");
    }
  }
  FERRY_ASSIGN_OR_RAISE(auto scheduler, sched::Scheduler::Make(config));
  Engine engine(config, trace, options, std::move(scheduler));
  return engine.Run();
}

}  // namespace ferry::fleet::sim
