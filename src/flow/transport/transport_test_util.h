// Helpers for the transport tests: unique channel names, bounded child
// processes, publishers and subscribers wired in this process, batches built
// in any pool, checksums, and counts of open file descriptors and memfd
// mappings (leak checks).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "ferry/exchange/array.h"
#include "ferry/exchange/builder.h"
#include "ferry/flow/transport.h"

// In a forked child (a body run by ForkChild): reports the failed condition
// on stderr and returns `code`, which becomes the child's exit code.
#define CHILD_CHECK(condition, code)                                           \
  do {                                                                         \
    if (!(condition)) {                                                        \
      std::fprintf(stderr, "child check failed (%d): %s\n", code, #condition); \
      return code;                                                             \
    }                                                                          \
  } while (false)

namespace ferry::flow::testing {

// Distinct per process and per call, so that parallel test runs never meet.
inline std::string UniqueChannel(const std::string& what) {
  static std::atomic<int> counter{0};
  return "test/" + std::to_string(::getpid()) + "/" + std::to_string(counter++) + "/" + what;
}

// Runs `body` in a forked child and exits with its return value (never
// returns in the child). Call only while the process has a single thread.
inline pid_t ForkChild(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    code = body();
    std::fflush(nullptr);
    ::_exit(code);
  }
  return pid;
}

// Waits for `pid` at most `timeout`; kills it if it overruns. Returns its exit
// code, 128 + signal when killed by a signal, or -1 on timeout.
inline int WaitChild(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -2;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// A pipe for simple child/parent hand-shakes (one byte or one line at a time).
struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
  Pipe() {
    int fds[2];
    if (::pipe(fds) == 0) {
      read_fd = fds[0];
      write_fd = fds[1];
    }
  }
  ~Pipe() {
    if (read_fd >= 0) ::close(read_fd);
    if (write_fd >= 0) ::close(write_fd);
  }
  void Signal(char value = 'x') const { (void)!::write(write_fd, &value, 1); }
  void Write(const std::string& text) const { (void)!::write(write_fd, text.data(), text.size()); }
  // Waits for one byte; false after `timeout` or EOF.
  bool Await(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  // Reads until EOF (after the writer closed it) or timeout.
  std::string ReadAll(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  void CloseWrite() {
    if (write_fd >= 0) ::close(write_fd);
    write_fd = -1;
  }
};

// Creates a publisher; a failure is a test failure and yields nullptr.
std::unique_ptr<Publisher> MakePublisher(const std::string& name, PublisherOptions options = {});

// Connects a subscriber in a helper thread while this thread lets the
// publisher accept it (until it has `expected_subscribers`). A failure is a
// test failure and yields nullptr.
std::unique_ptr<Subscriber> ConnectHere(Publisher& publisher, int expected_subscribers,
                                        SubscriberOptions options = {});

// Calls publisher.Poll() every `interval` until `predicate` holds; false once
// `timeout` has passed without it.
template <typename Predicate>
bool PollUntil(Publisher& publisher, Predicate predicate,
               std::chrono::milliseconds timeout = std::chrono::seconds(5),
               std::chrono::microseconds interval = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    (void)publisher.Poll();
    if (predicate()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(interval);
  }
}

// A batch of `rows` rows with columns "id" (int64: seed + row) and "text"
// (utf8: "v<seed+row>"), built in `pool`.
Result<RecordBatchPtr> MakeBatch(MemoryPool* pool, int64_t rows, int64_t seed);
// A batch with one int64 column "other" (a different schema).
Result<RecordBatchPtr> MakeOtherBatch(MemoryPool* pool, int64_t rows, int64_t seed);
// A batch whose single binary column holds one value of `bytes` bytes
// derived from `seed`.
Result<RecordBatchPtr> MakeBlobBatch(MemoryPool* pool, int64_t bytes, int64_t seed);
// True when `batch` is exactly MakeBatch(_, rows, seed).
bool BatchMatches(const RecordBatch& batch, int64_t rows, int64_t seed);
// A child's check that `subscriber` receives sequences 1..count in order,
// each MakeBatch(_, rows, sequence), waiting at most `timeout` for each:
// 0, or the CHILD_CHECK code of the first failure (3: no message, 4: wrong
// sequence, 5: wrong contents).
int ReceiveSequence(Subscriber& subscriber, int64_t count, int64_t rows,
                    std::chrono::nanoseconds timeout);
// FNV-1a over every buffer's bytes.
uint64_t Checksum(const RecordBatch& batch);
// Sum of the sizes of all present buffers.
int64_t BufferBytes(const RecordBatch& batch);

// The /proc/self/maps entry holding `address`: its permissions ("r--s"),
// the mapped file's name and the file offset of `address`.
struct MappingInfo {
  std::string permissions;
  std::string file;
  int64_t file_offset = 0;
};
std::optional<MappingInfo> FindMapping(const void* address);

int CountOpenFds();
// Lines of /proc/self/maps that map a Ferry memfd.
int CountFerryMappings();

}  // namespace ferry::flow::testing
