// `ferry top`: /proc sampling of a process group, rates from two samples,
// the table.
#include "cli/dataflow_top.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

namespace ferry::cli {
namespace {

using nlohmann::json;

TEST(DataflowTop, ReadsThisProcessGroup) {
  const int64_t group = ::getpgrp();
  // Burn a little CPU so that the group has some.
  volatile double sink = 0;
  for (int i = 0; i < 2'000'000; ++i) sink = sink + i * 0.5;
  auto usage = ReadGroupUsage({group, 999'999'999});
  ASSERT_EQ(usage.count(group), 1u);
  EXPECT_GE(usage[group].processes, 1);
  EXPECT_GT(usage[group].rss_bytes, 1 << 20);
  EXPECT_GE(usage[group].cpu_ticks, 0);
  EXPECT_EQ(usage.count(999'999'999), 0u);  // no such group
  EXPECT_TRUE(ReadGroupUsage({}).empty());
}

json Stats(int64_t messages, int64_t bytes, const json& queued) {
  return {{"type", "dataflow_stats"},
          {"dataflow", "df-1-abcd"},
          {"phase", "running"},
          {"nodes",
           {{{"id", "source"},
             {"state", "running"},
             {"pid", 100},
             {"restarts", 1},
             {"running_instance_reported", true},
             {"outputs",
              {{"out",
                {{"messages", messages},
                 {"bytes", bytes},
                 {"bytes_copied", bytes / 2},
                 {"drops", 0}}}}},
             {"inputs", json::object()}},
            {{"id", "sink"},
             {"state", "finished"},
             {"pid", -1},
             {"restarts", 0},
             {"outputs", json::object()},
             {"inputs", json::object()}}}},
          {"edges",
           {{{"edge", "source/out -> sink/in"},
             {"producer", "source"},
             {"consumer", "sink"},
             {"drops", 3},
             {"queued", queued}}}}};
}

TEST(DataflowTop, RatesFromTwoSamples) {
  TopSample before, after;
  before.stats = Stats(10, 1000, 2);
  before.usage[100] = {100, 4096, 1};
  before.at = std::chrono::steady_clock::now();
  after.stats = Stats(30, 5000, 5);
  after.usage[100] = {150, 8192, 2};
  after.at = before.at + std::chrono::seconds(2);
  const json rows = TopRows(&before, after, 100);
  EXPECT_EQ(rows["dataflow"], "df-1-abcd");
  const json& source = rows["nodes"][0];
  EXPECT_EQ(source["id"], "source");
  EXPECT_DOUBLE_EQ(source["cpu_percent"].get<double>(), 25.0);  // 50 ticks over 2 s at 100/s
  EXPECT_EQ(source["rss_bytes"], 8192);
  EXPECT_EQ(source["processes"], 2);
  EXPECT_EQ(source["messages"], 30);
  EXPECT_DOUBLE_EQ(source["messages_per_s"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(source["bytes_per_s"].get<double>(), 2000.0);
  EXPECT_EQ(source["bytes_copied"], 2500);
  EXPECT_EQ(source["restarts"], 1);
  const json& sink = rows["nodes"][1];
  EXPECT_EQ(sink["drops"], 3);
  EXPECT_EQ(sink["queued"], 5);
  EXPECT_TRUE(sink["cpu_percent"].is_null());
  EXPECT_TRUE(sink["rss_bytes"].is_null());

  const std::string table = FormatTop(rows);
  EXPECT_EQ(table.rfind("dataflow df-1-abcd (running)\nNODE", 0), 0u) << table;
  EXPECT_NE(table.find("25.0"), std::string::npos) << table;
  EXPECT_NE(table.find("8.0 KiB"), std::string::npos) << table;
}

TEST(DataflowTop, OneSampleHasNoRates) {
  TopSample only;
  only.stats = Stats(10, 1000, nullptr);
  only.usage[100] = {100, 4096, 1};
  const json rows = TopRows(nullptr, only, 100);
  EXPECT_TRUE(rows["nodes"][0]["cpu_percent"].is_null());
  EXPECT_TRUE(rows["nodes"][0]["messages_per_s"].is_null());
  EXPECT_EQ(rows["nodes"][0]["rss_bytes"], 4096);
  EXPECT_TRUE(rows["nodes"][1]["queued"].is_null());
  EXPECT_NE(FormatTop(rows).find("source"), std::string::npos);
}

TEST(DataflowTop, RatesFromTaps) {
  TopSample before, after;
  before.stats = Stats(10, 1000, 0);
  after.stats = Stats(10, 1000, 0);
  for (json* stats : {&before.stats, &after.stats}) {
    (*stats)["nodes"][0]["running_instance_reported"] = false;
  }
  before.tapped["source"] = {100, 8000};
  after.tapped["source"] = {150, 12000};
  before.at = std::chrono::steady_clock::now();
  after.at = before.at + std::chrono::milliseconds(500);
  const json rows = TopRows(&before, after, 100);
  EXPECT_DOUBLE_EQ(rows["nodes"][0]["messages_per_s"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(rows["nodes"][0]["bytes_per_s"].get<double>(), 8000.0);
  EXPECT_TRUE(rows["nodes"][1]["messages_per_s"].is_null());  // not tapped
}

TEST(DataflowTop, NoRatesWhileTheRunningInstanceHasNotReported) {
  TopSample before, after;
  before.stats = Stats(10, 1000, 0);
  after.stats = Stats(10, 1000, 0);
  for (json* stats : {&before.stats, &after.stats}) {
    (*stats)["nodes"][0]["running_instance_reported"] = false;
  }
  before.at = std::chrono::steady_clock::now();
  after.at = before.at + std::chrono::seconds(1);
  const json rows = TopRows(&before, after, 100);
  EXPECT_TRUE(rows["nodes"][0]["messages_per_s"].is_null());
  EXPECT_EQ(rows["nodes"][0]["messages"], 10);  // what ended instances reported
}

TEST(DataflowTop, MissingRunIsAnError) {
  std::ostringstream out, err;
  TopOptions options;
  options.run_id = "no-such-run-here";
  options.once = true;
  EXPECT_EQ(RunTop(options, out, err), 1);
  EXPECT_NE(err.str().find("no dataflow 'no-such-run-here' is running here"), std::string::npos)
      << err.str();
  options.run_id = "bad/name";
  EXPECT_EQ(RunTop(options, out, err), 1);
}

}  // namespace
}  // namespace ferry::cli
