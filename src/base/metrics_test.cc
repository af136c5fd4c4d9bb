#include "ferry/base/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace ferry::metrics {
namespace {

TEST(MetricsTest, NamesFollowPrometheusRules) {
  EXPECT_TRUE(IsValidMetricName("ferry_jobs"));
  EXPECT_TRUE(IsValidMetricName("ferry:job_rate5m"));
  EXPECT_TRUE(IsValidMetricName("_x1"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("ferry-jobs"));
  EXPECT_FALSE(IsValidMetricName("ferry jobs"));
  EXPECT_TRUE(IsValidLabelName("tenant"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("9x"));
}

TEST(MetricsTest, ValuesAreWrittenAsTheTextFormatReadsThem) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(FormatValue(0.1 + 0.2)), 0.1 + 0.2);  // round-trips
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  Registry registry;
  registry.AddCounter("ferry_things_total", "Things.\nA second line with a \\ in it.", {"name"})
      .With({"a \"quoted\" \\ name\nwith a newline"})
      .Add(2);
  EXPECT_EQ(registry.Render(),
            "# HELP ferry_things_total Things.\\nA second line with a \\\\ in it.\n"
            "# TYPE ferry_things_total counter\n"
            "ferry_things_total{name=\"a \\\"quoted\\\" \\\\ name\\nwith a newline\"} 2\n");
}

TEST(MetricsTest, FamiliesRenderInOrderWithSortedLabelSets) {
  Registry registry;
  auto& jobs = registry.AddGauge("ferry_jobs", "Jobs by state.", {"state", "tenant"});
  auto& submits = registry.AddCounter("ferry_submissions_total", "Submissions.");
  jobs.With({"running", "b"}).Set(3);
  jobs.With({"pending", "a"}).Set(1.5);
  jobs.With({"running", "b"}).Add(1);
  submits.With().Add();
  submits.With().Add(4);
  EXPECT_EQ(registry.Render(),
            "# HELP ferry_jobs Jobs by state.\n"
            "# TYPE ferry_jobs gauge\n"
            "ferry_jobs{state=\"pending\",tenant=\"a\"} 1.5\n"
            "ferry_jobs{state=\"running\",tenant=\"b\"} 4\n"
            "# HELP ferry_submissions_total Submissions.\n"
            "# TYPE ferry_submissions_total counter\n"
            "ferry_submissions_total 5\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry registry;
  auto& latency = registry.AddHistogram("ferry_request_duration_seconds", "Latency.", {"route"},
                                        {0.01, 0.1, 1});
  auto& route = latency.With({"/v1/jobs"});
  for (double v : {0.005, 0.01, 0.05, 0.5, 2.0}) route.Observe(v);
  const std::string sum = FormatValue(0.005 + 0.01 + 0.05 + 0.5 + 2.0);
  EXPECT_EQ(registry.Render(),
            "# HELP ferry_request_duration_seconds Latency.\n"
            "# TYPE ferry_request_duration_seconds histogram\n"
            "ferry_request_duration_seconds_bucket{route=\"/v1/jobs\",le=\"0.01\"} 2\n"
            "ferry_request_duration_seconds_bucket{route=\"/v1/jobs\",le=\"0.1\"} 3\n"
            "ferry_request_duration_seconds_bucket{route=\"/v1/jobs\",le=\"1\"} 4\n"
            "ferry_request_duration_seconds_bucket{route=\"/v1/jobs\",le=\"+Inf\"} 5\n"
            "ferry_request_duration_seconds_sum{route=\"/v1/jobs\"} " +
                sum +
                "\n"
                "ferry_request_duration_seconds_count{route=\"/v1/jobs\"} 5\n");
}

TEST(MetricsTest, CollectorsWriteAfterTheFamilies) {
  Registry registry;
  registry.AddCounter("ferry_a_total", "A.").With().Add();
  int calls = 0;
  registry.AddCollector([&calls](Writer* writer) {
    ++calls;
    writer->Family("ferry_nodes", "gauge", "Nodes by state.");
    writer->Sample("ferry_nodes", {{"state", "ready"}}, 7);
  });
  const std::string text = registry.Render();
  EXPECT_EQ(calls, 1);
  EXPECT_NE(text.find("ferry_a_total 1\n# HELP ferry_nodes"), std::string::npos) << text;
  EXPECT_NE(text.find("ferry_nodes{state=\"ready\"} 7\n"), std::string::npos) << text;
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  Registry registry;
  auto& counter = registry.AddCounter("ferry_hits_total", "Hits.", {"worker"});
  auto& histogram = registry.AddHistogram("ferry_wait_seconds", "Waits.", {}, {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Counter& mine = counter.With({std::to_string(t % 2)});
      for (int i = 0; i < 10000; ++i) {
        mine.Add();
        histogram.With().Observe(0.5);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter.With({"0"}).value() + counter.With({"1"}).value(), 40000);
  EXPECT_EQ(histogram.With().Read().count, 40000U);
  EXPECT_EQ(histogram.With().Read().cumulative[0], 40000U);
}

TEST(MetricsTest, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(0.001, 10, 4), (std::vector<double>{0.001, 0.01, 0.1, 1}));
}

TEST(MetricsDeathTest, MisuseAbortsWithAMessage) {
  EXPECT_DEATH(
      {
        Registry registry;
        registry.AddCounter("bad-name", "x");
      },
      "invalid metric name 'bad-name'");
  EXPECT_DEATH(
      {
        Registry registry;
        registry.AddGauge("ferry_g", "x", {"a"}).With({"1", "2"});
      },
      "ferry_g takes 1 label values, got 2");
  EXPECT_DEATH(
      {
        Registry registry;
        registry.AddGauge("ferry_g", "x");
        registry.AddCounter("ferry_g", "x");
      },
      "registered twice");
  EXPECT_DEATH(
      {
        Registry registry;
        registry.AddHistogram("ferry_h", "x", {}, {1, 1});
      },
      "increasing");
}

}  // namespace
}  // namespace ferry::metrics
