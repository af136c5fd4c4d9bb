// The Subscriber implementation, visible to WaitSet and to tests (which use
// the *_for_testing accessors to play a hostile publisher).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/flow/transport.h"
#include "flow/transport/futex.h"
#include "flow/transport/protocol.h"
#include "flow/transport/ring.h"
#include "flow/transport/shm.h"

namespace ferry::flow::internal {

// One payload segment mapped read-only; shared by every batch that points
// into it, so a retirement announced by the publisher never unmaps memory a
// batch still uses.
struct MappedSegment {
  uint32_t id = 0;
  Mapping mapping;
};
using MappedSegmentPtr = std::shared_ptr<const MappedSegment>;

// What the drop tokens need: the release ring and the socket. It outlives the
// Subscriber while received batches are alive, so that the publisher sees the
// socket hang up (and reclaims) only when nothing points into its memory any
// more.
class SubscriberChannel {
 public:
  // `reclaim_fd` (may be invalid): the publisher's eventfd to write when it
  // armed Doorbell::fd_armed and a token came back.
  SubscriberChannel(UniqueFd socket, Mapping control, Mapping doorbell, UniqueFd reclaim_fd,
                    uint32_t ring_capacity, uint32_t release_capacity);

  int socket_fd() const { return socket_.get(); }
  ControlView control() const { return view_; }
  Doorbell* doorbell() const { return doorbell_; }
  uint32_t ring_capacity() const { return ring_capacity_; }
  uint32_t release_capacity() const { return release_capacity_; }

  // Returns one message's drop token to the publisher. Thread-safe; never
  // blocks for long (a full release ring spills to a private list that
  // later calls flush). Should even that list fail to grow, the token is
  // lost and the memory comes back when this subscriber goes away.
  void Release(uint64_t message_id, uint32_t entry_slot) noexcept;
  // Pushes spilled tokens if there is room now.
  void FlushSpilled() noexcept;
  // Wakes the publisher if it sleeps on the doorbell (waiting for room or
  // memory); after returning tokens (`released`), also writes its reclaim
  // eventfd if it asked for that.
  void RingDoorbell(bool released) noexcept;
  // The same right after the descriptor ring's tail was claimed (a seq_cst
  // read-modify-write, see DescriptorConsumer::TryPop): skips the fence.
  void RingDoorbellAfterClaim() noexcept;
  // Set when the publisher corrupted the release ring: tokens are dropped.
  bool broken() const { return broken_.load(std::memory_order_relaxed); }

 private:
  bool PushLocked(uint64_t message_id, uint32_t entry_slot);
  void FlushSpilledLocked();

  UniqueFd socket_;
  UniqueFd reclaim_fd_;
  Mapping control_mapping_;
  Mapping doorbell_mapping_;
  ControlView view_;
  Doorbell* doorbell_;
  uint32_t ring_capacity_;
  uint32_t release_capacity_;
  std::mutex mutex_;
  ReleaseProducer releases_;                            // guarded by mutex_
  std::vector<std::pair<uint64_t, uint32_t>> spilled_;  // guarded by mutex_
  std::atomic<size_t> spilled_count_{0};
  std::atomic<bool> broken_{false};
};

class SubscriberImpl final : public Subscriber {
 public:
  static Result<std::unique_ptr<Subscriber>> Connect(const std::string& name,
                                                     SubscriberOptions options);
  ~SubscriberImpl() override;

  const std::string& name() const override { return name_; }
  Result<Message> Receive(std::chrono::nanoseconds timeout) override;
  Result<std::optional<Message>> TryReceive() override;
  bool publisher_gone() const override { return publisher_gone_.load(std::memory_order_acquire); }
  ChannelStats stats() const override;
  int wait_fd() const override;

  // WaitSet support. True when a message may be waiting or the publisher is
  // gone; otherwise arms the eventfd (the publisher writes it on its next
  // push) and returns false.
  bool ReadyOrArm();
  // After wait_fd() became readable: true when there is something to return.
  bool CheckAfterWake();

  // Tests only: the shared control segment as the publisher sees it.
  ControlView control_for_testing() const { return channel_->control(); }

 private:
  SubscriberImpl() = default;

  Result<std::optional<Message>> TryReceiveOnce();
  void DrainQueueOnClose();
  Status DrainSocket();
  Status HandlePacket(const uint8_t* bytes, size_t size, ReceivedPacket& packet);
  Status DrainIfAnnounced();
  Result<MappedSegmentPtr> FindSegment(uint32_t segment_id);
  Result<SchemaPtr> FindSchema(uint32_t schema_id);
  // Polls the socket and pidfd; sets publisher_gone_ when the publisher died
  // or closed.
  // (at most once a millisecond unless `force`).
  bool CheckPublisherGone(bool force);
  void ArmWaitFd();

  std::string name_;
  SubscriberOptions options_;
  std::shared_ptr<SubscriberChannel> channel_;
  DescriptorConsumer consumer_;
  UniqueFd eventfd_;
  UniqueFd pidfd_;
  UniqueFd wait_fd_;  // epoll over eventfd, socket and pidfd
  mutable std::atomic<bool> fd_waiters_{false};
  std::atomic<bool> publisher_gone_{false};
  uint32_t seen_announcements_ = 0;
  std::unordered_map<uint32_t, MappedSegmentPtr> segments_;
  std::unordered_map<uint32_t, SchemaPtr> schemas_;
  std::vector<uint8_t> packet_buffer_;
  ChannelStats stats_;
  Clock::time_point last_liveness_check_{};
};

}  // namespace ferry::flow::internal
