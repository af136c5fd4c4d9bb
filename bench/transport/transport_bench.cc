// One-way latency and throughput of Ferry's cross-process transport
// (include/ferry/flow/transport.h) between two processes, for the payload
// sizes of bench/transport/common.py, in two wait modes:
//   futex  the default WaitStrategy: a waiting side sleeps on the futex
//   busy   WaitStrategy::busy_poll on both sides (each process spins on its
//          ring; on a 2-core machine two spinning processes fill both cores)
//
//   ferry_transport_bench [--json=PATH] [--modes=futex,busy] [--sizes=8,64,...]
//                         [--quick] [--timeout=SECONDS]
//
// The process forks once, before it creates anything, so the child is a
// plain copy of a single-threaded program: the parent sends, the child
// receives and acknowledges. Per mode and size the parent publishes channel
// `d` and the child channel `a` (acknowledgements), and each subscribes to the
// other's.
//
// A message is a one-column record batch (binary, one value of the payload
// size) built with a BinaryBuilder over Publisher::LoanPool(), so the payload
// is written straight into shared memory and Send copies nothing. The value's
// first 8 bytes hold the sequence number, which the receiver checks. The
// sender reads CLOCK_MONOTONIC after the batch is built, writes it into the
// message metadata ("t") and calls Send; the receiver reads the clock as soon
// as Receive returns, and the difference is one latency sample. One message
// is in flight at a time during the latency phase (the next is sent when the
// previous one is acknowledged). Throughput: a burst sent back to back under
// OverflowPolicy::kBlock; messages per second = burst / (receive time of the
// last one - send time of the first), payload building included.
//
// Output: one line per mode and size on stderr, and with --json=PATH the
// records bench/transport/report.py reads (same fields as common.py writes).
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "ferry/base/status.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/builder.h"
#include "ferry/exchange/type.h"
#include "ferry/flow/transport.h"

namespace ferry::flow::bench {
namespace {

using std::chrono::seconds;

constexpr int kWarmup = 50;
// Queued messages per subscriber: a burst keeps at most this many payloads
// alive at once (8 × 40 MB), the same window the iceoryx2 script uses.
constexpr uint32_t kQueueCapacity = 8;
constexpr auto kReceiveTimeout = seconds(20);

struct Options : CommonOptions {
  Options() { modes = {"futex", "busy"}; }
};

int ThroughputMessages(int64_t size, bool quick) {
  const int64_t count = std::min<int64_t>(4000, std::max<int64_t>(20, 400'000'000 / size));
  return static_cast<int>(quick ? std::max<int64_t>(10, count / 10) : count);
}

// Names channels by the sender's pid, so that runs never collide.
std::string run_id;

std::string ChannelName(const std::string& mode, int64_t size, char which) {
  return "ferry-bench/" + run_id + "/" + mode + "/" + std::to_string(size) + "/" + which;
}

WaitStrategy Strategy(const std::string& mode) {
  WaitStrategy wait;
  wait.busy_poll = mode == "busy";
  return wait;
}

PublisherOptions PublisherFor(const std::string& mode) {
  PublisherOptions options;
  options.queue_capacity = kQueueCapacity;
  options.overflow = OverflowPolicy::kBlock;
  options.wait = Strategy(mode);
  options.max_memory = int64_t{1} << 30;
  return options;
}

SubscriberOptions SubscriberFor(const std::string& mode) {
  SubscriberOptions options;
  options.wait = Strategy(mode);
  return options;
}

// ---- Sender (the parent) ------------------------------------------------------

class Sender {
 public:
  Sender(Publisher* data, Subscriber* acks, int64_t size)
      : data_(data), acks_(acks), size_(size), source_(static_cast<size_t>(size), 0x5a) {
    schema_ = std::make_shared<Schema>(Schema{{field("payload", binary(), false)}, {}});
    metadata_ = {{"seq", std::string()}, {"t", std::string()}, {"phase", std::string()}};
    for (auto& entry : metadata_) entry.second.reserve(24);
  }

  // Builds one message in loaned memory, stamps it and sends it; returns the
  // send time.
  int64_t Send(int64_t seq, char phase) {
    std::memcpy(source_.data(), &seq, sizeof(seq));
    BinaryBuilder builder(data_->LoanPool());
    Check(builder.Reserve(1), "reserve");
    Check(builder.ReserveData(size_), "reserve payload");
    Check(builder.Append(source_.data(), size_), "append payload");
    ArrayDataPtr column = Check(builder.Finish(), "finish payload");
    RecordBatchPtr batch = Check(RecordBatch::Make(schema_, 1, {std::move(column)}), "batch");
    WriteNumber(metadata_[0].second, seq);
    metadata_[2].second.assign(1, phase);
    const int64_t sent = NowNs();
    WriteNumber(metadata_[1].second, sent);
    Check(data_->Send(*batch, metadata_), "send");
    return sent;
  }

  // The acknowledgement of message `seq`: its value column [seq, value].
  int64_t WaitAck(int64_t seq) {
    while (true) {
      Message message = Check(acks_->Receive(kReceiveTimeout), "receive acknowledgement");
      const int64_t* values = message.batch->column(0)->GetValues<int64_t>(1);
      if (values[0] == seq) return values[1];
    }
  }

 private:
  Publisher* data_;
  Subscriber* acks_;
  int64_t size_;
  std::vector<uint8_t> source_;
  SchemaPtr schema_;
  Metadata metadata_;
};

struct Record {
  std::string mode;
  std::string placement;
  int64_t size;
  std::vector<int64_t> latencies_ns;
  int burst;
  double burst_seconds;
};

Record RunSender(const std::string& mode, int64_t size, bool quick) {
  std::unique_ptr<Publisher> data =
      Check(Publisher::Create(ChannelName(mode, size, 'd'), PublisherFor(mode)), "create d");
  Check(data->WaitForSubscribers(1, seconds(20)), "wait for the receiver");
  std::unique_ptr<Subscriber> acks =
      Check(Subscriber::Connect(ChannelName(mode, size, 'a'), SubscriberFor(mode)), "connect a");
  Sender sender(data.get(), acks.get(), size);

  Record record{mode, "", size, {}, 0, 0};
  const int iterations = LatencyIterations(size, quick);
  record.latencies_ns.reserve(static_cast<size_t>(iterations));
  for (int64_t seq = 1; seq <= kWarmup + iterations; ++seq) {
    sender.Send(seq, 'l');
    const int64_t latency = sender.WaitAck(seq);
    if (seq > kWarmup) record.latencies_ns.push_back(latency);
  }
  record.burst = ThroughputMessages(size, quick);
  int64_t first = 0;
  for (int64_t seq = 1; seq <= record.burst; ++seq) {
    const int64_t sent = sender.Send(seq, 'b');
    if (seq == 1) first = sent;
  }
  const int64_t last = sender.WaitAck(-1);
  record.burst_seconds = static_cast<double>(last - first) / 1e9;
  const int64_t mismatches = sender.WaitAck(-2);
  // The claim measured here is zero copy: Send must not have copied a byte.
  if (const int64_t copied = data->stats().bytes_copied; copied != 0) {
    Fail(mode + " " + std::to_string(size),
         Status::Invalid("Send copied " + std::to_string(copied) + " payload bytes"));
  }
  if (mismatches != 0) {
    Fail(mode + " " + std::to_string(size),
         Status::Invalid(std::to_string(mismatches) + " payloads arrived with the wrong bytes"));
  }
  return record;
}

// ---- Receiver (the child) -----------------------------------------------------

void Acknowledge(Publisher* acks, int64_t seq, int64_t value) {
  Int64Builder builder(acks->LoanPool());
  Check(builder.AppendValues(std::vector<int64_t>{seq, value}), "build acknowledgement");
  ArrayDataPtr column = Check(builder.Finish(), "finish acknowledgement");
  static const SchemaPtr schema =
      std::make_shared<Schema>(Schema{{field("ack", int64(), false)}, {}});
  RecordBatchPtr batch = Check(RecordBatch::Make(schema, 2, {std::move(column)}), "ack batch");
  Check(acks->Send(*batch), "send acknowledgement");
}

// Whether the payload is the one message `seq` was built with: its length
// and its first 8 bytes.
bool PayloadMatches(const Message& message, int64_t seq, int64_t size) {
  const ArrayData& column = *message.batch->column(0);
  const int32_t* offsets = column.GetValues<int32_t>(1);
  if (offsets[1] - offsets[0] != size) return false;
  int64_t first_bytes = 0;
  std::memcpy(&first_bytes, column.buffers[2]->data() + offsets[0], sizeof(first_bytes));
  return first_bytes == seq;
}

void RunReceiver(const std::string& mode, int64_t size, bool quick) {
  std::unique_ptr<Publisher> acks =
      Check(Publisher::Create(ChannelName(mode, size, 'a'), PublisherFor(mode)), "create a");
  std::unique_ptr<Subscriber> data =
      Check(Subscriber::Connect(ChannelName(mode, size, 'd'), SubscriberFor(mode)), "connect d");
  Check(acks->WaitForSubscribers(1, seconds(20)), "wait for the sender");

  int64_t mismatches = 0;
  const int latency_messages = kWarmup + LatencyIterations(size, quick);
  for (int i = 0; i < latency_messages; ++i) {
    Message message = Check(data->Receive(kReceiveTimeout), "receive");
    const int64_t received = NowNs();
    const int64_t seq = ReadNumber(message.metadata, "seq");
    const int64_t sent = ReadNumber(message.metadata, "t");
    mismatches += !PayloadMatches(message, seq, size);
    message = Message{};  // the drop token goes back before the answer
    Acknowledge(acks.get(), seq, received - sent);
  }
  const int burst = ThroughputMessages(size, quick);
  int64_t last = 0;
  for (int i = 0; i < burst; ++i) {
    Message message = Check(data->Receive(kReceiveTimeout), "receive burst");
    last = NowNs();
    mismatches += !PayloadMatches(message, ReadNumber(message.metadata, "seq"), size);
  }
  Acknowledge(acks.get(), -1, last);
  Acknowledge(acks.get(), -2, mismatches);
  // Tear down only once the sender has closed its end, so that the last
  // acknowledgements are never lost with this publisher.
  while (true) {
    Result<Message> message = data->Receive(kReceiveTimeout);
    if (!message.ok()) break;
  }
}

// ---- Driver ---------------------------------------------------------------------

std::string ToJson(const Record& record) {
  char line[512];
  std::snprintf(line, sizeof(line),
                "{\"system\": \"ferry\", \"language\": \"c++\", \"mode\": \"%s\", "
                "\"placement\": \"%s\", \"size\": %lld, %s, "
                "\"msgs_per_s\": %.1f, \"gb_per_s\": %.4f}",
                record.mode.c_str(), record.placement.c_str(), static_cast<long long>(record.size),
                LatencyJsonFields(Summarize(record.latencies_ns)).c_str(),
                record.burst / record.burst_seconds,
                record.burst * static_cast<double>(record.size) / record.burst_seconds / 1e9);
  return line;
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (!ParseCommonFlag(arg, &options)) {
      std::fprintf(stderr,
                   "usage: %s [--json=PATH] [--modes=futex,busy] [--sizes=8,64,...] [--quick] "
                   "[--timeout=SECONDS]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  FinishCommonFlags(&options, "futex", "busy");
  return options;
}

int Main(int argc, char** argv) {
  Options options = ParseOptions(argc, argv);
  const std::optional<std::pair<int, int>> cpus = CpuPair();
  const std::string placement = Placement();
  if (placement == "same core") {
    // Two processes spinning on one core only hand over at scheduler ticks.
    const auto busy = std::find(options.modes.begin(), options.modes.end(), "busy");
    if (busy != options.modes.end()) {
      std::fprintf(stderr, "busy-poll skipped: sender and receiver share a core\n");
      options.modes.erase(busy);
    }
  }
  run_id = std::to_string(getpid());
  const pid_t child = ForkReceiver();
  if (child < 0) return 1;
  if (child == 0) {
    if (cpus) PinToCpu(cpus->second);
    for (const auto& mode : options.modes) {
      for (int64_t size : options.sizes) RunReceiver(mode, size, options.quick);
    }
    _exit(0);
  }
  if (cpus) PinToCpu(cpus->first);
  // SIGALRM's default action ends the sender, and the receiver with it.
  alarm(static_cast<unsigned>(options.timeout_seconds));

  std::vector<std::string> lines;
  for (const auto& mode : options.modes) {
    for (int64_t size : options.sizes) {
      Record record = RunSender(mode, size, options.quick);
      record.placement = placement;
      lines.push_back(ToJson(record));
      const LatencySummary summary = Summarize(record.latencies_ns);
      std::fprintf(stderr, "ferry %-5s %10lld B: p50 %.2f us, p99 %.2f us, %.0f msg/s\n",
                   mode.c_str(), static_cast<long long>(size), summary.p50_us, summary.p99_us,
                   record.burst / record.burst_seconds);
    }
  }
  if (!ReceiverSucceeded(child)) return 1;
  if (!options.json_path.empty() && !WriteJsonArray(options.json_path, lines)) return 1;
  return 0;
}

}  // namespace
}  // namespace ferry::flow::bench

int main(int argc, char** argv) { return ferry::flow::bench::Main(argc, argv); }
