// GET /v1/openapi.json: the API's OpenAPI document (openapi.h), public like
// the health probes: it says what the API is, not what is in it.
#include <string_view>

#include "fleet/server/fleet_server.h"
#include "fleet/server/openapi.h"

namespace ferry::fleet::server_internal {

void FleetServer::GetOpenApi(Call& c) {
  if (!OnlyParams(c, {})) return;
  c.res.status = 200;
  const std::string_view document = OpenApiDocument();
  c.res.set_content(document.data(), document.size(), "application/json");
}

}  // namespace ferry::fleet::server_internal
