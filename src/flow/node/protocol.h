// The control protocol between the dataflow daemon (`ferry run`) and the
// processes it starts (nodes and operator runtimes). Data never travels here:
// only lifecycle messages. Not installed.
//
// Start-up. The daemon listens on an abstract SOCK_SEQPACKET unix socket
// "\0ferry-daemon/<dataflow>" and starts every node with the environment
//   FERRY_NODE_CONFIG   the node's NodeConfig as JSON (node.h), e.g.
//     {"dataflow":"df-1234-ab12","node":"sink","daemon":"ferry-daemon/df-1234-ab12",
//      "inputs":[{"id":"boxes","channel":"df-1234-ab12/runtime/detect/boxes",
//                 "queue_size":64,"overflow":"block","producer_may_restart":true},
//                {"id":"tick","timer_ns":33000000}],
//      "outputs":[{"id":"out","channel":"df-1234-ab12/sink/out"}],
//      "restart_count":0}
//   FERRY_NODE_ID, FERRY_DATAFLOW  the same ids, for convenience
// Channel names: "<dataflow>/<node>/<output>" for a node's output and
// "<dataflow>/<node>/<operator>/<output>" for an operator's.
//
// Each message is one JSON object in one datagram (at most kMaxMessage bytes).
// Node -> daemon:
//   {"type":"hello","node":ID,"pid":PID}        first, right after connecting
//   {"type":"ready"}                            outputs created, inputs connected
//   {"type":"output_closed","output":ID}        CloseOutput (or exit)
//   {"type":"stats","stats":{...}}              Node::StatsJson(), before exit
//   {"type":"error","message":TEXT}             a fatal error the node reports
//   {"type":"reconnected","input":ID}           input ID is connected to the restarted producer
// Daemon -> node:
//   {"type":"start"}                            every node is ready: go
//   {"type":"stop","reason":TEXT}               finish (kStop); SIGKILL after the grace period
//   {"type":"reconnect","input":ID}             the producer of ID restarted: connect again
//   {"type":"input_closed","input":ID}          the producer of ID is gone for good
//
// A node's inputs connect while its own outputs accept subscribers (a node
// pumps its publishers while it waits), so graphs with cycles start too. The
// daemon sends start only after every node said ready; a node that dies
// before that fails the start (or is restarted per its policy).
//
// Restarts. An input whose producer has a restart policy other than never
// carries "producer_may_restart" (optional, default false). When such a
// producer is gone and its messages are drained, the input does not close:
// it waits for the daemon. When the producer exits and will not run again
// (policy never, restarts used up, or the dataflow is stopping) the daemon
// sends input_closed to every consumer input it fed (an input that is
// closed already ignores it) and the node emits
// kInputClosed after whatever the producer sent. A node that says hello
// after such a producer finished (a restarted consumer, or one still
// starting) gets input_closed for those inputs right after its hello; it
// listens to the daemon while its inputs connect, so an input whose producer
// is gone closes at once instead of waiting for a publisher that never comes. When a restarted
// producer says ready, the daemon sends reconnect to its consumers, waits for their "reconnected"
// (at most kReconnectAckTimeout in the daemon, then it goes on and logs a warning), and only then
// sends start to the producer, so the new instance's first messages find their consumers connected.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ferry/base/status.h"

namespace ferry::flow::protocol {

inline constexpr size_t kMaxMessage = 64 * 1024;
inline constexpr const char* kConfigEnv = "FERRY_NODE_CONFIG";

std::string DaemonSocketName(const std::string& dataflow);
std::string ChannelName(const std::string& dataflow, const std::string& node,
                        const std::string& operator_id, const std::string& output);

// One end of a control connection (a connected SOCK_SEQPACKET socket).
class Connection {
 public:
  Connection() = default;
  explicit Connection(int fd) : fd_(fd) {}
  Connection(Connection&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Connection& operator=(Connection&& other) noexcept;
  ~Connection();

  // Connects to the daemon's abstract socket `name`.
  static Result<Connection> Connect(const std::string& name);

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  Status Send(const nlohmann::json& message);
  // The next message; nullopt when the peer hung up; TimedOut after
  // `timeout`; Invalid for a datagram that is not a JSON object with a
  // string "type".
  Result<std::optional<nlohmann::json>> Receive(std::chrono::nanoseconds timeout);

 private:
  int fd_ = -1;
};

// A listening abstract socket (the daemon's end).
class Listener {
 public:
  Listener() = default;
  Listener(Listener&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Listener& operator=(Listener&& other) noexcept;
  ~Listener();
  // Invalid if the name is taken (another daemon runs this dataflow id).
  static Result<Listener> Listen(const std::string& name);
  int fd() const { return fd_; }
  // A pending connection, or an invalid Connection when none is waiting.
  Result<Connection> Accept();

 private:
  int fd_ = -1;
};

}  // namespace ferry::flow::protocol
