// The OpenAPI 3.1 document of the REST API (src/fleet/server/openapi.json,
// docs/fleet-api.md#api-contract), compiled into the server by
// openapi_embed.cmake and served at GET /v1/openapi.json.
#pragma once

#include <string_view>

namespace ferry::fleet::server_internal {

// The document's JSON text, as in openapi.json. Static storage; thread-safe.
std::string_view OpenApiDocument();

}  // namespace ferry::fleet::server_internal
