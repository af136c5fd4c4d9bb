// The operator host: the heart of a runtime node. It loads operators
// (shared libraries through the C ABI of ferry/c/ferry_operator.h, or
// operators implemented in the host process such as Python ones), routes
// their batches to each other in-process, feeds them the node's external
// inputs and publishes their outputs on the node's outputs.
//
// In-process routing never copies: a batch an operator sends to exactly one
// consumer is the very ArrowDeviceArray struct it sent (moved); a batch with
// several consumers is shared (SharedDeviceArray: one struct tree per
// consumer over the same buffers and sync_event). A device batch keeps its
// event, so a consumer on the same device waits on it instead of copying.
// Publishing on a node output (another process reads it) needs host memory:
// CPU batches go to the node as they are (the node copies them into shared
// memory); device batches are copied to the host once, into the output's
// shared memory, counted as D2H bytes with the fallback reason
// crosses_process (OpenCL has no inter-process handles).
//
// Events. An operator gets INPUT events in the order its producers sent
// them; INPUT_CLOSED when the producer of an input finished (an operator
// that returned STOP or failed, or the node's input closing); STOP with the
// reason when the node is stopped, when its event stream ends, or when every
// input of the operator closed. After STOP the operator is dropped and its
// outputs close, which its consumers see as INPUT_CLOSED. STOP goes out in
// the order of the graph (producers first) and each operator's last outputs
// are delivered before its consumers stop.
//
// Errors. An operator that returns ERROR (or sends what is not a record
// batch, which it learns from send_output) is reported (errors(), stderr)
// and stopped like one that returned STOP; the others carry on.
//
// Threads. One thread runs everything (Run); operators are called one at a
// time and never concurrently. Not thread-safe otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/c/ferry_operator.h"
#include "ferry/flow/node.h"
#include "flow/operator/operator_list.h"

namespace ferry::flow {

// One operator as the host drives it: the C entry points of a library, or
// an operator living in the host process. Destroying it without Drop drops
// nothing (the host always calls Drop once after a successful Init).
class OperatorInstance {
 public:
  virtual ~OperatorInstance() = default;
  // Returns 0, or FERRY_OPERATOR_ERROR with *error set.
  virtual int Init(const FerryOperatorHost* host, const std::string& config_json,
                   std::string* error) = 0;
  // Returns FERRY_OPERATOR_CONTINUE, _STOP, or _ERROR with *error set.
  virtual int OnEvent(const FerryOperatorEvent& event, const FerryOperatorHost* host,
                      std::string* error) = 0;
  virtual void Drop() = 0;
};

// Opens the operator library at `path`: dlopen, the four entry points, the
// ABI version. Invalid naming the library and what is wrong with it (cannot
// be opened, which symbol is missing, which versions differ). A library
// that was opened stays loaded for the life of the process (batches it sent
// may be released later), except one refused here.
Result<std::unique_ptr<OperatorInstance>> OpenOperatorLibrary(const std::string& path);

struct OperatorError {
  std::string operator_id;
  std::string message;
};

struct OperatorStats {
  std::string id;
  std::string state;               // "running", "stopped", "failed"
  uint64_t events = 0;             // events delivered (every type)
  uint64_t inputs_moved = 0;       // batches received as the producer's own struct
  uint64_t inputs_shared = 0;      // batches received as a shared view (fan-out)
  uint64_t inputs_external = 0;    // batches received from the node's inputs
  uint64_t inputs_dropped = 0;     // discarded by a drop_oldest/drop_newest input
  uint64_t outputs_sent = 0;       // batches sent
  uint64_t outputs_published = 0;  // batches published on the node's outputs
  int64_t bytes_copied = 0;        // device bytes copied to publish (crosses_process)
};

struct OperatorHostOptions {
  // How long a host wait on a batch's event may take when publishing.
  std::chrono::nanoseconds wait_timeout = std::chrono::seconds(30);
  // Report operator errors on stderr as they happen.
  bool log_errors = true;
};

class OperatorHost {
 public:
  explicit OperatorHost(OperatorHostOptions options = {});
  // Drops every operator still alive.
  ~OperatorHost();
  OperatorHost(const OperatorHost&) = delete;
  OperatorHost& operator=(const OperatorHost&) = delete;

  // Adds a shared-library operator: opens `definition.path` and calls its
  // init with the config. Invalid (prefixed "operator 'id': ") when the
  // library is refused or init fails, or for a duplicate id.
  Status Add(const OperatorDefinition& definition);
  // Adds an operator implemented by `instance` (init is called here too).
  Status Add(const OperatorDefinition& definition, std::unique_ptr<OperatorInstance> instance);

  // Runs the operators against `node` until every operator has finished or
  // the node's event stream is over (then the remaining ones get STOP).
  // Checks the graph first: every in-process source names an operator
  // output, operators form no cycle, every external input is one of the
  // node's inputs ("<operator>/<input>"); outputs are published where the
  // node has an output "<operator>/<output>". Returns the error of the node
  // (a failed Next) or of the graph check; operator errors are in errors().
  // Runs once.
  Status Run(Node* node);

  std::vector<OperatorError> errors() const;
  std::vector<OperatorStats> stats() const;
  // {"operators":[{"id":..,"state":..,"events":..,...}],"errors":[...]}
  std::string StatsJson() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::flow
