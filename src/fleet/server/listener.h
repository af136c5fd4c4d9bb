// The HTTP listener of `ferry server`: a plain httplib::Server, or an
// httplib::SSLServer with the configured certificate and key (TLS 1.2 or
// later). The rest of the server only sees httplib::Server.
#pragma once

#include <memory>
#include <string>

#include "ferry/base/status.h"
#include "ferry/fleet/server.h"

namespace httplib {
class Server;
}

namespace ferry::fleet::server_internal {

// kInvalid when only one of tls_cert_file / tls_key_file is set, or when a
// named file (certificate, key, ca_file) cannot be opened for reading.
Status CheckTlsOptions(const ServerOptions& options);

// The server the REST API is installed on: an SSLServer when
// options.tls_cert_file is set (the certificate chain and key are loaded and
// checked against each other here, so a bad pair fails before anything
// listens), else a plain Server. Writes a warning to stderr when the
// certificate has expired or is not valid yet.
Result<std::unique_ptr<httplib::Server>> MakeListener(const ServerOptions& options);

}  // namespace ferry::fleet::server_internal
