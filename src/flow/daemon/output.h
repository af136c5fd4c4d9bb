// Forwarding of node output: bytes read from a node's stdout or stderr pipe
// are cut into lines, written to the terminal with a "[node] " prefix
// (stderr lines marked "[node] (stderr) ") and, unprefixed, to the node's log
// file, together with the daemon's notes about the node ("[ferry] ...").
//
// Thread-compatible.
#pragma once

#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"

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

// Creates `path` and its missing parents (like mkdir -p).
Status MakeDirectories(const std::string& path);

}  // namespace ferry::flow::daemon
