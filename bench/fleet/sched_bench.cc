// Scheduling core throughput: one Scheduler::Cycle on a large
// fleet, per queue ordering, on an empty fleet (every pending job competes
// for all GPUs) and on a 90%-full one (running jobs, preemption candidates,
// reservations). Reports decision latency and placements per second.
//
//   ferry_sched_bench [--nodes N] [--jobs N] [--repeat N] [--fleet empty|busy|both] [--reasons]
//                     [--ordering fifo|fair_share|drf] [--seed N] [--quick]
//
// A plain program (no Google Benchmark): each cell is the median of
// --repeat cycles, each on a fresh Scheduler so no state carries over. The
// "digest" column hashes the whole Decision (placements with their GPUs,
// preemptions, pending reasons with messages, provisioning, scale-down): two
// builds that print the same digest for the same input decided the same.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/fleet/sched.h"

namespace {

using namespace ferry::fleet;
using namespace ferry::fleet::sched;

struct Options {
  int nodes = 10'000;
  int jobs = 100'000;
  int repeat = 5;
  bool empty = true;
  bool busy = true;
  bool reasons = false;              // print how many jobs were left pending for each reason
  std::optional<Ordering> ordering;  // only this one (default: all three)
  uint32_t seed = 42;
};

// FNV-1a over everything a Decision says, in order.
class Digest {
 public:
  void Add(std::string_view text) {
    Add(static_cast<uint64_t>(text.size()));
    for (char c : text) Byte(static_cast<unsigned char>(c));
  }
  void Add(uint64_t value) {
    for (int i = 0; i < 8; ++i) Byte(static_cast<unsigned char>(value >> (8 * i)));
  }
  void Add(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    Add(bits);
  }
  uint64_t value() const { return hash_; }

 private:
  void Byte(unsigned char b) {
    hash_ ^= b;
    hash_ *= 1099511628211ull;
  }
  uint64_t hash_ = 1469598103934665603ull;
};

uint64_t DigestOf(const Decision& d) {
  Digest h;
  h.Add(static_cast<uint64_t>(d.placements.size()));
  for (const Placement& p : d.placements) {
    h.Add(static_cast<uint64_t>(p.job_id));
    h.Add(static_cast<uint64_t>(p.attempt));
    h.Add(static_cast<uint64_t>(p.tasks.size()));
    for (const TaskPlacement& t : p.tasks) {
      h.Add(static_cast<uint64_t>(t.task));
      h.Add(static_cast<uint64_t>(t.node_id));
      h.Add(t.node);
      h.Add(static_cast<uint64_t>(t.gpu_ids.size()));
      for (int64_t id : t.gpu_ids) h.Add(static_cast<uint64_t>(id));
      h.Add(static_cast<uint64_t>(t.gpu_indices.size()));
      for (int index : t.gpu_indices) h.Add(static_cast<uint64_t>(index));
    }
  }
  h.Add(static_cast<uint64_t>(d.preemptions.size()));
  for (const Preemption& p : d.preemptions) {
    h.Add(static_cast<uint64_t>(p.job_id));
    h.Add(static_cast<uint64_t>(p.attempt));
    h.Add(p.reason);
    h.Add(static_cast<uint64_t>(p.for_job));
    h.Add(p.grace_s);
  }
  h.Add(static_cast<uint64_t>(d.provision.size()));
  for (const ProvisionRequest& p : d.provision) {
    h.Add(p.pool);
    h.Add(static_cast<uint64_t>(p.nodes));
    for (int64_t id : p.for_jobs) h.Add(static_cast<uint64_t>(id));
  }
  h.Add(static_cast<uint64_t>(d.scale_down.size()));
  for (const ScaleDown& s : d.scale_down) {
    h.Add(s.pool);
    h.Add(s.node);
    h.Add(s.idle_s);
  }
  h.Add(static_cast<uint64_t>(d.pending.size()));
  for (const PendingReason& r : d.pending) {
    h.Add(static_cast<uint64_t>(r.job_id));
    h.Add(r.reason);
    h.Add(r.message);
  }
  const CycleStats& st = d.stats;
  for (int v : {st.pending, st.considered, st.placed, st.backfilled, st.preempted}) {
    h.Add(static_cast<uint64_t>(v));
  }
  return h.value();
}

// CPU time of this thread: the machine may be shared, wall time then overstates.
double ThreadCpuMs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

constexpr int kTenants = 10, kTeams = 4, kUsers = 5;

Config MakeConfig(Ordering ordering, int nodes) {
  Config c;
  c.ordering = ordering;
  PoolConfig pool;
  pool.name = "onprem";
  pool.price_per_gpu_hour = 2;
  c.pools.push_back(pool);
  c.pool_sets.push_back({"default", {"onprem"}, Scoring::kBinPack});
  // Every tenant guaranteed an equal slice, borrowing up to half as much again.
  const int gpus = nodes * 8;
  for (int t = 0; t < kTenants; ++t) {
    QuotaConfig q;
    q.path = "tenant" + std::to_string(t);
    q.nominal_gpus = gpus / kTenants;
    q.borrowing_limit = gpus / kTenants / 2;
    q.cohort = "main";
    c.quotas.push_back(q);
    c.shares.push_back({q.path, 1.0 + t % 3});
  }
  return c;
}

Snapshot MakeSnapshot(const Options& o, bool busy, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](std::initializer_list<int> values, std::initializer_list<int> weights) {
    std::discrete_distribution<int> d(weights.begin(), weights.end());
    return *(values.begin() + d(rng));
  };
  Snapshot s;
  s.now_s = 1'000'000;
  s.nodes.reserve(static_cast<size_t>(o.nodes));
  for (int n = 0; n < o.nodes; ++n) {
    NodeInfo node;
    node.id = n + 1;
    node.name = "node" + std::to_string(n);
    node.pool = "onprem";
    node.domain = "island" + std::to_string(n / 32);
    node.cpus = 128;
    node.memory_mb = 2048 * 1024;
    for (int g = 0; g < 8; ++g) node.gpus.push_back({node.id * 8 + g, g, "H200", 141 * 1024, true});
    s.nodes.push_back(std::move(node));
  }
  auto owner = [&](auto& job) {
    int t = std::uniform_int_distribution<int>(0, kTenants - 1)(rng);
    job.tenant = "tenant" + std::to_string(t);
    job.team = "team" + std::to_string(std::uniform_int_distribution<int>(0, kTeams - 1)(rng));
    job.user = "user" + std::to_string(std::uniform_int_distribution<int>(0, kUsers - 1)(rng));
  };
  int64_t next_id = 1;
  if (busy) {
    // Single-task jobs of 1-8 GPUs until 90% of the GPUs are held, spread
    // over the nodes so the free GPUs are fragmented.
    const int64_t target = static_cast<int64_t>(o.nodes) * 8 * 9 / 10;
    int64_t held = 0;
    std::vector<int> free(static_cast<size_t>(o.nodes), 8);
    std::uniform_int_distribution<int> any_node(0, o.nodes - 1);
    while (held < target) {
      const int gpus = pick({1, 2, 4, 8}, {4, 3, 2, 1});
      const int n = any_node(rng);
      if (free[static_cast<size_t>(n)] < gpus) continue;
      NodeInfo& node = s.nodes[static_cast<size_t>(n)];
      RunningJob job;
      job.job_id = next_id++;
      owner(job);
      job.priority = pick({0, 1, 2}, {5, 3, 2});
      job.preemptible = rng() % 2 == 0;
      job.started_s = s.now_s - std::uniform_int_distribution<int>(0, 36'000)(rng);
      job.max_runtime_s = rng() % 4 == 0 ? 0 : 3600.0 * pick({1, 4, 12, 48}, {4, 3, 2, 1});
      job.cpus_per_task = gpus * 8;
      job.memory_mb_per_task = gpus * 64 * 1024;
      TaskPlacement t;
      t.node_id = node.id;
      t.node = node.name;
      for (GpuSlot& g : node.gpus) {
        if (static_cast<int>(t.gpu_indices.size()) == gpus) break;
        if (!g.free) continue;
        g.free = false;
        t.gpu_ids.push_back(g.id);
        t.gpu_indices.push_back(g.index);
      }
      node.cpus_used += job.cpus_per_task;
      node.memory_mb_used += job.memory_mb_per_task;
      free[static_cast<size_t>(n)] -= gpus;
      held += gpus;
      job.tasks.push_back(std::move(t));
      s.running.push_back(std::move(job));
    }
  }
  s.pending.reserve(static_cast<size_t>(o.jobs));
  for (int j = 0; j < o.jobs; ++j) {
    PendingJob job;
    job.job_id = next_id++;
    owner(job);
    job.tasks = pick({1, 2, 4, 8}, {5, 2, 2, 1});
    job.gpus_per_task = pick({1, 2, 4, 8}, {3, 3, 2, 2});
    job.cpus_per_task = job.gpus_per_task * 8;
    job.memory_mb_per_task = job.gpus_per_task * 64 * 1024;
    job.priority = pick({0, 1, 2}, {6, 3, 1});
    job.preemptible = rng() % 2 == 0;
    job.submitted_s = s.now_s - std::uniform_int_distribution<int>(0, 86'400)(rng);
    job.max_runtime_s = rng() % 3 == 0 ? 0 : 3600.0 * pick({1, 2, 8, 24}, {4, 3, 2, 1});
    if (job.tasks > 1 && rng() % 4 == 0) job.topology = "same_domain";
    s.pending.push_back(std::move(job));
  }
  return s;
}

struct Cell {
  double median_ms = 0;
  double min_ms = 0;
  double cpu_ms = 0;
  Decision last;
};

Cell Measure(const Options& o, Ordering ordering, const Snapshot& snapshot) {
  std::vector<double> times, cpu;
  Cell cell;
  for (int r = 0; r < o.repeat; ++r) {
    auto made = Scheduler::Make(MakeConfig(ordering, o.nodes));
    if (!made.ok()) {
      std::fprintf(stderr, "config: %s\n", made.status().ToString().c_str());
      std::exit(1);
    }
    auto scheduler = std::move(made).MoveValueUnsafe();
    auto start = std::chrono::steady_clock::now();
    const double cpu_start = ThreadCpuMs();
    cell.last = scheduler->Cycle(snapshot);
    cpu.push_back(ThreadCpuMs() - cpu_start);
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu.begin(), cpu.end());
  cell.cpu_ms = cpu[cpu.size() / 2];
  cell.median_ms = times[times.size() / 2];
  cell.min_ms = times.front();
  return cell;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (arg == "--nodes") {
      o.nodes = next();
    } else if (arg == "--jobs") {
      o.jobs = next();
    } else if (arg == "--repeat") {
      o.repeat = std::max(1, next());
    } else if (arg == "--fleet") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "--fleet needs empty, busy or both\n");
        return 2;
      }
      std::string which = argv[++i];
      o.empty = which != "busy";
      o.busy = which != "empty";
    } else if (arg == "--ordering") {
      if (i + 1 >= argc || !ParseOrdering(argv[i + 1]).has_value()) {
        std::fprintf(stderr, "--ordering needs fifo, fair_share or drf\n");
        return 2;
      }
      o.ordering = ParseOrdering(argv[++i]);
    } else if (arg == "--seed") {
      o.seed = static_cast<uint32_t>(next());
    } else if (arg == "--reasons") {
      o.reasons = true;
    } else if (arg == "--quick") {
      o.nodes = 1000;
      o.jobs = 10'000;
      o.repeat = 3;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--nodes N] [--jobs N] [--repeat N] [--fleet empty|busy|both] "
                   "[--reasons] [--ordering fifo|fair_share|drf] [--seed N] [--quick]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf(
      "scheduling core: %d nodes x 8 GPUs, %d pending jobs (gangs of 1-8 tasks x 1-8 GPUs,\n"
      "10 tenants with quotas and shares); median of %d cycles\n\n",
      o.nodes, o.jobs, o.repeat);
  std::printf("%-10s %-11s %8s %10s %8s %9s %9s %9s %8s %12s  %-16s\n", "fleet", "ordering",
              "running", "considered", "placed", "preempted", "cycle ms", "min ms", "cpu ms",
              "placements/s", "digest");
  for (bool busy : {false, true}) {
    if ((busy && !o.busy) || (!busy && !o.empty)) continue;
    Snapshot snapshot = MakeSnapshot(o, busy, o.seed);
    for (Ordering ordering : {Ordering::kFifo, Ordering::kFairShare, Ordering::kDrf}) {
      if (o.ordering.has_value() && *o.ordering != ordering) continue;
      Cell c = Measure(o, ordering, snapshot);
      const CycleStats& st = c.last.stats;
      std::printf("%-10s %-11s %8zu %10d %8d %9d %9.1f %9.1f %8.1f %12.0f  %016llx\n",
                  busy ? "90% full" : "empty", std::string(ToString(ordering)).c_str(),
                  snapshot.running.size(), st.considered, st.placed, st.preempted, c.median_ms,
                  c.min_ms, c.cpu_ms, c.median_ms > 0 ? st.placed / (c.median_ms / 1000.0) : 0.0,
                  static_cast<unsigned long long>(DigestOf(c.last)));
      if (o.reasons) {
        std::map<std::string, int> counts;
        for (const PendingReason& r : c.last.pending) counts[r.reason]++;
        for (const auto& [reason, n] : counts) std::printf("    %-26s %d\n", reason.c_str(), n);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
