// The subscribing end of a channel: maps what the publisher announces,
// claims descriptors, rebuilds batches whose buffers point into the
// read-only mappings, and returns drop tokens when they are released.
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "ferry/base/telemetry.h"
#include "flow/transport/batch_header.h"
#include "flow/transport/device_transport.h"
#include "flow/transport/schema_codec.h"
#include "flow/transport/subscriber_impl.h"

namespace ferry::flow {
namespace internal {
namespace {

constexpr auto kSleepSlice = std::chrono::milliseconds(20);
constexpr auto kLivenessInterval = std::chrono::milliseconds(1);
constexpr size_t kMaxSegments = 1u << 16;
constexpr size_t kMaxSchemas = 1u << 16;
constexpr int64_t kMaxSegmentSize = int64_t{1} << 40;

// Returns a message's drop token when the last buffer of its batch goes,
// and keeps the segments that the buffers point into mapped until then.
class DropToken {
 public:
  DropToken(std::shared_ptr<SubscriberChannel> channel, uint64_t message_id, uint32_t entry_slot)
      : channel_(std::move(channel)), message_id_(message_id), entry_slot_(entry_slot) {}
  ~DropToken() { channel_->Release(message_id_, entry_slot_); }
  DropToken(const DropToken&) = delete;
  DropToken& operator=(const DropToken&) = delete;

  void Hold(const MappedSegmentPtr& segment) {
    for (const MappedSegmentPtr& held : inline_segments_) {
      if (held == segment) return;
    }
    for (MappedSegmentPtr& held : inline_segments_) {
      if (held == nullptr) {
        held = segment;
        return;
      }
    }
    if (std::find(more_segments_.begin(), more_segments_.end(), segment) == more_segments_.end()) {
      more_segments_.push_back(segment);
    }
  }

 private:
  std::shared_ptr<SubscriberChannel> channel_;
  uint64_t message_id_;
  uint32_t entry_slot_;
  MappedSegmentPtr inline_segments_[2];  // most messages live in one or two segments
  std::vector<MappedSegmentPtr> more_segments_;
};

std::string Quoted(const std::string& name) { return "channel '" + name + "'"; }

}  // namespace

SubscriberChannel::SubscriberChannel(UniqueFd socket, Mapping control, Mapping doorbell,
                                     UniqueFd reclaim_fd, uint32_t ring_capacity,
                                     uint32_t release_capacity)
    : socket_(std::move(socket)),
      reclaim_fd_(std::move(reclaim_fd)),
      control_mapping_(std::move(control)),
      doorbell_mapping_(std::move(doorbell)),
      view_(ViewControl(control_mapping_.data(), ring_capacity)),
      doorbell_(reinterpret_cast<Doorbell*>(doorbell_mapping_.data())),
      ring_capacity_(ring_capacity),
      release_capacity_(release_capacity),
      releases_(&view_.block->releases, view_.releases, release_capacity) {}

bool SubscriberChannel::PushLocked(uint64_t message_id, uint32_t entry_slot) {
  Result<bool> pushed = releases_.TryPush(message_id, entry_slot);
  if (!pushed.ok()) {
    // The publisher scribbled over its own release ring; it will see our
    // socket hang up eventually. Nothing else to do with the token.
    broken_.store(true, std::memory_order_relaxed);
    return true;
  }
  return *pushed;
}

void SubscriberChannel::FlushSpilledLocked() {
  size_t flushed = 0;
  while (flushed < spilled_.size() &&
         PushLocked(spilled_[flushed].first, spilled_[flushed].second)) {
    ++flushed;
  }
  spilled_.erase(spilled_.begin(), spilled_.begin() + static_cast<std::ptrdiff_t>(flushed));
  spilled_count_.store(spilled_.size(), std::memory_order_relaxed);
}

void SubscriberChannel::Release(uint64_t message_id, uint32_t entry_slot) noexcept {
  // Runs in destructors: nothing may escape. The only possible failures are
  // allocation failures (an error message, a longer spill list).
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.load(std::memory_order_relaxed)) return;
    FlushSpilledLocked();
    if (!spilled_.empty() || !PushLocked(message_id, entry_slot)) {
      spilled_.emplace_back(message_id, entry_slot);
      spilled_count_.store(spilled_.size(), std::memory_order_relaxed);
    }
  } catch (...) {
  }
  RingDoorbell(/*released=*/true);
}

void SubscriberChannel::FlushSpilled() noexcept {
  if (spilled_count_.load(std::memory_order_relaxed) == 0) return;
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    FlushSpilledLocked();
  } catch (...) {
  }
  RingDoorbell(/*released=*/true);
}

void SubscriberChannel::RingDoorbell(bool released) noexcept {
  // Pairs with the publisher's "I wait" (or "fd armed") store and its last
  // look at the rings.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (doorbell_->publisher_waiting.load(std::memory_order_relaxed) != 0) {
    doorbell_->wake_futex.fetch_add(1, std::memory_order_release);
    FutexWake(&doorbell_->wake_futex);
  }
  if (released && reclaim_fd_.valid() && doorbell_->fd_armed.load(std::memory_order_relaxed) != 0 &&
      doorbell_->fd_armed.exchange(0, std::memory_order_acq_rel) != 0) {
    const uint64_t one = 1;
    ssize_t written = ::write(reclaim_fd_.get(), &one, sizeof(one));
    (void)written;  // a full counter is readable already
  }
}

void SubscriberChannel::RingDoorbellAfterClaim() noexcept {
  // The claim was a sequentially consistent read-modify-write of the tail,
  // which orders it before this load as RingDoorbell's fence would (and
  // costs nothing more on x86, where the fence is a separate instruction).
  if (doorbell_->publisher_waiting.load(std::memory_order_seq_cst) != 0) {
    doorbell_->wake_futex.fetch_add(1, std::memory_order_release);
    FutexWake(&doorbell_->wake_futex);
  }
}

namespace {

// A descriptor the publisher passed as its reclaim eventfd, if it is one
// (anything else is closed: writing into a foreign file is not our business).
UniqueFd CheckedEventfd(UniqueFd fd) {
  char target[64] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd.get());
  const ssize_t length = ::readlink(link.c_str(), target, sizeof(target) - 1);
  if (length <= 0 ||
      std::string_view(target, static_cast<size_t>(length)) != "anon_inode:[eventfd]") {
    return UniqueFd();
  }
  if (::fcntl(fd.get(), F_SETFL, O_NONBLOCK) != 0) return UniqueFd();
  return fd;
}

}  // namespace

// ---- Connect ---------------------------------------------------------------

Result<std::unique_ptr<Subscriber>> SubscriberImpl::Connect(const std::string& name,
                                                            SubscriberOptions options) {
  FERRY_RETURN_NOT_OK(ValidateChannelName(name));
  if (options.queue_capacity > kMaxRingCapacity) {
    return Status::Invalid("queue_capacity must be in [1, " + std::to_string(kMaxRingCapacity) +
                           "] (or 0 for the publisher's), got " +
                           std::to_string(options.queue_capacity));
  }
  if (options.overflow.has_value() && *options.overflow != OverflowPolicy::kBlock &&
      *options.overflow != OverflowPolicy::kDropOldest &&
      *options.overflow != OverflowPolicy::kDropNewest) {
    return Status::Invalid("unknown overflow policy " +
                           std::to_string(static_cast<int>(*options.overflow)));
  }
  const Deadline deadline(options.connect_timeout);
  UniqueFd socket;
  for (;;) {
    bool retryable = false;
    Result<UniqueFd> connected = ConnectAbstract(ChannelSocketName(name), &retryable);
    if (connected.ok()) {
      socket = std::move(*connected);
      break;
    }
    if (!retryable)
      return connected.status().WithPrefix("cannot connect to " + Quoted(name) + ": ");
    if (deadline.Expired()) {
      return Status::TimedOut("no publisher for " + Quoted(name) + " within connect_timeout");
    }
    std::this_thread::sleep_for(
        std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(2), deadline.Remaining()));
  }

  Packet hello;
  hello.kind = static_cast<uint16_t>(PacketKind::kHello);
  hello.values[0] = static_cast<uint64_t>(::getpid());
  hello.values[1] = kProtocolVersion;
  hello.values[2] = options.queue_capacity;
  hello.values[3] = options.overflow.has_value() ? static_cast<uint64_t>(*options.overflow) + 1 : 0;
  FERRY_RETURN_NOT_OK(SendPacket(socket.get(), &hello, sizeof(hello), nullptr, 0));

  Packet welcome;
  // Room for a refusal's reason too.
  alignas(Packet) uint8_t answer[sizeof(Packet) + kMaxRefusalReason];
  ReceivedPacket received;
  for (;;) {
    const int fd = socket.get();
    const auto left = deadline.Remaining(std::chrono::milliseconds(50));
    PollReadable(
        &fd, 1,
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(left).count()));
    FERRY_ASSIGN_OR_RAISE(received, ReceivePacket(fd, answer, sizeof(answer)));
    if (received.closed) {
      return Status::IOError("the publisher of " + Quoted(name) +
                             " hung up during the handshake (too many subscribers?)");
    }
    if (received.size != 0 || received.truncated || received.fd_count != 0) break;
    if (deadline.Expired()) {
      return Status::TimedOut("the publisher of " + Quoted(name) +
                              " did not answer within connect_timeout (it accepts subscribers "
                              "in Send, Poll and WaitForSubscribers)");
    }
  }
  const std::string where = "handshake on " + Quoted(name) + ": ";
  if (received.size >= sizeof(Packet)) std::memcpy(&welcome, answer, sizeof(Packet));
  if (!received.truncated && received.size >= sizeof(Packet) && welcome.magic == kPacketMagic &&
      welcome.version == kProtocolVersion &&
      welcome.kind == static_cast<uint16_t>(PacketKind::kRefused)) {
    const size_t length = std::min<size_t>(received.size - sizeof(Packet), kMaxRefusalReason);
    std::string reason(reinterpret_cast<const char*>(answer) + sizeof(Packet), length);
    for (char& each : reason) {
      if (static_cast<unsigned char>(each) < 0x20 || static_cast<unsigned char>(each) > 0x7e) {
        each = '?';
      }
    }
    return Status::Invalid("the publisher of " + Quoted(name) +
                           " refused this subscriber: " + reason);
  }
  if (received.truncated || received.size != sizeof(Packet) || welcome.magic != kPacketMagic ||
      welcome.version != kProtocolVersion ||
      welcome.kind != static_cast<uint16_t>(PacketKind::kWelcome) ||
      (received.fd_count != 3 && received.fd_count != 4)) {
    return Status::Invalid(where + "malformed welcome packet");
  }
  const uint64_t ring_capacity = welcome.values[0];
  const uint64_t release_capacity = welcome.values[1];
  if (ring_capacity == 0 || ring_capacity > kMaxRingCapacity || release_capacity == 0 ||
      release_capacity > kMaxReleaseCapacity) {
    return Status::Invalid(where + "ring capacities out of range");
  }
  const int64_t control_size =
      ControlSize(static_cast<uint32_t>(ring_capacity), static_cast<uint32_t>(release_capacity));
  if (welcome.values[2] != static_cast<uint64_t>(control_size)) {
    return Status::Invalid(where + "control segment size does not match its capacities");
  }
  FERRY_ASSIGN_OR_RAISE(int64_t control_file_size, SealedSize(received.fds[0].get()));
  FERRY_ASSIGN_OR_RAISE(int64_t doorbell_file_size, SealedSize(received.fds[1].get()));
  if (control_file_size < control_size || doorbell_file_size < kDoorbellSize) {
    return Status::Invalid(where + "shared control files are smaller than announced");
  }
  FERRY_ASSIGN_OR_RAISE(Mapping control, Mapping::Map(received.fds[0].get(), control_size, true));
  FERRY_ASSIGN_OR_RAISE(Mapping doorbell, Mapping::Map(received.fds[1].get(), kDoorbellSize, true));
  const ControlBlock* block = reinterpret_cast<const ControlBlock*>(control.data());
  if (block->magic != kControlMagic || block->version != kProtocolVersion ||
      block->ring_capacity != ring_capacity || block->release_capacity != release_capacity) {
    return Status::Invalid(where + "control segment header does not match the welcome");
  }

  std::unique_ptr<SubscriberImpl> subscriber(new SubscriberImpl());
  subscriber->name_ = name;
  subscriber->options_ = options;
  subscriber->eventfd_ = std::move(received.fds[2]);
  ::fcntl(subscriber->eventfd_.get(), F_SETFL, O_NONBLOCK);
  Result<pid_t> publisher_pid = PeerPid(socket.get());
  if (publisher_pid.ok()) {
    Result<UniqueFd> pidfd = OpenPidfd(*publisher_pid);
    if (pidfd.ok()) subscriber->pidfd_ = std::move(*pidfd);
  }
  subscriber->wait_fd_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!subscriber->wait_fd_.valid()) return ErrnoStatus("epoll_create1", errno);
  const int socket_fd = socket.get();
  auto watch = [&](int fd, uint32_t events) -> Status {
    if (fd < 0) return Status::OK();
    epoll_event event{};
    event.events = events;
    event.data.fd = fd;
    if (::epoll_ctl(subscriber->wait_fd_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      return ErrnoStatus("epoll_ctl", errno);
    }
    return Status::OK();
  };
  FERRY_RETURN_NOT_OK(watch(subscriber->eventfd_.get(), EPOLLIN));
  FERRY_RETURN_NOT_OK(watch(socket_fd, EPOLLIN | EPOLLRDHUP));
  FERRY_RETURN_NOT_OK(watch(subscriber->pidfd_.get(), EPOLLIN));

  UniqueFd reclaim_fd;
  if (received.fd_count == 4) reclaim_fd = CheckedEventfd(std::move(received.fds[3]));
  subscriber->channel_ = std::make_shared<SubscriberChannel>(
      std::move(socket), std::move(control), std::move(doorbell), std::move(reclaim_fd),
      static_cast<uint32_t>(ring_capacity), static_cast<uint32_t>(release_capacity));
  const ControlView view = subscriber->channel_->control();
  subscriber->consumer_ = DescriptorConsumer(&view.block->descriptors, view.descriptors,
                                             static_cast<uint32_t>(ring_capacity));
  subscriber->packet_buffer_.resize(sizeof(Packet) + static_cast<size_t>(kInlineSchemaLimit));
  return std::unique_ptr<Subscriber>(std::move(subscriber));
}

SubscriberImpl::~SubscriberImpl() {
  if (channel_ == nullptr) return;
  ControlBlock* block = channel_->control().block;
  block->closing.store(1, std::memory_order_seq_cst);
  // What is still queued will never be received: give it back now (what the
  // publisher pushes after seeing nothing of `closing` is reclaimed when the
  // socket hangs up, i.e. when the last received batch is gone). Only the
  // error message of a corrupted ring could throw (bad_alloc): stop there.
  try {
    DrainQueueOnClose();
  } catch (...) {
  }
  channel_->RingDoorbell(/*released=*/true);
}

void SubscriberImpl::DrainQueueOnClose() {
  for (uint32_t count = 0; count <= channel_->ring_capacity(); ++count) {
    std::optional<Descriptor> claimed_anyway;
    Result<std::optional<Descriptor>> popped = consumer_.TryPop(&claimed_anyway);
    if (claimed_anyway.has_value()) {
      channel_->Release(claimed_anyway->message_id, claimed_anyway->entry_slot);
    }
    if (!popped.ok() || !popped->has_value()) break;
    channel_->Release((*popped)->message_id, (*popped)->entry_slot);
  }
}

// ---- Socket packets ----------------------------------------------------------

Status SubscriberImpl::DrainIfAnnounced() {
  const uint32_t announced =
      channel_->control().block->announcements.load(std::memory_order_acquire);
  if (announced == seen_announcements_) return Status::OK();
  seen_announcements_ = announced;
  return DrainSocket();
}

Status SubscriberImpl::DrainSocket() {
  for (;;) {
    FERRY_ASSIGN_OR_RAISE(
        ReceivedPacket packet,
        ReceivePacket(channel_->socket_fd(), packet_buffer_.data(), packet_buffer_.size()));
    if (packet.closed) {
      publisher_gone_.store(true, std::memory_order_release);
      return Status::OK();
    }
    if (packet.size == 0 && !packet.truncated && packet.fd_count == 0) return Status::OK();
    FERRY_RETURN_NOT_OK(
        HandlePacket(packet_buffer_.data(), packet.size, packet).WithPrefix(Quoted(name_) + ": "));
  }
}

Status SubscriberImpl::HandlePacket(const uint8_t* bytes, size_t size, ReceivedPacket& packet) {
  Packet header;
  if (packet.truncated || size < sizeof(Packet)) {
    return Status::Invalid("malformed packet from the publisher (truncated)");
  }
  std::memcpy(&header, bytes, sizeof(header));
  if (header.magic != kPacketMagic || header.version != kProtocolVersion) {
    return Status::Invalid("malformed packet from the publisher (bad magic or version)");
  }
  switch (static_cast<PacketKind>(header.kind)) {
    case PacketKind::kSegment: {
      const uint64_t segment_id = header.values[0];
      if (packet.fd_count != 1 || size != sizeof(Packet) || segment_id > UINT32_MAX) {
        return Status::Invalid("malformed segment announcement");
      }
      if (segments_.count(static_cast<uint32_t>(segment_id)) != 0) return Status::OK();  // repeated
      if (segments_.size() >= kMaxSegments) {
        return Status::Invalid("the publisher announced more than " + std::to_string(kMaxSegments) +
                               " segments");
      }
      FERRY_ASSIGN_OR_RAISE(int64_t file_size, SealedSize(packet.fds[0].get()));
      if (file_size <= 0 || file_size > kMaxSegmentSize ||
          static_cast<uint64_t>(file_size) != header.values[1]) {
        return Status::Invalid("segment " + std::to_string(segment_id) + " announced with " +
                               std::to_string(header.values[1]) + " bytes but its file has " +
                               std::to_string(file_size));
      }
      auto segment = std::make_shared<MappedSegment>();
      segment->id = static_cast<uint32_t>(segment_id);
      FERRY_ASSIGN_OR_RAISE(segment->mapping,
                            Mapping::Map(packet.fds[0].get(), file_size, /*writable=*/false));
      segments_.emplace(segment->id, std::move(segment));
      return Status::OK();
    }
    case PacketKind::kRetire: {
      if (packet.fd_count != 0 || size != sizeof(Packet) || header.values[0] > UINT32_MAX) {
        return Status::Invalid("malformed segment retirement");
      }
      // Batches that still point into it keep their own reference.
      segments_.erase(static_cast<uint32_t>(header.values[0]));
      return Status::OK();
    }
    case PacketKind::kSchema: {
      const uint64_t schema_id = header.values[0];
      const uint64_t encoded_size = header.values[1];
      if (schema_id == 0 || schema_id > UINT32_MAX || encoded_size == 0 ||
          encoded_size > static_cast<uint64_t>(wire::kMaxEncodedSize)) {
        return Status::Invalid("malformed schema announcement");
      }
      if (schemas_.size() >= kMaxSchemas) {
        return Status::Invalid("the publisher announced more than " + std::to_string(kMaxSchemas) +
                               " schemas");
      }
      Result<SchemaPtr> schema = Status::UnknownError("unset");
      if (header.values[2] == 0) {
        if (packet.fd_count != 0 || size != sizeof(Packet) + encoded_size) {
          return Status::Invalid("schema " + std::to_string(schema_id) + " announced with " +
                                 std::to_string(encoded_size) + " bytes but the packet has " +
                                 std::to_string(size - sizeof(Packet)));
        }
        schema = wire::DecodeSchema(bytes + sizeof(Packet), static_cast<int64_t>(encoded_size));
      } else {
        if (packet.fd_count != 1 || size != sizeof(Packet)) {
          return Status::Invalid("malformed schema announcement (memfd)");
        }
        FERRY_ASSIGN_OR_RAISE(int64_t file_size, SealedSize(packet.fds[0].get()));
        if (static_cast<uint64_t>(file_size) < encoded_size) {
          return Status::Invalid("schema file is smaller than announced");
        }
        FERRY_ASSIGN_OR_RAISE(Mapping mapping,
                              Mapping::Map(packet.fds[0].get(), static_cast<int64_t>(encoded_size),
                                           /*writable=*/false));
        schema = wire::DecodeSchema(mapping.data(), static_cast<int64_t>(encoded_size));
      }
      if (!schema.ok()) {
        return schema.status().WithPrefix("schema " + std::to_string(schema_id) + ": ");
      }
      schemas_.emplace(static_cast<uint32_t>(schema_id), std::move(*schema));
      return Status::OK();
    }
    default:
      return Status::Invalid("unexpected packet kind " + std::to_string(header.kind) +
                             " from the publisher");
  }
}

Result<MappedSegmentPtr> SubscriberImpl::FindSegment(uint32_t segment_id) {
  auto found = segments_.find(segment_id);
  if (found == segments_.end()) {
    // Announcements precede the descriptors that use them: read them now.
    FERRY_RETURN_NOT_OK(DrainSocket());
    found = segments_.find(segment_id);
    if (found == segments_.end()) {
      return Status::Invalid("unknown segment id " + std::to_string(segment_id));
    }
  }
  return found->second;
}

Result<SchemaPtr> SubscriberImpl::FindSchema(uint32_t schema_id) {
  auto found = schemas_.find(schema_id);
  if (found == schemas_.end()) {
    FERRY_RETURN_NOT_OK(DrainSocket());
    found = schemas_.find(schema_id);
    if (found == schemas_.end()) {
      return Status::Invalid("unknown schema id " + std::to_string(schema_id));
    }
  }
  return found->second;
}

// ---- Receiving ---------------------------------------------------------------

Result<std::optional<Message>> SubscriberImpl::TryReceiveOnce() {
  FERRY_RETURN_NOT_OK(DrainIfAnnounced());
  channel_->FlushSpilled();
  std::optional<Descriptor> claimed_anyway;
  Result<std::optional<Descriptor>> popped = consumer_.TryPop(&claimed_anyway);
  if (!popped.ok()) {
    if (claimed_anyway.has_value()) {
      channel_->Release(claimed_anyway->message_id, claimed_anyway->entry_slot);
    }
    return popped.status().WithPrefix(Quoted(name_) + ": ");
  }
  if (!popped->has_value()) return std::optional<Message>();
  const Descriptor descriptor = **popped;
  channel_->RingDoorbellAfterClaim();  // there is room in the ring now
  // From here on, any failure drops the token, which gives the message back.
  auto token = std::make_shared<DropToken>(channel_, descriptor.message_id, descriptor.entry_slot);
  // Built only on the error path.
  auto where = [&] {
    return Quoted(name_) + ": message " + std::to_string(descriptor.message_id) + ": ";
  };
  if (descriptor.flags != 0 || descriptor.reserved != 0) {
    return Status::Invalid(where() + "malformed descriptor (reserved fields set)");
  }
  Result<SchemaPtr> schema = FindSchema(descriptor.schema_id);
  if (!schema.ok()) return schema.status().WithPrefix(where());
  Result<MappedSegmentPtr> header_segment = FindSegment(descriptor.header_segment);
  if (!header_segment.ok()) return header_segment.status().WithPrefix(where() + "header: ");
  const int64_t segment_size = (*header_segment)->mapping.size();
  if (descriptor.header_offset > static_cast<uint64_t>(segment_size) ||
      descriptor.header_length > static_cast<uint64_t>(segment_size) - descriptor.header_offset ||
      descriptor.header_length < static_cast<uint64_t>(wire::kHeaderPrefixSize) ||
      descriptor.header_length > static_cast<uint64_t>(wire::kMaxEncodedSize)) {
    return Status::Invalid(where() + "header of " + std::to_string(descriptor.header_length) +
                           " bytes at offset " + std::to_string(descriptor.header_offset) +
                           " does not fit segment " + std::to_string(descriptor.header_segment) +
                           " of " + std::to_string(segment_size) + " bytes");
  }
  DropToken* token_pointer = token.get();
  auto lookup = [&](uint32_t segment_id) -> Result<wire::SegmentView> {
    FERRY_ASSIGN_OR_RAISE(MappedSegmentPtr segment, FindSegment(segment_id));
    token_pointer->Hold(segment);
    wire::SegmentView view;
    view.data = segment->mapping.data();
    view.size = segment->mapping.size();
    return view;
  };
  Message message;
  Result<RecordBatchPtr> batch =
      wire::DecodeHeader((*header_segment)->mapping.data() + descriptor.header_offset,
                         static_cast<int64_t>(descriptor.header_length), *schema, lookup,
                         std::move(token), &message.metadata);
  if (!batch.ok()) return batch.status().WithPrefix(where());
  message.batch = std::move(*batch);
  if (Status resolved = ResolveDeviceMessage(&message); !resolved.ok()) {
    return resolved.WithPrefix(where());  // the prefix is built on failure only
  }
  message.sequence = descriptor.message_id;
  ++stats_.received;
  telemetry::Add(telemetry::Counter::kZeroCopyImports);
  return std::optional<Message>(std::move(message));
}

Result<std::optional<Message>> SubscriberImpl::TryReceive() {
  FERRY_ASSIGN_OR_RAISE(std::optional<Message> message, TryReceiveOnce());
  if (!message.has_value()) {
    if (fd_waiters_.load(std::memory_order_relaxed)) ArmWaitFd();
    CheckPublisherGone(/*force=*/false);
  }
  return message;
}

Result<Message> SubscriberImpl::Receive(std::chrono::nanoseconds timeout) {
  LazyDeadline lazy_deadline(timeout);  // no clock read when a message is waiting
  ControlBlock* block = channel_->control().block;
  for (;;) {
    FERRY_ASSIGN_OR_RAISE(std::optional<Message> message, TryReceiveOnce());
    if (message.has_value()) return std::move(*message);
    const Deadline& deadline = lazy_deadline.get();
    const bool busy = options_.wait.busy_poll;
    if (CheckPublisherGone(/*force=*/!busy)) {
      // What it pushed before it went is still ours to read.
      FERRY_ASSIGN_OR_RAISE(std::optional<Message> last, TryReceiveOnce());
      if (last.has_value()) return std::move(*last);
      return Status::Cancelled("publisher gone: " + Quoted(name_));
    }
    if (deadline.Expired()) {
      return Status::TimedOut("no message on " + Quoted(name_) + " before the timeout");
    }
    auto ready = [&] {
      return consumer_.MaybeNonEmpty() ||
             block->announcements.load(std::memory_order_relaxed) != seen_announcements_;
    };
    if (busy) {
      // Polls the ring back to back (the clock only every few dozen polls),
      // for at most a liveness interval.
      (void)SpinUntil(ready, kLivenessInterval, deadline);
      continue;
    }
    if (SpinUntil(ready, options_.wait.spin, deadline)) continue;
    const uint32_t observed = block->data_futex.load(std::memory_order_acquire);
    block->subscriber_sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!ready()) FutexWait(&block->data_futex, observed, deadline.Remaining(kSleepSlice));
    block->subscriber_sleeping.store(0, std::memory_order_relaxed);
  }
}

bool SubscriberImpl::CheckPublisherGone(bool force) {
  if (publisher_gone_.load(std::memory_order_acquire)) return true;
  const Clock::time_point now = Clock::now();
  if (!force && now - last_liveness_check_ < kLivenessInterval) return false;
  last_liveness_check_ = now;
  pollfd fds[2] = {{channel_->socket_fd(), POLLRDHUP, 0}, {pidfd_.get(), POLLIN, 0}};
  const nfds_t count = pidfd_.valid() ? 2 : 1;
  if (::poll(fds, count, 0) > 0) {
    if ((fds[0].revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0 ||
        (count == 2 && (fds[1].revents & POLLIN) != 0)) {
      publisher_gone_.store(true, std::memory_order_release);
    }
  }
  return publisher_gone_.load(std::memory_order_acquire);
}

ChannelStats SubscriberImpl::stats() const {
  ChannelStats stats = stats_;
  stats.segments = static_cast<int64_t>(segments_.size());
  return stats;
}

int SubscriberImpl::wait_fd() const {
  fd_waiters_.store(true, std::memory_order_relaxed);
  return wait_fd_.get();
}

void SubscriberImpl::ArmWaitFd() {
  ControlBlock* block = channel_->control().block;
  if (block->fd_armed.load(std::memory_order_acquire) == 0) {
    // The publisher disarmed it by writing the eventfd (or it was never
    // armed): clear the counter so that the fd stops being readable.
    uint64_t value;
    ssize_t read_bytes = ::read(eventfd_.get(), &value, sizeof(value));
    (void)read_bytes;
    block->fd_armed.store(1, std::memory_order_seq_cst);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool SubscriberImpl::ReadyOrArm() {
  fd_waiters_.store(true, std::memory_order_relaxed);
  (void)DrainIfAnnounced();
  if (consumer_.MaybeNonEmpty() || publisher_gone()) return true;
  ArmWaitFd();
  return consumer_.MaybeNonEmpty();
}

bool SubscriberImpl::CheckAfterWake() {
  if (consumer_.MaybeNonEmpty() || publisher_gone()) return true;
  (void)DrainSocket();  // the socket may be what woke us
  if (CheckPublisherGone(/*force=*/true)) return true;
  return consumer_.MaybeNonEmpty();
}

}  // namespace internal

Result<std::unique_ptr<Subscriber>> Subscriber::Connect(const std::string& name,
                                                        SubscriberOptions options) {
  return internal::SubscriberImpl::Connect(name, options);
}

}  // namespace ferry::flow
