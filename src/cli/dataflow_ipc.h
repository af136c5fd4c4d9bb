// A writer of the Arrow IPC file format (the "Feather v2" / `.arrow` file
// that pyarrow.ipc.open_file, polars.read_ipc and duckdb read), for the
// recordings of `ferry record`. It writes the schema message, one record
// batch message per WriteBatch and the footer; buffers are written as they
// are in memory (uncompressed, little endian, 8-byte aligned).
//
// Types: null, bool, the integers, half/float/double, binary and utf8 (and
// their large variants), fixed-size binary, date32/64, time32/64, timestamp,
// duration, list, large list, fixed-size list and struct, nested in any
// combination. Others (decimals, views, unions, maps, dictionaries, run-end
// encoded) are refused by CheckIpcType. Arrays must start at offset 0
// (received batches do); others are refused too.
//
// Thread-compatible: one thread uses a writer at a time.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/type.h"

namespace ferry::cli {

// OK when arrays of `type` can be written; Invalid naming the type otherwise.
Status CheckIpcType(const DataType& type);

class IpcFileWriter {
 public:
  // Creates (truncates) `path` and writes the file header and the schema.
  static Result<std::unique_ptr<IpcFileWriter>> Open(const std::string& path, SchemaPtr schema);
  ~IpcFileWriter();  // closes the file without a footer when Close was not called
  IpcFileWriter(const IpcFileWriter&) = delete;
  IpcFileWriter& operator=(const IpcFileWriter&) = delete;

  // One record batch of `num_rows` rows; `columns` match the schema's fields.
  Status WriteBatch(int64_t num_rows, const std::vector<ArrayDataPtr>& columns);
  // Writes the footer and closes the file. The file is complete only after it.
  Status Close();

  int64_t batches() const { return static_cast<int64_t>(blocks_.size()); }

 private:
  struct Block {
    int64_t offset;
    int32_t metadata_length;
    int64_t body_length;
  };
  IpcFileWriter(std::FILE* file, std::string path, SchemaPtr schema)
      : file_(file), path_(std::move(path)), schema_(std::move(schema)) {}
  Status WriteBytes(const void* data, size_t size);
  // Writes an encapsulated message; returns its block.
  Result<Block> WriteMessage(const std::string& flatbuffer,
                             const std::vector<std::pair<const uint8_t*, int64_t>>& body);

  std::FILE* file_;
  std::string path_;
  SchemaPtr schema_;
  int64_t position_ = 0;
  std::vector<Block> blocks_;
};

// A reader of Arrow IPC files of the types IpcFileWriter writes
// (uncompressed, little endian, no dictionaries): what `ferry replay` reads.
// The file is mapped read-only; arrays point into the mapping, which lives
// as long as any of them (or the reader) does. A file that is not such an
// Arrow IPC file, or is damaged, gives Invalid naming the file and the
// problem; nothing outside the mapping is ever read.
class IpcFileReader {
 public:
  static Result<std::unique_ptr<IpcFileReader>> Open(const std::string& path);

  const SchemaPtr& schema() const { return schema_; }
  int64_t num_batches() const { return static_cast<int64_t>(blocks_.size()); }
  // Batch `index` (0 <= index < num_batches()): its rows and columns.
  Result<std::pair<int64_t, std::vector<ArrayDataPtr>>> ReadBatch(int64_t index) const;

 private:
  struct Block {
    int64_t offset;
    int32_t metadata_length;
    int64_t body_length;
  };
  IpcFileReader() = default;
  std::string path_;
  std::shared_ptr<const std::string_view> mapping_;  // the whole file
  SchemaPtr schema_;
  std::vector<Block> blocks_;
};

}  // namespace ferry::cli
