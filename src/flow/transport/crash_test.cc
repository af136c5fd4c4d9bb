// Crash safety under SIGKILL at random points, in loops: one side of a
// channel is killed again and again while the other side keeps working.
//
// Every message is derived from its sequence number (and carries the
// checksum of its content in its metadata), so a receiver can tell from the
// sequence alone what it must read: a batch whose memory was reused while it
// was held, or a mix-up of segments, shows up as a checksum mismatch. The
// surviving process must count exactly the file descriptors and memfd
// mappings it started with once the dead peers' resources are released.
//
// Seeded: FERRY_CRASH_SEED replays a failure (the seed is printed with every
// failure), FERRY_CRASH_ITERATIONS changes the loop count (default 25). Every
// wait is bounded and every child is reaped.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ferry/exchange/builder.h"
#include "ferry/flow/transport.h"
#include "flow/transport/transport_test_util.h"
#include "testing/test_util.h"

namespace ferry::flow {
namespace {

using namespace std::chrono_literals;
using testing::ForkChild;
using testing::Pipe;
using testing::PollUntil;
using testing::UniqueChannel;
using testing::WaitChild;

uint64_t EnvNumber(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text, text + std::strlen(text), value);
  return error == std::errc() && *end == '\0' ? value : fallback;
}

uint64_t Seed() { return EnvNumber("FERRY_CRASH_SEED", 0x5EEDF3E77ull); }
int Iterations() { return static_cast<int>(EnvNumber("FERRY_CRASH_ITERATIONS", 25)); }

// ---- Messages derived from their sequence ------------------------------------------

uint64_t Mix(uint64_t value) {  // splitmix64
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

int64_t RowsFor(uint64_t sequence) { return 1 + static_cast<int64_t>(Mix(sequence) % 24); }
int64_t ValueFor(uint64_t sequence, int64_t row) {
  return static_cast<int64_t>(sequence * 1000003 + static_cast<uint64_t>(row));
}
// Mostly small; every 16th message has a value larger than a 64 KiB segment
// (a segment of its own, retired after use).
int64_t BlobLengthFor(uint64_t sequence, int64_t row) {
  if (sequence % 16 == 3 && row == 0) return 80 << 10;
  return static_cast<int64_t>(Mix(sequence * 131 + static_cast<uint64_t>(row)) % 300);
}
// The bytes of one value: a pattern keyed by (sequence, row), cheap per byte.
uint64_t BlobKey(uint64_t sequence, int64_t row) {
  return Mix(sequence << 20 ^ static_cast<uint64_t>(row) << 8 ^ 0xB10B);
}
uint8_t BlobByte(uint64_t key, int64_t index) {
  const auto position = static_cast<uint64_t>(index);
  return static_cast<uint8_t>((key >> (8 * (position & 7))) ^ (position * 131) ^ (position >> 8));
}

struct Hasher {
  uint64_t hash = 0xCBF29CE484222325ull;  // FNV-1a
  void Add(const void* data, size_t size) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    for (size_t index = 0; index < size; ++index) hash = (hash ^ bytes[index]) * 0x100000001B3ull;
  }
};

// The checksum of the content that message `sequence` must have.
uint64_t ExpectedChecksum(uint64_t sequence) {
  Hasher hasher;
  const int64_t rows = RowsFor(sequence);
  hasher.Add(&rows, sizeof(rows));
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t value = ValueFor(sequence, row);
    const int64_t length = BlobLengthFor(sequence, row);
    hasher.Add(&value, sizeof(value));
    hasher.Add(&length, sizeof(length));
    const uint64_t key = BlobKey(sequence, row);
    for (int64_t index = 0; index < length; ++index) {
      const uint8_t byte = BlobByte(key, index);
      hasher.Add(&byte, 1);
    }
  }
  return hasher.hash;
}

// The checksum of what `batch` holds (logical content, in the same order as
// ExpectedChecksum); nullopt when its shape is not the pattern's.
std::optional<uint64_t> ContentChecksum(const RecordBatch& batch) {
  if (batch.num_columns() != 2) return std::nullopt;
  const ArrayData& values = *batch.column(0);
  const ArrayData& blobs = *batch.column(1);
  if (values.type->id != TypeId::kInt64 || blobs.type->id != TypeId::kBinary ||
      values.length != batch.num_rows() || blobs.length != batch.num_rows() ||
      values.buffers.size() < 2 || blobs.buffers.size() < 3 || values.buffers[1] == nullptr ||
      blobs.buffers[1] == nullptr) {
    return std::nullopt;
  }
  Hasher hasher;
  const int64_t rows = batch.num_rows();
  hasher.Add(&rows, sizeof(rows));
  const int64_t* value_data = values.GetValues<int64_t>(1);
  const int32_t* offsets = blobs.GetValues<int32_t>(1);
  const uint8_t* bytes = blobs.buffers[2] != nullptr ? blobs.buffers[2]->data() : nullptr;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t length = offsets[row + 1] - offsets[row];
    if (length > 0 && bytes == nullptr) return std::nullopt;
    hasher.Add(&value_data[row], sizeof(int64_t));
    hasher.Add(&length, sizeof(length));
    if (length > 0) hasher.Add(bytes + offsets[row], static_cast<size_t>(length));
  }
  return hasher.hash;
}

Result<RecordBatchPtr> MakePatternBatch(MemoryPool* pool, uint64_t sequence) {
  Int64Builder values(pool);
  BinaryBuilder blobs(pool);
  std::string blob;
  for (int64_t row = 0; row < RowsFor(sequence); ++row) {
    FERRY_RETURN_NOT_OK(values.Append(ValueFor(sequence, row)));
    blob.resize(static_cast<size_t>(BlobLengthFor(sequence, row)));
    const uint64_t key = BlobKey(sequence, row);
    for (size_t index = 0; index < blob.size(); ++index) {
      blob[index] = static_cast<char>(BlobByte(key, static_cast<int64_t>(index)));
    }
    FERRY_RETURN_NOT_OK(blobs.Append(blob));
  }
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr value_column, values.Finish());
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr blob_column, blobs.Finish());
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("value", int64(), false), field("blob", binary(), false)};
  return RecordBatch::Make(std::move(schema), RowsFor(sequence), {value_column, blob_column});
}

// Sends message `sequence` (the publisher's next one) with its checksum.
Status SendPattern(Publisher& publisher, uint64_t sequence) {
  FERRY_ASSIGN_OR_RAISE(RecordBatchPtr batch, MakePatternBatch(publisher.LoanPool(), sequence));
  const Metadata metadata = {{"sequence", std::to_string(sequence)},
                             {"checksum", std::to_string(ExpectedChecksum(sequence))}};
  return publisher.Send(*batch, metadata);
}

std::optional<uint64_t> MetadataNumber(const Metadata& metadata, const std::string& key) {
  for (const auto& [name, text] : metadata) {
    if (name != key) continue;
    uint64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

// True when `message` is exactly what its sequence number says.
bool Verify(const Message& message) {
  if (message.batch == nullptr) return false;
  const std::optional<uint64_t> sequence = MetadataNumber(message.metadata, "sequence");
  const std::optional<uint64_t> checksum = MetadataNumber(message.metadata, "checksum");
  const std::optional<uint64_t> content = ContentChecksum(*message.batch);
  return sequence == message.sequence && content.has_value() && checksum == content &&
         *content == ExpectedChecksum(message.sequence);
}

// ---- The surviving process's resources ---------------------------------------------

int CountMemfdMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    if (line.find("memfd:") != std::string::npos) ++count;
  }
  return count;
}

// Kills and reaps a child on every exit path of a test.
struct ChildGuard {
  pid_t pid = -1;
  ~ChildGuard() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  }
  int Wait(std::chrono::milliseconds timeout = 20s) {
    const int code = WaitChild(pid, timeout);
    pid = -1;
    return code;
  }
};

// In a child: SIGKILL this process after `delay`, wherever it is then.
void KillSelfAfter(std::chrono::microseconds delay) {
  std::thread([delay] {
    std::this_thread::sleep_for(delay);
    ::kill(::getpid(), SIGKILL);
  }).detach();
}

// ---- Subscribers die, the publisher survives --------------------------------------------

TEST(CrashSafety, SubscribersKilledAtRandomPointsLeaveThePublisherHealthy) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (set FERRY_CRASH_SEED to replay)");
  std::mt19937_64 random(seed);
  const int baseline_fds = testing::CountOpenFds();
  const int baseline_maps = CountMemfdMappings();
  const std::string name = UniqueChannel("crash-subscribers");
  uint64_t sent = 0;
  std::string survivor_count;
  {
    PublisherOptions options;
    options.queue_capacity = 8;
    options.segment_size = 64 << 10;
    options.max_memory = 4 << 20;
    options.send_timeout = 10s;
    ASSERT_OK_AND_ASSIGN(auto publisher, Publisher::Create(name, options));

    // Receives every message, verifies it and drops it at once, until the
    // publisher closes; then reports how many it got.
    Pipe report;
    ChildGuard survivor{ForkChild([&] {
      SubscriberOptions subscriber_options;
      subscriber_options.queue_capacity = 32;
      auto subscriber = Subscriber::Connect(name, subscriber_options);
      CHILD_CHECK(subscriber.ok(), 2);
      uint64_t count = 0;
      for (;;) {
        auto message = (*subscriber)->Receive(30s);
        if (!message.ok()) {
          CHILD_CHECK(message.status().code() == StatusCode::kCancelled, 3);
          break;
        }
        CHILD_CHECK(message->sequence == count + 1, 4);
        CHILD_CHECK(Verify(*message), 5);
        ++count;
      }
      report.Write(std::to_string(count));
      return 0;
    })};
    report.CloseWrite();
    ASSERT_OK(publisher->WaitForSubscribers(1, 10s));

    // Resources of the surviving process once a round is over, by number of
    // live payload segments (each segment has its own descriptors and
    // mapping; everything else must come back exactly).
    std::map<int64_t, std::pair<int, int>> resources_by_segments;
    int connected_victims = 0;
    for (int iteration = 0; iteration < Iterations(); ++iteration) {
      SCOPED_TRACE("iteration " + std::to_string(iteration));
      // Half the victims start the clock (up to 20 ms) before Connect; the
      // others start a short one (up to 2 ms) after receiving a random
      // number of messages, which reaches deep into the stream even where
      // everything runs slowly (sanitizers, busy machines).
      const bool late = random() % 2 == 0;
      const uint64_t kill_after = late ? random() % 200 : 0;
      const auto delay = std::chrono::microseconds(random() % (late ? 2000 : 20000));
      const auto policy = static_cast<OverflowPolicy>(random() % 3);
      const auto capacity = static_cast<uint32_t>(1 + random() % 16);
      const uint64_t hoard_every = 1 + random() % 4;
      const int64_t lost_before = publisher->stats().subscribers_lost;
      Pipe connected;
      // Holds some of what it receives (checking them again now and then)
      // until it is killed, anywhere from before its Connect to deep in the
      // stream.
      ChildGuard victim{ForkChild([&] {
        if (!late) KillSelfAfter(delay);
        SubscriberOptions subscriber_options;
        subscriber_options.queue_capacity = capacity;
        subscriber_options.overflow = policy;
        auto subscriber = Subscriber::Connect(name, subscriber_options);
        CHILD_CHECK(subscriber.ok(), 2);
        connected.Signal();
        std::vector<Message> hoard;
        for (uint64_t received = 1;; ++received) {
          if (late && received == kill_after + 1) KillSelfAfter(delay);
          auto message = (*subscriber)->Receive(10s);
          CHILD_CHECK(message.ok(), 3);
          CHILD_CHECK(Verify(*message), 4);
          if (received % hoard_every == 0) {
            if (hoard.size() >= 64) hoard.erase(hoard.begin());
            hoard.push_back(std::move(*message));
          }
          if (received % 16 == 0) {
            for (const Message& held : hoard) CHILD_CHECK(Verify(held), 5);
          }
        }
      })};
      // Keep sending while it lives and after it died.
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      int code = -1;
      for (;;) {
        ASSERT_OK(SendPattern(*publisher, ++sent));
        int status = 0;
        if (::waitpid(victim.pid, &status, WNOHANG) == victim.pid) {
          victim.pid = -1;
          code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
          break;
        }
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the victim did not die";
      }
      EXPECT_EQ(code, 128 + SIGKILL) << "the victim failed a check (see its stderr)";
      const bool was_connected = connected.Await(0ms);
      connected_victims += was_connected ? 1 : 0;
      for (int extra = 0; extra < 8; ++extra) ASSERT_OK(SendPattern(*publisher, ++sent));

      // The survivor drains; the victim's queue and hoard come back.
      ASSERT_TRUE(PollUntil(
          *publisher,
          [&] {
            const ChannelStats stats = publisher->stats();
            return stats.subscribers == 1 && stats.memory_in_use == 0;
          },
          10s, 200us))
          << "subscribers " << publisher->stats().subscribers << ", memory in use "
          << publisher->stats().memory_in_use;
      const int64_t lost = publisher->stats().subscribers_lost - lost_before;
      EXPECT_LE(lost, 1);
      if (was_connected) {
        EXPECT_EQ(lost, 1);
      }
      EXPECT_EQ(publisher->LoanPool()->bytes_allocated(), 0);
      const int64_t segments = publisher->stats().segments;
      const std::pair<int, int> resources{testing::CountOpenFds(), CountMemfdMappings()};
      auto [known, inserted] = resources_by_segments.emplace(segments, resources);
      if (!inserted) {
        EXPECT_EQ(resources.first, known->second.first)
            << "open descriptors, " << segments << " segments";
        EXPECT_EQ(resources.second, known->second.second)
            << "memfd mappings, " << segments << " segments";
      }
    }
    EXPECT_GT(connected_victims, 0);
    std::printf("%d subscribers killed (%d after connecting), %llu messages sent\n", Iterations(),
                connected_victims, static_cast<unsigned long long>(sent));
    EXPECT_EQ(publisher->stats().sent, static_cast<int64_t>(sent));
    publisher.reset();  // the survivor drains what is left and sees the end
    survivor_count = report.ReadAll(20s);
    EXPECT_EQ(survivor.Wait(), 0);
  }
  EXPECT_EQ(survivor_count, std::to_string(sent));
  EXPECT_EQ(testing::CountOpenFds(), baseline_fds);
  EXPECT_EQ(CountMemfdMappings(), baseline_maps);
}

// ---- Publishers die, the subscriber survives -------------------------------------------

TEST(CrashSafety, PublishersKilledAtRandomPointsLeaveTheSubscriberHealthy) {
  const uint64_t seed = Seed() ^ 0xC0FFEEull;
  SCOPED_TRACE("seed " + std::to_string(Seed()) + " (set FERRY_CRASH_SEED to replay)");
  std::mt19937_64 random(seed);
  const int baseline_fds = testing::CountOpenFds();
  const int baseline_maps = CountMemfdMappings();
  // One name for every publisher: each new one takes over after the last died.
  const std::string name = UniqueChannel("crash-publishers");
  std::vector<Message> carried;  // held across the next publisher's whole life
  int connected_rounds = 0;
  uint64_t total_received = 0;
  for (int iteration = 0; iteration < Iterations(); ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    // As for the subscribers: a clock from its creation on, or a short one
    // after a random number of messages.
    const bool late = random() % 2 == 0;
    const uint64_t kill_after = late ? random() % 300 : 0;
    const auto delay = std::chrono::microseconds(random() % (late ? 2000 : 20000));
    const auto queue = static_cast<uint32_t>(1 + random() % 16);
    std::optional<Pipe> created(std::in_place);
    ChildGuard publisher_process{ForkChild([&] {
      PublisherOptions options;
      options.queue_capacity = queue;
      options.segment_size = 64 << 10;
      options.max_memory = 4 << 20;
      auto publisher = Publisher::Create(name, options);
      CHILD_CHECK(publisher.ok(), 2);
      created->Signal();
      if (!late) KillSelfAfter(delay);
      CHILD_CHECK((*publisher)->WaitForSubscribers(1, 10s).ok(), 3);
      for (uint64_t sequence = 1;; ++sequence) {
        if (late && sequence == kill_after + 1) KillSelfAfter(delay);
        CHILD_CHECK(SendPattern(**publisher, sequence).ok(), 4);
      }
    })};
    created->CloseWrite();
    const bool started = created->Await(10s);
    created.reset();  // its descriptor would count below
    if (!started) {
      ADD_FAILURE() << "the publisher could not start: exit " << publisher_process.Wait();
      continue;
    }
    std::vector<Message> held;
    {
      SubscriberOptions options;
      options.connect_timeout = 1s;
      auto subscriber = Subscriber::Connect(name, options);
      // Connect fails only when the publisher died during the handshake.
      if (subscriber.ok()) {
        ++connected_rounds;
        uint64_t received = 0;
        for (;;) {
          auto message = (*subscriber)->Receive(10s);
          if (!message.ok()) {
            EXPECT_EQ(message.status().code(), StatusCode::kCancelled)
                << message.status().ToString();
            break;
          }
          EXPECT_EQ(message->sequence, received + 1);
          if (!Verify(*message)) {
            ADD_FAILURE() << "message " << message->sequence << " does not match its checksum";
            break;
          }
          received = message->sequence;
          ++total_received;
          if (random() % 4 == 0) {
            if (held.size() >= 32) held.erase(held.begin() + static_cast<ptrdiff_t>(random() % 32));
            held.push_back(std::move(*message));
          }
        }
        EXPECT_TRUE((*subscriber)->publisher_gone());
      }
    }
    EXPECT_EQ(publisher_process.Wait(), 128 + SIGKILL) << "the publisher failed a check";
    // What the dead publishers left is still intact, here and from the round
    // before (whose publisher died before this one was created).
    for (const Message& message : held) EXPECT_TRUE(Verify(message)) << message.sequence;
    for (const Message& message : carried) EXPECT_TRUE(Verify(message)) << message.sequence;
    carried.clear();
    if (iteration % 2 == 0) {
      carried = std::move(held);
    } else {
      held.clear();
      // Nothing of any dead publisher is left open or mapped here.
      EXPECT_EQ(testing::CountOpenFds(), baseline_fds);
      EXPECT_EQ(CountMemfdMappings(), baseline_maps);
    }
  }
  carried.clear();
  EXPECT_GT(connected_rounds, 0);
  std::printf("%d publishers killed (%d with a subscriber connected), %llu messages received\n",
              Iterations(), connected_rounds, static_cast<unsigned long long>(total_received));
  EXPECT_EQ(testing::CountOpenFds(), baseline_fds);
  EXPECT_EQ(CountMemfdMappings(), baseline_maps);
}

}  // namespace
}  // namespace ferry::flow
