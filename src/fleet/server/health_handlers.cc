// GET /healthz and GET /readyz: probes that need no token.
#include "fleet/server/fleet_server.h"

namespace ferry::fleet::server_internal {

void FleetServer::Health(Call& c) { SendJson(c, 200, {{"status", "ok"}}); }

void FleetServer::Ready(Call& c) {
  Result<int64_t> users = store_->CountUsers();
  if (!users.ok() || store_->schema_version() <= 0) {
    if (!users.ok()) LogError("readiness check", users.status());
    return SendProblem(c, 503, "unavailable", "the store is not reachable");
  }
  SendJson(c, 200, {{"status", "ok"}});
}

}  // namespace ferry::fleet::server_internal
