// How the batch-header and schema codecs name a column in their errors:
// col 'name' for a top-level column, then ColumnPath's steps for children and
// dictionaries. Paths are built only when an error needs one. Not installed.
#pragma once

#include <cstdint>
#include <string_view>

#include "ferry/exchange/column_path.h"
#include "ferry/exchange/type.h"

namespace ferry::flow::wire {

inline ColumnPath ColumnRoot(std::string_view name) { return ColumnPath::QuotedRoot("col", name); }

inline ColumnPath ChildStep(const ColumnPath& parent, const DataType& parent_type,
                            size_t child_index) {
  return parent.Child(parent_type.id, static_cast<int64_t>(child_index),
                      parent_type.children[child_index].name);
}

}  // namespace ferry::flow::wire
