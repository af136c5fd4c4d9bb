#include "ferry/exchange/buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "ferry/base/telemetry.h"

namespace ferry {
namespace {

// Allocations this large are aligned to a transparent huge page and marked
// with MADV_HUGEPAGE: the first touch of a fresh 1 GiB buffer otherwise costs
// 262,144 page faults, which made a copy into new memory ~4x slower than a
// copy into memory touched before (docs/benchmarks.md, device fallback).
constexpr int64_t kHugePage = int64_t{2} << 20;

// Larger sizes would overflow PaddedSize; no allocator could satisfy them anyway.
constexpr int64_t kMaxAllocation = std::numeric_limits<int64_t>::max() - kBufferAlignment;

Status TooLarge(int64_t size) {
  return Status::OutOfMemory("cannot allocate " + std::to_string(size) + " bytes");
}

class HeapPool final : public MemoryPool {
 public:
  Result<uint8_t*> Allocate(int64_t size) override {
    if (size < 0) return Status::Invalid("negative allocation size " + std::to_string(size));
    if (size > kMaxAllocation) return TooLarge(size);
    const int64_t padded = RoundedSize(size == 0 ? 1 : size);
    const bool huge = padded >= kHugePage;
    void* memory = huge ? TakeCached(padded) : nullptr;
    if (memory == nullptr) {
      memory = std::aligned_alloc(huge ? kHugePage : kBufferAlignment, static_cast<size_t>(padded));
      if (memory == nullptr) {
        return Status::OutOfMemory("failed to allocate " + std::to_string(size) + " bytes");
      }
      // Advice only: without transparent huge pages the call fails harmlessly.
      if (huge) (void)madvise(memory, static_cast<size_t>(padded), MADV_HUGEPAGE);
    }
    bytes_.fetch_add(size, std::memory_order_relaxed);
    return static_cast<uint8_t*>(memory);
  }

  Result<uint8_t*> Reallocate(uint8_t* data, int64_t old_size, int64_t new_size) override {
    FERRY_ASSIGN_OR_RAISE(uint8_t * fresh, Allocate(new_size));
    if (data != nullptr) {
      std::memcpy(fresh, data, static_cast<size_t>(std::min(old_size, new_size)));
      Free(data, old_size);
    }
    return fresh;
  }

  void Free(uint8_t* data, int64_t size) override {
    if (data == nullptr) return;
    bytes_.fetch_sub(size, std::memory_order_relaxed);
    const int64_t padded = RoundedSize(size == 0 ? 1 : size);
    if (padded < kHugePage || !Cache(data, padded)) std::free(data);
  }

  int64_t bytes_allocated() const override { return bytes_.load(std::memory_order_relaxed); }
  std::string_view name() const override { return "heap"; }

 private:
  static int64_t RoundedSize(int64_t size) {
    int64_t padded = PaddedSize(size);
    if (padded >= kHugePage) padded = (padded + kHugePage - 1) / kHugePage * kHugePage;
    return padded;
  }

  // Large blocks are kept after Free, up to kCacheLimit bytes, and handed out
  // again for the same size: a stream of same-shaped batches (the copy
  // fallback, builders) then writes into memory whose pages are already
  // mapped, instead of paying the kernel's page faults and zeroing each time.
  static constexpr int64_t kCacheLimit = int64_t{1} << 30;

  bool Cache(uint8_t* data, int64_t padded) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cached_bytes_ + padded > kCacheLimit) return false;
    cache_.emplace(padded, data);
    cached_bytes_ += padded;
    return true;
  }

  void* TakeCached(int64_t padded) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto found = cache_.find(padded);
    if (found == cache_.end()) return nullptr;
    void* memory = found->second;
    cache_.erase(found);
    cached_bytes_ -= padded;
    return memory;
  }

  std::atomic<int64_t> bytes_{0};
  std::mutex cache_mutex_;
  std::multimap<int64_t, uint8_t*> cache_;  // GUARDED_BY(cache_mutex_)
  int64_t cached_bytes_ = 0;                // GUARDED_BY(cache_mutex_)
};

// Owns one pool allocation; frees it when the last Buffer referring to it goes.
struct PoolAllocation {
  PoolAllocation(MemoryPool* pool, uint8_t* data, int64_t size)
      : pool(pool), data(data), size(size) {}
  ~PoolAllocation() { pool->Free(data, size); }
  PoolAllocation(const PoolAllocation&) = delete;
  PoolAllocation& operator=(const PoolAllocation&) = delete;
  MemoryPool* pool;
  uint8_t* data;
  int64_t size;
};

}  // namespace

MemoryPool* default_memory_pool() {
  static HeapPool* pool = new HeapPool();  // never destroyed: buffers may outlive statics
  return pool;
}

Result<std::shared_ptr<Buffer>> Buffer::Allocate(int64_t size, MemoryPool* pool) {
  if (size < 0) return Status::Invalid("negative buffer size " + std::to_string(size));
  if (size > kMaxAllocation) return TooLarge(size);
  int64_t padded = PaddedSize(size);
  FERRY_ASSIGN_OR_RAISE(uint8_t * data, pool->Allocate(padded));
  if (padded > size) std::memset(data + size, 0, static_cast<size_t>(padded - size));
  auto owner = std::make_shared<PoolAllocation>(pool, data, padded);
  return std::make_shared<Buffer>(data, size, std::move(owner));
}

Result<std::shared_ptr<Buffer>> Buffer::CopyOf(const void* data, int64_t size, MemoryPool* pool) {
  FERRY_ASSIGN_OR_RAISE(auto buffer, Allocate(size, pool));
  if (size > 0) std::memcpy(buffer->mutable_data(), data, static_cast<size_t>(size));
  telemetry::Add(telemetry::Counter::kBytesCopiedHost, size);
  return buffer;
}

std::shared_ptr<Buffer> Buffer::SliceOf(const std::shared_ptr<Buffer>& parent, int64_t offset,
                                        int64_t length) {
  offset = std::clamp<int64_t>(offset, 0, parent->size());
  length = std::clamp<int64_t>(length, 0, parent->size() - offset);
  // The slice keeps the parent (and through it the memory's owner) alive.
  return std::make_shared<Buffer>(parent->data() + offset, length,
                                  std::static_pointer_cast<const void>(parent));
}

int64_t CountSetBits(const uint8_t* bits, int64_t offset, int64_t length) {
  int64_t count = 0;
  int64_t i = offset;
  const int64_t end = offset + length;
  // Leading bits up to a byte boundary, then whole 64-bit words, then the tail.
  for (; i < end && (i & 7) != 0; ++i) count += GetBit(bits, i);
  for (; i + 64 <= end; i += 64) {
    uint64_t word;
    std::memcpy(&word, bits + (i >> 3), sizeof(word));
    count += std::popcount(word);
  }
  for (; i < end; ++i) count += GetBit(bits, i);
  return count;
}

}  // namespace ferry
