// Operating-system plumbing of the transport: owned file descriptors, memory
// mappings, sealed memfd segments, SOCK_SEQPACKET unix sockets in the
// abstract namespace (nothing on disk, gone when the owner dies) with
// SCM_RIGHTS file-descriptor passing, peer credentials and pidfds.
//
// Everything returns Status/Result; errno is folded into IOError messages.
// Thread-compatible: UniqueFd and Mapping are move-only values.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/base/status.h"

namespace ferry::flow::internal {

// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// One shared mapping of a file; unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  ~Mapping() { reset(); }
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  // Maps `size` bytes of `fd` from offset 0, shared; read-only unless `writable`.
  static Result<Mapping> Map(int fd, int64_t size, bool writable);

  uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  bool valid() const { return data_ != nullptr; }
  void reset();

 private:
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

// Creates a memfd of `size` bytes named `debug_name` (shown in
// /proc/<pid>/maps), close-on-exec, with its size sealed (no shrink, no grow,
// no further seals) so that a peer mapping it can never be hit by SIGBUS.
Result<UniqueFd> CreateSealedMemfd(const std::string& debug_name, int64_t size);
// The size of a memfd received from a peer, after checking that it is a
// regular file whose size is sealed against shrinking.
Result<int64_t> SealedSize(int fd);
// A read-only descriptor of the same memfd (through /proc/self/fd): a peer
// given it cannot map the memory writable. Falls back to a duplicate when
// /proc is unavailable.
Result<UniqueFd> ReopenReadOnly(int fd);

// The abstract socket address of channel `name`: "\0ferry/<name>".
std::string ChannelSocketName(std::string_view name);
// Binds and listens (non-blocking, close-on-exec). EADDRINUSE becomes Invalid
// "already has a publisher".
Result<UniqueFd> ListenAbstract(const std::string& abstract_name, std::string_view channel);
// Connects (blocking socket, close-on-exec). Absent listener: IOError with
// `*retryable` set, so that the caller can retry until its deadline.
Result<UniqueFd> ConnectAbstract(const std::string& abstract_name, bool* retryable);
// Accepts one pending connection (non-blocking); an invalid fd when none.
Result<UniqueFd> AcceptPending(int listen_fd);

inline constexpr int kMaxPassedFds = 4;
// Sends one datagram with up to kMaxPassedFds descriptors. Never blocks for
// longer than `timeout_ms` (a peer that does not drain its socket is an
// error, not a hang). EPIPE/ECONNRESET: IOError "peer closed".
Status SendPacket(int socket_fd, const void* data, size_t size, const int* fds, int fd_count,
                  int timeout_ms = 1000);

struct ReceivedPacket {
  // Bytes of the datagram (0 and `closed` when the peer hung up; 0 and
  // !closed when nothing was waiting).
  size_t size = 0;
  bool closed = false;
  bool truncated = false;  // datagram or descriptors did not fit: reject it
  std::array<UniqueFd, kMaxPassedFds> fds;
  int fd_count = 0;
};
// Receives one datagram without blocking (descriptors arrive close-on-exec;
// any beyond kMaxPassedFds are closed and reported as truncated).
Result<ReceivedPacket> ReceivePacket(int socket_fd, void* buffer, size_t capacity);

// The pid of the process at the other end of a connected unix socket.
Result<pid_t> PeerPid(int socket_fd);
// pidfd_open(2): readable once the process has exited.
Result<UniqueFd> OpenPidfd(pid_t pid);
// Waits at most `timeout_ms` for any of `fds` to become readable or hang up;
// returns true if one did.
bool PollReadable(const int* fds, int count, int timeout_ms);

// "what: strerror(errno)" as an IOError.
Status ErrnoStatus(const std::string& what, int error_number);

}  // namespace ferry::flow::internal
