// `ferry replay DIR [--speed max|recorded] [--source NODE]`: a dataflow node
// that sends what `ferry record` recorded (dataflow_record.h) on its outputs,
// in recorded order, as fast as its consumers take it or at the recorded
// pace. It stands in for the recorded node in a descriptor:
//
//   - id: camera
//     path: ferry                    # the ferry executable
//     args: replay recording/ --speed recorded
//     outputs: [image]
//
// and its consumers (any subset of the graph) read it as they read the live
// node. Each output OUT of the node is fed by the recording of SOURCE/OUT
// (SOURCE: --source, else the node's own id), or else by the only recording
// in DIR of an output named OUT; the node finishes after the last message.
//
// Thread safety: runs on the calling thread (a node's main).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "ferry/base/status.h"

namespace ferry::cli {

struct ReplayOptions {
  std::string directory;
  bool recorded_speed = false;  // else as fast as the consumers take it
  std::string source;           // "" = the node's id
};

// The recordings in `directory` for `outputs` of node `node`: per output the
// files, in part order. Invalid naming the output and the recordings there
// are when one is missing or ambiguous.
Result<std::vector<std::vector<std::string>>> FindRecordings(
    const ReplayOptions& options, const std::string& node, const std::vector<std::string>& outputs);

// Runs the replay node (FERRY_NODE_CONFIG set by `ferry run`). Returns the
// exit code: 0 after the last message or a stop, 1 with the reason on `err`.
int RunReplay(const ReplayOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::cli
