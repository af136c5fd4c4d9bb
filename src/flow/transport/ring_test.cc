#include "flow/transport/ring.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "flow/transport/futex.h"

namespace ferry::flow::internal {
namespace {

using ::testing::HasSubstr;

// A descriptor ring in ordinary memory (the layout is the same as in shared memory).
struct TestRing {
  explicit TestRing(uint32_t capacity)
      : indices(std::make_unique<RingIndices>()),
        slots(std::make_unique<SharedDescriptor[]>(capacity)),
        producer(indices.get(), slots.get(), capacity),
        consumer(indices.get(), slots.get(), capacity) {}
  std::unique_ptr<RingIndices> indices;
  std::unique_ptr<SharedDescriptor[]> slots;
  DescriptorProducer producer;
  DescriptorConsumer consumer;
};

Descriptor MakeDescriptor(uint64_t message_id) {
  Descriptor descriptor;
  descriptor.message_id = message_id;
  descriptor.entry_slot = static_cast<uint32_t>(message_id * 3);
  descriptor.schema_id = 7;
  descriptor.header_segment = 2;
  descriptor.header_offset = message_id * 64;
  descriptor.header_length = 128;
  return descriptor;
}

TEST(DescriptorRing, PushesAndPopsInOrderUntilFull) {
  TestRing ring(4);
  for (uint64_t id = 1; id <= 4; ++id) {
    auto pushed = ring.producer.TryPush(MakeDescriptor(id));
    ASSERT_TRUE(pushed.ok());
    ASSERT_TRUE(pushed->has_value());
    EXPECT_EQ(**pushed, id - 1);
  }
  auto full = ring.producer.TryPush(MakeDescriptor(5));
  ASSERT_TRUE(full.ok());
  EXPECT_FALSE(full->has_value());
  EXPECT_EQ(*ring.producer.Queued(), 4u);
  for (uint64_t id = 1; id <= 4; ++id) {
    auto popped = ring.consumer.TryPop();
    ASSERT_TRUE(popped.ok()) << popped.status().ToString();
    ASSERT_TRUE(popped->has_value());
    EXPECT_EQ((*popped)->message_id, id);
    EXPECT_EQ((*popped)->entry_slot, id * 3);
    EXPECT_EQ((*popped)->schema_id, 7u);
    EXPECT_EQ((*popped)->header_offset, id * 64);
    EXPECT_EQ((*popped)->sequence, id - 1);
  }
  auto empty = ring.consumer.TryPop();
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
}

TEST(DescriptorRing, DropOldestOnlyWhenFull) {
  TestRing ring(3);
  ASSERT_TRUE(ring.producer.TryPush(MakeDescriptor(1)).ok());
  auto not_full = ring.producer.DropOldest();
  ASSERT_TRUE(not_full.ok());
  EXPECT_FALSE(not_full->has_value());
  ASSERT_TRUE(ring.producer.TryPush(MakeDescriptor(2)).ok());
  ASSERT_TRUE(ring.producer.TryPush(MakeDescriptor(3)).ok());
  auto dropped = ring.producer.DropOldest();
  ASSERT_TRUE(dropped.ok());
  ASSERT_TRUE(dropped->has_value());
  EXPECT_EQ(**dropped, 0u);  // message 1's sequence
  ASSERT_TRUE(ring.producer.TryPush(MakeDescriptor(4)).ok());
  std::vector<uint64_t> received;
  for (;;) {
    auto popped = ring.consumer.TryPop();
    ASSERT_TRUE(popped.ok());
    if (!popped->has_value()) break;
    received.push_back((*popped)->message_id);
  }
  EXPECT_EQ(received, (std::vector<uint64_t>{2, 3, 4}));
}

TEST(DescriptorRing, ConsumerRejectsCorruptedIndices) {
  TestRing ring(4);
  ASSERT_TRUE(ring.producer.TryPush(MakeDescriptor(1)).ok());
  ring.indices->head.store(1000);  // a hostile publisher's head
  auto popped = ring.consumer.TryPop();
  ASSERT_FALSE(popped.ok());
  EXPECT_THAT(popped.status().message(), HasSubstr("corrupted descriptor ring"));
  ring.indices->head.store(1);
  ring.indices->tail.store(5);  // tail past head
  popped = ring.consumer.TryPop();
  ASSERT_FALSE(popped.ok());
  EXPECT_THAT(popped.status().message(), HasSubstr("corrupted descriptor ring"));
}

TEST(DescriptorRing, ConsumerRejectsWrongSequenceStamp) {
  TestRing ring(4);
  ASSERT_TRUE(ring.producer.TryPush(MakeDescriptor(1)).ok());
  ring.slots[0].words[0].store(77);
  std::optional<Descriptor> claimed;
  auto popped = ring.consumer.TryPop(&claimed);
  ASSERT_FALSE(popped.ok());
  EXPECT_THAT(popped.status().message(), HasSubstr("stamped 77"));
  // It was claimed anyway, so that its message can be handed back.
  ASSERT_TRUE(claimed.has_value());
  EXPECT_EQ(claimed->message_id, 1u);
  auto empty = ring.consumer.TryPop();
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
}

TEST(DescriptorRing, ProducerRejectsCorruptedTail) {
  TestRing ring(4);
  ASSERT_TRUE(ring.producer.TryPush(MakeDescriptor(1)).ok());
  ring.indices->tail.store(9);  // a hostile subscriber's tail, beyond the head
  auto pushed = ring.producer.TryPush(MakeDescriptor(2));
  ASSERT_FALSE(pushed.ok());
  EXPECT_THAT(pushed.status().message(), HasSubstr("corrupted descriptor ring"));
  auto queued = ring.producer.Queued();
  EXPECT_FALSE(queued.ok());
  auto dropped = ring.producer.DropOldest();
  EXPECT_FALSE(dropped.ok());
}

TEST(DescriptorRing, ProducerRejectsTailMovingBackwards) {
  TestRing ring(4);
  ASSERT_TRUE(ring.producer.TryPush(MakeDescriptor(1)).ok());
  ASSERT_TRUE(ring.producer.TryPush(MakeDescriptor(2)).ok());
  ASSERT_TRUE(ring.consumer.TryPop().ok());
  ASSERT_TRUE(ring.producer.Queued().ok());  // sees tail 1
  ring.indices->tail.store(0);
  auto queued = ring.producer.Queued();
  ASSERT_FALSE(queued.ok());
  EXPECT_THAT(queued.status().message(), HasSubstr("tail 0"));
}

// Every sequence is either received or dropped, exactly once, in order,
// while a producer drops the oldest and a consumer races it.
TEST(DescriptorRing, ConcurrentDropOldestLosesNothingTwice) {
  constexpr uint32_t kCapacity = 8;
  constexpr uint64_t kMessages = 200000;
  TestRing ring(kCapacity);
  std::vector<uint8_t> seen(kMessages + 1, 0);
  std::atomic<bool> done{false};
  std::atomic<bool> consumer_error{false};
  std::thread consumer([&] {
    uint64_t last = 0;
    for (;;) {
      auto popped = ring.consumer.TryPop();
      if (!popped.ok()) {
        consumer_error = true;
        return;
      }
      if (!popped->has_value()) {
        if (done.load()) {
          auto final_pop = ring.consumer.TryPop();
          if (!final_pop.ok() || !final_pop->has_value()) return;
          popped = std::move(final_pop);
        } else {
          continue;
        }
      }
      const uint64_t id = (*popped)->message_id;
      if (id <= last || id > kMessages || (*popped)->entry_slot != static_cast<uint32_t>(id * 3)) {
        consumer_error = true;
        return;
      }
      last = id;
      seen[id] += 1;
    }
  });
  std::vector<uint8_t> dropped(kMessages + 1, 0);
  std::vector<uint64_t> id_of_sequence(kMessages + 1, 0);
  for (uint64_t id = 1; id <= kMessages; ++id) {
    for (;;) {
      auto pushed = ring.producer.TryPush(MakeDescriptor(id));
      ASSERT_TRUE(pushed.ok());
      if (pushed->has_value()) {
        id_of_sequence[**pushed] = id;
        break;
      }
      auto old = ring.producer.DropOldest();
      ASSERT_TRUE(old.ok());
      if (old->has_value()) dropped[id_of_sequence[**old]] += 1;
    }
  }
  done = true;
  consumer.join();
  ASSERT_FALSE(consumer_error.load());
  uint64_t received = 0;
  uint64_t lost = 0;
  for (uint64_t id = 1; id <= kMessages; ++id) {
    ASSERT_EQ(seen[id] + dropped[id], 1) << "message " << id;
    received += seen[id];
    lost += dropped[id];
  }
  EXPECT_EQ(received + lost, kMessages);
}

TEST(ReleaseRing, CarriesTokensAndSpillsWhenFull) {
  auto indices = std::make_unique<RingIndices>();
  auto slots = std::make_unique<SharedRelease[]>(2);
  ReleaseProducer producer(indices.get(), slots.get(), 2);
  ReleaseConsumer consumer(indices.get(), slots.get(), 2);
  EXPECT_TRUE(*producer.TryPush(10, 1));
  EXPECT_TRUE(*producer.TryPush(11, 2));
  EXPECT_FALSE(*producer.TryPush(12, 3));  // full
  std::vector<std::pair<uint64_t, uint64_t>> got;
  auto drained = consumer.Drain([&](uint64_t id, uint64_t slot) { got.emplace_back(id, slot); });
  ASSERT_TRUE(drained.ok());
  EXPECT_EQ(*drained, 2u);
  EXPECT_EQ(got, (std::vector<std::pair<uint64_t, uint64_t>>{{10, 1}, {11, 2}}));
  EXPECT_TRUE(*producer.TryPush(12, 3));
}

TEST(ReleaseRing, BothEndsRejectCorruptedIndices) {
  auto indices = std::make_unique<RingIndices>();
  auto slots = std::make_unique<SharedRelease[]>(4);
  ReleaseProducer producer(indices.get(), slots.get(), 4);
  ReleaseConsumer consumer(indices.get(), slots.get(), 4);
  indices->head.store(1u << 30);  // a hostile subscriber's head
  int visited = 0;
  auto drained = consumer.Drain([&](uint64_t, uint64_t) { ++visited; });
  ASSERT_FALSE(drained.ok());
  EXPECT_THAT(drained.status().message(), HasSubstr("corrupted release ring"));
  EXPECT_EQ(visited, 0);
  indices->head.store(0);
  indices->tail.store(3);  // a hostile publisher's tail
  auto pushed = producer.TryPush(1, 1);
  ASSERT_FALSE(pushed.ok());
  EXPECT_THAT(pushed.status().message(), HasSubstr("corrupted release ring"));
}

TEST(Futex, WaitReturnsOnWakeAndOnTimeout) {
  std::atomic<uint32_t> word{0};
  const auto start = Clock::now();
  FutexWait(&word, 0, std::chrono::milliseconds(20));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(15));
  // A changed value returns at once.
  word = 1;
  const auto again = Clock::now();
  FutexWait(&word, 0, std::chrono::seconds(5));
  EXPECT_LT(Clock::now() - again, std::chrono::seconds(1));
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    word.store(2);
    FutexWake(&word);
  });
  const auto woken = Clock::now();
  while (word.load() == 1) FutexWait(&word, 1, std::chrono::seconds(5));
  EXPECT_LT(Clock::now() - woken, std::chrono::seconds(2));
  waker.join();
}

TEST(Deadline, SaturatesAndCountsDown) {
  Deadline never = Deadline::Never();
  EXPECT_FALSE(never.Expired());
  EXPECT_EQ(never.Remaining(std::chrono::milliseconds(5)), std::chrono::milliseconds(5));
  Deadline now(std::chrono::nanoseconds::zero());
  EXPECT_TRUE(now.Expired());
  EXPECT_EQ(now.Remaining(), std::chrono::nanoseconds::zero());
  Deadline negative(std::chrono::nanoseconds(-5));
  EXPECT_TRUE(negative.Expired());
}

}  // namespace
}  // namespace ferry::flow::internal
