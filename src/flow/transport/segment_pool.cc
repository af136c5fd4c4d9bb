#include "flow/transport/segment_pool.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "flow/transport/futex.h"

namespace ferry::flow::internal {

// A binary buddy allocator over [base, base + size), size = 64 << max_order.
class BuddyArena {
 public:
  static constexpr int64_t kBlock = kBufferAlignment;

  BuddyArena(uint8_t* base, int64_t size)
      : base_(base),
        max_order_(std::countr_zero(static_cast<uint64_t>(size / kBlock))),
        heads_(static_cast<size_t>(max_order_) + 1, kNone),
        state_(static_cast<size_t>(size / kBlock), 0) {
    PushFree(0, max_order_);
  }

  int64_t capacity() const { return kBlock << max_order_; }

  // The order of the smallest block holding `size` bytes, or -1 if none can.
  int OrderFor(int64_t size) const {
    const uint64_t blocks =
        static_cast<uint64_t>(std::max<int64_t>(1, (size + kBlock - 1) / kBlock));
    const int order = static_cast<int>(std::bit_width(blocks - 1));
    return order <= max_order_ ? order : -1;
  }

  // Offset of a free block of at least `size` bytes, now used; -1 if none.
  int64_t Allocate(int64_t size) {
    const int order = OrderFor(size);
    if (order < 0) return -1;
    int found = order;
    while (found <= max_order_ && heads_[static_cast<size_t>(found)] == kNone) ++found;
    if (found > max_order_) return -1;
    const uint32_t index = heads_[static_cast<size_t>(found)];
    RemoveFree(index, found);
    // Split, keeping the lower half and freeing the upper halves.
    while (found > order) {
      --found;
      PushFree(index + (uint32_t{1} << found), found);
    }
    state_[index] = static_cast<uint8_t>(kUsed | order);
    return static_cast<int64_t>(index) * kBlock;
  }

  // Bytes of the used block starting at `offset`; 0 if none starts there.
  int64_t UsedBlockSize(int64_t offset) const {
    if (offset < 0 || offset % kBlock != 0 || offset >= capacity()) return 0;
    const uint8_t state = state_[static_cast<size_t>(offset / kBlock)];
    if ((state & kUsed) == 0) return 0;
    return kBlock << (state & kOrderMask);
  }

  // Frees the used block at `offset`; false if no used block starts there.
  bool Free(int64_t offset) {
    if (UsedBlockSize(offset) == 0) return false;
    uint32_t index = static_cast<uint32_t>(offset / kBlock);
    int order = state_[index] & kOrderMask;
    state_[index] = 0;
    while (order < max_order_) {
      const uint32_t buddy = index ^ (uint32_t{1} << order);
      if (state_[buddy] != (kFree | order)) break;
      RemoveFree(buddy, order);
      index = std::min(index, buddy);
      ++order;
    }
    PushFree(index, order);
    return true;
  }

  // Marks the used block at `offset` free in the private bookkeeping only,
  // never to be handed out again (orphaned pools: no writes into the block).
  bool Forget(int64_t offset) {
    if (UsedBlockSize(offset) == 0) return false;
    state_[static_cast<size_t>(offset / kBlock)] = 0;
    return true;
  }

  bool empty() const { return heads_[static_cast<size_t>(max_order_)] != kNone; }

 private:
  struct Links {
    uint32_t next;
    uint32_t prev;
  };
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  static constexpr uint8_t kFree = 0x40;
  static constexpr uint8_t kUsed = 0x80;
  static constexpr uint8_t kOrderMask = 0x3f;

  Links ReadLinks(uint32_t index) const {
    Links links{};
    std::memcpy(&links, base_ + static_cast<int64_t>(index) * kBlock, sizeof(links));
    return links;
  }
  void WriteLinks(uint32_t index, Links links) {
    std::memcpy(base_ + static_cast<int64_t>(index) * kBlock, &links, sizeof(links));
  }

  void PushFree(uint32_t index, int order) {
    uint32_t& head = heads_[static_cast<size_t>(order)];
    WriteLinks(index, Links{head, kNone});
    if (head != kNone) {
      Links old_head = ReadLinks(head);
      old_head.prev = index;
      WriteLinks(head, old_head);
    }
    head = index;
    state_[index] = static_cast<uint8_t>(kFree | order);
  }

  void RemoveFree(uint32_t index, int order) {
    const Links links = ReadLinks(index);
    if (links.prev != kNone) {
      Links previous = ReadLinks(links.prev);
      previous.next = links.next;
      WriteLinks(links.prev, previous);
    } else {
      heads_[static_cast<size_t>(order)] = links.next;
    }
    if (links.next != kNone) {
      Links next = ReadLinks(links.next);
      next.prev = links.prev;
      WriteLinks(links.next, next);
    }
    state_[index] = 0;
  }

  uint8_t* base_;
  int max_order_;
  std::vector<uint32_t> heads_;
  std::vector<uint8_t> state_;
};

Segment::Segment() = default;
Segment::~Segment() = default;

namespace {

constexpr int64_t kMinSegmentSize = int64_t{64} << 10;
constexpr int64_t kMaxSegmentSize = int64_t{1} << 36;  // keeps block indices within 32 bits
constexpr int64_t kPageSize = 4096;

int64_t RoundDownToPowerOfTwo(int64_t value) {
  return static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(value)));
}

Status Exhausted(int64_t size, int64_t mapped, int64_t max_memory) {
  return Status::OutOfMemory("channel memory exhausted: cannot allocate " + std::to_string(size) +
                             " bytes with " + std::to_string(mapped) + " of max_memory " +
                             std::to_string(max_memory) +
                             " bytes mapped and in use (subscribers still hold the messages)");
}

}  // namespace

Result<std::shared_ptr<SegmentPool>> SegmentPool::Make(const Options& options) {
  if (options.max_memory < kMinSegmentSize) {
    return Status::Invalid("max_memory must be at least " + std::to_string(kMinSegmentSize) +
                           " bytes, got " + std::to_string(options.max_memory));
  }
  if (options.segment_size < kMinSegmentSize) {
    return Status::Invalid("segment_size must be at least " + std::to_string(kMinSegmentSize) +
                           " bytes, got " + std::to_string(options.segment_size));
  }
  int64_t segment_size = std::min({options.segment_size, options.max_memory, kMaxSegmentSize});
  segment_size = RoundDownToPowerOfTwo(segment_size);
  return std::shared_ptr<SegmentPool>(new SegmentPool(options, segment_size));
}

SegmentPool::SegmentPool(const Options& options, int64_t segment_size)
    : name_("ferry-shm:" + options.channel),
      channel_(options.channel),
      segment_size_(segment_size),
      max_memory_(options.max_memory) {}

SegmentPool::~SegmentPool() = default;

int64_t SegmentPool::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return mapped_bytes_;
}

int64_t SegmentPool::segment_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(segments_.size());
}

Result<Segment*> SegmentPool::AddSegmentLocked(int64_t size, bool dedicated) {
  auto segment = std::make_shared<Segment>();
  segment->id = next_segment_id_;
  segment->dedicated = dedicated;
  const std::string debug_name = "ferry:" + channel_ + ":" + std::to_string(segment->id);
  FERRY_ASSIGN_OR_RAISE(segment->fd, CreateSealedMemfd(debug_name, size));
  FERRY_ASSIGN_OR_RAISE(segment->read_only_fd, ReopenReadOnly(segment->fd.get()));
  FERRY_ASSIGN_OR_RAISE(segment->mapping, Mapping::Map(segment->fd.get(), size, true));
  if (!dedicated) segment->arena = std::make_unique<BuddyArena>(segment->mapping.data(), size);
  ++next_segment_id_;
  mapped_bytes_ += size;
  Segment* raw = segment.get();
  auto position =
      std::lower_bound(segments_.begin(), segments_.end(), raw->mapping.data(),
                       [](const std::shared_ptr<Segment>& each, const uint8_t* address) {
                         return each->mapping.data() < address;
                       });
  segments_.insert(position, segment);
  if (!dedicated) regular_.push_back(raw);
  QueueEventLocked(Event::Kind::kCreated, std::move(segment));
  return raw;
}

void SegmentPool::QueueEventLocked(Event::Kind kind, SegmentPtr segment) {
  if (orphaned_) return;
  events_.push_back(Event{kind, std::move(segment)});
  pending_events_.store(static_cast<int64_t>(events_.size()), std::memory_order_release);
}

void SegmentPool::TakeEvents(std::vector<Event>* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& event : events_) out->push_back(std::move(event));
  events_.clear();
  pending_events_.store(0, std::memory_order_release);
}

std::vector<SegmentPtr> SegmentPool::LiveSegments() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SegmentPtr> live(segments_.begin(), segments_.end());
  std::sort(live.begin(), live.end(),
            [](const SegmentPtr& left, const SegmentPtr& right) { return left->id < right->id; });
  return live;
}

Segment* SegmentPool::FindSegmentLocked(const uint8_t* address) const {
  auto after = std::upper_bound(segments_.begin(), segments_.end(), address,
                                [](const uint8_t* value, const std::shared_ptr<Segment>& each) {
                                  return value < each->mapping.data();
                                });
  if (after == segments_.begin()) return nullptr;
  Segment* segment = std::prev(after)->get();
  const uint8_t* base = segment->mapping.data();
  if (address >= base + segment->mapping.size()) return nullptr;
  return segment;
}

Result<uint8_t*> SegmentPool::TryAllocateLocked(int64_t size) {
  if (size > segment_size_) {
    const int64_t mapped_size = (PaddedSize(size) + kPageSize - 1) / kPageSize * kPageSize;
    if (mapped_bytes_ + mapped_size > max_memory_) return nullptr;
    FERRY_ASSIGN_OR_RAISE(Segment * segment, AddSegmentLocked(mapped_size, /*dedicated=*/true));
    segment->allocations = 1;
    return segment->mapping.data();
  }
  for (Segment* segment : regular_) {
    const int64_t offset = segment->arena->Allocate(size);
    if (offset >= 0) {
      ++segment->allocations;
      return segment->mapping.data() + offset;
    }
  }
  if (mapped_bytes_ + segment_size_ > max_memory_) return nullptr;
  FERRY_ASSIGN_OR_RAISE(Segment * segment, AddSegmentLocked(segment_size_, /*dedicated=*/false));
  const int64_t offset = segment->arena->Allocate(size);
  if (offset < 0) return Status::UnknownError("a fresh segment could not hold an allocation");
  ++segment->allocations;
  return segment->mapping.data() + offset;
}

Result<uint8_t*> SegmentPool::Allocate(int64_t size) {
  if (size < 0) return Status::Invalid("negative allocation size " + std::to_string(size));
  if (size > max_memory_) return Exhausted(size, mapped_bytes(), max_memory_);
  std::optional<Deadline> deadline;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (orphaned_) {
        return Status::Invalid("the channel of " + name_ + " is closed: its publisher is gone");
      }
      Result<uint8_t*> allocated = TryAllocateLocked(size);
      if (!allocated.ok()) {
        return Status::OutOfMemory("cannot map a new segment: " + allocated.status().message());
      }
      if (*allocated != nullptr) {
        ++live_allocations_;
        bytes_allocated_.fetch_add(size, std::memory_order_relaxed);
        return *allocated;
      }
    }
    std::shared_lock<std::shared_mutex> reclaim_lock(reclaimer_mutex_);
    if (!reclaimer_) return Exhausted(size, mapped_bytes(), max_memory_);
    if (!deadline) deadline.emplace(wait_timeout_);
    if (deadline->Expired()) {
      return Status::OutOfMemory(Exhausted(size, mapped_bytes(), max_memory_).message() +
                                 "; timed out waiting for them to drop some");
    }
    reclaimer_(deadline->Remaining(std::chrono::milliseconds(10)));
  }
}

Result<uint8_t*> SegmentPool::Reallocate(uint8_t* data, int64_t old_size, int64_t new_size) {
  if (new_size < 0) return Status::Invalid("negative allocation size " + std::to_string(new_size));
  if (data == nullptr) return Allocate(new_size);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Segment* segment = FindSegmentLocked(data);
    if (segment == nullptr) {
      return Status::Invalid("Reallocate of memory that this pool did not allocate");
    }
    const int64_t offset = data - segment->mapping.data();
    const int64_t capacity =
        segment->dedicated ? segment->mapping.size() : segment->arena->UsedBlockSize(offset);
    if (new_size <= capacity &&
        (segment->dedicated || new_size * 4 > capacity || capacity <= 4096)) {
      // Fits in the block already reserved (and does not waste most of it).
      bytes_allocated_.fetch_add(new_size - old_size, std::memory_order_relaxed);
      return data;
    }
  }
  FERRY_ASSIGN_OR_RAISE(uint8_t * fresh, Allocate(new_size));
  std::memcpy(fresh, data, static_cast<size_t>(std::min(old_size, new_size)));
  Free(data, old_size);
  return fresh;
}

void SegmentPool::RetireLocked(Segment* segment) {
  auto position =
      std::find_if(segments_.begin(), segments_.end(),
                   [&](const std::shared_ptr<Segment>& each) { return each.get() == segment; });
  if (position == segments_.end()) return;
  std::shared_ptr<Segment> retired = std::move(*position);
  segments_.erase(position);
  mapped_bytes_ -= retired->mapping.size();
  QueueEventLocked(Event::Kind::kRetired, std::move(retired));
}

void SegmentPool::Free(uint8_t* data, int64_t size) {
  if (data == nullptr) return;
  std::shared_ptr<SegmentPool> last_reference;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(mutex_);
  Segment* segment = FindSegmentLocked(data);
  if (segment == nullptr) return;  // not ours: nothing sensible to do in a void function
  if (segment->dedicated) {
    if (data != segment->mapping.data()) return;
    RetireLocked(segment);
  } else if (orphaned_) {
    // No more allocations will come, and a subscriber may still read this
    // block: the free lists (written into freed blocks) are left alone.
    if (!segment->arena->Forget(data - segment->mapping.data())) return;
    --segment->allocations;
  } else {
    if (!segment->arena->Free(data - segment->mapping.data())) return;
    --segment->allocations;
  }
  --live_allocations_;
  bytes_allocated_.fetch_sub(size, std::memory_order_relaxed);
  if (live_allocations_ == 0 && keep_alive_ != nullptr) last_reference = std::move(keep_alive_);
}

void SegmentPool::SetReclaimer(Reclaimer reclaimer, std::chrono::nanoseconds wait_timeout) {
  std::unique_lock<std::shared_mutex> lock(reclaimer_mutex_);
  reclaimer_ = std::move(reclaimer);
  wait_timeout_ = wait_timeout;
}

void SegmentPool::ClearReclaimer() {
  std::unique_lock<std::shared_mutex> lock(reclaimer_mutex_);
  reclaimer_ = nullptr;
}

void SegmentPool::Orphan(const std::shared_ptr<SegmentPool>& pool) {
  if (pool == nullptr) return;
  pool->ClearReclaimer();
  std::lock_guard<std::mutex> lock(pool->mutex_);
  pool->orphaned_ = true;
  pool->events_.clear();
  pool->pending_events_.store(0, std::memory_order_release);
  if (pool->live_allocations_ > 0) pool->keep_alive_ = pool;
}

Result<wire::BufferLocation> SegmentPool::Lookup::Locate(const uint8_t* data, int64_t size) const {
  const Segment* segment = pool_->FindSegmentLocked(data);
  if (segment != nullptr) {
    const int64_t offset = data - segment->mapping.data();
    if (size >= 0 && size <= segment->mapping.size() - offset) {
      wire::BufferLocation location;
      location.segment_id = segment->id;
      location.offset = static_cast<uint64_t>(offset);
      location.length = static_cast<uint64_t>(size);
      return location;
    }
    return Status::Invalid("a buffer of " + std::to_string(size) +
                           " bytes runs past the end of its shared-memory segment");
  }
  return Status::Invalid("a buffer of " + std::to_string(size) +
                         " bytes is not in this channel's loaned memory (build it with "
                         "LoanPool() or use SendCopy)");
}

}  // namespace ferry::flow::internal
