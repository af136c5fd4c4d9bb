// ferry::fleet::Store over the SQL driver interface: the job logic is written
// once here and runs on SQLite and PostgreSQL. Every public method is one
// transaction (Run), retried when the database asks for it (SQLITE_BUSY, a
// serialization failure or deadlock, a dropped connection).

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "ferry/fleet/model_json.h"
#include "ferry/fleet/store.h"
#include "fleet/store/schema.h"
#include "fleet/store/sql_db.h"

namespace ferry::fleet {
namespace {

using sql::Connection;
using sql::Dialect;
using sql::ErrorKind;
using sql::Params;
using sql::Row;
using sql::Rows;

constexpr int kMaxTries = 8;

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

// ", ?" repeated: "?, ?, ?".
std::string Placeholders(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += i == 0 ? "?" : ", ?";
  return out;
}

// Columns of a job row, in the order JobFromRow reads them.
constexpr const char* kJobSelect =
    "SELECT j.id, j.tenant_id, j.team_id, j.user_id, tn.name, tm.name, u.name, j.spec, j.state,"
    " j.reason, j.attempt, j.created_at_ms, j.admitted_at_ms, j.started_at_ms, j.finished_at_ms,"
    " j.exit_code FROM jobs j JOIN tenants tn ON tn.id = j.tenant_id"
    " JOIN teams tm ON tm.id = j.team_id JOIN users u ON u.id = j.user_id";

// Parsed specs by job id. A job's spec never changes once stored, so the
// scheduler's snapshot of a long queue parses each one once, not every pass.
class SpecCache {
 public:
  static constexpr size_t kMaxEntries = 200'000;

  std::optional<JobSpec> Find(int64_t job_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = specs_.find(job_id);
    if (it == specs_.end()) return std::nullopt;
    return it->second;
  }
  void Add(int64_t job_id, const JobSpec& spec) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (specs_.size() >= kMaxEntries) specs_.clear();  // rare; refills from the next reads
    specs_.emplace(job_id, spec);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<int64_t, JobSpec> specs_;
};

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

Result<Job> JobFromRow(const Row& row, SpecCache* cache = nullptr) {
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

// The tasks of one attempt with their nodes and GPUs.
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

// The current attempt's placement of several jobs in two queries (a list
// page), instead of two per job.
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
  FERRY_ASSIGN_OR_RAISE(
      Rows tasks,
      c.Query("SELECT t.job_id, t.task, t.node_id, n.name FROM tasks t"
              " JOIN nodes n ON n.id = t.node_id"
              " JOIN jobs j ON j.id = t.job_id AND j.attempt = t.attempt"
              " WHERE t.job_id IN " + in + " ORDER BY t.job_id, t.task",
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
  FERRY_ASSIGN_OR_RAISE(
      Rows gpus,
      c.Query("SELECT a.job_id, a.task, a.gpu_id, g.idx FROM allocations a"
              " JOIN gpus g ON g.id = a.gpu_id"
              " JOIN jobs j ON j.id = a.job_id AND j.attempt = a.attempt"
              " WHERE a.job_id IN " + in + " ORDER BY a.job_id, a.task, g.idx",
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
        Rows attempts,
        c.Query("SELECT attempt, state, reason, admitted_at_ms, started_at_ms, ended_at_ms,"
                " exit_code FROM attempts WHERE job_id = ? ORDER BY attempt",
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

// Ends the job's current attempt in a terminal state.
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
  return n;
}

// Every node (or the one named), ordered by name, with GPUs and their holders.
Result<std::vector<Node>> LoadNodes(Connection& c, const std::string* name) {
  std::string q =
      "SELECT id, name, pool, labels, cpus, memory_mb, state, drain, instance,"
      " registered_at_ms, last_heartbeat_ms, lease_expires_at_ms FROM nodes"
      " WHERE removed_at_ms = 0";
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
      "SELECT g.id, g.node_id, g.idx, g.model, g.memory_mb, g.uuid, a.job_id FROM gpus g"
      " LEFT JOIN allocations a ON a.gpu_id = g.id AND a.released_at_ms IS NULL";
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
    nodes[it->second].gpus.push_back(std::move(g));
  }
  return nodes;
}

class SqlStore final : public Store {
 public:
  explicit SqlStore(std::unique_ptr<sql::Database> db) : db_(std::move(db)) {}

  std::string_view backend() const override {
    return db_->dialect() == Dialect::kSqlite ? "sqlite" : "postgresql";
  }
  int schema_version() const override { return schema_version_; }

  // Applies the migrations this database lacks, each in its own transaction.
  Status Migrate() {
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
        FERRY_ASSIGN_OR_RAISE(
            Rows done,
            c.Query("SELECT 1 FROM schema_migrations WHERE version = ?", {int64_t{m.version}}));
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

  // ---- Identity.

  Result<int64_t> EnsureTenant(const std::string& name) override {
    if (name.empty()) return Status::Invalid("tenant name must not be empty");
    int64_t id = 0;
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      FERRY_RETURN_NOT_OK(c.Query("INSERT INTO tenants (name, created_at_ms) VALUES (?, ?)"
                                  " ON CONFLICT (name) DO NOTHING",
                                  {name, NowMsForMigrations()})
                              .status());
      FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query("SELECT id FROM tenants WHERE name = ?", {name}));
      id = rows[0].Int(0);
      return Status::OK();
    }));
    return id;
  }

  Result<int64_t> EnsureTeam(int64_t tenant_id, const std::string& name) override {
    if (name.empty()) return Status::Invalid("team name must not be empty");
    int64_t id = 0;
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(Rows tenant,
                            c.Query("SELECT id FROM tenants WHERE id = ?", {tenant_id}));
      if (tenant.empty()) return Status::Invalid("no tenant with id " + std::to_string(tenant_id));
      FERRY_RETURN_NOT_OK(c.Query("INSERT INTO teams (tenant_id, name) VALUES (?, ?)"
                                  " ON CONFLICT (tenant_id, name) DO NOTHING",
                                  {tenant_id, name})
                              .status());
      FERRY_ASSIGN_OR_RAISE(
          Rows rows,
          c.Query("SELECT id FROM teams WHERE tenant_id = ? AND name = ?", {tenant_id, name}));
      id = rows[0].Int(0);
      return Status::OK();
    }));
    return id;
  }

  Result<int64_t> CreateUser(int64_t team_id, const std::string& name, Role role) override {
    if (name.empty()) return Status::Invalid("user name must not be empty");
    int64_t id = 0;
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(
          Rows team,
          c.Query("SELECT t.tenant_id, tn.name FROM teams t JOIN tenants tn ON tn.id = t.tenant_id"
                  " WHERE t.id = ?",
                  {team_id}));
      if (team.empty()) return Status::Invalid("no team with id " + std::to_string(team_id));
      const int64_t tenant_id = team[0].Int(0);
      FERRY_ASSIGN_OR_RAISE(
          Rows taken,
          c.Query("SELECT id FROM users WHERE tenant_id = ? AND name = ?", {tenant_id, name}));
      if (!taken.empty()) {
        return Status::Invalid("user '" + name + "' already exists in tenant '" + team[0].Text(1) +
                               "'");
      }
      FERRY_ASSIGN_OR_RAISE(
          Rows rows,
          c.Query("INSERT INTO users (tenant_id, team_id, name, role, created_at_ms)"
                  " VALUES (?, ?, ?, ?, ?) RETURNING id",
                  {tenant_id, team_id, name, Str(ToString(role)), NowMsForMigrations()}));
      id = rows[0].Int(0);
      return Status::OK();
    }));
    return id;
  }

  Result<int64_t> AddToken(int64_t user_id, const std::string& token_sha256,
                           const std::string& label, int64_t now_ms) override {
    if (token_sha256.size() != 64) {
      return Status::Invalid("a token hash is 64 hex characters, got " +
                             std::to_string(token_sha256.size()));
    }
    int64_t id = 0;
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(Rows user, c.Query("SELECT id FROM users WHERE id = ?", {user_id}));
      if (user.empty()) return Status::Invalid("no user with id " + std::to_string(user_id));
      FERRY_ASSIGN_OR_RAISE(
          Rows dup, c.Query("SELECT id FROM api_tokens WHERE token_sha256 = ?", {token_sha256}));
      if (!dup.empty()) return Status::Invalid("this token is already registered");
      FERRY_ASSIGN_OR_RAISE(
          Rows rows, c.Query("INSERT INTO api_tokens (user_id, token_sha256, label, created_at_ms)"
                             " VALUES (?, ?, ?, ?) RETURNING id",
                             {user_id, token_sha256, label, now_ms}));
      id = rows[0].Int(0);
      return Status::OK();
    }));
    return id;
  }

  static constexpr const char* kPrincipalSelect =
      "SELECT tn.id, tn.name, tm.id, tm.name, u.id, u.name, u.role FROM users u"
      " JOIN teams tm ON tm.id = u.team_id JOIN tenants tn ON tn.id = u.tenant_id";

  static Principal PrincipalFromRow(const Row& row) {
    Principal p;
    p.tenant_id = row.Int(0);
    p.tenant = row.Text(1);
    p.team_id = row.Int(2);
    p.team = row.Text(3);
    p.user_id = row.Int(4);
    p.user = row.Text(5);
    p.role = ParseRole(row.Text(6)).value_or(Role::kUser);
    return p;
  }

  Result<std::optional<Principal>> LookupToken(const std::string& token_sha256) override {
    std::optional<Principal> out;
    FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(Rows rows,
                            c.Query(std::string(kPrincipalSelect) +
                                        " JOIN api_tokens k ON k.user_id = u.id"
                                        " WHERE k.token_sha256 = ? AND k.revoked_at_ms IS NULL",
                                    {token_sha256}));
      out.reset();
      if (!rows.empty()) out = PrincipalFromRow(rows[0]);
      return Status::OK();
    }));
    return out;
  }

  Result<std::optional<Principal>> FindUser(const std::string& tenant,
                                            const std::string& user) override {
    std::optional<Principal> out;
    FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(
          Rows rows, c.Query(std::string(kPrincipalSelect) + " WHERE tn.name = ? AND u.name = ?",
                             {tenant, user}));
      out.reset();
      if (!rows.empty()) out = PrincipalFromRow(rows[0]);
      return Status::OK();
    }));
    return out;
  }

  Result<int64_t> CountUsers() override {
    int64_t n = 0;
    FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query("SELECT COUNT(*) FROM users"));
      n = rows[0].Int(0);
      return Status::OK();
    }));
    return n;
  }

  static constexpr const char* kUserInfoSelect =
      "SELECT u.id, tn.name, tm.name, u.name, u.role, u.created_at_ms,"
      " (SELECT COUNT(*) FROM api_tokens k WHERE k.user_id = u.id AND k.revoked_at_ms IS NULL)"
      " FROM users u JOIN teams tm ON tm.id = u.team_id JOIN tenants tn ON tn.id = u.tenant_id";

  static UserInfo UserInfoFromRow(const Row& row) {
    UserInfo u;
    u.id = row.Int(0);
    u.tenant = row.Text(1);
    u.team = row.Text(2);
    u.name = row.Text(3);
    u.role = ParseRole(row.Text(4)).value_or(Role::kUser);
    u.created_at_ms = row.Int(5);
    u.active_tokens = row.Int(6);
    return u;
  }

  Result<std::optional<std::vector<UserInfo>>> ListUsers(
      const std::optional<std::string>& tenant) override {
    std::optional<std::vector<UserInfo>> out;
    FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
      out.reset();
      Params params;
      std::string query = kUserInfoSelect;
      if (tenant) {
        FERRY_ASSIGN_OR_RAISE(Rows found,
                              c.Query("SELECT id FROM tenants WHERE name = ?", {*tenant}));
        if (found.empty()) return Status::OK();
        query += " WHERE u.tenant_id = ?";
        params.push_back(found[0].Int(0));
      }
      FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(query + " ORDER BY u.id", params));
      out.emplace();
      for (const Row& row : rows.rows) out->push_back(UserInfoFromRow(row));
      return Status::OK();
    }));
    return out;
  }

  Result<std::optional<RevokeResult>> RevokeUserTokens(const std::string& tenant,
                                                       const std::string& user,
                                                       int64_t now_ms) override {
    std::optional<RevokeResult> out;
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      out.reset();
      const std::string select = std::string(kUserInfoSelect) + " WHERE tn.name = ? AND u.name = ?";
      FERRY_ASSIGN_OR_RAISE(Rows found, c.Query(select, {tenant, user}));
      if (found.empty()) return Status::OK();
      const int64_t user_id = found[0].Int(0);
      FERRY_ASSIGN_OR_RAISE(Rows revoked,
                            c.Query("UPDATE api_tokens SET revoked_at_ms = ?"
                                    " WHERE user_id = ? AND revoked_at_ms IS NULL",
                                    {now_ms, user_id}));
      FERRY_ASSIGN_OR_RAISE(Rows after, c.Query(select, {tenant, user}));
      out = RevokeResult{UserInfoFromRow(after[0]), revoked.affected};
      return Status::OK();
    }));
    return out;
  }

  // ---- Jobs.

  Result<SubmitResult> Submit(const SubmitRequest& request,
                              const std::function<std::string(const Job&)>& render) override {
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
      if (!request.idempotency_key.empty()) {
        FERRY_ASSIGN_OR_RAISE(
            Rows keys,
            c.Query("SELECT id, request_hash, job_id, status_code, response_body, created_at_ms"
                    " FROM idempotency_keys WHERE user_id = ? AND key = ?",
                    {who.user_id, request.idempotency_key}));
        if (!keys.empty()) {
          const Row& k = keys[0];
          if (k.Int(5) < now - request.key_ttl_ms) {
            FERRY_RETURN_NOT_OK(
                c.Query("DELETE FROM idempotency_keys WHERE id = ?", {k.Int(0)}).status());
          } else if (k.Text(1) != request.request_hash) {
            result.outcome = SubmitResult::Outcome::kKeyMismatch;
            result.status_code = 422;
            return Status::OK();
          } else {
            result.outcome = SubmitResult::Outcome::kReplayed;
            result.status_code = static_cast<int>(k.Int(3));
            result.response_body = k.Text(4);
            if (auto job_id = k.OptInt(2)) {
              FERRY_ASSIGN_OR_RAISE(auto job, LoadJob(c, Scope::All(), *job_id, true));
              if (job) result.job = std::move(*job);
            }
            return Status::OK();
          }
        }
      }
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
      if (!request.idempotency_key.empty()) {
        FERRY_RETURN_NOT_OK(
            c.Query("INSERT INTO idempotency_keys (user_id, key, request_hash, job_id,"
                    " status_code, response_body, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    {who.user_id, request.idempotency_key, request.request_hash, job_id,
                     int64_t{201}, result.response_body, now})
                .status());
      }
      return Status::OK();
    }));
    return result;
  }

  Result<std::optional<Job>> GetJob(const Scope& scope, int64_t job_id) override {
    std::optional<Job> out;
    FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(out, LoadJob(c, scope, job_id, true));
      return Status::OK();
    }));
    return out;
  }

  Result<JobPage> ListJobs(const Scope& scope, const JobFilter& filter,
                           std::optional<int64_t> before_id, int limit) override {
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

  Result<CancelOutcome> CancelJob(const Scope& scope, int64_t job_id, const std::string& actor,
                                  int64_t now_ms) override {
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

  Result<std::optional<std::vector<JobEvent>>> ListEvents(const Scope& scope, int64_t job_id,
                                                          int64_t after_id, int limit) override {
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

  Result<int64_t> PurgeIdempotencyKeys(int64_t now_ms, int64_t ttl_ms) override {
    int64_t n = 0;
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(
          Rows rows,
          c.Query("DELETE FROM idempotency_keys WHERE created_at_ms < ?", {now_ms - ttl_ms}));
      n = rows.affected;
      return Status::OK();
    }));
    return n;
  }

  Result<std::vector<int64_t>> ExpireRuntimes(int64_t now_ms) override {
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

  // ---- Logs.

  Status AppendLog(int64_t job_id, int attempt, int task, const std::string& stream,
                   const std::string& data, int64_t now_ms) override {
    if (stream != "stdout" && stream != "stderr") {
      return Status::Invalid("log stream must be stdout or stderr, got '" + stream + "'");
    }
    return Run(true, [&](Connection& c) -> Status {
      // The counter on the job row numbers one job's chunks gap-free and in
      // commit order, so a reader following `after_seq` never skips one.
      FERRY_ASSIGN_OR_RAISE(
          Rows rows, c.Query("UPDATE jobs SET log_seq = log_seq + 1 WHERE id = ? RETURNING log_seq",
                             {job_id}));
      if (rows.empty()) return Status::Invalid("no job with id " + std::to_string(job_id));
      return c
          .Query(
              "INSERT INTO job_logs (job_id, seq, attempt, task, stream, data, at_ms)"
              " VALUES (?, ?, ?, ?, ?, ?, ?)",
              {job_id, rows[0].Int(0), int64_t{attempt}, int64_t{task}, stream, sql::Blob{data},
               now_ms})
          .status();
    });
  }

  Result<std::optional<std::vector<LogChunk>>> ReadLogs(const Scope& scope, int64_t job_id,
                                                        int64_t after_seq, int limit) override {
    limit = std::clamp(limit, 1, 100000);
    return ListOfVisibleJob<LogChunk>(
        scope, job_id,
        "SELECT seq, attempt, task, stream, data, at_ms FROM job_logs"
        " WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        {job_id, after_seq, int64_t{limit}}, [](const Row& row) {
          LogChunk chunk;
          chunk.seq = row.Int(0);
          chunk.attempt = static_cast<int>(row.Int(1));
          chunk.task = static_cast<int>(row.Int(2));
          chunk.stream = row.Text(3);
          chunk.data = row.Text(4);
          chunk.at_ms = row.Int(5);
          return chunk;
        });
  }

  // Rows of one job's child table, when the job is in scope (else nullopt).
  template <typename T, typename FromRow>
  Result<std::optional<std::vector<T>>> ListOfVisibleJob(const Scope& scope, int64_t job_id,
                                                         const char* sql, const Params& params,
                                                         FromRow from_row) {
    std::optional<std::vector<T>> out;
    FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
      out.reset();
      FERRY_ASSIGN_OR_RAISE(bool visible, JobVisible(c, scope, job_id));
      if (!visible) return Status::OK();
      FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(sql, params));
      std::vector<T> items;
      items.reserve(rows.rows.size());
      for (const Row& row : rows.rows) items.push_back(from_row(row));
      out = std::move(items);
      return Status::OK();
    }));
    return out;
  }

  // ---- Nodes.

  Result<Node> RegisterNode(const NodeRegistration& reg, int64_t now_ms,
                            int64_t lease_ms) override {
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
          c.Query("SELECT id, instance, state FROM nodes WHERE name = ?" + ForUpdate(),
                  {reg.name}));
      int64_t node_id = 0;
      if (existing.empty()) {
        FERRY_ASSIGN_OR_RAISE(
            Rows rows,
            c.Query("INSERT INTO nodes (name, pool, labels, cpus, memory_mb, state, drain,"
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
                    {reg.pool, LabelsJson(reg.labels), reg.cpus, reg.memory_mb, reg.instance,
                     now_ms, now_ms + lease_ms, reg.instance, now_ms, node_id})
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

  Result<std::vector<Node>> ListNodes() override {
    std::vector<Node> out;
    FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(out, LoadNodes(c, nullptr));
      return Status::OK();
    }));
    return out;
  }

  Result<std::optional<Node>> GetNode(const std::string& name) override {
    std::optional<Node> out;
    FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(auto nodes, LoadNodes(c, &name));
      out.reset();
      if (!nodes.empty()) out = std::move(nodes[0]);
      return Status::OK();
    }));
    return out;
  }

  Result<std::vector<Pool>> ListPools() override {
    FERRY_ASSIGN_OR_RAISE(auto nodes, ListNodes());
    std::map<std::string, Pool> pools;
    for (const Node& n : nodes) {
      Pool& p = pools[n.pool];
      p.name = n.pool;
      ++p.nodes;
      const bool usable = n.state == NodeState::kReady && !n.drain;
      if (n.state == NodeState::kReady) ++p.nodes_ready;
      for (const Gpu& g : n.gpus) {
        ++p.gpus;
        ++p.gpus_by_model[g.model];
        if (usable && !g.job_id) ++p.gpus_free;
      }
    }
    std::vector<Pool> out;
    for (auto& [name, pool] : pools) out.push_back(std::move(pool));
    return out;
  }

  Result<bool> SetDrain(const std::string& name, bool drain) override {
    bool found = false;
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(
          Rows rows, c.Query("UPDATE nodes SET drain = ? WHERE name = ? AND removed_at_ms = 0",
                             {int64_t{drain ? 1 : 0}, name}));
      found = rows.affected > 0;
      return Status::OK();
    }));
    return found;
  }

  Result<SyncResult> SyncNode(const SyncRequest& request) override {
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
      const std::string actor = "agent:" + request.node;
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

  Result<ExpiryResult> ExpireLeases(int64_t now_ms) override {
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

  Result<ExpiryResult> MarkNodeLost(const std::string& name, const std::string& why,
                                    const std::string& message, int64_t now_ms) override {
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

  Result<RemoveNodeOutcome> RemoveNode(const std::string& name, int64_t now_ms) override {
    RemoveNodeOutcome outcome = RemoveNodeOutcome::kNotFound;
    FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
      FERRY_ASSIGN_OR_RAISE(
          Rows rows,
          c.Query("SELECT id FROM nodes WHERE name = ? AND removed_at_ms = 0" + ForUpdate(),
                  {name}));
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

  Result<bool> PreemptJob(const PreemptRequest& request, int64_t now_ms) override {
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

  // ---- Scheduling.

  Result<sched::Snapshot> LoadSchedulingSnapshot() override {
    sched::Snapshot snap;
    FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
      snap = sched::Snapshot{};
      FERRY_ASSIGN_OR_RAISE(
          Rows pending, c.Query(std::string(kJobSelect) +
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
        snap.nodes[at->second].cpus_used = row.Double(1);
        snap.nodes[at->second].memory_mb_used = row.Int(2);
      }
      FERRY_RETURN_NOT_OK(LoadRunningJobs(c, &snap.running));
      return Status::OK();
    }));
    return snap;
  }

  // Attempts holding open allocations as running jobs, by job and attempt.
  Status LoadRunningJobs(Connection& c, std::vector<sched::RunningJob>* out) {
    const std::string open_jobs =
        " j.id IN (SELECT job_id FROM allocations WHERE released_at_ms IS NULL)";
    FERRY_ASSIGN_OR_RAISE(
        Rows jobs, c.Query(std::string(kJobSelect) + " WHERE" + open_jobs + " ORDER BY j.id"));
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
        Rows allocs,
        c.Query("SELECT a.job_id, a.attempt, a.task, a.node_id, n.name, a.gpu_id, g.idx,"
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

  Result<CommitResult> CommitPlacements(const std::vector<Placement>& placements,
                                        const std::vector<PendingReason>& pending,
                                        int64_t now_ms) override {
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

  // Runs `fn` in one transaction, retrying when the database says so.
  template <typename Fn>
  Status Run(bool write, Fn&& fn) {
    return Run(write, false, std::forward<Fn>(fn));
  }

  template <typename Fn>
  Status Run(bool write, bool retry_unique, Fn&& fn) {
    for (int tries = 1;; ++tries) {
      FERRY_ASSIGN_OR_RAISE(sql::Lease lease, db_->Acquire(write));
      Connection& c = *lease;
      Status st = c.Begin(write);
      if (st.ok()) {
        st = fn(c);
        if (st.ok()) {
          st = c.Commit();
          if (st.ok()) return st;
        }
      }
      const ErrorKind kind = c.last_error();
      (void)c.Rollback();
      const bool retry = kind == ErrorKind::kRetry || (retry_unique && kind == ErrorKind::kUnique);
      if (!retry || tries >= kMaxTries) {
        return tries > 1 ? st.WithPrefix("after " + std::to_string(tries) + " tries: ") : st;
      }
      if (kind == ErrorKind::kRetry) lease.Discard();
      // Back off a little, with jitter, before the next try.
      thread_local std::minstd_rand rng(std::random_device{}());
      std::this_thread::sleep_for(
          std::chrono::microseconds((500 << std::min(tries, 6)) + static_cast<int>(rng() % 1000)));
    }
  }

 private:
  bool pg() const { return db_->dialect() == Dialect::kPostgres; }
  std::string ForUpdate() const { return pg() ? " FOR UPDATE" : ""; }

  Result<bool> JobVisible(Connection& c, const Scope& scope, int64_t job_id) {
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query("SELECT tenant_id FROM jobs WHERE id = ?", {job_id}));
    return !rows.empty() && (!scope.tenant_id || rows[0].Int(0) == *scope.tenant_id);
  }

  // One placement inside its transaction; sets *conflict instead of failing
  // when the job or a GPU is no longer available.
  Status Place(Connection& c, const Placement& p, int64_t now_ms, bool* conflict) {
    FERRY_ASSIGN_OR_RAISE(
        Rows job, c.Query("UPDATE jobs SET state = 'ADMITTED', reason = ?, admitted_at_ms = ?"
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
            c.Query("INSERT INTO allocations (job_id, attempt, task, gpu_id, node_id, cpus,"
                    " memory_mb, started_at_ms) VALUES (?, ?, ?, NULL, ?, ?, ?, ?)",
                    {p.job_id, int64_t{p.attempt}, int64_t{t.task}, t.node_id, cpus, memory_mb,
                     now_ms})
                .status());
      }
      for (size_t i = 0; i < t.gpu_ids.size(); ++i) {
        FERRY_ASSIGN_OR_RAISE(
            Rows gpu,
            c.Query("SELECT g.node_id, (SELECT COUNT(*) FROM allocations a WHERE a.gpu_id = g.id"
                    " AND a.released_at_ms IS NULL) FROM gpus g WHERE g.id = ?",
                    {t.gpu_ids[i]}));
        if (gpu.empty() || gpu[0].Int(0) != t.node_id || gpu[0].Int(1) > 0) {
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

  // One agent report, fenced by the job's current attempt and the task's node.
  Status ApplyReport(Connection& c, int64_t node_id, const std::string& node_name,
                     const std::string& actor, const TaskReport& report, int64_t now_ms) {
    const TaskRef& ref = report.ref;
    const int64_t at = report.at_ms > 0 ? report.at_ms : now_ms;
    FERRY_ASSIGN_OR_RAISE(
        Rows job,
        c.Query("SELECT state, attempt, task_count, preempt_reason FROM jobs WHERE id = ?" +
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

    if (report.kind == TaskReport::Kind::kStarted) {
      if (task_state != "assigned") return Status::OK();
      Params params{at};
      params.insert(params.end(), key.begin(), key.end());
      FERRY_RETURN_NOT_OK(
          c.Query("UPDATE tasks SET state = 'running', started_at_ms = ?" + where, params)
              .status());
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

    // Exited or failed to launch: the task is over and its resources free.
    if (task_state == "exited") return Status::OK();
    const bool launch_failed = report.kind == TaskReport::Kind::kLaunchFailed;
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
      FERRY_RETURN_NOT_OK(c.Query("UPDATE allocations SET released_at_ms = ?" + where +
                                      " AND released_at_ms IS NULL",
                                  release)
                              .status());
    }
    std::string what;
    if (launch_failed) {
      what = who + " failed to launch" + (report.message.empty() ? "" : ": " + report.message);
    } else if (exit_code) {
      what = who + " exited with " + std::to_string(*exit_code);
    } else if (signal) {
      what = who + " was killed by signal " + std::to_string(*signal);
    } else {
      what = who + " ended without an exit status";
    }
    FERRY_RETURN_NOT_OK(AddEvent(c, ref.job_id, at, launch_failed ? "launch_failed" : "task_exited",
                                 std::nullopt, "", what, actor));
    if (!IsLive(*state)) return Status::OK();  // already CANCELLED, TIMEOUT, ...
    // A preempted attempt's tasks end however they end (the signal, or an
    // exit after a checkpoint): the job is requeued once the last one is over.
    if (!job[0].Text(3).empty()) return MaybeFinishPreemption(c, ref.job_id, ref.attempt, now_ms);
    if (launch_failed) {
      return FinishJob(c, ref.job_id, ref.attempt, JobState::kFailed, reason::kLaunchFailed,
                       std::nullopt, what, actor, at);
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

  // The node's processes are gone: the live attempts that had unfinished
  // tasks there are lost (requeued, or failed past their retry limit), and
  // every allocation on the node closes. Allocations of those attempts on
  // other nodes stay open until those agents stop the tasks. `why` is the
  // lost attempts' reason (NODE_LOST, SPOT_INTERRUPTED); an attempt being
  // preempted ends as preempted instead.
  Status HandleNodeLoss(Connection& c, int64_t node_id, std::string_view why,
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
      FERRY_ASSIGN_OR_RAISE(
          bool requeued, Requeue(c, job_id, attempt, max_retries, requeue_reason, "lost", now_ms));
      (requeued ? result->requeued_jobs : result->failed_jobs).push_back(job_id);
    }
    return c
        .Query(
            "UPDATE allocations SET released_at_ms = ? WHERE node_id = ?"
            " AND released_at_ms IS NULL",
            {now_ms, node_id})
        .status();
  }

  // After an attempt ended LOST or PREEMPTED: back to PENDING with attempt + 1
  // (true), or FAILED with RETRY_LIMIT when no retry is left (false).
  Result<bool> Requeue(Connection& c, int64_t job_id, int attempt, int64_t max_retries,
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

  // Ends a preempted attempt (its tasks are over, or its node is gone) and
  // requeues the job. Returns whether it was requeued (else it failed).
  Result<bool> FinishPreemption(Connection& c, int64_t job_id, int attempt,
                                const std::string& message, int64_t now_ms) {
    FERRY_ASSIGN_OR_RAISE(
        Rows job,
        c.Query("SELECT max_retries, preempt_reason, preempted_for FROM jobs WHERE id = ?",
                {job_id}));
    const int64_t max_retries = job[0].Int(0);
    const std::string why = job[0].Text(1);
    const int64_t for_job = job[0].Int(2);
    FERRY_RETURN_NOT_OK(
        c.Query("UPDATE attempts SET state = 'PREEMPTED', reason = ?, ended_at_ms = ?"
                " WHERE job_id = ? AND attempt = ?",
                {why, now_ms, job_id, int64_t{attempt}})
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

  // A task of a preempted attempt ended: when it was the last one, the
  // attempt ends and the job is requeued.
  Status MaybeFinishPreemption(Connection& c, int64_t job_id, int attempt, int64_t now_ms) {
    FERRY_ASSIGN_OR_RAISE(
        Rows job,
        c.Query("SELECT state, attempt, preempt_reason FROM jobs WHERE id = ?", {job_id}));
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

  Result<TaskAssignment> BuildAssignment(Connection& c, int64_t node_id,
                                         const std::tuple<int64_t, int, int>& key) {
    const auto& [job_id, attempt, task] = key;
    FERRY_ASSIGN_OR_RAISE(auto job, LoadJob(c, Scope::All(), job_id, false));
    if (!job) return Status::UnknownError("store: job " + std::to_string(job_id) + " vanished");
    TaskAssignment a;
    a.ref = TaskRef{job_id, task, attempt};
    a.job_name = job->spec.name;
    a.spec = job->spec;
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

  std::unique_ptr<sql::Database> db_;
  SpecCache spec_cache_;
  int schema_version_ = 0;
};

}  // namespace

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
  auto store = std::make_unique<SqlStore>(std::move(db));
  Status migrated = store->Migrate();
  if (!migrated.ok()) return migrated.WithPrefix("store " + shown + ": migrate: ");
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace ferry::fleet
