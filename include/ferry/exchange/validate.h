// Validation of array data against its type, at two levels. Both are
// thread-safe and never read outside the buffers' recorded sizes (buffers must
// be host-readable); every error is Invalid and reads "<path>: <rule>: <detail>",
// e.g. "col 'points'.item.'x': offsets must be non-decreasing: offsets[3]=10 >
// offsets[4]=7".
//
// Path syntax. The root is the `path` argument ("array" when empty; a record
// batch column is "col '<name>'"). Each step down appends:
//   .item                 the child of list, large_list, list_view,
//                         large_list_view and fixed_size_list
//   .entries              the entries struct of a map (then .'key', .'value')
//   .'<name>'             a struct or union child, by field name (a ' or \ in
//                         the name is escaped with \)
//   .run_ends / .values   the children of a run-end encoded array
//   .dictionary           the dictionary of a dictionary-encoded array
// Indices in messages (offsets[i], view[i], type_ids[i], indices[i],
// run_ends[i], value i) are positions in the buffer, i.e. they include the
// array's offset.
//
// Conventions checked beyond the type: an absent (null) validity buffer means
// all valid and is allowed only when null_count is 0 or unknown; any other
// absent buffer counts as empty, so it is allowed wherever no byte needs to be
// read (e.g. any buffer of a zero-length array). Null arrays have 0 buffers and
// null_count == length; unions (type_ids[, offsets]) and run-end encoded
// arrays (no buffers) have no validity bitmap and null_count 0. View arrays
// have validity, views, then any number of data buffers (no sizes buffer).
// Nesting deeper than 128 levels is refused. Not checked: nulls in
// non-nullable fields other than map entries and keys. Full validation
// covers every rule of Arrow C++'s ValidateFull (docs/exchange.md lists them
// and where Ferry is stricter).
#pragma once

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"

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
// list-view offsets+sizes in range, map entries and keys non-null (whole
// children), decimals within their precision, time32/time64 within a day,
// date64 whole days, dense-union offsets non-decreasing per child, and a
// known null_count equal to the bitmap's count. O(values).
Status ValidateFull(const ArrayData& data, const std::string& path = "");

Status ValidateStructural(const RecordBatch& batch);
Status ValidateFull(const RecordBatch& batch);
// Layout: ValidateStructural without reading any buffer byte, for batches
// whose buffers live in device memory: the offsets buffers are sized but
// their first and last entries are not checked (the consumer, which reads
// the data on its device, owns every check of values).
Status ValidateLayout(const RecordBatch& batch);

}  // namespace ferry
