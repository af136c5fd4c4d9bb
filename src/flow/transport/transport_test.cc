// End-to-end tests of the transport: a publisher and subscribers in this
// process (threads) or in forked children. Every wait is bounded.
#include "ferry/flow/transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "ferry/base/telemetry.h"
#include "flow/transport/transport_test_util.h"
#include "testing/test_util.h"

namespace ferry::flow {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using testing::BatchMatches;
using testing::ConnectHere;
using testing::ForkChild;
using testing::MakeBatch;
using testing::MakePublisher;
using testing::Pipe;
using testing::PollUntil;
using testing::ReceiveSequence;
using testing::UniqueChannel;
using testing::WaitChild;

// ---- Names, options ------------------------------------------------------------

TEST(Channel, ValidatesNamesAndOptions) {
  auto bad = Publisher::Create("has space");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("may only use letters"));
  bad = Publisher::Create(std::string(101, 'a'));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("1 to 100 characters"));
  bad = Publisher::Create("");
  ASSERT_FALSE(bad.ok());
  PublisherOptions options;
  options.queue_capacity = 0;
  bad = Publisher::Create(UniqueChannel("zero"), options);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("queue_capacity"));
  auto subscriber = Subscriber::Connect("bad name!");
  ASSERT_FALSE(subscriber.ok());
  EXPECT_THAT(subscriber.status().message(), HasSubstr("may only use letters"));
  // A valid name with every allowed character.
  auto good = Publisher::Create(UniqueChannel("Az09-_.x"));
  EXPECT_TRUE(good.ok()) << good.status().ToString();
}

TEST(Channel, OverflowPolicyNamesRoundTrip) {
  for (OverflowPolicy policy :
       {OverflowPolicy::kBlock, OverflowPolicy::kDropOldest, OverflowPolicy::kDropNewest}) {
    auto parsed = OverflowPolicyFromName(OverflowPolicyName(policy));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, policy);
  }
  auto unknown = OverflowPolicyFromName("drop_everything");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown overflow policy 'drop_everything'"));
}

TEST(Channel, SecondPublisherOfALiveNameIsRefused) {
  const std::string name = UniqueChannel("taken");
  auto first = MakePublisher(name);
  auto second = Publisher::Create(name);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("already has a live publisher"));
  first.reset();
  // The abstract name is free again as soon as the first one is gone.
  auto third = Publisher::Create(name);
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

TEST(Channel, ConnectTimesOutWithoutPublisher) {
  SubscriberOptions options;
  options.connect_timeout = 30ms;
  auto subscriber = Subscriber::Connect(UniqueChannel("nobody"), options);
  ASSERT_FALSE(subscriber.ok());
  EXPECT_EQ(subscriber.status().code(), StatusCode::kTimedOut);
  EXPECT_THAT(subscriber.status().message(), HasSubstr("no publisher"));
}

// ---- In one process ----------------------------------------------------------------

TEST(Channel, RoundTripInOneProcessAndReclaimsAfterDrop) {
  auto publisher = MakePublisher(UniqueChannel("roundtrip"));
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  EXPECT_EQ(publisher->stats().subscribers, 1);
  {
    std::vector<Message> received;
    for (int64_t index = 1; index <= 3; ++index) {
      auto batch = MakeBatch(publisher->LoanPool(), 20, index * 100);
      ASSERT_TRUE(batch.ok());
      ASSERT_OK(publisher->Send(**batch, {{"index", std::to_string(index)}}));
    }
    for (int64_t index = 1; index <= 3; ++index) {
      auto message = subscriber->Receive(1s);
      ASSERT_TRUE(message.ok()) << message.status().ToString();
      EXPECT_EQ(message->sequence, static_cast<uint64_t>(index));
      EXPECT_TRUE(BatchMatches(*message->batch, 20, index * 100));
      EXPECT_EQ(message->metadata, (Metadata{{"index", std::to_string(index)}}));
      received.push_back(std::move(*message));
    }
    EXPECT_GT(publisher->stats().memory_in_use, 0);
    auto none = subscriber->TryReceive();
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());
  }
  // All dropped (the publisher's own batches too): everything comes back.
  EXPECT_TRUE(PollUntil(*publisher, [&] { return publisher->stats().memory_in_use == 0; }));
  EXPECT_EQ(publisher->LoanPool()->bytes_allocated(), 0);
  const ChannelStats stats = publisher->stats();
  EXPECT_EQ(stats.sent, 3);
  EXPECT_EQ(stats.delivered, 3);
  EXPECT_EQ(subscriber->stats().received, 3);
  EXPECT_GE(subscriber->stats().segments, 1);
}

TEST(Channel, ReceiveTimesOutWhenNothingArrives) {
  auto publisher = MakePublisher(UniqueChannel("quiet"));
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  const auto start = std::chrono::steady_clock::now();
  auto message = subscriber->Receive(30ms);
  ASSERT_FALSE(message.ok());
  EXPECT_EQ(message.status().code(), StatusCode::kTimedOut);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 25ms);
  EXPECT_FALSE(subscriber->publisher_gone());
}

TEST(Channel, BlockingSendTimesOutWhenTheQueueStaysFull) {
  PublisherOptions options;
  options.queue_capacity = 2;
  options.send_timeout = 50ms;
  auto publisher = MakePublisher(UniqueChannel("full"), options);
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  auto batch = MakeBatch(publisher->LoanPool(), 4, 0);
  ASSERT_TRUE(batch.ok());
  ASSERT_OK(publisher->Send(**batch));
  ASSERT_OK(publisher->Send(**batch));
  const auto start = std::chrono::steady_clock::now();
  Status third = publisher->Send(**batch);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.code(), StatusCode::kTimedOut);
  EXPECT_THAT(third.message(), HasSubstr("kept its queue of 2 messages full"));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 45ms);
  // Room again after one receive.
  auto message = subscriber->Receive(1s);
  ASSERT_TRUE(message.ok());
  ASSERT_OK(publisher->Send(**batch));
}

TEST(Channel, SendRejectsBuffersOutsideLoanedMemoryNamingTheColumn) {
  auto publisher = MakePublisher(UniqueChannel("foreign"));
  auto heap_batch = MakeBatch(default_memory_pool(), 10, 0);
  ASSERT_TRUE(heap_batch.ok());
  Status sent = publisher->Send(**heap_batch);
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.code(), StatusCode::kInvalid);
  EXPECT_THAT(sent.message(), HasSubstr("'id'"));
  EXPECT_THAT(sent.message(), HasSubstr("not in this channel's loaned memory"));
  EXPECT_EQ(publisher->stats().sent, 0);
}

TEST(Channel, SendCopyCopiesExactlyTheForeignBytes) {
  auto publisher = MakePublisher(UniqueChannel("copy"));
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  auto heap_batch = MakeBatch(default_memory_pool(), 100, 5);
  ASSERT_TRUE(heap_batch.ok());
  const int64_t expected = testing::BufferBytes(**heap_batch);
  const int64_t before = telemetry::Get(telemetry::Counter::kBytesCopiedHost);
  ASSERT_OK(publisher->SendCopy(**heap_batch));
  EXPECT_EQ(publisher->stats().bytes_copied, expected);
  EXPECT_EQ(telemetry::Get(telemetry::Counter::kBytesCopiedHost) - before, expected);
  // A loaned batch sent with SendCopy travels as it is.
  auto loaned = MakeBatch(publisher->LoanPool(), 100, 6);
  ASSERT_TRUE(loaned.ok());
  ASSERT_OK(publisher->SendCopy(**loaned));
  EXPECT_EQ(publisher->stats().bytes_copied, expected);
  // A mixed batch copies only its foreign column.
  auto mixed =
      RecordBatch::Make((*loaned)->schema(), 100, {(*loaned)->column(0), (*heap_batch)->column(1)});
  ASSERT_TRUE(mixed.ok());
  int64_t text_bytes = 0;
  for (const auto& buffer : (*heap_batch)->column(1)->buffers)
    text_bytes += buffer ? buffer->size() : 0;
  ASSERT_OK(publisher->SendCopy(**mixed));
  EXPECT_EQ(publisher->stats().bytes_copied, expected + text_bytes);
  for (int64_t seed : {5, 6}) {
    auto message = subscriber->Receive(1s);
    ASSERT_TRUE(message.ok()) << message.status().ToString();
    EXPECT_TRUE(BatchMatches(*message->batch, 100, seed));
  }
  auto message = subscriber->Receive(1s);
  ASSERT_TRUE(message.ok());
  EXPECT_TRUE(message->batch->Equals(**mixed));
}

TEST(Channel, LargeMessageGetsItsOwnSegmentWhichIsRetiredAfterUse) {
  PublisherOptions options;
  options.segment_size = 64 << 10;
  options.max_memory = 4 << 20;
  auto publisher = MakePublisher(UniqueChannel("large"), options);
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  {
    auto big = testing::MakeBlobBatch(publisher->LoanPool(), 300 << 10, 42);
    ASSERT_TRUE(big.ok());
    const uint64_t checksum = testing::Checksum(**big);
    ASSERT_OK(publisher->Send(**big));
    EXPECT_GE(publisher->stats().segments, 2);
    auto message = subscriber->Receive(1s);
    ASSERT_TRUE(message.ok()) << message.status().ToString();
    EXPECT_EQ(testing::Checksum(*message->batch), checksum);
    EXPECT_GE(subscriber->stats().segments, 2);
  }
  ASSERT_TRUE(PollUntil(*publisher, [&] { return publisher->stats().memory_in_use == 0; }));
  EXPECT_EQ(publisher->stats().segments, 1);  // the dedicated one is gone
  // The subscriber hears about the retirement on its next receive.
  auto none = subscriber->TryReceive();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(subscriber->stats().segments, 1);
}

TEST(Channel, LoanWaitsForDroppedMemoryThenFailsWithOutOfMemory) {
  PublisherOptions options;
  options.segment_size = 64 << 10;
  options.max_memory = 64 << 10;
  options.send_timeout = 50ms;
  auto publisher = MakePublisher(UniqueChannel("oom"), options);
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  std::optional<Message> held;
  {
    auto blob = testing::MakeBlobBatch(publisher->LoanPool(), 24 << 10, 1);
    ASSERT_TRUE(blob.ok()) << blob.status().ToString();
    ASSERT_OK(publisher->Send(**blob));
    auto message = subscriber->Receive(1s);
    ASSERT_TRUE(message.ok());
    held = std::move(*message);
  }
  // The subscriber holds a 32 KiB block of a 64 KiB channel (buddy blocks).
  auto refused = testing::MakeBlobBatch(publisher->LoanPool(), 24 << 10, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(refused.status().message(), HasSubstr("timed out waiting"));
  held.reset();  // its drop token goes back: the loan succeeds now
  auto accepted = testing::MakeBlobBatch(publisher->LoanPool(), 24 << 10, 3);
  EXPECT_TRUE(accepted.ok()) << accepted.status().ToString();
}

TEST(Channel, BatchesOutliveTheirPublisherAndSubscriberSeesItGone) {
  auto publisher = MakePublisher(UniqueChannel("gone"));
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  auto batch = MakeBatch(publisher->LoanPool(), 50, 9);
  ASSERT_TRUE(batch.ok());
  ASSERT_OK(publisher->Send(**batch));
  ASSERT_OK(publisher->Send(**batch));
  auto first = subscriber->Receive(1s);
  ASSERT_TRUE(first.ok());
  batch->reset();
  publisher.reset();
  // The queued message is still delivered, then the end is reported.
  auto second = subscriber->Receive(1s);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto end = subscriber->Receive(1s);
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.status().code(), StatusCode::kCancelled);
  EXPECT_THAT(end.status().message(), HasSubstr("publisher gone"));
  EXPECT_TRUE(subscriber->publisher_gone());
  EXPECT_TRUE(BatchMatches(*first->batch, 50, 9));
  EXPECT_TRUE(BatchMatches(*second->batch, 50, 9));
}

TEST(Channel, ClosedSubscriberKeepsItsBatchesAndIsReclaimedAfterThem) {
  auto publisher = MakePublisher(UniqueChannel("closing"));
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  for (int64_t seed = 0; seed < 3; ++seed) {
    auto batch = MakeBatch(publisher->LoanPool(), 30, seed);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  auto held = subscriber->Receive(1s);
  ASSERT_TRUE(held.ok());
  subscriber.reset();  // two messages were still queued
  ASSERT_TRUE(PollUntil(*publisher, [&] { return publisher->stats().subscribers == 0; }));
  // It no longer receives, but what it holds stays intact and referenced.
  auto batch = MakeBatch(publisher->LoanPool(), 30, 7);
  ASSERT_TRUE(batch.ok());
  ASSERT_OK(publisher->Send(**batch));
  EXPECT_GT(publisher->stats().memory_in_use, 0);
  EXPECT_TRUE(BatchMatches(*held->batch, 30, 0));
  held->batch.reset();
  EXPECT_TRUE(PollUntil(*publisher, [&] {
    const ChannelStats stats = publisher->stats();
    return stats.memory_in_use == 0 && stats.subscribers_lost == 1;
  }));
}

TEST(Channel, SubscriberThatDoesNotReadItsSocketDoesNotPinSegments) {
  PublisherOptions options;
  options.segment_size = 64 << 10;
  options.max_memory = 64 << 20;
  options.queue_capacity = 2;
  options.overflow = OverflowPolicy::kDropNewest;
  auto publisher = MakePublisher(UniqueChannel("backlog"), options);
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  const int fds_before = testing::CountOpenFds();
  // Every message gets a dedicated segment, announced and retired on the
  // socket that the subscriber does not read for a while.
  constexpr int64_t kMessages = 300;
  for (int64_t sequence = 1; sequence <= kMessages; ++sequence) {
    auto batch = testing::MakeBlobBatch(publisher->LoanPool(), 100 << 10, sequence);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    ASSERT_OK(publisher->Send(**batch));
  }
  ASSERT_OK(publisher->Poll());
  EXPECT_LE(testing::CountOpenFds() - fds_before, 16);
  EXPECT_EQ(publisher->stats().dropped_newest, kMessages - 2);
  for (int64_t sequence = 1; sequence <= 2; ++sequence) {
    auto message = subscriber->Receive(1s);
    ASSERT_TRUE(message.ok()) << message.status().ToString();
    EXPECT_EQ(message->sequence, static_cast<uint64_t>(sequence));
    auto expected = testing::MakeBlobBatch(default_memory_pool(), 100 << 10, sequence);
    EXPECT_TRUE(message->batch->Equals(**expected));
  }
  // Once it reads again, the backlog drains and messages flow.
  for (int64_t sequence = kMessages + 1; sequence <= kMessages + 6; ++sequence) {
    ASSERT_OK(publisher->Poll());
    (void)subscriber->TryReceive();  // reads announcements; nothing queued yet
    auto batch = testing::MakeBlobBatch(publisher->LoanPool(), 100 << 10, sequence);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  int64_t received = 0;
  for (;;) {
    auto message = subscriber->Receive(50ms);
    if (!message.ok()) break;
    auto expected = testing::MakeBlobBatch(default_memory_pool(), 100 << 10,
                                           static_cast<int64_t>(message->sequence));
    EXPECT_TRUE(message->batch->Equals(**expected));
    ++received;
  }
  EXPECT_GE(received, 1);
}

TEST(Channel, TokensDroppedFromManyThreadsAndBeyondTheReleaseRingAllComeBack) {
  PublisherOptions options;
  options.queue_capacity = 16;  // release ring of 1024 tokens
  auto publisher = MakePublisher(UniqueChannel("tokens"), options);
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  constexpr int kMessages = 1500;
  std::vector<Message> held;
  held.reserve(kMessages);
  auto batch = MakeBatch(publisher->LoanPool(), 4, 0);
  ASSERT_TRUE(batch.ok());
  for (int index = 0; index < kMessages; ++index) {
    ASSERT_OK(publisher->Send(**batch));
    auto message = subscriber->Receive(1s);
    ASSERT_TRUE(message.ok()) << message.status().ToString();
    held.push_back(std::move(*message));
  }
  batch->reset();
  EXPECT_GT(publisher->stats().memory_in_use, 0);
  // Four threads drop them all while the publisher does not look: more
  // tokens than the release ring holds.
  std::vector<std::thread> droppers;
  for (int thread = 0; thread < 4; ++thread) {
    droppers.emplace_back([&, thread] {
      for (int index = thread; index < kMessages; index += 4)
        held[static_cast<size_t>(index)].batch.reset();
    });
  }
  for (auto& dropper : droppers) dropper.join();
  ASSERT_OK(publisher->Poll());
  EXPECT_GT(publisher->stats().memory_in_use, 0);  // the spilled ones are still on their way
  // The subscriber pushes its spilled tokens on its next call.
  EXPECT_TRUE(PollUntil(*publisher, [&] {
    (void)subscriber->TryReceive();
    return publisher->stats().memory_in_use == 0;
  }));
  EXPECT_EQ(publisher->stats().subscribers_lost, 0);
}

// ---- Across processes ------------------------------------------------------------

TEST(CrossProcess, BlockPolicyDeliversEverythingInOrderToASlowSubscriber) {
  const std::string name = UniqueChannel("block");
  PublisherOptions options;
  options.queue_capacity = 4;
  auto publisher = MakePublisher(name, options);
  constexpr int64_t kMessages = 300;
  const pid_t child = ForkChild([&] {
    auto subscriber = Subscriber::Connect(name);
    CHILD_CHECK(subscriber.ok(), 2);
    for (int64_t index = 1; index <= kMessages; ++index) {
      auto message = (*subscriber)->Receive(5s);
      CHILD_CHECK(message.ok(), 3);
      CHILD_CHECK(message->sequence == static_cast<uint64_t>(index), 4);
      CHILD_CHECK(BatchMatches(*message->batch, 8, index), 5);
      if (index % 25 == 0) std::this_thread::sleep_for(2ms);
    }
    return 0;
  });
  ASSERT_OK(publisher->WaitForSubscribers(1, 10s));
  for (int64_t index = 1; index <= kMessages; ++index) {
    auto batch = MakeBatch(publisher->LoanPool(), 8, index);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  EXPECT_EQ(WaitChild(child), 0);
  const ChannelStats stats = publisher->stats();
  EXPECT_EQ(stats.sent, kMessages);
  EXPECT_EQ(stats.delivered, kMessages);
  EXPECT_EQ(stats.dropped_newest + stats.dropped_oldest, 0);
}

// The child connects, then drains its queue only after the parent sent 20
// messages into a queue of 8; it reports the sequences it got.
std::vector<uint64_t> RunDropScenario(OverflowPolicy policy, ChannelStats* stats_out) {
  const std::string name = UniqueChannel(OverflowPolicyName(policy));
  PublisherOptions options;
  options.queue_capacity = 8;
  options.overflow = policy;
  auto publisher = MakePublisher(name, options);
  Pipe go;
  Pipe report;
  const pid_t child = ForkChild([&] {
    auto subscriber = Subscriber::Connect(name);
    CHILD_CHECK(subscriber.ok(), 2);
    CHILD_CHECK(go.Await(), 3);
    std::string sequences;
    for (;;) {
      auto message = (*subscriber)->TryReceive();
      CHILD_CHECK(message.ok(), 4);
      if (!message->has_value()) break;
      CHILD_CHECK(BatchMatches(*(*message)->batch, 4, static_cast<int64_t>((*message)->sequence)),
                  5);
      sequences += std::to_string((*message)->sequence) + " ";
    }
    report.Write(sequences);
    return 0;
  });
  report.CloseWrite();
  EXPECT_TRUE(publisher->WaitForSubscribers(1, 10s).ok());
  for (int64_t index = 1; index <= 20; ++index) {
    auto batch = MakeBatch(publisher->LoanPool(), 4, index);
    EXPECT_TRUE(batch.ok());
    EXPECT_TRUE(publisher->Send(**batch).ok());
  }
  go.Signal();
  const std::string text = report.ReadAll();
  EXPECT_EQ(WaitChild(child), 0);
  // Once the child is gone everything is reclaimed, dropped messages included.
  EXPECT_TRUE(PollUntil(*publisher, [&] { return publisher->stats().subscribers_lost == 1; }));
  *stats_out = publisher->stats();
  std::vector<uint64_t> sequences;
  std::istringstream parse(text);
  for (uint64_t value; parse >> value;) sequences.push_back(value);
  return sequences;
}

TEST(CrossProcess, DropNewestKeepsTheFirstMessagesAndCountsTheRest) {
  ChannelStats stats;
  const auto sequences = RunDropScenario(OverflowPolicy::kDropNewest, &stats);
  EXPECT_EQ(sequences, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(stats.dropped_newest, 12);
  EXPECT_EQ(stats.dropped_oldest, 0);
  EXPECT_EQ(stats.delivered, 8);
  EXPECT_EQ(stats.sent, 20);
  EXPECT_EQ(stats.memory_in_use, 0);
}

TEST(CrossProcess, DropOldestKeepsTheLastMessagesAndCountsTheRest) {
  ChannelStats stats;
  const auto sequences = RunDropScenario(OverflowPolicy::kDropOldest, &stats);
  EXPECT_EQ(sequences, (std::vector<uint64_t>{13, 14, 15, 16, 17, 18, 19, 20}));
  EXPECT_EQ(stats.dropped_oldest, 12);
  EXPECT_EQ(stats.dropped_newest, 0);
  EXPECT_EQ(stats.delivered, 20);
  EXPECT_EQ(stats.memory_in_use, 0);
}

TEST(CrossProcess, EverySubscriberReceivesEveryMessage) {
  const std::string name = UniqueChannel("many");
  PublisherOptions options;
  options.queue_capacity = 8;
  auto publisher = MakePublisher(name, options);
  constexpr int kSubscribers = 3;
  constexpr int64_t kMessages = 100;
  std::vector<pid_t> children;
  for (int index = 0; index < kSubscribers; ++index) {
    children.push_back(ForkChild([&] {
      auto subscriber = Subscriber::Connect(name);
      CHILD_CHECK(subscriber.ok(), 2);
      for (int64_t sequence = 1; sequence <= kMessages; ++sequence) {
        auto message = (*subscriber)->Receive(5s);
        CHILD_CHECK(message.ok(), 3);
        CHILD_CHECK(message->sequence == static_cast<uint64_t>(sequence), 4);
        CHILD_CHECK(BatchMatches(*message->batch, 16, sequence), 5);
      }
      return 0;
    }));
  }
  ASSERT_OK(publisher->WaitForSubscribers(kSubscribers, 10s));
  for (int64_t sequence = 1; sequence <= kMessages; ++sequence) {
    auto batch = MakeBatch(publisher->LoanPool(), 16, sequence);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  for (pid_t child : children) EXPECT_EQ(WaitChild(child), 0);
  EXPECT_EQ(publisher->stats().delivered, kSubscribers * kMessages);
}

TEST(CrossProcess, LateJoinerReceivesTheHistoryFirstThenNewMessages) {
  const std::string name = UniqueChannel("history");
  PublisherOptions options;
  options.history = 5;
  auto publisher = MakePublisher(name, options);
  for (int64_t sequence = 1; sequence <= 10; ++sequence) {
    auto batch = MakeBatch(publisher->LoanPool(), 3, sequence);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  // Only the history keeps messages alive now.
  EXPECT_GT(publisher->stats().memory_in_use, 0);
  const pid_t child = ForkChild([&] {
    auto subscriber = Subscriber::Connect(name);
    CHILD_CHECK(subscriber.ok(), 2);
    for (int64_t sequence = 6; sequence <= 12; ++sequence) {
      auto message = (*subscriber)->Receive(5s);
      CHILD_CHECK(message.ok(), 3);
      CHILD_CHECK(message->sequence == static_cast<uint64_t>(sequence), 4);
      CHILD_CHECK(BatchMatches(*message->batch, 3, sequence), 5);
    }
    return 0;
  });
  ASSERT_OK(publisher->WaitForSubscribers(1, 10s));
  for (int64_t sequence = 11; sequence <= 12; ++sequence) {
    auto batch = MakeBatch(publisher->LoanPool(), 3, sequence);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  EXPECT_EQ(WaitChild(child), 0);
}

TEST(CrossProcess, SchemaChangesMidStreamAndOldSchemasKeepTheirIds) {
  const std::string name = UniqueChannel("schemas");
  auto publisher = MakePublisher(name);
  const pid_t child = ForkChild([&] {
    auto subscriber = Subscriber::Connect(name);
    CHILD_CHECK(subscriber.ok(), 2);
    SchemaPtr first_schema;
    for (int64_t sequence = 1; sequence <= 8; ++sequence) {
      auto message = (*subscriber)->Receive(5s);
      CHILD_CHECK(message.ok(), 3);
      const bool other = sequence >= 4 && sequence <= 6;
      if (other) {
        CHILD_CHECK(message->batch->schema()->fields.size() == 1, 4);
        CHILD_CHECK(message->batch->schema()->fields[0].name == "other", 5);
        CHILD_CHECK(message->batch->column(0)->GetValues<int64_t>(1)[1] == sequence * 1000 + 1, 6);
      } else {
        CHILD_CHECK(BatchMatches(*message->batch, 5, sequence), 7);
        if (first_schema == nullptr) first_schema = message->batch->schema();
        // The same schema id maps to the same decoded schema.
        CHILD_CHECK(message->batch->schema() == first_schema, 8);
      }
    }
    return 0;
  });
  ASSERT_OK(publisher->WaitForSubscribers(1, 10s));
  for (int64_t sequence = 1; sequence <= 8; ++sequence) {
    const bool other = sequence >= 4 && sequence <= 6;
    auto batch = other ? testing::MakeOtherBatch(publisher->LoanPool(), 5, sequence)
                       : MakeBatch(publisher->LoanPool(), 5, sequence);
    ASSERT_TRUE(batch.ok());
    ASSERT_OK(publisher->Send(**batch));
  }
  EXPECT_EQ(WaitChild(child), 0);
}

TEST(CrossProcess, LoanedBatchTravelsWithoutACopy) {
  const std::string name = UniqueChannel("zerocopy");
  auto publisher = MakePublisher(name);
  Pipe report;
  const pid_t child = ForkChild([&] {
    auto subscriber = Subscriber::Connect(name);
    CHILD_CHECK(subscriber.ok(), 2);
    const int64_t copied_before = telemetry::Get(telemetry::Counter::kBytesCopiedHost);
    auto message = (*subscriber)->Receive(5s);
    CHILD_CHECK(message.ok(), 3);
    CHILD_CHECK(BatchMatches(*message->batch, 1000, 77), 4);
    CHILD_CHECK(telemetry::Get(telemetry::Counter::kBytesCopiedHost) == copied_before, 5);
    std::string lines;
    for (const auto& column : message->batch->columns()) {
      for (const auto& buffer : column->buffers) {
        if (buffer == nullptr) continue;
        auto mapping = testing::FindMapping(buffer->data());
        CHILD_CHECK(mapping.has_value(), 6);
        // Read-only, shared, and a mapping of the publisher's memfd.
        CHILD_CHECK(mapping->permissions == "r--s", 7);
        lines += mapping->file + "@" + std::to_string(mapping->file_offset) + "\n";
      }
    }
    report.Write(lines);
    return 0;
  });
  report.CloseWrite();
  ASSERT_OK(publisher->WaitForSubscribers(1, 10s));
  auto batch = MakeBatch(publisher->LoanPool(), 1000, 77);
  ASSERT_TRUE(batch.ok());
  std::string expected;
  for (const auto& column : (*batch)->columns()) {
    for (const auto& buffer : column->buffers) {
      if (buffer == nullptr) continue;
      auto mapping = testing::FindMapping(buffer->data());
      ASSERT_TRUE(mapping.has_value());
      EXPECT_EQ(mapping->permissions, "rw-s");
      EXPECT_THAT(mapping->file, HasSubstr("/memfd:ferry:" + name + ":"));
      expected += mapping->file + "@" + std::to_string(mapping->file_offset) + "\n";
    }
  }
  const int64_t copied_before = telemetry::Get(telemetry::Counter::kBytesCopiedHost);
  const int64_t exports_before = telemetry::Get(telemetry::Counter::kZeroCopyExports);
  ASSERT_OK(publisher->Send(**batch));
  EXPECT_EQ(telemetry::Get(telemetry::Counter::kBytesCopiedHost), copied_before);
  EXPECT_EQ(telemetry::Get(telemetry::Counter::kZeroCopyExports), exports_before + 1);
  EXPECT_EQ(publisher->stats().bytes_copied, 0);
  EXPECT_EQ(publisher->stats().bytes_sent, testing::BufferBytes(**batch));
  // Same memfd, same offsets: the subscriber reads the very bytes we wrote.
  EXPECT_EQ(report.ReadAll(), expected);
  EXPECT_EQ(WaitChild(child), 0);
}

TEST(CrossProcess, HeldBatchIsNeverOverwrittenWhileMemoryIsReused) {
  const std::string name = UniqueChannel("reuse");
  PublisherOptions options;
  options.segment_size = 64 << 10;
  options.max_memory = 256 << 10;
  options.queue_capacity = 4;
  auto publisher = MakePublisher(name, options);
  constexpr int64_t kMessages = 400;  // about 1.6 MiB through 256 KiB
  constexpr int64_t kBlob = 4000;
  auto body = [&](bool hold_first) {
    return [&, hold_first] {
      auto subscriber = Subscriber::Connect(name);
      CHILD_CHECK(subscriber.ok(), 2);
      std::optional<Message> held;
      uint64_t held_checksum = 0;
      for (int64_t sequence = 1; sequence <= kMessages; ++sequence) {
        auto message = (*subscriber)->Receive(5s);
        CHILD_CHECK(message.ok(), 3);
        auto expected = testing::MakeBlobBatch(default_memory_pool(), kBlob, sequence);
        CHILD_CHECK(expected.ok(), 4);
        CHILD_CHECK(message->batch->Equals(**expected), 5);
        if (hold_first && sequence == 1) {
          held_checksum = testing::Checksum(*message->batch);
          held = std::move(*message);
        }
        if (held.has_value()) CHILD_CHECK(testing::Checksum(*held->batch) == held_checksum, 6);
      }
      return 0;
    };
  };
  const pid_t holder = ForkChild(body(true));
  const pid_t fast = ForkChild(body(false));
  ASSERT_OK(publisher->WaitForSubscribers(2, 10s));
  for (int64_t sequence = 1; sequence <= kMessages; ++sequence) {
    auto batch = testing::MakeBlobBatch(publisher->LoanPool(), kBlob, sequence);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    ASSERT_OK(publisher->Send(**batch));
  }
  EXPECT_EQ(WaitChild(holder), 0);
  EXPECT_EQ(WaitChild(fast), 0);
  EXPECT_LE(publisher->stats().segments, 4);  // memory was reused, not grown
}

TEST(CrossProcess, KilledSubscriberIsReclaimedAndOthersCarryOn) {
  std::mt19937 random(1234);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string name = UniqueChannel("killsub");
    PublisherOptions options;
    options.queue_capacity = 4;
    auto publisher = MakePublisher(name, options);
    constexpr int64_t kMessages = 100;
    const pid_t victim = ForkChild([&] {
      auto subscriber = Subscriber::Connect(name);
      CHILD_CHECK(subscriber.ok(), 2);
      std::vector<Message> hoard;  // holds everything until killed
      for (;;) {
        auto message = (*subscriber)->Receive(10s);
        if (!message.ok()) return 3;
        hoard.push_back(std::move(*message));
      }
    });
    const pid_t survivor = ForkChild([&] {
      auto subscriber = Subscriber::Connect(name);
      CHILD_CHECK(subscriber.ok(), 2);
      return ReceiveSequence(**subscriber, kMessages, 8, 5s);
    });
    ASSERT_OK(publisher->WaitForSubscribers(2, 10s));
    const int64_t kill_at = 5 + static_cast<int64_t>(random() % 80);
    for (int64_t sequence = 1; sequence <= kMessages; ++sequence) {
      auto batch = MakeBatch(publisher->LoanPool(), 8, sequence);
      ASSERT_TRUE(batch.ok());
      ASSERT_OK(publisher->Send(**batch));
      if (sequence == kill_at) ::kill(victim, SIGKILL);
    }
    EXPECT_EQ(WaitChild(survivor), 0);
    EXPECT_EQ(WaitChild(victim), 128 + SIGKILL);
    EXPECT_TRUE(PollUntil(*publisher,
                          [&] {
                            const ChannelStats stats = publisher->stats();
                            return stats.subscribers_lost == 2 && stats.memory_in_use == 0;
                          }))
        << "lost " << publisher->stats().subscribers_lost << ", in use "
        << publisher->stats().memory_in_use;
    EXPECT_EQ(publisher->LoanPool()->bytes_allocated(), 0);
    EXPECT_EQ(publisher->stats().subscribers, 0);
  }
}

TEST(CrossProcess, KilledPublisherLetsTheSubscriberDrainThenReportsItGone) {
  std::mt19937 random(99);
  const int baseline_fds = testing::CountOpenFds();
  const int baseline_maps = testing::CountFerryMappings();
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string name = UniqueChannel("killpub");
    Pipe started;
    const pid_t publisher_process = ForkChild([&] {
      PublisherOptions options;
      options.queue_capacity = 8;
      auto publisher = Publisher::Create(name, options);
      CHILD_CHECK(publisher.ok(), 2);
      CHILD_CHECK((*publisher)->WaitForSubscribers(1, 10s).ok(), 3);
      started.Signal();
      for (int64_t sequence = 1;; ++sequence) {
        auto batch = MakeBatch((*publisher)->LoanPool(), 6, sequence);
        CHILD_CHECK(batch.ok(), 4);
        CHILD_CHECK((*publisher)->Send(**batch).ok(), 5);
      }
    });
    {
      auto subscriber = Subscriber::Connect(name);
      ASSERT_TRUE(subscriber.ok()) << subscriber.status().ToString();
      ASSERT_TRUE(started.Await());
      std::vector<Message> held;
      const int64_t receive_before_kill = 1 + static_cast<int64_t>(random() % 30);
      for (int64_t count = 0; count < receive_before_kill; ++count) {
        auto message = (*subscriber)->Receive(5s);
        ASSERT_TRUE(message.ok()) << message.status().ToString();
        held.push_back(std::move(*message));
      }
      ::kill(publisher_process, SIGKILL);
      EXPECT_EQ(WaitChild(publisher_process), 128 + SIGKILL);
      Status end;
      for (int extra = 0; extra < 100; ++extra) {
        auto message = (*subscriber)->Receive(5s);
        if (!message.ok()) {
          end = message.status();
          break;
        }
        held.push_back(std::move(*message));
      }
      EXPECT_EQ(end.code(), StatusCode::kCancelled) << end.ToString();
      EXPECT_THAT(end.message(), HasSubstr("publisher gone"));
      EXPECT_TRUE((*subscriber)->publisher_gone());
      // In order, nothing lost, and nothing overwritten.
      for (size_t index = 0; index < held.size(); ++index) {
        EXPECT_EQ(held[index].sequence, index + 1);
        EXPECT_TRUE(BatchMatches(*held[index].batch, 6, static_cast<int64_t>(index + 1)));
      }
    }
  }
  // Nothing of the dead publishers' memory is left mapped or open here.
  EXPECT_EQ(testing::CountOpenFds(), baseline_fds);
  EXPECT_EQ(testing::CountFerryMappings(), baseline_maps);
}

// Names in /dev/shm that look like Ferry's (there should never be any).
int CountShmFiles() {
  int count = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    if (entry.path().filename().string().find("ferry") != std::string::npos) ++count;
  }
  return count;
}

TEST(CrossProcess, NothingLeaksAfterAFullSession) {
  const int baseline_shm = CountShmFiles();
  const int baseline_fds = testing::CountOpenFds();
  const int baseline_maps = testing::CountFerryMappings();
  {
    PublisherOptions options;
    options.segment_size = 64 << 10;
    options.history = 2;
    auto publisher = MakePublisher(UniqueChannel("leaks"), options);
    auto first = ConnectHere(*publisher, 1);
    auto second = ConnectHere(*publisher, 2);
    ASSERT_NE(first, nullptr);
    ASSERT_NE(second, nullptr);
    WaitSet wait_set;
    wait_set.Add(first.get());
    wait_set.Add(second.get());
    for (int64_t sequence = 1; sequence <= 20; ++sequence) {
      auto batch = sequence % 5 == 0
                       ? testing::MakeBlobBatch(publisher->LoanPool(), 100 << 10, sequence)
                       : MakeBatch(publisher->LoanPool(), 10, sequence);
      ASSERT_TRUE(batch.ok());
      ASSERT_OK(publisher->Send(**batch));
      auto ready = wait_set.Wait(1s);
      ASSERT_TRUE(ready.ok());
      EXPECT_EQ(ready->size(), 2u);
      for (Subscriber* subscriber : {first.get(), second.get()}) {
        auto message = subscriber->Receive(1s);
        ASSERT_TRUE(message.ok()) << message.status().ToString();
      }
    }
    EXPECT_GT(testing::CountFerryMappings(), baseline_maps);
    EXPECT_EQ(CountShmFiles(), baseline_shm);  // memfds only, nothing named on disk
  }
  EXPECT_EQ(testing::CountOpenFds(), baseline_fds);
  EXPECT_EQ(testing::CountFerryMappings(), baseline_maps);
  EXPECT_EQ(CountShmFiles(), baseline_shm);
}

// ---- Waiting on many -----------------------------------------------------------------

TEST(WaitSet, ReportsSubscribersWithMessagesOrAGonePublisher) {
  auto first_publisher = MakePublisher(UniqueChannel("ws1"));
  auto second_publisher = MakePublisher(UniqueChannel("ws2"));
  auto first = ConnectHere(*first_publisher, 1);
  auto second = ConnectHere(*second_publisher, 1);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  WaitSet wait_set;
  wait_set.Add(first.get());
  wait_set.Add(second.get());
  wait_set.Add(second.get());  // once only
  auto none = wait_set.Wait(20ms);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto batch = MakeBatch(second_publisher->LoanPool(), 2, 1);
  ASSERT_TRUE(batch.ok());
  // Sent from another thread while the wait set sleeps.
  std::thread sender([&] {
    std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(second_publisher->Send(**batch).ok());
  });
  auto ready = wait_set.Wait(2s);
  sender.join();
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(*ready, (std::vector<Subscriber*>{second.get()}));
  ASSERT_TRUE(second->Receive(1s).ok());
  none = wait_set.Wait(20ms);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  first_publisher.reset();
  ready = wait_set.Wait(2s);
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(*ready, (std::vector<Subscriber*>{first.get()}));
  EXPECT_TRUE(first->publisher_gone());
  wait_set.Remove(first.get());
  none = wait_set.Wait(10ms);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(WaitSet, WaitFdBecomesReadableForPollUsers) {
  auto publisher = MakePublisher(UniqueChannel("waitfd"));
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  const int fd = subscriber->wait_fd();
  ASSERT_GE(fd, 0);
  auto empty = subscriber->TryReceive();  // arms the fd
  ASSERT_TRUE(empty.ok());
  ASSERT_FALSE(empty->has_value());
  pollfd waiting{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&waiting, 1, 0), 0);
  auto batch = MakeBatch(publisher->LoanPool(), 2, 1);
  ASSERT_TRUE(batch.ok());
  ASSERT_OK(publisher->Send(**batch));
  EXPECT_EQ(::poll(&waiting, 1, 1000), 1);
  auto message = subscriber->TryReceive();
  ASSERT_TRUE(message.ok());
  ASSERT_TRUE(message->has_value());
  empty = subscriber->TryReceive();  // re-arms and clears the fd
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(::poll(&waiting, 1, 0), 0);
}

}  // namespace
}  // namespace ferry::flow
