#include "ferry/exchange/buffer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ferry/base/telemetry.h"
#include "ferry/exchange/builder.h"
#include "testing/test_pool.h"
#include "testing/test_util.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;

bool IsAligned(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % kBufferAlignment == 0;
}

using ::ferry::testing::TestPool;

// ---- MemoryPool ------------------------------------------------------------------------

TEST(MemoryPoolTest, DefaultPoolAllocatesAlignedMemoryAndCounts) {
  MemoryPool* pool = default_memory_pool();
  EXPECT_EQ(pool, default_memory_pool());
  EXPECT_EQ(pool->name(), "heap");
  const int64_t before = pool->bytes_allocated();
  ASSERT_OK_AND_ASSIGN(uint8_t * data, pool->Allocate(100));
  EXPECT_TRUE(IsAligned(data));
  EXPECT_EQ(pool->bytes_allocated(), before + 100);
  std::memset(data, 7, 100);
  ASSERT_OK_AND_ASSIGN(data, pool->Reallocate(data, 100, 1000));
  EXPECT_TRUE(IsAligned(data));
  EXPECT_EQ(data[99], 7);
  EXPECT_EQ(pool->bytes_allocated(), before + 1000);
  pool->Free(data, 1000);
  EXPECT_EQ(pool->bytes_allocated(), before);

  ASSERT_OK_AND_ASSIGN(uint8_t * empty, pool->Allocate(0));
  EXPECT_NE(empty, nullptr);
  pool->Free(empty, 0);
  pool->Free(nullptr, 0);  // a no-op
}

TEST(MemoryPoolTest, RejectsNegativeAndImpossibleSizes) {
  auto negative = default_memory_pool()->Allocate(-1);
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(negative.status().message(), HasSubstr("negative"));
  // Sizes near INT64_MAX used to overflow while padding; now they are refused.
  auto huge = default_memory_pool()->Allocate(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(huge.status().message(), HasSubstr("cannot allocate"));
}

// ---- Buffer ------------------------------------------------------------------------------

TEST(BufferTest, AllocatePadsAndZeroesThePadding) {
  ASSERT_OK_AND_ASSIGN(BufferPtr buffer, Buffer::Allocate(10));
  EXPECT_EQ(buffer->size(), 10);
  EXPECT_TRUE(IsAligned(buffer->data()));
  EXPECT_NE(buffer->owner(), nullptr);
  for (int64_t i = 10; i < PaddedSize(10); ++i) EXPECT_EQ(buffer->data()[i], 0) << i;
  std::memcpy(buffer->mutable_data(), "0123456789", 10);
  EXPECT_EQ(buffer->view(), "0123456789");

  auto negative = Buffer::Allocate(-3);
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(negative.status().message(), HasSubstr("negative buffer size -3"));
  auto huge = Buffer::Allocate(std::numeric_limits<int64_t>::max() - 1);
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory);
  ASSERT_OK_AND_ASSIGN(BufferPtr empty, Buffer::Allocate(0));
  EXPECT_EQ(empty->size(), 0);
}

TEST(BufferTest, PaddedSizeRoundsUpToTheAlignment) {
  EXPECT_EQ(PaddedSize(0), 0);
  EXPECT_EQ(PaddedSize(1), 64);
  EXPECT_EQ(PaddedSize(64), 64);
  EXPECT_EQ(PaddedSize(65), 128);
}

TEST(BufferTest, AllocateUsesTheGivenPoolAndGivesItBack) {
  TestPool pool;
  {
    ASSERT_OK_AND_ASSIGN(BufferPtr buffer, Buffer::Allocate(100, &pool));
    EXPECT_EQ(pool.bytes_allocated(), 128);
  }
  EXPECT_EQ(pool.bytes_allocated(), 0);
  TestPool refusing(0);
  auto refused = Buffer::Allocate(8, &refusing);
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(refusing.bytes_allocated(), 0);
}

TEST(BufferTest, CopyOfCopiesAndCountsTheBytes) {
  const char text[] = "columnar";
  const int64_t before = telemetry::Get(telemetry::Counter::kBytesCopiedHost);
  ASSERT_OK_AND_ASSIGN(BufferPtr copy, Buffer::CopyOf(text, 8));
  EXPECT_EQ(copy->view(), "columnar");
  EXPECT_NE(static_cast<const void*>(copy->data()), static_cast<const void*>(text));
  EXPECT_TRUE(IsAligned(copy->data()));
  EXPECT_EQ(telemetry::Get(telemetry::Counter::kBytesCopiedHost), before + 8);
  ASSERT_OK_AND_ASSIGN(BufferPtr empty, Buffer::CopyOf(nullptr, 0));
  EXPECT_EQ(empty->size(), 0);
}

TEST(BufferTest, SliceOfKeepsTheParentAliveAndClamps) {
  ASSERT_OK_AND_ASSIGN(BufferPtr parent, Buffer::CopyOf("abcdefgh", 8));
  BufferPtr middle = Buffer::SliceOf(parent, 2, 3);
  EXPECT_EQ(middle->view(), "cde");
  EXPECT_EQ(middle->data(), parent->data() + 2);
  std::weak_ptr<Buffer> weak_parent = parent;
  parent.reset();
  EXPECT_FALSE(weak_parent.expired());
  EXPECT_EQ(middle->view(), "cde");  // ASan would flag a freed parent here
  middle.reset();
  EXPECT_TRUE(weak_parent.expired());

  ASSERT_OK_AND_ASSIGN(BufferPtr other, Buffer::CopyOf("abcdefgh", 8));
  EXPECT_EQ(Buffer::SliceOf(other, 6, 10)->view(), "gh");
  EXPECT_EQ(Buffer::SliceOf(other, 20, 1)->size(), 0);
  EXPECT_EQ(Buffer::SliceOf(other, -4, 2)->view(), "ab");
  EXPECT_EQ(Buffer::SliceOf(other, 1, -2)->size(), 0);
}

TEST(BufferTest, EqualsComparesBytes) {
  ASSERT_OK_AND_ASSIGN(BufferPtr a, Buffer::CopyOf("abc", 3));
  ASSERT_OK_AND_ASSIGN(BufferPtr b, Buffer::CopyOf("abc", 3));
  ASSERT_OK_AND_ASSIGN(BufferPtr c, Buffer::CopyOf("abd", 3));
  EXPECT_TRUE(a->Equals(*b));
  EXPECT_FALSE(a->Equals(*c));
  EXPECT_FALSE(a->Equals(*Buffer::SliceOf(b, 0, 2)));
  Buffer static_buffer(reinterpret_cast<const uint8_t*>("abc"), 3, nullptr);
  EXPECT_TRUE(static_buffer.Equals(*a));
}

// ---- Bits ----------------------------------------------------------------------------------

TEST(BitTest, SetGetClear) {
  uint8_t bits[2] = {0, 0};
  SetBit(bits, 0);
  SetBit(bits, 9);
  EXPECT_EQ(bits[0], 0x01);
  EXPECT_EQ(bits[1], 0x02);
  EXPECT_TRUE(GetBit(bits, 9));
  EXPECT_FALSE(GetBit(bits, 8));
  ClearBit(bits, 0);
  EXPECT_EQ(bits[0], 0);
  SetBitTo(bits, 15, true);
  SetBitTo(bits, 9, false);
  EXPECT_EQ(bits[1], 0x80);
  EXPECT_EQ(BytesForBits(0), 0);
  EXPECT_EQ(BytesForBits(1), 1);
  EXPECT_EQ(BytesForBits(9), 2);
}

TEST(BitTest, CountSetBitsMatchesANaiveCount) {
  std::mt19937 random(42);
  std::vector<uint8_t> bits(64);
  for (auto& byte : bits) byte = static_cast<uint8_t>(random());
  for (int64_t offset = 0; offset < 80; offset += 3) {
    for (int64_t length = 0; offset + length <= 512; length += 7) {
      int64_t expected = 0;
      for (int64_t i = offset; i < offset + length; ++i) expected += GetBit(bits.data(), i);
      ASSERT_EQ(CountSetBits(bits.data(), offset, length), expected) << offset << " " << length;
    }
  }
}

// ---- BufferBuilder ---------------------------------------------------------------------------

TEST(BufferBuilderTest, AppendsGrowsAndFinishes) {
  TestPool pool;
  {
    BufferBuilder builder(&pool);
    EXPECT_EQ(builder.pool(), &pool);
    ASSERT_OK(builder.Append("abc", 3));
    ASSERT_OK(builder.AppendValue<int32_t>(0x01020304));
    ASSERT_OK(builder.AppendZeros(2));
    EXPECT_EQ(builder.length(), 9);
    EXPECT_EQ(builder.capacity(), 64);
    EXPECT_TRUE(IsAligned(builder.data()));
    std::vector<int64_t> capacities;
    for (int i = 0; i < 1000; ++i) {
      ASSERT_OK(builder.Append("x", 1));
      if (capacities.empty() || capacities.back() != builder.capacity()) {
        capacities.push_back(builder.capacity());
      }
    }
    // Doubling: few reallocations, each a multiple of 64.
    EXPECT_EQ(capacities, (std::vector<int64_t>{64, 128, 256, 512, 1024}));
    ASSERT_OK_AND_ASSIGN(BufferPtr buffer, builder.Finish());
    EXPECT_EQ(builder.length(), 0);
    EXPECT_EQ(builder.capacity(), 0);
    EXPECT_EQ(buffer->size(), 1009);
    EXPECT_TRUE(IsAligned(buffer->data()));
    EXPECT_EQ(std::string_view(buffer->view().data(), 3), "abc");
    EXPECT_EQ(buffer->data()[3], 0x04);
    for (int64_t i = 1009; i < 1024; ++i) EXPECT_EQ(buffer->data()[i], 0) << i;
    EXPECT_EQ(pool.bytes_allocated(), 1024);
  }
  EXPECT_EQ(pool.bytes_allocated(), 0);
}

TEST(BufferBuilderTest, ResizeZeroesNewBytesAndShrinkToFit) {
  TestPool pool;
  BufferBuilder builder(&pool);
  ASSERT_OK(builder.Reserve(1000));
  EXPECT_GE(builder.capacity(), 1000);
  ASSERT_OK(builder.Append("\xff\xff", 2));
  ASSERT_OK(builder.Resize(1));
  ASSERT_OK(builder.Resize(5));
  EXPECT_EQ(builder.data()[1], 0);
  EXPECT_EQ(builder.data()[4], 0);
  ASSERT_OK_AND_ASSIGN(BufferPtr buffer, builder.Finish(/*shrink_to_fit=*/true));
  EXPECT_EQ(buffer->size(), 5);
  EXPECT_EQ(pool.bytes_allocated(), 64);
  EXPECT_TRUE(IsAligned(buffer->data()));
}

TEST(BufferBuilderTest, EmptyFinishGivesRealMemory) {
  BufferBuilder builder;
  ASSERT_OK_AND_ASSIGN(BufferPtr buffer, builder.Finish());
  EXPECT_EQ(buffer->size(), 0);
  EXPECT_NE(buffer->data(), nullptr);
  EXPECT_TRUE(IsAligned(buffer->data()));
}

TEST(BufferBuilderTest, ResetAndMoveReleaseMemory) {
  TestPool pool;
  BufferBuilder first(&pool);
  ASSERT_OK(first.Append("abc", 3));
  BufferBuilder second(std::move(first));
  EXPECT_EQ(first.length(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(second.length(), 3);
  BufferBuilder third(&pool);
  ASSERT_OK(third.Append("zz", 2));
  third = std::move(second);  // frees third's old memory
  EXPECT_EQ(third.length(), 3);
  EXPECT_EQ(pool.bytes_allocated(), 64);
  third.Reset();
  EXPECT_EQ(pool.bytes_allocated(), 0);
  EXPECT_EQ(third.length(), 0);
}

TEST(BufferBuilderTest, ErrorsLeaveTheBuilderUnchanged) {
  TestPool pool(1);
  BufferBuilder builder(&pool);
  ASSERT_OK(builder.Append("abc", 3));
  std::string big(100, 'b');
  Status refused = builder.Append(big.data(), 100);
  EXPECT_EQ(refused.code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(refused.message(), HasSubstr("test pool refused"));
  EXPECT_EQ(builder.length(), 3);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(builder.data()), 3), "abc");

  Status negative = builder.Reserve(-1);
  EXPECT_EQ(negative.code(), StatusCode::kInvalid);
  EXPECT_EQ(builder.Resize(-1).code(), StatusCode::kInvalid);
  EXPECT_EQ(builder.AppendZeros(-1).code(), StatusCode::kInvalid);
  Status huge = builder.Reserve(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(huge.code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(huge.message(), HasSubstr("exceeds the builder limit"));
  EXPECT_EQ(builder.AppendZeros(std::numeric_limits<int64_t>::max()).code(),
            StatusCode::kOutOfMemory);
  EXPECT_EQ(builder.length(), 3);
  builder.Reset();
  EXPECT_EQ(pool.bytes_allocated(), 0);
}

TEST(TypedBufferBuilderTest, CountsElements) {
  TypedBufferBuilder<int64_t> builder;
  ASSERT_OK(builder.Append(5));
  const int64_t more[] = {6, 7};
  ASSERT_OK(builder.Append(more, 2));
  ASSERT_OK(builder.AppendCopies(9, 3));
  EXPECT_EQ(builder.length(), 6);
  EXPECT_EQ(builder.value(2), 7);
  builder.set_value(0, -1);
  ASSERT_OK_AND_ASSIGN(BufferPtr buffer, builder.Finish());
  EXPECT_EQ(buffer->size(), 48);
  const int64_t* values = buffer->data_as<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(values, values + 6), (std::vector<int64_t>{-1, 6, 7, 9, 9, 9}));
}

// ---- BitmapBuilder ------------------------------------------------------------------------------

TEST(BitmapBuilderTest, RunsAcrossByteBoundariesMatchANaiveBitmap) {
  std::mt19937 random(7);
  BitmapBuilder builder;
  std::vector<bool> expected;
  for (int step = 0; step < 200; ++step) {
    const bool value = random() % 2 == 0;
    const int64_t count = random() % 20;
    ASSERT_OK(builder.AppendRun(value, count));
    expected.insert(expected.end(), static_cast<size_t>(count), value);
  }
  std::vector<uint8_t> bytes = {1, 0, 0, 1, 1};
  ASSERT_OK(builder.AppendBytes(bytes.data(), 5));
  for (uint8_t byte : bytes) expected.push_back(byte != 0);
  ASSERT_EQ(builder.length(), static_cast<int64_t>(expected.size()));
  int64_t false_count = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(builder.Get(static_cast<int64_t>(i)), expected[i]) << i;
    false_count += expected[i] ? 0 : 1;
  }
  EXPECT_EQ(builder.false_count(), false_count);
  ASSERT_OK_AND_ASSIGN(BufferPtr bitmap, builder.Finish());
  EXPECT_EQ(bitmap->size(), BytesForBits(static_cast<int64_t>(expected.size())));
  EXPECT_EQ(CountSetBits(bitmap->data(), 0, static_cast<int64_t>(expected.size())),
            static_cast<int64_t>(expected.size()) - false_count);
  // Bits past the end are zero, so the padding never reads as valid.
  for (int64_t i = static_cast<int64_t>(expected.size()); i < bitmap->size() * 8; ++i) {
    EXPECT_FALSE(GetBit(bitmap->data(), i));
  }
  EXPECT_EQ(builder.length(), 0);
  EXPECT_EQ(builder.false_count(), 0);
}

TEST(BitmapBuilderTest, RejectsNegativeCounts) {
  BitmapBuilder builder;
  EXPECT_EQ(builder.AppendRun(true, -1).code(), StatusCode::kInvalid);
  EXPECT_EQ(builder.Reserve(-1).code(), StatusCode::kInvalid);
  EXPECT_EQ(builder.AppendBytes(nullptr, -2).code(), StatusCode::kInvalid);
  EXPECT_EQ(builder.AppendRun(true, std::numeric_limits<int64_t>::max()).code(),
            StatusCode::kOutOfMemory);
  EXPECT_EQ(builder.length(), 0);
}

}  // namespace
}  // namespace ferry
