// Pieces the plain (non-Google-Benchmark) benchmark programs share: the
// monotonic clock, the sample counts of bench/transport/common.py, latency
// percentiles, numbers stamped into metadata, FERRY_BENCH_CPUS and fatal
// error checks. Header-only; each program includes it once.
#pragma once

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/exchange/type.h"

namespace ferry::flow::bench {

// CLOCK_MONOTONIC in nanoseconds: comparable across the processes of a run.
inline int64_t NowNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

// Same counts as bench/transport/common.py, so every system gets the same
// number of samples per size.
inline int LatencyIterations(int64_t size, bool quick) {
  if (quick) return size <= 400 * 1024 ? 200 : 20;
  if (size <= 40 * 1024) return 3000;
  if (size <= 400 * 1024) return 1000;
  if (size <= 4'000'000) return 300;
  return 60;
}

// The `q` quantile (nearest rank) of ascending `sorted`; NaN when empty.
inline double Percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return NAN;
  const size_t rank = std::max<size_t>(1, static_cast<size_t>(std::ceil(q * sorted.size())));
  return static_cast<double>(sorted[std::min(rank, sorted.size()) - 1]);
}

// Prints "<program>: <what>: <status>" and exits at once (no destructors:
// a benchmark child may hold shared memory that its parent cleans up).
[[noreturn]] inline void Fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what.c_str(),
               status.ToString().c_str());
  std::fflush(stderr);
  _exit(1);
}

// `what` is a plain string so that checking a call on the hot path costs
// nothing when it succeeds.
template <typename T>
T Check(Result<T> result, const char* what) {
  if (!result.ok()) Fail(what, result.status());
  return result.MoveValueUnsafe();
}

inline void Check(const Status& status, const char* what) {
  if (!status.ok()) Fail(what, status);
}

// Decimal integers in metadata values, written into strings that keep their
// capacity, so stamping a message allocates nothing.
inline void WriteNumber(std::string& out, int64_t value) {
  out.resize(24);
  const char* end = std::to_chars(out.data(), out.data() + out.size(), value).ptr;
  out.resize(static_cast<size_t>(end - out.data()));
}

// The number under `key` in `metadata`; -1 when absent or not a number.
inline int64_t ReadNumber(const Metadata& metadata, std::string_view key) {
  for (const auto& [name, value] : metadata) {
    if (name == key) {
      int64_t number = -1;
      std::from_chars(value.data(), value.data() + value.size(), number);
      return number;
    }
  }
  return -1;
}

// "a,b,c" -> {"a", "b", "c"}; an empty text gives no parts.
inline std::vector<std::string> Split(std::string_view text) {
  std::vector<std::string> parts;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    parts.emplace_back(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return parts;
}

// Parses the flags the latency benchmarks share (--json=PATH, --modes=a,b,
// --sizes=8,64,..., --timeout=SECONDS, --quick) into an options struct with
// those members. False when `arg` is none of them.
template <typename Options>
bool ParseCommonFlag(std::string_view arg, Options* options) {
  auto value = [&](std::string_view prefix) -> std::optional<std::string_view> {
    if (arg.substr(0, prefix.size()) != prefix) return std::nullopt;
    return arg.substr(prefix.size());
  };
  if (auto path = value("--json=")) {
    options->json_path = std::string(*path);
  } else if (auto modes = value("--modes=")) {
    options->modes = Split(*modes);
  } else if (auto sizes = value("--sizes=")) {
    options->sizes.clear();
    for (const auto& size : Split(*sizes)) options->sizes.push_back(std::stoll(size));
  } else if (auto timeout = value("--timeout=")) {
    options->timeout_seconds = std::stoi(std::string(*timeout));
  } else if (arg == "--quick") {
    options->quick = true;
  } else {
    return false;
  }
  return true;
}

// The cores of FERRY_BENCH_CPUS ("sender,receiver"; default "0,1", "" = let
// the scheduler place them), as bench/transport/common.py reads it.
inline std::optional<std::pair<int, int>> CpuPair() {
  const char* text = std::getenv("FERRY_BENCH_CPUS");
  std::string value = text ? text : (sysconf(_SC_NPROCESSORS_ONLN) >= 2 ? "0,1" : "");
  const std::vector<std::string> cpus = Split(value);
  if (cpus.size() != 2) return std::nullopt;
  return std::make_pair(std::stoi(cpus[0]), std::stoi(cpus[1]));
}

}  // namespace ferry::flow::bench
