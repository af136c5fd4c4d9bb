// The shared state of one scheduling cycle (class CycleRun), private to
// src/fleet/sched. Its steps live in one file per concern:
//   cycle.cc          the order of a cycle and the job loop (Schedule), entry points
//   cycle_index.cc    the dense index of the snapshot, pending jobs, tiers, reason texts
//   cycle_search.cc   where a gang fits (bin-pack, spread, topology, CPU-only)
//   cycle_place.cc    booking a placement (quota, buckets, reservations)
//   cycle_preempt.cc  victims for priority preemption and fair-share reclaim
//   cycle_reserve.cc  backfill reservations, why no start can be planned, drain
//   cycle_burst.cc    cloud burst and scale-down
//
// The snapshot is indexed densely once: pools, GPU
// models and interconnect domains become small integers, and for every
// (pool, model) the schedulable nodes sit in buckets by their number of free
// GPUs of that model. A gang then looks only at buckets that can hold it, and
// a placement moves just the nodes it touched. Capacity never grows during a
// cycle (victims of preemption keep their resources until they end), so "a
// gang of this shape did not fit" is remembered for the rest of the cycle and
// the many alike jobs behind it fail in O(1).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/sched.h"
#include "fleet/sched/cycle.h"
#include "fleet/sched/policy.h"

namespace ferry::fleet::sched::internal {

// CPUs are fractional; a tiny slack keeps 0.1 + 0.2 from missing 0.3.
constexpr double kCpuSlack = 1e-9;
constexpr int64_t kMaxTasks = 1 << 20;
constexpr int64_t kHuge = std::numeric_limits<int32_t>::max();

inline std::string FormatNumber(double v) {
  char buf[64];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  }
  return buf;
}

// What one task needs, and how many tasks.
struct Shape {
  int64_t tasks = 1;
  int gpus = 0;
  double cpus = 0;
  int64_t memory_mb = 0;
};

// How many tasks of `s` fit into `gpus` GPUs (of the right model), `cpus` and
// `memory_mb`, at most `cap`.
inline int64_t TasksThatFit(const Shape& s, int64_t gpus, double cpus, int64_t memory_mb,
                            int64_t cap) {
  int64_t n = cap;
  if (s.gpus > 0) n = std::min(n, gpus / s.gpus);
  if (s.cpus > 0) {
    if (cpus + kCpuSlack < s.cpus) return 0;
    double by_cpu = (cpus + kCpuSlack) / s.cpus;
    n = std::min<int64_t>(n,
                          by_cpu >= static_cast<double>(cap) ? cap : static_cast<int64_t>(by_cpu));
  }
  if (s.memory_mb > 0) n = std::min(n, memory_mb / s.memory_mb);
  return std::max<int64_t>(n, 0);
}

struct IndexedPool {
  std::string name;
  const PoolConfig* config = nullptr;  // null: not in the config (on-prem, price 0)
  bool cloud = false;
  bool spot = false;
  double price = 0;
  int nodes = 0;  // snapshot nodes of the pool, any state
};

// When free capacity on an existing node of `pool` starts a job: a Slurm pool
// hands the job to Slurm's own queue first (queue_delay_s), any other node
// starts it now.
inline double StartDelay(const IndexedPool& pool) {
  return pool.config != nullptr && pool.config->slurm ? std::max(0.0, pool.config->queue_delay_s)
                                                      : 0.0;
}

struct FreeGpus {
  int model = 0;
  std::vector<int> positions;  // into NodeInfo::gpus, by GPU index
};

struct IndexedNode {
  const NodeInfo* info = nullptr;
  int pool = 0;
  int domain = -1;  // named domain, or -1
  bool schedulable = false;
  double cpus_free = 0;
  int64_t memory_free = 0;
  std::vector<FreeGpus> free;              // per model present on the node
  std::vector<std::pair<int, int>> total;  // (model, GPUs) usable on the node
  std::vector<int> slot_model;             // model id of each NodeInfo::gpus entry
  bool held = false;                       // a running job or this cycle holds part of it
  bool touched = false;                    // this cycle placed something here
  int reservation = -1;                    // backfill reservation covering the node
  int64_t spare_gpus = 0;                  // at the reservation's start, beyond what it needs
  double spare_cpus = 0;
  int64_t spare_memory = 0;
};

inline int FreeGpusOf(const IndexedNode& node, int model) {
  for (const FreeGpus& f : node.free) {
    if (f.model == model) return static_cast<int>(f.positions.size());
  }
  return 0;
}

// Resources one job holds on one node (a task may span models: one entry per model).
struct HoldPart {
  int node = 0;
  int model = -1;  // -1: CPUs and memory only
  int gpus = 0;
  double cpus = 0;
  int64_t memory_mb = 0;
};

struct Hold {
  double end_s = 0;  // infinity: never ends (unlimited)
  std::vector<HoldPart> parts;
  int running = -1;  // index into snapshot.running, or -1 for this cycle's placements
};

struct SetInfo {
  std::string name;
  Scoring scoring = Scoring::kBinPack;
  std::vector<int> pools;
};

// Pools of a job's pool set grouped into preference tiers (lower first).
struct Tiers {
  std::vector<std::vector<int>> pools;
  std::vector<int> tier_of_pool;  // -1: not in the set
};

// (key, pool) pairs as tiers: sorted by key (stable, so the set's order
// breaks ties), one tier per distinct key.
template <typename Key>
Tiers GroupTiers(std::vector<std::pair<Key, int>> keyed, size_t pool_count) {
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Tiers tiers;
  tiers.tier_of_pool.assign(pool_count, -1);
  for (size_t i = 0; i < keyed.size(); ++i) {
    if (i == 0 || keyed[i].first != keyed[i - 1].first) tiers.pools.emplace_back();
    tiers.pools.back().push_back(keyed[i].second);
    tiers.tier_of_pool[static_cast<size_t>(keyed[i].second)] =
        static_cast<int>(tiers.pools.size()) - 1;
  }
  return tiers;
}

// What the job loop reads of a pending job, compact (the loop visits jobs in
// queue order, not memory order: one cache line per job instead of several).
struct JobInfo {
  bool ok = false;
  bool preemptible = false;
  int set = -1;
  int priority = 0;
  int owner = -1;    // index into CycleRun::owners_
  int topology = 0;  // 0: none, 1: same_node, 2: same_domain
  int64_t job_id = 0;
  double max_runtime_s = 0;
  Shape shape;
  int models = 0;                // index into CycleRun::model_lists_ (GPU model ids to try)
  int key = -1;                  // interned (set, models, per-task shape): memo keys
  const Tiers* tiers = nullptr;  // the set's pools in preference order for this job
};

// Hash of a few integers (memo keys).
struct MemoKey {
  int64_t a = 0, b = 0;
  uint64_t c = 0;
  bool operator==(const MemoKey&) const = default;
};
struct OwnerKey {
  std::string_view tenant, team, user;
  bool operator==(const OwnerKey&) const = default;
};
struct OwnerKeyHash {
  size_t operator()(const OwnerKey& k) const {
    std::hash<std::string_view> h;
    return h(k.tenant) * 31 * 31 + h(k.team) * 31 + h(k.user);
  }
};
struct MemoKeyHash {
  size_t operator()(const MemoKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.a) * 0x9E3779B97F4A7C15ull;
    h ^= static_cast<uint64_t>(k.b) + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2);
    h ^= k.c + 0x94D049BB133111EBull + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

// Nodes bucketed by their count of free GPUs of one model, in one pool.
struct Buckets {
  std::vector<std::set<int>> by_free;
  int Max() const { return static_cast<int>(by_free.size()) - 1; }
  void Insert(int node, int count) {
    if (count >= static_cast<int>(by_free.size())) by_free.resize(count + 1);
    by_free[count].insert(node);
  }
  void Move(int node, int from, int to) {
    if (from == to) return;
    by_free[from].erase(node);
    Insert(node, to);
  }
};

struct Pick {
  int node = 0;
  int64_t tasks = 0;
};

// A schedulable node whose cache holds `bytes` of a job's inputs.
struct LocalNode {
  int node = 0;
  int64_t bytes = 0;
};

// GPUs (of one model), CPUs and memory: room on a node, now or later.
struct Spare {
  int64_t gpus = 0;
  double cpus = 0;
  int64_t memory = 0;
};

struct Reservation {
  int64_t job_id = 0;
  double start_s = 0;
  int model = -1;
};

class CycleRun {
 public:
  CycleRun(const Config& config, const Snapshot& snapshot, const UsageTracker& usage,
           RateLimiter* limiter)
      : config_(config),
        snap_(snapshot),
        usage_(usage),
        limiter_(limiter),
        ledger_(config, snapshot),
        now_(snapshot.now_s) {}

  Decision Run();
  // Queue positions of the jobs the cycle considered and did not place
  // (PendingReason::queue_position, ahead_in_team), in queue order.
  void NoteQueuePositions();
  // Only the checks a cycle makes before its queue, for one job at submission:
  // the CONSTRAINT_UNSATISFIABLE message it would get, or nullopt.
  std::optional<std::string> CapacityRefusal();

 private:
  // ---- indexing
  int InternModel(const std::string& name);
  int ModelId(const std::string& upper) const;
  void IndexPools();
  void IndexNodes();
  void IndexRunning();
  void PrepareJobs();
  int64_t EverCapacity(const JobInfo& job, int model);
  // Tasks of `job`'s shape on GPUs of `model` that the cloud pools of its set
  // could still add (up to max_nodes, only with burst enabled), at most `cap`.
  // Cloud burst room (tasks, at most `cap`) for the job's set; only pools
  // that provision faster than `before_s` when it is given.
  int64_t CloudCapacity(const JobInfo& job, int model, int64_t cap,
                        double before_s = std::numeric_limits<double>::infinity()) const;
  // The most free GPUs of a model `job` accepts on one schedulable node of
  // its pool set, now.
  int LargestFreeBlock(const JobInfo& job);
  const Tiers& TiersFor(const JobInfo& job, const PendingJob& pending);
  const Tiers& MakeTiers(const JobInfo& job, const PendingJob& pending);
  const std::vector<int>& Models(const JobInfo& job) const {
    return model_lists_[static_cast<size_t>(job.models)];
  }
  const std::string& ShapeText(int index);
  std::string NoCapacityMessage(int index);

  // ---- placement
  // The tiers a search for `job` on GPUs of `model` walks (cycle_search.cc).
  // TiersFor's, except under latency scoring with Slurm pools that queue
  // (queue_delay_s > 0): existing nodes by when they start the job (now,
  // then Slurm pools by queue delay), without the Slurm pools that cloud
  // pools of the set could beat (provisioning delay shorter than the queue
  // delay, room for the whole gang, burst allowed for the job now).
  // `*left_out`: how many Slurm pools that leaves out (fewer for a bigger
  // gang; it tells memo entries of different tiers apart).
  const Tiers& SearchTiers(const JobInfo& job, const PendingJob& pending, int model, int* left_out);
  int64_t TasksFitting(const IndexedNode& node, int model, const Shape& s, uint64_t mask,
                       int64_t cap) const;
  int FindSingleNode(const std::vector<int>& tier_pools, int model, const Shape& s, int64_t need,
                     uint64_t mask, bool most_free_first);
  bool Search(const JobInfo& job, const PendingJob& pending, int model, uint64_t mask,
              std::vector<Pick>* picks, int64_t* found);
  bool SearchCpuOnly(const JobInfo& job, const Tiers& tiers, uint64_t mask,
                     const std::vector<LocalNode>& local, std::vector<Pick>* picks, int64_t* found);
  // Data locality (PendingJob::cached_bytes): the schedulable nodes holding
  // some of the job's input bytes, most bytes first, then as the set's
  // scoring would order them (fewest free GPUs of `model` for bin-pack, most
  // for spread), then snapshot order; a node listed twice holds the sum.
  // Empty for a job whose inputs no node holds. The vector is scratch,
  // valid until the next call.
  const std::vector<LocalNode>& LocalNodes(const PendingJob& pending, int model, bool spread);
  // The first of `local` in tier `tier` of `tiers` that holds `need` tasks
  // now, or -1.
  int LocalNodeHolding(const std::vector<LocalNode>& local, const Tiers& tiers, size_t tier,
                       int model, const Shape& s, int64_t need, uint64_t mask) const;
  // Bytes of the job's inputs on the nodes of `picks` (`local` as LocalNodes gave it).
  static int64_t LocalBytes(const std::vector<LocalNode>& local, const std::vector<Pick>& picks);
  // `memo`: Search's key for "a gang of this shape did not fit these tiers".
  bool SearchDomain(const JobInfo& job, const Tiers& tiers, int model, const MemoKey& memo,
                    uint64_t mask, bool spread, std::vector<Pick>* picks);
  void Place(int index, const JobInfo& job, int model, const std::vector<Pick>& picks,
             uint64_t mask);
  uint64_t MaskFor(const JobInfo& job) const;

  // ---- the job loop
  void Schedule(int index);
  bool TryPriority(int index, const JobInfo& job, const std::vector<int>& models);
  bool TryReclaim(int index, const JobInfo& job, const std::vector<int>& models,
                  bool* rate_limited);
  int64_t BaseCapacity(const JobInfo& job, int model);
  // Preemption candidates grouped by node (CSR), nodes in preference order.
  struct VictimIndex {
    std::vector<int> nodes;
    std::vector<size_t> offsets;  // jobs of nodes[k]: jobs[offsets[k] .. offsets[k + 1])
    std::vector<int> jobs;
    std::vector<int64_t> gpus;  // GPUs all candidates of nodes[k] hold there
    size_t cursor = 0;          // nodes before it have nothing left to preempt
    // Per (shape, model): nodes before it freed nothing for that shape when
    // last looked at (capacity only shrinks, so they are skipped after).
    std::unordered_map<MemoKey, size_t, MemoKeyHash> shape_cursor;
  };
  const VictimIndex& IndexVictims(const std::vector<int>& candidates, VictimIndex* index);
  std::vector<int> Preselect(const JobInfo& job, int model, VictimIndex* index);
  static std::string UserPathKey(const PendingJob& p) {
    return p.tenant + "/" + p.team + "/" + p.user;
  }
  bool VictimsFit(const JobInfo& job, const PendingJob& pending, int model, bool check_quota,
                  const std::vector<int>& victims);
  void Preempt(int index, const std::vector<int>& victims, std::string_view why);
  void TryReserve(int index, const JobInfo& job, const std::vector<int>& models);
  // Why a blocked job has no planned start, from the cycle's own data: either
  // jobs without a max runtime hold what it needs (held_by_unlimited), or the
  // schedulable nodes could not hold it even empty (the text says where the
  // rest is: nodes not ready or drained, nodes held for other jobs, cloud).
  struct NoStart {
    bool held_by_unlimited = false;
    std::string text;
  };
  NoStart WhyNoStart(const JobInfo& job, const std::vector<int>& models);
  // Tasks of the job's shape the schedulable, unreserved nodes of its set
  // hold free now on GPUs of `model` (at most its task count).
  int64_t FreeCapacity(const JobInfo& job, int model) const;
  // Whether free capacity now plus the cloud pools at max_nodes could hold
  // the whole gang with one model (what Burst needs to cover it).
  bool BurstCouldHold(const JobInfo& job, const std::vector<int>& models) const;
  void Drain(int index, const JobInfo& job, const std::vector<int>& models);

  // ---- after the loop
  void Burst();
  void ScaleDowns();

  // One reason per job: a later call replaces the earlier one.
  void SetReason(int index, std::string_view code, std::string message) {
    int& slot = reason_slot_[static_cast<size_t>(index)];
    if (slot < 0) {
      slot = static_cast<int>(out_.pending.size());
      out_.pending.emplace_back();
    }
    PendingReason& r = out_.pending[static_cast<size_t>(slot)];
    r.job_id = jobs_[static_cast<size_t>(index)].job_id;  // hot in cache, unlike snap_.pending
    r.reason.assign(code);
    r.message = std::move(message);
    has_reason_[static_cast<size_t>(index)] = 1;
  }
  PendingReason& ReasonOf(size_t index) {
    return out_.pending[static_cast<size_t>(reason_slot_[index])];
  }
  const std::string& ModelName(int model) const {
    static const std::string kNone;
    return model >= 0 ? model_names_[static_cast<size_t>(model)] : kNone;
  }
  Buckets& BucketsOf(int pool, int model) {
    return buckets_[static_cast<size_t>(pool) * model_names_.size() + static_cast<size_t>(model)];
  }
  bool InSet(const JobInfo& job, int pool) const {
    return set_has_pool_[static_cast<size_t>(job.set) * pools_.size() + static_cast<size_t>(pool)];
  }

  const Config& config_;
  const Snapshot& snap_;
  const UsageTracker& usage_;
  RateLimiter* limiter_;
  QuotaLedger ledger_;                    // charged with this cycle's placements
  std::vector<uint8_t> borrowed_before_;  // per running job
  // Whether running job `r`'s owner was borrowing before this cycle placed
  // anything (worked out once per owner and model, before the first charge).
  bool BorrowedBefore(int r) const { return borrowed_before_[static_cast<size_t>(r)] != 0; }
  void NoteBorrowing();
  const double now_;
  Decision out_;

  std::vector<std::string> model_names_;  // upper-cased
  std::unordered_map<std::string, int> model_ids_;
  std::vector<IndexedPool> pools_;
  std::unordered_map<std::string, int> pool_ids_;
  std::vector<SetInfo> sets_;
  std::vector<uint8_t> set_has_pool_;
  std::vector<IndexedNode> nodes_;
  std::vector<Buckets> buckets_;                // [pool * models + model]
  std::vector<int64_t> pool_free_;              // [pool * models + model] free GPUs (schedulable)
  std::vector<std::vector<int>> domain_nodes_;  // named domains
  std::vector<int64_t> domain_free_;            // [domain * models + model]
  std::vector<Hold> holds_;                     // running jobs first (same index), then placements
  std::vector<std::vector<std::pair<int, int>>> running_models_;  // per running job: (model, GPUs)

  std::vector<JobInfo> jobs_;
  std::vector<int> reason_slot_;  // per pending job: its entry in out_.pending, or -1
  std::vector<uint8_t> has_reason_;
  std::vector<uint8_t> placed_;
  std::vector<int> considered_order_;
  std::unordered_map<MemoKey, int64_t, MemoKeyHash>
      ever_;  // (key, model) -> tasks the fleet could hold
  std::unordered_map<MemoKey, int64_t, MemoKeyHash>
      no_fit_;                                 // (key, model, mask) -> smallest gang that failed
  std::vector<std::vector<int>> model_lists_;  // 0: CPU only {-1}; 1: any model
  std::map<std::vector<int>, int> model_list_ids_;
  std::map<std::tuple<int, int, int, double, int64_t>, int> shape_ids_;
  std::unordered_map<MemoKey, std::string, MemoKeyHash>
      shape_texts_;  // (key, tasks) -> description
  std::unordered_map<std::string, Tiers> tiers_;
  std::vector<int8_t> set_queues_;  // per set: 1 when a Slurm pool of it queues (-1: not known yet)
  // (key, model, tasks or 0 when the job may not burst yet) -> SearchTiers, Slurm pools left out
  std::unordered_map<MemoKey, std::pair<Tiers, int>, MemoKeyHash> latency_tiers_;
  std::vector<const Tiers*> tiers_fast_;          // [set * 2 + preemptible under cost scoring]
  std::unordered_map<int64_t, int> waiting_for_;  // job -> terminating victims for it
  std::vector<uint8_t> preempted_;                // per running job
  std::unordered_map<MemoKey, int, MemoKeyHash>
      priority_failed_;  // (key, tasks, priority) with no victims
  // (key, model) -> (1 + changes_ applied, tasks of that shape that fit the set now)
  std::unordered_map<MemoKey, std::pair<size_t, int64_t>, MemoKeyHash> base_cap_;
  struct NodeChange {
    int node;
    int model;
    int64_t gpus_before, gpus_after;
    double cpus_before, cpus_after;
    int64_t memory_before, memory_after;
  };
  std::vector<NodeChange> changes_;  // what each placement did to a node, in order
  uint64_t epoch_ = 0;               // placements so far (capacity changes)
  int min_preemptible_priority_ = std::numeric_limits<int>::max();
  bool any_borrowing_ = false;
  std::vector<Reservation> reservations_;
  // Per reservation, the start of the message of jobs it holds back (built
  // on first use; reservations never change once made).
  std::vector<std::string> reserved_text_;
  std::string limit_text_;  // the fair-share preemption limit, as jobs see it
  const std::string& LimitText() {
    if (limit_text_.empty()) {
      limit_text_ = "fair-share preemption limit reached (" +
                    std::to_string(config_.preemption.fair_share_max) + " per " +
                    FormatNumber(config_.preemption.fair_share_window_s) + " s)";
    }
    return limit_text_;
  }
  const std::string& ReservedText(size_t r) {
    if (reserved_text_.size() < reservations_.size()) reserved_text_.resize(reservations_.size());
    std::string& text = reserved_text_[r];
    if (text.empty()) {
      const Reservation& res = reservations_[r];
      text = std::isfinite(res.start_s)
                 ? "reserved for job " + std::to_string(res.job_id) +
                       " from t=" + FormatNumber(res.start_s)
                 : "held for job " + std::to_string(res.job_id) +
                       " (draining: its start cannot be planned, jobs without a max runtime "
                       "hold the capacity it needs)";
    }
    return text;
  }
  std::vector<int> reservation_of_job_;  // per pending index: reservation or -1
  int reserve_attempts_ = 0;
  std::vector<uint8_t> mark_;  // scratch per node
  std::vector<int> queue_candidates_;
  std::vector<int> never_holds_;  // jobs no capacity could ever hold, in snapshot order
  struct Owner {
    std::string tenant, team, user;
  };
  std::vector<Owner> owners_;
  const Owner& OwnerOf(const JobInfo& job) const { return owners_[static_cast<size_t>(job.owner)]; }
  std::vector<int> scratch_possible_, scratch_admitted_, scratch_positions_;
  std::vector<std::pair<int, int>> scratch_per_model_;
  std::vector<Pick> scratch_picks_, scratch_best_;
  std::vector<LocalNode> scratch_local_;
  std::unordered_map<int64_t, int> node_of_id_;  // built on the first job with cached inputs
  bool node_of_id_built_ = false;
  std::vector<int> scratch_used_;
  struct DomainOption {
    int domain;
    int tier;
    int64_t free;
  };
  std::unordered_map<MemoKey, std::pair<uint64_t, QuotaLedger::Verdict>, MemoKeyHash> quota_memo_;
  std::unordered_map<MemoKey, int64_t, MemoKeyHash>
      domain_fail_;  // (key, model, mask) -> smallest gang
  std::vector<DomainOption> scratch_domains_;
  int64_t never_fits_below_ = std::numeric_limits<int64_t>::max();  // NeverFits is moot up to here
  std::map<int, VictimIndex> priority_candidates_;                  // by preemptor priority
  std::set<std::string> reclaim_failed_;  // owner|shape with nothing to reclaim
  std::vector<int> extra_slot_;           // scratch per node (VictimsFit)
  std::vector<uint8_t> mark_job_;         // scratch per running job
  std::unique_ptr<JobQueue> queue_;
};

}  // namespace ferry::fleet::sched::internal
