// /v1/nodes (list, get, drain, undrain), /v1/pools and /v1/gpus.
#include <string>

#include "fleet/server/fleet_server.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

// Which job holds a GPU is the business of that job's tenant and of platform
// admins; everyone else sees that the GPU is allocated, not by what.
void HideForeignJobs(const Principal& viewer, Node& node) {
  if (viewer.role == Role::kPlatformAdmin) return;
  for (Gpu& gpu : node.gpus) {
    if (gpu.job_id && gpu.job_tenant_id != viewer.tenant_id) gpu.job_id.reset();
  }
}

}  // namespace

json FleetServer::NodeJson(const Node& node, const Principal& viewer) const {
  json out = ToJson(node);
  // A lost node's report is gone with its agent.
  out["cache"] = NodeCacheJson(
      node.state == NodeState::kLost ? std::nullopt : caches_.Get(node.name, node.instance),
      viewer);
  return out;
}

void FleetServer::ListNodes(Call& c) {
  if (!OnlyParams(c, {})) return;
  Result<std::vector<Node>> nodes = store_->ListNodes();
  if (!nodes.ok()) return SendStoreError(c, nodes.status());
  json list = json::array();
  for (Node& node : *nodes) {
    HideForeignJobs(c.principal, node);
    list.push_back(NodeJson(node, c.principal));
  }
  SendJson(c, 200, {{"nodes", std::move(list)}});
}

void FleetServer::GetNode(Call& c) {
  if (!OnlyParams(c, {})) return;
  Result<std::optional<Node>> node = store_->GetNode(c.captures.at(0));
  if (!node.ok()) return SendStoreError(c, node.status());
  if (!node->has_value()) return SendProblem(c, 404, "not-found", "no node " + c.captures.at(0));
  HideForeignJobs(c.principal, **node);
  SendJson(c, 200, NodeJson(**node, c.principal));
}

void FleetServer::SetDrain(Call& c, bool drain) {
  if (!OnlyParams(c, {})) return;
  const std::string& name = c.captures.at(0);
  Result<bool> found = store_->SetDrain(name, drain);
  if (!found.ok()) return SendStoreError(c, found.status());
  if (!*found) return SendProblem(c, 404, "not-found", "no node " + name);
  checker_.NodesChanged();
  if (!drain) WakeScheduler();
  Result<std::optional<Node>> node = store_->GetNode(name);
  if (!node.ok()) return SendStoreError(c, node.status());
  if (!node->has_value()) return SendProblem(c, 404, "not-found", "no node " + name);
  HideForeignJobs(c.principal, **node);
  SendJson(c, 200, NodeJson(**node, c.principal));
}

void FleetServer::ListPools(Call& c) {
  if (!OnlyParams(c, {})) return;
  Result<std::vector<Pool>> pools = store_->ListPools();
  if (!pools.ok()) return SendStoreError(c, pools.status());
  json list = json::array();
  for (const Pool& pool : *pools) list.push_back(ToJson(pool));
  SendJson(c, 200, {{"pools", std::move(list)}});
}

void FleetServer::ListGpus(Call& c) {
  if (!OnlyParams(c, {})) return;
  Result<std::vector<Node>> nodes = store_->ListNodes();
  if (!nodes.ok()) return SendStoreError(c, nodes.status());
  json list = json::array();
  for (Node& node : *nodes) {
    HideForeignJobs(c.principal, node);
    json rendered = ToJson(node);
    for (json& gpu : rendered["gpus"]) {
      gpu["node"] = node.name;
      list.push_back(std::move(gpu));
    }
  }
  SendJson(c, 200, {{"gpus", std::move(list)}});
}

}  // namespace ferry::fleet::server_internal
