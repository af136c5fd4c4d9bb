#include "fleet/server/raw_headers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

namespace ferry::fleet::server_internal {
namespace {

// Waits until `fd` is ready for `events` or `timeout_ms` passes.
bool WaitFor(int fd, short events, int64_t timeout_ms) {
  pollfd p{fd, events, 0};
  int n;
  do {
    n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(timeout_ms, 0)));
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

void Describe(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text));
    port = ntohs(in.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
    inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text));
    port = ntohs(in6.sin6_port);
  }
  ip = text;
}

// A buffered connection stream that also keeps the bytes of the current
// request up to the end of its head. Subclasses move the bytes (plain socket
// or TLS).
class HeadKeepingStream : public httplib::Stream {
 public:
  HeadKeepingStream(int fd, int64_t read_timeout_ms, int64_t write_timeout_ms)
      : fd_(fd), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {}

  bool is_readable() const override {
    return pos_ < len_ || Pending() || WaitFor(fd_, POLLIN, read_timeout_ms_);
  }
  bool is_writable() const override { return WaitFor(fd_, POLLOUT, write_timeout_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == len_) {
      if (!Pending() && !WaitFor(fd_, POLLIN, read_timeout_ms_)) return -1;
      const ssize_t n = Receive(buffer_, sizeof(buffer_));
      if (n <= 0) return n;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t count = std::min(size, len_ - pos_);
    std::memcpy(ptr, buffer_ + pos_, count);
    if (keeping_) {
      head_.append(buffer_ + pos_, count);
      // The head ends at the first blank line; a head over httplib's own
      // limits is refused by httplib anyway.
      if (head_.find("\r\n\r\n") != std::string::npos || head_.size() > (1 << 16)) {
        keeping_ = false;
      }
    }
    pos_ += count;
    return static_cast<ssize_t>(count);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!WaitFor(fd_, POLLOUT, write_timeout_ms_)) return -1;
    return Send(ptr, size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t length = sizeof(addr);
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
      Describe(addr, ip, port);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t length = sizeof(addr);
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
      Describe(addr, ip, port);
    }
  }
  socket_t socket() const override { return fd_; }

  // Bytes of the connection read or decoded but not handed out yet.
  bool HasBuffered() const { return pos_ < len_ || Pending(); }

  void BeginRequest() {
    head_.clear();
    keeping_ = true;
  }
  const std::string& head() const { return head_; }

 protected:
  // Reads what has arrived (the socket is readable, or Pending()); <= 0 on
  // end of stream or error.
  virtual ssize_t Receive(char* buffer, size_t size) = 0;
  virtual ssize_t Send(const char* data, size_t size) = 0;
  // Bytes the transport has decoded but not handed out yet (TLS records).
  virtual bool Pending() const { return false; }

  int fd_;

 private:
  int64_t read_timeout_ms_, write_timeout_ms_;
  char buffer_[4096] = {};
  size_t pos_ = 0, len_ = 0;
  std::string head_;
  bool keeping_ = false;
};

class PlainStream final : public HeadKeepingStream {
 public:
  using HeadKeepingStream::HeadKeepingStream;

 protected:
  ssize_t Receive(char* buffer, size_t size) override {
    ssize_t n;
    do {
      n = ::recv(fd_, buffer, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  ssize_t Send(const char* data, size_t size) override {
    ssize_t n;
    do {
      n = ::send(fd_, data, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }
};

// TLS over a blocking socket whose receive and send timeouts bound every
// OpenSSL call (SO_RCVTIMEO / SO_SNDTIMEO).
class TlsStream final : public HeadKeepingStream {
 public:
  TlsStream(SSL* ssl, int fd, int64_t read_timeout_ms, int64_t write_timeout_ms)
      : HeadKeepingStream(fd, read_timeout_ms, write_timeout_ms), ssl_(ssl) {}

 protected:
  ssize_t Receive(char* buffer, size_t size) override {
    const int n = SSL_read(ssl_, buffer, static_cast<int>(size));
    return n > 0 ? n : -1;
  }
  ssize_t Send(const char* data, size_t size) override {
    const int n = SSL_write(ssl_, data, static_cast<int>(size));
    return n > 0 ? n : -1;
  }
  bool Pending() const override { return SSL_pending(ssl_) > 0; }

 private:
  SSL* ssl_;
};

// The taker a handler on this worker thread asked for (TakeConnectionAfterResponse).
thread_local std::function<void(std::unique_ptr<TakenConnection>)> t_taker;

class TakenPlainConnection final : public TakenConnection {
 public:
  explicit TakenPlainConnection(int fd) : fd_(fd) {}
  ~TakenPlainConnection() override {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
  }
  int fd() const override { return fd_; }
  ssize_t WriteSome(const char* data, size_t size) override {
    ssize_t n;
    do {
      n = ::send(fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    return n;
  }
  bool DrainInput() override {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n > 0) continue;
      if (n == 0) return false;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }

 private:
  int fd_;
};

class TakenTlsConnection final : public TakenConnection {
 public:
  TakenTlsConnection(SSL* ssl, int fd) : ssl_(ssl), fd_(fd) {
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  }
  ~TakenTlsConnection() override {
    SSL_shutdown(ssl_);
    ERR_clear_error();
    SSL_free(ssl_);
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
  }
  int fd() const override { return fd_; }
  ssize_t WriteSome(const char* data, size_t size) override {
    const int n = SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(size, 1 << 20)));
    if (n > 0) return n;
    const int error = SSL_get_error(ssl_, n);
    ERR_clear_error();
    return error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ ? 0 : -1;
  }
  bool DrainInput() override {
    char buffer[4096];
    for (;;) {
      const int n = SSL_read(ssl_, buffer, sizeof(buffer));
      if (n > 0) continue;
      const int error = SSL_get_error(ssl_, n);
      ERR_clear_error();
      return error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE;
    }
  }

 private:
  SSL* ssl_;
  int fd_;
};

void SetSocketTimeouts(int fd, int64_t read_ms, int64_t write_ms) {
  timeval read{static_cast<time_t>(read_ms / 1000),
               static_cast<suseconds_t>(read_ms % 1000 * 1000)};
  timeval write{static_cast<time_t>(write_ms / 1000),
                static_cast<suseconds_t>(write_ms % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &read, sizeof(read));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &write, sizeof(write));
}

// What SetKeepAliveYield sets, apart from the server type.
class KeepAliveYield {
 public:
  virtual ~KeepAliveYield() = default;
  void SetOthersWaiting(std::function<bool()> others_waiting) {
    others_waiting_ = std::move(others_waiting);
  }

 protected:
  bool OthersWaiting() const { return others_waiting_ && others_waiting_(); }

 private:
  std::function<bool()> others_waiting_;
};

constexpr int64_t kYieldGraceMs = 10;

class CountingPool final : public httplib::TaskQueue {
 public:
  CountingPool(size_t threads, std::shared_ptr<std::atomic<int>> waiting)
      : waiting_(std::move(waiting)), pool_(threads) {}
  void enqueue(std::function<void()> fn) override {
    waiting_->fetch_add(1);
    pool_.enqueue([waiting = waiting_, fn = std::move(fn)] {
      waiting->fetch_sub(1);
      fn();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  std::shared_ptr<std::atomic<int>> waiting_;
  httplib::ThreadPool pool_;
};

// httplib's keep-alive loop (one request after another on a connection),
// over a stream that keeps each request's head, for a plain or a TLS server.
template <typename Base>
class HeaderKeeping : public Base, public KeepAliveYield {
 public:
  using Base::Base;

 protected:
  int64_t ReadTimeoutMs() const {
    return this->read_timeout_sec_ * 1000 + this->read_timeout_usec_ / 1000;
  }
  int64_t WriteTimeoutMs() const {
    return this->write_timeout_sec_ * 1000 + this->write_timeout_usec_ / 1000;
  }

  bool Serve(HeadKeepingStream& stream) {
    bool ok = false;
    for (size_t left = this->keep_alive_max_count_, served = 0; left > 0; --left, ++served) {
      if (!NextRequestArrives(stream)) break;
      bool closed = false;
      t_taker = nullptr;
      stream.BeginRequest();
      // A busy client never lets its connection go idle: while connections
      // wait for a worker, it gets this answer with "Connection: close" and
      // queues behind them when it reconnects (one request served first, so
      // every connection moves).
      const bool last = left == 1 || (served > 0 && OthersWaiting());
      ok = this->process_request(stream, last, closed, [&](httplib::Request& req) {
        req.headers.erase(kEmptyHeaders);
        std::string names;
        for (const std::string& name : EmptyHeaderNames(stream.head())) {
          names += (names.empty() ? "" : ",") + name;
        }
        if (!names.empty()) req.set_header(kEmptyHeaders, names);
      });
      if (!ok) t_taker = nullptr;  // the response did not reach the client
      if (!ok || closed || t_taker) break;
    }
    return ok;
  }

  // The taker of the connection, when the last request's handler asked for it.
  static std::function<void(std::unique_ptr<TakenConnection>)> Taker() {
    return std::exchange(t_taker, nullptr);
  }

 private:
  // Waits up to the keep-alive timeout for the next request, in short slices
  // so that stop() is noticed.
  bool NextRequestArrives(const HeadKeepingStream& stream) const {
    if (stream.HasBuffered()) return true;  // pipelined, or a TLS record already decoded
    const int64_t total_ms = this->keep_alive_timeout_sec_ * 1000;
    for (int64_t waited = 0; this->svr_sock_ != INVALID_SOCKET;) {
      if (waited >= kYieldGraceMs && OthersWaiting()) return false;
      const int64_t slice =
          std::min<int64_t>(waited < kYieldGraceMs ? kYieldGraceMs : 100, total_ms - waited);
      if (slice <= 0) return false;
      if (WaitFor(stream.socket(), POLLIN, slice)) return true;
      waited += slice;
    }
    return false;
  }
};

class HeaderKeepingServer final : public HeaderKeeping<httplib::Server> {
 private:
  bool process_and_close_socket(socket_t sock) override {
    PlainStream stream(sock, ReadTimeoutMs(), WriteTimeoutMs());
    const bool ok = Serve(stream);
    if (auto taker = Taker()) {
      taker(std::make_unique<TakenPlainConnection>(sock));
      return ok;
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }
};

class HeaderKeepingTlsServer final : public HeaderKeeping<httplib::SSLServer> {
 public:
  using HeaderKeeping<httplib::SSLServer>::HeaderKeeping;

 private:
  bool process_and_close_socket(socket_t sock) override {
    bool ok = false;
    SetSocketTimeouts(sock, ReadTimeoutMs(), WriteTimeoutMs());
    SSL* ssl = SSL_new(ssl_context());
    if (ssl != nullptr && SSL_set_fd(ssl, sock) == 1 && SSL_accept(ssl) == 1) {
      TlsStream stream(ssl, sock, ReadTimeoutMs(), WriteTimeoutMs());
      ok = Serve(stream);
      if (auto taker = Taker()) {
        taker(std::make_unique<TakenTlsConnection>(ssl, sock));
        return ok;
      }
      SSL_shutdown(ssl);
    }
    ERR_clear_error();  // a failed handshake leaves its reasons queued on this thread
    if (ssl != nullptr) SSL_free(ssl);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }
};

}  // namespace

std::unique_ptr<httplib::Server> MakeHeaderKeepingServer() {
  return std::make_unique<HeaderKeepingServer>();
}

std::unique_ptr<httplib::SSLServer> MakeHeaderKeepingTlsServer(
    const std::function<bool(SSL_CTX&)>& setup) {
  return std::make_unique<HeaderKeepingTlsServer>(setup);
}

void SetKeepAliveYield(httplib::Server& server, std::function<bool()> others_waiting) {
  if (auto* yield = dynamic_cast<KeepAliveYield*>(&server)) {
    yield->SetOthersWaiting(std::move(others_waiting));
  }
}

httplib::TaskQueue* NewCountingPool(size_t threads, std::shared_ptr<std::atomic<int>> waiting) {
  return new CountingPool(threads, std::move(waiting));
}

void TakeConnectionAfterResponse(std::function<void(std::unique_ptr<TakenConnection>)> taker) {
  t_taker = std::move(taker);
}

std::vector<std::string> EmptyHeaderNames(std::string_view head) {
  std::vector<std::string> out;
  size_t start = head.find("\r\n");  // past the request line
  while (start != std::string_view::npos) {
    start += 2;
    const size_t end = head.find("\r\n", start);
    if (end == std::string_view::npos || end == start) break;  // the blank line
    std::string_view line = head.substr(start, end - start);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && colon > 0) {
      std::string_view value = line.substr(colon + 1);
      const bool empty =
          std::all_of(value.begin(), value.end(), [](char c) { return c == ' ' || c == '\t'; });
      if (empty) {
        std::string name(line.substr(0, colon));
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        out.push_back(std::move(name));
      }
    }
    start = end;
  }
  return out;
}

}  // namespace ferry::fleet::server_internal
