// The SQL store's shared core, private to src/fleet/store: the class
// SqlStore (ferry::fleet::Store over the SQL driver interface, sql_db.h), its
// transactions (Run) and the row helpers every aggregate uses. The job logic
// is written once and runs on SQLite and PostgreSQL. Every public method is
// one transaction (Run), retried when the database asks for it (SQLITE_BUSY,
// a serialization failure or deadlock, a dropped connection).
//
// The methods live in one file per aggregate:
//   sql_store.cc              migrations, OpenStore, row helpers (jobs, nodes, events)
//   sql_store_identity.cc     tenants, teams, users, tokens
//   sql_store_jobs.cc         submit, get, list, cancel, events, runtimes, requeue
//   sql_store_idempotency.cc  idempotency keys (replay, record, purge)
//   sql_store_logs.cc         job output
//   sql_store_datasets.cc     dataset versions and their manifests
//   sql_store_nodes.cc        registration, syncs and reports, leases, removal
//   sql_store_scheduling.cc   the scheduling snapshot, placements, preemption
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "ferry/base/metrics.h"
#include "ferry/fleet/model_json.h"
#include "ferry/fleet/store.h"
#include "fleet/store/schema.h"
#include "fleet/store/sql_db.h"

namespace ferry::fleet::store_internal {

using sql::Connection;
using sql::Dialect;
using sql::ErrorKind;
using sql::Params;
using sql::Row;
using sql::Rows;

constexpr int kMaxTries = 8;

std::string Str(std::string_view s);
std::string StateText(JobState state);

int64_t NowMsForMigrations();

std::string DumpJson(const nlohmann::json& value);

std::string LabelsJson(const std::map<std::string, std::string>& labels);

std::map<std::string, std::string> ParseLabels(const std::string& text);

bool IsLive(JobState state);

// ", ?" repeated: "?, ?, ?".
std::string Placeholders(size_t n);

// Columns of a job row, in the order JobFromRow reads them.
constexpr const char* kJobSelect =
    "SELECT j.id, j.tenant_id, j.team_id, j.user_id, tn.name, tm.name, u.name, j.spec, j.state,"
    " j.reason, j.attempt, j.created_at_ms, j.admitted_at_ms, j.started_at_ms, j.finished_at_ms,"
    " j.exit_code FROM jobs j JOIN tenants tn ON tn.id = j.tenant_id"
    " JOIN teams tm ON tm.id = j.team_id JOIN users u ON u.id = j.user_id";

// Columns of a job event with its job's owner, in the order
// WatchedEventFromRow reads them (the primary key orders a scan of events;
// the joins only name the owner).
constexpr const char* kWatchedEventSelect =
    "SELECT e.id, e.job_id, e.at_ms, e.type, e.state, e.reason, e.message, e.actor,"
    " j.tenant_id, tn.name, tm.name, u.name, j.name, j.created_at_ms FROM job_events e"
    " JOIN jobs j ON j.id = e.job_id JOIN tenants tn ON tn.id = j.tenant_id"
    " JOIN teams tm ON tm.id = j.team_id JOIN users u ON u.id = j.user_id";

WatchedEvent WatchedEventFromRow(const Row& row);

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

Result<JobSpec> SpecFromText(int64_t job_id, const std::string& text);

Result<Job> JobFromRow(const Row& row, SpecCache* cache = nullptr);

// The tasks of one attempt with their nodes and GPUs.
Result<std::vector<TaskPlacement>> LoadPlacement(Connection& c, int64_t job_id, int attempt);

// The current attempt's placement of several jobs in two queries (a list
// page), instead of two per job.
Status LoadPlacements(Connection& c, std::vector<Job>* jobs);

Result<std::optional<Job>> LoadJob(Connection& c, const Scope& scope, int64_t job_id,
                                   bool with_attempts);

Status AddEvent(Connection& c, int64_t job_id, int64_t at_ms, std::string_view type,
                std::optional<JobState> state, std::string_view reason, const std::string& message,
                const std::string& actor);

sql::Value OptionalInt(std::optional<int> v);

// Ends the job's current attempt in a terminal state.
Status FinishJob(Connection& c, int64_t job_id, int attempt, JobState state,
                 std::string_view reason, std::optional<int> exit_code, const std::string& message,
                 const std::string& actor, int64_t now_ms);

Result<Node> NodeFromRow(const Row& row);

// Every node (or the one named), ordered by name, with GPUs and their holders.
Result<std::vector<Node>> LoadNodes(Connection& c, const std::string* name);

class SqlStore final : public Store {
 public:
  explicit SqlStore(std::unique_ptr<sql::Database> db) : db_(std::move(db)) {}

  std::string_view backend() const override {
    return db_->dialect() == Dialect::kSqlite ? "sqlite" : "postgresql";
  }
  int schema_version() const override { return schema_version_; }

  // Applies the migrations this database lacks, each in its own transaction.
  Status Migrate();

  // ---- Identity.

  Result<int64_t> EnsureTenant(const std::string& name) override;

  Result<int64_t> EnsureTeam(int64_t tenant_id, const std::string& name) override;

  Result<int64_t> CreateUser(int64_t team_id, const std::string& name, Role role) override;

  Result<int64_t> AddToken(int64_t user_id, const std::string& token_sha256,
                           const std::string& label, int64_t now_ms) override;

  static constexpr const char* kPrincipalSelect =
      "SELECT tn.id, tn.name, tm.id, tm.name, u.id, u.name, u.role FROM users u"
      " JOIN teams tm ON tm.id = u.team_id JOIN tenants tn ON tn.id = u.tenant_id";

  static Principal PrincipalFromRow(const Row& row);
  // The one user kPrincipalSelect + `tail` finds, if any.
  Result<std::optional<Principal>> QueryPrincipal(const std::string& tail, const Params& params);

  Result<std::optional<Principal>> LookupToken(const std::string& token_sha256) override;

  Result<std::optional<Principal>> FindUser(const std::string& tenant,
                                            const std::string& user) override;

  Result<int64_t> CountUsers() override;

  static constexpr const char* kUserInfoSelect =
      "SELECT u.id, tn.name, tm.name, u.name, u.role, u.created_at_ms,"
      " (SELECT COUNT(*) FROM api_tokens k WHERE k.user_id = u.id AND k.revoked_at_ms IS NULL)"
      " FROM users u JOIN teams tm ON tm.id = u.team_id JOIN tenants tn ON tn.id = u.tenant_id";

  static UserInfo UserInfoFromRow(const Row& row);

  Result<std::optional<std::vector<UserInfo>>> ListUsers(
      const std::optional<std::string>& tenant) override;

  Result<std::optional<RevokeResult>> RevokeUserTokens(const std::string& tenant,
                                                       const std::string& user,
                                                       int64_t now_ms) override;

  // ---- Jobs.

  Result<SubmitResult> Submit(const SubmitRequest& request,
                              const std::function<std::string(const Job&)>& render) override;

  Result<std::optional<Job>> GetJob(const Scope& scope, int64_t job_id) override;

  Result<JobPage> ListJobs(const Scope& scope, const JobFilter& filter,
                           std::optional<int64_t> before_id, int limit) override;

  Result<std::vector<JobCount>> CountJobs() override;
  Result<std::vector<AllocationCount>> CountAllocations() override;

  Result<CancelOutcome> CancelJob(const Scope& scope, int64_t job_id, const std::string& actor,
                                  int64_t now_ms) override;

  Result<std::optional<std::vector<JobEvent>>> ListEvents(const Scope& scope, int64_t job_id,
                                                          int64_t after_id, int limit) override;

  Result<std::vector<WatchedEvent>> ListEventsSince(const Scope& scope, int64_t after_id,
                                                    const EventFilter& filter, int limit) override;

  Result<int64_t> LatestEventId() override;
  Result<std::optional<WriteHorizon>> EventWriteHorizon() override;
  Result<Webhook> CreateWebhook(const Webhook& hook, int64_t now_ms) override;
  Result<std::vector<Webhook>> ListWebhooks(const Scope& scope) override;
  Result<std::optional<Webhook>> GetWebhook(const Scope& scope, int64_t id) override;
  Result<bool> DeleteWebhook(const Scope& scope, int64_t id, int64_t now_ms) override;
  Result<int64_t> EnqueueWebhookDeliveries(
      int64_t up_to, int limit, int64_t now_ms,
      const std::function<std::string(const Webhook&, const WatchedEvent&)>& render) override;
  Result<std::vector<WebhookDelivery>> DueWebhookDeliveries(int64_t now_ms, int limit) override;
  Status RecordWebhookAttempt(const WebhookAttempt& attempt) override;
  Result<std::optional<std::vector<WebhookDelivery>>> ListWebhookDeliveries(const Scope& scope,
                                                                            int64_t webhook_id,
                                                                            int limit) override;

  Result<int64_t> PurgeIdempotencyKeys(int64_t now_ms, int64_t ttl_ms) override;

  Result<std::vector<int64_t>> ExpireRuntimes(int64_t now_ms) override;

  // ---- Datasets.

  Result<DatasetCreateResult> CreateDatasetVersion(const Principal& creator,
                                                   const DatasetVersion& manifest,
                                                   int64_t now_ms) override;
  Result<std::optional<DatasetVersion>> GetDatasetVersion(int64_t tenant_id,
                                                          const std::string& name, int64_t version,
                                                          bool with_objects) override;
  Result<std::vector<DatasetVersion>> ListDatasets(const Scope& scope) override;
  Result<std::vector<DatasetVersion>> ListDatasetVersions(int64_t tenant_id,
                                                          const std::string& name) override;

  // ---- Logs.

  Status AppendLog(int64_t job_id, int attempt, int task, const std::string& stream,
                   const std::string& data, int64_t now_ms) override;

  Result<std::optional<std::vector<LogChunk>>> ReadLogs(const Scope& scope, int64_t job_id,
                                                        int64_t after_seq, int limit) override;

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

  Result<Node> RegisterNode(const NodeRegistration& reg, int64_t now_ms, int64_t lease_ms) override;

  Result<std::vector<Node>> ListNodes() override;

  Result<std::optional<Node>> GetNode(const std::string& name) override;

  Result<std::vector<Pool>> ListPools() override;

  Result<bool> SetDrain(const std::string& name, bool drain) override;
  Result<bool> SetExternalUse(const std::string& name, const ExternalUse& use) override;
  Result<bool> NoteAttempt(int64_t job_id, int attempt, const std::string& type,
                           const std::string& reason, const std::string& message,
                           const std::string& actor, int64_t now_ms) override;
  Result<bool> NoteAhead(int64_t job_id, int attempt, const std::string& type,
                         const std::string& message, const std::string& actor,
                         int64_t now_ms) override;

  Result<SyncResult> SyncNode(const SyncRequest& request) override;

  Result<ExpiryResult> ExpireLeases(int64_t now_ms) override;

  Result<ExpiryResult> MarkNodeLost(const std::string& name, const std::string& why,
                                    const std::string& message, int64_t now_ms) override;

  Result<RemoveNodeOutcome> RemoveNode(const std::string& name, int64_t now_ms) override;

  Result<bool> PreemptJob(const PreemptRequest& request, int64_t now_ms) override;

  // ---- Scheduling.

  Result<sched::Snapshot> LoadSchedulingSnapshot() override;

  // Attempts holding open allocations as running jobs, by job and attempt.
  Status LoadRunningJobs(Connection& c, std::vector<sched::RunningJob>* out);

  Result<CommitResult> CommitPlacements(const std::vector<Placement>& placements,
                                        const std::vector<PendingReason>& pending,
                                        int64_t now_ms) override;

  std::string RenderMetrics() const override { return metrics_.registry.Render(); }

  // Runs `fn` in one transaction, retrying when the database says so. The
  // calling method names the operation in the store's metrics.
  template <typename Fn>
  Status Run(bool write, Fn&& fn, const char* where = __builtin_FUNCTION()) {
    return Run(write, false, std::forward<Fn>(fn), where);
  }

  template <typename Fn>
  Status Run(bool write, bool retry_unique, Fn&& fn, const char* where = __builtin_FUNCTION()) {
    const auto started = std::chrono::steady_clock::now();
    const std::string_view operation = OperationName(where);
    for (int tries = 1;; ++tries) {
      Result<sql::Lease> leased = db_->Acquire(write);
      if (!leased.ok()) {
        metrics_.Finished(operation, started, false);
        return leased.status();
      }
      sql::Lease lease = std::move(*leased);
      Connection& c = *lease;
      Status st = c.Begin(write);
      if (st.ok()) {
        st = fn(c);
        if (st.ok()) {
          st = c.Commit();
          if (st.ok()) {
            metrics_.Finished(operation, started, true);
            return st;
          }
        }
      }
      const ErrorKind kind = c.last_error();
      (void)c.Rollback();
      const bool retry = kind == ErrorKind::kRetry || (retry_unique && kind == ErrorKind::kUnique);
      if (!retry || tries >= kMaxTries) {
        metrics_.Finished(operation, started, false);
        return tries > 1 ? st.WithPrefix("after " + std::to_string(tries) + " tries: ") : st;
      }
      metrics_.retries->With({std::string(operation)}).Add();
      if (kind == ErrorKind::kRetry) lease.Discard();
      // Back off a little, with jitter, before the next try.
      thread_local std::minstd_rand rng(std::random_device{}());
      std::this_thread::sleep_for(
          std::chrono::microseconds((500 << std::min(tries, 6)) + static_cast<int>(rng() % 1000)));
    }
  }

 private:
  // Idempotency (sql_store_idempotency.cc), inside Submit's transaction.
  // With a key whose record is still young: fills *result with the replay
  // (or the key mismatch) and returns true. A record past key_ttl_ms is
  // dropped; then, and without a key or record, false: create the job.
  Result<bool> ReplaySubmission(Connection& c, const SubmitRequest& request, SubmitResult* result);
  // With a key: records the 201 answer of the job just created.
  Status RecordSubmission(Connection& c, const SubmitRequest& request, int64_t job_id,
                          const std::string& response_body);

  bool pg() const { return db_->dialect() == Dialect::kPostgres; }
  std::string ForUpdate() const { return pg() ? " FOR UPDATE" : ""; }

  Result<bool> JobVisible(Connection& c, const Scope& scope, int64_t job_id);

  // One placement inside its transaction; sets *conflict instead of failing
  // when the job or a GPU is no longer available.
  Status Place(Connection& c, const Placement& p, int64_t now_ms, bool* conflict);

  // One agent report, fenced by the job's current attempt and the task's node.
  Status ApplyReport(Connection& c, int64_t node_id, const std::string& node_name,
                     const std::string& actor, const TaskReport& report, int64_t now_ms);

  // The node's processes are gone: the live attempts that had unfinished
  // tasks there are lost (requeued, or failed past their retry limit), and
  // every allocation on the node closes. Allocations of those attempts on
  // other nodes stay open until those agents stop the tasks. `why` is the
  // lost attempts' reason (NODE_LOST, SPOT_INTERRUPTED); an attempt being
  // preempted ends as preempted instead.
  Status HandleNodeLoss(Connection& c, int64_t node_id, std::string_view why,
                        const std::string& message, int64_t now_ms, ExpiryResult* result);

  // An attempt-wide report (TaskReport kLost, kPreempted, kTimedOut): every
  // task of the attempt ends, its allocations close, and the job is lost and
  // requeued, preempted and requeued, or timed out.
  Status EndAttempt(Connection& c, int64_t job_id, int attempt, const TaskReport& report,
                    const std::string& actor, int64_t now_ms);

  // After an attempt ended LOST or PREEMPTED: back to PENDING with attempt + 1
  // (true), or FAILED with RETRY_LIMIT when no retry is left (false).
  Result<bool> Requeue(Connection& c, int64_t job_id, int attempt, int64_t max_retries,
                       std::string_view why, const std::string& what, int64_t now_ms);

  // Ends a preempted attempt (its tasks are over, or its node is gone) and
  // requeues the job. Returns whether it was requeued (else it failed).
  Result<bool> FinishPreemption(Connection& c, int64_t job_id, int attempt,
                                const std::string& message, int64_t now_ms);

  // A task of a preempted attempt ended: when it was the last one, the
  // attempt ends and the job is requeued.
  Status MaybeFinishPreemption(Connection& c, int64_t job_id, int attempt, int64_t now_ms);

  Result<TaskAssignment> BuildAssignment(Connection& c, int64_t node_id,
                                         const std::tuple<int64_t, int, int>& key);

  // The calling method's name as __builtin_FUNCTION() gives it ("CountJobs";
  // a qualified or signature form is cut down to the name).
  static std::string_view OperationName(std::string_view function);

  struct StoreMetrics {
    StoreMetrics();
    void Finished(std::string_view operation, std::chrono::steady_clock::time_point started,
                  bool ok);
    metrics::Registry registry;
    metrics::Family<metrics::Histogram>* seconds;
    metrics::Family<metrics::Counter>* errors;
    metrics::Family<metrics::Counter>* retries;
  };

  std::unique_ptr<sql::Database> db_;
  StoreMetrics metrics_;
  SpecCache spec_cache_;
  int schema_version_ = 0;
};

}  // namespace ferry::fleet::store_internal
