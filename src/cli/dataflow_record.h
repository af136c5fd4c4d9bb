// `ferry record RUN -o DIR [NODE/OUTPUT ...]`: taps outputs of a running
// dataflow (as `ferry topic` does) and writes what they send into Arrow IPC
// files, one per output, that pyarrow, polars and duckdb read as they are.
//
// Each file <DIR>/<node>__<output>.arrow (an operator's output:
// <node>__<operator>__<output>.arrow) has one row per message:
//   time      timestamp[us, UTC]  when the recorder received it
//   seq       uint64              the producer's message number (from 1)
//   metadata  utf8                the message's metadata as a JSON object of
//                                 strings (ferry.types, when there, gives the
//                                 typed values' types: docs/node-api.md)
//   value     list<item: T>       the message: a plain array of T, or a
//                                 record batch as a list of its rows (T a struct)
// and the schema metadata ferry.run, ferry.output and ferry.kind ("array" or
// "batch"). A message whose type differs from the file's starts a new file,
// <name>.2.arrow, and so on.
//
// Thread safety: RecordOutputs installs SIGINT/SIGTERM handlers for its
// duration (so that Ctrl-C still writes complete files); run one at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"

namespace ferry::cli {

struct RecordOptions {
  std::string run_id;
  std::string directory;
  // NODE/OUTPUT or NODE/OPERATOR/OUTPUT; empty = every output of the run.
  std::vector<std::string> outputs;
  // Stop after this long, or once every output recorded this many messages
  // (0 = no limit); otherwise when every output ended (its node finished,
  // or the run did: a restarted node's output is followed to its new
  // instance) or on Ctrl-C.
  std::chrono::milliseconds duration{0};
  int64_t count = 0;
};

// The columns of one recorded row (time in microseconds since the Unix
// epoch, seq, metadata, value) for a message; `plain_array` for a message
// sent as a plain array (ferry.array), else a record batch.
Result<std::vector<ArrayDataPtr>> RecordedRow(const RecordBatch& batch, bool plain_array,
                                              const Metadata& metadata, uint64_t sequence,
                                              int64_t time_us);

// Runs `ferry record`. Returns the exit code: 0 with a line per output on
// `out` (messages recorded, missed, the files), 1 with the reason on `err`.
int RunRecord(const RecordOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::cli
