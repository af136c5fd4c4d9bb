// The log of `ferry server` on stderr: text lines as always, or JSON lines
// with --log-format json (docs/fleet-server.md#logs). One logger per process;
// RunServer sets its format before anything is written.
#pragma once

#include "ferry/base/log.h"

namespace ferry::fleet::server_internal {

logging::Logger& ServerLog();

}  // namespace ferry::fleet::server_internal
