// Lock-free rings in shared memory, and their two ends.
//
// Descriptor ring (publisher → one subscriber): single producer, single
// consumer, fixed-size 64-byte descriptors, 64-bit sequence numbers that
// never wrap in practice. The consumer claims a descriptor by CAS on the
// tail, so the producer can also advance the tail to drop the oldest entry
// when the ring is full; whichever CAS wins owns that descriptor, and the
// loser retries. The producer keeps the authoritative head in private memory.
//
// Release ring (one subscriber → publisher): the drop tokens of that
// subscriber, single producer (serialised by the subscriber's mutex),
// single consumer. The consumer keeps the authoritative tail privately.
//
// Trust: the other process can write anything into the shared indices and
// slots. Every index read from shared memory is checked against the private
// copy and the capacity (which both ends keep privately) before it selects a
// slot, and slot indices are always taken modulo the capacity, so a corrupted
// ring produces an Invalid status, never an access outside the ring.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "ferry/base/status.h"

namespace ferry::flow::internal {

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));

inline constexpr size_t kCacheLine = 64;

// The head and tail of one ring, each on its own cache line.
struct RingIndices {
  alignas(kCacheLine) std::atomic<uint64_t> head;  // next sequence to write
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // next sequence to read
};
static_assert(sizeof(RingIndices) == 2 * kCacheLine);

// What one descriptor says (a private copy).
struct Descriptor {
  uint64_t sequence = 0;    // position in the ring (stamped by the producer)
  uint64_t message_id = 0;  // the publisher's message number, from 1
  uint32_t entry_slot = 0;  // the publisher's in-flight slot (echoed back on release)
  uint32_t schema_id = 0;
  uint32_t header_segment = 0;
  uint32_t flags = 0;  // reserved, 0
  uint64_t header_offset = 0;
  uint64_t header_length = 0;
  uint64_t reserved = 0;
};

// A descriptor slot in shared memory: eight words read and written with
// relaxed atomics, because a consumer that loses the tail CAS may have read
// it while the producer rewrote it (it then discards what it read).
struct alignas(kCacheLine) SharedDescriptor {
  std::atomic<uint64_t> words[8];
};
static_assert(sizeof(SharedDescriptor) == kCacheLine);

// A drop token in shared memory.
struct SharedRelease {
  std::atomic<uint64_t> message_id;
  std::atomic<uint64_t> entry_slot;
};
static_assert(sizeof(SharedRelease) == 16);

// The publisher's end of a descriptor ring.
class DescriptorProducer {
 public:
  DescriptorProducer() = default;
  // `indices` and `slots` live in shared memory; the ring starts empty.
  DescriptorProducer(RingIndices* indices, SharedDescriptor* slots, uint32_t capacity);

  uint32_t capacity() const { return capacity_; }
  uint64_t head() const { return head_; }
  // Descriptors queued and not yet claimed. Invalid when the shared tail is
  // outside [last tail seen, head].
  Result<uint64_t> Queued();
  // Writes `descriptor` (its sequence is set here) unless the ring is full.
  // Returns the sequence used, or nullopt when full.
  Result<std::optional<uint64_t>> TryPush(Descriptor descriptor);
  // When the ring is full, takes the oldest descriptor away from the consumer
  // and returns its sequence; nullopt when the consumer claimed it first (so
  // there is room now) or the ring is not full.
  Result<std::optional<uint64_t>> DropOldest();

 private:
  Result<uint64_t> LoadTail();

  RingIndices* indices_ = nullptr;
  SharedDescriptor* slots_ = nullptr;
  uint32_t capacity_ = 0;
  uint64_t head_ = 0;
  uint64_t last_tail_ = 0;
};

// A subscriber's end of a descriptor ring.
class DescriptorConsumer {
 public:
  DescriptorConsumer() = default;
  DescriptorConsumer(RingIndices* indices, const SharedDescriptor* slots, uint32_t capacity);

  // Claims the next descriptor; nullopt when the ring is empty. Invalid when
  // the shared indices are inconsistent or a claimed slot's sequence stamp
  // does not match; in the latter case the slot was claimed all the same and
  // `claimed_on_error` (if given) receives it, so that its message can be
  // handed back. The claim (a CAS on the tail) is sequentially consistent.
  Result<std::optional<Descriptor>> TryPop(std::optional<Descriptor>* claimed_on_error = nullptr);
  // True when a descriptor may be waiting (no validation; a cheap peek).
  bool MaybeNonEmpty() const;

 private:
  RingIndices* indices_ = nullptr;
  const SharedDescriptor* slots_ = nullptr;
  uint32_t capacity_ = 0;
};

// A subscriber's end of its release ring (the caller serialises pushes).
class ReleaseProducer {
 public:
  ReleaseProducer() = default;
  ReleaseProducer(RingIndices* indices, SharedRelease* slots, uint32_t capacity);

  // Starts at sequence 0 (a fresh control segment is zeroed).
  // false when the ring is full (keep the token and retry later); Invalid when
  // the shared tail is corrupted.
  Result<bool> TryPush(uint64_t message_id, uint32_t entry_slot);

 private:
  RingIndices* indices_ = nullptr;
  SharedRelease* slots_ = nullptr;
  uint32_t capacity_ = 0;
  uint64_t head_ = 0;
};

// The publisher's end of a subscriber's release ring.
class ReleaseConsumer {
 public:
  ReleaseConsumer() = default;
  ReleaseConsumer(RingIndices* indices, const SharedRelease* slots, uint32_t capacity);

  // True when tokens may be waiting (a cheap peek, no validation).
  bool MaybePending() const { return indices_->head.load(std::memory_order_acquire) != tail_; }
  // Calls visit(message_id, entry_slot) for every pushed token, in order, and
  // returns how many there were. Invalid when the shared head is corrupted
  // (nothing is visited then).
  template <typename Visit>
  Result<uint64_t> Drain(Visit&& visit) {
    const uint64_t head = indices_->head.load(std::memory_order_acquire);
    if (head < tail_ || head - tail_ > capacity_) {
      return Status::Invalid("corrupted release ring: head " + std::to_string(head) + ", tail " +
                             std::to_string(tail_) + ", capacity " + std::to_string(capacity_));
    }
    const uint64_t count = head - tail_;
    for (; tail_ != head; ++tail_) {
      const SharedRelease& slot = slots_[tail_ % capacity_];
      visit(slot.message_id.load(std::memory_order_relaxed),
            slot.entry_slot.load(std::memory_order_relaxed));
    }
    if (count != 0) indices_->tail.store(tail_, std::memory_order_release);
    return count;
  }

 private:
  RingIndices* indices_ = nullptr;
  const SharedRelease* slots_ = nullptr;
  uint32_t capacity_ = 0;
  uint64_t tail_ = 0;
};

}  // namespace ferry::flow::internal
