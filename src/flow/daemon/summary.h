// What `ferry run` reports when a dataflow ends: per node its exit status and
// restarts, per edge the messages, bytes, bytes copied and drops, added up
// over every instance of the nodes from the "stats" messages they send
// before exiting (Node::StatsJson). Printed as a table and written as JSON
// (--summary-json).
//
// Thread-compatible plain values.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "flow/daemon/plan.h"
#include "flow/daemon/process.h"

namespace ferry::flow::daemon {

struct PortCounters {
  int64_t messages = 0;
  int64_t bytes = 0;
  int64_t bytes_copied = 0;
  int64_t drops = 0;
};

struct NodeSummary {
  std::string id;
  // The last instance's end; `started` is false when no instance ever ran.
  bool started = false;
  ExitStatus exit;
  // Killed with SIGKILL because it did not finish within its stop grace.
  bool killed_after_grace = false;
  bool failed = false;
  int restarts = 0;
  // Instances that sent their statistics, of `instances` started.
  int instances = 0;
  int stats_reports = 0;
  // The last error the node reported ({"type":"error"}).
  std::string error;
  // Added up over all instances, keyed by the NodeConfig's output / input ids.
  std::map<std::string, PortCounters> outputs;
  std::map<std::string, PortCounters> inputs;

  // "exit 0", "exit 1 (failed)", "signal 11 (Segmentation fault) (failed)",
  // "killed after stop grace (failed)", "not started".
  std::string StatusText() const;
};

// One edge's accounting. Every message the producer sent on the output is
// meant for this edge's consumer, so it is either received, dropped or lost:
//   sent = received + drops + lost
// sent: what the producer's instances sent on the output. received: what the
// consumer's instances took off their queues. drops: discarded by the queue's
// overflow policy (the publisher's count when the output has this one
// consumer; the consumer's sequence gaps when several share it). lost: the
// rest: sent to a consumer instance that died or was restarted (queued in
// its ring when it died, or published while no instance was connected), or
// taken by an instance that died without reporting its statistics.
struct EdgeSummary {
  Edge edge;
  // messages: what the consumer received (the producer's sent count when the
  // consumer did not report); bytes likewise; bytes_copied and drops as above.
  PortCounters counters;
  // False when neither end reported statistics (a crash, say).
  bool reported = false;
  // sent and lost are -1 (unknown) unless every instance of the producer
  // reported; received counts the consumer instances that reported (those
  // that did not report count as lost).
  int64_t sent = -1;
  int64_t received = -1;
  int64_t lost = -1;
};

struct RunSummary {
  std::string run_id;
  std::string stop_reason;
  std::string log_dir;
  int exit_code = 0;
  double seconds = 0;
  std::vector<NodeSummary> nodes;
  std::vector<EdgeSummary> edges;

  const NodeSummary* FindNode(const std::string& id) const;
  const EdgeSummary* FindEdge(const std::string& label) const;

  nlohmann::ordered_json ToJson() const;
  // The table printed at the end of `ferry run`.
  std::string ToText() const;
};

// Adds one instance's statistics message body (the "stats" object of
// {"type":"stats","stats":{...}}) to `node`. Invalid for a malformed body;
// unknown fields are ignored.
Status AddNodeStats(const nlohmann::json& stats, NodeSummary* node);

// Fills `summary->edges` from the nodes' counters: messages and bytes from
// what the consumer received (the producer's when the consumer did not
// report), bytes copied from the producer's output, drops and lost as
// EdgeSummary says.
void ComputeEdges(const std::vector<Edge>& edges, RunSummary* summary);

}  // namespace ferry::flow::daemon
