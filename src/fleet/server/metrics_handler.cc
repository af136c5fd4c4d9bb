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
  c.res.status = 200;
  c.res.set_content(metrics_.Render(*store_, inputs), metrics::kContentType);
}

}  // namespace ferry::fleet::server_internal
