// Checkpoints of the tasks on this node (docs/fleet-staging.md#checkpoints):
// each task with a `checkpoint` in its spec writes to its own directory
// (FERRY_CHECKPOINT_DIR, <work-dir>/checkpoints/<job>-<task>), which is
// uploaded to <uri><job>/task-<task>/ every interval and when the task ends:
// the files as objects named by their SHA-256 under objects/ (unchanged files
// are not sent again), then MANIFEST.json listing them, written last, so a
// checkpoint exists only once whole. A new attempt restores the last
// manifest's files (verified through the node cache) before it starts.
// Driven from the agent's sync loop; uploads run on their own threads.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/staging.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet::agent_internal {

class Checkpoints {
 public:
  Checkpoints(std::string work_dir, const ObjectFetcher* fetcher, ContentCache* cache,
              std::function<void()> wake);
  ~Checkpoints();  // waits for uploads in flight
  Checkpoints(const Checkpoints&) = delete;
  Checkpoints& operator=(const Checkpoints&) = delete;

  std::string Dir(int64_t job, int task) const;
  // The object-store prefix of one task's checkpoints.
  static std::string Prefix(const std::string& uri, int64_t job, int task);

  // Makes the task's directory hold the last checkpoint (or leaves it as it
  // is when none was written yet). Thread-safe; called while staging.
  Status Restore(const std::string& tenant, const std::string& uri, int64_t job, int task,
                 std::string* summary);

  // A task with checkpoints started: periodic uploads begin.
  void Started(const TaskAssignment& assignment);
  // The task ended: its final upload starts. True when its exit report must
  // wait for it (TakeFinished hands the ref back).
  bool Ended(const TaskRef& ref);
  std::vector<TaskRef> TakeFinished();
  // Starts the periodic uploads that are due.
  void Tick();
  // Messages of uploads that failed since the last call (for the agent log).
  std::vector<std::string> TakeErrors();

 private:
  struct Task {
    std::string tenant;
    std::string uri;
    int64_t job = 0;
    int task = 0;
    int attempt = 0;
    std::chrono::seconds interval{0};
    std::chrono::steady_clock::time_point next;
    std::thread upload;
    std::atomic<bool> busy{false};
    bool ended = false;
    bool final_pending = false;  // the final upload waits for a periodic one
    int64_t seq = 0;
    std::set<std::string> sent;  // digests already under objects/
  };
  void StartUpload(Task* task);
  Status UploadNow(Task* task);

  std::string work_dir_;
  const ObjectFetcher* fetcher_;
  ContentCache* cache_;
  std::function<void()> wake_;
  static std::tuple<int64_t, int, int> KeyOf(const TaskRef& ref) {
    return {ref.job_id, ref.task, ref.attempt};
  }
  std::map<std::tuple<int64_t, int, int>, std::unique_ptr<Task>> tasks_;
  std::mutex mu_;  // finished_, errors_
  std::vector<TaskRef> finished_;
  std::vector<std::string> errors_;
};

}  // namespace ferry::fleet::agent_internal
