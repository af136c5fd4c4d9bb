// One scheduling cycle. The snapshot is indexed densely once: pools, GPU
// models and interconnect domains become small integers, and for every
// (pool, model) the schedulable nodes sit in buckets by their number of free
// GPUs of that model. A gang then looks only at buckets that can hold it, and
// a placement moves just the nodes it touched. Capacity never grows during a
// cycle (victims of preemption keep their resources until they end), so "a
// gang of this shape did not fit" is remembered for the rest of the cycle and
// the many alike jobs behind it fail in O(1).
#include "fleet/sched/core_cycle.h"

#include <algorithm>
#include <cctype>
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

namespace ferry::fleet::sched::internal {
namespace {

// CPUs are fractional; a tiny slack keeps 0.1 + 0.2 from missing 0.3.
constexpr double kCpuSlack = 1e-9;
constexpr int64_t kMaxTasks = 1 << 20;
constexpr int64_t kHuge = std::numeric_limits<int32_t>::max();

std::string Upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string Num(double v) {
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
int64_t TasksThatFit(const Shape& s, int64_t gpus, double cpus, int64_t memory_mb, int64_t cap) {
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

struct Pool {
  std::string name;
  const PoolConfig* config = nullptr;  // null: not in the config (on-prem, price 0)
  bool cloud = false;
  bool spot = false;
  double price = 0;
  int nodes = 0;  // snapshot nodes of the pool, any state
};

struct FreeGpus {
  int model = 0;
  std::vector<int> positions;  // into NodeInfo::gpus, by GPU index
};

struct Node {
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

int FreeOf(const Node& node, int model) {
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
struct Key3 {
  int64_t a = 0, b = 0;
  uint64_t c = 0;
  bool operator==(const Key3&) const = default;
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
struct Key3Hash {
  size_t operator()(const Key3& k) const {
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
  int64_t CloudCapacity(const JobInfo& job, int model, int64_t cap) const;
  const Tiers& TiersFor(const JobInfo& job, const PendingJob& pending);
  const Tiers& MakeTiers(const JobInfo& job, const PendingJob& pending);
  const std::vector<int>& Models(const JobInfo& job) const {
    return model_lists_[static_cast<size_t>(job.models)];
  }
  const std::string& What(int index);
  std::string NoCapacityMessage(int index);

  // ---- placement
  int64_t Cap(const Node& node, int model, const Shape& s, uint64_t mask, int64_t cap) const;
  int SingleNode(const std::vector<int>& tier_pools, int model, const Shape& s, int64_t need,
                 uint64_t mask, bool most_free_first);
  bool Search(const JobInfo& job, const PendingJob& pending, int model, uint64_t mask,
              std::vector<Pick>* picks, int64_t* found);
  bool SearchCpuOnly(const JobInfo& job, const Tiers& tiers, uint64_t mask,
                     std::vector<Pick>* picks, int64_t* found);
  bool SearchDomain(const JobInfo& job, const Tiers& tiers, int model, uint64_t mask, bool spread,
                    std::vector<Pick>* picks);
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
    std::unordered_map<Key3, size_t, Key3Hash> shape_cursor;
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
  std::vector<Pool> pools_;
  std::unordered_map<std::string, int> pool_ids_;
  std::vector<SetInfo> sets_;
  std::vector<uint8_t> set_has_pool_;
  std::vector<Node> nodes_;
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
  std::unordered_map<Key3, int64_t, Key3Hash> ever_;  // (key, model) -> tasks the fleet could hold
  std::unordered_map<Key3, int64_t, Key3Hash>
      no_fit_;                                 // (key, model, mask) -> smallest gang that failed
  std::vector<std::vector<int>> model_lists_;  // 0: CPU only {-1}; 1: any model
  std::map<std::vector<int>, int> model_list_ids_;
  std::map<std::tuple<int, int, int, double, int64_t>, int> shape_ids_;
  std::unordered_map<Key3, std::string, Key3Hash> what_;  // (key, tasks) -> description
  std::unordered_map<std::string, Tiers> tiers_;
  std::vector<const Tiers*> tiers_fast_;          // [set * 2 + preemptible under cost scoring]
  std::unordered_map<int64_t, int> waiting_for_;  // job -> terminating victims for it
  std::vector<uint8_t> preempted_;                // per running job
  std::unordered_map<Key3, int, Key3Hash>
      priority_failed_;  // (key, tasks, priority) with no victims
  // (key, model) -> (1 + changes_ applied, tasks of that shape that fit the set now)
  std::unordered_map<Key3, std::pair<size_t, int64_t>, Key3Hash> base_cap_;
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
                    Num(config_.preemption.fair_share_window_s) + " s)";
    }
    return limit_text_;
  }
  const std::string& ReservedText(size_t r) {
    if (reserved_text_.size() < reservations_.size()) reserved_text_.resize(reservations_.size());
    std::string& text = reserved_text_[r];
    if (text.empty()) {
      const Reservation& res = reservations_[r];
      text = std::isfinite(res.start_s)
                 ? "reserved for job " + std::to_string(res.job_id) + " from t=" + Num(res.start_s)
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
  std::vector<int> scratch_used_;
  struct DomainOption {
    int domain;
    int tier;
    int64_t free;
  };
  std::unordered_map<Key3, std::pair<uint64_t, QuotaLedger::Verdict>, Key3Hash> quota_memo_;
  std::unordered_map<Key3, int64_t, Key3Hash> domain_fail_;  // (key, model, mask) -> smallest gang
  std::vector<DomainOption> scratch_domains_;
  int64_t never_fits_below_ = std::numeric_limits<int64_t>::max();  // NeverFits is moot up to here
  std::map<int, VictimIndex> priority_candidates_;                  // by preemptor priority
  std::set<std::string> reclaim_failed_;  // owner|shape with nothing to reclaim
  std::vector<int> extra_slot_;           // scratch per node (VictimsFit)
  std::vector<uint8_t> mark_job_;         // scratch per running job
  std::unique_ptr<JobQueue> queue_;
};

// ---------------------------------------------------------------- indexing

int CycleRun::InternModel(const std::string& name) {
  std::string upper = Upper(name);
  auto [it, added] = model_ids_.emplace(upper, static_cast<int>(model_names_.size()));
  if (added) model_names_.push_back(upper);
  return it->second;
}

int CycleRun::ModelId(const std::string& upper) const {
  auto it = model_ids_.find(upper);
  return it == model_ids_.end() ? -1 : it->second;
}

void CycleRun::IndexPools() {
  for (const PoolConfig& p : config_.pools) {
    Pool pool;
    pool.name = p.name;
    pool.config = &p;
    pool.cloud = p.cloud;
    pool.spot = p.spot;
    pool.price = p.price_per_gpu_hour;
    pool_ids_.emplace(p.name, static_cast<int>(pools_.size()));
    pools_.push_back(std::move(pool));
    if (p.node.gpus > 0) InternModel(p.node.gpu_model);
  }
  // Pools only the snapshot names: on-prem, price 0. Neighbouring nodes
  // mostly share a pool and GPU model: the last ones are remembered.
  const std::string* last_pool = nullptr;
  int last_pool_id = -1;
  const std::string* last_model = nullptr;
  for (const NodeInfo& n : snap_.nodes) {
    if (last_pool == nullptr || n.pool != *last_pool) {
      auto [it, added] = pool_ids_.try_emplace(n.pool, static_cast<int>(pools_.size()));
      if (added) {
        Pool pool;
        pool.name = n.pool;
        pools_.push_back(std::move(pool));
      }
      last_pool = &n.pool;
      last_pool_id = it->second;
    }
    pools_[static_cast<size_t>(last_pool_id)].nodes++;
    for (const GpuSlot& g : n.gpus) {
      if (last_model != nullptr && g.model == *last_model) continue;
      InternModel(g.model);
      last_model = &g.model;
    }
  }
  if (config_.pool_sets.empty()) {
    SetInfo set;
    set.name = "default";
    set.scoring = config_.default_scoring;
    sets_.push_back(std::move(set));
  } else {
    for (const PoolSet& s : config_.pool_sets) sets_.push_back({s.name, s.scoring, {}});
  }
  set_has_pool_.assign(sets_.size() * pools_.size(), 0);
  for (size_t s = 0; s < sets_.size(); ++s) {
    const std::vector<std::string>* listed =
        config_.pool_sets.empty() ? nullptr : &config_.pool_sets[s].pools;
    for (size_t p = 0; p < pools_.size(); ++p) {
      bool in = listed == nullptr || listed->empty() ||
                std::find(listed->begin(), listed->end(), pools_[p].name) != listed->end();
      if (in) {
        sets_[s].pools.push_back(static_cast<int>(p));
        set_has_pool_[s * pools_.size() + p] = 1;
      }
    }
  }
}

void CycleRun::IndexNodes() {
  const size_t models = model_names_.size();
  buckets_.assign(pools_.size() * models, Buckets{});
  pool_free_.assign(pools_.size() * models, 0);
  std::unordered_map<std::string, int> domain_ids;
  std::unordered_set<int64_t> node_ids;
  std::unordered_set<std::string_view> node_names;
  node_ids.reserve(snap_.nodes.size());
  node_names.reserve(snap_.nodes.size());
  // GPU ids listed more than once (a sort finds them; usually none): only
  // their first slot, in node order, counts.
  std::unordered_set<int64_t> dup_ids, dup_seen;
  {
    std::vector<int64_t> ids;
    for (const NodeInfo& n : snap_.nodes) {
      for (const GpuSlot& g : n.gpus) {
        if (g.id != 0) ids.push_back(g.id);
      }
    }
    if (!std::is_sorted(ids.begin(), ids.end())) std::sort(ids.begin(), ids.end());
    for (size_t k = 1; k < ids.size(); ++k) {
      if (ids[k] == ids[k - 1]) dup_ids.insert(ids[k]);
    }
  }
  std::string last_model;
  int last_model_id = -1;
  const std::string* last_pool = nullptr;
  int last_pool_id = -1;
  std::vector<int> order;
  nodes_.resize(snap_.nodes.size());
  for (size_t i = 0; i < snap_.nodes.size(); ++i) {
    const NodeInfo& info = snap_.nodes[i];
    Node& node = nodes_[i];
    node.info = &info;
    if (last_pool == nullptr || info.pool != *last_pool) {
      last_pool = &info.pool;
      last_pool_id = pool_ids_[info.pool];
    }
    node.pool = last_pool_id;
    // A node id or name seen before: the later node is ignored (never used).
    bool duplicate = (info.id != 0 && !node_ids.insert(info.id).second) ||
                     (!info.name.empty() && !node_names.insert(info.name).second);
    node.schedulable = info.schedulable && !duplicate;
    node.cpus_free = std::isfinite(info.cpus - info.cpus_used) ? info.cpus - info.cpus_used : 0;
    node.memory_free = info.memory_mb - info.memory_mb_used;
    if (!info.domain.empty()) {
      auto [it, added] =
          domain_ids.try_emplace(info.domain, static_cast<int>(domain_nodes_.size()));
      if (added) domain_nodes_.emplace_back();
      node.domain = it->second;
      domain_nodes_[static_cast<size_t>(node.domain)].push_back(static_cast<int>(i));
    }
    order.resize(info.gpus.size());
    for (size_t g = 0; g < order.size(); ++g) order[g] = static_cast<int>(g);
    auto by_index = [&](int a, int b) {
      return info.gpus[static_cast<size_t>(a)].index < info.gpus[static_cast<size_t>(b)].index;
    };
    if (!std::is_sorted(order.begin(), order.end(), by_index)) {
      std::stable_sort(order.begin(), order.end(), by_index);
    }
    node.slot_model.assign(info.gpus.size(), -1);
    int last_index = std::numeric_limits<int>::min();
    bool first = true;
    for (int g : order) {
      const GpuSlot& slot = info.gpus[static_cast<size_t>(g)];
      // A GPU id or index seen twice is never handed out: it would be booked twice.
      bool dup = (!first && slot.index == last_index) ||
                 (slot.id != 0 && dup_ids.count(slot.id) && !dup_seen.insert(slot.id).second);
      first = false;
      last_index = slot.index;
      if (dup || duplicate) continue;
      if (last_model_id < 0 || slot.model != last_model) {
        last_model = slot.model;
        last_model_id = ModelId(Upper(slot.model));
      }
      const int model = last_model_id;
      node.slot_model[static_cast<size_t>(g)] = model;
      auto total = std::find_if(node.total.begin(), node.total.end(),
                                [&](const auto& t) { return t.first == model; });
      if (total == node.total.end()) {
        node.total.push_back({model, 1});
        node.free.push_back({model, {}});
      } else {
        total->second++;
      }
      if (!slot.free) {
        node.held = true;
        continue;
      }
      for (FreeGpus& f : node.free) {
        if (f.model == model) f.positions.push_back(g);
      }
    }
    if (info.cpus_used > 0 || info.memory_mb_used > 0) node.held = true;
  }
  mark_.assign(nodes_.size(), 0);
}

void CycleRun::NoteBorrowing() {
  borrowed_before_.assign(snap_.running.size(), 0);
  if (!config_.preemption.reclaim || config_.quotas.empty()) return;
  std::unordered_map<std::string, bool> owners;
  std::string key;
  for (size_t r = 0; r < snap_.running.size(); ++r) {
    const RunningJob& run = snap_.running[r];
    if (run.terminating) continue;
    for (const auto& [m, n] : running_models_[r]) {
      key.assign(run.tenant).append("\n").append(run.team).append("\n").append(run.user);
      key.append("\n").append(std::to_string(m));
      auto [it, added] = owners.emplace(key, false);
      if (added) it->second = ledger_.Borrowing(run.tenant, run.team, run.user, ModelName(m));
      if (it->second) borrowed_before_[r] = 1;
    }
    any_borrowing_ = any_borrowing_ || borrowed_before_[r];
  }
}

void CycleRun::IndexRunning() {
  // Node ids (never 0) -> first node with it: open addressing, linear probing.
  size_t cap = 16;
  while (cap < 2 * nodes_.size()) cap <<= 1;
  std::vector<std::pair<int64_t, int>> by_id(cap, {0, -1});
  const auto slot_of = [&](int64_t id) {
    uint64_t h = static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ULL;
    size_t k = static_cast<size_t>(h >> 20) & (cap - 1);
    while (by_id[k].first != 0 && by_id[k].first != id) k = (k + 1) & (cap - 1);
    return k;
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const int64_t id = snap_.nodes[i].id;
    if (id == 0) continue;
    const size_t k = slot_of(id);
    if (by_id[k].first == 0) by_id[k] = {id, static_cast<int>(i)};
  }
  // Names (first node with it) only when some task has no known node id.
  std::unordered_map<std::string_view, int> by_name;
  bool names_built = false;
  holds_.resize(snap_.running.size());
  running_models_.resize(snap_.running.size());
  preempted_.assign(snap_.running.size(), 0);
  mark_job_.assign(snap_.running.size(), 0);
  extra_slot_.assign(nodes_.size(), -1);
  for (size_t r = 0; r < snap_.running.size(); ++r) {
    const RunningJob& job = snap_.running[r];
    Hold& hold = holds_[r];
    hold.running = static_cast<int>(r);
    if (job.terminating) {
      hold.end_s = now_ + config_.preemption.grace_s;
      if (job.preempted_for != 0) waiting_for_[job.preempted_for]++;
    } else if (job.max_runtime_s > 0 && std::isfinite(job.max_runtime_s)) {
      hold.end_s = std::max(now_, job.started_s + job.max_runtime_s);
    } else {
      hold.end_s = std::numeric_limits<double>::infinity();
    }
    if (job.preemptible && !job.terminating) {
      min_preemptible_priority_ = std::min(min_preemptible_priority_, job.priority);
    }
    for (const TaskPlacement& task : job.tasks) {
      int n = -1;
      if (task.node_id != 0) n = by_id[slot_of(task.node_id)].second;
      if (n < 0) {
        if (!names_built) {
          names_built = true;
          by_name.reserve(nodes_.size());
          for (size_t i = 0; i < nodes_.size(); ++i) {
            by_name.emplace(snap_.nodes[i].name, static_cast<int>(i));
          }
        }
        auto it = by_name.find(std::string_view(task.node));
        if (it != by_name.end()) n = it->second;
      }
      if (n < 0) continue;
      Node& node = nodes_[static_cast<size_t>(n)];
      node.held = true;
      const NodeInfo& info = *node.info;
      // The GPUs it holds: by index on the node, else by store id. They are
      // never free, whatever the slot says.
      std::vector<int>& positions = scratch_positions_;
      positions.clear();
      if (!task.gpu_indices.empty()) {
        for (int index : task.gpu_indices) {
          // Slots usually sit at their index.
          if (index >= 0 && static_cast<size_t>(index) < info.gpus.size() &&
              info.gpus[static_cast<size_t>(index)].index == index) {
            positions.push_back(index);
            continue;
          }
          for (size_t g = 0; g < info.gpus.size(); ++g) {
            if (info.gpus[g].index == index) {
              positions.push_back(static_cast<int>(g));
              break;
            }
          }
        }
      } else {
        for (int64_t id : task.gpu_ids) {
          for (size_t g = 0; g < info.gpus.size(); ++g) {
            if (info.gpus[g].id == id) {
              positions.push_back(static_cast<int>(g));
              break;
            }
          }
        }
      }
      std::vector<std::pair<int, int>>& per_model = scratch_per_model_;
      per_model.clear();
      for (int pos : positions) {
        const int model = node.slot_model[static_cast<size_t>(pos)];
        if (model < 0) continue;  // a duplicate slot: never free anyway
        for (FreeGpus& f : node.free) {
          if (f.model != model) continue;
          auto it = std::find(f.positions.begin(), f.positions.end(), pos);
          if (it != f.positions.end()) f.positions.erase(it);
        }
        auto pm = std::find_if(per_model.begin(), per_model.end(),
                               [&](const auto& p) { return p.first == model; });
        if (pm == per_model.end()) {
          per_model.push_back({model, 1});
        } else {
          pm->second++;
        }
        auto rm = std::find_if(running_models_[r].begin(), running_models_[r].end(),
                               [&](const auto& p) { return p.first == model; });
        if (rm == running_models_[r].end()) {
          running_models_[r].push_back({model, 1});
        } else {
          rm->second++;
        }
      }
      HoldPart cpu_part{n, -1, 0, std::max(0.0, job.cpus_per_task),
                        std::max<int64_t>(0, job.memory_mb_per_task)};
      if (per_model.empty()) {
        hold.parts.push_back(cpu_part);
      } else {
        for (size_t k = 0; k < per_model.size(); ++k) {
          HoldPart part{n, per_model[k].first, per_model[k].second, 0, 0};
          if (k == 0) {
            part.cpus = cpu_part.cpus;
            part.memory_mb = cpu_part.memory_mb;
          }
          hold.parts.push_back(part);
        }
      }
    }
  }
  // Now the free GPUs are final: fill the buckets and counters.
  const size_t models = model_names_.size();
  domain_free_.assign(domain_nodes_.size() * models, 0);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    if (!node.schedulable) continue;
    for (const FreeGpus& f : node.free) {
      int count = static_cast<int>(f.positions.size());
      BucketsOf(node.pool, f.model).Insert(static_cast<int>(i), count);
      pool_free_[static_cast<size_t>(node.pool) * models + static_cast<size_t>(f.model)] += count;
      if (node.domain >= 0) {
        domain_free_[static_cast<size_t>(node.domain) * models + static_cast<size_t>(f.model)] +=
            count;
      }
    }
  }
}

std::string Describe(const PendingJob& job) {
  std::string what = std::to_string(job.tasks) + (job.tasks == 1 ? " task" : " tasks");
  if (job.gpus_per_task > 0) {
    what +=
        " with " + std::to_string(job.gpus_per_task) + " GPU" + (job.gpus_per_task == 1 ? "" : "s");
    if (!job.gpu_models.empty()) {
      what += " (";
      for (size_t i = 0; i < job.gpu_models.size(); ++i) {
        what += (i ? " or " : "") + job.gpu_models[i];
      }
      what += ")";
    }
    what += " each";
  } else {
    what += " without GPUs";
  }
  return what;
}

std::string CycleRun::NoCapacityMessage(int index) {
  const JobInfo& job = jobs_[static_cast<size_t>(index)];
  if (job.key < 0) return "no free capacity for " + What(index);
  // Jobs of one shape share the text: built once, copied after.
  const Key3 key{job.key, job.shape.tasks, 1};
  auto it = what_.find(key);
  if (it != what_.end()) return it->second;
  std::string message = "no free capacity for " + What(index);
  what_.emplace(key, message);
  return message;
}

const std::string& CycleRun::What(int index) {
  const PendingJob& p = snap_.pending[static_cast<size_t>(index)];
  const JobInfo& job = jobs_[static_cast<size_t>(index)];
  if (job.key < 0) {
    static thread_local std::string scratch;
    scratch = Describe(p);
    return scratch;
  }
  auto [it, added] = what_.emplace(Key3{job.key, job.shape.tasks, 0}, std::string());
  if (added) it->second = Describe(p);
  return it->second;
}

void CycleRun::PrepareJobs() {
  const size_t n = snap_.pending.size();
  jobs_.resize(n);
  reason_slot_.assign(n, -1);
  out_.pending.reserve(n);
  has_reason_.assign(n, 0);
  placed_.assign(n, 0);
  reservation_of_job_.assign(n, -1);
  std::unordered_map<std::string, int> set_ids;
  for (size_t s = 0; s < sets_.size(); ++s) set_ids.emplace(sets_[s].name, static_cast<int>(s));
  // Duplicate job ids: a hash set, unless the ids come strictly increasing
  // (as the store sends them), which rules duplicates out.
  bool increasing = true;
  for (size_t i = 1; i < n && increasing; ++i) {
    increasing = snap_.pending[i - 1].job_id < snap_.pending[i].job_id;
  }
  std::unordered_set<int64_t> seen;
  if (!increasing) seen.reserve(n);
  std::unordered_map<OwnerKey, int, OwnerKeyHash> owner_ids;
  // A job needing no more GPUs than every quota's nominal + borrowing limit
  // can never be refused by NeverFits: skip the call.
  for (const QuotaConfig& q : config_.quotas) {
    if (q.borrowing_limit) {
      never_fits_below_ =
          std::min<int64_t>(never_fits_below_, int64_t{q.nominal_gpus} + *q.borrowing_limit);
    }
  }
  model_lists_ = {{-1}, {}};
  for (size_t m = 0; m < model_names_.size(); ++m) model_lists_[1].push_back(static_cast<int>(m));
  std::vector<int> candidates;
  candidates.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const PendingJob& p = snap_.pending[i];
    JobInfo& job = jobs_[i];
    const int index = static_cast<int>(i);
    job.job_id = p.job_id;
    // A job listed twice: only its first entry counts.
    if (!increasing && !seen.insert(p.job_id).second) {
      has_reason_[i] = 2;
      continue;
    }
    if (p.tasks < 1 || p.tasks > kMaxTasks) {
      SetReason(index, reason::kUnsatisfiable,
                "tasks must be between 1 and " + std::to_string(kMaxTasks) + " (got " +
                    std::to_string(p.tasks) + ")");
      continue;
    }
    if (p.gpus_per_task < 0 || !std::isfinite(p.cpus_per_task) || p.cpus_per_task < 0 ||
        p.memory_mb_per_task < 0) {
      SetReason(index, reason::kUnsatisfiable,
                "gpus_per_task, cpus_per_task and memory_mb_per_task must be >= 0");
      continue;
    }
    if (p.topology != "" && p.topology != "same_node" && p.topology != "same_domain") {
      SetReason(index, reason::kUnsatisfiable,
                "unknown topology '" + p.topology + "' (same_node or same_domain)");
      continue;
    }
    if (p.pool_set.empty()) {
      job.set = 0;
    } else {
      auto it = set_ids.find(p.pool_set);
      if (it == set_ids.end()) {
        SetReason(index, reason::kUnsatisfiable, "unknown pool set '" + p.pool_set + "'");
        continue;
      }
      job.set = it->second;
    }
    job.shape = {p.tasks, p.gpus_per_task, p.cpus_per_task, p.memory_mb_per_task};
    job.priority = p.priority;
    job.preemptible = p.preemptible;
    job.max_runtime_s = p.max_runtime_s;
    job.topology = p.topology == "same_node" ? 1 : p.topology == "same_domain" ? 2 : 0;
    {
      OwnerKey okey{p.tenant, p.team, p.user};
      auto [it, added] = owner_ids.emplace(okey, static_cast<int>(owners_.size()));
      if (added) owners_.push_back({p.tenant, p.team, p.user});
      job.owner = it->second;
    }
    if (p.gpus_per_task == 0) {
      job.models = 0;
    } else if (p.gpu_models.empty()) {
      job.models = 1;
    } else {
      std::vector<int> list;
      for (const std::string& name : p.gpu_models) {
        int m = ModelId(Upper(name));
        if (m >= 0 && std::find(list.begin(), list.end(), m) == list.end()) list.push_back(m);
      }
      auto [it, added] = model_list_ids_.emplace(list, static_cast<int>(model_lists_.size()));
      if (added) model_lists_.push_back(std::move(list));
      job.models = it->second;
    }
    auto [shape, added] = shape_ids_.emplace(std::make_tuple(job.set, job.models, p.gpus_per_task,
                                                             p.cpus_per_task, p.memory_mb_per_task),
                                             static_cast<int>(shape_ids_.size()));
    job.key = shape->second;
    bool ever = false;
    for (int m : Models(job)) ever = ever || EverCapacity(job, m) >= p.tasks;
    if (!ever) {
      never_holds_.push_back(index);
      SetReason(index, reason::kUnsatisfiable,
                "no node of pool set '" + sets_[static_cast<size_t>(job.set)].name +
                    "' (nor cloud capacity) could ever hold " + What(index));
      continue;
    }
    if (p.gpus_per_task > 0 && p.tasks * int64_t{p.gpus_per_task} > never_fits_below_) {
      if (auto never = ledger_.NeverFits(p)) {
        SetReason(index, reason::kQuotaExceeded, *never);
        continue;
      }
    }
    job.ok = true;
    job.tiers = &MakeTiers(job, p);  // now, while the job is in cache
    candidates.push_back(index);
  }
  queue_candidates_ = std::move(candidates);
}

int64_t CycleRun::EverCapacity(const JobInfo& job, int model) {
  const Key3 key{job.key, model, 0};
  auto it = ever_.find(key);
  if (it != ever_.end()) return it->second;
  const Shape& s = job.shape;
  const int64_t cap = kMaxTasks + 1;
  int64_t total = 0;
  for (const Node& node : nodes_) {
    if (total >= cap) break;
    if (!InSet(job, node.pool)) continue;
    if (node.total.empty() && !node.info->gpus.empty() && !node.schedulable) continue;  // duplicate
    int64_t gpus = 0;
    for (const auto& [m, n] : node.total) gpus += m == model ? n : 0;
    total += TasksThatFit(s, gpus, node.info->cpus, node.info->memory_mb, cap);
  }
  total += CloudCapacity(job, model, cap);
  total = std::min(total, cap);
  ever_.emplace(key, total);
  return total;
}

int64_t CycleRun::CloudCapacity(const JobInfo& job, int model, int64_t cap) const {
  if (!config_.burst.enabled) return 0;
  const Shape& s = job.shape;
  int64_t total = 0;
  for (int p : sets_[static_cast<size_t>(job.set)].pools) {
    if (total >= cap) break;
    const Pool& pool = pools_[static_cast<size_t>(p)];
    if (pool.config == nullptr || !pool.cloud || pool.config->max_nodes <= pool.nodes) continue;
    const NodeShape& shape = pool.config->node;
    if (s.gpus > 0 && (shape.gpus <= 0 || ModelId(Upper(shape.gpu_model)) != model)) continue;
    int64_t per_node = TasksThatFit(s, shape.gpus, shape.cpus, shape.memory_mb, cap);
    total += std::min<int64_t>(cap, per_node * (pool.config->max_nodes - pool.nodes));
  }
  return std::min(total, cap);
}

// PrepareJobs sets every schedulable job's tiers; others compute them here.
const Tiers& CycleRun::TiersFor(const JobInfo& job, const PendingJob& pending) {
  return job.tiers != nullptr ? *job.tiers : MakeTiers(job, pending);
}

const Tiers& CycleRun::MakeTiers(const JobInfo& job, const PendingJob& pending) {
  const SetInfo& set = sets_[static_cast<size_t>(job.set)];
  // Without datasets to weigh, the set (and for cost scoring, preemptible)
  // decides the tiers: an array lookup instead of a string key.
  const bool plain = set.scoring != Scoring::kLocality || pending.datasets.empty();
  const size_t fast = static_cast<size_t>(job.set) * 2 +
                      (set.scoring == Scoring::kCost && pending.preemptible ? 1 : 0);
  if (plain) {
    if (tiers_fast_.size() < sets_.size() * 2) tiers_fast_.assign(sets_.size() * 2, nullptr);
    if (tiers_fast_[fast] != nullptr) return *tiers_fast_[fast];
  }
  std::string key = std::to_string(job.set);
  if (set.scoring == Scoring::kCost) key += pending.preemptible ? "|p" : "|n";
  if (set.scoring == Scoring::kLocality) {
    for (const std::string& d : pending.datasets) key += "|" + d;
  }
  auto it = tiers_.find(key);
  if (it != tiers_.end()) {
    if (plain) tiers_fast_[fast] = &it->second;
    return it->second;
  }
  // A sort key per pool; equal keys share a tier.
  std::vector<std::pair<std::pair<int, double>, int>> keyed;
  for (int p : set.pools) {
    const Pool& pool = pools_[static_cast<size_t>(p)];
    std::pair<int, double> k{0, 0.0};
    switch (set.scoring) {
      case Scoring::kBinPack:
      case Scoring::kSpread:
        k = {pool.cloud ? 1 : 0, 0.0};
        break;
      case Scoring::kCost:
        // Spot capacity suits preemptible jobs; others take it last.
        k = {!pending.preemptible && pool.spot ? 1 : 0, pool.price};
        break;
      case Scoring::kLatency:
        k = {0, 0.0};  // every existing node starts the job now
        break;
      case Scoring::kLocality: {
        double transfer = 0;
        bool all = true;
        for (const std::string& d : pending.datasets) {
          bool held = pool.config != nullptr &&
                      std::find(pool.config->datasets.begin(), pool.config->datasets.end(), d) !=
                          pool.config->datasets.end();
          if (held) continue;
          all = false;
          for (const DatasetConfig& dc : config_.datasets) {
            if (dc.name == d) transfer += dc.size_gb * config_.transfer_cost_per_gb;
          }
        }
        k = {all ? 0 : 1, pool.price + transfer};
        break;
      }
    }
    keyed.push_back({k, p});
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Tiers tiers;
  tiers.tier_of_pool.assign(pools_.size(), -1);
  for (size_t i = 0; i < keyed.size(); ++i) {
    if (i == 0 || keyed[i].first != keyed[i - 1].first) tiers.pools.emplace_back();
    tiers.pools.back().push_back(keyed[i].second);
    tiers.tier_of_pool[static_cast<size_t>(keyed[i].second)] =
        static_cast<int>(tiers.pools.size()) - 1;
  }
  const Tiers& made = tiers_.emplace(std::move(key), std::move(tiers)).first->second;
  if (plain) tiers_fast_[fast] = &made;
  return made;
}

// ---------------------------------------------------------------- placement

int64_t CycleRun::Cap(const Node& node, int model, const Shape& s, uint64_t mask,
                      int64_t cap) const {
  int64_t gpus = model >= 0 ? FreeOf(node, model) : 0;
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
int CycleRun::SingleNode(const std::vector<int>& tier_pools, int model, const Shape& s,
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
        if (Cap(nodes_[static_cast<size_t>(n)], model, s, mask, need) >= need) return n;
      }
    }
  }
  return -1;
}

bool CycleRun::SearchCpuOnly(const JobInfo& job, const Tiers& tiers, uint64_t mask,
                             std::vector<Pick>* picks, int64_t* found) {
  int64_t remaining = job.shape.tasks;
  for (const std::vector<int>& tier : tiers.pools) {
    for (size_t i = 0; i < nodes_.size() && remaining > 0; ++i) {
      const Node& node = nodes_[i];
      if (!node.schedulable) continue;
      if (std::find(tier.begin(), tier.end(), node.pool) == tier.end()) continue;
      int64_t k = Cap(node, -1, job.shape, mask, remaining);
      if (k > 0) {
        picks->push_back({static_cast<int>(i), k});
        remaining -= k;
      }
    }
  }
  *found = job.shape.tasks - remaining;
  return remaining == 0;
}

bool CycleRun::SearchDomain(const JobInfo& job, const Tiers& tiers, int model, uint64_t mask,
                            bool spread, std::vector<Pick>* picks) {
  const Shape& s = job.shape;
  const size_t models = model_names_.size();
  // A gang of this shape found no domain: nor will a bigger one, later.
  const Key3 memo{job.key, model, mask};
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
    const Node& first = nodes_[static_cast<size_t>(domain_nodes_[d].front())];
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
      const Node& node = nodes_[static_cast<size_t>(n)];
      if (!node.schedulable || tiers.tier_of_pool[static_cast<size_t>(node.pool)] < 0) continue;
      sum += Cap(node, model, s, mask, s.tasks);
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
  struct Cand {
    int node;
    int tier;
    int64_t free;
    int64_t cap;
  };
  std::vector<Cand> cands;
  for (int n : domain_nodes_[static_cast<size_t>(best)]) {
    const Node& node = nodes_[static_cast<size_t>(n)];
    if (!node.schedulable) continue;
    int t = tiers.tier_of_pool[static_cast<size_t>(node.pool)];
    if (t < 0) continue;
    int64_t k = Cap(node, model, s, mask, s.tasks);
    if (k > 0) cands.push_back({n, t, FreeOf(node, model), k});
  }
  std::vector<int64_t> take(cands.size(), 0);
  int64_t remaining = s.tasks;
  if (spread) {
    // One task at a time to the emptiest node (lowest tier first).
    while (remaining > 0) {
      int pick = -1;
      for (size_t i = 0; i < cands.size(); ++i) {
        if (take[i] >= cands[i].cap) continue;
        if (pick < 0) {
          pick = static_cast<int>(i);
          continue;
        }
        const Cand& a = cands[i];
        const Cand& b = cands[static_cast<size_t>(pick)];
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
      for (size_t i = 0; i < cands.size(); ++i) {
        if (take[i] == 0) tier = std::min(tier, cands[i].tier);
      }
      int fit = -1, most = -1;
      for (size_t i = 0; i < cands.size(); ++i) {
        const Cand& a = cands[i];
        if (take[i] > 0 || a.tier != tier) continue;
        if (a.cap >= remaining && (fit < 0 || a.free < cands[static_cast<size_t>(fit)].free)) {
          fit = static_cast<int>(i);
        }
        if (most < 0 || a.free > cands[static_cast<size_t>(most)].free) most = static_cast<int>(i);
      }
      const int chosen = fit >= 0 ? fit : most;
      if (chosen < 0) break;
      const int64_t k = std::min(cands[static_cast<size_t>(chosen)].cap, remaining);
      take[static_cast<size_t>(chosen)] = k;
      remaining -= k;
    }
  }
  if (remaining > 0) return false;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (take[i] > 0) picks->push_back({cands[i].node, take[i]});
  }
  return true;
}

bool CycleRun::Search(const JobInfo& job, const PendingJob& pending, int model, uint64_t mask,
                      std::vector<Pick>* picks, int64_t* found) {
  picks->clear();
  *found = 0;
  const Shape& s = job.shape;
  const Tiers& tiers = TiersFor(job, pending);
  if (model < 0) return SearchCpuOnly(job, tiers, mask, picks, found);
  const size_t models = model_names_.size();
  int64_t total_free = 0;
  for (int p : sets_[static_cast<size_t>(job.set)].pools) {
    total_free += pool_free_[static_cast<size_t>(p) * models + static_cast<size_t>(model)];
  }
  if (total_free < s.tasks * s.gpus) {
    *found = std::min(s.tasks - 1, total_free / s.gpus);
    return false;
  }
  const Key3 memo{job.key, model, mask};
  auto failed = no_fit_.find(memo);
  if (failed != no_fit_.end() && failed->second <= s.tasks) {
    *found = std::min(s.tasks - 1, failed->second - 1);
    return false;
  }
  const bool spread = sets_[static_cast<size_t>(job.set)].scoring == Scoring::kSpread;

  if (job.topology != 0) {
    for (const std::vector<int>& tier : tiers.pools) {
      int n = SingleNode(tier, model, s, s.tasks, mask, spread);
      if (n >= 0) {
        picks->push_back({n, s.tasks});
        return true;
      }
    }
    if (job.topology == 2 && SearchDomain(job, tiers, model, mask, spread, picks)) {
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
  for (const std::vector<int>& tier : tiers.pools) {
    if (remaining == 0) break;
    int max_c = -1;
    for (int p : tier) max_c = std::max(max_c, BucketsOf(p, model).Max());
    if (spread) {
      // The emptiest nodes, one task at a time to whichever is emptiest now.
      struct Cand {
        int64_t free;
        int order;
        int node;
        int64_t cap;
      };
      std::vector<Cand> cands;
      for (int c = max_c; c >= s.gpus && static_cast<int64_t>(cands.size()) < remaining; --c) {
        for (int p : tier) {
          Buckets& b = BucketsOf(p, model);
          if (c > b.Max()) continue;
          for (int n : b.by_free[static_cast<size_t>(c)]) {
            if (mark_[static_cast<size_t>(n)]) continue;
            int64_t k = Cap(nodes_[static_cast<size_t>(n)], model, s, mask, remaining);
            if (k <= 0) continue;
            cands.push_back({c, static_cast<int>(cands.size()), n, k});
            if (static_cast<int64_t>(cands.size()) >= remaining) break;
          }
          if (static_cast<int64_t>(cands.size()) >= remaining) break;
        }
      }
      auto less = [](const Cand& a, const Cand& b) {
        return a.free != b.free ? a.free < b.free : a.order > b.order;
      };
      std::priority_queue<Cand, std::vector<Cand>, decltype(less)> heap(less, cands);
      std::vector<int64_t> count(cands.size(), 0);
      while (remaining > 0 && !heap.empty()) {
        Cand top = heap.top();
        heap.pop();
        count[static_cast<size_t>(top.order)]++;
        remaining--;
        top.free -= s.gpus;
        if (--top.cap > 0) heap.push(top);
      }
      for (size_t i = 0; i < cands.size(); ++i) {
        if (count[i] > 0) {
          picks->push_back({cands[i].node, count[i]});
          mark_[static_cast<size_t>(cands[i].node)] = 1;
          used.push_back(cands[i].node);
        }
      }
      continue;
    }
    // Bin-pack: the whole remainder on the fullest node that holds it, else
    // the emptiest node (fewest nodes for a big gang) and try again.
    int n = SingleNode(tier, model, s, remaining, mask, false);
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
          int64_t k = Cap(nodes_[static_cast<size_t>(node)], model, s, mask, remaining);
          if (k <= 0) continue;
          take(node, k);
          if (remaining == 0) {
            done = true;
            break;
          }
          int fit = SingleNode(tier, model, s, remaining, mask, false);
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
    Node& node = nodes_[static_cast<size_t>(pick.node)];
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

// ---------------------------------------------------------------- the job loop

void CycleRun::Schedule(int index) {
  const PendingJob& p = snap_.pending[static_cast<size_t>(index)];
  const JobInfo& job = jobs_[static_cast<size_t>(index)];
  const Shape& s = job.shape;

  // Models the fleet could ever give this gang, then the quota (hard).
  const Owner& owner = OwnerOf(job);
  std::vector<int>& possible = scratch_possible_;
  std::vector<int>& admitted = scratch_admitted_;
  possible.clear();
  admitted.clear();
  std::string quota_message;
  for (int m : Models(job)) {
    if (EverCapacity(job, m) < s.tasks) continue;
    possible.push_back(m);
    if (s.gpus == 0) {
      admitted.push_back(m);
      continue;
    }
    // The ledger only changes when a job is placed: until then an owner's
    // verdict for the same model and size is the same.
    auto& memo = quota_memo_[Key3{job.owner, m, static_cast<uint64_t>(s.tasks * s.gpus)}];
    if (memo.first != epoch_ + 1) {
      memo = {epoch_ + 1, ledger_.CanAdmit(owner.tenant, owner.team, owner.user, ModelName(m),
                                           static_cast<int>(s.tasks * s.gpus))};
    }
    const QuotaLedger::Verdict& v = memo.second;
    if (v.ok) {
      admitted.push_back(m);
    } else if (quota_message.empty()) {
      quota_message = v.message;
    }
  }
  if (admitted.empty()) {
    bool limited = false;
    if (TryReclaim(index, job, possible, &limited)) return;
    if (limited) {
      const std::string& limit = LimitText();
      std::string message;
      message.reserve(limit.size() + 2 + quota_message.size());
      message.append(limit).append("; ").append(quota_message);
      SetReason(index, reason::kPolicy, std::move(message));
      return;
    }
    SetReason(index, reason::kQuotaExceeded, quota_message);
    return;
  }

  // The best placement over the admitted models: lowest tiers first, then
  // the order the job lists its models in.
  const uint64_t mask = MaskFor(job);
  std::vector<Pick>& picks = scratch_picks_;
  std::vector<Pick>& best = scratch_best_;
  best.clear();
  int best_model = -1;
  bool have_best = false;
  int64_t best_score = 0, found_most = 0;
  for (int m : admitted) {
    int64_t found = 0;
    if (!Search(job, p, m, mask, &picks, &found)) {
      found_most = std::max(found_most, found);
      continue;
    }
    const Tiers& tiers = TiersFor(job, p);
    int64_t score = 0;
    for (const Pick& pick : picks) {
      score +=
          tiers.tier_of_pool[static_cast<size_t>(nodes_[static_cast<size_t>(pick.node)].pool)] *
          pick.tasks;
    }
    if (!have_best || score < best_score) {
      have_best = true;
      best = picks;
      best_model = m;
      best_score = score;
    }
    if (score == 0) break;
  }
  if (have_best) {
    Place(index, job, best_model, best, mask);
    return;
  }

  // Held back only by a backfill reservation?
  const uint64_t all =
      reservations_.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << reservations_.size()) - 1;
  if (!reservations_.empty() && mask != all) {
    for (int m : admitted) {
      int64_t found = 0;
      if (Search(job, p, m, all, &picks, &found)) {
        for (size_t r = 0; r < reservations_.size(); ++r) {
          if ((mask >> r) & 1) continue;
          const std::string& held = ReservedText(r);
          if (!std::isfinite(reservations_[r].start_s)) {
            SetReason(index, reason::kPolicy, held);
            return;
          }
          std::string message;
          if (p.max_runtime_s > 0) {
            const std::string end = Num(now_ + p.max_runtime_s);
            message.reserve(held.size() + 30 + end.size());
            message.append(held).append("; this job would end at t=").append(end);
          } else {
            message.reserve(held.size() + 30);
            message.append(held).append("; this job has no max runtime");
          }
          SetReason(index, reason::kPolicy, std::move(message));
          return;
        }
      }
    }
  }

  auto waiting = waiting_for_.empty() ? waiting_for_.end() : waiting_for_.find(job.job_id);
  if (waiting != waiting_for_.end()) {
    SetReason(index, reason::kWaitingForPreemption,
              "waiting for " + std::to_string(waiting->second) +
                  " preempted job(s) to release their resources");
    return;
  }
  if (TryPriority(index, job, admitted)) return;
  bool limited = false;
  if (TryReclaim(index, job, admitted, &limited)) return;
  if (limited) {
    SetReason(index, reason::kPolicy, LimitText());
    return;
  }
  if (found_most > 0) {
    const std::string& what = What(index);
    const std::string count = std::to_string(found_most);
    std::string message;
    message.reserve(what.size() + count.size() + 17);
    message.append("only ").append(count).append(" of ").append(what).append(" fit now");
    SetReason(index, reason::kGangIncomplete, std::move(message));
  } else {
    SetReason(index, reason::kNoCapacity, NoCapacityMessage(index));
  }
  if (config_.backfill.enabled &&
      static_cast<int>(reservations_.size()) < config_.backfill.reservations &&
      reserve_attempts_ < 4 * config_.backfill.reservations + 4) {
    TryReserve(index, job, admitted);
  }
}

bool CycleRun::TryPriority(int index, const JobInfo& job, const std::vector<int>& models) {
  const PendingJob& p = snap_.pending[static_cast<size_t>(index)];
  if (!config_.preemption.priority || job.priority <= min_preemptible_priority_) return false;
  const Key3 key{job.key, job.shape.tasks, static_cast<uint64_t>(static_cast<int64_t>(p.priority))};
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
  size_t& shape_cursor = index->shape_cursor[Key3{job.key, model, 0}];
  shape_cursor = std::max(shape_cursor, index->cursor);
  bool prefix = true;  // every node so far freed nothing for this shape
  for (size_t k = shape_cursor; k < index->nodes.size() && total < s.tasks; ++k) {
    if (prefix) shape_cursor = k;
    const int n = index->nodes[k];
    const Node& node = nodes_[static_cast<size_t>(n)];
    if (!InSet(job, node.pool)) continue;
    if (model >= 0 && FreeOf(node, model) + index->gpus[k] < s.gpus) continue;
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
    const int64_t before = Cap(node, model, s, ~uint64_t{0}, s.tasks);
    const int64_t free_gpus = model >= 0 ? FreeOf(node, model) + gpus : 0;
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
  auto& slot = base_cap_[Key3{job.key, model, 0}];
  const Shape& s = job.shape;
  if (slot.first > 0) {
    // Apply what placements changed since: only the nodes they touched.
    bool exact = true;
    int64_t total = slot.second;
    for (size_t i = slot.first - 1; i < changes_.size() && exact; ++i) {
      const NodeChange& c = changes_[i];
      const Node& node = nodes_[static_cast<size_t>(c.node)];
      if (!node.schedulable || !InSet(job, node.pool)) continue;
      if (model >= 0 && c.model != model) {
        exact = FreeOf(node, model) == 0;  // another model's GPUs: recount unless none of ours
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
    for (const Node& node : nodes_) {
      if (node.schedulable && InSet(job, node.pool))
        total += Cap(node, -1, s, ~uint64_t{0}, kMaxTasks);
    }
  } else {
    for (int p : sets_[static_cast<size_t>(job.set)].pools) {
      Buckets& b = BucketsOf(p, model);
      for (int c = std::max(s.gpus, 0); c <= b.Max(); ++c) {
        for (int n : b.by_free[static_cast<size_t>(c)]) {
          total += Cap(nodes_[static_cast<size_t>(n)], model, s, ~uint64_t{0}, kMaxTasks);
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
      const Node& node = nodes_[static_cast<size_t>(part.node)];
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
    const Node& node = nodes_[static_cast<size_t>(e.node)];
    int64_t before = Cap(node, model, s, ~uint64_t{0}, kMaxTasks);
    int64_t gpus = model >= 0 ? FreeOf(node, model) + e.gpus : 0;
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
  auto eligible = [&](const Node& node) {
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
      const Node& node = nodes_[i];
      if (eligible(node))
        total += TasksThatFit(s, m >= 0 ? FreeOf(node, m) : 0, node.cpus_free, node.memory_free,
                              s.tasks);
    }
    double start = std::numeric_limits<double>::infinity();
    for (size_t e = 0; e < events.size() && total < s.tasks; ++e) {
      const Hold& hold = holds_[static_cast<size_t>(events[e])];
      if (hold.end_s >= best_start) break;
      for (const HoldPart& part : hold.parts) {
        const Node& node = nodes_[static_cast<size_t>(part.node)];
        if (!eligible(node)) continue;
        auto it = future.find(part.node);
        if (it == future.end()) {
          it = future
                   .emplace(part.node,
                            Future{m >= 0 ? FreeOf(node, m) : 0, node.cpus_free, node.memory_free})
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
  struct Cand {
    int node;
    int64_t cap;
    Future f;
  };
  std::vector<Cand> cands;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (!eligible(node)) continue;
    auto it = best_future.find(static_cast<int>(i));
    Future f = it != best_future.end() ? it->second
                                       : Future{best_model >= 0 ? FreeOf(node, best_model) : 0,
                                                node.cpus_free, node.memory_free};
    int64_t k = TasksThatFit(s, f.gpus, f.cpus, f.memory, s.tasks);
    if (k > 0) cands.push_back({static_cast<int>(i), k, f});
  }
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Cand& a, const Cand& b) { return a.cap > b.cap; });
  const int id = static_cast<int>(reservations_.size());
  int64_t remaining = s.tasks;
  int used = 0;
  for (const Cand& c : cands) {
    if (remaining == 0) break;
    int64_t k = std::min(c.cap, remaining);
    Node& node = nodes_[static_cast<size_t>(c.node)];
    node.reservation = id;
    node.spare_gpus = c.f.gpus - k * s.gpus;
    node.spare_cpus = c.f.cpus - static_cast<double>(k) * s.cpus;
    node.spare_memory = c.f.memory - k * s.memory_mb;
    remaining -= k;
    used++;
  }
  reservations_.push_back(
      {snap_.pending[static_cast<size_t>(index)].job_id, best_start, best_model});
  reservation_of_job_[static_cast<size_t>(index)] = id;
  ReasonOf(static_cast<size_t>(index)).message +=
      "; reserved to start at t=" + Num(best_start) + " on " + std::to_string(used) + " node(s)";
}

CycleRun::NoStart CycleRun::WhyNoStart(const JobInfo& job, const std::vector<int>& models) {
  const Shape& s = job.shape;
  auto eligible = [&](const Node& node) {
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
      const Node& node = nodes_[i];
      if (!eligible(node)) continue;
      Spare room{m >= 0 ? FreeOf(node, m) : 0, node.cpus_free, node.memory_free};
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
  for (const Node& node : nodes_) {
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
  for (const Node& node : nodes_) {
    if (total >= s.tasks) break;
    if (!node.schedulable || node.reservation >= 0 || !InSet(job, node.pool)) continue;
    total += TasksThatFit(s, model >= 0 ? FreeOf(node, model) : 0, node.cpus_free, node.memory_free,
                          s.tasks - total);
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
  auto eligible = [&](const Node& node) {
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
    struct Cand {
      int node;
      int64_t eventual, soon, now;
      Room room;  // once every job on it has ended
    };
    std::vector<Cand> cands;
    int64_t total = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const Node& node = nodes_[i];
      if (!eligible(node)) continue;
      const Room free{m >= 0 ? FreeOf(node, m) : 0, node.cpus_free, node.memory_free};
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
      cands.push_back({static_cast<int>(i), eventual,
                       TasksThatFit(s, soon.gpus, soon.cpus, soon.memory, s.tasks),
                       TasksThatFit(s, free.gpus, free.cpus, free.memory, s.tasks), all});
      total += eventual;
    }
    if (total < s.tasks) continue;
    std::stable_sort(cands.begin(), cands.end(), [&](const Cand& a, const Cand& b) {
      if (a.soon != b.soon) return a.soon > b.soon;
      if (a.now != b.now) return a.now > b.now;
      if (a.eventual != b.eventual) return a.eventual > b.eventual;
      const Node& na = nodes_[static_cast<size_t>(a.node)];
      const Node& nb = nodes_[static_cast<size_t>(b.node)];
      const int64_t fa = m >= 0 ? FreeOf(na, m) : 0, fb = m >= 0 ? FreeOf(nb, m) : 0;
      return fa > fb;
    });
    const int id = static_cast<int>(reservations_.size());
    int64_t remaining = s.tasks;
    int used = 0;
    for (const Cand& c : cands) {
      if (remaining == 0) break;
      const int64_t k = std::min(c.eventual, remaining);
      Node& node = nodes_[static_cast<size_t>(c.node)];
      node.reservation = id;
      node.spare_gpus = c.room.gpus - k * s.gpus;
      node.spare_cpus = c.room.cpus - static_cast<double>(k) * s.cpus;
      node.spare_memory = c.room.memory - k * s.memory_mb;
      remaining -= k;
      used++;
    }
    reservations_.push_back({snap_.pending[static_cast<size_t>(index)].job_id,
                             std::numeric_limits<double>::infinity(), m});
    reservation_of_job_[static_cast<size_t>(index)] = id;
    ReasonOf(static_cast<size_t>(index)).message +=
        "; no start can be planned (jobs without a max runtime hold the capacity it needs): "
        "draining " +
        std::to_string(used) + " node(s) for it";
    return;
  }
  ReasonOf(static_cast<size_t>(index)).message +=
      "; no reservation: not enough eligible nodes to drain";
}

// ---------------------------------------------------------------- after the loop

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
    const Node& node = nodes_[static_cast<size_t>(node_index)];
    return Spare{model >= 0 ? FreeOf(node, model) : 0, node.cpus_free, node.memory_free};
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
      const Pool& pool = pools_[static_cast<size_t>(pid)];
      if (pool.config == nullptr || !pool.cloud) continue;
      any_cloud = true;
      const NodeShape& shape = pool.config->node;
      if (s.gpus > 0) {
        int m = shape.gpus > 0 ? ModelId(Upper(shape.gpu_model)) : -1;
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
                             Num(config_.burst.min_pending_s) + " s (burst.min_pending_s)";
      continue;
    }
    auto key = [&](int pid) {
      const Pool& pool = pools_[static_cast<size_t>(pid)];
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
            "; on-prem frees sooner than cloud provisioning (" + Num(delay) + " s)";
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
      const int m = s.gpus > 0
                        ? ModelId(Upper(pools_[static_cast<size_t>(first)].config->node.gpu_model))
                        : -1;
      if (std::find(tried.begin(), tried.end(), m) != tried.end()) continue;
      tried.push_back(m);
      int64_t remaining = s.tasks;
      std::vector<std::pair<size_t, Spare>> onprem;
      for (size_t n = 0; n < nodes_.size() && remaining > 0; ++n) {
        const Node& node = nodes_[n];
        if (!node.schedulable || !InSet(job, node.pool)) continue;
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
        const Pool& pool = pools_[static_cast<size_t>(pid)];
        const NodeShape& shape = pool.config->node;
        if (s.gpus > 0 && ModelId(Upper(shape.gpu_model)) != m) continue;
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
        const Pool& pool = pools_[static_cast<size_t>(trial.pid)];
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
                  "requested " + requested + " (ready in about " + Num(delay) + " s)");
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
  for (const Node& node : nodes_) {
    const Pool& pool = pools_[static_cast<size_t>(node.pool)];
    if (pool.config == nullptr || !pool.cloud) continue;
    if (!node.schedulable || node.held || node.touched) continue;
    const NodeInfo& info = *node.info;
    if (info.idle_since_s < 0 || !std::isfinite(info.idle_since_s)) continue;
    const double idle = now_ - info.idle_since_s;
    if (idle >= pool.config->idle_timeout_s)
      out_.scale_down.push_back({pool.name, info.name, idle});
  }
}

Decision CycleRun::Run() {
  const auto start = std::chrono::steady_clock::now();
  IndexPools();
  IndexNodes();
  IndexRunning();
  NoteBorrowing();
  PrepareJobs();
  out_.stats.pending = static_cast<int>(snap_.pending.size());
  queue_ = MakeJobQueue(config_, snap_, usage_, queue_candidates_);
  for (int i = queue_->Next(); i >= 0; i = queue_->Next()) {
    const size_t k = static_cast<size_t>(i);
    if (k >= jobs_.size() || !jobs_[k].ok || placed_[k] || has_reason_[k]) continue;
    out_.stats.considered++;
    considered_order_.push_back(i);
    Schedule(i);
  }
  Burst();
  ScaleDowns();
  for (size_t i = 0; i < jobs_.size(); ++i) {
    if (placed_[i] || has_reason_[i] == 2) continue;
    if (has_reason_[i] == 0) {
      // The queue left it out (it should not): still one reason per job.
      SetReason(static_cast<int>(i), reason::kPolicy, "not considered in this cycle");
    }
  }
  out_.stats.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return std::move(out_);
}

std::optional<std::string> CycleRun::CapacityRefusal() {
  IndexPools();
  IndexNodes();
  PrepareJobs();
  if (never_holds_.empty()) return std::nullopt;
  return ReasonOf(static_cast<size_t>(never_holds_.front())).message;
}

}  // namespace

std::optional<std::string> CapacityRefusal(const Config& config, const Snapshot& snapshot) {
  UsageTracker usage;
  return CycleRun(config, snapshot, usage, nullptr).CapacityRefusal();
}

Decision RunCycle(const Config& config, const Snapshot& snapshot, const UsageTracker& usage,
                  RateLimiter* limiter) {
  return CycleRun(config, snapshot, usage, limiter).Run();
}

}  // namespace ferry::fleet::sched::internal
