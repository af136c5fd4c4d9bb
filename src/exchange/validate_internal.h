// Internal: node paths rendered on demand, and the per-node entry points of
// the structural validator that the C Data bridge (bridge.cc) runs while it
// imports, so that a freshly imported tree is not walked a second time. Not
// installed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/column_path.h"
#include "ferry/exchange/type.h"

namespace ferry::internal {

// ValidateStructural's checks of the root's type, in its order: nesting no
// deeper than 128 type levels, then ValidateType. A type that
// passes is valid at every node below the root as well (each node's type is
// a part of the root's).
Status ValidateRootType(const DataType& type, const ColumnPath& path);

// The same error as ValidateRootType for a type already known to nest
// `nesting_depth` levels (counted as ValidateStructural counts them).
Status CheckTypeNesting(int nesting_depth, const ColumnPath& path);

// ValidateStructural's rules for `node` alone, with the same messages: its
// length, offset and null_count, its buffers, its children and dictionary
// matching its type, and the children's lengths against its own. It neither
// descends into the children nor validates the type, so it costs O(1) plus
// the node's children: the caller checks the children and dictionary itself
// and has passed the root's type through ValidateRootType. `node.type` must
// not be null.
Status ValidateNodeStructure(const ArrayData& node, const ColumnPath& path);

}  // namespace ferry::internal
