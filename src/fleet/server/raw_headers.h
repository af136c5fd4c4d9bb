// HTTP listeners (plain and TLS) that keep one fact httplib loses: which request
// headers arrived with an empty value. httplib 0.11 drops such a line while
// parsing (`Idempotency-Key:` would look like no key at all), so this server
// reads the connection itself, keeps each request's raw header block and
// lists the names of empty headers, lower-cased and comma-separated, in the
// request header kEmptyHeaders (a client's own header of that name is
// removed first). Everything else is httplib's own request processing.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace httplib {
class Server;
class SSLServer;
}  // namespace httplib
struct ssl_ctx_st;

namespace ferry::fleet::server_internal {

inline constexpr const char* kEmptyHeaders = "Ferry-Empty-Headers";

// A new plain-HTTP server with the behaviour above; thread-safe as httplib's.
std::unique_ptr<httplib::Server> MakeHeaderKeepingServer();
// The same over TLS: `setup` configures the SSL_CTX as httplib::SSLServer's
// callback does (certificate, key, protocol versions); check is_valid().
std::unique_ptr<httplib::SSLServer> MakeHeaderKeepingTlsServer(
    const std::function<bool(ssl_ctx_st&)>& setup);

// The names (lower-cased) of the header lines with an empty value in a raw
// request head (request line, headers, up to the blank line).
std::vector<std::string> EmptyHeaderNames(std::string_view head);

}  // namespace ferry::fleet::server_internal
