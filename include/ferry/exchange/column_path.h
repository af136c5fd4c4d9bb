// Column paths in error messages ("col 'points'.item.'x'"), shared by every
// walk over Arrow data: validation, the C Data bridge, the transport's wire
// format. Rendered only when a message needs one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/exchange/type.h"

namespace ferry {

// A name in single quotes, with ' and \ escaped: 'x', 'it\'s'.
std::string QuoteName(std::string_view name);

// Where a node sits in an array or type tree, in validate.h's path syntax
// ("col 'points'.item.'x'"). A walk keeps one ColumnPath per level on its
// stack, each pointing at its parent's, and turns the chain into text only
// when a message needs it: a walk that succeeds builds no string. A ColumnPath
// refers to its parent and to the names it was given without owning them;
// all must outlive it.
class ColumnPath {
 public:
  // A root spelled as `text` ("array", "schema", "col 'x'").
  static ColumnPath Root(std::string_view text) { return ColumnPath(nullptr, Step::kRoot, text); }
  // A root spelled as `prefix`, a space and `name` quoted: "col 'x'", "field 'f'".
  static ColumnPath QuotedRoot(const char* prefix, std::string_view name) {
    ColumnPath path(nullptr, Step::kQuotedRoot, name);
    path.prefix_ = prefix;
    return path;
  }

  // Child `index`, named `name`, of a node of type `parent_id`: ".item" for
  // list-likes, ".entries" for maps, ".run_ends" / ".values" for run-end
  // encoded arrays, ".'<name>'" otherwise.
  ColumnPath Child(TypeId parent_id, int64_t index, std::string_view name) const {
    switch (parent_id) {
      case TypeId::kList:
      case TypeId::kLargeList:
      case TypeId::kListView:
      case TypeId::kLargeListView:
      case TypeId::kFixedSizeList:
        return ColumnPath(this, Step::kItem, {});
      case TypeId::kMap:
        return ColumnPath(this, Step::kEntries, {});
      case TypeId::kRunEndEncoded:
        return ColumnPath(this, index == 0 ? Step::kRunEnds : Step::kValues, {});
      default:
        return ColumnPath(this, Step::kNamed, name);
    }
  }
  ColumnPath Dictionary() const { return ColumnPath(this, Step::kDictionary, {}); }

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
  ColumnPath(const ColumnPath* parent, Step step, std::string_view text)
      : parent_(parent), text_(text), step_(step) {}

  const ColumnPath* parent_;
  std::string_view text_;
  const char* prefix_ = "";
  Step step_;
};

}  // namespace ferry
