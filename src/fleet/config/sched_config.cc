// The scheduler config file: YAML → sched::Config, strictly (unknown keys,
// duplicate keys and wrong types are errors naming the file, line, column and
// key path), then sched::Config::Validate, whose field path is mapped back to
// where the field was written.
#include "ferry/fleet/sched_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "base/yaml_tree.h"
#include "ferry/base/hash.h"

namespace ferry::fleet {
namespace {

using yaml::Node;
using yaml::Ref;

// The largest config file read; a fleet's config is kilobytes.
constexpr size_t kMaxConfigBytes = size_t{1} << 20;

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += (i + 1 == items.size()) ? " or " : ", ";
    out += items[i];
  }
  return out;
}

const char* KindName(const Node& node) {
  switch (node.kind) {
    case Node::Kind::kNull:
      return "null";
    case Node::Kind::kScalar:
      return node.is_plain_scalar() ? "a scalar" : "a string";
    case Node::Kind::kSequence:
      return "a list";
    case Node::Kind::kMapping:
      return "a mapping";
  }
  return "a value";
}

// Plain scalars and the core schema's explicit tags may hold numbers and
// booleans; a quoted "8" is a string.
bool MayBeTyped(const Node& node, std::string_view tag) {
  if (node.kind != Node::Kind::kScalar) return false;
  return node.tag == "?" || node.tag == std::string("tag:yaml.org,2002:") + std::string(tag);
}

class Parser {
 public:
  explicit Parser(std::string name) : reporter_(std::move(name)) {}

  Status Error(const Ref& at, const std::string& path, std::string_view what) const {
    return reporter_.Error(at.location, path + ": " + std::string(what));
  }

  // Where each key path (and list item) was written, for Validate's errors.
  void Remember(const std::string& path, const Ref& at) { locations_.emplace(path, at.location); }

  // Maps "path: message" from Validate to "<name>:<line>:<col>: path: message",
  // using the longest written prefix of the path.
  Status Locate(const Status& status) const {
    const std::string& message = status.message();
    const size_t colon = message.find(": ");
    if (colon != std::string::npos) {
      std::string path = message.substr(0, colon);
      while (!path.empty()) {
        auto it = locations_.find(path);
        if (it != locations_.end()) {
          return Status(status.code(), reporter_.name() + ":" + std::to_string(it->second.line) +
                                           ":" + std::to_string(it->second.column) + ": " +
                                           message);
        }
        const size_t cut = path.find_last_of(".[");
        if (cut == std::string::npos) break;
        path.resize(cut);
      }
    }
    return Status(status.code(), reporter_.name() + ": " + message);
  }

  // Calls `field(key, value, key_path)` for each key of a mapping (null reads
  // as an empty mapping). Keys must be among `allowed` (when not empty) and
  // appear once.
  Status Mapping(
      const Ref& ref, const std::string& path, const std::vector<std::string>& allowed,
      const std::function<Status(const std::string&, const Ref&, const std::string&)>& field) {
    const Node& node = *ref.node;
    if (node.kind == Node::Kind::kNull) return Status::OK();
    if (node.kind != Node::Kind::kMapping) {
      return Error(ref, path.empty() ? "(top level)" : path,
                   std::string("expected a mapping, got ") + KindName(node));
    }
    std::set<std::string> seen;
    for (size_t i = 0; i + 1 < node.items.size(); i += 2) {
      const Ref& key_ref = node.items[i];
      Ref value = node.items[i + 1];
      // yaml-cpp places an empty value at the next token; the key is clearer.
      if (value.node->kind == Node::Kind::kNull) value.location = key_ref.location;
      if (key_ref.node->kind != Node::Kind::kScalar) {
        return Error(key_ref, path.empty() ? "(top level)" : path,
                     std::string("keys must be strings, got ") + KindName(*key_ref.node));
      }
      const std::string& key = key_ref.node->value;
      const std::string key_path = path.empty() ? key : std::string(path).append(".").append(key);
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return Error(key_ref, key_path, "unknown key (expected " + Join(allowed) + ")");
      }
      if (!seen.insert(key).second) return Error(key_ref, key_path, "duplicate key");
      Remember(key_path, value);
      FERRY_RETURN_NOT_OK(field(key, value, key_path));
    }
    return Status::OK();
  }

  // Calls `item(value, item_path)` for each item of a list (null: none).
  Status Sequence(const Ref& ref, const std::string& path,
                  const std::function<Status(const Ref&, const std::string&)>& item) {
    const Node& node = *ref.node;
    if (node.kind == Node::Kind::kNull) return Status::OK();
    if (node.kind != Node::Kind::kSequence) {
      return Error(ref, path, std::string("expected a list, got ") + KindName(node));
    }
    for (size_t i = 0; i < node.items.size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      Remember(item_path, node.items[i]);
      FERRY_RETURN_NOT_OK(item(node.items[i], item_path));
    }
    return Status::OK();
  }

  Status String(const Ref& ref, const std::string& path, std::string* out) const {
    if (ref.node->kind != Node::Kind::kScalar) {
      return Error(ref, path, std::string("expected a string, got ") + KindName(*ref.node));
    }
    *out = ref.node->value;
    return Status::OK();
  }

  Status StringList(const Ref& ref, const std::string& path, std::vector<std::string>* out) {
    out->clear();
    return Sequence(ref, path, [&](const Ref& item, const std::string& item_path) {
      std::string value;
      FERRY_RETURN_NOT_OK(String(item, item_path, &value));
      out->push_back(std::move(value));
      return Status::OK();
    });
  }

  Status Bool(const Ref& ref, const std::string& path, bool* out) const {
    const std::string& text = ref.node->value;
    if (MayBeTyped(*ref.node, "bool")) {
      if (text == "true" || text == "True" || text == "TRUE") {
        *out = true;
        return Status::OK();
      }
      if (text == "false" || text == "False" || text == "FALSE") {
        *out = false;
        return Status::OK();
      }
    }
    return Error(ref, path, "expected true or false, got " + Describe(*ref.node));
  }

  Status Int64(const Ref& ref, const std::string& path, int64_t* out) const {
    if (MayBeTyped(*ref.node, "int")) {
      std::string_view text = ref.node->value;
      if (!text.empty() && text.front() == '+') text.remove_prefix(1);
      int64_t value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error == std::errc::result_out_of_range) return Error(ref, path, "integer out of range");
      if (error == std::errc() && end == text.data() + text.size() && !text.empty()) {
        *out = value;
        return Status::OK();
      }
    }
    return Error(ref, path, "expected an integer, got " + Describe(*ref.node));
  }

  Status Int(const Ref& ref, const std::string& path, int* out) const {
    int64_t value = 0;
    FERRY_RETURN_NOT_OK(Int64(ref, path, &value));
    if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
      return Error(ref, path, "integer out of range");
    }
    *out = static_cast<int>(value);
    return Status::OK();
  }

  Status OptionalInt(const Ref& ref, const std::string& path, std::optional<int>* out) const {
    if (ref.node->kind == Node::Kind::kNull) {
      out->reset();
      return Status::OK();
    }
    int value = 0;
    FERRY_RETURN_NOT_OK(Int(ref, path, &value));
    *out = value;
    return Status::OK();
  }

  Status Double(const Ref& ref, const std::string& path, double* out) const {
    if (MayBeTyped(*ref.node, "float") || MayBeTyped(*ref.node, "int")) {
      std::string_view text = ref.node->value;
      if (!text.empty() && text.front() == '+') text.remove_prefix(1);
      double value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error == std::errc() && end == text.data() + text.size() && !text.empty()) {
        if (!std::isfinite(value)) return Error(ref, path, "must be a finite number");
        *out = value;
        return Status::OK();
      }
      if (error == std::errc::result_out_of_range) return Error(ref, path, "number out of range");
    }
    return Error(ref, path, "expected a number, got " + Describe(*ref.node));
  }

  const std::string& name() const { return reporter_.name(); }

 private:
  static std::string Describe(const Node& node) {
    if (node.kind != Node::Kind::kScalar) return KindName(node);
    std::string text = node.value.size() > 40 ? node.value.substr(0, 40) + "..." : node.value;
    return (node.is_plain_scalar() ? "'" : "the string '") + text + "'";
  }

  yaml::Reporter reporter_;
  std::map<std::string, SourceLocation> locations_;
};

template <typename T>
Status ReadList(Parser& p, const Ref& ref, const std::string& path, std::vector<T>* out,
                Status (*read)(Parser&, const Ref&, const std::string&, T*)) {
  out->clear();
  return p.Sequence(ref, path, [&](const Ref& item, const std::string& item_path) {
    T value;
    FERRY_RETURN_NOT_OK(read(p, item, item_path, &value));
    out->push_back(std::move(value));
    return Status::OK();
  });
}

Status ReadShape(Parser& p, const Ref& ref, const std::string& path, sched::NodeShape* shape) {
  return p.Mapping(ref, path, {"gpu_model", "gpus", "gpu_memory_mb", "cpus", "memory_mb"},
                   [&](const std::string& key, const Ref& value, const std::string& at) {
                     if (key == "gpu_model") return p.String(value, at, &shape->gpu_model);
                     if (key == "gpus") return p.Int(value, at, &shape->gpus);
                     if (key == "gpu_memory_mb") return p.Int64(value, at, &shape->gpu_memory_mb);
                     if (key == "cpus") return p.Double(value, at, &shape->cpus);
                     return p.Int64(value, at, &shape->memory_mb);
                   });
}

Status ReadSlurmAccount(Parser& p, const Ref& ref, const std::string& path,
                        sched::SlurmAccountConfig* entry) {
  return p.Mapping(ref, path, {"path", "account", "qos"},
                   [&](const std::string& key, const Ref& value, const std::string& at) {
                     if (key == "path") return p.String(value, at, &entry->path);
                     if (key == "account") return p.String(value, at, &entry->account);
                     return p.String(value, at, &entry->qos);
                   });
}

Status ReadSlurmPool(Parser& p, const Ref& ref, const std::string& path,
                     sched::SlurmPoolConfig* slurm) {
  return p.Mapping(ref, path, {"partition", "account", "qos", "accounts", "time_limit_minutes"},
                   [&](const std::string& key, const Ref& value, const std::string& at) {
                     if (key == "partition") return p.String(value, at, &slurm->partition);
                     if (key == "account") return p.String(value, at, &slurm->account);
                     if (key == "qos") return p.String(value, at, &slurm->qos);
                     if (key == "accounts")
                       return ReadList(p, value, at, &slurm->accounts, &ReadSlurmAccount);
                     return p.Int(value, at, &slurm->time_limit_minutes);
                   });
}

Status ReadPool(Parser& p, const Ref& ref, const std::string& path, sched::PoolConfig* pool) {
  static const std::vector<std::string> kKeys = {"name",
                                                 "cloud",
                                                 "provider",
                                                 "price_per_gpu_hour",
                                                 "spot",
                                                 "provisioning_delay_s",
                                                 "max_nodes",
                                                 "nodes",
                                                 "nodes_per_domain",
                                                 "node",
                                                 "datasets",
                                                 "idle_timeout_s",
                                                 "slurm",
                                                 "queue_delay_s"};
  return p.Mapping(ref, path, kKeys,
                   [&](const std::string& key, const Ref& value, const std::string& at) {
                     if (key == "name") return p.String(value, at, &pool->name);
                     if (key == "cloud") return p.Bool(value, at, &pool->cloud);
                     if (key == "provider") return p.String(value, at, &pool->provider);
                     if (key == "price_per_gpu_hour") {
                       return p.Double(value, at, &pool->price_per_gpu_hour);
                     }
                     if (key == "spot") return p.Bool(value, at, &pool->spot);
                     if (key == "provisioning_delay_s") {
                       return p.Double(value, at, &pool->provisioning_delay_s);
                     }
                     if (key == "max_nodes") return p.Int(value, at, &pool->max_nodes);
                     if (key == "nodes") return p.Int(value, at, &pool->nodes);
                     if (key == "nodes_per_domain")
                       return p.Int(value, at, &pool->nodes_per_domain);
                     if (key == "node") return ReadShape(p, value, at, &pool->node);
                     if (key == "datasets") return p.StringList(value, at, &pool->datasets);
                     if (key == "slurm") {
                       pool->slurm.emplace();
                       return ReadSlurmPool(p, value, at, &*pool->slurm);
                     }
                     if (key == "queue_delay_s") return p.Double(value, at, &pool->queue_delay_s);
                     return p.Double(value, at, &pool->idle_timeout_s);
                   });
}

Status ReadScoring(Parser& p, const Ref& ref, const std::string& path, sched::Scoring* out) {
  std::string text;
  FERRY_RETURN_NOT_OK(p.String(ref, path, &text));
  if (auto scoring = sched::ParseScoring(text)) {
    *out = *scoring;
    return Status::OK();
  }
  return p.Error(ref, path,
                 "unknown scoring policy '" + text +
                     "' (expected binpack, spread, cost, latency or locality)");
}

Status ReadPoolSet(Parser& p, const Ref& ref, const std::string& path, sched::PoolSet* set) {
  return p.Mapping(ref, path, {"name", "pools", "scoring"},
                   [&](const std::string& key, const Ref& value, const std::string& at) {
                     if (key == "name") return p.String(value, at, &set->name);
                     if (key == "pools") return p.StringList(value, at, &set->pools);
                     return ReadScoring(p, value, at, &set->scoring);
                   });
}

Status ReadQuota(Parser& p, const Ref& ref, const std::string& path, sched::QuotaConfig* quota) {
  return p.Mapping(
      ref, path,
      {"path", "gpu_model", "nominal_gpus", "borrowing_limit", "lending_limit", "cohort"},
      [&](const std::string& key, const Ref& value, const std::string& at) {
        if (key == "path") return p.String(value, at, &quota->path);
        if (key == "gpu_model") return p.String(value, at, &quota->gpu_model);
        if (key == "nominal_gpus") return p.Int(value, at, &quota->nominal_gpus);
        if (key == "borrowing_limit") return p.OptionalInt(value, at, &quota->borrowing_limit);
        if (key == "lending_limit") return p.OptionalInt(value, at, &quota->lending_limit);
        return p.String(value, at, &quota->cohort);
      });
}

Status ReadShare(Parser& p, const Ref& ref, const std::string& path, sched::ShareConfig* share) {
  return p.Mapping(ref, path, {"path", "shares"},
                   [&](const std::string& key, const Ref& value, const std::string& at) {
                     if (key == "path") return p.String(value, at, &share->path);
                     return p.Double(value, at, &share->shares);
                   });
}

Status ReadDataset(Parser& p, const Ref& ref, const std::string& path,
                   sched::DatasetConfig* dataset) {
  return p.Mapping(ref, path, {"name", "size_gb"},
                   [&](const std::string& key, const Ref& value, const std::string& at) {
                     if (key == "name") return p.String(value, at, &dataset->name);
                     return p.Double(value, at, &dataset->size_gb);
                   });
}

Status ReadProvider(Parser& p, const Ref& ref, const std::string& path,
                    sched::ProviderConfig* provider) {
  static const std::vector<std::string> kKeys = {"name",           "type",
                                                 "max_attempts",   "backoff_base_s",
                                                 "backoff_max_s",  "breaker_failures",
                                                 "breaker_open_s", "spot_interruptions_per_hour",
                                                 "params"};
  return p.Mapping(
      ref, path, kKeys, [&](const std::string& key, const Ref& value, const std::string& at) {
        if (key == "name") return p.String(value, at, &provider->name);
        if (key == "type") return p.String(value, at, &provider->type);
        if (key == "max_attempts") return p.Int(value, at, &provider->max_attempts);
        if (key == "backoff_base_s") return p.Double(value, at, &provider->backoff_base_s);
        if (key == "backoff_max_s") return p.Double(value, at, &provider->backoff_max_s);
        if (key == "breaker_failures") return p.Int(value, at, &provider->breaker_failures);
        if (key == "breaker_open_s") return p.Double(value, at, &provider->breaker_open_s);
        if (key == "spot_interruptions_per_hour") {
          return p.Double(value, at, &provider->spot_interruptions_per_hour);
        }
        // params: free-form type-specific settings, scalars kept as text.
        provider->params.clear();
        return p.Mapping(value, at, {},
                         [&](const std::string& param, const Ref& v, const std::string& param_at) {
                           std::string text;
                           FERRY_RETURN_NOT_OK(p.String(v, param_at, &text));
                           provider->params[param] = std::move(text);
                           return Status::OK();
                         });
      });
}

Status ReadConfig(Parser& p, const Ref& root, sched::Config* config) {
  static const std::vector<std::string> kKeys = {"ordering",
                                                 "default_scoring",
                                                 "pools",
                                                 "pool_sets",
                                                 "quotas",
                                                 "shares",
                                                 "datasets",
                                                 "transfer_cost_per_gb",
                                                 "usage_half_life_s",
                                                 "preemption",
                                                 "backfill",
                                                 "burst",
                                                 "providers"};
  return p.Mapping(
      root, "", kKeys,
      [&](const std::string& key, const Ref& value, const std::string& at) -> Status {
        if (key == "ordering") {
          std::string text;
          FERRY_RETURN_NOT_OK(p.String(value, at, &text));
          auto ordering = sched::ParseOrdering(text);
          if (!ordering) {
            return p.Error(value, at,
                           "unknown ordering '" + text + "' (expected fifo, fair_share or drf)");
          }
          config->ordering = *ordering;
          return Status::OK();
        }
        if (key == "default_scoring") return ReadScoring(p, value, at, &config->default_scoring);
        if (key == "pools") return ReadList(p, value, at, &config->pools, &ReadPool);
        if (key == "pool_sets") return ReadList(p, value, at, &config->pool_sets, &ReadPoolSet);
        if (key == "quotas") return ReadList(p, value, at, &config->quotas, &ReadQuota);
        if (key == "shares") return ReadList(p, value, at, &config->shares, &ReadShare);
        if (key == "datasets") return ReadList(p, value, at, &config->datasets, &ReadDataset);
        if (key == "providers") return ReadList(p, value, at, &config->providers, &ReadProvider);
        if (key == "transfer_cost_per_gb")
          return p.Double(value, at, &config->transfer_cost_per_gb);
        if (key == "usage_half_life_s") return p.Double(value, at, &config->usage_half_life_s);
        if (key == "preemption") {
          auto& pre = config->preemption;
          return p.Mapping(
              value, at,
              {"priority", "reclaim", "grace_s", "fair_share_max", "fair_share_window_s"},
              [&](const std::string& k, const Ref& v, const std::string& a) {
                if (k == "priority") return p.Bool(v, a, &pre.priority);
                if (k == "reclaim") return p.Bool(v, a, &pre.reclaim);
                if (k == "grace_s") return p.Double(v, a, &pre.grace_s);
                if (k == "fair_share_max") return p.Int(v, a, &pre.fair_share_max);
                return p.Double(v, a, &pre.fair_share_window_s);
              });
        }
        if (key == "backfill") {
          auto& backfill = config->backfill;
          return p.Mapping(value, at, {"enabled", "reservations", "drain"},
                           [&](const std::string& k, const Ref& v, const std::string& a) {
                             if (k == "enabled") return p.Bool(v, a, &backfill.enabled);
                             if (k == "drain") return p.Bool(v, a, &backfill.drain);
                             return p.Int(v, a, &backfill.reservations);
                           });
        }
        auto& burst = config->burst;  // "burst"
        return p.Mapping(value, at, {"enabled", "min_pending_s"},
                         [&](const std::string& k, const Ref& v, const std::string& a) {
                           if (k == "enabled") return p.Bool(v, a, &burst.enabled);
                           return p.Double(v, a, &burst.min_pending_s);
                         });
      });
}

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::IOError(path + ": cannot open: " + std::strerror(errno));
  }
  std::string text;
  char buffer[8192];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxConfigBytes) {
      return Status::Invalid(path + ": larger than " + std::to_string(kMaxConfigBytes) + " bytes");
    }
  }
  if (in.bad()) return Status::IOError(path + ": read failed");
  return text;
}

int64_t NowNs() {
  struct timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

Result<sched::Config> ParseSchedulerConfig(std::string_view yaml_text, std::string_view name) {
  Parser parser{std::string(name)};
  yaml::Reporter reporter{std::string(name)};
  if (yaml_text.size() > kMaxConfigBytes) {
    return reporter.FileError("larger than " + std::to_string(kMaxConfigBytes) + " bytes");
  }
  FERRY_ASSIGN_OR_RAISE(yaml::Document document, yaml::Parse(yaml_text, reporter));
  sched::Config config;
  FERRY_RETURN_NOT_OK(ReadConfig(parser, document.root(), &config));
  Status valid = config.Validate();
  if (!valid.ok()) return parser.Locate(valid);
  return config;
}

Result<sched::Config> LoadSchedulerConfig(const std::string& path) {
  FERRY_ASSIGN_OR_RAISE(std::string text, ReadWholeFile(path));
  return ParseSchedulerConfig(text, path);
}

ConfigWatcher::ConfigWatcher(std::string path) : path_(std::move(path)) {}

// last_hash_ holds "<mtime_ns> <size> <read_ns> <sha256>" of the last read
// (or "missing <errno>"). The file is read again unless its modification
// time and size are unchanged and that time lies well before the last read:
// a rewrite within one timestamp tick of the read would otherwise go unseen.
Result<std::optional<sched::Config>> ConfigWatcher::Poll() {
  struct stat info {};
  if (stat(path_.c_str(), &info) != 0) {
    const int error = errno;
    const std::string key = "missing " + std::to_string(error);
    if (key == last_hash_) return std::optional<sched::Config>();
    last_hash_ = key;
    reported_broken_ = true;
    return Status::IOError(path_ + ": " + std::strerror(error));
  }
  const int64_t mtime_ns = int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec;
  const int64_t size = static_cast<int64_t>(info.st_size);
  {
    std::istringstream last(last_hash_);
    int64_t last_mtime = -1, last_size = -1, last_read = -1;
    if (last >> last_mtime >> last_size >> last_read && last_mtime == mtime_ns &&
        last_size == size && last_read - mtime_ns > 2'000'000'000LL) {
      return std::optional<sched::Config>();
    }
  }
  const int64_t read_ns = NowNs();
  auto text = ReadWholeFile(path_);
  std::string digest = text.ok() ? Sha256Hex(*text) : "unreadable";
  const std::string key = std::to_string(mtime_ns) + " " + std::to_string(size) + " " +
                          std::to_string(read_ns) + " " + digest;
  std::string previous_digest;
  if (size_t space = last_hash_.rfind(' '); space != std::string::npos) {
    previous_digest = last_hash_.substr(space + 1);
  }
  const bool first = last_hash_.empty();
  last_hash_ = key;
  if (!first && digest == previous_digest) {
    return std::optional<sched::Config>();  // touched, same content
  }
  if (!text.ok()) {
    reported_broken_ = true;
    return text.status();
  }
  auto config = ParseSchedulerConfig(*text, path_);
  if (!config.ok()) {
    reported_broken_ = true;
    return config.status();
  }
  reported_broken_ = false;
  return std::optional<sched::Config>(std::move(*config));
}

}  // namespace ferry::fleet
