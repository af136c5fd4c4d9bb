// `ferry record` (dataflow_record.h).
#include "cli/dataflow_record.h"

#include <signal.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/dataflow_ipc.h"
#include "ferry/flow/node.h"
#include "ferry/flow/transport.h"
#include "flow/daemon/daemon.h"
#include "flow/daemon/output.h"

namespace ferry::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};

void OnInterrupt(int) { g_interrupted.store(true); }

// SIGINT and SIGTERM end the recording (files are completed) while it lasts.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted.store(false);
    struct sigaction action {};
    action.sa_handler = OnInterrupt;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
  }
  ~InterruptGuard() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

BufferPtr OwnedBuffer(std::string bytes) {
  auto owner = std::make_shared<std::string>(std::move(bytes));
  return std::make_shared<Buffer>(reinterpret_cast<const uint8_t*>(owner->data()),
                                  static_cast<int64_t>(owner->size()), owner);
}

template <typename T>
BufferPtr ValueBuffer(const std::vector<T>& values) {
  return OwnedBuffer(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
}

ArrayDataPtr Column(TypePtr type, int64_t length, std::vector<BufferPtr> buffers,
                    std::vector<ArrayDataPtr> children = {}) {
  auto data = std::make_shared<ArrayData>();
  data->type = std::move(type);
  data->length = length;
  data->null_count = 0;
  data->buffers = std::move(buffers);
  data->children = std::move(children);
  return data;
}

// One output being recorded.
struct Recording {
  std::string name;     // NODE/OUTPUT as given
  std::string channel;  // its channel
  std::string file_stem;
  std::unique_ptr<flow::Subscriber> tap;
  std::unique_ptr<IpcFileWriter> writer;
  TypePtr value_type;  // of the current file
  std::vector<std::string> files;
  int64_t messages = 0;
  int64_t missed = 0;
  int64_t skipped = 0;  // messages that could not be written (a note says why)
  uint64_t last_sequence = 0;
  bool ended = false;
  // The producer's publisher went away; the tap connects again if the node
  // is restarted (checked at retry_at).
  int reconnects = 0;
  Clock::time_point retry_at{};
  std::string note;
};

std::string FileStem(const std::string& output) {
  std::string stem = output;
  for (size_t at; (at = stem.find('/')) != std::string::npos;) stem.replace(at, 1, "__");
  return stem;
}

}  // namespace

Result<std::vector<ArrayDataPtr>> RecordedRow(const RecordBatch& batch, bool plain_array,
                                              const Metadata& metadata, uint64_t sequence,
                                              int64_t time_us) {
  nlohmann::json object = nlohmann::json::object();
  for (const auto& [key, value] : metadata) {
    if (key != flow::kArrayMetadataKey) object[key] = value;  // ferry.kind says it
  }
  const std::string text = object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  ArrayDataPtr values = plain_array ? batch.column(0) : batch.ToStructArray();
  if (values->offset != 0) {
    return Status::NotImplemented("a message whose array has an offset (a slice)");
  }
  std::vector<ArrayDataPtr> row;
  row.push_back(
      Column(timestamp(TimeUnit::kMicro, "UTC"), 1, {nullptr, ValueBuffer(std::vector{time_us})}));
  row.push_back(Column(uint64(), 1, {nullptr, ValueBuffer(std::vector{sequence})}));
  row.push_back(
      Column(utf8(), 1,
             {nullptr, ValueBuffer(std::vector<int32_t>{0, static_cast<int32_t>(text.size())}),
              OwnedBuffer(text)}));
  row.push_back(
      Column(list(field("item", values->type)), 1,
             {nullptr, ValueBuffer(std::vector<int32_t>{0, static_cast<int32_t>(values->length)})},
             {values}));
  return row;
}

int RunRecord(const RecordOptions& options, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "ferry: " << message << "\n";
    return 1;
  };
  auto described = flow::daemon::DescribeDataflow(options.run_id, std::chrono::seconds(2));
  if (!described.ok()) return fail(described.status().message());
  // Every output of the run, by NODE/OUTPUT.
  std::map<std::string, std::string> channels;
  for (const auto& node : described->description.value("nodes", nlohmann::json::array())) {
    for (const auto& output : node.value("outputs", nlohmann::json::array())) {
      channels[node.value("id", "") + "/" + output.value("id", "")] = output.value("channel", "");
    }
  }
  std::vector<std::string> wanted = options.outputs;
  if (wanted.empty()) {
    for (const auto& [name, channel] : channels) wanted.push_back(name);
  }
  if (wanted.empty()) return fail("dataflow '" + options.run_id + "' has no outputs to record");
  std::vector<Recording> recordings;
  for (const std::string& name : wanted) {
    auto found = channels.find(name);
    if (found == channels.end()) {
      std::string known;
      for (const auto& [known_name, channel] : channels) {
        known += (known.empty() ? "" : ", ") + known_name;
      }
      return fail("dataflow '" + options.run_id + "' has no output '" + name +
                  "' (outputs: " + (known.empty() ? "none" : known) + ")");
    }
    Recording recording;
    recording.name = name;
    recording.channel = found->second;
    recording.file_stem = FileStem(name);
    recordings.push_back(std::move(recording));
  }
  if (Status made = flow::daemon::MakeDirectories(options.directory); !made.ok()) {
    return fail(made.message());
  }
  flow::SubscriberOptions tap_options;
  tap_options.queue_capacity = 1024;
  tap_options.overflow = flow::OverflowPolicy::kDropOldest;
  flow::WaitSet waitset;
  for (Recording& recording : recordings) {
    auto tap = flow::Subscriber::Connect(recording.channel, tap_options);
    if (!tap.ok()) {
      return fail("cannot subscribe to " + recording.name + ": " + tap.status().message());
    }
    recording.tap = std::move(tap).MoveValueUnsafe();
    waitset.Add(recording.tap.get());
  }
  out << "recording " << recordings.size() << " output" << (recordings.size() == 1 ? "" : "s")
      << " of " << options.run_id << " into " << options.directory << "\n";
  out.flush();

  InterruptGuard interrupts;
  const Clock::time_point begin = Clock::now();
  auto write = [&](Recording& recording, const flow::Message& message) -> Status {
    if (message.batch == nullptr) return Status::NotImplemented("device batches");
    const bool plain = flow::IsArrayMessage(message.metadata) && message.batch->num_columns() == 1;
    const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    FERRY_ASSIGN_OR_RAISE(
        auto row, RecordedRow(*message.batch, plain, message.metadata, message.sequence, now_us));
    const TypePtr& value_type = row[3]->type;
    if (recording.writer == nullptr || !recording.value_type->Equals(*value_type)) {
      if (recording.writer != nullptr) FERRY_RETURN_NOT_OK(recording.writer->Close());
      const size_t part = recording.files.size() + 1;
      const std::string path = options.directory + "/" + recording.file_stem +
                               (part == 1 ? "" : "." + std::to_string(part)) + ".arrow";
      auto schema = std::make_shared<Schema>();
      schema->fields = {field("time", row[0]->type, false), field("seq", row[1]->type, false),
                        field("metadata", row[2]->type, false), field("value", value_type, false)};
      schema->metadata = {{"ferry.run", options.run_id},
                          {"ferry.output", recording.name},
                          {"ferry.kind", plain ? "array" : "batch"}};
      FERRY_ASSIGN_OR_RAISE(recording.writer, IpcFileWriter::Open(path, schema));
      recording.value_type = value_type;
      recording.files.push_back(path);
    }
    return recording.writer->WriteBatch(1, row);
  };
  tap_options.connect_timeout = std::chrono::milliseconds(100);
  int connected = static_cast<int>(recordings.size());
  // A tap whose producer went away: the recording ends unless the node is
  // restarting.
  auto lose_tap = [&](Recording& recording) {
    waitset.Remove(recording.tap.get());
    recording.tap.reset();
    --connected;
    recording.retry_at = Clock::now();
  };
  auto still_coming = [&](const Recording& recording) {
    auto now = flow::daemon::DescribeDataflow(options.run_id, std::chrono::seconds(2));
    if (!now.ok()) return false;  // the run is over
    const std::string node = recording.name.substr(0, recording.name.find('/'));
    for (const auto& entry : now->description.value("nodes", nlohmann::json::array())) {
      if (entry.value("id", "") != node) continue;
      const std::string state = entry.value("state", "");
      return state != "finished" && state != "failed";
    }
    return false;
  };
  for (;;) {
    for (Recording& recording : recordings) {
      if (recording.ended || recording.tap != nullptr || Clock::now() < recording.retry_at)
        continue;
      if (!still_coming(recording)) {
        recording.ended = true;
        continue;
      }
      auto tap = flow::Subscriber::Connect(recording.channel, tap_options);
      if (!tap.ok()) {
        recording.retry_at = Clock::now() + std::chrono::milliseconds(200);
        continue;
      }
      recording.tap = std::move(tap).MoveValueUnsafe();
      recording.last_sequence = 0;  // a new instance counts from 1
      ++recording.reconnects;
      ++connected;
      waitset.Add(recording.tap.get());
    }
    bool all_done = true;
    for (const Recording& recording : recordings) {
      all_done = all_done &&
                 (recording.ended || (options.count > 0 && recording.messages >= options.count));
    }
    if (all_done || g_interrupted.load() ||
        (options.duration.count() > 0 && Clock::now() - begin >= options.duration)) {
      break;
    }
    if (connected == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    auto ready = waitset.Wait(std::chrono::milliseconds(100));
    if (!ready.ok()) return fail(ready.status().message());
    for (Recording& recording : recordings) {
      if (recording.ended || recording.tap == nullptr) continue;
      for (int taken = 0; taken < 256; ++taken) {
        if (options.count > 0 && recording.messages >= options.count) break;
        auto message = recording.tap->TryReceive();
        if (!message.ok()) {
          if (message.status().code() != StatusCode::kCancelled) {
            recording.note = message.status().message();
          }
          lose_tap(recording);
          break;
        }
        if (!message->has_value()) {
          if (recording.tap->publisher_gone()) lose_tap(recording);
          break;
        }
        const flow::Message& received = **message;
        if (recording.last_sequence != 0 && received.sequence > recording.last_sequence + 1) {
          recording.missed += static_cast<int64_t>(received.sequence - recording.last_sequence - 1);
        }
        recording.last_sequence = received.sequence;
        Status written = write(recording, received);
        if (written.ok()) {
          ++recording.messages;
        } else {
          ++recording.skipped;
          recording.note = written.message();
          if (written.code() == StatusCode::kIOError) return fail(written.message());
        }
      }
    }
  }
  int code = 0;
  for (Recording& recording : recordings) {
    if (recording.writer != nullptr) {
      if (Status closed = recording.writer->Close(); !closed.ok()) {
        err << "ferry: " << closed.message() << "\n";
        code = 1;
      }
    }
    out << "  " << recording.name << ": " << recording.messages << " message"
        << (recording.messages == 1 ? "" : "s");
    if (recording.missed > 0)
      out << ", " << recording.missed << " missed (the recorder fell behind)";
    if (recording.skipped > 0) out << ", " << recording.skipped << " not written";
    if (recording.reconnects > 0) {
      out << ", " << recording.reconnects << " restart" << (recording.reconnects == 1 ? "" : "s")
          << " of the producer followed";
    }
    for (const auto& file : recording.files) out << ", " << file;
    if (!recording.note.empty()) out << " (" << recording.note << ")";
    out << "\n";
  }
  return code;
}

}  // namespace ferry::cli
