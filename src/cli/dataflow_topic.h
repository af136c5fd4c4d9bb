// `ferry topic echo|hz RUN/NODE/OUTPUT`: a live output of a running dataflow,
// read by a tap: one more subscriber of the output's channel on Ferry's
// transport (zero copy: batches are read in the producer's shared memory),
// with its own small drop_oldest queue, so a slow tap never makes the
// producer wait. `echo` prints each message, `hz` the message rate.
//
// Thread safety: thread-compatible plain functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/type.h"

namespace ferry::cli {

// "RUN/NODE/OUTPUT" or "RUN/NODE/OPERATOR/OUTPUT", split into the run id and
// the output as the daemon names it ("NODE" and "OUTPUT" or "OPERATOR/OUTPUT").
struct TopicName {
  std::string run_id;
  std::string node;
  std::string output;
};
Result<TopicName> ParseTopicName(const std::string& text);

// The channel of `topic`, asked of the run's daemon: IOError when the run is
// not running, Invalid naming the outputs there are when the node or output
// does not exist.
Result<std::string> ResolveTopic(const TopicName& topic);

// One message as text: a header line ("seq 12, 4 rows, 32 B" and its
// metadata as key=value), then the values: a plain array (ferry.array) as
// ArrayToString prints it, a record batch column by column.
std::string FormatMessage(const RecordBatch& batch, const Metadata& metadata, uint64_t sequence,
                          int64_t max_values);

// Payload bytes of a batch (the sizes of its buffers, children and
// dictionaries included).
int64_t BatchBytes(const RecordBatch& batch);

struct TopicOptions {
  std::string topic;  // RUN/NODE/OUTPUT
  bool hz = false;    // else echo
  int64_t count = 0;  // echo: messages, hz: reports; 0 = until the output ends
  int64_t max_values = 20;
  std::chrono::milliseconds window{1000};  // hz: the report interval
  std::chrono::milliseconds connect_timeout{10000};
};

// Runs `ferry topic echo|hz`. Returns the exit code: 0 when `count` was
// reached or the output ended (the producer finished), 1 with the reason on
// `err` (bad name, run not running, no such output, cannot subscribe).
int RunTopic(const TopicOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::cli
