// A read-only YAML tree built from yaml-cpp's parser events, with the limits
// an untrusted descriptor needs: bounded size, nesting depth (also through
// aliases) and expanded node count, valid UTF-8, one document, no alias that
// refers to a node containing it. Every node keeps where it was written.
// Shared by every reader of YAML (dataflow descriptors, the scheduler config,
// fleet job files, the simulator's synthetic workload config).
// Not installed.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/source_location.h"
#include "ferry/base/status.h"

namespace ferry::yaml {

// A descriptor is a few kilobytes; yaml-cpp needs up to ~130 bytes of memory
// per input byte for flow collections, so larger documents are refused.
inline constexpr size_t kMaxDocumentBytes = size_t{1} << 20;
// Nesting of lists and mappings, counted through aliases.
inline constexpr int kMaxDepth = 64;
// Values (scalars, lists, mappings) once every alias is expanded.
inline constexpr uint64_t kMaxExpandedNodes = uint64_t{1} << 20;

// Formats errors as "<name>:<line>:<column>: <what>". An empty name (text
// that came from no file) leaves out "<name>:".
class Reporter {
 public:
  explicit Reporter(std::string name) : name_(std::move(name)) {}
  Status Error(SourceLocation location, std::string_view what) const;
  // An error about the whole file: "<name>: <what>" (just <what> without a name).
  Status FileError(std::string_view what) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

struct Node;

// One use of a node. An alias shares the anchored node; `location` is where
// this use was written (the alias, for an alias).
struct Ref {
  const Node* node = nullptr;
  SourceLocation location;
};

struct Node {
  enum class Kind : uint8_t { kNull, kScalar, kSequence, kMapping };
  Kind kind = Kind::kNull;
  // "?" for a plain scalar or an untagged collection, "!" for a quoted
  // scalar, else the resolved tag ("tag:yaml.org,2002:str", "!custom").
  std::string tag;
  std::string value;  // kScalar: the text, escapes resolved
  SourceLocation location;
  // kSequence: the items. kMapping: key, value, key, value, ... (keys are
  // scalars; duplicates are left to the reader, which names them better).
  std::vector<Ref> items;
  // Values in this subtree with aliases expanded, and its nesting height
  // (1 for a scalar); both valid once the node is complete.
  uint64_t expanded_size = 1;
  int height = 1;
  bool complete = false;

  bool is_plain_scalar() const { return kind == Kind::kScalar && tag == "?"; }
};

// The parsed document; Refs point into it, so it is moved, never copied.
class Document {
 public:
  Document() = default;
  Document(Document&&) = default;
  Document& operator=(Document&&) = default;
  Document(const Document&) = delete;
  Document& operator=(const Document&) = delete;

  // The document's root; kNull for an empty document.
  Ref root() const { return root_; }

 private:
  friend class Builder;
  std::deque<Node> nodes_;  // a deque keeps addresses stable as it grows
  Ref root_;
};

// Parses `text` (UTF-8, at most kMaxDocumentBytes, one document).
Result<Document> Parse(std::string_view text, const Reporter& reporter);

// Checks that `text` is UTF-8 made of characters YAML allows (no NUL or
// other control characters but tab, line feed and carriage return). On
// failure sets `*offset` to the offending byte and `*what` to the reason.
bool CheckText(std::string_view text, size_t* offset, std::string* what);

}  // namespace ferry::yaml
