// The fleet control plane behind RunServer (include/ferry/fleet/server.h):
// the FleetServer class, shared by the files that implement it, one API area
// or one background loop each:
//
//   server.cc             RunServer: options, startup, threads, stop order
//   bootstrap.cc          the first users and their token files
//   http_plumbing.cc      dispatch, authentication, roles, rate limits,
//                         replies and request reading helpers
//   routes.cc             the route table and httplib's own error answers
//   health_handlers.cc    /healthz, /readyz
//   job_handlers.cc       /v1/jobs...: submit, list, get, cancel, events, logs
//   watch_handlers.cc     /v1/jobs:watch (watch_hub.h streams it)
//   node_handlers.cc      /v1/nodes, /v1/pools, /v1/gpus
//   user_handlers.cc      /v1/whoami, /v1/admin/users...
//   agent_handlers.cc     /v1/agent/...: register, sync, log uploads
//   webhook_handlers.cc   /v1/webhooks... (webhooks.h delivers them)
//   dataset_handlers.cc   /v1/datasets...: register, list, show
//   scheduler_handler.cc  /v1/scheduler
//   metrics_handler.cc    /metrics (server_metrics.h)
//   openapi_handler.cc    /v1/openapi.json (openapi.h, openapi.json)
//   ui_handler.cc         /ui: the dashboard's embedded files (ui_assets.h)
//   scheduler_loop.cc     the scheduler thread's passes and preemptions
//   maintenance_loop.cc   lease and runtime expiry, config reload, key purge
//
// Threads: httplib's pool serves requests (long polls block a worker); one
// scheduler thread runs passes of the scheduling core (sched.h) on a timer
// and when woken; the provisioning controller's thread talks to the cloud
// providers; one maintenance thread expires leases and runtimes, reloads the
// scheduler config and purges keys; the webhook dispatcher's thread sends
// webhooks; the calling thread waits for the stop
// request and then tears everything down in order. Internal to src/fleet/server.
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/model.h"
#include "ferry/fleet/model_json.h"
#include "ferry/fleet/sched.h"
#include "ferry/fleet/sched_config.h"
#include "ferry/fleet/server.h"
#include "ferry/fleet/store.h"
#include "fleet/server/api_tokens.h"
#include "fleet/server/in_flight_keys.h"
#include "fleet/server/node_caches.h"
#include "fleet/server/prefetch_plans.h"
#include "fleet/server/provisioning.h"
#include "fleet/server/rate_limiter.h"
#include "fleet/server/registry.h"
#include "fleet/server/scheduler_view.h"
#include "fleet/server/server_metrics.h"
#include "fleet/server/slurm_pools.h"
#include "fleet/server/watch_hub.h"
#include "fleet/server/webhooks.h"

namespace ferry::fleet::server_internal {

// Who may call a route.
enum class Access {
  kPublic,  // no token (health)
  kUser,    // any role but agent
  kAdmin,   // platform_admin
  kAgent,   // agent or platform_admin
};

// One request being handled.
struct Call {
  const httplib::Request& req;
  httplib::Response& res;
  std::vector<std::string> captures;
  Principal principal;
  // The query, split at the first '=' of each pair (httplib splits at the
  // last one, which breaks `label=key=value`).
  std::multimap<std::string, std::string> params;

  bool HasParam(const std::string& name) const { return params.count(name) > 0; }
  size_t ParamCount(const std::string& name) const { return params.count(name); }
  std::string Param(const std::string& name, size_t index = 0) const {
    auto range = params.equal_range(name);
    for (auto it = range.first; it != range.second; ++it, --index) {
      if (index == 0) return it->second;
    }
    return "";
  }
};

struct Route {
  std::string method;
  std::string pattern;  // "{}" stands for one path segment (see MatchPath)
  Access access;
  std::function<void(Call&)> handler;
};

// Writes `text` to `path` through a temporary file and a rename, so readers
// never see a partial file. `mode` applies from creation on.
Status WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode);

// On a store without users: tenant/team "default", users "admin" and
// "agent", and their tokens in <data_dir>. The token files are written
// before the store learns the hashes, so a token the store accepts is never lost.
Status Bootstrap(Store& store, const std::string& data_dir);

// The scheduling core and what it was last told and did. Shared by the
// scheduler thread (cycles), the maintenance thread (config reloads) and
// request handlers (quota checks, GET /v1/scheduler); one lock.
struct CoreState {
  std::mutex mu;
  std::unique_ptr<sched::Scheduler> scheduler;
  std::optional<ConfigWatcher> watcher;  // with --scheduler-config
  std::string config_error;              // the last reload that failed (cleared by a good one)
  int64_t config_loaded_ms = 0;
  sched::CycleStats last_stats;
  std::vector<sched::QuotaStanding> last_quotas;  // after the last cycle
  // The last cycle's reason for each job it did not place, by job id (for
  // GET /v1/jobs/{id}'s explanation).
  std::vector<PendingReason> last_pending;
  int64_t last_cycle_ms = 0;
  int64_t preemptions = 0;  // since the server started
};

class FleetServer {
 public:
  FleetServer(const ServerOptions& options, std::unique_ptr<httplib::Server> listener,
              std::unique_ptr<Store> store, std::unique_ptr<sched::Scheduler> scheduler,
              std::optional<ConfigWatcher> watcher);

  Status Run(std::atomic<bool>* stop, bool handle_signals);

  // Where job images are resolved (registry.h); before Run. Without a call:
  // every registry anonymously.
  void UseRegistries(RegistryConfig config);

  // The route table as (method, pattern) pairs in the order routes match,
  // "{}" standing for one path segment. Filled by the constructor; the
  // OpenAPI coverage test (openapi_test.cc) compares it with openapi.json.
  std::vector<std::pair<std::string, std::string>> RouteTable() const {
    std::vector<std::pair<std::string, std::string>> table;
    table.reserve(routes_.size());
    for (const Route& route : routes_) table.emplace_back(route.method, route.pattern);
    return table;
  }

 private:
  // ---- Responses (http_plumbing.cc).
  void SendJson(Call& c, int status, const nlohmann::json& body);
  void SendProblem(Call& c, int status, std::string_view type, std::string_view detail,
                   const std::vector<FieldError>& errors = {});
  void SendStoreError(Call& c, const Status& status);
  void SendValidation(Call& c, const std::vector<FieldError>& errors);
  void SendNoJob(Call& c, int64_t id);  // 404

  // ---- Request helpers (http_plumbing.cc). Each returns nullopt (or
  // false) after sending the problem.
  // `max_bytes` 0: options_.max_body_bytes.
  std::optional<nlohmann::json> ReadJsonBody(Call& c, int64_t max_bytes = 0);
  std::optional<int64_t> JobIdFrom(Call& c);
  // Parses an integer query parameter; `fallback` when absent.
  std::optional<int64_t> IntParam(Call& c, const std::string& name, int64_t fallback, int64_t min,
                                  int64_t max);
  bool OnlyParams(Call& c, std::initializer_list<std::string_view> allowed);
  // The `state` query parameter (repeatable, comma-separated, any case) into
  // `states` without repeats; sends 400 and returns false on an unknown state.
  bool StateParams(Call& c, std::vector<JobState>* states);
  // Reads the JSON body and parses it with `parse`, one of request_bodies.h's
  // parsers; a body that breaks its rules is answered 422.
  template <typename Parse>
  auto ParseJsonBody(Call& c, Parse parse)
      -> decltype(parse(nlohmann::json(), static_cast<std::vector<FieldError>*>(nullptr))) {
    std::optional<nlohmann::json> body = ReadJsonBody(c);
    if (!body) return std::nullopt;
    std::vector<FieldError> errors;
    auto parsed = parse(*body, &errors);
    if (!parsed) SendValidation(c, errors);
    return parsed;
  }
  // A query parameter that may appear at most once.
  bool AtMostOnce(Call& c, const std::string& name);
  Scope ScopeOf(const Principal& p) const {
    return p.role == Role::kPlatformAdmin ? Scope::All() : Scope::Tenant(p.tenant_id);
  }

  // ---- Routing and auth (routes.cc, http_plumbing.cc).
  void AddRoute(const std::string& method, const std::string& pattern, Access access,
                std::function<void(Call&)> handler) {
    routes_.push_back({method, pattern, access, std::move(handler)});
  }
  void InstallRoutes();
  // 405 with Allow when a route has `path` under another method, else 404,
  // for a method no route has and httplib does not route; closes the
  // connection (routes.cc).
  void AnswerUnroutedMethod(const std::string& method, const std::string& path,
                            httplib::Response& res);
  // What DispatchToRoute learnt of a request, for its metrics and log line.
  struct RequestInfo {
    const Route* route = nullptr;  // null: no route matched
    std::optional<Principal> principal;
    std::string job_id;  // the job the path names, or the one a submission created
  };
  // Dispatch times, counts (metrics_) and, with --log-format json, logs each
  // request around DispatchToRoute, which finds the route, authenticates and
  // runs the handler. Every answer carries an X-Request-Id: the caller's
  // when it sent a usable one, else a new one.
  void Dispatch(const httplib::Request& req, httplib::Response& res);
  void DispatchToRoute(const httplib::Request& req, httplib::Response& res, RequestInfo* info);
  // Resolves the bearer token; sends 401 and returns nullopt when it fails.
  std::optional<Principal> Authenticate(Call& c);

  // ---- Handlers, one file per API area.
  void Health(Call& c);
  void Ready(Call& c);
  void WhoAmI(Call& c);
  void SubmitJob(Call& c);
  void GetJob(Call& c);
  // Why a PENDING job waits, from the last cycle's decision (null for other
  // states, or before a cycle has seen the job).
  nlohmann::json Explanation(const Job& job);
  void ListJobs(Call& c);
  void CancelJob(Call& c);
  void ListEvents(Call& c);
  void ReadLogs(Call& c);
  void WatchJobs(Call& c);
  void ListNodes(Call& c);
  void GetNode(Call& c);
  // A node as GET /v1/nodes shows it to `viewer`, with its cache report.
  nlohmann::json NodeJson(const Node& node, const Principal& viewer) const;
  void SetDrain(Call& c, bool drain);
  void ListPools(Call& c);
  void ListGpus(Call& c);
  void CreateUser(Call& c);
  void ListUsers(Call& c);
  void RevokeUser(Call& c);
  void IssueToken(Call& c);
  void AgentRegister(Call& c);
  void AgentSync(Call& c);
  void AgentLogs(Call& c);
  void CreateDataset(Call& c);
  void ListDatasets(Call& c);
  void GetDataset(Call& c);
  void GetDatasetVersion(Call& c);
  // Resolves the dataset inputs of a submission in the caller's tenant:
  // fills version, manifest_digest, bytes and objects (uri inputs: bytes and
  // objects from their size), and adds each dataset to spec->datasets, the
  // locality hint. Returns a field error per unknown dataset or version.
  Result<std::vector<FieldError>> ResolveInputs(const Principal& principal, JobSpec* spec);
  // ---- /v1/code (code_handlers.cc): a tenant's code bundles.
  void UploadCode(Call& c);
  void GetCode(Call& c);
  void AgentGetCode(Call& c);
  // Checks the spec's code bundle exists for the tenant and fills its size.
  std::vector<FieldError> ResolveCode(const Principal& principal, JobSpec* spec);
  std::string CodePath(int64_t tenant_id, const std::string& hex) const;
  void CreateWebhook(Call& c);
  void ListWebhooks(Call& c);
  void GetWebhook(Call& c);
  void DeleteWebhook(Call& c);
  void ListWebhookDeliveries(Call& c);
  // The id in the path; answers 404 itself when it is not one.
  std::optional<int64_t> WebhookIdFrom(Call& c);
  // What a webhook is sent for one job event (docs/fleet-api.md#webhooks).
  static std::string WebhookBody(const Webhook& hook, const WatchedEvent& event);
  void GetScheduler(Call& c);
  void GetMetrics(Call& c);
  void GetOpenApi(Call& c);
  // The dashboard (ui_handler.cc): "/" and "/ui" redirect to "/ui/", which is
  // index.html; "/ui/{name}" an embedded file; "/ui/vendor/chart.js" Chart.js.
  void RedirectToUi(Call& c);
  void ServeUi(Call& c);
  void ServeUiVendor(Call& c);

  // Adds a new token for `owner` (a new user or an existing one) and answers
  // 201 with the user and the token, shown this once.
  void SendNewToken(Call& c, const Principal& owner, const std::string& token,
                    const std::string& note);

  // ---- Wake-ups.
  void WakeScheduler() {
    {
      std::lock_guard<std::mutex> lock(sched_mu_);
      sched_wake_ = true;
    }
    sched_cv_.notify_one();
  }
  void WakeNodes(const std::set<std::string>& names) {
    if (names.empty()) return;
    {
      std::lock_guard<std::mutex> lock(node_mu_);
      for (const auto& name : names) ++node_gen_[name];
    }
    node_cv_.notify_all();
    if (slurm_) slurm_->Wake(names);  // Slurm pools' nodes have no agent to wake
  }
  void WakeAllNodes() {
    {
      std::lock_guard<std::mutex> lock(node_mu_);
      ++all_nodes_gen_;
    }
    node_cv_.notify_all();
    if (slurm_) slurm_->WakeAll();
  }
  void WakeLogWaiters() {
    {
      std::lock_guard<std::mutex> lock(log_mu_);
      ++log_gen_;
    }
    log_cv_.notify_all();
  }
  // Nodes holding the job's current placement (to tell them to stop).
  std::set<std::string> NodesOfJob(int64_t job_id);

  // ---- Background loops (scheduler_loop.cc, maintenance_loop.cc, server.cc).
  void SchedulerLoop();
  Status SchedulingPass();
  void TailJobEventsForMetrics();
  void ApplyPreemptions(const std::vector<sched::Preemption>& preemptions,
                        const sched::Snapshot& snapshot);
  void MaintenanceLoop();
  void ReloadConfig();
  Status StartProvisioning(int port);
  // The Slurm pools' controller (slurm_pools.h), for the config's slurm providers.
  Status StartSlurm();
  bool WaitForStop(int64_t ms) {
    std::unique_lock<std::mutex> lock(stop_mu_);
    return stop_cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stopping_.load(); });
  }
  // Writes "ferry server: <what>: <status>" to stderr, the same line at most every 10 s.
  void LogError(const std::string& what, const Status& status);

  // Bounds the long polls so that some workers always serve ordinary requests.
  bool TryEnterLongPoll() {
    int current = long_polls_.load();
    while (current < max_long_polls_) {
      if (long_polls_.compare_exchange_weak(current, current + 1)) return true;
    }
    LogError("long polls", Status::Invalid("all " + std::to_string(max_long_polls_) +
                                           " waiting slots are busy, answering at once; "
                                           "raise --threads above the number of nodes"));
    return false;
  }
  void LeaveLongPoll() { long_polls_.fetch_sub(1); }
  // A long-poll slot that is given back when the scope ends.
  class LongPollSlot {
   public:
    explicit LongPollSlot(FleetServer* server) : server_(server) {}
    ~LongPollSlot() {
      if (held_) server_->LeaveLongPoll();
    }
    LongPollSlot(const LongPollSlot&) = delete;
    LongPollSlot& operator=(const LongPollSlot&) = delete;
    bool TryEnter() { return held_ = server_->TryEnterLongPoll(); }
    bool held() const { return held_; }

   private:
    FleetServer* server_;
    bool held_ = false;
  };

  // ---- Node addresses and gang rendezvous (agent_handlers.cc).
  void RememberAddress(const std::string& node, const std::string& address);
  // What an agent needs to rendezvous a gang: every task's node address (the
  // node name when its agent never sent one) and the job's port.
  // ---- Images (image_handlers.cc). Fills spec->image_digest from the
  // image's registry; false after sending 422 (unknown image, access
  // refused) or 503 (registry unreachable).
  bool ResolveImage(Call& c, JobSpec* spec);
  void AddRendezvous(TaskAssignment* assignment);
  // Fills assignment->inputs from its spec's inputs: a dataset input's
  // manifest objects (read once per sync through `cache`), a uri input's
  // one object. Fails only when the store does.
  using DatasetCache =
      std::map<std::tuple<int64_t, std::string, int64_t>, std::optional<DatasetVersion>>;
  Status AddInputs(TaskAssignment* assignment, DatasetCache* cache);
  // The same for any job: its spec's inputs with every object to fetch.
  Result<std::vector<StagedInput>> InputsOf(int64_t job_id, int64_t tenant_id, const JobSpec& spec,
                                            DatasetCache* cache);
  // After a cycle (scheduler thread): the inputs of blocked jobs that hold
  // nodes (reservations, drains) whose start is within
  // options_.prefetch_window_s, for those nodes' agents to fetch ahead
  // (prefetch_plans.h); wakes the agents whose orders changed.
  void PlanPrefetches(const sched::Decision& decision, const sched::Snapshot& snapshot);

  const ServerOptions options_;
  std::unique_ptr<Store> store_;
  // Plain HTTP or TLS (listener.h); everything else talks to it as http_.
  std::unique_ptr<httplib::Server> listener_;
  httplib::Server& http_;
  std::vector<Route> routes_;
  RateLimiter limiter_;
  InFlightKeys in_flight_;
  TokenCache token_cache_;
  ServerMetrics metrics_;
  SubmissionChecker checker_;
  std::unique_ptr<ImageResolver> images_ = std::make_unique<ImageResolver>(RegistryConfig{});
  int64_t metrics_event_cursor_ = -1;  // the last job event the metrics counted; -1: not started

  std::atomic<bool> stopping_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;

  std::mutex sched_mu_;
  std::condition_variable sched_cv_;
  bool sched_wake_ = false;
  // The pending reason last written per job (scheduler thread only), with the
  // attempt it was written for: a long queue's unchanged reasons are not
  // rewritten every pass.
  std::unordered_map<int64_t, std::pair<int, std::string>> written_reasons_;
  IdleTracker idle_;          // scheduler thread only
  int64_t last_pass_ms_ = 0;  // scheduler thread only

  CoreState core_;
  std::unique_ptr<ProvisioningController> provisioning_;
  // Slurm pools (slurm_pools.h); set before the loops start, reset after they end.
  std::unique_ptr<SlurmController> slurm_;

  std::mutex node_mu_;
  std::condition_variable node_cv_;
  std::map<std::string, uint64_t> node_gen_;
  uint64_t all_nodes_gen_ = 0;

  // The advertised address of each node, from its last registration or sync
  // that sent one (not stored: agents send it with every sync, so a restarted
  // server learns it again within a sync interval).
  std::mutex address_mu_;
  std::map<std::string, std::string> node_addresses_;
  // Each node's latest input cache report (node_caches.h), also not stored.
  NodeCaches caches_;
  // What each node's agent fetches ahead for jobs still waiting (not stored either).
  PrefetchPlans prefetch_;
  // Held jobs (job, attempt) found to need nothing fetched ahead; the
  // scheduler thread's alone.
  std::set<std::pair<int64_t, int>> nothing_ahead_;

  std::mutex log_mu_;
  std::condition_variable log_cv_;
  uint64_t log_gen_ = 0;

  const int max_long_polls_;
  std::atomic<int> long_polls_{0};

  std::mutex error_mu_;
  std::map<std::string, int64_t> last_error_ms_;

  // Last, so that it stops (and its thread ends) before anything it uses goes.
  WatchHub watch_;
  // After the hub: it asks the hub for the settled head.
  std::unique_ptr<WebhookDispatcher> webhooks_;
};

}  // namespace ferry::fleet::server_internal
