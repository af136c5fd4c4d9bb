// The run summary (summary.h).
#include "flow/daemon/summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>

namespace ferry::flow::daemon {
namespace {

// The first of `names` that `object` holds as an integer, or -1.
int64_t IntField(const nlohmann::json& object, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = object.find(name);
    if (it != object.end() && it->is_number_integer()) return it->get<int64_t>();
  }
  return -1;
}

Status ReadPort(const std::string& where, const nlohmann::json& body, PortCounters* counters) {
  if (!body.is_object()) return Status::Invalid(where + " is not an object");
  auto add = [](int64_t value, int64_t* total) {
    if (value > 0) *total += value;
  };
  add(IntField(body, {"messages", "received", "sent"}), &counters->messages);
  add(IntField(body, {"bytes", "bytes_received", "bytes_sent"}), &counters->bytes);
  add(IntField(body, {"bytes_copied"}), &counters->bytes_copied);
  int64_t drops = IntField(body, {"drops", "dropped"});
  if (drops < 0) {
    drops = std::max<int64_t>(IntField(body, {"dropped_oldest"}), 0) +
            std::max<int64_t>(IntField(body, {"dropped_newest"}), 0);
  }
  add(drops, &counters->drops);
  return Status::OK();
}

// Ports as {"id": {...}} or [{"id": "...", ...}].
Status ReadPorts(const char* kind, const nlohmann::json& stats,
                 std::map<std::string, PortCounters>* ports) {
  auto it = stats.find(kind);
  if (it == stats.end()) return Status::OK();
  if (it->is_object()) {
    for (const auto& [id, body] : it->items()) {
      FERRY_RETURN_NOT_OK(ReadPort(std::string(kind) + "." + id, body, &(*ports)[id]));
    }
    return Status::OK();
  }
  if (it->is_array()) {
    for (const auto& body : *it) {
      if (!body.is_object() || !body.contains("id") || !body["id"].is_string()) {
        return Status::Invalid(std::string(kind) + " entry without a string \"id\"");
      }
      const std::string id = body["id"].get<std::string>();
      FERRY_RETURN_NOT_OK(ReadPort(std::string(kind) + "." + id, body, &(*ports)[id]));
    }
    return Status::OK();
  }
  return Status::Invalid(std::string("\"") + kind + "\" is neither an object nor a list");
}

nlohmann::ordered_json CountersJson(const PortCounters& counters) {
  return {{"messages", counters.messages},
          {"bytes", counters.bytes},
          {"bytes_copied", counters.bytes_copied},
          {"drops", counters.drops}};
}

std::string HumanBytes(int64_t bytes) {
  char text[32];
  if (bytes < int64_t{10} * 1024) {
    std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  } else if (bytes < int64_t{10} << 20) {
    std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
  } else if (bytes < int64_t{10} << 30) {
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / 1048576.0);
  } else {
    std::snprintf(text, sizeof(text), "%.1f GiB", bytes / 1073741824.0);
  }
  return text;
}

std::string Pad(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string PadLeft(const std::string& text, size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

}  // namespace

std::string NodeSummary::StatusText() const {
  if (!started) return "not started";
  std::string text = killed_after_grace ? "killed after stop grace" : exit.ToString();
  if (failed) text += " (failed)";
  return text;
}

const NodeSummary* RunSummary::FindNode(const std::string& id) const {
  for (const auto& node : nodes) {
    if (node.id == id) return &node;
  }
  return nullptr;
}

const EdgeSummary* RunSummary::FindEdge(const std::string& label) const {
  for (const auto& edge : edges) {
    if (edge.edge.label == label) return &edge;
  }
  return nullptr;
}

Status AddNodeStats(const nlohmann::json& stats, NodeSummary* node) {
  if (!stats.is_object()) return Status::Invalid("statistics are not a JSON object");
  // Parse into a copy so that a malformed report changes nothing.
  NodeSummary updated = *node;
  FERRY_RETURN_NOT_OK(ReadPorts("outputs", stats, &updated.outputs));
  FERRY_RETURN_NOT_OK(ReadPorts("inputs", stats, &updated.inputs));
  updated.stats_reports += 1;
  *node = std::move(updated);
  return Status::OK();
}

void ComputeEdges(const std::vector<Edge>& edges, RunSummary* summary) {
  summary->edges.clear();
  // How many edges each output feeds: a publisher's drop count belongs to one
  // edge only when its output has a single consumer.
  std::map<std::pair<std::string, std::string>, int> fan_out;
  for (const Edge& edge : edges) ++fan_out[{edge.producer, edge.producer_output}];
  for (const Edge& edge : edges) {
    EdgeSummary result;
    result.edge = edge;
    const NodeSummary* producer = summary->FindNode(edge.producer);
    const NodeSummary* consumer = summary->FindNode(edge.consumer);
    const PortCounters* sent = nullptr;
    const PortCounters* received = nullptr;
    if (producer != nullptr && producer->stats_reports > 0) {
      auto it = producer->outputs.find(edge.producer_output);
      if (it != producer->outputs.end()) sent = &it->second;
    }
    if (consumer != nullptr && consumer->stats_reports > 0) {
      auto it = consumer->inputs.find(edge.consumer_input);
      if (it != consumer->inputs.end()) received = &it->second;
    }
    if (received != nullptr) {
      result.counters.messages = received->messages;
      result.counters.bytes = received->bytes;
      result.counters.drops = received->drops;
    } else if (sent != nullptr) {
      result.counters.messages = sent->messages;
      result.counters.bytes = sent->bytes;
    }
    // Consumers report bytes_received; one that reported no bytes (it died
    // before its stats message, say) is estimated from the producer's bytes
    // per message times what it received (exact when it received them all).
    if (received != nullptr && sent != nullptr && received->bytes == 0 && sent->messages > 0) {
      result.counters.bytes = received->messages == sent->messages
                                  ? sent->bytes
                                  : static_cast<int64_t>(static_cast<double>(sent->bytes) *
                                                         static_cast<double>(received->messages) /
                                                         static_cast<double>(sent->messages));
    }
    if (sent != nullptr) {
      result.counters.bytes_copied = sent->bytes_copied;
      const bool single = fan_out[{edge.producer, edge.producer_output}] == 1;
      if (single || received == nullptr) result.counters.drops = sent->drops;
    }
    result.reported = sent != nullptr || received != nullptr;
    // An instance of the producer that died without reporting took its
    // count with it: sent (and so lost) is unknown then.
    if (sent != nullptr && producer->stats_reports >= producer->instances) {
      result.sent = sent->messages;
    }
    // A consumer instance that died without reporting took its messages
    // with it: they count as lost, so received is what the reports say.
    result.received = received != nullptr ? received->messages : (result.reported ? 0 : -1);
    if (result.sent >= 0) {
      result.lost = std::max<int64_t>(result.sent - result.received - result.counters.drops, 0);
    }
    summary->edges.push_back(std::move(result));
  }
}

nlohmann::ordered_json RunSummary::ToJson() const {
  nlohmann::ordered_json json;
  json["dataflow"] = run_id;
  json["stop_reason"] = stop_reason;
  json["exit_code"] = exit_code;
  json["seconds"] = seconds;
  json["log_dir"] = log_dir;
  json["nodes"] = nlohmann::ordered_json::array();
  for (const NodeSummary& node : nodes) {
    nlohmann::ordered_json entry;
    entry["id"] = node.id;
    entry["status"] = node.StatusText();
    entry["started"] = node.started;
    entry["failed"] = node.failed;
    entry["exit_code"] = node.started && node.exit.exited ? nlohmann::ordered_json(node.exit.code)
                                                          : nlohmann::ordered_json(nullptr);
    entry["signal"] = node.started && !node.exit.exited ? nlohmann::ordered_json(node.exit.signal)
                                                        : nlohmann::ordered_json(nullptr);
    entry["killed_after_grace"] = node.killed_after_grace;
    entry["restarts"] = node.restarts;
    entry["instances"] = node.instances;
    entry["stats_reports"] = node.stats_reports;
    if (!node.error.empty()) entry["error"] = node.error;
    nlohmann::ordered_json outputs = nlohmann::ordered_json::object();
    for (const auto& [id, counters] : node.outputs) outputs[id] = CountersJson(counters);
    nlohmann::ordered_json inputs = nlohmann::ordered_json::object();
    for (const auto& [id, counters] : node.inputs) inputs[id] = CountersJson(counters);
    entry["outputs"] = std::move(outputs);
    entry["inputs"] = std::move(inputs);
    json["nodes"].push_back(std::move(entry));
  }
  json["edges"] = nlohmann::ordered_json::array();
  for (const EdgeSummary& edge : edges) {
    nlohmann::ordered_json entry;
    entry["edge"] = edge.edge.label;
    entry.update(CountersJson(edge.counters));
    // sent = received + drops + lost (summary.h); null when an end did not report.
    auto known = [](int64_t value) {
      return value >= 0 ? nlohmann::ordered_json(value) : nlohmann::ordered_json();
    };
    entry["sent"] = known(edge.sent);
    entry["received"] = known(edge.received);
    entry["lost"] = known(edge.lost);
    entry["producer"] = edge.edge.producer;
    entry["output"] = edge.edge.producer_output;
    entry["consumer"] = edge.edge.consumer;
    entry["input"] = edge.edge.consumer_input;
    entry["reported"] = edge.reported;
    json["edges"].push_back(std::move(entry));
  }
  return json;
}

std::string RunSummary::ToText() const {
  std::ostringstream text;
  char seconds_text[32];
  std::snprintf(seconds_text, sizeof(seconds_text), "%.1f", seconds);
  text << "dataflow " << run_id << " finished";
  if (!stop_reason.empty()) text << " (" << stop_reason << ")";
  text << " after " << seconds_text << " s, exit code " << exit_code << "\n";

  size_t node_width = 4;
  for (const auto& node : nodes) node_width = std::max(node_width, node.id.size());
  text << "  " << Pad("node", node_width + 2) << Pad("status", 36) << "restarts\n";
  for (const auto& node : nodes) {
    text << "  " << Pad(node.id, node_width + 2) << Pad(node.StatusText(), 36) << node.restarts;
    if (!node.error.empty()) text << "   error: " << node.error;
    text << "\n";
  }
  if (!edges.empty()) {
    size_t edge_width = 4;
    for (const auto& edge : edges) edge_width = std::max(edge_width, edge.edge.label.size());
    text << "  " << Pad("edge", edge_width + 2) << PadLeft("sent", 8) << PadLeft("received", 10)
         << PadLeft("bytes", 12) << PadLeft("copied", 12) << PadLeft("drops", 8)
         << PadLeft("lost", 8) << "\n";
    for (const auto& edge : edges) {
      text << "  " << Pad(edge.edge.label, edge_width + 2);
      if (!edge.reported) {
        text << PadLeft("-", 8) << PadLeft("-", 10) << PadLeft("-", 12) << PadLeft("-", 12)
             << PadLeft("-", 8) << PadLeft("-", 8) << "   (no statistics)\n";
        continue;
      }
      // Without both ends' reports, what the silent end counted is unknown.
      auto known = [](int64_t value) { return value >= 0 ? std::to_string(value) : "-"; };
      text << PadLeft(known(edge.sent), 8) << PadLeft(known(edge.received), 10)
           << PadLeft(HumanBytes(edge.counters.bytes), 12)
           << PadLeft(HumanBytes(edge.counters.bytes_copied), 12)
           << PadLeft(std::to_string(edge.counters.drops), 8) << PadLeft(known(edge.lost), 8);
      if (edge.lost < 0) text << "   (a producer instance did not report)";
      text << "\n";
    }
  }
  if (!log_dir.empty()) text << "  logs: " << log_dir << "\n";
  return text.str();
}

}  // namespace ferry::flow::daemon
