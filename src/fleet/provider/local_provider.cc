// The `local` provider: "cloud" nodes that are real `ferry agent` processes
// on this machine, with the pool's price, provisioning delay and shape (as
// declared fake GPUs), and spot interruptions drawn from an exponential
// distribution. One background thread starts agents when their delay is up,
// notices agents that exit on their own and carries out interruptions.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "ferry/fleet/provider.h"

namespace ferry::fleet {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

// Beyond this many nodes listed, ended (terminated, interrupted) ones are forgotten.
constexpr size_t kMaxListed = 4096;

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

SteadyClock::time_point After(double seconds) {
  // Far enough for "never" without overflowing time_point arithmetic.
  seconds = std::min(seconds, 1e9);
  return SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                  std::chrono::duration<double>(std::max(0.0, seconds)));
}

std::string FormatNumber(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Pids of every descendant of `root` (children first found, then theirs), from /proc.
std::vector<pid_t> Descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;  // parent → child
  if (DIR* dir = opendir("/proc")) {
    while (dirent* entry = readdir(dir)) {
      pid_t pid = 0;
      const char* name = entry->d_name;
      auto [end, error] = std::from_chars(name, name + std::strlen(name), pid);
      if (error != std::errc() || *end != '\0') continue;
      std::ifstream stat_file("/proc/" + std::string(name) + "/stat");
      std::string text;
      std::getline(stat_file, text);
      // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
      const size_t close = text.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(text.substr(close + 1));
      std::string state;
      pid_t ppid = 0;
      if (rest >> state >> ppid) children.emplace(ppid, pid);
    }
    closedir(dir);
  }
  std::vector<pid_t> out;
  std::vector<pid_t> frontier = {root};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      if (std::find(out.begin(), out.end(), it->second) != out.end()) continue;
      out.push_back(it->second);
      frontier.push_back(it->second);
    }
  }
  return out;
}

// Kills an agent the way a machine dies: freezes it so it starts nothing
// new, kills its tasks (own process groups) and then the agent's group.
// Reaps the agent; the tasks are not our children.
void KillTree(pid_t pid) {
  kill(pid, SIGSTOP);
  for (pid_t child : Descendants(pid)) {
    const pid_t group = getpgid(child);
    if (group > 0 && group != getpgrp()) kill(-group, SIGKILL);
    kill(child, SIGKILL);
  }
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// Waits up to `seconds` for child `pid` to exit; true when it did (and was reaped).
bool WaitExit(pid_t pid, double seconds) {
  const auto deadline = After(seconds);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  while (true) {
    const pid_t done = waitpid(pid, nullptr, WNOHANG);
    if (done == pid || (done < 0 && errno == ECHILD)) break;
    const auto left = deadline - SteadyClock::now();
    if (left <= SteadyClock::duration::zero()) {
      if (pidfd >= 0) close(pidfd);
      return false;
    }
    const int left_ms = static_cast<int>(
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(left).count()));
    if (pidfd >= 0) {
      pollfd entry{pidfd, POLLIN, 0};
      poll(&entry, 1, left_ms);  // readable when the process exits
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(left_ms, 20)));
    }
  }
  if (pidfd >= 0) close(pidfd);
  return true;
}

class LocalProvider final : public Provider {
 public:
  explicit LocalProvider(LocalProviderOptions options)
      : options_(std::move(options)),
        rng_(options_.seed),
        fail_next_(options_.fail_next_provisions) {
    worker_ = std::thread([this] { Work(); });
  }

  ~LocalProvider() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    worker_.join();  // the thread stops every agent on its way out (StopAll)
  }

  std::string_view name() const override { return "local"; }

  Result<std::vector<std::string>> Provision(const sched::PoolConfig& pool, int count) override {
    if (count < 1) return Status::Invalid("local provider: count must be >= 1");
    if (pool.name.empty()) return Status::Invalid("local provider: the pool has no name");
    if (pool.provisioning_delay_s < 0 || !std::isfinite(pool.provisioning_delay_s)) {
      return Status::Invalid("local provider: pool '" + pool.name +
                             "': provisioning_delay_s must be >= 0");
    }
    if (pool.node.gpus < 0) {
      return Status::Invalid("local provider: pool '" + pool.name + "': node.gpus must be >= 0");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_next_ > 0) {
      --fail_next_;
      return Status::IOError("local provider: unavailable (injected failure; " +
                             std::to_string(fail_next_) + " more to come)");
    }
    int active = 0;
    for (const auto& [name, node] : nodes_) {
      if (node.info.pool == pool.name && Active(node)) ++active;
    }
    if (active + count > pool.max_nodes) {
      return Status::Invalid("local provider: pool '" + pool.name + "' allows " +
                             std::to_string(pool.max_nodes) + " node(s); " +
                             std::to_string(active) + " active, " + std::to_string(count) +
                             " requested");
    }
    // Ended nodes stay listed, but not forever.
    if (nodes_.size() >= kMaxListed) {
      std::erase_if(nodes_, [](const auto& entry) {
        return !Active(entry.second) && !entry.second.stopping && entry.second.pid <= 0;
      });
    }
    std::vector<std::string> names;
    const double now = UnixNow();
    for (int i = 0; i < count; ++i) {
      Node node;
      node.info.name =
          options_.name_prefix + "-" + pool.name + "-" + std::to_string(++next_index_[pool.name]);
      node.info.pool = pool.name;
      node.info.spot = pool.spot;
      node.info.state = CloudNode::State::kProvisioning;
      node.info.requested_s = now;
      node.pool = pool;
      node.start_at = After(pool.provisioning_delay_s);
      names.push_back(node.info.name);
      nodes_[node.info.name] = std::move(node);
    }
    changed_.notify_all();
    return names;
  }

  Status Deprovision(const std::string& name) override {
    pid_t pid = -1;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto it = nodes_.find(name);
      if (it == nodes_.end()) return Status::OK();
      Node& node = it->second;
      if (node.stopping) {
        // Another thread is stopping it: wait for that to finish.
        stopped_.wait(lock, [&] { return !node.stopping; });
        return Status::OK();
      }
      if (node.pid <= 0) {
        if (node.info.state == CloudNode::State::kProvisioning) {
          node.info.state = CloudNode::State::kTerminated;
        }
        return Status::OK();
      }
      node.stopping = true;
      pid = node.pid;
    }
    kill(pid, SIGTERM);
    if (!WaitExit(pid, options_.stop_timeout_s)) KillTree(pid);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Node& node = nodes_[name];
      node.pid = -1;
      node.stopping = false;
      node.info.state = CloudNode::State::kTerminated;
    }
    stopped_.notify_all();
    return Status::OK();
  }

  Result<std::vector<CloudNode>> List() override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<CloudNode> out;
    out.reserve(nodes_.size());
    for (const auto& [name, node] : nodes_) out.push_back(node.info);
    return out;
  }

  Result<double> Price(const sched::PoolConfig& pool) override {
    if (pool.price_per_gpu_hour < 0 || !std::isfinite(pool.price_per_gpu_hour)) {
      return Status::Invalid("local provider: pool '" + pool.name + "' has no valid price");
    }
    return pool.price_per_gpu_hour;
  }

  std::vector<std::string> TakeInterruptions() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(interruptions_, {});
  }

 private:
  struct Node {
    CloudNode info;
    sched::PoolConfig pool;
    pid_t pid = -1;
    bool stopping = false;  // a thread is stopping its agent (it owns the reaping)
    SteadyClock::time_point start_at;
    SteadyClock::time_point interrupt_at = SteadyClock::time_point::max();
  };

  static bool Active(const Node& node) {
    return node.info.state == CloudNode::State::kProvisioning ||
           node.info.state == CloudNode::State::kRunning;
  }

  // The background thread. Holds the lock except while killing.
  void Work() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      const auto now = SteadyClock::now();
      // At most this long between checks for agents that exited on their own.
      auto wake = now + std::chrono::milliseconds(250);
      std::vector<std::string> interrupt;
      for (auto& [name, node] : nodes_) {
        if (node.stopping) continue;
        if (node.info.state == CloudNode::State::kProvisioning) {
          if (now >= node.start_at) {
            Start(node);
          } else {
            wake = std::min(wake, node.start_at);
          }
        }
        if (node.info.state != CloudNode::State::kRunning || node.pid <= 0) continue;
        int status = 0;
        if (waitpid(node.pid, &status, WNOHANG) == node.pid) {
          node.pid = -1;  // exited on its own (a crash, or exec failed)
          node.info.state = CloudNode::State::kTerminated;
          continue;
        }
        if (now >= node.interrupt_at) {
          node.stopping = true;
          interrupt.push_back(name);
        } else {
          wake = std::min(wake, node.interrupt_at);
        }
      }
      for (const std::string& name : interrupt) {
        const pid_t pid = nodes_[name].pid;
        lock.unlock();
        KillTree(pid);
        lock.lock();
        Node& node = nodes_[name];
        node.pid = -1;
        node.stopping = false;
        node.info.state = CloudNode::State::kInterrupted;
        interruptions_.push_back(name);
        stopped_.notify_all();
      }
      if (!interrupt.empty()) continue;
      changed_.wait_until(lock, wake);
    }
    StopAll(lock);
  }

  // Stops every agent: SIGTERM to all, then a shared bounded wait, then
  // SIGKILL. Runs on the thread that started them: their parent-death signal
  // is tied to it, so it must outlive them.
  void StopAll(std::unique_lock<std::mutex>& lock) {
    // Deprovision calls still stopping a node finish first (they reap it).
    stopped_.wait(lock, [&] {
      return std::none_of(nodes_.begin(), nodes_.end(),
                          [](const auto& entry) { return entry.second.stopping; });
    });
    std::vector<pid_t> agents;
    for (auto& [name, node] : nodes_) {
      if (node.pid > 0) {
        kill(node.pid, SIGTERM);
        agents.push_back(node.pid);
      }
      if (Active(node)) node.info.state = CloudNode::State::kTerminated;
      node.pid = -1;
    }
    lock.unlock();
    const auto deadline = After(options_.stop_timeout_s);
    for (pid_t pid : agents) {
      const double left = std::chrono::duration<double>(deadline - SteadyClock::now()).count();
      if (!WaitExit(pid, std::max(0.0, left))) KillTree(pid);
    }
    lock.lock();
  }

  // Starts the agent of a provisioning node (lock held).
  void Start(Node& node) {
    const std::string& name = node.info.name;
    const std::string dir = options_.work_dir + "/" + name;
    std::error_code error;
    fs::create_directories(dir, error);
    const std::string log_path = dir + "/agent.log";
    const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log_fd < 0 || null_fd < 0) {
      if (log_fd >= 0) close(log_fd);
      if (null_fd >= 0) close(null_fd);
      node.info.state = CloudNode::State::kTerminated;
      return;
    }
    const sched::NodeShape& shape = node.pool.node;
    std::vector<std::string> args = {options_.ferry_binary,
                                     "agent",
                                     "--server",
                                     options_.server_url,
                                     "--token-file",
                                     options_.agent_token_file,
                                     "--pool",
                                     node.pool.name,
                                     "--name",
                                     name,
                                     "--ignore-nvml",
                                     "--work-dir",
                                     dir,
                                     "--label",
                                     std::string("spot=") + (node.pool.spot ? "true" : "false"),
                                     "--label",
                                     "provider=local"};
    if (!options_.ca_file.empty()) args.insert(args.end(), {"--ca-file", options_.ca_file});
    if (shape.gpus > 0) {
      std::string gpus = std::to_string(shape.gpus) + "x" + shape.gpu_model;
      if (shape.gpu_memory_mb > 0) gpus += ":" + std::to_string(shape.gpu_memory_mb);
      args.insert(args.end(), {"--gpus", gpus});
    }
    if (shape.cpus > 0) args.insert(args.end(), {"--cpus", FormatNumber(shape.cpus)});
    if (shape.memory_mb > 0) {
      args.insert(args.end(), {"--memory-mb", std::to_string(shape.memory_mb)});
    }
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const std::string exec_failed = "ferry agent: cannot execute " + options_.ferry_binary + "\n";
    const pid_t parent = getpid();

    const pid_t pid = fork();
    if (pid == 0) {
      // The child: only async-signal-safe calls until exec.
      setpgid(0, 0);
      // Dies with the worker thread that started it (the provider), even on a crash.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      dup2(null_fd, 0);
      dup2(log_fd, 1);
      dup2(log_fd, 2);
      if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
        for (int fd = 3; fd < 4096; ++fd) close(fd);
      }
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execv(argv[0], argv.data());
      ssize_t ignored = write(2, exec_failed.data(), exec_failed.size());
      (void)ignored;
      _exit(127);
    }
    close(log_fd);
    close(null_fd);
    if (pid < 0) {
      node.info.state = CloudNode::State::kTerminated;
      return;
    }
    setpgid(pid, pid);  // also here, so a kill right after fork reaches the group
    node.pid = pid;
    node.info.state = CloudNode::State::kRunning;
    node.info.ready_s = UnixNow();
    const double rate = options_.spot_interruptions_per_hour;
    if (node.pool.spot && rate > 0) {
      const double after_s = std::exponential_distribution<double>(rate / 3600.0)(rng_);
      node.interrupt_at = After(after_s);
    }
  }

  const LocalProviderOptions options_;
  std::mutex mutex_;                 // guards what follows
  std::condition_variable changed_;  // new work for the thread, or stopping
  std::condition_variable stopped_;  // a node's stop finished
  std::map<std::string, Node> nodes_;
  std::map<std::string, int> next_index_;
  std::vector<std::string> interruptions_;
  std::mt19937_64 rng_;
  int fail_next_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace

Result<LocalProviderOptions> LocalProviderOptionsFromConfig(const sched::ProviderConfig& config,
                                                            LocalProviderOptions base) {
  if (config.spot_interruptions_per_hour > 0) {
    base.spot_interruptions_per_hour = config.spot_interruptions_per_hour;
  }
  ProviderParams params("local");
  params.Text("ferry_binary", &base.ferry_binary)
      .Text("server_url", &base.server_url)
      .Text("agent_token_file", &base.agent_token_file)
      .Text("ca_file", &base.ca_file)
      .Text("work_dir", &base.work_dir)
      .Text("name_prefix", &base.name_prefix)
      .Integer("seed", &base.seed)
      .Integer("fail_next_provisions", &base.fail_next_provisions)
      .Number("stop_timeout_s", &base.stop_timeout_s);
  FERRY_RETURN_NOT_OK(params.Read(config));
  return base;
}

Result<std::unique_ptr<Provider>> MakeLocalProvider(const LocalProviderOptions& options) {
  auto bad = [](const std::string& what) { return Status::Invalid("local provider: " + what); };
  if (options.ferry_binary.empty()) return bad("ferry_binary is required");
  if (access(options.ferry_binary.c_str(), X_OK) != 0) {
    return bad("ferry_binary '" + options.ferry_binary + "' is not an executable file");
  }
  if (options.server_url.empty()) return bad("server_url is required");
  if (options.agent_token_file.empty()) return bad("agent_token_file is required");
  if (options.work_dir.empty()) return bad("work_dir is required");
  if (options.name_prefix.empty()) return bad("name_prefix must not be empty");
  for (char c : options.name_prefix) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return bad("name_prefix may hold letters, digits, '-', '_' and '.'");
    }
  }
  if (!(options.spot_interruptions_per_hour >= 0) ||
      !std::isfinite(options.spot_interruptions_per_hour)) {
    return bad("spot_interruptions_per_hour must be >= 0");
  }
  if (!(options.stop_timeout_s >= 0) || !std::isfinite(options.stop_timeout_s)) {
    return bad("stop_timeout_s must be >= 0");
  }
  std::error_code error;
  fs::create_directories(options.work_dir, error);
  if (error)
    return Status::IOError("local provider: work_dir '" + options.work_dir +
                           "': " + error.message());
  return std::unique_ptr<Provider>(std::make_unique<LocalProvider>(options));
}

}  // namespace ferry::fleet
