// The node runtime behind node.h: publishers for the outputs, subscribers and
// timerfds for the inputs, the daemon's control connection, and one event
// loop (ppoll) over all of them in Next.
#include "ferry/flow/node.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "ferry/flow/transport.h"
#include "flow/node/protocol.h"
#include "flow/transport/futex.h"
#include "flow/transport/segment_pool.h"
#include "flow/transport/shm.h"

namespace ferry::flow {
namespace {

using internal::Deadline;
using internal::UniqueFd;
using Clock = std::chrono::steady_clock;
using ordered_json = nlohmann::ordered_json;

// While inputs keep Next busy, the daemon, timers and publishers are still
// looked at this often.
constexpr auto kControlInterval = std::chrono::milliseconds(1);
// The longest single sleep: foreign descriptors that never wake are re-checked.
constexpr auto kSleepSlice = std::chrono::milliseconds(200);
// How long a detached connection attempt gets after the start-up deadline
// before construction gives up on it.
constexpr auto kConnectGrace = std::chrono::seconds(2);

Status Errno(const std::string& what) {
  return Status::IOError(what + ": " + std::strerror(errno));
}

void Signal(int eventfd) {
  const uint64_t one = 1;
  ssize_t written = ::write(eventfd, &one, sizeof(one));
  (void)written;  // a saturated counter is readable anyway
}

void Drain(int fd) {
  uint64_t value;
  while (::read(fd, &value, sizeof(value)) > 0) {
  }
}

// Sleeps in ppoll at most `timeout` (nanosecond precision).
int PollFor(std::vector<pollfd>& fds, std::chrono::nanoseconds timeout) {
  timespec spec{};
  spec.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  spec.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  return ::ppoll(fds.data(), fds.size(), &spec, nullptr);
}

// The reconnection of one input, run by a detached thread: it owns this state
// together with the node, so a node destroyed meanwhile leaves nothing dangling.
struct ConnectJob {
  std::mutex mutex;
  bool done = false;
  std::vector<Result<std::unique_ptr<Subscriber>>> results;
  std::shared_ptr<UniqueFd> wake;  // written when done
};

SubscriberOptions InputOptions(const NodeConfig::Input& input, const NodeOptions& options,
                               std::chrono::nanoseconds connect_timeout) {
  SubscriberOptions subscriber;
  subscriber.connect_timeout = connect_timeout;
  subscriber.queue_capacity = input.queue_size;
  subscriber.overflow = OverflowPolicyFromName(input.overflow).ValueOr(OverflowPolicy::kBlock);
  subscriber.wait.busy_poll = options.busy_poll;
  return subscriber;
}

// Connects `channels` one after the other on a detached thread.
std::shared_ptr<ConnectJob> StartConnecting(std::vector<std::string> channels,
                                            std::vector<SubscriberOptions> options,
                                            std::shared_ptr<UniqueFd> wake) {
  auto job = std::make_shared<ConnectJob>();
  job->wake = std::move(wake);
  std::thread([job, channels = std::move(channels), options = std::move(options)] {
    std::vector<Result<std::unique_ptr<Subscriber>>> results;
    for (size_t index = 0; index < channels.size(); ++index) {
      results.push_back(Subscriber::Connect(channels[index], options[index]));
      if (!results.back().ok()) break;
    }
    std::lock_guard<std::mutex> lock(job->mutex);
    job->results = std::move(results);
    job->done = true;
    Signal(job->wake->get());
  }).detach();
  return job;
}

bool JobDone(ConnectJob& job) {
  std::lock_guard<std::mutex> lock(job.mutex);
  return job.done;
}

// True when every buffer of `data` (children and dictionary too) lies in `pool`.
bool InPool(const internal::SegmentPool::Lookup& lookup, const ArrayData& data) {
  for (const BufferPtr& buffer : data.buffers) {
    if (buffer == nullptr || buffer->size() == 0) continue;
    if (!lookup.Locate(buffer->data(), buffer->size()).ok()) return false;
  }
  for (const ArrayDataPtr& child : data.children) {
    if (child != nullptr && !InPool(lookup, *child)) return false;
  }
  return data.dictionary == nullptr || InPool(lookup, *data.dictionary);
}

bool BatchInPool(MemoryPool* pool, const RecordBatch& batch) {
  auto* segments = dynamic_cast<internal::SegmentPool*>(pool);
  if (segments == nullptr) return false;
  const internal::SegmentPool::Lookup lookup = segments->LockForLookup();
  for (const ArrayDataPtr& column : batch.columns()) {
    if (!InPool(lookup, *column)) return false;
  }
  return true;
}

int64_t ArrayBytes(const ArrayData& data) {
  int64_t bytes = 0;
  for (const BufferPtr& buffer : data.buffers) {
    if (buffer != nullptr) bytes += buffer->size();
  }
  for (const ArrayDataPtr& child : data.children) {
    if (child != nullptr) bytes += ArrayBytes(*child);
  }
  return bytes + (data.dictionary != nullptr ? ArrayBytes(*data.dictionary) : 0);
}

int64_t BatchBytes(const RecordBatch& batch) {
  int64_t bytes = 0;
  for (const ArrayDataPtr& column : batch.columns()) bytes += ArrayBytes(*column);
  return bytes;
}

ordered_json StatsObject(const ChannelStats& stats) {
  return ordered_json{{"sent", stats.sent},
                      {"delivered", stats.delivered},
                      {"dropped_oldest", stats.dropped_oldest},
                      {"dropped_newest", stats.dropped_newest},
                      {"bytes_sent", stats.bytes_sent},
                      {"bytes_copied", stats.bytes_copied},
                      {"subscribers", stats.subscribers},
                      {"subscribers_lost", stats.subscribers_lost},
                      {"segments", stats.segments},
                      {"memory_in_use", stats.memory_in_use}};
}

class NodeImpl final : public Node {
 public:
  static Result<std::unique_ptr<Node>> Make(NodeConfig config, NodeOptions options);
  ~NodeImpl() override;

  const std::string& id() const override { return config_.node; }
  const NodeConfig& config() const override { return config_; }
  Result<std::optional<Event>> Next(std::chrono::nanoseconds timeout) override;
  Status SendOutput(const std::string& output, const RecordBatch& batch,
                    const Metadata& metadata) override;
  MemoryPool* OutputPool(const std::string& output) override;
  Status CloseOutput(const std::string& output) override;
  Status WaitForSubscribers(const std::string& output, int count,
                            std::chrono::nanoseconds timeout) override;
  std::string StatsJson() const override;

 private:
  struct OutputState {
    const NodeConfig::Output* config = nullptr;
    mutable std::mutex mutex;
    std::unique_ptr<Publisher> publisher;  // null once closed
    int wait_fd = -1;
    ChannelStats final_stats;  // taken when it closed
    std::atomic<int64_t> loaned_sends{0};
    std::atomic<int64_t> copied_sends{0};
  };
  struct InputState {
    const NodeConfig::Input* config = nullptr;
    std::unique_ptr<Subscriber> subscriber;   // channel inputs while connected
    std::unique_ptr<Subscriber> replacement;  // connected again, used once the old one drained
    std::shared_ptr<ConnectJob> reconnect;    // a reconnection under way
    UniqueFd timer;                           // timer inputs
    uint64_t ticks = 0;
    bool closed = false;  // kInputClosed queued and not reopened since
    // producer_may_restart: the producer is gone and drained, and the daemon
    // has not yet said whether it comes back.
    bool awaiting_daemon = false;
    // The daemon said input_closed while the last producer was still draining.
    bool close_when_gone = false;
    std::atomic<int64_t> received{0};
    std::atomic<int64_t> bytes_received{0};  // payload buffers of what was received
    std::atomic<int64_t> reconnects{0};
    // Messages skipped between two received ones of the same publisher (its
    // queue's overflow policy dropped them); the last sequence of the
    // current subscriber (0: none received from it yet).
    std::atomic<int64_t> gaps{0};
    uint64_t last_sequence = 0;
    bool is_timer() const { return timer.valid(); }
  };
  // What one slot of the poll set stands for.
  enum class Source : uint8_t { kDaemon, kWake, kTimer, kPublisher, kSubscriber };

  NodeImpl(NodeConfig config, NodeOptions options)
      : config_(std::move(config)), options_(options) {}

  Status Start();
  Status CreateOutputs();
  Status CreateTimers();
  Status ArmTimers();
  Status ConnectInputs(const Deadline& deadline);
  Status AwaitStart(const Deadline& deadline);
  // Sleeps until a publisher, the daemon or the wake fd has something, at
  // most `timeout`, and pumps the publishers that need it.
  // `wake` adds the connection threads' eventfd to what ends the sleep.
  void PumpOutputs(std::chrono::nanoseconds timeout, bool wake);
  void ReportFatal(const Status& status);

  OutputState* FindOutput(const std::string& output) const;
  InputState* FindInput(const std::string& input) const;
  Status UnknownOutput(const std::string& output) const;
  void SendToDaemon(const nlohmann::json& message);

  // Next's pieces.
  void AddControlFds(std::vector<pollfd>* fds, std::vector<std::pair<Source, size_t>>* tags);
  void HandleReady(const std::vector<pollfd>& fds,
                   const std::vector<std::pair<Source, size_t>>& tags);
  void ServiceControl();
  void ReadDaemon();
  void HandleDaemonMessage(const nlohmann::json& message);
  void ReadTimer(InputState& input);
  void PollPublisher(OutputState& output);
  void StartReconnect(InputState& input);
  void AdoptReconnections();
  void InputGone(InputState& input);
  void CloseInput(InputState& input);
  bool DaemonConnected() const;
  bool TakeInputEvent();
  bool StreamEnded() const;
  Status WaitForActivity(const Deadline& deadline);
  void Queue(EventType type, std::string id, std::string error = {});

  NodeConfig config_;
  NodeOptions options_;
  std::vector<std::unique_ptr<OutputState>> outputs_;
  std::vector<std::unique_ptr<InputState>> inputs_;
  bool has_timers_ = false;
  mutable std::mutex daemon_mutex_;
  protocol::Connection daemon_;     // guarded by daemon_mutex_
  std::shared_ptr<UniqueFd> wake_;  // eventfd written by connection threads
  WaitSet waitset_;
  std::deque<Event> pending_;
  size_t next_input_ = 0;
  bool stop_queued_ = false;
  bool ended_ = false;
  Clock::time_point last_control_check_{};
  RecordBatchPtr tick_value_;
  Metadata tick_metadata_;
};

// ---- Start-up --------------------------------------------------------------

Result<std::unique_ptr<Node>> NodeImpl::Make(NodeConfig config, NodeOptions options) {
  FERRY_RETURN_NOT_OK(config.Validate());
  std::unique_ptr<NodeImpl> node(new NodeImpl(std::move(config), options));
  Status started = node->Start();
  if (!started.ok()) {
    node->ReportFatal(started);
    return started.WithPrefix("node '" + node->config_.node + "': ");
  }
  return std::unique_ptr<Node>(std::move(node));
}

Status NodeImpl::Start() {
  const Deadline deadline(options_.startup_timeout);
  auto tick = std::make_shared<ArrayData>();
  tick->type = null();
  FERRY_ASSIGN_OR_RAISE(tick_value_, ArrayAsBatch(tick));
  tick_metadata_ = {{std::string(kArrayMetadataKey), "1"}};

  wake_ = std::make_shared<UniqueFd>(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_->valid()) return Errno("eventfd");
  FERRY_RETURN_NOT_OK(CreateOutputs());
  if (!config_.daemon_socket.empty()) {
    FERRY_ASSIGN_OR_RAISE(daemon_, protocol::Connection::Connect(config_.daemon_socket));
    FERRY_RETURN_NOT_OK(daemon_.Send(
        {{"type", "hello"}, {"node", config_.node}, {"pid", static_cast<int64_t>(::getpid())}}));
  }
  FERRY_RETURN_NOT_OK(CreateTimers());
  FERRY_RETURN_NOT_OK(ConnectInputs(deadline));
  if (daemon_.valid()) {
    FERRY_RETURN_NOT_OK(daemon_.Send({{"type", "ready"}}));
    FERRY_RETURN_NOT_OK(AwaitStart(deadline));
  }
  return ArmTimers();
}

void NodeImpl::ReportFatal(const Status& status) {
  std::lock_guard<std::mutex> lock(daemon_mutex_);
  if (daemon_.valid()) (void)daemon_.Send({{"type", "error"}, {"message", status.ToString()}});
}

Status NodeImpl::CreateOutputs() {
  for (const NodeConfig::Output& output : config_.outputs) {
    auto state = std::make_unique<OutputState>();
    state->config = &output;
    PublisherOptions publisher_options;
    publisher_options.wait.busy_poll = options_.busy_poll;
    Result<std::unique_ptr<Publisher>> publisher =
        Publisher::Create(output.channel, publisher_options);
    if (!publisher.ok()) return publisher.status().WithPrefix("output '" + output.id + "': ");
    state->publisher = publisher.MoveValueUnsafe();
    state->wait_fd = state->publisher->wait_fd();
    outputs_.push_back(std::move(state));
  }
  return Status::OK();
}

Status NodeImpl::CreateTimers() {
  for (const NodeConfig::Input& input : config_.inputs) {
    auto state = std::make_unique<InputState>();
    state->config = &input;
    if (input.channel.empty()) {
      state->timer.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
      if (!state->timer.valid()) return Errno("timerfd_create for input '" + input.id + "'");
      has_timers_ = true;
    }
    inputs_.push_back(std::move(state));
  }
  return Status::OK();
}

Status NodeImpl::ArmTimers() {
  for (auto& input : inputs_) {
    if (!input->is_timer()) continue;
    const int64_t interval = input->config->timer_interval.count();
    itimerspec spec{};
    spec.it_interval.tv_sec = static_cast<time_t>(interval / 1'000'000'000);
    spec.it_interval.tv_nsec = static_cast<long>(interval % 1'000'000'000);
    spec.it_value = spec.it_interval;
    if (::timerfd_settime(input->timer.get(), 0, &spec, nullptr) != 0) {
      return Errno("timerfd_settime for input '" + input->config->id + "'");
    }
  }
  return Status::OK();
}

// Subscriber::Connect blocks until the producer's publisher accepts, and that
// producer may itself be starting and waiting for us (a cycle): the inputs
// connect on helper threads (one per input) while this thread keeps the
// outputs accepting and listens to the daemon. A restarted node may have
// inputs whose producer finished for good: the daemon says input_closed for
// them (right after hello), and their connection attempt is abandoned.
Status NodeImpl::ConnectInputs(const Deadline& deadline) {
  std::vector<std::pair<InputState*, std::shared_ptr<ConnectJob>>> jobs;
  for (auto& input : inputs_) {
    if (input->is_timer()) continue;
    jobs.emplace_back(
        input.get(),
        StartConnecting({input->config->channel},
                        {InputOptions(*input->config, options_, deadline.Remaining())}, wake_));
  }
  // Takes the finished attempts; the first failure (of an input still open)
  // ends the start.
  auto adopt = [&]() -> Status {
    for (auto& [input, job] : jobs) {
      if (job == nullptr || !JobDone(*job)) continue;
      std::shared_ptr<ConnectJob> done = std::move(job);
      if (input->closed) continue;  // the daemon closed it meanwhile: nothing to take
      std::lock_guard<std::mutex> lock(done->mutex);
      Result<std::unique_ptr<Subscriber>>& result = done->results.front();
      if (!result.ok()) return result.status().WithPrefix("input '" + input->config->id + "': ");
      input->subscriber = result.MoveValueUnsafe();
      (void)input->subscriber->wait_fd();  // TryReceive arms the fd from now on
      waitset_.Add(input->subscriber.get());
    }
    return Status::OK();
  };
  const Deadline hard_deadline(deadline.Remaining() + kConnectGrace);
  for (;;) {
    Drain(wake_->get());
    FERRY_RETURN_NOT_OK(adopt());
    // input_closed for an input not connected yet closes it at once (its
    // attempt is abandoned); for a connected one, once it is drained.
    if (daemon_.valid()) {
      ReadDaemon();
      if (!daemon_.valid()) return Status::IOError("the daemon hung up before start");
    }
    if (stop_queued_) return Status::OK();  // stopped before the start: Next says so
    bool waiting = false;
    for (const auto& [input, job] : jobs) {
      if (job != nullptr && !input->closed) waiting = true;
    }
    if (!waiting) return Status::OK();
    if (hard_deadline.Expired()) {
      return Status::TimedOut("inputs not connected within the start-up timeout");
    }
    PumpOutputs(hard_deadline.Remaining(kSleepSlice), /*wake=*/true);
  }
}

// After "ready": keeps accepting subscribers until the daemon says start.
Status NodeImpl::AwaitStart(const Deadline& deadline) {
  if (stop_queued_) return Status::OK();  // stopped while connecting: Next says so
  for (;;) {
    for (;;) {
      Result<std::optional<nlohmann::json>> message = daemon_.Receive(std::chrono::nanoseconds(0));
      if (!message.ok()) {
        if (message.status().code() == StatusCode::kTimedOut) break;
        Queue(EventType::kError, "", message.status().message());
        continue;
      }
      if (!message->has_value()) return Status::IOError("the daemon hung up before start");
      const nlohmann::json& body = **message;
      const std::string type = body["type"].get<std::string>();
      if (type == "start") return Status::OK();
      HandleDaemonMessage(body);
      if (stop_queued_) return Status::OK();  // stopped before it started: Next says so
    }
    // A producer restarted before the graph started: connect to its new
    // publisher and say so, since the daemon holds the start until then.
    AdoptReconnections();
    if (deadline.Expired()) {
      return Status::TimedOut("no start from the daemon within the start-up timeout");
    }
    PumpOutputs(deadline.Remaining(kSleepSlice), /*wake=*/false);
  }
}

void NodeImpl::PumpOutputs(std::chrono::nanoseconds timeout, bool wake) {
  std::vector<pollfd> fds;
  bool blind = false;  // a publisher without wait_fd: poll it every slice
  for (auto& output : outputs_) {
    if (output->wait_fd >= 0) {
      fds.push_back(pollfd{output->wait_fd, POLLIN, 0});
    } else {
      blind = true;
    }
  }
  if (wake) fds.push_back(pollfd{wake_->get(), POLLIN, 0});
  if (daemon_.valid()) fds.push_back(pollfd{daemon_.fd(), POLLIN, 0});
  if (blind) timeout = std::min<std::chrono::nanoseconds>(timeout, std::chrono::milliseconds(2));
  (void)PollFor(fds, timeout);
  for (auto& output : outputs_) PollPublisher(*output);
}

// ---- Lookups and control messages -----------------------------------------------

NodeImpl::OutputState* NodeImpl::FindOutput(const std::string& output) const {
  for (const auto& state : outputs_) {
    if (state->config->id == output) return state.get();
  }
  return nullptr;
}

NodeImpl::InputState* NodeImpl::FindInput(const std::string& input) const {
  for (const auto& state : inputs_) {
    if (state->config->id == input) return state.get();
  }
  return nullptr;
}

Status NodeImpl::UnknownOutput(const std::string& output) const {
  std::string known;
  for (const auto& state : outputs_) known += (known.empty() ? "" : ", ") + state->config->id;
  return Status::Invalid("node '" + config_.node + "' has no output '" + output +
                         "' (its outputs: " + (known.empty() ? "none" : known) + ")");
}

void NodeImpl::SendToDaemon(const nlohmann::json& message) {
  std::lock_guard<std::mutex> lock(daemon_mutex_);
  if (daemon_.valid()) (void)daemon_.Send(message);
}

void NodeImpl::Queue(EventType type, std::string id, std::string error) {
  Event event;
  event.type = type;
  event.id = std::move(id);
  event.error = std::move(error);
  pending_.push_back(std::move(event));
}

void NodeImpl::HandleDaemonMessage(const nlohmann::json& message) {
  const std::string type = message["type"].get<std::string>();
  if (type == "stop") {
    if (stop_queued_) return;
    auto reason = message.find("reason");
    Queue(EventType::kStop,
          (reason != message.end() && reason->is_string()) ? reason->get<std::string>() : "stop");
    stop_queued_ = true;
  } else if (type == "reconnect") {
    auto input_id = message.find("input");
    InputState* input = (input_id != message.end() && input_id->is_string())
                            ? FindInput(input_id->get<std::string>())
                            : nullptr;
    if (input == nullptr || input->is_timer()) {
      Queue(EventType::kError, "",
            "the daemon asked to reconnect an unknown input: " +
                message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      return;
    }
    input->awaiting_daemon = false;
    StartReconnect(*input);
  } else if (type == "input_closed") {
    auto input_id = message.find("input");
    InputState* input = (input_id != message.end() && input_id->is_string())
                            ? FindInput(input_id->get<std::string>())
                            : nullptr;
    if (input == nullptr || input->is_timer()) return;  // nothing of ours to close
    if (input->subscriber != nullptr || input->replacement != nullptr ||
        input->reconnect != nullptr) {
      input->close_when_gone = true;  // after what the producer sent
    } else {
      CloseInput(*input);
    }
  } else if (type != "start") {
    Queue(EventType::kError, "", "unknown control message type '" + type + "' from the daemon");
  }
}

void NodeImpl::ReadDaemon() {
  std::lock_guard<std::mutex> lock(daemon_mutex_);
  while (daemon_.valid()) {
    Result<std::optional<nlohmann::json>> message = daemon_.Receive(std::chrono::nanoseconds(0));
    if (message.ok() && message->has_value()) {
      HandleDaemonMessage(**message);
      continue;
    }
    if (!message.ok() && message.status().code() == StatusCode::kTimedOut) return;
    if (!message.ok() && message.status().code() == StatusCode::kInvalid) {
      Queue(EventType::kError, "", message.status().message());
      continue;
    }
    // Hung up (or the socket failed): nobody will say stop any more.
    daemon_ = protocol::Connection();
    // Nobody will say reconnect either.
    for (auto& input : inputs_) {
      if (input->awaiting_daemon) CloseInput(*input);
    }
    if (!stop_queued_) {
      Queue(EventType::kStop, "daemon gone");
      stop_queued_ = true;
    }
  }
}

void NodeImpl::ReadTimer(InputState& input) {
  uint64_t expirations = 0;
  if (::read(input.timer.get(), &expirations, sizeof(expirations)) != sizeof(expirations)) return;
  if (expirations == 0) return;
  input.ticks += expirations;  // missed ticks are skipped, the count says how many
  Event event;
  event.type = EventType::kInput;
  event.id = input.config->id;
  event.value = tick_value_;
  event.metadata = tick_metadata_;
  event.sequence = input.ticks;
  input.received.fetch_add(1, std::memory_order_relaxed);
  pending_.push_back(std::move(event));
}

void NodeImpl::PollPublisher(OutputState& output) {
  std::lock_guard<std::mutex> lock(output.mutex);
  if (output.publisher == nullptr) return;
  Status polled = output.publisher->Poll();
  if (!polled.ok()) {
    Queue(EventType::kError, "", "output '" + output.config->id + "': " + polled.message());
  }
}

// ---- Reconnection ----------------------------------------------------------

void NodeImpl::StartReconnect(InputState& input) {
  if (input.reconnect != nullptr) return;  // already under way
  input.replacement.reset();
  input.reconnect =
      StartConnecting({input.config->channel},
                      {InputOptions(*input.config, options_, options_.startup_timeout)}, wake_);
}

void NodeImpl::AdoptReconnections() {
  for (auto& input : inputs_) {
    if (input->reconnect == nullptr || !JobDone(*input->reconnect)) continue;
    std::shared_ptr<ConnectJob> job = std::move(input->reconnect);
    std::lock_guard<std::mutex> lock(job->mutex);
    Result<std::unique_ptr<Subscriber>>& result = job->results.front();
    if (!result.ok()) {
      Queue(EventType::kError, "",
            "input '" + input->config->id + "': reconnecting failed: " + result.status().message());
      if (input->subscriber == nullptr) {
        if (input->config->producer_may_restart && !input->close_when_gone && DaemonConnected()) {
          input->awaiting_daemon = true;  // a later restart may still reconnect it
        } else {
          CloseInput(*input);
        }
      }
      continue;
    }
    input->reconnects.fetch_add(1, std::memory_order_relaxed);
    std::unique_ptr<Subscriber> fresh = result.MoveValueUnsafe();
    (void)fresh->wait_fd();
    if (input->subscriber != nullptr) {
      input->replacement = std::move(fresh);  // after the old one's last messages
    } else {
      input->subscriber = std::move(fresh);
      input->last_sequence = 0;
      waitset_.Add(input->subscriber.get());
      input->closed = false;
    }
    // Connected to the new producer: the daemon may start it now.
    SendToDaemon({{"type", "reconnected"}, {"input", input->config->id}});
  }
}

// The producer is gone and everything it sent was received.
void NodeImpl::InputGone(InputState& input) {
  waitset_.Remove(input.subscriber.get());
  input.subscriber.reset();
  input.last_sequence = 0;
  if (input.replacement != nullptr) {
    input.subscriber = std::move(input.replacement);
    waitset_.Add(input.subscriber.get());
    return;
  }
  if (input.reconnect != nullptr) return;  // the new producer's messages follow
  if (input.config->producer_may_restart && !input.close_when_gone && DaemonConnected()) {
    input.awaiting_daemon = true;  // reconnect or input_closed decides
    return;
  }
  CloseInput(input);
}

void NodeImpl::CloseInput(InputState& input) {
  input.awaiting_daemon = false;
  input.close_when_gone = false;
  if (!input.closed) {
    input.closed = true;
    Queue(EventType::kInputClosed, input.config->id);
  }
}

bool NodeImpl::DaemonConnected() const {
  std::lock_guard<std::mutex> lock(daemon_mutex_);
  return daemon_.valid();
}

// ---- Next ------------------------------------------------------------------

void NodeImpl::AddControlFds(std::vector<pollfd>* fds,
                             std::vector<std::pair<Source, size_t>>* tags) {
  {
    std::lock_guard<std::mutex> lock(daemon_mutex_);
    if (daemon_.valid()) {
      fds->push_back(pollfd{daemon_.fd(), POLLIN, 0});
      tags->emplace_back(Source::kDaemon, 0);
    }
  }
  fds->push_back(pollfd{wake_->get(), POLLIN, 0});
  tags->emplace_back(Source::kWake, 0);
  for (size_t index = 0; index < inputs_.size(); ++index) {
    if (!inputs_[index]->is_timer()) continue;
    fds->push_back(pollfd{inputs_[index]->timer.get(), POLLIN, 0});
    tags->emplace_back(Source::kTimer, index);
  }
  for (size_t index = 0; index < outputs_.size(); ++index) {
    OutputState& output = *outputs_[index];
    std::lock_guard<std::mutex> lock(output.mutex);
    if (output.publisher == nullptr || output.wait_fd < 0) continue;
    fds->push_back(pollfd{output.wait_fd, POLLIN, 0});
    tags->emplace_back(Source::kPublisher, index);
  }
}

void NodeImpl::HandleReady(const std::vector<pollfd>& fds,
                           const std::vector<std::pair<Source, size_t>>& tags) {
  // The daemon first: a stop overtakes whatever else is ready.
  for (size_t slot = 0; slot < fds.size(); ++slot) {
    if (fds[slot].revents != 0 && tags[slot].first == Source::kDaemon) ReadDaemon();
  }
  for (size_t slot = 0; slot < fds.size(); ++slot) {
    if (fds[slot].revents == 0) continue;
    switch (tags[slot].first) {
      case Source::kWake:
        Drain(wake_->get());
        AdoptReconnections();
        break;
      case Source::kTimer:
        ReadTimer(*inputs_[tags[slot].second]);
        break;
      case Source::kPublisher:
        PollPublisher(*outputs_[tags[slot].second]);
        break;
      case Source::kDaemon:
      case Source::kSubscriber:
        break;
    }
  }
  // Publishers that cannot wake us get a look every time.
  for (auto& output : outputs_) {
    if (output->wait_fd < 0) PollPublisher(*output);
  }
}

void NodeImpl::ServiceControl() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Source, size_t>> tags;
  AddControlFds(&fds, &tags);
  if (PollFor(fds, std::chrono::nanoseconds(0)) > 0) HandleReady(fds, tags);
  last_control_check_ = Clock::now();
}

bool NodeImpl::TakeInputEvent() {
  const size_t count = inputs_.size();
  for (size_t step = 0; step < count; ++step) {
    const size_t index = (next_input_ + step) % count;
    InputState& input = *inputs_[index];
    if (input.subscriber == nullptr) continue;
    Result<std::optional<Message>> received = input.subscriber->TryReceive();
    if (received.ok() && !received->has_value() && input.subscriber->publisher_gone()) {
      // Gone was seen after that look: what it sent before going is still ours.
      received = input.subscriber->TryReceive();
      if (received.ok() && !received->has_value()) {
        InputGone(input);
        if (!pending_.empty()) {
          next_input_ = index + 1;
          return true;
        }
        continue;
      }
    }
    if (!received.ok()) {
      Queue(EventType::kError, "",
            "input '" + input.config->id + "': " + received.status().message());
    } else if (received->has_value()) {
      Message& message = **received;
      Event event;
      event.type = EventType::kInput;
      event.id = input.config->id;
      event.value = std::move(message.batch);
      event.metadata = std::move(message.metadata);
      event.sequence = message.sequence;
      if (input.last_sequence != 0 && message.sequence > input.last_sequence + 1) {
        input.gaps.fetch_add(static_cast<int64_t>(message.sequence - input.last_sequence - 1),
                             std::memory_order_relaxed);
      }
      input.last_sequence = message.sequence;
      input.received.fetch_add(1, std::memory_order_relaxed);
      input.bytes_received.fetch_add(BatchBytes(*event.value), std::memory_order_relaxed);
      pending_.push_back(std::move(event));
    } else {
      continue;
    }
    next_input_ = index + 1;  // the next search starts after this input: round robin
    return true;
  }
  return false;
}

bool NodeImpl::StreamEnded() const {
  if (has_timers_) return false;
  if (inputs_.empty()) {
    std::lock_guard<std::mutex> lock(daemon_mutex_);
    return !daemon_.valid();  // under a daemon, a node without inputs waits for stop
  }
  for (const auto& input : inputs_) {
    if (input->subscriber != nullptr || input->replacement != nullptr ||
        input->reconnect != nullptr || input->awaiting_daemon) {
      return false;
    }
  }
  return true;
}

Status NodeImpl::WaitForActivity(const Deadline& deadline) {
  // Arms every input's wait fd; one that is ready already means no sleep.
  FERRY_ASSIGN_OR_RAISE(std::vector<Subscriber*> ready, waitset_.Wait(std::chrono::nanoseconds(0)));
  if (!ready.empty()) return Status::OK();
  std::vector<pollfd> fds;
  std::vector<std::pair<Source, size_t>> tags;
  AddControlFds(&fds, &tags);
  for (size_t index = 0; index < inputs_.size(); ++index) {
    if (inputs_[index]->subscriber == nullptr) continue;
    fds.push_back(pollfd{inputs_[index]->subscriber->wait_fd(), POLLIN, 0});
    tags.emplace_back(Source::kSubscriber, index);
  }
  bool blind = false;
  for (auto& output : outputs_) blind = blind || output->wait_fd < 0;
  std::chrono::nanoseconds timeout = deadline.Remaining(kSleepSlice);
  if (blind) timeout = std::min<std::chrono::nanoseconds>(timeout, std::chrono::milliseconds(2));
  if (options_.busy_poll) timeout = std::chrono::nanoseconds(0);
  const int count = PollFor(fds, timeout);
  if (count < 0 && errno != EINTR) return Errno("ppoll in Node::Next");
  if (count > 0 || blind) HandleReady(fds, tags);
  last_control_check_ = Clock::now();
  return Status::OK();
}

Result<std::optional<Event>> NodeImpl::Next(std::chrono::nanoseconds timeout) {
  const Deadline deadline(timeout);
  for (;;) {
    if (!pending_.empty()) {
      Event event = std::move(pending_.front());
      pending_.pop_front();
      if (event.type == EventType::kStop) {
        ended_ = true;
        pending_.clear();  // input that was queued behind the stop is dropped
      }
      return std::optional<Event>(std::move(event));
    }
    if (ended_) return std::optional<Event>();
    if (Clock::now() - last_control_check_ >= kControlInterval) {
      ServiceControl();
      if (!pending_.empty()) continue;
    }
    if (TakeInputEvent()) continue;
    if (StreamEnded()) {
      ended_ = true;
      return std::optional<Event>();
    }
    if (deadline.Expired()) {
      return Status::TimedOut("no event for node '" + config_.node + "' before the timeout");
    }
    FERRY_RETURN_NOT_OK(WaitForActivity(deadline));
  }
}

// ---- Outputs ---------------------------------------------------------------

Status NodeImpl::SendOutput(const std::string& output, const RecordBatch& batch,
                            const Metadata& metadata) {
  OutputState* state = FindOutput(output);
  if (state == nullptr) return UnknownOutput(output);
  std::lock_guard<std::mutex> lock(state->mutex);
  if (state->publisher == nullptr) {
    return Status::Invalid("output '" + output + "' of node '" + config_.node + "' is closed");
  }
  Status sent;
  if (BatchInPool(state->publisher->LoanPool(), batch)) {
    sent = state->publisher->Send(batch, metadata);
    if (sent.ok()) state->loaned_sends.fetch_add(1, std::memory_order_relaxed);
  } else {
    sent = state->publisher->SendCopy(batch, metadata);
    if (sent.ok()) state->copied_sends.fetch_add(1, std::memory_order_relaxed);
  }
  return sent.ok() ? sent : sent.WithPrefix("output '" + output + "': ");
}

MemoryPool* NodeImpl::OutputPool(const std::string& output) {
  OutputState* state = FindOutput(output);
  if (state == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(state->mutex);
  return state->publisher != nullptr ? state->publisher->LoanPool() : nullptr;
}

Status NodeImpl::CloseOutput(const std::string& output) {
  OutputState* state = FindOutput(output);
  if (state == nullptr) return UnknownOutput(output);
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (state->publisher == nullptr) return Status::OK();
    state->final_stats = state->publisher->stats();
    state->publisher.reset();
  }
  SendToDaemon({{"type", "output_closed"}, {"output", output}});
  return Status::OK();
}

Status NodeImpl::WaitForSubscribers(const std::string& output, int count,
                                    std::chrono::nanoseconds timeout) {
  OutputState* state = FindOutput(output);
  if (state == nullptr) return UnknownOutput(output);
  std::lock_guard<std::mutex> lock(state->mutex);
  if (state->publisher == nullptr) {
    return Status::Invalid("output '" + output + "' of node '" + config_.node + "' is closed");
  }
  return state->publisher->WaitForSubscribers(count, timeout);
}

std::string NodeImpl::StatsJson() const {
  ordered_json outputs = ordered_json::object();
  for (const auto& output : outputs_) {
    ordered_json entry;
    {
      std::lock_guard<std::mutex> lock(output->mutex);
      const bool open = output->publisher != nullptr;
      entry = StatsObject(open ? output->publisher->stats() : output->final_stats);
      entry["closed"] = !open;
    }
    entry["loaned_sends"] = output->loaned_sends.load(std::memory_order_relaxed);
    entry["copied_sends"] = output->copied_sends.load(std::memory_order_relaxed);
    outputs[output->config->id] = std::move(entry);
  }
  ordered_json inputs = ordered_json::object();
  for (const auto& input : inputs_) {
    ordered_json entry{{"received", input->received.load(std::memory_order_relaxed)}};
    if (input->is_timer()) {
      entry["timer"] = true;
    } else {
      entry["bytes_received"] = input->bytes_received.load(std::memory_order_relaxed);
      entry["reconnects"] = input->reconnects.load(std::memory_order_relaxed);
      entry["dropped"] = input->gaps.load(std::memory_order_relaxed);
    }
    inputs[input->config->id] = std::move(entry);
  }
  ordered_json document{
      {"node", config_.node}, {"outputs", std::move(outputs)}, {"inputs", std::move(inputs)}};
  return document.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

NodeImpl::~NodeImpl() {
  bool reporting;
  {
    std::lock_guard<std::mutex> lock(daemon_mutex_);
    reporting = daemon_.valid();
  }
  if (reporting) {
    SendToDaemon(
        {{"type", "stats"}, {"stats", nlohmann::json::parse(StatsJson(), nullptr, false)}});
  }
  for (auto& output : outputs_) (void)CloseOutput(output->config->id);
  pending_.clear();
  for (auto& input : inputs_) {
    waitset_.Remove(input->subscriber.get());
    input->subscriber.reset();
    input->replacement.reset();
  }
}

}  // namespace

// ---- Factories ----------------------------------------------------------------

Result<std::unique_ptr<Node>> Node::FromConfig(NodeConfig config, NodeOptions options) {
  return NodeImpl::Make(std::move(config), options);
}

Result<std::unique_ptr<Node>> Node::FromEnvironment(NodeOptions options) {
  const char* text = std::getenv(protocol::kConfigEnv);
  if (text == nullptr || *text == '\0') {
    return Status::Invalid(std::string(protocol::kConfigEnv) +
                           " is not set: this program is a Ferry node: start it with "
                           "`ferry run dataflow.yml`");
  }
  Result<NodeConfig> config = NodeConfig::FromJson(text);
  if (!config.ok()) return config.status().WithPrefix(std::string(protocol::kConfigEnv) + ": ");
  return FromConfig(config.MoveValueUnsafe(), options);
}

}  // namespace ferry::flow
