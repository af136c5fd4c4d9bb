// Slurm as a resource manager under Ferry's scheduler: a client for one Slurm
// cluster, over slurmrestd (REST) or the command-line tools (CLI).
//
// Both clients see the same small model: nodes with their GPUs (GRES), jobs
// with a state Ferry can map, and a submission that describes a gang
// (`--nodes N --gpus-per-node G`, one task per node). The REST client probes
// which OpenAPI versions slurmrestd serves (22.05: v0.0.36-v0.0.38; 23.11 and
// later: the data_parser versions v0.0.40+) and talks the newest one it
// knows; the parsers accept the shapes of both generations. Malformed or
// unexpected JSON is an error Status, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"

namespace ferry::fleet::slurm {

// ---- Versions.

// An OpenAPI version of slurmrestd, "v0.0.<number>".
struct ApiVersion {
  int number = 0;  // 38 for v0.0.38

  std::string ToString() const { return "v0.0." + std::to_string(number); }
  // v0.0.40 and later come from Slurm's data_parser: states are lists of
  // flags, numbers are {set, infinite, number} objects, the job environment
  // is a list of "K=V" strings.
  bool data_parser() const { return number >= 40; }
  bool operator==(const ApiVersion&) const = default;
  bool operator<(const ApiVersion& other) const { return number < other.number; }
};

// The versions this client can talk, oldest first.
const std::vector<ApiVersion>& KnownApiVersions();
// "v0.0.38" or "0.0.38" -> 38; an error for anything else.
Result<ApiVersion> ParseApiVersion(std::string_view text);

// ---- Job states.

// Slurm's base job states, as Ferry needs them. kUnknown is a state this
// code does not know (a newer Slurm); callers treat it as "still running".
enum class JobState {
  kPending,
  kRunning,
  kSuspended,
  kCompleting,  // finished, epilogue still running on some node
  kCompleted,
  kFailed,
  kTimeout,
  kCancelled,
  kNodeFail,
  kPreempted,
  kOutOfMemory,
  kBootFail,
  kDeadline,
  kRequeued,  // REQUEUED, REQUEUE_HOLD, REQUEUE_FED: back to pending soon
  kUnknown,
};

// "PENDING", "RUNNING", ... (Slurm's spelling).
std::string_view ToString(JobState state);
// Slurm's state text as any version prints it: "RUNNING", "CANCELLED by 0",
// "CD" (squeue's short codes), or one flag of a v0.0.40 state list.
JobState ParseJobState(std::string_view text);
// True for the states after which Slurm runs nothing more of the job.
bool IsFinished(JobState state);

// ---- Nodes.

// One GRES entry, "gpu:h200:4" or "gpu:2(IDX:0-1)".
struct Gres {
  std::string name;  // "gpu"
  std::string type;  // "h200"; empty when untyped
  int64_t count = 0;
};
// Parses a GRES list ("gpu:h200:4,gpu:a100:2(S:0-1)", "(null)", "N/A", "")
// into its entries; "(null)" and "N/A" are empty lists.
Result<std::vector<Gres>> ParseGresList(std::string_view text);

struct Node {
  std::string name;
  // The base state in upper case ("IDLE", "MIXED", "ALLOCATED", "DOWN",
  // "FUTURE", ...) and every flag Slurm reported ("DRAIN", "NOT_RESPONDING",
  // "RESERVED", ...); older versions fold flags into the state text
  // ("idle+drain"), which is split the same way.
  std::string state;
  std::vector<std::string> state_flags;
  bool idle = false, mixed = false, allocated = false;
  bool down = false;   // DOWN or NOT_RESPONDING: nothing runs there
  bool drain = false;  // DRAIN / DRAINING / DRAINED: no new work
  std::string reason;  // why it is down or drained
  int cpus = 0;
  int alloc_cpus = 0;
  int64_t memory_mb = 0;
  int64_t alloc_memory_mb = 0;
  int gpus = 0;            // GRES gpu, all types
  std::string gpu_type;    // the type of the first gpu GRES, empty when untyped
  int gpus_allocated = 0;  // from gres_used, else from the allocated TRES
  std::vector<std::string> partitions;
  std::string address;
};

// ---- Jobs.

struct Job {
  int64_t id = 0;
  std::string name;
  std::string comment;
  JobState state = JobState::kUnknown;
  std::string state_text;  // as Slurm spelt it ("RUNNING", "PENDING,REQUEUED")
  std::string reason;      // state_reason: "Resources", "JobHeldUser", "None", ...
  // The exit status of the batch script, when it has ended: code and the
  // signal that killed it (0 when none).
  std::optional<int> exit_code;
  int exit_signal = 0;
  std::string nodes;  // Slurm host list, "n[1-4]"
  int node_count = 0;
  std::string partition, account, qos;
  std::string standard_output, standard_error;
  std::string gres_per_node;  // "gres:gpu:h200:2" / "gres/gpu:h200:2"
  // Unix seconds; 0 while unknown (a pending job's start is an estimate).
  int64_t submit_time = 0, start_time = 0, end_time = 0;
};

// Selects jobs by the tag Ferry puts in the job name and comment (e.g.
// "ferry:<job-id>:<attempt>"). Empty prefixes match everything; both set
// means both must match.
struct JobFilter {
  std::string name_prefix;
  std::string comment_prefix;
  bool Matches(const Job& job) const;
};

// A Slurm host list ("n1", "n[1-3,7],gpu-[01-02]", "a,b") as node names,
// in order; an error for a malformed list.
Result<std::vector<std::string>> ExpandHostList(std::string_view list);

// A batch job to submit: `tasks_per_node` tasks on each of `nodes` nodes
// (`--nodes N --ntasks-per-node K --gpus-per-node G`), or, with `tasks`
// set, that many tasks spread over the nodes as Slurm sees fit, each with
// `gpus_per_task` GPUs (`--ntasks T --gpus-per-task G`).
struct SubmitRequest {
  std::string name;                     // Ferry's tag
  std::string comment;                  // Ferry's tag (survives renames by admins)
  std::string partition, account, qos;  // empty: the cluster's defaults
  int nodes = 1;
  int gpus_per_node = 0;
  std::string gpu_type;  // GRES type ("h200"); empty: any
  int tasks_per_node = 1;
  int tasks = 0;                   // set: the total task count (tasks_per_node is then not sent)
  int gpus_per_task = 0;           // with `tasks`: GPUs per task instead of gpus_per_node
  int cpus_per_task = 0;           // 0: Slurm's default (1)
  int64_t memory_mb_per_node = 0;  // 0: the cluster's default
  // Nodes the job must run on (`--nodelist`, v0.0.40+'s required_nodes).
  // v0.0.36-v0.0.38 have no such field: there Slurm picks the nodes.
  std::vector<std::string> nodelist;
  int time_limit_minutes = 0;            // 0: the partition's limit
  std::string working_dir;               // required, absolute
  std::string stdout_path, stderr_path;  // Slurm patterns (%j) allowed
  // The job's whole environment (Slurm does not add the submitter's): PATH,
  // FERRY_* and whatever the command needs.
  std::map<std::string, std::string> environment;
  std::string script;  // the batch script, starting with "#!"
  bool hold = false;   // submit held (PENDING, reason JobHeldUser)
};

// ---- The client.

struct ProbeResult {
  ApiVersion version;              // what the client talks (REST); 0 for the CLI
  std::vector<ApiVersion> served;  // what slurmrestd offers (REST)
  std::string slurm_release;       // "22.05.8"
  bool controller_up = false;      // slurmctld answered a ping
};

// One Slurm cluster. Implementations are thread-safe: calls may come from
// several threads at once.
class SlurmClient {
 public:
  virtual ~SlurmClient() = default;
  // "rest unix:/run/slurmrestd.sock v0.0.38", "cli SLURM_CONF=...".
  virtual std::string Describe() const = 0;
  // Checks that the cluster answers; the REST client (re)chooses its version.
  virtual Result<ProbeResult> Probe() = 0;
  virtual Result<std::vector<Node>> ListNodes() = 0;
  // Jobs slurmctld still knows (finished ones for MinJobAge seconds).
  virtual Result<std::vector<Job>> ListJobs(const JobFilter& filter) = 0;
  // nullopt when slurmctld does not know the job (never submitted, or
  // finished longer ago than MinJobAge).
  virtual Result<std::optional<Job>> GetJob(int64_t job_id) = 0;
  // Returns the new job's id. A job submitted held is a success.
  virtual Result<int64_t> Submit(const SubmitRequest& request) = 0;
  // signal 0 cancels: Slurm sends SIGTERM, then SIGKILL after KillWait, and
  // the job ends CANCELLED. Any other signal is delivered to the job's
  // processes (the batch script included); the job ends however they react
  // (a batch script killed by SIGTERM ends FAILED). Idempotent: a finished
  // job, or one slurmctld no longer knows, is OK.
  virtual Status Cancel(int64_t job_id, int signal = 0) = 0;
};

struct RestOptions {
  // "unix:/path/to/slurmrestd.sock", "http://host:6820" or "https://...".
  std::string endpoint;
  // JWT authentication (rest_auth/jwt): sent as X-SLURM-USER-NAME and
  // X-SLURM-USER-TOKEN when set. rest_auth/local over a UNIX socket needs none.
  std::string user_name;
  std::string token;
  double timeout_s = 10;
  // Talk this version instead of probing (it must be served).
  std::optional<ApiVersion> version;
};
// Checks the options; connects lazily (the first call probes).
Result<std::unique_ptr<SlurmClient>> MakeRestClient(RestOptions options);

struct CliOptions {
  // Where sbatch, squeue, sinfo, scancel and scontrol live; empty: search PATH.
  std::string bin_dir;
  // SLURM_CONF for the tools; empty: inherit.
  std::string slurm_conf;
  double timeout_s = 30;  // per command; killed (SIGKILL) past it
};
Result<std::unique_ptr<SlurmClient>> MakeCliClient(CliOptions options);

}  // namespace ferry::fleet::slurm
