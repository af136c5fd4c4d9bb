// GPU quotas with Kueue-style cohorts, and fair-share reclaim candidates.
//
// A job is charged on every quota of its path (tenant, tenant/team,
// tenant/team/user) whose gpu_model is empty or equals the job's model. Use
// above nominal is borrowing: at most borrowing_limit (unset: no limit), and
// only as far as the cohort can lend. Quotas lend to each other within one
// (cohort, gpu_model) group; what the others of q's group can lend is
//   Σ_{o ≠ q} min(lending_limit_o (unset: all), max(0, nominal_o − used_o))
//   − Σ_{o ≠ q} max(0, used_o − nominal_o)        (what they already borrow),
// evaluated after the charge.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fleet/sched/policy.h"
#include "fleet/sched/policy_util.h"

namespace ferry::fleet::sched::internal {
namespace {

constexpr std::string_view kCohortCannotLend = ", but cohort ";

void AppendInt(std::string* text, int64_t value) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), value);
  text->append(digits, result.ptr);
}

}  // namespace

struct QuotaLedger::Impl {
  struct Quota {
    std::string path;
    std::string model;  // as configured, for messages
    int model_id = -1;  // ModelKeys id of the canonical model; -1: every model
    std::string cohort;
    int64_t nominal = 0;
    std::optional<int64_t> borrowing_limit;
    std::optional<int64_t> lending_limit;
    int64_t used = 0;
    int group = 0;

    int64_t Lendable(int64_t use) const {
      const int64_t spare = std::max<int64_t>(0, nominal - use);
      return lending_limit.has_value() ? std::min(spare, std::max<int64_t>(0, *lending_limit))
                                       : spare;
    }
    int64_t Borrowed(int64_t use) const { return std::max<int64_t>(0, use - nominal); }
    std::string Label() const {
      return path + " (" + (model.empty() ? std::string("any model") : model) + ")";
    }
  };
  struct Group {
    int64_t lendable = 0;  // Σ Lendable(used) of its quotas
    int64_t borrowed = 0;  // Σ Borrowed(used)
  };

  std::vector<Quota> quotas;
  std::vector<Group> groups;
  std::unordered_map<std::string, std::vector<int>> by_path;
  // Per tenant, which levels under it have quotas (1: tenant, 2: team,
  // 4: user), so most lookups skip building the longer paths.
  std::unordered_map<std::string, int> levels;
  std::vector<std::string> fleet_models;  // for any-model jobs in NeverFits
  // The snapshot the ledger was built from (compared, never read later) and
  // the quotas each of its running jobs is charged on, for ReclaimCandidates:
  // those of running job r are running_ids[running_offsets[r] .. [r + 1]).
  const Snapshot* snapshot = nullptr;
  size_t running_count = 0;
  std::vector<size_t> running_offsets;
  std::vector<int> running_ids;

  // Matched() is asked the same few (owner, model) pairs over and over in a
  // cycle: each answer is worked out once. Owners are interned (their
  // strings copied, so callers' views may go away); the answers live in a
  // deque, so references handed out stay valid while more are added.
  struct OwnerEntry {
    std::string tenant, team, user;
    std::vector<std::pair<int, int>> lists;  // (model id, index into match_lists)
  };
  mutable ModelKeys models;
  mutable std::deque<OwnerEntry> owners;
  mutable std::unordered_map<OwnerView, int, OwnerViewHash> owner_ids;
  mutable int last_owner = -1;
  mutable std::deque<std::vector<int>> match_lists;

  int OwnerId(std::string_view tenant, std::string_view team, std::string_view user) const {
    if (last_owner >= 0) {
      const OwnerEntry& last = owners[static_cast<size_t>(last_owner)];
      if (last.tenant == tenant && last.team == team && last.user == user) return last_owner;
    }
    auto it = owner_ids.find(OwnerView{tenant, team, user});
    if (it != owner_ids.end()) {
      last_owner = it->second;
      return last_owner;
    }
    const int id = static_cast<int>(owners.size());
    OwnerEntry& entry = owners.emplace_back();
    entry.tenant.assign(tenant);
    entry.team.assign(team);
    entry.user.assign(user);
    owner_ids.emplace(OwnerView{entry.tenant, entry.team, entry.user}, id);
    last_owner = id;
    return id;
  }

  // Quotas that a job of this owner on `model` is charged on, tenant first.
  const std::vector<int>& Matched(std::string_view tenant, std::string_view team,
                                  std::string_view user, std::string_view model) const {
    return MatchedId(tenant, team, user, models.Id(model));
  }
  const std::vector<int>& MatchedId(std::string_view tenant, std::string_view team,
                                    std::string_view user, int model) const {
    static const std::vector<int> kNone;
    if (by_path.empty()) return kNone;
    OwnerEntry& owner = owners[static_cast<size_t>(OwnerId(tenant, team, user))];
    for (const auto& [id, list] : owner.lists) {
      if (id == model) return match_lists[static_cast<size_t>(list)];
    }
    owner.lists.emplace_back(model, static_cast<int>(match_lists.size()));
    return match_lists.emplace_back(Compute(tenant, team, user, model));
  }
  std::vector<int> Compute(std::string_view tenant, std::string_view team, std::string_view user,
                           int model) const {
    std::vector<int> out;
    std::string path(tenant);
    auto level = levels.find(path);
    if (level == levels.end()) return out;
    const int mask = level->second;
    auto collect = [&]() {
      auto it = by_path.find(path);
      if (it == by_path.end()) return;
      for (int id : it->second) {
        const Quota& q = quotas[static_cast<size_t>(id)];
        if (q.model_id < 0 || q.model_id == model) out.push_back(id);
      }
    };
    if (mask & 1) collect();
    if (mask & 6) {
      path.append("/").append(team);
      if (mask & 2) collect();
      if (mask & 4) {
        path.append("/").append(user);
        collect();
      }
    }
    return out;
  }

  void Apply(const std::vector<int>& ids, int64_t gpus) {
    for (int id : ids) {
      Quota& q = quotas[static_cast<size_t>(id)];
      Group& g = groups[static_cast<size_t>(q.group)];
      g.lendable -= q.Lendable(q.used);
      g.borrowed -= q.Borrowed(q.used);
      q.used = std::max<int64_t>(0, q.used + gpus);
      g.lendable += q.Lendable(q.used);
      g.borrowed += q.Borrowed(q.used);
    }
  }

  Verdict Check(const std::vector<int>& ids, int64_t gpus) const {
    Verdict verdict;
    for (int id : ids) {
      const Quota& q = quotas[static_cast<size_t>(id)];
      const int64_t after = q.used + gpus;
      const int64_t borrow = q.Borrowed(after);
      if (borrow == 0) continue;
      verdict.borrowing = true;
      // Messages are built only on refusal, in one buffer: a contended
      // cycle refuses many jobs.
      auto message = [&](std::string_view why, int64_t limit) {
        std::string text;
        text.reserve(q.path.size() + q.model.size() + q.cohort.size() + 96);
        text.append(q.path).append(" (").append(q.model.empty() ? "any model" : q.model);
        text.append("): ");
        AppendInt(&text, q.used);
        text.append(" of ");
        AppendInt(&text, q.nominal);
        text.append(" used; ");
        AppendInt(&text, gpus);
        text.append(" more would borrow ");
        AppendInt(&text, borrow);
        text.append(why);
        if (why == kCohortCannotLend) text.append(q.cohort).append(" can lend only ");
        AppendInt(&text, limit);
        return text;
      };
      if (q.borrowing_limit.has_value() && borrow > *q.borrowing_limit) {
        verdict.ok = false;
        verdict.message = message(", above its borrowing limit ", *q.borrowing_limit);
        return verdict;
      }
      // The group's totals after charging every matched quota, less q itself.
      int64_t lendable = groups[static_cast<size_t>(q.group)].lendable;
      int64_t borrowed = groups[static_cast<size_t>(q.group)].borrowed;
      for (int other : ids) {
        const Quota& o = quotas[static_cast<size_t>(other)];
        if (o.group != q.group) continue;
        lendable += o.Lendable(o.used + gpus) - o.Lendable(o.used);
        borrowed += o.Borrowed(o.used + gpus) - o.Borrowed(o.used);
      }
      const int64_t available = (lendable - q.Lendable(after)) - (borrowed - borrow);
      if (borrow > available) {
        verdict.ok = false;
        verdict.message = message(kCohortCannotLend, std::max<int64_t>(0, available));
        return verdict;
      }
    }
    return verdict;
  }

  // Whether a quota of this owner on `model` is above nominal now.
  bool AnyBorrowing(std::string_view tenant, std::string_view team, std::string_view user,
                    std::string_view model) const {
    for (int id : Matched(tenant, team, user, model)) {
      const Quota& q = quotas[static_cast<size_t>(id)];
      if (q.used > q.nominal) return true;
    }
    return false;
  }
};

QuotaLedger::QuotaLedger(const Config& config, const Snapshot& snapshot)
    : impl_(std::make_shared<Impl>()) {
  Impl& impl = *impl_;
  std::unordered_map<std::string, int> group_ids;  // cohort + '\n' + model key
  for (const QuotaConfig& config_quota : config.quotas) {
    Impl::Quota q;
    q.path = config_quota.path;
    q.model = config_quota.gpu_model;
    const std::string model_key = CanonicalGpuModel(config_quota.gpu_model);
    q.model_id = model_key.empty() ? -1 : impl.models.Id(model_key);
    q.cohort = config_quota.cohort;
    q.nominal = std::max(0, config_quota.nominal_gpus);
    if (config_quota.borrowing_limit.has_value()) {
      q.borrowing_limit = std::max(0, *config_quota.borrowing_limit);
    }
    if (config_quota.lending_limit.has_value()) {
      q.lending_limit = std::max(0, *config_quota.lending_limit);
    }
    auto [it, inserted] =
        group_ids.emplace(q.cohort + '\n' + model_key, static_cast<int>(impl.groups.size()));
    if (inserted) impl.groups.push_back(Impl::Group{});
    q.group = it->second;
    Impl::Group& group = impl.groups[static_cast<size_t>(q.group)];
    group.lendable += q.Lendable(0);
    const int id = static_cast<int>(impl.quotas.size());
    impl.by_path[q.path].push_back(id);
    const size_t slash = q.path.find('/');
    const int depth = static_cast<int>(std::count(q.path.begin(), q.path.end(), '/'));
    if (depth <= 2) impl.levels[q.path.substr(0, slash)] |= 1 << depth;
    impl.quotas.push_back(std::move(q));
  }

  // The fleet's models, canonical (CanonicalGpuModel), sorted and each once.
  const GpuModelIndex index(snapshot, &impl.models);
  if (index.any_gpu()) {
    std::vector<int> listed;
    for (size_t id = 0; id < impl.models.size(); ++id) {
      if (index.InFleet(static_cast<int>(id))) listed.push_back(static_cast<int>(id));
    }
    for (const PoolConfig& pool : config.pools) {
      if (pool.node.gpus > 0) listed.push_back(impl.models.Id(pool.node.gpu_model));
    }
    std::sort(listed.begin(), listed.end());
    listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
    for (int id : listed) impl.fleet_models.push_back(impl.models.Key(id));
    std::sort(impl.fleet_models.begin(), impl.fleet_models.end());
  }

  impl.snapshot = &snapshot;
  impl.running_count = snapshot.running.size();
  impl.running_offsets.assign(snapshot.running.size() + 1, 0);
  if (impl.quotas.empty()) return;
  std::vector<std::pair<int, int>> held;
  for (size_t r = 0; r < snapshot.running.size(); ++r) {
    const RunningJob& job = snapshot.running[r];
    index.ModelIdsOf(job, &held);
    for (const auto& [model, gpus] : held) {
      const std::vector<int>& ids = impl.MatchedId(job.tenant, job.team, job.user, model);
      impl.Apply(ids, gpus);
      impl.running_ids.insert(impl.running_ids.end(), ids.begin(), ids.end());
    }
    impl.running_offsets[r + 1] = impl.running_ids.size();
  }
}

QuotaLedger::Verdict QuotaLedger::CanAdmit(std::string_view tenant, std::string_view team,
                                           std::string_view user, std::string_view model,
                                           int gpus) const {
  if (gpus <= 0) return Verdict{};
  return impl_->Check(impl_->Matched(tenant, team, user, model), gpus);
}

bool QuotaLedger::WithinNominal(std::string_view tenant, std::string_view team,
                                std::string_view user, std::string_view model, int gpus) const {
  const std::vector<int>& ids = impl_->Matched(tenant, team, user, model);
  if (ids.empty()) return false;
  for (int id : ids) {
    const Impl::Quota& q = impl_->quotas[static_cast<size_t>(id)];
    if (q.used + std::max(0, gpus) > q.nominal) return false;
  }
  return true;
}

bool QuotaLedger::Borrowing(std::string_view tenant, std::string_view team, std::string_view user,
                            std::string_view model) const {
  return impl_->AnyBorrowing(tenant, team, user, model);
}

void QuotaLedger::Charge(std::string_view tenant, std::string_view team, std::string_view user,
                         std::string_view model, int gpus) {
  if (gpus <= 0) return;
  impl_->Apply(impl_->Matched(tenant, team, user, model), gpus);
}

void QuotaLedger::Release(std::string_view tenant, std::string_view team, std::string_view user,
                          std::string_view model, int gpus) {
  if (gpus <= 0) return;
  impl_->Apply(impl_->Matched(tenant, team, user, model), -static_cast<int64_t>(gpus));
}

std::vector<QuotaStanding> QuotaLedger::Standings() const {
  std::vector<QuotaStanding> out;
  out.reserve(impl_->quotas.size());
  for (const Impl::Quota& q : impl_->quotas) {
    const Impl::Group& g = impl_->groups[static_cast<size_t>(q.group)];
    QuotaStanding standing;
    standing.path = q.path;
    standing.gpu_model = q.model;
    standing.cohort = q.cohort;
    standing.nominal = q.nominal;
    standing.borrowing_limit = q.borrowing_limit;
    standing.lending_limit = q.lending_limit;
    standing.used = q.used;
    standing.borrowed = q.Borrowed(q.used);
    const int64_t lendable = q.Lendable(q.used);
    if (lendable > 0 && g.lendable > 0 && g.borrowed > 0) {
      standing.lent =
          std::min<double>(static_cast<double>(lendable), static_cast<double>(g.borrowed) *
                                                              static_cast<double>(lendable) /
                                                              static_cast<double>(g.lendable));
    }
    out.push_back(std::move(standing));
  }
  return out;
}

std::optional<std::string> QuotaLedger::NeverFits(const PendingJob& job) const {
  if (impl_->quotas.empty() || job.tasks <= 0 || job.gpus_per_task <= 0) return std::nullopt;
  const int64_t total = static_cast<int64_t>(job.tasks) * job.gpus_per_task;
  // An any-model job may run on any model the fleet has; with no fleet known,
  // only quotas that apply to every model can rule it out.
  std::vector<std::string> models = job.gpu_models;
  if (models.empty()) models = impl_->fleet_models;
  if (models.empty()) models.emplace_back();
  std::optional<std::string> first;
  for (const std::string& model : models) {
    std::optional<std::string> reason;
    for (int id : impl_->Matched(job.tenant, job.team, job.user, model)) {
      const Impl::Quota& q = impl_->quotas[static_cast<size_t>(id)];
      if (!q.borrowing_limit.has_value()) continue;
      const int64_t most = q.nominal + *q.borrowing_limit;
      if (total > most) {
        reason = "needs " + std::to_string(total) + " GPUs but quota " + q.Label() +
                 " allows at most " + std::to_string(most) + " (nominal " +
                 std::to_string(q.nominal) + " + borrowing limit " +
                 std::to_string(*q.borrowing_limit) + ")";
        break;
      }
    }
    if (!reason.has_value()) return std::nullopt;  // this model can work
    if (!first.has_value()) first = std::move(reason);
  }
  return first;
}

std::vector<int> ReclaimCandidates(const Snapshot& snapshot, const QuotaLedger& ledger,
                                   const PendingJob& job, std::string_view model) {
  std::vector<int> out;
  const int64_t total =
      static_cast<int64_t>(std::max(0, job.tasks)) * std::max(0, job.gpus_per_task);
  if (total > std::numeric_limits<int>::max()) return out;
  if (!ledger.WithinNominal(job.tenant, job.team, job.user, model, static_cast<int>(total))) {
    return out;
  }
  const QuotaLedger::Impl& impl = *ledger.impl_;
  std::vector<int> job_groups;
  for (int id : impl.Matched(job.tenant, job.team, job.user, model)) {
    job_groups.push_back(impl.quotas[static_cast<size_t>(id)].group);
  }
  if (job_groups.empty()) return out;
  // Quotas of each running job: from the ledger when built from this very
  // snapshot, else looked up now.
  const bool cached = impl.snapshot == &snapshot && impl.running_count == snapshot.running.size();
  std::optional<GpuModelIndex> index;
  if (!cached) index.emplace(snapshot, &impl.models);
  std::vector<int> looked_up;
  std::vector<std::pair<int, int>> held;
  for (size_t i = 0; i < snapshot.running.size(); ++i) {
    const RunningJob& running = snapshot.running[i];
    if (running.terminating) continue;
    const int* begin = nullptr;
    const int* end = nullptr;
    if (cached) {
      begin = impl.running_ids.data() + impl.running_offsets[i];
      end = impl.running_ids.data() + impl.running_offsets[i + 1];
    } else {
      looked_up.clear();
      index->ModelIdsOf(running, &held);
      for (const auto& [running_model, gpus] : held) {
        for (int id : impl.MatchedId(running.tenant, running.team, running.user, running_model)) {
          looked_up.push_back(id);
        }
      }
      begin = looked_up.data();
      end = begin + looked_up.size();
    }
    for (const int* id = begin; id != end; ++id) {
      const QuotaLedger::Impl::Quota& q = impl.quotas[static_cast<size_t>(*id)];
      if (q.used > q.nominal &&
          std::find(job_groups.begin(), job_groups.end(), q.group) != job_groups.end()) {
        out.push_back(static_cast<int>(i));
        break;
      }
    }
  }
  return out;
}

}  // namespace ferry::fleet::sched::internal
