#include "ferry/exchange/buffer.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <limits>
#include <string>

#include "ferry/telemetry/telemetry.h"

namespace ferry {
namespace {

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
    int64_t padded = PaddedSize(size == 0 ? 1 : size);
    void* memory = std::aligned_alloc(kBufferAlignment, static_cast<size_t>(padded));
    if (memory == nullptr) {
      return Status::OutOfMemory("failed to allocate " + std::to_string(size) + " bytes");
    }
    bytes_.fetch_add(size, std::memory_order_relaxed);
    return static_cast<uint8_t*>(memory);
  }

  Result<uint8_t*> Reallocate(uint8_t* data, int64_t old_size, int64_t new_size) override {
    FERRY_ASSIGN_OR_RAISE(uint8_t* fresh, Allocate(new_size));
    if (data != nullptr) {
      std::memcpy(fresh, data, static_cast<size_t>(std::min(old_size, new_size)));
      Free(data, old_size);
    }
    return fresh;
  }

  void Free(uint8_t* data, int64_t size) override {
    if (data == nullptr) return;
    std::free(data);
    bytes_.fetch_sub(size, std::memory_order_relaxed);
  }

  int64_t bytes_allocated() const override { return bytes_.load(std::memory_order_relaxed); }
  std::string_view name() const override { return "heap"; }

 private:
  std::atomic<int64_t> bytes_{0};
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
