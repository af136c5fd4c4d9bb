// The fleet control plane: REST API over a Store (docs/fleet-api.md), the
// scheduler loop, lease/runtime expiry and idempotency-key purging.
//
// Threads: httplib's pool serves requests (long polls block a worker); one
// scheduler thread runs passes of the scheduling core (sched.h) on a timer
// and when woken; the provisioning controller's thread talks to the cloud
// providers; one maintenance thread expires leases and runtimes, reloads the
// scheduler config and purges keys; the calling thread waits for the stop
// request and then tears everything down in order.
#include "ferry/fleet/server.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ferry/fleet/model_json.h"
#include "ferry/fleet/provider.h"
#include "ferry/fleet/sched.h"
#include "ferry/fleet/sched_config.h"
#include "ferry/fleet/store.h"
#include "fleet/server/listener.h"
#include "fleet/server/raw_headers.h"
#include "fleet/server/provisioning.h"
#include "fleet/server/scheduler_view.h"
#include "fleet/server/server_internal.h"
#include "fleet/server/wire.h"

namespace ferry::fleet {
namespace {

using nlohmann::json;
using server_internal::NowMs;

constexpr int kMaxJsonDepth = 64;
constexpr int64_t kMaxLogWaitMs = 30'000;
constexpr int64_t kDefaultLogWaitMs = 10'000;
constexpr int64_t kPurgeIntervalMs = 60'000;
// With nothing pending, a pass still runs this often: fair-share usage
// advances and idle cloud nodes are found.
constexpr int64_t kIdlePassIntervalMs = 1'000;

volatile std::sig_atomic_t g_signalled = 0;
void OnStopSignal(int) { g_signalled = 1; }

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

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Writes `text` to `path` through a temporary file and a rename, so readers
// never see a partial file. `mode` applies from creation on.
Status WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::FromErrno(errno, "cannot create " + tmp);
  ::fchmod(fd, mode);
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::FromErrno(err, "cannot write " + tmp);
    }
    written += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(err, "cannot rename " + tmp + " to " + path);
  }
  return Status::OK();
}

// On a store without users: tenant/team "default", users "admin" and
// "agent", and their tokens in <data_dir>. The token files are written
// before the store learns the hashes, so a token the store accepts is never lost.
Status Bootstrap(Store& store, const std::string& data_dir) {
  FERRY_ASSIGN_OR_RAISE(int64_t users, store.CountUsers());
  if (users > 0) return Status::OK();
  std::error_code ec;
  std::filesystem::create_directories(data_dir.empty() ? "." : data_dir, ec);
  if (ec) return Status::IOError("cannot create data directory " + data_dir + ": " + ec.message());
  const std::filesystem::path dir(data_dir.empty() ? "." : data_dir);
  FERRY_ASSIGN_OR_RAISE(std::string admin_token, server_internal::NewToken());
  FERRY_ASSIGN_OR_RAISE(std::string agent_token, server_internal::NewToken());
  FERRY_RETURN_NOT_OK(WriteFileAtomically((dir / "admin.token").string(), admin_token, 0600));
  FERRY_RETURN_NOT_OK(WriteFileAtomically((dir / "agent.token").string(), agent_token, 0600));
  const int64_t now = NowMs();
  FERRY_ASSIGN_OR_RAISE(int64_t tenant, store.EnsureTenant("default"));
  FERRY_ASSIGN_OR_RAISE(int64_t team, store.EnsureTeam(tenant, "default"));
  FERRY_ASSIGN_OR_RAISE(int64_t admin, store.CreateUser(team, "admin", Role::kPlatformAdmin));
  FERRY_RETURN_NOT_OK(store.AddToken(admin, Sha256Hex(admin_token), "bootstrap", now).status());
  FERRY_ASSIGN_OR_RAISE(int64_t agent, store.CreateUser(team, "agent", Role::kAgent));
  FERRY_RETURN_NOT_OK(store.AddToken(agent, Sha256Hex(agent_token), "bootstrap", now).status());
  std::fprintf(stderr, "ferry server: bootstrapped; tokens in %s and %s\n",
               (dir / "admin.token").c_str(), (dir / "agent.token").c_str());
  return Status::OK();
}

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
  int64_t last_cycle_ms = 0;
  int64_t preemptions = 0;  // since the server started
};

class FleetServer {
 public:
  FleetServer(const ServerOptions& options, std::unique_ptr<httplib::Server> listener,
              std::unique_ptr<Store> store, std::unique_ptr<sched::Scheduler> scheduler,
              std::optional<ConfigWatcher> watcher)
      : options_(options),
        store_(std::move(store)),
        listener_(std::move(listener)),
        http_(*listener_),
        limiter_(options.rate_per_second, options.rate_burst),
        token_cache_(4096, 5'000),
        max_long_polls_(std::max(1, options.threads - 2)) {
    core_.scheduler = std::move(scheduler);
    core_.watcher = std::move(watcher);
    core_.config_loaded_ms = NowMs();
  }

  Status Run(std::atomic<bool>* stop, bool handle_signals);

 private:
  // ---- Responses.
  void SendJson(Call& c, int status, const json& body) {
    c.res.status = status;
    c.res.set_content(server_internal::Dump(body), "application/json");
  }
  void SendProblem(Call& c, int status, std::string_view type, std::string_view detail,
                   const std::vector<FieldError>& errors = {}) {
    json body = server_internal::Problem(status, type, detail, c.req.path);
    if (!errors.empty()) {
      json list = json::array();
      for (const auto& e : errors) list.push_back(server_internal::FieldErrorJson(e));
      body["errors"] = std::move(list);
    }
    c.res.status = status;
    c.res.set_content(server_internal::Dump(body), "application/problem+json");
  }
  void SendStoreError(Call& c, const Status& status) {
    LogError("request " + c.req.method + " " + c.req.path, status);
    SendProblem(c, 500, "internal", "the request failed inside the server; nothing was changed");
  }
  void SendValidation(Call& c, const std::vector<FieldError>& errors) {
    const std::string detail = errors.size() == 1
                                   ? "1 field is invalid"
                                   : std::to_string(errors.size()) + " fields are invalid";
    SendProblem(c, 422, "validation", detail, errors);
  }

  // ---- Request helpers. Each returns nullopt after sending the problem.
  std::optional<json> ReadJsonBody(Call& c);
  std::optional<int64_t> JobIdFrom(Call& c);
  // Parses an integer query parameter; `fallback` when absent.
  std::optional<int64_t> IntParam(Call& c, const std::string& name, int64_t fallback, int64_t min,
                                  int64_t max);
  bool OnlyParams(Call& c, std::initializer_list<std::string_view> allowed);
  Scope ScopeOf(const Principal& p) const {
    return p.role == Role::kPlatformAdmin ? Scope::All() : Scope::Tenant(p.tenant_id);
  }

  // ---- Routing and auth.
  void AddRoute(const std::string& method, const std::string& pattern, Access access,
                std::function<void(Call&)> handler) {
    routes_.push_back({method, pattern, access, std::move(handler)});
  }
  void InstallRoutes();
  void Dispatch(const httplib::Request& req, httplib::Response& res);
  // Resolves the bearer token; sends 401 and returns nullopt when it fails.
  std::optional<Principal> Authenticate(Call& c);

  // ---- Handlers.
  void Health(Call& c) { SendJson(c, 200, {{"status", "ok"}}); }
  void Ready(Call& c);
  void WhoAmI(Call& c);
  void SubmitJob(Call& c);
  void GetJob(Call& c);
  void ListJobs(Call& c);
  void CancelJob(Call& c);
  void ListEvents(Call& c);
  void ReadLogs(Call& c);
  void ListNodes(Call& c);
  void GetNode(Call& c);
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
  void GetScheduler(Call& c);

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
  }
  void WakeAllNodes() {
    {
      std::lock_guard<std::mutex> lock(node_mu_);
      ++all_nodes_gen_;
    }
    node_cv_.notify_all();
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

  // ---- Background loops.
  void SchedulerLoop();
  Status SchedulingPass();
  void ApplyPreemptions(const std::vector<sched::Preemption>& preemptions,
                        const sched::Snapshot& snapshot);
  void MaintenanceLoop();
  void ReloadConfig();
  Status StartProvisioning(int port);
  bool WaitForStop(int64_t ms) {
    std::unique_lock<std::mutex> lock(stop_mu_);
    return stop_cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stopping_.load(); });
  }
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

  const ServerOptions options_;
  std::unique_ptr<Store> store_;
  // Plain HTTP or TLS (listener.h); everything else talks to it as http_.
  std::unique_ptr<httplib::Server> listener_;
  httplib::Server& http_;
  std::vector<Route> routes_;
  server_internal::RateLimiter limiter_;
  server_internal::InFlightKeys in_flight_;
  server_internal::TokenCache token_cache_;

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
  server_internal::IdleTracker idle_;  // scheduler thread only
  int64_t last_pass_ms_ = 0;           // scheduler thread only

  CoreState core_;
  std::unique_ptr<server_internal::ProvisioningController> provisioning_;

  std::mutex node_mu_;
  std::condition_variable node_cv_;
  std::map<std::string, uint64_t> node_gen_;
  uint64_t all_nodes_gen_ = 0;

  // The advertised address of each node, from its last registration or sync
  // that sent one (not stored: agents send it with every sync, so a restarted
  // server learns it again within a sync interval).
  std::mutex address_mu_;
  std::map<std::string, std::string> node_addresses_;
  void RememberAddress(const std::string& node, const std::string& address) {
    if (address.empty()) return;
    std::lock_guard<std::mutex> lock(address_mu_);
    node_addresses_[node] = address;
  }
  // What an agent needs to rendezvous a gang: every task's node address (the
  // node name when its agent never sent one) and the job's port.
  void AddRendezvous(TaskAssignment* assignment) {
    {
      std::lock_guard<std::mutex> lock(address_mu_);
      assignment->gang_addresses.clear();
      for (const std::string& node : assignment->gang_nodes) {
        auto it = node_addresses_.find(node);
        assignment->gang_addresses.push_back(it == node_addresses_.end() ? node : it->second);
      }
    }
    const int64_t span =
        int64_t{options_.rendezvous_port_max} - options_.rendezvous_port_min + 1;
    assignment->rendezvous_port =
        options_.rendezvous_port_min + static_cast<int>(assignment->ref.job_id % span);
  }

  std::mutex log_mu_;
  std::condition_variable log_cv_;
  uint64_t log_gen_ = 0;

  const int max_long_polls_;
  std::atomic<int> long_polls_{0};

  std::mutex error_mu_;
  std::map<std::string, int64_t> last_error_ms_;
};

void FleetServer::LogError(const std::string& what, const Status& status) {
  const int64_t now = NowMs();
  const std::string line = what + ": " + status.ToString();
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    int64_t& last = last_error_ms_[line];
    if (last != 0 && now - last < 10'000) return;  // the same failure at most every 10 s
    last = now;
    if (last_error_ms_.size() > 1000) last_error_ms_.clear();
  }
  std::fprintf(stderr, "ferry server: %s\n", line.c_str());
}

std::optional<json> FleetServer::ReadJsonBody(Call& c) {
  if (static_cast<int64_t>(c.req.body.size()) > options_.max_body_bytes) {
    SendProblem(c, 413, "payload-too-large",
                "the body is larger than " + std::to_string(options_.max_body_bytes) + " bytes");
    return std::nullopt;
  }
  if (!server_internal::IsJsonContentType(c.req.get_header_value("Content-Type"))) {
    SendProblem(c, 415, "unsupported-media-type", "the body must be application/json");
    return std::nullopt;
  }
  if (!server_internal::JsonNestingWithin(c.req.body, kMaxJsonDepth)) {
    SendProblem(c, 400, "malformed-json",
                "the body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return std::nullopt;
  }
  if (!Utf8CodePoints(c.req.body)) {
    SendProblem(c, 400, "malformed-json", "the body is not valid UTF-8");
    return std::nullopt;
  }
  json body = json::parse(c.req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    SendProblem(c, 400, "malformed-json", "the body is not valid JSON");
    return std::nullopt;
  }
  if (!body.is_object()) {
    SendProblem(c, 400, "malformed-json", "the body must be a JSON object");
    return std::nullopt;
  }
  return body;
}

std::optional<int64_t> FleetServer::JobIdFrom(Call& c) {
  std::optional<int64_t> id = server_internal::ParseInt(c.captures.at(0));
  if (!id || *id <= 0) {
    SendProblem(c, 404, "not-found", "no job " + c.captures.at(0));
    return std::nullopt;
  }
  return id;
}

std::optional<int64_t> FleetServer::IntParam(Call& c, const std::string& name, int64_t fallback,
                                             int64_t min, int64_t max) {
  if (!c.HasParam(name)) return fallback;
  if (c.ParamCount(name) > 1) {
    SendProblem(c, 400, "bad-request", "query parameter '" + name + "' given more than once");
    return std::nullopt;
  }
  std::optional<int64_t> value = server_internal::ParseInt(c.Param(name));
  if (!value || *value < min || *value > max) {
    SendProblem(c, 400, "bad-request",
                "query parameter '" + name + "' must be an integer between " + std::to_string(min) +
                    " and " + std::to_string(max));
    return std::nullopt;
  }
  return value;
}

bool FleetServer::OnlyParams(Call& c, std::initializer_list<std::string_view> allowed) {
  for (const auto& [name, value] : c.params) {
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      SendProblem(c, 400, "bad-request", "unknown query parameter '" + name + "'");
      return false;
    }
  }
  return true;
}

std::optional<Principal> FleetServer::Authenticate(Call& c) {
  auto unauthorized = [&](const std::string& detail) {
    c.res.set_header("WWW-Authenticate", "Bearer");
    SendProblem(c, 401, "unauthorized", detail);
    return std::nullopt;
  };
  if (!c.req.has_header("Authorization")) return unauthorized("missing bearer token");
  const std::string header = c.req.get_header_value("Authorization");
  constexpr std::string_view kPrefix = "Bearer ";
  if (header.size() <= kPrefix.size() || header.compare(0, kPrefix.size(), kPrefix) != 0 ||
      header.size() > 1024) {
    return unauthorized("the Authorization header must be 'Bearer <token>'");
  }
  const std::string hash = Sha256Hex(std::string_view(header).substr(kPrefix.size()));
  const int64_t now = NowMs();
  if (std::optional<Principal> cached = token_cache_.Get(hash, now)) return cached;
  // Read before the lookup: a revocation committed meanwhile keeps this
  // principal out of the cache (TokenCache::DropUser).
  const uint64_t cache_generation = token_cache_.generation();
  Result<std::optional<Principal>> found = store_->LookupToken(hash);
  if (!found.ok()) {
    SendStoreError(c, found.status());
    return std::nullopt;
  }
  if (!found->has_value()) return unauthorized("unknown token");
  token_cache_.Put(hash, **found, now, cache_generation);
  return **found;
}

void FleetServer::Dispatch(const httplib::Request& req, httplib::Response& res) {
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  const Route* route = nullptr;
  std::vector<std::string> allowed;
  std::vector<std::string> captures;
  for (const Route& candidate : routes_) {
    std::vector<std::string> found;
    if (!server_internal::MatchPath(candidate.pattern, req.path, &found)) continue;
    if (std::find(allowed.begin(), allowed.end(), candidate.method) == allowed.end()) {
      allowed.push_back(candidate.method);
    }
    if (route == nullptr && candidate.method == method) {
      route = &candidate;
      captures = std::move(found);
    }
  }
  Call c{req, res, std::move(captures), {}, server_internal::ParseQuery(req.target)};
  if (route == nullptr) {
    if (allowed.empty()) {
      SendProblem(c, 404, "not-found", "no route for " + req.path);
    } else {
      res.set_header("Allow", JoinNames(allowed));
      SendProblem(c, 405, "method-not-allowed",
                  req.method + " is not allowed here; use " + JoinNames(allowed));
    }
    return;
  }
  if (route->access != Access::kPublic) {
    std::optional<Principal> principal = Authenticate(c);
    if (!principal) return;
    c.principal = *principal;
    const Role role = c.principal.role;
    // Agents share one identity across nodes, so they are not rate limited.
    if (role != Role::kAgent) {
      if (int64_t retry = limiter_.Acquire(c.principal.user_id, NowMs()); retry > 0) {
        res.set_header("Retry-After", std::to_string(retry));
        SendProblem(c, 429, "rate-limited",
                    "too many requests; retry in " + std::to_string(retry) + " s");
        return;
      }
    }
    bool permitted = false;
    switch (route->access) {
      case Access::kUser:
        permitted = role != Role::kAgent;
        break;
      case Access::kAdmin:
        permitted = role == Role::kPlatformAdmin;
        break;
      case Access::kAgent:
        permitted = role == Role::kAgent || role == Role::kPlatformAdmin;
        break;
      case Access::kPublic:
        permitted = true;
        break;
    }
    if (!permitted) {
      const std::string detail =
          role == Role::kAgent
              ? "the agent role may only call /v1/agent endpoints"
              : "role " + std::string(ToString(role)) + " may not " + req.method + " " + req.path;
      SendProblem(c, 403, "forbidden", detail);
      return;
    }
  }
  route->handler(c);
}

void FleetServer::InstallRoutes() {
  auto bind = [this](void (FleetServer::*fn)(Call&)) {
    return [this, fn](Call& c) { (this->*fn)(c); };
  };
  const std::string id = "{}";
  AddRoute("GET", "/healthz", Access::kPublic, bind(&FleetServer::Health));
  AddRoute("GET", "/readyz", Access::kPublic, bind(&FleetServer::Ready));
  AddRoute("GET", "/v1/whoami", Access::kUser, bind(&FleetServer::WhoAmI));
  AddRoute("POST", "/v1/jobs", Access::kUser, bind(&FleetServer::SubmitJob));
  AddRoute("GET", "/v1/jobs", Access::kUser, bind(&FleetServer::ListJobs));
  AddRoute("GET", "/v1/jobs/" + id, Access::kUser, bind(&FleetServer::GetJob));
  AddRoute("DELETE", "/v1/jobs/" + id, Access::kUser, bind(&FleetServer::CancelJob));
  AddRoute("POST", "/v1/jobs/" + id + ":cancel", Access::kUser, bind(&FleetServer::CancelJob));
  AddRoute("GET", "/v1/jobs/" + id + "/events", Access::kUser, bind(&FleetServer::ListEvents));
  AddRoute("GET", "/v1/jobs/" + id + "/logs", Access::kUser, bind(&FleetServer::ReadLogs));
  AddRoute("GET", "/v1/nodes", Access::kUser, bind(&FleetServer::ListNodes));
  AddRoute("GET", "/v1/nodes/" + id, Access::kUser, bind(&FleetServer::GetNode));
  AddRoute("POST", "/v1/nodes/" + id + ":drain", Access::kAdmin,
           [this](Call& c) { SetDrain(c, true); });
  AddRoute("POST", "/v1/nodes/" + id + ":undrain", Access::kAdmin,
           [this](Call& c) { SetDrain(c, false); });
  AddRoute("GET", "/v1/pools", Access::kUser, bind(&FleetServer::ListPools));
  AddRoute("GET", "/v1/gpus", Access::kUser, bind(&FleetServer::ListGpus));
  AddRoute("POST", "/v1/admin/users", Access::kAdmin, bind(&FleetServer::CreateUser));
  AddRoute("GET", "/v1/admin/users", Access::kAdmin, bind(&FleetServer::ListUsers));
  AddRoute("POST", "/v1/admin/users:revoke", Access::kAdmin, bind(&FleetServer::RevokeUser));
  AddRoute("POST", "/v1/admin/users:token", Access::kAdmin, bind(&FleetServer::IssueToken));
  AddRoute("POST", "/v1/agent/register", Access::kAgent, bind(&FleetServer::AgentRegister));
  AddRoute("POST", "/v1/agent/sync", Access::kAgent, bind(&FleetServer::AgentSync));
  AddRoute("POST", "/v1/agent/logs", Access::kAgent, bind(&FleetServer::AgentLogs));
  AddRoute("GET", "/v1/scheduler", Access::kAdmin, bind(&FleetServer::GetScheduler));

  auto dispatch = [this](const httplib::Request& req, httplib::Response& res) {
    Dispatch(req, res);
  };
  http_.Get(".*", dispatch);
  http_.Post(".*", dispatch);
  http_.Put(".*", dispatch);
  http_.Patch(".*", dispatch);
  http_.Delete(".*", dispatch);
  http_.Options(".*", dispatch);
  // httplib answers some errors itself (413 before reading a large body, 400
  // for a broken request line): give those a problem body too.
  http_.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string_view type = "bad-request";
        std::string detail = "the request could not be read";
        if (res.status == 413) {
          type = "payload-too-large";
          detail = "the body is larger than the server accepts";
        } else if (res.status == 404) {
          type = "not-found";
          detail = "no route for " + req.path;
        } else if (res.status >= 500) {
          type = "internal";
          detail = "the request failed inside the server";
        }
        res.set_content(
            server_internal::Dump(server_internal::Problem(res.status, type, detail, req.path)),
            "application/problem+json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  http_.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LogError("request " + req.method + " " + req.path, Status::UnknownError(what));
        res.status = 500;
        res.set_content(server_internal::Dump(server_internal::Problem(
                            500, "internal", "the request failed inside the server", req.path)),
                        "application/problem+json");
      });
}

// ---- Handlers.

void FleetServer::Ready(Call& c) {
  Result<int64_t> users = store_->CountUsers();
  if (!users.ok() || store_->schema_version() <= 0) {
    if (!users.ok()) LogError("readiness check", users.status());
    return SendProblem(c, 503, "unavailable", "the store is not reachable");
  }
  SendJson(c, 200, {{"status", "ok"}});
}

void FleetServer::WhoAmI(Call& c) {
  if (!OnlyParams(c, {})) return;
  SendJson(c, 200,
           {{"tenant", c.principal.tenant},
            {"team", c.principal.team},
            {"user", c.principal.user},
            {"role", ToString(c.principal.role)}});
}

void FleetServer::SubmitJob(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::string key;
  // httplib drops a header line with an empty value; the listener notes it.
  std::string empty = c.req.get_header_value(server_internal::kEmptyHeaders);
  if (("," + empty + ",").find(",idempotency-key,") != std::string::npos) {
    SendProblem(c, 400, "bad-request",
                "Idempotency-Key must be 1 to 255 printable ASCII characters (it is empty)");
    return;
  }
  if (c.req.has_header("Idempotency-Key")) {
    key = c.req.get_header_value("Idempotency-Key");
    if (!server_internal::ValidIdempotencyKey(key)) {
      SendProblem(c, 400, "bad-request",
                  "Idempotency-Key must be 1 to 255 printable ASCII characters");
      return;
    }
  }
  std::vector<FieldError> errors;
  Result<JobSpec> spec = ParseJobSpec(*body, &errors);
  if (!spec.ok()) {
    if (errors.empty()) errors.push_back({"(body)", spec.status().message()});
    SendValidation(c, errors);
    return;
  }
  Result<std::vector<Node>> nodes = store_->ListNodes();
  if (!nodes.ok()) return SendStoreError(c, nodes.status());
  // The nodes that may take work again (all but LOST ones) plus the cloud
  // pools at their max_nodes, judged by the scheduling core itself. With no
  // such node yet, every valid job may wait for one.
  const std::vector<sched::NodeInfo> capacity = server_internal::CapacityNodes(*nodes);
  std::optional<std::string> over_quota, unsatisfiable;
  {
    // Quotas are checked softly here (the job alone must fit them) and hard
    // when scheduling.
    Job candidate;
    candidate.tenant = c.principal.tenant;
    candidate.team = c.principal.team;
    candidate.user = c.principal.user;
    candidate.spec = *spec;
    const sched::PendingJob pending = sched::ToPendingJob(candidate);
    std::lock_guard<std::mutex> lock(core_.mu);
    over_quota = core_.scheduler->CheckSubmission(pending);
    if (!over_quota && !capacity.empty()) {
      unsatisfiable = core_.scheduler->CheckCapacity(pending, capacity);
    }
  }
  if (over_quota) return SendValidation(c, {{"quota", *over_quota}});
  if (unsatisfiable) return SendProblem(c, 422, "unsatisfiable", *unsatisfiable);
  std::optional<server_internal::InFlightKeys::Claim> claim;
  if (!key.empty()) {
    claim.emplace(&in_flight_, c.principal.user_id, key);
    if (!claim->held()) {
      SendProblem(c, 409, "idempotency-in-progress",
                  "a request with this Idempotency-Key is still being processed");
      return;
    }
  }
  SubmitRequest request;
  request.principal = c.principal;
  request.spec = *spec;
  request.idempotency_key = key;
  request.request_hash = Sha256Hex(server_internal::Dump(*body));
  request.now_ms = NowMs();
  request.key_ttl_ms = options_.idempotency_ttl_ms;
  Result<SubmitResult> result =
      store_->Submit(request, [](const Job& job) { return server_internal::Dump(ToJson(job)); });
  if (!result.ok()) return SendStoreError(c, result.status());
  switch (result->outcome) {
    case SubmitResult::Outcome::kKeyMismatch:
      SendProblem(c, 422, "idempotency-key-reuse",
                  "this Idempotency-Key was used with a different body");
      return;
    case SubmitResult::Outcome::kReplayed:
      c.res.set_header("Idempotent-Replayed", "true");
      break;
    case SubmitResult::Outcome::kCreated:
      WakeScheduler();
      break;
  }
  if (result->job.id > 0)
    c.res.set_header("Location", "/v1/jobs/" + std::to_string(result->job.id));
  c.res.status = result->status_code;
  c.res.set_content(result->response_body, "application/json");
}

void FleetServer::GetJob(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<int64_t> id = JobIdFrom(c);
  if (!id) return;
  Result<std::optional<Job>> job = store_->GetJob(ScopeOf(c.principal), *id);
  if (!job.ok()) return SendStoreError(c, job.status());
  if (!job->has_value()) return SendProblem(c, 404, "not-found", "no job " + std::to_string(*id));
  SendJson(c, 200, ToJson(**job));
}

void FleetServer::ListJobs(Call& c) {
  if (!OnlyParams(c, {"state", "user", "team", "label", "page_size", "page_token"})) return;
  JobFilter filter;
  const size_t state_count = c.ParamCount("state");
  for (size_t i = 0; i < state_count; ++i) {
    const std::string value = c.Param("state", i);
    size_t start = 0;
    while (start <= value.size()) {
      size_t end = value.find(',', start);
      if (end == std::string::npos) end = value.size();
      std::string word = value.substr(start, end - start);
      std::transform(word.begin(), word.end(), word.begin(),
                     [](unsigned char ch) { return std::toupper(ch); });
      std::optional<JobState> state = ParseJobState(word);
      if (!state) {
        return SendProblem(c, 400, "bad-request", "state: unknown job state '" + word + "'");
      }
      if (std::find(filter.states.begin(), filter.states.end(), *state) == filter.states.end()) {
        filter.states.push_back(*state);
      }
      start = end + 1;
    }
  }
  for (const char* name : {"user", "team"}) {
    if (c.ParamCount(name) > 1) {
      return SendProblem(c, 400, "bad-request",
                         std::string("query parameter '") + name + "' given more than once");
    }
  }
  filter.user = c.Param("user");
  filter.team = c.Param("team");
  const size_t label_count = c.ParamCount("label");
  for (size_t i = 0; i < label_count; ++i) {
    const std::string pair = c.Param("label", i);
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return SendProblem(c, 400, "bad-request", "label: expected key=value, got '" + pair + "'");
    }
    filter.labels[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  std::optional<int64_t> page_size =
      IntParam(c, "page_size", options_.default_page_size, 1, options_.max_page_size);
  if (!page_size) return;
  const std::string digest = server_internal::FilterDigest(filter);
  std::optional<int64_t> before_id;
  if (c.HasParam("page_token")) {
    Result<int64_t> decoded = server_internal::DecodePageToken(c.Param("page_token"), digest);
    if (!decoded.ok()) return SendProblem(c, 400, "bad-request", decoded.status().message());
    before_id = *decoded;
  }
  Result<JobPage> page =
      store_->ListJobs(ScopeOf(c.principal), filter, before_id, static_cast<int>(*page_size));
  if (!page.ok()) return SendStoreError(c, page.status());
  json jobs = json::array();
  for (const Job& job : page->jobs) jobs.push_back(ToJson(job, /*with_attempts=*/false));
  json next = nullptr;
  if (page->next_before_id) next = server_internal::EncodePageToken(*page->next_before_id, digest);
  SendJson(c, 200, {{"jobs", std::move(jobs)}, {"next_page_token", std::move(next)}});
}

std::set<std::string> FleetServer::NodesOfJob(int64_t job_id) {
  std::set<std::string> nodes;
  Result<std::optional<Job>> job = store_->GetJob(Scope::All(), job_id);
  if (!job.ok() || !job->has_value()) return nodes;
  for (const TaskPlacement& task : (*job)->placement) nodes.insert(task.node);
  if (!(*job)->attempts.empty()) {
    for (const TaskPlacement& task : (*job)->attempts.back().placement) nodes.insert(task.node);
  }
  nodes.erase("");
  return nodes;
}

void FleetServer::CancelJob(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<int64_t> id = JobIdFrom(c);
  if (!id) return;
  const Scope scope = ScopeOf(c.principal);
  Result<std::optional<Job>> job = store_->GetJob(scope, *id);
  if (!job.ok()) return SendStoreError(c, job.status());
  if (!job->has_value()) return SendProblem(c, 404, "not-found", "no job " + std::to_string(*id));
  const Job& found = **job;
  bool allowed = false;
  switch (c.principal.role) {
    case Role::kPlatformAdmin:
      allowed = true;
      break;
    case Role::kTeamAdmin:
      allowed = found.team_id == c.principal.team_id;
      break;
    case Role::kUser:
      allowed = found.user_id == c.principal.user_id;
      break;
    case Role::kAgent:
      allowed = false;
      break;
  }
  if (!allowed) {
    return SendProblem(c, 403, "forbidden",
                       c.principal.role == Role::kTeamAdmin
                           ? "a team admin may cancel only the jobs of its team"
                           : "a user may cancel only its own jobs");
  }
  Result<CancelOutcome> outcome = store_->CancelJob(scope, *id, c.principal.user, NowMs());
  if (!outcome.ok()) return SendStoreError(c, outcome.status());
  if (*outcome == CancelOutcome::kNotFound) {
    return SendProblem(c, 404, "not-found", "no job " + std::to_string(*id));
  }
  if (*outcome == CancelOutcome::kCancelled) {
    std::set<std::string> nodes;
    for (const TaskPlacement& task : found.placement) nodes.insert(task.node);
    nodes.erase("");
    WakeNodes(nodes);
    WakeLogWaiters();
    WakeScheduler();
  }
  Result<std::optional<Job>> after = store_->GetJob(scope, *id);
  if (!after.ok()) return SendStoreError(c, after.status());
  if (!after->has_value()) return SendProblem(c, 404, "not-found", "no job " + std::to_string(*id));
  SendJson(c, 200, ToJson(**after));
}

void FleetServer::ListEvents(Call& c) {
  if (!OnlyParams(c, {"after", "limit"})) return;
  std::optional<int64_t> id = JobIdFrom(c);
  if (!id) return;
  std::optional<int64_t> after = IntParam(c, "after", 0, 0, INT64_MAX);
  if (!after) return;
  std::optional<int64_t> limit = IntParam(c, "limit", 100, 1, 1000);
  if (!limit) return;
  Result<std::optional<std::vector<JobEvent>>> events =
      store_->ListEvents(ScopeOf(c.principal), *id, *after, static_cast<int>(*limit));
  if (!events.ok()) return SendStoreError(c, events.status());
  if (!events->has_value()) {
    return SendProblem(c, 404, "not-found", "no job " + std::to_string(*id));
  }
  json list = json::array();
  int64_t next_after = *after;
  for (const JobEvent& event : **events) {
    list.push_back(ToJson(event));
    next_after = std::max(next_after, event.id);
  }
  SendJson(c, 200, {{"events", std::move(list)}, {"next_after", next_after}});
}

void FleetServer::ReadLogs(Call& c) {
  if (!OnlyParams(c, {"after", "limit", "follow", "wait_ms"})) return;
  std::optional<int64_t> id = JobIdFrom(c);
  if (!id) return;
  std::optional<int64_t> after = IntParam(c, "after", 0, 0, INT64_MAX);
  if (!after) return;
  std::optional<int64_t> limit = IntParam(c, "limit", 1000, 1, 10'000);
  if (!limit) return;
  bool follow = false;
  if (c.HasParam("follow")) {
    const std::string value = c.Param("follow");
    if (value == "1" || value == "true") {
      follow = true;
    } else if (value != "0" && value != "false") {
      return SendProblem(c, 400, "bad-request", "follow must be 1, 0, true or false");
    }
  }
  std::optional<int64_t> wait_ms = IntParam(c, "wait_ms", kDefaultLogWaitMs, 0, kMaxLogWaitMs);
  if (!wait_ms) return;

  const Scope scope = ScopeOf(c.principal);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(*wait_ms);
  bool in_long_poll = false;
  for (;;) {
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(log_mu_);
      generation = log_gen_;
    }
    // The state is read before the chunks: when it is terminal, no chunk
    // that came before the end can be missing from the read that follows.
    Result<std::optional<Job>> job = store_->GetJob(scope, *id);
    if (!job.ok()) {
      if (in_long_poll) LeaveLongPoll();
      return SendStoreError(c, job.status());
    }
    if (!job->has_value()) {
      if (in_long_poll) LeaveLongPoll();
      return SendProblem(c, 404, "not-found", "no job " + std::to_string(*id));
    }
    const bool terminal = IsTerminal((*job)->state);
    Result<std::optional<std::vector<LogChunk>>> chunks =
        store_->ReadLogs(scope, *id, *after, static_cast<int>(*limit));
    if (!chunks.ok()) {
      if (in_long_poll) LeaveLongPoll();
      return SendStoreError(c, chunks.status());
    }
    if (!chunks->has_value()) {
      if (in_long_poll) LeaveLongPoll();
      return SendProblem(c, 404, "not-found", "no job " + std::to_string(*id));
    }
    const std::vector<LogChunk>& list = **chunks;
    bool respond = !list.empty() || !follow || terminal || stopping_.load() ||
                   std::chrono::steady_clock::now() >= deadline;
    if (!respond && !in_long_poll) {
      in_long_poll = TryEnterLongPoll();
      respond = !in_long_poll;  // every long-poll slot busy: answer now
    }
    if (respond) {
      if (in_long_poll) LeaveLongPoll();
      json out = json::array();
      int64_t next_after = *after;
      for (const LogChunk& chunk : list) {
        out.push_back({{"seq", chunk.seq},
                       {"attempt", chunk.attempt},
                       {"task", chunk.task},
                       {"stream", chunk.stream},
                       {"data", chunk.data},
                       {"at", TimestampJson(chunk.at_ms)}});
        next_after = std::max(next_after, chunk.seq);
      }
      const bool finished = terminal && static_cast<int64_t>(list.size()) < *limit;
      return SendJson(
          c, 200, {{"chunks", std::move(out)}, {"next_after", next_after}, {"finished", finished}});
    }
    std::unique_lock<std::mutex> lock(log_mu_);
    log_cv_.wait_until(lock, deadline, [&] { return log_gen_ != generation || stopping_.load(); });
  }
}

void FleetServer::ListNodes(Call& c) {
  if (!OnlyParams(c, {})) return;
  Result<std::vector<Node>> nodes = store_->ListNodes();
  if (!nodes.ok()) return SendStoreError(c, nodes.status());
  json list = json::array();
  for (const Node& node : *nodes) list.push_back(ToJson(node));
  SendJson(c, 200, {{"nodes", std::move(list)}});
}

void FleetServer::GetNode(Call& c) {
  if (!OnlyParams(c, {})) return;
  Result<std::optional<Node>> node = store_->GetNode(c.captures.at(0));
  if (!node.ok()) return SendStoreError(c, node.status());
  if (!node->has_value()) return SendProblem(c, 404, "not-found", "no node " + c.captures.at(0));
  SendJson(c, 200, ToJson(**node));
}

void FleetServer::SetDrain(Call& c, bool drain) {
  if (!OnlyParams(c, {})) return;
  const std::string& name = c.captures.at(0);
  Result<bool> found = store_->SetDrain(name, drain);
  if (!found.ok()) return SendStoreError(c, found.status());
  if (!*found) return SendProblem(c, 404, "not-found", "no node " + name);
  if (!drain) WakeScheduler();
  Result<std::optional<Node>> node = store_->GetNode(name);
  if (!node.ok()) return SendStoreError(c, node.status());
  if (!node->has_value()) return SendProblem(c, 404, "not-found", "no node " + name);
  SendJson(c, 200, ToJson(**node));
}

void FleetServer::ListPools(Call& c) {
  if (!OnlyParams(c, {})) return;
  Result<std::vector<Pool>> pools = store_->ListPools();
  if (!pools.ok()) return SendStoreError(c, pools.status());
  json list = json::array();
  for (const Pool& pool : *pools) list.push_back(ToJson(pool));
  SendJson(c, 200, {{"pools", std::move(list)}});
}

void FleetServer::ListGpus(Call& c) {
  if (!OnlyParams(c, {})) return;
  Result<std::vector<Node>> nodes = store_->ListNodes();
  if (!nodes.ok()) return SendStoreError(c, nodes.status());
  json list = json::array();
  for (const Node& node : *nodes) {
    for (const Gpu& gpu : node.gpus) {
      list.push_back({{"node", node.name},
                      {"index", gpu.index},
                      {"model", gpu.model},
                      {"memory_mb", gpu.memory_mb},
                      {"uuid", gpu.uuid},
                      {"job_id", gpu.job_id ? json(*gpu.job_id) : json(nullptr)}});
    }
  }
  SendJson(c, 200, {{"gpus", std::move(list)}});
}

void FleetServer::CreateUser(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::vector<FieldError> errors;
  std::optional<server_internal::CreateUserRequest> request =
      server_internal::ParseCreateUserRequest(*body, &errors);
  if (!request) return SendValidation(c, errors);
  Result<std::optional<Principal>> existing = store_->FindUser(request->tenant, request->name);
  if (!existing.ok()) return SendStoreError(c, existing.status());
  if (existing->has_value()) {
    return SendValidation(c, {{"name", "user '" + request->name + "' already exists in tenant '" +
                                           request->tenant + "'"}});
  }
  Result<std::string> token = server_internal::NewToken();
  if (!token.ok()) return SendStoreError(c, token.status());
  Result<int64_t> tenant = store_->EnsureTenant(request->tenant);
  if (!tenant.ok()) return SendStoreError(c, tenant.status());
  Result<int64_t> team = store_->EnsureTeam(*tenant, request->team);
  if (!team.ok()) return SendStoreError(c, team.status());
  Result<int64_t> user = store_->CreateUser(*team, request->name, request->role);
  if (!user.ok()) {
    if (user.status().code() == StatusCode::kInvalid) {
      return SendValidation(c, {{"name", user.status().message()}});
    }
    return SendStoreError(c, user.status());
  }
  Result<int64_t> added =
      store_->AddToken(*user, Sha256Hex(*token), "created by " + c.principal.user, NowMs());
  if (!added.ok()) return SendStoreError(c, added.status());
  SendJson(c, 201,
           {{"tenant", request->tenant},
            {"team", request->team},
            {"user", request->name},
            {"role", ToString(request->role)},
            {"token", *token}});
}

json UserInfoJson(const UserInfo& user) {
  return {{"id", user.id},
          {"tenant", user.tenant},
          {"team", user.team},
          {"name", user.name},
          {"role", ToString(user.role)},
          {"created_at", TimestampJson(user.created_at_ms)},
          {"active_tokens", user.active_tokens}};
}

void FleetServer::ListUsers(Call& c) {
  if (!OnlyParams(c, {"tenant"})) return;
  std::optional<std::string> tenant;
  if (c.HasParam("tenant")) {
    if (c.ParamCount("tenant") > 1) {
      return SendProblem(c, 400, "bad-request", "query parameter 'tenant' given more than once");
    }
    tenant = c.Param("tenant");
    if (!server_internal::ValidName(*tenant)) {
      return SendProblem(c, 400, "bad-request",
                         "query parameter 'tenant' must be 1 to 128 characters of A-Z a-z 0-9 . "
                         "_ - (not starting with .)");
    }
  }
  Result<std::optional<std::vector<UserInfo>>> users = store_->ListUsers(tenant);
  if (!users.ok()) return SendStoreError(c, users.status());
  if (!users->has_value()) return SendProblem(c, 404, "not-found", "no tenant '" + *tenant + "'");
  json list = json::array();
  for (const UserInfo& user : **users) list.push_back(UserInfoJson(user));
  SendJson(c, 200, {{"users", std::move(list)}});
}

void FleetServer::RevokeUser(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::vector<FieldError> errors;
  std::optional<server_internal::RevokeUserRequest> request =
      server_internal::ParseRevokeUserRequest(*body, &errors);
  if (!request) return SendValidation(c, errors);
  // An admin revoking their own tokens would lock themselves out with this
  // very request; another platform admin can do it when it is meant.
  if (request->tenant == c.principal.tenant && request->name == c.principal.user) {
    return SendProblem(c, 409, "conflict",
                       "you may not revoke your own tokens (" + request->name + " in tenant '" +
                           request->tenant + "'); ask another platform admin");
  }
  Result<std::optional<RevokeResult>> revoked =
      store_->RevokeUserTokens(request->tenant, request->name, NowMs());
  if (!revoked.ok()) return SendStoreError(c, revoked.status());
  if (!revoked->has_value()) {
    return SendProblem(c, 404, "not-found",
                       "no user '" + request->name + "' in tenant '" + request->tenant + "'");
  }
  // The store no longer knows the tokens; neither may the cache.
  token_cache_.DropUser((*revoked)->user.id);
  SendJson(c, 200,
           {{"user", UserInfoJson((*revoked)->user)},
            {"revoked_tokens", (*revoked)->revoked_tokens}});
}

void FleetServer::IssueToken(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::vector<FieldError> errors;
  std::optional<server_internal::UserRef> request =
      server_internal::ParseRevokeUserRequest(*body, &errors);
  if (!request) return SendValidation(c, errors);
  Result<std::optional<Principal>> user = store_->FindUser(request->tenant, request->name);
  if (!user.ok()) return SendStoreError(c, user.status());
  if (!user->has_value()) {
    return SendProblem(c, 404, "not-found",
                       "no user '" + request->name + "' in tenant '" + request->tenant + "'");
  }
  Result<std::string> token = server_internal::NewToken();
  if (!token.ok()) return SendStoreError(c, token.status());
  Result<int64_t> added = store_->AddToken((*user)->user_id, Sha256Hex(*token),
                                           "issued by " + c.principal.user, NowMs());
  if (!added.ok()) return SendStoreError(c, added.status());
  SendJson(c, 201,
           {{"tenant", (*user)->tenant},
            {"team", (*user)->team},
            {"user", (*user)->user},
            {"role", ToString((*user)->role)},
            {"token", *token}});
}

void FleetServer::AgentRegister(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::vector<FieldError> errors;
  std::optional<NodeRegistration> registration =
      server_internal::ParseNodeRegistration(*body, &errors);
  std::optional<std::string> address = server_internal::ParseAdvertisedAddress(*body, &errors);
  if (!registration || !address) return SendValidation(c, errors);
  Result<Node> node = store_->RegisterNode(*registration, NowMs(), options_.lease_ms);
  if (!node.ok()) {
    if (node.status().code() == StatusCode::kInvalid) {
      return SendValidation(c, {{"(body)", node.status().message()}});
    }
    return SendStoreError(c, node.status());
  }
  RememberAddress(registration->name, *address);
  // A re-registration may have requeued the old instance's jobs, and new
  // capacity may fit pending jobs: schedule now; end the old instance's poll.
  WakeNodes({registration->name});
  WakeLogWaiters();
  WakeScheduler();
  SendJson(c, 200, {{"node", ToJson(*node)}, {"lease_ms", options_.lease_ms}});
}

void FleetServer::AgentSync(Call& c) {
  if (!OnlyParams(c, {"wait_ms"})) return;
  std::optional<int64_t> wait_ms = IntParam(c, "wait_ms", 0, 0, INT64_MAX / 4);
  if (!wait_ms) return;
  *wait_ms = std::min(*wait_ms, options_.lease_ms / 2);
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::vector<FieldError> errors;
  std::optional<SyncRequest> request = server_internal::ParseSyncRequest(*body, NowMs(), &errors);
  std::optional<std::string> address = server_internal::ParseAdvertisedAddress(*body, &errors);
  if (!request || !address) return SendValidation(c, errors);
  request->lease_ms = options_.lease_ms;
  RememberAddress(request->node, *address);

  auto generation = [&] {
    std::lock_guard<std::mutex> lock(node_mu_);
    auto it = node_gen_.find(request->node);
    return std::make_pair(it == node_gen_.end() ? 0 : it->second, all_nodes_gen_);
  };
  auto seen = generation();
  Result<SyncResult> result = store_->SyncNode(*request);
  if (!result.ok()) return SendStoreError(c, result.status());

  if (!request->reports.empty()) {
    // Exits free GPUs and may end a gang: reschedule, tell the peers, wake log readers.
    bool ended = false;
    std::set<std::string> peers;
    for (const TaskReport& report : request->reports) {
      if (report.kind == TaskReport::Kind::kStarted) continue;
      ended = true;
      for (const std::string& node : NodesOfJob(report.ref.job_id)) {
        if (node != request->node) peers.insert(node);
      }
    }
    if (ended) WakeScheduler();
    WakeNodes(peers);
    WakeLogWaiters();
  }

  const bool idle = result->registered && result->start.empty() && result->stop.empty();
  if (idle && *wait_ms > 0 && !stopping_.load() && TryEnterLongPoll()) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(*wait_ms);
    bool woken = false;
    {
      std::unique_lock<std::mutex> lock(node_mu_);
      woken = node_cv_.wait_until(lock, deadline, [&] {
        if (stopping_.load()) return true;
        auto it = node_gen_.find(request->node);
        const uint64_t mine = it == node_gen_.end() ? 0 : it->second;
        return std::make_pair(mine, all_nodes_gen_) != seen;
      });
    }
    LeaveLongPoll();
    if (woken && !stopping_.load()) {
      // The reports were applied above; this sync only renews and asks again.
      SyncRequest again = *request;
      again.reports.clear();
      again.now_ms = NowMs();
      Result<SyncResult> second = store_->SyncNode(again);
      if (!second.ok()) return SendStoreError(c, second.status());
      result = std::move(second);
    }
  }

  json start = json::array();
  for (TaskAssignment& assignment : result->start) {
    AddRendezvous(&assignment);
    start.push_back(ToJson(assignment));
  }
  json stop = json::array();
  for (const TaskRef& ref : result->stop) stop.push_back(server_internal::TaskRefJson(ref));
  SendJson(c, 200,
           {{"registered", result->registered},
            {"lease_expires_at_ms", result->lease_expires_at_ms},
            {"stop_grace_ms", result->stop_grace_ms.value_or(options_.stop_grace_ms)},
            {"start", std::move(start)},
            {"stop", std::move(stop)}});
}

void FleetServer::AgentLogs(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::vector<FieldError> errors;
  std::optional<server_internal::AgentLogUpload> upload =
      server_internal::ParseAgentLogUpload(*body, &errors);
  if (!upload) return SendValidation(c, errors);
  Status appended = store_->AppendLog(upload->job_id, upload->attempt, upload->task, upload->stream,
                                      upload->data, NowMs());
  if (!appended.ok()) {
    if (appended.code() == StatusCode::kInvalid) {
      return SendValidation(c, {{"job_id", appended.message()}});
    }
    return SendStoreError(c, appended);
  }
  WakeLogWaiters();
  c.res.status = 204;
}

// ---- Background loops.

Status FleetServer::SchedulingPass() {
  FERRY_ASSIGN_OR_RAISE(sched::Snapshot snapshot, store_->LoadSchedulingSnapshot());
  const int64_t now = NowMs();
  idle_.Update(snapshot, now);
  if (snapshot.pending.empty() && now - last_pass_ms_ < kIdlePassIntervalMs) {
    return Status::OK();
  }
  last_pass_ms_ = now;
  snapshot.now_s = static_cast<double>(now) / 1000.0;
  if (provisioning_) snapshot.provisioning = provisioning_->Provisioning(snapshot.nodes);
  idle_.Apply(&snapshot);
  sched::Decision decision;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    decision = core_.scheduler->Cycle(snapshot);
    core_.last_stats = decision.stats;
    core_.last_cycle_ms = now;
    core_.preemptions += static_cast<int64_t>(decision.preemptions.size());
  }

  std::unordered_map<int64_t, int> attempts;
  for (const sched::PendingJob& job : snapshot.pending) attempts[job.job_id] = job.attempt;
  std::unordered_map<int64_t, std::pair<int, std::string>> reasons;
  std::vector<PendingReason> changed;
  for (const PendingReason& pending : decision.pending) {
    std::pair<int, std::string> entry(attempts[pending.job_id], pending.reason);
    auto previous = written_reasons_.find(pending.job_id);
    if (previous == written_reasons_.end() || previous->second != entry) {
      changed.push_back(pending);
    }
    reasons.emplace(pending.job_id, std::move(entry));
  }
  FERRY_ASSIGN_OR_RAISE(CommitResult commit,
                        store_->CommitPlacements(decision.placements, changed, NowMs()));
  written_reasons_ = std::move(reasons);  // jobs no longer pending drop out

  ApplyPreemptions(decision.preemptions, snapshot);
  if (provisioning_) provisioning_->Submit(decision.provision, decision.scale_down);

  if (commit.admitted.empty()) return Status::OK();
  std::map<int64_t, std::string> names;
  for (const sched::NodeInfo& node : snapshot.nodes) names[node.id] = node.name;
  std::set<int64_t> admitted(commit.admitted.begin(), commit.admitted.end());
  std::set<std::string> nodes;
  for (const Placement& placement : decision.placements) {
    if (!admitted.count(placement.job_id)) continue;
    for (const TaskPlacement& task : placement.tasks) {
      nodes.insert(task.node.empty() ? names[task.node_id] : task.node);
    }
  }
  nodes.erase("");
  WakeNodes(nodes);
  WakeLogWaiters();
  return Status::OK();
}

void FleetServer::ApplyPreemptions(const std::vector<sched::Preemption>& preemptions,
                                   const sched::Snapshot& snapshot) {
  if (preemptions.empty()) return;
  std::set<std::string> nodes;
  for (const sched::Preemption& preemption : preemptions) {
    PreemptRequest request;
    request.job_id = preemption.job_id;
    request.attempt = preemption.attempt;
    request.reason = preemption.reason;
    request.for_job = preemption.for_job;
    request.grace_ms = std::max<int64_t>(0, std::llround(preemption.grace_s * 1000.0));
    Result<bool> done = store_->PreemptJob(request, NowMs());
    if (!done.ok()) {
      LogError("preempting job " + std::to_string(preemption.job_id), done.status());
      continue;
    }
    if (!*done) continue;  // it ended meanwhile
    for (const sched::RunningJob& running : snapshot.running) {
      if (running.job_id != preemption.job_id || running.attempt != preemption.attempt) continue;
      for (const TaskPlacement& task : running.tasks) nodes.insert(task.node);
    }
  }
  nodes.erase("");
  // The victims' agents learn of the stop now (with the grace), not at their next poll.
  WakeNodes(nodes);
  WakeLogWaiters();
}

void FleetServer::SchedulerLoop() {
  const auto interval =
      std::chrono::milliseconds(std::max<int64_t>(1, options_.schedule_interval_ms));
  auto last_pass = std::chrono::milliseconds(0);
  while (!stopping_.load()) {
    {
      // Wake-ups (submissions, exits) within a pass's own duration of the
      // last one coalesce, so a burst against a long queue does not keep
      // the scheduler busy all the time.
      const auto gap = std::min<std::chrono::milliseconds>(
          interval, std::max<std::chrono::milliseconds>(std::chrono::milliseconds(2), last_pass));
      std::unique_lock<std::mutex> lock(sched_mu_);
      if (sched_cv_.wait_for(lock, gap, [&] { return stopping_.load(); })) break;
      sched_cv_.wait_for(lock, interval - gap, [&] { return sched_wake_ || stopping_.load(); });
      sched_wake_ = false;
    }
    if (stopping_.load()) break;
    const auto started = std::chrono::steady_clock::now();
    Status status = SchedulingPass();
    if (!status.ok()) LogError("scheduling pass", status);
    last_pass = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
  }
}

void FleetServer::MaintenanceLoop() {
  const int64_t tick_ms = std::clamp<int64_t>(options_.lease_ms / 4, 50, 1000);
  int64_t last_purge_ms = 0;
  while (!WaitForStop(tick_ms)) {
    const int64_t now = NowMs();
    Result<ExpiryResult> expired = store_->ExpireLeases(now);
    if (!expired.ok()) {
      LogError("lease expiry", expired.status());
    } else if (!expired->lost_nodes.empty() || !expired->requeued_jobs.empty() ||
               !expired->failed_jobs.empty()) {
      for (const std::string& node : expired->lost_nodes) {
        std::fprintf(stderr, "ferry server: node %s lost (lease expired)\n", node.c_str());
      }
      // Gang peers of lost tasks run on healthy nodes: every agent re-syncs.
      WakeAllNodes();
      WakeLogWaiters();
      WakeScheduler();
    }
    Result<std::vector<int64_t>> timed_out = store_->ExpireRuntimes(now);
    if (!timed_out.ok()) {
      LogError("runtime expiry", timed_out.status());
    } else if (!timed_out->empty()) {
      std::set<std::string> nodes;
      for (int64_t job_id : *timed_out) {
        for (const std::string& node : NodesOfJob(job_id)) nodes.insert(node);
      }
      WakeNodes(nodes);
      WakeLogWaiters();
    }
    ReloadConfig();
    if (now - last_purge_ms >= kPurgeIntervalMs) {
      last_purge_ms = now;
      Result<int64_t> purged = store_->PurgeIdempotencyKeys(now, options_.idempotency_ttl_ms);
      if (!purged.ok()) LogError("idempotency key purge", purged.status());
    }
  }
}

// Applies a changed --scheduler-config file: a valid one replaces the
// policies at once (usage history carries over), an invalid one is logged
// once and the current config stays.
void FleetServer::ReloadConfig() {
  Result<std::optional<sched::Config>> polled = std::optional<sched::Config>();
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    if (!core_.watcher) return;
    polled = core_.watcher->Poll();
  }
  if (!polled.ok()) {
    {
      std::lock_guard<std::mutex> lock(core_.mu);
      core_.config_error = polled.status().message();
    }
    std::fprintf(stderr,
                 "ferry server: scheduler config not reloaded, keeping the current one: %s\n",
                 polled.status().message().c_str());
    return;
  }
  if (!polled->has_value()) return;
  sched::Config config = std::move(**polled);
  Status applied;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    applied = core_.scheduler->Reconfigure(config);
    if (applied.ok()) {
      core_.config_error.clear();
      core_.config_loaded_ms = NowMs();
    } else {
      core_.config_error = applied.message();
    }
  }
  if (!applied.ok()) {
    std::fprintf(stderr, "ferry server: scheduler config refused, keeping the current one: %s\n",
                 applied.message().c_str());
    return;
  }
  std::fprintf(stderr, "ferry server: scheduler config reloaded from %s (%zu pools, %zu quotas)\n",
               options_.scheduler_config.c_str(), config.pools.size(), config.quotas.size());
  if (provisioning_) {
    Status providers = provisioning_->Configure(config);
    if (!providers.ok()) LogError("providers", providers);
  }
  WakeScheduler();
}

// The provisioning controller, with the local provider's defaults: agents
// talk to this server, with the agent token and a work dir under data_dir.
Status FleetServer::StartProvisioning(int port) {
  server_internal::ProvisioningController::Options options;
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
    if (nodes_lost) {
      WakeAllNodes();
      WakeLogWaiters();
    }
    WakeScheduler();
  };
  options.log_error = [this](const std::string& what, const Status& status) {
    LogError(what, status);
  };
  options.log_info = [](const std::string& line) {
    std::fprintf(stderr, "ferry server: %s\n", line.c_str());
  };
  provisioning_ =
      std::make_unique<server_internal::ProvisioningController>(store_.get(), std::move(options));
  sched::Config config;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    config = core_.scheduler->config();
  }
  FERRY_RETURN_NOT_OK(provisioning_->Configure(config));
  provisioning_->Start();
  return Status::OK();
}

void FleetServer::GetScheduler(Call& c) {
  if (!OnlyParams(c, {})) return;
  json body;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    body["config"] = server_internal::SchedulerConfigJson(core_.scheduler->config());
    body["config_file"] =
        options_.scheduler_config.empty() ? json(nullptr) : json(options_.scheduler_config);
    body["config_loaded_at"] = TimestampJson(core_.config_loaded_ms);
    body["config_error"] = core_.config_error.empty() ? json(nullptr) : json(core_.config_error);
    json cycle = server_internal::CycleStatsJson(core_.last_stats);
    cycle["at"] = TimestampJson(core_.last_cycle_ms);
    body["last_cycle"] = std::move(cycle);
    body["preemptions_total"] = core_.preemptions;
    body["fair_share"] = server_internal::FairShareJson(core_.scheduler->FairShare());
  }
  body["providers"] = provisioning_ ? provisioning_->StatusJson() : json::array();
  json provisioning = json::object();
  if (provisioning_) {
    Result<std::vector<Node>> nodes = store_->ListNodes();
    if (!nodes.ok()) return SendStoreError(c, nodes.status());
    std::vector<sched::NodeInfo> registered;
    registered.reserve(nodes->size());
    for (const Node& node : *nodes) registered.push_back(sched::ToNodeInfo(node));
    for (const auto& [pool, count] : provisioning_->Provisioning(registered)) {
      provisioning[pool] = count;
    }
  }
  body["provisioning"] = std::move(provisioning);
  SendJson(c, 200, body);
}

Status FleetServer::Run(std::atomic<bool>* stop, bool handle_signals) {
  InstallRoutes();
  const int threads = options_.threads;
  http_.new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  http_.set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
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

  std::atomic<bool> listen_ended{false};
  std::thread listener([&] {
    http_.listen_after_bind();
    listen_ended = true;
  });
  std::thread scheduler([this] { SchedulerLoop(); });
  std::thread maintenance([this] { MaintenanceLoop(); });
  std::fprintf(stderr, "ferry server: listening on %s%s:%d (store %s, schema %d)\n",
               options_.tls_cert_file.empty() ? "" : "https://", options_.host.c_str(), port,
               std::string(store_->backend()).c_str(), store_->schema_version());

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
  http_.stop();
  listener.join();
  scheduler.join();
  maintenance.join();
  // Cloud nodes go with the server (the local provider stops its agents).
  provisioning_->Stop();
  restore_signals();
  std::fprintf(stderr, "ferry server: stopped\n");
  if (listener_failed) return Status::IOError("the HTTP listener stopped unexpectedly");
  return Status::OK();
}

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
  if (options.rate_per_second < 0 || options.rate_burst < 0) {
    return Status::Invalid("server: rate limits must not be negative");
  }
  if (options.idempotency_ttl_ms < 1000) {
    return Status::Invalid("server: idempotency_ttl_ms must be at least 1000");
  }
  if (options.stop_grace_ms < 0) return Status::Invalid("server: stop_grace_ms must be >= 0");
  if (options.rendezvous_port_min < 1 || options.rendezvous_port_max > 65535 ||
      options.rendezvous_port_min > options.rendezvous_port_max) {
    return Status::Invalid(
        "server: need 1 <= rendezvous_port_min <= rendezvous_port_max <= 65535");
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
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<Store> store, OpenStore(options.store_url));
  FERRY_RETURN_NOT_OK(Bootstrap(*store, options.data_dir));
  FleetServer server(options, std::move(listener), std::move(store), std::move(*scheduler),
                     std::move(watcher));
  return server.Run(stop, handle_signals);
}

}  // namespace ferry::fleet
