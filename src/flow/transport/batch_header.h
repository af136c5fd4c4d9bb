// The message header of Ferry's cross-process transport: how one message's
// record batch is described in shared memory (where each buffer lies, the
// shape of every array node, the message metadata). A channel's schema
// travels apart, once (schema_codec.h). Not installed.
//
// The payload itself never moves: a header only says "buffer k of column c
// is `length` bytes at `offset` in segment s". The publisher encodes a header
// with EncodeHeader; a subscriber rebuilds the record batch with DecodeHeader,
// whose buffers point straight into its mapping of the segments.
//
// Trust. Everything a subscriber reads comes from another process through
// memory that process may still be writing, so DecodeHeader copies its input
// into private memory before reading any field (no field is checked and then
// read again), checks every count against the bytes that remain and against
// the schema's shape, checks every buffer range against its segment with
// overflow-safe arithmetic, refuses nesting deeper than kMaxNestingDepth, and
// runs ValidateStructural on the result. Bad input gives Invalid naming the
// column path and the rule, never a crash. What this cannot protect against:
// a publisher that rewrites payload bytes (e.g. the last offset of a string
// column) after the subscriber validated them; the transport's ownership
// protocol (a segment is reused only after every subscriber dropped it)
// covers honest publishers.
//
// Header layout (native byte order, little-endian on every platform Ferry
// builds for; every record starts 8-byte aligned):
//
//   prefix, 48 bytes:
//     u32 magic (kHeaderMagic)  u16 version (kHeaderVersion)  u16 flags (0)
//     u64 total_size      bytes of the whole header, padding included
//     i64 num_rows
//     u32 column_count    top-level columns (the schema's field count)
//     u32 node_count      array nodes: columns, their children, dictionaries
//     u32 buffer_count    buffer records
//     u32 metadata_count  message metadata pairs
//     u32 metadata_bytes  bytes of the metadata section before padding
//     u32 reserved (0)
//   metadata section: per pair u32 key length, key bytes, u32 value length,
//     value bytes; zero-padded to a multiple of 8
//   records, depth first: a node, then its own buffers, then its children's
//     subtrees in order, then its dictionary's subtree (if any):
//     node, 40 bytes: i64 length, i64 null_count (-1 = unknown), i64 offset,
//       u32 buffer_count, u32 child_count, u8 type_id (TypeId),
//       u8 has_dictionary (0/1), u16 reserved (0), u32 reserved (0)
//     buffer, 24 bytes: u32 segment_id (kAbsentSegment: no buffer, and then
//       offset and length are 0), u32 reserved (0), u64 offset, u64 length
//
// Buffers of a node follow ArrayData's layout (array.h): view types carry
// validity, views and any number of variadic data buffers (the node's
// buffer_count says how many); dictionary-encoded nodes carry the index
// buffers and a dictionary subtree. total_size is exactly
// 48 + pad8(metadata_bytes) + 40 * node_count + 24 * buffer_count.
//
//
// Thread safety: every function here is thread-safe; none keeps state.
#pragma once

#include <cstdint>
#include <memory>

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/buffer.h"
#include "ferry/exchange/type.h"
#include "flow/transport/byte_codec.h"
#include "flow/transport/function_ref.h"

namespace ferry::flow::wire {

inline constexpr uint32_t kHeaderMagic = 0x48595246;  // "FRYH" in memory
inline constexpr uint16_t kHeaderVersion = 1;

inline constexpr int64_t kHeaderPrefixSize = 48;
inline constexpr int64_t kNodeRecordSize = 40;
inline constexpr int64_t kBufferRecordSize = 24;
// The segment id of an absent (null) buffer.
inline constexpr uint32_t kAbsentSegment = 0xFFFFFFFFu;

// Where one buffer lies: `length` bytes at `offset` in segment `segment_id`.
struct BufferLocation {
  uint32_t segment_id = kAbsentSegment;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// A subscriber's read-only view of one mapped segment.
struct SegmentView {
  const uint8_t* data = nullptr;
  int64_t size = 0;
};

// Finds where a present buffer of the batch lies in shared memory; an error
// (e.g. "not in loaned memory") aborts the encoding and is returned with the
// column path prefixed. The returned length must equal buffer.size().
using LocateBuffer = FunctionRef<Result<BufferLocation>(const Buffer& buffer)>;
// Maps a segment id to the subscriber's mapping; an error (unknown id)
// rejects the message. Called at most once per buffer record.
using LookupSegment = FunctionRef<Result<SegmentView>(uint32_t segment_id)>;

// The exact number of bytes EncodeHeader writes for this batch and metadata.
// Invalid when the batch's shape does not match its types (buffer, child or
// dictionary counts), nesting exceeds kMaxNestingDepth or the header would
// exceed kMaxEncodedSize.
Result<int64_t> EncodedHeaderSize(const RecordBatch& batch, const Metadata& message_metadata);

// Writes the header of `batch` into out[0, out_size) and returns the number of
// bytes written (EncodedHeaderSize's value). Calls `locate` once per present
// buffer, in record order. Allocates nothing on success. On failure `out`
// holds garbage and the Status names the column path: Invalid for a shape
// error or an `out` smaller than needed (the message says how many bytes),
// or `locate`'s own error.
Result<int64_t> EncodeHeader(const RecordBatch& batch, const Metadata& message_metadata,
                             LocateBuffer locate, uint8_t* out, int64_t out_size);

struct DecodeOptions {
  // Also run ValidateFull (O(values): offsets, UTF-8, indices, ...), which
  // reads payload bytes; the default checks the structure only.
  bool validate_full = false;
  // The buffers are device memory that the host must not read: only
  // ValidateLayout runs (validate_full is ignored), and nothing of the
  // payload is dereferenced.
  bool payload_on_device = false;
};

// Rebuilds the record batch a header describes, against `schema` (the
// channel's schema; every node's type, buffer count, child count and
// dictionary presence is checked against it). `header` may be longer than the
// header's total_size (the rest is ignored), never shorter. Every Buffer of
// the result points into a segment returned by `lookup` and holds `owner` (the
// message's drop token), so the batch and any slice of it keep the token
// alive; on failure nothing holds `owner` any more. `message_metadata_out`
// (optional) receives the message metadata. Allocations on success: per
// array node its ArrayData and its buffer and child vectors; per message one
// block holding every Buffer object (each BufferPtr aliases it), the column
// vector, the batch (RecordBatch::Make) and the metadata strings, plus a
// private copy of headers over 4 KiB. Nothing is allocated per buffer.
Result<RecordBatchPtr> DecodeHeader(const uint8_t* header, int64_t header_size,
                                    const SchemaPtr& schema, LookupSegment lookup,
                                    const std::shared_ptr<const void>& owner,
                                    Metadata* message_metadata_out = nullptr,
                                    const DecodeOptions& options = {});

}  // namespace ferry::flow::wire
