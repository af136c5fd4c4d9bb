// Nodes and agents: registration, syncs and task reports, leases, lost
// nodes, drain and removal, and the assignments agents launch.
#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

Result<Node> SqlStore::RegisterNode(const NodeRegistration& reg, int64_t now_ms, int64_t lease_ms) {
  if (reg.name.empty()) return Status::Invalid("node name must not be empty");
  if (reg.instance.empty()) return Status::Invalid("node instance must not be empty");
  std::set<int> indices;
  for (const GpuInventory& g : reg.gpus) {
    if (g.index < 0) return Status::Invalid("gpu index must be >= 0");
    if (!indices.insert(g.index).second) {
      return Status::Invalid("gpu index " + std::to_string(g.index) + " listed twice");
    }
  }
  Node node;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    ExpiryResult ignored;
    FERRY_ASSIGN_OR_RAISE(
        Rows existing,
        c.Query("SELECT id, instance, state FROM nodes WHERE name = ?" + ForUpdate(), {reg.name}));
    int64_t node_id = 0;
    if (existing.empty()) {
      FERRY_ASSIGN_OR_RAISE(
          Rows rows, c.Query("INSERT INTO nodes (name, pool, labels, cpus, memory_mb, state, drain,"
                             " instance, registered_at_ms, last_heartbeat_ms, lease_expires_at_ms)"
                             " VALUES (?, ?, ?, ?, ?, 'READY', 0, ?, ?, ?, ?) RETURNING id",
                             {reg.name, reg.pool, LabelsJson(reg.labels), reg.cpus, reg.memory_mb,
                              reg.instance, now_ms, now_ms, now_ms + lease_ms}));
      node_id = rows[0].Int(0);
    } else {
      node_id = existing[0].Int(0);
      const bool new_instance = existing[0].Text(1) != reg.instance;
      if (new_instance) {
        // The previous agent process is gone, and its tasks with it.
        FERRY_RETURN_NOT_OK(HandleNodeLoss(c, node_id, reason::kNodeLost,
                                           "agent on " + reg.name + " restarted", now_ms,
                                           &ignored));
      }
      FERRY_RETURN_NOT_OK(
          c.Query("UPDATE nodes SET pool = ?, labels = ?, cpus = ?, memory_mb = ?,"
                  " state = 'READY', instance = ?, last_heartbeat_ms = ?,"
                  " lease_expires_at_ms = ?, removed_at_ms = 0,"
                  " registered_at_ms = CASE WHEN instance = ? THEN registered_at_ms ELSE ? END"
                  " WHERE id = ?",
                  {reg.pool, LabelsJson(reg.labels), reg.cpus, reg.memory_mb, reg.instance, now_ms,
                   now_ms + lease_ms, reg.instance, now_ms, node_id})
              .status());
    }
    for (const GpuInventory& g : reg.gpus) {
      std::string uuid = g.uuid.empty() ? reg.name + "-gpu" + std::to_string(g.index) : g.uuid;
      FERRY_RETURN_NOT_OK(
          c.Query("INSERT INTO gpus (node_id, idx, model, memory_mb, uuid) VALUES (?, ?, ?, ?, ?)"
                  " ON CONFLICT (node_id, idx) DO UPDATE SET model = excluded.model,"
                  " memory_mb = excluded.memory_mb, uuid = excluded.uuid",
                  {node_id, int64_t{g.index}, g.model, g.memory_mb, uuid})
              .status());
    }
    FERRY_ASSIGN_OR_RAISE(auto nodes, LoadNodes(c, &reg.name));
    if (nodes.empty()) return Status::UnknownError("store: the registered node vanished");
    node = std::move(nodes[0]);
    return Status::OK();
  }));
  return node;
}

Result<std::vector<Node>> SqlStore::ListNodes() {
  std::vector<Node> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(out, LoadNodes(c, nullptr));
    return Status::OK();
  }));
  return out;
}

Result<std::optional<Node>> SqlStore::GetNode(const std::string& name) {
  std::optional<Node> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(auto nodes, LoadNodes(c, &name));
    out.reset();
    if (!nodes.empty()) out = std::move(nodes[0]);
    return Status::OK();
  }));
  return out;
}

Result<std::vector<Pool>> SqlStore::ListPools() {
  FERRY_ASSIGN_OR_RAISE(auto nodes, ListNodes());
  return SummarisePools(nodes);
}

Result<bool> SqlStore::SetDrain(const std::string& name, bool drain) {
  bool found = false;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(Rows rows,
                          c.Query("UPDATE nodes SET drain = ? WHERE name = ? AND removed_at_ms = 0",
                                  {int64_t{drain ? 1 : 0}, name}));
    found = rows.affected > 0;
    return Status::OK();
  }));
  return found;
}

Result<SyncResult> SqlStore::SyncNode(const SyncRequest& request) {
  SyncResult result;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    result = SyncResult{};
    FERRY_ASSIGN_OR_RAISE(
        Rows node, c.Query("SELECT id, instance, state FROM nodes WHERE name = ?" + ForUpdate(),
                           {request.node}));
    // Unknown, replaced by another agent process, or declared lost (its
    // tasks were requeued): the agent must register again.
    if (node.empty() || node[0].Text(1) != request.instance || node[0].Text(2) != "READY") {
      result.registered = false;
      return Status::OK();
    }
    const int64_t node_id = node[0].Int(0);
    result.lease_expires_at_ms = request.now_ms + request.lease_ms;
    FERRY_RETURN_NOT_OK(
        c.Query("UPDATE nodes SET last_heartbeat_ms = ?, lease_expires_at_ms = ? WHERE id = ?",
                {request.now_ms, result.lease_expires_at_ms, node_id})
            .status());
    const std::string actor = request.actor.empty() ? "agent:" + request.node : request.actor;
    for (const TaskReport& report : request.reports) {
      FERRY_RETURN_NOT_OK(ApplyReport(c, node_id, request.node, actor, report, request.now_ms));
    }

    using Key = std::tuple<int64_t, int, int>;  // job, attempt, task
    std::set<Key> running;
    for (const TaskRef& r : request.running) running.insert({r.job_id, r.attempt, r.task});

    // Stop what must not run here any more.
    for (const TaskRef& r : request.running) {
      FERRY_ASSIGN_OR_RAISE(
          Rows rows,
          c.Query("SELECT j.state, j.attempt, t.node_id, j.preempt_reason, j.preempt_grace_ms"
                  " FROM jobs j LEFT JOIN tasks t"
                  " ON t.job_id = j.id AND t.attempt = ? AND t.task = ? WHERE j.id = ?",
                  {int64_t{r.attempt}, int64_t{r.task}, r.job_id}));
      bool stop = rows.empty();
      if (!stop) {
        auto state = ParseJobState(rows[0].Text(0));
        stop = !state || IsTerminal(*state) || rows[0].Int(1) != r.attempt || rows[0].IsNull(2) ||
               rows[0].Int(2) != node_id;
        if (!stop && IsLive(*state) && !rows[0].Text(3).empty()) {
          // Preempted: the task gets the preemption's grace to checkpoint.
          stop = true;
          result.stop_grace_ms = std::max(result.stop_grace_ms.value_or(0), rows[0].Int(4));
        }
      }
      if (stop) result.stop.push_back(r);
    }

    // Open allocations on this node: release those of dead attempts the
    // agent no longer runs; start those of live attempts it does not run.
    FERRY_ASSIGN_OR_RAISE(
        Rows allocs,
        c.Query("SELECT a.id, a.job_id, a.attempt, a.task, j.state, j.attempt, t.state,"
                " j.preempt_reason FROM allocations a JOIN jobs j ON j.id = a.job_id"
                " LEFT JOIN tasks t ON t.job_id = a.job_id AND t.attempt = a.attempt"
                " AND t.task = a.task"
                " WHERE a.node_id = ? AND a.released_at_ms IS NULL"
                " ORDER BY a.job_id, a.attempt, a.task",
                {node_id}));
    std::vector<Key> to_start;
    std::vector<Key> to_close;  // tasks of preempted attempts the agent does not run
    for (const Row& row : allocs.rows) {
      Key key{row.Int(1), static_cast<int>(row.Int(2)), static_cast<int>(row.Int(3))};
      auto state = ParseJobState(row.Text(4));
      const bool live = state && IsLive(*state) && row.Int(5) == std::get<1>(key);
      const bool agent_runs = running.count(key) > 0;
      const bool preempted = live && !row.Text(7).empty();
      if (!live && !agent_runs) {
        FERRY_RETURN_NOT_OK(c.Query("UPDATE allocations SET released_at_ms = ? WHERE id = ?",
                                    {request.now_ms, row.Int(0)})
                                .status());
      } else if (preempted && !agent_runs) {
        if (to_close.empty() || to_close.back() != key) to_close.push_back(key);
      } else if (live && !agent_runs && row.Text(6) != "exited") {
        if (to_start.empty() || to_start.back() != key) to_start.push_back(key);
      }
    }
    for (const auto& [job_id, attempt, task] : to_close) {
      const Params key{job_id, int64_t{attempt}, int64_t{task}};
      Params end{request.now_ms};
      end.insert(end.end(), key.begin(), key.end());
      FERRY_RETURN_NOT_OK(
          c.Query("UPDATE tasks SET state = 'exited', message = 'preempted before it ran',"
                  " ended_at_ms = ? WHERE job_id = ? AND attempt = ? AND task = ?"
                  " AND state <> 'exited'",
                  end)
              .status());
      FERRY_RETURN_NOT_OK(c.Query("UPDATE allocations SET released_at_ms = ? WHERE job_id = ?"
                                  " AND attempt = ? AND task = ? AND released_at_ms IS NULL",
                                  end)
                              .status());
      FERRY_RETURN_NOT_OK(MaybeFinishPreemption(c, job_id, attempt, request.now_ms));
    }
    for (const Key& key : to_start) {
      FERRY_ASSIGN_OR_RAISE(TaskAssignment a, BuildAssignment(c, node_id, key));
      result.start.push_back(std::move(a));
    }
    return Status::OK();
  }));
  return result;
}

Result<ExpiryResult> SqlStore::ExpireLeases(int64_t now_ms) {
  ExpiryResult result;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    result = ExpiryResult{};
    FERRY_ASSIGN_OR_RAISE(
        Rows rows,
        c.Query("SELECT id, name FROM nodes WHERE state = 'READY' AND lease_expires_at_ms < ?"
                " ORDER BY name" +
                    ForUpdate(),
                {now_ms}));
    for (const Row& row : rows.rows) {
      FERRY_RETURN_NOT_OK(
          c.Query("UPDATE nodes SET state = 'LOST' WHERE id = ?", {row.Int(0)}).status());
      FERRY_RETURN_NOT_OK(HandleNodeLoss(c, row.Int(0), reason::kNodeLost,
                                         "node " + row.Text(1) + " lost (lease expired)", now_ms,
                                         &result));
      result.lost_nodes.push_back(row.Text(1));
    }
    return Status::OK();
  }));
  return result;
}

Result<ExpiryResult> SqlStore::MarkNodeLost(const std::string& name, const std::string& why,
                                            const std::string& message, int64_t now_ms) {
  if (why.empty()) return Status::Invalid("a lost node needs a reason");
  ExpiryResult result;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    result = ExpiryResult{};
    FERRY_ASSIGN_OR_RAISE(Rows rows,
                          c.Query("SELECT id FROM nodes WHERE name = ? AND state = 'READY'"
                                  " AND removed_at_ms = 0" +
                                      ForUpdate(),
                                  {name}));
    if (rows.empty()) return Status::OK();
    FERRY_RETURN_NOT_OK(
        c.Query("UPDATE nodes SET state = 'LOST' WHERE id = ?", {rows[0].Int(0)}).status());
    FERRY_RETURN_NOT_OK(HandleNodeLoss(c, rows[0].Int(0), why, message, now_ms, &result));
    result.lost_nodes.push_back(name);
    return Status::OK();
  }));
  return result;
}

Result<RemoveNodeOutcome> SqlStore::RemoveNode(const std::string& name, int64_t now_ms) {
  RemoveNodeOutcome outcome = RemoveNodeOutcome::kNotFound;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(
        Rows rows,
        c.Query("SELECT id FROM nodes WHERE name = ? AND removed_at_ms = 0" + ForUpdate(), {name}));
    if (rows.empty()) {
      outcome = RemoveNodeOutcome::kNotFound;
      return Status::OK();
    }
    const int64_t node_id = rows[0].Int(0);
    FERRY_ASSIGN_OR_RAISE(Rows open, c.Query("SELECT COUNT(*) FROM allocations WHERE node_id = ?"
                                             " AND released_at_ms IS NULL",
                                             {node_id}));
    if (open[0].Int(0) > 0) {
      outcome = RemoveNodeOutcome::kBusy;
      return Status::OK();
    }
    FERRY_RETURN_NOT_OK(c.Query("UPDATE nodes SET state = 'LOST', drain = 0, removed_at_ms = ?"
                                " WHERE id = ?",
                                {std::max<int64_t>(now_ms, 1), node_id})
                            .status());
    outcome = RemoveNodeOutcome::kRemoved;
    return Status::OK();
  }));
  return outcome;
}

Status SqlStore::ApplyReport(Connection& c, int64_t node_id, const std::string& node_name,
                             const std::string& actor, const TaskReport& report, int64_t now_ms) {
  const TaskRef& ref = report.ref;
  const int64_t at = report.at_ms > 0 ? report.at_ms : now_ms;
  FERRY_ASSIGN_OR_RAISE(
      Rows job, c.Query("SELECT state, attempt, task_count, preempt_reason FROM jobs WHERE id = ?" +
                            ForUpdate(),
                        {ref.job_id}));
  if (job.empty() || job[0].Int(1) != ref.attempt) return Status::OK();  // stale: fenced
  auto state = ParseJobState(job[0].Text(0));
  if (!state) return Status::OK();
  const int64_t task_count = job[0].Int(2);
  FERRY_ASSIGN_OR_RAISE(
      Rows task, c.Query("SELECT state FROM tasks WHERE job_id = ? AND attempt = ? AND task = ?"
                         " AND node_id = ?",
                         {ref.job_id, int64_t{ref.attempt}, int64_t{ref.task}, node_id}));
  if (task.empty()) return Status::OK();  // not this node's task
  const std::string task_state = task[0].Text(0);
  const Params key{ref.job_id, int64_t{ref.attempt}, int64_t{ref.task}};
  const std::string where = " WHERE job_id = ? AND attempt = ? AND task = ?";
  const std::string who = "task " + std::to_string(ref.task) + " on " + node_name;

  if (report.kind == TaskReport::Kind::kLost || report.kind == TaskReport::Kind::kPreempted ||
      report.kind == TaskReport::Kind::kTimedOut) {
    return EndAttempt(c, ref.job_id, ref.attempt, report, actor, now_ms);
  }
  if (report.kind == TaskReport::Kind::kStaging || report.kind == TaskReport::Kind::kStaged) {
    // Progress before the launch: a line in the timeline, nothing else.
    if (task_state != "assigned") return Status::OK();
    const bool began = report.kind == TaskReport::Kind::kStaging;
    std::string what = who + (began ? " staging inputs" : " inputs staged");
    if (!report.message.empty()) what += ": " + report.message;
    return AddEvent(c, ref.job_id, at, began ? "staging_started" : "staged", std::nullopt, "", what,
                    actor);
  }
  if (report.kind == TaskReport::Kind::kStarted) {
    if (task_state != "assigned") return Status::OK();
    Params params{at};
    params.insert(params.end(), key.begin(), key.end());
    FERRY_RETURN_NOT_OK(
        c.Query("UPDATE tasks SET state = 'running', started_at_ms = ?" + where, params).status());
    FERRY_RETURN_NOT_OK(
        AddEvent(c, ref.job_id, at, "task_started", std::nullopt, "", who + " started", actor));
    if (*state != JobState::kAdmitted) return Status::OK();
    FERRY_ASSIGN_OR_RAISE(Rows started,
                          c.Query("SELECT COUNT(*) FROM tasks WHERE job_id = ? AND attempt = ?"
                                  " AND state <> 'assigned'",
                                  {ref.job_id, int64_t{ref.attempt}}));
    if (started[0].Int(0) < task_count) return Status::OK();
    FERRY_RETURN_NOT_OK(
        c.Query("UPDATE jobs SET state = 'RUNNING', reason = ?, started_at_ms = ? WHERE id = ?",
                {Str(reason::kTasksStarted), at, ref.job_id})
            .status());
    FERRY_RETURN_NOT_OK(
        c.Query("UPDATE attempts SET state = 'RUNNING', reason = ?, started_at_ms = ?"
                " WHERE job_id = ? AND attempt = ?",
                {Str(reason::kTasksStarted), at, ref.job_id, int64_t{ref.attempt}})
            .status());
    return AddEvent(c, ref.job_id, at, "state", JobState::kRunning, reason::kTasksStarted,
                    "all " + std::to_string(task_count) + " tasks started", actor);
  }

  // Exited or failed to stage or launch: the task is over and its resources free.
  if (task_state == "exited") return Status::OK();
  const bool staging_failed = report.kind == TaskReport::Kind::kStagingFailed;
  const bool launch_failed = report.kind == TaskReport::Kind::kLaunchFailed || staging_failed;
  std::optional<int> exit_code = launch_failed ? std::nullopt : report.exit_code;
  std::optional<int> signal = launch_failed ? std::nullopt : report.signal;
  {
    Params params{OptionalInt(exit_code), OptionalInt(signal), report.message, at};
    params.insert(params.end(), key.begin(), key.end());
    FERRY_RETURN_NOT_OK(c.Query("UPDATE tasks SET state = 'exited', exit_code = ?, signal = ?,"
                                " message = ?, ended_at_ms = ?" +
                                    where,
                                params)
                            .status());
    Params release{now_ms};
    release.insert(release.end(), key.begin(), key.end());
    FERRY_RETURN_NOT_OK(
        c.Query("UPDATE allocations SET released_at_ms = ?" + where + " AND released_at_ms IS NULL",
                release)
            .status());
  }
  std::string what;
  if (staging_failed) {
    what =
        who + " could not stage its inputs" + (report.message.empty() ? "" : ": " + report.message);
  } else if (launch_failed) {
    what = who + " failed to launch" + (report.message.empty() ? "" : ": " + report.message);
  } else if (exit_code) {
    what = who + " exited with " + std::to_string(*exit_code);
  } else if (signal) {
    what = who + " was killed by signal " + std::to_string(*signal);
  } else {
    what = who + " ended without an exit status";
  }
  if (!launch_failed && !report.note.empty()) what += " (" + report.note + ")";
  const std::string_view event_type = staging_failed  ? "staging_failed"
                                      : launch_failed ? "launch_failed"
                                                      : "task_exited";
  FERRY_RETURN_NOT_OK(AddEvent(c, ref.job_id, at, event_type, std::nullopt, "", what, actor));
  if (!IsLive(*state)) return Status::OK();  // already CANCELLED, TIMEOUT, ...
  // A preempted attempt's tasks end however they end (the signal, or an
  // exit after a checkpoint): the job is requeued once the last one is over.
  if (!job[0].Text(3).empty()) return MaybeFinishPreemption(c, ref.job_id, ref.attempt, now_ms);
  if (launch_failed) {
    return FinishJob(c, ref.job_id, ref.attempt, JobState::kFailed,
                     staging_failed ? reason::kStagingFailed : reason::kLaunchFailed, std::nullopt,
                     what, actor, at);
  }
  if (exit_code && *exit_code != 0) {
    return FinishJob(c, ref.job_id, ref.attempt, JobState::kFailed, reason::kExitedNonZero,
                     exit_code, what, actor, at);
  }
  if (!exit_code) {
    return FinishJob(c, ref.job_id, ref.attempt, JobState::kFailed, reason::kKilledBySignal,
                     std::nullopt, what, actor, at);
  }
  FERRY_ASSIGN_OR_RAISE(Rows done,
                        c.Query("SELECT COUNT(*) FROM tasks WHERE job_id = ? AND attempt = ?"
                                " AND state = 'exited' AND exit_code = 0",
                                {ref.job_id, int64_t{ref.attempt}}));
  if (done[0].Int(0) < task_count) return Status::OK();
  return FinishJob(c, ref.job_id, ref.attempt, JobState::kSucceeded, reason::kExitedZero, 0,
                   "all " + std::to_string(task_count) + " tasks exited with 0", actor, at);
}

Status SqlStore::EndAttempt(Connection& c, int64_t job_id, int attempt, const TaskReport& report,
                            const std::string& actor, int64_t now_ms) {
  const int64_t at = report.at_ms > 0 ? report.at_ms : now_ms;
  FERRY_ASSIGN_OR_RAISE(
      Rows job,
      c.Query("SELECT state, max_retries, preempt_reason FROM jobs WHERE id = ?", {job_id}));
  if (job.empty()) return Status::OK();
  auto state = ParseJobState(job[0].Text(0));
  const int64_t max_retries = job[0].Int(1);
  std::string message = report.message;
  if (message.empty()) {
    message = report.kind == TaskReport::Kind::kLost        ? "lost by the resource manager"
              : report.kind == TaskReport::Kind::kPreempted ? "preempted by the resource manager"
                                                            : "timed out in the resource manager";
  }
  const Params key{job_id, int64_t{attempt}};
  {
    Params params{message, at};
    params.insert(params.end(), key.begin(), key.end());
    FERRY_RETURN_NOT_OK(c.Query("UPDATE tasks SET state = 'exited', message = ?, ended_at_ms = ?"
                                " WHERE job_id = ? AND attempt = ? AND state <> 'exited'",
                                params)
                            .status());
    Params release{now_ms};
    release.insert(release.end(), key.begin(), key.end());
    FERRY_RETURN_NOT_OK(c.Query("UPDATE allocations SET released_at_ms = ? WHERE job_id = ?"
                                " AND attempt = ? AND released_at_ms IS NULL",
                                release)
                            .status());
  }
  if (!state || !IsLive(*state)) return Status::OK();  // already CANCELLED, TIMEOUT, ...
  // Ferry itself was preempting it: the attempt ends as that preemption.
  if (!job[0].Text(2).empty()) return FinishPreemption(c, job_id, attempt, message, at).status();
  if (report.kind == TaskReport::Kind::kTimedOut) {
    return FinishJob(c, job_id, attempt, JobState::kTimeout, reason::kMaxRuntimeExceeded,
                     std::nullopt, message, actor, at);
  }
  const bool lost = report.kind == TaskReport::Kind::kLost;
  const JobState ended = lost ? JobState::kLost : JobState::kPreempted;
  const std::string_view why = lost ? reason::kNodeLost : reason::kPreemptedByResourceManager;
  FERRY_RETURN_NOT_OK(c.Query("UPDATE attempts SET state = ?, reason = ?, ended_at_ms = ?"
                              " WHERE job_id = ? AND attempt = ?",
                              {StateText(ended), Str(why), at, job_id, int64_t{attempt}})
                          .status());
  FERRY_RETURN_NOT_OK(AddEvent(c, job_id, at, "state", ended, why, message, actor));
  return Requeue(c, job_id, attempt, max_retries, lost ? reason::kRequeued : why,
                 lost ? "lost" : "preempted", now_ms)
      .status();
}

Result<bool> SqlStore::SetExternalUse(const std::string& name, const ExternalUse& use) {
  bool found = false;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(
        Rows node,
        c.Query("SELECT id FROM nodes WHERE name = ? AND removed_at_ms = 0" + ForUpdate(), {name}));
    found = !node.empty();
    if (!found) return Status::OK();
    const int64_t node_id = node[0].Int(0);
    FERRY_RETURN_NOT_OK(c.Query("UPDATE nodes SET unavailable = ?, external_cpus = ?,"
                                " external_memory_mb = ? WHERE id = ?",
                                {use.unavailable, std::max(0.0, use.cpus),
                                 std::max<int64_t>(0, use.memory_mb), node_id})
                            .status());
    // GPUs Ferry does not hold: keep the marked ones marked, then mark from
    // the highest index down.
    FERRY_ASSIGN_OR_RAISE(
        Rows gpus,
        c.Query("SELECT g.id, g.external FROM gpus g WHERE g.node_id = ? AND NOT EXISTS"
                " (SELECT 1 FROM allocations a WHERE a.gpu_id = g.id AND a.released_at_ms IS NULL)"
                " ORDER BY g.external DESC, g.idx DESC",
                {node_id}));
    int left = std::max(0, use.gpus);
    for (const Row& row : gpus.rows) {
      const int64_t want = left > 0 ? 1 : 0;
      if (left > 0) --left;
      if (row.Int(1) == want) continue;
      FERRY_RETURN_NOT_OK(
          c.Query("UPDATE gpus SET external = ? WHERE id = ?", {want, row.Int(0)}).status());
    }
    // A GPU Ferry holds is its own, whatever was marked before.
    return c
        .Query(
            "UPDATE gpus SET external = 0 WHERE node_id = ? AND external <> 0 AND EXISTS"
            " (SELECT 1 FROM allocations a WHERE a.gpu_id = gpus.id"
            " AND a.released_at_ms IS NULL)",
            {node_id})
        .status();
  }));
  return found;
}

Status SqlStore::HandleNodeLoss(Connection& c, int64_t node_id, std::string_view why,
                                const std::string& message, int64_t now_ms, ExpiryResult* result) {
  FERRY_ASSIGN_OR_RAISE(
      Rows jobs, c.Query("SELECT DISTINCT j.id FROM tasks t JOIN jobs j ON j.id = t.job_id"
                         " AND j.attempt = t.attempt WHERE t.node_id = ? AND t.state <> 'exited'"
                         " AND j.state IN ('ADMITTED', 'RUNNING') ORDER BY j.id",
                         {node_id}));
  for (const Row& row : jobs.rows) {
    const int64_t job_id = row.Int(0);
    FERRY_ASSIGN_OR_RAISE(Rows job,
                          c.Query("SELECT state, attempt, max_retries, preempt_reason FROM jobs"
                                  " WHERE id = ?" +
                                      ForUpdate(),
                                  {job_id}));
    auto state = ParseJobState(job[0].Text(0));
    if (!state || !IsLive(*state)) continue;
    const int attempt = static_cast<int>(job[0].Int(1));
    const int64_t max_retries = job[0].Int(2);
    FERRY_RETURN_NOT_OK(
        c.Query("UPDATE tasks SET state = 'exited', message = 'node lost', ended_at_ms = ?"
                " WHERE job_id = ? AND attempt = ? AND node_id = ? AND state <> 'exited'",
                {now_ms, job_id, int64_t{attempt}, node_id})
            .status());
    if (!job[0].Text(3).empty()) {
      FERRY_ASSIGN_OR_RAISE(bool requeued, FinishPreemption(c, job_id, attempt, message, now_ms));
      (requeued ? result->requeued_jobs : result->failed_jobs).push_back(job_id);
      continue;
    }
    FERRY_RETURN_NOT_OK(c.Query("UPDATE attempts SET state = 'LOST', reason = ?, ended_at_ms = ?"
                                " WHERE job_id = ? AND attempt = ?",
                                {Str(why), now_ms, job_id, int64_t{attempt}})
                            .status());
    FERRY_RETURN_NOT_OK(
        AddEvent(c, job_id, now_ms, "state", JobState::kLost, why, message, "server"));
    // A lease expiry requeues with REQUEUED (as it always did); other
    // causes keep their own word so users see why the job went back.
    const std::string_view requeue_reason = why == reason::kNodeLost ? reason::kRequeued : why;
    FERRY_ASSIGN_OR_RAISE(bool requeued,
                          Requeue(c, job_id, attempt, max_retries, requeue_reason, "lost", now_ms));
    (requeued ? result->requeued_jobs : result->failed_jobs).push_back(job_id);
  }
  return c
      .Query(
          "UPDATE allocations SET released_at_ms = ? WHERE node_id = ?"
          " AND released_at_ms IS NULL",
          {now_ms, node_id})
      .status();
}

Result<TaskAssignment> SqlStore::BuildAssignment(Connection& c, int64_t node_id,
                                                 const std::tuple<int64_t, int, int>& key) {
  const auto& [job_id, attempt, task] = key;
  FERRY_ASSIGN_OR_RAISE(auto job, LoadJob(c, Scope::All(), job_id, false));
  if (!job) return Status::UnknownError("store: job " + std::to_string(job_id) + " vanished");
  TaskAssignment a;
  a.ref = TaskRef{job_id, task, attempt};
  a.job_name = job->spec.name;
  a.spec = job->spec;
  a.tenant_id = job->tenant_id;
  a.tenant = job->tenant;
  for (const TaskPlacement& p : job->placement) {
    a.gang_nodes.push_back(p.node);
    if (p.task == task) a.gpu_indices = p.gpu_indices;
  }
  FERRY_ASSIGN_OR_RAISE(
      Rows uuids, c.Query("SELECT g.uuid FROM allocations a JOIN gpus g ON g.id = a.gpu_id"
                          " WHERE a.job_id = ? AND a.attempt = ? AND a.task = ? AND a.node_id = ?"
                          " ORDER BY g.idx",
                          {job_id, int64_t{attempt}, int64_t{task}, node_id}));
  for (const Row& row : uuids.rows) a.gpu_uuids.push_back(row.Text(0));
  return a;
}

}  // namespace ferry::fleet::store_internal
