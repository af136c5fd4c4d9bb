// The fleet's durable store: one interface, two back ends (SQLite, the
// embedded default; PostgreSQL for scale). Every method is one transaction;
// a method that returns OK has committed. All methods are thread-safe.
// Times are passed in (now_ms, Unix milliseconds) so tests control the clock.
//
// Invariants the schema itself enforces (not only this code):
//  - no GPU carries two open allocations (a partial unique index on
//    allocations(gpu_id) WHERE released_at_ms IS NULL);
//  - an idempotency key is unique per user.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/base/hash.h"
#include "ferry/base/status.h"
#include "ferry/fleet/model.h"
#include "ferry/fleet/snapshot.h"  // sched::Snapshot, Placement, PendingReason

namespace ferry::fleet {

// Which jobs a caller may see: one tenant, or every tenant (platform admins).
struct Scope {
  std::optional<int64_t> tenant_id;
  static Scope All() { return {}; }
  static Scope Tenant(int64_t id) { return {id}; }
};

// ---- Identity.
struct TokenInfo {
  int64_t id = 0;
  std::string label;
  int64_t created_at_ms = 0;
};

// A user as the admin listing shows it.
struct UserInfo {
  int64_t id = 0;
  std::string tenant;
  std::string team;
  std::string name;
  Role role = Role::kUser;
  int64_t created_at_ms = 0;
  int64_t active_tokens = 0;  // tokens not revoked
};

struct RevokeResult {
  UserInfo user;               // after the revocation (active_tokens is 0)
  int64_t revoked_tokens = 0;  // how many were active before
};

// ---- Jobs.
struct SubmitRequest {
  Principal principal;
  JobSpec spec;
  std::string idempotency_key;  // empty: none
  std::string request_hash;     // hex SHA-256 of the canonical request body
  int64_t now_ms = 0;
  int64_t key_ttl_ms = 24LL * 3600 * 1000;  // older keys are ignored (and purged)
};

struct SubmitResult {
  enum class Outcome {
    kCreated,      // a new job; response_body is what `render` returned
    kReplayed,     // same key, same body: the original status and body
    kKeyMismatch,  // same key, different body: nothing was created
  };
  Outcome outcome = Outcome::kCreated;
  Job job;  // the created or original job (empty for kKeyMismatch)
  int status_code = 201;
  std::string response_body;
};

struct JobFilter {
  std::vector<JobState> states;               // any of these; empty: all
  std::string user;                           // user name; empty: all
  std::string team;                           // team name; empty: all
  std::map<std::string, std::string> labels;  // every pair must match
};

// Which events a watcher wants (GET /v1/jobs:watch): the event's own state
// (only "state" events carry one) and the job's team. Empty: all.
struct EventFilter {
  std::vector<JobState> states;
  std::string team;  // team name
};

// An event of any job, with the owner a watcher scopes and filters by.
struct WatchedEvent {
  JobEvent event;
  int64_t tenant_id = 0;
  std::string tenant;
  std::string team;
  std::string user;
  std::string job_name;
  int64_t job_created_ms = 0;  // when the job was submitted
};

// ---- Webhooks (docs/fleet-api.md#webhooks): job state changes POSTed,
// signed with the webhook's secret, to a URL of the tenant's.
struct Webhook {
  int64_t id = 0;
  std::optional<int64_t> tenant_id;  // nullopt: every tenant (platform admins only)
  std::string tenant;                // its name, "" for every tenant
  std::string url;
  std::string secret;             // the HMAC-SHA256 key
  std::optional<int64_t> job_id;  // set: that job's events only
  std::vector<JobState> states;   // the job states it is told about
  std::string description;
  int64_t created_by = 0;  // user id
  std::string creator;     // user name
  int64_t created_at_ms = 0;
  int64_t after_event_id = 0;  // events up to this one (its creation) are not sent
};

struct WebhookDelivery {
  enum class Status { kPending, kDelivered, kFailed };
  int64_t id = 0;
  int64_t webhook_id = 0;
  int64_t event_id = 0;
  int64_t job_id = 0;
  std::string body;  // the JSON sent, the same on every attempt
  Status status = Status::kPending;
  int attempts = 0;
  int64_t next_attempt_at_ms = 0;
  int last_status_code = 0;  // of the last attempt; 0 when it got no answer
  std::string last_error;
  int64_t created_at_ms = 0;
  int64_t finished_at_ms = 0;  // delivered or given up
  // With DueWebhookDeliveries: where and how to send it.
  std::string url;
  std::string secret;
};

std::string_view ToString(WebhookDelivery::Status status);

// One attempt at a delivery, as the dispatcher saw it.
struct WebhookAttempt {
  int64_t delivery_id = 0;
  bool delivered = false;
  bool give_up = false;  // not delivered and no attempt left: failed for good
  int status_code = 0;
  std::string error;
  int64_t next_attempt_at_ms = 0;  // when not delivered and not given up
  int64_t at_ms = 0;
};

// How many jobs are in one state with one reason, per tenant and team (the
// metrics endpoint's job gauges).
struct JobCount {
  std::string state;  // ToString(JobState)
  std::string reason;
  std::string tenant;
  std::string team;
  int64_t jobs = 0;
};

// Jobs holding open allocations and the GPUs they hold, by the pool of the
// nodes holding them (a gang across pools counts in each), the job's state,
// tenant and team.
struct AllocationCount {
  std::string pool;
  std::string state;  // ToString(JobState)
  std::string tenant;
  std::string team;
  int64_t jobs = 0;
  int64_t gpus = 0;
};

// Newest first (id descending). `next_before_id` is set when more jobs match.
struct JobPage {
  std::vector<Job> jobs;
  std::optional<int64_t> next_before_id;
};

enum class CancelOutcome {
  kNotFound,         // no such job in scope
  kCancelled,        // now CANCELLED; running tasks will be told to stop
  kAlreadyFinished,  // already terminal: unchanged (cancel is idempotent)
};

// ---- Datasets (model.h's DatasetVersion).
struct DatasetCreateResult {
  DatasetVersion version;  // with objects
  // false: the latest version already had this manifest (same digest), and
  // `version` is that one; nothing was written.
  bool created = true;
};

// ---- Nodes and agents.
struct GpuInventory {
  int index = 0;
  std::string model;
  int64_t memory_mb = 0;
  std::string uuid;
};

struct NodeRegistration {
  std::string name;
  std::string pool;
  std::map<std::string, std::string> labels;
  double cpus = 0;
  int64_t memory_mb = 0;
  std::string instance;  // random per agent process; a new instance means the old tasks are gone
  std::vector<GpuInventory> gpus;
};

struct TaskRef {
  int64_t job_id = 0;
  int task = 0;
  int attempt = 0;
  bool operator==(const TaskRef&) const = default;
};

// What a node's resource manager (Slurm) reports beyond Ferry's own work.
struct ExternalUse {
  std::string unavailable;  // why no new work may go there; empty: it may
  int gpus = 0;             // GPUs given to work Ferry does not own
  double cpus = 0;
  int64_t memory_mb = 0;
};

struct TaskReport {
  // kStarted, kExited and kLaunchFailed are one task's. The rest end the
  // whole attempt, as the resource manager running it (Slurm) decided:
  // kLost (the attempt is LOST: a node failed under it; requeued by the
  // retry rules), kPreempted (PREEMPTED with PREEMPTED_BY_RESOURCE_MANAGER;
  // requeued) and kTimedOut (TIMEOUT, MAX_RUNTIME_EXCEEDED).
  //
  // kStaging, kStaged and kStagingFailed are the agent's input staging for
  // one task, before it launches: the first two only add an event
  // ("staging_started", "staged"); kStagingFailed ends the attempt FAILED
  // with STAGING_FAILED as kLaunchFailed ends it with LAUNCH_FAILED.
  enum class Kind {
    kStarted,
    kExited,
    kLaunchFailed,
    kLost,
    kPreempted,
    kTimedOut,
    kStaging,
    kStaged,
    kStagingFailed,
  };
  TaskRef ref;
  Kind kind = Kind::kStarted;
  std::optional<int> exit_code;  // kExited: the exit status, or unset when killed by a signal
  std::optional<int> signal;     // kExited by a signal
  std::string message;
  // kExited: what else the agent has to say for the timeline (a final
  // checkpoint or outputs upload that failed); appended to the event.
  std::string note;
  int64_t at_ms = 0;
};

// One object of a staged input, as an agent fetches it: from `uri`, checked
// against `sha256` (and `size` when >= 0), laid out at <input>/<path>.
struct StagedObject {
  std::string path;
  std::string uri;
  int64_t size = -1;
  std::string sha256;
};

// One input of a task (JobSpec::inputs, resolved): a dataset version's
// objects, or the one object of a uri input (path: the URI's last component).
struct StagedInput {
  std::string name;
  std::vector<StagedObject> objects;
  // What the input is, for the caches' reports: the dataset version's
  // manifest digest, or "sha256:<hex>" of a uri input's one object.
  std::string digest;
};

// Everything an agent needs to launch one task.
struct TaskAssignment {
  TaskRef ref;
  std::string job_name;
  JobSpec spec;
  std::vector<int> gpu_indices;
  std::vector<std::string> gpu_uuids;
  std::vector<std::string> gang_nodes;  // node of every task, by task index
  int64_t tenant_id = 0;                // the job's tenant (not sent to agents)
  std::string tenant;                   // its name (agents pick storage credentials by it)
  // Filled in by the server as it sends the assignment (not kept in the store):
  std::vector<std::string> gang_addresses;  // advertised address of every task's node
  int rendezvous_port = 0;                  // the gang's MASTER_PORT; 0: none
  std::vector<StagedInput> inputs;          // spec.inputs with every object to fetch
};

struct SyncRequest {
  std::string node;
  std::string instance;
  std::vector<TaskRef> running;     // what the agent runs now
  std::vector<TaskReport> reports;  // what happened since the last sync (applied in order)
  int64_t now_ms = 0;
  int64_t lease_ms = 10'000;
  // Who the reports' events name; empty: "agent:<node>". A resource
  // manager's controller syncing its nodes names itself ("slurm:<cluster>").
  std::string actor;
};

struct SyncResult {
  bool registered = true;  // false: unknown node or another instance registered since; re-register
  int64_t lease_expires_at_ms = 0;
  std::vector<TaskAssignment>
      start;                  // open allocations of live attempts the agent does not run yet
  std::vector<TaskRef> stop;  // tasks the agent runs that must end (job finished, stale attempt)
  // Set when `stop` holds a task of a preempted attempt: the preemption's
  // grace period (the time it gets to checkpoint before SIGKILL).
  std::optional<int64_t> stop_grace_ms;
};

struct ExpiryResult {
  std::vector<std::string> lost_nodes;
  std::vector<int64_t> requeued_jobs;  // LOST, back to PENDING with attempt + 1
  std::vector<int64_t> failed_jobs;    // LOST past max_retries: FAILED, RETRY_LIMIT
};

// ---- Scheduling (the snapshot, placements and reasons: ferry/fleet/snapshot.h).
struct PreemptRequest {
  int64_t job_id = 0;
  int attempt = 0;       // the attempt to stop (fenced: nothing happens when it is no longer live)
  std::string reason;    // reason::kPreemptedByPriority or reason::kPreemptedForFairShare
  int64_t for_job = 0;   // the job it makes room for
  int64_t grace_ms = 0;  // SIGTERM → SIGKILL for its tasks
};

enum class RemoveNodeOutcome {
  kRemoved,  // gone from listings; its name may register again later
  kNotFound,
  kBusy,  // it holds an open allocation: nothing changed
};

struct CommitResult {
  std::vector<int64_t> admitted;    // now ADMITTED with allocations
  std::vector<int64_t> conflicted;  // skipped: a GPU was taken or the job changed meanwhile
};

struct LogChunk {
  int64_t seq = 0;
  int attempt = 0;
  int task = 0;
  std::string stream;  // "stdout" or "stderr"
  std::string data;
  int64_t at_ms = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // "sqlite" or "postgresql".
  virtual std::string_view backend() const = 0;
  // The schema version after migrations.
  virtual int schema_version() const = 0;
  // The store's own series in the Prometheus text format (transaction
  // latency, errors and retries by operation; docs/fleet-metrics.md).
  virtual std::string RenderMetrics() const { return {}; }

  // ---- Identity. Names are unique within their parent; Ensure* return the
  // existing id when the name is taken.
  virtual Result<int64_t> EnsureTenant(const std::string& name) = 0;
  virtual Result<int64_t> EnsureTeam(int64_t tenant_id, const std::string& name) = 0;
  // Fails (kInvalid) when the user name is taken in its tenant.
  virtual Result<int64_t> CreateUser(int64_t team_id, const std::string& name, Role role) = 0;
  // Stores only the hash (hex SHA-256 of the token).
  virtual Result<int64_t> AddToken(int64_t user_id, const std::string& token_sha256,
                                   const std::string& label, int64_t now_ms) = 0;
  virtual Result<std::optional<Principal>> LookupToken(const std::string& token_sha256) = 0;
  virtual Result<std::optional<Principal>> FindUser(const std::string& tenant,
                                                    const std::string& user) = 0;
  virtual Result<int64_t> CountUsers() = 0;
  // Every user, or those of `tenant` when given, oldest first. nullopt when
  // the tenant does not exist.
  virtual Result<std::optional<std::vector<UserInfo>>> ListUsers(
      const std::optional<std::string>& tenant) = 0;
  // Revokes every active token of the user (revoked_at_ms = now_ms), so that
  // LookupToken no longer finds them. The user stays. nullopt when there is no
  // such user; revoking again revokes nothing and succeeds.
  virtual Result<std::optional<RevokeResult>> RevokeUserTokens(const std::string& tenant,
                                                               const std::string& user,
                                                               int64_t now_ms) = 0;

  // ---- Jobs.
  // Creates the job (PENDING, attempt 1, a "state" event with SUBMITTED) and,
  // with a key, the idempotency record holding `render(job)` as the 201 body,
  // all in one transaction.
  virtual Result<SubmitResult> Submit(const SubmitRequest& request,
                                      const std::function<std::string(const Job&)>& render) = 0;
  // With attempts history. nullopt when missing or outside the scope.
  virtual Result<std::optional<Job>> GetJob(const Scope& scope, int64_t job_id) = 0;
  // Jobs with id < before_id (when set), newest first, at most `limit`.
  virtual Result<JobPage> ListJobs(const Scope& scope, const JobFilter& filter,
                                   std::optional<int64_t> before_id, int limit) = 0;
  // Every job counted by (state, reason, tenant, team), in that order.
  virtual Result<std::vector<JobCount>> CountJobs() = 0;
  // Open allocations counted by (pool, state, tenant, team), in that order.
  virtual Result<std::vector<AllocationCount>> CountAllocations() = 0;
  virtual Result<CancelOutcome> CancelJob(const Scope& scope, int64_t job_id,
                                          const std::string& actor, int64_t now_ms) = 0;
  // Events with id > after_id, oldest first. nullopt when the job is not in scope.
  virtual Result<std::optional<std::vector<JobEvent>>> ListEvents(const Scope& scope,
                                                                  int64_t job_id, int64_t after_id,
                                                                  int limit) = 0;
  // Events of every job in scope that match `filter`, with id > after_id,
  // oldest first, at most `limit` (1 to 10,000). Event ids are global and
  // only grow, so the last id seen is a resource version to resume from.
  virtual Result<std::vector<WatchedEvent>> ListEventsSince(const Scope& scope, int64_t after_id,
                                                            const EventFilter& filter,
                                                            int limit) = 0;
  // The id of the newest event of any job; 0 when there is none.
  virtual Result<int64_t> LatestEventId() = 0;
  // Where concurrent writers stand, for readers that follow event ids (the
  // watch stream). On PostgreSQL an event takes its id from a sequence when
  // inserted and becomes visible when its transaction commits, so a reader
  // can see id 11 while id 10 is still uncommitted. Take a horizon after a
  // read: once a later horizon's `oldest_running` reaches its `next`, every
  // transaction running at that read has ended, and an id still missing
  // below what the read saw belongs to a transaction that rolled back.
  // nullopt on stores whose events become visible in id order (SQLite).
  struct WriteHorizon {
    int64_t oldest_running = 0;  // the oldest transaction id still running
    int64_t next = 0;            // the next transaction id to be assigned
  };
  virtual Result<std::optional<WriteHorizon>> EventWriteHorizon() = 0;
  // Drops idempotency records older than now_ms - ttl_ms; returns how many.
  virtual Result<int64_t> PurgeIdempotencyKeys(int64_t now_ms, int64_t ttl_ms) = 0;
  // RUNNING (or ADMITTED) jobs past max_runtime_seconds become TIMEOUT; returns their ids.
  virtual Result<std::vector<int64_t>> ExpireRuntimes(int64_t now_ms) = 0;

  // ---- Webhooks. The secret is the caller's; after_event_id is set to the
  // newest event. Fails (kInvalid) on an empty url or state list.
  virtual Result<Webhook> CreateWebhook(const Webhook& hook, int64_t now_ms) = 0;
  // Live webhooks in scope, oldest first: a tenant's own; every one for Scope::All().
  virtual Result<std::vector<Webhook>> ListWebhooks(const Scope& scope) = 0;
  virtual Result<std::optional<Webhook>> GetWebhook(const Scope& scope, int64_t id) = 0;
  // Deletes it and gives up its pending deliveries; false when not in scope.
  virtual Result<bool> DeleteWebhook(const Scope& scope, int64_t id, int64_t now_ms) = 0;
  // Turns the job events after the store's webhook cursor, up to `up_to`
  // (an event id every lower one of which is committed or never will be),
  // into one pending delivery per matching live webhook (its tenant, its
  // states, newer than the webhook), with `render` giving each body, and
  // moves the cursor, in one transaction: every event is considered once.
  // At most `limit` events per call; returns how many deliveries it made.
  virtual Result<int64_t> EnqueueWebhookDeliveries(
      int64_t up_to, int limit, int64_t now_ms,
      const std::function<std::string(const Webhook&, const WatchedEvent&)>& render) = 0;
  // Pending deliveries due at now_ms, oldest due first, with url and secret.
  virtual Result<std::vector<WebhookDelivery>> DueWebhookDeliveries(int64_t now_ms, int limit) = 0;
  // Records one attempt; a delivery no longer pending (its webhook was
  // deleted) stays as it is.
  virtual Status RecordWebhookAttempt(const WebhookAttempt& attempt) = 0;
  // The webhook's deliveries, newest first; nullopt when it is not in scope.
  virtual Result<std::optional<std::vector<WebhookDelivery>>> ListWebhookDeliveries(
      const Scope& scope, int64_t webhook_id, int limit) = 0;

  // ---- Datasets. Versions are immutable and numbered from 1 per (tenant,
  // name); everything is keyed by the tenant, so one tenant never reads
  // another's datasets.
  // Registers `manifest` (validated and digested by ParseDatasetRegistration:
  // objects sorted, bytes, object_count and digest set) as version latest + 1
  // of its name in the creator's tenant, or returns the latest version
  // unchanged (created = false) when its digest is the same.
  virtual Result<DatasetCreateResult> CreateDatasetVersion(const Principal& creator,
                                                           const DatasetVersion& manifest,
                                                           int64_t now_ms) = 0;
  // One version (the latest when `version` is 0), with its objects when
  // `with_objects`; nullopt when the tenant has no such dataset or version.
  virtual Result<std::optional<DatasetVersion>> GetDatasetVersion(int64_t tenant_id,
                                                                  const std::string& name,
                                                                  int64_t version,
                                                                  bool with_objects) = 0;
  // The latest version of every dataset in scope (without objects), by
  // tenant name, then dataset name.
  virtual Result<std::vector<DatasetVersion>> ListDatasets(const Scope& scope) = 0;
  // Every version of one dataset (without objects), oldest first; empty when
  // the tenant has no dataset of that name.
  virtual Result<std::vector<DatasetVersion>> ListDatasetVersions(int64_t tenant_id,
                                                                  const std::string& name) = 0;

  // ---- Logs (appended by agents, read by users).
  virtual Status AppendLog(int64_t job_id, int attempt, int task, const std::string& stream,
                           const std::string& data, int64_t now_ms) = 0;
  // Chunks with seq > after_seq, oldest first. nullopt when the job is not in scope.
  virtual Result<std::optional<std::vector<LogChunk>>> ReadLogs(const Scope& scope, int64_t job_id,
                                                                int64_t after_seq, int limit) = 0;

  // ---- Nodes.
  // Inserts or updates the node by name, adds GPUs it did not have, marks it
  // READY and gives it a lease. A new `instance` means the previous agent
  // process is gone: its tasks are treated as lost (jobs requeued or failed).
  virtual Result<Node> RegisterNode(const NodeRegistration& registration, int64_t now_ms,
                                    int64_t lease_ms) = 0;
  virtual Result<std::vector<Node>> ListNodes() = 0;
  virtual Result<std::optional<Node>> GetNode(const std::string& name) = 0;
  virtual Result<std::vector<Pool>> ListPools() = 0;
  // false when the node does not exist.
  virtual Result<bool> SetDrain(const std::string& name, bool drain) = 0;
  // Records what the node's resource manager reports (Slurm pools): the
  // node's `unavailable` text, its external CPUs and memory, and use.gpus of
  // its GPUs without an open allocation marked external (those marked
  // already first, then the highest indices; the rest unmarked; fewer when
  // Ferry holds the others). false when the node does not exist.
  virtual Result<bool> SetExternalUse(const std::string& name, const ExternalUse& use) = 0;
  // A note on a live attempt from whatever runs it (the Slurm controller):
  // an event of `type` (e.g. "slurm_submitted") carrying `message`, and when
  // `reason` is not empty the job's reason becomes it (an event only when it
  // changes, and none when `type` is empty). false when the attempt is not the job's live
  // one (nothing written).
  virtual Result<bool> NoteAttempt(int64_t job_id, int attempt, const std::string& type,
                                   const std::string& reason, const std::string& message,
                                   const std::string& actor, int64_t now_ms) = 0;
  // An event of `type` carrying `message` from a node that works for a job
  // ahead of its start (an agent prefetching its inputs while it is
  // PENDING): written while `attempt` is the job's current one and the job
  // is PENDING, ADMITTED or RUNNING (a report may arrive just after the
  // admission). false otherwise (nothing written).
  virtual Result<bool> NoteAhead(int64_t job_id, int attempt, const std::string& type,
                                 const std::string& message, const std::string& actor,
                                 int64_t now_ms) = 0;
  // Renews the lease, applies reports (fenced: reports for an attempt that is
  // not the job's current one are ignored), and says what to start and stop.
  virtual Result<SyncResult> SyncNode(const SyncRequest& request) = 0;
  // Nodes whose lease ended become LOST; their allocations close and their
  // jobs are requeued (attempt + 1) or failed past the retry limit.
  virtual Result<ExpiryResult> ExpireLeases(int64_t now_ms) = 0;
  // Declares a READY node lost at once (a spot interruption): as a lease
  // expiry, but the lost attempts record `reason` (e.g. SPOT_INTERRUPTED) and
  // requeued jobs carry it as their reason. Empty lost_nodes when the node is
  // unknown or not READY.
  virtual Result<ExpiryResult> MarkNodeLost(const std::string& name, const std::string& reason,
                                            const std::string& message, int64_t now_ms) = 0;
  // Removes a node without open allocations (scale-down). It disappears from
  // ListNodes/GetNode and takes no work; its history stays.
  virtual Result<RemoveNodeOutcome> RemoveNode(const std::string& name, int64_t now_ms) = 0;

  // ---- Scheduling.
  // What a scheduling cycle reads: every node (schedulable when READY and not
  // drained; GpuSlot::free, cpus_used and memory_mb_used from open
  // allocations), every attempt holding open allocations as a running job
  // (terminating when it is not the job's live attempt or is being
  // preempted, with the preemption's reason and the job it makes room for),
  // and the PENDING jobs, highest priority first, then oldest. The clock
  // (now_s), the nodes being provisioned and idle_since_s are the caller's.
  virtual Result<sched::Snapshot> LoadSchedulingSnapshot() = 0;
  // Each placement in its own transaction: the job must still be PENDING at
  // that attempt and every GPU free, else it is skipped as conflicted. Pending
  // reasons update the job's reason (an event only when the reason changes).
  virtual Result<CommitResult> CommitPlacements(const std::vector<Placement>& placements,
                                                const std::vector<PendingReason>& pending,
                                                int64_t now_ms) = 0;
  // Asks a live attempt to stop for a preemption: records a "preempt_requested"
  // event, and agents get a stop for its tasks with request.grace_ms
  // (SyncResult::stop_grace_ms). When its last task ends (or its node is
  // lost) the attempt ends PREEMPTED with request.reason and the job goes
  // back to PENDING with attempt + 1 and that reason, or FAILED with
  // RETRY_LIMIT past max_retries. false when the attempt is no longer live
  // or already preempted (nothing changed).
  virtual Result<bool> PreemptJob(const PreemptRequest& request, int64_t now_ms) = 0;
};

// Opens (creating if needed) and migrates a store.
//   "sqlite:/path/to/fleet.db"   WAL mode, one file
//   "sqlite::memory:"            private, for tests
//   "postgresql://user@host:port/db?..." or any libpq connection URI
// Errors name the URL (without its password) and the failing step.
Result<std::unique_ptr<Store>> OpenStore(const std::string& url);

}  // namespace ferry::fleet
