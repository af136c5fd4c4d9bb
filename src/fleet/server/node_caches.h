// The input caches the agents report (POST /v1/agent/sync, "cache"), kept in
// memory per node: what GET /v1/nodes shows of them, and the bytes of each
// pending job's inputs per node that the scheduling core weighs
// (PendingJob::cached_bytes). Not stored: every agent sends its report on
// the first sync after it registers and at least every 30 s, so a restarted
// server knows the caches again within that time. Internal to
// src/fleet/server; free of HTTP state so the tests reach it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/snapshot.h"

namespace ferry::fleet::server_internal {

// Thread-safe: every member takes the object's own lock.
class NodeCaches {
 public:
  // `cache` is node `node`'s latest report, sent by its agent instance
  // `instance`; it replaces the one before.
  void Report(const std::string& node, const std::string& instance, NodeCache cache);
  // The node re-registered (a new agent, a fresh cache report to come), was
  // lost or removed: its report goes.
  void Forget(const std::string& node);
  // The node's report when agent `instance` sent it; nullopt otherwise.
  std::optional<NodeCache> Get(const std::string& node, const std::string& instance) const;
  // Sets cached_bytes of every pending job with input digests: per node of
  // the snapshot (by name), the bytes of the job's inputs its report lists
  // under the job's tenant. Jobs without inputs are not touched.
  void AddCachedBytes(sched::Snapshot* snapshot) const;

 private:
  struct Entry {
    std::string instance;
    NodeCache cache;
  };
  // "tenant\ndigest" -> (node, bytes) for every report: built on the first
  // AddCachedBytes after a report changed.
  using Holders = std::unordered_map<std::string, std::vector<std::pair<std::string, int64_t>>>;
  void RebuildIndex() const;

  mutable std::mutex mu_;
  std::map<std::string, Entry> by_node_;
  mutable Holders holders_;
  mutable bool index_stale_ = false;
};

// The "cache" object of a node in GET /v1/nodes, for `viewer`: sizes,
// counters and hit ratio for everyone; the inputs of every tenant for a
// platform admin, of the viewer's own tenant for anyone else (a tenant never
// learns which data another tenant holds). null without a report.
nlohmann::json NodeCacheJson(const std::optional<NodeCache>& cache, const Principal& viewer);

}  // namespace ferry::fleet::server_internal
