// Forwarding of node output: bytes read from a node's stdout or stderr pipe
// are cut into lines, written to the terminal with a "[node] " prefix
// (stderr lines marked "[node] (stderr) ") and, unprefixed, to the node's log
// file, together with the daemon's notes about the node ("[ferry] ...").
//
// Thread-compatible.
#pragma once

#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/flow/transport.h"

namespace ferry::flow::daemon {

// Cuts a byte stream into lines. A line longer than kMaxLine is cut there.
class LineBuffer {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;
  // Appends bytes and returns the lines they complete (without '\n').
  std::vector<std::string> Append(std::string_view bytes);
  // The unterminated rest, if any (at end of stream).
  std::vector<std::string> Finish();

 private:
  std::string pending_;
};

// Where one node's output goes.
class NodeOutput {
 public:
  NodeOutput(std::string node, std::ostream* out, std::ostream* err)
      : node_(std::move(node)), out_(out), err_(err) {}
  ~NodeOutput();
  NodeOutput(const NodeOutput&) = delete;
  NodeOutput& operator=(const NodeOutput&) = delete;

  // Creates (truncates) the log file.
  Status OpenLog(const std::string& path);
  const std::string& log_path() const { return log_path_; }

  // A line the node printed.
  void Line(bool from_stderr, std::string_view line);
  // A note of the daemon about this node: in the log, and on the terminal's
  // stderr when `console` is set.
  void Note(std::string_view text, bool console);

 private:
  std::string node_;
  std::ostream* out_;
  std::ostream* err_;
  std::FILE* log_ = nullptr;
  std::string log_path_;
};

// A node's stdout sent as one of its outputs (dora-rs's `send_stdout_as`):
// the daemon owns the output's channel and sends each line, with its '\n',
// as a one-element utf8 array (the "ferry.array" convention of node.h).
// Bytes that are not UTF-8 become U+FFFD.
class StdoutPublisher {
 public:
  static Result<std::unique_ptr<StdoutPublisher>> Create(const std::string& channel);
  // Never waits long: a consumer whose queue stays full for 100 ms misses the
  // line (the daemon must keep serving the other nodes).
  Status Send(std::string_view line);
  // Accepts subscribers and reclaims memory (call when wait_fd() is readable).
  void Poll() { (void)publisher_->Poll(); }
  int wait_fd() const { return publisher_->wait_fd(); }

 private:
  explicit StdoutPublisher(std::unique_ptr<Publisher> publisher)
      : publisher_(std::move(publisher)) {}
  std::unique_ptr<Publisher> publisher_;
};

// Creates `path` and its missing parents (like mkdir -p).
Status MakeDirectories(const std::string& path);

}  // namespace ferry::flow::daemon
