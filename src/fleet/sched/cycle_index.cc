// Indexing one cycle: pools, GPU models and interconnect domains as small
// integers, nodes in buckets by free GPUs, the running jobs' holds, the
// pending jobs in compact form with their tiers, and the texts of reasons.
#include "fleet/sched/cycle_run.h"

namespace ferry::fleet::sched::internal {
namespace {

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

}  // namespace

// ---------------------------------------------------------------- indexing

int CycleRun::InternModel(const std::string& name) {
  std::string upper = CanonicalGpuModel(name);
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
    IndexedPool pool;
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
        IndexedPool pool;
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
    IndexedNode& node = nodes_[i];
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
        last_model_id = ModelId(CanonicalGpuModel(slot.model));
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
  // IndexedNode ids (never 0) -> first node with it: open addressing, linear probing.
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
      IndexedNode& node = nodes_[static_cast<size_t>(n)];
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
    IndexedNode& node = nodes_[i];
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

int CycleRun::LargestFreeBlock(const JobInfo& job) {
  int best = 0;
  for (size_t pool = 0; pool < pools_.size(); ++pool) {
    if (!InSet(job, static_cast<int>(pool))) continue;
    for (const int model : Models(job)) {
      if (model < 0) continue;
      const Buckets& buckets = BucketsOf(static_cast<int>(pool), model);
      for (int n = buckets.Max(); n > best; --n) {
        if (!buckets.by_free[static_cast<size_t>(n)].empty()) {
          best = n;
          break;
        }
      }
    }
  }
  return best;
}

std::string CycleRun::NoCapacityMessage(int index) {
  const JobInfo& job = jobs_[static_cast<size_t>(index)];
  // What the cycle saw when it refused the job: the most free GPUs of a
  // model the job accepts on one schedulable node of its pool set.
  const int block = job.shape.gpus > 0 ? LargestFreeBlock(job) : -1;
  auto text = [&] {
    std::string message = "no free capacity for " + ShapeText(index);
    if (block >= 0) {
      message += "; the largest free block is " + std::to_string(block) + " GPU" +
                 (block == 1 ? "" : "s") + " on one node";
    }
    return message;
  };
  if (job.key < 0) return text();
  // Jobs of one shape (and free block) share the text: built once, copied after.
  const MemoKey key{job.key, job.shape.tasks, static_cast<uint64_t>(block + 2)};
  auto it = shape_texts_.find(key);
  if (it != shape_texts_.end()) return it->second;
  std::string message = text();
  shape_texts_.emplace(key, message);
  return message;
}

const std::string& CycleRun::ShapeText(int index) {
  const PendingJob& p = snap_.pending[static_cast<size_t>(index)];
  const JobInfo& job = jobs_[static_cast<size_t>(index)];
  if (job.key < 0) {
    static thread_local std::string scratch;
    scratch = Describe(p);
    return scratch;
  }
  auto [it, added] = shape_texts_.emplace(MemoKey{job.key, job.shape.tasks, 0}, std::string());
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
        int m = ModelId(CanonicalGpuModel(name));
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
                    "' (nor cloud capacity) could ever hold " + ShapeText(index));
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
  const MemoKey key{job.key, model, 0};
  auto it = ever_.find(key);
  if (it != ever_.end()) return it->second;
  const Shape& s = job.shape;
  const int64_t cap = kMaxTasks + 1;
  int64_t total = 0;
  for (const IndexedNode& node : nodes_) {
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

int64_t CycleRun::CloudCapacity(const JobInfo& job, int model, int64_t cap, double before_s) const {
  if (!config_.burst.enabled) return 0;
  const Shape& s = job.shape;
  int64_t total = 0;
  for (int p : sets_[static_cast<size_t>(job.set)].pools) {
    if (total >= cap) break;
    const IndexedPool& pool = pools_[static_cast<size_t>(p)];
    if (pool.config == nullptr || !pool.cloud || pool.config->max_nodes <= pool.nodes) continue;
    if (!(pool.config->provisioning_delay_s < before_s)) continue;
    const NodeShape& shape = pool.config->node;
    if (s.gpus > 0 && (shape.gpus <= 0 || ModelId(CanonicalGpuModel(shape.gpu_model)) != model))
      continue;
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
    const IndexedPool& pool = pools_[static_cast<size_t>(p)];
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
  const Tiers& made =
      tiers_.emplace(std::move(key), GroupTiers(std::move(keyed), pools_.size())).first->second;
  if (plain) tiers_fast_[fast] = &made;
  return made;
}

}  // namespace ferry::fleet::sched::internal
