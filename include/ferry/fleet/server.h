// `ferry server`: the fleet control plane. Serves the REST API
// (docs/fleet-api.md) over a Store, runs the scheduler loop, expires node
// leases and job runtimes, and purges old idempotency keys.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "ferry/base/status.h"

namespace ferry::fleet {

struct ServerOptions {
  std::string store_url = "sqlite:ferry-fleet.db";
  std::string host = "127.0.0.1";
  int port = 8700;             // 0: any free port (written to port_file)
  std::string port_file;       // when set, the bound port is written here once listening
  std::string data_dir = ".";  // bootstrap tokens are written here
  int threads = 8;             // HTTP worker threads
  // "text" (the default) or "json": JSON lines on stderr, one per request
  // too, with its X-Request-Id, caller, route, status and latency.
  std::string log_format = "text";
  // How often the job, node and GPU gauges of GET /metrics are counted from
  // the store (in the background; a scrape serves the last count). 0: count
  // at every scrape (slow on a large store: ~300 ms at 100,000 jobs).
  int64_t metrics_refresh_ms = 5'000;
  int64_t lease_ms = 10'000;           // node lease; agents sync well within it
  int64_t schedule_interval_ms = 100;  // also runs right after submissions and task exits
  int64_t max_body_bytes = 1 << 20;
  // POST /v1/datasets only: a manifest of 100,000 objects is ~15 MiB of JSON.
  int64_t max_manifest_bytes = int64_t{64} << 20;
  // POST /v1/code only: the largest code bundle (a gzip'd tar archive),
  // kept under <data_dir>/code/<tenant id>/ (docs/fleet-staging.md#code).
  int64_t max_code_bundle_bytes = int64_t{256} << 20;
  // Prefetch while pending (docs/fleet-staging.md): a blocked job that holds
  // nodes (a backfill reservation planned to start within this many seconds,
  // or a drain) has its inputs fetched ahead by those nodes' agents. 0: off.
  double prefetch_window_s = 3600;
  double rate_per_second = 200;  // per-user token bucket (0 disables)
  double rate_burst = 400;
  int64_t idempotency_ttl_ms = 24LL * 3600 * 1000;
  int64_t stop_grace_ms = 10'000;  // SIGTERM → SIGKILL, told to agents with every stop
  // Gang rendezvous (docs/fleet-agent.md): a job's MASTER_PORT is
  // rendezvous_port_min + (job id mod the range's size); 1 <= min <= max <= 65535.
  int rendezvous_port_min = 29500;
  int rendezvous_port_max = 30499;
  // Open watch streams (GET /v1/jobs:watch as server-sent events); they
  // hold no worker thread. Beyond it a stream is answered 503.
  int max_watch_streams = 1000;
  // Webhooks (docs/fleet-api.md#webhooks): the first retry waits this long,
  // each later one twice as long (at most 10 minutes); after
  // webhook_max_attempts attempts a delivery fails for good.
  int64_t webhook_retry_base_ms = 2'000;
  int webhook_max_attempts = 12;
  int max_page_size = 500;
  int default_page_size = 50;
  // Scheduler policies, pools, quotas and providers (YAML, docs/fleet-config.md).
  // Empty: FIFO order, bin-packing, no quotas, no cloud pools. The file is
  // re-read when it changes; an invalid version is logged and ignored.
  std::string scheduler_config;
  // Container registries job images are resolved at (YAML, docs/fleet-images.md):
  // credentials, plain-http registries, CA file. Empty: every registry
  // anonymously, over https (loopback ones over http).
  std::string registry_config;
  // The `ferry` binary the local provider starts agents with; empty: the
  // running executable (/proc/self/exe).
  std::string ferry_binary;
  // HTTPS: the server's certificate (PEM, leaf first, then intermediates) and
  // its private key (PEM, unencrypted). Both or neither; empty: plain HTTP.
  // Unreadable files or a key that does not match the certificate stop the
  // server at start.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The CA file the local provider's agents verify this server with (passed
  // as their --ca-file); empty: theirs is the system's CA store.
  std::string ca_file;
  // The dashboard's Chart.js (Debian's libjs-chart.js), served at
  // /ui/vendor/chart.js and read when a page asks for it; empty, or a file
  // that is missing: the pages work and draw no charts (docs/fleet-dashboard.md).
  std::string ui_chart_js = "/usr/share/javascript/chart.js/chart.min.js";
};

// Runs until `stop` becomes true or SIGINT/SIGTERM arrives (when
// `handle_signals`). On a fresh store it creates tenant/team "default", a
// platform admin "admin" and an agent identity "agent", and writes their
// tokens to <data_dir>/admin.token and <data_dir>/agent.token (mode 0600).
Status RunServer(const ServerOptions& options, std::atomic<bool>* stop = nullptr,
                 bool handle_signals = true);

}  // namespace ferry::fleet
