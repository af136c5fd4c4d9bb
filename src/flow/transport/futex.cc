#include "flow/transport/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

namespace ferry::flow::internal {

Deadline::Deadline(std::chrono::nanoseconds timeout) {
  const Clock::time_point now = Clock::now();
  // Saturate instead of overflowing the clock's representation.
  const auto headroom = Clock::time_point::max() - now;
  at_ = timeout >= headroom ? Clock::time_point::max()
                            : now + std::chrono::duration_cast<Clock::duration>(
                                        std::max(timeout, std::chrono::nanoseconds::zero()));
}

std::chrono::nanoseconds Deadline::Remaining(std::chrono::nanoseconds cap) const {
  const Clock::time_point now = Clock::now();
  if (now >= at_) return std::chrono::nanoseconds::zero();
  const auto left = at_ - now;
  if (left >= cap) return cap;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(left);
}

int64_t CoarseNowNs() noexcept {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected,
               std::chrono::nanoseconds timeout) noexcept {
  if (timeout <= std::chrono::nanoseconds::zero()) return;
  timespec relative{};
  relative.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  relative.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // EAGAIN (value changed), EINTR and ETIMEDOUT all mean "re-check".
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, &relative,
          nullptr, 0);
}

void FutexWake(const std::atomic<uint32_t>* word, int count) noexcept {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr,
          0);
}

}  // namespace ferry::flow::internal
