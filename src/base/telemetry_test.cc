#include "ferry/base/telemetry.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ferry::telemetry {
namespace {

TEST(Telemetry, CountsFromManyThreads) {
  int64_t before = Get(Counter::kBytesCopiedHost);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 1000; ++i) Add(Counter::kBytesCopiedHost, 3);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(Get(Counter::kBytesCopiedHost) - before, 12000);
}

TEST(Telemetry, SnapshotNamesEveryCounterAndReason) {
  auto snapshot = Snapshot();
  EXPECT_EQ(snapshot.size(), static_cast<size_t>(static_cast<int>(Counter::kCount) +
                                                 static_cast<int>(FallbackReason::kCount)));
  EXPECT_TRUE(snapshot.count("bytes_copied_d2h"));
  EXPECT_TRUE(snapshot.count("fallback_consumer_needs_write"));
  for (const auto& [name, value] : snapshot) EXPECT_NE(name, "unknown");
}

TEST(Telemetry, FallbacksAreCountedByReason) {
  int64_t before = GetFallback(FallbackReason::kDifferentDeviceId);
  AddFallback(FallbackReason::kDifferentDeviceId, 2);
  EXPECT_EQ(GetFallback(FallbackReason::kDifferentDeviceId) - before, 2);
  EXPECT_EQ(Snapshot()["fallback_different_device_id"], before + 2);
}

TEST(Telemetry, PrometheusTextHasTypedCounters) {
  Add(Counter::kZeroCopyExports);
  std::string text = ToPrometheus();
  EXPECT_NE(text.find("# TYPE ferry_zero_copy_exports_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("ferry_fallbacks_total{reason=\"crosses_process\"} "), std::string::npos);
  // Every family says what it counts.
  for (int i = 0; i < static_cast<int>(Counter::kCount); ++i) {
    const std::string help =
        std::string("# HELP ferry_") + CounterName(static_cast<Counter>(i)) + "_total ";
    const size_t at = text.find(help);
    ASSERT_NE(at, std::string::npos) << help;
    EXPECT_NE(text[at + help.size()], '\n') << help;
  }
}

TEST(Telemetry, OutOfRangeCountersAreIgnored) {
  Add(Counter::kCount, 5);
  EXPECT_EQ(Get(Counter::kCount), 0);
}

}  // namespace
}  // namespace ferry::telemetry
