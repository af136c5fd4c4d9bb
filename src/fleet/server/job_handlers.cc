// /v1/jobs: submit (quota and capacity checks, idempotency keys), list
// (filters, page tokens), get, cancel, the event timeline and the logs
// (with follow, a long poll).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/base/hash.h"
#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/page_token.h"
#include "fleet/server/raw_headers.h"
#include "fleet/server/request_parsing.h"
#include "fleet/server/responses.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

constexpr int64_t kMaxLogWaitMs = 30'000;
constexpr int64_t kDefaultLogWaitMs = 10'000;

}  // namespace

void FleetServer::SubmitJob(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::string key;
  // httplib drops a header line with an empty value; the listener notes it.
  std::string empty = c.req.get_header_value(kEmptyHeaders);
  if (("," + empty + ",").find(",idempotency-key,") != std::string::npos) {
    SendProblem(c, 400, "bad-request",
                "Idempotency-Key must be 1 to 255 printable ASCII characters (it is empty)");
    return;
  }
  if (c.req.has_header("Idempotency-Key")) {
    key = c.req.get_header_value("Idempotency-Key");
    if (!ValidIdempotencyKey(key)) {
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
  Result<std::vector<FieldError>> unresolved = ResolveInputs(c.principal, &*spec);
  if (!unresolved.ok()) return SendStoreError(c, unresolved.status());
  if (!unresolved->empty()) return SendValidation(c, *unresolved);
  if (std::vector<FieldError> code = ResolveCode(c.principal, &*spec); !code.empty()) {
    return SendValidation(c, code);
  }
  // Quotas are checked softly here (the job alone must fit them) and hard
  // when scheduling; capacity against the nodes that may take work again
  // (all but LOST ones) plus the cloud pools at their max_nodes, judged by
  // the scheduling core itself (SubmissionChecker).
  Job candidate;
  candidate.tenant = c.principal.tenant;
  candidate.team = c.principal.team;
  candidate.user = c.principal.user;
  candidate.spec = *spec;
  Result<SubmissionChecker::Verdict> verdict = checker_.Check(
      sched::ToPendingJob(candidate), [this] { return store_->ListNodes(); }, NowMs());
  if (!verdict.ok()) return SendStoreError(c, verdict.status());
  if (verdict->over_quota) return SendValidation(c, {{"quota", *verdict->over_quota}});
  if (verdict->unsatisfiable) {
    return SendProblem(c, 422, "unsatisfiable", *verdict->unsatisfiable);
  }
  if (!ResolveImage(c, &*spec)) return;
  std::optional<InFlightKeys::Claim> claim;
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
  request.request_hash = Sha256Hex(Dump(*body));
  request.now_ms = NowMs();
  request.key_ttl_ms = options_.idempotency_ttl_ms;
  Result<SubmitResult> result =
      store_->Submit(request, [](const Job& job) { return Dump(ToJson(job)); });
  if (!result.ok()) return SendStoreError(c, result.status());
  switch (result->outcome) {
    case SubmitResult::Outcome::kKeyMismatch:
      SendProblem(c, 422, "idempotency-key-reuse",
                  "this Idempotency-Key was used with a different body");
      return;
    case SubmitResult::Outcome::kReplayed:
      c.res.set_header("Idempotent-Replayed", "true");
      metrics_.IdempotentReplay();
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
  if (!job->has_value()) return SendNoJob(c, *id);
  json body = ToJson(**job);
  body["explanation"] = Explanation(**job);
  SendJson(c, 200, body);
}

json FleetServer::Explanation(const Job& job) {
  if (job.state != JobState::kPending) return nullptr;
  std::optional<PendingReason> found;
  int64_t at_ms = 0;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    const auto& pending = core_.last_pending;
    auto it = std::lower_bound(pending.begin(), pending.end(), job.id,
                               [](const PendingReason& r, int64_t id) { return r.job_id < id; });
    if (it != pending.end() && it->job_id == job.id) found = *it;
    at_ms = core_.last_cycle_ms;
  }
  if (!found) return nullptr;  // not seen by a cycle yet
  std::string summary = found->message;
  if (found->ahead_in_team > 0) {
    summary += "; " + std::to_string(found->ahead_in_team) +
               (found->ahead_in_team == 1 ? " job" : " jobs") + " ahead in " + job.tenant + "/" +
               job.team + "'s queue";
  }
  return json{
      {"reason", found->reason},
      {"message", found->message},
      {"summary", summary},
      {"queue_position", found->queue_position >= 0 ? json(found->queue_position) : json(nullptr)},
      {"jobs_ahead_in_team",
       found->ahead_in_team >= 0 ? json(found->ahead_in_team) : json(nullptr)},
      {"held_nodes", found->planned_nodes},
      {"planned_start", !found->planned_nodes.empty() && std::isfinite(found->planned_start_s)
                            ? TimestampJson(std::llround(found->planned_start_s * 1000.0))
                            : json(nullptr)},
      {"as_of", TimestampJson(at_ms)}};
}

void FleetServer::ListJobs(Call& c) {
  if (!OnlyParams(c, {"state", "user", "team", "label", "page_size", "page_token"})) return;
  JobFilter filter;
  if (!StateParams(c, &filter.states)) return;
  if (!AtMostOnce(c, "user") || !AtMostOnce(c, "team")) return;
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
  const std::string digest = FilterDigest(filter);
  std::optional<int64_t> before_id;
  if (c.HasParam("page_token")) {
    Result<int64_t> decoded = DecodePageToken(c.Param("page_token"), digest);
    if (!decoded.ok()) return SendProblem(c, 400, "bad-request", decoded.status().message());
    before_id = *decoded;
  }
  Result<JobPage> page =
      store_->ListJobs(ScopeOf(c.principal), filter, before_id, static_cast<int>(*page_size));
  if (!page.ok()) return SendStoreError(c, page.status());
  json jobs = json::array();
  for (const Job& job : page->jobs) jobs.push_back(ToJson(job, /*with_attempts=*/false));
  json next = nullptr;
  if (page->next_before_id) next = EncodePageToken(*page->next_before_id, digest);
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
  if (!job->has_value()) return SendNoJob(c, *id);
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
    return SendNoJob(c, *id);
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
  if (!after->has_value()) return SendNoJob(c, *id);
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
    return SendNoJob(c, *id);
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
  LongPollSlot long_poll(this);
  for (;;) {
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(log_mu_);
      generation = log_gen_;
    }
    // The state is read before the chunks: when it is terminal, no chunk
    // that came before the end can be missing from the read that follows.
    Result<std::optional<Job>> job = store_->GetJob(scope, *id);
    if (!job.ok()) return SendStoreError(c, job.status());
    if (!job->has_value()) return SendNoJob(c, *id);
    const bool terminal = IsTerminal((*job)->state);
    Result<std::optional<std::vector<LogChunk>>> chunks =
        store_->ReadLogs(scope, *id, *after, static_cast<int>(*limit));
    if (!chunks.ok()) return SendStoreError(c, chunks.status());
    if (!chunks->has_value()) return SendNoJob(c, *id);
    const std::vector<LogChunk>& list = **chunks;
    bool respond = !list.empty() || !follow || terminal || stopping_.load() ||
                   std::chrono::steady_clock::now() >= deadline;
    if (!respond && !long_poll.held()) {
      respond = !long_poll.TryEnter();  // every long-poll slot busy: answer now
    }
    if (respond) {
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

}  // namespace ferry::fleet::server_internal
