// What `ferry agent --metrics-listen HOST:PORT` serves at `GET /metrics`
// (docs/fleet-metrics.md, "Agent metrics"): per-GPU telemetry read through
// NVML when a scrape asks, XID critical errors, tasks running, the
// log-shipping backlog, the server's reachability from this node, and the
// process telemetry. Internal to src/fleet/agent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ferry/base/metrics.h"
#include "ferry/base/status.h"
#include "ferry/fleet/agent.h"
#include "ferry/fleet/staging.h"
#include "fleet/agent/nvml.h"

namespace httplib {
class Server;
}

namespace ferry::fleet::agent_internal {

// Task output not shipped to the server yet.
struct LogBacklog {
  uint64_t unshipped_bytes = 0;
  uint64_t unshipped_chunks = 0;
  double oldest_age_seconds = 0;  // 0 when nothing waits
  uint64_t shipped_bytes = 0;     // since the agent started
  uint64_t dropped_bytes = 0;     // over the queue cap during an outage
};

// The state a scrape reads from the agent at that moment.
struct AgentSnapshot {
  int64_t tasks_running = 0;
  LogBacklog logs;
  CacheStats cache;  // the node cache of staged inputs
};

// Thread-safe: the sync loop reports syncs while the listener renders.
class AgentMetrics {
 public:
  // `nvml`: the node's NVML, or nullptr when there is none; when given it
  // must outlive this object and is only used under this object's lock.
  AgentMetrics(std::string node, const std::string& pool, Nvml* nvml);

  // One answered or failed exchange with the server (registration or sync);
  // `long_poll`: the request asked the server to wait. `now_ms`: Unix time.
  void Exchange(bool ok, bool long_poll, double seconds, int64_t now_ms);

  std::string Render(const AgentSnapshot& snapshot);

 private:
  void WriteGpus(metrics::Writer* writer);

  const std::string node_;
  std::mutex nvml_mutex_;
  Nvml* nvml_;
  metrics::Registry registry_;
  metrics::Gauge* reachable_;
  metrics::Gauge* last_success_;
  metrics::Counter* failures_;
  metrics::Family<metrics::Histogram>* sync_seconds_;
  metrics::Family<metrics::Counter>* nvml_errors_;
  metrics::Family<metrics::Counter>* xid_errors_ = nullptr;  // with NVML only
  metrics::Family<metrics::Gauge>* last_xid_ = nullptr;
};

// A small HTTP listener that answers `GET /metrics` with `render()` and 404
// to anything else. The listener stops (and its threads end) when destroyed;
// `render` is not called after that.
class MetricsListener {
 public:
  // Binds `address` (port 0: any free port) and starts serving; an IOError
  // names the address when it cannot be bound.
  static Result<std::unique_ptr<MetricsListener>> Start(const ListenAddress& address,
                                                        std::function<std::string()> render);
  ~MetricsListener();
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;

  int port() const { return port_; }

 private:
  MetricsListener() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace ferry::fleet::agent_internal
