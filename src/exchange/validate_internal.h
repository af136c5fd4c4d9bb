// Internal: node paths rendered on demand, and the per-node entry points of
// the structural validator that the C Data bridge (bridge.cc) runs while it
// imports, so that a freshly imported tree is not walked a second time. Not
// installed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/exchange/array.h"
#include "ferry/exchange/status.h"
#include "ferry/exchange/type.h"

namespace ferry::internal {

// Where a node sits in an array or type tree, in validate.h's path syntax
// ("col 'points'.item.'x'"). A walk keeps one NodePath per level on its
// stack, each pointing at its parent's, and turns the chain into text only
// when a message needs it: a walk that succeeds builds no string. A NodePath
// refers to its parent and to the names it was given without owning them;
// all must outlive it.
class NodePath {
 public:
  // A root spelled as `text` ("array", "schema", "col 'x'").
  static NodePath Root(std::string_view text) { return NodePath(nullptr, Step::kRoot, text); }
  // A root spelled as `prefix`, a space and `name` quoted: "col 'x'", "field 'f'".
  static NodePath QuotedRoot(const char* prefix, std::string_view name) {
    NodePath path(nullptr, Step::kQuotedRoot, name);
    path.prefix_ = prefix;
    return path;
  }

  // Child `index`, named `name`, of a node of type `parent_id`: ".item" for
  // list-likes, ".entries" for maps, ".run_ends" / ".values" for run-end
  // encoded arrays, ".'<name>'" otherwise.
  NodePath Child(TypeId parent_id, int64_t index, std::string_view name) const {
    switch (parent_id) {
      case TypeId::kList:
      case TypeId::kLargeList:
      case TypeId::kListView:
      case TypeId::kLargeListView:
      case TypeId::kFixedSizeList:
        return NodePath(this, Step::kItem, {});
      case TypeId::kMap:
        return NodePath(this, Step::kEntries, {});
      case TypeId::kRunEndEncoded:
        return NodePath(this, index == 0 ? Step::kRunEnds : Step::kValues, {});
      default:
        return NodePath(this, Step::kNamed, name);
    }
  }
  NodePath Dictionary() const { return NodePath(this, Step::kDictionary, {}); }

  std::string Render() const {
    std::string text;
    AppendTo(&text);
    return text;
  }
  void AppendTo(std::string* out) const;

 private:
  enum class Step : uint8_t {
    kRoot,
    kQuotedRoot,
    kItem,
    kEntries,
    kRunEnds,
    kValues,
    kNamed,
    kDictionary
  };
  NodePath(const NodePath* parent, Step step, std::string_view text)
      : parent_(parent), text_(text), step_(step) {}

  const NodePath* parent_;
  std::string_view text_;
  const char* prefix_ = "";
  Step step_;
};

// A name in single quotes, with ' and \ escaped (validate.h).
std::string QuoteName(std::string_view name);

// ValidateStructural's checks of the root's type, in its order: nesting no
// deeper than 128 type levels, then ValidateType. A type that
// passes is valid at every node below the root as well (each node's type is
// a part of the root's).
Status ValidateRootType(const DataType& type, const NodePath& path);

// The same error as ValidateRootType for a type already known to nest
// `nesting_depth` levels (counted as ValidateStructural counts them).
Status CheckTypeNesting(int nesting_depth, const NodePath& path);

// ValidateStructural's rules for `node` alone, with the same messages: its
// length, offset and null_count, its buffers, its children and dictionary
// matching its type, and the children's lengths against its own. It neither
// descends into the children nor validates the type, so it costs O(1) plus
// the node's children: the caller checks the children and dictionary itself
// and has passed the root's type through ValidateRootType. `node.type` must
// not be null.
Status ValidateNodeStructure(const ArrayData& node, const NodePath& path);

}  // namespace ferry::internal
