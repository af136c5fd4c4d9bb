// The SQL store's core (sql_store.h): migrations, OpenStore, and the
// row helpers of jobs, placements, events and nodes.
#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

std::string_view SqlStore::OperationName(std::string_view function) {
  const size_t open = function.find('(');
  std::string_view name = function.substr(0, open);
  const size_t colons = name.rfind("::");
  if (colons != std::string_view::npos) name.remove_prefix(colons + 2);
  const size_t space = name.rfind(' ');
  if (space != std::string_view::npos) name.remove_prefix(space + 1);
  return name.empty() ? std::string_view("unknown") : name;
}

SqlStore::StoreMetrics::StoreMetrics()
    : seconds(&registry.AddHistogram(
          "ferry_store_transaction_duration_seconds",
          "Store transactions by operation, from taking a connection to the commit (retries "
          "included).",
          {"operation"}, metrics::ExponentialBuckets(0.0001, 2, 16))),
      errors(&registry.AddCounter("ferry_store_errors_total",
                                  "Store transactions that failed (after any retries), by "
                                  "operation.",
                                  {"operation"})),
      retries(&registry.AddCounter("ferry_store_retries_total",
                                   "Store transactions tried again after a conflict or a busy "
                                   "database, by operation.",
                                   {"operation"})) {}

void SqlStore::StoreMetrics::Finished(std::string_view operation,
                                      std::chrono::steady_clock::time_point started, bool ok) {
  const std::vector<std::string> labels{std::string(operation)};
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - started;
  seconds->With(labels).Observe(elapsed.count());
  if (!ok) errors->With(labels).Add();
}

std::string Str(std::string_view s) { return std::string(s); }

std::string StateText(JobState state) { return Str(ToString(state)); }

int64_t NowMsForMigrations() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string LabelsJson(const std::map<std::string, std::string>& labels) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [k, v] : labels) out[k] = v;
  return DumpJson(out);
}

std::map<std::string, std::string> ParseLabels(const std::string& text) {
  std::map<std::string, std::string> out;
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) return out;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

bool IsLive(JobState state) { return state == JobState::kAdmitted || state == JobState::kRunning; }

std::string Placeholders(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += i == 0 ? "?" : ", ?";
  return out;
}

Result<JobSpec> SpecFromText(int64_t job_id, const std::string& text) {
  nlohmann::json spec = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded()) {
    return Status::IOError("store: job " + std::to_string(job_id) + " has a corrupt spec");
  }
  std::vector<FieldError> errors;
  auto parsed = ParseJobSpec(spec, &errors);
  if (!parsed.ok()) {
    return Status::IOError("store: job " + std::to_string(job_id) +
                           " has an invalid stored spec: " + parsed.status().message());
  }
  return parsed;
}

Result<Job> JobFromRow(const Row& row, SpecCache* cache) {
  Job job;
  job.id = row.Int(0);
  job.tenant_id = row.Int(1);
  job.team_id = row.Int(2);
  job.user_id = row.Int(3);
  job.tenant = row.Text(4);
  job.team = row.Text(5);
  job.user = row.Text(6);
  std::optional<JobSpec> cached = cache != nullptr ? cache->Find(job.id) : std::nullopt;
  if (cached) {
    job.spec = std::move(*cached);
  } else {
    FERRY_ASSIGN_OR_RAISE(job.spec, SpecFromText(job.id, row.Text(7)));
    if (cache != nullptr) cache->Add(job.id, job.spec);
  }
  auto state = ParseJobState(row.Text(8));
  if (!state) {
    return Status::IOError("store: job " + std::to_string(job.id) + " has unknown state " +
                           row.Text(8));
  }
  job.state = *state;
  job.reason = row.Text(9);
  job.attempt = static_cast<int>(row.Int(10));
  job.created_at_ms = row.Int(11);
  job.admitted_at_ms = row.Int(12);
  job.started_at_ms = row.Int(13);
  job.finished_at_ms = row.Int(14);
  if (auto code = row.OptInt(15)) job.exit_code = static_cast<int>(*code);
  return job;
}

Result<std::vector<TaskPlacement>> LoadPlacement(Connection& c, int64_t job_id, int attempt) {
  FERRY_ASSIGN_OR_RAISE(
      Rows tasks,
      c.Query("SELECT t.task, t.node_id, n.name FROM tasks t JOIN nodes n ON n.id = t.node_id"
              " WHERE t.job_id = ? AND t.attempt = ? ORDER BY t.task",
              {job_id, int64_t{attempt}}));
  std::vector<TaskPlacement> out;
  std::map<int, size_t> by_task;
  for (const Row& row : tasks.rows) {
    TaskPlacement p;
    p.task = static_cast<int>(row.Int(0));
    p.node_id = row.Int(1);
    p.node = row.Text(2);
    by_task[p.task] = out.size();
    out.push_back(std::move(p));
  }
  if (out.empty()) return out;
  FERRY_ASSIGN_OR_RAISE(
      Rows gpus,
      c.Query("SELECT a.task, a.gpu_id, g.idx FROM allocations a JOIN gpus g ON g.id = a.gpu_id"
              " WHERE a.job_id = ? AND a.attempt = ? ORDER BY a.task, g.idx",
              {job_id, int64_t{attempt}}));
  for (const Row& row : gpus.rows) {
    auto it = by_task.find(static_cast<int>(row.Int(0)));
    if (it == by_task.end()) continue;
    out[it->second].gpu_ids.push_back(row.Int(1));
    out[it->second].gpu_indices.push_back(static_cast<int>(row.Int(2)));
  }
  return out;
}

Status LoadPlacements(Connection& c, std::vector<Job>* jobs) {
  Params ids;
  std::map<int64_t, Job*> by_id;
  for (Job& job : *jobs) {
    // A pending job of attempt 1 was never placed; later attempts may have
    // been, but only the current attempt's placement is shown.
    if (job.state == JobState::kPending) continue;
    ids.emplace_back(job.id);
    by_id[job.id] = &job;
  }
  if (ids.empty()) return Status::OK();
  const std::string in = "(" + Placeholders(ids.size()) + ")";
  FERRY_ASSIGN_OR_RAISE(Rows tasks,
                        c.Query("SELECT t.job_id, t.task, t.node_id, n.name FROM tasks t"
                                " JOIN nodes n ON n.id = t.node_id"
                                " JOIN jobs j ON j.id = t.job_id AND j.attempt = t.attempt"
                                " WHERE t.job_id IN " +
                                    in + " ORDER BY t.job_id, t.task",
                                ids));
  std::map<std::pair<int64_t, int>, TaskPlacement*> by_task;
  for (const Row& row : tasks.rows) {
    Job* job = by_id[row.Int(0)];
    TaskPlacement placement;
    placement.task = static_cast<int>(row.Int(1));
    placement.node_id = row.Int(2);
    placement.node = row.Text(3);
    job->placement.push_back(std::move(placement));
  }
  for (auto& [id, job] : by_id) {
    for (TaskPlacement& placement : job->placement) by_task[{id, placement.task}] = &placement;
  }
  FERRY_ASSIGN_OR_RAISE(Rows gpus,
                        c.Query("SELECT a.job_id, a.task, a.gpu_id, g.idx FROM allocations a"
                                " JOIN gpus g ON g.id = a.gpu_id"
                                " JOIN jobs j ON j.id = a.job_id AND j.attempt = a.attempt"
                                " WHERE a.job_id IN " +
                                    in + " ORDER BY a.job_id, a.task, g.idx",
                                ids));
  for (const Row& row : gpus.rows) {
    auto it = by_task.find({row.Int(0), static_cast<int>(row.Int(1))});
    if (it == by_task.end()) continue;
    it->second->gpu_ids.push_back(row.Int(2));
    it->second->gpu_indices.push_back(static_cast<int>(row.Int(3)));
  }
  return Status::OK();
}

Result<std::optional<Job>> LoadJob(Connection& c, const Scope& scope, int64_t job_id,
                                   bool with_attempts) {
  std::string q = std::string(kJobSelect) + " WHERE j.id = ?";
  Params params{job_id};
  if (scope.tenant_id) {
    q += " AND j.tenant_id = ?";
    params.emplace_back(*scope.tenant_id);
  }
  FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(q, params));
  if (rows.empty()) return std::optional<Job>();
  FERRY_ASSIGN_OR_RAISE(Job job, JobFromRow(rows[0]));
  FERRY_ASSIGN_OR_RAISE(job.placement, LoadPlacement(c, job.id, job.attempt));
  if (with_attempts) {
    FERRY_ASSIGN_OR_RAISE(
        Rows preempt,
        c.Query("SELECT preempt_reason, preempted_for FROM jobs WHERE id = ?", {job.id}));
    if (!preempt.empty() && IsLive(job.state)) {
      job.preempt_reason = preempt[0].Text(0);
      job.preempted_for = preempt[0].Int(1);
    }
    FERRY_ASSIGN_OR_RAISE(
        Rows attempts,
        c.Query("SELECT attempt, state, reason, admitted_at_ms, started_at_ms, ended_at_ms,"
                " exit_code, preempted_for FROM attempts WHERE job_id = ? ORDER BY attempt",
                {job.id}));
    for (const Row& row : attempts.rows) {
      AttemptRecord a;
      a.attempt = static_cast<int>(row.Int(0));
      a.state = ParseJobState(row.Text(1)).value_or(JobState::kPending);
      a.reason = row.Text(2);
      a.admitted_at_ms = row.Int(3);
      a.started_at_ms = row.Int(4);
      a.ended_at_ms = row.Int(5);
      if (auto code = row.OptInt(6)) a.exit_code = static_cast<int>(*code);
      a.preempted_for = row.Int(7);
      if (a.attempt == job.attempt) {
        a.placement = job.placement;
      } else {
        FERRY_ASSIGN_OR_RAISE(a.placement, LoadPlacement(c, job.id, a.attempt));
      }
      job.attempts.push_back(std::move(a));
    }
  }
  return std::optional<Job>(std::move(job));
}

Status AddEvent(Connection& c, int64_t job_id, int64_t at_ms, std::string_view type,
                std::optional<JobState> state, std::string_view reason, const std::string& message,
                const std::string& actor) {
  sql::Value state_value;
  if (state) state_value = StateText(*state);
  return c
      .Query(
          "INSERT INTO job_events (job_id, at_ms, type, state, reason, message, actor)"
          " VALUES (?, ?, ?, ?, ?, ?, ?)",
          {job_id, at_ms, Str(type), state_value, Str(reason), message, actor})
      .status();
}

sql::Value OptionalInt(std::optional<int> v) {
  if (v) return int64_t{*v};
  return std::monostate{};
}

Status FinishJob(Connection& c, int64_t job_id, int attempt, JobState state,
                 std::string_view reason, std::optional<int> exit_code, const std::string& message,
                 const std::string& actor, int64_t now_ms) {
  FERRY_RETURN_NOT_OK(
      c.Query("UPDATE jobs SET state = ?, reason = ?, exit_code = ?,"
              // Times come from several agents' clocks: never end before the start.
              " finished_at_ms = CASE WHEN started_at_ms > ? THEN started_at_ms ELSE ? END"
              " WHERE id = ?",
              {StateText(state), Str(reason), OptionalInt(exit_code), now_ms, now_ms, job_id})
          .status());
  FERRY_RETURN_NOT_OK(
      c.Query("UPDATE attempts SET state = ?, reason = ?, exit_code = ?,"
              " ended_at_ms = CASE WHEN started_at_ms > ? THEN started_at_ms ELSE ? END"
              " WHERE job_id = ? AND attempt = ?",
              {StateText(state), Str(reason), OptionalInt(exit_code), now_ms, now_ms, job_id,
               int64_t{attempt}})
          .status());
  return AddEvent(c, job_id, now_ms, "state", state, reason, message, actor);
}

Result<Node> NodeFromRow(const Row& row) {
  Node n;
  n.id = row.Int(0);
  n.name = row.Text(1);
  n.pool = row.Text(2);
  n.labels = ParseLabels(row.Text(3));
  n.cpus = row.Double(4);
  n.memory_mb = row.Int(5);
  n.state = row.Text(6) == "LOST" ? NodeState::kLost : NodeState::kReady;
  n.drain = row.Int(7) != 0;
  n.instance = row.Text(8);
  n.registered_at_ms = row.Int(9);
  n.last_heartbeat_ms = row.Int(10);
  n.lease_expires_at_ms = row.Int(11);
  n.unavailable = row.Text(12);
  n.external_cpus = row.Double(13);
  n.external_memory_mb = row.Int(14);
  return n;
}

WatchedEvent WatchedEventFromRow(const Row& row) {
  WatchedEvent w;
  w.event.id = row.Int(0);
  w.event.job_id = row.Int(1);
  w.event.at_ms = row.Int(2);
  w.event.type = row.Text(3);
  if (!row.IsNull(4)) w.event.state = ParseJobState(row.Text(4));
  w.event.reason = row.Text(5);
  w.event.message = row.Text(6);
  w.event.actor = row.Text(7);
  w.tenant_id = row.Int(8);
  w.tenant = row.Text(9);
  w.team = row.Text(10);
  w.user = row.Text(11);
  w.job_name = row.Text(12);
  w.job_created_ms = row.Int(13);
  return w;
}

Result<std::vector<Node>> LoadNodes(Connection& c, const std::string* name) {
  std::string q =
      "SELECT id, name, pool, labels, cpus, memory_mb, state, drain, instance,"
      " registered_at_ms, last_heartbeat_ms, lease_expires_at_ms, unavailable, external_cpus,"
      " external_memory_mb FROM nodes WHERE removed_at_ms = 0";
  Params params;
  if (name != nullptr) {
    q += " AND name = ?";
    params.emplace_back(*name);
  }
  q += " ORDER BY name";
  FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(q, params));
  std::vector<Node> nodes;
  std::map<int64_t, size_t> by_id;
  for (const Row& row : rows.rows) {
    FERRY_ASSIGN_OR_RAISE(Node n, NodeFromRow(row));
    by_id[n.id] = nodes.size();
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return nodes;
  std::string gq =
      "SELECT g.id, g.node_id, g.idx, g.model, g.memory_mb, g.uuid, a.job_id, j.tenant_id,"
      " g.external"
      " FROM gpus g LEFT JOIN allocations a ON a.gpu_id = g.id AND a.released_at_ms IS NULL"
      " LEFT JOIN jobs j ON j.id = a.job_id";
  Params gparams;
  if (name != nullptr) {
    gq += " WHERE g.node_id = ?";
    gparams.emplace_back(nodes[0].id);
  }
  gq += " ORDER BY g.node_id, g.idx";
  FERRY_ASSIGN_OR_RAISE(Rows gpus, c.Query(gq, gparams));
  for (const Row& row : gpus.rows) {
    auto it = by_id.find(row.Int(1));
    if (it == by_id.end()) continue;
    Gpu g;
    g.id = row.Int(0);
    g.index = static_cast<int>(row.Int(2));
    g.model = row.Text(3);
    g.memory_mb = row.Int(4);
    g.uuid = row.Text(5);
    g.job_id = row.OptInt(6);
    g.job_tenant_id = row.OptInt(7);
    g.external = row.Int(8) != 0;
    nodes[it->second].gpus.push_back(std::move(g));
  }
  return nodes;
}

Status SqlStore::Migrate() {
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    return c
        .Query(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY,"
            " applied_at_ms BIGINT NOT NULL)")
        .status();
  }));
  for (const sql::Migration& m : sql::Migrations()) {
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      if (pg()) {
        // Two processes opening a fresh database at once: one migrates.
        FERRY_RETURN_NOT_OK(c.Query("SELECT pg_advisory_xact_lock(7270601)").status());
      }
      FERRY_ASSIGN_OR_RAISE(Rows done, c.Query("SELECT 1 FROM schema_migrations WHERE version = ?",
                                               {int64_t{m.version}}));
      if (!done.empty()) return Status::OK();
      for (const char* statement : m.statements) {
        Status st = c.Query(sql::ForDialect(db_->dialect(), statement)).status();
        if (!st.ok()) return st.WithPrefix("migration " + std::to_string(m.version) + ": ");
      }
      return c
          .Query("INSERT INTO schema_migrations (version, applied_at_ms) VALUES (?, ?)",
                 {int64_t{m.version}, NowMsForMigrations()})
          .status();
    }));
  }
  int version = 0;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(Rows rows,
                          c.Query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"));
    version = static_cast<int>(rows[0].Int(0));
    return Status::OK();
  }));
  const int known = sql::Migrations().back().version;
  if (version > known) {
    return Status::Invalid("the database schema is version " + std::to_string(version) +
                           ", newer than this ferry knows (" + std::to_string(known) + ")");
  }
  schema_version_ = version;
  return Status::OK();
}

}  // namespace ferry::fleet::store_internal

namespace ferry::fleet {

Result<std::unique_ptr<Store>> OpenStore(const std::string& url) {
  const std::string shown = sql::RedactUrl(url);
  std::unique_ptr<sql::Database> db;
  auto starts_with = [&](std::string_view prefix) { return url.rfind(prefix, 0) == 0; };
  if (starts_with("sqlite:")) {
    std::string path = url.substr(7);
    if (path.rfind("//", 0) == 0) path = path.substr(2);  // sqlite:///abs/path
    if (path.empty()) return Status::Invalid("store URL " + shown + ": no database path");
    auto opened = sql::OpenSqlite(path);
    if (!opened.ok()) return opened.status().WithPrefix("store " + shown + ": open: ");
    db = std::move(*opened);
  } else if (starts_with("postgresql://") || starts_with("postgres://")) {
    auto opened = sql::OpenPostgres(url);
    if (!opened.ok()) return opened.status().WithPrefix("store " + shown + ": connect: ");
    db = std::move(*opened);
  } else {
    return Status::Invalid("store URL " + shown +
                           ": expected sqlite:/path, sqlite::memory: or postgresql://...");
  }
  auto store = std::make_unique<store_internal::SqlStore>(std::move(db));
  Status migrated = store->Migrate();
  if (!migrated.ok()) return migrated.WithPrefix("store " + shown + ": migrate: ");
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace ferry::fleet
