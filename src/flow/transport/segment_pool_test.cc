#include "flow/transport/segment_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "flow/transport/transport_test_util.h"

namespace ferry::flow::internal {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<SegmentPool> MakePool(int64_t segment_size, int64_t max_memory) {
  SegmentPool::Options options;
  options.channel = "pool-test-" + std::to_string(::getpid());
  options.segment_size = segment_size;
  options.max_memory = max_memory;
  auto pool = SegmentPool::Make(options);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return pool.ok() ? *pool : nullptr;
}

TEST(SegmentPool, RejectsTooSmallSizes) {
  SegmentPool::Options options;
  options.channel = "x";
  options.segment_size = 1000;
  auto pool = SegmentPool::Make(options);
  ASSERT_FALSE(pool.ok());
  EXPECT_THAT(pool.status().message(), HasSubstr("segment_size must be at least"));
  options.segment_size = 1 << 20;
  options.max_memory = 10;
  pool = SegmentPool::Make(options);
  ASSERT_FALSE(pool.ok());
  EXPECT_THAT(pool.status().message(), HasSubstr("max_memory must be at least"));
}

TEST(SegmentPool, RoundsSegmentSizeDownToAPowerOfTwo) {
  auto pool = MakePool(100 << 10, 1 << 20);
  EXPECT_EQ(pool->segment_size(), 64 << 10);
}

TEST(SegmentPool, AllocatesAlignedDistinctBlocksAndReusesFreedOnes) {
  auto pool = MakePool(64 << 10, 1 << 20);
  std::vector<uint8_t*> blocks;
  std::set<uint8_t*> distinct;
  for (int64_t size : {0, 1, 63, 64, 65, 200, 1000, 4096, 5000}) {
    auto block = pool->Allocate(size);
    ASSERT_TRUE(block.ok()) << block.status().ToString();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*block) % 64, 0u) << size;
    std::memset(*block, 0xAB, static_cast<size_t>(size));
    blocks.push_back(*block);
    distinct.insert(*block);
  }
  EXPECT_EQ(distinct.size(), blocks.size());
  EXPECT_EQ(pool->segment_count(), 1);
  const int64_t sizes[] = {0, 1, 63, 64, 65, 200, 1000, 4096, 5000};
  for (size_t index = 0; index < blocks.size(); ++index) pool->Free(blocks[index], sizes[index]);
  EXPECT_EQ(pool->bytes_allocated(), 0);
  // Everything merged back: the whole segment is one block again.
  auto whole = pool->Allocate(64 << 10);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(pool->segment_count(), 1);
  pool->Free(*whole, 64 << 10);
}

TEST(SegmentPool, AddsSegmentsUpToMaxMemoryThenFails) {
  auto pool = MakePool(64 << 10, 128 << 10);
  auto first = pool->Allocate(40 << 10);
  auto second = pool->Allocate(40 << 10);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(pool->segment_count(), 2);
  auto third = pool->Allocate(40 << 10);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(third.status().message(), HasSubstr("channel memory exhausted"));
  pool->Free(*first, 40 << 10);
  auto again = pool->Allocate(40 << 10);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);  // the freed block is reused
  pool->Free(*again, 40 << 10);
  pool->Free(*second, 40 << 10);
}

TEST(SegmentPool, LargeAllocationsGetADedicatedSegmentRetiredOnFree) {
  auto pool = MakePool(64 << 10, 1 << 20);
  std::vector<SegmentPool::Event> events;
  auto big = pool->Allocate(100 << 10);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_TRUE(pool->HasEvents());
  pool->TakeEvents(&events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, SegmentPool::Event::Kind::kCreated);
  EXPECT_TRUE(events[0].segment->dedicated);
  const uint32_t id = events[0].segment->id;
  EXPECT_GE(events[0].segment->mapping.size(), 100 << 10);
  events.clear();
  pool->Free(*big, 100 << 10);
  pool->TakeEvents(&events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, SegmentPool::Event::Kind::kRetired);
  EXPECT_EQ(events[0].segment->id, id);
  EXPECT_EQ(pool->segment_count(), 0);
  EXPECT_FALSE(pool->HasEvents());
}

TEST(SegmentPool, LocatesBuffersAndRejectsForeignMemory) {
  auto pool = MakePool(64 << 10, 1 << 20);
  auto block = pool->Allocate(256);
  ASSERT_TRUE(block.ok());
  auto live = pool->LiveSegments();
  ASSERT_EQ(live.size(), 1u);
  {
    auto lookup = pool->LockForLookup();
    auto location = lookup.Locate(*block + 64, 100);
    ASSERT_TRUE(location.ok()) << location.status().ToString();
    EXPECT_EQ(location->segment_id, live[0]->id);
    EXPECT_EQ(location->offset, static_cast<uint64_t>(*block + 64 - live[0]->mapping.data()));
    EXPECT_EQ(location->length, 100u);
    std::vector<uint8_t> heap(64);
    auto foreign = lookup.Locate(heap.data(), 64);
    ASSERT_FALSE(foreign.ok());
    EXPECT_THAT(foreign.status().message(), HasSubstr("not in this channel's loaned memory"));
    auto past_end = lookup.Locate(live[0]->mapping.data() + (64 << 10) - 8, 64);
    ASSERT_FALSE(past_end.ok());
    EXPECT_THAT(past_end.status().message(), HasSubstr("runs past the end"));
  }
  pool->Free(*block, 256);
}

TEST(SegmentPool, ReallocateKeepsBytesAndGrowsInPlaceWhenTheBlockAllows) {
  auto pool = MakePool(64 << 10, 1 << 20);
  auto block = pool->Allocate(100);  // a 128-byte block
  ASSERT_TRUE(block.ok());
  std::memset(*block, 7, 100);
  auto grown = pool->Reallocate(*block, 100, 120);
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(*grown, *block);
  auto moved = pool->Reallocate(*grown, 120, 3000);
  ASSERT_TRUE(moved.ok());
  for (int index = 0; index < 100; ++index) ASSERT_EQ((*moved)[index], 7);
  EXPECT_EQ(pool->bytes_allocated(), 3000);
  pool->Free(*moved, 3000);
  EXPECT_EQ(pool->bytes_allocated(), 0);
}

TEST(SegmentPool, ReclaimerIsAskedThenAllocationTimesOut) {
  auto pool = MakePool(64 << 10, 64 << 10);
  auto all = pool->Allocate(64 << 10);
  ASSERT_TRUE(all.ok());
  int asked = 0;
  pool->SetReclaimer(
      [&](std::chrono::nanoseconds slice) {
        ++asked;
        std::this_thread::sleep_for(
            std::min<std::chrono::nanoseconds>(slice, std::chrono::milliseconds(2)));
      },
      std::chrono::milliseconds(30));
  auto more = pool->Allocate(64);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(more.status().message(), HasSubstr("timed out waiting"));
  EXPECT_GT(asked, 1);
  // A reclaimer that frees makes the allocation succeed.
  uint8_t* held = *all;
  pool->SetReclaimer(
      [&](std::chrono::nanoseconds) {
        if (held != nullptr) pool->Free(held, 64 << 10);
        held = nullptr;
      },
      std::chrono::seconds(5));
  auto after = pool->Allocate(64);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  pool->ClearReclaimer();
  pool->Free(*after, 64);
}

TEST(SegmentPool, BuildersWorkInLoanedMemory) {
  auto pool = MakePool(64 << 10, 1 << 20);
  auto batch = flow::testing::MakeBatch(pool.get(), 500, 3);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_TRUE(flow::testing::BatchMatches(**batch, 500, 3));
  auto lookup = pool->LockForLookup();
  for (const auto& column : (*batch)->columns()) {
    for (const auto& buffer : column->buffers) {
      if (buffer) {
        EXPECT_TRUE(lookup.Locate(buffer->data(), buffer->size()).ok());
      }
    }
  }
}

TEST(SegmentPool, OrphanedPoolLivesUntilItsLastAllocationAndRefusesNewOnes) {
  auto pool = MakePool(64 << 10, 1 << 20);
  auto buffer = Buffer::Allocate(1000, pool.get());
  ASSERT_TRUE(buffer.ok());
  std::memset((*buffer)->mutable_data(), 0x5A, 1000);
  MemoryPool* raw = pool.get();
  SegmentPool::Orphan(std::move(pool));
  // Still mapped and intact, but closed to new allocations.
  EXPECT_EQ((*buffer)->data()[999], 0x5A);
  auto refused = raw->Allocate(10);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("closed"));
  buffer->reset();  // frees the last allocation: the pool goes away (LeakSanitizer checks)
}

}  // namespace
}  // namespace ferry::flow::internal
