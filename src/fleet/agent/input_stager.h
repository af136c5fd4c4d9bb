// The agent's stage-in: an assignment whose job declares inputs is held
// while its inputs are fetched into the node cache and laid out under
// <work-dir>/inputs/<job>-<attempt>; the tasks of one attempt on this node
// share one staging. Driven from the agent's sync loop (not thread-safe);
// the fetching runs on a thread per attempt, which wakes the loop when done.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/staging.h"
#include "ferry/fleet/store.h"
#include "fleet/agent/checkpoints.h"
#include "fleet/agent/container.h"

namespace ferry::fleet::agent_internal {

class InputStager {
 public:
  struct Options {
    std::string work_dir;   // absolute; staged trees go to <work_dir>/inputs
    std::string cache_dir;  // empty: <work_dir>/cache
    int64_t cache_quota_bytes = 10LL << 30;
    std::string storage_config;  // YAML (staging.h); empty: no S3, no file://
    std::string node_name;       // which of a gang's tasks run here (checkpoint restores)
    // The Ferry server (code bundles are fetched from it with the agent's token).
    std::string server_url;
    std::string server_token;
    std::string server_ca_file;
    std::string git = "git";      // the git program (code from a repository); found in PATH
    ContainerOptions containers;  // how images are pulled (jobs with an `image`)
    StageOptions stage;
    std::function<void()> wake;  // called from a staging thread when it ends
  };
  static Result<std::unique_ptr<InputStager>> Open(Options options);
  ~InputStager();  // cancels and joins staging threads
  InputStager(const InputStager&) = delete;
  InputStager& operator=(const InputStager&) = delete;

  // A task to launch now, with FERRY_INPUTS_DIR (empty for a job without
  // inputs) and FERRY_CODE_DIR (empty for a job without code).
  struct Ready {
    TaskAssignment assignment;
    std::string inputs_dir;
    std::string code_dir;
  };
  // Takes an assignment from the server. A job without inputs is ready at
  // once; otherwise it is held (a `staging` report is queued) until Poll
  // hands it back staged, or reports its staging failed. Repeats of a held
  // or launched task are ignored.
  void Offer(TaskAssignment assignment, std::vector<Ready>* ready);
  // Attempts whose staging ended: their tasks to launch (each with a
  // `staged` report) or `staging_failed` reports.
  void Poll(std::vector<Ready>* ready);
  std::vector<TaskReport> TakeReports();
  // The server stopped a task: a held one is dropped (and its staging
  // cancelled when no task of the attempt is left waiting).
  void Stop(const TaskRef& ref);
  // Tasks held while staging (the agent reports them as running).
  std::vector<TaskRef> Held() const;
  // Releases the cache pins and staged trees of attempts none of whose
  // launched tasks is in `running` any more.
  void Sweep(const std::vector<TaskRef>& running);

  // Prefetch while pending (docs/fleet-staging.md): the inputs, code
  // bundle and image of a job the server holds this node for, fetched into
  // the cache (the image: pulled into podman's store) before the job is
  // admitted.
  struct PrefetchOrder {
    int64_t job_id = 0;
    int attempt = 1;
    std::string tenant;
    std::vector<StagedInput> inputs;
    std::string code_bundle;  // "sha256:<hex>", or empty
    int64_t code_bytes = 0;
    std::string image;         // the job's image reference, or empty
    std::string image_digest;  // what the server resolved it to
    bool empty() const { return inputs.empty() && code_bundle.empty() && image.empty(); }
  };
  // The server's orders for this node, all of them (every sync reply
  // carries the full list). A new order starts fetching on a thread of its
  // own, its objects pinned for "prefetch-<job>-<attempt>" so that eviction
  // leaves them while the order stands. An order no longer listed is
  // cancelled and unpinned, unless that attempt is staging here now (the
  // fetch then runs to its end: the staging shares its downloads).
  // Returns the orders it started (job id, attempt).
  std::vector<std::pair<int64_t, int>> Prefetch(std::vector<PrefetchOrder> orders);
  // One report per prefetch that ended (not cancelled): {"job_id",
  // "attempt", "message"} for the sync's "prefetched".
  std::vector<nlohmann::json> TakePrefetchReports();
  // Prefetches still fetching.
  size_t PrefetchesInFlight() const;

  CacheStats Stats() const { return cache_->Stats(); }
  Checkpoints* checkpoints() { return checkpoints_.get(); }

  // What the node cache holds of the inputs staged here lately (the last
  // kMaxKnownInputs), for the server's locality scoring: the cache's totals
  // and, per input (tenant and digest), the bytes present of its bytes in
  // all. Empty when nothing changed since the last report and it is younger
  // than kReportEvery, unless `force`.
  static constexpr size_t kMaxKnownInputs = 256;
  static constexpr std::chrono::seconds kReportEvery{30};
  std::optional<nlohmann::json> CacheReport(bool force);

 private:
  struct Attempt {
    std::string tenant;
    std::string holder;    // the cache's name for this attempt's pins
    std::string dir;       // the staged tree
    std::string code_dir;  // the job's code, read-only; empty: none
    size_t inputs = 0;
    std::vector<TaskAssignment> waiting;
    std::vector<TaskRef> launched;
    std::thread thread;
    std::atomic<bool> cancel{false};
    std::atomic<bool> finished{false};
    Result<StageResult> result = Status::OK();
    std::string restored;  // what the checkpoint restore did, for the staged report
    std::string code;      // what the code staging did, for the staged report
    std::string image;     // what the image pull did, for the staged report
    bool ended = false;    // finished and joined; result is final
    std::chrono::steady_clock::time_point ended_at;
  };
  using Key = std::pair<int64_t, int>;  // job id, attempt

  struct Ahead {
    PrefetchOrder order;
    std::string holder;
    bool wanted = true;  // still listed by the server
    std::thread thread;
    std::atomic<bool> cancel{false};
    std::atomic<bool> finished{false};
    Status result;
    std::vector<std::string> done;  // what it fetched, for the report
    bool joined = false;
  };
  // The prefetch thread's work: inputs, then the code bundle, then the image.
  void RunPrefetch(Ahead* ahead);
  // Joins prefetches that ended (a report each unless cancelled) and drops
  // those no longer wanted.
  void ReapPrefetches();

  explicit InputStager(Options options);
  void Queue(const TaskRef& ref, TaskReport::Kind kind, std::string message);
  static std::string StagedMessage(const Attempt& attempt);
  // Lays out the job's code at attempt->code_dir (a bundle through the
  // cache, or a clone of a git commit); the summary goes to *summary.
  Status StageCode(Attempt* attempt, const JobSpec::Code& code, int64_t job, std::string* summary);
  // A code bundle into the node cache, pinned for `holder` (fetched from the
  // server when missing, verified, retried with the staging's backoff).
  Result<ContentCache::Acquired> AcquireBundle(const std::string& tenant, const JobSpec::Code& code,
                                               int64_t job, const std::string& holder,
                                               std::atomic<bool>* cancel);
  Ready ReadyOf(const Attempt& attempt, TaskAssignment assignment) const;
  // Pulls the job's image (by digest) so the task does not spend its time on it.
  Status PullImage(std::atomic<bool>* cancel, const JobSpec& spec, std::string* summary);
  static bool Contains(const std::vector<TaskRef>& refs, const TaskRef& ref);

  Options options_;
  std::unique_ptr<ObjectFetcher> fetcher_;
  std::unique_ptr<ContentCache> cache_;
  std::unique_ptr<Checkpoints> checkpoints_;  // uses the two above
  std::map<Key, std::unique_ptr<Attempt>> attempts_;
  std::map<Key, std::unique_ptr<Ahead>> ahead_;
  std::vector<nlohmann::json> prefetch_reports_;
  std::vector<TaskReport> reports_;
  struct KnownInput {
    std::vector<StagedObject> objects;
    int64_t total = 0;
    uint64_t last_use = 0;
  };
  std::map<std::pair<std::string, std::string>, KnownInput> known_;  // (tenant, digest)
  uint64_t known_clock_ = 0;
  uint64_t reported_generation_ = ~uint64_t{0};
  uint64_t reported_known_ = ~uint64_t{0};
  std::chrono::steady_clock::time_point reported_at_;
};

}  // namespace ferry::fleet::agent_internal
