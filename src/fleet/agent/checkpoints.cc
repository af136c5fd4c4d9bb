// Checkpoints (checkpoints.h).
#include "fleet/agent/checkpoints.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ferry/base/hash.h"
#include "ferry/fleet/model.h"

namespace ferry::fleet::agent_internal {
namespace {

constexpr size_t kMaxManifestBytes = size_t{16} << 20;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<std::string> HashFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path);
  Sha256Stream hash;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hash.Update(std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
  }
  return hash.FinishHex();
}

}  // namespace

Checkpoints::Checkpoints(std::string work_dir, const ObjectFetcher* fetcher, ContentCache* cache,
                         std::function<void()> wake)
    : work_dir_(std::move(work_dir)), fetcher_(fetcher), cache_(cache), wake_(std::move(wake)) {}

Checkpoints::~Checkpoints() {
  for (auto& [key, task] : tasks_) {
    if (task->upload.joinable()) task->upload.join();
  }
}

std::string Checkpoints::Dir(int64_t job, int task) const {
  return work_dir_ + "/checkpoints/" + std::to_string(job) + "-" + std::to_string(task);
}

std::string Checkpoints::OutputsDir(const TaskRef& ref) const {
  return work_dir_ + "/outputs/" + std::to_string(ref.job_id) + "-" + std::to_string(ref.task) +
         "-" + std::to_string(ref.attempt);
}

std::string Checkpoints::DirOf(const Task& task) const {
  return task.outputs ? OutputsDir({task.job, task.task, task.attempt}) : Dir(task.job, task.task);
}

std::string Checkpoints::Prefix(const std::string& uri, int64_t job, int task) {
  return uri + std::to_string(job) + "/task-" + std::to_string(task) + "/";
}

Status Checkpoints::Restore(const std::string& tenant, const std::string& uri, int64_t job,
                            int task, std::string* summary) {
  const std::string dir = Dir(job, task);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return Status::IOError("cannot create " + dir + ": " + error.message());
  const std::string prefix = Prefix(uri, job, task);
  FERRY_ASSIGN_OR_RAISE(std::optional<std::string> text,
                        fetcher_->ReadSmall(tenant, prefix + "MANIFEST.json", kMaxManifestBytes));
  if (!text) {
    *summary = "task " + std::to_string(task) + ": no checkpoint yet";
    return Status::OK();
  }
  const nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, false);
  if (!manifest.is_object() || !manifest.contains("files") || !manifest["files"].is_array()) {
    return Status::Invalid(prefix + "MANIFEST.json is not a checkpoint manifest");
  }
  const std::string holder = "checkpoint-" + std::to_string(job) + "-" + std::to_string(task);
  std::set<std::string> keep;
  int64_t bytes = 0;
  Status status;
  for (const auto& file : manifest["files"]) {
    StagedObject object;
    object.path = file.value("path", "");
    object.sha256 = file.value("sha256", "");
    object.size = file.value("size", int64_t{-1});
    object.uri = prefix + "objects/" + object.sha256;
    if (!CheckObjectPath(object.path).empty() || !CheckSha256(object.sha256).empty()) {
      status = Status::Invalid(prefix + "MANIFEST.json: a bad entry '" + object.path + "'");
      break;
    }
    Result<ContentCache::Acquired> got =
        cache_->Acquire(tenant, object, holder, *fetcher_, nullptr);
    if (!got.ok()) {
      status = got.status();
      break;
    }
    // A writable copy (the task goes on writing here), swapped in whole.
    const std::filesystem::path target = std::filesystem::path(dir) / object.path;
    std::filesystem::create_directories(target.parent_path(), error);
    const std::filesystem::path tmp = target.string() + ".ferry-restore";
    std::filesystem::copy_file(got->path, tmp, std::filesystem::copy_options::overwrite_existing,
                               error);
    if (!error) std::filesystem::permissions(tmp, std::filesystem::perms(0644), error);
    if (!error) std::filesystem::rename(tmp, target, error);
    if (error) {
      status = Status::IOError("cannot restore " + target.string() + ": " + error.message());
      break;
    }
    keep.insert(target.lexically_normal().string());
    bytes += got->size;
  }
  cache_->Release(holder);
  FERRY_RETURN_NOT_OK(status);
  // What the checkpoint does not hold goes (the directory is the checkpoint).
  std::vector<std::filesystem::path> extra;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, error)) {
    if (!entry.is_directory() && keep.count(entry.path().lexically_normal().string()) == 0) {
      extra.push_back(entry.path());
    }
  }
  for (const auto& path : extra) std::filesystem::remove(path, error);
  *summary = "task " + std::to_string(task) + ": restored checkpoint " +
             std::to_string(manifest.value("seq", int64_t{0})) + " of attempt " +
             std::to_string(manifest.value("attempt", 0)) + " (" + std::to_string(keep.size()) +
             " files, " + FormatBytes(bytes) + ")";
  return Status::OK();
}

void Checkpoints::Started(const TaskAssignment& assignment) {
  for (const bool outputs : {false, true}) {
    const std::string& uri = outputs ? assignment.spec.outputs.uri : assignment.spec.checkpoint.uri;
    if (uri.empty()) continue;
    auto task = std::make_unique<Task>();
    task->outputs = outputs;
    task->tenant = assignment.tenant;
    task->uri = uri;
    task->job = assignment.ref.job_id;
    task->task = assignment.ref.task;
    task->attempt = assignment.ref.attempt;
    // Outputs go once, at the end.
    task->interval =
        std::chrono::seconds(outputs ? 0 : assignment.spec.checkpoint.interval_seconds);
    task->next = std::chrono::steady_clock::now() + task->interval;
    tasks_[KeyOf(assignment.ref, outputs)] = std::move(task);
  }
}

bool Checkpoints::Ended(const TaskRef& ref) {
  std::vector<Task*> ended;
  for (const bool outputs : {false, true}) {
    auto it = tasks_.find(KeyOf(ref, outputs));
    if (it != tasks_.end() && !it->second->ended) ended.push_back(it->second.get());
  }
  if (ended.empty()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finals_left_[{ref.job_id, ref.task, ref.attempt}] = static_cast<int>(ended.size());
  }
  for (Task* task : ended) {
    task->ended = true;
    task->final_pending = true;
    if (!task->busy.load()) {
      task->final_pending = false;
      StartUpload(task);
    }
  }
  return true;
}

void Checkpoints::Tick() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    Task& task = *it->second;
    if (task.ended && !task.busy.load()) {
      if (task.final_pending) {  // a periodic upload was in flight when the task ended
        task.final_pending = false;
        StartUpload(&task);
        ++it;
        continue;
      }
      if (task.upload.joinable()) task.upload.join();
      it = tasks_.erase(it);
      continue;
    }
    if (!task.ended && task.interval.count() > 0 && now >= task.next && !task.busy.load()) {
      task.next = now + task.interval;
      StartUpload(&task);
    }
    ++it;
  }
}

void Checkpoints::StartUpload(Task* task) {
  // One upload at a time per task: the final one waits for a periodic one.
  if (task->upload.joinable()) task->upload.join();  // it has ended (busy is false)
  task->busy = true;
  const bool final = task->ended;
  task->upload = std::thread([this, task, final] {
    Status status = UploadNow(task);
    // A final upload is the last chance: tried again after 1 s and 2 s.
    for (int retry = 1; final && !status.ok() && retry <= 2; ++retry) {
      std::this_thread::sleep_for(std::chrono::seconds(retry));
      status = UploadNow(task);
    }
    const std::string what = task->outputs ? "outputs" : "checkpoint";
    if (final && task->outputs && status.ok()) {
      // Uploaded: the node keeps no copy.
      std::error_code ignored;
      std::filesystem::remove_all(DirOf(*task), ignored);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!status.ok()) {
        errors_.push_back(
            "job " + std::to_string(task->job) + " task " + std::to_string(task->task) + ": " +
            what + " upload failed: " + status.message() +
            (final && task->outputs ? " (the files stay in " + DirOf(*task) + ")" : ""));
      }
      if (final) {
        const std::tuple<int64_t, int, int> ref{task->job, task->task, task->attempt};
        if (!status.ok()) {
          std::string& error = final_errors_[ref];
          error += (error.empty() ? "" : "; ") + what + " upload failed: " + status.message();
        }
        auto left = finals_left_.find(ref);
        if (left == finals_left_.end() || --left->second <= 0) {
          if (left != finals_left_.end()) finals_left_.erase(left);
          std::string error;
          if (auto failed = final_errors_.find(ref); failed != final_errors_.end()) {
            error = std::move(failed->second);
            final_errors_.erase(failed);
          }
          finished_.push_back({TaskRef{task->job, task->task, task->attempt}, std::move(error)});
        }
      }
    }
    task->busy = false;
    if (wake_) wake_();
  });
}

Status Checkpoints::UploadNow(Task* task) {
  const std::string dir = DirOf(*task);
  const std::string prefix = Prefix(task->uri, task->job, task->task);
  nlohmann::json files = nlohmann::json::array();
  std::error_code error;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, error)) {
    if (entry.is_regular_file() && !entry.is_symlink() &&
        entry.path().string().find(".ferry-restore") == std::string::npos) {
      paths.push_back(entry.path());
    }
  }
  if (error) return Status::IOError("cannot read " + dir + ": " + error.message());
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    FERRY_ASSIGN_OR_RAISE(std::string digest, HashFile(path.string()));
    if (task->sent.count(digest) == 0) {
      std::string sent;
      FERRY_RETURN_NOT_OK(
          fetcher_->Upload(task->tenant, prefix + "objects/" + digest, path.string(), &sent));
      if (sent != digest) {
        // The file changed while it was read: this round is not a checkpoint.
        return Status::Invalid(path.string() + " changed while it was uploaded; next round");
      }
      task->sent.insert(digest);
    }
    files.push_back({{"path", std::filesystem::relative(path, dir).string()},
                     {"size", static_cast<int64_t>(std::filesystem::file_size(path, error))},
                     {"sha256", digest}});
  }
  const nlohmann::json manifest = {{"job", task->job},         {"task", task->task},
                                   {"attempt", task->attempt}, {"seq", ++task->seq},
                                   {"at_ms", NowMs()},         {"files", std::move(files)}};
  const std::string local = dir + ".manifest";
  {
    std::ofstream out(local, std::ios::binary | std::ios::trunc);
    out << manifest.dump();
    if (!out) return Status::IOError("cannot write " + local);
  }
  std::string ignored;
  Status status = fetcher_->Upload(task->tenant, prefix + "MANIFEST.json", local, &ignored);
  std::filesystem::remove(local, error);
  return status;
}

std::vector<std::pair<TaskRef, std::string>> Checkpoints::TakeFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<TaskRef, std::string>> out;
  out.swap(finished_);
  return out;
}

std::vector<std::string> Checkpoints::TakeErrors() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  out.swap(errors_);
  return out;
}

}  // namespace ferry::fleet::agent_internal
