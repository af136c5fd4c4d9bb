// Process-wide telemetry: counters that prove (or disprove) zero-copy claims.
// Every counter is a relaxed atomic: safe from any thread, no locks on the
// hot path. Readable from C++ (Snapshot), the C API (ferry_telemetry_*),
// Python (ferry.telemetry()) and Prometheus text (ToPrometheus).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace ferry::telemetry {

enum class Counter : int {
  kBytesCopiedH2D,   // host → device
  kBytesCopiedD2H,   // device → host
  kBytesCopiedD2D,   // device → device
  kBytesCopiedHost,  // host memcpy (e.g. CopyOf, send_copy)
  kZeroCopyExports,  // arrays/batches exported without a copy
  kZeroCopyImports,  // arrays/batches imported without a copy
  kSchemaExports,
  kSchemaImports,
  kStreamBatchesExported,
  kStreamBatchesImported,
  kEventWaits,        // sync-event waits performed
  kEventWaitNanos,    // total time spent in those waits
  kReleases,          // release callbacks Ferry ran for structs it exported
  kForeignReleases,   // release callbacks of foreign structs Ferry invoked
  kReleaseErrors,     // release on an already released struct, null release, ...
  kValidationErrors,  // imports rejected by validation
  kCount,             // number of counters (not a counter)
};

// Reasons a zero-copy exchange fell back to a copy or was refused.
enum class FallbackReason : int {
  kUnsupportedDeviceType,
  kDifferentDeviceId,
  kDifferentContext,
  kEventKindNotImportable,
  kLifetimeNotProvable,
  kCrossesProcess,
  kConsumerNeedsWrite,
  kCount,
};

const char* CounterName(Counter counter);          // e.g. "bytes_copied_h2d"
const char* FallbackReasonName(FallbackReason r);  // e.g. "different_device_id"

void Add(Counter counter, int64_t value = 1) noexcept;
void AddFallback(FallbackReason reason, int64_t value = 1) noexcept;
int64_t Get(Counter counter) noexcept;
int64_t GetFallback(FallbackReason reason) noexcept;
// All counters by name; fallbacks as "fallback_<reason>".
std::map<std::string, int64_t> Snapshot();
// Prometheus text exposition format (counters prefixed "ferry_").
std::string ToPrometheus();
// Zeroes every counter (tests and benchmarks only; racy with concurrent adds).
void Reset() noexcept;

}  // namespace ferry::telemetry
