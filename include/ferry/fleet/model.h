// The fleet's data model: who submits (tenants → teams → users), what they
// submit (a JobSpec), where it runs (pools, nodes, GPUs) and what happened
// (job states with reason codes, attempts, events). Plain value types shared
// by the store, the server, the scheduler and the agent; the JSON wire shapes
// are in docs/fleet-api.md and model_json.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::fleet {

// Job life cycle. PENDING → ADMITTED (placed, GPUs allocated) → RUNNING (the
// agents started every task) → one terminal state. LOST and PREEMPTED are
// recorded as events and the job goes back to PENDING with attempt + 1 until
// its retry limit; past it the job ends FAILED with reason RETRY_LIMIT.
enum class JobState {
  kPending,
  kAdmitted,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kPreempted,
  kTimeout,
  kLost,
};

// "PENDING", "ADMITTED", ... as stored and sent on the wire.
std::string_view ToString(JobState state);
std::optional<JobState> ParseJobState(std::string_view text);
// SUCCEEDED, FAILED, CANCELLED, TIMEOUT (PREEMPTED and LOST requeue the job).
bool IsTerminal(JobState state);

// Reason codes: one word per cause, stored with every state change and shown
// to users. The list is closed; docs/fleet-api.md explains each one.
namespace reason {
inline constexpr std::string_view kSubmitted = "SUBMITTED";
inline constexpr std::string_view kNoCapacity = "NO_CAPACITY";  // fits the fleet, not free now
inline constexpr std::string_view kGangIncomplete =
    "GANG_INCOMPLETE";  // some tasks would fit, not all
inline constexpr std::string_view kUnsatisfiable =
    "CONSTRAINT_UNSATISFIABLE";  // no node could ever fit
inline constexpr std::string_view kPlaced = "PLACED";
inline constexpr std::string_view kTasksStarted = "TASKS_STARTED";
inline constexpr std::string_view kExitedZero = "EXITED_ZERO";
inline constexpr std::string_view kExitedNonZero = "EXITED_NONZERO";  // a task exited != 0
inline constexpr std::string_view kKilledBySignal = "KILLED_BY_SIGNAL";
inline constexpr std::string_view kLaunchFailed = "LAUNCH_FAILED";  // the agent could not start it
inline constexpr std::string_view kStagingFailed =
    "STAGING_FAILED";  // the agent could not fetch or verify an input
inline constexpr std::string_view kCancelledByUser = "CANCELLED_BY_USER";
inline constexpr std::string_view kMaxRuntimeExceeded = "MAX_RUNTIME_EXCEEDED";
inline constexpr std::string_view kNodeLost = "NODE_LOST";  // lease expired
inline constexpr std::string_view kRequeued = "REQUEUED";
inline constexpr std::string_view kRetryLimit = "RETRY_LIMIT";
inline constexpr std::string_view kPreemptedByPriority = "PREEMPTED_BY_PRIORITY";
// Scheduling policies.
inline constexpr std::string_view kQuotaExceeded =
    "QUOTA_EXCEEDED";  // over quota, nothing to borrow
inline constexpr std::string_view kPolicy =
    "POLICY";  // held by a policy (backfill reservation, preemption rate limit)
inline constexpr std::string_view kWaitingForPreemption =
    "WAITING_FOR_PREEMPTION";  // victims are ending
inline constexpr std::string_view kWaitingForProvisioning =
    "WAITING_FOR_PROVISIONING";  // cloud nodes on the way
inline constexpr std::string_view kPreemptedForFairShare =
    "PREEMPTED_FOR_FAIR_SHARE";  // borrowed capacity reclaimed
inline constexpr std::string_view kSpotInterrupted =
    "SPOT_INTERRUPTED";  // the provider took the node back
// Resource managers (Slurm pools).
inline constexpr std::string_view kPreemptedByResourceManager =
    "PREEMPTED_BY_RESOURCE_MANAGER";  // Slurm preempted the job for its own work
inline constexpr std::string_view kResourceManagerUnreachable =
    "RESOURCE_MANAGER_UNREACHABLE";  // handed to Slurm, whose controller does not answer
}  // namespace reason

enum class Role {
  kUser,           // submits; sees the jobs of its tenant; cancels its own jobs
  kTeamAdmin,      // as kUser, and cancels any job of its team
  kPlatformAdmin,  // sees and cancels every tenant's jobs; drains nodes; manages identities
  kAgent,          // a node agent: only the /v1/agent endpoints
};
std::string_view ToString(Role role);  // "user", "team_admin", "platform_admin", "agent"
std::optional<Role> ParseRole(std::string_view text);

// The caller of a request, resolved from its bearer token.
struct Principal {
  int64_t tenant_id = 0;
  std::string tenant;
  int64_t team_id = 0;
  std::string team;
  int64_t user_id = 0;
  std::string user;
  Role role = Role::kUser;
};

// One input a job reads, staged on its node before the task starts and laid
// out read-only at $FERRY_INPUTS_DIR/<name>. Either a registered dataset
// version of the job's tenant or a single object named by URI.
struct JobInput {
  static constexpr size_t kMaxNameChars = 64;  // [A-Za-z0-9._-], unique in the job

  std::string name;
  std::string dataset;  // a dataset of the job's tenant, or empty
  // The dataset version; 0 in a request means the latest at submission (the
  // server stores the version it resolved).
  int64_t version = 0;
  std::string uri;            // or one object: s3://, https://, http:// or file:/// URI
  std::string sha256;         // with uri (required): 64 lower-case hex digits
  int64_t size = -1;          // with uri (optional): the object's size in bytes
  std::string mode = "copy";  // "copy": fetched before the task starts
  // Filled by the server at submission (shown by GET /v1/jobs/{id}).
  std::string manifest_digest;  // a dataset input: "sha256:<hex>" of its manifest
  int64_t bytes = 0;            // total bytes (a uri input: its size when given)
  int64_t objects = 0;          // number of objects (a uri input: 1)
};

// What identifies an input's bytes in the node caches' reports: a dataset
// input's manifest_digest, or "sha256:" + the sha256 of a uri input. Empty
// for a dataset input not resolved yet (no manifest_digest).
std::string InputDigest(const JobInput& input);

// What a node's agent last reported of its input cache (POST /v1/agent/sync,
// "cache"): its size and counters, and per (tenant, input digest) the bytes
// of that input it holds now. Kept in the server's memory only.
struct NodeCache {
  static constexpr size_t kMaxInputs = 256;

  struct Input {
    std::string tenant;       // tenant name
    std::string digest;       // InputDigest: "sha256:" and 64 lower-case hex digits
    int64_t bytes = 0;        // held now, > 0
    int64_t total_bytes = 0;  // the whole input, >= bytes
  };
  int64_t quota_bytes = 0;
  int64_t bytes = 0;  // complete entries
  int64_t entries = 0;
  int64_t hit_bytes = 0;      // served from the cache since the agent started
  int64_t fetched_bytes = 0;  // downloaded since the agent started
  std::vector<Input> inputs;  // at most kMaxInputs, one per (tenant, digest)
  int64_t reported_at_ms = 0;

  // hit_bytes / (hit_bytes + fetched_bytes); 0 before any staging.
  double HitRatio() const;
};

// What a user asks for. Validated by ParseJobSpec (model_json.h); the limits
// are those constants.
struct JobSpec {
  static constexpr int kMaxTasks = 1024;
  static constexpr int kMaxGpusPerTask = 64;
  static constexpr int kMaxArgs = 4096;
  static constexpr int kMaxDatasets = 64;
  static constexpr int kMaxInputs = 64;

  std::string name;                  // 1..128 chars
  std::vector<std::string> command;  // argv; empty only when `dataflow` is set
  std::map<std::string, std::string> env;
  std::string working_dir;  // on the node; empty: the agent's work dir
  std::string dataflow;     // path of a dataflow.yml run with `ferry run`
  int tasks = 1;            // gang size: all start together or none
  int gpus_per_task = 0;
  std::vector<std::string> gpu_models;  // any of these models; empty: any model
  double cpus_per_task = 1.0;
  int64_t memory_mb_per_task = 0;  // 0: no memory requirement
  int priority = 0;                // higher runs first; -1000..1000
  bool preemptible = false;
  int64_t max_runtime_seconds = 0;  // 0: unlimited
  int max_retries = 3;              // requeues after LOST/PREEMPTED
  std::map<std::string, std::string> labels;
  // Scheduling hints.
  std::string topology;               // "", "same_node" or "same_domain" (a preference)
  std::vector<std::string> datasets;  // data sets the job reads (locality scoring)
  std::string pool_set;               // the scheduler config's pool set; "": the first
  // A container image the tasks run in (docs/fleet-images.md):
  // host[:port]/path[:tag][@sha256:...] (image_ref.h). The server resolves it
  // at submission and stores the manifest digest the agents run; "": the
  // tasks run as plain processes.
  std::string image;
  std::string image_digest;  // "sha256:<hex>", filled by the server
  // Checkpoints (docs/fleet-staging.md#checkpoints): each task's
  // $FERRY_CHECKPOINT_DIR goes to <uri><job id>/task-<index>/ every
  // interval_seconds (0: only when the task ends) and when it ends, and a
  // requeued attempt starts with the last one restored. uri "": none.
  struct Checkpoint {
    static constexpr int64_t kMinIntervalSeconds = 10;
    std::string uri;  // s3://bucket/prefix/ or file:///dir/ (ends in '/')
    int64_t interval_seconds = 0;
  };
  Checkpoint checkpoint;
  // Outputs (docs/fleet-staging.md#outputs): each task's $FERRY_OUTPUTS_DIR,
  // empty when the attempt starts, goes to <uri><job id>/task-<index>/ once,
  // when the task ends (before its exit is reported). uri "": none.
  struct Outputs {
    std::string uri;  // s3://bucket/prefix/ or file:///dir/ (ends in '/')
  };
  Outputs outputs;
  std::vector<JobInput> inputs;  // staged before start; at most 64
  // The job's code (docs/fleet-staging.md#code), laid out read-only at
  // $FERRY_CODE_DIR, which is the task's working directory unless
  // working_dir is set. Either a bundle the job's tenant uploaded
  // (POST /v1/code) or one commit of a git repository the agent clones.
  struct Code {
    std::string bundle;  // "sha256:" and 64 lower-case hex digits
    std::string git;     // a repository URL: https://, http://, ssh://, git:// or file:///
    std::string commit;  // with git: the full 40-hex commit id
    int64_t bytes = 0;   // a bundle's size, filled in by the server at submission
    bool empty() const { return bundle.empty() && git.empty(); }
  };
  Code code;
};

// One task of one attempt placed on a node.
struct TaskPlacement {
  int task = 0;
  int64_t node_id = 0;
  std::string node;
  std::vector<int64_t> gpu_ids;  // store ids
  std::vector<int> gpu_indices;  // indices on the node (CUDA_VISIBLE_DEVICES)
};

struct AttemptRecord {
  int attempt = 0;
  JobState state = JobState::kPending;  // how the attempt ended (or RUNNING/ADMITTED while open)
  std::string reason;
  int64_t admitted_at_ms = 0;
  int64_t started_at_ms = 0;
  int64_t ended_at_ms = 0;
  std::optional<int> exit_code;
  int64_t preempted_for = 0;  // PREEMPTED: the job it made room for (0: none named)
  std::vector<TaskPlacement> placement;
};

struct Job {
  int64_t id = 0;
  int64_t tenant_id = 0;
  int64_t team_id = 0;
  int64_t user_id = 0;
  std::string tenant;
  std::string team;
  std::string user;
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string reason;
  int attempt = 1;                       // current attempt, from 1
  std::vector<TaskPlacement> placement;  // the current attempt's, empty while PENDING
  std::vector<AttemptRecord> attempts;   // every attempt, oldest first (filled by GetJob)
  // The current attempt is being preempted (GetJob): the rule
  // (PREEMPTED_BY_PRIORITY, PREEMPTED_FOR_FAIR_SHARE) and the job it makes
  // room for; empty / 0 otherwise.
  std::string preempt_reason;
  int64_t preempted_for = 0;
  int64_t created_at_ms = 0;
  int64_t admitted_at_ms = 0;
  int64_t started_at_ms = 0;
  int64_t finished_at_ms = 0;
  std::optional<int> exit_code;
};

// One line of a job's timeline (and the audit log).
struct JobEvent {
  int64_t id = 0;
  int64_t job_id = 0;
  int64_t at_ms = 0;
  std::string type;               // "state", "cancel_requested", "task_started", "task_exited", ...
  std::optional<JobState> state;  // for type "state": the new state
  std::string reason;             // a reason:: code
  std::string message;            // human detail ("task 1 on node-b exited with 3")
  std::string actor;              // user name, "scheduler", "agent:<node>", "server"
};

struct Gpu {
  int64_t id = 0;
  int index = 0;      // on its node
  std::string model;  // e.g. "H200", as NVML names it or as configured
  int64_t memory_mb = 0;
  std::string uuid;               // NVML uuid or "<node>-gpu<index>"
  std::optional<int64_t> job_id;  // the job holding an open allocation on it
  // That job's tenant: the API shows job_id only to its tenant and to
  // platform admins (others see the GPU as allocated, not by what).
  std::optional<int64_t> job_tenant_id;
  // Held by the node's resource manager for work Ferry does not own (a
  // Slurm job of another user): not free, and no job of Ferry's holds it.
  bool external = false;
};

// GPU models compare case-insensitively ("h100" is "H100"). Every comparison
// of models (scheduler, quotas, config, store, server) goes through this one
// spelling: ASCII upper case.
std::string CanonicalGpuModel(std::string_view model);

enum class NodeState { kReady, kLost };
std::string_view ToString(NodeState state);  // "READY", "LOST"

struct Node {
  int64_t id = 0;
  std::string name;  // unique across the fleet
  std::string pool;
  std::map<std::string, std::string> labels;
  double cpus = 0;
  int64_t memory_mb = 0;
  NodeState state = NodeState::kReady;
  bool drain = false;    // drained nodes get no new work; running work finishes
  std::string instance;  // random id of the agent process that registered last
  int64_t registered_at_ms = 0;
  int64_t last_heartbeat_ms = 0;
  int64_t lease_expires_at_ms = 0;
  std::vector<Gpu> gpus;
  // Set by the node's resource manager (Slurm pools): why it takes no new
  // work ("slurm: DRAIN (maintenance)", "slurm: controller unreachable");
  // empty when it may. Independent of `drain`, which is Ferry's own.
  std::string unavailable;
  // CPUs and memory the resource manager has given to work Ferry does not own.
  double external_cpus = 0;
  int64_t external_memory_mb = 0;
};

struct Pool {
  std::string name;
  int nodes = 0;
  int nodes_ready = 0;
  int gpus = 0;
  int gpus_free = 0;  // on READY, undrained nodes, without an open allocation
  std::map<std::string, int> gpus_by_model;
};

// ---- Datasets: named, versioned, immutable manifests of objects under one
// source URI, registered per tenant (POST /v1/datasets) and read by jobs'
// inputs.
struct DatasetObject {
  std::string path;  // relative to the version's source; the object's URI is source + path
  int64_t size = 0;
  std::string sha256;  // 64 lower-case hex digits
};

struct DatasetVersion {
  static constexpr size_t kMaxNameChars = 128;  // [A-Za-z0-9._-]
  static constexpr size_t kMaxObjects = 100'000;
  static constexpr size_t kMaxPathBytes = 1024;

  int64_t tenant_id = 0;
  std::string tenant;
  std::string name;
  int64_t version = 0;  // from 1, per (tenant, name)
  // Base URI ending in '/': s3://bucket/prefix/, https://host/base/,
  // http://host/base/ or file:///dir/.
  std::string source;
  std::string description;
  std::vector<DatasetObject> objects;  // sorted by path (may be empty in summaries)
  int64_t bytes = 0;                   // sum of the objects' sizes
  int64_t object_count = 0;            // objects.size() when they are loaded
  std::string digest;                  // ManifestDigest(source, objects)
  int64_t created_at_ms = 0;
  std::string created_by;  // user name
};

// "sha256:<hex>" over the canonical manifest: "ferry-manifest-v1\n", the
// source and "\n", then "<path>\t<size>\t<sha256>\n" for every object in
// path order. `sorted_objects` must already be sorted by path (bytewise).
// Thread-safe; used by the server (registration) and the agent (checking
// what it was sent).
std::string ManifestDigest(const std::string& source,
                           const std::vector<DatasetObject>& sorted_objects);

// The checks every manifest and input passes, each returning "" when
// `text` is acceptable, else what is wrong with it ("must be ...").
// A dataset or input name: [A-Za-z0-9._-], 1..max_chars, not "." or "..".
std::string CheckInputName(std::string_view text, size_t max_chars);
// A manifest path: relative, '/'-separated, no empty, "." or ".." component,
// no control characters, at most DatasetVersion::kMaxPathBytes bytes.
std::string CheckObjectPath(std::string_view text);
// 64 lower-case hex digits.
std::string CheckSha256(std::string_view text);
// A dataset source: s3://bucket/..., https://host/..., http://host/... or
// file:///..., ending in '/'.
std::string CheckDatasetSource(std::string_view text);
// One object's URI (an input's uri): the same schemes, not ending in '/'.
std::string CheckObjectUri(std::string_view text);

// The pools of these nodes, by name (what Store::ListPools answers).
std::vector<Pool> SummarisePools(const std::vector<Node>& nodes);

}  // namespace ferry::fleet
