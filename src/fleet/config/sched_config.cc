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
#include "fleet/config/config_reader.h"

namespace ferry::fleet {
namespace {

using yaml::Node;
using yaml::Ref;

using Parser = config::ConfigReader;
using config::kMaxConfigBytes;
using config::ReadList;

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
