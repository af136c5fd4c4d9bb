// A configurable Ferry node for the daemon's tests. Options (any order):
//   --send N          send N batches on output "out" (int64 column "value")
//   --rows R          rows per batch (default 4); batch k holds k*R .. k*R+R-1
//   --copy            build batches in private memory (SendOutput copies them)
//   --forward         send every input batch on "out"
//   --echo-metadata   with --forward: decode each input's typed metadata, print it
//                     ("METADATA <json>"), and forward it with "cpp_types" (each
//                     key's type) and "cpp_values" (values built in C++) added
//   --expect N        finish after N input messages
//   --wait-subscribers K   before sending, wait for K subscribers on "out"
//   --print           print every event on stdout
//   --stdout TEXT / --stderr TEXT   print a line at start
//   --linger          after sending, wait for the daemon's stop
//   --ignore-stop     on stop, keep running (and ignore SIGTERM)
//   --fail-runs K     while restart_count < K, end with --fail-code after sending
//   --fail-code C     that exit code (default 3), skipping all cleanup (a crash)
//   --exit-code C     exit code of a normal end
//   --crash-before-start K   while restart_count < K, crash (--fail-code) 300 ms after
//                     start-up unless the daemon has started the node by then
//   --delay-ready MS  sleep before connecting to the daemon (a slow starter)
// At the end it prints "TOTAL messages=M rows=R sum=S" (inputs received).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <thread>

#include "ferry/exchange/builder.h"
#include "ferry/flow/node.h"

namespace {

using ferry::Result;
using ferry::Status;
using ferry::flow::Event;
using ferry::flow::EventType;
using ferry::flow::Node;

void Say(const std::string& line);

// Typed metadata through the C++ API: what came in, each key's type, and
// values made here, all sent on.
Status EchoMetadata(Node& node, const Event& event) {
  using ferry::flow::MetadataList;
  using ferry::flow::MetadataMap;
  using ferry::flow::MetadataValue;
  ferry::flow::TypedMetadata values = ferry::flow::DecodeTypedMetadata(event.metadata);
  Say("METADATA " + ferry::flow::MetadataValueToJson(MetadataValue(values)));
  static const char* const kNames[] = {"str", "int", "float", "bool", "list", "map"};
  MetadataMap types;
  for (const auto& [key, value] : values) types.emplace_back(key, kNames[value.index()]);
  values.emplace_back("cpp_types", MetadataValue(std::move(types)));
  values.emplace_back(
      "cpp_values",
      MetadataValue(MetadataMap{
          {"max", MetadataValue(std::numeric_limits<int64_t>::max())},
          {"min", MetadataValue(std::numeric_limits<int64_t>::min())},
          {"tenth", MetadataValue(0.1)},
          {"whole", MetadataValue(2.0)},
          {"inf", MetadataValue(-std::numeric_limits<double>::infinity())},
          {"yes", MetadataValue(true)},
          {"text", MetadataValue(std::string("gr\u00fc\u00df \"quoted\"\n"))},
          {"nested", MetadataValue(MetadataList{MetadataValue(int64_t{1}),
                                                MetadataValue(MetadataList{MetadataValue(2.5)}),
                                                MetadataValue(MetadataMap{})})}}));
  FERRY_ASSIGN_OR_RAISE(ferry::Metadata encoded, ferry::flow::EncodeTypedMetadata(values));
  if (ferry::flow::IsArrayMessage(event.metadata)) {
    return node.SendArray("out", event.value->column(0), encoded);
  }
  return node.SendOutput("out", *event.value, encoded);
}

struct Options {
  int64_t send = 0;
  int64_t rows = 4;
  bool copy = false;
  bool forward = false;
  bool echo_metadata = false;
  int64_t expect = -1;
  int64_t wait_subscribers = 0;
  bool print = false;
  std::string stdout_text, stderr_text;
  bool linger = false;
  bool ignore_stop = false;
  int64_t fail_runs = 0;
  int64_t fail_code = 3;
  int64_t exit_code = 0;
  int64_t crash_before_start = 0;
  int64_t delay_ready_ms = 0;
};

bool ParseOptions(int argc, char** argv, Options* options) {
  // Flags without a value, and options with one (parsed as integers unless text).
  const std::map<std::string, bool*> flags = {{"--copy", &options->copy},
                                              {"--forward", &options->forward},
                                              {"--echo-metadata", &options->echo_metadata},
                                              {"--print", &options->print},
                                              {"--linger", &options->linger},
                                              {"--ignore-stop", &options->ignore_stop}};
  const std::map<std::string, int64_t*> numbers = {
      {"--send", &options->send},
      {"--rows", &options->rows},
      {"--expect", &options->expect},
      {"--wait-subscribers", &options->wait_subscribers},
      {"--fail-runs", &options->fail_runs},
      {"--fail-code", &options->fail_code},
      {"--exit-code", &options->exit_code},
      {"--crash-before-start", &options->crash_before_start},
      {"--delay-ready", &options->delay_ready_ms}};
  const std::map<std::string, std::string*> texts = {{"--stdout", &options->stdout_text},
                                                     {"--stderr", &options->stderr_text}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (auto flag = flags.find(arg); flag != flags.end()) {
      *flag->second = true;
      continue;
    }
    const bool takes_value = numbers.count(arg) != 0 || texts.count(arg) != 0;
    if (!takes_value) {
      std::fprintf(stderr, "test_node: unknown option %s\n", arg.c_str());
      return false;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "test_node: %s needs a value\n", arg.c_str());
      return false;
    }
    const char* value = argv[++i];
    if (auto number = numbers.find(arg); number != numbers.end()) {
      *number->second = std::atoll(value);
    } else {
      *texts.at(arg) = value;
    }
  }
  return true;
}

Result<ferry::RecordBatchPtr> MakeBatch(ferry::MemoryPool* pool, int64_t index, int64_t rows) {
  ferry::Int64Builder values(pool);
  for (int64_t row = 0; row < rows; ++row) FERRY_RETURN_NOT_OK(values.Append(index * rows + row));
  FERRY_ASSIGN_OR_RAISE(ferry::ArrayDataPtr column, values.Finish());
  auto schema = std::make_shared<ferry::Schema>();
  schema->fields = {ferry::field("value", ferry::int64(), false)};
  return ferry::RecordBatch::Make(std::move(schema), rows, {column});
}

void Say(const std::string& line) { std::cout << line << std::endl; }

// The restart count from the environment, before the node connects.
int RunFromEnvironment() {
  const char* text = std::getenv("FERRY_NODE_CONFIG");
  auto config = ferry::flow::NodeConfig::FromJson(text == nullptr ? "" : text);
  return config.ok() ? config->restart_count : 0;
}

std::atomic<bool> g_started{false};

int Run(const Options& options) {
  if (options.delay_ready_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options.delay_ready_ms));
  }
  if (RunFromEnvironment() < options.crash_before_start) {
    // Dies while waiting for the daemon's start: its publishers exist and
    // consumers may already be connected to them.
    std::thread([code = options.fail_code] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (!g_started.load()) std::_Exit(static_cast<int>(code));
    }).detach();
  }
  auto created = Node::FromEnvironment();
  g_started.store(true);
  if (!created.ok()) {
    std::cerr << "test_node: " << created.status().ToString() << std::endl;
    return 1;
  }
  std::unique_ptr<Node> node = std::move(created).MoveValueUnsafe();
  const int run = node->config().restart_count;
  if (!options.stdout_text.empty()) Say(options.stdout_text);
  if (!options.stderr_text.empty()) std::cerr << options.stderr_text << std::endl;
  if (options.print) Say("RUN " + std::to_string(run) + " pid=" + std::to_string(::getpid()));
  if (options.ignore_stop) ::signal(SIGTERM, SIG_IGN);

  if (options.wait_subscribers > 0) {
    Status waited = node->WaitForSubscribers("out", static_cast<int>(options.wait_subscribers),
                                             std::chrono::seconds(20));
    if (!waited.ok()) std::cerr << "test_node: " << waited.ToString() << std::endl;
  }
  for (int64_t index = 0; index < options.send; ++index) {
    ferry::MemoryPool* pool = options.copy ? ferry::default_memory_pool() : node->OutputPool("out");
    auto batch = MakeBatch(pool, index, options.rows);
    Status sent = batch.ok() ? node->SendOutput("out", **batch) : batch.status();
    if (!sent.ok()) {
      std::cerr << "test_node: send " << index << ": " << sent.ToString() << std::endl;
      return 1;
    }
  }
  if (run < options.fail_runs) {
    std::cout.flush();
    std::_Exit(static_cast<int>(options.fail_code));
  }

  int64_t messages = 0, rows = 0, sum = 0;
  const bool listen = !node->config().inputs.empty() || options.linger;
  while (listen) {
    if (options.expect >= 0 && messages >= options.expect) break;
    auto next = node->Next(std::chrono::seconds(30));
    if (!next.ok()) {
      if (next.status().code() == ferry::StatusCode::kTimedOut) continue;
      std::cerr << "test_node: " << next.status().ToString() << std::endl;
      return 1;
    }
    if (!next->has_value()) break;
    const Event& event = **next;
    switch (event.type) {
      case EventType::kInput: {
        if (event.value == nullptr) break;
        const bool timer = event.value->num_columns() == 0 ||
                           event.value->column(0)->type->id != ferry::TypeId::kInt64;
        if (timer) {
          if (options.print) Say("TICK " + event.id);
          break;
        }
        ++messages;
        int64_t batch_sum = 0;
        const auto& column = event.value->column(0);
        const int64_t* values = column->GetValues<int64_t>(1);
        for (int64_t row = 0; row < column->length; ++row) batch_sum += values[row];
        rows += event.value->num_rows();
        sum += batch_sum;
        if (options.print) {
          Say("INPUT " + event.id + " seq=" + std::to_string(event.sequence) + " rows=" +
              std::to_string(event.value->num_rows()) + " sum=" + std::to_string(batch_sum));
        }
        if (options.forward && options.echo_metadata) {
          Status sent = EchoMetadata(*node, event);
          if (!sent.ok()) std::cerr << "test_node: echo: " << sent.ToString() << std::endl;
        } else if (options.forward) {
          Status sent = node->SendOutput("out", *event.value);
          if (!sent.ok()) std::cerr << "test_node: forward: " << sent.ToString() << std::endl;
        }
        break;
      }
      case EventType::kInputClosed:
        if (options.print) Say("INPUT_CLOSED " + event.id);
        break;
      case EventType::kStop:
        if (options.print) Say("STOP " + event.id);
        if (options.ignore_stop) {
          // Misbehave: never finish; the daemon's grace period ends this.
          for (;;) ::pause();
        }
        break;
      case EventType::kError:
        if (options.print) Say("ERROR " + event.error);
        break;
    }
  }
  Say("TOTAL messages=" + std::to_string(messages) + " rows=" + std::to_string(rows) +
      " sum=" + std::to_string(sum));
  return static_cast<int>(options.exit_code);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!ParseOptions(argc, argv, &options)) return 2;
  return Run(options);
}
