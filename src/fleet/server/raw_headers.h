// HTTP listeners (plain and TLS) that keep one fact httplib loses: which request
// headers arrived with an empty value. httplib 0.11 drops such a line while
// parsing (`Idempotency-Key:` would look like no key at all), so this server
// reads the connection itself, keeps each request's raw header block and
// lists the names of empty headers, lower-cased and comma-separated, in the
// request header kEmptyHeaders (a client's own header of that name is
// removed first). Everything else is httplib's own request processing.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace httplib {
class Server;
class SSLServer;
class TaskQueue;
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

// A connection taken out of the keep-alive loop once a response head has
// been written, for a writer on another thread (the watch stream's
// server-sent events, watch_hub.h). One owner, not thread-safe; destroying
// it closes the connection (TLS close_notify first).
class TakenConnection {
 public:
  virtual ~TakenConnection() = default;
  virtual int fd() const = 0;
  // Writes what the connection takes now, without blocking: the bytes
  // written, 0 when it would block, -1 when it failed. A TLS write that
  // would block must be repeated with the same bytes first.
  virtual ssize_t WriteSome(const char* data, size_t size) = 0;
  // Reads and drops what the client sent; false once it closed or failed.
  virtual bool DrainInput() = 0;
};

// Called by a handler on its worker thread while it handles a request: when
// that request's response has been written, the connection goes to `taker`
// (on this worker thread) instead of waiting for another request, and the
// worker returns to the pool. The response must end with the connection
// (Connection: close and no Content-Length). When writing the response
// fails, `taker` is destroyed without a call.
void TakeConnectionAfterResponse(std::function<void(std::unique_ptr<TakenConnection>)> taker);

// While `others_waiting()` is true (connections wait for a worker), a
// kept-alive connection idle for 10 ms gives its worker up (it is closed)
// instead of holding it for the keep-alive timeout: slow or idle clients
// cannot starve new connections of workers; a busy one (requests back to
// back) gets its next answer with Connection: close and reconnects behind
// the waiting ones. `server` comes from
// MakeHeaderKeepingServer or MakeHeaderKeepingTlsServer; call before listening.
void SetKeepAliveYield(httplib::Server& server, std::function<bool()> others_waiting);
// A pool of `threads` workers (httplib's ThreadPool) that keeps in *waiting
// the number of tasks (connections) queued and not started yet. Owned by
// the caller (httplib's new_task_queue).
httplib::TaskQueue* NewCountingPool(size_t threads, std::shared_ptr<std::atomic<int>> waiting);

// The names (lower-cased) of the header lines with an empty value in a raw
// request head (request line, headers, up to the blank line).
std::vector<std::string> EmptyHeaderNames(std::string_view head);

}  // namespace ferry::fleet::server_internal
