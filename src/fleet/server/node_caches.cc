#include "fleet/server/node_caches.h"

#include <algorithm>
#include <string_view>

#include "ferry/fleet/model_json.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

std::string HolderKey(std::string_view tenant, std::string_view digest) {
  std::string key;
  key.reserve(tenant.size() + 1 + digest.size());
  key.append(tenant).append("\n").append(digest);
  return key;
}

}  // namespace

void NodeCaches::Report(const std::string& node, const std::string& instance, NodeCache cache) {
  std::lock_guard<std::mutex> lock(mu_);
  by_node_[node] = Entry{instance, std::move(cache)};
  index_stale_ = true;
}

void NodeCaches::Forget(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  if (by_node_.erase(node) > 0) index_stale_ = true;
}

std::optional<NodeCache> NodeCaches::Get(const std::string& node,
                                         const std::string& instance) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_node_.find(node);
  if (it == by_node_.end() || it->second.instance != instance) return std::nullopt;
  return it->second.cache;
}

void NodeCaches::RebuildIndex() const {
  holders_.clear();
  for (const auto& [node, entry] : by_node_) {
    for (const NodeCache::Input& input : entry.cache.inputs) {
      if (input.bytes > 0)
        holders_[HolderKey(input.tenant, input.digest)].emplace_back(node, input.bytes);
    }
  }
  index_stale_ = false;
}

void NodeCaches::AddCachedBytes(sched::Snapshot* snapshot) const {
  const bool any_inputs =
      std::any_of(snapshot->pending.begin(), snapshot->pending.end(),
                  [](const sched::PendingJob& job) { return !job.input_digests.empty(); });
  if (!any_inputs) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (by_node_.empty()) return;
  if (index_stale_) RebuildIndex();
  if (holders_.empty()) return;
  std::unordered_map<std::string_view, int64_t> node_ids;
  node_ids.reserve(snapshot->nodes.size());
  for (const sched::NodeInfo& node : snapshot->nodes) node_ids.emplace(node.name, node.id);
  std::map<int64_t, int64_t> per_node;
  for (sched::PendingJob& job : snapshot->pending) {
    if (job.input_digests.empty()) continue;
    per_node.clear();
    for (const std::string& digest : job.input_digests) {
      auto it = holders_.find(HolderKey(job.tenant, digest));
      if (it == holders_.end()) continue;
      for (const auto& [node, bytes] : it->second) {
        auto id = node_ids.find(node);
        if (id != node_ids.end()) per_node[id->second] += bytes;
      }
    }
    job.cached_bytes.assign(per_node.begin(), per_node.end());
  }
}

json NodeCacheJson(const std::optional<NodeCache>& cache, const Principal& viewer) {
  if (!cache) return nullptr;
  json inputs = json::array();
  for (const NodeCache::Input& input : cache->inputs) {
    if (viewer.role != Role::kPlatformAdmin && input.tenant != viewer.tenant) continue;
    inputs.push_back({{"tenant", input.tenant},
                      {"digest", input.digest},
                      {"bytes", input.bytes},
                      {"total_bytes", input.total_bytes}});
  }
  return {{"quota_bytes", cache->quota_bytes},
          {"bytes", cache->bytes},
          {"entries", cache->entries},
          {"hit_bytes", cache->hit_bytes},
          {"fetched_bytes", cache->fetched_bytes},
          // null until the agent has staged anything
          {"hit_ratio",
           cache->hit_bytes + cache->fetched_bytes > 0 ? json(cache->HitRatio()) : json(nullptr)},
          {"reported_at", TimestampJson(cache->reported_at_ms)},
          {"inputs", std::move(inputs)}};
}

}  // namespace ferry::fleet::server_internal
