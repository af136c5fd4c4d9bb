// The synthetic workload generator and its YAML config.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "fleet/sim/trace.h"

namespace ferry::fleet::sim {
namespace {

// splitmix64: a small generator whose output is the same on every platform (the standard
// library's distributions are not, so they are not used here).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so logarithms stay finite.
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  double Exponential(double rate) { return -std::log(Uniform()) / rate; }
  double Normal() {
    // Box-Muller; one value per call keeps the stream simple to reason about.
    double u1 = Uniform(), u2 = Uniform();
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

constexpr int kMaxJobs = 10'000'000;

int Pick(Rng& rng, const std::vector<Choice>& choices) {
  double u = rng.Uniform();
  double acc = 0;
  for (const auto& c : choices) {
    acc += c.probability;
    if (u < acc) return c.value;
  }
  return choices.back().value;
}

Status CheckChoices(const std::vector<Choice>& choices, const char* name, int min_value) {
  if (choices.empty()) return Status::Invalid(std::string(name) + ": must not be empty");
  double sum = 0;
  for (const auto& c : choices) {
    if (!(c.probability > 0) || !std::isfinite(c.probability)) {
      return Status::Invalid(std::string(name) + ": probabilities must be > 0");
    }
    if (c.value < min_value) {
      return Status::Invalid(std::string(name) +
                             ": values must be >= " + std::to_string(min_value));
    }
    sum += c.probability;
  }
  if (std::abs(sum - 1) > 1e-6) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%g", sum);
    return Status::Invalid(std::string(name) + ": probabilities sum to " + buf + ", not 1");
  }
  return Status::OK();
}

// ---- YAML

std::string Where(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return "";
  return std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1) + ": ";
}

Status Bad(const YAML::Node& node, const std::string& key, const std::string& message) {
  return Status::Invalid(Where(node) + key + ": " + message);
}

template <typename T>
Status Scalar(const YAML::Node& node, const std::string& key, T* out, const char* what) {
  if (!node.IsScalar()) return Bad(node, key, std::string("expected ") + what);
  T value;
  if (!YAML::convert<T>::decode(node, value)) {
    return Bad(node, key, std::string("expected ") + what + ", got '" + node.Scalar() + "'");
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) return Bad(node, key, "must be finite");
  }
  *out = value;
  return Status::OK();
}

Status CheckKeys(const YAML::Node& map, const std::string& key, const std::set<std::string>& keys) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    std::string k = it->first.Scalar();
    if (!keys.count(k)) {
      return Bad(it->first, key.empty() ? k : key + "." + k, "unknown key");
    }
  }
  return Status::OK();
}

Status ParseChoices(const YAML::Node& node, const std::string& key, const char* value_key,
                    std::vector<Choice>* out) {
  if (!node.IsSequence()) return Bad(node, key, "expected a list");
  out->clear();
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    std::string at = key + "[" + std::to_string(i) + "]";
    if (!item.IsMap()) return Bad(item, at, "expected a map");
    FERRY_RETURN_NOT_OK(CheckKeys(item, at, {value_key, "probability"}));
    if (!item[value_key]) return Bad(item, at + "." + value_key, "missing");
    if (!item["probability"]) return Bad(item, at + ".probability", "missing");
    Choice c;
    FERRY_RETURN_NOT_OK(Scalar(item[value_key], at + "." + value_key, &c.value, "an integer"));
    FERRY_RETURN_NOT_OK(
        Scalar(item["probability"], at + ".probability", &c.probability, "a number"));
    out->push_back(c);
  }
  return Status::OK();
}

Result<SyntheticOptions> ParseYaml(std::string_view text) {
  YAML::Node root = YAML::Load(std::string(text));
  SyntheticOptions o;
  if (!root || root.IsNull()) return o;
  if (!root.IsMap()) return Bad(root, "config", "expected a map of options");
  FERRY_RETURN_NOT_OK(
      CheckKeys(root, "",
                {"arrival_rate_per_s", "jobs", "tenants", "users_per_team", "gang_sizes",
                 "gpus_per_task", "duration", "priorities", "preemptible_fraction", "gpu_model",
                 "cpus_per_gpu", "memory_mb_per_gpu", "seed", "runtime_limit"}));
  if (auto n = root["arrival_rate_per_s"]) {
    FERRY_RETURN_NOT_OK(Scalar(n, "arrival_rate_per_s", &o.arrival_rate_per_s, "a number"));
  }
  if (auto n = root["jobs"]) FERRY_RETURN_NOT_OK(Scalar(n, "jobs", &o.jobs, "an integer"));
  if (auto n = root["users_per_team"]) {
    FERRY_RETURN_NOT_OK(Scalar(n, "users_per_team", &o.users_per_team, "an integer"));
  }
  if (auto n = root["preemptible_fraction"]) {
    FERRY_RETURN_NOT_OK(Scalar(n, "preemptible_fraction", &o.preemptible_fraction, "a number"));
  }
  if (auto n = root["gpu_model"]) {
    FERRY_RETURN_NOT_OK(Scalar(n, "gpu_model", &o.gpu_model, "a string"));
  }
  if (auto n = root["cpus_per_gpu"]) {
    FERRY_RETURN_NOT_OK(Scalar(n, "cpus_per_gpu", &o.cpus_per_gpu, "a number"));
  }
  if (auto n = root["memory_mb_per_gpu"]) {
    FERRY_RETURN_NOT_OK(Scalar(n, "memory_mb_per_gpu", &o.memory_mb_per_gpu, "an integer"));
  }
  if (auto n = root["seed"]) FERRY_RETURN_NOT_OK(Scalar(n, "seed", &o.seed, "an integer"));
  if (auto n = root["gang_sizes"]) {
    FERRY_RETURN_NOT_OK(ParseChoices(n, "gang_sizes", "size", &o.gang_sizes));
  }
  if (auto n = root["gpus_per_task"]) {
    FERRY_RETURN_NOT_OK(ParseChoices(n, "gpus_per_task", "gpus", &o.gpus_per_task));
  }
  if (auto n = root["priorities"]) {
    FERRY_RETURN_NOT_OK(ParseChoices(n, "priorities", "priority", &o.priorities));
  }
  if (auto n = root["duration"]) {
    if (!n.IsMap()) return Bad(n, "duration", "expected a map");
    FERRY_RETURN_NOT_OK(CheckKeys(n, "duration", {"median_s", "sigma", "min_s", "max_s"}));
    if (auto m = n["median_s"]) {
      FERRY_RETURN_NOT_OK(Scalar(m, "duration.median_s", &o.duration_median_s, "a number"));
    }
    if (auto m = n["sigma"]) {
      FERRY_RETURN_NOT_OK(Scalar(m, "duration.sigma", &o.duration_sigma, "a number"));
    }
    if (auto m = n["min_s"]) {
      FERRY_RETURN_NOT_OK(Scalar(m, "duration.min_s", &o.duration_min_s, "a number"));
    }
    if (auto m = n["max_s"]) {
      FERRY_RETURN_NOT_OK(Scalar(m, "duration.max_s", &o.duration_max_s, "a number"));
    }
  }
  if (auto n = root["runtime_limit"]) {
    if (!n.IsMap()) return Bad(n, "runtime_limit", "expected a map");
    FERRY_RETURN_NOT_OK(CheckKeys(n, "runtime_limit", {"factor", "round_up_to"}));
    if (auto m = n["factor"]) {
      FERRY_RETURN_NOT_OK(Scalar(m, "runtime_limit.factor", &o.runtime_limit_factor, "a number"));
    }
    if (auto m = n["round_up_to"]) {
      if (m.IsScalar() && m.Scalar() == "slurm") {
        o.runtime_limit_steps_s = SlurmRuntimeLimitSteps();
      } else if (m.IsSequence()) {
        o.runtime_limit_steps_s.clear();
        for (size_t k = 0; k < m.size(); ++k) {
          double step = 0;
          FERRY_RETURN_NOT_OK(Scalar(m[k], "runtime_limit.round_up_to[" + std::to_string(k) + "]",
                                     &step, "a number of seconds"));
          o.runtime_limit_steps_s.push_back(step);
        }
      } else {
        return Bad(m, "runtime_limit.round_up_to", "expected 'slurm' or a list of seconds");
      }
    }
  }
  if (auto n = root["tenants"]) {
    if (!n.IsSequence()) return Bad(n, "tenants", "expected a list");
    o.tenants.clear();
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node t = n[i];
      std::string at = "tenants[" + std::to_string(i) + "]";
      if (!t.IsMap()) return Bad(t, at, "expected a map");
      FERRY_RETURN_NOT_OK(CheckKeys(t, at, {"name", "weight", "teams"}));
      TenantSpec spec;
      if (!t["name"]) return Bad(t, at + ".name", "missing");
      FERRY_RETURN_NOT_OK(Scalar(t["name"], at + ".name", &spec.name, "a string"));
      if (auto w = t["weight"])
        FERRY_RETURN_NOT_OK(Scalar(w, at + ".weight", &spec.weight, "a number"));
      if (auto teams = t["teams"]) {
        if (!teams.IsSequence()) return Bad(teams, at + ".teams", "expected a list of names");
        for (size_t k = 0; k < teams.size(); ++k) {
          std::string team;
          FERRY_RETURN_NOT_OK(
              Scalar(teams[k], at + ".teams[" + std::to_string(k) + "]", &team, "a string"));
          spec.teams.push_back(team);
        }
      }
      o.tenants.push_back(std::move(spec));
    }
  }
  Status valid = ValidateSyntheticOptions(o);
  if (!valid.ok()) return Status::Invalid(Where(root) + valid.message());
  return o;
}

}  // namespace

Status ValidateSyntheticOptions(const SyntheticOptions& o) {
  // Bounds keep arrival times finite and the trace within memory.
  if (!(o.arrival_rate_per_s >= 1e-9 && o.arrival_rate_per_s <= 1e9)) {
    return Status::Invalid("arrival_rate_per_s: must be in [1e-9, 1e9]");
  }
  if (o.jobs < 0 || o.jobs > kMaxJobs) {
    return Status::Invalid("jobs: must be in [0, " + std::to_string(kMaxJobs) + "]");
  }
  if (o.tenants.empty()) return Status::Invalid("tenants: must not be empty");
  std::set<std::string> names;
  for (const auto& t : o.tenants) {
    if (t.name.empty()) return Status::Invalid("tenants: a tenant has no name");
    if (!names.insert(t.name).second) {
      return Status::Invalid("tenants: duplicate tenant '" + t.name + "'");
    }
    if (!(t.weight > 0) || !std::isfinite(t.weight)) {
      return Status::Invalid("tenants: weight of '" + t.name + "' must be > 0");
    }
    for (const auto& team : t.teams) {
      if (team.empty()) return Status::Invalid("tenants: '" + t.name + "' has an empty team name");
    }
  }
  if (o.users_per_team < 1) return Status::Invalid("users_per_team: must be >= 1");
  FERRY_RETURN_NOT_OK(CheckChoices(o.gang_sizes, "gang_sizes", 1));
  FERRY_RETURN_NOT_OK(CheckChoices(o.gpus_per_task, "gpus_per_task", 0));
  FERRY_RETURN_NOT_OK(CheckChoices(o.priorities, "priorities", INT32_MIN));
  if (!(o.duration_median_s > 0) || !std::isfinite(o.duration_median_s)) {
    return Status::Invalid("duration.median_s: must be > 0");
  }
  if (!(o.duration_sigma >= 0) || !std::isfinite(o.duration_sigma)) {
    return Status::Invalid("duration.sigma: must be >= 0");
  }
  if (!(o.duration_min_s >= 0) || !std::isfinite(o.duration_max_s) ||
      o.duration_max_s < o.duration_min_s) {
    return Status::Invalid("duration: need 0 <= min_s <= max_s");
  }
  if (!(o.preemptible_fraction >= 0 && o.preemptible_fraction <= 1)) {
    return Status::Invalid("preemptible_fraction: must be in [0, 1]");
  }
  if (!(o.cpus_per_gpu >= 0) || !std::isfinite(o.cpus_per_gpu)) {
    return Status::Invalid("cpus_per_gpu: must be >= 0");
  }
  if (o.memory_mb_per_gpu < 0) return Status::Invalid("memory_mb_per_gpu: must be >= 0");
  // A limit below the run time would kill every job: a factor is 0 (off) or >= 1.
  if (!(o.runtime_limit_factor == 0 ||
        (o.runtime_limit_factor >= 1 && o.runtime_limit_factor <= 1e6))) {
    return Status::Invalid("runtime_limit.factor: must be 0 (no limits) or in [1, 1e6]");
  }
  for (double step : o.runtime_limit_steps_s) {
    if (!(step > 0) || !std::isfinite(step)) {
      return Status::Invalid("runtime_limit.round_up_to: steps must be > 0 seconds");
    }
  }
  if (!o.runtime_limit_steps_s.empty() && o.runtime_limit_factor == 0) {
    return Status::Invalid("runtime_limit.round_up_to: needs a factor (>= 1)");
  }
  return Status::OK();
}

std::vector<double> SlurmRuntimeLimitSteps() {
  return {3600, 2 * 3600, 4 * 3600, 8 * 3600, 86400, 3 * 86400, 7 * 86400};
}

Result<std::vector<TraceJob>> GenerateSynthetic(const SyntheticOptions& o) {
  FERRY_RETURN_NOT_OK(ValidateSyntheticOptions(o).WithPrefix("synthetic trace: "));
  std::vector<TraceJob> jobs;
  double total_weight = 0;
  for (const auto& t : o.tenants) total_weight += t.weight;
  Rng rng(o.seed);
  double now = 0;
  jobs.reserve(static_cast<size_t>(o.jobs));
  for (int i = 0; i < o.jobs; ++i) {
    // Draws happen in a fixed order so a seed always gives the same trace.
    now += rng.Exponential(o.arrival_rate_per_s);
    double u = rng.Uniform() * total_weight;
    const TenantSpec* tenant = &o.tenants.back();
    double acc = 0;
    for (const auto& t : o.tenants) {
      acc += t.weight;
      if (u < acc) {
        tenant = &t;
        break;
      }
    }
    uint64_t team_draw = rng.Next();
    uint64_t user_draw = rng.Next();
    TraceJob job;
    char id[32];
    std::snprintf(id, sizeof(id), "syn-%06d", i + 1);
    job.id = id;
    job.tenant = tenant->name;
    if (!tenant->teams.empty()) job.team = tenant->teams[team_draw % tenant->teams.size()];
    job.user = tenant->name + "-" + (job.team.empty() ? "" : job.team + "-") + "u" +
               std::to_string(user_draw % static_cast<uint64_t>(o.users_per_team));
    job.submit_s = now;
    job.tasks = Pick(rng, o.gang_sizes);
    job.gpus_per_task = Pick(rng, o.gpus_per_task);
    double d = o.duration_median_s * std::exp(o.duration_sigma * rng.Normal());
    job.duration_s = std::clamp(d, o.duration_min_s, o.duration_max_s);
    job.priority = Pick(rng, o.priorities);
    job.preemptible = rng.Uniform() < o.preemptible_fraction;
    job.gpu_model = o.gpu_model;
    job.cpus_per_task = o.cpus_per_gpu * job.gpus_per_task;
    job.memory_mb_per_task = o.memory_mb_per_gpu * job.gpus_per_task;
    if (o.runtime_limit_factor > 0) {
      const double want = o.runtime_limit_factor * job.duration_s;
      double limit = std::numeric_limits<double>::infinity();
      for (double step : o.runtime_limit_steps_s) {
        if (step >= want) limit = std::min(limit, step);
      }
      job.max_runtime_s = std::isfinite(limit) ? limit : want;
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<SyntheticOptions> ParseSyntheticOptions(std::string_view yaml_text) {
  constexpr size_t kMaxConfigBytes = 1 << 20;
  if (yaml_text.size() > kMaxConfigBytes) {
    return Status::Invalid("the config is larger than 1 MiB");
  }
  try {
    return ParseYaml(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::Invalid(std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

}  // namespace ferry::fleet::sim
