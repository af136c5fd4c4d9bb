// The daemon <-> node control connection (protocol.h).
#include "flow/node/protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "flow/transport/shm.h"

namespace ferry::flow::protocol {
namespace {

std::string AbstractName(const std::string& name) { return std::string(1, '\0') + name; }

Status ErrnoError(const std::string& what, int error_number) {
  return Status::IOError(what + ": " + std::strerror(error_number));
}

}  // namespace

std::string DaemonSocketName(const std::string& dataflow) { return "ferry-daemon/" + dataflow; }

std::string ChannelName(const std::string& dataflow, const std::string& node,
                        const std::string& operator_id, const std::string& output) {
  std::string name = dataflow + "/" + node + "/";
  if (!operator_id.empty()) name += operator_id + "/";
  return name + output;
}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

Result<Connection> Connection::Connect(const std::string& name) {
  bool retryable = false;
  auto fd = internal::ConnectAbstract(AbstractName(name), &retryable);
  if (!fd.ok()) {
    return Status::IOError("cannot reach the Ferry daemon at '" + name +
                           "': " + fd.status().message());
  }
  return Connection(fd->release());
}

Status Connection::Send(const nlohmann::json& message) {
  if (fd_ < 0) return Status::Invalid("control connection is closed");
  // Invalid UTF-8 (a node id built in code, say) is replaced, never thrown.
  const std::string text = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxMessage) {
    return Status::Invalid("control message of " + std::to_string(text.size()) +
                           " bytes exceeds the limit of " + std::to_string(kMaxMessage));
  }
  for (;;) {
    ssize_t sent = ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(text.size())) return Status::OK();
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd entry{fd_, POLLOUT, 0};
      if (::poll(&entry, 1, 1000) <= 0) return Status::IOError("control connection stalled");
      continue;
    }
    return ErrnoError("send on control connection", sent < 0 ? errno : EPIPE);
  }
}

Result<std::optional<nlohmann::json>> Connection::Receive(std::chrono::nanoseconds timeout) {
  if (fd_ < 0) return std::optional<nlohmann::json>();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<char> buffer(kMaxMessage + 1);
  bool reset_seen = false;
  for (;;) {
    ssize_t received = ::recv(fd_, buffer.data(), buffer.size(), MSG_DONTWAIT | MSG_TRUNC);
    if (received == 0) return std::optional<nlohmann::json>();
    if (received > 0) {
      if (static_cast<size_t>(received) > kMaxMessage) {
        return Status::Invalid("control message larger than " + std::to_string(kMaxMessage) +
                               " bytes");
      }
      nlohmann::json message = nlohmann::json::parse(buffer.data(), buffer.data() + received,
                                                     nullptr, /*allow_exceptions=*/false);
      if (message.is_discarded() || !message.is_object() || !message.contains("type") ||
          !message["type"].is_string()) {
        return Status::Invalid("malformed control message: " +
                               std::string(buffer.data(), std::min<size_t>(received, 200)));
      }
      return std::optional<nlohmann::json>(std::move(message));
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) {
      // The peer closed with our messages unread. The error is reported once;
      // what it sent before closing (its stats) may still be queued.
      if (reset_seen) return std::optional<nlohmann::json>();
      reset_seen = true;
      continue;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return ErrnoError("recv on control connection", errno);
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return Status::TimedOut("no control message");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    pollfd entry{fd_, POLLIN, 0};
    int ready = ::poll(&entry, 1, static_cast<int>(std::min<int64_t>(left + 1, 1 << 30)));
    if (ready < 0 && errno != EINTR) return ErrnoError("poll on control connection", errno);
  }
}

Listener& Listener::operator=(Listener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

Result<Listener> Listener::Listen(const std::string& name) {
  FERRY_ASSIGN_OR_RAISE(auto fd, internal::ListenAbstract(AbstractName(name), name));
  Listener listener;
  listener.fd_ = fd.release();
  return listener;
}

Result<Connection> Listener::Accept() {
  FERRY_ASSIGN_OR_RAISE(auto fd, internal::AcceptPending(fd_));
  return Connection(fd.valid() ? fd.release() : -1);
}

}  // namespace ferry::flow::protocol
