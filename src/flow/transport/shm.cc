#include "flow/transport/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace ferry::flow::internal {

Status ErrnoStatus(const std::string& what, int error_number) {
  return Status::IOError(what + ": " + std::strerror(error_number));
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Mapping::Mapping(Mapping&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void Mapping::reset() {
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(size_));
  data_ = nullptr;
  size_ = 0;
}

Result<Mapping> Mapping::Map(int fd, int64_t size, bool writable) {
  if (size <= 0) return Status::Invalid("cannot map " + std::to_string(size) + " bytes");
  const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* address = ::mmap(nullptr, static_cast<size_t>(size), protection, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    return ErrnoStatus("mmap of " + std::to_string(size) + " bytes", errno);
  }
  Mapping mapping;
  mapping.data_ = static_cast<uint8_t*>(address);
  mapping.size_ = size;
  return mapping;
}

Result<UniqueFd> CreateSealedMemfd(const std::string& debug_name, int64_t size) {
  if (size <= 0)
    return Status::Invalid("a segment needs a positive size, got " + std::to_string(size));
  UniqueFd fd(static_cast<int>(
      ::syscall(SYS_memfd_create, debug_name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!fd.valid()) return ErrnoStatus("memfd_create", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return ErrnoStatus("ftruncate of a memfd to " + std::to_string(size) + " bytes", errno);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return ErrnoStatus("sealing a memfd", errno);
  }
  return fd;
}

Result<int64_t> SealedSize(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return ErrnoStatus("fstat of a received segment", errno);
  if (!S_ISREG(info.st_mode)) return Status::Invalid("a received segment is not a memory file");
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    // An unsealed file could be truncated under our mapping (SIGBUS on read).
    return Status::Invalid("a received segment is not sealed against shrinking");
  }
  return static_cast<int64_t>(info.st_size);
}

Result<UniqueFd> ReopenReadOnly(int fd) {
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  UniqueFd read_only(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (read_only.valid()) return read_only;
  UniqueFd duplicate(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!duplicate.valid()) return ErrnoStatus("duplicating a segment descriptor", errno);
  return duplicate;
}

std::string ChannelSocketName(std::string_view name) {
  std::string abstract_name(1, '\0');
  abstract_name += "ferry/";
  abstract_name += name;
  return abstract_name;
}

namespace {

Result<socklen_t> FillAddress(const std::string& abstract_name, sockaddr_un* address) {
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  if (abstract_name.size() > sizeof(address->sun_path)) {
    return Status::Invalid("socket name too long: " + std::to_string(abstract_name.size()));
  }
  std::memcpy(address->sun_path, abstract_name.data(), abstract_name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + abstract_name.size());
}

}  // namespace

Result<UniqueFd> ListenAbstract(const std::string& abstract_name, std::string_view channel) {
  sockaddr_un address{};
  FERRY_ASSIGN_OR_RAISE(socklen_t length, FillAddress(abstract_name, &address));
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    if (errno == EADDRINUSE) {
      return Status::Invalid("channel '" + std::string(channel) +
                             "' already has a live publisher (name in use)");
    }
    return ErrnoStatus("bind of channel '" + std::string(channel) + "'", errno);
  }
  if (::listen(fd.get(), 128) != 0) return ErrnoStatus("listen", errno);
  return fd;
}

Result<UniqueFd> ConnectAbstract(const std::string& abstract_name, bool* retryable) {
  *retryable = false;
  sockaddr_un address{};
  FERRY_ASSIGN_OR_RAISE(socklen_t length, FillAddress(abstract_name, &address));
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  int result;
  do {
    result = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), length);
  } while (result != 0 && errno == EINTR);
  if (result != 0) {
    const int error_number = errno;
    *retryable = error_number == ECONNREFUSED || error_number == ENOENT || error_number == EAGAIN;
    return ErrnoStatus("connect", error_number);
  }
  return fd;
}

Result<UniqueFd> AcceptPending(int listen_fd) {
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return UniqueFd(fd);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) return UniqueFd();
    return ErrnoStatus("accept", errno);
  }
}

Status SendPacket(int socket_fd, const void* data, size_t size, const int* fds, int fd_count,
                  int timeout_ms) {
  if (fd_count < 0 || fd_count > kMaxPassedFds) {
    return Status::Invalid("cannot pass " + std::to_string(fd_count) + " descriptors at once");
  }
  iovec vector{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  msghdr message{};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  if (fd_count > 0) {
    std::memset(control, 0, sizeof(control));
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<size_t>(fd_count));
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<size_t>(fd_count));
    std::memcpy(CMSG_DATA(header), fds, sizeof(int) * static_cast<size_t>(fd_count));
  }
  for (;;) {
    ssize_t sent = ::sendmsg(socket_fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent == static_cast<ssize_t>(size)) return Status::OK();
    if (sent >= 0) return Status::IOError("short send on a packet socket");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd waiting{socket_fd, POLLOUT, 0};
      int ready = ::poll(&waiting, 1, timeout_ms);
      if (ready > 0 && (waiting.revents & POLLOUT) != 0) continue;
      if (ready < 0 && errno == EINTR) continue;
      return Status::TimedOut("peer does not drain its socket");
    }
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
      return Status::IOError("peer closed the socket");
    }
    return ErrnoStatus("sendmsg", errno);
  }
}

Result<ReceivedPacket> ReceivePacket(int socket_fd, void* buffer, size_t capacity) {
  ReceivedPacket packet;
  iovec vector{buffer, capacity};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  msghdr message{};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t received;
  do {
    received = ::recvmsg(socket_fd, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (received < 0 && errno == EINTR);
  if (received < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return packet;
    if (errno == ECONNRESET) {
      packet.closed = true;
      return packet;
    }
    return ErrnoStatus("recvmsg", errno);
  }
  // Take ownership of every descriptor first so that none can leak.
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t index = 0; index < count; ++index) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + index * sizeof(int), sizeof(int));
      if (packet.fd_count < kMaxPassedFds) {
        packet.fds[static_cast<size_t>(packet.fd_count++)].reset(fd);
      } else {
        ::close(fd);
        packet.truncated = true;
      }
    }
  }
  if ((message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) packet.truncated = true;
  if (received == 0 && packet.fd_count == 0) {
    packet.closed = true;  // SOCK_SEQPACKET: a zero-length read is the peer's hang-up
    return packet;
  }
  packet.size = static_cast<size_t>(received);
  return packet;
}

Result<pid_t> PeerPid(int socket_fd) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return ErrnoStatus("SO_PEERCRED", errno);
  }
  if (credentials.pid <= 0) return Status::IOError("the peer's pid is unknown");
  return credentials.pid;
}

Result<UniqueFd> OpenPidfd(pid_t pid) {
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
  UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd.valid()) return ErrnoStatus("pidfd_open(" + std::to_string(pid) + ")", errno);
  // pidfds are not close-on-exec by default on older kernels.
  ::fcntl(fd.get(), F_SETFD, FD_CLOEXEC);
  return fd;
}

bool PollReadable(const int* fds, int count, int timeout_ms) {
  pollfd waiting[8];
  if (count > 8) count = 8;
  int used = 0;
  for (int index = 0; index < count; ++index) {
    if (fds[index] < 0) continue;
    waiting[used++] = pollfd{fds[index], POLLIN, 0};
  }
  if (used == 0) return false;
  int ready;
  do {
    ready = ::poll(waiting, static_cast<nfds_t>(used), timeout_ms);
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

}  // namespace ferry::flow::internal
