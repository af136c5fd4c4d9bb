// A Node whose events are written in advance and whose outputs are kept in
// memory: the operator host runs against it in tests and in
// `OperatorHost.run_scripted` from Python, without a daemon or other
// processes. Next hands out the queued events in order, then reports the end
// of the stream. Internal.
//
// Thread safety: one thread at a time, like every Node.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "ferry/flow/node.h"

namespace ferry::flow {

class ScriptedNode final : public Node {
 public:
  // `config` lists the node's inputs and outputs (ids "<operator>/<port>").
  explicit ScriptedNode(NodeConfig config);

  // Queues an input message (sequence numbers count per input from 1).
  void PushInput(const std::string& input, RecordBatchPtr batch, Metadata metadata = {});
  void PushInputClosed(const std::string& input);
  void PushStop(const std::string& reason);
  void PushError(const std::string& message);

  struct Sent {
    std::string output;
    RecordBatchPtr batch;
    Metadata metadata;
  };
  const std::vector<Sent>& sent() const { return sent_; }
  const std::vector<std::string>& closed_outputs() const { return closed_; }
  // Memory OutputPool lends (nullptr: none, the default).
  void set_output_pool(MemoryPool* pool) { pool_ = pool; }

  const std::string& id() const override { return config_.node; }
  const NodeConfig& config() const override { return config_; }
  Result<std::optional<Event>> Next(std::chrono::nanoseconds timeout) override;
  Status SendOutput(const std::string& output, const RecordBatch& batch,
                    const Metadata& metadata) override;
  MemoryPool* OutputPool(const std::string& output) override;
  Status CloseOutput(const std::string& output) override;
  // Nothing to wait for: every output is read in memory.
  Status WaitForSubscribers(const std::string& output, int count,
                            std::chrono::nanoseconds timeout) override;
  std::string StatsJson() const override;

 private:
  bool HasOutput(const std::string& output) const;

  NodeConfig config_;
  std::deque<Event> events_;
  std::map<std::string, uint64_t> sequences_;
  std::vector<Sent> sent_;
  std::vector<std::string> closed_;
  MemoryPool* pool_ = nullptr;
};

}  // namespace ferry::flow
