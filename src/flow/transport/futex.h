// Waiting primitives shared by both ends of a channel: futex wait/wake on a
// 32-bit word in shared memory (process-shared, so no FUTEX_PRIVATE_FLAG),
// deadlines on the monotonic clock, and the spin/busy-poll policy of
// WaitStrategy. Thread-safe; none of this allocates.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "ferry/flow/transport.h"

namespace ferry::flow::internal {

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

using Clock = std::chrono::steady_clock;

// A point on the monotonic clock; "infinite" when built from a huge timeout.
class Deadline {
 public:
  explicit Deadline(std::chrono::nanoseconds timeout);
  static Deadline Never() { return Deadline(std::chrono::nanoseconds::max()); }

  bool Expired() const { return Clock::now() >= at_; }
  // Time left, never negative; capped at `cap`.
  std::chrono::nanoseconds Remaining(
      std::chrono::nanoseconds cap = std::chrono::nanoseconds::max()) const;

 private:
  Clock::time_point at_;
};

// A Deadline that reads the clock only when first asked: most sends and
// receives never wait, and a clock read costs tens of nanoseconds.
class LazyDeadline {
 public:
  explicit LazyDeadline(std::chrono::nanoseconds timeout) : timeout_(timeout) {}
  const Deadline& get() {
    if (!deadline_.has_value()) deadline_.emplace(timeout_);
    return *deadline_;
  }

 private:
  std::chrono::nanoseconds timeout_;
  std::optional<Deadline> deadline_;
};

// CLOCK_MONOTONIC_COARSE in nanoseconds: a few times cheaper than
// Clock::now() (no time-stamp counter read) but only as fine as the kernel
// tick (1-4 ms). For rate limits of periodic checks.
int64_t CoarseNowNs() noexcept;

// Sleeps while *word == expected, at most `timeout` (rounded to whole
// nanoseconds). Returns on a wake, a value change, a signal or the timeout;
// callers re-check their condition, so the reason is not reported.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected,
               std::chrono::nanoseconds timeout) noexcept;
// Wakes up to `count` waiters of `word` in any process that maps it.
void FutexWake(const std::atomic<uint32_t>* word, int count = 1 << 30) noexcept;

// One iteration of a spin loop: tells the CPU we are spinning.
inline void CpuRelax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

// Spins until `ready()` is true or `spin` has passed or `deadline` expires.
// Returns ready()'s last value. Reads the clock only every few iterations.
template <typename Ready>
bool SpinUntil(Ready&& ready, std::chrono::nanoseconds spin, const Deadline& deadline) {
  if (ready()) return true;
  if (spin <= std::chrono::nanoseconds::zero()) return false;
  const Clock::time_point spin_end = Clock::now() + spin;
  for (uint32_t iteration = 1;; ++iteration) {
    CpuRelax();
    if (ready()) return true;
    if ((iteration & 63) == 0) {
      const Clock::time_point now = Clock::now();
      if (now >= spin_end || deadline.Expired()) return ready();
    }
  }
}

}  // namespace ferry::flow::internal
