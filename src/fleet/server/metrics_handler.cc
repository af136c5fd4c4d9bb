// GET /metrics: the Prometheus text format (docs/fleet-metrics.md).
#include "ferry/base/metrics.h"
#include "fleet/server/fleet_server.h"

namespace ferry::fleet::server_internal {

void FleetServer::GetMetrics(Call& c) {
  ScrapeInputs inputs;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    inputs.quotas = core_.last_quotas;
    inputs.shares = core_.scheduler->FairShare();
  }
  if (provisioning_) inputs.providers = provisioning_->Metrics();
  if (slurm_) {
    // Slurm clusters are providers too (type slurm): calls, breaker, nodes.
    inputs.slurm = slurm_->Metrics();
    for (const SlurmController::ClusterMetrics& cluster : inputs.slurm) {
      ProvisioningController::ProviderMetrics p;
      p.name = cluster.name;
      p.type = "slurm";
      p.breaker = cluster.breaker;
      p.counters.calls = cluster.calls;
      p.counters.failures = cluster.failures;
      p.counters.breaker_opens = cluster.breaker_opens;
      p.nodes["registered"] = static_cast<int>(cluster.nodes);
      inputs.providers.push_back(std::move(p));
    }
  }
  c.res.status = 200;
  c.res.set_content(metrics_.Render(*store_, inputs), metrics::kContentType);
}

}  // namespace ferry::fleet::server_internal
