// One-way latency of Ferry's dataflow runtime, C++ side, for the payload
// sizes of bench/transport/common.py (bench/dataflow/run.sh drives it):
//
//   ferry_flow_bench node-sender | node-receiver
//       the two nodes of a ping-pong dataflow started by `ferry run`
//       (bench/dataflow/nodes_bench.py writes the descriptor). The sender
//       writes its records to $FERRY_BENCH_OUT.
//   ferry_flow_bench nodes --json=PATH
//       the same two nodes without a daemon (Node::FromConfig): the process
//       forks, the parent sends, the child answers.
//   ferry_flow_bench operators --operator=LIB --json=PATH
//       two operators of LIB (bench_operator.cc) in one OperatorHost, in this
//       process: "source" sends, "sink" receives.
//   common options: --sizes=8,64,... --modes=loan,copy --quick --timeout=SECONDS
//
// Method (as bench/transport and dora_bench.py): the sender reads
// CLOCK_MONOTONIC right before it hands the message to Ferry and writes it
// into the metadata ("t"); the receiver reads the clock as soon as Next
// returns the input; the difference is one sample (stamped one-way). One
// message is in flight at a time: the receiver answers each one (output
// "ack": [seq, latency]) before the next is sent.
//
// A message is a plain uint8 array of the payload size (what dora's Python
// nodes send), sent with SendArray. Two send modes:
//   loan  the array is allocated from OutputPool("data") (shared memory) for
//         every message, its first 8 bytes set to the sequence number, then
//         stamped and sent: nothing is copied;
//   copy  one array in ordinary memory per size, stamped and sent: SendArray
//         copies it into shared memory, inside the measured time (as
//         dora-rs's send_output copies).
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
#include "ferry/exchange/buffer.h"
#include "ferry/exchange/type.h"
#include "ferry/flow/node.h"
#include "flow/operator/operator_host.h"
#include "flow/operator/operator_list.h"
#include "flow/operator/scripted_node.h"

namespace ferry::flow::bench {
namespace {

using std::chrono::seconds;

constexpr int kWarmup = 20;
constexpr auto kReceiveTimeout = seconds(30);

struct Options : CommonOptions {
  Options() { modes = {"loan", "copy"}; }
  std::string command;
  std::string operator_path;
};

// A uint8 array of `size` bytes from `pool`; only its first 8 bytes (the
// sequence number) are written here.
ArrayDataPtr Payload(int64_t size, MemoryPool* pool, int64_t seq) {
  BufferPtr buffer = Check(Buffer::Allocate(size, pool), "allocate payload");
  std::memcpy(buffer->mutable_data(), &seq, static_cast<size_t>(std::min<int64_t>(size, 8)));
  auto array = std::make_shared<ArrayData>();
  array->type = uint8();
  array->length = size;
  array->buffers = {nullptr, std::move(buffer)};
  return array;
}

int64_t FirstBytes(const ArrayData& array) {
  int64_t value = 0;
  std::memcpy(&value, array.buffers[1]->data() + array.offset,
              static_cast<size_t>(std::min<int64_t>(array.length, 8)));
  return value;
}

struct Record {
  std::string system = "ferry";
  std::string language = "c++";
  std::string kind;  // "node" or "operator"
  std::string mode;  // "loan" / "copy" (nodes), "in-process" (operators)
  std::string placement;
  int64_t size = 0;
  std::vector<int64_t> latencies_ns;
  int64_t bad = 0;
};

std::string ToJson(const Record& record) {
  char line[512];
  std::snprintf(line, sizeof(line),
                "{\"system\": \"%s\", \"language\": \"%s\", \"kind\": \"%s\", \"mode\": \"%s\", "
                "\"placement\": \"%s\", \"size\": %lld, %s}",
                record.system.c_str(), record.language.c_str(), record.kind.c_str(),
                record.mode.c_str(), record.placement.c_str(), static_cast<long long>(record.size),
                LatencyJsonFields(Summarize(record.latencies_ns)).c_str());
  return line;
}

void PrintLine(const Record& record) {
  const LatencySummary summary = Summarize(record.latencies_ns);
  std::fprintf(stderr, "ferry c++ %-8s %-10s %10lld B: p50 %.2f us, p99 %.2f us\n",
               record.kind.c_str(), record.mode.c_str(), static_cast<long long>(record.size),
               summary.p50_us, summary.p99_us);
}

bool WriteJson(const std::string& path, const std::vector<Record>& records) {
  std::vector<std::string> objects;
  for (const Record& record : records) objects.push_back(ToJson(record));
  return WriteJsonArray(path, objects);
}

// The sender's or the receiver's core of FERRY_BENCH_CPUS; none when unpinned.
void Pin(bool sender) {
  const auto cpus = CpuPair();
  if (cpus) PinToCpu(sender ? cpus->first : cpus->second);
}

// ---- Node → node ----------------------------------------------------------------

// The acknowledgement of message `seq` on input "ack": its latency.
int64_t WaitAck(Node* node, int64_t seq) {
  while (true) {
    std::optional<Event> event = Check(node->Next(kReceiveTimeout), "wait for the answer");
    if (!event) Fail("wait for the answer", Status::Invalid("the event stream ended"));
    if (event->type == EventType::kStop || event->type == EventType::kInputClosed) {
      Fail("wait for the answer", Status::Invalid("the receiver went away"));
    }
    if (event->type != EventType::kInput) continue;
    ArrayDataPtr values = ArrayOfMessage(*event->value, event->metadata);
    if (values == nullptr || values->length != 3) continue;
    const int64_t* answer = values->GetValues<int64_t>(1);
    if (answer[0] != seq) continue;
    if (answer[2] != 0) {
      Fail("check", Status::Invalid("message " + std::to_string(seq) + " arrived damaged"));
    }
    return answer[1];
  }
}

std::vector<Record> RunSender(Node* node, const Options& options) {
  std::vector<Record> records;
  Metadata metadata = {{"seq", std::string()}, {"t", std::string()}};
  for (auto& entry : metadata) entry.second.reserve(24);
  MemoryPool* pool = node->OutputPool("data");
  if (pool == nullptr) Fail("sender", Status::Invalid("no output 'data'"));
  for (const auto& mode : options.modes) {
    const bool loan = mode == "loan";
    for (int64_t size : options.sizes) {
      Record record;
      record.kind = "node";
      record.mode = mode;
      record.placement = Placement();
      record.size = size;
      const int iterations = LatencyIterations(size, options.quick);
      record.latencies_ns.reserve(static_cast<size_t>(iterations));
      // Copy mode: one array in the heap; only its first bytes change.
      ArrayDataPtr heap = loan ? nullptr : Payload(size, default_memory_pool(), 0);
      if (heap) std::memset(heap->buffers[1]->mutable_data(), 0x5a, static_cast<size_t>(size));
      static int64_t seq = 0;  // across sizes and modes, so stale answers never match
      for (int i = 0; i < kWarmup + iterations; ++i) {
        ++seq;
        ArrayDataPtr array;
        if (loan) {
          array = Payload(size, pool, seq);
        } else {
          std::memcpy(heap->buffers[1]->mutable_data(), &seq,
                      static_cast<size_t>(std::min<int64_t>(size, 8)));
          array = heap;
        }
        WriteNumber(metadata[0].second, seq);
        WriteNumber(metadata[1].second, NowNs());
        Check(node->SendArray("data", array, metadata), "send");
        array.reset();
        const int64_t latency = WaitAck(node, seq);
        if (i >= kWarmup) record.latencies_ns.push_back(latency);
      }
      PrintLine(record);
      records.push_back(std::move(record));
    }
  }
  return records;
}

// Answers every message on "data" with [seq, latency, damaged] on "ack",
// until the stream ends (the sender closed its output, or the daemon's stop).
void RunReceiver(Node* node) {
  MemoryPool* pool = node->OutputPool("ack");
  if (pool == nullptr) Fail("receiver", Status::Invalid("no output 'ack'"));
  while (true) {
    std::optional<Event> event = Check(node->Next(), "receive");
    if (!event || event->type == EventType::kStop) return;
    if (event->type != EventType::kInput) continue;
    const int64_t received = NowNs();
    const int64_t seq = ReadNumber(event->metadata, "seq");
    const int64_t sent = ReadNumber(event->metadata, "t");
    ArrayDataPtr array = ArrayOfMessage(*event->value, event->metadata);
    const int64_t damaged = array == nullptr || !array->type->Equals(*uint8()) ||
                            (array->length >= 8 && FirstBytes(*array) != seq);
    // The message goes back to the sender's pool before the answer.
    array.reset();
    event.reset();
    BufferPtr buffer = Check(Buffer::Allocate(3 * 8, pool), "allocate answer");
    const int64_t answer[3] = {seq, received - sent, damaged};
    std::memcpy(buffer->mutable_data(), answer, sizeof(answer));
    auto values = std::make_shared<ArrayData>();
    values->type = int64();
    values->length = 3;
    values->buffers = {nullptr, std::move(buffer)};
    Check(node->SendArray("ack", values), "answer");
  }
}

int RunNodeRole(const Options& options, bool sender) {
  // Before the node starts its threads, which inherit the placement.
  Pin(sender);
  std::unique_ptr<Node> node = Check(Node::FromEnvironment(), "start the node");
  if (!sender) {
    RunReceiver(node.get());
    return 0;
  }
  std::vector<Record> records = RunSender(node.get(), options);
  const char* out = std::getenv("FERRY_BENCH_OUT");
  const std::string path = !options.json_path.empty() ? options.json_path : (out ? out : "");
  if (!path.empty() && !WriteJson(path, records)) return 1;
  // Closing the output ends the receiver's stream; then the graph ends.
  return 0;
}

// One node of the daemon-less pair; the channels are named by the sender's
// pid.
NodeConfig StandaloneConfig(const std::string& self, const std::string& peer,
                            const std::string& input, const std::string& output, pid_t sender) {
  const std::string run = "ferry-flow-bench-" + std::to_string(sender);
  NodeConfig config;
  config.dataflow = run;
  config.node = self;
  NodeConfig::Input in;
  in.id = input;
  in.channel = run + "/" + peer + "/" + (input == "ack" ? "ack" : "data");
  in.queue_size = 8;
  config.inputs.push_back(in);
  config.outputs.push_back({output, run + "/" + self + "/" + output});
  return config;
}

// Node → node without a daemon: the same two roles in two processes.
int RunStandalone(const Options& options) {
  const pid_t parent = getpid();
  const pid_t child = ForkReceiver();
  if (child < 0) return 1;
  if (child == 0) {
    Pin(false);
    // The channel names carry the parent's pid.
    std::unique_ptr<Node> node =
        Check(Node::FromConfig(StandaloneConfig("receiver", "sender", "data", "ack", parent)),
              "start the receiver");
    Check(node->WaitForSubscribers("ack", 1, seconds(30)), "wait for the sender");
    RunReceiver(node.get());
    _exit(0);
  }
  Pin(true);
  alarm(static_cast<unsigned>(options.timeout_seconds));
  std::vector<Record> records;
  {
    std::unique_ptr<Node> node =
        Check(Node::FromConfig(StandaloneConfig("sender", "receiver", "ack", "data", parent)),
              "start sender");
    Check(node->WaitForSubscribers("data", 1, seconds(30)), "wait for the receiver");
    records = RunSender(node.get(), options);
    for (auto& record : records) record.mode += " (no daemon)";
  }
  if (!ReceiverSucceeded(child)) return 1;
  if (!options.json_path.empty() && !WriteJson(options.json_path, records)) return 1;
  return 0;
}

// ---- Operator → operator ----------------------------------------------------------

std::vector<int64_t> ReadLatencies(const std::string& path, int64_t* bad) {
  std::ifstream in(path);
  std::string word;
  in >> word >> *bad;
  std::vector<int64_t> values;
  int64_t value = 0;
  while (in >> value) values.push_back(value);
  return values;
}

int RunOperators(const Options& options) {
  if (options.operator_path.empty()) {
    std::fprintf(stderr, "operators: --operator=LIB is required\n");
    return 2;
  }
  // One core: the runtime runs its operators on one thread.
  Pin(true);
  alarm(static_cast<unsigned>(options.timeout_seconds));
  const std::string out = "/tmp/ferry-flow-bench-operators-" + std::to_string(getpid()) + ".txt";
  // Every tick is the same empty batch (the source ignores its content).
  auto schema = std::make_shared<Schema>();
  RecordBatchPtr tick = Check(RecordBatch::Make(schema, 0, {}), "tick batch");
  std::vector<Record> records;
  for (int64_t size : options.sizes) {
    OperatorDefinition source;
    source.id = "source";
    source.path = options.operator_path;
    source.inputs.push_back({"tick", kExternalSource, 64, "block"});
    source.outputs = {"data"};
    source.config_json = "{\"role\": \"source\", \"size\": " + std::to_string(size) + "}";
    OperatorDefinition sink;
    sink.id = "sink";
    sink.path = options.operator_path;
    // One batch in flight at a time: the source runs once per tick, and the
    // host delivers its output before the next tick.
    sink.inputs.push_back({"data", "source/data", 64, "block"});
    sink.config_json = "{\"role\": \"sink\", \"out\": \"" + out + "\"}";
    NodeConfig config;
    config.dataflow = "bench";
    config.node = "runtime";
    config.inputs.push_back({"source/tick", "bench/source/tick"});
    ScriptedNode node(config);
    const int iterations = LatencyIterations(size, options.quick) * 10;
    for (int i = 0; i < kWarmup + iterations; ++i) node.PushInput("source/tick", tick);
    node.PushStop("done");
    Record record;
    record.kind = "operator";
    record.mode = "in-process";
    record.placement = "one thread";
    record.size = size;
    {
      OperatorHost host;
      Check(host.Add(source), "add the source operator");
      Check(host.Add(sink), "add the sink operator");
      Check(host.Run(&node), "run the operators");
      if (!host.errors().empty()) {
        Fail("operators",
             Status::Invalid(host.errors()[0].operator_id + ": " + host.errors()[0].message));
      }
    }
    std::vector<int64_t> values = ReadLatencies(out, &record.bad);
    std::remove(out.c_str());
    if (record.bad != 0 || static_cast<int>(values.size()) != kWarmup + iterations) {
      Fail("operators",
           Status::Invalid("the sink got " + std::to_string(values.size()) + " batches, " +
                           std::to_string(record.bad) + " of the wrong size"));
    }
    record.latencies_ns.assign(values.begin() + kWarmup, values.end());
    PrintLine(record);
    records.push_back(std::move(record));
  }
  if (!options.json_path.empty() && !WriteJson(options.json_path, records)) return 1;
  return 0;
}

// ---- Driver ---------------------------------------------------------------------

[[noreturn]] void Usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s nodes|node-sender|node-receiver|operators [--json=PATH] "
               "[--operator=LIB] [--modes=loan,copy] [--sizes=8,64,...] [--quick] "
               "[--timeout=SECONDS]\n",
               program);
  std::exit(2);
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  if (argc < 2) Usage(argv[0]);
  options.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    constexpr std::string_view kOperator = "--operator=";
    if (ParseCommonFlag(arg, &options)) continue;
    if (arg.substr(0, kOperator.size()) == kOperator) {
      options.operator_path = std::string(arg.substr(kOperator.size()));
    } else {
      Usage(argv[0]);
    }
  }
  FinishCommonFlags(&options, "loan", "copy");
  if (const char* sizes = std::getenv("FERRY_BENCH_SIZES"); sizes && *sizes) {
    options.sizes.clear();
    for (const auto& size : Split(sizes)) options.sizes.push_back(std::stoll(size));
  }
  return options;
}

int Main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  if (options.command == "node-sender") return RunNodeRole(options, true);
  if (options.command == "node-receiver") return RunNodeRole(options, false);
  if (options.command == "nodes") return RunStandalone(options);
  if (options.command == "operators") return RunOperators(options);
  Usage(argv[0]);
}

}  // namespace
}  // namespace ferry::flow::bench

int main(int argc, char** argv) { return ferry::flow::bench::Main(argc, argv); }
