// Per-subscriber queues (capacity and overflow policy chosen by each
// subscriber) and the publisher's wait_fd (event loops that poll it and call
// Poll). Every wait is bounded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <sstream>
#include <thread>

#include "ferry/flow/transport.h"
#include "flow/transport/protocol.h"
#include "flow/transport/shm.h"
#include "flow/transport/transport_test_util.h"
#include "testing/test_util.h"

namespace ferry::flow {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using internal::Packet;
using internal::PacketKind;
using testing::BatchMatches;
using testing::ConnectHere;
using testing::ForkChild;
using testing::MakeBatch;
using testing::MakePublisher;
using testing::Pipe;
using testing::ReceiveSequence;
using testing::UniqueChannel;
using testing::WaitChild;

SubscriberOptions Queue(uint32_t capacity, std::optional<OverflowPolicy> overflow) {
  SubscriberOptions options;
  options.queue_capacity = capacity;
  options.overflow = overflow;
  return options;
}

// Everything queued for `subscriber` right now, as sequence numbers (each
// batch checked against what the sender built for that sequence).
std::vector<uint64_t> DrainSequences(Subscriber& subscriber, int64_t rows) {
  std::vector<uint64_t> sequences;
  for (;;) {
    auto message = subscriber.TryReceive();
    EXPECT_TRUE(message.ok()) << message.status().ToString();
    if (!message.ok() || !message->has_value()) return sequences;
    EXPECT_TRUE(BatchMatches(*(*message)->batch, rows, static_cast<int64_t>((*message)->sequence)));
    sequences.push_back((*message)->sequence);
  }
}

std::vector<uint64_t> Range(uint64_t first, uint64_t last) {
  std::vector<uint64_t> out;
  for (uint64_t value = first; value <= last; ++value) out.push_back(value);
  return out;
}

bool Readable(int fd, int timeout_ms) {
  pollfd waiting{fd, POLLIN, 0};
  return ::poll(&waiting, 1, timeout_ms) == 1 && (waiting.revents & POLLIN) != 0;
}

// ---- Per-subscriber queues ---------------------------------------------------------

TEST(SubscriberQueue, MixedPoliciesOnOneChannelDropExactly) {
  PublisherOptions options;
  options.queue_capacity = 16;  // and kBlock, for subscribers that ask for nothing
  options.send_timeout = 100ms;
  auto publisher = MakePublisher(UniqueChannel("mixed"), options);
  auto oldest = ConnectHere(*publisher, 1, Queue(3, OverflowPolicy::kDropOldest));
  auto newest = ConnectHere(*publisher, 2, Queue(5, OverflowPolicy::kDropNewest));
  auto blocking = ConnectHere(*publisher, 3);  // the publisher's 16 and kBlock
  auto small_block = ConnectHere(*publisher, 4, Queue(12, std::nullopt));
  ASSERT_NE(oldest, nullptr);
  ASSERT_NE(newest, nullptr);
  ASSERT_NE(blocking, nullptr);
  ASSERT_NE(small_block, nullptr);

  // Nobody reads: the two dropping queues overflow, the blocking ones have room.
  for (int64_t sequence = 1; sequence <= 10; ++sequence) {
    auto batch = MakeBatch(publisher->LoanPool(), 4, sequence);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  ChannelStats stats = publisher->stats();
  EXPECT_EQ(stats.sent, 10);
  EXPECT_EQ(stats.dropped_oldest, 7);
  EXPECT_EQ(stats.dropped_newest, 5);
  EXPECT_EQ(stats.delivered, 10 + 5 + 10 + 10);

  // Two more fill the 12-message blocking queue; the 13th times out on it
  // (the kBlock policy still holds for it) while the others get it.
  for (int64_t sequence = 11; sequence <= 12; ++sequence) {
    auto batch = MakeBatch(publisher->LoanPool(), 4, sequence);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  auto batch = MakeBatch(publisher->LoanPool(), 4, 13);
  ASSERT_TRUE(batch.ok());
  Status timed_out = publisher->Send(**batch);
  EXPECT_EQ(timed_out.code(), StatusCode::kTimedOut) << timed_out.ToString();
  EXPECT_THAT(timed_out.message(), HasSubstr("kept its queue of 12 messages full"));
  batch = Result<RecordBatchPtr>(Status::UnknownError("released"));

  stats = publisher->stats();
  EXPECT_EQ(stats.sent, 13);
  EXPECT_EQ(stats.dropped_oldest, 10);
  EXPECT_EQ(stats.dropped_newest, 8);
  EXPECT_EQ(stats.delivered, 13 + 5 + 13 + 12);

  EXPECT_EQ(DrainSequences(*oldest, 4), Range(11, 13));
  EXPECT_EQ(DrainSequences(*newest, 4), Range(1, 5));
  EXPECT_EQ(DrainSequences(*blocking, 4), Range(1, 13));
  EXPECT_EQ(DrainSequences(*small_block, 4), Range(1, 12));
  // Every message dropped or received comes back.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (publisher->stats().memory_in_use != 0 && std::chrono::steady_clock::now() < deadline) {
    ASSERT_OK(publisher->Poll());
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(publisher->stats().memory_in_use, 0);
}

// A slow drop_oldest subscriber never makes Send wait, while a blocking
// subscriber in another process receives everything in order.
TEST(SubscriberQueue, DroppingSubscriberDoesNotSlowABlockingOne) {
  const std::string name = UniqueChannel("slowdrop");
  PublisherOptions options;
  options.queue_capacity = 4;
  options.send_timeout = 5s;  // a Send waiting on the dropping queue would fail the test
  auto publisher = MakePublisher(name, options);
  constexpr int64_t kMessages = 200;
  const pid_t child = ForkChild([&] {
    auto subscriber = Subscriber::Connect(name);  // kBlock, 4: the publisher's
    CHILD_CHECK(subscriber.ok(), 2);
    return ReceiveSequence(**subscriber, kMessages, 8, 10s);
  });
  ASSERT_OK(publisher->WaitForSubscribers(1, 10s));
  auto dropping = ConnectHere(*publisher, 2, Queue(2, OverflowPolicy::kDropOldest));
  ASSERT_NE(dropping, nullptr);
  for (int64_t sequence = 1; sequence <= kMessages; ++sequence) {
    auto batch = MakeBatch(publisher->LoanPool(), 8, sequence);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  EXPECT_EQ(WaitChild(child), 0);
  EXPECT_EQ(DrainSequences(*dropping, 8), Range(kMessages - 1, kMessages));
  const ChannelStats stats = publisher->stats();
  EXPECT_EQ(stats.dropped_oldest, kMessages - 2);
  EXPECT_EQ(stats.dropped_newest, 0);
  EXPECT_EQ(stats.delivered, 2 * kMessages);
}

TEST(SubscriberQueue, SubscriberRejectsBadOptionsBeforeConnecting) {
  auto connected = Subscriber::Connect(UniqueChannel("nobody"),
                                       Queue(internal::kMaxRingCapacity + 1, std::nullopt));
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(connected.status().message(), HasSubstr("queue_capacity must be in [1, 1048576]"));
  connected =
      Subscriber::Connect(UniqueChannel("nobody"), Queue(0, static_cast<OverflowPolicy>(7)));
  ASSERT_FALSE(connected.ok());
  EXPECT_THAT(connected.status().message(), HasSubstr("unknown overflow policy 7"));
}

// Speaks the hello by hand (as an older or hostile subscriber would) while
// the publisher polls; returns the answer's packet and its trailing text.
struct Answer {
  bool ok = false;
  Packet packet;
  std::string text;
  int fd_count = 0;
  bool closed_after = false;
};

Answer RawHello(Publisher& publisher, uint64_t capacity, uint64_t overflow) {
  Answer answer;
  bool retryable = false;
  auto socket =
      internal::ConnectAbstract(internal::ChannelSocketName(publisher.name()), &retryable);
  EXPECT_TRUE(socket.ok()) << socket.status().ToString();
  if (!socket.ok()) return answer;
  Packet hello;
  hello.kind = static_cast<uint16_t>(PacketKind::kHello);
  hello.values[0] = static_cast<uint64_t>(::getpid());
  hello.values[1] = internal::kProtocolVersion;
  hello.values[2] = capacity;
  hello.values[3] = overflow;
  EXPECT_TRUE(internal::SendPacket(socket->get(), &hello, sizeof(hello), nullptr, 0).ok());
  char buffer[sizeof(Packet) + internal::kMaxRefusalReason];
  const int fd = socket->get();
  for (int attempt = 0; attempt < 2000; ++attempt) {
    const Status polled = publisher.Poll();
    EXPECT_TRUE(polled.ok()) << polled.ToString();
    internal::PollReadable(&fd, 1, 5);
    auto received = internal::ReceivePacket(fd, buffer, sizeof(buffer));
    if (!received.ok() || received->closed) break;
    if (received->size < sizeof(Packet)) continue;
    std::memcpy(&answer.packet, buffer, sizeof(Packet));
    answer.text.assign(buffer + sizeof(Packet), received->size - sizeof(Packet));
    answer.fd_count = received->fd_count;
    answer.ok = true;
    break;
  }
  if (answer.ok && answer.packet.kind == static_cast<uint16_t>(PacketKind::kRefused)) {
    // Refused connections are closed at once.
    internal::PollReadable(&fd, 1, 5000);
    auto after = internal::ReceivePacket(fd, buffer, sizeof(buffer));
    answer.closed_after = after.ok() && after->closed;
  }
  return answer;
}

TEST(SubscriberQueue, PublisherRefusesBadHellosWithAReasonAndCarriesOn) {
  PublisherOptions options;
  options.queue_capacity = 7;
  options.overflow = OverflowPolicy::kDropNewest;
  auto publisher = MakePublisher(UniqueChannel("hello"), options);

  Answer answer = RawHello(*publisher, uint64_t{1} << 40, 0);
  ASSERT_TRUE(answer.ok);
  EXPECT_EQ(answer.packet.kind, static_cast<uint16_t>(PacketKind::kRefused));
  EXPECT_EQ(answer.packet.values[0], answer.text.size());
  EXPECT_THAT(answer.text, HasSubstr("queue_capacity must be in [1, 1048576], got 1099511627776"));
  EXPECT_TRUE(answer.closed_after);

  answer = RawHello(*publisher, 0, 99);
  ASSERT_TRUE(answer.ok);
  EXPECT_EQ(answer.packet.kind, static_cast<uint16_t>(PacketKind::kRefused));
  EXPECT_THAT(answer.text, HasSubstr("unknown overflow policy 98"));
  EXPECT_TRUE(answer.closed_after);

  // An old-style hello (zeros) gets the channel's defaults.
  answer = RawHello(*publisher, 0, 0);
  ASSERT_TRUE(answer.ok);
  EXPECT_EQ(answer.packet.kind, static_cast<uint16_t>(PacketKind::kWelcome));
  EXPECT_EQ(answer.packet.values[0], 7u);
  EXPECT_EQ(answer.packet.values[4], static_cast<uint64_t>(OverflowPolicy::kDropNewest));
  EXPECT_EQ(answer.fd_count, 4);
  // And an explicit one gets what it asked for.
  answer = RawHello(*publisher, 100, static_cast<uint64_t>(OverflowPolicy::kBlock) + 1);
  ASSERT_TRUE(answer.ok);
  EXPECT_EQ(answer.packet.kind, static_cast<uint16_t>(PacketKind::kWelcome));
  EXPECT_EQ(answer.packet.values[0], 100u);
  EXPECT_EQ(answer.packet.values[4], static_cast<uint64_t>(OverflowPolicy::kBlock));

  // Refusals and raw sockets left the publisher healthy (the two welcomed
  // raw sockets are gone: they count as lost once noticed).
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (publisher->stats().subscribers_lost < 2 && std::chrono::steady_clock::now() < deadline) {
    ASSERT_OK(publisher->Poll());
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(publisher->stats().subscribers, 0);
  EXPECT_EQ(publisher->stats().subscribers_lost, 2);
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  auto batch = MakeBatch(publisher->LoanPool(), 3, 1);
  ASSERT_TRUE(batch.ok());
  ASSERT_OK(publisher->Send(**batch));
  auto message = subscriber->Receive(5s);
  ASSERT_TRUE(message.ok()) << message.status().ToString();
  EXPECT_TRUE(BatchMatches(*message->batch, 3, 1));
}

// Connect turns a refusal into an error carrying the publisher's reason
// (control characters replaced): answered here by a hand-made listener.
TEST(SubscriberQueue, ConnectReportsTheRefusalReason) {
  Result<std::unique_ptr<Subscriber>> connected = Status::UnknownError("not connected");
  const std::string fake_name = UniqueChannel("fake");
  auto listening = internal::ListenAbstract(internal::ChannelSocketName(fake_name), fake_name);
  ASSERT_TRUE(listening.ok());
  std::thread connector([&] {
    SubscriberOptions options;
    options.connect_timeout = 5s;
    connected = Subscriber::Connect(fake_name, options);
  });
  internal::UniqueFd accepted;
  const int listen_fd = listening->get();
  for (int attempt = 0; attempt < 2000 && !accepted.valid(); ++attempt) {
    internal::PollReadable(&listen_fd, 1, 5);
    auto each = internal::AcceptPending(listen_fd);
    if (each.ok() && each->valid()) accepted = std::move(*each);
  }
  ASSERT_TRUE(accepted.valid());
  Packet refusal;
  refusal.kind = static_cast<uint16_t>(PacketKind::kRefused);
  std::string reason = "no room\nfor you";
  refusal.values[0] = reason.size();
  std::string bytes(reinterpret_cast<const char*>(&refusal), sizeof(refusal));
  bytes += reason;
  ASSERT_OK(internal::SendPacket(accepted.get(), bytes.data(), bytes.size(), nullptr, 0));
  connector.join();
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(connected.status().message(), HasSubstr("refused this subscriber: no room?for you"));
}

// ---- The publisher's wait fd ---------------------------------------------------------

TEST(PublisherWaitFd, ConnectCompletesWhileThePublisherOnlyPollsItsFd) {
  auto publisher = MakePublisher(UniqueChannel("waitfd"));
  const int fd = publisher->wait_fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(publisher->wait_fd(), fd);
  EXPECT_FALSE(Readable(fd, 0));

  Result<std::unique_ptr<Subscriber>> connected = Status::UnknownError("not connected");
  std::thread connector([&] { connected = Subscriber::Connect(publisher->name()); });
  // The event loop: sleep in poll() (bounded), Poll() when readable.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  int wakeups = 0;
  while (publisher->stats().subscribers == 0 && std::chrono::steady_clock::now() < deadline) {
    if (Readable(fd, 1000)) {
      ++wakeups;
      ASSERT_OK(publisher->Poll());
    }
  }
  connector.join();
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  EXPECT_GE(wakeups, 1);
  EXPECT_EQ(publisher->stats().subscribers, 1);
  EXPECT_FALSE(Readable(fd, 0));  // Poll consumed the work

  // A returned drop token makes it readable; Poll reclaims and quiets it.
  auto subscriber = std::move(*connected);
  auto batch = MakeBatch(publisher->LoanPool(), 5, 1);
  ASSERT_TRUE(batch.ok());
  ASSERT_OK(publisher->Send(**batch));
  batch = Result<RecordBatchPtr>(Status::UnknownError("released"));
  EXPECT_GT(publisher->stats().memory_in_use, 0);
  {
    auto message = subscriber->Receive(5s);
    ASSERT_TRUE(message.ok());
  }
  EXPECT_TRUE(Readable(fd, 5000));
  ASSERT_OK(publisher->Poll());
  EXPECT_EQ(publisher->stats().memory_in_use, 0);
  EXPECT_FALSE(Readable(fd, 0));

  // A subscriber going away makes it readable too.
  subscriber.reset();
  EXPECT_TRUE(Readable(fd, 5000));
  ASSERT_OK(publisher->Poll());
  EXPECT_EQ(publisher->stats().subscribers, 0);
  EXPECT_EQ(publisher->stats().subscribers_lost, 1);
}

// Two processes, each a "node" with an output and an input wired to the
// other's output: both connect while only their event loops run, then each
// receives what the other sent.
TEST(PublisherWaitFd, TwoNodesInACycleStart) {
  const std::string names[2] = {UniqueChannel("cycle-a"), UniqueChannel("cycle-b")};
  auto node = [&](int self) {
    return ForkChild([&names, self] {
      auto publisher = Publisher::Create(names[self]);
      CHILD_CHECK(publisher.ok(), 2);
      Result<std::unique_ptr<Subscriber>> input = Status::UnknownError("not connected");
      std::atomic<bool> connect_done{false};
      std::thread connector([&] {
        input = Subscriber::Connect(names[1 - self]);
        connect_done = true;
      });
      const int fd = (*publisher)->wait_fd();
      const auto deadline = std::chrono::steady_clock::now() + 15s;
      while ((!connect_done || (*publisher)->stats().subscribers == 0) &&
             std::chrono::steady_clock::now() < deadline) {
        if (Readable(fd, 50)) {
          if (!(*publisher)->Poll().ok()) break;
        }
      }
      connector.join();
      CHILD_CHECK(input.ok(), 3);
      CHILD_CHECK((*publisher)->stats().subscribers == 1, 4);
      auto batch = MakeBatch((*publisher)->LoanPool(), 2, 100 + self);
      CHILD_CHECK(batch.ok(), 5);
      CHILD_CHECK((*publisher)->Send(**batch).ok(), 6);
      auto message = (*input)->Receive(10s);
      CHILD_CHECK(message.ok(), 7);
      CHILD_CHECK(BatchMatches(*message->batch, 2, 100 + (1 - self)), 8);
      return 0;
    });
  };
  const pid_t first = node(0);
  const pid_t second = node(1);
  EXPECT_EQ(WaitChild(first), 0);
  EXPECT_EQ(WaitChild(second), 0);
}

}  // namespace
}  // namespace ferry::flow
