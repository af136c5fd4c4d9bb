#include "fleet/server/raw_headers.h"

#include <arpa/inet.h>
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

void SetSocketTimeouts(int fd, int64_t read_ms, int64_t write_ms) {
  timeval read{static_cast<time_t>(read_ms / 1000),
               static_cast<suseconds_t>(read_ms % 1000 * 1000)};
  timeval write{static_cast<time_t>(write_ms / 1000),
                static_cast<suseconds_t>(write_ms % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &read, sizeof(read));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &write, sizeof(write));
}

// httplib's keep-alive loop (one request after another on a connection),
// over a stream that keeps each request's head, for a plain or a TLS server.
template <typename Base>
class HeaderKeeping : public Base {
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
    for (size_t left = this->keep_alive_max_count_; left > 0; --left) {
      if (!NextRequestArrives(stream)) break;
      bool closed = false;
      stream.BeginRequest();
      ok = this->process_request(stream, left == 1, closed, [&](httplib::Request& req) {
        req.headers.erase(kEmptyHeaders);
        std::string names;
        for (const std::string& name : EmptyHeaderNames(stream.head())) {
          names += (names.empty() ? "" : ",") + name;
        }
        if (!names.empty()) req.set_header(kEmptyHeaders, names);
      });
      if (!ok || closed) break;
    }
    return ok;
  }

 private:
  // Waits up to the keep-alive timeout for the next request, in short slices
  // so that stop() is noticed.
  bool NextRequestArrives(const HeadKeepingStream& stream) const {
    if (stream.HasBuffered()) return true;  // pipelined, or a TLS record already decoded
    const int64_t total_ms = this->keep_alive_timeout_sec_ * 1000;
    for (int64_t waited = 0; this->svr_sock_ != INVALID_SOCKET; waited += 100) {
      const int64_t slice = std::min<int64_t>(100, total_ms - waited);
      if (slice <= 0) return false;
      if (WaitFor(stream.socket(), POLLIN, slice)) return true;
    }
    return false;
  }
};

class HeaderKeepingServer final : public HeaderKeeping<httplib::Server> {
 private:
  bool process_and_close_socket(socket_t sock) override {
    PlainStream stream(sock, ReadTimeoutMs(), WriteTimeoutMs());
    const bool ok = Serve(stream);
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
