// Validation of array data against its type, at two levels. Both are
// thread-safe and never read outside the buffers' recorded sizes; every
// error names the column path (e.g. "col 'points'.item.'x'") and the rule.
#pragma once

#include "ferry/exchange/array.h"
#include "ferry/exchange/status.h"

namespace ferry {

// Structural: type parameters valid, buffer counts, buffer sizes implied by
// offset + length (and, for variable-length types, by the last offset),
// children counts and lengths, dictionary present exactly for dictionary
// types, null_count within [0, length] or unknown. O(columns) plus the reads
// of last offsets; touches no value otherwise.
Status ValidateStructural(const ArrayData& data, const std::string& path = "");
// Full: structural, plus offsets monotonic and in range, valid UTF-8, union
// type ids declared and dense-union offsets in range of their child,
// dictionary indices within the dictionary, run ends positive and strictly
// increasing and covering offset+length, view lengths / inline bytes /
// buffer indices / offsets in range (and view prefixes matching the data),
// list-view offsets+sizes in range, map keys non-null, and a known
// null_count equal to the bitmap's count. O(values).
Status ValidateFull(const ArrayData& data, const std::string& path = "");

Status ValidateStructural(const RecordBatch& batch);
Status ValidateFull(const RecordBatch& batch);

}  // namespace ferry
