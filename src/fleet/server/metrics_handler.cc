// GET /metrics: the Prometheus text format (docs/fleet-metrics.md).
#include "ferry/base/metrics.h"
#include "fleet/server/fleet_server.h"

namespace ferry::fleet::server_internal {

void FleetServer::GetMetrics(Call& c) {
  c.res.status = 200;
  c.res.set_content(metrics_.Render(*store_), metrics::kContentType);
}

}  // namespace ferry::fleet::server_internal
