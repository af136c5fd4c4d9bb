// The Slurm pools' controller (slurm_pools.h, docs/slurm.md).
#include "fleet/server/slurm_pools.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <utility>

#include "ferry/fleet/provider.h"  // CircuitBreaker

namespace ferry::fleet::server_internal {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double SteadyS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// POSIX sh single quoting: 'it'\''s'.
std::string Quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

bool Transient(const Status& status) {
  return status.code() == StatusCode::kIOError || status.code() == StatusCode::kTimedOut;
}

Status WriteFile(const fs::path& path, const std::string& text, mode_t mode) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return Status::IOError("cannot write " + tmp.string());
  }
  ::chmod(tmp.c_str(), mode);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IOError("cannot rename " + tmp.string() + ": " + ec.message());
  return Status::OK();
}

// Writes `text` to `path` in place (created or truncated), without the
// temporary file and rename of WriteFile: for files nothing reads while
// they are written (the run directory of an attempt not yet handed to
// Slurm), where a torn file is rewritten by the next try anyway. Two
// metadata operations fewer on the path of every submission.
Status WriteFileInPlace(const fs::path& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::IOError("cannot write " + path.string() + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return Status::IOError("cannot write " + path.string() + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  // The mode asked for, whatever the umask (a no-op for a file just made).
  ::fchmod(fd, mode);
  if (::close(fd) != 0) {
    return Status::IOError("cannot write " + path.string() + ": " + std::strerror(errno));
  }
  return Status::OK();
}

std::optional<std::string> ReadSmallFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

std::optional<int64_t> ReadNumberFile(const fs::path& path) {
  auto text = ReadSmallFile(path);
  if (!text) return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text->c_str(), &end, 10);
  if (end == text->c_str()) return std::nullopt;
  return value;
}

bool operator==(const ExternalUse& a, const ExternalUse& b) {
  return a.unavailable == b.unavailable && a.gpus == b.gpus && a.cpus == b.cpus &&
         a.memory_mb == b.memory_mb;
}

std::string RandomHex(int bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::random_device device;
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    const unsigned value = device() & 0xffU;
    out += kDigits[value >> 4];
    out += kDigits[value & 0xfU];
  }
  return out;
}

}  // namespace

Result<SlurmSettings> SlurmSettingsFromConfig(const sched::ProviderConfig& config,
                                              const std::string& data_dir) {
  SlurmSettings s;
  std::error_code ec;
  s.work_dir = fs::absolute(fs::path(data_dir.empty() ? "." : data_dir) / "slurm" / config.name, ec)
                   .string();
  s.node_prefix = config.name + "-";
  s.tag = config.name;
  const std::string prefix = "provider '" + config.name + "': ";
  ProviderParams params("slurm");
  params.Text("endpoint", &s.endpoint)
      .Text("user_name", &s.user_name)
      .Text("token_file", &s.token_file)
      .Text("api_version", &s.api_version)
      .Text("slurm_conf", &s.slurm_conf)
      .Text("bin_dir", &s.bin_dir)
      .Number("timeout_s", &s.timeout_s)
      .Text("work_dir", &s.work_dir)
      .Number("sync_interval_s", &s.sync_interval_s)
      .Text("node_prefix", &s.node_prefix)
      .Text("tag", &s.tag)
      .Text("path", &s.path)
      .Number("unreachable_requeue_s", &s.unreachable_requeue_s)
      .Integer("submit_parallelism", &s.submit_parallelism, 1, 64)
      .Integer("fault_kill_after_submit", &s.fault_kill_after_submit);
  FERRY_RETURN_NOT_OK(params.Read(config));
  if (s.work_dir.empty() || s.work_dir.front() != '/') {
    return Status::Invalid(prefix + "params.work_dir: must be an absolute path");
  }
  if (s.tag.empty() || s.tag.find(':') != std::string::npos) {
    return Status::Invalid(prefix + "params.tag: must be non-empty and without ':'");
  }
  if (s.sync_interval_s < 0.01) s.sync_interval_s = 0.01;
  if (s.endpoint != "cli" && s.endpoint.rfind("unix:", 0) != 0 &&
      s.endpoint.rfind("http://", 0) != 0 && s.endpoint.rfind("https://", 0) != 0) {
    return Status::Invalid(prefix + "params.endpoint: expected cli, unix:/path or http(s)://...");
  }
  return s;
}

Result<std::unique_ptr<slurm::SlurmClient>> MakeSlurmClient(const SlurmSettings& settings) {
  if (settings.endpoint == "cli") {
    slurm::CliOptions options;
    options.bin_dir = settings.bin_dir;
    options.slurm_conf = settings.slurm_conf;
    options.timeout_s = settings.timeout_s;
    return slurm::MakeCliClient(options);
  }
  slurm::RestOptions options;
  options.endpoint = settings.endpoint;
  options.user_name = settings.user_name;
  options.timeout_s = settings.timeout_s;
  if (!settings.token_file.empty()) {
    auto token = ReadSmallFile(settings.token_file);
    if (!token) return Status::IOError("cannot read the Slurm token file " + settings.token_file);
    while (!token->empty() && (token->back() == '\n' || token->back() == '\r')) token->pop_back();
    options.token = *token;
  }
  if (!settings.api_version.empty()) {
    FERRY_ASSIGN_OR_RAISE(slurm::ApiVersion version, slurm::ParseApiVersion(settings.api_version));
    options.version = version;
  }
  return slurm::MakeRestClient(options);
}

std::string_view FerryReasonForSlurm(std::string_view r) {
  if (r == "Resources" || r == "ReqNodeNotAvail" || r == "NodeDown" || r == "Nodes_required" ||
      r.rfind("ReqNodeNotAvail", 0) == 0) {
    return reason::kNoCapacity;
  }
  if (r.rfind("QOS", 0) == 0 || r.rfind("Assoc", 0) == 0 || r.find("Limit") != r.npos) {
    return reason::kQuotaExceeded;
  }
  if (r == "BadConstraints" || r == "PartitionConfig") return reason::kUnsatisfiable;
  return reason::kPolicy;
}

SlurmScripts MakeSlurmScripts(const std::string& run_dir, const std::string& title,
                              const std::vector<std::string>& command, int gpus_per_task,
                              int tasks_per_node) {
  SlurmScripts s;
  std::ostringstream batch;
  batch << "#!/bin/sh\n"
        << "# " << title << "\n"
        << "# Written by the Ferry server (docs/slurm.md): srun starts the task wrapper on\n"
        << "# every task; srun's status goes to exit.batch. This shell outlives a\n"
        << "# SIGTERM to record the status.\n"
        << "run_dir=" << Quote(run_dir) << "\n"
        << "trap ':' TERM\n"
        << "srun --kill-on-bad-exit=1 --output=\"$run_dir/task-%t.out\""
        << " --error=\"$run_dir/task-%t.err\" /bin/sh \"$run_dir/task.sh\" &\n"
        << "step=$!\n"
        << "rc=0\n"
        << "while :; do\n"
        << "  wait \"$step\"; rc=$?\n"
        << "  kill -0 \"$step\" 2>/dev/null || break\n"
        << "done\n"
        << "echo \"$rc\" > \"$run_dir/exit.batch.tmp\" && mv -f \"$run_dir/exit.batch.tmp\""
        << " \"$run_dir/exit.batch\"\n"
        << "exit \"$rc\"\n";
  s.batch = batch.str();

  std::ostringstream task;
  task << "#!/bin/sh\n"
       << "# " << title << ": one task, started by srun.\n"
       << "run_dir=" << Quote(run_dir) << "\n"
       << "export FERRY_TASK_INDEX=\"$SLURM_PROCID\" RANK=\"$SLURM_PROCID\""
       << " LOCAL_RANK=\"${SLURM_LOCALID:-0}\"\n"
       << "export FERRY_NODE=\"${SLURMD_NODENAME:-$(hostname)}\"\n"
       << "nodes=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" 2>/dev/null | paste -sd, -)\n"
       << "[ -n \"$nodes\" ] || nodes=\"$FERRY_NODE\"\n"
       << "export FERRY_GANG_NODES=\"$nodes\" MASTER_ADDR=\"${nodes%%,*}\"\n";
  if (gpus_per_task > 0 && tasks_per_node > 1) {
    // Several tasks share the node's GPUs: each keeps its own slice.
    task << "if [ -n \"$CUDA_VISIBLE_DEVICES\" ]; then\n"
         << "  first=$((LOCAL_RANK * " << gpus_per_task << ")); last=$((first + " << gpus_per_task
         << "))\n"
         << "  slice=; i=0\n"
         << "  for d in $(echo \"$CUDA_VISIBLE_DEVICES\" | tr , ' '); do\n"
         << "    if [ \"$i\" -ge \"$first\" ] && [ \"$i\" -lt \"$last\" ]; then"
         << " slice=\"${slice:+$slice,}$d\"; fi\n"
         << "    i=$((i + 1))\n"
         << "  done\n"
         << "  export CUDA_VISIBLE_DEVICES=\"$slice\"\n"
         << "fi\n";
  }
  task << "export FERRY_GPUS=\"${CUDA_VISIBLE_DEVICES:-}\"\n";
  for (size_t i = 0; i < command.size(); ++i) task << (i == 0 ? "" : " ") << Quote(command[i]);
  task << " &\n"
       << "child=$!\n"
       << "# SIGTERM may come from Slurm and from srun: the command gets it once.\n"
       << "trap 'if [ -z \"$ferry_term\" ]; then ferry_term=1; kill -TERM \"$child\" 2>/dev/null;"
       << " fi' TERM\n"
       << "# Ferry's stop is the file \"stop\" in the run directory (Slurm's own signal\n"
       << "# delivery to a batch job also reaches srun, which then kills the step).\n"
       << "( while [ ! -e \"$run_dir/stop\" ]; do sleep 0.2; kill -0 \"$child\" 2>/dev/null ||"
       << " exit 0; done; kill -TERM $$ ) &\n"
       << "watcher=$!\n"
       << "rc=0\n"
       << "while :; do\n"
       << "  wait \"$child\"; rc=$?\n"
       << "  kill -0 \"$child\" 2>/dev/null || break\n"
       << "done\n"
       << "kill \"$watcher\" 2>/dev/null\n"
       << "echo \"$rc\" > \"$run_dir/exit.$SLURM_PROCID.tmp\" && mv -f"
       << " \"$run_dir/exit.$SLURM_PROCID.tmp\" \"$run_dir/exit.$SLURM_PROCID\"\n"
       << "exit \"$rc\"\n";
  s.task = task.str();
  return s;
}

// ---------------------------------------------------------------- one cluster

class SlurmController::Cluster {
 public:
  Cluster(Store* store, const Options* options, sched::ProviderConfig config,
          SlurmSettings settings, std::unique_ptr<slurm::SlurmClient> client)
      : store_(store),
        options_(options),
        config_(std::move(config)),
        settings_(std::move(settings)),
        client_(std::move(client)),
        breaker_(config_.breaker_failures, config_.breaker_open_s) {}

  ~Cluster() { Stop(); }

  void SetPools(std::vector<sched::PoolConfig> pools) {
    std::lock_guard<std::mutex> lock(mu_);
    pools_ = std::move(pools);
  }

  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    if (thread_.joinable()) return;
    thread_ = std::thread([this] { Loop(); });
    reader_thread_ = std::thread([this] { ReadLoop(); });
    lease_thread_ = std::thread([this] { LeaseLoop(); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (reader_thread_.joinable()) reader_thread_.join();
    if (lease_thread_.joinable()) lease_thread_.join();
  }

  bool Owns(const std::set<std::string>& nodes) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& node : nodes) {
      if (owned_.count(node)) return true;
    }
    return false;
  }

  void Wake() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      woken_ = true;
    }
    cv_.notify_all();
  }

  json StatusJson() {
    std::lock_guard<std::mutex> lock(mu_);
    return {{"name", config_.name},
            {"type", "slurm"},
            {"endpoint", settings_.endpoint},
            {"client", client_->Describe()},
            {"breaker", ToString(breaker_state_)},
            {"reachable", reachable_},
            {"last_error", last_error_},
            {"last_sync_ms", last_sync_ms_},
            {"pools", pool_names_},
            {"nodes", static_cast<int64_t>(owned_.size())},
            {"jobs", jobs_count_},
            {"calls", calls_},
            {"failures", failures_},
            {"breaker_opens", breaker_opens_},
            {"submitted", submitted_}};
  }

  ClusterMetrics Metrics() {
    std::lock_guard<std::mutex> lock(mu_);
    ClusterMetrics m;
    m.name = config_.name;
    m.breaker = std::string(ToString(breaker_state_));
    m.reachable = reachable_;
    m.calls = calls_;
    m.failures = failures_;
    m.breaker_opens = breaker_opens_;
    m.submitted = submitted_;
    m.nodes = static_cast<int64_t>(owned_.size());
    m.jobs = jobs_count_;
    return m;
  }

 private:
  using Key = std::pair<int64_t, int>;  // Ferry job, attempt

  struct NodeEntry {
    std::string slurm_name;
    std::string pool;
    std::string instance;
    bool registered = false;
    bool looked_up = false;  // the store's instance was checked (a restart adopts it)
    std::optional<ExternalUse> written;
  };

  struct LeaseView {
    std::string instance;
    std::vector<TaskRef> running;
    int64_t synced_ms = 0;
  };

  struct JobEntry {
    Key key;
    std::string tag;
    std::vector<std::string> task_nodes;  // the Ferry node of each task
    fs::path run_dir;
    int64_t slurm_id = 0;
    bool seen = false;  // Slurm listed it at least once
    slurm::JobState state = slurm::JobState::kUnknown;
    std::string noted;  // the last pending reason noted
    bool started = false;
    bool ended = false;
    bool stop = false;
    bool killed = false;
    double kill_at_s = 0;
    double submitted_s = 0;
    // Per task and stream (0 stdout, 1 stderr): bytes already appended.
    std::map<std::pair<int, int>, int64_t> log_offsets;
    int gpus_per_node = 0;  // what Slurm gives it per node (for the outside-use count)
    double cpus_per_node = 0;
    int64_t memory_mb_per_node = 0;
  };

  // What one read of Slurm found: its nodes and the jobs carrying Ferry's
  // tag, or why the read failed.
  struct Snapshot {
    bool reachable = false;
    std::vector<slurm::Node> nodes;
    std::vector<slurm::Job> jobs;
    std::string failed_what;  // "listing nodes" / "listing jobs"
    Status failure;
    // When the read began: a job handed to Slurm after it may be missing.
    fs::file_time_type read_start;
  };

  // The reader thread reads Slurm every sync_interval_s and hands each
  // snapshot to the cluster's thread, which runs a full pass with it
  // (mirroring, capacity, logs). A wake-up (an admission, a stop) runs a
  // quick pass there at once that submits new attempts and passes stops on.
  // Slurm's tools can take tens of milliseconds (longer when slurmctld is
  // slow), and no submission waits behind them.
  void ReadLoop() {
    while (true) {
      const double started_s = SteadyS();
      Snapshot snapshot = Read();
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (stopping_) return;
        snapshot_ = std::move(snapshot);
      }
      cv_.notify_all();
      std::unique_lock<std::mutex> lock(mu_);
      const double wait = std::max(0.0, started_s + settings_.sync_interval_s - SteadyS());
      if (cv_.wait_for(lock, std::chrono::duration<double>(wait), [&] { return stopping_; })) {
        return;
      }
    }
  }

  Snapshot Read() {
    Snapshot snapshot;
    snapshot.read_start = fs::file_time_type::clock::now();
    bool allowed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      allowed = breaker_.Allow(SteadyS());
      breaker_state_ = breaker_.state();
    }
    if (!allowed) return snapshot;
    Result<std::vector<slurm::Node>> listed = client_->ListNodes();
    if (!Count(listed)) {
      snapshot.failed_what = "listing nodes";
      snapshot.failure = listed.status();
      return snapshot;
    }
    slurm::JobFilter filter;
    filter.comment_prefix = TagPrefix();
    Result<std::vector<slurm::Job>> jobs = client_->ListJobs(filter);
    if (!Count(jobs)) {
      snapshot.failed_what = "listing jobs";
      snapshot.failure = jobs.status();
      return snapshot;
    }
    snapshot.nodes = std::move(*listed);
    snapshot.jobs = std::move(*jobs);
    snapshot.reachable = true;
    return snapshot;
  }

  void Loop() {
    while (true) {
      std::optional<Snapshot> snapshot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || woken_ || snapshot_.has_value(); });
        if (stopping_) return;
        woken_ = false;
        snapshot.swap(snapshot_);
      }
      if (snapshot) {
        Tick(std::move(*snapshot));
      } else {
        QuickTick();
      }
    }
  }

  void QuickTick() {
    std::vector<sched::PoolConfig> pools;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pools = pools_;
      if (breaker_.state() != CircuitBreaker::State::kClosed) return;
    }
    std::map<Key, std::vector<TaskAssignment>> starts;
    std::map<Key, int64_t> stops;
    SyncFerry(&starts, &stops);
    bool changed = HandleStarts(pools, starts, {}, std::nullopt);
    HandleStops(stops);
    if (!outbox_.empty()) {
      SyncFerry(nullptr, nullptr);
      changed = true;
    }
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      it = it->second.ended ? jobs_.erase(it) : std::next(it);
    }
    if (changed && options_->on_change) options_->on_change();
  }

  // Keeps the nodes' leases while a pass waits for Slurm (a dead slurmctld
  // makes the tools wait out their timeout): nodes whose last sync is older
  // than a third of the lease are synced with what the last pass said runs
  // there. What the store answers is left to the next pass.
  void LeaseLoop() {
    const int64_t lease = options_->lease_ms;
    const auto tick = std::chrono::milliseconds(std::clamp<int64_t>(lease / 6, 20, 1000));
    while (true) {
      std::map<std::string, LeaseView> due;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, tick, [&] { return stopping_; })) return;
        const int64_t now = WallMs();
        for (const auto& [name, view] : lease_view_) {
          if (now - view.synced_ms > lease / 3) due.emplace(name, view);
        }
      }
      for (const auto& [name, view] : due) {
        SyncRequest request;
        request.node = name;
        request.instance = view.instance;
        request.running = view.running;
        request.now_ms = WallMs();
        request.lease_ms = lease;
        Result<SyncResult> synced = store_->SyncNode(request);
        if (!synced.ok()) continue;
        std::lock_guard<std::mutex> lock(mu_);
        auto it = lease_view_.find(name);
        if (it != lease_view_.end() && it->second.instance == view.instance) {
          it->second.synced_ms = request.now_ms;
        }
      }
    }
  }

  // Counts a Slurm call's outcome for the breaker.
  template <typename T>
  bool Count(const Result<T>& result) {
    return Count(result.status());
  }
  bool Count(const Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    if (status.ok() || !Transient(status)) {
      breaker_.RecordSuccess();
    } else {
      ++failures_;
      const bool was_open = breaker_.state() == CircuitBreaker::State::kOpen;
      breaker_.RecordFailure(SteadyS());
      if (!was_open && breaker_.state() == CircuitBreaker::State::kOpen) ++breaker_opens_;
      last_error_ = status.message();
    }
    breaker_state_ = breaker_.state();
    return status.ok();
  }

  void LogError(const std::string& what, const Status& status) {
    if (options_->log_error) options_->log_error("slurm " + config_.name + ": " + what, status);
  }
  void LogInfo(const std::string& line) {
    if (options_->log_info) options_->log_info("slurm " + config_.name + ": " + line);
  }

  std::string Actor() const { return "slurm:" + config_.name; }
  std::string TagPrefix() const { return "ferry:" + settings_.tag + ":"; }
  std::string Tag(const Key& key) const {
    return TagPrefix() + std::to_string(key.first) + ":" + std::to_string(key.second);
  }
  std::optional<Key> ParseTag(const std::string& comment) const {
    const std::string prefix = TagPrefix();
    if (comment.rfind(prefix, 0) != 0) return std::nullopt;
    const std::string rest = comment.substr(prefix.size());
    const size_t colon = rest.find(':');
    if (colon == std::string::npos) return std::nullopt;
    char* end = nullptr;
    const long long job = std::strtoll(rest.c_str(), &end, 10);
    if (end != rest.c_str() + colon || job <= 0) return std::nullopt;
    const std::string attempt_text = rest.substr(colon + 1);
    const long long attempt = std::strtoll(attempt_text.c_str(), &end, 10);
    if (end != attempt_text.c_str() + attempt_text.size() || attempt <= 0) return std::nullopt;
    return Key{job, static_cast<int>(attempt)};
  }
  fs::path RunDir(const Key& key) const {
    return fs::path(settings_.work_dir) /
           (std::to_string(key.first) + "." + std::to_string(key.second));
  }

  // ---- One pass.

  void Tick(Snapshot snapshot) {
    std::vector<sched::PoolConfig> pools;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pools = pools_;
    }
    const bool reachable = snapshot.reachable;
    const std::vector<slurm::Node>& slurm_nodes = snapshot.nodes;
    const std::vector<slurm::Job>& slurm_jobs = snapshot.jobs;
    if (!snapshot.failure.ok()) LogOnce(snapshot.failed_what, snapshot.failure);
    const double now_s = SteadyS();
    if (reachable) {
      if (!reachable_now_) LogInfo("reachable (" + client_->Describe() + ")");
      reachable_now_ = true;
      unreachable_since_s_ = 0;
      logged_error_.clear();
    } else {
      if (reachable_now_ || unreachable_since_s_ == 0) unreachable_since_s_ = now_s;
      reachable_now_ = false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      reachable_ = reachable;
      if (reachable) last_sync_ms_ = WallMs();
    }

    std::map<int64_t, const slurm::Job*> by_id;
    std::map<Key, const slurm::Job*> by_tag;
    for (const slurm::Job& job : slurm_jobs) {
      by_id[job.id] = &job;
      if (auto key = ParseTag(job.comment)) {
        // A requeued Slurm job keeps its id; the newest id of a tag wins.
        auto [it, fresh] = by_tag.emplace(*key, &job);
        if (!fresh && it->second->id < job.id) it->second = &job;
      }
    }

    bool changed = false;
    if (reachable) {
      changed |= SyncNodes(pools, slurm_nodes, by_tag);
    } else {
      changed |= MarkUnreachable();
    }
    std::map<Key, std::vector<TaskAssignment>> starts;
    std::map<Key, int64_t> stops;
    SyncFerry(&starts, &stops);
    if (reachable) {
      changed |= Reconcile(by_tag);
      changed |= HandleStarts(pools, starts, by_tag, snapshot.read_start);
      HandleStops(stops);
      changed |= Mirror(by_id);
      TailAllLogs();
    } else {
      changed |= HoldWhileUnreachable(starts, now_s);
    }
    if (!outbox_.empty()) {
      SyncFerry(nullptr, nullptr);
      changed = true;
    }
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      it = it->second.ended ? jobs_.erase(it) : std::next(it);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_count_ = static_cast<int64_t>(jobs_.size());
    }
    if (changed && options_->on_change) options_->on_change();
  }

  void LogOnce(const std::string& what, const Status& status) {
    const std::string text = what + ": " + status.message();
    if (text == logged_error_) return;
    logged_error_ = text;
    LogError(what, status);
  }

  const sched::PoolConfig* PoolOf(const std::vector<sched::PoolConfig>& pools,
                                  const slurm::Node& node) const {
    for (const sched::PoolConfig& pool : pools) {
      if (!pool.slurm) continue;
      const std::string& partition = pool.slurm->partition;
      if (partition.empty() || std::find(node.partitions.begin(), node.partitions.end(),
                                         partition) != node.partitions.end()) {
        return &pool;
      }
    }
    return nullptr;
  }

  // Registers, refreshes and loses nodes from Slurm's list; true when
  // something the scheduler sees changed.
  bool SyncNodes(const std::vector<sched::PoolConfig>& pools,
                 const std::vector<slurm::Node>& slurm_nodes,
                 const std::map<Key, const slurm::Job*>& by_tag) {
    bool changed = false;
    // What Slurm runs of Ferry's own, per Slurm node: (GPUs, CPUs, memory).
    struct Own {
      int gpus = 0;
      double cpus = 0;
      int64_t memory_mb = 0;
    };
    std::map<std::string, Own> own;
    for (const auto& [key, job] : by_tag) {
      if (job->state != slurm::JobState::kRunning && job->state != slurm::JobState::kSuspended &&
          job->state != slurm::JobState::kCompleting) {
        continue;
      }
      auto entry = jobs_.find(key);
      if (entry == jobs_.end()) continue;
      Result<std::vector<std::string>> hosts = slurm::ExpandHostList(job->nodes);
      if (!hosts.ok()) continue;
      for (const std::string& host : *hosts) {
        Own& o = own[host];
        o.gpus += entry->second.gpus_per_node;
        o.cpus += entry->second.cpus_per_node;
        o.memory_mb += entry->second.memory_mb_per_node;
      }
    }
    std::set<std::string> seen;
    for (const slurm::Node& sn : slurm_nodes) {
      const sched::PoolConfig* pool = PoolOf(pools, sn);
      if (pool == nullptr) continue;
      const std::string name = settings_.node_prefix + sn.name;
      seen.insert(name);
      NodeEntry& entry = nodes_[name];
      entry.slurm_name = sn.name;
      entry.pool = pool->name;
      {
        std::lock_guard<std::mutex> lock(mu_);
        owned_.insert(name);
      }
      if (sn.down) {
        if (entry.registered || !entry.looked_up) changed |= LoseNode(name, sn);
        entry.registered = false;
        entry.looked_up = true;
        entry.instance.clear();  // back up, it registers as a new instance
        continue;
      }
      if (!entry.registered) {
        if (!Register(name, *pool, sn, &entry)) continue;
        changed = true;
      }
      // Outside use: what Slurm gave to jobs that are not Ferry's running ones here.
      ExternalUse use;
      if (sn.drain) {
        use.unavailable = "slurm: " + sn.state + (sn.drain ? "+DRAIN" : "") +
                          (sn.reason.empty() ? "" : " (" + sn.reason + ")");
      }
      const Own mine = own.count(sn.name) ? own[sn.name] : Own{};
      use.gpus = std::max(0, sn.gpus_allocated - mine.gpus);
      use.cpus = std::max(0.0, sn.alloc_cpus - mine.cpus);
      use.memory_mb = std::max<int64_t>(0, sn.alloc_memory_mb - mine.memory_mb);
      if (!entry.written || !(*entry.written == use)) {
        Result<bool> set = store_->SetExternalUse(name, use);
        if (set.ok()) {
          entry.written = use;
          changed = true;
        } else {
          LogError("recording the use of " + name, set.status());
        }
      }
    }
    // Nodes gone from Slurm's list (removed from the cluster or the partition).
    for (auto& [name, entry] : nodes_) {
      if (seen.count(name) || !entry.registered) continue;
      slurm::Node gone;
      gone.name = entry.slurm_name;
      gone.state = "GONE";
      gone.reason = "no longer listed by Slurm";
      changed |= LoseNode(name, gone);
      entry.registered = false;
      entry.instance.clear();
    }
    return changed;
  }

  bool Register(const std::string& name, const sched::PoolConfig& pool, const slurm::Node& sn,
                NodeEntry* entry) {
    if (!entry->looked_up) {
      // After a server restart the node is still READY with this
      // controller's instance: keep it, so its jobs are not lost.
      Result<std::optional<Node>> stored = store_->GetNode(name);
      if (stored.ok() && stored->has_value() && (*stored)->state == NodeState::kReady &&
          (*stored)->instance.rfind("slurm:", 0) == 0) {
        entry->instance = (*stored)->instance;
      }
      entry->looked_up = true;
    }
    if (entry->instance.empty()) entry->instance = "slurm:" + RandomHex(8);
    NodeRegistration reg;
    reg.name = name;
    reg.pool = pool.name;
    reg.labels = {
        {"resource_manager", "slurm"}, {"slurm_cluster", config_.name}, {"slurm_node", sn.name}};
    std::string partitions;
    for (const std::string& p : sn.partitions) partitions += (partitions.empty() ? "" : ",") + p;
    if (!partitions.empty()) reg.labels["slurm_partitions"] = partitions;
    if (!sn.gpu_type.empty()) reg.labels["slurm_gpu_type"] = sn.gpu_type;
    reg.cpus = sn.cpus;
    reg.memory_mb = sn.memory_mb;
    reg.instance = entry->instance;
    const std::string model =
        sn.gpu_type.empty() ? pool.node.gpu_model : CanonicalGpuModel(sn.gpu_type);
    for (int i = 0; i < sn.gpus; ++i) {
      reg.gpus.push_back({i, model, pool.node.gpu_memory_mb, name + "-gpu" + std::to_string(i)});
    }
    Result<Node> node = store_->RegisterNode(reg, WallMs(), options_->lease_ms);
    if (!node.ok()) {
      LogError("registering " + name, node.status());
      return false;
    }
    entry->registered = true;
    entry->written.reset();
    LogInfo("node " + name + " registered (" + std::to_string(sn.gpus) + " GPUs, " + sn.state +
            ")");
    return true;
  }

  bool LoseNode(const std::string& name, const slurm::Node& sn) {
    // The state with its flags: a node that stopped answering is still
    // "MIXED" with NOT_RESPONDING until Slurm declares it DOWN.
    std::string state = sn.state;
    for (const std::string& flag : sn.state_flags) state += "+" + flag;
    const std::string message = "Slurm reports node " + sn.name + " " + state +
                                (sn.reason.empty() ? "" : " (" + sn.reason + ")");
    Result<ExpiryResult> lost =
        store_->MarkNodeLost(name, std::string(reason::kNodeLost), message, WallMs());
    if (!lost.ok()) {
      LogError("marking " + name + " lost", lost.status());
      return false;
    }
    if (lost->lost_nodes.empty()) return false;
    LogInfo("node " + name + " lost: " + message);
    // Their attempts are over in Ferry: whatever Slurm still runs of them goes.
    std::set<int64_t> ended(lost->requeued_jobs.begin(), lost->requeued_jobs.end());
    ended.insert(lost->failed_jobs.begin(), lost->failed_jobs.end());
    for (auto& [key, job] : jobs_) {
      if (!ended.count(key.first)) continue;
      if (job.slurm_id > 0) Count(client_->Cancel(job.slurm_id, 0));
      job.ended = true;
    }
    return true;
  }

  bool MarkUnreachable() {
    bool changed = false;
    std::string why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      why = last_error_.empty() ? "circuit breaker open" : last_error_;
    }
    for (auto& [name, entry] : nodes_) {
      if (!entry.registered) continue;
      ExternalUse use = entry.written.value_or(ExternalUse{});
      use.unavailable = "slurm: controller unreachable (" + why.substr(0, 200) + ")";
      if (entry.written &&
          entry.written->unavailable.rfind("slurm: controller unreachable", 0) == 0) {
        continue;  // already marked; the text need not follow every error
      }
      Result<bool> set = store_->SetExternalUse(name, use);
      if (set.ok()) {
        entry.written = use;
        changed = true;
      }
    }
    return changed;
  }

  // Renews the leases of every registered node, sends the reports waiting
  // for it and collects what the store wants started and stopped.
  void SyncFerry(std::map<Key, std::vector<TaskAssignment>>* starts,
                 std::map<Key, int64_t>* stops) {
    std::map<std::string, std::vector<TaskRef>> running;
    for (const auto& [key, job] : jobs_) {
      if (job.ended) continue;
      for (size_t t = 0; t < job.task_nodes.size(); ++t) {
        running[job.task_nodes[t]].push_back({key.first, static_cast<int>(t), key.second});
      }
    }
    for (auto& [name, entry] : nodes_) {
      if (!entry.registered) continue;
      if (starts == nullptr && !outbox_.count(name)) continue;  // only the reports
      SyncRequest request;
      request.node = name;
      request.instance = entry.instance;
      request.running = running[name];
      if (auto it = outbox_.find(name); it != outbox_.end()) request.reports = it->second;
      request.now_ms = WallMs();
      request.lease_ms = options_->lease_ms;
      request.actor = Actor();
      Result<SyncResult> synced = store_->SyncNode(request);
      if (!synced.ok()) {
        LogError("syncing " + name, synced.status());
        continue;
      }
      outbox_.erase(name);
      if (!synced->registered) {
        entry.registered = false;  // lost meanwhile: registered again next pass
        entry.instance.clear();
        continue;
      }
      if (starts != nullptr) {
        for (TaskAssignment& a : synced->start) {
          (*starts)[{a.ref.job_id, a.ref.attempt}].push_back(std::move(a));
        }
      }
      if (stops != nullptr) {
        for (const TaskRef& r : synced->stop) {
          int64_t& grace = (*stops)[{r.job_id, r.attempt}];
          grace = std::max(grace, synced->stop_grace_ms.value_or(-1));
        }
      }
    }
    // Reports for nodes no longer registered are fenced anyway: drop them.
    for (auto it = outbox_.begin(); it != outbox_.end();) {
      auto node = nodes_.find(it->first);
      const bool keep = node != nodes_.end() && node->second.registered;
      it = keep ? std::next(it) : outbox_.erase(it);
    }
    // What the lease keeper renews until the next pass.
    std::map<std::string, LeaseView> view;
    const int64_t now = WallMs();
    for (const auto& [name, entry] : nodes_) {
      if (entry.registered) view[name] = {entry.instance, running[name], now};
    }
    std::lock_guard<std::mutex> lock(mu_);
    lease_view_ = std::move(view);
  }

  void Report(const JobEntry& job, int task, TaskReport::Kind kind,
              std::optional<int> exit_code = std::nullopt, std::optional<int> signal = std::nullopt,
              const std::string& message = "") {
    if (task < 0 || task >= static_cast<int>(job.task_nodes.size())) return;
    TaskReport r;
    r.ref = {job.key.first, task, job.key.second};
    r.kind = kind;
    r.exit_code = exit_code;
    r.signal = signal;
    r.message = message;
    r.at_ms = WallMs();
    outbox_[job.task_nodes[static_cast<size_t>(task)]].push_back(std::move(r));
  }

  // Tagged Slurm jobs this controller does not follow (after a restart, or
  // left over): adopted when their attempt is live here, cancelled when not.
  bool Reconcile(const std::map<Key, const slurm::Job*>& by_tag) {
    bool changed = false;
    for (const auto& [key, sj] : by_tag) {
      if (jobs_.count(key) || settled_.count(sj->id)) continue;
      std::error_code ec;
      if (!fs::exists(RunDir(key) / "intent", ec)) {
        // The tag without this server's marker: another Ferry store's job
        // (the same tag on a shared cluster). Not ours to adopt or cancel.
        settled_.insert(sj->id);
        LogInfo("leaving Slurm job " + std::to_string(sj->id) + " (" + sj->comment +
                ") alone: its attempt has no marker in " + settings_.work_dir);
        continue;
      }
      Result<std::optional<Job>> job = store_->GetJob(Scope::All(), key.first);
      if (!job.ok()) {
        LogError("reconciling Slurm job " + std::to_string(sj->id), job.status());
        continue;
      }
      const bool live =
          job->has_value() && (*job)->attempt == key.second &&
          ((*job)->state == JobState::kAdmitted || (*job)->state == JobState::kRunning) &&
          !(*job)->placement.empty();
      bool ours = live;
      if (live) {
        for (const TaskPlacement& p : (*job)->placement) {
          auto node = nodes_.find(p.node);
          ours = ours && node != nodes_.end() && node->second.registered;
        }
      }
      if (!ours) {
        settled_.insert(sj->id);
        if (!slurm::IsFinished(sj->state)) {
          LogInfo("cancelling Slurm job " + std::to_string(sj->id) + " (" + sj->comment +
                  "): its attempt is no longer live");
          Count(client_->Cancel(sj->id, 0));
        }
        continue;
      }
      JobEntry entry;
      entry.key = key;
      entry.tag = Tag(key);
      entry.run_dir = RunDir(key);
      entry.slurm_id = sj->id;
      std::vector<TaskPlacement> placement = (*job)->placement;
      std::sort(placement.begin(), placement.end(),
                [](const TaskPlacement& a, const TaskPlacement& b) { return a.task < b.task; });
      for (const TaskPlacement& p : placement) entry.task_nodes.push_back(p.node);
      entry.started = (*job)->state == JobState::kRunning;
      Shape((*job)->spec, &entry);
      PrimeLogOffsets(&entry);
      LogInfo("adopted Slurm job " + std::to_string(sj->id) + " (" + entry.tag + ")");
      jobs_.emplace(key, std::move(entry));
      changed = true;
    }
    return changed;
  }

  // How the attempt's placement maps onto Slurm: equal tasks per node, or not.
  struct Layout {
    int nodes = 0;
    int tasks_per_node = 0;  // 0: uneven
    int max_tasks_per_node = 0;
  };
  static Layout LayoutOf(const std::vector<std::string>& task_nodes) {
    std::map<std::string, int> per_node;
    for (const std::string& node : task_nodes) ++per_node[node];
    Layout layout;
    layout.nodes = static_cast<int>(per_node.size());
    std::set<int> counts;
    for (const auto& [node, count] : per_node) {
      counts.insert(count);
      layout.max_tasks_per_node = std::max(layout.max_tasks_per_node, count);
    }
    layout.tasks_per_node = counts.size() == 1 ? *counts.begin() : 0;
    return layout;
  }

  static void Shape(const JobSpec& spec, JobEntry* entry) {
    const Layout layout = LayoutOf(entry->task_nodes);
    const int per_node =
        std::max(1, layout.tasks_per_node > 0 ? layout.tasks_per_node : layout.max_tasks_per_node);
    entry->gpus_per_node = spec.gpus_per_task * per_node;
    entry->cpus_per_node = std::ceil(std::max(spec.cpus_per_task, 1.0)) * per_node;
    entry->memory_mb_per_node = spec.memory_mb_per_task * per_node;
  }

  // `listed_at`: by_tag is Slurm's list from a read that began then. Without
  // it only attempts never handed over before (no marker) are submitted.
  bool HandleStarts(const std::vector<sched::PoolConfig>& pools,
                    std::map<Key, std::vector<TaskAssignment>>& starts,
                    const std::map<Key, const slurm::Job*>& by_tag,
                    std::optional<fs::file_time_type> listed_at) {
    bool changed = false;
    std::vector<PendingSubmit> pending;
    for (auto& [key, assignments] : starts) {
      if (jobs_.count(key)) continue;
      if (!listed_at) {
        std::error_code ec;
        if (fs::exists(RunDir(key) / "intent", ec) || fs::exists(RunDir(key) / "submitted", ec)) {
          continue;  // handed over before: the next full pass decides with Slurm's list
        }
      }
      const TaskAssignment& a = assignments.front();
      JobEntry entry;
      entry.key = key;
      entry.tag = Tag(key);
      entry.run_dir = RunDir(key);
      entry.task_nodes = a.gang_nodes;
      Shape(a.spec, &entry);
      // Every task must be on this cluster's nodes.
      std::string foreign;
      for (const std::string& node : entry.task_nodes) {
        if (!nodes_.count(node)) foreign = node;
      }
      if (!foreign.empty() || entry.task_nodes.empty()) {
        for (const TaskAssignment& t : assignments) {
          TaskReport r;
          r.ref = t.ref;
          r.kind = TaskReport::Kind::kLaunchFailed;
          r.message =
              "a gang on Slurm pool nodes must run on one Slurm cluster (task on " + foreign + ")";
          r.at_ms = WallMs();
          outbox_[t.gang_nodes.at(static_cast<size_t>(t.ref.task))].push_back(r);
        }
        changed = true;
        continue;
      }
      std::error_code marker_ec;
      const bool ours = fs::exists(entry.run_dir / "intent", marker_ec);
      if (auto known = by_tag.find(key); known != by_tag.end() && ours) {
        // Submitted before (a restart between Slurm's answer and the marker): adopt.
        entry.slurm_id = known->second->id;
        PrimeLogOffsets(&entry);
        LogInfo("adopted Slurm job " + std::to_string(entry.slurm_id) + " (" + entry.tag + ")");
        jobs_.emplace(key, std::move(entry));
        changed = true;
        continue;
      }
      std::error_code ec;
      if (auto id = ReadNumberFile(entry.run_dir / "submitted"); id && *id > 0) {
        // Submitted, and Slurm has forgotten it since: its files tell how it ended.
        entry.slurm_id = *id;
        entry.seen = true;
        PrimeLogOffsets(&entry);
        jobs_.emplace(key, std::move(entry));
        changed = true;
        continue;
      }
      const fs::path intent = entry.run_dir / "intent";
      if (fs::exists(intent, ec)) {
        // The marker is rewritten after a submission whose answer was lost:
        // a list read before that may miss a job Slurm did accept.
        if (fs::last_write_time(intent, ec) >= *listed_at && !ec) continue;
        // A submission was under way and its answer never recorded. Slurm
        // lists a job it accepted for MinJobAge (300 s by default) after it
        // ends; an intent this young that Slurm does not list was never
        // accepted, so submitting again is safe. Older: not knowable, the
        // attempt is lost.
        const auto age = fs::file_time_type::clock::now() - fs::last_write_time(intent, ec);
        if (!ec && age > std::chrono::seconds(120)) {
          for (size_t t = 0; t < entry.task_nodes.size(); ++t) {
            Report(entry, static_cast<int>(t), TaskReport::Kind::kLost, std::nullopt, std::nullopt,
                   "its Slurm submission's outcome is unknown (no Slurm job carries " + entry.tag +
                       ")");
          }
          changed = true;
          continue;
        }
      }
      std::optional<PendingSubmit> prepared = PrepareSubmit(pools, a, std::move(entry));
      if (prepared) pending.push_back(std::move(*prepared));
    }
    changed |= SubmitAll(pending);
    return changed;
  }

  // One attempt ready for Slurm: its scripts and intent marker are written.
  struct PendingSubmit {
    JobEntry entry;
    slurm::SubmitRequest request;
    std::optional<Result<int64_t>> answer;
    int64_t answered_ms = 0;  // when Slurm's answer came (the event's time)
  };

  // Hands the prepared attempts to Slurm, up to submit_parallelism at once
  // (each CLI submission is an sbatch process, each REST one a request),
  // then records the answers in order on this thread.
  bool SubmitAll(std::vector<PendingSubmit>& pending) {
    if (pending.empty()) return false;
    const size_t width =
        std::min(pending.size(), static_cast<size_t>(std::max(1, settings_.submit_parallelism)));
    auto submit = [this](PendingSubmit& p) {
      p.answer = client_->Submit(p.request);
      p.answered_ms = WallMs();
    };
    if (width == 1) {
      for (PendingSubmit& p : pending) submit(p);
    } else {
      std::atomic<size_t> next{0};
      auto work = [&] {
        for (size_t i = next++; i < pending.size(); i = next++) submit(pending[i]);
      };
      std::vector<std::thread> workers;
      workers.reserve(width - 1);
      for (size_t w = 1; w < width; ++w) workers.emplace_back(work);
      work();
      for (std::thread& t : workers) t.join();
    }
    bool changed = false;
    for (PendingSubmit& p : pending) changed |= RecordSubmit(std::move(p));
    return changed;
  }

  // Writes an attempt's scripts and intent marker and builds its Slurm
  // request; nothing when it cannot go now (the next pass tries again).
  std::optional<PendingSubmit> PrepareSubmit(const std::vector<sched::PoolConfig>& pools,
                                             const TaskAssignment& a, JobEntry entry) {
    const JobSpec& spec = a.spec;
    const NodeEntry& first = nodes_[entry.task_nodes.front()];
    const sched::PoolConfig* pool = nullptr;
    for (const sched::PoolConfig& p : pools) {
      if (p.name == first.pool && p.slurm) pool = &p;
    }
    if (pool == nullptr) return std::nullopt;  // reconfigured meanwhile: next pass
    Result<std::optional<Job>> job = store_->GetJob(Scope::All(), entry.key.first);
    if (!job.ok() || !job->has_value()) return std::nullopt;
    const auto [account, qos] = pool->slurm->AccountFor((*job)->tenant, (*job)->team, (*job)->user);
    // What only Ferry's agents do: such a job fails clearly instead of
    // running in Slurm without its data, code or image.
    std::string unsupported;
    for (const auto& [needed, what] :
         {std::pair{!spec.inputs.empty(), "inputs"}, std::pair{!spec.code.empty(), "code"},
          std::pair{!spec.image.empty(), "an image"},
          std::pair{!spec.checkpoint.uri.empty(), "checkpoints"},
          std::pair{!spec.outputs.uri.empty(), "outputs"}}) {
      if (needed) unsupported += std::string(unsupported.empty() ? "" : ", ") + what;
    }
    if (!unsupported.empty()) {
      for (size_t t = 0; t < entry.task_nodes.size(); ++t) {
        Report(entry, static_cast<int>(t), TaskReport::Kind::kLaunchFailed, std::nullopt,
               std::nullopt,
               "a Slurm pool does not stage " + unsupported +
                   " yet (docs/slurm.md); use a pool set of Ferry agents");
      }
      return std::nullopt;
    }

    std::error_code ec;
    // One mkdir: the work directory exists (made at start) unless it was
    // removed meanwhile.
    if (::mkdir(entry.run_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      fs::create_directories(entry.run_dir, ec);
      if (ec) {
        LogError("creating " + entry.run_dir.string(), Status::IOError(ec.message()));
        return std::nullopt;
      }
    }
    const std::string title = "Ferry job " + std::to_string(entry.key.first) + ", attempt " +
                              std::to_string(entry.key.second) + " (" + entry.tag + ")";
    const Layout layout = LayoutOf(entry.task_nodes);
    std::vector<std::string> command = spec.command;
    if (command.empty()) command = {"/bin/false"};  // dataflow jobs need an agent
    const SlurmScripts scripts =
        MakeSlurmScripts(entry.run_dir.string(), title, command, spec.gpus_per_task,
                         layout.tasks_per_node > 0 ? layout.tasks_per_node : 1);
    // The task wrapper, then the intent marker (last: its existence is what
    // a restart reads). The batch script goes to Slurm in the request; its
    // copy in the run directory is written once Slurm answered.
    Status written = WriteFileInPlace(entry.run_dir / "task.sh", scripts.task, 0755);
    if (written.ok()) written = WriteFileInPlace(entry.run_dir / "intent", entry.tag + "\n", 0644);
    if (!written.ok()) {
      LogError("writing the scripts of " + entry.tag, written);
      return std::nullopt;
    }

    slurm::SubmitRequest request;
    request.name = spec.name.empty() ? entry.tag : spec.name.substr(0, 128);
    request.comment = entry.tag;
    request.partition = pool->slurm->partition;
    request.account = account;
    request.qos = qos;
    request.nodes = layout.nodes;
    std::string gpu_type;
    if (!spec.gpu_models.empty()) {
      // The model asked for, as the GRES type of the node Ferry chose.
      Result<std::optional<Node>> stored = store_->GetNode(entry.task_nodes.front());
      if (stored.ok() && stored->has_value()) {
        auto label = (*stored)->labels.find("slurm_gpu_type");
        if (label != (*stored)->labels.end()) gpu_type = label->second;
      }
    }
    request.gpu_type = gpu_type;
    if (layout.tasks_per_node > 0) {
      request.tasks_per_node = layout.tasks_per_node;
      request.gpus_per_node = spec.gpus_per_task * layout.tasks_per_node;
      request.memory_mb_per_node = spec.memory_mb_per_task * layout.tasks_per_node;
    } else {
      request.tasks = static_cast<int>(entry.task_nodes.size());
      request.gpus_per_task = spec.gpus_per_task;
      request.memory_mb_per_node = spec.memory_mb_per_task * layout.max_tasks_per_node;
    }
    request.cpus_per_task = static_cast<int>(std::ceil(std::max(spec.cpus_per_task, 1.0)));
    for (const std::string& n : entry.task_nodes) {
      const std::string& slurm_name = nodes_[n].slurm_name;
      if (std::find(request.nodelist.begin(), request.nodelist.end(), slurm_name) ==
          request.nodelist.end()) {
        request.nodelist.push_back(slurm_name);
      }
    }
    if (spec.max_runtime_seconds > 0) {
      // Ferry's own runtime limit ends it first; Slurm's is the backstop.
      request.time_limit_minutes = static_cast<int>((spec.max_runtime_seconds + 59) / 60) + 1;
    } else {
      request.time_limit_minutes = pool->slurm->time_limit_minutes;
    }
    request.working_dir = spec.working_dir.empty() ? entry.run_dir.string() : spec.working_dir;
    request.stdout_path = (entry.run_dir / "batch.out").string();
    request.stderr_path = (entry.run_dir / "batch.err").string();
    request.environment = spec.env;
    request.environment["PATH"] = settings_.path;
    request.environment["HOME"] = entry.run_dir.string();
    if (!settings_.slurm_conf.empty()) request.environment["SLURM_CONF"] = settings_.slurm_conf;
    request.environment["FERRY_JOB_ID"] = std::to_string(entry.key.first);
    request.environment["FERRY_JOB_NAME"] = a.job_name.empty() ? spec.name : a.job_name;
    request.environment["FERRY_ATTEMPT"] = std::to_string(entry.key.second);
    request.environment["FERRY_TASK_COUNT"] = std::to_string(entry.task_nodes.size());
    request.environment["FERRY_SLURM_CLUSTER"] = config_.name;
    request.environment["WORLD_SIZE"] = std::to_string(entry.task_nodes.size());
    const int range = options_->rendezvous_port_max - options_->rendezvous_port_min + 1;
    if (range > 0 && entry.task_nodes.size() > 1) {
      request.environment["MASTER_PORT"] =
          std::to_string(options_->rendezvous_port_min + static_cast<int>(entry.key.first % range));
    }
    request.script = scripts.batch;

    return PendingSubmit{std::move(entry), std::move(request), std::nullopt};
  }

  // Slurm's answer to one submission: the job recorded, or refused. True
  // when what the scheduler sees changed (a refusal ends the attempt).
  bool RecordSubmit(PendingSubmit p) {
    JobEntry& entry = p.entry;
    const slurm::SubmitRequest& request = p.request;
    std::error_code ec;
    const Result<int64_t>& id = *p.answer;
    Count(id);
    if (!id.ok()) {
      if (Transient(id.status())) {
        // Slurm may or may not have it: the next pass lists it (adopt) or
        // finds the young intent and submits again.
        LogError("submitting " + entry.tag, id.status());
        // Rewritten, so that only a list read after this answer can tell
        // that Slurm does not have the job.
        Status touched = WriteFile(entry.run_dir / "intent", entry.tag + "\n", 0644);
        if (!touched.ok()) LogError("rewriting the intent of " + entry.tag, touched);
        return false;
      }
      fs::remove(entry.run_dir / "intent", ec);
      for (size_t t = 0; t < entry.task_nodes.size(); ++t) {
        Report(entry, static_cast<int>(t), TaskReport::Kind::kLaunchFailed, std::nullopt,
               std::nullopt, "Slurm refused the job: " + id.status().message());
      }
      return true;
    }
    if (settings_.fault_kill_after_submit > 0 &&
        ++submissions_seen_ == settings_.fault_kill_after_submit) {
      LogInfo("fault_kill_after_submit: killing the server after Slurm accepted job " +
              std::to_string(*id));
      ::raise(SIGKILL);
    }
    entry.slurm_id = *id;
    entry.submitted_s = SteadyS();
    Status marked = WriteFile(entry.run_dir / "submitted", std::to_string(*id) + "\n", 0644);
    if (!marked.ok()) LogError("recording the submission of " + entry.tag, marked);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++submitted_;
    }
    std::string where =
        "partition " + (request.partition.empty() ? "(default)" : request.partition);
    if (!request.account.empty()) where += ", account " + request.account;
    if (!request.qos.empty()) where += ", qos " + request.qos;
    Result<bool> noted =
        store_->NoteAttempt(entry.key.first, entry.key.second, "slurm_submitted", "",
                            "submitted to Slurm cluster " + config_.name + " as job " +
                                std::to_string(*id) + " (" + where + ")",
                            Actor(), p.answered_ms);
    if (!noted.ok()) LogError("noting the submission of " + entry.tag, noted.status());
    // What was submitted, for whoever reads the run directory (nothing in
    // Ferry reads it back).
    Status kept = WriteFileInPlace(entry.run_dir / "batch.sh", request.script, 0755);
    if (!kept.ok()) LogError("keeping the batch script of " + entry.tag, kept);
    jobs_.emplace(entry.key, std::move(entry));
    // Only an event: the placement was committed at admission, so nothing
    // the scheduler sees has changed and no pass is woken for it.
    return false;
  }

  void HandleStops(const std::map<Key, int64_t>& stops) {
    const double now_s = SteadyS();
    for (const auto& [key, grace_ms] : stops) {
      auto it = jobs_.find(key);
      if (it == jobs_.end()) continue;
      JobEntry& job = it->second;
      if (job.stop) continue;
      job.stop = true;
      const int64_t grace = grace_ms >= 0 ? grace_ms : options_->stop_grace_ms;
      const bool running = job.started;  // as the last full pass saw it
      if (job.slurm_id <= 0) {
        job.ended = true;
        continue;
      }
      if (running && grace > 0) {
        // SIGTERM now through the task wrappers (the tasks may checkpoint),
        // Slurm's cancel after the grace.
        Status asked = WriteFile(job.run_dir / "stop", "stop\n", 0644);
        if (!asked.ok()) LogError("asking " + job.tag + " to stop", asked);
        job.kill_at_s = now_s + static_cast<double>(grace) / 1000.0;
      } else {
        Count(client_->Cancel(job.slurm_id, 0));
        job.killed = true;
      }
    }
    for (auto& [key, job] : jobs_) {
      if (job.stop && !job.killed && job.slurm_id > 0 && now_s >= job.kill_at_s) {
        Count(client_->Cancel(job.slurm_id, 0));
        job.killed = true;
      }
    }
  }

  // Slurm's state of every followed job into its attempt.
  bool Mirror(const std::map<int64_t, const slurm::Job*>& by_id) {
    bool changed = false;
    for (auto& [key, job] : jobs_) {
      if (job.ended || job.slurm_id <= 0) continue;
      auto it = by_id.find(job.slurm_id);
      if (it == by_id.end()) {
        // Not listed: just submitted (give it a moment), or forgotten by
        // Slurm since it ended (its files say how).
        if (!job.seen && SteadyS() - job.submitted_s < 30) continue;
        changed |= FinishFromFiles(&job, nullptr);
        continue;
      }
      const slurm::Job& sj = *it->second;
      job.seen = true;
      job.state = sj.state;
      if (slurm::IsFinished(sj.state)) {
        changed |= FinishFromFiles(&job, &sj);
        continue;
      }
      const bool running = sj.state == slurm::JobState::kRunning ||
                           sj.state == slurm::JobState::kSuspended ||
                           sj.state == slurm::JobState::kCompleting;
      if (running && !job.started) {
        for (size_t t = 0; t < job.task_nodes.size(); ++t) {
          Report(job, static_cast<int>(t), TaskReport::Kind::kStarted);
        }
        job.started = true;
        changed = true;
      } else if (!running && !job.started && !job.stop) {
        const std::string why = sj.reason;
        if (why.empty() || why == "None" || why == job.noted) continue;
        job.noted = why;
        Result<bool> noted = store_->NoteAttempt(
            key.first, key.second, "slurm_pending", std::string(FerryReasonForSlurm(why)),
            "Slurm job " + std::to_string(sj.id) + " pending: " + why, Actor(), WallMs());
        if (!noted.ok()) LogError("noting the pending reason of " + job.tag, noted.status());
        changed = true;
      }
    }
    return changed;
  }

  // The job is over in Slurm (or forgotten by it): reports for its attempt.
  bool FinishFromFiles(JobEntry* job, const slurm::Job* sj) {
    TailLogs(job);
    const int tasks = static_cast<int>(job->task_nodes.size());
    const std::string who = "Slurm job " + std::to_string(job->slurm_id);
    job->ended = true;
    const slurm::JobState state = sj != nullptr ? sj->state : slurm::JobState::kUnknown;
    auto all = [&](TaskReport::Kind kind, const std::string& message) {
      for (int t = 0; t < tasks; ++t) Report(*job, t, kind, std::nullopt, std::nullopt, message);
    };
    const std::string detail =
        sj == nullptr
            ? ""
            : " (" + sj->state_text +
                  (sj->reason.empty() || sj->reason == "None" ? "" : ", " + sj->reason) + ")";
    switch (state) {
      case slurm::JobState::kTimeout:
        Report(*job, 0, TaskReport::Kind::kTimedOut, std::nullopt, std::nullopt,
               who + " reached its time limit" + detail);
        return true;
      case slurm::JobState::kNodeFail:
      case slurm::JobState::kBootFail:
        Report(*job, 0, TaskReport::Kind::kLost, std::nullopt, std::nullopt,
               who + " lost its node" + detail);
        return true;
      case slurm::JobState::kPreempted:
        Report(*job, 0, TaskReport::Kind::kPreempted, std::nullopt, std::nullopt,
               who + " was preempted by Slurm" + detail);
        return true;
      default:
        break;
    }
    std::error_code ec;
    const auto batch = ReadNumberFile(job->run_dir / "exit.batch");
    if (sj == nullptr && !batch) {
      // Forgotten, and it never recorded an end: it died with its node or was killed.
      all(TaskReport::Kind::kLost, who + " is no longer known to Slurm and left no exit status");
      return true;
    }
    if (!job->started && sj != nullptr && sj->start_time == 0 &&
        state != slurm::JobState::kCancelled) {
      all(TaskReport::Kind::kLaunchFailed, who + " ended before it started" + detail);
      return true;
    }
    if (state == slurm::JobState::kCancelled && !job->stop) {
      // Cancelled in Slurm itself (an admin's scancel): so it is in Ferry.
      Result<CancelOutcome> cancelled =
          store_->CancelJob(Scope::All(), job->key.first, Actor(), WallMs());
      if (!cancelled.ok()) LogError("cancelling " + job->tag, cancelled.status());
    }
    if (!job->started) {
      for (int t = 0; t < tasks; ++t) Report(*job, t, TaskReport::Kind::kStarted);
      job->started = true;
    }
    for (int t = 0; t < tasks; ++t) {
      std::optional<int> code;
      std::optional<int> signal;
      if (auto recorded = ReadNumberFile(job->run_dir / ("exit." + std::to_string(t)))) {
        code = static_cast<int>(*recorded);
      } else if (state == slurm::JobState::kCancelled || job->stop) {
        signal = SIGTERM;
      } else if (sj != nullptr && sj->exit_signal != 0) {
        signal = sj->exit_signal;
      } else if (batch) {
        code = static_cast<int>(*batch);
      } else if (sj != nullptr && sj->exit_code) {
        code = *sj->exit_code;
      } else {
        code = state == slurm::JobState::kCompleted ? 0 : 1;
      }
      std::string message = who + detail;
      if (state == slurm::JobState::kOutOfMemory) message += ": out of memory";
      Report(*job, t, TaskReport::Kind::kExited, code, signal, message);
    }
    return true;
  }

  // While the controller cannot be reached, attempts placed here and not
  // yet handed to Slurm wait; after unreachable_requeue_s they go back to
  // the queue (LOST, requeued by the retry rules) to run elsewhere.
  bool HoldWhileUnreachable(const std::map<Key, std::vector<TaskAssignment>>& starts,
                            double now_s) {
    bool changed = false;
    const double waited = unreachable_since_s_ > 0 ? now_s - unreachable_since_s_ : 0;
    for (const auto& [key, assignments] : starts) {
      if (jobs_.count(key)) continue;
      std::error_code ec;
      const bool maybe_submitted = fs::exists(RunDir(key) / "intent", ec);
      if (waited >= settings_.unreachable_requeue_s && !maybe_submitted) {
        JobEntry entry;
        entry.key = key;
        entry.task_nodes = assignments.front().gang_nodes;
        for (size_t t = 0; t < entry.task_nodes.size(); ++t) {
          Report(entry, static_cast<int>(t), TaskReport::Kind::kLost, std::nullopt, std::nullopt,
                 "Slurm cluster " + config_.name + " unreachable for " +
                     std::to_string(static_cast<int>(waited)) + " s; not submitted");
        }
        changed = true;
        continue;
      }
      if (held_noted_.insert(key).second) {
        Result<bool> noted = store_->NoteAttempt(
            key.first, key.second, "slurm_unreachable",
            std::string(reason::kResourceManagerUnreachable),
            "Slurm cluster " + config_.name + " does not answer; the job waits for it", Actor(),
            WallMs());
        if (!noted.ok()) LogError("noting an unreachable cluster", noted.status());
        changed = true;
      }
    }
    return changed;
  }

  // ---- Logs: the tasks' output files, appended to the job's logs.

  void PrimeLogOffsets(JobEntry* job) {
    int64_t after = 0;
    while (true) {
      Result<std::optional<std::vector<LogChunk>>> chunks =
          store_->ReadLogs(Scope::All(), job->key.first, after, 1000);
      if (!chunks.ok() || !chunks->has_value() || (*chunks)->empty()) return;
      for (const LogChunk& chunk : **chunks) {
        after = chunk.seq;
        if (chunk.attempt != job->key.second) continue;
        job->log_offsets[{chunk.task, chunk.stream == "stderr" ? 1 : 0}] +=
            static_cast<int64_t>(chunk.data.size());
      }
      if ((*chunks)->size() < 1000) return;
    }
  }

  void TailAllLogs() {
    for (auto& [key, job] : jobs_) {
      if (!job.ended && job.started) TailLogs(&job);
    }
  }

  void TailLogs(JobEntry* job) {
    constexpr int64_t kMaxChunk = int64_t{256} * 1024;
    bool appended = false;
    for (size_t t = 0; t < job->task_nodes.size(); ++t) {
      for (int stream = 0; stream < 2; ++stream) {
        const fs::path file =
            job->run_dir / ("task-" + std::to_string(t) + (stream == 0 ? ".out" : ".err"));
        int64_t& offset = job->log_offsets[{static_cast<int>(t), stream}];
        std::ifstream in(file, std::ios::binary);
        if (!in) continue;
        in.seekg(offset);
        std::string data(static_cast<size_t>(kMaxChunk), '\0');
        while (in) {
          in.read(data.data(), kMaxChunk);
          const std::streamsize got = in.gcount();
          if (got <= 0) break;
          Status st = store_->AppendLog(job->key.first, job->key.second, static_cast<int>(t),
                                        stream == 0 ? "stdout" : "stderr",
                                        data.substr(0, static_cast<size_t>(got)), WallMs());
          if (!st.ok()) {
            LogError("appending the logs of " + job->tag, st);
            break;
          }
          offset += got;
          appended = true;
        }
      }
    }
    if (appended && options_->on_logs) options_->on_logs();
  }

  Store* store_;
  const Options* options_;
  sched::ProviderConfig config_;
  SlurmSettings settings_;
  std::unique_ptr<slurm::SlurmClient> client_;

  std::mutex mu_;  // guards the fields below it up to the thread-only state
  std::condition_variable cv_;
  bool stopping_ = false;
  bool woken_ = false;
  std::thread thread_;
  std::thread reader_thread_;
  std::thread lease_thread_;
  std::optional<Snapshot> snapshot_;             // the reader's newest, not yet taken
  std::map<std::string, LeaseView> lease_view_;  // registered nodes, as the last pass left them
  std::vector<sched::PoolConfig> pools_;
  std::vector<std::string> pool_names_;
  CircuitBreaker breaker_;
  CircuitBreaker::State breaker_state_ = CircuitBreaker::State::kClosed;
  std::set<std::string> owned_;
  bool reachable_ = false;
  std::string last_error_;
  int64_t last_sync_ms_ = 0;
  int64_t calls_ = 0, failures_ = 0, breaker_opens_ = 0, submitted_ = 0, jobs_count_ = 0;

  // Only the cluster's thread touches these.
  std::map<std::string, NodeEntry> nodes_;
  std::map<Key, JobEntry> jobs_;
  std::map<std::string, std::vector<TaskReport>> outbox_;  // by Ferry node
  std::set<int64_t> settled_;  // tagged Slurm jobs looked at and left alone
  std::set<Key> held_noted_;
  bool reachable_now_ = false;
  double unreachable_since_s_ = 0;
  int submissions_seen_ = 0;
  std::string logged_error_;

  friend class SlurmController;
};

// ---------------------------------------------------------------- controller

SlurmController::SlurmController(Store* store, Options options)
    : store_(store), options_(std::move(options)) {}

SlurmController::~SlurmController() { Stop(); }

Status SlurmController::Configure(const sched::Config& config) {
  Status first_error;
  std::lock_guard<std::mutex> lock(mu_);
  for (const sched::ProviderConfig& provider : config.providers) {
    if (provider.type != "slurm") continue;
    std::vector<sched::PoolConfig> pools;
    std::vector<std::string> names;
    for (const sched::PoolConfig& pool : config.pools) {
      if (pool.slurm && pool.provider == provider.name) {
        pools.push_back(pool);
        names.push_back(pool.name);
      }
    }
    auto it = clusters_.find(provider.name);
    if (it == clusters_.end()) {
      Result<SlurmSettings> settings = SlurmSettingsFromConfig(provider, options_.data_dir);
      Result<std::unique_ptr<slurm::SlurmClient>> client =
          settings.ok() ? MakeSlurmClient(*settings)
                        : Result<std::unique_ptr<slurm::SlurmClient>>(settings.status());
      if (!client.ok()) {
        if (first_error.ok()) first_error = client.status();
        continue;
      }
      auto cluster = std::make_unique<Cluster>(store_, &options_, provider, std::move(*settings),
                                               std::move(*client));
      it = clusters_.emplace(provider.name, std::move(cluster)).first;
      if (started_) it->second->Start();
    }
    {
      std::lock_guard<std::mutex> cluster_lock(it->second->mu_);
      it->second->pool_names_ = names;
    }
    it->second->SetPools(std::move(pools));
    it->second->Wake();
  }
  return first_error;
}

void SlurmController::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
  for (auto& [name, cluster] : clusters_) cluster->Start();
}

void SlurmController::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, cluster] : clusters_) cluster->Stop();
}

void SlurmController::Wake(const std::set<std::string>& nodes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, cluster] : clusters_) {
    if (cluster->Owns(nodes)) cluster->Wake();
  }
}

void SlurmController::WakeAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, cluster] : clusters_) cluster->Wake();
}

json SlurmController::StatusJson() {
  std::lock_guard<std::mutex> lock(mu_);
  json out = json::array();
  for (auto& [name, cluster] : clusters_) out.push_back(cluster->StatusJson());
  return out;
}

std::vector<SlurmController::ClusterMetrics> SlurmController::Metrics() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ClusterMetrics> out;
  for (auto& [name, cluster] : clusters_) out.push_back(cluster->Metrics());
  return out;
}

}  // namespace ferry::fleet::server_internal
