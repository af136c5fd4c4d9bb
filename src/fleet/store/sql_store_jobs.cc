// Jobs: submission, reads and listings, cancellation, events, runtime
// limits, and requeueing an attempt.
#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

Result<SubmitResult> SqlStore::Submit(const SubmitRequest& request,
                                      const std::function<std::string(const Job&)>& render) {
  const Principal& who = request.principal;
  SubmitResult result;
  const nlohmann::json spec_value = ToJson(request.spec);
  // Store only specs that read back: one bad row would break every listing.
  {
    std::vector<FieldError> errors;
    auto valid = ParseJobSpec(spec_value, &errors);
    if (!valid.ok()) return valid.status().WithPrefix("job specification: ");
  }
  const std::string spec_json = DumpJson(spec_value);
  // A concurrent request with the same key loses the race on the unique
  // key; its retry then finds the winner's record and replays it.
  FERRY_RETURN_NOT_OK(Run(true, /*retry_unique=*/true, [&](Connection& c) -> Status {
    result = SubmitResult{};
    const int64_t now = request.now_ms;
    FERRY_ASSIGN_OR_RAISE(bool replayed, ReplaySubmission(c, request, &result));
    if (replayed) return Status::OK();
    const JobSpec& spec = request.spec;
    FERRY_ASSIGN_OR_RAISE(
        Rows inserted,
        c.Query("INSERT INTO jobs (tenant_id, team_id, user_id, name, spec, state, reason,"
                " attempt, priority, task_count, max_retries, max_runtime_ms, created_at_ms)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?) RETURNING id",
                {who.tenant_id, who.team_id, who.user_id, spec.name, spec_json,
                 StateText(JobState::kPending), Str(reason::kSubmitted), int64_t{spec.priority},
                 int64_t{spec.tasks}, int64_t{spec.max_retries}, spec.max_runtime_seconds * 1000,
                 now}));
    const int64_t job_id = inserted[0].Int(0);
    for (const auto& [key, value] : spec.labels) {
      FERRY_RETURN_NOT_OK(c.Query("INSERT INTO job_labels (job_id, key, value) VALUES (?, ?, ?)",
                                  {job_id, key, value})
                              .status());
    }
    FERRY_RETURN_NOT_OK(
        c.Query("INSERT INTO attempts (job_id, attempt, state, reason) VALUES (?, 1, ?, ?)",
                {job_id, StateText(JobState::kPending), Str(reason::kSubmitted)})
            .status());
    FERRY_RETURN_NOT_OK(AddEvent(c, job_id, now, "state", JobState::kPending, reason::kSubmitted,
                                 "submitted by " + who.user, who.user));
    FERRY_ASSIGN_OR_RAISE(auto job, LoadJob(c, Scope::All(), job_id, true));
    if (!job) return Status::UnknownError("store: the new job vanished");
    result.outcome = SubmitResult::Outcome::kCreated;
    result.status_code = 201;
    result.response_body = render ? render(*job) : std::string();
    result.job = std::move(*job);
    FERRY_RETURN_NOT_OK(RecordSubmission(c, request, job_id, result.response_body));
    return Status::OK();
  }));
  return result;
}

Result<std::optional<Job>> SqlStore::GetJob(const Scope& scope, int64_t job_id) {
  std::optional<Job> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(out, LoadJob(c, scope, job_id, true));
    return Status::OK();
  }));
  return out;
}

Result<std::vector<JobCount>> SqlStore::CountJobs() {
  std::vector<JobCount> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(
        Rows rows,
        c.Query("SELECT j.state, j.reason, tn.name, tm.name, COUNT(*) FROM jobs j"
                " JOIN tenants tn ON tn.id = j.tenant_id JOIN teams tm ON tm.id = j.team_id"
                " GROUP BY j.state, j.reason, tn.name, tm.name"
                " ORDER BY j.state, j.reason, tn.name, tm.name"));
    out.clear();
    out.reserve(rows.size());
    for (const Row& row : rows.rows) {
      out.push_back({row.Text(0), row.Text(1), row.Text(2), row.Text(3), row.Int(4)});
    }
    return Status::OK();
  }));
  return out;
}

Result<std::vector<AllocationCount>> SqlStore::CountAllocations() {
  std::vector<AllocationCount> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(
        Rows rows, c.Query("SELECT n.pool, j.state, tn.name, tm.name, COUNT(DISTINCT a.job_id),"
                           " COUNT(a.gpu_id) FROM allocations a JOIN nodes n ON n.id = a.node_id"
                           " JOIN jobs j ON j.id = a.job_id JOIN tenants tn ON tn.id = j.tenant_id"
                           " JOIN teams tm ON tm.id = j.team_id WHERE a.released_at_ms IS NULL"
                           " GROUP BY n.pool, j.state, tn.name, tm.name"
                           " ORDER BY n.pool, j.state, tn.name, tm.name"));
    out.clear();
    out.reserve(rows.size());
    for (const Row& row : rows.rows) {
      out.push_back({row.Text(0), row.Text(1), row.Text(2), row.Text(3), row.Int(4), row.Int(5)});
    }
    return Status::OK();
  }));
  return out;
}

Result<JobPage> SqlStore::ListJobs(const Scope& scope, const JobFilter& filter,
                                   std::optional<int64_t> before_id, int limit) {
  limit = std::clamp(limit, 1, 10000);
  std::string q = std::string(kJobSelect) + " WHERE 1 = 1";
  Params params;
  if (scope.tenant_id) {
    q += " AND j.tenant_id = ?";
    params.emplace_back(*scope.tenant_id);
  }
  if (before_id) {
    q += " AND j.id < ?";
    params.emplace_back(*before_id);
  }
  if (!filter.states.empty()) {
    q += " AND j.state IN (" + Placeholders(filter.states.size()) + ")";
    for (JobState s : filter.states) params.emplace_back(StateText(s));
  }
  if (!filter.user.empty()) {
    q += " AND u.name = ?";
    params.emplace_back(filter.user);
  }
  if (!filter.team.empty()) {
    q += " AND tm.name = ?";
    params.emplace_back(filter.team);
  }
  for (const auto& [key, value] : filter.labels) {
    q += " AND EXISTS (SELECT 1 FROM job_labels l WHERE l.job_id = j.id AND l.key = ?"
         " AND l.value = ?)";
    params.emplace_back(key);
    params.emplace_back(value);
  }
  q += " ORDER BY j.id DESC LIMIT ?";
  params.emplace_back(int64_t{limit} + 1);
  JobPage page;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    page = JobPage{};
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(q, params));
    for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(limit); ++i) {
      FERRY_ASSIGN_OR_RAISE(Job job, JobFromRow(rows[i], &spec_cache_));
      page.jobs.push_back(std::move(job));
    }
    FERRY_RETURN_NOT_OK(LoadPlacements(c, &page.jobs));
    if (rows.size() > static_cast<size_t>(limit)) page.next_before_id = page.jobs.back().id;
    return Status::OK();
  }));
  return page;
}

Result<CancelOutcome> SqlStore::CancelJob(const Scope& scope, int64_t job_id,
                                          const std::string& actor, int64_t now_ms) {
  CancelOutcome outcome = CancelOutcome::kNotFound;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    std::string q = "SELECT state, attempt, tenant_id FROM jobs WHERE id = ?" + ForUpdate();
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(q, {job_id}));
    if (rows.empty() || (scope.tenant_id && rows[0].Int(2) != *scope.tenant_id)) {
      outcome = CancelOutcome::kNotFound;
      return Status::OK();
    }
    JobState state = ParseJobState(rows[0].Text(0)).value_or(JobState::kPending);
    if (IsTerminal(state)) {
      outcome = CancelOutcome::kAlreadyFinished;
      return Status::OK();
    }
    const int attempt = static_cast<int>(rows[0].Int(1));
    // Running tasks keep their allocations until their agents report the
    // exits (SyncNode tells them to stop); tasks never started lose theirs
    // at the agent's next sync.
    FERRY_RETURN_NOT_OK(FinishJob(c, job_id, attempt, JobState::kCancelled,
                                  reason::kCancelledByUser, std::nullopt, "cancelled by " + actor,
                                  actor, now_ms));
    outcome = CancelOutcome::kCancelled;
    return Status::OK();
  }));
  return outcome;
}

Result<std::optional<std::vector<JobEvent>>> SqlStore::ListEvents(const Scope& scope,
                                                                  int64_t job_id, int64_t after_id,
                                                                  int limit) {
  limit = std::clamp(limit, 1, 10000);
  return ListOfVisibleJob<JobEvent>(
      scope, job_id,
      "SELECT id, job_id, at_ms, type, state, reason, message, actor FROM job_events"
      " WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?",
      {job_id, after_id, int64_t{limit}}, [](const Row& row) {
        JobEvent e;
        e.id = row.Int(0);
        e.job_id = row.Int(1);
        e.at_ms = row.Int(2);
        e.type = row.Text(3);
        if (!row.IsNull(4)) e.state = ParseJobState(row.Text(4));
        e.reason = row.Text(5);
        e.message = row.Text(6);
        e.actor = row.Text(7);
        return e;
      });
}

Result<std::vector<int64_t>> SqlStore::ExpireRuntimes(int64_t now_ms) {
  std::vector<int64_t> out;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    out.clear();
    // Runtime counts from the start of the tasks, or from admission while
    // they have not all started.
    FERRY_ASSIGN_OR_RAISE(
        Rows rows,
        c.Query("SELECT id, attempt, max_runtime_ms FROM jobs"
                " WHERE state IN ('ADMITTED', 'RUNNING') AND max_runtime_ms > 0"
                " AND (CASE WHEN started_at_ms > 0 THEN started_at_ms ELSE admitted_at_ms END)"
                " + max_runtime_ms <= ? ORDER BY id",
                {now_ms}));
    for (const Row& row : rows.rows) {
      const int64_t job_id = row.Int(0);
      // Re-check under the row lock (PostgreSQL: another writer may have
      // finished the job since the scan).
      FERRY_ASSIGN_OR_RAISE(
          Rows locked,
          c.Query("SELECT state, attempt FROM jobs WHERE id = ?" + ForUpdate(), {job_id}));
      auto state = ParseJobState(locked[0].Text(0));
      if (!state || !IsLive(*state) || locked[0].Int(1) != row.Int(1)) continue;
      FERRY_RETURN_NOT_OK(
          FinishJob(c, job_id, static_cast<int>(row.Int(1)), JobState::kTimeout,
                    reason::kMaxRuntimeExceeded, std::nullopt,
                    "ran past max_runtime_seconds (" + std::to_string(row.Int(2) / 1000) + " s)",
                    "server", now_ms));
      out.push_back(job_id);
    }
    return Status::OK();
  }));
  return out;
}

Result<bool> SqlStore::NoteAttempt(int64_t job_id, int attempt, const std::string& type,
                                   const std::string& reason, const std::string& message,
                                   const std::string& actor, int64_t now_ms) {
  bool live = false;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(
        Rows job,
        c.Query("SELECT state, attempt, reason FROM jobs WHERE id = ?" + ForUpdate(), {job_id}));
    live = false;
    if (job.empty() || job[0].Int(1) != attempt) return Status::OK();
    auto state = ParseJobState(job[0].Text(0));
    if (!state || !IsLive(*state)) return Status::OK();
    live = true;
    if (!reason.empty() && job[0].Text(2) != reason) {
      FERRY_RETURN_NOT_OK(
          c.Query("UPDATE jobs SET reason = ? WHERE id = ?", {reason, job_id}).status());
    } else if (!reason.empty() || type.empty()) {
      return Status::OK();  // the reason stands: nothing new to say
    }
    if (type.empty()) return Status::OK();
    return AddEvent(c, job_id, now_ms, type, std::nullopt, reason, message, actor);
  }));
  return live;
}

Result<bool> SqlStore::NoteAhead(int64_t job_id, int attempt, const std::string& type,
                                 const std::string& message, const std::string& actor,
                                 int64_t now_ms) {
  bool written = false;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(
        Rows job, c.Query("SELECT state, attempt FROM jobs WHERE id = ?" + ForUpdate(), {job_id}));
    written = false;
    if (job.empty() || job[0].Int(1) != attempt) return Status::OK();
    auto state = ParseJobState(job[0].Text(0));
    if (!state || (*state != JobState::kPending && !IsLive(*state))) return Status::OK();
    written = true;
    return AddEvent(c, job_id, now_ms, type, std::nullopt, "", message, actor);
  }));
  return written;
}

Result<bool> SqlStore::JobVisible(Connection& c, const Scope& scope, int64_t job_id) {
  FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query("SELECT tenant_id FROM jobs WHERE id = ?", {job_id}));
  return !rows.empty() && (!scope.tenant_id || rows[0].Int(0) == *scope.tenant_id);
}

Result<bool> SqlStore::Requeue(Connection& c, int64_t job_id, int attempt, int64_t max_retries,
                               std::string_view why, const std::string& what, int64_t now_ms) {
  if (attempt - 1 < max_retries) {
    FERRY_RETURN_NOT_OK(c.Query("UPDATE jobs SET state = 'PENDING', reason = ?, attempt = ?,"
                                " admitted_at_ms = 0, started_at_ms = 0, preempt_reason = '',"
                                " preempted_for = 0, preempt_grace_ms = 0 WHERE id = ?",
                                {Str(why), int64_t{attempt + 1}, job_id})
                            .status());
    FERRY_RETURN_NOT_OK(
        c.Query("INSERT INTO attempts (job_id, attempt, state, reason) VALUES (?, ?, ?, ?)",
                {job_id, int64_t{attempt + 1}, StateText(JobState::kPending), Str(why)})
            .status());
    FERRY_RETURN_NOT_OK(AddEvent(c, job_id, now_ms, "state", JobState::kPending, why,
                                 "attempt " + std::to_string(attempt + 1), "server"));
    return true;
  }
  FERRY_RETURN_NOT_OK(
      c.Query("UPDATE jobs SET state = 'FAILED', reason = ?, finished_at_ms = ?,"
              " preempt_reason = '', preempted_for = 0, preempt_grace_ms = 0 WHERE id = ?",
              {Str(reason::kRetryLimit), now_ms, job_id})
          .status());
  FERRY_RETURN_NOT_OK(AddEvent(c, job_id, now_ms, "state", JobState::kFailed, reason::kRetryLimit,
                               what + " after " + std::to_string(max_retries) + " retries",
                               "server"));
  return false;
}

}  // namespace ferry::fleet::store_internal
