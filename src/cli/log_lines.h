// Whole-line prefixing of a job's shipped log chunks for `ferry logs --prefix`.
// Agents ship output in chunks that end wherever a read ended, so a line can
// be split over several chunks, and chunks of different tasks interleave.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <tuple>

namespace ferry::cli {

// Collects chunks per (attempt, task, stream) and hands back complete lines,
// each starting with "[task N stream] " ("[task N attempt A stream] " for
// attempts after the first, which requeued jobs have). A partial line is kept until its
// newline arrives or Flush() is called (the job has ended, or the reader
// stops). Not thread-safe; one per `ferry logs` run.
class LogLinePrefixer {
 public:
  // Appends `data` of one chunk; returns the text that is now complete
  // (zero or more prefixed lines, each ending in '\n').
  std::string Add(int attempt, int task, std::string_view stream, std::string_view data);

  // Every kept partial line, prefixed and ended with '\n' for `stream`, in
  // (attempt, task) order; empties the prefixer. Only the lines of `stream`.
  std::string Flush(std::string_view stream);

 private:
  using Key = std::tuple<int, int, std::string>;
  std::string Prefix(const Key& key) const;

  std::map<Key, std::string> partial_;
};

}  // namespace ferry::cli
