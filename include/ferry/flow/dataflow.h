// The dataflow descriptor (`dataflow.yml`): a graph of nodes (processes) and
// operators (plugins inside one runtime process) joined by named outputs and
// inputs. ParseDataflow reads and validates it; every error names the file,
// line and column of the offending YAML and what is wrong with it.
//
//   nodes:
//     - id: camera
//       path: camera.py            # an executable or a Python script (.py)
//       args: [--fps, "30"]        # or one string, split like a shell would not: on spaces
//       env: {MODE: fast}
//       inputs:
//         tick: ferry/timer/millis/33
//       outputs: [image]
//       restart: on-failure         # never (default) | on-failure | always
//       max_restarts: 5             # with on-failure/always (default 5)
//       stop_grace_ms: 2000         # how long a stopped node may take before SIGKILL
//       resources: {gpus: 1, device: cuda}   # used by the job platform
//     - id: runtime
//       operators:
//         - id: detect
//           shared-library: build/libdetect.so   # or  python: detect.py
//           inputs:
//             image: {source: camera/image, queue_size: 4, overflow: drop_oldest}
//           outputs: [boxes]
//     - id: sink
//       path: sink
//       inputs: {boxes: runtime/detect/boxes}
//
// Sources: `node/output`, `node/operator/output`, or a built-in timer
// `ferry/timer/millis/N` / `ferry/timer/secs/N` / `ferry/timer/hz/N` (also
// spelled `dora/timer/...`, as in dora-rs descriptors). Input ids and output ids are
// names made of letters, digits, '_' and '-'; node and operator ids too.
//
// Thread safety: the functions are thread-safe; a Dataflow is a plain value.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ferry/base/source_location.h"
#include "ferry/base/status.h"

namespace ferry::flow {

enum class RestartPolicy : uint8_t { kNever, kOnFailure, kAlways };
const char* RestartPolicyName(RestartPolicy policy);

// What feeds an input.
struct InputSource {
  enum class Kind : uint8_t { kOutput, kTimer };
  Kind kind = Kind::kOutput;
  // kOutput: the producing node, its operator ("" for a plain node) and output.
  std::string node;
  std::string operator_id;
  std::string output;
  // kTimer: the period (ferry/timer/hz/N is rounded to whole nanoseconds).
  std::chrono::nanoseconds interval{0};
  // The text as written ("camera/image", "ferry/timer/millis/33",
  // "dora/timer/hz/30").
  std::string text;
};

struct InputSpec {
  std::string id;
  InputSource source;
  // Messages queued for this input before the overflow policy applies.
  uint32_t queue_size = 64;
  // "block" (default), "drop_oldest" or "drop_newest" (transport.h names).
  std::string overflow = "block";
  SourceLocation location;
};

struct OperatorSpec {
  std::string id;
  enum class Kind : uint8_t { kSharedLibrary, kPython };
  Kind kind = Kind::kSharedLibrary;
  // Absolute path of the library or script (relative paths are resolved
  // against the descriptor's directory).
  std::string path;
  std::vector<InputSpec> inputs;
  std::vector<std::string> outputs;
  // Free-form `config:` mapping, as JSON text ("{}" when absent), passed to
  // the operator's init.
  std::string config_json = "{}";
  SourceLocation location;
};

struct ResourceSpec {
  int gpus = 0;
  // Preferred device kind: "" (any), "cpu", "cuda", "opencl".
  std::string device;
};

struct NodeSpec {
  std::string id;
  // A plain node: path (absolute, resolved against the descriptor's
  // directory unless it names a program found on PATH), args and env.
  // `python` is true for a path ending in .py (run with the Python
  // interpreter that has the ferry package).
  std::string path;
  bool python = false;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::vector<InputSpec> inputs;
  std::vector<std::string> outputs;
  // A runtime node: operators instead of path (exactly one of the two).
  std::vector<OperatorSpec> operators;
  RestartPolicy restart = RestartPolicy::kNever;
  int max_restarts = 5;
  std::chrono::milliseconds stop_grace{2000};
  ResourceSpec resources;
  // dora-rs keys (docs/dora.md). `build`: a shell command run once in the
  // descriptor's directory before the dataflow starts (`ferry run
  // --no-build` skips it); a node with a build may name a program the build
  // creates, so its path is checked when it is launched. `send_stdout_as`:
  // an output (one of `outputs`) that carries the node's stdout lines.
  // `deploy_machine`: `_unstable_deploy: machine:`, recorded only (one machine).
  std::string build;
  std::string send_stdout_as;
  std::string deploy_machine;
  SourceLocation location;

  bool is_runtime() const { return !operators.empty(); }
};

struct Dataflow {
  // The descriptor's absolute path and directory ("" for ParseDataflowString
  // without a name).
  std::string path;
  std::string directory;
  std::vector<NodeSpec> nodes;

  const NodeSpec* FindNode(const std::string& id) const;
};

struct ParseOptions {
  // Check that executables and scripts exist (and are executable / readable).
  bool check_paths = true;
  // Allow cycles between nodes (feedback loops through queues). Cycles are
  // refused by default, naming the nodes on the cycle; operators of one
  // runtime node never may form a cycle among themselves.
  bool allow_cycles = false;
};

// Reads and validates a descriptor. Errors are Invalid with the message
// "<file>:<line>:<column>: <what>", e.g.
//   dataflow.yml:12:15: input 'image' of node 'sink' refers to unknown output 'camera/img'
//     (node 'camera' has outputs: image)
// Checked: YAML syntax; unknown keys (with the allowed ones listed); types of
// every value (a string where a list is wanted, a negative queue size, ...);
// duplicate node, operator, input and output ids; ids' characters; exactly one
// of path/operators; sources naming unknown nodes, operators or outputs;
// timer syntax and ranges (1 ms..1 day; 1..1e6 Hz); overflow and restart
// names; cycles; missing or non-executable paths (with check_paths).
Result<Dataflow> ParseDataflow(const std::string& path, const ParseOptions& options = {});
// Same, from text; `name` is used in messages and `directory` resolves
// relative paths.
Result<Dataflow> ParseDataflowString(const std::string& text, const std::string& name,
                                     const std::string& directory,
                                     const ParseOptions& options = {});

}  // namespace ferry::flow
