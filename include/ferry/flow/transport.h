// Zero-copy publish/subscribe of Arrow record batches between processes on
// one machine.
//
// A Publisher owns a channel: its payload memory (memfd segments, passed once
// to each subscriber over a unix socket with SCM_RIGHTS, so nothing is left in
// /dev/shm when a process dies), one descriptor ring per subscriber in shared
// memory (lock-free, futex wake-ups with an optional bounded spin), and one
// release ring per subscriber on which drop tokens come back. A subscriber
// maps the segments read-only and receives record batches whose buffers point
// into them; the batch's release sends the drop token, and the publisher
// reuses memory only when every subscriber that received it has dropped it.
//
// Loan API: the publisher lends memory from its segments (LoanPool, a
// MemoryPool) so that a batch is built directly in shared memory and Send
// copies nothing. SendCopy copies a batch that lives elsewhere (counted in
// telemetry as host memcpy). Schemas travel once per channel and are referred
// to by id.
//
// Crash safety: a subscriber killed at any point is detected (socket hang-up
// and pidfd) and its references are dropped; a publisher killed at any point
// leaves subscribers with valid mappings of what they already received and a
// clear "publisher gone" status.
//
// Thread safety: a Publisher is used by one thread at a time; batches it
// sent may be released from any thread of any subscriber. A Subscriber is
// used by one thread at a time; received batches may be released from any
// thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/device/device_bridge.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/buffer.h"

namespace ferry::flow {

// What a full subscriber queue does to the publisher.
enum class OverflowPolicy : uint8_t {
  kBlock,       // Send waits for room (up to PublisherOptions::send_timeout)
  kDropOldest,  // the oldest queued message is discarded (counted)
  kDropNewest,  // the message being sent is discarded for that subscriber (counted)
};
const char* OverflowPolicyName(OverflowPolicy policy);
Result<OverflowPolicy> OverflowPolicyFromName(std::string_view name);

// How a waiting side waits.
struct WaitStrategy {
  // Busy-poll this long before sleeping on the futex (0 = sleep at once).
  std::chrono::nanoseconds spin = std::chrono::microseconds(0);
  // Never sleep: poll until the deadline (lowest latency, burns a core).
  bool busy_poll = false;
};

struct PublisherOptions {
  // Messages each subscriber may have queued (not yet received).
  uint32_t queue_capacity = 64;
  OverflowPolicy overflow = OverflowPolicy::kBlock;
  // Messages kept for late joiners (0 = none). A joiner whose queue is
  // shorter than the history receives the newest queue_capacity of them.
  uint32_t history = 0;
  // Size of each payload segment (rounded down to a power of two, at least
  // 64 KiB); an allocation larger than this gets a segment of its own, which
  // is unmapped once every subscriber dropped it.
  int64_t segment_size = int64_t{64} << 20;
  // Upper bound on all payload segments together.
  int64_t max_memory = int64_t{4} << 30;
  // How long a blocked Send or Loan waits before TimedOut.
  std::chrono::nanoseconds send_timeout = std::chrono::seconds(10);
  WaitStrategy wait;
};

struct SubscriberOptions {
  WaitStrategy wait;
  // How long Connect waits for the publisher's socket to appear.
  std::chrono::nanoseconds connect_timeout = std::chrono::seconds(10);
  // This subscriber's queue, in messages (0 = the publisher's
  // PublisherOptions::queue_capacity; at most 1 << 20).
  uint32_t queue_capacity = 0;
  // What a full queue of this subscriber does (nullopt = the publisher's
  // PublisherOptions::overflow). Each subscriber's policy applies to its own
  // queue only: a drop_oldest subscriber never makes Send wait, even when a
  // kBlock subscriber of the same channel does.
  std::optional<OverflowPolicy> overflow;
};

// Counters of one endpoint (the process-wide telemetry counts bytes too).
struct ChannelStats {
  int64_t sent = 0;              // messages accepted by Send/SendCopy
  int64_t delivered = 0;         // descriptors pushed to subscriber rings
  int64_t received = 0;          // messages returned by Receive
  int64_t dropped_oldest = 0;    // discarded by kDropOldest
  int64_t dropped_newest = 0;    // discarded by kDropNewest
  int64_t bytes_sent = 0;        // payload bytes described by sent messages
  int64_t bytes_copied = 0;      // payload bytes SendCopy had to copy
  int64_t subscribers = 0;       // currently connected
  int64_t subscribers_lost = 0;  // died or hung up, references reclaimed
  int64_t segments = 0;          // payload segments mapped
  int64_t memory_in_use = 0;     // bytes of payload not yet dropped by everyone
};

// A Publisher has no thread of its own: it accepts subscribers, notices
// their deaths and reclaims dropped messages inside Send, SendCopy, Poll,
// WaitForSubscribers and loans that wait for memory, so a Subscriber's
// Connect completes during one of those calls. An event loop that waits for
// other things meanwhile adds wait_fd() to its poll set and calls Poll()
// when it is readable.
class Publisher {
 public:
  // Creates channel `name` (letters, digits, '-', '_', '.', '/'; at most 100
  // characters). Its socket lives in the abstract unix namespace, so nothing
  // is left on disk. AlreadyExists-style Invalid if another live publisher
  // owns the name.
  static Result<std::unique_ptr<Publisher>> Create(const std::string& name,
                                                   PublisherOptions options = {});
  virtual ~Publisher() = default;

  virtual const std::string& name() const = 0;
  // A pool whose allocations live in this channel's shared memory: build
  // batches with it (builder.h) and Send copies nothing. When memory is short
  // an allocation reclaims and waits up to send_timeout, then fails with
  // OutOfMemory. Its buffers stay valid after the Publisher is destroyed;
  // new allocations then fail.
  virtual MemoryPool* LoanPool() = 0;
  // Sends a batch whose buffers all live in LoanPool() memory (zero copy);
  // Invalid naming the column if a buffer lives elsewhere (use SendCopy).
  // `metadata` travels with the message (key/value strings). Under kBlock,
  // TimedOut when a subscriber kept its queue full past send_timeout (the
  // other subscribers still get the message).
  virtual Status Send(const RecordBatch& batch, const Metadata& metadata = {}) = 0;
  // Sends any batch: buffers already in shared memory travel as they are,
  // others are copied into it (counted).
  virtual Status SendCopy(const RecordBatch& batch, const Metadata& metadata = {}) = 0;
  // Sends a batch that lives on a device (docs/flow.md, "Device batches
  // across processes"). On a device that supports IPC (CUDA device memory)
  // its buffers travel as IPC handles plus an IPC event recorded after
  // batch.event, nothing is copied, and the batch stays alive here until
  // every subscriber dropped it; subscribers get Message::device_batch. Other
  // devices are copied into shared memory (counted by direction and as a
  // fallback with reason crosses_process) and subscribers get a host batch;
  // CPU batches go as SendCopy sends them.
  virtual Status SendDevice(const device::DeviceBatch& batch, const Metadata& metadata = {}) = 0;
  // Accepts pending subscribers and reclaims dropped messages without
  // sending (Send does this too).
  virtual Status Poll() = 0;
  // Waits until at least `count` subscribers are connected.
  virtual Status WaitForSubscribers(int count, std::chrono::nanoseconds timeout) = 0;
  virtual ChannelStats stats() const = 0;
  // A file descriptor (for poll/epoll; never read it or close it) that is
  // readable while Poll() has work: a subscriber connecting or saying hello,
  // a subscriber hanging up or dying, drop tokens returned by subscribers
  // since the last Poll/Send. Level-triggered: Poll() consumes the work, after
  // which the descriptor is quiet until something new happens. It stays the
  // same descriptor for the publisher's lifetime.
  virtual int wait_fd() const = 0;
};

// A received message: the batch (buffers in shared memory; dropping the last
// reference to any of them returns the drop token) and its metadata.
struct Message {
  RecordBatchPtr batch;  // null for a device message (see device_batch)
  Metadata metadata;
  uint64_t sequence = 0;  // the publisher's message number, from 1
  // Set (and `batch` null) when the publisher sent a device batch over IPC
  // handles: its buffers are device memory of this process's device of the
  // same type and id (never dereference them on the host) and its event, if
  // any, must be waited on before they are read. Releasing the batch and the
  // event returns the message to the publisher.
  std::optional<device::DeviceBatch> device_batch;
};

// Batches received stay valid after their Subscriber (or the publisher) is
// gone; the publisher reuses their memory only once they are all released.
class Subscriber {
 public:
  static Result<std::unique_ptr<Subscriber>> Connect(const std::string& name,
                                                     SubscriberOptions options = {});
  virtual ~Subscriber() = default;

  virtual const std::string& name() const = 0;
  // Blocks until a message arrives, the timeout passes (TimedOut), or the
  // publisher is gone and the queue is empty (Cancelled, "publisher gone").
  virtual Result<Message> Receive(std::chrono::nanoseconds timeout) = 0;
  // A message if one is queued, else nullopt (never blocks).
  virtual Result<std::optional<Message>> TryReceive() = 0;
  // True once the publisher is gone (its process died or it closed).
  virtual bool publisher_gone() const = 0;
  virtual ChannelStats stats() const = 0;
  // A file descriptor that becomes readable when a message may be waiting
  // (for poll/epoll and WaitSet).
  virtual int wait_fd() const = 0;
};

// Waits on many subscribers at once.
class WaitSet {
 public:
  void Add(Subscriber* subscriber);
  void Remove(Subscriber* subscriber);
  // The subscribers that have a message (or whose publisher is gone), after
  // waiting at most `timeout`; empty on timeout (at once for an empty set).
  Result<std::vector<Subscriber*>> Wait(std::chrono::nanoseconds timeout);

 private:
  std::vector<Subscriber*> subscribers_;
};

}  // namespace ferry::flow
