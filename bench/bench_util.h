// Pieces the plain (non-Google-Benchmark) benchmark programs share: the
// monotonic clock, the sample counts of bench/transport/common.py, latency
// percentiles, numbers stamped into metadata, FERRY_BENCH_CPUS and pinning,
// the receiver process of a two-process run, JSON result files and fatal
// error checks. Header-only; each program includes it once.
#pragma once

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
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

// What a latency record says of its samples: how many, and the p50, p99 and
// p99.9 in microseconds.
struct LatencySummary {
  size_t samples = 0;
  double p50_us = NAN;
  double p99_us = NAN;
  double p999_us = NAN;
};

inline LatencySummary Summarize(std::vector<int64_t> latencies_ns) {
  std::sort(latencies_ns.begin(), latencies_ns.end());
  return {latencies_ns.size(), Percentile(latencies_ns, 0.50) / 1e3,
          Percentile(latencies_ns, 0.99) / 1e3, Percentile(latencies_ns, 0.999) / 1e3};
}

// The summary's fields in a JSON record, as bench/transport/common.py's
// record() names them: "samples", "p50_us", "p99_us", "p999_us".
inline std::string LatencyJsonFields(const LatencySummary& summary) {
  char text[160];
  std::snprintf(text, sizeof(text),
                "\"samples\": %zu, \"p50_us\": %.3f, \"p99_us\": %.3f, \"p999_us\": %.3f",
                summary.samples, summary.p50_us, summary.p99_us, summary.p999_us);
  return text;
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

// The options the latency benchmarks share; each program's Options derives
// from it and sets its own modes. `sizes` are bench/transport/common.py's.
struct CommonOptions {
  std::string json_path;
  std::vector<std::string> modes;
  std::vector<int64_t> sizes = {8,         64,        512,        2048,      4096,
                                16 * 1024, 40 * 1024, 400 * 1024, 4'000'000, 40'000'000};
  bool quick = false;
  int timeout_seconds = 150;
};

// Parses the flags the latency benchmarks share (--json=PATH, --modes=a,b,
// --sizes=8,64,..., --timeout=SECONDS, --quick) into CommonOptions' members.
// False when `arg` is none of them.
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

// Where FERRY_BENCH_CPUS puts sender and receiver, as the results record it:
// "unpinned", "same core" or "two cores".
inline std::string Placement() {
  const auto cpus = CpuPair();
  return !cpus ? "unpinned" : (cpus->first == cpus->second ? "same core" : "two cores");
}

// Pins this process (and the threads it starts later) to `cpu`; a failure is
// reported, not fatal.
inline void PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) std::perror("sched_setaffinity");
}

// After ParseCommonFlag: exits (2) when a mode is neither `first` nor
// `second`, and BENCH_QUICK=1 in the environment means --quick.
template <typename Options>
void FinishCommonFlags(Options* options, const char* first, const char* second) {
  for (const auto& mode : options->modes) {
    if (mode != first && mode != second) {
      std::fprintf(stderr, "unknown mode '%s' (%s or %s)\n", mode.c_str(), first, second);
      std::exit(2);
    }
  }
  if (const char* quick = std::getenv("BENCH_QUICK"); quick && std::string_view(quick) == "1") {
    options->quick = true;
  }
}

// Forks the receiver of a two-process run: returns its pid in the parent, 0
// in the receiver, -1 (reported) when fork failed. The receiver dies with
// the parent, whatever ends it.
inline pid_t ForkReceiver() {
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return -1;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
  }
  return child;
}

// Waits for the receiver that ForkReceiver started; false (reported) unless
// it exited with 0.
inline bool ReceiverSucceeded(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s: the receiver failed (status %d)\n", program_invocation_short_name,
                 status);
    return false;
  }
  return true;
}

// Writes `objects` (one JSON object each) to `path` as a JSON array, one
// object a line; false (reported) when the file could not be written.
inline bool WriteJsonArray(const std::string& path, const std::vector<std::string>& objects) {
  std::ofstream out(path);
  out << "[\n";
  for (size_t i = 0; i < objects.size(); ++i) {
    out << " " << objects[i] << (i + 1 < objects.size() ? ",\n" : "\n");
  }
  out << "]\n";
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace ferry::flow::bench
