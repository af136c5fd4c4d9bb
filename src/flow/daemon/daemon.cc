// The dataflow daemon's event loop (daemon.h).
#include "flow/daemon/daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flow/daemon/build.h"
#include "flow/daemon/output.h"
#include "flow/daemon/process.h"
#include "flow/node/protocol.h"

namespace ferry::flow::daemon {
namespace {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Millis = std::chrono::milliseconds;

constexpr TimePoint kNever = TimePoint::max();
// How long a connection may stay silent before saying what it is.
constexpr Millis kIdentifyTimeout{10000};
// How long the pipes of an ended node are read for output still in flight.
constexpr Millis kDrainTimeout{1000};
// The longest poll, so that children are reaped even without pidfds.
constexpr Millis kMaxPollWait{200};
// How long a restarted node's start waits for its consumers' "reconnected".
constexpr Millis kReconnectAckTimeout{10000};

// ---- Signals: the handler writes the signal number into a pipe the loop polls.

int g_signal_pipe_write = -1;

void OnSignal(int signal_number) {
  const int saved_errno = errno;
  if (g_signal_pipe_write >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signal_number);
    ssize_t ignored = ::write(g_signal_pipe_write, &byte, 1);
    (void)ignored;
  }
  errno = saved_errno;
}

class SignalGuard {
 public:
  SignalGuard() = default;
  ~SignalGuard() { Restore(); }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  Status Install(bool stop_signals) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return internal::ErrnoStatus("pipe2", errno);
    read_end_.reset(fds[0]);
    write_end_.reset(fds[1]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old_pipe_);
    if (!stop_signals) return Status::OK();
    g_signal_pipe_write = write_end_.get();
    struct sigaction action {};
    action.sa_handler = OnSignal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
    ::sigaction(SIGHUP, &action, &old_hup_);
    installed_ = true;
    return Status::OK();
  }

  int fd() const { return read_end_.get(); }

  // The signals received since the last call.
  std::vector<int> Drain() {
    std::vector<int> signals;
    unsigned char buffer[64];
    for (;;) {
      ssize_t count = ::read(read_end_.get(), buffer, sizeof(buffer));
      if (count <= 0) break;
      for (ssize_t i = 0; i < count; ++i) signals.push_back(buffer[i]);
    }
    return signals;
  }

 private:
  void Restore() {
    if (read_end_.valid()) ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    if (installed_) {
      ::sigaction(SIGINT, &old_int_, nullptr);
      ::sigaction(SIGTERM, &old_term_, nullptr);
      ::sigaction(SIGHUP, &old_hup_, nullptr);
      g_signal_pipe_write = -1;
      installed_ = false;
    }
  }

  internal::UniqueFd read_end_, write_end_;
  struct sigaction old_int_ {
  }, old_term_{}, old_hup_{}, old_pipe_{};
  bool installed_ = false;
};

// ---- The daemon's state.

// A control connection: a node's (after hello) or a client's (`ferry stop`).
struct Peer {
  protocol::Connection connection;
  int node = -1;  // index into nodes_, once identified
  bool client = false;
  TimePoint identify_deadline = kNever;
};

// A stdout or stderr pipe of a node instance; may outlive the process briefly.
struct Stream {
  int node = -1;
  bool from_stderr = false;
  internal::UniqueFd fd;
  LineBuffer buffer;
  TimePoint drain_deadline = kNever;
};

// nlohmann::json's destructor flattens nested values into a std::vector,
// which the analysis counts as a throw.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct NodeState {
  const NodeSpec* spec = nullptr;
  const NodeLaunch* launch = nullptr;
  std::unique_ptr<NodeOutput> output;
  // The daemon-owned output that carries the node's stdout (send_stdout_as).
  std::unique_ptr<StdoutPublisher> stdout_publisher;
  NodeSummary summary;

  // The current instance.
  bool running = false;
  pid_t pid = -1;
  internal::UniqueFd pidfd;
  int peer = -1;  // key into peers_
  bool ready = false;
  // Order of events (Daemon::sequence_): when this instance said ready, and
  // when the previous instance died.
  uint64_t ready_seq = 0;
  uint64_t died_seq = 0;
  bool start_sent = false;
  // A restarted instance: the consumer inputs (node index, input id) whose
  // "reconnected" its start still waits for, until ack_deadline.
  std::set<std::pair<int, std::string>> pending_acks;
  TimePoint ack_deadline = kNever;
  TimePoint kill_deadline = kNever;
  bool killed_by_us = false;
  // The last statistics the instance sent (counted when it exits).
  nlohmann::json pending_stats;
  bool has_pending_stats = false;

  // Between instances.
  bool restart_pending = false;
  TimePoint restart_at = kNever;
  bool finished = false;  // ended and will not run again
};

class Daemon {
 public:
  Daemon(const Dataflow& dataflow, const DaemonOptions& options)
      : dataflow_(dataflow), options_(options) {}

  Result<RunSummary> Run();

 private:
  Status Prepare();
  void Loop();

  // Starting and ending instances.
  void Launch(int index);
  void HandleExit(int index, const ExitStatus& status);
  void ScheduleOrFinish(int index, const ExitStatus& status);
  void BeginStop(const std::string& reason);
  void KillAll();

  // I/O.
  void AcceptPeers();
  void ReadPeer(int key);
  void HandleMessage(int key, const nlohmann::json& message);
  void HandleHello(int key, const nlohmann::json& message);
  void HandleReady(int index);
  void HandleReconnected(int consumer, const nlohmann::json& message);
  void StartRestarted(int index);
  void CloseConsumerInputs(int index);
  void ForgetAcksFrom(int consumer);
  void ClosePeer(int key);
  bool SendTo(int index, const nlohmann::json& message);
  void ReadStream(Stream& stream, bool until_end);
  void CheckChildren();
  void CheckTimers();
  void CheckBarrier();
  void CheckEnd();

  bool AnyLive() const;
  void Console(const std::string& text);
  RunSummary BuildSummary();

  const Dataflow& dataflow_;
  const DaemonOptions& options_;
  Plan plan_;
  std::string log_dir_;
  std::string log_dir_absolute_;  // for clients in other directories
  protocol::Listener listener_;
  SignalGuard signals_;
  std::vector<NodeState> nodes_;
  std::map<int, Peer> peers_;
  int next_peer_ = 0;
  std::vector<std::unique_ptr<Stream>> streams_;

  // What `ferry ps` shows of this run ({"type": "dataflow", ...}).
  nlohmann::json Describe() const;
  // What `ferry top` shows ({"type": "dataflow_stats", ...}; daemon.h).
  nlohmann::json Stats() const;
  std::string StateName(const NodeState& node) const;

  TimePoint begin_ = Clock::now();
  int64_t begin_unix_ms_ =
      std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  TimePoint start_deadline_ = kNever;
  bool started_ = false;
  uint64_t sequence_ = 0;
  bool start_failed_ = false;
  bool stopping_ = false;
  std::string stop_reason_;
  int interrupts_ = 0;
};

Status Daemon::Prepare() {
  const std::string run_id = options_.run_name.empty() ? GenerateRunId() : options_.run_name;
  FERRY_RETURN_NOT_OK(CheckRunName(run_id));
  if (dataflow_.nodes.empty()) return Status::Invalid("the dataflow has no nodes");
  if (!options_.run_builds) {
    // Without the builds, a program they would make must already be there.
    FERRY_ASSIGN_OR_RAISE(plan_, PlanDataflow(dataflow_, run_id, options_.launch));
  }

  auto listener = protocol::Listener::Listen(protocol::DaemonSocketName(run_id));
  if (!listener.ok()) {
    return Status::Invalid("a dataflow named '" + run_id + "' is already running (" +
                           listener.status().message() + ")");
  }
  listener_ = std::move(listener).MoveValueUnsafe();

  log_dir_ = options_.log_dir.empty() ? ".ferry/logs/" + run_id : options_.log_dir;
  FERRY_RETURN_NOT_OK(MakeDirectories(log_dir_));
  {
    std::error_code error;
    log_dir_absolute_ = std::filesystem::absolute(log_dir_, error).lexically_normal().string();
    if (error) log_dir_absolute_ = log_dir_;
    while (log_dir_absolute_.size() > 1 && log_dir_absolute_.back() == '/') {
      log_dir_absolute_.pop_back();
    }
  }

  nodes_.resize(dataflow_.nodes.size());
  for (size_t i = 0; i < dataflow_.nodes.size(); ++i) {
    NodeState& node = nodes_[i];
    node.spec = &dataflow_.nodes[i];
    node.summary.id = node.spec->id;
    node.output = std::make_unique<NodeOutput>(node.spec->id, options_.out, options_.err);
    FERRY_RETURN_NOT_OK(node.output->OpenLog(log_dir_ + "/" + node.spec->id + ".log"));
  }
  if (options_.run_builds) {
    const std::string directory = dataflow_.directory.empty() ? "." : dataflow_.directory;
    for (NodeState& node : nodes_) {
      FERRY_RETURN_NOT_OK(RunBuild(*node.spec, directory, *node.output));
    }
    FERRY_ASSIGN_OR_RAISE(plan_, PlanDataflow(dataflow_, run_id, options_.launch));
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeState& node = nodes_[i];
    node.launch = &plan_.nodes[i];
    if (!node.spec->send_stdout_as.empty()) {
      const std::string channel =
          protocol::ChannelName(run_id, node.spec->id, "", node.spec->send_stdout_as);
      auto publisher = StdoutPublisher::Create(channel);
      if (!publisher.ok()) {
        return publisher.status().WithPrefix("node '" + node.spec->id + "': send_stdout_as: ");
      }
      node.stdout_publisher = std::move(publisher).MoveValueUnsafe();
    }
  }
  return signals_.Install(options_.handle_signals);
}

Result<RunSummary> Daemon::Run() {
  begin_ = Clock::now();
  FERRY_RETURN_NOT_OK(Prepare());
  Console("dataflow " + plan_.run_id + ": starting " + std::to_string(nodes_.size()) + " node" +
          (nodes_.size() == 1 ? "" : "s") + "; logs in " + log_dir_);
  start_deadline_ = Clock::now() + options_.start_timeout;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Launch(static_cast<int>(i));
  }
  Loop();

  // Output still in flight (bounded: the groups are dead or killed).
  for (auto& stream : streams_) {
    stream->drain_deadline = std::min(stream->drain_deadline, Clock::now() + kDrainTimeout);
    ReadStream(*stream, /*until_end=*/true);
  }
  streams_.clear();
  RunSummary summary = BuildSummary();
  if (!options_.summary_json.empty()) {
    std::ofstream file(options_.summary_json, std::ios::trunc);
    file << summary.ToJson().dump(2) << "\n";
    file.close();
    if (!file) Console("cannot write the summary to '" + options_.summary_json + "'");
  }
  if (options_.print_summary && options_.out != nullptr) {
    *options_.out << summary.ToText();
    options_.out->flush();
  }
  return summary;
}

void Daemon::Console(const std::string& text) {
  if (options_.err == nullptr) return;
  *options_.err << "[ferry] " << text << '\n';
  options_.err->flush();
}

void Daemon::Launch(int index) {
  NodeState& node = nodes_[static_cast<size_t>(index)];
  node.restart_pending = false;
  node.restart_at = kNever;
  NodeConfig config = node.launch->config;
  config.restart_count = node.summary.restarts;
  std::vector<std::pair<std::string, std::string>> overrides(node.launch->env.begin(),
                                                             node.launch->env.end());
  overrides.emplace_back(protocol::kConfigEnv, config.ToJson());
  SpawnRequest request;
  request.program = node.launch->program;
  request.argv = node.launch->argv;
  request.env = MergeEnvironment(overrides);
  request.working_directory = node.launch->working_directory;

  auto child = Spawn(request);
  node.summary.instances += 1;
  if (!child.ok()) {
    node.output->Note("cannot start: " + child.status().message(), /*console=*/true);
    ExitStatus failure;
    failure.exited = true;
    failure.code = 127;
    node.summary.started = true;
    node.summary.exit = failure;
    ScheduleOrFinish(index, failure);
    return;
  }
  node.running = true;
  node.summary.started = true;
  node.pid = child->pid;
  node.pidfd = std::move(child->pidfd);
  node.ready = false;
  node.start_sent = false;
  node.pending_acks.clear();
  node.ack_deadline = kNever;
  node.kill_deadline = kNever;
  node.killed_by_us = false;
  node.has_pending_stats = false;
  node.peer = -1;
  for (int which = 0; which < 2; ++which) {
    auto stream = std::make_unique<Stream>();
    stream->node = index;
    stream->from_stderr = which == 1;
    stream->fd = std::move(which == 0 ? child->stdout_fd : child->stderr_fd);
    streams_.push_back(std::move(stream));
  }
  std::string note = "started, pid " + std::to_string(node.pid);
  if (node.summary.restarts > 0) note += ", restart " + std::to_string(node.summary.restarts);
  node.output->Note(note, /*console=*/false);
}

void Daemon::ScheduleOrFinish(int index, const ExitStatus& status) {
  NodeState& node = nodes_[static_cast<size_t>(index)];
  const RestartPolicy policy = node.spec->restart;
  const bool wants_restart = policy == RestartPolicy::kAlways ||
                             (policy == RestartPolicy::kOnFailure && !status.success());
  if (!stopping_ && wants_restart && node.summary.restarts < node.spec->max_restarts) {
    int shift = std::min(node.summary.restarts, 20);
    Millis delay =
        std::min(options_.restart_backoff * (int64_t{1} << shift), options_.restart_backoff_max);
    node.summary.restarts += 1;
    node.restart_pending = true;
    node.restart_at = Clock::now() + delay;
    node.output->Note(status.ToString() + "; restarting in " + std::to_string(delay.count()) +
                          " ms (restart " + std::to_string(node.summary.restarts) + " of " +
                          std::to_string(node.spec->max_restarts) + ")",
                      /*console=*/true);
    return;
  }
  node.finished = true;
  node.summary.failed = !status.success();
  // Its consumers see the stdout output end once they received every line.
  node.stdout_publisher.reset();
  CloseConsumerInputs(index);
  if (wants_restart && !stopping_) {
    node.output->Note(status.ToString() + "; no restarts left (" +
                          std::to_string(node.spec->max_restarts) + " used)",
                      /*console=*/true);
  }
  if (!started_ && !stopping_ && !status.success()) {
    start_failed_ = true;
    BeginStop("node '" + node.spec->id + "' failed before the dataflow started");
  }
}

void Daemon::HandleExit(int index, const ExitStatus& status) {
  NodeState& node = nodes_[static_cast<size_t>(index)];
  // Messages it sent before exiting (its statistics) and output still in the pipes.
  if (node.peer >= 0) ReadPeer(node.peer);
  for (auto& stream : streams_) {
    if (stream->node == index && stream->fd.valid()) {
      ReadStream(*stream, /*until_end=*/false);
      stream->drain_deadline = std::min(stream->drain_deadline, Clock::now() + kDrainTimeout);
      // Lines sent as an output are all read before its consumers hear it closed.
      if (!stream->from_stderr && node.stdout_publisher != nullptr) {
        ReadStream(*stream, /*until_end=*/true);
      }
    }
  }
  // Whatever the node left behind in its group goes with it.
  KillLeftovers(node.pid);
  if (node.peer >= 0) ClosePeer(node.peer);
  node.running = false;
  node.died_seq = ++sequence_;
  node.pid = -1;
  node.pidfd.reset();
  node.ready = false;
  node.pending_acks.clear();
  node.ack_deadline = kNever;
  ForgetAcksFrom(index);  // a consumer that is gone acknowledges nothing
  node.summary.exit = status;
  node.summary.killed_after_grace = node.killed_by_us;
  if (node.has_pending_stats) {
    Status added = AddNodeStats(node.pending_stats, &node.summary);
    if (!added.ok()) node.output->Note("ignored statistics: " + added.message(), false);
    node.has_pending_stats = false;
  }
  std::string note = node.killed_by_us ? "killed after its stop grace of " +
                                             std::to_string(node.spec->stop_grace.count()) + " ms"
                                       : "exited: " + status.ToString();
  const bool quiet =
      status.success() || (stopping_ && !node.killed_by_us && status.signal == SIGTERM);
  node.output->Note(note, /*console=*/!quiet);
  ScheduleOrFinish(index, status);
  if (node.killed_by_us && node.finished) node.summary.failed = true;
}

void Daemon::BeginStop(const std::string& reason) {
  if (stopping_) return;
  stopping_ = true;
  stop_reason_ = reason;
  if (AnyLive()) Console("stopping: " + reason);
  const TimePoint now = Clock::now();
  // Consumers usually come after their producers in a descriptor: stopping
  // from the end lets them see the stop before their inputs close.
  for (size_t i = nodes_.size(); i-- > 0;) {
    NodeState& node = nodes_[i];
    if (node.restart_pending) {
      node.restart_pending = false;
      node.restart_at = kNever;
      node.finished = true;
      node.summary.failed = !node.summary.exit.success();
      CloseConsumerInputs(static_cast<int>(i));
    }
    node.pending_acks.clear();  // stop, not start, follows
    node.ack_deadline = kNever;
    if (!node.running) continue;
    node.kill_deadline = now + node.spec->stop_grace;
    nlohmann::json stop = {{"type", "stop"}, {"reason", reason}};
    if (!SendTo(static_cast<int>(i), stop)) {
      // No control connection to ask it: the polite signal, then SIGKILL.
      SignalGroup(node.pid, SIGTERM);
    }
  }
}

void Daemon::KillAll() {
  Console("killing every node now");
  for (auto& node : nodes_) {
    if (!node.running) continue;
    node.killed_by_us = true;
    SignalGroup(node.pid, SIGKILL);
  }
}

bool Daemon::SendTo(int index, const nlohmann::json& message) {
  NodeState& node = nodes_[static_cast<size_t>(index)];
  if (node.peer < 0) return false;
  auto it = peers_.find(node.peer);
  if (it == peers_.end()) return false;
  Status sent = it->second.connection.Send(message);
  if (!sent.ok()) {
    node.output->Note(
        "cannot send " + message.value("type", std::string("?")) + ": " + sent.message(),
        /*console=*/false);
    return false;
  }
  return true;
}

void Daemon::AcceptPeers() {
  for (;;) {
    auto accepted = listener_.Accept();
    if (!accepted.ok()) {
      Console("accepting a control connection failed: " + accepted.status().message());
      return;
    }
    if (!accepted->valid()) return;
    Peer peer;
    peer.connection = std::move(accepted).MoveValueUnsafe();
    peer.identify_deadline = Clock::now() + kIdentifyTimeout;
    peers_.emplace(next_peer_++, std::move(peer));
  }
}

void Daemon::ReadPeer(int key) {
  for (;;) {
    auto it = peers_.find(key);
    if (it == peers_.end()) return;
    auto message = it->second.connection.Receive(std::chrono::nanoseconds(0));
    if (!message.ok()) {
      if (message.status().code() == StatusCode::kTimedOut) return;
      const int node = it->second.node;
      std::string text = "bad control message: " + message.status().message();
      if (node >= 0) {
        nodes_[static_cast<size_t>(node)].output->Note(text, /*console=*/true);
      } else {
        Console(text);
      }
      if (message.status().code() == StatusCode::kInvalid) continue;  // skip this datagram
      ClosePeer(key);
      return;
    }
    if (!message->has_value()) {
      ClosePeer(key);
      return;
    }
    HandleMessage(key, **message);
  }
}

void Daemon::ClosePeer(int key) {
  auto it = peers_.find(key);
  if (it == peers_.end()) return;
  if (it->second.node >= 0) {
    NodeState& node = nodes_[static_cast<size_t>(it->second.node)];
    if (node.peer == key) node.peer = -1;
  }
  peers_.erase(it);
}

void Daemon::HandleMessage(int key, const nlohmann::json& message) {
  Peer& peer = peers_.at(key);
  const std::string type = message["type"].get<std::string>();
  if (peer.node < 0) {
    if (type == "hello") {
      HandleHello(key, message);
    } else if (type == "describe_dataflow") {
      peer.client = true;
      peer.identify_deadline = kNever;
      Status replied = peer.connection.Send(Describe());
      (void)replied;  // a `ferry ps` that went away needs no answer
    } else if (type == "dataflow_stats") {
      peer.client = true;
      peer.identify_deadline = kNever;
      Status replied = peer.connection.Send(Stats());
      if (!replied.ok()) {
        (void)peer.connection.Send({{"type", "error"}, {"message", replied.message()}});
      }
    } else if (type == "stop_dataflow") {
      peer.client = true;
      peer.identify_deadline = kNever;
      Status replied = peer.connection.Send({{"type", "stopping"}, {"dataflow", plan_.run_id}});
      (void)replied;  // the client may already be gone; the stop stands
      BeginStop("ferry stop");
    } else if (!peer.client) {
      Console("a control connection sent '" + type + "' before hello; closing it");
      ClosePeer(key);
    }
    return;
  }
  const int index = peer.node;
  NodeState& node = nodes_[static_cast<size_t>(index)];
  if (type == "ready") {
    HandleReady(index);
  } else if (type == "stats") {
    auto stats = message.find("stats");
    if (stats == message.end() || !stats->is_object()) {
      node.output->Note("ignored a stats message without a \"stats\" object", false);
      return;
    }
    node.pending_stats = *stats;
    node.has_pending_stats = true;
  } else if (type == "reconnected") {
    HandleReconnected(index, message);
  } else if (type == "output_closed") {
    node.output->Note("closed output '" + message.value("output", std::string("?")) + "'", false);
  } else if (type == "error") {
    auto text = message.find("message");
    node.summary.error =
        text != message.end() && text->is_string() ? text->get<std::string>() : message.dump();
    node.output->Note("error: " + node.summary.error, /*console=*/true);
  } else if (type == "hello") {
    node.output->Note("ignored a second hello", false);
  } else {
    node.output->Note("ignored an unknown control message '" + type + "'", false);
  }
}

void Daemon::HandleHello(int key, const nlohmann::json& message) {
  Peer& peer = peers_.at(key);
  auto node_field = message.find("node");
  if (node_field == message.end() || !node_field->is_string()) {
    Console("a hello without a node id; closing the connection");
    ClosePeer(key);
    return;
  }
  const std::string id = node_field->get<std::string>();
  int index = -1;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].spec->id == id) index = static_cast<int>(i);
  }
  if (index < 0) {
    Console("hello from unknown node '" + id + "'; closing the connection");
    ClosePeer(key);
    return;
  }
  NodeState& node = nodes_[static_cast<size_t>(index)];
  if (!node.running || node.peer >= 0) {
    node.output->Note("refused a hello: the node " +
                          std::string(node.running ? "is already connected" : "is not running"),
                      /*console=*/true);
    ClosePeer(key);
    return;
  }
  // The peer is the node when the socket's credentials or the stated pid
  // match; a wrapper script's child is accepted too, noted in the log.
  auto peer_pid = internal::PeerPid(peer.connection.fd());
  const int64_t stated_pid = message.value("pid", int64_t{-1});
  if ((!peer_pid.ok() || *peer_pid != node.pid) && stated_pid != node.pid) {
    node.output->Note("hello from pid " + std::to_string(stated_pid) + ", started as pid " +
                          std::to_string(node.pid),
                      false);
  }
  peer.node = index;
  peer.identify_deadline = kNever;
  node.peer = key;
  // Producers that finished for good before this instance could be told (a
  // restarted consumer, or one that was still starting): its inputs from
  // them close instead of waiting for a publisher that will never come.
  for (const Edge& edge : plan_.edges) {
    if (edge.consumer != node.spec->id) continue;
    for (const NodeState& producer : nodes_) {
      if (producer.spec->id == edge.producer && producer.finished) {
        SendTo(index, {{"type", "input_closed"}, {"input", edge.consumer_input}});
      }
    }
  }
  if (stopping_) {
    SendTo(index, {{"type", "stop"}, {"reason", stop_reason_}});
    node.kill_deadline = std::min(node.kill_deadline, Clock::now() + node.spec->stop_grace);
  }
}

void Daemon::HandleReady(int index) {
  NodeState& node = nodes_[static_cast<size_t>(index)];
  node.ready = true;
  node.ready_seq = ++sequence_;
  if (stopping_ || node.start_sent) return;
  // The first instance of every node is started by the barrier.
  if (!started_ && node.summary.restarts == 0) return;
  // A restarted instance (in a running graph, or one that died while the
  // graph was still starting, whose consumers may be connected to its dead
  // publishers): point the consumers of its outputs at its new publishers,
  // and start it once they are connected.
  node.pending_acks.clear();
  for (const Edge& edge : node.launch->consumers) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].spec->id != edge.consumer || !nodes_[i].running) continue;
      // Before the start, only a consumer that connected before the old
      // instance died holds a stale subscription; later ones found the new one.
      if (!started_ && !(nodes_[i].ready && nodes_[i].ready_seq < node.died_seq)) continue;
      // A started consumer answers from its event loop; one still waiting for
      // the start answers from there.
      if (SendTo(static_cast<int>(i), {{"type", "reconnect"}, {"input", edge.consumer_input}}) &&
          (nodes_[i].start_sent || !started_)) {
        node.pending_acks.emplace(static_cast<int>(i), edge.consumer_input);
      }
    }
  }
  if (node.pending_acks.empty()) {
    StartRestarted(index);
  } else {
    node.ack_deadline = Clock::now() + kReconnectAckTimeout;
  }
}

void Daemon::HandleReconnected(int consumer, const nlohmann::json& message) {
  auto input = message.find("input");
  if (input == message.end() || !input->is_string()) {
    nodes_[static_cast<size_t>(consumer)].output->Note(
        "ignored a reconnected message without an input", false);
    return;
  }
  const std::pair<int, std::string> key(consumer, input->get<std::string>());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeState& producer = nodes_[i];
    if (producer.pending_acks.erase(key) > 0 && producer.pending_acks.empty()) {
      StartRestarted(static_cast<int>(i));
    }
  }
}

void Daemon::StartRestarted(int index) {
  NodeState& node = nodes_[static_cast<size_t>(index)];
  node.pending_acks.clear();
  node.ack_deadline = kNever;
  if (!started_) return;  // the barrier (Loop) starts it with the others
  if (!node.running || !node.ready || node.start_sent || stopping_) return;
  node.start_sent = SendTo(index, {{"type", "start"}});
}

// The producer `index` will not run again: its consumers' inputs close once
// they have received what it sent.
void Daemon::CloseConsumerInputs(int index) {
  const NodeState& node = nodes_[static_cast<size_t>(index)];
  for (const Edge& edge : node.launch->consumers) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].spec->id != edge.consumer || !nodes_[i].running) continue;
      SendTo(static_cast<int>(i), {{"type", "input_closed"}, {"input", edge.consumer_input}});
    }
  }
}

void Daemon::ForgetAcksFrom(int consumer) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeState& producer = nodes_[i];
    if (producer.pending_acks.empty()) continue;
    for (auto it = producer.pending_acks.begin(); it != producer.pending_acks.end();) {
      it = it->first == consumer ? producer.pending_acks.erase(it) : std::next(it);
    }
    if (producer.pending_acks.empty()) StartRestarted(static_cast<int>(i));
  }
}

void Daemon::ReadStream(Stream& stream, bool until_end) {
  if (!stream.fd.valid()) return;
  NodeState& node = nodes_[static_cast<size_t>(stream.node)];
  NodeOutput& output = *node.output;
  StdoutPublisher* publisher = stream.from_stderr ? nullptr : node.stdout_publisher.get();
  const auto forward = [&](const std::string& line) {
    output.Line(stream.from_stderr, line);
    if (publisher == nullptr) return;
    Status sent = publisher->Send(line);
    if (!sent.ok()) output.Note("send_stdout_as: a line was not sent: " + sent.message(), false);
  };
  char buffer[16384];
  for (int rounds = 0;; ++rounds) {
    // A chatty node must not starve the others: the rest waits for the next poll.
    if (!until_end && rounds >= 64) return;
    ssize_t count = ::read(stream.fd.get(), buffer, sizeof(buffer));
    if (count > 0) {
      for (auto& line :
           stream.buffer.Append(std::string_view(buffer, static_cast<size_t>(count)))) {
        forward(line);
      }
      continue;
    }
    if (count < 0 && errno == EINTR) continue;
    if (count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!until_end) return;
      // Bounded: the writers are dead or killed, or the deadline cuts them off.
      if (Clock::now() >= stream.drain_deadline) break;
      pollfd entry{stream.fd.get(), POLLIN, 0};
      ::poll(&entry, 1, 50);
      continue;
    }
    break;  // end of stream or a read error
  }
  for (auto& line : stream.buffer.Finish()) forward(line);
  stream.fd.reset();
}

void Daemon::CheckChildren() {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeState& node = nodes_[i];
    if (!node.running) continue;
    auto reaped = TryReap(node.pid);
    if (!reaped.ok()) {
      // Not our child any more (SIGCHLD ignored by someone): treat it as gone.
      node.output->Note(reaped.status().message(), true);
      ExitStatus lost;
      lost.exited = true;
      lost.code = 255;
      HandleExit(static_cast<int>(i), lost);
      continue;
    }
    if (reaped->has_value()) HandleExit(static_cast<int>(i), **reaped);
  }
}

void Daemon::CheckTimers() {
  const TimePoint now = Clock::now();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeState& node = nodes_[i];
    if (node.restart_pending && now >= node.restart_at) Launch(static_cast<int>(i));
    if (!node.pending_acks.empty() && now >= node.ack_deadline) {
      std::string missing;
      for (const auto& [consumer, input] : node.pending_acks) {
        missing += (missing.empty() ? "" : ", ") + nodes_[static_cast<size_t>(consumer)].spec->id +
                   "/" + input;
      }
      node.output->Note("warning: no reconnected from " + missing + " within " +
                            std::to_string(kReconnectAckTimeout.count()) + " ms; starting anyway",
                        /*console=*/true);
      StartRestarted(static_cast<int>(i));
    }
    if (node.running && now >= node.kill_deadline && !node.killed_by_us) {
      node.killed_by_us = true;
      node.output->Note("did not stop within " + std::to_string(node.spec->stop_grace.count()) +
                            " ms; killing it",
                        /*console=*/true);
      SignalGroup(node.pid, SIGKILL);
    }
  }
  if (!started_ && !stopping_ && now >= start_deadline_) {
    std::string waiting;
    for (const auto& node : nodes_) {
      if (!node.ready && !node.finished) waiting += (waiting.empty() ? "" : ", ") + node.spec->id;
    }
    start_failed_ = true;
    BeginStop("nodes not ready within " + std::to_string(options_.start_timeout.count()) +
              " ms: " + waiting);
  }
  for (auto it = peers_.begin(); it != peers_.end();) {
    auto next = std::next(it);
    if (it->second.node < 0 && !it->second.client && now >= it->second.identify_deadline) {
      Console("closing a control connection that never said hello");
      peers_.erase(it);
    }
    it = next;
  }
  for (auto& stream : streams_) {
    if (stream->fd.valid() && now >= stream->drain_deadline) ReadStream(*stream, true);
  }
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const auto& stream) { return !stream->fd.valid(); }),
                 streams_.end());
}

void Daemon::CheckBarrier() {
  if (started_ || stopping_) return;
  int live = 0;
  for (const auto& node : nodes_) {
    if (node.finished) continue;
    // A restarted instance first waits for its consumers to reconnect.
    if (!node.running || !node.ready || !node.pending_acks.empty()) return;
    ++live;
  }
  if (live == 0) return;
  started_ = true;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].running) nodes_[i].start_sent = SendTo(static_cast<int>(i), {{"type", "start"}});
  }
  Console("all " + std::to_string(live) + " nodes ready; started");
}

void Daemon::CheckEnd() {
  if (stopping_) return;
  // The graph has ended when every node that is not restarted forever
  // (restart: always) has finished; the rest are stopped.
  bool any_bounded = false;
  for (const auto& node : nodes_) {
    if (node.spec->restart == RestartPolicy::kAlways && !node.finished) continue;
    any_bounded = true;
    if (!node.finished) return;
  }
  if (any_bounded) BeginStop("all nodes finished");
}

bool Daemon::AnyLive() const {
  for (const auto& node : nodes_) {
    if (node.running || node.restart_pending) return true;
  }
  return false;
}

void Daemon::Loop() {
  std::vector<pollfd> fds;
  std::vector<int> peer_keys;  // parallel to the peer entries of fds
  for (;;) {
    CheckChildren();
    CheckTimers();
    CheckBarrier();
    CheckEnd();
    if (!AnyLive()) return;

    fds.clear();
    peer_keys.clear();
    fds.push_back({signals_.fd(), POLLIN, 0});
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (const auto& [key, peer] : peers_) {
      fds.push_back({peer.connection.fd(), POLLIN, 0});
      peer_keys.push_back(key);
    }
    const size_t stream_begin = fds.size();
    for (const auto& stream : streams_) fds.push_back({stream->fd.get(), POLLIN, 0});
    for (const auto& node : nodes_) {
      if (node.running && node.pidfd.valid()) fds.push_back({node.pidfd.get(), POLLIN, 0});
    }
    for (auto& node : nodes_) {
      if (node.stdout_publisher == nullptr) continue;
      node.stdout_publisher->Poll();
      fds.push_back({node.stdout_publisher->wait_fd(), POLLIN, 0});
    }

    TimePoint wake = Clock::now() + kMaxPollWait;
    for (const auto& node : nodes_) {
      wake = std::min({wake, node.restart_at, node.ack_deadline,
                       node.running && !node.killed_by_us ? node.kill_deadline : kNever});
    }
    if (!started_ && !stopping_) wake = std::min(wake, start_deadline_);
    const auto wait = std::chrono::duration_cast<Millis>(wake - Clock::now()).count();
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait + 1, 0)));
    if (ready < 0 && errno != EINTR) {
      Console(std::string("poll failed: ") + std::strerror(errno));
      BeginStop("internal error");
      KillAll();
    }
    if (ready <= 0) continue;

    if (fds[0].revents != 0) {
      for (int signal_number : signals_.Drain()) {
        ++interrupts_;
        if (interrupts_ == 1) {
          BeginStop(signal_number == SIGINT ? "ctrl-c"
                                            : std::string("signal ") + ::strsignal(signal_number));
        } else {
          KillAll();
        }
      }
    }
    if (fds[1].revents != 0) AcceptPeers();
    for (size_t i = 0; i < peer_keys.size(); ++i) {
      if (fds[2 + i].revents != 0) ReadPeer(peer_keys[i]);
    }
    for (size_t i = 0; i < streams_.size() && stream_begin + i < fds.size(); ++i) {
      if (fds[stream_begin + i].revents != 0) ReadStream(*streams_[i], /*until_end=*/false);
    }
  }
}

RunSummary Daemon::BuildSummary() {
  RunSummary summary;
  summary.run_id = plan_.run_id;
  summary.stop_reason = stop_reason_;
  summary.log_dir = log_dir_;
  summary.seconds = std::chrono::duration<double>(Clock::now() - begin_).count();
  bool any_failed = false;
  for (auto& node : nodes_) {
    if (!node.summary.started) node.summary.failed = true;
    any_failed = any_failed || node.summary.failed;
    summary.nodes.push_back(node.summary);
  }
  ComputeEdges(plan_.edges, &summary);
  summary.exit_code = start_failed_ || any_failed ? 1 : 0;
  return summary;
}

}  // namespace

Result<RunSummary> RunDataflow(const Dataflow& dataflow, const DaemonOptions& options) {
  Daemon daemon(dataflow, options);
  return daemon.Run();
}

std::string Daemon::StateName(const NodeState& node) const {
  if (node.finished) return node.summary.failed ? "failed" : "finished";
  if (node.restart_pending) return "restarting";
  if (node.running) return started_ ? "running" : (node.ready ? "ready" : "starting");
  return "starting";
}

nlohmann::json Daemon::Stats() const {
  // The counters as the summary would show them now: every ended instance,
  // plus what a running instance has reported already.
  RunSummary now;
  now.run_id = plan_.run_id;
  for (const NodeState& node : nodes_) {
    NodeSummary counted = node.summary;
    if (node.has_pending_stats) (void)AddNodeStats(node.pending_stats, &counted);
    now.nodes.push_back(std::move(counted));
  }
  ComputeEdges(plan_.edges, &now);
  const auto ports = [](const std::map<std::string, PortCounters>& counters) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [id, port] : counters) {
      out[id] = {{"messages", port.messages},
                 {"bytes", port.bytes},
                 {"bytes_copied", port.bytes_copied},
                 {"drops", port.drops}};
    }
    return out;
  };
  const auto known = [](int64_t value) {
    return value < 0 ? nlohmann::json() : nlohmann::json(value);
  };
  nlohmann::json nodes = nlohmann::json::array();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeState& node = nodes_[i];
    const NodeSummary& counted = now.nodes[i];
    nodes.push_back({{"id", node.spec->id},
                     {"state", StateName(node)},
                     {"pid", node.running ? node.pid : -1},
                     {"restarts", node.summary.restarts},
                     {"instances", counted.instances},
                     {"stats_reports", counted.stats_reports + (node.has_pending_stats ? 1 : 0)},
                     {"running_instance_reported", node.running && node.has_pending_stats},
                     {"outputs", ports(counted.outputs)},
                     {"inputs", ports(counted.inputs)}});
  }
  nlohmann::json edges = nlohmann::json::array();
  for (const EdgeSummary& edge : now.edges) {
    uint32_t queue_size = 0;
    std::string overflow;
    for (const NodeLaunch& launch : plan_.nodes) {
      if (launch.node != edge.edge.consumer) continue;
      for (const auto& input : launch.config.inputs) {
        if (input.id == edge.edge.consumer_input) {
          queue_size = input.queue_size;
          overflow = input.overflow;
        }
      }
    }
    nlohmann::json queued;
    if (edge.sent >= 0 && edge.received >= 0 && edge.lost >= 0) {
      queued = edge.sent - edge.received - edge.counters.drops - edge.lost;
    }
    edges.push_back({{"edge", edge.edge.label},
                     {"producer", edge.edge.producer},
                     {"output", edge.edge.producer_output},
                     {"consumer", edge.edge.consumer},
                     {"input", edge.edge.consumer_input},
                     {"queue_size", queue_size},
                     {"overflow", overflow},
                     {"reported", edge.reported},
                     {"messages", edge.counters.messages},
                     {"bytes", edge.counters.bytes},
                     {"bytes_copied", edge.counters.bytes_copied},
                     {"drops", edge.counters.drops},
                     {"sent", known(edge.sent)},
                     {"received", known(edge.received)},
                     {"lost", known(edge.lost)},
                     {"queued", std::move(queued)}});
  }
  return {{"type", "dataflow_stats"},
          {"dataflow", plan_.run_id},
          {"daemon_pid", static_cast<int64_t>(::getpid())},
          {"phase", stopping_ ? "stopping" : (started_ ? "running" : "starting")},
          {"unix_ms",
           std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
               .count()},
          {"nodes", std::move(nodes)},
          {"edges", std::move(edges)}};
}

nlohmann::json Daemon::Describe() const {
  nlohmann::json nodes = nlohmann::json::array();
  for (const NodeState& node : nodes_) {
    nlohmann::json outputs = nlohmann::json::array();
    if (node.launch != nullptr) {
      for (const auto& output : node.launch->config.outputs) {
        outputs.push_back({{"id", output.id}, {"channel", output.channel}});
      }
    }
    if (!node.spec->send_stdout_as.empty()) {  // the daemon's own publisher
      outputs.push_back({{"id", node.spec->send_stdout_as},
                         {"channel", protocol::ChannelName(plan_.run_id, node.spec->id, "",
                                                           node.spec->send_stdout_as)}});
    }
    nodes.push_back({{"outputs", std::move(outputs)},
                     {"id", node.spec->id},
                     {"state", StateName(node)},
                     {"pid", node.running ? node.pid : -1},
                     {"restarts", node.summary.restarts}});
  }
  return {{"type", "dataflow"},
          {"dataflow", plan_.run_id},
          {"file", dataflow_.path},
          {"daemon_pid", static_cast<int64_t>(::getpid())},
          {"started_unix_ms", begin_unix_ms_},
          {"phase", stopping_ ? "stopping" : (started_ ? "running" : "starting")},
          {"log_dir", log_dir_absolute_},
          {"nodes", std::move(nodes)}};
}

Result<std::vector<RunningDataflow>> ListDataflows(std::chrono::milliseconds wait) {
  // Daemons listen on abstract unix sockets named DaemonSocketName(run id);
  // the kernel lists them, with an '@' for the leading NUL byte.
  std::ifstream table("/proc/net/unix");
  if (!table) return Status::IOError("cannot read /proc/net/unix");
  const std::string prefix = "@" + protocol::DaemonSocketName("");
  std::set<std::string> run_ids;
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    const size_t at = line.find(prefix);
    if (at == std::string::npos) continue;
    // Columns: Num RefCount Protocol Flags Type St Inode Path; a listening
    // socket has __SO_ACCEPTCON (0x10000) in Flags.
    std::istringstream fields(line.substr(0, at));
    std::string num, refs, protocol_field, flags;
    fields >> num >> refs >> protocol_field >> flags;
    if ((std::strtoul(flags.c_str(), nullptr, 16) & 0x10000UL) == 0) continue;
    const std::string run_id = line.substr(at + prefix.size());
    if (CheckRunName(run_id).ok()) run_ids.insert(run_id);
  }
  std::vector<RunningDataflow> runs;
  for (const std::string& run_id : run_ids) {
    RunningDataflow run;
    run.run_id = run_id;
    auto described = DescribeDataflow(run_id, wait);
    if (!described.ok() && described.status().code() == StatusCode::kIOError) {
      continue;  // ended between the listing and now
    }
    if (described.ok()) run.description = std::move(described->description);
    runs.push_back(std::move(run));
  }
  return runs;
}

namespace {

// One request on the control socket of `run_id`'s daemon, from a connection
// that has not said hello: the answer, which must be of type `expected`
// ("error" answers become their message), and the connection, still open.
struct DaemonAnswer {
  nlohmann::json reply;
  protocol::Connection connection;
};

Result<DaemonAnswer> AskDaemon(const std::string& run_id, const nlohmann::json& request,
                               const std::string& expected, std::chrono::milliseconds wait) {
  FERRY_RETURN_NOT_OK(CheckRunName(run_id));
  auto connection = protocol::Connection::Connect(protocol::DaemonSocketName(run_id));
  if (!connection.ok()) {
    return Status::IOError("no dataflow '" + run_id + "' is running here (" +
                           connection.status().message() + ")");
  }
  Status sent = connection->Send(request);
  if (!sent.ok()) return Status::IOError("dataflow '" + run_id + "': " + sent.message());
  auto reply = connection->Receive(wait);
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kTimedOut) {
      return Status::TimedOut("the daemon of dataflow '" + run_id + "' did not answer");
    }
    return Status::IOError("dataflow '" + run_id + "': " + reply.status().message());
  }
  if (!reply->has_value()) return Status::IOError("dataflow '" + run_id + "' has just ended");
  const std::string type = (**reply).value("type", "");
  if (type == "error") {
    return Status::IOError("dataflow '" + run_id + "': " + (**reply).value("message", ""));
  }
  if (type != expected) {
    return Status::Invalid("unexpected answer from the daemon: " + (**reply).dump());
  }
  return DaemonAnswer{std::move(**reply), std::move(connection).MoveValueUnsafe()};
}

}  // namespace

Result<DescribedDataflow> DescribeDataflow(const std::string& run_id,
                                           std::chrono::milliseconds wait) {
  FERRY_ASSIGN_OR_RAISE(DaemonAnswer answer,
                        AskDaemon(run_id, {{"type", "describe_dataflow"}}, "dataflow", wait));
  DescribedDataflow described;
  described.description = std::move(answer.reply);
  described.connection = std::move(answer.connection);
  return described;
}

Result<nlohmann::json> DataflowStats(const std::string& run_id, std::chrono::milliseconds wait) {
  FERRY_ASSIGN_OR_RAISE(DaemonAnswer answer,
                        AskDaemon(run_id, {{"type", "dataflow_stats"}}, "dataflow_stats", wait));
  return std::move(answer.reply);
}

Status StopDataflow(const std::string& run_id, std::chrono::nanoseconds wait) {
  FERRY_RETURN_NOT_OK(CheckRunName(run_id));
  auto connection = protocol::Connection::Connect(protocol::DaemonSocketName(run_id));
  if (!connection.ok()) {
    return Status::IOError("no dataflow '" + run_id + "' is running here (" +
                           connection.status().message() + ")");
  }
  FERRY_RETURN_NOT_OK(connection->Send({{"type", "stop_dataflow"}}));
  auto reply = connection->Receive(std::chrono::seconds(5));
  if (!reply.ok()) return reply.status().WithPrefix("the daemon did not confirm the stop: ");
  if (!reply->has_value()) return Status::OK();  // it hung up: already over
  if ((**reply).value("type", std::string()) != "stopping") {
    return Status::Invalid("unexpected answer from the daemon: " + (**reply).dump());
  }
  if (wait <= std::chrono::nanoseconds(0)) return Status::OK();
  // The daemon hangs up when the run is over.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds(0)) {
      return Status::TimedOut("dataflow '" + run_id + "' is still stopping");
    }
    auto message = connection->Receive(left);
    if (!message.ok()) {
      if (message.status().code() == StatusCode::kTimedOut) continue;
      return Status::OK();  // the connection broke: the daemon is gone
    }
    if (!message->has_value()) return Status::OK();
  }
}

}  // namespace ferry::flow::daemon
