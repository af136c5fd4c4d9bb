// The synthetic workload generator and its YAML config.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/yaml_tree.h"
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

// The first choice whose cumulative probability exceeds u in [0, 1) (the last
// one when rounding leaves the sum short of u).
template <typename T>
const T& PickAt(double u, const std::vector<T>& choices) {
  double acc = 0;
  for (const T& c : choices) {
    acc += c.probability;
    if (u < acc) return c;
  }
  return choices.back();
}

int Pick(Rng& rng, const std::vector<Choice>& choices) {
  return PickAt(rng.Uniform(), choices).value;
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

// ---- YAML (the base layer's located tree: its limits, file:line:column errors)

using yaml::Node;
using yaml::Ref;

// Reads the config's values; every error is "<file>:<line>:<column>: <key path>: <what>".
class ConfigReader {
 public:
  explicit ConfigReader(const yaml::Reporter& reporter) : reporter_(reporter) {}

  Status Bad(const Ref& at, const std::string& key, const std::string& message) const {
    return reporter_.Error(at.location, key + ": " + message);
  }

  // Unknown and repeated keys of a mapping are errors at the key.
  Status CheckKeys(const Ref& map, const std::string& key,
                   const std::set<std::string>& keys) const {
    std::set<std::string> seen;
    for (size_t i = 0; i + 1 < map.node->items.size(); i += 2) {
      const Ref& key_ref = map.node->items[i];
      const std::string& k = key_ref.node->value;
      const std::string at = key.empty() ? k : key + "." + k;
      if (!keys.count(k)) return Bad(key_ref, at, "unknown key");
      if (!seen.insert(k).second) return Bad(key_ref, at, "duplicate key");
    }
    return Status::OK();
  }

  // The value of `key` in a mapping, or nullopt when the key is absent. An
  // empty value is located at its key (the parser places it at the next token).
  static std::optional<Ref> Find(const Ref& map, std::string_view key) {
    for (size_t i = 0; i + 1 < map.node->items.size(); i += 2) {
      if (map.node->items[i].node->value != key) continue;
      Ref value = map.node->items[i + 1];
      if (value.node->kind == Node::Kind::kNull) value.location = map.node->items[i].location;
      return value;
    }
    return std::nullopt;
  }

  // A scalar as T: strings take any scalar; numbers need a plain scalar (or a
  // core-schema tag) that is a whole decimal number, finite for floating point.
  template <typename T>
  Status Scalar(const Ref& ref, const std::string& key, T* out, const char* what) const {
    const Node& node = *ref.node;
    if (node.kind != Node::Kind::kScalar) return Bad(ref, key, std::string("expected ") + what);
    if constexpr (std::is_same_v<T, std::string>) {
      *out = node.value;
      return Status::OK();
    } else {
      const std::string got = std::string("expected ") + what + ", got '" + node.value + "'";
      const bool typed = node.tag == "?" || node.tag == "tag:yaml.org,2002:int" ||
                         node.tag == "tag:yaml.org,2002:float";
      std::string_view text = node.value;
      if (!text.empty() && text.front() == '+') text.remove_prefix(1);
      if constexpr (std::is_floating_point_v<T>) {
        // YAML's spellings of infinity and not-a-number read as numbers, but not finite ones.
        std::string_view magnitude = text;
        if (!magnitude.empty() && magnitude.front() == '-') magnitude.remove_prefix(1);
        if (typed && (magnitude == ".inf" || magnitude == ".Inf" || magnitude == ".INF" ||
                      text == ".nan" || text == ".NaN" || text == ".NAN")) {
          return Bad(ref, key, "must be finite");
        }
      }
      T value{};
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (!typed || text.empty() || error != std::errc() || end != text.data() + text.size()) {
        return Bad(ref, key, got);
      }
      if constexpr (std::is_floating_point_v<T>) {
        if (!std::isfinite(value)) return Bad(ref, key, "must be finite");
      }
      *out = value;
      return Status::OK();
    }
  }

  Status ParseChoices(const Ref& ref, const std::string& key, const char* value_key,
                      std::vector<Choice>* out) const {
    if (ref.node->kind != Node::Kind::kSequence) return Bad(ref, key, "expected a list");
    out->clear();
    for (size_t i = 0; i < ref.node->items.size(); ++i) {
      const Ref& item = ref.node->items[i];
      const std::string at = key + "[" + std::to_string(i) + "]";
      if (item.node->kind != Node::Kind::kMapping) return Bad(item, at, "expected a map");
      FERRY_RETURN_NOT_OK(CheckKeys(item, at, {value_key, "probability"}));
      const std::optional<Ref> value = Find(item, value_key);
      const std::optional<Ref> probability = Find(item, "probability");
      if (!value) return Bad(item, at + "." + value_key, "missing");
      if (!probability) return Bad(item, at + ".probability", "missing");
      Choice c;
      FERRY_RETURN_NOT_OK(Scalar(*value, at + "." + value_key, &c.value, "an integer"));
      FERRY_RETURN_NOT_OK(Scalar(*probability, at + ".probability", &c.probability, "a number"));
      out->push_back(c);
    }
    return Status::OK();
  }

  const yaml::Reporter& reporter() const { return reporter_; }

 private:
  const yaml::Reporter& reporter_;
};

Result<SyntheticOptions> ParseYaml(std::string_view text, const yaml::Reporter& reporter) {
  FERRY_ASSIGN_OR_RAISE(const yaml::Document document, yaml::Parse(text, reporter));
  const ConfigReader r(reporter);
  const Ref root = document.root();
  SyntheticOptions o;
  if (root.node->kind == Node::Kind::kNull) return o;
  if (root.node->kind != Node::Kind::kMapping) {
    return r.Bad(root, "config", "expected a map of options");
  }
  FERRY_RETURN_NOT_OK(
      r.CheckKeys(root, "",
                  {"arrival_rate_per_s", "jobs", "tenants", "users_per_team", "gang_sizes",
                   "gpus_per_task", "duration", "priorities", "preemptible_fraction", "gpu_model",
                   "cpus_per_gpu", "memory_mb_per_gpu", "seed", "runtime_limit", "datasets"}));
  auto find = [](const Ref& map, std::string_view key) { return ConfigReader::Find(map, key); };
  if (auto n = find(root, "arrival_rate_per_s")) {
    FERRY_RETURN_NOT_OK(r.Scalar(*n, "arrival_rate_per_s", &o.arrival_rate_per_s, "a number"));
  }
  if (auto n = find(root, "jobs")) FERRY_RETURN_NOT_OK(r.Scalar(*n, "jobs", &o.jobs, "an integer"));
  if (auto n = find(root, "users_per_team")) {
    FERRY_RETURN_NOT_OK(r.Scalar(*n, "users_per_team", &o.users_per_team, "an integer"));
  }
  if (auto n = find(root, "preemptible_fraction")) {
    FERRY_RETURN_NOT_OK(r.Scalar(*n, "preemptible_fraction", &o.preemptible_fraction, "a number"));
  }
  if (auto n = find(root, "gpu_model")) {
    FERRY_RETURN_NOT_OK(r.Scalar(*n, "gpu_model", &o.gpu_model, "a string"));
  }
  if (auto n = find(root, "cpus_per_gpu")) {
    FERRY_RETURN_NOT_OK(r.Scalar(*n, "cpus_per_gpu", &o.cpus_per_gpu, "a number"));
  }
  if (auto n = find(root, "memory_mb_per_gpu")) {
    FERRY_RETURN_NOT_OK(r.Scalar(*n, "memory_mb_per_gpu", &o.memory_mb_per_gpu, "an integer"));
  }
  if (auto n = find(root, "seed")) FERRY_RETURN_NOT_OK(r.Scalar(*n, "seed", &o.seed, "an integer"));
  if (auto n = find(root, "gang_sizes")) {
    FERRY_RETURN_NOT_OK(r.ParseChoices(*n, "gang_sizes", "size", &o.gang_sizes));
  }
  if (auto n = find(root, "gpus_per_task")) {
    FERRY_RETURN_NOT_OK(r.ParseChoices(*n, "gpus_per_task", "gpus", &o.gpus_per_task));
  }
  if (auto n = find(root, "priorities")) {
    FERRY_RETURN_NOT_OK(r.ParseChoices(*n, "priorities", "priority", &o.priorities));
  }
  if (auto n = find(root, "duration")) {
    if (n->node->kind != Node::Kind::kMapping) return r.Bad(*n, "duration", "expected a map");
    FERRY_RETURN_NOT_OK(r.CheckKeys(*n, "duration", {"median_s", "sigma", "min_s", "max_s"}));
    if (auto m = find(*n, "median_s")) {
      FERRY_RETURN_NOT_OK(r.Scalar(*m, "duration.median_s", &o.duration_median_s, "a number"));
    }
    if (auto m = find(*n, "sigma")) {
      FERRY_RETURN_NOT_OK(r.Scalar(*m, "duration.sigma", &o.duration_sigma, "a number"));
    }
    if (auto m = find(*n, "min_s")) {
      FERRY_RETURN_NOT_OK(r.Scalar(*m, "duration.min_s", &o.duration_min_s, "a number"));
    }
    if (auto m = find(*n, "max_s")) {
      FERRY_RETURN_NOT_OK(r.Scalar(*m, "duration.max_s", &o.duration_max_s, "a number"));
    }
  }
  if (auto n = find(root, "datasets")) {
    if (n->node->kind != Node::Kind::kSequence) return r.Bad(*n, "datasets", "expected a list");
    for (size_t i = 0; i < n->node->items.size(); ++i) {
      const Ref& item = n->node->items[i];
      const std::string at = "datasets[" + std::to_string(i) + "]";
      if (item.node->kind != Node::Kind::kMapping) return r.Bad(item, at, "expected a map");
      FERRY_RETURN_NOT_OK(r.CheckKeys(item, at, {"name", "probability"}));
      const std::optional<Ref> name = find(item, "name");
      const std::optional<Ref> probability = find(item, "probability");
      if (!name) return r.Bad(item, at + ".name", "missing");
      if (!probability) return r.Bad(item, at + ".probability", "missing");
      DatasetChoice choice;
      FERRY_RETURN_NOT_OK(r.Scalar(*name, at + ".name", &choice.name, "a string"));
      FERRY_RETURN_NOT_OK(
          r.Scalar(*probability, at + ".probability", &choice.probability, "a number"));
      o.datasets.push_back(std::move(choice));
    }
  }
  if (auto n = find(root, "runtime_limit")) {
    if (n->node->kind != Node::Kind::kMapping) {
      return r.Bad(*n, "runtime_limit", "expected a map");
    }
    FERRY_RETURN_NOT_OK(r.CheckKeys(*n, "runtime_limit", {"factor", "round_up_to"}));
    if (auto m = find(*n, "factor")) {
      FERRY_RETURN_NOT_OK(
          r.Scalar(*m, "runtime_limit.factor", &o.runtime_limit_factor, "a number"));
    }
    if (auto m = find(*n, "round_up_to")) {
      if (m->node->kind == Node::Kind::kScalar && m->node->value == "slurm") {
        o.runtime_limit_steps_s = SlurmRuntimeLimitSteps();
      } else if (m->node->kind == Node::Kind::kSequence) {
        o.runtime_limit_steps_s.clear();
        for (size_t k = 0; k < m->node->items.size(); ++k) {
          double step = 0;
          FERRY_RETURN_NOT_OK(r.Scalar(m->node->items[k],
                                       "runtime_limit.round_up_to[" + std::to_string(k) + "]",
                                       &step, "a number of seconds"));
          o.runtime_limit_steps_s.push_back(step);
        }
      } else {
        return r.Bad(*m, "runtime_limit.round_up_to", "expected 'slurm' or a list of seconds");
      }
    }
  }
  if (auto n = find(root, "tenants")) {
    if (n->node->kind != Node::Kind::kSequence) return r.Bad(*n, "tenants", "expected a list");
    o.tenants.clear();
    for (size_t i = 0; i < n->node->items.size(); ++i) {
      const Ref& t = n->node->items[i];
      const std::string at = "tenants[" + std::to_string(i) + "]";
      if (t.node->kind != Node::Kind::kMapping) return r.Bad(t, at, "expected a map");
      FERRY_RETURN_NOT_OK(r.CheckKeys(t, at, {"name", "weight", "teams"}));
      TenantSpec spec;
      const std::optional<Ref> name = find(t, "name");
      if (!name) return r.Bad(t, at + ".name", "missing");
      FERRY_RETURN_NOT_OK(r.Scalar(*name, at + ".name", &spec.name, "a string"));
      if (auto w = find(t, "weight")) {
        FERRY_RETURN_NOT_OK(r.Scalar(*w, at + ".weight", &spec.weight, "a number"));
      }
      if (auto teams = find(t, "teams")) {
        if (teams->node->kind != Node::Kind::kSequence) {
          return r.Bad(*teams, at + ".teams", "expected a list of names");
        }
        for (size_t k = 0; k < teams->node->items.size(); ++k) {
          std::string team;
          FERRY_RETURN_NOT_OK(r.Scalar(
              teams->node->items[k], at + ".teams[" + std::to_string(k) + "]", &team, "a string"));
          spec.teams.push_back(team);
        }
      }
      o.tenants.push_back(std::move(spec));
    }
  }
  // Validation names a key path, not a place: the document's start stands for the file.
  Status valid = ValidateSyntheticOptions(o);
  if (!valid.ok()) return reporter.Error(root.location, valid.message());
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
  if (!o.datasets.empty()) {
    double sum = 0;
    for (const DatasetChoice& d : o.datasets) {
      TraceJob probe;  // the trace format's rules for data set names
      probe.id = "probe";
      probe.tenant = "probe";
      probe.datasets = {d.name};
      Status name_ok = ValidateJob(probe);
      if (!name_ok.ok()) return Status::Invalid("datasets: " + name_ok.message());
      if (!(d.probability > 0) || !std::isfinite(d.probability)) {
        return Status::Invalid("datasets: probabilities must be > 0");
      }
      sum += d.probability;
    }
    if (std::abs(sum - 1) > 1e-6) return Status::Invalid("datasets: probabilities must sum to 1");
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
  Rng dataset_rng(o.seed ^ 0xD1B54A32D192ED03ULL);  // its own stream (SyntheticOptions::datasets)
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
    if (!o.datasets.empty()) job.datasets = {PickAt(dataset_rng.Uniform(), o.datasets).name};
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<SyntheticOptions> ParseSyntheticOptions(std::string_view yaml_text,
                                               const std::string& file_name) {
  const yaml::Reporter reporter(file_name);
  constexpr size_t kMaxConfigBytes = 1 << 20;
  static_assert(kMaxConfigBytes <= yaml::kMaxDocumentBytes);
  if (yaml_text.size() > kMaxConfigBytes) {
    return reporter.FileError("the config is larger than 1 MiB");
  }
  return ParseYaml(yaml_text, reporter);
}

}  // namespace ferry::fleet::sim
