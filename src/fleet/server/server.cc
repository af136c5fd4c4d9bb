// RunServer (include/ferry/fleet/server.h): options, startup, the threads of
// the server and the order in which they stop. The rest of FleetServer is
// in the files fleet_server.h lists.
#include "ferry/fleet/server.h"

#include <httplib.h>
#include <signal.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <thread>

#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/listener.h"
#include "fleet/server/raw_headers.h"
#include "fleet/server/server_log.h"

namespace ferry::fleet::server_internal {

namespace {

volatile std::sig_atomic_t g_signalled = 0;
void OnStopSignal(int) { g_signalled = 1; }

// Streams cost no worker; long polls do, so they get a quarter of the pool.
WatchHub::Options WatchOptions(const ServerOptions& options) {
  WatchHub::Options watch;
  watch.max_streams = options.max_watch_streams;
  watch.max_long_polls = std::max(1, options.threads / 4);
  return watch;
}

}  // namespace

FleetServer::FleetServer(const ServerOptions& options, std::unique_ptr<httplib::Server> listener,
                         std::unique_ptr<Store> store, std::unique_ptr<sched::Scheduler> scheduler,
                         std::optional<ConfigWatcher> watcher)
    : options_(options),
      store_(std::move(store)),
      listener_(std::move(listener)),
      http_(*listener_),
      limiter_(options.rate_per_second, options.rate_burst),
      token_cache_(4096, 5'000),
      max_long_polls_(std::max(1, options.threads - 2)),
      watch_(store_.get(), &metrics_.registry(), WatchOptions(options),
             [this](const std::string& what, const Status& status) { LogError(what, status); }) {
  WebhookDispatcher::Options hooks;
  hooks.retry_base_ms = options.webhook_retry_base_ms;
  hooks.max_attempts = options.webhook_max_attempts;
  webhooks_ = std::make_unique<WebhookDispatcher>(
      store_.get(), &metrics_.registry(), hooks, [this] { return watch_.Head(); },
      &FleetServer::WebhookBody,
      [this](const std::string& what, const Status& status) { LogError(what, status); });
  core_.scheduler = std::move(scheduler);
  // Valid: the scheduler above was made from it.
  (void)checker_.Configure(core_.scheduler->config());
  core_.watcher = std::move(watcher);
  core_.config_loaded_ms = NowMs();
  InstallRoutes();
}

// The provisioning controller, with the local provider's defaults: agents
// talk to this server, with the agent token and a work dir under data_dir.
Status FleetServer::StartProvisioning(int port) {
  ProvisioningController::Options options;
  std::string host = options_.host;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  const std::filesystem::path dir(options_.data_dir.empty() ? "." : options_.data_dir);
  std::error_code ec;
  const char* scheme = options_.tls_cert_file.empty() ? "http://" : "https://";
  options.local_base.server_url = scheme + host + ":" + std::to_string(port);
  options.local_base.ca_file =
      options_.ca_file.empty() ? "" : std::filesystem::absolute(options_.ca_file, ec).string();
  options.local_base.agent_token_file = std::filesystem::absolute(dir / "agent.token", ec).string();
  options.local_base.work_dir = std::filesystem::absolute(dir / "cloud-nodes", ec).string();
  options.local_base.ferry_binary = options_.ferry_binary;
  if (options.local_base.ferry_binary.empty()) {
    options.local_base.ferry_binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  }
  options.on_change = [this](bool nodes_lost) {
    checker_.NodesChanged();
    if (nodes_lost) {
      WakeAllNodes();
      WakeLogWaiters();
    }
    WakeScheduler();
  };
  options.log_error = [this](const std::string& what, const Status& status) {
    LogError(what, status);
  };
  options.log_info = [](const std::string& line) { ServerLog().Info(line); };
  provisioning_ = std::make_unique<ProvisioningController>(store_.get(), std::move(options));
  sched::Config config;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    config = core_.scheduler->config();
  }
  FERRY_RETURN_NOT_OK(provisioning_->Configure(config));
  provisioning_->Start();
  return Status::OK();
}

Status FleetServer::StartSlurm() {
  SlurmController::Options options;
  options.data_dir = options_.data_dir.empty() ? "." : options_.data_dir;
  options.lease_ms = options_.lease_ms;
  options.stop_grace_ms = options_.stop_grace_ms;
  options.rendezvous_port_min = options_.rendezvous_port_min;
  options.rendezvous_port_max = options_.rendezvous_port_max;
  options.on_change = [this] {
    checker_.NodesChanged();
    WakeLogWaiters();
    WakeScheduler();
  };
  options.on_logs = [this] { WakeLogWaiters(); };
  options.log_error = [this](const std::string& what, const Status& status) {
    LogError(what, status);
  };
  options.log_info = [](const std::string& line) { ServerLog().Info(line); };
  auto controller = std::make_unique<SlurmController>(store_.get(), std::move(options));
  sched::Config config;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    config = core_.scheduler->config();
  }
  FERRY_RETURN_NOT_OK(controller->Configure(config));
  controller->Start();
  slurm_ = std::move(controller);
  return Status::OK();
}

Status FleetServer::Run(std::atomic<bool>* stop, bool handle_signals) {
  const int threads = options_.threads;
  // Connections queued for a worker make idle kept-alive ones give theirs up
  // (raw_headers.h), so slow clients cannot hold the whole pool.
  auto waiting = std::make_shared<std::atomic<int>>(0);
  http_.new_task_queue = [threads, waiting] {
    return NewCountingPool(static_cast<size_t>(threads), waiting);
  };
  SetKeepAliveYield(http_, [waiting] { return waiting->load() > 0; });
  // httplib's limit holds for every route; the smaller limit of the other
  // routes is checked as they read their bodies (ReadJsonBody).
  http_.set_payload_max_length(static_cast<size_t>(std::max(
      {options_.max_body_bytes, options_.max_manifest_bytes, options_.max_code_bundle_bytes})));
  http_.set_keep_alive_timeout(2);
  // httplib closes a kept-alive connection after 5 requests by default, and
  // its listen backlog is 5: busy clients then reconnect all the time and a
  // dropped SYN costs them a 1 s retransmit. Keep connections open instead.
  http_.set_keep_alive_max_count(100'000);
  // Without it a keep-alive response waits ~40 ms for the client's delayed ACK (Nagle).
  http_.set_tcp_nodelay(true);
  http_.set_read_timeout(10, 0);
  http_.set_write_timeout(10, 0);

  int port = options_.port;
  if (port == 0) {
    port = http_.bind_to_any_port(options_.host);
    if (port <= 0) return Status::IOError("cannot listen on " + options_.host + " (any port)");
  } else if (!http_.bind_to_port(options_.host, port)) {
    return Status::IOError("cannot listen on " + options_.host + ":" + std::to_string(port));
  }
  // Handlers go in before the port file appears, so whoever waits for the
  // file may signal the server right away.
  struct sigaction old_int {
  }, old_term{};
  auto restore_signals = [&] {
    if (!handle_signals) return;
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  };
  if (handle_signals) {
    g_signalled = 0;
    struct sigaction action {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int);
    sigaction(SIGTERM, &action, &old_term);
  }
  if (!options_.port_file.empty()) {
    Status written = WriteFileAtomically(options_.port_file, std::to_string(port) + "\n", 0644);
    if (!written.ok()) {
      http_.stop();
      restore_signals();
      return written;
    }
  }

  if (Status started = StartProvisioning(port); !started.ok()) {
    http_.stop();
    restore_signals();
    return started.WithPrefix("scheduler providers: ");
  }
  if (Status started = StartSlurm(); !started.ok()) {
    http_.stop();
    restore_signals();
    provisioning_->Stop();
    return started.WithPrefix("Slurm pools: ");
  }

  std::atomic<bool> listen_ended{false};
  std::thread listener([&] {
    http_.listen_after_bind();
    listen_ended = true;
  });
  TailJobEventsForMetrics();  // the job metrics count from here on
  metrics_.set_cached(options_.metrics_refresh_ms > 0);
  if (options_.metrics_refresh_ms > 0) metrics_.RefreshStoreGauges(*store_);
  std::thread scheduler([this] { SchedulerLoop(); });
  std::thread maintenance([this] { MaintenanceLoop(); });
  webhooks_->Start();
  ServerLog().Info("listening on " + std::string(options_.tls_cert_file.empty() ? "" : "https://") +
                   options_.host + ":" + std::to_string(port) + " (store " +
                   std::string(store_->backend()) + ", schema " +
                   std::to_string(store_->schema_version()) + ")");

  while (!(stop != nullptr && stop->load()) && !(handle_signals && g_signalled) &&
         !listen_ended.load()) {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
  const bool listener_failed =
      listen_ended.load() && !(stop != nullptr && stop->load()) && !(handle_signals && g_signalled);

  // Stop order: flag (long polls return), listener (no new requests, the pool
  // drains), then the loops.
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  WakeAllNodes();
  WakeLogWaiters();
  WakeScheduler();
  webhooks_->Stop();  // an attempt in flight finishes (at most its timeouts)
  watch_.Stop();      // long polls return, streams close
  http_.stop();
  listener.join();
  scheduler.join();
  maintenance.join();
  // Cloud nodes go with the server (the local provider stops its agents).
  provisioning_->Stop();
  // Slurm jobs do not: they go on, and the next server adopts them.
  slurm_->Stop();
  restore_signals();
  ServerLog().Info("stopped");
  if (listener_failed) return Status::IOError("the HTTP listener stopped unexpectedly");
  return Status::OK();
}

}  // namespace ferry::fleet::server_internal

namespace ferry::fleet {

namespace {

Status ValidateOptions(const ServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return Status::Invalid("server: port must be between 0 and 65535");
  }
  if (options.threads < 1 || options.threads > 1024) {
    return Status::Invalid("server: threads must be between 1 and 1024");
  }
  if (options.lease_ms < 100) return Status::Invalid("server: lease_ms must be at least 100");
  if (options.schedule_interval_ms < 1) {
    return Status::Invalid("server: schedule_interval_ms must be at least 1");
  }
  if (options.max_body_bytes < 1024) {
    return Status::Invalid("server: max_body_bytes must be at least 1024");
  }
  if (options.max_manifest_bytes < 1024) {
    return Status::Invalid("server: max_manifest_bytes must be at least 1024");
  }
  if (options.max_code_bundle_bytes < 1024) {
    return Status::Invalid("server: max_code_bundle_bytes must be at least 1024");
  }
  if (options.rate_per_second < 0 || options.rate_burst < 0) {
    return Status::Invalid("server: rate limits must not be negative");
  }
  if (options.idempotency_ttl_ms < 1000) {
    return Status::Invalid("server: idempotency_ttl_ms must be at least 1000");
  }
  if (options.stop_grace_ms < 0) return Status::Invalid("server: stop_grace_ms must be >= 0");
  if (options.rendezvous_port_min < 1 || options.rendezvous_port_max > 65535 ||
      options.rendezvous_port_min > options.rendezvous_port_max) {
    return Status::Invalid("server: need 1 <= rendezvous_port_min <= rendezvous_port_max <= 65535");
  }
  if (options.metrics_refresh_ms < 0 || options.metrics_refresh_ms > 3'600'000) {
    return Status::Invalid("server: metrics_refresh_ms must be between 0 and 3600000");
  }
  if (Result<logging::Format> format = logging::ParseFormat(options.log_format); !format.ok()) {
    return format.status().WithPrefix("server: ");
  }
  if (options.max_watch_streams < 0 || options.max_watch_streams > 100'000) {
    return Status::Invalid("server: max_watch_streams must be between 0 and 100000");
  }
  if (options.webhook_retry_base_ms < 1 || options.webhook_retry_base_ms > 3'600'000) {
    return Status::Invalid("server: webhook_retry_base_ms must be between 1 and 3600000");
  }
  if (options.webhook_max_attempts < 1 || options.webhook_max_attempts > 100) {
    return Status::Invalid("server: webhook_max_attempts must be between 1 and 100");
  }
  if (options.max_page_size < 1 || options.default_page_size < 1 ||
      options.default_page_size > options.max_page_size) {
    return Status::Invalid("server: need 1 <= default_page_size <= max_page_size");
  }
  return Status::OK();
}

}  // namespace

Status RunServer(const ServerOptions& options, std::atomic<bool>* stop, bool handle_signals) {
  FERRY_RETURN_NOT_OK(ValidateOptions(options));
  server_internal::ServerLog().set_format(*logging::ParseFormat(options.log_format));
  // TLS files and the config first: a bad one stops the server before it
  // touches the store.
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<httplib::Server> listener,
                        server_internal::MakeListener(options));
  sched::Config config;
  std::optional<ConfigWatcher> watcher;
  if (!options.scheduler_config.empty()) {
    watcher.emplace(options.scheduler_config);
    Result<std::optional<sched::Config>> first = watcher->Poll();
    if (!first.ok()) return first.status().WithPrefix("scheduler config: ");
    if (!first->has_value()) {
      return Status::Invalid("scheduler config: cannot read " + options.scheduler_config);
    }
    config = std::move(**first);
  }
  Result<std::unique_ptr<sched::Scheduler>> scheduler = sched::Scheduler::Make(std::move(config));
  if (!scheduler.ok()) return scheduler.status().WithPrefix("scheduler config: ");
  server_internal::RegistryConfig registries;
  if (!options.registry_config.empty()) {
    Result<server_internal::RegistryConfig> loaded =
        server_internal::LoadRegistryConfig(options.registry_config);
    if (!loaded.ok()) return loaded.status().WithPrefix("registry config: ");
    registries = std::move(*loaded);
  }
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<Store> store, OpenStore(options.store_url));
  FERRY_RETURN_NOT_OK(server_internal::Bootstrap(*store, options.data_dir));
  server_internal::FleetServer server(options, std::move(listener), std::move(store),
                                      std::move(*scheduler), std::move(watcher));
  server.UseRegistries(std::move(registries));
  return server.Run(stop, handle_signals);
}

}  // namespace ferry::fleet
