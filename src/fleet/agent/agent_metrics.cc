#include "fleet/agent/agent_metrics.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cctype>
#include <optional>
#include <utility>
#include <vector>

#include "ferry/base/telemetry.h"

namespace ferry::fleet {

Result<ListenAddress> ParseListenAddress(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::Invalid("bad metrics listen address '" + text + "': " + why +
                           " (expected HOST:PORT, e.g. 127.0.0.1:9402, [::1]:9402 or :9402)");
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  std::string host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5) return bad("the port must be a number from 0 to 65535");
  int value = 0;
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return bad("the port must be a number from 0 to 65535");
    }
    value = value * 10 + (c - '0');
  }
  if (value > 65535) return bad("the port must be a number from 0 to 65535");
  const bool bracketed = !host.empty() && host.front() == '[';
  if (bracketed) {
    if (host.size() < 3 || host.back() != ']') return bad("an IPv6 address needs [ and ]");
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return bad("write an IPv6 address in brackets");
  }
  if (host.empty()) {
    if (bracketed) return bad("empty host");
    host = "0.0.0.0";  // ":9402": every interface
  }
  if (host.size() > 253) return bad("the host is longer than 253 characters");
  for (char c : host) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                    c == '_' || (bracketed && (c == ':' || c == '%'));
    if (!ok) return bad("the host may hold letters, digits, '.', '-' and '_'");
  }
  return ListenAddress{host, value};
}

namespace agent_internal {

namespace {

// Syncs from 1 ms to ~33 s: long polls wait up to --sync-wait-ms (60 s at most).
const std::vector<double> kSyncBuckets = metrics::ExponentialBuckets(0.001, 2, 16);

}  // namespace

AgentMetrics::AgentMetrics(std::string node, const std::string& pool, Nvml* nvml)
    : node_(std::move(node)),
      nvml_(nvml),
      reachable_(&registry_
                      .AddGauge("ferry_agent_server_reachable",
                                "1 when the agent's last exchange with the server (registration "
                                "or sync) was answered, else 0.")
                      .With()),
      last_success_(&registry_
                         .AddGauge("ferry_agent_last_sync_success_timestamp_seconds",
                                   "Unix time of the last exchange with the server that was "
                                   "answered; 0 before the first.")
                         .With()),
      failures_(&registry_
                     .AddCounter("ferry_agent_sync_failures_total",
                                 "Exchanges with the server (registration or sync) that failed: "
                                 "unreachable, timed out or answered with an error.")
                     .With()),
      sync_seconds_(&registry_.AddHistogram(
          "ferry_agent_sync_duration_seconds",
          "Time of one exchange with the server; mode=long_poll includes the server's wait "
          "for work, mode=immediate is the round trip.",
          {"mode"}, kSyncBuckets)),
      nvml_errors_(&registry_.AddCounter(
          "ferry_agent_nvml_errors_total",
          "NVML calls that failed (their series are left out of that scrape), by function.",
          {"call"})) {
  registry_.AddGauge("ferry_agent_info", "The agent's node and pool; always 1.", {"node", "pool"})
      .With({node_, pool})
      .Set(1);
  if (nvml_ != nullptr) {
    xid_errors_ = &registry_.AddCounter(
        "ferry_gpu_xid_errors_total",
        "XID critical error events NVML delivered for the GPU (DCGM_FI_DEV_XID_ERRORS keeps "
        "the last one as a gauge: ferry_gpu_last_xid).",
        {"gpu", "uuid", "model", "node"});
    last_xid_ = &registry_.AddGauge(
        "ferry_gpu_last_xid",
        "The last XID critical error of the GPU, as DCGM_FI_DEV_XID_ERRORS; 0 before the first.",
        {"gpu", "uuid", "model", "node"});
    // Every GPU has its XID series from the start, so that the first error is an increase.
    for (const GpuInventory& gpu : nvml_->devices()) {
      const std::vector<std::string> labels{std::to_string(gpu.index), gpu.uuid, gpu.model, node_};
      xid_errors_->With(labels);
      last_xid_->With(labels);
    }
  }
}

void AgentMetrics::Exchange(bool ok, bool long_poll, double seconds, int64_t now_ms) {
  reachable_->Set(ok ? 1 : 0);
  if (ok) {
    last_success_->Set(static_cast<double>(now_ms) / 1000.0);
  } else {
    failures_->Add();
  }
  sync_seconds_->With({long_poll ? "long_poll" : "immediate"}).Observe(seconds);
}

void AgentMetrics::WriteGpus(metrics::Writer* writer) {
  writer->Family("ferry_agent_nvml_available", "gauge",
                 "1 when the agent reads its GPUs through NVML, else 0 (no driver, or "
                 "--ignore-nvml).");
  writer->Sample("ferry_agent_nvml_available", {}, nvml_ != nullptr ? 1 : 0);
  if (nvml_ == nullptr) return;
  struct Row {
    metrics::LabelPairs labels;
    GpuReading reading;
  };
  std::vector<Row> rows;
  std::vector<std::string> failed;
  for (const GpuInventory& gpu : nvml_->devices()) {
    Row row{{{"gpu", std::to_string(gpu.index)},
             {"uuid", gpu.uuid},
             {"model", gpu.model},
             {"node", node_}},
            nvml_->Read(gpu.index)};
    failed.insert(failed.end(), row.reading.failed_calls.begin(), row.reading.failed_calls.end());
    rows.push_back(std::move(row));
  }
  constexpr size_t kMaxEventsPerScrape = 4096;
  for (const XidEvent& event : nvml_->TakeXids(kMaxEventsPerScrape, &failed)) {
    for (const GpuInventory& gpu : nvml_->devices()) {
      if (gpu.index != event.index) continue;
      const std::vector<std::string> labels{std::to_string(gpu.index), gpu.uuid, gpu.model, node_};
      xid_errors_->With(labels).Add();
      last_xid_->With(labels).Set(static_cast<double>(event.xid));
    }
  }
  for (const std::string& call : failed) nvml_errors_->With({call}).Add();

  auto family = [&](const char* name, const char* help, auto field) {
    writer->Family(name, "gauge", help);
    for (const Row& row : rows) {
      const auto value = field(row.reading);
      if (value.has_value()) writer->Sample(name, row.labels, static_cast<double>(*value));
    }
  };
  family(
      "ferry_gpu_utilization_ratio",
      "Share of NVML's last sample period the GPU was busy, 0 to 1 (DCGM_FI_DEV_GPU_UTIL / 100).",
      [](const GpuReading& r) { return r.utilization; });
  family("ferry_gpu_memory_used_bytes", "GPU memory in use (DCGM_FI_DEV_FB_USED, in bytes).",
         [](const GpuReading& r) { return r.memory_used_bytes; });
  family("ferry_gpu_memory_free_bytes", "GPU memory free (DCGM_FI_DEV_FB_FREE, in bytes).",
         [](const GpuReading& r) { return r.memory_free_bytes; });
  family("ferry_gpu_memory_total_bytes", "GPU memory in all.",
         [](const GpuReading& r) { return r.memory_total_bytes; });
  family("ferry_gpu_power_watts", "Power draw of the GPU (DCGM_FI_DEV_POWER_USAGE).",
         [](const GpuReading& r) { return r.power_watts; });
  family("ferry_gpu_temperature_celsius", "GPU core temperature (DCGM_FI_DEV_GPU_TEMP).",
         [](const GpuReading& r) { return r.temperature_celsius; });
}

std::string AgentMetrics::Render(const AgentSnapshot& snapshot) {
  metrics::Writer gpus;
  {
    std::lock_guard<std::mutex> lock(nvml_mutex_);
    WriteGpus(&gpus);  // before the registry: it counts XIDs and NVML errors
  }
  metrics::Writer writer;
  writer.Append(registry_.Render());
  writer.Append(gpus.text());
  writer.Family("ferry_agent_tasks_running", "gauge",
                "Tasks this agent runs now (started, exit not yet reported).");
  writer.Sample("ferry_agent_tasks_running", {}, static_cast<double>(snapshot.tasks_running));
  const LogBacklog& logs = snapshot.logs;
  writer.Family("ferry_agent_log_unshipped_bytes", "gauge",
                "Task output queued for the server and not shipped yet.");
  writer.Sample("ferry_agent_log_unshipped_bytes", {}, static_cast<double>(logs.unshipped_bytes));
  writer.Family("ferry_agent_log_unshipped_chunks", "gauge",
                "Pieces of task output (reads of a task's stdout or stderr) not shipped yet.");
  writer.Sample("ferry_agent_log_unshipped_chunks", {}, static_cast<double>(logs.unshipped_chunks));
  writer.Family("ferry_agent_log_oldest_unshipped_age_seconds", "gauge",
                "How long the oldest unshipped task output has waited; 0 when none waits.");
  writer.Sample("ferry_agent_log_oldest_unshipped_age_seconds", {}, logs.oldest_age_seconds);
  writer.Family("ferry_agent_log_shipped_bytes_total", "counter",
                "Task output the server accepted.");
  writer.Sample("ferry_agent_log_shipped_bytes_total", {}, static_cast<double>(logs.shipped_bytes));
  writer.Family("ferry_agent_log_dropped_bytes_total", "counter",
                "Task output dropped over the queue cap while the server was unreachable (the "
                "node's log files keep it).");
  writer.Sample("ferry_agent_log_dropped_bytes_total", {}, static_cast<double>(logs.dropped_bytes));
  const CacheStats& cache = snapshot.cache;
  auto cache_series = [&](const char* name, const char* type, const char* help, int64_t value) {
    writer.Family(name, type, help);
    writer.Sample(name, {}, static_cast<double>(value));
  };
  cache_series("ferry_agent_cache_hits_total", "counter",
               "Input objects a job found in the node cache.", cache.hits);
  cache_series("ferry_agent_cache_misses_total", "counter",
               "Input objects fetched into the node cache.", cache.misses);
  cache_series("ferry_agent_cache_hit_bytes_total", "counter",
               "Bytes of job inputs served from the node cache.", cache.bytes_hit);
  cache_series("ferry_agent_cache_fetched_bytes_total", "counter",
               "Bytes downloaded into the node cache (a resumed download counts what was new).",
               cache.bytes_fetched);
  cache_series("ferry_agent_cache_resumed_bytes_total", "counter",
               "Bytes of interrupted downloads reused when they were resumed.",
               cache.bytes_resumed);
  cache_series("ferry_agent_cache_evictions_total", "counter",
               "Entries evicted (least recently used, never one a job holds).", cache.evictions);
  cache_series("ferry_agent_cache_evicted_bytes_total", "counter", "Bytes evicted.",
               cache.bytes_evicted);
  cache_series("ferry_agent_cache_refused_total", "counter",
               "Downloads refused because their digest or size did not match the manifest.",
               cache.corrupt);
  cache_series("ferry_agent_cache_tampered_total", "counter",
               "Entries found changed on disk, dropped and fetched again.", cache.tampered);
  cache_series("ferry_agent_cache_entries", "gauge", "Objects in the node cache.", cache.entries);
  cache_series("ferry_agent_cache_bytes", "gauge", "Bytes of objects in the node cache.",
               cache.bytes_used);
  cache_series("ferry_agent_cache_pinned_bytes", "gauge",
               "Bytes of the node cache held by jobs being staged or running, or fetched ahead for "
               "jobs that wait.",
               cache.bytes_pinned);
  cache_series("ferry_agent_cache_quota_bytes", "gauge", "The node cache's size quota.",
               cache.quota_bytes);
  writer.Append(telemetry::ToPrometheus());
  return writer.Take();
}

Result<std::unique_ptr<MetricsListener>> MetricsListener::Start(
    const ListenAddress& address, std::function<std::string()> render) {
  std::unique_ptr<MetricsListener> listener(new MetricsListener());
  listener->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *listener->server_;
  // A scrape at a time is the norm; two threads keep a slow one from blocking the next.
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_max_count(100);
  // httplib's default sets SO_REUSEPORT, which lets a second agent bind the
  // same port and take half the scrapes; SO_REUSEADDR alone refuses a port
  // in use and still allows a restart over TIME_WAIT connections.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.Get("/metrics",
             [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
               res.set_content(render(), metrics::kContentType);
             });
  const std::string where = address.host + ":" + std::to_string(address.port);
  if (address.port == 0) {
    listener->port_ = server.bind_to_any_port(address.host);
    if (listener->port_ <= 0) {
      return Status::IOError("cannot listen for metrics on " + address.host + " (any port)");
    }
  } else if (server.bind_to_port(address.host, address.port)) {
    listener->port_ = address.port;
  } else {
    return Status::IOError("cannot listen for metrics on " + where +
                           " (address in use, or not an address of this machine)");
  }
  listener->thread_ = std::thread([&server] { server.listen_after_bind(); });
  return listener;
}

MetricsListener::~MetricsListener() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace agent_internal
}  // namespace ferry::fleet
