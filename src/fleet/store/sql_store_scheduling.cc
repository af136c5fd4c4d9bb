// Scheduling: the snapshot a cycle reads, committing placements and reasons,
// and preemption.
#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

Result<bool> SqlStore::PreemptJob(const PreemptRequest& request, int64_t now_ms) {
  if (request.reason.empty()) return Status::Invalid("a preemption needs a reason");
  if (request.grace_ms < 0) return Status::Invalid("a preemption's grace must be >= 0");
  bool done = false;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(
        Rows rows, c.Query("UPDATE jobs SET preempt_reason = ?, preempted_for = ?,"
                           " preempt_grace_ms = ? WHERE id = ? AND attempt = ?"
                           " AND state IN ('ADMITTED', 'RUNNING') AND preempt_reason = ''"
                           " RETURNING id",
                           {request.reason, request.for_job, request.grace_ms, request.job_id,
                            int64_t{request.attempt}}));
    done = !rows.empty();
    if (!done) return Status::OK();
    char grace[32];
    std::snprintf(grace, sizeof(grace), "%.3g", static_cast<double>(request.grace_ms) / 1000);
    std::string message = "stopping attempt " + std::to_string(request.attempt);
    if (request.for_job > 0) message += " for job " + std::to_string(request.for_job);
    message += std::string("; grace ") + grace + " s";
    FERRY_RETURN_NOT_OK(AddEvent(c, request.job_id, now_ms, "preempt_requested", std::nullopt,
                                 request.reason, message, "scheduler"));
    // Tasks no agent has started yet have nothing to checkpoint; they end
    // at their agent's next sync. When there is no task left at all, the
    // attempt ends now.
    return MaybeFinishPreemption(c, request.job_id, request.attempt, now_ms);
  }));
  return done;
}

Result<sched::Snapshot> SqlStore::LoadSchedulingSnapshot() {
  sched::Snapshot snap;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    snap = sched::Snapshot{};
    FERRY_ASSIGN_OR_RAISE(Rows pending,
                          c.Query(std::string(kJobSelect) +
                                  " WHERE j.state = 'PENDING' ORDER BY j.priority DESC, j.id ASC"));
    for (const Row& row : pending.rows) {
      FERRY_ASSIGN_OR_RAISE(Job job, JobFromRow(row, &spec_cache_));
      snap.pending.push_back(sched::ToPendingJob(job));
    }
    FERRY_ASSIGN_OR_RAISE(std::vector<Node> nodes, LoadNodes(c, nullptr));
    std::map<int64_t, size_t> node_at;
    snap.nodes.reserve(nodes.size());
    for (const Node& node : nodes) {
      node_at[node.id] = snap.nodes.size();
      snap.nodes.push_back(sched::ToNodeInfo(node));
    }
    FERRY_ASSIGN_OR_RAISE(
        Rows usage, c.Query("SELECT node_id, COALESCE(SUM(cpus), 0), COALESCE(SUM(memory_mb), 0)"
                            " FROM allocations WHERE released_at_ms IS NULL GROUP BY node_id"));
    for (const Row& row : usage.rows) {
      auto at = node_at.find(row.Int(0));
      if (at == node_at.end()) continue;
      snap.nodes[at->second].cpus_used += row.Double(1);
      snap.nodes[at->second].memory_mb_used += row.Int(2);
    }
    FERRY_RETURN_NOT_OK(LoadRunningJobs(c, &snap.running));
    return Status::OK();
  }));
  return snap;
}

Status SqlStore::LoadRunningJobs(Connection& c, std::vector<sched::RunningJob>* out) {
  const std::string open_jobs =
      " j.id IN (SELECT job_id FROM allocations WHERE released_at_ms IS NULL)";
  FERRY_ASSIGN_OR_RAISE(Rows jobs,
                        c.Query(std::string(kJobSelect) + " WHERE" + open_jobs + " ORDER BY j.id"));
  std::map<int64_t, Job> by_id;
  for (const Row& row : jobs.rows) {
    FERRY_ASSIGN_OR_RAISE(Job job, JobFromRow(row, &spec_cache_));
    by_id.emplace(job.id, std::move(job));
  }
  FERRY_ASSIGN_OR_RAISE(
      Rows flags,
      c.Query("SELECT j.id, j.preempt_reason, j.preempted_for FROM jobs j WHERE" + open_jobs));
  std::map<int64_t, std::pair<std::string, int64_t>> preempt;
  for (const Row& row : flags.rows) preempt[row.Int(0)] = {row.Text(1), row.Int(2)};
  FERRY_ASSIGN_OR_RAISE(
      Rows allocs, c.Query("SELECT a.job_id, a.attempt, a.task, a.node_id, n.name, a.gpu_id, g.idx,"
                           " a.started_at_ms FROM allocations a JOIN nodes n ON n.id = a.node_id"
                           " LEFT JOIN gpus g ON g.id = a.gpu_id WHERE a.released_at_ms IS NULL"
                           " ORDER BY a.job_id, a.attempt, a.task, g.idx"));
  // Earliest allocation of each attempt (when it was admitted).
  std::vector<int64_t> admitted_ms;
  for (const Row& row : allocs.rows) {
    const int64_t job_id = row.Int(0);
    const int attempt = static_cast<int>(row.Int(1));
    auto found = by_id.find(job_id);
    if (found == by_id.end()) continue;  // not in the job read (a commit in between)
    const Job& job = found->second;
    if (out->empty() || out->back().job_id != job_id || out->back().attempt != attempt) {
      sched::RunningJob run = sched::ToRunningJob(job, attempt, {}, row.Int(7));
      const auto& [why, for_job] = preempt[job_id];
      const bool live = IsLive(job.state) && job.attempt == attempt;
      run.terminating = !live || !why.empty();
      if (live && !why.empty()) {
        run.preempt_reason = why;
        run.preempted_for = for_job;
      }
      out->push_back(std::move(run));
      admitted_ms.push_back(row.Int(7));
    }
    sched::RunningJob& run = out->back();
    admitted_ms.back() = std::min(admitted_ms.back(), row.Int(7));
    run.started_s = static_cast<double>(admitted_ms.back()) / 1000.0;
    const int task = static_cast<int>(row.Int(2));
    if (run.tasks.empty() || run.tasks.back().task != task) {
      TaskPlacement p;
      p.task = task;
      p.node_id = row.Int(3);
      p.node = row.Text(4);
      run.tasks.push_back(std::move(p));
    }
    if (!row.IsNull(5)) {
      run.tasks.back().gpu_ids.push_back(row.Int(5));
      run.tasks.back().gpu_indices.push_back(static_cast<int>(row.Int(6)));
    }
  }
  return Status::OK();
}

Result<CommitResult> SqlStore::CommitPlacements(const std::vector<Placement>& placements,
                                                const std::vector<PendingReason>& pending,
                                                int64_t now_ms) {
  CommitResult result;
  for (const Placement& p : placements) {
    bool conflict = false;
    Status st = Run(true, [&](Connection& c) -> Status {
      conflict = false;
      Status placed = Place(c, p, now_ms, &conflict);
      // Another writer took a GPU between our check and our insert: the
      // unique index refused it, which is a conflict, not an error.
      if (!placed.ok() && c.last_error() == ErrorKind::kUnique) conflict = true;
      if (conflict) return Status::Cancelled("placement conflicts");
      return placed;
    });
    if (conflict) {
      result.conflicted.push_back(p.job_id);
      continue;
    }
    FERRY_RETURN_NOT_OK(st);
    result.admitted.push_back(p.job_id);
  }
  if (!pending.empty()) {
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      for (const PendingReason& r : pending) {
        FERRY_ASSIGN_OR_RAISE(
            Rows rows, c.Query("UPDATE jobs SET reason = ? WHERE id = ? AND state = 'PENDING'"
                               " AND reason <> ? RETURNING attempt",
                               {r.reason, r.job_id, r.reason}));
        if (rows.empty()) continue;
        FERRY_RETURN_NOT_OK(
            c.Query("UPDATE attempts SET reason = ? WHERE job_id = ? AND attempt = ?",
                    {r.reason, r.job_id, rows[0].Int(0)})
                .status());
        FERRY_RETURN_NOT_OK(AddEvent(c, r.job_id, now_ms, "pending_reason", JobState::kPending,
                                     r.reason, r.message, "scheduler"));
      }
      return Status::OK();
    }));
  }
  return result;
}

Status SqlStore::Place(Connection& c, const Placement& p, int64_t now_ms, bool* conflict) {
  FERRY_ASSIGN_OR_RAISE(Rows job,
                        c.Query("UPDATE jobs SET state = 'ADMITTED', reason = ?, admitted_at_ms = ?"
                                " WHERE id = ? AND state = 'PENDING' AND attempt = ?"
                                " RETURNING task_count, spec",
                                {Str(reason::kPlaced), now_ms, p.job_id, int64_t{p.attempt}}));
  if (job.empty()) {
    *conflict = true;
    return Status::OK();
  }
  const int64_t task_count = job[0].Int(0);
  if (static_cast<int64_t>(p.tasks.size()) != task_count) {
    return Status::Invalid("placement of job " + std::to_string(p.job_id) + " has " +
                           std::to_string(p.tasks.size()) + " tasks, the job has " +
                           std::to_string(task_count));
  }
  nlohmann::json spec_json = nlohmann::json::parse(job[0].Text(1), nullptr, false);
  std::vector<FieldError> errors;
  auto spec = ParseJobSpec(spec_json, &errors);
  if (!spec.ok()) {
    return Status::IOError("store: job " + std::to_string(p.job_id) +
                           " has an invalid stored spec: " + spec.status().message());
  }
  const double cpus = spec->cpus_per_task;
  const int64_t memory_mb = spec->memory_mb_per_task;
  const int gpus_per_task = spec->gpus_per_task;
  std::set<int> seen_tasks;
  std::set<std::string> node_names;
  for (const TaskPlacement& t : p.tasks) {
    if (t.task < 0 || t.task >= task_count || !seen_tasks.insert(t.task).second) {
      return Status::Invalid("placement of job " + std::to_string(p.job_id) +
                             " has a bad or repeated task index " + std::to_string(t.task));
    }
    if (static_cast<int>(t.gpu_ids.size()) != gpus_per_task) {
      return Status::Invalid("placement of job " + std::to_string(p.job_id) + " gives task " +
                             std::to_string(t.task) + " " + std::to_string(t.gpu_ids.size()) +
                             " GPUs, the job asks for " + std::to_string(gpus_per_task));
    }
    FERRY_ASSIGN_OR_RAISE(
        Rows node, c.Query("SELECT name, state, drain FROM nodes WHERE id = ?", {t.node_id}));
    // A node lost or drained since the snapshot takes no new work.
    if (node.empty() || node[0].Text(1) != "READY" || node[0].Int(2) != 0) {
      *conflict = true;
      return Status::OK();
    }
    node_names.insert(node[0].Text(0));
    FERRY_RETURN_NOT_OK(c.Query("INSERT INTO tasks (job_id, attempt, task, node_id, state)"
                                " VALUES (?, ?, ?, ?, 'assigned')",
                                {p.job_id, int64_t{p.attempt}, int64_t{t.task}, t.node_id})
                            .status());
    if (t.gpu_ids.empty()) {
      FERRY_RETURN_NOT_OK(
          c.Query(
               "INSERT INTO allocations (job_id, attempt, task, gpu_id, node_id, cpus,"
               " memory_mb, started_at_ms) VALUES (?, ?, ?, NULL, ?, ?, ?, ?)",
               {p.job_id, int64_t{p.attempt}, int64_t{t.task}, t.node_id, cpus, memory_mb, now_ms})
              .status());
    }
    for (size_t i = 0; i < t.gpu_ids.size(); ++i) {
      FERRY_ASSIGN_OR_RAISE(
          Rows gpu,
          c.Query("SELECT g.node_id, (SELECT COUNT(*) FROM allocations a WHERE a.gpu_id = g.id"
                  " AND a.released_at_ms IS NULL), g.external FROM gpus g WHERE g.id = ?",
                  {t.gpu_ids[i]}));
      // Taken by another job, or by the node's resource manager since the snapshot.
      if (gpu.empty() || gpu[0].Int(0) != t.node_id || gpu[0].Int(1) > 0 || gpu[0].Int(2) != 0) {
        *conflict = true;
        return Status::OK();
      }
      FERRY_RETURN_NOT_OK(
          c.Query("INSERT INTO allocations (job_id, attempt, task, gpu_id, node_id, cpus,"
                  " memory_mb, started_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                  {p.job_id, int64_t{p.attempt}, int64_t{t.task}, t.gpu_ids[i], t.node_id,
                   i == 0 ? cpus : 0.0, i == 0 ? memory_mb : int64_t{0}, now_ms})
              .status());
    }
  }
  FERRY_RETURN_NOT_OK(
      c.Query("UPDATE attempts SET state = 'ADMITTED', reason = ?, admitted_at_ms = ?"
              " WHERE job_id = ? AND attempt = ?",
              {Str(reason::kPlaced), now_ms, p.job_id, int64_t{p.attempt}})
          .status());
  std::string names;
  for (const std::string& n : node_names) names += (names.empty() ? "" : ", ") + n;
  std::string message =
      std::to_string(p.tasks.size()) + (p.tasks.size() == 1 ? " task on " : " tasks on ") + names;
  return AddEvent(c, p.job_id, now_ms, "state", JobState::kAdmitted, reason::kPlaced, message,
                  "scheduler");
}

Result<bool> SqlStore::FinishPreemption(Connection& c, int64_t job_id, int attempt,
                                        const std::string& message, int64_t now_ms) {
  FERRY_ASSIGN_OR_RAISE(
      Rows job, c.Query("SELECT max_retries, preempt_reason, preempted_for FROM jobs WHERE id = ?",
                        {job_id}));
  const int64_t max_retries = job[0].Int(0);
  const std::string why = job[0].Text(1);
  const int64_t for_job = job[0].Int(2);
  FERRY_RETURN_NOT_OK(
      c.Query("UPDATE attempts SET state = 'PREEMPTED', reason = ?, ended_at_ms = ?,"
              " preempted_for = ? WHERE job_id = ? AND attempt = ?",
              {why, now_ms, for_job, job_id, int64_t{attempt}})
          .status());
  std::string detail = message;
  if (detail.empty()) {
    detail = "preempted";
    if (for_job > 0) detail += " for job " + std::to_string(for_job);
  }
  FERRY_RETURN_NOT_OK(
      AddEvent(c, job_id, now_ms, "state", JobState::kPreempted, why, detail, "scheduler"));
  return Requeue(c, job_id, attempt, max_retries, why, "preempted", now_ms);
}

Status SqlStore::MaybeFinishPreemption(Connection& c, int64_t job_id, int attempt, int64_t now_ms) {
  FERRY_ASSIGN_OR_RAISE(
      Rows job, c.Query("SELECT state, attempt, preempt_reason FROM jobs WHERE id = ?", {job_id}));
  if (job.empty() || job[0].Int(1) != attempt || job[0].Text(2).empty()) return Status::OK();
  auto state = ParseJobState(job[0].Text(0));
  if (!state || !IsLive(*state)) return Status::OK();
  FERRY_ASSIGN_OR_RAISE(Rows open,
                        c.Query("SELECT COUNT(*) FROM tasks WHERE job_id = ? AND attempt = ?"
                                " AND state <> 'exited'",
                                {job_id, int64_t{attempt}}));
  if (open[0].Int(0) > 0) return Status::OK();
  return FinishPreemption(c, job_id, attempt, "", now_ms).status();
}

}  // namespace ferry::fleet::store_internal
