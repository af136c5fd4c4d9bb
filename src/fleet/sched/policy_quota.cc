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
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fleet/sched/policy.h"
#include "fleet/sched/policy_util.h"

namespace ferry::fleet::sched::internal {
namespace {

bool SameModel(std::string_view key, std::string_view model) {
  if (key.size() != model.size()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    if (key[i] != std::tolower(static_cast<unsigned char>(model[i]))) return false;
  }
  return true;
}

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
    std::string model;      // as configured, for messages
    std::string model_key;  // lower-cased; empty: every model
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
  // the quotas each of its running jobs is charged on, for ReclaimCandidates.
  const Snapshot* snapshot = nullptr;
  size_t running_count = 0;
  std::vector<std::vector<int>> running_quotas;

  // Quotas that a job of this owner on `model` is charged on, tenant first.
  std::vector<int> Matched(std::string_view tenant, std::string_view team, std::string_view user,
                           std::string_view model) const {
    std::vector<int> out;
    if (by_path.empty()) return out;
    std::string path(tenant);
    auto level = levels.find(path);
    if (level == levels.end()) return out;
    const int mask = level->second;
    auto collect = [&]() {
      auto it = by_path.find(path);
      if (it == by_path.end()) return;
      for (int id : it->second) {
        const Quota& q = quotas[static_cast<size_t>(id)];
        if (q.model_key.empty() || SameModel(q.model_key, model)) out.push_back(id);
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

  // Groups in which a quota of this owner on `model` is above nominal now.
  std::vector<int> BorrowingGroups(std::string_view tenant, std::string_view team,
                                   std::string_view user, std::string_view model) const {
    std::vector<int> out;
    for (int id : Matched(tenant, team, user, model)) {
      const Quota& q = quotas[static_cast<size_t>(id)];
      if (q.used > q.nominal) out.push_back(q.group);
    }
    return out;
  }
};

QuotaLedger::QuotaLedger(const Config& config, const Snapshot& snapshot)
    : impl_(std::make_shared<Impl>()) {
  std::unordered_map<std::string, int> group_ids;  // cohort + '\n' + model key
  for (const QuotaConfig& config_quota : config.quotas) {
    Impl::Quota q;
    q.path = config_quota.path;
    q.model = config_quota.gpu_model;
    q.model_key = LowerModel(config_quota.gpu_model);
    q.cohort = config_quota.cohort;
    q.nominal = std::max(0, config_quota.nominal_gpus);
    if (config_quota.borrowing_limit.has_value()) {
      q.borrowing_limit = std::max(0, *config_quota.borrowing_limit);
    }
    if (config_quota.lending_limit.has_value()) {
      q.lending_limit = std::max(0, *config_quota.lending_limit);
    }
    auto [it, inserted] =
        group_ids.emplace(q.cohort + '\n' + q.model_key, static_cast<int>(impl_->groups.size()));
    if (inserted) impl_->groups.push_back(Impl::Group{});
    q.group = it->second;
    Impl::Group& group = impl_->groups[static_cast<size_t>(q.group)];
    group.lendable += q.Lendable(0);
    const int id = static_cast<int>(impl_->quotas.size());
    impl_->by_path[q.path].push_back(id);
    const size_t slash = q.path.find('/');
    const int depth = static_cast<int>(std::count(q.path.begin(), q.path.end(), '/'));
    if (depth <= 2) impl_->levels[q.path.substr(0, slash)] |= 1 << depth;
    impl_->quotas.push_back(std::move(q));
  }

  std::set<std::string> models;
  for (const NodeInfo& node : snapshot.nodes) {
    for (const GpuSlot& gpu : node.gpus) models.insert(LowerModel(gpu.model));
  }
  if (!models.empty()) {
    for (const PoolConfig& pool : config.pools) {
      if (pool.node.gpus > 0) models.insert(LowerModel(pool.node.gpu_model));
    }
  }
  impl_->fleet_models.assign(models.begin(), models.end());

  impl_->snapshot = &snapshot;
  impl_->running_count = snapshot.running.size();
  impl_->running_quotas.resize(snapshot.running.size());
  if (impl_->quotas.empty()) return;
  const GpuModelIndex index(snapshot);
  for (size_t r = 0; r < snapshot.running.size(); ++r) {
    const RunningJob& job = snapshot.running[r];
    for (const auto& [model, gpus] : index.ModelsOf(job)) {
      std::vector<int> ids = impl_->Matched(job.tenant, job.team, job.user, model);
      impl_->Apply(ids, gpus);
      auto& charged = impl_->running_quotas[r];
      charged.insert(charged.end(), ids.begin(), ids.end());
    }
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
  const std::vector<int> ids = impl_->Matched(tenant, team, user, model);
  if (ids.empty()) return false;
  for (int id : ids) {
    const Impl::Quota& q = impl_->quotas[static_cast<size_t>(id)];
    if (q.used + std::max(0, gpus) > q.nominal) return false;
  }
  return true;
}

bool QuotaLedger::Borrowing(std::string_view tenant, std::string_view team, std::string_view user,
                            std::string_view model) const {
  return !impl_->BorrowingGroups(tenant, team, user, model).empty();
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
  if (!cached) index.emplace(snapshot);
  std::vector<int> looked_up;
  for (size_t i = 0; i < snapshot.running.size(); ++i) {
    const RunningJob& running = snapshot.running[i];
    if (running.terminating) continue;
    const std::vector<int>* quotas = nullptr;
    if (cached) {
      quotas = &impl.running_quotas[i];
    } else {
      looked_up.clear();
      for (const auto& [running_model, gpus] : index->ModelsOf(running)) {
        for (int id : impl.Matched(running.tenant, running.team, running.user, running_model)) {
          looked_up.push_back(id);
        }
      }
      quotas = &looked_up;
    }
    for (int id : *quotas) {
      const QuotaLedger::Impl::Quota& q = impl.quotas[static_cast<size_t>(id)];
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
