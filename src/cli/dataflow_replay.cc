// `ferry replay` (dataflow_replay.h).
#include "cli/dataflow_replay.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/dataflow_ipc.h"
#include "ferry/flow/node.h"

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string MetadataValue(const Metadata& metadata, const std::string& key) {
  for (const auto& [name, value] : metadata) {
    if (name == key) return value;
  }
  return "";
}

// "<stem>.arrow" before "<stem>.2.arrow", "<stem>.3.arrow", ...
int PartNumber(const std::string& file) {
  const std::string stem = fs::path(file).stem().string();
  const size_t dot = stem.rfind('.');
  if (dot == std::string::npos) return 1;
  const std::string digits = stem.substr(dot + 1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return 1;
  return std::atoi(digits.c_str());
}

// One message to send: where it is and when it was recorded.
struct Pending {
  int64_t time_us;
  size_t output;  // index into the outputs
  size_t file;    // index into that output's readers
  int64_t batch;
  int64_t row;
};

struct OutputFiles {
  std::string id;
  std::vector<std::unique_ptr<IpcFileReader>> readers;
  std::vector<bool> plain;  // per reader: ferry.kind == "array"
};

Status CheckLayout(const IpcFileReader& reader, const std::string& file) {
  const Schema& schema = *reader.schema();
  const char* names[] = {"time", "seq", "metadata", "value"};
  bool ok = schema.num_fields() == 4;
  for (int i = 0; ok && i < 4; ++i) ok = schema.fields[static_cast<size_t>(i)].name == names[i];
  ok = ok && schema.fields[0].type->id == TypeId::kTimestamp &&
       schema.fields[0].type->unit == TimeUnit::kMicro &&
       schema.fields[2].type->id == TypeId::kUtf8 && schema.fields[3].type->id == TypeId::kList;
  if (!ok) {
    return Status::Invalid(
        file + " is not a recording of `ferry record` (columns: " + schema.ToString() + ")");
  }
  return Status::OK();
}

// The message at `pending` as the values to send and its metadata.
Status SendOne(flow::Node& node, const OutputFiles& output, const Pending& pending) {
  const IpcFileReader& reader = *output.readers[pending.file];
  FERRY_ASSIGN_OR_RAISE(auto batch, reader.ReadBatch(pending.batch));
  const auto& columns = batch.second;
  const ArrayData& metadata_column = *columns[2];
  const auto* text_offsets = metadata_column.GetValues<int32_t>(1);
  const std::string text(
      metadata_column.buffers[2] == nullptr
          ? ""
          : std::string(
                metadata_column.buffers[2]->data_as<char>() + text_offsets[pending.row],
                static_cast<size_t>(text_offsets[pending.row + 1] - text_offsets[pending.row])));
  Metadata metadata;
  const auto object = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_object()) {
    for (const auto& [key, value] : object.items()) {
      if (value.is_string()) metadata.emplace_back(key, value.get<std::string>());
    }
  }
  const ArrayData& list = *columns[3];
  const auto* offsets = list.GetValues<int32_t>(1);
  const int64_t begin = offsets[pending.row];
  const int64_t length = offsets[pending.row + 1] - begin;
  const ArrayDataPtr& values = list.children.at(0);
  if (output.plain[pending.file]) {
    return node.SendArray(output.id, Slice(values, begin, length), metadata);
  }
  if (values->type->id != TypeId::kStruct) {
    return Status::Invalid("a batch recording whose values are no struct");
  }
  auto schema = std::make_shared<Schema>();
  schema->fields = values->type->children;
  std::vector<ArrayDataPtr> fields;
  for (const auto& child : values->children) fields.push_back(Slice(child, begin, length));
  FERRY_ASSIGN_OR_RAISE(auto message, RecordBatch::Make(schema, length, std::move(fields)));
  return node.SendOutput(output.id, *message, metadata);
}

}  // namespace

Result<std::vector<std::vector<std::string>>> FindRecordings(
    const ReplayOptions& options, const std::string& node,
    const std::vector<std::string>& outputs) {
  std::error_code error;
  if (!fs::is_directory(options.directory, error)) {
    return Status::Invalid("no recording directory " + options.directory);
  }
  // Every recording in the directory, by the output it recorded.
  std::map<std::string, std::vector<std::string>> by_output;
  for (const auto& entry : fs::directory_iterator(options.directory, error)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".arrow") continue;
    auto reader = IpcFileReader::Open(entry.path().string());
    if (!reader.ok()) continue;  // not ours
    const std::string recorded = MetadataValue((*reader)->schema()->metadata, "ferry.output");
    if (!recorded.empty()) by_output[recorded].push_back(entry.path().string());
  }
  std::string known;
  for (const auto& [name, files] : by_output) known += (known.empty() ? "" : ", ") + name;
  const std::string source = options.source.empty() ? node : options.source;
  std::vector<std::vector<std::string>> found;
  for (const std::string& output : outputs) {
    auto exact = by_output.find(source + "/" + output);
    std::vector<std::string> files;
    if (exact != by_output.end()) {
      files = exact->second;
    } else {
      std::vector<std::string> candidates;
      for (const auto& [name, paths] : by_output) {
        const size_t slash = name.rfind('/');
        if (name.substr(slash == std::string::npos ? 0 : slash + 1) == output) {
          candidates.push_back(name);
        }
      }
      if (candidates.size() != 1) {
        return Status::Invalid("no recording for output '" + output + "' of node '" + node +
                               "' in " + options.directory +
                               (candidates.empty() ? "" : " (several match: give --source NODE)") +
                               " (recordings: " + (known.empty() ? "none" : known) + ")");
      }
      files = by_output[candidates.front()];
    }
    std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
      return PartNumber(a) < PartNumber(b);
    });
    found.push_back(std::move(files));
  }
  return found;
}

int RunReplay(const ReplayOptions& options, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "ferry replay: " << message << "\n";
    return 1;
  };
  const char* config_text = std::getenv("FERRY_NODE_CONFIG");
  if (config_text == nullptr) {
    return fail(
        "runs as a node of a dataflow: give it as a node's path (path: ferry, args: replay DIR) "
        "and start the dataflow with `ferry run`");
  }
  auto config = flow::NodeConfig::FromJson(config_text);
  if (!config.ok()) return fail(config.status().message());
  std::vector<std::string> output_ids;
  for (const auto& output : config->outputs) output_ids.push_back(output.id);
  if (output_ids.empty()) return fail("node '" + config->node + "' has no outputs to replay into");
  auto recordings = FindRecordings(options, config->node, output_ids);
  if (!recordings.ok()) return fail(recordings.status().message());

  // Everything to send, in recorded order (before the node starts: a bad
  // recording fails the start rather than the middle of the run).
  std::vector<OutputFiles> outputs;
  std::vector<Pending> schedule;
  for (size_t o = 0; o < output_ids.size(); ++o) {
    OutputFiles files;
    files.id = output_ids[o];
    for (const std::string& path : (*recordings)[o]) {
      auto reader = IpcFileReader::Open(path);
      if (!reader.ok()) return fail(reader.status().message());
      if (Status layout = CheckLayout(**reader, path); !layout.ok()) return fail(layout.message());
      const size_t file = files.readers.size();
      files.plain.push_back(MetadataValue((*reader)->schema()->metadata, "ferry.kind") == "array");
      for (int64_t b = 0; b < (*reader)->num_batches(); ++b) {
        auto batch = (*reader)->ReadBatch(b);
        if (!batch.ok()) return fail(batch.status().message());
        const int64_t* times = batch->second[0]->GetValues<int64_t>(1);
        for (int64_t row = 0; row < batch->first; ++row) {
          schedule.push_back({times == nullptr ? 0 : times[row], o, file, b, row});
        }
      }
      files.readers.push_back(std::move(reader).MoveValueUnsafe());
    }
    outputs.push_back(std::move(files));
  }
  std::stable_sort(schedule.begin(), schedule.end(),
                   [](const Pending& a, const Pending& b) { return a.time_us < b.time_us; });

  auto node = flow::Node::FromEnvironment();
  if (!node.ok()) return fail(node.status().message());
  const Clock::time_point begin = Clock::now();
  const int64_t first_us = schedule.empty() ? 0 : schedule.front().time_us;
  int64_t sent = 0;
  for (const Pending& pending : schedule) {
    // Wait for its time (or not at all), listening for the daemon's stop.
    const Clock::time_point due =
        options.recorded_speed ? begin + std::chrono::microseconds(pending.time_us - first_us)
                               : Clock::now();
    for (;;) {
      const auto left = std::max(Clock::duration::zero(), due - Clock::now());
      auto event = (*node)->Next(left);
      if (!event.ok()) {
        if (event.status().code() == StatusCode::kTimedOut) break;
        return fail(event.status().message());
      }
      if (!event->has_value() || (**event).type == flow::EventType::kStop) {
        out << "replay stopped after " << sent << " of " << schedule.size() << " messages\n";
        return 0;
      }
      if (Clock::now() >= due) break;
    }
    Status status = SendOne(**node, outputs[pending.output], pending);
    if (!status.ok())
      return fail("output '" + outputs[pending.output].id + "': " + status.message());
    ++sent;
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.3f",
                std::chrono::duration<double>(Clock::now() - begin).count());
  out << "replayed " << sent << " messages in " << seconds << " s\n";
  return 0;
}

}  // namespace ferry::cli
