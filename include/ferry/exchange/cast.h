// Zero-copy reinterpretation of array data as another type whose physical
// layout is identical: utf8 <-> binary (and the large and view variants),
// renamed or re-annotated fields (names, nullability, metadata), nested
// types whose children are so related. Nothing is copied; values are not
// revalidated except that binary -> utf8 requires `validated_utf8` or a full
// UTF-8 check (done here when `check_utf8` is true).
#pragma once

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/type.h"

namespace ferry {

// True when data of type `from` can be read as `to` without touching a byte.
bool SameLayout(const DataType& from, const DataType& to);

// Returns `data` relabelled as `to`, sharing every buffer, or TypeError when
// the layouts differ.
Result<ArrayDataPtr> ViewAs(const ArrayDataPtr& data, const TypePtr& to, bool check_utf8 = true);

}  // namespace ferry
