// The C++ node API: a process started by `ferry run` (the daemon) that
// receives events on its inputs and sends record batches on its outputs.
//
//   FERRY_ASSIGN_OR_RAISE(auto node, ferry::flow::Node::FromEnvironment());
//   for (;;) {
//     FERRY_ASSIGN_OR_RAISE(std::optional<Event> event, node->Next());
//     if (!event) break;
//     if (event->type == EventType::kInput) node->SendOutput("out", *event->value);
//   }
//
// Inputs are transport Subscribers connected to the producing node's
// Publisher (zero copy: the batch's buffers are the producer's shared
// memory); timer inputs tick inside the node. Outputs are Publishers; a batch
// built in OutputPool(output) memory travels without a copy, any other batch
// is copied once into shared memory (counted in telemetry and in the
// summary's copy column).
//
// Lifecycle: FromEnvironment reads FERRY_NODE_CONFIG (see
// src/flow/runtime/protocol.h), registers with the daemon, creates the
// outputs, connects the inputs and waits for the daemon's start (so no
// message sent after construction is lost to a subscriber that has not
// connected yet). Next returns, in order of arrival: kInput events, one
// kInputClosed per input whose producer finished or died (and did not
// restart), kStop when the daemon asks the graph to stop (Ctrl-C, `ferry
// stop`, or the graph's end), and kError for a problem the node can carry on
// after (a malformed message, say). After kStop, or once every input is
// closed and the node has no timer, Next returns nullopt: the node should
// finish. Destroying the Node reports its statistics to the daemon and
// closes its outputs (downstream nodes then see kInputClosed).
//
// Thread safety: a Node is used by one thread at a time; received batches
// may be released from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/exchange/array.h"
#include "ferry/exchange/buffer.h"
#include "ferry/exchange/status.h"

namespace ferry::flow {

enum class EventType : uint8_t { kInput, kInputClosed, kStop, kError };
const char* EventTypeName(EventType type);  // "INPUT", "INPUT_CLOSED", "STOP", "ERROR"

struct Event {
  EventType type = EventType::kInput;
  // kInput / kInputClosed: the input id. kStop: the reason ("ctrl-c",
  // "ferry stop", "all nodes finished", ...). kError: empty.
  std::string id;
  // kInput: the batch (shared-memory buffers) and the sender's metadata.
  RecordBatchPtr value;
  Metadata metadata;
  // kInput: the producer's message number (from 1; timers count their ticks).
  uint64_t sequence = 0;
  // kError: what went wrong.
  std::string error;
};

// What a node needs to run, normally decoded from FERRY_NODE_CONFIG.
struct NodeConfig {
  std::string dataflow;       // the dataflow's run id
  std::string node;           // this node's id
  std::string daemon_socket;  // the daemon's abstract socket name ("" = no daemon: tests)
  struct Input {
    std::string id;
    // Either a channel (the producer's output) ...
    std::string channel;
    uint32_t queue_size = 64;
    std::string overflow = "block";
    // ... or a timer (channel empty).
    std::chrono::nanoseconds timer_interval{0};
  };
  struct Output {
    std::string id;
    std::string channel;
  };
  std::vector<Input> inputs;
  std::vector<Output> outputs;
  int restart_count = 0;  // how many times the daemon restarted this node

  // Parses / prints the JSON form (protocol.h). Invalid naming the field on
  // bad input.
  static Result<NodeConfig> FromJson(const std::string& json);
  std::string ToJson() const;
};

struct NodeOptions {
  // How long construction may wait for peers and the daemon's start.
  std::chrono::nanoseconds startup_timeout = std::chrono::seconds(60);
  // Busy-poll instead of sleeping in Next (lowest latency, burns a core).
  bool busy_poll = false;
};

class Node {
 public:
  // From the FERRY_NODE_CONFIG environment variable (set by the daemon).
  // Invalid with a clear message when it is missing ("this program is a
  // Ferry node: start it with `ferry run dataflow.yml`").
  static Result<std::unique_ptr<Node>> FromEnvironment(NodeOptions options = {});
  static Result<std::unique_ptr<Node>> FromConfig(NodeConfig config, NodeOptions options = {});
  virtual ~Node() = default;

  virtual const std::string& id() const = 0;
  virtual const NodeConfig& config() const = 0;

  // The next event, waiting at most `timeout` (TimedOut after it); nullopt
  // when the event stream has ended (see above).
  virtual Result<std::optional<Event>> Next(
      std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max()) = 0;

  // Sends `batch` on `output` (Invalid for an output the descriptor does not
  // list). Buffers in OutputPool(output) memory travel without a copy; others
  // are copied into shared memory and counted.
  virtual Status SendOutput(const std::string& output, const RecordBatch& batch,
                            const Metadata& metadata = {}) = 0;
  // Memory lent from `output`'s shared memory (nullptr for an unknown output):
  // build batches with it and SendOutput copies nothing.
  virtual MemoryPool* OutputPool(const std::string& output) = 0;
  // Closes one output: its subscribers see kInputClosed once they drained it.
  virtual Status CloseOutput(const std::string& output) = 0;

  // Per output: messages, bytes, bytes copied, drops (ChannelStats of its
  // publisher), per input: messages received.
  virtual std::string StatsJson() const = 0;
};

}  // namespace ferry::flow
