// Nodes in real processes: forked children wired by configs (no daemon), and
// a tiny daemon in the test process that speaks protocol.h. Every wait is
// bounded; every child is reaped.
#include "ferry/flow/node.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "ferry/exchange/builder.h"
#include "flow/node/protocol.h"
#include "flow/transport/transport_test_util.h"
#include "testing/test_util.h"

namespace ferry::flow {
namespace {

using testing::BatchMatches;
using testing::BufferBytes;
using testing::FindMapping;
using testing::ForkChild;
using ::testing::HasSubstr;
using testing::MakeBatch;
using testing::Pipe;
using ::testing::StartsWith;
using testing::UniqueChannel;
using testing::WaitChild;
using json = nlohmann::json;

constexpr auto kWait = std::chrono::seconds(10);

// In a child: a failed step (a Status or Result) is reported and exits with `code`.
#define CHILD_OK(expr, code)                                                               \
  do {                                                                                     \
    const ::ferry::Status _child_status = ::ferry::testing::ToStatus(expr);                \
    if (!_child_status.ok()) {                                                             \
      std::fprintf(stderr, "child step %d: %s\n", code, _child_status.ToString().c_str()); \
      return code;                                                                         \
    }                                                                                      \
  } while (false)

NodeConfig::Input ChannelInput(const std::string& id, const std::string& channel) {
  NodeConfig::Input input;
  input.id = id;
  input.channel = channel;
  return input;
}

NodeConfig::Input TimerInput(const std::string& id, std::chrono::nanoseconds interval) {
  NodeConfig::Input input;
  input.id = id;
  input.timer_interval = interval;
  return input;
}

NodeConfig Config(const std::string& node, std::vector<NodeConfig::Input> inputs,
                  std::vector<NodeConfig::Output> outputs, const std::string& daemon = "") {
  NodeConfig config;
  config.dataflow = "test";
  config.node = node;
  config.daemon_socket = daemon;
  config.inputs = std::move(inputs);
  config.outputs = std::move(outputs);
  return config;
}

NodeOptions Options() {
  NodeOptions options;
  options.startup_timeout = std::chrono::seconds(20);
  return options;
}

Result<ArrayDataPtr> Int64Array(std::vector<int64_t> values, MemoryPool* pool) {
  Int64Builder builder(pool);
  for (int64_t value : values) FERRY_RETURN_NOT_OK(builder.Append(value));
  return builder.Finish();
}

int64_t FirstInt64(const ArrayDataPtr& array) { return array->GetValues<int64_t>(1)[0]; }

std::string MetadataText(const Metadata& metadata, const std::string& key) {
  for (const auto& [name, value] : metadata) {
    if (name == key) return value;
  }
  return "";
}

// True when every buffer of the batch is a read-only mapping of a Ferry memfd.
bool InSharedMemory(const RecordBatch& batch) {
  for (const ArrayDataPtr& column : batch.columns()) {
    for (const BufferPtr& buffer : column->buffers) {
      if (buffer == nullptr || buffer->size() == 0) continue;
      auto mapping = FindMapping(buffer->data());
      if (!mapping || mapping->permissions != "r--s" ||
          mapping->file.find("/memfd:ferry:") == std::string::npos) {
        return false;
      }
    }
  }
  return true;
}

std::string DaemonName(const std::string& what) {
  static std::atomic<int> counter{0};
  return "ferry-daemon/test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         what;
}

// Accepts one node on `listener`, waiting at most kWait.
Result<protocol::Connection> AcceptNode(protocol::Listener& listener) {
  pollfd entry{listener.fd(), POLLIN, 0};
  if (::poll(&entry, 1, static_cast<int>(std::chrono::milliseconds(kWait).count())) != 1) {
    return Status::TimedOut("no node connected to the test daemon");
  }
  return listener.Accept();
}

Result<json> ReceiveType(protocol::Connection& connection, const std::string& type) {
  FERRY_ASSIGN_OR_RAISE(std::optional<json> message, connection.Receive(kWait));
  if (!message) return Status::IOError("the node hung up while the daemon waited for " + type);
  if ((*message)["type"] != type) {
    return Status::Invalid("expected '" + type + "', got " + message->dump());
  }
  return *message;
}

// ---- Without a daemon ------------------------------------------------------

TEST(NodeTest, TwoNodesExchangeBatchesWithoutCopying) {
  const std::string channel = UniqueChannel("out");
  const pid_t producer = ForkChild([&] {
    auto made = Node::FromConfig(Config("producer", {}, {{"out", channel}}), Options());
    CHILD_OK(made, 10);
    std::unique_ptr<Node> node = made.MoveValueUnsafe();
    CHILD_OK(node->WaitForSubscribers("out", 1, kWait), 11);
    ferry::testing::CounterDelta copies;
    auto loaned = MakeBatch(node->OutputPool("out"), 100, 1);
    CHILD_OK(loaned, 12);
    CHILD_OK(node->SendOutput("out", **loaned, {{"frame", "1"}}), 13);
    CHILD_CHECK(copies(telemetry::Counter::kBytesCopiedHost) == 0, 14);
    auto heap = MakeBatch(default_memory_pool(), 50, 1000);
    CHILD_OK(heap, 15);
    CHILD_OK(node->SendOutput("out", **heap), 16);
    CHILD_CHECK(copies(telemetry::Counter::kBytesCopiedHost) == BufferBytes(**heap), 17);
    const json stats = json::parse(node->StatsJson());
    CHILD_CHECK(stats["outputs"]["out"]["loaned_sends"] == 1, 18);
    CHILD_CHECK(stats["outputs"]["out"]["copied_sends"] == 1, 19);
    CHILD_CHECK(stats["outputs"]["out"]["bytes_copied"] == BufferBytes(**heap), 20);
    CHILD_CHECK(stats["outputs"]["out"]["sent"] == 2, 21);
    return 0;  // destroying the node closes "out"
  });
  ASSERT_OK_AND_ASSIGN(
      auto node,
      Node::FromConfig(Config("consumer", {ChannelInput("in", channel)}, {}), Options()));
  ferry::testing::CounterDelta copies;
  ASSERT_OK_AND_ASSIGN(std::optional<Event> first, node->Next(kWait));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->type, EventType::kInput);
  EXPECT_EQ(first->id, "in");
  EXPECT_EQ(first->sequence, 1u);
  EXPECT_TRUE(BatchMatches(*first->value, 100, 1));
  EXPECT_EQ(MetadataText(first->metadata, "frame"), "1");
  EXPECT_TRUE(InSharedMemory(*first->value));
  ASSERT_OK_AND_ASSIGN(std::optional<Event> second, node->Next(kWait));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->type, EventType::kInput);
  EXPECT_EQ(second->sequence, 2u);
  EXPECT_TRUE(BatchMatches(*second->value, 50, 1000));
  EXPECT_TRUE(InSharedMemory(*second->value));  // copied once, by the producer
  ASSERT_OK_AND_ASSIGN(std::optional<Event> closed, node->Next(kWait));
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->type, EventType::kInputClosed);
  EXPECT_EQ(closed->id, "in");
  ASSERT_OK_AND_ASSIGN(std::optional<Event> end, node->Next(kWait));
  EXPECT_FALSE(end.has_value());
  ASSERT_OK_AND_ASSIGN(end, node->Next(kWait));  // and it stays ended
  EXPECT_FALSE(end.has_value());
  EXPECT_EQ(copies(telemetry::Counter::kBytesCopiedHost), 0);
  const json stats = json::parse(node->StatsJson());
  EXPECT_EQ(stats["inputs"]["in"]["received"], 2);
  EXPECT_EQ(stats["inputs"]["in"]["bytes_received"],
            BufferBytes(*first->value) + BufferBytes(*second->value));
  EXPECT_EQ(WaitChild(producer), 0);
}

TEST(NodeTest, ThreeNodesRelayAndTheRelayCopyIsCounted) {
  const std::string first_hop = UniqueChannel("raw");
  const std::string second_hop = UniqueChannel("relayed");
  constexpr int kMessages = 5;
  const pid_t producer = ForkChild([&] {
    auto made = Node::FromConfig(Config("producer", {}, {{"raw", first_hop}}), Options());
    CHILD_OK(made, 10);
    std::unique_ptr<Node> node = made.MoveValueUnsafe();
    CHILD_OK(node->WaitForSubscribers("raw", 1, kWait), 11);
    for (int seed = 0; seed < kMessages; ++seed) {
      auto batch = MakeBatch(node->OutputPool("raw"), 10 + seed, seed * 100);
      CHILD_OK(batch, 12);
      CHILD_OK(node->SendOutput("raw", **batch), 13);
    }
    return 0;
  });
  const pid_t relay = ForkChild([&] {
    auto made = Node::FromConfig(
        Config("relay", {ChannelInput("raw", first_hop)}, {{"relayed", second_hop}}), Options());
    CHILD_OK(made, 20);
    std::unique_ptr<Node> node = made.MoveValueUnsafe();
    CHILD_OK(node->WaitForSubscribers("relayed", 1, kWait), 21);
    int64_t forwarded_bytes = 0;
    for (;;) {
      auto event = node->Next(kWait);
      CHILD_OK(event, 22);
      if (!event->has_value()) break;
      if ((*event)->type != EventType::kInput) continue;
      // The batch lives in the producer's memory, not ours: a counted copy.
      CHILD_OK(node->SendOutput("relayed", *(*event)->value, (*event)->metadata), 23);
      forwarded_bytes += BufferBytes(*(*event)->value);
    }
    const json stats = json::parse(node->StatsJson());
    CHILD_CHECK(stats["outputs"]["relayed"]["copied_sends"] == kMessages, 24);
    CHILD_CHECK(stats["outputs"]["relayed"]["bytes_copied"] == forwarded_bytes, 25);
    CHILD_CHECK(stats["inputs"]["raw"]["received"] == kMessages, 26);
    return 0;
  });
  ASSERT_OK_AND_ASSIGN(
      auto node,
      Node::FromConfig(Config("sink", {ChannelInput("relayed", second_hop)}, {}), Options()));
  int received = 0;
  for (;;) {
    ASSERT_OK_AND_ASSIGN(std::optional<Event> event, node->Next(kWait));
    if (!event) break;
    if (event->type == EventType::kInputClosed) continue;
    ASSERT_EQ(event->type, EventType::kInput) << event->error;
    EXPECT_TRUE(BatchMatches(*event->value, 10 + received, received * 100));
    EXPECT_TRUE(InSharedMemory(*event->value));
    ++received;
  }
  EXPECT_EQ(received, kMessages);
  EXPECT_EQ(WaitChild(producer), 0);
  EXPECT_EQ(WaitChild(relay), 0);
}

TEST(NodeTest, TimersTickAtTheirOwnRates) {
  // 200 Hz ("dora/timer/hz/200") and every 20 ms ("dora/timer/millis/20").
  ASSERT_OK_AND_ASSIGN(
      auto node, Node::FromConfig(Config("clock",
                                         {TimerInput("fast", std::chrono::nanoseconds(5'000'000)),
                                          TimerInput("slow", std::chrono::milliseconds(20))},
                                         {}),
                                  Options()));
  std::map<std::string, std::vector<uint64_t>> ticks;
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while ((ticks["fast"].size() < 4 || ticks["slow"].size() < 2) &&
         std::chrono::steady_clock::now() < deadline) {
    ASSERT_OK_AND_ASSIGN(std::optional<Event> event, node->Next(kWait));
    ASSERT_TRUE(event.has_value());  // timers never end the stream
    ASSERT_EQ(event->type, EventType::kInput);
    // A tick is an empty array of type null, by the array convention.
    ArrayDataPtr value = ArrayOfMessage(*event->value, event->metadata);
    ASSERT_NE(value, nullptr);
    EXPECT_EQ(value->type->id, TypeId::kNull);
    EXPECT_EQ(value->length, 0);
    ticks[event->id].push_back(event->sequence);
  }
  ASSERT_GE(ticks["fast"].size(), 4u);
  ASSERT_GE(ticks["slow"].size(), 2u);
  for (const auto& [id, sequence] : ticks) {
    EXPECT_EQ(sequence.front() >= 1, true) << id;
    for (size_t index = 1; index < sequence.size(); ++index) {
      EXPECT_GT(sequence[index], sequence[index - 1]) << id;
    }
  }
  const json stats = json::parse(node->StatsJson());
  EXPECT_EQ(stats["inputs"]["fast"]["timer"], true);
  EXPECT_EQ(stats["inputs"]["fast"]["received"], ticks["fast"].size());
}

TEST(NodeTest, ACycleOfTwoNodesStarts) {
  const std::string a_out = UniqueChannel("a");
  const std::string b_out = UniqueChannel("b");
  auto forward = [](const std::string& self, const std::string& input,
                    const std::string& input_channel, const std::string& output,
                    const std::string& output_channel, bool first) -> int {
    auto made = Node::FromConfig(
        Config(self, {ChannelInput(input, input_channel)}, {{output, output_channel}}), Options());
    CHILD_OK(made, 10);
    std::unique_ptr<Node> node = made.MoveValueUnsafe();
    CHILD_OK(node->WaitForSubscribers(output, 1, kWait), 11);
    if (first) {
      auto value = Int64Array({41}, node->OutputPool(output));
      CHILD_OK(value, 12);
      CHILD_OK(node->SendArray(output, *value), 13);
    }
    auto event = node->Next(kWait);
    CHILD_OK(event, 14);
    CHILD_CHECK(event->has_value() && (*event)->type == EventType::kInput, 15);
    ArrayDataPtr got = ArrayOfMessage(*(*event)->value, (*event)->metadata);
    CHILD_CHECK(got != nullptr, 16);
    if (first) {
      CHILD_CHECK(FirstInt64(got) == 42, 17);
      return 0;
    }
    CHILD_CHECK(FirstInt64(got) == 41, 18);
    auto reply = Int64Array({42}, node->OutputPool(output));
    CHILD_OK(reply, 19);
    CHILD_OK(node->SendArray(output, *reply), 20);
    // Then A finishes: our input closes and the stream ends.
    event = node->Next(kWait);
    CHILD_OK(event, 21);
    CHILD_CHECK(event->has_value() && (*event)->type == EventType::kInputClosed, 22);
    event = node->Next(kWait);
    CHILD_OK(event, 23);
    CHILD_CHECK(!event->has_value(), 24);
    return 0;
  };
  const pid_t a = ForkChild([&] { return forward("a", "from_b", b_out, "out", a_out, true); });
  const pid_t b = ForkChild([&] { return forward("b", "from_a", a_out, "out", b_out, false); });
  EXPECT_EQ(WaitChild(a), 0);
  EXPECT_EQ(WaitChild(b), 0);
}

TEST(NodeTest, BusyInputsTakeTurns) {
  const std::string left = UniqueChannel("left");
  const std::string right = UniqueChannel("right");
  constexpr int kEach = 32;  // fits the input queues: both are full before reading starts
  Pipe filled;
  auto producer = [&](const std::string& channel) {
    return ForkChild([&, channel] {
      auto made = Node::FromConfig(Config("flood", {}, {{"out", channel}}), Options());
      CHILD_OK(made, 10);
      std::unique_ptr<Node> node = made.MoveValueUnsafe();
      CHILD_OK(node->WaitForSubscribers("out", 1, kWait), 11);
      for (int seed = 0; seed < kEach; ++seed) {
        auto batch = MakeBatch(node->OutputPool("out"), 1, seed);
        CHILD_OK(batch, 12);
        CHILD_OK(node->SendOutput("out", **batch), 13);
      }
      filled.Signal();
      return 0;
    });
  };
  const pid_t first = producer(left);
  const pid_t second = producer(right);
  ASSERT_OK_AND_ASSIGN(
      auto node, Node::FromConfig(
                     Config("fair", {ChannelInput("left", left), ChannelInput("right", right)}, {}),
                     Options()));
  ASSERT_TRUE(filled.Await(kWait));
  ASSERT_TRUE(filled.Await(kWait));
  std::vector<std::string> order;
  while (order.size() < 2 * kEach) {
    ASSERT_OK_AND_ASSIGN(std::optional<Event> event, node->Next(kWait));
    ASSERT_TRUE(event.has_value());
    if (event->type == EventType::kInput) order.push_back(event->id);
  }
  // While both have messages, neither input is served twice in a row.
  for (size_t index = 1; index < order.size(); ++index) {
    EXPECT_NE(order[index], order[index - 1]) << "event " << index;
  }
  EXPECT_EQ(WaitChild(first), 0);
  EXPECT_EQ(WaitChild(second), 0);
}

TEST(NodeTest, OutputErrorsAndClosing) {
  const std::string channel = UniqueChannel("solo");
  ASSERT_OK_AND_ASSIGN(auto node,
                       Node::FromConfig(Config("solo", {}, {{"out", channel}}), Options()));
  EXPECT_EQ(node->id(), "solo");
  ASSERT_OK_AND_ASSIGN(auto batch, MakeBatch(default_memory_pool(), 3, 0));
  Status unknown = node->SendOutput("nope", *batch);
  EXPECT_EQ(unknown.code(), StatusCode::kInvalid);
  EXPECT_THAT(unknown.message(), HasSubstr("has no output 'nope' (its outputs: out)"));
  EXPECT_EQ(node->OutputPool("nope"), nullptr);
  EXPECT_FALSE(node->CloseOutput("nope").ok());
  EXPECT_FALSE(node->WaitForSubscribers("nope", 1, std::chrono::milliseconds(1)).ok());
  EXPECT_EQ(node->WaitForSubscribers("out", 1, std::chrono::milliseconds(20)).code(),
            StatusCode::kTimedOut);
  ASSERT_OK(node->SendOutput("out", *batch));  // nobody listens: fine
  ASSERT_OK(node->CloseOutput("out"));
  ASSERT_OK(node->CloseOutput("out"));  // closing twice is harmless
  EXPECT_THAT(node->SendOutput("out", *batch).message(), HasSubstr("is closed"));
  EXPECT_EQ(node->OutputPool("out"), nullptr);
  const json stats = json::parse(node->StatsJson());
  EXPECT_EQ(stats["outputs"]["out"]["closed"], true);
  EXPECT_EQ(stats["outputs"]["out"]["sent"], 1);
  // No inputs, no timers, no daemon: the stream is over at once.
  ASSERT_OK_AND_ASSIGN(std::optional<Event> event, node->Next(kWait));
  EXPECT_FALSE(event.has_value());
}

TEST(NodeTest, StartUpFailsCleanlyWithoutItsProducer) {
  NodeOptions options;
  options.startup_timeout = std::chrono::milliseconds(100);
  Result<std::unique_ptr<Node>> node =
      Node::FromConfig(Config("lonely", {ChannelInput("in", UniqueChannel("never"))}, {}), options);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), StatusCode::kTimedOut);
  EXPECT_THAT(node.status().message(), HasSubstr("node 'lonely': "));
  // A config built in code is checked too.
  EXPECT_FALSE(Node::FromConfig(Config("", {}, {})).ok());
  // Two publishers cannot own one channel.
  const std::string channel = UniqueChannel("taken");
  ASSERT_OK_AND_ASSIGN(auto owner, Node::FromConfig(Config("one", {}, {{"out", channel}})));
  Result<std::unique_ptr<Node>> second = Node::FromConfig(Config("two", {}, {{"out", channel}}));
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("output 'out'"));
}

// ---- With a daemon ---------------------------------------------------------

TEST(NodeDaemonTest, StartStopAndStats) {
  const std::string name = DaemonName("stop");
  ASSERT_OK_AND_ASSIGN(protocol::Listener listener, protocol::Listener::Listen(name));
  const std::string channel = UniqueChannel("out");
  const pid_t child = ForkChild([&] {
    auto made =
        Node::FromConfig(Config("worker", {TimerInput("tick", std::chrono::milliseconds(5))},
                                {{"out", channel}}, name),
                         Options());
    CHILD_OK(made, 10);
    std::unique_ptr<Node> node = made.MoveValueUnsafe();
    std::optional<Event> last;
    for (int events = 0; events < 100000; ++events) {
      auto event = node->Next(kWait);
      CHILD_OK(event, 11);
      if (!event->has_value()) break;
      last = std::move(**event);
    }
    CHILD_CHECK(last.has_value() && last->type == EventType::kStop, 12);
    CHILD_CHECK(last->id == "test over", 13);
    return 0;
  });
  ASSERT_OK_AND_ASSIGN(protocol::Connection connection, AcceptNode(listener));
  ASSERT_TRUE(connection.valid());
  ASSERT_OK_AND_ASSIGN(json hello, ReceiveType(connection, "hello"));
  EXPECT_EQ(hello["node"], "worker");
  EXPECT_EQ(hello["pid"], child);
  ASSERT_OK(ReceiveType(connection, "ready"));
  ASSERT_OK(connection.Send({{"type", "start"}}));
  ASSERT_OK(connection.Send({{"type", "stop"}, {"reason", "test over"}}));
  ASSERT_OK_AND_ASSIGN(json stats, ReceiveType(connection, "stats"));
  EXPECT_EQ(stats["stats"]["node"], "worker");
  EXPECT_EQ(stats["stats"]["inputs"]["tick"]["timer"], true);
  EXPECT_TRUE(stats["stats"]["outputs"]["out"].contains("bytes_copied"));
  ASSERT_OK_AND_ASSIGN(json closed, ReceiveType(connection, "output_closed"));
  EXPECT_EQ(closed["output"], "out");
  ASSERT_OK_AND_ASSIGN(std::optional<json> end, connection.Receive(kWait));
  EXPECT_FALSE(end.has_value());  // the node exited
  EXPECT_EQ(WaitChild(child), 0);
}

TEST(NodeDaemonTest, AMalformedMessageIsAnErrorEventAndAHangUpStops) {
  const std::string name = DaemonName("hangup");
  ASSERT_OK_AND_ASSIGN(protocol::Listener listener, protocol::Listener::Listen(name));
  const pid_t child = ForkChild([&] {
    // No inputs at all: under a daemon the node waits for stop.
    auto made = Node::FromConfig(Config("idle", {}, {}, name), Options());
    CHILD_OK(made, 10);
    std::unique_ptr<Node> node = made.MoveValueUnsafe();
    auto event = node->Next(kWait);
    CHILD_OK(event, 11);
    CHILD_CHECK(event->has_value() && (*event)->type == EventType::kError, 12);
    CHILD_CHECK((*event)->error.find("unknown control message type 'bogus'") != std::string::npos,
                13);
    event = node->Next(kWait);
    CHILD_OK(event, 14);
    CHILD_CHECK(event->has_value() && (*event)->type == EventType::kStop, 15);
    CHILD_CHECK((*event)->id == "daemon gone", 16);
    event = node->Next(kWait);
    CHILD_OK(event, 17);
    CHILD_CHECK(!event->has_value(), 18);
    return 0;
  });
  {
    ASSERT_OK_AND_ASSIGN(protocol::Connection connection, AcceptNode(listener));
    ASSERT_OK(ReceiveType(connection, "hello"));
    ASSERT_OK(ReceiveType(connection, "ready"));
    ASSERT_OK(connection.Send({{"type", "start"}}));
    ASSERT_OK(connection.Send({{"type", "bogus"}}));
  }  // hang up
  EXPECT_EQ(WaitChild(child), 0);
}

// A child process with node "producer" that sends one batch of 10 rows
// (values from `seed`) on `channel` once a subscriber is there.
pid_t ForkOneBatchProducer(const std::string& channel, int64_t seed) {
  return ForkChild([&channel, seed] {
    auto made = Node::FromConfig(Config("producer", {}, {{"out", channel}}), Options());
    CHILD_OK(made, 30);
    std::unique_ptr<Node> node = made.MoveValueUnsafe();
    CHILD_OK(node->WaitForSubscribers("out", 1, kWait), 31);
    auto batch = MakeBatch(node->OutputPool("out"), 10, seed);
    CHILD_OK(batch, 32);
    CHILD_OK(node->SendOutput("out", **batch), 33);
    return 0;
  });
}

TEST(NodeDaemonTest, AnInputReconnectsWhenItsProducerRestarts) {
  const std::string name = DaemonName("reconnect");
  ASSERT_OK_AND_ASSIGN(protocol::Listener listener, protocol::Listener::Listen(name));
  const std::string channel = UniqueChannel("restarting");
  Pipe second_arrived;
  auto producer = [&](int64_t seed) { return ForkOneBatchProducer(channel, seed); };
  const pid_t consumer = ForkChild([&] {
    // The timer keeps the stream open while the producer is away.
    auto made = Node::FromConfig(
        Config("consumer",
               {ChannelInput("in", channel), TimerInput("tick", std::chrono::milliseconds(50))}, {},
               name),
        Options());
    CHILD_OK(made, 10);
    std::unique_ptr<Node> node = made.MoveValueUnsafe();
    std::vector<int64_t> seeds;
    bool stopped = false;
    for (int events = 0; events < 100000; ++events) {
      auto event = node->Next(kWait);
      CHILD_OK(event, 11);
      if (!event->has_value()) break;
      const Event& got = **event;
      if (got.type == EventType::kStop) stopped = true;
      if (got.type != EventType::kInput || got.id != "in") continue;
      seeds.push_back(BatchMatches(*got.value, 10, 1)   ? 1
                      : BatchMatches(*got.value, 10, 2) ? 2
                                                        : -1);
      if (seeds.back() == 2) second_arrived.Signal();
    }
    CHILD_CHECK(stopped, 12);
    CHILD_CHECK((seeds == std::vector<int64_t>{1, 2}), 13);
    return 0;
  });
  const pid_t first = producer(1);
  ASSERT_OK_AND_ASSIGN(protocol::Connection connection, AcceptNode(listener));
  ASSERT_OK(ReceiveType(connection, "hello"));
  ASSERT_OK(ReceiveType(connection, "ready"));
  ASSERT_OK(connection.Send({{"type", "start"}}));
  EXPECT_EQ(WaitChild(first), 0);  // the producer "crashed"; the daemon restarts it
  const pid_t second = producer(2);
  ASSERT_OK(connection.Send({{"type", "reconnect"}, {"input", "in"}}));
  ASSERT_OK_AND_ASSIGN(json acked, ReceiveType(connection, "reconnected"));
  EXPECT_EQ(acked["input"], "in");
  EXPECT_TRUE(second_arrived.Await(kWait));
  ASSERT_OK(connection.Send({{"type", "stop"}, {"reason", "done"}}));
  ASSERT_OK_AND_ASSIGN(json stats, ReceiveType(connection, "stats"));
  EXPECT_EQ(stats["stats"]["inputs"]["in"]["received"], 2);
  EXPECT_EQ(stats["stats"]["inputs"]["in"]["reconnects"], 1);
  EXPECT_EQ(WaitChild(consumer), 0);
  EXPECT_EQ(WaitChild(second), 0);
}

TEST(NodeDaemonTest, AnInputWhoseProducerMayRestartWaitsForTheDaemon) {
  const std::string name = DaemonName("may-restart");
  ASSERT_OK_AND_ASSIGN(protocol::Listener listener, protocol::Listener::Listen(name));
  const std::string channel = UniqueChannel("may-restart");
  auto producer = [&](int64_t seed) { return ForkOneBatchProducer(channel, seed); };
  const pid_t consumer = ForkChild([&] {
    // The only input: without the flag its stream would end with the first producer.
    NodeConfig::Input input = ChannelInput("in", channel);
    input.producer_may_restart = true;
    auto made = Node::FromConfig(Config("consumer", {input}, {}, name), Options());
    CHILD_OK(made, 10);
    std::unique_ptr<Node> node = made.MoveValueUnsafe();
    std::vector<std::string> seen;
    for (int events = 0; events < 1000; ++events) {
      auto event = node->Next(kWait);
      CHILD_OK(event, 11);
      if (!event->has_value()) break;
      const Event& got = **event;
      if (got.type == EventType::kInput) {
        seen.push_back(BatchMatches(*got.value, 10, 1)   ? "1"
                       : BatchMatches(*got.value, 10, 2) ? "2"
                                                         : "?");
      } else if (got.type == EventType::kInputClosed) {
        seen.push_back("closed");
      } else {
        seen.push_back("other");
      }
    }
    CHILD_CHECK((seen == std::vector<std::string>{"1", "2", "closed"}), 12);
    return 0;
  });
  const pid_t first = producer(1);
  ASSERT_OK_AND_ASSIGN(protocol::Connection connection, AcceptNode(listener));
  ASSERT_OK(ReceiveType(connection, "hello"));
  ASSERT_OK(ReceiveType(connection, "ready"));
  ASSERT_OK(connection.Send({{"type", "start"}}));
  EXPECT_EQ(WaitChild(first), 0);
  // Time for the consumer to see the producer gone; it must keep waiting.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const pid_t second = producer(2);
  ASSERT_OK(connection.Send({{"type", "reconnect"}, {"input", "in"}}));
  ASSERT_OK_AND_ASSIGN(json acked, ReceiveType(connection, "reconnected"));
  EXPECT_EQ(acked["input"], "in");
  EXPECT_EQ(WaitChild(second), 0);
  // The producer will not come back: the input closes after its last message.
  ASSERT_OK(connection.Send({{"type", "input_closed"}, {"input", "in"}}));
  ASSERT_OK_AND_ASSIGN(json stats, ReceiveType(connection, "stats"));
  EXPECT_EQ(stats["stats"]["inputs"]["in"]["received"], 2);
  EXPECT_EQ(WaitChild(consumer), 0);
}

}  // namespace
}  // namespace ferry::flow
