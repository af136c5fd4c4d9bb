// What every request goes through before and after its handler: dispatch
// to a route, the bearer token, the caller's role, the rate limit, reading
// the body and query, and the JSON and problem answers.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ferry/base/hash.h"
#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/request_parsing.h"
#include "fleet/server/responses.h"
#include "fleet/server/server_log.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

constexpr int kMaxJsonDepth = 64;

// An X-Request-Id a caller sent is kept when it is 1 to 128 characters of
// letters, digits and "-_.:/+="; anything else is replaced by a new id, so
// a log line never carries what a client injected.
bool UsableRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (const char ch : id) {
    const bool ok = std::isalnum(static_cast<unsigned char>(ch)) != 0 ||
                    std::string_view("-_.:/+=").find(ch) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

// 16 random hex digits per request (a per-thread generator seeded once).
std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(rng()));
  return text;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

void FleetServer::SendJson(Call& c, int status, const json& body) {
  c.res.status = status;
  c.res.set_content(Dump(body), "application/json");
}

void FleetServer::SendProblem(Call& c, int status, std::string_view type, std::string_view detail,
                              const std::vector<FieldError>& errors) {
  json body = Problem(status, type, detail, c.req.path);
  if (!errors.empty()) {
    json list = json::array();
    for (const auto& e : errors) list.push_back(FieldErrorJson(e));
    body["errors"] = std::move(list);
  }
  c.res.status = status;
  c.res.set_content(Dump(body), "application/problem+json");
}

void FleetServer::SendStoreError(Call& c, const Status& status) {
  LogError("request " + c.req.method + " " + c.req.path, status);
  SendProblem(c, 500, "internal", "the request failed inside the server; nothing was changed");
}

void FleetServer::SendValidation(Call& c, const std::vector<FieldError>& errors) {
  const std::string detail = errors.size() == 1
                                 ? "1 field is invalid"
                                 : std::to_string(errors.size()) + " fields are invalid";
  SendProblem(c, 422, "validation", detail, errors);
}

void FleetServer::SendNoJob(Call& c, int64_t id) {
  SendProblem(c, 404, "not-found", "no job " + std::to_string(id));
}

logging::Logger& ServerLog() {
  static logging::Logger log("server");
  return log;
}

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
  if (ServerLog().format() == logging::Format::kJson) {
    ServerLog().Error(what, {{"error", status.ToString()}});
  } else {
    ServerLog().Error(line);
  }
}

std::optional<json> FleetServer::ReadJsonBody(Call& c, int64_t max_bytes) {
  if (max_bytes <= 0) max_bytes = options_.max_body_bytes;
  if (static_cast<int64_t>(c.req.body.size()) > max_bytes) {
    SendProblem(c, 413, "payload-too-large",
                "the body is larger than " + std::to_string(max_bytes) + " bytes");
    return std::nullopt;
  }
  if (!IsJsonContentType(c.req.get_header_value("Content-Type"))) {
    SendProblem(c, 415, "unsupported-media-type", "the body must be application/json");
    return std::nullopt;
  }
  if (!JsonNestingWithin(c.req.body, kMaxJsonDepth)) {
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
  std::optional<int64_t> id = ParseInt(c.captures.at(0));
  if (!id || *id <= 0) {
    SendProblem(c, 404, "not-found", "no job " + c.captures.at(0));
    return std::nullopt;
  }
  return id;
}

std::optional<int64_t> FleetServer::IntParam(Call& c, const std::string& name, int64_t fallback,
                                             int64_t min, int64_t max) {
  if (!c.HasParam(name)) return fallback;
  if (!AtMostOnce(c, name)) return std::nullopt;
  std::optional<int64_t> value = ParseInt(c.Param(name));
  if (!value || *value < min || *value > max) {
    SendProblem(c, 400, "bad-request",
                "query parameter '" + name + "' must be an integer between " + std::to_string(min) +
                    " and " + std::to_string(max));
    return std::nullopt;
  }
  return value;
}

bool FleetServer::AtMostOnce(Call& c, const std::string& name) {
  if (c.ParamCount(name) <= 1) return true;
  SendProblem(c, 400, "bad-request", "query parameter '" + name + "' given more than once");
  return false;
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

bool FleetServer::StateParams(Call& c, std::vector<JobState>* states) {
  const size_t count = c.ParamCount("state");
  for (size_t i = 0; i < count; ++i) {
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
        SendProblem(c, 400, "bad-request", "state: unknown job state '" + word + "'");
        return false;
      }
      if (std::find(states->begin(), states->end(), *state) == states->end()) {
        states->push_back(*state);
      }
      start = end + 1;
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
  const auto started = std::chrono::steady_clock::now();
  const std::string& sent_id = req.get_header_value("X-Request-Id");
  const std::string request_id = UsableRequestId(sent_id) ? sent_id : NewRequestId();
  res.set_header("X-Request-Id", request_id);
  RequestInfo info;
  metrics_.in_flight().Add(1);
  DispatchToRoute(req, res, &info);
  metrics_.in_flight().Add(-1);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - started;
  const std::string_view route =
      info.route != nullptr ? std::string_view(info.route->pattern) : "unmatched";
  metrics_.Request(req.method, route, res.status, elapsed.count());
  if (ServerLog().format() != logging::Format::kJson) return;
  if (info.job_id.empty() && req.method == "POST" && res.status == 201) {
    // A submission: the new job's id is the last segment of its Location.
    const std::string& location = res.get_header_value("Location");
    if (location.rfind("/v1/jobs/", 0) == 0) info.job_id = location.substr(9);
  }
  const std::string tenant = info.principal ? info.principal->tenant : "";
  const std::string user = info.principal ? info.principal->user : "";
  ServerLog().Info("request", {{"request_id", request_id},
                               {"method", req.method},
                               {"route", route},
                               {"path", req.path},
                               {"status", res.status},
                               {"latency_ms", elapsed.count() * 1000.0},
                               {"tenant", tenant},
                               {"user", user},
                               {"job_id", info.job_id}});
}

void FleetServer::DispatchToRoute(const httplib::Request& req, httplib::Response& res,
                                  RequestInfo* info) {
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  const Route* route = nullptr;
  std::vector<std::string> allowed;
  std::vector<std::string> captures;
  for (const Route& candidate : routes_) {
    std::vector<std::string> found;
    if (!MatchPath(candidate.pattern, req.path, &found)) continue;
    if (std::find(allowed.begin(), allowed.end(), candidate.method) == allowed.end()) {
      allowed.push_back(candidate.method);
    }
    if (route == nullptr && candidate.method == method) {
      route = &candidate;
      captures = std::move(found);
    }
  }
  info->route = route;
  if (route != nullptr && route->pattern.rfind("/v1/jobs/{}", 0) == 0 && !captures.empty()) {
    info->job_id = captures[0];
  }
  Call c{req, res, std::move(captures), {}, ParseQuery(req.target)};
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
    info->principal = *principal;
    const Role role = c.principal.role;
    // Agents share one identity across nodes, so they are not rate limited.
    if (role != Role::kAgent) {
      if (int64_t retry = limiter_.Acquire(c.principal.user_id, NowMs()); retry > 0) {
        metrics_.RateLimited();
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

}  // namespace ferry::fleet::server_internal
