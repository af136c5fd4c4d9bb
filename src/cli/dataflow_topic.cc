// `ferry topic echo|hz` (dataflow_topic.h).
#include "cli/dataflow_topic.h"

#include <cstdio>
#include <set>
#include <sstream>
#include <vector>

#include "cli/dataflow_top.h"
#include "ferry/flow/node.h"
#include "ferry/flow/transport.h"
#include "flow/daemon/daemon.h"

namespace ferry::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> SplitSlashes(const std::string& text) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (;;) {
    const size_t slash = text.find('/', begin);
    parts.push_back(text.substr(begin, slash == std::string::npos ? slash : slash - begin));
    if (slash == std::string::npos) return parts;
    begin = slash + 1;
  }
}

void AddBytes(const ArrayData& data, std::set<const void*>* seen, int64_t* total) {
  for (const auto& buffer : data.buffers) {
    if (buffer != nullptr && seen->insert(buffer.get()).second) *total += buffer->size();
  }
  for (const auto& child : data.children) {
    if (child != nullptr) AddBytes(*child, seen, total);
  }
  if (data.dictionary != nullptr) AddBytes(*data.dictionary, seen, total);
}

}  // namespace

Result<TopicName> ParseTopicName(const std::string& text) {
  const std::vector<std::string> parts = SplitSlashes(text);
  bool empty_part = false;
  for (const auto& part : parts) empty_part = empty_part || part.empty();
  if ((parts.size() != 3 && parts.size() != 4) || empty_part) {
    return Status::Invalid("'" + text +
                           "' is not RUN/NODE/OUTPUT (or RUN/NODE/OPERATOR/OUTPUT for an "
                           "operator's output)");
  }
  TopicName topic;
  topic.run_id = parts[0];
  topic.node = parts[1];
  topic.output = parts.size() == 3 ? parts[2] : parts[2] + "/" + parts[3];
  FERRY_RETURN_NOT_OK(flow::daemon::CheckRunName(topic.run_id));
  return topic;
}

Result<std::string> ResolveTopic(const TopicName& topic) {
  auto described = flow::daemon::DescribeDataflow(topic.run_id, std::chrono::seconds(2));
  if (!described.ok()) return described.status();
  const nlohmann::json& description = described->description;
  std::string nodes;
  for (const auto& node : description.value("nodes", nlohmann::json::array())) {
    const std::string id = node.value("id", "");
    nodes += (nodes.empty() ? "" : ", ") + id;
    if (id != topic.node) continue;
    std::string outputs;
    for (const auto& output : node.value("outputs", nlohmann::json::array())) {
      const std::string output_id = output.value("id", "");
      if (output_id == topic.output) return output.value("channel", "");
      outputs += (outputs.empty() ? "" : ", ") + output_id;
    }
    return Status::Invalid(
        "node '" + topic.node + "' of dataflow '" + topic.run_id + "' has no output '" +
        topic.output + "' (outputs: " + (outputs.empty() ? "none" : outputs) + ")" +
        (topic.output.find('/') != std::string::npos
             ? "; an operator's output is published only when another node reads it"
             : ""));
  }
  return Status::Invalid("dataflow '" + topic.run_id + "' has no node '" + topic.node +
                         "' (nodes: " + nodes + ")");
}

int64_t BatchBytes(const RecordBatch& batch) {
  std::set<const void*> seen;
  int64_t total = 0;
  for (int c = 0; c < batch.num_columns(); ++c) AddBytes(*batch.column(c), &seen, &total);
  return total;
}

std::string FormatMessage(const RecordBatch& batch, const Metadata& metadata, uint64_t sequence,
                          int64_t max_values) {
  std::ostringstream out;
  const bool plain_array = flow::IsArrayMessage(metadata) && batch.num_columns() == 1;
  out << "--- seq " << sequence << ", " << batch.num_rows() << " row"
      << (batch.num_rows() == 1 ? "" : "s") << ", " << FormatBytes(BatchBytes(batch));
  for (const auto& [key, value] : metadata) {
    if (key.rfind("ferry.", 0) == 0) continue;  // the transport's own keys
    out << ", " << key << "=" << value;
  }
  out << "\n";
  if (plain_array) {
    out << ArrayToString(*batch.column(0), max_values) << "\n";
    return out.str();
  }
  for (int c = 0; c < batch.num_columns(); ++c) {
    out << batch.schema()->fields[static_cast<size_t>(c)].name << ": "
        << ArrayToString(*batch.column(c), max_values) << "\n";
  }
  return out.str();
}

int RunTopic(const TopicOptions& options, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "ferry: " << message << "\n";
    return 1;
  };
  auto topic = ParseTopicName(options.topic);
  if (!topic.ok()) return fail(topic.status().message());
  auto channel = ResolveTopic(*topic);
  if (!channel.ok()) return fail(channel.status().message());
  flow::SubscriberOptions subscriber_options;
  subscriber_options.queue_capacity = 64;
  subscriber_options.overflow = flow::OverflowPolicy::kDropOldest;
  subscriber_options.connect_timeout = options.connect_timeout;
  auto subscriber = flow::Subscriber::Connect(*channel, subscriber_options);
  if (!subscriber.ok()) {
    return fail("cannot subscribe to " + options.topic + ": " + subscriber.status().message());
  }
  flow::Subscriber& tap = **subscriber;

  int64_t shown = 0;
  int64_t window_messages = 0, window_bytes = 0;
  uint64_t last_sequence = 0;
  int64_t gaps = 0;
  Clock::time_point window_begin = Clock::now();
  for (;;) {
    const auto wait = options.hz ? std::max(std::chrono::nanoseconds(0),
                                            window_begin + options.window - Clock::now())
                                 : std::chrono::nanoseconds(std::chrono::milliseconds(500));
    auto message = tap.Receive(wait);
    const bool ended = !message.ok() && message.status().code() == StatusCode::kCancelled;
    if (!message.ok() && !ended && message.status().code() != StatusCode::kTimedOut) {
      return fail(options.topic + ": " + message.status().message());
    }
    if (message.ok()) {
      if (last_sequence != 0 && message->sequence > last_sequence + 1) {
        const auto missed = static_cast<int64_t>(message->sequence - last_sequence - 1);
        gaps += missed;
        if (!options.hz) out << "(" << missed << " messages missed: the tap fell behind)\n";
      }
      last_sequence = message->sequence;
      if (options.hz) {
        ++window_messages;
        if (message->batch != nullptr) window_bytes += BatchBytes(*message->batch);
      } else {
        if (message->batch != nullptr) {
          out << FormatMessage(*message->batch, message->metadata, message->sequence,
                               options.max_values);
        } else {
          out << "--- seq " << message->sequence << ": a device batch (not shown)\n";
        }
        out.flush();
        if (options.count > 0 && ++shown >= options.count) return 0;
      }
    }
    if (options.hz && (ended || Clock::now() >= window_begin + options.window)) {
      const double seconds = std::chrono::duration<double>(Clock::now() - window_begin).count();
      if (window_messages > 0 || !ended) {
        char line[160];
        std::snprintf(line, sizeof(line), "%.1f msg/s  %s/s  (%lld messages in %.2f s",
                      seconds > 0 ? window_messages / seconds : 0.0,
                      FormatBytes(seconds > 0 ? window_bytes / seconds : 0).c_str(),
                      static_cast<long long>(window_messages), seconds);
        out << line;
        if (gaps > 0) out << ", " << gaps << " missed";
        out << ")\n";
        out.flush();
        if (options.count > 0 && ++shown >= options.count) return 0;
      }
      window_messages = 0;
      window_bytes = 0;
      gaps = 0;
      window_begin = Clock::now();
    }
    if (ended) {
      out << "(" << options.topic << " ended)\n";
      return 0;
    }
  }
}

}  // namespace ferry::cli
