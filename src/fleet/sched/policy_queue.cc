// Queue ordering for one cycle: FIFO, Fair Tree (fair share) and DRF.
//
// Fair Tree. Every tenant, team and user is a node with shares s (from
// config.shares, 1 when unlisted) and an effective usage
//   u = decayed usage (UsageTracker) + H × (GPUs its running jobs hold + GPUs
//       this cycle placed for it),    H = usage_half_life_s / ln 2,
// i.e. the usage the node converges to if it keeps what it holds. The level
// fair share of a node among its siblings is LF = (s / Σs) / (u / Σu), which
// orders siblings exactly as s / u does (u = 0: +infinity; ties by name), so
// a node's key depends only on itself and charging a user re-sorts only the
// user, its team and its tenant in their parents' sets. The next job comes
// from the best user of the best team of the best tenant that still has
// candidates — the first user with candidates in Fair Tree's depth-first
// ranking.
//
// DRF. A tenant's dominant share is max(gpus/G, cpus/C, memory/M) over its
// running jobs and this cycle's placements (G, C, M: totals of the
// schedulable nodes; a total of 0 is left out), divided by its shares; the
// tenant with the lowest goes next (ties by name).
//
// Inside a user (fair share) or tenant (DRF), and for FIFO overall: priority
// descending, submitted_s ascending, job_id ascending.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "fleet/sched/policy.h"
#include "fleet/sched/policy_util.h"

namespace ferry::fleet::sched::internal {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The FIFO order (priority descending, submitted_s ascending, job_id
// ascending, then the index) packed into three words compared as one
// unsigned 192-bit number: the sort compares integers, not fields.
struct JobKey {
  uint64_t hi, mid, lo;
  int index() const { return static_cast<int>(static_cast<uint32_t>(lo)); }
};

bool JobBefore(const JobKey& a, const JobKey& b) {
  if (a.hi != b.hi) return a.hi < b.hi;
  if (a.mid != b.mid) return a.mid < b.mid;
  return a.lo < b.lo;
}

// Order-preserving map of a finite double to an unsigned integer (-0 == +0).
uint64_t OrderedBits(double value) {
  if (value == 0) value = 0;  // -0.0 ties with +0.0, as == says
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return (bits >> 63) != 0 ? ~bits : bits | (uint64_t{1} << 63);
}

JobKey KeyOf(const Snapshot& snapshot, int index) {
  const PendingJob& job = snapshot.pending[static_cast<size_t>(index)];
  const double submitted = std::isfinite(job.submitted_s) ? job.submitted_s : 0.0;
  // Higher priority first: the complement of the order-preserving form.
  const uint64_t priority =
      ~(static_cast<uint32_t>(job.priority) ^ uint32_t{0x80000000}) & uint64_t{0xFFFFFFFF};
  const uint64_t age = OrderedBits(submitted);
  const uint64_t id = static_cast<uint64_t>(job.job_id) ^ (uint64_t{1} << 63);
  // index >= 0 (ValidCandidates), so it fits the low 32 bits.
  return JobKey{(priority << 32) | (age >> 32), (age << 32) | (id >> 32),
                (id << 32) | static_cast<uint32_t>(index)};
}

// Indices in range and each once.
std::vector<int> ValidCandidates(const Snapshot& snapshot, const std::vector<int>& candidates) {
  std::vector<char> seen(snapshot.pending.size(), 0);
  std::vector<int> out;
  out.reserve(candidates.size());
  for (int index : candidates) {
    if (index < 0 || static_cast<size_t>(index) >= snapshot.pending.size()) continue;
    if (seen[static_cast<size_t>(index)]) continue;
    seen[static_cast<size_t>(index)] = 1;
    out.push_back(index);
  }
  return out;
}

// Byte `d` of a key read as one 192-bit number (0: the lowest byte of lo).
inline unsigned KeyByte(const JobKey& key, int d) {
  const uint64_t word = d < 8 ? key.lo : d < 16 ? key.mid : key.hi;
  return static_cast<unsigned>(word >> (8 * (d % 8))) & 0xFF;
}

// Stable LSD radix sort on the key bytes that differ between keys (most
// bytes of an age or a job id are the same across a queue). With the keys in
// index order to begin with, the index bytes need no pass: stability keeps
// equal (priority, age, id) in index order.
void RadixSort(std::vector<JobKey>* keys, bool in_index_order) {
  uint64_t and_lo = ~uint64_t{0}, and_mid = ~uint64_t{0}, and_hi = ~uint64_t{0};
  uint64_t or_lo = 0, or_mid = 0, or_hi = 0;
  for (const JobKey& key : *keys) {
    and_lo &= key.lo, and_mid &= key.mid, and_hi &= key.hi;
    or_lo |= key.lo, or_mid |= key.mid, or_hi |= key.hi;
  }
  const uint64_t differ[3] = {and_lo ^ or_lo, and_mid ^ or_mid, and_hi ^ or_hi};
  std::vector<int> digits;
  for (int d = in_index_order ? 4 : 0; d < 24; ++d) {
    if ((differ[d / 8] >> (8 * (d % 8))) & 0xFF) digits.push_back(d);
  }
  if (digits.empty()) return;
  const size_t n = keys->size();
  std::vector<uint32_t> counts(digits.size() * 256, 0);
  for (const JobKey& key : *keys) {
    for (size_t k = 0; k < digits.size(); ++k) counts[k * 256 + KeyByte(key, digits[k])]++;
  }
  std::vector<JobKey> buffer(n);
  std::vector<JobKey>* from = keys;
  std::vector<JobKey>* to = &buffer;
  for (size_t k = 0; k < digits.size(); ++k) {
    uint32_t* count = &counts[k * 256];
    uint32_t sum = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t c = count[b];
      count[b] = sum;
      sum += c;
    }
    const int d = digits[k];
    for (const JobKey& key : *from) (*to)[count[KeyByte(key, d)]++] = key;
    std::swap(from, to);
  }
  if (from != keys) keys->swap(*from);
}

// Sorts job indices into FIFO order in place.
void SortFifo(const Snapshot& snapshot, std::vector<int>* indices) {
  std::vector<JobKey> keys;
  keys.reserve(indices->size());
  for (int index : *indices) keys.push_back(KeyOf(snapshot, index));
  if (keys.size() < 128) {
    std::sort(keys.begin(), keys.end(),
              [](const JobKey& a, const JobKey& b) { return JobBefore(a, b); });
  } else {
    RadixSort(&keys, std::is_sorted(indices->begin(), indices->end()));
  }
  for (size_t i = 0; i < keys.size(); ++i) (*indices)[i] = keys[i].index();
}

// ---------------------------------------------------------------- FIFO

class FifoQueue : public JobQueue {
 public:
  FifoQueue(const Snapshot& snapshot, const std::vector<int>& candidates)
      : order_(ValidCandidates(snapshot, candidates)) {
    SortFifo(snapshot, &order_);
  }
  int Next() override { return next_ < order_.size() ? order_[next_++] : -1; }
  void Placed(int, const Demand&) override {}

 private:
  std::vector<int> order_;
  size_t next_ = 0;
};

// ---------------------------------------------------------------- Fair Tree

// s / u, the sibling order of LF; a non-positive share goes last.
double FairKey(double shares, double usage) {
  if (!(shares > 0)) return 0;
  if (!(usage > 0)) return kInfinity;
  return shares / usage;
}

class FairTreeQueue : public JobQueue {
 public:
  FairTreeQueue(const Config& config, const Snapshot& snapshot, const UsageTracker& usage,
                const std::vector<int>& candidates) {
    const double half_life = std::isfinite(config.usage_half_life_s) && config.usage_half_life_s > 0
                                 ? config.usage_half_life_s
                                 : 7 * 86400.0;
    horizon_s_ = half_life / std::log(2.0);
    nodes_.push_back(Node{});  // the root
    user_of_.assign(snapshot.pending.size(), -1);

    // Users by "tenant/team/user" path; the owners seen are remembered (as
    // views into the snapshot) so each path is built once per owner.
    std::unordered_map<std::string, int> by_path;
    std::unordered_map<OwnerView, int, OwnerViewHash> users;
    for (int index : ValidCandidates(snapshot, candidates)) {
      const PendingJob& job = snapshot.pending[static_cast<size_t>(index)];
      auto [it, added] = users.try_emplace(OwnerView{job.tenant, job.team, job.user}, 0);
      if (added) {
        auto [path, created] = by_path.try_emplace(UserPath(job.tenant, job.team, job.user), 0);
        if (created) path->second = Child(Child(Child(0, job.tenant), job.team), job.user);
        it->second = path->second;
      }
      const int user = it->second;
      nodes_[static_cast<size_t>(user)].jobs.push_back(index);
      user_of_[static_cast<size_t>(index)] = user;
    }
    // The nodes a running job's GPUs count on: its user's path when the user
    // has candidates, else its tenant and team where they have (so a tenant
    // or team counts the GPUs of all its users). Worked out once per owner.
    std::vector<double> held(nodes_.size(), 0.0);
    std::unordered_map<OwnerView, std::array<int, 3>, OwnerViewHash> charged;
    for (const RunningJob& job : snapshot.running) {
      const int gpus = RunningGpus(job);
      if (gpus <= 0) continue;
      auto [it, added] = charged.try_emplace(OwnerView{job.tenant, job.team, job.user});
      std::array<int, 3>& targets = it->second;
      if (added) targets = ChargedNodes(by_path, job.tenant, job.team, job.user);
      for (int node : targets) {
        if (node > 0) held[static_cast<size_t>(node)] += gpus;
      }
    }

    const ShareTable shares(config);
    for (size_t i = 1; i < nodes_.size(); ++i) {
      Node& node = nodes_[i];
      node.shares = shares.Shares(node.path);
      node.usage = usage.Usage(node.path) + held[i] * horizon_s_;
      node.key = FairKey(node.shares, node.usage);
      if (!node.jobs.empty()) {
        SortFifo(snapshot, &node.jobs);
        for (int up = static_cast<int>(i); up > 0; up = nodes_[static_cast<size_t>(up)].parent) {
          nodes_[static_cast<size_t>(up)].remaining += node.jobs.size();
        }
      }
    }
    for (size_t i = 1; i < nodes_.size(); ++i) {
      if (nodes_[i].remaining > 0) Insert(static_cast<int>(i));
    }
  }

  int Next() override {
    int node = 0;
    while (nodes_[static_cast<size_t>(node)].level < 3) {
      const auto& active = nodes_[static_cast<size_t>(node)].active;
      if (active.empty()) return -1;
      node = active.begin()->node;
    }
    Node& user = nodes_[static_cast<size_t>(node)];
    const int index = user.jobs[user.cursor++];
    for (int up = node; up > 0; up = nodes_[static_cast<size_t>(up)].parent) {
      Node& n = nodes_[static_cast<size_t>(up)];
      if (--n.remaining == 0) Erase(up);
    }
    return index;
  }

  void Placed(int index, const Demand& total) override {
    if (index < 0 || static_cast<size_t>(index) >= user_of_.size()) return;
    const int user = user_of_[static_cast<size_t>(index)];
    if (user < 0 || total.gpus <= 0) return;
    const double charge = total.gpus * horizon_s_;
    for (int up = user; up > 0; up = nodes_[static_cast<size_t>(up)].parent) {
      Node& n = nodes_[static_cast<size_t>(up)];
      const bool queued = n.remaining > 0;
      if (queued) Erase(up);
      n.usage += charge;
      n.key = FairKey(n.shares, n.usage);
      if (queued) Insert(up);
    }
  }

 private:
  struct Entry {
    double key;
    const std::string* name;
    int node;
    bool operator<(const Entry& other) const {
      if (key != other.key) return key > other.key;
      if (*name != *other.name) return *name < *other.name;
      return node < other.node;
    }
  };
  struct Node {
    std::string name;
    std::string path;
    int parent = -1;
    int level = 0;  // 0 root, 1 tenant, 2 team, 3 user
    double shares = 1;
    double usage = 0;
    double key = kInfinity;
    size_t remaining = 0;    // candidates not yet handed out in the subtree
    std::set<Entry> active;  // children with remaining > 0
    std::map<std::string, int, std::less<>> children;
    std::vector<int> jobs;  // users: candidate indices, FIFO order
    size_t cursor = 0;
  };

  int Child(int parent, std::string_view name) {
    auto& children = nodes_[static_cast<size_t>(parent)].children;
    auto it = children.find(name);
    if (it != children.end()) return it->second;
    const int id = static_cast<int>(nodes_.size());
    Node node;
    node.name = std::string(name);
    node.parent = parent;
    node.level = nodes_[static_cast<size_t>(parent)].level + 1;
    node.path =
        parent == 0 ? node.name : nodes_[static_cast<size_t>(parent)].path + "/" + node.name;
    nodes_[static_cast<size_t>(parent)].children.emplace(node.name, id);
    nodes_.push_back(std::move(node));
    return id;
  }

  // Nodes (0: none) that a running job of this owner charges.
  std::array<int, 3> ChargedNodes(const std::unordered_map<std::string, int>& by_path,
                                  std::string_view tenant, std::string_view team,
                                  std::string_view user) const {
    std::array<int, 3> out{0, 0, 0};
    auto it = by_path.find(UserPath(tenant, team, user));
    if (it != by_path.end()) {
      int k = 0;
      for (int node = it->second; node > 0 && k < 3;
           node = nodes_[static_cast<size_t>(node)].parent) {
        out[static_cast<size_t>(k++)] = node;
      }
      return out;
    }
    const auto& tenants = nodes_[0].children;
    auto t = tenants.find(tenant);
    if (t == tenants.end()) return out;
    out[0] = t->second;
    const auto& teams = nodes_[static_cast<size_t>(t->second)].children;
    auto m = teams.find(team);
    if (m != teams.end()) out[1] = m->second;
    return out;
  }

  void Insert(int id) {
    const Node& n = nodes_[static_cast<size_t>(id)];
    nodes_[static_cast<size_t>(n.parent)].active.insert(Entry{n.key, &n.name, id});
  }
  void Erase(int id) {
    const Node& n = nodes_[static_cast<size_t>(id)];
    nodes_[static_cast<size_t>(n.parent)].active.erase(Entry{n.key, &n.name, id});
  }

  double horizon_s_ = 0;
  std::vector<Node> nodes_;   // never resized after construction (entries point into names)
  std::vector<int> user_of_;  // pending index -> user node
};

// ---------------------------------------------------------------- DRF

class DrfQueue : public JobQueue {
 public:
  DrfQueue(const Config& config, const Snapshot& snapshot, const std::vector<int>& candidates) {
    for (const NodeInfo& node : snapshot.nodes) {
      if (!node.schedulable) continue;
      total_gpus_ += static_cast<double>(node.gpus.size());
      if (std::isfinite(node.cpus) && node.cpus > 0) total_cpus_ += node.cpus;
      if (node.memory_mb > 0) total_memory_ += static_cast<double>(node.memory_mb);
    }
    tenant_of_.assign(snapshot.pending.size(), -1);
    std::unordered_map<std::string_view, int> by_name;  // views into the snapshot
    for (int index : ValidCandidates(snapshot, candidates)) {
      const std::string& name = snapshot.pending[static_cast<size_t>(index)].tenant;
      auto [it, inserted] = by_name.try_emplace(name, static_cast<int>(tenants_.size()));
      if (inserted) {
        tenants_.push_back(Tenant{});
        tenants_.back().name = name;
      }
      tenants_[static_cast<size_t>(it->second)].jobs.push_back(index);
      tenant_of_[static_cast<size_t>(index)] = it->second;
    }
    for (const RunningJob& job : snapshot.running) {
      auto it = by_name.find(job.tenant);
      if (it != by_name.end()) Add(&tenants_[static_cast<size_t>(it->second)], RunningDemand(job));
    }
    const ShareTable shares(config);
    for (size_t i = 0; i < tenants_.size(); ++i) {
      Tenant& tenant = tenants_[i];
      tenant.shares = shares.Shares(TenantPath(tenant.name));
      tenant.key = Key(tenant);
      SortFifo(snapshot, &tenant.jobs);
      active_.insert(Entry{tenant.key, &tenant.name, static_cast<int>(i)});
    }
  }

  int Next() override {
    if (active_.empty()) return -1;
    const int id = active_.begin()->tenant;
    Tenant& tenant = tenants_[static_cast<size_t>(id)];
    const int index = tenant.jobs[tenant.cursor++];
    if (tenant.cursor == tenant.jobs.size()) active_.erase(active_.begin());
    return index;
  }

  void Placed(int index, const Demand& total) override {
    if (index < 0 || static_cast<size_t>(index) >= tenant_of_.size()) return;
    const int id = tenant_of_[static_cast<size_t>(index)];
    if (id < 0) return;
    Tenant& tenant = tenants_[static_cast<size_t>(id)];
    const bool queued = tenant.cursor < tenant.jobs.size();
    if (queued) active_.erase(Entry{tenant.key, &tenant.name, id});
    Add(&tenant, total);
    tenant.key = Key(tenant);
    if (queued) active_.insert(Entry{tenant.key, &tenant.name, id});
  }

 private:
  struct Tenant {
    std::string name;
    double shares = 1;
    double gpus = 0, cpus = 0, memory_mb = 0;
    double key = 0;
    std::vector<int> jobs;
    size_t cursor = 0;
  };
  struct Entry {
    double key;
    const std::string* name;
    int tenant;
    bool operator<(const Entry& other) const {
      if (key != other.key) return key < other.key;
      if (*name != *other.name) return *name < *other.name;
      return tenant < other.tenant;
    }
  };

  static void Add(Tenant* tenant, const Demand& demand) {
    tenant->gpus += std::max(0, demand.gpus);
    if (std::isfinite(demand.cpus) && demand.cpus > 0) tenant->cpus += demand.cpus;
    tenant->memory_mb += static_cast<double>(std::max<int64_t>(0, demand.memory_mb));
  }

  double Key(const Tenant& tenant) const {
    double dominant = 0;
    if (total_gpus_ > 0) dominant = std::max(dominant, tenant.gpus / total_gpus_);
    if (total_cpus_ > 0) dominant = std::max(dominant, tenant.cpus / total_cpus_);
    if (total_memory_ > 0) dominant = std::max(dominant, tenant.memory_mb / total_memory_);
    if (!(tenant.shares > 0)) return kInfinity;
    return dominant / tenant.shares;
  }

  double total_gpus_ = 0, total_cpus_ = 0, total_memory_ = 0;
  std::vector<Tenant> tenants_;  // never resized after construction
  std::vector<int> tenant_of_;
  std::set<Entry> active_;
};

}  // namespace

std::unique_ptr<JobQueue> MakeJobQueue(const Config& config, const Snapshot& snapshot,
                                       const UsageTracker& usage,
                                       const std::vector<int>& candidates) {
  switch (config.ordering) {
    case Ordering::kFairShare:
      return std::make_unique<FairTreeQueue>(config, snapshot, usage, candidates);
    case Ordering::kDrf:
      return std::make_unique<DrfQueue>(config, snapshot, candidates);
    case Ordering::kFifo:
      break;
  }
  return std::make_unique<FifoQueue>(snapshot, candidates);
}

}  // namespace ferry::fleet::sched::internal
