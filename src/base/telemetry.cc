#include "ferry/base/telemetry.h"

#include <array>
#include <string>

#include "ferry/base/metrics.h"

namespace ferry::telemetry {
namespace {

constexpr int kNumCounters = static_cast<int>(Counter::kCount);
constexpr int kNumReasons = static_cast<int>(FallbackReason::kCount);

struct Registry {
  std::array<std::atomic<int64_t>, kNumCounters> counters{};
  std::array<std::atomic<int64_t>, kNumReasons> fallbacks{};
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: usable during exit
  return *instance;
}

}  // namespace

const char* CounterName(Counter counter) {
  switch (counter) {
    case Counter::kBytesCopiedH2D:
      return "bytes_copied_h2d";
    case Counter::kBytesCopiedD2H:
      return "bytes_copied_d2h";
    case Counter::kBytesCopiedD2D:
      return "bytes_copied_d2d";
    case Counter::kBytesCopiedHost:
      return "bytes_copied_host";
    case Counter::kZeroCopyExports:
      return "zero_copy_exports";
    case Counter::kZeroCopyImports:
      return "zero_copy_imports";
    case Counter::kSchemaExports:
      return "schema_exports";
    case Counter::kSchemaImports:
      return "schema_imports";
    case Counter::kStreamBatchesExported:
      return "stream_batches_exported";
    case Counter::kStreamBatchesImported:
      return "stream_batches_imported";
    case Counter::kEventWaits:
      return "event_waits";
    case Counter::kEventWaitNanos:
      return "event_wait_nanos";
    case Counter::kReleases:
      return "releases";
    case Counter::kForeignReleases:
      return "foreign_releases";
    case Counter::kReleaseErrors:
      return "release_errors";
    case Counter::kValidationErrors:
      return "validation_errors";
    case Counter::kCount:
      break;
  }
  return "unknown";
}

const char* FallbackReasonName(FallbackReason reason) {
  switch (reason) {
    case FallbackReason::kUnsupportedDeviceType:
      return "unsupported_device_type";
    case FallbackReason::kDifferentDeviceId:
      return "different_device_id";
    case FallbackReason::kDifferentContext:
      return "different_context";
    case FallbackReason::kEventKindNotImportable:
      return "event_kind_not_importable";
    case FallbackReason::kLifetimeNotProvable:
      return "lifetime_not_provable";
    case FallbackReason::kCrossesProcess:
      return "crosses_process";
    case FallbackReason::kConsumerNeedsWrite:
      return "consumer_needs_write";
    case FallbackReason::kCount:
      break;
  }
  return "unknown";
}

void Add(Counter counter, int64_t value) noexcept {
  int index = static_cast<int>(counter);
  if (index < 0 || index >= kNumCounters) return;
  registry().counters[index].fetch_add(value, std::memory_order_relaxed);
}

void AddFallback(FallbackReason reason, int64_t value) noexcept {
  int index = static_cast<int>(reason);
  if (index < 0 || index >= kNumReasons) return;
  registry().fallbacks[index].fetch_add(value, std::memory_order_relaxed);
}

int64_t Get(Counter counter) noexcept {
  int index = static_cast<int>(counter);
  if (index < 0 || index >= kNumCounters) return 0;
  return registry().counters[index].load(std::memory_order_relaxed);
}

int64_t GetFallback(FallbackReason reason) noexcept {
  int index = static_cast<int>(reason);
  if (index < 0 || index >= kNumReasons) return 0;
  return registry().fallbacks[index].load(std::memory_order_relaxed);
}

std::map<std::string, int64_t> Snapshot() {
  std::map<std::string, int64_t> out;
  for (int i = 0; i < kNumCounters; ++i) {
    out[CounterName(static_cast<Counter>(i))] = Get(static_cast<Counter>(i));
  }
  for (int i = 0; i < kNumReasons; ++i) {
    auto reason = static_cast<FallbackReason>(i);
    out[std::string("fallback_") + FallbackReasonName(reason)] = GetFallback(reason);
  }
  return out;
}

namespace {

const char* CounterHelp(Counter counter) {
  switch (counter) {
    case Counter::kBytesCopiedH2D:
      return "Bytes copied from host to device memory.";
    case Counter::kBytesCopiedD2H:
      return "Bytes copied from device to host memory.";
    case Counter::kBytesCopiedD2D:
      return "Bytes copied between device memories.";
    case Counter::kBytesCopiedHost:
      return "Bytes copied in host memory (explicit copies and fallbacks).";
    case Counter::kZeroCopyExports:
      return "Arrays and batches exported without copying their buffers.";
    case Counter::kZeroCopyImports:
      return "Arrays and batches imported without copying their buffers.";
    case Counter::kSchemaExports:
      return "Schemas exported through the C Data Interface.";
    case Counter::kSchemaImports:
      return "Schemas imported through the C Data Interface.";
    case Counter::kStreamBatchesExported:
      return "Batches handed out by exported C streams.";
    case Counter::kStreamBatchesImported:
      return "Batches read from imported C streams.";
    case Counter::kEventWaits:
      return "Device sync-event waits performed.";
    case Counter::kEventWaitNanos:
      return "Nanoseconds spent waiting on device sync events.";
    case Counter::kReleases:
      return "Release callbacks run for structs Ferry exported.";
    case Counter::kForeignReleases:
      return "Release callbacks of foreign structs Ferry invoked.";
    case Counter::kReleaseErrors:
      return "Release misuse caught (double release, missing callback).";
    case Counter::kValidationErrors:
      return "Imports refused by structural validation.";
    case Counter::kCount:
      break;
  }
  return "";
}

}  // namespace

std::string ToPrometheus() {
  metrics::Writer writer;
  for (int i = 0; i < kNumCounters; ++i) {
    auto counter = static_cast<Counter>(i);
    const std::string name = std::string("ferry_") + CounterName(counter) + "_total";
    writer.Family(name, "counter", CounterHelp(counter));
    writer.Sample(name, {}, static_cast<double>(Get(counter)));
  }
  writer.Family("ferry_fallbacks_total", "counter",
                "Zero-copy exchanges that fell back to a copy or were refused, by reason.");
  for (int i = 0; i < kNumReasons; ++i) {
    auto reason = static_cast<FallbackReason>(i);
    writer.Sample("ferry_fallbacks_total", {{"reason", FallbackReasonName(reason)}},
                  static_cast<double>(GetFallback(reason)));
  }
  return writer.Take();
}

void Reset() noexcept {
  for (auto& counter : registry().counters) counter.store(0, std::memory_order_relaxed);
  for (auto& counter : registry().fallbacks) counter.store(0, std::memory_order_relaxed);
}

}  // namespace ferry::telemetry
