// Config::Validate, the names of the ordering and scoring policies and the
// Slurm account mapping.
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "ferry/fleet/sched.h"

namespace ferry::fleet::sched {

std::string_view ToString(Ordering ordering) {
  switch (ordering) {
    case Ordering::kFifo:
      return "fifo";
    case Ordering::kFairShare:
      return "fair_share";
    case Ordering::kDrf:
      return "drf";
  }
  return "fifo";
}

std::optional<Ordering> ParseOrdering(std::string_view text) {
  if (text == "fifo") return Ordering::kFifo;
  if (text == "fair_share") return Ordering::kFairShare;
  if (text == "drf") return Ordering::kDrf;
  return std::nullopt;
}

std::string_view ToString(Scoring scoring) {
  switch (scoring) {
    case Scoring::kBinPack:
      return "binpack";
    case Scoring::kSpread:
      return "spread";
    case Scoring::kCost:
      return "cost";
    case Scoring::kLatency:
      return "latency";
    case Scoring::kLocality:
      return "locality";
  }
  return "binpack";
}

std::optional<Scoring> ParseScoring(std::string_view text) {
  if (text == "binpack") return Scoring::kBinPack;
  if (text == "spread") return Scoring::kSpread;
  if (text == "cost") return Scoring::kCost;
  if (text == "latency") return Scoring::kLatency;
  if (text == "locality") return Scoring::kLocality;
  return std::nullopt;
}

std::pair<std::string, std::string> SlurmPoolConfig::AccountFor(const std::string& tenant,
                                                                const std::string& team,
                                                                const std::string& user) const {
  std::pair<std::string, std::string> out{account, qos};
  const std::string paths[] = {tenant, tenant + "/" + team, tenant + "/" + team + "/" + user};
  // The longest matching path wins: walk from the tenant down.
  for (const std::string& path : paths) {
    for (const SlurmAccountConfig& entry : accounts) {
      if (entry.path != path) continue;
      if (!entry.account.empty()) out.first = entry.account;
      if (!entry.qos.empty()) out.second = entry.qos;
    }
  }
  return out;
}

namespace {

// Collects the first problem found; later checks are skipped.
class Checker {
 public:
  bool ok() const { return message_.empty(); }
  Status status() const { return ok() ? Status::OK() : Status::Invalid(message_); }

  void Fail(const std::string& field, const std::string& why) {
    if (ok()) message_ = field + ": " + why;
  }
  void AtLeast(const std::string& field, double value, double min) {
    if (!std::isfinite(value)) {
      Fail(field, "must be a finite number");
    } else if (value < min) {
      Fail(field, "must be >= " + Number(min));
    }
  }
  void Positive(const std::string& field, double value) {
    if (!std::isfinite(value) || value <= 0) Fail(field, "must be > 0");
  }
  void NotEmpty(const std::string& field, const std::string& value) {
    if (value.empty()) Fail(field, "must not be empty");
  }

 private:
  static std::string Number(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
    return std::to_string(v);
  }
  std::string message_;
};

std::string At(const char* list, size_t i) {
  return std::string(list) + "[" + std::to_string(i) + "]";
}

// "tenant", "tenant/team" or "tenant/team/user": 1 to 3 segments, the tenant
// named (a team or user segment may be empty, as TenantPath & co. write it).
bool ValidPath(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  int slashes = 0;
  for (char c : path) slashes += c == '/' ? 1 : 0;
  return slashes <= 2;
}

}  // namespace

Status Config::Validate() const {
  Checker check;
  std::set<std::string> provider_names;
  std::map<std::string, std::string> provider_types;
  for (size_t i = 0; i < providers.size(); ++i) {
    const ProviderConfig& p = providers[i];
    const std::string f = At("providers", i);
    check.NotEmpty(f + ".name", p.name);
    if (!provider_names.insert(p.name).second)
      check.Fail(f + ".name", "duplicate '" + p.name + "'");
    check.NotEmpty(f + ".type", p.type);
    if (!p.type.empty() && p.type != "local" && p.type != "slurm") {
      check.Fail(f + ".type", "unknown provider type '" + p.type + "' (expected local or slurm)");
    }
    provider_types[p.name] = p.type;
    check.AtLeast(f + ".max_attempts", p.max_attempts, 1);
    check.AtLeast(f + ".backoff_base_s", p.backoff_base_s, 0);
    check.AtLeast(f + ".backoff_max_s", p.backoff_max_s, 0);
    if (check.ok() && p.backoff_max_s < p.backoff_base_s) {
      check.Fail(f + ".backoff_max_s", "must be >= backoff_base_s");
    }
    check.AtLeast(f + ".breaker_failures", p.breaker_failures, 1);
    check.AtLeast(f + ".breaker_open_s", p.breaker_open_s, 0);
    check.AtLeast(f + ".spot_interruptions_per_hour", p.spot_interruptions_per_hour, 0);
  }

  std::set<std::string> dataset_names;
  for (size_t i = 0; i < datasets.size(); ++i) {
    const std::string f = At("datasets", i);
    check.NotEmpty(f + ".name", datasets[i].name);
    if (!dataset_names.insert(datasets[i].name).second) {
      check.Fail(f + ".name", "duplicate '" + datasets[i].name + "'");
    }
    check.AtLeast(f + ".size_gb", datasets[i].size_gb, 0);
  }

  std::set<std::string> pool_names;
  for (size_t i = 0; i < pools.size(); ++i) {
    const PoolConfig& p = pools[i];
    const std::string f = At("pools", i);
    check.NotEmpty(f + ".name", p.name);
    if (!pool_names.insert(p.name).second) check.Fail(f + ".name", "duplicate '" + p.name + "'");
    check.AtLeast(f + ".price_per_gpu_hour", p.price_per_gpu_hour, 0);
    check.AtLeast(f + ".provisioning_delay_s", p.provisioning_delay_s, 0);
    check.AtLeast(f + ".max_nodes", p.max_nodes, 0);
    check.AtLeast(f + ".nodes", p.nodes, 0);
    check.AtLeast(f + ".nodes_per_domain", p.nodes_per_domain, 0);
    check.AtLeast(f + ".idle_timeout_s", p.idle_timeout_s, 0);
    check.AtLeast(f + ".node.gpus", p.node.gpus, 0);
    check.AtLeast(f + ".node.gpu_memory_mb", static_cast<double>(p.node.gpu_memory_mb), 0);
    check.AtLeast(f + ".node.cpus", p.node.cpus, 0);
    check.AtLeast(f + ".node.memory_mb", static_cast<double>(p.node.memory_mb), 0);
    if (p.node.gpus > 0) check.NotEmpty(f + ".node.gpu_model", p.node.gpu_model);
    if (!p.provider.empty() && !provider_names.count(p.provider)) {
      check.Fail(f + ".provider", "no provider named '" + p.provider + "'");
    }
    check.AtLeast(f + ".queue_delay_s", p.queue_delay_s, 0);
    const auto type = provider_types.find(p.provider);
    const bool slurm_provider = type != provider_types.end() && type->second == "slurm";
    if (p.slurm) {
      if (p.cloud) check.Fail(f + ".cloud", "a Slurm pool is not a cloud pool");
      if (p.provider.empty()) {
        check.Fail(f + ".provider", "a Slurm pool needs a provider of type slurm");
      } else if (type != provider_types.end() && !slurm_provider) {
        check.Fail(f + ".provider", "provider '" + p.provider + "' is not of type slurm");
      }
      check.AtLeast(f + ".slurm.time_limit_minutes", p.slurm->time_limit_minutes, 0);
      std::set<std::string> paths;
      for (size_t a = 0; a < p.slurm->accounts.size(); ++a) {
        const std::string af = f + ".slurm.accounts[" + std::to_string(a) + "].path";
        const std::string& account_path = p.slurm->accounts[a].path;
        if (!ValidPath(account_path)) {
          check.Fail(af, "must be tenant, tenant/team or tenant/team/user");
        } else if (!paths.insert(account_path).second) {
          check.Fail(af, "duplicate '" + account_path + "'");
        }
      }
    } else if (slurm_provider) {
      check.Fail(f + ".provider", "provider '" + p.provider +
                                      "' is of type slurm: the pool needs a `slurm` section");
    }
    if (p.cloud && p.max_nodes > 0 && p.node.gpus == 0 && p.node.cpus == 0) {
      check.Fail(f + ".node", "a cloud pool's node shape needs GPUs or CPUs");
    }
    for (size_t d = 0; d < p.datasets.size(); ++d) {
      if (!dataset_names.count(p.datasets[d])) {
        check.Fail(f + ".datasets[" + std::to_string(d) + "]",
                   "no data set named '" + p.datasets[d] + "' in datasets");
      }
    }
  }

  std::set<std::string> set_names;
  for (size_t i = 0; i < pool_sets.size(); ++i) {
    const PoolSet& s = pool_sets[i];
    const std::string f = At("pool_sets", i);
    check.NotEmpty(f + ".name", s.name);
    if (!set_names.insert(s.name).second) check.Fail(f + ".name", "duplicate '" + s.name + "'");
    std::set<std::string> members;
    for (size_t p = 0; p < s.pools.size(); ++p) {
      const std::string pf = f + ".pools[" + std::to_string(p) + "]";
      if (!pool_names.count(s.pools[p])) check.Fail(pf, "no pool named '" + s.pools[p] + "'");
      if (!members.insert(s.pools[p]).second) check.Fail(pf, "listed twice");
    }
  }

  std::set<std::pair<std::string, std::string>> quota_keys;
  for (size_t i = 0; i < quotas.size(); ++i) {
    const QuotaConfig& q = quotas[i];
    const std::string f = At("quotas", i);
    if (!ValidPath(q.path)) {
      check.Fail(f + ".path", "must be 'tenant', 'tenant/team' or 'tenant/team/user'");
    }
    if (!quota_keys.insert({q.path, CanonicalGpuModel(q.gpu_model)}).second) {
      check.Fail(f, "a second quota for '" + q.path + "'" +
                        (q.gpu_model.empty() ? "" : " (" + q.gpu_model + ")"));
    }
    check.AtLeast(f + ".nominal_gpus", q.nominal_gpus, 0);
    if (q.borrowing_limit) check.AtLeast(f + ".borrowing_limit", *q.borrowing_limit, 0);
    if (q.lending_limit) {
      check.AtLeast(f + ".lending_limit", *q.lending_limit, 0);
      if (check.ok() && *q.lending_limit > q.nominal_gpus) {
        check.Fail(f + ".lending_limit", "must be <= nominal_gpus");
      }
    }
    check.NotEmpty(f + ".cohort", q.cohort);
  }

  std::set<std::string> share_paths;
  for (size_t i = 0; i < shares.size(); ++i) {
    const std::string f = At("shares", i);
    if (!ValidPath(shares[i].path)) {
      check.Fail(f + ".path", "must be 'tenant', 'tenant/team' or 'tenant/team/user'");
    }
    if (!share_paths.insert(shares[i].path).second) {
      check.Fail(f + ".path", "duplicate '" + shares[i].path + "'");
    }
    check.Positive(f + ".shares", shares[i].shares);
  }

  check.AtLeast("transfer_cost_per_gb", transfer_cost_per_gb, 0);
  check.Positive("usage_half_life_s", usage_half_life_s);
  check.AtLeast("preemption.grace_s", preemption.grace_s, 0);
  check.AtLeast("preemption.fair_share_max", preemption.fair_share_max, 0);
  check.Positive("preemption.fair_share_window_s", preemption.fair_share_window_s);
  check.AtLeast("backfill.reservations", backfill.reservations, 0);
  if (check.ok() && backfill.reservations > 64) {
    check.Fail("backfill.reservations", "must be <= 64");
  }
  check.AtLeast("burst.min_pending_s", burst.min_pending_s, 0);
  return check.status();
}

}  // namespace ferry::fleet::sched
