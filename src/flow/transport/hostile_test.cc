// A hostile or broken peer writes garbage into the shared control segment or
// the socket: every such case must give an error, never a crash (the suite
// runs under ASan/UBSan), and honest peers must carry on.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "ferry/flow/transport.h"
#include "flow/transport/protocol.h"
#include "flow/transport/schema_codec.h"
#include "flow/transport/shm.h"
#include "flow/transport/subscriber_impl.h"
#include "flow/transport/transport_test_util.h"

namespace ferry::flow {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using internal::ControlView;
using internal::Packet;
using internal::PacketKind;
using internal::UniqueFd;
using testing::ConnectHere;
using testing::MakeBatch;
using testing::MakePublisher;
using testing::PollUntil;
using testing::UniqueChannel;

ControlView ControlOf(Subscriber& subscriber) {
  return dynamic_cast<internal::SubscriberImpl&>(subscriber).control_for_testing();
}

// ---- A publisher that writes garbage into the control segment ----------------------

struct Corruption {
  const char* what;
  int word;           // index into the descriptor's eight words
  uint64_t value;     // written there (or, for word 2 and 3, into one half)
  bool high_half;     // words 2 and 3 hold two 32-bit fields
  const char* error;  // expected in the message
};

class MalformedDescriptor : public ::testing::TestWithParam<Corruption> {};

TEST_P(MalformedDescriptor, GivesAnErrorAndReleasesTheMessage) {
  const Corruption& corruption = GetParam();
  auto publisher = MakePublisher(UniqueChannel("malformed"));
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  {
    auto batch = MakeBatch(publisher->LoanPool(), 40, 1);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE(publisher->Send(**batch).ok());
  }
  ControlView control = ControlOf(*subscriber);
  std::atomic<uint64_t>& word = control.descriptors[0].words[corruption.word];
  if (corruption.word == 2 || corruption.word == 3) {
    const uint64_t old = word.load();
    word.store(corruption.high_half ? (old & 0xFFFFFFFFull) | (corruption.value << 32)
                                    : (old & ~0xFFFFFFFFull) | (corruption.value & 0xFFFFFFFFull));
  } else {
    word.store(corruption.value);
  }
  auto message = subscriber->TryReceive();
  ASSERT_FALSE(message.ok()) << corruption.what;
  EXPECT_EQ(message.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(message.status().message(), HasSubstr(corruption.error)) << corruption.what;
  // The subscriber carries on with the next message...
  {
    auto batch = MakeBatch(publisher->LoanPool(), 40, 2);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE(publisher->Send(**batch).ok());
  }
  auto next = subscriber->Receive(1s);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(testing::BatchMatches(*next->batch, 40, 2));
  next->batch.reset();
  // ...and the rejected message went back to the publisher.
  EXPECT_TRUE(PollUntil(*publisher, [&] { return publisher->stats().memory_in_use == 0; }));
  EXPECT_EQ(publisher->stats().subscribers_lost, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, MalformedDescriptor,
    ::testing::Values(
        Corruption{"sequence stamp", 0, 55, false, "stamped 55"},
        Corruption{"schema id", 2, 999, true, "unknown schema id 999"},
        Corruption{"header segment", 3, 777, false, "unknown segment id 777"},
        Corruption{"flags", 3, 1, true, "reserved fields"},
        Corruption{"header offset", 4, uint64_t{1} << 62, false, "does not fit segment"},
        Corruption{"header offset at the end", 4, (int64_t{64} << 20) - 16, false,
                   "does not fit segment"},
        Corruption{"header length short", 5, 8, false, "does not fit segment"},
        Corruption{"header length huge", 5, ~uint64_t{0}, false, "does not fit segment"},
        Corruption{"header points at payload", 4, 64 * 1024, false, "message header"},
        Corruption{"reserved word", 6, 3, false, "reserved fields"}),
    [](const ::testing::TestParamInfo<Corruption>& info) {
      std::string name = info.param.what;
      for (char& each : name) {
        if (!std::isalnum(static_cast<unsigned char>(each))) each = '_';
      }
      return name;
    });

TEST(HostilePublisher, CorruptedRingIndicesGiveErrorsUntilRepaired) {
  auto publisher = MakePublisher(UniqueChannel("indices"));
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  auto batch = MakeBatch(publisher->LoanPool(), 5, 1);
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE(publisher->Send(**batch).ok());
  ControlView control = ControlOf(*subscriber);
  control.block->descriptors.head.store(1'000'000);
  auto message = subscriber->TryReceive();
  ASSERT_FALSE(message.ok());
  EXPECT_THAT(message.status().message(), HasSubstr("corrupted descriptor ring"));
  auto waited = subscriber->Receive(20ms);
  ASSERT_FALSE(waited.ok());
  EXPECT_THAT(waited.status().message(), HasSubstr("corrupted descriptor ring"));
  control.block->descriptors.head.store(~uint64_t{0} - 3);
  EXPECT_FALSE(subscriber->TryReceive().ok());
  // The publisher's next push rewrites the head from its own copy.
  ASSERT_TRUE(publisher->Send(**batch).ok());
  auto first = subscriber->Receive(1s);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->sequence, 1u);
}

TEST(HostilePublisher, CorruptedReleaseTailDropsTokensWithoutCrashing) {
  auto publisher = MakePublisher(UniqueChannel("reltail"));
  auto subscriber = ConnectHere(*publisher, 1);
  ASSERT_NE(subscriber, nullptr);
  {
    auto batch = MakeBatch(publisher->LoanPool(), 5, 1);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE(publisher->Send(**batch).ok());
  }
  auto message = subscriber->Receive(1s);
  ASSERT_TRUE(message.ok());
  ControlView control = ControlOf(*subscriber);
  control.block->releases.tail.store(12345);
  message->batch.reset();  // the token cannot be pushed: dropped, no crash
  EXPECT_EQ(control.block->releases.head.load(), 0u);
  // The publisher gets the memory back when the subscriber goes away.
  subscriber.reset();
  EXPECT_TRUE(PollUntil(*publisher, [&] { return publisher->stats().memory_in_use == 0; }));
}

// ---- A subscriber that writes garbage: the publisher drops it, others carry on ----

struct SubscriberCorruption {
  const char* what;
  std::function<void(ControlView)> corrupt;
};

class HostileSubscriber : public ::testing::TestWithParam<SubscriberCorruption> {};

TEST_P(HostileSubscriber, IsDisconnectedWhileTheOthersCarryOn) {
  auto publisher = MakePublisher(UniqueChannel("hostilesub"));
  auto hostile = ConnectHere(*publisher, 1);
  auto honest = ConnectHere(*publisher, 2);
  ASSERT_NE(hostile, nullptr);
  ASSERT_NE(honest, nullptr);
  {
    auto batch = MakeBatch(publisher->LoanPool(), 5, 1);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE(publisher->Send(**batch).ok());
  }
  GetParam().corrupt(ControlOf(*hostile));
  for (int64_t seed = 2; seed <= 4; ++seed) {
    auto batch = MakeBatch(publisher->LoanPool(), 5, seed);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE(publisher->Send(**batch).ok());
    ASSERT_TRUE(publisher->Poll().ok());
  }
  EXPECT_TRUE(PollUntil(*publisher, [&] { return publisher->stats().subscribers_lost == 1; }))
      << GetParam().what;
  EXPECT_EQ(publisher->stats().subscribers, 1);
  for (int64_t seed = 1; seed <= 4; ++seed) {
    auto message = honest->Receive(1s);
    ASSERT_TRUE(message.ok()) << message.status().ToString();
    EXPECT_TRUE(testing::BatchMatches(*message->batch, 5, seed));
  }
  // The hostile one is told, one way or another; it never crashes.
  for (int attempt = 0; attempt < 10; ++attempt) {
    auto message = hostile->Receive(50ms);
    if (!message.ok() && message.status().code() != StatusCode::kTimedOut) break;
  }
  hostile.reset();
  honest.reset();
  EXPECT_TRUE(PollUntil(*publisher, [&] { return publisher->stats().memory_in_use == 0; }));
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, HostileSubscriber,
    ::testing::Values(
        SubscriberCorruption{"tail beyond head",
                             [](ControlView view) { view.block->descriptors.tail.store(999); }},
        SubscriberCorruption{"release head far ahead",
                             [](ControlView view) { view.block->releases.head.store(1u << 30); }},
        SubscriberCorruption{"token for a message it does not hold",
                             [](ControlView view) {
                               view.releases[0].message_id.store(4242);
                               view.releases[0].entry_slot.store(0);
                               view.block->releases.head.store(1);
                             }},
        SubscriberCorruption{"token with an entry slot out of range",
                             [](ControlView view) {
                               view.releases[0].message_id.store(1);
                               view.releases[0].entry_slot.store(1u << 31);
                               view.block->releases.head.store(1);
                             }}),
    [](const ::testing::TestParamInfo<SubscriberCorruption>& info) {
      std::string name = info.param.what;
      for (char& each : name) {
        if (!std::isalnum(static_cast<unsigned char>(each))) each = '_';
      }
      return name;
    });

// ---- A fake publisher speaking the socket protocol badly ---------------------------

class FakePublisher {
 public:
  explicit FakePublisher(const std::string& name) : name_(name) {
    auto listening = internal::ListenAbstract(internal::ChannelSocketName(name), name);
    EXPECT_TRUE(listening.ok()) << listening.status().ToString();
    if (listening.ok()) listen_ = std::move(*listening);
  }

  // Runs `respond` on the accepted connection (after reading the hello) in
  // a thread while this thread connects a subscriber.
  Result<std::unique_ptr<Subscriber>> Connect(const std::function<void(FakePublisher&)>& respond) {
    std::thread server([&] {
      const int fd = listen_.get();
      for (int attempt = 0; attempt < 2000 && !socket_.valid(); ++attempt) {
        internal::PollReadable(&fd, 1, 5);
        auto accepted = internal::AcceptPending(fd);
        if (accepted.ok() && accepted->valid()) socket_ = std::move(*accepted);
      }
      if (!socket_.valid()) return;
      Packet hello;
      const int socket_fd = socket_.get();
      for (int attempt = 0; attempt < 2000; ++attempt) {
        internal::PollReadable(&socket_fd, 1, 5);
        auto received = internal::ReceivePacket(socket_fd, &hello, sizeof(hello));
        if (received.ok() && received->size == sizeof(hello)) break;
      }
      respond(*this);
    });
    SubscriberOptions options;
    options.connect_timeout = 2s;
    auto subscriber = Subscriber::Connect(name_, options);
    server.join();
    return subscriber;
  }

  // A correct welcome (control, doorbell, eventfd) with these capacities.
  void SendWelcome(uint32_t ring_capacity = 4, uint32_t release_capacity = 16) {
    const int64_t size = internal::ControlSize(ring_capacity, release_capacity);
    control_fd_ = internal::CreateSealedMemfd("ferry:fake:control", size).MoveValueUnsafe();
    control_ = internal::Mapping::Map(control_fd_.get(), size, true).MoveValueUnsafe();
    view_ = internal::ViewControl(control_.data(), ring_capacity);
    view_.block->magic = internal::kControlMagic;
    view_.block->version = internal::kProtocolVersion;
    view_.block->ring_capacity = ring_capacity;
    view_.block->release_capacity = release_capacity;
    producer_ =
        internal::DescriptorProducer(&view_.block->descriptors, view_.descriptors, ring_capacity);
    doorbell_fd_ = internal::CreateSealedMemfd("ferry:fake:doorbell", internal::kDoorbellSize)
                       .MoveValueUnsafe();
    eventfd_.reset(::eventfd(0, EFD_CLOEXEC));
    Packet welcome;
    welcome.kind = static_cast<uint16_t>(PacketKind::kWelcome);
    welcome.values[0] = ring_capacity;
    welcome.values[1] = release_capacity;
    welcome.values[2] = static_cast<uint64_t>(size);
    const int fds[3] = {control_fd_.get(), doorbell_fd_.get(), eventfd_.get()};
    Send(welcome, fds, 3);
  }

  void Send(const Packet& packet, const int* fds = nullptr, int fd_count = 0,
            const std::string& extra = "") {
    std::string bytes(reinterpret_cast<const char*>(&packet), sizeof(packet));
    bytes += extra;
    SendRaw(bytes, fds, fd_count);
  }
  void SendRaw(const std::string& bytes, const int* fds = nullptr, int fd_count = 0) {
    ASSERT_TRUE(
        internal::SendPacket(socket_.get(), bytes.data(), bytes.size(), fds, fd_count).ok());
  }
  // Sends a packet after the welcome and tells the subscriber to read it.
  void Announce(const Packet& packet, const int* fds = nullptr, int fd_count = 0,
                const std::string& extra = "") {
    Send(packet, fds, fd_count, extra);
    view_.block->announcements.fetch_add(1);
  }
  void Push(internal::Descriptor descriptor) { ASSERT_TRUE(producer_.TryPush(descriptor).ok()); }
  void HangUp() { socket_.reset(); }

  ControlView view() const { return view_; }

 private:
  std::string name_;
  UniqueFd listen_;
  UniqueFd socket_;
  UniqueFd control_fd_;
  UniqueFd doorbell_fd_;
  UniqueFd eventfd_;
  internal::Mapping control_;
  ControlView view_;
  internal::DescriptorProducer producer_;
};

UniqueFd UnsealedMemfd(int64_t size) {
  UniqueFd fd(static_cast<int>(::syscall(SYS_memfd_create, "ferry:fake:unsealed", MFD_CLOEXEC)));
  EXPECT_EQ(::ftruncate(fd.get(), size), 0);
  return fd;
}

struct WelcomeCase {
  const char* what;
  std::function<void(FakePublisher&)> respond;
  const char* error;
};

class MalformedWelcome : public ::testing::TestWithParam<WelcomeCase> {};

TEST_P(MalformedWelcome, IsRefusedWithAClearError) {
  FakePublisher fake(UniqueChannel("welcome"));
  auto subscriber = fake.Connect(GetParam().respond);
  ASSERT_FALSE(subscriber.ok()) << GetParam().what;
  EXPECT_THAT(subscriber.status().message(), HasSubstr(GetParam().error)) << GetParam().what;
}

Packet WelcomePacket(uint64_t ring, uint64_t release, uint64_t size) {
  Packet packet;
  packet.kind = static_cast<uint16_t>(PacketKind::kWelcome);
  packet.values[0] = ring;
  packet.values[1] = release;
  packet.values[2] = size;
  return packet;
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, MalformedWelcome,
    ::testing::Values(
        WelcomeCase{"hang up", [](FakePublisher& fake) { fake.HangUp(); },
                    "hung up during the handshake"},
        WelcomeCase{"bad magic",
                    [](FakePublisher& fake) {
                      Packet packet = WelcomePacket(4, 16, internal::ControlSize(4, 16));
                      packet.magic = 1;
                      fake.Send(packet);
                    },
                    "malformed welcome"},
        WelcomeCase{"short packet",
                    [](FakePublisher& fake) {
                      Packet packet = WelcomePacket(4, 16, internal::ControlSize(4, 16));
                      fake.SendRaw(std::string(reinterpret_cast<const char*>(&packet), 10));
                    },
                    "malformed welcome"},
        WelcomeCase{"capacities out of range",
                    [](FakePublisher& fake) {
                      auto control = UnsealedMemfd(4096);
                      const int fds[3] = {control.get(), control.get(), control.get()};
                      fake.Send(WelcomePacket(0, 16, 4096), fds, 3);
                    },
                    "ring capacities out of range"},
        WelcomeCase{"huge capacities",
                    [](FakePublisher& fake) {
                      auto control = UnsealedMemfd(4096);
                      const int fds[3] = {control.get(), control.get(), control.get()};
                      fake.Send(WelcomePacket(uint64_t{1} << 40, 16, 4096), fds, 3);
                    },
                    "ring capacities out of range"},
        WelcomeCase{"size mismatch",
                    [](FakePublisher& fake) {
                      auto control = UnsealedMemfd(4096);
                      const int fds[3] = {control.get(), control.get(), control.get()};
                      fake.Send(WelcomePacket(4, 16, 100), fds, 3);
                    },
                    "control segment size does not match"},
        WelcomeCase{"unsealed control",
                    [](FakePublisher& fake) {
                      const int64_t size = internal::ControlSize(4, 16);
                      auto control = UnsealedMemfd(size);
                      const int fds[3] = {control.get(), control.get(), control.get()};
                      fake.Send(WelcomePacket(4, 16, static_cast<uint64_t>(size)), fds, 3);
                    },
                    "not sealed against shrinking"},
        WelcomeCase{"pipe instead of memory",
                    [](FakePublisher& fake) {
                      int pipe_fds[2];
                      ASSERT_EQ(::pipe(pipe_fds), 0);
                      const int fds[3] = {pipe_fds[0], pipe_fds[0], pipe_fds[0]};
                      fake.Send(WelcomePacket(4, 16, internal::ControlSize(4, 16)), fds, 3);
                      ::close(pipe_fds[0]);
                      ::close(pipe_fds[1]);
                    },
                    "not a memory file"},
        WelcomeCase{"control too small",
                    [](FakePublisher& fake) {
                      auto control = internal::CreateSealedMemfd("ferry:fake:small", 64);
                      const int fds[3] = {control->get(), control->get(), control->get()};
                      fake.Send(WelcomePacket(4, 16, internal::ControlSize(4, 16)), fds, 3);
                    },
                    "smaller than announced"},
        WelcomeCase{"control header garbage",
                    [](FakePublisher& fake) {
                      const int64_t size = internal::ControlSize(4, 16);
                      auto control = internal::CreateSealedMemfd("ferry:fake:zero", size);
                      auto bell =
                          internal::CreateSealedMemfd("ferry:fake:bell", internal::kDoorbellSize);
                      const int fds[3] = {control->get(), bell->get(), bell->get()};
                      fake.Send(WelcomePacket(4, 16, static_cast<uint64_t>(size)), fds, 3);
                    },
                    "control segment header does not match"}),
    [](const ::testing::TestParamInfo<WelcomeCase>& info) {
      std::string name = info.param.what;
      for (char& each : name) {
        if (!std::isalnum(static_cast<unsigned char>(each))) each = '_';
      }
      return name;
    });

// A well-formed channel whose later packets and descriptors are wrong.
class FakeChannel : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<FakePublisher>(UniqueChannel("fake"));
    auto subscriber = fake_->Connect([](FakePublisher& fake) { fake.SendWelcome(); });
    ASSERT_TRUE(subscriber.ok()) << subscriber.status().ToString();
    subscriber_ = std::move(*subscriber);
  }

  Status ReceiveError() {
    auto message = subscriber_->TryReceive();
    if (message.ok()) return Status::UnknownError("expected an error, got a result");
    return message.status();
  }

  std::unique_ptr<FakePublisher> fake_;
  std::unique_ptr<Subscriber> subscriber_;
};

Packet SegmentPacket(uint64_t id, uint64_t size) {
  Packet packet;
  packet.kind = static_cast<uint16_t>(PacketKind::kSegment);
  packet.values[0] = id;
  packet.values[1] = size;
  return packet;
}

TEST_F(FakeChannel, SegmentAnnouncedWithTheWrongSizeIsRejected) {
  auto segment = internal::CreateSealedMemfd("ferry:fake:segment", 8192);
  const int fd = segment->get();
  fake_->Announce(SegmentPacket(0, 4096), &fd, 1);
  EXPECT_THAT(ReceiveError().message(),
              HasSubstr("announced with 4096 bytes but its file has 8192"));
}

TEST_F(FakeChannel, UnsealedSegmentIsRejected) {
  auto segment = UnsealedMemfd(8192);
  const int fd = segment.get();
  fake_->Announce(SegmentPacket(0, 8192), &fd, 1);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("not sealed against shrinking"));
}

TEST_F(FakeChannel, SegmentWithoutDescriptorIsRejected) {
  fake_->Announce(SegmentPacket(0, 8192));
  EXPECT_THAT(ReceiveError().message(), HasSubstr("malformed segment announcement"));
}

TEST_F(FakeChannel, UnknownPacketKindIsRejected) {
  Packet packet;
  packet.kind = 77;
  fake_->Announce(packet);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("unexpected packet kind 77"));
}

TEST_F(FakeChannel, TruncatedPacketIsRejected) {
  Packet packet;
  fake_->SendRaw(std::string(reinterpret_cast<const char*>(&packet), 12));
  fake_->view().block->announcements.fetch_add(1);
  EXPECT_THAT(ReceiveError().message(),
              HasSubstr("malformed packet from the publisher (truncated)"));
}

TEST_F(FakeChannel, SchemaPacketShorterThanAnnouncedIsRejected) {
  Packet schema;
  schema.kind = static_cast<uint16_t>(PacketKind::kSchema);
  schema.values[0] = 1;
  schema.values[1] = 100;  // but no bytes follow
  fake_->Announce(schema);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("announced with 100 bytes but the packet has 0"));
}

TEST_F(FakeChannel, GarbageSchemaIsRejectedByTheDecoder) {
  Packet schema;
  schema.kind = static_cast<uint16_t>(PacketKind::kSchema);
  schema.values[0] = 1;
  schema.values[1] = 16;
  fake_->Announce(schema, nullptr, 0, std::string(16, '\x7f'));
  EXPECT_THAT(ReceiveError().message(), HasSubstr("schema 1: schema: bad magic"));
}

TEST_F(FakeChannel, DescriptorForUnknownSchemaAndSegmentIsRejected) {
  internal::Descriptor descriptor;
  descriptor.message_id = 1;
  descriptor.schema_id = 5;
  descriptor.header_segment = 3;
  descriptor.header_length = 64;
  fake_->Push(descriptor);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("unknown schema id 5"));
  // A real schema, still no segment.
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("x", int32())};
  auto encoded = wire::EncodeSchema(*schema);
  ASSERT_TRUE(encoded.ok());
  Packet packet;
  packet.kind = static_cast<uint16_t>(PacketKind::kSchema);
  packet.values[0] = 5;
  packet.values[1] = encoded->size();
  fake_->Announce(packet, nullptr, 0, *encoded);
  fake_->Push(descriptor);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("unknown segment id 3"));
  // Both rejected messages were handed back as drop tokens.
  EXPECT_EQ(fake_->view().block->releases.head.load(), 2u);
}

TEST_F(FakeChannel, HeaderOfGarbageIsRejectedAndHangUpEndsTheChannel) {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("x", int32())};
  auto encoded = wire::EncodeSchema(*schema);
  ASSERT_TRUE(encoded.ok());
  Packet packet;
  packet.kind = static_cast<uint16_t>(PacketKind::kSchema);
  packet.values[0] = 1;
  packet.values[1] = encoded->size();
  fake_->Announce(packet, nullptr, 0, *encoded);
  auto segment = internal::CreateSealedMemfd("ferry:fake:segment", 4096);
  {
    auto mapping = internal::Mapping::Map(segment->get(), 4096, true);
    std::memset(mapping->data(), 0xEE, 4096);
  }
  const int fd = segment->get();
  fake_->Announce(SegmentPacket(0, 4096), &fd, 1);
  internal::Descriptor descriptor;
  descriptor.message_id = 1;
  descriptor.schema_id = 1;
  descriptor.header_segment = 0;
  descriptor.header_offset = 64;
  descriptor.header_length = 512;
  fake_->Push(descriptor);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("message header: bad magic"));
  fake_->HangUp();
  auto end = subscriber_->Receive(1s);
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.status().code(), StatusCode::kCancelled);
  EXPECT_TRUE(subscriber_->publisher_gone());
}

}  // namespace
}  // namespace ferry::flow
