// Reports: metrics by hand, Jain's index, CSV columns, the SVG's structure.
#include "fleet/sim/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "testing/test_util.h"

namespace ferry::fleet::sim {
namespace {

TEST(Jain, Formula) {
  EXPECT_DOUBLE_EQ(JainIndex({1, 1, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(JainIndex({1, 0, 0, 0}), 0.25);  // 1/n when one holds everything
  // (1+2+3)^2 / (3 * (1+4+9)) = 36/42
  EXPECT_DOUBLE_EQ(JainIndex({1, 2, 3}), 36.0 / 42.0);
  EXPECT_DOUBLE_EQ(JainIndex({}), 1.0);
  EXPECT_DOUBLE_EQ(JainIndex({0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(JainIndex({5}), 1.0);
  // Scale-free.
  EXPECT_DOUBLE_EQ(JainIndex({2, 4, 6}), JainIndex({1, 2, 3}));
}

TEST(Percentile, NearestRank) {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(i);
  EXPECT_EQ(Percentile(values, 99), 99);
  EXPECT_EQ(Percentile(values, 100), 100);
  EXPECT_EQ(Percentile(values, 50), 50);
  EXPECT_EQ(Percentile(values, 0), 1);
  EXPECT_EQ(Percentile({7}, 99), 7);
  EXPECT_EQ(Percentile({}, 99), 0);
  EXPECT_EQ(Percentile({1, 2}, 99), 2);
}

TraceJob J(const std::string& id, const std::string& tenant, double submit_s, double duration_s,
           int gpus) {
  TraceJob job;
  job.id = id;
  job.tenant = tenant;
  job.submit_s = submit_s;
  job.duration_s = duration_s;
  job.gpus_per_task = gpus;
  return job;
}

// Two tenants, three jobs, one on-prem pool of 4 GPUs at $2/GPU-hour and a cloud pool.
struct Fixture {
  std::vector<TraceJob> trace;
  SimResult result;
  Fixture() {
    trace.resize(3);
    trace[0] = J("a", "t1", 0, 100, 2);
    trace[1] = J("b", "t2", 0, 100, 4);
    trace[2] = J("c", "t2", 50, 5, 1);
    result.jobs.resize(3);
    for (int i = 0; i < 3; ++i) result.jobs[i].job = &trace[i];
    // a: 0..100; b: 100..200; c: rejected at 50.
    result.jobs[0] = {&trace[0], JobEnd::kCompleted, 0, 0, 100, 1, 0, 0, 200, 0, "p", false, ""};
    result.jobs[1] = {&trace[1], JobEnd::kCompleted, 100, 100, 200, 1, 0, 0, 400, 0, "p", false,
                      ""};
    result.jobs[2] = {&trace[2], JobEnd::kRejected, -1, -1, 50, 0, 0, 0, 0, 0, "", false, "quota"};
    result.start_s = 0;
    result.end_s = 200;
    PoolUsage onprem;
    onprem.name = "p";
    onprem.price_per_gpu_hour = 2;
    onprem.gpus_per_node = 4;
    onprem.billed_node_s = 200;
    onprem.ready_gpu_s = 800;
    onprem.busy_gpu_s = 600;
    onprem.cost = 200 * 4 * 2 / 3600.0;
    PoolUsage cloud;
    cloud.name = "c";
    cloud.cloud = true;
    cloud.price_per_gpu_hour = 3;
    cloud.gpus_per_node = 8;
    cloud.billed_node_s = 3600;
    cloud.ready_gpu_s = 8 * 3000;
    cloud.busy_gpu_s = 8 * 1500;
    cloud.cost = 3600 * 8 * 3 / 3600.0;
    result.pools = {onprem, cloud};
    result.timeline = {{0, 4, 2, 0, 0, 1, 1}, {100, 4, 4, 0, 0, 0, 1}, {200, 4, 0, 0, 0, 0, 0}};
    TenantShare t1, t2;
    t1.tenant = "t1";
    t1.held_gpu_s = 200;
    t1.entitled_gpu_s = 250;
    t2.tenant = "t2";
    t2.held_gpu_s = 400;
    t2.entitled_gpu_s = 400;
    result.tenants = {t1, t2};
    result.preemptions = 2;
    result.spot_interruptions = 1;
    result.cycles = 4;
    result.core_ms_total = 2;
  }
};

TEST(Metrics, ByHand) {
  Fixture f;
  RunMetrics m = ComputeMetrics(f.result, "fifo");
  EXPECT_EQ(m.label, "fifo");
  EXPECT_EQ(m.jobs, 3);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.rejected, 1);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.unfinished, 0);
  EXPECT_DOUBLE_EQ(m.avg_jct_s, 150);  // (100 + 200) / 2
  EXPECT_DOUBLE_EQ(m.p99_jct_s, 200);
  EXPECT_DOUBLE_EQ(m.avg_queue_s, 50);  // (0 + 100) / 2, the rejected job never started
  EXPECT_DOUBLE_EQ(m.p99_queue_s, 100);
  EXPECT_DOUBLE_EQ(m.makespan_s, 200);
  EXPECT_DOUBLE_EQ(m.util_onprem, 0.75);
  EXPECT_DOUBLE_EQ(m.util_cloud, 0.5);
  EXPECT_DOUBLE_EQ(m.util_total, (600.0 + 12000) / (800 + 24000));
  EXPECT_NEAR(m.cost_onprem, 200 * 4 * 2 / 3600.0, 1e-12);
  EXPECT_NEAR(m.cost_cloud, 24.0, 1e-12);
  EXPECT_NEAR(m.cloud_gpu_hours, 8.0, 1e-12);
  // Slowdowns: t1 = 100/100 = 1, t2 = 200/100 = 2 → (3)^2 / (2 * 5) = 0.9
  ASSERT_EQ(m.per_tenant.size(), 2u);
  EXPECT_DOUBLE_EQ(m.per_tenant[0].avg_slowdown, 1);
  EXPECT_DOUBLE_EQ(m.per_tenant[1].avg_slowdown, 2);
  EXPECT_DOUBLE_EQ(m.jain_slowdown, 0.9);
  // Share ratios: t1 = 200/250 = 0.8, t2 = 1 → 1.8^2 / (2 * 1.64)
  EXPECT_DOUBLE_EQ(m.per_tenant[0].share_ratio, 0.8);
  EXPECT_DOUBLE_EQ(m.per_tenant[1].share_ratio, 1.0);
  EXPECT_EQ(m.tenants, 2);
  EXPECT_DOUBLE_EQ(m.jain, 1.8 * 1.8 / (2 * 1.64));
  EXPECT_EQ(m.preemptions, 2);
  EXPECT_EQ(m.spot_interruptions, 1);
  EXPECT_DOUBLE_EQ(m.core_ms_avg, 0.5);
}

TEST(Metrics, SlowdownFloorForShortJobs) {
  std::vector<TraceJob> trace(1);
  trace[0] = J("x", "t", 0, 1, 1);
  SimResult result;
  result.jobs = {{&trace[0], JobEnd::kCompleted, 19, 19, 20, 1, 0, 0, 1, 0, "p", false, ""}};
  result.end_s = 20;
  RunMetrics m = ComputeMetrics(result, "x");
  EXPECT_DOUBLE_EQ(m.avg_slowdown, 20 / kSlowdownFloorS);
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

size_t Columns(const std::string& line) {
  size_t n = 1;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    if (c == ',' && !quoted) ++n;
  }
  return n;
}

TEST(Csv, RunsJobsTenantsTimelineColumns) {
  Fixture f;
  f.trace[0].id = "with, comma";
  RunMetrics m = ComputeMetrics(f.result, "fair_share+cost");
  auto runs = SplitLines(FormatRunsCsv({m, m}));
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].rfind("run,jobs,completed,failed,timed_out,rejected,unfinished,avg_jct_s,", 0),
            0u);
  EXPECT_NE(runs[0].find(",jain,jain_slowdown,tenants,"), std::string::npos);
  EXPECT_NE(runs[0].find(",cost_total,"), std::string::npos);
  EXPECT_EQ(Columns(runs[1]), Columns(runs[0]));
  EXPECT_EQ(runs[1].rfind("fair_share+cost,3,2,1,0,1,0,150,200,50,100,", 0), 0u) << runs[1];

  auto jobs = SplitLines(FormatJobsCsv(f.result));
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(jobs[0].rfind("id,tenant,team,user,submit_s,duration_s,tasks,gpus_per_task,", 0), 0u);
  for (size_t i = 1; i < jobs.size(); ++i) EXPECT_EQ(Columns(jobs[i]), Columns(jobs[0])) << jobs[i];
  EXPECT_EQ(jobs[1].rfind("\"with, comma\",t1,", 0), 0u) << jobs[1];
  EXPECT_NE(jobs[2].find(",completed,100,200,200,100,1,"), std::string::npos) << jobs[2];
  EXPECT_NE(jobs[3].find(",rejected,,50,,,0,"), std::string::npos) << jobs[3];

  auto tenants = SplitLines(FormatTenantsCsv(m));
  ASSERT_EQ(tenants.size(), 3u);
  EXPECT_EQ(tenants[0],
            "tenant,completed,avg_jct_s,avg_slowdown,gpu_seconds,weight,held_gpu_s,entitled_gpu_s,"
            "share_ratio");
  EXPECT_EQ(tenants[2], "t2,1,200,2,400,1,400,400,1");

  auto timeline = SplitLines(FormatTimelineCsv(f.result));
  ASSERT_EQ(timeline.size(), 4u);
  EXPECT_EQ(timeline[2], "100,4,4,0,0,0,1");
}

TEST(Markdown, OneRowPerRunWithBaseline) {
  Fixture f;
  RunMetrics a = ComputeMetrics(f.result, "fifo");
  RunMetrics b = a;
  b.label = "fair|share";
  b.avg_jct_s = a.avg_jct_s / 2;
  b.cost_total = a.cost_total * 0.7;
  auto lines = SplitLines(FormatComparisonMarkdown({a, b}));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[3].find("fair\\|share"), std::string::npos);
  EXPECT_NE(lines[3].find("2.00×"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("-30.0%"), std::string::npos) << lines[3];
  EXPECT_NE(lines[2].find("+0.0%"), std::string::npos) << lines[2];
}

// A small XML well-formedness check: every tag closes in order, attributes are
// quoted, no stray '<' or '&' in text.
::testing::AssertionResult WellFormedXml(const std::string& text) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (text.rfind("<?xml", 0) == 0) i = text.find("?>") + 2;
  bool root_seen = false;
  while (i < text.size()) {
    if (text[i] == '&') {
      const size_t semi = text.find(';', i);
      if (semi == std::string::npos || semi - i > 6) {
        return ::testing::AssertionFailure() << "bad entity at " << i;
      }
      i = semi + 1;
      continue;
    }
    if (text[i] != '<') {
      if (stack.empty() && !std::isspace(static_cast<unsigned char>(text[i]))) {
        return ::testing::AssertionFailure() << "text outside the root at " << i;
      }
      ++i;
      continue;
    }
    const size_t close = text.find('>', i);
    if (close == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    std::string tag = text.substr(i + 1, close - i - 1);
    i = close + 1;
    if (tag.empty()) return ::testing::AssertionFailure() << "empty tag";
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) {
        return ::testing::AssertionFailure()
               << "</" << name << "> closes " << (stack.empty() ? "nothing" : stack.back());
      }
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    const std::string name = tag.substr(0, tag.find_first_of(" \t\n"));
    // Attributes: name="value" pairs.
    size_t quotes = 0;
    for (char c : tag) quotes += c == '"';
    if (quotes % 2 != 0) return ::testing::AssertionFailure() << "odd quotes in <" << name << ">";
    if (tag.find('<') != std::string::npos) {
      return ::testing::AssertionFailure() << "'<' inside <" << name << ">";
    }
    if (stack.empty()) {
      if (root_seen) return ::testing::AssertionFailure() << "two root elements";
      root_seen = true;
    }
    if (!self_closing) stack.push_back(name);
  }
  if (!stack.empty()) return ::testing::AssertionFailure() << "<" << stack.back() << "> not closed";
  if (!root_seen) return ::testing::AssertionFailure() << "no root element";
  return ::testing::AssertionSuccess();
}

TEST(Svg, WellFormedWithEscapedTitle) {
  Fixture f;
  const std::string svg = RenderTimelineSvg(f.result, "fifo & <friends>");
  EXPECT_TRUE(WellFormedXml(svg));
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("fifo &amp; &lt;friends&gt;"), std::string::npos);
  EXPECT_NE(svg.find("<path d=\"M"), std::string::npos);
  EXPECT_NE(svg.find("Queue length"), std::string::npos);
  // The checker itself rejects broken documents.
  EXPECT_FALSE(WellFormedXml("<svg><g></svg>"));
  EXPECT_FALSE(WellFormedXml("<svg a=\"1></svg>"));
  EXPECT_FALSE(WellFormedXml("<svg>a & b</svg>"));
}

TEST(Svg, EmptyAndCloudRuns) {
  SimResult empty;
  EXPECT_TRUE(WellFormedXml(RenderTimelineSvg(empty, "empty")));
  Fixture f;
  f.result.timeline.push_back({150, 4, 4, 8, 8, 3, 2});
  const std::string svg = RenderTimelineSvg(f.result, "burst");
  EXPECT_TRUE(WellFormedXml(svg));
  EXPECT_NE(svg.find("cloud (READY nodes)"), std::string::npos);
  // A long run gets its axis in days.
  f.result.end_s = 10 * 86400;
  EXPECT_NE(RenderTimelineSvg(f.result, "long").find("time (days)"), std::string::npos);
}

// The staging table: 40 GPU-h idle staging under start-then-fetch, 10 under
// prefetch: 30 GPU-h saved (75%). Inputs 2000 GB, 500 cached (25%), 1200
// prefetched (60%), 300 fetched on the GPUs' time (15%). GPU-h held: the
// fixture's 600 GPU-s = 0.2 GPU-h.
TEST(Markdown, StagingTableComparesWithStartThenFetch) {
  Fixture f;
  RunMetrics fetch = ComputeMetrics(f.result, "fifo/start-then-fetch");
  fetch.group = "fifo";
  fetch.staging = "start-then-fetch";
  fetch.staging_gpu_hours = 40;
  fetch.input_gb = 2000;
  fetch.fetched_gb = 2000;
  RunMetrics pre = fetch;
  pre.label = "fifo/prefetch";
  pre.staging = "prefetch";
  pre.staging_gpu_hours = 10;
  pre.cached_gb = 500;
  pre.prefetched_gb = 1200;
  pre.fetched_gb = 300;
  RunMetrics other = pre;  // another group: no baseline
  other.label = "drf/prefetch";
  other.group = "drf";
  auto lines = SplitLines(FormatComparisonMarkdown({fetch, pre, other}));
  ASSERT_EQ(lines.size(), 11u);  // 2 + 3 rows, a blank line, 2 + 3 rows
  EXPECT_EQ(lines[5], "");
  EXPECT_NE(lines[6].find("staging GPU-h saved vs start-then-fetch"), std::string::npos);
  EXPECT_NE(lines[8].find("| start-then-fetch | 2.0 TB |"), std::string::npos) << lines[8];
  EXPECT_EQ(lines[8].substr(lines[8].size() - 5), "| - |") << lines[8];
  EXPECT_EQ(lines[9],
            "| fifo/prefetch | prefetch | 2.0 TB | 0.5 TB (25.0%) | 1.2 TB (60.0%) | 0.3 TB "
            "(15.0%) | 10.0 | 0.2 | 30.0 (75.0%) |");
  EXPECT_EQ(lines[10].substr(lines[10].size() - 5), "| - |") << lines[10];

  // Runs without staging: no second table; the CSV has the staging columns last.
  RunMetrics off = ComputeMetrics(f.result, "fifo");
  EXPECT_EQ(off.staging, "off");
  EXPECT_EQ(SplitLines(FormatComparisonMarkdown({off})).size(), 3u);
  auto csv = SplitLines(FormatRunsCsv({pre}));
  EXPECT_NE(csv[0].find(",wall_s,staging,gpu_hours,staging_gpu_hours,avg_staging_s,input_gb,"
                        "cached_gb,prefetched_gb,fetched_gb,cache_hit_ratio"),
            std::string::npos);
  EXPECT_NE(csv[1].find(",prefetch,"), std::string::npos) << csv[1];
}

}  // namespace
}  // namespace ferry::fleet::sim
