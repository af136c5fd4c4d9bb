#include "flow/transport/ring.h"

#include <string>

namespace ferry::flow::internal {
namespace {

// How often a consumer retries after losing the tail to the producer's drops
// before it calls the ring broken (an honest producer drops at most one
// descriptor per push, so this is never reached in practice).
constexpr int kMaxClaimAttempts = 1 << 16;

void StoreDescriptor(SharedDescriptor& slot, const Descriptor& descriptor) {
  slot.words[0].store(descriptor.sequence, std::memory_order_relaxed);
  slot.words[1].store(descriptor.message_id, std::memory_order_relaxed);
  slot.words[2].store(uint64_t{descriptor.entry_slot} | uint64_t{descriptor.schema_id} << 32,
                      std::memory_order_relaxed);
  slot.words[3].store(uint64_t{descriptor.header_segment} | uint64_t{descriptor.flags} << 32,
                      std::memory_order_relaxed);
  slot.words[4].store(descriptor.header_offset, std::memory_order_relaxed);
  slot.words[5].store(descriptor.header_length, std::memory_order_relaxed);
  slot.words[6].store(descriptor.reserved, std::memory_order_relaxed);
  slot.words[7].store(0, std::memory_order_relaxed);
}

Descriptor LoadDescriptor(const SharedDescriptor& slot) {
  Descriptor descriptor;
  descriptor.sequence = slot.words[0].load(std::memory_order_relaxed);
  descriptor.message_id = slot.words[1].load(std::memory_order_relaxed);
  const uint64_t ids = slot.words[2].load(std::memory_order_relaxed);
  descriptor.entry_slot = static_cast<uint32_t>(ids);
  descriptor.schema_id = static_cast<uint32_t>(ids >> 32);
  const uint64_t segment_and_flags = slot.words[3].load(std::memory_order_relaxed);
  descriptor.header_segment = static_cast<uint32_t>(segment_and_flags);
  descriptor.flags = static_cast<uint32_t>(segment_and_flags >> 32);
  descriptor.header_offset = slot.words[4].load(std::memory_order_relaxed);
  descriptor.header_length = slot.words[5].load(std::memory_order_relaxed);
  descriptor.reserved = slot.words[6].load(std::memory_order_relaxed);
  return descriptor;
}

Status CorruptedRing(const char* which, uint64_t head, uint64_t tail, uint32_t capacity) {
  return Status::Invalid(std::string("corrupted ") + which + ": head " + std::to_string(head) +
                         ", tail " + std::to_string(tail) + ", capacity " +
                         std::to_string(capacity));
}

}  // namespace

DescriptorProducer::DescriptorProducer(RingIndices* indices, SharedDescriptor* slots,
                                       uint32_t capacity)
    : indices_(indices), slots_(slots), capacity_(capacity) {
  indices_->head.store(0, std::memory_order_relaxed);
  indices_->tail.store(0, std::memory_order_relaxed);
}

Result<uint64_t> DescriptorProducer::LoadTail() {
  const uint64_t tail = indices_->tail.load(std::memory_order_acquire);
  // The tail only moves forward and never passes the head.
  if (tail < last_tail_ || tail > head_ || head_ - tail > capacity_) {
    return CorruptedRing("descriptor ring", head_, tail, capacity_);
  }
  last_tail_ = tail;
  return tail;
}

Result<uint64_t> DescriptorProducer::Queued() {
  FERRY_ASSIGN_OR_RAISE(uint64_t tail, LoadTail());
  return head_ - tail;
}

Result<std::optional<uint64_t>> DescriptorProducer::TryPush(Descriptor descriptor) {
  FERRY_ASSIGN_OR_RAISE(uint64_t tail, LoadTail());
  if (head_ - tail >= capacity_) return std::optional<uint64_t>();
  descriptor.sequence = head_;
  StoreDescriptor(slots_[head_ % capacity_], descriptor);
  ++head_;
  indices_->head.store(head_, std::memory_order_release);
  return std::optional<uint64_t>(descriptor.sequence);
}

Result<std::optional<uint64_t>> DescriptorProducer::DropOldest() {
  FERRY_ASSIGN_OR_RAISE(uint64_t tail, LoadTail());
  if (head_ - tail < capacity_) return std::optional<uint64_t>();
  uint64_t expected = tail;
  if (indices_->tail.compare_exchange_strong(expected, tail + 1, std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
    last_tail_ = tail + 1;
    return std::optional<uint64_t>(tail);
  }
  // The consumer claimed it: there is room now (checked by the caller's next push).
  return std::optional<uint64_t>();
}

DescriptorConsumer::DescriptorConsumer(RingIndices* indices, const SharedDescriptor* slots,
                                       uint32_t capacity)
    : indices_(indices), slots_(slots), capacity_(capacity) {}

bool DescriptorConsumer::MaybeNonEmpty() const {
  return indices_->head.load(std::memory_order_acquire) !=
         indices_->tail.load(std::memory_order_acquire);
}

Result<std::optional<Descriptor>> DescriptorConsumer::TryPop(
    std::optional<Descriptor>* claimed_on_error) {
  for (int attempt = 0; attempt < kMaxClaimAttempts; ++attempt) {
    uint64_t tail = indices_->tail.load(std::memory_order_acquire);
    const uint64_t head = indices_->head.load(std::memory_order_acquire);
    if (head < tail || head - tail > capacity_) {
      // The producer may have dropped (moved the tail) between the two loads.
      if (indices_->tail.load(std::memory_order_acquire) != tail) continue;
      return CorruptedRing("descriptor ring", head, tail, capacity_);
    }
    if (head == tail) return std::optional<Descriptor>();
    const Descriptor descriptor = LoadDescriptor(slots_[tail % capacity_]);
    // seq_cst: the subscriber's doorbell check after a claim relies on it
    // (SubscriberChannel::RingDoorbellAfterClaim).
    if (!indices_->tail.compare_exchange_strong(tail, tail + 1, std::memory_order_seq_cst,
                                                std::memory_order_acquire)) {
      continue;  // dropped by the producer while we read it
    }
    if (descriptor.sequence != tail) {
      if (claimed_on_error != nullptr) *claimed_on_error = descriptor;
      return Status::Invalid("corrupted descriptor: slot for sequence " + std::to_string(tail) +
                             " is stamped " + std::to_string(descriptor.sequence));
    }
    return std::optional<Descriptor>(descriptor);
  }
  return Status::Invalid("corrupted descriptor ring: the tail keeps moving");
}

ReleaseProducer::ReleaseProducer(RingIndices* indices, SharedRelease* slots, uint32_t capacity)
    : indices_(indices), slots_(slots), capacity_(capacity) {}

Result<bool> ReleaseProducer::TryPush(uint64_t message_id, uint32_t entry_slot) {
  const uint64_t tail = indices_->tail.load(std::memory_order_acquire);
  if (tail > head_ || head_ - tail > capacity_) {
    return CorruptedRing("release ring", head_, tail, capacity_);
  }
  if (head_ - tail == capacity_) return false;
  SharedRelease& slot = slots_[head_ % capacity_];
  slot.message_id.store(message_id, std::memory_order_relaxed);
  slot.entry_slot.store(entry_slot, std::memory_order_relaxed);
  ++head_;
  indices_->head.store(head_, std::memory_order_release);
  return true;
}

ReleaseConsumer::ReleaseConsumer(RingIndices* indices, const SharedRelease* slots,
                                 uint32_t capacity)
    : indices_(indices), slots_(slots), capacity_(capacity) {}

}  // namespace ferry::flow::internal
