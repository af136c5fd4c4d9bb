// Internal: the parts of the C Data bridge (bridge.cc) that the C Device Data
// bridge (src/exchange/device/device_bridge.cc) builds on. Not installed.
//
// Device memory changes two things. Export must not read buffer contents on
// the host (a null_count Ferry does not know yet travels as -1) nor hand out
// host stand-ins (the variadic sizes of view arrays go to the device).
// Import must not dereference buffers at all: the few values it needs (the
// last offset of binary/utf8/list/map arrays, the variadic buffer sizes of
// views) are gathered first as (address, width) reads, fetched by the caller
// in one batch, and only then are buffer sizes computed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/c/abi.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/column_path.h"
#include "ferry/exchange/type.h"

namespace ferry::internal {

// Owns a moved foreign ArrowArray: its release runs exactly once, when the
// last Buffer (of any node, slice or child) that points into it is gone,
// and counts telemetry kForeignReleases. Thread-safe to destroy from any
// thread (it is held through shared_ptr).
class ImportedArrayHolder {
 public:
  explicit ImportedArrayHolder(ArrowArray* source);
  ~ImportedArrayHolder();
  ImportedArrayHolder(const ImportedArrayHolder&) = delete;
  ImportedArrayHolder& operator=(const ImportedArrayHolder&) = delete;

  const ArrowArray& array() const { return array_; }

 private:
  ArrowArray array_{};
};

// One value import must read from a foreign array's buffers before it can
// size them: a little-endian signed integer of `width` (4 or 8) bytes.
struct ValueRead {
  const void* address;
  int32_t width;
};

// Fetches every read at once and fills `values` with one sign-extended value
// per read, in order. Called at most once per import, after the producer's
// event was waited for.
using ValueReader =
    std::function<Status(const std::vector<ValueRead>& reads, std::vector<int64_t>* values)>;

// Imports the array `holder` owns as `type`; counts kZeroCopyImports on
// success and kValidationErrors on rejection, as ImportArray does.
//
// reader == nullptr: the buffers are host memory. Values are read in place
// and ValidateStructural's rules are checked (node by node, during the
// walk): this is exactly ImportArray.
//
// reader != nullptr: the buffers are device memory and are never
// dereferenced. The tree is walked once to collect the reads (the last
// offset of binary/utf8, list and map arrays with values; the variadic sizes
// of views), `reader` fetches them, and a second walk builds the ArrayData
// (the data buffers of an empty binary/utf8/view array get size 0). Instead of
// ValidateStructural, which reads first and last offsets, only the checks
// that need no buffer bytes run, plus those on the fetched values: last
// offsets non-negative, a list's last offset within its child, struct and
// sparse-union children covering offset + length, fixed-size-list children
// covering (offset + length) * list_size, run-end children of equal length,
// union null_count 0. First offsets, monotonicity and every value check are
// left to the consumer, which reads the data on its device.
Result<ArrayDataPtr> ImportHeldArray(const std::shared_ptr<ImportedArrayHolder>& holder,
                                     const TypePtr& type, const ValueReader* reader);

// How ExportArrayWith treats buffer memory.
struct ArrayExportOptions {
  // False for memory the host must not read: an unknown null_count is
  // exported as -1 instead of being counted from the bitmap, and an empty
  // binary/list array with no offsets buffer keeps it NULL instead of
  // pointing at a static host zero.
  bool host_readable = true;
  // Without host_readable: places the `count` variadic sizes of a view
  // array (host memory that lives as long as the export) in memory the
  // consumer reads, and returns that buffer, which the export keeps alive.
  // Called only when count > 0; with no data buffers the sizes pointer is
  // NULL. Unset: the host copy is exported.
  std::function<Result<BufferPtr>(const int64_t* sizes, int64_t count)> place_variadic_sizes;
};

// ExportArray with options; counts nothing in telemetry (the caller counts
// the export it completes) and adds no "ExportArray: " prefix to errors. On
// failure nothing is left to release in `out`.
Status ExportArrayWith(const ArrayDataPtr& data, ArrowArray* out,
                       const ArrayExportOptions& options);

// The path of a child node as a string (column_path.h); walks that only
// need a path on failure keep a ColumnPath instead.
std::string ChildPath(const std::string& parent, const DataType& parent_type, int64_t index,
                      std::string_view child_name);

}  // namespace ferry::internal
