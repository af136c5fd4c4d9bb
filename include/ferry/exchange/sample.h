// Sample data built by Ferry itself: used by `make run`, the C API's
// ferry_make_sample_batch, the Python demo and the benchmarks.
#pragma once

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"

namespace ferry {

// A batch of `num_rows` rows: id int64 (0..n-1, non-null), name utf8 (every
// 7th row null, else "row-<id>"), score float64 (id * 0.5), tags list<utf8>
// (id % 3 tags "t0", "t1", ...). Deterministic.
Result<RecordBatchPtr> MakeSampleBatch(int64_t num_rows);

// A batch of `num_columns` int64 columns of `num_rows` rows each (column c,
// row r holds c * num_rows + r). Columns share nothing.
Result<RecordBatchPtr> MakeWideBatch(int num_columns, int64_t num_rows);

}  // namespace ferry
