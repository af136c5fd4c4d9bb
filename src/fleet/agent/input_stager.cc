// InputStager (input_stager.h).
#include "fleet/agent/input_stager.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "ferry/fleet/code_bundle.h"
#include "fleet/slurm/run_command.h"

namespace ferry::fleet::agent_internal {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How long a failed staging's answer is kept for repeats of its assignment.
constexpr auto kKeepFailed = std::chrono::seconds(60);

}  // namespace

InputStager::InputStager(Options options) : options_(std::move(options)) {}

InputStager::~InputStager() {
  for (auto& [key, attempt] : attempts_) attempt->cancel = true;
  for (auto& [key, ahead] : ahead_) ahead->cancel = true;
  for (auto& [key, attempt] : attempts_) {
    if (attempt->thread.joinable()) attempt->thread.join();
  }
  for (auto& [key, ahead] : ahead_) {
    if (ahead->thread.joinable()) ahead->thread.join();
  }
}

Result<std::unique_ptr<InputStager>> InputStager::Open(Options options) {
  StorageConfig storage;
  if (!options.storage_config.empty()) {
    FERRY_ASSIGN_OR_RAISE(storage, LoadStorageConfig(options.storage_config));
  }
  storage.server_url = options.server_url;
  storage.server_token = options.server_token;
  storage.server_ca_file = options.server_ca_file;
  if (options.cache_dir.empty()) options.cache_dir = options.work_dir + "/cache";
  std::unique_ptr<InputStager> stager(new InputStager(std::move(options)));
  stager->fetcher_ = std::make_unique<ObjectFetcher>(std::move(storage));
  FERRY_ASSIGN_OR_RAISE(stager->cache_, ContentCache::Open({stager->options_.cache_dir,
                                                            stager->options_.cache_quota_bytes}));
  stager->checkpoints_ =
      std::make_unique<Checkpoints>(stager->options_.work_dir, stager->fetcher_.get(),
                                    stager->cache_.get(), stager->options_.wake);
  // Trees a previous agent left: its tasks died with it.
  std::error_code ignored;
  for (const char* kind : {"/inputs", "/code", "/outputs"}) {
    const std::string trees = stager->options_.work_dir + kind;
    if (!std::filesystem::exists(trees, ignored)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(trees, ignored)) {
      RemoveStagedTree(entry.path().string());
    }
  }
  return stager;
}

bool InputStager::Contains(const std::vector<TaskRef>& refs, const TaskRef& ref) {
  return std::find(refs.begin(), refs.end(), ref) != refs.end();
}

void InputStager::Queue(const TaskRef& ref, TaskReport::Kind kind, std::string message) {
  TaskReport report;
  report.ref = ref;
  report.kind = kind;
  report.message = std::move(message);
  report.at_ms = NowMs();
  reports_.push_back(std::move(report));
}

void InputStager::Offer(TaskAssignment assignment, std::vector<Ready>* ready) {
  if (assignment.inputs.empty() && assignment.spec.checkpoint.uri.empty() &&
      assignment.spec.code.empty() && assignment.spec.image.empty()) {
    ready->push_back({std::move(assignment), std::string(), std::string()});
    return;
  }
  const TaskRef ref = assignment.ref;
  const Key key{ref.job_id, ref.attempt};
  auto it = attempts_.find(key);
  if (it != attempts_.end()) {
    Attempt& attempt = *it->second;
    bool known = Contains(attempt.launched, ref);
    for (const auto& waiting : attempt.waiting) known = known || waiting.ref == ref;
    if (known) return;
    if (attempt.ended && attempt.result.ok()) {
      // Another task of an attempt staged here already: it shares the tree.
      Queue(ref, TaskReport::Kind::kStaged, StagedMessage(attempt));
      attempt.launched.push_back(ref);
      ready->push_back(ReadyOf(attempt, std::move(assignment)));
      return;
    }
    if (!attempt.ended) {
      Queue(ref, TaskReport::Kind::kStaging, "staging with the other tasks of this attempt");
      attempt.waiting.push_back(std::move(assignment));
      return;
    }
    // Its staging failed before: report that again for this task.
    Queue(ref, TaskReport::Kind::kStagingFailed, attempt.result.status().message());
    return;
  }
  auto attempt = std::make_unique<Attempt>();
  attempt->tenant = assignment.tenant;
  attempt->holder = "job-" + std::to_string(ref.job_id) + "-" + std::to_string(ref.attempt);
  attempt->dir = options_.work_dir + "/inputs/" + std::to_string(ref.job_id) + "-" +
                 std::to_string(ref.attempt);
  attempt->inputs = assignment.inputs.size();
  if (!assignment.spec.code.empty()) {
    attempt->code_dir = options_.work_dir + "/code/" + std::to_string(ref.job_id) + "-" +
                        std::to_string(ref.attempt);
  }
  const JobSpec::Code code = assignment.spec.code;
  JobSpec image_spec;  // what the pull needs of the spec
  image_spec.image = assignment.spec.image;
  image_spec.image_digest = assignment.spec.image_digest;
  int64_t objects = 0;
  int64_t bytes = 0;
  for (const StagedInput& input : assignment.inputs) {
    for (const StagedObject& object : input.objects) {
      ++objects;
      bytes += std::max<int64_t>(object.size, 0);
    }
  }
  {
    std::vector<StagedObject> all;
    for (const StagedInput& input : assignment.inputs) {
      all.insert(all.end(), input.objects.begin(), input.objects.end());
    }
    std::vector<std::string> parts;
    if (attempt->inputs > 0) {
      parts.push_back("fetching " + std::to_string(attempt->inputs) +
                      (attempt->inputs == 1 ? " input (" : " inputs (") + std::to_string(objects) +
                      (objects == 1 ? " object, " : " objects, ") + FormatBytes(bytes) + ", " +
                      FormatBytes(cache_->PresentBytes(attempt->tenant, all)) +
                      " already in the node cache)");
    }
    if (!code.bundle.empty())
      parts.push_back("fetching the code bundle (" + FormatBytes(code.bytes) + ")");
    if (!code.git.empty()) parts.push_back("cloning " + code.git + " at " + code.commit);
    if (!assignment.spec.image.empty()) parts.push_back("pulling " + ImageToRun(assignment.spec));
    if (!assignment.spec.checkpoint.uri.empty()) parts.push_back("restoring the last checkpoint");
    std::string message;
    for (const std::string& part : parts) message += (message.empty() ? "" : ", ") + part;
    Queue(ref, TaskReport::Kind::kStaging, message);
  }
  for (const StagedInput& input : assignment.inputs) {
    if (input.digest.empty()) continue;
    KnownInput& known = known_[{attempt->tenant, input.digest}];
    if (known.objects.empty()) {
      known.objects = input.objects;
      for (const StagedObject& object : input.objects)
        known.total += std::max<int64_t>(object.size, 0);
    }
    known.last_use = ++known_clock_;
  }
  while (known_.size() > kMaxKnownInputs) {
    auto oldest = std::min_element(known_.begin(), known_.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    known_.erase(oldest);
  }
  std::vector<StagedInput> inputs = assignment.inputs;
  // The checkpoints to restore: one per task of the attempt on this node.
  std::vector<int> local_tasks;
  for (size_t i = 0; i < assignment.gang_nodes.size(); ++i) {
    if (assignment.gang_nodes[i] == options_.node_name) local_tasks.push_back(static_cast<int>(i));
  }
  if (local_tasks.empty()) local_tasks.push_back(ref.task);
  const std::string checkpoint_uri =
      assignment.spec.checkpoint.uri.empty() ? std::string() : assignment.spec.checkpoint.uri;
  attempt->waiting.push_back(std::move(assignment));
  Attempt* raw = attempt.get();
  attempt->thread = std::thread([this, raw, inputs = std::move(inputs), local_tasks, checkpoint_uri,
                                 code, image_spec, job = ref.job_id] {
    raw->result = StageResult{};
    if (!inputs.empty()) {
      raw->result = StageInputs(cache_.get(), *fetcher_, raw->tenant, raw->holder, inputs, raw->dir,
                                options_.stage, &raw->cancel);
    }
    if (raw->result.ok() && !image_spec.image.empty()) {
      Status pulled = PullImage(&raw->cancel, image_spec, &raw->image);
      if (!pulled.ok()) {
        raw->result = pulled;
        cache_->Release(raw->holder);
        RemoveStagedTree(raw->dir);
      }
    }
    if (raw->result.ok() && !code.empty()) {
      Status staged = StageCode(raw, code, job, &raw->code);
      if (!staged.ok()) {
        raw->result = staged.WithPrefix("code: ");
        cache_->Release(raw->holder);
        RemoveStagedTree(raw->dir);
      }
    }
    for (size_t i = 0; raw->result.ok() && !checkpoint_uri.empty() && i < local_tasks.size(); ++i) {
      std::string summary;
      Status restored;
      int64_t backoff = options_.stage.backoff_ms;
      for (int attempt = 1;; ++attempt) {
        restored =
            checkpoints_->Restore(raw->tenant, checkpoint_uri, job, local_tasks[i], &summary);
        if (restored.ok() || raw->cancel.load() || attempt >= options_.stage.attempts) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
        backoff = std::min(backoff * 2, options_.stage.max_backoff_ms);
      }
      if (!restored.ok()) {
        raw->result =
            restored.WithPrefix("checkpoint of task " + std::to_string(local_tasks[i]) + ": ");
        cache_->Release(raw->holder);
        RemoveStagedTree(raw->dir);
        if (!raw->code_dir.empty()) RemoveStagedTree(raw->code_dir);
        break;
      }
      raw->restored += (raw->restored.empty() ? "" : "; ") + summary;
    }
    raw->finished = true;
    if (options_.wake) options_.wake();
  });
  attempts_.emplace(key, std::move(attempt));
}

InputStager::Ready InputStager::ReadyOf(const Attempt& attempt, TaskAssignment assignment) const {
  return {std::move(assignment), attempt.inputs > 0 ? attempt.dir : std::string(),
          attempt.code_dir};
}

Status InputStager::PullImage(std::atomic<bool>* cancel, const JobSpec& spec,
                              std::string* summary) {
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::string> argv = PullArgv(options_.containers, spec);
  FERRY_ASSIGN_OR_RAISE(argv[0], FindProgram(argv[0]));
  // podman needs the agent's environment (HOME, XDG_RUNTIME_DIR, CONTAINERS_CONF).
  const std::map<std::string, std::string> env = ProcessEnvironment();
  Status status;
  int64_t backoff = options_.stage.backoff_ms;
  for (int tries = 1;; ++tries) {
    Result<slurm::internal::CommandResult> done = slurm::internal::RunCommand(argv, env, "", 1800);
    if (!done.ok()) {
      status = done.status();
    } else if (done->exit_code != 0) {
      std::string err = done->err;
      while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
      if (err.size() > 400) err = err.substr(0, 400) + "...";
      status = Status::IOError("podman pull " + argv.back() + " failed" +
                               (err.empty() ? "" : ": " + err));
    } else {
      status = Status::OK();
    }
    if (status.ok() || cancel->load() || tries >= options_.stage.attempts) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
    backoff = std::min(backoff * 2, options_.stage.max_backoff_ms);
  }
  FERRY_RETURN_NOT_OK(status);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - started)
                      .count();
  *summary = "image " + argv.back() + " pulled in " + std::to_string(ms / 1000) + "." +
             std::to_string(ms % 1000 / 100) + " s";
  return Status::OK();
}

Result<ContentCache::Acquired> InputStager::AcquireBundle(const std::string& tenant,
                                                          const JobSpec::Code& code, int64_t job,
                                                          const std::string& holder,
                                                          std::atomic<bool>* cancel) {
  if (options_.server_url.empty()) return Status::Invalid("no server URL to fetch a bundle from");
  std::string base = options_.server_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  StagedObject object;
  object.path = "bundle.tar.gz";
  object.uri = base + "/v1/agent/code/" + code.bundle + "?job=" + std::to_string(job);
  object.size = code.bytes > 0 ? code.bytes : -1;
  object.sha256 = code.bundle.substr(7);
  // Through the node cache, like an input: verified, shared, resumed.
  Result<ContentCache::Acquired> acquired = Status::OK();
  int64_t backoff = options_.stage.backoff_ms;
  for (int tries = 1;; ++tries) {
    acquired = cache_->Acquire(tenant, object, holder, *fetcher_, cancel);
    if (acquired.ok() || cancel->load() || tries >= options_.stage.attempts) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
    backoff = std::min(backoff * 2, options_.stage.max_backoff_ms);
  }
  if (!acquired.ok()) return acquired.status().WithPrefix("bundle " + code.bundle + ": ");
  return acquired;
}

Status InputStager::StageCode(Attempt* attempt, const JobSpec::Code& code, int64_t job,
                              std::string* summary) {
  const auto started = std::chrono::steady_clock::now();
  auto took = [&] {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - started)
                        .count();
    return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + " s";
  };
  if (!code.bundle.empty()) {
    FERRY_ASSIGN_OR_RAISE(
        ContentCache::Acquired acquired,
        AcquireBundle(attempt->tenant, code, job, attempt->holder, &attempt->cancel));
    FERRY_RETURN_NOT_OK(UnpackBundle(acquired.path, attempt->code_dir));
    *summary = "code bundle " + code.bundle.substr(0, 19) + " (" + FormatBytes(acquired.size) +
               (acquired.hit ? ", from the node cache" : ", fetched") + ") unpacked in " + took();
    return Status::OK();
  }
  // A git commit: cloned afresh for the attempt, then checked out detached.
  const std::string& url = code.git;
  if (url.rfind("file://", 0) == 0) {
    // A repository on this node: only under the storage config's file roots.
    const std::string path = std::filesystem::path(url.substr(7)).lexically_normal().string();
    bool allowed = false;
    for (const std::string& root : fetcher_->config().file_roots) {
      const std::string clean = std::filesystem::path(root).lexically_normal().string();
      allowed = allowed || path == clean || path.rfind(clean + "/", 0) == 0;
    }
    if (!allowed) {
      return Status::Invalid(url + " is not under a file root of this node's storage config");
    }
  }
  FERRY_ASSIGN_OR_RAISE(const std::string git, FindProgram(options_.git));
  std::map<std::string, std::string> env = {{"PATH", "/usr/bin:/bin"},
                                            {"HOME", options_.work_dir},
                                            {"GIT_TERMINAL_PROMPT", "0"},
                                            {"GIT_CONFIG_NOSYSTEM", "1"}};
  auto run = [&](std::vector<std::string> argv, const char* what) -> Status {
    argv.insert(argv.begin(), git);
    FERRY_ASSIGN_OR_RAISE(auto result, slurm::internal::RunCommand(argv, env, "", 600));
    if (result.exit_code != 0) {
      std::string err = result.err;
      while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
      if (err.size() > 400) err = err.substr(0, 400) + "...";
      return Status::IOError(std::string(what) + " failed" + (err.empty() ? "" : ": " + err));
    }
    return Status::OK();
  };
  Status status;
  int64_t backoff = options_.stage.backoff_ms;
  for (int tries = 1;; ++tries) {
    RemoveStagedTree(attempt->code_dir);
    status = run({"clone", "--quiet", "--no-checkout", "--", url, attempt->code_dir},
                 ("git clone " + url).c_str());
    if (status.ok() || attempt->cancel.load() || tries >= options_.stage.attempts) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
    backoff = std::min(backoff * 2, options_.stage.max_backoff_ms);
  }
  if (status.ok()) {
    status = run({"-C", attempt->code_dir, "-c", "advice.detachedHead=false", "checkout", "--quiet",
                  "--detach", code.commit + "^{commit}"},
                 ("git checkout " + code.commit).c_str());
  }
  if (!status.ok()) {
    RemoveStagedTree(attempt->code_dir);
    return status;
  }
  std::error_code ignored;
  std::filesystem::remove_all(attempt->code_dir + "/.git", ignored);
  MakeTreeReadOnly(attempt->code_dir);
  *summary = "code " + url + " at " + code.commit.substr(0, 12) + " cloned in " + took();
  return Status::OK();
}

std::string InputStager::StagedMessage(const Attempt& attempt) {
  std::string message = attempt.inputs > 0 ? attempt.result->Summary(attempt.inputs) : "";
  if (!attempt.code.empty()) message += (message.empty() ? "" : "; ") + attempt.code;
  if (!attempt.image.empty()) message += (message.empty() ? "" : "; ") + attempt.image;
  if (!attempt.restored.empty()) message += (message.empty() ? "" : "; ") + attempt.restored;
  return message;
}

std::vector<std::pair<int64_t, int>> InputStager::Prefetch(std::vector<PrefetchOrder> orders) {
  std::vector<std::pair<int64_t, int>> started;
  for (auto& [key, ahead] : ahead_) ahead->wanted = false;
  for (PrefetchOrder& order : orders) {
    const Key key{order.job_id, order.attempt};
    auto it = ahead_.find(key);
    if (it != ahead_.end()) {
      it->second->wanted = true;
      continue;
    }
    if (order.empty() || attempts_.count(key)) continue;  // nothing to do, or staging
    auto ahead = std::make_unique<Ahead>();
    ahead->holder =
        "prefetch-" + std::to_string(order.job_id) + "-" + std::to_string(order.attempt);
    ahead->order = std::move(order);
    Ahead* raw = ahead.get();
    ahead->thread = std::thread([this, raw] {
      RunPrefetch(raw);
      raw->finished = true;
      if (options_.wake) options_.wake();
    });
    ahead_.emplace(key, std::move(ahead));
    started.push_back(key);
  }
  for (auto& [key, ahead] : ahead_) {
    // Admitted here and staging: the prefetch's downloads are the staging's too.
    if (!ahead->wanted && !attempts_.count(key)) ahead->cancel = true;
  }
  ReapPrefetches();
  return started;
}

void InputStager::RunPrefetch(Ahead* ahead) {
  const PrefetchOrder& order = ahead->order;
  if (!order.inputs.empty()) {
    Result<StageResult> fetched = FetchInputs(cache_.get(), *fetcher_, order.tenant, ahead->holder,
                                              order.inputs, options_.stage, &ahead->cancel);
    if (!fetched.ok()) {
      ahead->result = fetched.status();
      return;
    }
    ahead->done.push_back(fetched->Summary(order.inputs.size()));
  }
  if (!order.code_bundle.empty()) {
    JobSpec::Code code;
    code.bundle = order.code_bundle;
    code.bytes = order.code_bytes;
    // Pinned under the prefetch's holder like its inputs; the staging
    // unpacks it from the cache.
    Result<ContentCache::Acquired> acquired =
        AcquireBundle(order.tenant, code, order.job_id, ahead->holder, &ahead->cancel);
    if (!acquired.ok()) {
      ahead->result = acquired.status().WithPrefix("code: ");
      return;
    }
    ahead->done.push_back("code bundle " + order.code_bundle.substr(0, 19) + " (" +
                          FormatBytes(acquired->size) +
                          (acquired->hit ? ", already in the node cache)" : ", fetched)"));
  }
  if (!order.image.empty()) {
    JobSpec spec;  // what the pull needs of the spec
    spec.image = order.image;
    spec.image_digest = order.image_digest;
    std::string summary;
    Status pulled = PullImage(&ahead->cancel, spec, &summary);
    if (!pulled.ok()) {
      ahead->result = pulled;
      return;
    }
    ahead->done.push_back(summary);
  }
}

void InputStager::ReapPrefetches() {
  for (auto it = ahead_.begin(); it != ahead_.end();) {
    Ahead& ahead = *it->second;
    if (!ahead.joined && ahead.finished.load()) {
      ahead.thread.join();
      ahead.joined = true;
      if (!ahead.cancel.load()) {
        const PrefetchOrder& order = ahead.order;
        std::string done;
        for (const std::string& part : ahead.done) done += (done.empty() ? "" : "; ") + part;
        std::string message =
            ahead.result.ok()
                ? "prefetched on " + options_.node_name + " while the job waits: " + done
                : "prefetch on " + options_.node_name +
                      " failed (staging tries again when the job starts): " +
                      ahead.result.message();
        if (message.size() > 4000) message = message.substr(0, 4000) + "...";
        prefetch_reports_.push_back(
            {{"job_id", order.job_id}, {"attempt", order.attempt}, {"message", message}});
      }
    }
    if (ahead.joined && !ahead.wanted) {
      cache_->Release(ahead.holder);
      it = ahead_.erase(it);
      continue;
    }
    ++it;
  }
}

std::vector<nlohmann::json> InputStager::TakePrefetchReports() {
  ReapPrefetches();
  std::vector<nlohmann::json> out;
  out.swap(prefetch_reports_);
  return out;
}

size_t InputStager::PrefetchesInFlight() const {
  return static_cast<size_t>(std::count_if(
      ahead_.begin(), ahead_.end(), [](const auto& entry) { return !entry.second->joined; }));
}

void InputStager::Poll(std::vector<Ready>* ready) {
  for (auto it = attempts_.begin(); it != attempts_.end();) {
    Attempt& attempt = *it->second;
    if (attempt.ended || !attempt.finished.load()) {
      ++it;
      continue;
    }
    attempt.thread.join();
    attempt.ended = true;
    attempt.ended_at = std::chrono::steady_clock::now();
    if (attempt.result.ok()) {
      for (TaskAssignment& assignment : attempt.waiting) {
        Queue(assignment.ref, TaskReport::Kind::kStaged, StagedMessage(attempt));
        attempt.launched.push_back(assignment.ref);
        ready->push_back(ReadyOf(attempt, std::move(assignment)));
      }
      attempt.waiting.clear();
      ++it;
      continue;
    }
    for (const TaskAssignment& assignment : attempt.waiting) {
      Queue(assignment.ref, TaskReport::Kind::kStagingFailed, attempt.result.status().message());
    }
    attempt.waiting.clear();
    // Nothing is pinned or laid out after a failure; a repeat of the
    // assignment is answered from the kept result until the server moves on.
    ++it;
  }
}

std::optional<nlohmann::json> InputStager::CacheReport(bool force) {
  const CacheStats stats = cache_->Stats();
  const auto now = std::chrono::steady_clock::now();
  if (!force && stats.generation == reported_generation_ && known_clock_ == reported_known_ &&
      now - reported_at_ < kReportEvery) {
    return std::nullopt;
  }
  reported_generation_ = stats.generation;
  reported_known_ = known_clock_;
  reported_at_ = now;
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& [key, known] : known_) {
    const int64_t present = cache_->PresentBytes(key.first, known.objects);
    if (present == 0) continue;
    inputs.push_back({{"tenant", key.first},
                      {"digest", key.second},
                      {"bytes", present},
                      // Objects of unknown size count as what is present of them.
                      {"total_bytes", std::max(known.total, present)}});
  }
  return nlohmann::json{{"quota_bytes", stats.quota_bytes},
                        {"bytes", stats.bytes_used},
                        {"entries", stats.entries},
                        {"hit_bytes", stats.bytes_hit},
                        {"fetched_bytes", stats.bytes_fetched},
                        {"inputs", std::move(inputs)}};
}

std::vector<TaskReport> InputStager::TakeReports() {
  std::vector<TaskReport> out;
  out.swap(reports_);
  return out;
}

void InputStager::Stop(const TaskRef& ref) {
  auto it = attempts_.find({ref.job_id, ref.attempt});
  if (it == attempts_.end()) return;
  Attempt& attempt = *it->second;
  auto& waiting = attempt.waiting;
  waiting.erase(std::remove_if(waiting.begin(), waiting.end(),
                               [&](const TaskAssignment& a) { return a.ref == ref; }),
                waiting.end());
  if (waiting.empty() && attempt.launched.empty()) attempt.cancel = true;
}

std::vector<TaskRef> InputStager::Held() const {
  std::vector<TaskRef> out;
  for (const auto& [key, attempt] : attempts_) {
    for (const auto& assignment : attempt->waiting) out.push_back(assignment.ref);
  }
  return out;
}

void InputStager::Sweep(const std::vector<TaskRef>& running) {
  for (auto it = attempts_.begin(); it != attempts_.end();) {
    Attempt& attempt = *it->second;
    if (!attempt.ended || !attempt.waiting.empty()) {
      ++it;
      continue;
    }
    const bool in_use = std::any_of(attempt.launched.begin(), attempt.launched.end(),
                                    [&](const TaskRef& ref) { return Contains(running, ref); });
    if (in_use) {
      ++it;
      continue;
    }
    if (attempt.result.ok()) {
      cache_->Release(attempt.holder);
      RemoveStagedTree(attempt.dir);
      if (!attempt.code_dir.empty()) RemoveStagedTree(attempt.code_dir);
    } else if (!attempt.cancel.load() &&
               std::chrono::steady_clock::now() - attempt.ended_at < kKeepFailed) {
      // A failed attempt is kept a while so repeats of its assignment get
      // the same answer; the server ends the attempt on the first report.
      ++it;
      continue;
    }
    it = attempts_.erase(it);
  }
}

}  // namespace ferry::fleet::agent_internal
