// The agent's metrics: GPU series through the fake NVML (the real dlopen
// path), what is left out when NVML or one of its calls fails, the sync and
// log series, the listener and its address parsing.
#include "fleet/agent/agent_metrics.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "ferry/fleet/agent.h"
#include "fleet/agent/nvml.h"
#include "testing/test_util.h"

namespace ferry::fleet::agent_internal {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

constexpr const char* kGpu0 = R"(gpu="0",uuid="GPU-aaaa",model="H200",node="gpu-a")";
constexpr const char* kGpu1 = R"(gpu="1",uuid="GPU-bbbb",model="H100",node="gpu-a")";

class FakeNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("FAKE_NVML_FAIL");
    xid_file_ = std::filesystem::temp_directory_path() /
                ("ferry-fake-xid-" + std::to_string(getpid()) + ".txt");
    std::ofstream(xid_file_, std::ios::trunc).flush();
    setenv("FAKE_NVML_XID_FILE", xid_file_.c_str(), 1);
    // The fake is loaded once per process; its XID read offset starts over.
    void* library = dlopen(FERRY_FAKE_NVML, RTLD_NOW);
    ASSERT_NE(library, nullptr);
    reinterpret_cast<void (*)()>(dlsym(library, "fake_nvml_reset_xids"))();
    live_event_sets_ = reinterpret_cast<int (*)()>(dlsym(library, "fake_nvml_event_sets"));
    library_ = library;
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_FAIL");
    unsetenv("FAKE_NVML_XID_FILE");
    std::filesystem::remove(xid_file_);
    if (library_ != nullptr) dlclose(library_);
  }
  void AddXid(int gpu, int xid) {
    std::ofstream(xid_file_, std::ios::app) << gpu << " " << xid << "\n";
  }

  std::filesystem::path xid_file_;
  void* library_ = nullptr;
  int (*live_event_sets_)() = nullptr;
};

TEST_F(FakeNvmlTest, RendersEveryGpuSeries) {
  std::unique_ptr<Nvml> nvml = Nvml::Open(FERRY_FAKE_NVML);
  ASSERT_NE(nvml, nullptr);
  ASSERT_EQ(nvml->devices().size(), 2u);
  nvml->WatchXids();
  AgentMetrics metrics("gpu-a", "train", nvml.get());
  const std::string text = metrics.Render({});
  const std::string g0 = kGpu0, g1 = kGpu1;
  EXPECT_TRUE(Has(text, "ferry_agent_nvml_available 1")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_utilization_ratio{" + g0 + "} 0.87")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_utilization_ratio{" + g1 + "} 0")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_memory_used_bytes{" + g0 + "} 42949672960")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_memory_total_bytes{" + g0 + "} 150754820096")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_memory_free_bytes{" + g0 + "} 107805147136")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_memory_used_bytes{" + g1 + "} 0")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_power_watts{" + g0 + "} 312.5")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_power_watts{" + g1 + "} 75.125")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_temperature_celsius{" + g0 + "} 54")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_temperature_celsius{" + g1 + "} 33")) << text;
  // Every GPU's XID counter exists at zero before any error.
  EXPECT_TRUE(Has(text, "ferry_gpu_xid_errors_total{" + g0 + "} 0")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_xid_errors_total{" + g1 + "} 0")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_last_xid{" + g1 + "} 0")) << text;
  EXPECT_TRUE(Has(text, R"(ferry_agent_info{node="gpu-a",pool="train"} 1)")) << text;
  EXPECT_EQ(text.find("ferry_agent_nvml_errors_total{"), std::string::npos) << text;
  EXPECT_TRUE(Has(text, "# TYPE ferry_gpu_xid_errors_total counter")) << text;
  EXPECT_TRUE(Has(text, "# TYPE ferry_gpu_power_watts gauge")) << text;
}

TEST_F(FakeNvmlTest, CountsXidEventsPerGpu) {
  std::unique_ptr<Nvml> nvml = Nvml::Open(FERRY_FAKE_NVML);
  ASSERT_NE(nvml, nullptr);
  nvml->WatchXids();
  EXPECT_EQ(live_event_sets_(), 1);
  AgentMetrics metrics("gpu-a", "default", nvml.get());
  AddXid(1, 79);
  AddXid(1, 48);
  AddXid(0, 13);
  std::string text = metrics.Render({});
  EXPECT_TRUE(Has(text, "ferry_gpu_xid_errors_total{" + std::string(kGpu1) + "} 2")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_last_xid{" + std::string(kGpu1) + "} 48")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_xid_errors_total{" + std::string(kGpu0) + "} 1")) << text;
  // Events are taken once; later ones add to the count.
  text = metrics.Render({});
  EXPECT_TRUE(Has(text, "ferry_gpu_xid_errors_total{" + std::string(kGpu1) + "} 2")) << text;
  AddXid(1, 94);
  text = metrics.Render({});
  EXPECT_TRUE(Has(text, "ferry_gpu_xid_errors_total{" + std::string(kGpu1) + "} 3")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_last_xid{" + std::string(kGpu1) + "} 94")) << text;
  // A garbled event is an NVML error, not a crash or a made-up XID.
  std::ofstream(xid_file_, std::ios::app) << "garbage\n";
  text = metrics.Render({});
  EXPECT_TRUE(Has(text, R"(ferry_agent_nvml_errors_total{call="nvmlEventSetWait_v2"} 1)")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_xid_errors_total{" + std::string(kGpu1) + "} 3")) << text;
  nvml.reset();
  EXPECT_EQ(live_event_sets_(), 0);  // freed with the library
}

TEST_F(FakeNvmlTest, AFailingCallLeavesItsSeriesOutAndCountsIt) {
  setenv("FAKE_NVML_FAIL", "power:1,temperature:0,memory:0", 1);
  std::unique_ptr<Nvml> nvml = Nvml::Open(FERRY_FAKE_NVML);
  ASSERT_NE(nvml, nullptr);
  ASSERT_EQ(nvml->devices().size(), 2u);  // discovery needs no memory reading to list GPUs
  AgentMetrics metrics("gpu-a", "default", nvml.get());
  std::string text = metrics.Render({});
  const std::string g0 = kGpu0, g1 = kGpu1;
  EXPECT_EQ(text.find("ferry_gpu_power_watts{" + g1), std::string::npos) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_power_watts{" + g0 + "} 312.5")) << text;
  EXPECT_EQ(text.find("ferry_gpu_temperature_celsius{" + g0), std::string::npos) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_temperature_celsius{" + g1 + "} 33")) << text;
  EXPECT_EQ(text.find("ferry_gpu_memory_used_bytes{" + g0), std::string::npos) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_memory_used_bytes{" + g1 + "} 0")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_utilization_ratio{" + g0 + "} 0.87")) << text;
  EXPECT_TRUE(Has(text, R"(ferry_agent_nvml_errors_total{call="nvmlDeviceGetPowerUsage"} 1)"))
      << text;
  EXPECT_TRUE(Has(text, R"(ferry_agent_nvml_errors_total{call="nvmlDeviceGetTemperature"} 1)"))
      << text;
  // The call recovers: its series is back, the error count stays.
  unsetenv("FAKE_NVML_FAIL");
  text = metrics.Render({});
  EXPECT_TRUE(Has(text, "ferry_gpu_power_watts{" + g1 + "} 75.125")) << text;
  EXPECT_TRUE(Has(text, R"(ferry_agent_nvml_errors_total{call="nvmlDeviceGetPowerUsage"} 1)"))
      << text;
}

TEST_F(FakeNvmlTest, NoEventSetMeansNoXidsAndOneError) {
  setenv("FAKE_NVML_FAIL", "events", 1);
  std::unique_ptr<Nvml> nvml = Nvml::Open(FERRY_FAKE_NVML);
  ASSERT_NE(nvml, nullptr);
  nvml->WatchXids();
  EXPECT_EQ(live_event_sets_(), 0);
  AgentMetrics metrics("gpu-a", "default", nvml.get());
  AddXid(0, 79);
  metrics.Render({});
  const std::string text = metrics.Render({});
  EXPECT_TRUE(Has(text, R"(ferry_agent_nvml_errors_total{call="nvmlEventSetCreate"} 1)")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_xid_errors_total{" + std::string(kGpu0) + "} 0")) << text;
  EXPECT_TRUE(Has(text, "ferry_gpu_power_watts{" + std::string(kGpu0) + "} 312.5")) << text;
}

TEST(AgentMetrics, WithoutNvmlThereAreNoGpuSeries) {
  EXPECT_EQ(Nvml::Open("/nonexistent/libnvidia-ml.so.1"), nullptr);
  EXPECT_EQ(Nvml::Open("libm.so.6"), nullptr);  // a library without NVML's symbols
  AgentMetrics metrics("cpu-a", "default", nullptr);
  const std::string text = metrics.Render({});
  EXPECT_TRUE(Has(text, "ferry_agent_nvml_available 0")) << text;
  EXPECT_EQ(text.find("ferry_gpu_"), std::string::npos) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_tasks_running 0")) << text;
}

TEST(AgentMetrics, SyncReachabilityTasksAndLogs) {
  AgentMetrics metrics("cpu-a", "default", nullptr);
  std::string text = metrics.Render({});
  EXPECT_TRUE(Has(text, "ferry_agent_server_reachable 0")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_last_sync_success_timestamp_seconds 0")) << text;
  metrics.Exchange(true, false, 0.003, 1'700'000'000'500);
  metrics.Exchange(true, true, 2.0, 1'700'000'002'500);
  text = metrics.Render({});
  EXPECT_TRUE(Has(text, "ferry_agent_server_reachable 1")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_last_sync_success_timestamp_seconds 1700000002.5")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_sync_failures_total 0")) << text;
  EXPECT_TRUE(Has(text, R"(ferry_agent_sync_duration_seconds_count{mode="long_poll"} 1)")) << text;
  EXPECT_TRUE(
      Has(text, R"(ferry_agent_sync_duration_seconds_bucket{mode="immediate",le="0.004"} 1)"))
      << text;
  metrics.Exchange(false, true, 2.0, 1'700'000'010'000);
  metrics.Exchange(false, false, 0.5, 1'700'000'011'000);
  AgentSnapshot snapshot;
  snapshot.tasks_running = 3;
  snapshot.logs = {4096, 2, 1.5, 100, 7};
  text = metrics.Render(snapshot);
  EXPECT_TRUE(Has(text, "ferry_agent_server_reachable 0")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_sync_failures_total 2")) << text;
  // The last success stays.
  EXPECT_TRUE(Has(text, "ferry_agent_last_sync_success_timestamp_seconds 1700000002.5")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_tasks_running 3")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_log_unshipped_bytes 4096")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_log_unshipped_chunks 2")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_log_oldest_unshipped_age_seconds 1.5")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_log_shipped_bytes_total 100")) << text;
  EXPECT_TRUE(Has(text, "ferry_agent_log_dropped_bytes_total 7")) << text;
  // The process telemetry, as the server exports it.
  EXPECT_NE(text.find("ferry_zero_copy_exports_total"), std::string::npos) << text;
}

TEST(ParseListenAddress, Forms) {
  ASSERT_OK_AND_ASSIGN(ListenAddress v4, ParseListenAddress("127.0.0.1:9402"));
  EXPECT_EQ(v4.host, "127.0.0.1");
  EXPECT_EQ(v4.port, 9402);
  ASSERT_OK_AND_ASSIGN(ListenAddress v6, ParseListenAddress("[::1]:9402"));
  EXPECT_EQ(v6.host, "::1");
  ASSERT_OK_AND_ASSIGN(ListenAddress any, ParseListenAddress(":9402"));
  EXPECT_EQ(any.host, "0.0.0.0");
  ASSERT_OK_AND_ASSIGN(ListenAddress named, ParseListenAddress("localhost:0"));
  EXPECT_EQ(named.host, "localhost");
  EXPECT_EQ(named.port, 0);
}

TEST(ParseListenAddress, RefusesBadInput) {
  for (const char* text : {"", "9402", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                           "127.0.0.1:94o2", "127.0.0.1:999999", "::1:9402", "[::1:9402", "[]:9402",
                           "a b:9402", "host/x:1", "h\xff:1"}) {
    auto result = ParseListenAddress(text);
    EXPECT_FALSE(result.ok()) << text;
    if (!result.ok()) {
      EXPECT_NE(result.status().message().find("metrics listen address"), std::string::npos)
          << result.status().message();
    }
  }
}

TEST(MetricsListener, ServesMetricsAndNothingElse) {
  int renders = 0;
  ASSERT_OK_AND_ASSIGN(auto listener, MetricsListener::Start({"127.0.0.1", 0}, [&renders] {
                         ++renders;
                         return std::string("ferry_test 1\n");
                       }));
  ASSERT_GT(listener->port(), 0);
  httplib::Client client("127.0.0.1", listener->port());
  auto reply = client.Get("/metrics");
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->body, "ferry_test 1\n");
  EXPECT_EQ(reply->get_header_value("Content-Type"), metrics::kContentType);
  EXPECT_EQ(client.Get("/")->status, 404);
  EXPECT_EQ(client.Get("/v1/jobs")->status, 404);
  EXPECT_EQ(client.Post("/metrics", "x", "text/plain")->status, 404);
  EXPECT_EQ(renders, 1);
  const int port = listener->port();
  listener.reset();
  httplib::Client after("127.0.0.1", port);
  EXPECT_FALSE(after.Get("/metrics"));  // nothing listens any more
}

TEST(MetricsListener, ABusyPortIsAnError) {
  httplib::Server holder;
  const int port = holder.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  auto result = MetricsListener::Start({"127.0.0.1", port}, [] { return std::string(); });
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("cannot listen for metrics on 127.0.0.1:" +
                                           std::to_string(port)),
            std::string::npos)
      << result.status().message();
  EXPECT_FALSE(MetricsListener::Start({"203.0.113.7", 9402}, [] { return std::string(); }).ok());
}

TEST(MetricsListener, RunAgentStopsOnAnAddressItCannotUse) {
  httplib::Server holder;
  const int port = holder.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  const std::string work_dir =
      (std::filesystem::temp_directory_path() / ("ferry-agent-metrics-" + std::to_string(getpid())))
          .string();
  AgentOptions options;
  options.server_url = "http://127.0.0.1:1";  // never reached
  options.node_name = "node-a";
  options.ignore_nvml = true;
  options.work_dir = work_dir;
  options.metrics_listen = "127.0.0.1:" + std::to_string(port);
  Status status = RunAgent(options, nullptr, false);
  EXPECT_EQ(status.code(), StatusCode::kIOError) << status.ToString();
  EXPECT_NE(status.message().find("cannot listen for metrics"), std::string::npos)
      << status.ToString();
  options.metrics_listen = "nonsense";
  status = RunAgent(options, nullptr, false);
  EXPECT_EQ(status.code(), StatusCode::kInvalid) << status.ToString();
  std::filesystem::remove_all(work_dir);
}

}  // namespace
}  // namespace ferry::fleet::agent_internal
