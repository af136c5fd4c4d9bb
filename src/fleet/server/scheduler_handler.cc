// GET /v1/scheduler: the config in force, the last cycle, fair share,
// providers and the nodes on their way (platform admins).
#include "fleet/server/fleet_server.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

void FleetServer::GetScheduler(Call& c) {
  if (!OnlyParams(c, {})) return;
  json body;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    body["config"] = SchedulerConfigJson(core_.scheduler->config());
    body["config_file"] =
        options_.scheduler_config.empty() ? json(nullptr) : json(options_.scheduler_config);
    body["config_loaded_at"] = TimestampJson(core_.config_loaded_ms);
    body["config_error"] = core_.config_error.empty() ? json(nullptr) : json(core_.config_error);
    json cycle = CycleStatsJson(core_.last_stats);
    cycle["at"] = TimestampJson(core_.last_cycle_ms);
    body["last_cycle"] = std::move(cycle);
    body["preemptions_total"] = core_.preemptions;
    body["fair_share"] = FairShareJson(core_.scheduler->FairShare());
  }
  body["providers"] = provisioning_ ? provisioning_->StatusJson() : json::array();
  body["slurm_clusters"] = slurm_ ? slurm_->StatusJson() : json::array();
  json provisioning = json::object();
  if (provisioning_) {
    Result<std::vector<Node>> nodes = store_->ListNodes();
    if (!nodes.ok()) return SendStoreError(c, nodes.status());
    std::vector<sched::NodeInfo> registered;
    registered.reserve(nodes->size());
    for (const Node& node : *nodes) registered.push_back(sched::ToNodeInfo(node));
    for (const auto& [pool, count] : provisioning_->Provisioning(registered)) {
      provisioning[pool] = count;
    }
  }
  body["provisioning"] = std::move(provisioning);
  SendJson(c, 200, body);
}

}  // namespace ferry::fleet::server_internal
