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
// src/flow/node/protocol.h), registers with the daemon, creates the
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
// Without a daemon (NodeConfig::daemon_socket empty: tests, standalone
// programs) there is no start signal: a producer calls WaitForSubscribers
// before its first SendOutput if no message may be lost. Under a daemon, a
// node with no input at all waits in Next for the daemon's stop.
//
// When a producer restarts, the daemon sends "reconnect" and the input
// connects again in the background; events of the input resume once the new
// producer is connected (the stream does not end while a reconnection is
// under way). An input marked producer_may_restart gets no kInputClosed when
// its producer goes: under a daemon it waits for the reconnect, or for the
// daemon's word that the producer will not come back. Other inputs may see
// kInputClosed first and then events again after a reconnect. A node started
// (or restarted) after the producer of an input finished for good gets
// kInputClosed for that input right after the start.
//
// Arrays and batches. Every message is a record batch. A plain array (what
// Python and dora-style nodes send) travels as a one-column batch whose
// field is named "value" (kArrayFieldName), with the message metadata key
// "ferry.array" (kArrayMetadataKey) set to "1". Receivers in Python and C
// unwrap it back to the array; C++ receivers see the batch and can test
// IsArrayMessage(event.metadata). SendArray sends an array this way. Timer
// ticks follow the convention too: their value is an empty array of type
// null.
//
// Typed metadata. Metadata values are strings on the wire. Python, C and
// C++ code that uses TypedMetadata send integers, floats, booleans, lists and
// maps as text and list the keys that are not strings under "ferry.types"
// (kTypesMetadataKey), a JSON object such as
// {"frame":"int","gain":"float","ok":"bool","boxes":"json"}; their receivers
// turn the values back into their types (EncodeTypedMetadata /
// DecodeTypedMetadata). Event::metadata holds the strings as they travel.
//
// Thread safety: Next, WaitForSubscribers and destruction are used by one
// thread at a time. SendOutput, SendArray, OutputPool, CloseOutput and
// StatsJson may also be called from another thread while one thread waits in
// Next. Received batches may be released from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/buffer.h"

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
    // The producer may be restarted: once it is gone, the input waits for the
    // daemon's reconnect or input_closed before it closes (protocol.h).
    bool producer_may_restart = false;
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
  // Checks what FromJson checks on a config built in code: ids present and
  // unique, each input either a channel or a positive timer interval, queue
  // sizes in [1, 1 << 20], known overflow policies, valid channel names.
  Status Validate() const;
};

struct NodeOptions {
  // How long construction may wait for peers and the daemon's start (and how
  // long a reconnection may wait for a restarted producer).
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
  // Sends a plain array by the array convention (see above): a one-column
  // batch "value" with "ferry.array" = "1" added to `metadata`.
  Status SendArray(const std::string& output, const ArrayDataPtr& array,
                   const Metadata& metadata = {});
  // Memory lent from `output`'s shared memory (nullptr for an unknown or
  // closed output): build batches with it and SendOutput copies nothing. The
  // pointer is valid until the output is closed; buffers allocated from it
  // stay valid as long as they are referenced.
  virtual MemoryPool* OutputPool(const std::string& output) = 0;
  // Closes one output: its subscribers see kInputClosed once they drained it.
  virtual Status CloseOutput(const std::string& output) = 0;
  // Waits until `output` has at least `count` subscribers, accepting them
  // meanwhile (TimedOut after `timeout`). Needed without a daemon only: under
  // a daemon every subscriber is connected before start.
  virtual Status WaitForSubscribers(const std::string& output, int count,
                                    std::chrono::nanoseconds timeout) = 0;

  // Per output: messages, bytes, bytes copied, drops (ChannelStats of its
  // publisher), per input: messages received.
  virtual std::string StatsJson() const = 0;
};

// ---- The array convention --------------------------------------------------

inline constexpr std::string_view kArrayMetadataKey = "ferry.array";
inline constexpr std::string_view kArrayFieldName = "value";

// `array` as a one-column batch named "value" (no copy; nullable when it has
// nulls or `nullable`).
Result<RecordBatchPtr> ArrayAsBatch(const ArrayDataPtr& array, bool nullable = true);
// True when `metadata` marks a plain array ("ferry.array" = "1").
bool IsArrayMessage(const Metadata& metadata);
// The array inside a batch sent by the convention, or nullptr when `batch`
// is not a one-column batch (whatever its metadata said).
ArrayDataPtr ArrayOfMessage(const RecordBatch& batch, const Metadata& metadata);

// ---- Typed metadata ----------------------------------------------------------

inline constexpr std::string_view kTypesMetadataKey = "ferry.types";
// Limits of typed metadata (EncodeTypedMetadata refuses what is past them):
// lists and maps nest at most kMaxMetadataDepth levels (a list of lists is 2),
// and the encoded text of all values of one message is at most
// kMaxMetadataBytes. Integers are 64-bit signed.
inline constexpr int kMaxMetadataDepth = 16;
inline constexpr size_t kMaxMetadataBytes = size_t{1} << 20;

// A typed metadata value: a string, a 64-bit integer, a double (NaN and
// infinities included), a boolean, a list of values or a map of string keys
// to values (in insertion order, keys unique). A std::variant: test it with
// index() / std::holds_alternative and read it with std::get / std::get_if
// (as_variant() for std::visit).
struct MetadataValue;
using MetadataList = std::vector<MetadataValue>;
using MetadataMap = std::vector<std::pair<std::string, MetadataValue>>;
struct MetadataValue : std::variant<std::string, int64_t, double, bool, MetadataList, MetadataMap> {
  using Variant = std::variant<std::string, int64_t, double, bool, MetadataList, MetadataMap>;
  using Variant::Variant;
  MetadataValue() : Variant(std::string()) {}
  MetadataValue(const char* text) : Variant(std::string(text)) {}  // NOLINT: implicit, like string
  MetadataValue(int value) : Variant(int64_t{value}) {}            // NOLINT: implicit, like int64
  const Variant& as_variant() const { return *this; }
  Variant& as_variant() { return *this; }
  // Exact equality (NaN equals NaN here, so that round trips compare).
  bool operator==(const MetadataValue& other) const;
};
using TypedMetadata = MetadataMap;

// Strings as they are; other values as text plus their type under
// "ferry.types": integers, floats and booleans as "42", "0.25" (shortest
// round-trip form; "nan", "inf", "-inf") and "true"/"false", lists and maps
// as JSON whose floats always carry a '.' or an exponent (NaN, Infinity and
// -Infinity as those bare words). Invalid for a key starting with "ferry."
// (reserved), an empty key or a repeated key (also inside a map), nesting
// deeper than kMaxMetadataDepth, or more than kMaxMetadataBytes of text.
Result<Metadata> EncodeTypedMetadata(const TypedMetadata& values);
// The inverse: "ferry.array" and "ferry.types" are left out, listed keys
// get their types back. A value that does not parse as its listed type, or
// a malformed "ferry.types", leaves the value a string (metadata comes from
// another process: never an error).
TypedMetadata DecodeTypedMetadata(const Metadata& metadata);

// One value as the JSON of typed metadata (above), and back: Invalid, naming
// the problem, for text that is not one such value, nests deeper than
// `max_depth` (a whole metadata object read as one map takes one more level
// than its values), or holds an integer outside 64 bits or a repeated key.
std::string MetadataValueToJson(const MetadataValue& value);
Result<MetadataValue> MetadataValueFromJson(std::string_view json,
                                            int max_depth = kMaxMetadataDepth);

}  // namespace ferry::flow
