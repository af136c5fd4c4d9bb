// The simple scheduler: greedy, all-or-nothing gang placement in priority
// order. A gang that fits one node goes to the node it fills best; a larger
// one takes the nodes with the most free matching GPUs first.
//
// Free GPUs are indexed per "model set" (the normalized gpu_models list of a
// job, or "any"): for every node the number of free GPUs whose model is in the
// set, and buckets of nodes by that number. A gang looks only at buckets with
// enough free GPUs instead of every node, and a placement only updates the
// buckets of the nodes it touched.
#include "ferry/fleet/scheduler.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ferry::fleet {
namespace {

// CPUs are fractional; a tiny slack keeps 0.1 + 0.2 from missing 0.3.
constexpr double kCpuSlack = 1e-9;
constexpr int64_t kUnbounded = std::numeric_limits<int32_t>::max();

std::string Upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The job's accepted models, upper-cased and sorted; empty means any model.
std::vector<std::string> ModelSet(const JobSpec& spec) {
  std::vector<std::string> models;
  models.reserve(spec.gpu_models.size());
  for (const auto& m : spec.gpu_models) models.push_back(Upper(m));
  std::sort(models.begin(), models.end());
  models.erase(std::unique(models.begin(), models.end()), models.end());
  return models;
}

std::string ModelSetKey(const std::vector<std::string>& models) {
  if (models.empty()) return "*";
  std::string key;
  for (const auto& m : models) {
    key += m;
    key += '\x1f';
  }
  return key;
}

bool Matches(const std::vector<std::string>& models, const std::string& upper_model) {
  return models.empty() || std::binary_search(models.begin(), models.end(), upper_model);
}

// How many tasks of `spec` fit into `gpus` matching GPUs, `cpus` and
// `memory_mb`, at most `cap`.
int64_t TasksThatFit(const JobSpec& spec, int64_t gpus, double cpus, int64_t memory_mb,
                     int64_t cap) {
  int64_t n = cap;
  if (spec.gpus_per_task > 0) n = std::min(n, gpus / spec.gpus_per_task);
  if (spec.cpus_per_task > 0) {
    if (cpus + kCpuSlack < spec.cpus_per_task) return 0;
    double by_cpu = (cpus + kCpuSlack) / spec.cpus_per_task;
    n = std::min<int64_t>(n,
                          by_cpu >= static_cast<double>(cap) ? cap : static_cast<int64_t>(by_cpu));
  }
  if (spec.memory_mb_per_task > 0) n = std::min(n, memory_mb / spec.memory_mb_per_task);
  return std::max<int64_t>(n, 0);
}

// One schedulable node during a decision: what is still free.
struct FreeNode {
  const Node* node = nullptr;
  double cpus_free = 0;
  int64_t memory_free = 0;
  std::vector<int> free_gpus;            // positions in node->gpus, by GPU index
  std::vector<std::string> free_models;  // upper-cased model of each entry of free_gpus
};

// Nodes bucketed by their number of free GPUs matching one model set.
class ModelIndex {
 public:
  ModelIndex(std::vector<std::string> models, const std::vector<FreeNode>& nodes)
      : models_(std::move(models)), count_(nodes.size(), 0) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      count_[i] = Count(nodes[i]);
      Insert(static_cast<int>(i));
    }
  }

  int Count(const FreeNode& state) const {
    if (models_.empty()) return static_cast<int>(state.free_gpus.size());
    int n = 0;
    for (const auto& m : state.free_models) n += Matches(models_, m) ? 1 : 0;
    return n;
  }

  // After node `i` changed.
  void Update(int i, const FreeNode& state) {
    int now = Count(state);
    if (now == count_[i]) return;
    buckets_[count_[i]].erase(i);
    count_[i] = now;
    Insert(i);
  }

  bool Relevant(const std::string& upper_model) const { return Matches(models_, upper_model); }

  // Nodes with at least `min_free` matching free GPUs, most free first (ties in
  // snapshot order). `visit` returns false to stop.
  template <typename Visit>
  void ForEachMostFreeFirst(int min_free, Visit&& visit) const {
    for (int c = static_cast<int>(buckets_.size()) - 1; c >= min_free && c >= 0; --c) {
      for (int i : buckets_[c]) {
        if (!visit(i, c)) return;
      }
    }
  }

  // The same nodes, fewest free first.
  template <typename Visit>
  void ForEachFewestFreeFirst(int min_free, Visit&& visit) const {
    for (int c = std::max(min_free, 0); c < static_cast<int>(buckets_.size()); ++c) {
      for (int i : buckets_[c]) {
        if (!visit(i, c)) return;
      }
    }
  }

 private:
  void Insert(int i) {
    if (static_cast<size_t>(count_[i]) >= buckets_.size()) buckets_.resize(count_[i] + 1);
    buckets_[count_[i]].insert(i);
  }

  std::vector<std::string> models_;
  std::vector<int> count_;
  std::vector<std::set<int>> buckets_;
};

class Decision {
 public:
  explicit Decision(const SchedulingSnapshot& snapshot) : snapshot_(snapshot) {
    for (const Node& node : snapshot.nodes) {
      if (node.state != NodeState::kReady || node.drain) continue;
      FreeNode s;
      s.node = &node;
      s.cpus_free = node.cpus;
      s.memory_free = node.memory_mb;
      auto used = snapshot.usage.find(node.id);
      if (used != snapshot.usage.end()) {
        s.cpus_free -= used->second.cpus_used;
        s.memory_free -= used->second.memory_mb_used;
      }
      std::vector<int> order;
      for (size_t g = 0; g < node.gpus.size(); ++g) {
        if (!node.gpus[g].job_id.has_value()) order.push_back(static_cast<int>(g));
      }
      std::sort(order.begin(), order.end(),
                [&](int a, int b) { return node.gpus[a].index < node.gpus[b].index; });
      s.free_gpus = order;
      for (int g : order) s.free_models.push_back(Upper(node.gpus[g].model));
      nodes_.push_back(std::move(s));
    }
  }

  ScheduleDecision Run() {
    std::vector<const Job*> jobs;
    jobs.reserve(snapshot_.pending.size());
    for (const Job& job : snapshot_.pending) jobs.push_back(&job);
    // The store sends them in order already; sorting again keeps the policy
    // true for any caller.
    std::stable_sort(jobs.begin(), jobs.end(), [](const Job* a, const Job* b) {
      if (a->spec.priority != b->spec.priority) return a->spec.priority > b->spec.priority;
      if (a->created_at_ms != b->created_at_ms) return a->created_at_ms < b->created_at_ms;
      return a->id < b->id;
    });
    ScheduleDecision decision;
    for (const Job* job : jobs) Place(*job, &decision);
    return decision;
  }

 private:
  // Tentative share of one node for a gang: how many tasks go there.
  struct Share {
    int node = 0;
    int tasks = 0;
  };

  // What one task needs (the gang size aside).
  static std::string ShapeKey(const JobSpec& spec, const std::vector<std::string>& models) {
    return ModelSetKey(models) + "|" + std::to_string(spec.gpus_per_task) + "|" +
           std::to_string(spec.cpus_per_task) + "|" + std::to_string(spec.memory_mb_per_task);
  }

  ModelIndex& IndexFor(const std::vector<std::string>& models) {
    std::string key = ModelSetKey(models);
    auto it = indexes_.find(key);
    if (it == indexes_.end()) it = indexes_.emplace(key, ModelIndex(models, nodes_)).first;
    return it->second;
  }

  void Place(const Job& job, ScheduleDecision* decision) {
    const JobSpec& spec = job.spec;
    const int tasks = std::max(spec.tasks, 1);
    std::vector<std::string> models = ModelSet(spec);
    const std::string shape = ShapeKey(spec, models);
    if (!CouldEverFit(spec, shape, models)) {
      decision->pending.push_back(Unplaced(job, models, shape, 0));
      return;
    }
    // Capacity only shrinks during a decision: once no task of a shape fits,
    // later jobs of that shape need no search (queues hold many alike).
    if (nothing_fits_.count(shape)) {
      decision->pending.push_back(Unplaced(job, models, shape, 0));
      return;
    }
    std::vector<Share> shares;
    int64_t placed = 0;

    auto take = [&](int i, int matching) {
      const FreeNode& s = nodes_[i];
      int64_t n = TasksThatFit(spec, matching, s.cpus_free, s.memory_free, tasks - placed);
      if (n > 0) {
        shares.push_back({i, static_cast<int>(n)});
        placed += n;
      }
      return placed < tasks;
    };

    if (spec.gpus_per_task > 0) {
      ModelIndex& index = IndexFor(models);
      // A gang one node can hold goes to the node it fills best (least
      // fragmentation); a larger one takes the nodes with the most free
      // matching GPUs first, which keeps it on as few nodes as possible.
      const int64_t whole = static_cast<int64_t>(tasks) * spec.gpus_per_task;
      if (whole <= kUnbounded) {
        index.ForEachFewestFreeFirst(static_cast<int>(whole), [&](int i, int matching) {
          const FreeNode& s = nodes_[i];
          if (TasksThatFit(spec, matching, s.cpus_free, s.memory_free, tasks) < tasks) return true;
          shares.push_back({i, tasks});
          placed = tasks;
          return false;
        });
      }
      if (placed < tasks) index.ForEachMostFreeFirst(spec.gpus_per_task, take);
    } else {
      // CPU-only tasks: the first nodes (in snapshot order) with room.
      for (size_t i = 0; i < nodes_.size() && placed < tasks; ++i) {
        take(static_cast<int>(i), 0);
      }
    }

    if (placed < tasks) {
      if (placed == 0) nothing_fits_.insert(shape);
      decision->pending.push_back(Unplaced(job, models, shape, placed));
      return;
    }
    decision->placements.push_back(Commit(job, models, shares));
  }

  Placement Commit(const Job& job, const std::vector<std::string>& models,
                   const std::vector<Share>& shares) {
    const JobSpec& spec = job.spec;
    Placement placement;
    placement.job_id = job.id;
    placement.attempt = job.attempt;
    int task = 0;
    for (const Share& share : shares) {
      FreeNode& s = nodes_[share.node];
      std::set<std::string> touched_models;
      for (int t = 0; t < share.tasks; ++t) {
        TaskPlacement tp;
        tp.task = task++;
        tp.node_id = s.node->id;
        tp.node = s.node->name;
        // Take the lowest-index matching free GPUs.
        std::vector<size_t> picked;
        for (size_t k = 0;
             k < s.free_gpus.size() && static_cast<int>(picked.size()) < spec.gpus_per_task; ++k) {
          if (Matches(models, s.free_models[k])) picked.push_back(k);
        }
        for (size_t k : picked) {
          const Gpu& gpu = s.node->gpus[s.free_gpus[k]];
          tp.gpu_ids.push_back(gpu.id);
          tp.gpu_indices.push_back(gpu.index);
          touched_models.insert(s.free_models[k]);
        }
        for (auto it = picked.rbegin(); it != picked.rend(); ++it) {
          s.free_gpus.erase(s.free_gpus.begin() + static_cast<std::ptrdiff_t>(*it));
          s.free_models.erase(s.free_models.begin() + static_cast<std::ptrdiff_t>(*it));
        }
        s.cpus_free -= spec.cpus_per_task;
        s.memory_free -= spec.memory_mb_per_task;
        placement.tasks.push_back(std::move(tp));
      }
      for (auto& [key, index] : indexes_) {
        bool relevant = false;
        for (const auto& m : touched_models) relevant = relevant || index.Relevant(m);
        if (relevant) index.Update(share.node, s);
      }
    }
    return placement;
  }

  PendingReason Unplaced(const Job& job, const std::vector<std::string>& models,
                         const std::string& shape, int64_t fitting_now) {
    const JobSpec& spec = job.spec;
    const int tasks = std::max(spec.tasks, 1);
    PendingReason reason;
    reason.job_id = job.id;
    std::string what = std::to_string(tasks) + (tasks == 1 ? " task" : " tasks");
    if (spec.gpus_per_task > 0) {
      what += " with " + std::to_string(spec.gpus_per_task) + " GPU" +
              (spec.gpus_per_task == 1 ? "" : "s");
      if (!models.empty()) {
        what += " (";
        for (size_t i = 0; i < spec.gpu_models.size(); ++i) {
          what += (i ? " or " : "") + spec.gpu_models[i];
        }
        what += ")";
      }
      what += " each";
    }
    if (!CouldEverFit(spec, shape, models)) {
      reason.reason = std::string(reason::kUnsatisfiable);
      reason.message = "no set of registered nodes can hold " + what;
    } else if (fitting_now > 0) {
      reason.reason = std::string(reason::kGangIncomplete);
      reason.message = "only " + std::to_string(fitting_now) + " of " + what + " fit now";
    } else {
      reason.reason = std::string(reason::kNoCapacity);
      reason.message = "no free capacity for " + what;
    }
    return reason;
  }

  // GangCouldEverFit over all_nodes, remembered per task shape: many pending
  // jobs share a handful of shapes.
  bool CouldEverFit(const JobSpec& spec, const std::string& shape,
                    const std::vector<std::string>& models) {
    auto it = ever_capacity_.find(shape);
    if (it == ever_capacity_.end()) {
      it = ever_capacity_.emplace(shape, EverCapacity(spec, models, snapshot_.all_nodes)).first;
    }
    return it->second >= std::max(spec.tasks, 1);
  }

 public:
  // Tasks of this shape all nodes could hold if nothing ran, capped at
  // JobSpec::kMaxTasks + 1 (enough to answer any gang size).
  static int64_t EverCapacity(const JobSpec& spec, const std::vector<std::string>& models,
                              const std::vector<Node>& nodes) {
    const int64_t cap = std::max<int64_t>(JobSpec::kMaxTasks, spec.tasks) + 1;
    int64_t total = 0;
    for (const Node& node : nodes) {
      int64_t gpus = 0;
      for (const Gpu& gpu : node.gpus) gpus += Matches(models, Upper(gpu.model)) ? 1 : 0;
      total += TasksThatFit(spec, gpus, node.cpus, node.memory_mb, cap);
      if (total >= cap) return cap;
    }
    return total;
  }

 private:
  const SchedulingSnapshot& snapshot_;
  std::vector<FreeNode> nodes_;
  std::map<std::string, ModelIndex> indexes_;
  std::unordered_map<std::string, int64_t> ever_capacity_;
  std::set<std::string> nothing_fits_;  // shapes of which no task fits any more
};

}  // namespace

ScheduleDecision Schedule(const SchedulingSnapshot& snapshot) { return Decision(snapshot).Run(); }

bool GangCouldEverFit(const JobSpec& spec, const std::vector<Node>& nodes) {
  return Decision::EverCapacity(spec, ModelSet(spec), nodes) >= std::max(spec.tasks, 1);
}

}  // namespace ferry::fleet
