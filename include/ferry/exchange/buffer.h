// Immutable, reference-counted byte buffers and the memory pools that
// allocate them. A Buffer never owns its memory directly: it holds a shared
// `owner` whose destruction frees the memory (a pool allocation, an imported
// ArrowArray's release callback, a shared-memory segment's drop token, ...).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include "ferry/base/status.h"

namespace ferry {

inline constexpr int64_t kBufferAlignment = 64;

// Rounds up to a multiple of kBufferAlignment.
constexpr int64_t PaddedSize(int64_t size) {
  return (size + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

// An allocator of 64-byte-aligned memory. Implementations must be
// thread-safe. Loaned shared memory (flow) and device memory implement it too.
class MemoryPool {
 public:
  virtual ~MemoryPool() = default;
  // Allocates at least `size` bytes aligned to kBufferAlignment. size 0 gives a
  // valid non-null pointer. Fails with OutOfMemory, never throws.
  virtual Result<uint8_t*> Allocate(int64_t size) = 0;
  // Grows or shrinks an allocation, keeping min(old_size, new_size) bytes.
  virtual Result<uint8_t*> Reallocate(uint8_t* data, int64_t old_size, int64_t new_size) = 0;
  virtual void Free(uint8_t* data, int64_t size) = 0;
  virtual int64_t bytes_allocated() const = 0;
  virtual std::string_view name() const = 0;
};

// The process-wide heap pool (aligned_alloc). Never destroyed.
MemoryPool* default_memory_pool();

class Buffer {
 public:
  // Wraps memory kept alive by `owner` (may be null for static memory).
  Buffer(const uint8_t* data, int64_t size, std::shared_ptr<const void> owner)
      : data_(data), size_(size), owner_(std::move(owner)) {}

  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data_);
  }
  std::string_view view() const {
    return {reinterpret_cast<const char*>(data_), static_cast<size_t>(size_)};
  }
  bool Equals(const Buffer& other) const {
    return size_ == other.size_ && (size_ == 0 || std::memcmp(data_, other.data_, size_) == 0);
  }

  // Allocates `size` bytes from `pool` (padded to 64 bytes, padding zeroed)
  // and returns a buffer that frees them when its last reference is gone.
  // The memory is writable through mutable_data() until it is shared.
  static Result<std::shared_ptr<Buffer>> Allocate(int64_t size,
                                                  MemoryPool* pool = default_memory_pool());
  // Copies `size` bytes (counted in telemetry as a host memcpy).
  static Result<std::shared_ptr<Buffer>> CopyOf(const void* data, int64_t size,
                                                MemoryPool* pool = default_memory_pool());
  // A view of [offset, offset+length) that keeps this buffer alive. No copy.
  static std::shared_ptr<Buffer> SliceOf(const std::shared_ptr<Buffer>& parent, int64_t offset,
                                         int64_t length);
  // Writable pointer for a buffer that has not been shared yet (builders).
  uint8_t* mutable_data() { return const_cast<uint8_t*>(data_); }

 private:
  const uint8_t* data_;
  int64_t size_;
  std::shared_ptr<const void> owner_;
};

using BufferPtr = std::shared_ptr<Buffer>;

// Bit helpers (LSB bit order, as Arrow).
inline bool GetBit(const uint8_t* bits, int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }
inline void SetBit(uint8_t* bits, int64_t i) { bits[i >> 3] |= uint8_t(1u << (i & 7)); }
inline void ClearBit(uint8_t* bits, int64_t i) { bits[i >> 3] &= uint8_t(~(1u << (i & 7))); }
inline void SetBitTo(uint8_t* bits, int64_t i, bool v) { v ? SetBit(bits, i) : ClearBit(bits, i); }
constexpr int64_t BytesForBits(int64_t bits) { return (bits + 7) / 8; }
// Number of set bits in [offset, offset+length).
int64_t CountSetBits(const uint8_t* bits, int64_t offset, int64_t length);

}  // namespace ferry
