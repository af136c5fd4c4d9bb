// The publisher's payload memory: a MemoryPool over memfd segments.
//
// Allocations are 64-byte aligned blocks of a binary buddy allocator inside
// segments of `segment_size` bytes (a power of two); an allocation larger
// than a segment gets a dedicated segment of its own, retired (unmapped,
// closed, announced) as soon as it is freed. New segments are created on
// demand while the total stays within `max_memory`; beyond it, Allocate asks
// the reclaimer (the publisher: drain drop tokens, then sleep on the
// doorbell) to make room and fails with OutOfMemory after `wait_timeout`.
//
// The buddy free lists are threaded through the free blocks themselves:
// only the publisher can write segment memory (subscribers map it read-only),
// so nothing another process writes is ever trusted here. Per 64-byte block
// one private byte records whether it starts a free or used block and its
// order.
//
// Segment ids are never reused. Every creation and retirement is queued as an
// Event for the publisher to announce; an Event keeps its segment's
// descriptor open until it has been handled.
//
// Thread-safe (one mutex). Lifetime: buffers allocated here may outlive the
// publisher: Orphan() makes the pool keep itself alive until the last
// allocation is freed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "ferry/exchange/buffer.h"
#include "flow/transport/batch_header.h"
#include "flow/transport/shm.h"

namespace ferry::flow::internal {

class BuddyArena;

struct Segment {
  Segment();
  ~Segment();
  uint32_t id = 0;
  bool dedicated = false;
  UniqueFd fd;            // read-write, kept by the publisher
  UniqueFd read_only_fd;  // what subscribers receive
  Mapping mapping;
  std::unique_ptr<BuddyArena> arena;  // regular segments
  int64_t allocations = 0;            // live allocations in this segment
};
using SegmentPtr = std::shared_ptr<const Segment>;

class SegmentPool final : public MemoryPool {
 public:
  struct Options {
    std::string channel;                       // names the memfds ("ferry:<channel>:<id>")
    int64_t segment_size = int64_t{64} << 20;  // rounded down to a power of two
    int64_t max_memory = int64_t{4} << 30;
  };
  static Result<std::shared_ptr<SegmentPool>> Make(const Options& options);
  ~SegmentPool() override;

  Result<uint8_t*> Allocate(int64_t size) override;
  Result<uint8_t*> Reallocate(uint8_t* data, int64_t old_size, int64_t new_size) override;
  void Free(uint8_t* data, int64_t size) override;
  int64_t bytes_allocated() const override {
    return bytes_allocated_.load(std::memory_order_relaxed);
  }
  std::string_view name() const override { return name_; }

  int64_t segment_size() const { return segment_size_; }
  int64_t max_memory() const { return max_memory_; }
  // Bytes of all live segments together.
  int64_t mapped_bytes() const;
  int64_t segment_count() const;

  struct Event {
    enum class Kind { kCreated, kRetired } kind;
    SegmentPtr segment;
  };
  // Cheap check (one atomic load) before TakeEvents.
  bool HasEvents() const { return pending_events_.load(std::memory_order_acquire) != 0; }
  // Moves the queued events, oldest first, to the end of `out`.
  void TakeEvents(std::vector<Event>* out);
  // The live segments, by id.
  std::vector<SegmentPtr> LiveSegments() const;

  // Address → (segment, offset) lookups under the pool's lock, so that a
  // whole message can be located with one lock.
  class Lookup {
   public:
    // Where [data, data + size) lies. Invalid when it is not inside one
    // live segment of this pool.
    Result<wire::BufferLocation> Locate(const uint8_t* data, int64_t size) const;

   private:
    friend class SegmentPool;
    Lookup(const SegmentPool* pool, std::unique_lock<std::mutex> lock)
        : pool_(pool), lock_(std::move(lock)) {}
    const SegmentPool* pool_;
    std::unique_lock<std::mutex> lock_;
  };
  Lookup LockForLookup() const { return Lookup(this, std::unique_lock<std::mutex>(mutex_)); }

  // Called without the pool's lock when memory is short: should free what it
  // can and, if nothing could be freed, wait up to `slice` for drops.
  using Reclaimer = std::function<void(std::chrono::nanoseconds slice)>;
  void SetReclaimer(Reclaimer reclaimer, std::chrono::nanoseconds wait_timeout);
  // Waits for a running reclaimer to return; none runs afterwards.
  void ClearReclaimer();

  // The owner lets go of `pool`: it stays alive until its last allocation is
  // freed (then it unmaps everything), and stops queueing events.
  static void Orphan(const std::shared_ptr<SegmentPool>& pool);

 private:
  SegmentPool(const Options& options, int64_t segment_size);

  // With mutex_ held. nullptr (and OK) when memory is exhausted for now.
  Result<uint8_t*> TryAllocateLocked(int64_t size);
  Result<Segment*> AddSegmentLocked(int64_t size, bool dedicated);
  Segment* FindSegmentLocked(const uint8_t* address) const;
  void RetireLocked(Segment* segment);
  void QueueEventLocked(Event::Kind kind, SegmentPtr segment);

  const std::string name_;
  const std::string channel_;
  const int64_t segment_size_;
  const int64_t max_memory_;

  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<Segment>> segments_;  // sorted by mapping address
  std::vector<Segment*> regular_;                   // regular segments, in creation order
  uint32_t next_segment_id_ = 0;
  int64_t mapped_bytes_ = 0;
  int64_t live_allocations_ = 0;
  std::vector<Event> events_;
  std::atomic<int64_t> pending_events_{0};
  bool orphaned_ = false;
  std::shared_ptr<SegmentPool> keep_alive_;  // set by Orphan while allocations remain
  std::atomic<int64_t> bytes_allocated_{0};

  std::shared_mutex reclaimer_mutex_;
  Reclaimer reclaimer_;
  std::chrono::nanoseconds wait_timeout_{0};
};

}  // namespace ferry::flow::internal
