// The publishing end of a channel. No thread of its own: Send, SendCopy,
// Poll, WaitForSubscribers and the pool's reclaimer (when a loan runs short
// of memory) drive accepting subscribers, watching them die (pidfd and
// socket hang-up through one epoll set) and reclaiming drop tokens.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ferry/base/telemetry.h"
#include "ferry/flow/transport.h"
#include "flow/transport/batch_header.h"
#include "flow/transport/device_transport.h"
#include "flow/transport/futex.h"
#include "flow/transport/protocol.h"
#include "flow/transport/ring.h"
#include "flow/transport/schema_codec.h"
#include "flow/transport/segment_pool.h"
#include "flow/transport/shm.h"

namespace ferry::flow {

const char* OverflowPolicyName(OverflowPolicy policy) {
  switch (policy) {
    case OverflowPolicy::kBlock:
      return "block";
    case OverflowPolicy::kDropOldest:
      return "drop_oldest";
    case OverflowPolicy::kDropNewest:
      return "drop_newest";
  }
  return "unknown";
}

Result<OverflowPolicy> OverflowPolicyFromName(std::string_view name) {
  if (name == "block") return OverflowPolicy::kBlock;
  if (name == "drop_oldest") return OverflowPolicy::kDropOldest;
  if (name == "drop_newest") return OverflowPolicy::kDropNewest;
  return Status::Invalid("unknown overflow policy '" + std::string(name) +
                         "' (expected block, drop_oldest or drop_newest)");
}

namespace internal {

Status ValidateChannelName(const std::string& name) {
  if (name.empty() || name.size() > 100) {
    return Status::Invalid("channel name must have 1 to 100 characters, got " +
                           std::to_string(name.size()));
  }
  for (char character : name) {
    const bool allowed = std::isalnum(static_cast<unsigned char>(character)) != 0 ||
                         character == '-' || character == '_' || character == '.' ||
                         character == '/';
    if (!allowed) {
      return Status::Invalid("channel name '" + name +
                             "' may only use letters, digits, '-', '_', '.' and '/'");
    }
  }
  return Status::OK();
}

}  // namespace internal

namespace {

using internal::Clock;
using internal::Deadline;
using internal::Descriptor;
using internal::DescriptorProducer;
using internal::LazyDeadline;
using internal::Mapping;
using internal::Packet;
using internal::PacketKind;
using internal::ReleaseConsumer;
using internal::SegmentPool;
using internal::SegmentPtr;
using internal::UniqueFd;

constexpr auto kEventCheckInterval = std::chrono::milliseconds(1);
constexpr auto kWaitSlice = std::chrono::milliseconds(5);
constexpr auto kHelloTimeout = std::chrono::seconds(5);
constexpr size_t kMaxSubscribers = 1024;
constexpr size_t kMaxPendingConnections = 64;
constexpr uint32_t kMaxHistory = 1u << 20;

// epoll keys: what the descriptor is, in the low bits; whose, above.
enum EpollTag : uint64_t {
  kListenTag = 0,
  kPendingTag = 1,
  kSocketTag = 2,
  kPidfdTag = 3,
  kReclaimTag = 4,
};
constexpr int kEpollTagBits = 3;
uint64_t EpollKey(uint64_t owner, EpollTag tag) { return owner << kEpollTagBits | tag; }

// Release ring of a subscriber whose queue holds `ring_capacity` messages:
// room for the tokens of a few queues' worth of held batches (more spill
// into the subscriber's private list).
uint32_t ReleaseCapacityFor(uint32_t ring_capacity) {
  const uint64_t wanted = std::max<uint64_t>(1024, uint64_t{ring_capacity} * 4);
  return static_cast<uint32_t>(std::min<uint64_t>(internal::kMaxReleaseCapacity, wanted));
}

// A message that subscribers (or the history) still reference.
struct InFlightEntry {
  uint64_t message_id = 0;  // 0: the slot is free
  uint32_t references = 0;
  uint32_t schema_id = 0;
  int64_t bytes = 0;                  // payload described plus the header
  std::vector<ArrayDataPtr> columns;  // keeps the payload alive (capacity reused)
  uint8_t* header = nullptr;          // pool memory, freed with the entry
  wire::BufferLocation header_location;
};

// A socket packet that could not be sent yet (the subscriber has not drained
// its socket); later packets and descriptors wait behind it.
struct OutgoingPacket {
  Packet packet;
  std::string inline_bytes;
  SegmentPtr segment;  // keeps a segment's descriptor open until sent
  int borrowed_fd = -1;
};

struct PendingConnection {
  uint64_t key = 0;
  UniqueFd socket;
  Clock::time_point accepted_at;
};

struct SubscriberState {
  uint64_t key = 0;
  pid_t pid = 0;
  UniqueFd socket;
  UniqueFd pidfd;
  UniqueFd eventfd;
  UniqueFd control_fd;
  Mapping control;
  internal::ControlView view;
  OverflowPolicy overflow = OverflowPolicy::kBlock;  // of this subscriber's queue
  DescriptorProducer ring;
  ReleaseConsumer releases;
  std::vector<uint32_t> queued_slots;  // in-flight slot of each queued sequence
  std::vector<uint8_t> holds;          // per in-flight slot: this subscriber holds it
  std::vector<uint8_t> known_schemas;  // per schema id
  std::deque<OutgoingPacket> backlog;
  bool closing = false;
  bool dead = false;
  std::string dead_reason;
};

struct SchemaRecord {
  SchemaPtr schema;
  int64_t encoded_size = 0;
  std::string encoded;  // empty when the encoding travels in `memfd`
  UniqueFd memfd;       // large encodings: a sealed memfd (read-only descriptor)
};

class PublisherImpl final : public Publisher {
 public:
  PublisherImpl(std::string name, PublisherOptions options)
      : name_(std::move(name)), options_(options) {}
  ~PublisherImpl() override;

  Status Init();

  const std::string& name() const override { return name_; }
  MemoryPool* LoanPool() override { return pool_.get(); }
  Status Send(const RecordBatch& batch, const Metadata& metadata) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return SendLocked(batch, metadata, /*copy=*/false);
  }
  Status SendCopy(const RecordBatch& batch, const Metadata& metadata) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return SendLocked(batch, metadata, /*copy=*/true);
  }
  Status SendDevice(const device::DeviceBatch& batch, const Metadata& metadata) override {
    return device_sender_.Send(*this, batch, metadata, options_.send_timeout);
  }
  Status Poll() override;
  Status WaitForSubscribers(int count, std::chrono::nanoseconds timeout) override;
  ChannelStats stats() const override;
  int wait_fd() const override {
    fd_waiters_.store(true, std::memory_order_relaxed);
    return epoll_.get();
  }

 private:
  Status SendLocked(const RecordBatch& batch, const Metadata& metadata, bool copy);
  Result<RecordBatchPtr> CopyIntoPool(const RecordBatch& batch);
  Result<ArrayDataPtr> CopyArrayIntoPool(const ArrayDataPtr& data);
  Result<uint32_t> SchemaIdFor(const SchemaPtr& schema);

  // Events: accept, hello, hang-up, death. `timeout_ms` 0 never blocks.
  Status ProcessEvents(int timeout_ms);
  void MaybeProcessEvents();
  void AcceptConnections();
  void HandleHello(uint64_t key);
  // Sends kRefused with `reason` (best effort) before the socket is closed.
  void Refuse(int socket, const std::string& reason);
  Status Welcome(UniqueFd socket, uint32_t ring_capacity, OverflowPolicy overflow);
  // When wait_fd() is in use: asks subscribers to write reclaim_fd_ with the
  // next drop token.
  void ArmReclaimFd();
  SubscriberState* FindSubscriber(uint64_t key);
  void MarkDead(SubscriberState& subscriber, std::string reason);
  void SweepDead();

  // Reclaiming.
  void Reclaim();
  void ReleaseReference(SubscriberState& subscriber, uint32_t slot);
  void Unreference(uint32_t slot);
  uint32_t AcquireEntry();
  void AddToHistory(uint32_t slot);
  void ReclaimForPool(std::chrono::nanoseconds slice);
  // Sleeps on the doorbell until a subscriber signals progress or `slice`
  // passes; `ready` is checked once more after announcing that we sleep.
  template <typename Ready>
  void WaitOnDoorbell(std::chrono::nanoseconds slice, Ready&& ready);
  void FreeEntry(InFlightEntry& entry);

  // Delivery.
  Status Deliver(SubscriberState& subscriber, uint32_t slot, LazyDeadline& deadline,
                 bool may_block);
  Status EnsureSchemaSent(SubscriberState& subscriber, uint32_t schema_id);
  void AnnounceSegments();
  void Announce(SubscriberState& subscriber, OutgoingPacket packet);
  // Sends what the backlog holds; true when it is empty afterwards.
  bool FlushBacklog(SubscriberState& subscriber);
  void Wake(SubscriberState& subscriber);

  const std::string name_;
  const PublisherOptions options_;
  std::shared_ptr<SegmentPool> pool_;
  UniqueFd listen_;
  UniqueFd epoll_;
  UniqueFd doorbell_fd_;
  Mapping doorbell_mapping_;
  internal::Doorbell* doorbell_ = nullptr;
  UniqueFd reclaim_fd_;  // eventfd written by subscribers returning tokens
  mutable std::atomic<bool> fd_waiters_{false};

  mutable std::recursive_mutex mutex_;
  uint64_t next_key_ = 1;
  std::vector<PendingConnection> pending_;
  std::vector<std::unique_ptr<SubscriberState>> subscribers_;
  std::vector<InFlightEntry> entries_;
  std::vector<uint32_t> free_entries_;
  std::vector<uint32_t> history_;  // circular, oldest at history_start_
  size_t history_start_ = 0;
  size_t history_count_ = 0;
  std::vector<SchemaRecord> schemas_;  // schema id = index + 1
  const Schema* last_schema_ = nullptr;
  uint32_t last_schema_id_ = 0;
  uint64_t last_message_id_ = 0;
  int64_t last_event_check_ns_ = 0;                 // CoarseNowNs() of the last ProcessEvents
  std::vector<SegmentPool::Event> segment_events_;  // scratch, capacity reused
  bool delivering_ = false;
  ChannelStats stats_;
  internal::DeviceSender device_sender_;  // SendDevice's handle cache (device_transport.h)
};

Status PublisherImpl::Init() {
  if (options_.queue_capacity == 0 || options_.queue_capacity > internal::kMaxRingCapacity) {
    return Status::Invalid("queue_capacity must be in [1, " +
                           std::to_string(internal::kMaxRingCapacity) + "], got " +
                           std::to_string(options_.queue_capacity));
  }
  if (options_.history > kMaxHistory) {
    return Status::Invalid("history must be at most " + std::to_string(kMaxHistory) + ", got " +
                           std::to_string(options_.history));
  }
  if (options_.send_timeout < std::chrono::nanoseconds::zero()) {
    return Status::Invalid("send_timeout must not be negative");
  }
  if (options_.overflow != OverflowPolicy::kBlock &&
      options_.overflow != OverflowPolicy::kDropOldest &&
      options_.overflow != OverflowPolicy::kDropNewest) {
    return Status::Invalid("unknown overflow policy " +
                           std::to_string(static_cast<int>(options_.overflow)));
  }
  SegmentPool::Options pool_options;
  pool_options.channel = name_;
  pool_options.segment_size = options_.segment_size;
  pool_options.max_memory = options_.max_memory;
  FERRY_ASSIGN_OR_RAISE(pool_, SegmentPool::Make(pool_options));

  FERRY_ASSIGN_OR_RAISE(listen_,
                        internal::ListenAbstract(internal::ChannelSocketName(name_), name_));
  FERRY_ASSIGN_OR_RAISE(doorbell_fd_, internal::CreateSealedMemfd("ferry:" + name_ + ":doorbell",
                                                                  internal::kDoorbellSize));
  FERRY_ASSIGN_OR_RAISE(doorbell_mapping_,
                        Mapping::Map(doorbell_fd_.get(), internal::kDoorbellSize, true));
  doorbell_ = reinterpret_cast<internal::Doorbell*>(doorbell_mapping_.data());

  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return internal::ErrnoStatus("epoll_create1", errno);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = EpollKey(0, kListenTag);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listen_.get(), &event) != 0) {
    return internal::ErrnoStatus("epoll_ctl", errno);
  }
  reclaim_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!reclaim_fd_.valid()) return internal::ErrnoStatus("eventfd", errno);
  event.events = EPOLLIN;
  event.data.u64 = EpollKey(0, kReclaimTag);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, reclaim_fd_.get(), &event) != 0) {
    return internal::ErrnoStatus("epoll_ctl", errno);
  }
  if (options_.history > 0) history_.assign(options_.history, 0);
  pool_->SetReclaimer([this](std::chrono::nanoseconds slice) { ReclaimForPool(slice); },
                      options_.send_timeout);
  return Status::OK();
}

PublisherImpl::~PublisherImpl() {
  if (pool_ != nullptr) pool_->ClearReclaimer();
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  // Subscribers see the hang-up; what they hold stays mapped on their side.
  subscribers_.clear();
  pending_.clear();
  // Orphan the pool before dropping the in-flight messages: an orphaned pool
  // never writes into freed memory, which a subscriber may still be reading.
  SegmentPool::Orphan(pool_);
  for (InFlightEntry& entry : entries_) {
    if (entry.message_id != 0) FreeEntry(entry);
  }
  entries_.clear();
  schemas_.clear();
}

// ---- Events ----------------------------------------------------------------

void PublisherImpl::MaybeProcessEvents() {
  // The coarse clock keeps this cheap enough for every Send (its tick of a
  // few milliseconds is fine for noticing connections and deaths).
  const int64_t now = internal::CoarseNowNs();
  if (now - last_event_check_ns_ < kEventCheckInterval.count()) return;
  last_event_check_ns_ = now;
  (void)ProcessEvents(0);
}

Status PublisherImpl::ProcessEvents(int timeout_ms) {
  epoll_event events[32];
  int count;
  do {
    count = ::epoll_wait(epoll_.get(), events, 32, timeout_ms);
  } while (count < 0 && errno == EINTR);
  if (count < 0) return internal::ErrnoStatus("epoll_wait", errno);
  for (int index = 0; index < count; ++index) {
    const uint64_t key = events[index].data.u64 >> kEpollTagBits;
    const auto tag =
        static_cast<EpollTag>(events[index].data.u64 & ((uint64_t{1} << kEpollTagBits) - 1));
    switch (tag) {
      case kReclaimTag: {
        // Quiet the descriptor; the caller reclaims.
        uint64_t value;
        ssize_t read_bytes = ::read(reclaim_fd_.get(), &value, sizeof(value));
        (void)read_bytes;
        break;
      }
      case kListenTag:
        AcceptConnections();
        break;
      case kPendingTag:
        HandleHello(key);
        break;
      case kSocketTag: {
        SubscriberState* subscriber = FindSubscriber(key);
        if (subscriber == nullptr || subscriber->dead) break;
        if ((events[index].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) != 0) {
          MarkDead(*subscriber, "hung up");
        } else {
          MarkDead(*subscriber, "sent an unexpected packet after its hello");
        }
        break;
      }
      case kPidfdTag: {
        SubscriberState* subscriber = FindSubscriber(key);
        if (subscriber != nullptr && !subscriber->dead) MarkDead(*subscriber, "process exited");
        break;
      }
    }
  }
  // Connections that never said hello are closed.
  const Clock::time_point now = Clock::now();
  for (size_t index = 0; index < pending_.size();) {
    if (now - pending_[index].accepted_at > kHelloTimeout) {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(index));
    } else {
      ++index;
    }
  }
  SweepDead();
  return Status::OK();
}

void PublisherImpl::AcceptConnections() {
  for (;;) {
    Result<UniqueFd> accepted = internal::AcceptPending(listen_.get());
    if (!accepted.ok() || !accepted->valid()) return;
    if (pending_.size() >= kMaxPendingConnections) continue;  // closes it
    PendingConnection connection;
    connection.key = next_key_++;
    connection.socket = std::move(*accepted);
    connection.accepted_at = Clock::now();
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.u64 = EpollKey(connection.key, kPendingTag);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, connection.socket.get(), &event) != 0) continue;
    const uint64_t key = connection.key;
    pending_.push_back(std::move(connection));
    HandleHello(key);  // the hello may already be there
  }
}

void PublisherImpl::HandleHello(uint64_t key) {
  auto position = std::find_if(pending_.begin(), pending_.end(),
                               [&](const PendingConnection& each) { return each.key == key; });
  if (position == pending_.end()) return;
  Packet hello;
  Result<internal::ReceivedPacket> received =
      internal::ReceivePacket(position->socket.get(), &hello, sizeof(hello));
  if (received.ok() && received->size == 0 && !received->closed && !received->truncated) {
    return;  // nothing yet
  }
  UniqueFd socket = std::move(position->socket);
  pending_.erase(position);  // closing removes it from the epoll set
  if (!received.ok() || received->closed || received->truncated || received->fd_count != 0 ||
      received->size != sizeof(Packet) || hello.magic != internal::kPacketMagic ||
      hello.kind != static_cast<uint16_t>(PacketKind::kHello) ||
      hello.version != internal::kProtocolVersion) {
    return;  // not one of ours: hang up
  }
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, socket.get(), nullptr);
  if (subscribers_.size() >= kMaxSubscribers) {
    Refuse(socket.get(),
           "the channel already has " + std::to_string(kMaxSubscribers) + " subscribers");
    return;
  }
  // The queue it asks for; zeros (older subscribers send nothing else) mean
  // the channel's defaults.
  uint32_t ring_capacity = options_.queue_capacity;
  if (hello.values[2] != 0) {
    if (hello.values[2] > internal::kMaxRingCapacity) {
      Refuse(socket.get(), "queue_capacity must be in [1, " +
                               std::to_string(internal::kMaxRingCapacity) + "], got " +
                               std::to_string(hello.values[2]));
      return;
    }
    ring_capacity = static_cast<uint32_t>(hello.values[2]);
  }
  OverflowPolicy overflow = options_.overflow;
  if (hello.values[3] != 0) {
    const uint64_t policy = hello.values[3] - 1;
    if (policy > static_cast<uint64_t>(OverflowPolicy::kDropNewest)) {
      Refuse(socket.get(), "unknown overflow policy " + std::to_string(policy));
      return;
    }
    overflow = static_cast<OverflowPolicy>(policy);
  }
  (void)Welcome(std::move(socket), ring_capacity, overflow);
}

void PublisherImpl::Refuse(int socket, const std::string& reason) {
  const std::string text = reason.substr(0, internal::kMaxRefusalReason);
  Packet refusal;
  refusal.kind = static_cast<uint16_t>(PacketKind::kRefused);
  refusal.values[0] = text.size();
  std::string bytes(reinterpret_cast<const char*>(&refusal), sizeof(refusal));
  bytes += text;
  // A subscriber whose socket is full learns nothing but the hang-up.
  (void)internal::SendPacket(socket, bytes.data(), bytes.size(), nullptr, 0, /*timeout_ms=*/0);
}

Status PublisherImpl::Welcome(UniqueFd socket, uint32_t ring_capacity, OverflowPolicy overflow) {
  auto subscriber = std::make_unique<SubscriberState>();
  subscriber->key = next_key_++;
  FERRY_ASSIGN_OR_RAISE(subscriber->pid, internal::PeerPid(socket.get()));
  FERRY_ASSIGN_OR_RAISE(subscriber->pidfd, internal::OpenPidfd(subscriber->pid));
  subscriber->socket = std::move(socket);

  subscriber->overflow = overflow;
  const uint32_t release_capacity = ReleaseCapacityFor(ring_capacity);
  const int64_t control_size = internal::ControlSize(ring_capacity, release_capacity);
  FERRY_ASSIGN_OR_RAISE(subscriber->control_fd,
                        internal::CreateSealedMemfd("ferry:" + name_ + ":control", control_size));
  FERRY_ASSIGN_OR_RAISE(subscriber->control,
                        Mapping::Map(subscriber->control_fd.get(), control_size, true));
  subscriber->view = internal::ViewControl(subscriber->control.data(), ring_capacity);
  internal::ControlBlock* block = subscriber->view.block;
  block->magic = internal::kControlMagic;
  block->version = internal::kProtocolVersion;
  block->ring_capacity = ring_capacity;
  block->release_capacity = release_capacity;
  subscriber->ring =
      DescriptorProducer(&block->descriptors, subscriber->view.descriptors, ring_capacity);
  subscriber->releases =
      ReleaseConsumer(&block->releases, subscriber->view.releases, release_capacity);
  subscriber->queued_slots.assign(ring_capacity, 0);
  subscriber->holds.assign(entries_.size(), 0);
  subscriber->known_schemas.assign(schemas_.size() + 1, 0);
  subscriber->eventfd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!subscriber->eventfd.valid()) return internal::ErrnoStatus("eventfd", errno);

  Packet welcome;
  welcome.kind = static_cast<uint16_t>(PacketKind::kWelcome);
  welcome.values[0] = ring_capacity;
  welcome.values[1] = release_capacity;
  welcome.values[2] = static_cast<uint64_t>(control_size);
  welcome.values[3] = static_cast<uint64_t>(::getpid());
  welcome.values[4] = static_cast<uint64_t>(overflow);
  const int fds[4] = {subscriber->control_fd.get(), doorbell_fd_.get(), subscriber->eventfd.get(),
                      reclaim_fd_.get()};
  FERRY_RETURN_NOT_OK(
      internal::SendPacket(subscriber->socket.get(), &welcome, sizeof(welcome), fds, 4));

  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.u64 = EpollKey(subscriber->key, kSocketTag);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, subscriber->socket.get(), &event) != 0) {
    return internal::ErrnoStatus("epoll_ctl", errno);
  }
  event.events = EPOLLIN;
  event.data.u64 = EpollKey(subscriber->key, kPidfdTag);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, subscriber->pidfd.get(), &event) != 0) {
    return internal::ErrnoStatus("epoll_ctl", errno);
  }

  // Existing subscribers hear about pending segments first, so that the
  // snapshot below and later events do not overlap more than necessary (the
  // subscriber ignores a segment announced twice).
  AnnounceSegments();
  SubscriberState& added = *subscriber;
  subscribers_.push_back(std::move(subscriber));
  ++stats_.subscribers;
  for (const SegmentPtr& segment : pool_->LiveSegments()) {
    OutgoingPacket packet;
    packet.packet.kind = static_cast<uint16_t>(PacketKind::kSegment);
    packet.packet.values[0] = segment->id;
    packet.packet.values[1] = static_cast<uint64_t>(segment->mapping.size());
    packet.segment = segment;
    Announce(added, std::move(packet));
  }
  // A late joiner first receives the history, oldest first (the newest ones
  // if the history is longer than its queue).
  const size_t skip =
      history_count_ > added.ring.capacity() ? history_count_ - added.ring.capacity() : 0;
  LazyDeadline no_wait(std::chrono::nanoseconds::zero());
  for (size_t index = skip; index < history_count_ && !added.dead; ++index) {
    const uint32_t slot = history_[(history_start_ + index) % history_.size()];
    (void)Deliver(added, slot, no_wait, /*may_block=*/false);
  }
  return Status::OK();
}

SubscriberState* PublisherImpl::FindSubscriber(uint64_t key) {
  for (auto& subscriber : subscribers_) {
    if (subscriber->key == key) return subscriber.get();
  }
  return nullptr;
}

void PublisherImpl::MarkDead(SubscriberState& subscriber, std::string reason) {
  if (subscriber.dead) return;
  subscriber.dead = true;
  subscriber.dead_reason = std::move(reason);
}

void PublisherImpl::SweepDead() {
  // Subscribers are referred to by reference while a message is delivered.
  if (delivering_) return;
  for (size_t index = 0; index < subscribers_.size();) {
    SubscriberState& subscriber = *subscribers_[index];
    if (!subscriber.dead) {
      ++index;
      continue;
    }
    // Everything it had queued or held is released: it will never read it.
    for (uint32_t slot = 0; slot < subscriber.holds.size(); ++slot) {
      if (subscriber.holds[slot] != 0) {
        subscriber.holds[slot] = 0;
        Unreference(slot);
      }
    }
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, subscriber.socket.get(), nullptr);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, subscriber.pidfd.get(), nullptr);
    if (!subscriber.closing) --stats_.subscribers;
    ++stats_.subscribers_lost;
    subscribers_.erase(subscribers_.begin() + static_cast<std::ptrdiff_t>(index));
  }
}

Status PublisherImpl::Poll() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  last_event_check_ns_ = internal::CoarseNowNs();
  FERRY_RETURN_NOT_OK(ProcessEvents(0));
  Reclaim();
  AnnounceSegments();
  for (auto& subscriber : subscribers_) {
    if (!subscriber->dead) FlushBacklog(*subscriber);
  }
  SweepDead();
  ArmReclaimFd();
  return Status::OK();
}

void PublisherImpl::ArmReclaimFd() {
  if (!fd_waiters_.load(std::memory_order_relaxed)) return;
  doorbell_->fd_armed.store(1, std::memory_order_seq_cst);
  // Pairs with the subscribers' fence between pushing a token and looking at
  // fd_armed: a token pushed before they could see the flag is seen here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (const auto& subscriber : subscribers_) {
    if (!subscriber->dead && subscriber->releases.MaybePending()) {
      const uint64_t one = 1;
      ssize_t written = ::write(reclaim_fd_.get(), &one, sizeof(one));
      (void)written;
      return;
    }
  }
}

Status PublisherImpl::WaitForSubscribers(int count, std::chrono::nanoseconds timeout) {
  const Deadline deadline(timeout);
  for (;;) {
    {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      last_event_check_ns_ = internal::CoarseNowNs();
      FERRY_RETURN_NOT_OK(ProcessEvents(0));
      Reclaim();
      SweepDead();
      if (stats_.subscribers >= count) return Status::OK();
    }
    if (deadline.Expired()) {
      return Status::TimedOut("channel '" + name_ + "' has " + std::to_string(stats_.subscribers) +
                              " subscribers, waited for " + std::to_string(count));
    }
    // Sleep in epoll (no lock held) until a connection, hello or hang-up is
    // ready; level-triggered, so ProcessEvents sees the same event again.
    const auto slice = deadline.Remaining(std::chrono::milliseconds(20));
    const int timeout_ms = static_cast<int>(
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(slice).count()));
    epoll_event event{};
    (void)::epoll_wait(epoll_.get(), &event, 1, timeout_ms);
  }
}

ChannelStats PublisherImpl::stats() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  ChannelStats stats = stats_;
  stats.segments = pool_->segment_count();
  return stats;
}

// ---- Reclaiming ------------------------------------------------------------

void PublisherImpl::Reclaim() {
  for (auto& subscriber_pointer : subscribers_) {
    SubscriberState& subscriber = *subscriber_pointer;
    if (subscriber.dead) continue;
    if (!subscriber.closing &&
        subscriber.view.block->closing.load(std::memory_order_acquire) != 0) {
      subscriber.closing = true;  // its socket closes once it holds nothing
      --stats_.subscribers;
    }
    Result<uint64_t> drained = subscriber.releases.Drain([&](uint64_t message_id, uint64_t slot) {
      if (subscriber.dead) return;
      if (slot >= subscriber.holds.size() || subscriber.holds[slot] == 0 ||
          entries_[slot].message_id != message_id) {
        MarkDead(subscriber, "returned a drop token for a message it does not hold");
        return;
      }
      ReleaseReference(subscriber, static_cast<uint32_t>(slot));
    });
    if (!drained.ok()) MarkDead(subscriber, drained.status().message());
  }
}

void PublisherImpl::ReleaseReference(SubscriberState& subscriber, uint32_t slot) {
  subscriber.holds[slot] = 0;
  Unreference(slot);
}

void PublisherImpl::Unreference(uint32_t slot) {
  InFlightEntry& entry = entries_[slot];
  if (entry.references == 0) return;
  if (--entry.references != 0) return;
  stats_.memory_in_use -= entry.bytes;
  FreeEntry(entry);
  free_entries_.push_back(slot);
}

void PublisherImpl::FreeEntry(InFlightEntry& entry) {
  entry.message_id = 0;
  entry.bytes = 0;
  // Dropping the columns frees their pool memory (unless the application
  // still holds the batch).
  entry.columns.clear();
  if (entry.header != nullptr) {
    pool_->Free(entry.header, static_cast<int64_t>(entry.header_location.length));
  }
  entry.header = nullptr;
}

uint32_t PublisherImpl::AcquireEntry() {
  if (!free_entries_.empty()) {
    const uint32_t slot = free_entries_.back();
    free_entries_.pop_back();
    return slot;
  }
  const auto slot = static_cast<uint32_t>(entries_.size());
  const size_t grown = std::max<size_t>(64, entries_.size() * 2);
  entries_.resize(grown);
  for (size_t fresh = grown; fresh-- > slot + 1;)
    free_entries_.push_back(static_cast<uint32_t>(fresh));
  for (auto& subscriber : subscribers_) subscriber->holds.resize(grown, 0);
  return slot;
}

void PublisherImpl::AddToHistory(uint32_t slot) {
  if (history_.empty()) return;
  ++entries_[slot].references;
  if (history_count_ == history_.size()) {
    const uint32_t evicted = history_[history_start_];
    history_[history_start_] = slot;
    history_start_ = (history_start_ + 1) % history_.size();
    Unreference(evicted);
  } else {
    history_[(history_start_ + history_count_) % history_.size()] = slot;
    ++history_count_;
  }
}

template <typename Ready>
void PublisherImpl::WaitOnDoorbell(std::chrono::nanoseconds slice, Ready&& ready) {
  if (slice <= std::chrono::nanoseconds::zero()) return;
  if (options_.wait.busy_poll) {
    const Deadline until(slice);
    while (!until.Expired() && !ready()) internal::CpuRelax();
    return;
  }
  const uint32_t observed = doorbell_->wake_futex.load(std::memory_order_acquire);
  doorbell_->publisher_waiting.store(1, std::memory_order_seq_cst);
  // Pairs with the subscribers' fence before they look at publisher_waiting:
  // either they see it and ring, or we see their progress here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!ready()) internal::FutexWait(&doorbell_->wake_futex, observed, slice);
  doorbell_->publisher_waiting.store(0, std::memory_order_relaxed);
}

void PublisherImpl::ReclaimForPool(std::chrono::nanoseconds slice) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const int64_t before = stats_.memory_in_use;
  Reclaim();
  (void)ProcessEvents(0);
  if (stats_.memory_in_use < before) return;
  WaitOnDoorbell(slice, [&] {
    for (const auto& subscriber : subscribers_) {
      if (!subscriber->dead && subscriber->releases.MaybePending()) return true;
    }
    return false;
  });
  Reclaim();
  SweepDead();
}

// ---- Sending ---------------------------------------------------------------

Result<uint32_t> PublisherImpl::SchemaIdFor(const SchemaPtr& schema) {
  if (schema == nullptr) return Status::Invalid("the batch has no schema");
  if (schema.get() == last_schema_) return last_schema_id_;
  for (size_t index = 0; index < schemas_.size(); ++index) {
    if (schemas_[index].schema.get() == schema.get() || schemas_[index].schema->Equals(*schema)) {
      last_schema_ = schema.get();
      last_schema_id_ = static_cast<uint32_t>(index + 1);
      // Keep this pointer alive too, so that its address cannot be reused by
      // a different schema while it is cached.
      schemas_[index].schema = schema;
      return last_schema_id_;
    }
  }
  SchemaRecord record;
  record.schema = schema;
  FERRY_ASSIGN_OR_RAISE(record.encoded, wire::EncodeSchema(*schema));
  record.encoded_size = static_cast<int64_t>(record.encoded.size());
  if (record.encoded_size > internal::kInlineSchemaLimit) {
    FERRY_ASSIGN_OR_RAISE(UniqueFd memfd, internal::CreateSealedMemfd("ferry:" + name_ + ":schema",
                                                                      record.encoded_size));
    {
      FERRY_ASSIGN_OR_RAISE(Mapping mapping,
                            Mapping::Map(memfd.get(), record.encoded_size, /*writable=*/true));
      std::memcpy(mapping.data(), record.encoded.data(), record.encoded.size());
    }
    FERRY_ASSIGN_OR_RAISE(record.memfd, internal::ReopenReadOnly(memfd.get()));
    record.encoded = std::string();
  }
  schemas_.push_back(std::move(record));
  last_schema_ = schema.get();
  last_schema_id_ = static_cast<uint32_t>(schemas_.size());
  for (auto& subscriber : subscribers_) subscriber->known_schemas.resize(schemas_.size() + 1, 0);
  return last_schema_id_;
}

Result<ArrayDataPtr> PublisherImpl::CopyArrayIntoPool(const ArrayDataPtr& data) {
  if (data == nullptr) return data;
  auto copy = std::make_shared<ArrayData>(*data);
  for (BufferPtr& buffer : copy->buffers) {
    if (buffer == nullptr) continue;
    const bool in_pool = pool_->LockForLookup().Locate(buffer->data(), buffer->size()).ok();
    if (in_pool) continue;
    FERRY_ASSIGN_OR_RAISE(buffer, Buffer::CopyOf(buffer->data(), buffer->size(), pool_.get()));
    stats_.bytes_copied += buffer->size();
  }
  for (ArrayDataPtr& child : copy->children) {
    FERRY_ASSIGN_OR_RAISE(child, CopyArrayIntoPool(child));
  }
  FERRY_ASSIGN_OR_RAISE(copy->dictionary, CopyArrayIntoPool(copy->dictionary));
  return ArrayDataPtr(std::move(copy));
}

Result<RecordBatchPtr> PublisherImpl::CopyIntoPool(const RecordBatch& batch) {
  std::vector<ArrayDataPtr> columns;
  columns.reserve(batch.columns().size());
  for (const ArrayDataPtr& column : batch.columns()) {
    FERRY_ASSIGN_OR_RAISE(ArrayDataPtr copied, CopyArrayIntoPool(column));
    columns.push_back(std::move(copied));
  }
  return RecordBatch::Make(batch.schema(), batch.num_rows(), std::move(columns));
}

Status PublisherImpl::SendLocked(const RecordBatch& batch, const Metadata& metadata, bool copy) {
  // Reclaiming waits until the message is on its way (it is not needed for
  // it: a loan short of memory reclaims by itself), so that the latency of
  // the message does not include freeing older ones.
  MaybeProcessEvents();

  const RecordBatch* to_send = &batch;
  RecordBatchPtr copied;
  const int64_t copied_before = stats_.bytes_copied;
  if (copy) {
    FERRY_ASSIGN_OR_RAISE(copied, CopyIntoPool(batch));
    to_send = copied.get();
  }
  FERRY_ASSIGN_OR_RAISE(const uint32_t schema_id, SchemaIdFor(to_send->schema()));
  FERRY_ASSIGN_OR_RAISE(const int64_t header_size, wire::EncodedHeaderSize(*to_send, metadata));
  // Raw pool memory, owned by the in-flight entry from here on.
  FERRY_ASSIGN_OR_RAISE(uint8_t * header, pool_->Allocate(header_size));
  struct HeaderGuard {
    SegmentPool* pool;
    uint8_t* data;
    int64_t size;
    ~HeaderGuard() {
      if (data != nullptr) pool->Free(data, size);
    }
  } header_guard{pool_.get(), header, header_size};

  int64_t payload_bytes = 0;
  wire::BufferLocation header_location;
  {
    const SegmentPool::Lookup lookup = pool_->LockForLookup();
    FERRY_ASSIGN_OR_RAISE(header_location, lookup.Locate(header, header_size));
    auto locate = [&](const Buffer& buffer) -> Result<wire::BufferLocation> {
      Result<wire::BufferLocation> location = lookup.Locate(buffer.data(), buffer.size());
      if (!location.ok() && buffer.size() == 0) {
        // An empty buffer outside the pool: any valid place will do.
        wire::BufferLocation empty;
        empty.segment_id = header_location.segment_id;
        return empty;
      }
      if (location.ok()) payload_bytes += buffer.size();
      return location;
    };
    Result<int64_t> written = wire::EncodeHeader(*to_send, metadata, locate, header, header_size);
    if (!written.ok()) {
      return written.status().WithPrefix("cannot Send on channel '" + name_ + "': ");
    }
  }

  AnnounceSegments();
  const uint32_t slot = AcquireEntry();
  InFlightEntry& entry = entries_[slot];
  entry.message_id = ++last_message_id_;
  entry.references = 0;
  entry.schema_id = schema_id;
  entry.bytes = payload_bytes + header_size;
  entry.columns.assign(to_send->columns().begin(), to_send->columns().end());
  entry.header = header;
  header_guard.data = nullptr;
  entry.header_location = header_location;
  stats_.memory_in_use += entry.bytes;
  // The history's reference first, so that the message outlives a failed delivery.
  AddToHistory(slot);
  ++entries_[slot].references;  // ours, while delivering

  LazyDeadline deadline(options_.send_timeout);  // read from the clock only if a queue is full
  Status status;
  // Subscribers welcomed while we wait (appended at the end) are not visited:
  // they joined after this message (the history gives it to them if kept).
  delivering_ = true;
  const size_t subscriber_count = subscribers_.size();
  for (size_t index = 0; index < subscriber_count; ++index) {
    SubscriberState& subscriber = *subscribers_[index];
    if (subscriber.dead || subscriber.closing) continue;
    Status delivered = Deliver(subscriber, slot, deadline, /*may_block=*/true);
    if (!delivered.ok() && status.ok()) status = delivered;
  }
  delivering_ = false;
  ++stats_.sent;
  stats_.bytes_sent += payload_bytes;
  if (stats_.bytes_copied == copied_before) telemetry::Add(telemetry::Counter::kZeroCopyExports);
  Unreference(slot);
  Reclaim();
  SweepDead();
  return status;
}

Status PublisherImpl::Deliver(SubscriberState& subscriber, uint32_t slot, LazyDeadline& deadline,
                              bool may_block) {
  InFlightEntry& entry = entries_[slot];
  Descriptor descriptor;
  descriptor.message_id = entry.message_id;
  descriptor.entry_slot = slot;
  descriptor.schema_id = entry.schema_id;
  descriptor.header_segment = entry.header_location.segment_id;
  descriptor.header_offset = entry.header_location.offset;
  descriptor.header_length = entry.header_location.length;
  const bool blocking = may_block && subscriber.overflow == OverflowPolicy::kBlock;
  if (subscriber.holds[slot] != 0) return Status::OK();  // it has it already (history)

  Status schema_status = EnsureSchemaSent(subscriber, entry.schema_id);
  if (!schema_status.ok()) {
    MarkDead(subscriber, schema_status.message());
    return Status::OK();
  }
  std::optional<Clock::time_point> spin_until;  // set when the queue is first found full
  for (;;) {
    if (subscriber.dead || subscriber.closing) return Status::OK();
    const bool socket_ready = FlushBacklog(subscriber);
    if (subscriber.dead) return Status::OK();
    if (socket_ready) {
      Result<std::optional<uint64_t>> pushed = subscriber.ring.TryPush(descriptor);
      if (!pushed.ok()) {
        MarkDead(subscriber, pushed.status().message());
        return Status::OK();
      }
      if (pushed->has_value()) {
        subscriber.queued_slots[**pushed % subscriber.ring.capacity()] = slot;
        subscriber.holds[slot] = 1;
        ++entry.references;
        ++stats_.delivered;
        Wake(subscriber);
        return Status::OK();
      }
    }
    // Full (or its socket is backed up).
    if (!blocking) {
      if (socket_ready && subscriber.overflow == OverflowPolicy::kDropOldest) {
        Result<std::optional<uint64_t>> dropped = subscriber.ring.DropOldest();
        if (!dropped.ok()) {
          MarkDead(subscriber, dropped.status().message());
          return Status::OK();
        }
        if (dropped->has_value()) {
          const uint32_t old_slot = subscriber.queued_slots[**dropped % subscriber.ring.capacity()];
          ++stats_.dropped_oldest;
          if (old_slot < subscriber.holds.size() && subscriber.holds[old_slot] != 0) {
            ReleaseReference(subscriber, old_slot);
          }
        }
        continue;  // there is room now
      }
      ++stats_.dropped_newest;
      return Status::OK();
    }
    if (deadline.get().Expired()) {
      return Status::TimedOut("channel '" + name_ + "': subscriber pid " +
                              std::to_string(subscriber.pid) + " kept its queue of " +
                              std::to_string(subscriber.ring.capacity()) +
                              " messages full past send_timeout");
    }
    if (!spin_until.has_value()) spin_until = Clock::now() + options_.wait.spin;
    if (options_.wait.busy_poll || Clock::now() < *spin_until) {
      internal::CpuRelax();
    } else {
      WaitOnDoorbell(deadline.get().Remaining(kWaitSlice), [&] {
        Result<uint64_t> queued = subscriber.ring.Queued();
        return !queued.ok() || *queued < subscriber.ring.capacity() ||
               subscriber.releases.MaybePending();
      });
    }
    Reclaim();
    MaybeProcessEvents();
  }
}

Status PublisherImpl::EnsureSchemaSent(SubscriberState& subscriber, uint32_t schema_id) {
  if (schema_id < subscriber.known_schemas.size() && subscriber.known_schemas[schema_id] != 0) {
    return Status::OK();
  }
  if (schema_id == 0 || schema_id > schemas_.size()) {
    return Status::UnknownError("internal: unknown schema id " + std::to_string(schema_id));
  }
  subscriber.known_schemas.resize(schemas_.size() + 1, 0);
  const SchemaRecord& record = schemas_[schema_id - 1];
  OutgoingPacket packet;
  packet.packet.kind = static_cast<uint16_t>(PacketKind::kSchema);
  packet.packet.values[0] = schema_id;
  packet.packet.values[1] = static_cast<uint64_t>(record.encoded_size);
  if (record.memfd.valid()) {
    packet.packet.values[2] = 1;
    packet.borrowed_fd = record.memfd.get();
  } else {
    packet.inline_bytes = record.encoded;
  }
  Announce(subscriber, std::move(packet));
  subscriber.known_schemas[schema_id] = 1;
  return Status::OK();
}

void PublisherImpl::AnnounceSegments() {
  if (!pool_->HasEvents()) return;
  segment_events_.clear();
  pool_->TakeEvents(&segment_events_);
  for (const SegmentPool::Event& event : segment_events_) {
    for (auto& subscriber : subscribers_) {
      if (subscriber->dead) continue;
      OutgoingPacket packet;
      packet.packet.values[0] = event.segment->id;
      if (event.kind == SegmentPool::Event::Kind::kCreated) {
        packet.packet.kind = static_cast<uint16_t>(PacketKind::kSegment);
        packet.packet.values[1] = static_cast<uint64_t>(event.segment->mapping.size());
        packet.segment = event.segment;
      } else {
        // A segment it never heard of needs no retirement either; this keeps
        // the backlog of a subscriber that does not read its socket bounded
        // by the live segments.
        auto unsent = std::find_if(
            subscriber->backlog.begin(), subscriber->backlog.end(),
            [&](const OutgoingPacket& queued) { return queued.segment == event.segment; });
        if (unsent != subscriber->backlog.end()) {
          subscriber->backlog.erase(unsent);
          continue;
        }
        packet.packet.kind = static_cast<uint16_t>(PacketKind::kRetire);
      }
      Announce(*subscriber, std::move(packet));
    }
  }
  segment_events_.clear();  // closes the descriptors of retired segments
}

void PublisherImpl::Announce(SubscriberState& subscriber, OutgoingPacket packet) {
  subscriber.backlog.push_back(std::move(packet));
  FlushBacklog(subscriber);
}

bool PublisherImpl::FlushBacklog(SubscriberState& subscriber) {
  bool sent_any = false;
  while (!subscriber.backlog.empty() && !subscriber.dead) {
    OutgoingPacket& next = subscriber.backlog.front();
    std::string bytes(reinterpret_cast<const char*>(&next.packet), sizeof(Packet));
    bytes += next.inline_bytes;
    int fd = next.borrowed_fd;
    if (next.segment != nullptr) fd = next.segment->read_only_fd.get();
    Status sent = internal::SendPacket(subscriber.socket.get(), bytes.data(), bytes.size(), &fd,
                                       fd >= 0 ? 1 : 0, /*timeout_ms=*/0);
    if (sent.code() == StatusCode::kTimedOut) break;  // its socket is full: later
    if (!sent.ok()) {
      MarkDead(subscriber, sent.message());
      break;
    }
    subscriber.backlog.pop_front();
    sent_any = true;
    subscriber.view.block->announcements.fetch_add(1, std::memory_order_release);
  }
  if (sent_any) Wake(subscriber);
  return subscriber.backlog.empty() && !subscriber.dead;
}

void PublisherImpl::Wake(SubscriberState& subscriber) {
  internal::ControlBlock* block = subscriber.view.block;
  // Pairs with the subscriber's fence between "I sleep" and its last look at
  // the ring: one of the two sides sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (block->subscriber_sleeping.load(std::memory_order_relaxed) != 0 &&
      block->subscriber_sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    block->data_futex.fetch_add(1, std::memory_order_release);
    internal::FutexWake(&block->data_futex);
  }
  if (block->fd_armed.load(std::memory_order_relaxed) != 0 &&
      block->fd_armed.exchange(0, std::memory_order_acq_rel) != 0) {
    const uint64_t one = 1;
    ssize_t written = ::write(subscriber.eventfd.get(), &one, sizeof(one));
    (void)written;  // a full counter is already readable
  }
}

}  // namespace

Result<std::unique_ptr<Publisher>> Publisher::Create(const std::string& name,
                                                     PublisherOptions options) {
  FERRY_RETURN_NOT_OK(internal::ValidateChannelName(name));
  auto publisher = std::make_unique<PublisherImpl>(name, options);
  FERRY_RETURN_NOT_OK(publisher->Init());
  return std::unique_ptr<Publisher>(std::move(publisher));
}

}  // namespace ferry::flow
