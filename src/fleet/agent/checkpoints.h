// Checkpoints of the tasks on this node (docs/fleet-staging.md#checkpoints):
// each task with a `checkpoint` in its spec writes to its own directory
// (FERRY_CHECKPOINT_DIR, <work-dir>/checkpoints/<job>-<task>), which is
// uploaded to <uri><job>/task-<task>/ every interval and when the task ends:
// the files as objects named by their SHA-256 under objects/ (unchanged files
// are not sent again), then MANIFEST.json listing them, written last, so a
// checkpoint exists only once whole. A new attempt restores the last
// manifest's files (verified through the node cache) before it starts.
// Outputs (docs/fleet-staging.md#outputs) go the same way, once, when the
// task ends: FERRY_OUTPUTS_DIR (<work-dir>/outputs/<job>-<task>-<attempt>,
// empty at the start) to the outputs uri; never restored.
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
#include <utility>
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
  std::string OutputsDir(const TaskRef& ref) const;
  // The object-store prefix of one task's checkpoints.
  static std::string Prefix(const std::string& uri, int64_t job, int task);

  // Makes the task's directory hold the last checkpoint (or leaves it as it
  // is when none was written yet). Thread-safe; called while staging.
  Status Restore(const std::string& tenant, const std::string& uri, int64_t job, int task,
                 std::string* summary);

  // A task with checkpoints started: periodic uploads begin.
  void Started(const TaskAssignment& assignment);
  // The task ended: its final uploads start (checkpoint and outputs). True
  // when its exit report must wait for them (TakeFinished hands the ref back
  // once both are done).
  bool Ended(const TaskRef& ref);
  // Tasks whose final uploads are done, each with what failed ("" when
  // nothing did) for its exit report.
  std::vector<std::pair<TaskRef, std::string>> TakeFinished();
  // Starts the periodic uploads that are due.
  void Tick();
  // Messages of uploads that failed since the last call (for the agent log).
  std::vector<std::string> TakeErrors();

 private:
  struct Task {
    bool outputs = false;  // the outputs directory, not the checkpoint
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
  std::string DirOf(const Task& task) const;
  static std::tuple<int64_t, int, int, bool> KeyOf(const TaskRef& ref, bool outputs) {
    return {ref.job_id, ref.task, ref.attempt, outputs};
  }
  std::map<std::tuple<int64_t, int, int, bool>, std::unique_ptr<Task>> tasks_;
  std::mutex mu_;                                             // finished_, errors_, finals_left_
  std::map<std::tuple<int64_t, int, int>, int> finals_left_;  // final uploads in flight per task
  std::vector<std::pair<TaskRef, std::string>> finished_;
  std::map<std::tuple<int64_t, int, int>, std::string> final_errors_;
  std::vector<std::string> errors_;
};

}  // namespace ferry::fleet::agent_internal
