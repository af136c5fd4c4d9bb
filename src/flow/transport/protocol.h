// The transport's shared-memory layouts and socket messages. Everything here
// is fixed-width and trivially copyable (or a lock-free atomic), so both
// processes agree on it byte for byte; neither side trusts what the other
// wrote (see ring.h for how indices are checked).
//
// Per subscriber, one control memfd mapped read-write by both ends:
//   ControlBlock | SharedDescriptor[ring_capacity] | SharedRelease[release_capacity]
// Per channel, one doorbell memfd mapped read-write by every end: the word
// the publisher sleeps on while it waits for room or for dropped memory.
// Payload segments are mapped read-write by the publisher only; subscribers
// receive read-only descriptors of them.
//
// Socket (SOCK_SEQPACKET, abstract "\0ferry/<name>"): the subscriber sends
// kHello (with the queue it asks for); the publisher answers kWelcome with
// [control, doorbell, eventfd, reclaim eventfd], then one kSegment per live
// payload segment, or kRefused with a reason and hangs up. Later packets: kSegment for a
// new segment (before any descriptor refers to it), kRetire for a segment
// nothing refers to any more, kSchema before the first descriptor that uses
// that schema id. After each later packet the publisher bumps
// ControlBlock::announcements so that the subscriber knows to read its
// socket without a system call on the fast path.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ferry/base/status.h"
#include "flow/transport/ring.h"

namespace ferry::flow::internal {

inline constexpr uint64_t kControlMagic = 0x314C5254434F5246ull;  // "FROCTRL1"
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint32_t kPacketMagic = 0x504F5246;  // "FROP"

// Limits both ends enforce on values received from the peer.
inline constexpr uint32_t kMaxRingCapacity = 1u << 20;
inline constexpr uint32_t kMaxReleaseCapacity = 1u << 22;
inline constexpr int64_t kDoorbellSize = 4096;

struct ControlBlock {
  // Written once by the publisher; each end keeps its own copy of the values.
  alignas(kCacheLine) uint64_t magic;
  uint32_t version;
  uint32_t ring_capacity;
  uint32_t release_capacity;
  RingIndices descriptors;
  RingIndices releases;
  // The subscriber's wake-up state.
  alignas(kCacheLine) std::atomic<uint32_t> data_futex;  // bumped to wake a sleeping Receive
  std::atomic<uint32_t> subscriber_sleeping;  // set by a Receive about to sleep on data_futex
  std::atomic<uint32_t> fd_armed;             // set by a subscriber waiting on its eventfd
  std::atomic<uint32_t> announcements;        // socket packets sent after the welcome
  std::atomic<uint32_t> closing;              // the subscriber is going away: send no more
};
static_assert(std::is_standard_layout_v<ControlBlock>);
static_assert(sizeof(ControlBlock) % kCacheLine == 0);

struct Doorbell {
  alignas(kCacheLine) std::atomic<uint32_t> publisher_waiting;
  std::atomic<uint32_t> wake_futex;
  // Set by a publisher whose wait_fd() is polled: the next subscriber to
  // return a drop token clears it and writes the reclaim eventfd.
  std::atomic<uint32_t> fd_armed;
};
static_assert(sizeof(Doorbell) <= kDoorbellSize);

constexpr int64_t ControlSize(uint32_t ring_capacity, uint32_t release_capacity) {
  return static_cast<int64_t>(sizeof(ControlBlock)) +
         static_cast<int64_t>(sizeof(SharedDescriptor)) * ring_capacity +
         static_cast<int64_t>(sizeof(SharedRelease)) * release_capacity;
}

// Typed views of a mapped control segment of the right size.
struct ControlView {
  ControlBlock* block = nullptr;
  SharedDescriptor* descriptors = nullptr;
  SharedRelease* releases = nullptr;
};
inline ControlView ViewControl(uint8_t* base, uint32_t ring_capacity) {
  ControlView view;
  view.block = reinterpret_cast<ControlBlock*>(base);
  view.descriptors = reinterpret_cast<SharedDescriptor*>(base + sizeof(ControlBlock));
  view.releases = reinterpret_cast<SharedRelease*>(base + sizeof(ControlBlock) +
                                                   sizeof(SharedDescriptor) * ring_capacity);
  return view;
}

enum class PacketKind : uint16_t {
  kHello = 1,    // values: [0] pid, [1] protocol version, [2] queue capacity (0: the
                 //         publisher's), [3] overflow policy + 1 (0: the publisher's)
  kWelcome = 2,  // values: [0] ring capacity, [1] release capacity, [2] control size,
                 //         [3] publisher pid, [4] overflow policy; fds: control, doorbell,
                 //         eventfd and (optional) the publisher's reclaim eventfd
  kSegment = 3,  // values: [0] segment id, [1] size; fd: the segment (read-only)
  kRetire = 4,   // values: [0] segment id
  kSchema = 5,   // values: [0] schema id, [1] encoded size, [2] 1 if in a memfd (fd) else inline
  kRefused = 6,  // values: [0] reason length; the reason (text) follows the packet
};

// The longest refusal reason a publisher sends (longer ones are cut).
inline constexpr size_t kMaxRefusalReason = 512;

// The fixed part of every packet; a kSchema packet's inline bytes follow it.
struct Packet {
  uint32_t magic = kPacketMagic;
  uint16_t version = kProtocolVersion;
  uint16_t kind = 0;
  uint64_t values[6] = {};
};
static_assert(sizeof(Packet) == 56);
static_assert(std::is_trivially_copyable_v<Packet>);

// Encoded schemas up to this size travel inside the packet, larger ones in a
// sealed memfd of their own.
inline constexpr int64_t kInlineSchemaLimit = 16 * 1024;

// Letters, digits, '-', '_', '.', '/'; 1 to 100 characters.
Status ValidateChannelName(const std::string& name);

}  // namespace ferry::flow::internal
