#include "flow/operator/scripted_node.h"

#include <algorithm>
#include <utility>

namespace ferry::flow {

ScriptedNode::ScriptedNode(NodeConfig config) : config_(std::move(config)) {}

void ScriptedNode::PushInput(const std::string& input, RecordBatchPtr batch, Metadata metadata) {
  Event event;
  event.type = EventType::kInput;
  event.id = input;
  event.value = std::move(batch);
  event.metadata = std::move(metadata);
  event.sequence = ++sequences_[input];
  events_.push_back(std::move(event));
}

void ScriptedNode::PushInputClosed(const std::string& input) {
  Event event;
  event.type = EventType::kInputClosed;
  event.id = input;
  events_.push_back(std::move(event));
}

void ScriptedNode::PushStop(const std::string& reason) {
  Event event;
  event.type = EventType::kStop;
  event.id = reason;
  events_.push_back(std::move(event));
}

void ScriptedNode::PushError(const std::string& message) {
  Event event;
  event.type = EventType::kError;
  event.error = message;
  events_.push_back(std::move(event));
}

Result<std::optional<Event>> ScriptedNode::Next(std::chrono::nanoseconds) {
  if (events_.empty()) return std::optional<Event>();
  Event event = std::move(events_.front());
  events_.pop_front();
  return std::optional<Event>(std::move(event));
}

bool ScriptedNode::HasOutput(const std::string& output) const {
  return std::any_of(config_.outputs.begin(), config_.outputs.end(),
                     [&](const NodeConfig::Output& listed) { return listed.id == output; });
}

Status ScriptedNode::SendOutput(const std::string& output, const RecordBatch& batch,
                                const Metadata& metadata) {
  if (!HasOutput(output)) return Status::Invalid("node has no output '" + output + "'");
  if (std::find(closed_.begin(), closed_.end(), output) != closed_.end()) {
    return Status::Invalid("output '" + output + "' is closed");
  }
  sent_.push_back(Sent{output, std::make_shared<RecordBatch>(batch), metadata});
  return Status::OK();
}

MemoryPool* ScriptedNode::OutputPool(const std::string& output) {
  return HasOutput(output) ? pool_ : nullptr;
}

Status ScriptedNode::CloseOutput(const std::string& output) {
  if (!HasOutput(output)) return Status::Invalid("node has no output '" + output + "'");
  if (std::find(closed_.begin(), closed_.end(), output) == closed_.end()) closed_.push_back(output);
  return Status::OK();
}

Status ScriptedNode::WaitForSubscribers(const std::string& output, int, std::chrono::nanoseconds) {
  if (!HasOutput(output)) return Status::Invalid("node has no output '" + output + "'");
  return Status::OK();
}

std::string ScriptedNode::StatsJson() const {
  return "{\"sent\":" + std::to_string(sent_.size()) + "}";
}

}  // namespace ferry::flow
