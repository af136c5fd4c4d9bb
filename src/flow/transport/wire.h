// The wire format of Ferry's cross-process transport: how one message's
// record batch is described in shared memory (where each buffer lies, the
// shape of every array node, the message metadata), and how a channel's
// schema is encoded once.
//
// The payload itself never moves: a header only says "buffer k of column c
// is `length` bytes at `offset` in segment s". The publisher encodes a header
// with EncodeHeader; a subscriber rebuilds the record batch with DecodeHeader,
// whose buffers point straight into its mapping of the segments.
//
// Trust. Everything a subscriber reads comes from another process through
// memory that process may still be writing, so DecodeHeader and DecodeSchema
// copy their input into private memory before reading any field (no field
// is checked and then read again), check every count against the bytes that
// remain and against the schema's shape, check every buffer range against
// its segment with overflow-safe arithmetic, refuse nesting deeper than
// kMaxNestingDepth, and run ValidateStructural on the result. Bad input gives
// Invalid naming the column path and the rule, never a crash. What this
// cannot protect against: a publisher that rewrites payload bytes (e.g. the
// last offset of a string column) after the subscriber validated them; the
// transport's ownership protocol (a segment is reused only after every
// subscriber dropped it) covers honest publishers.
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
// Schema layout (native byte order):
//   u32 magic (kSchemaMagic)  u16 version (kSchemaVersion)  u16 flags (0)
//   metadata: u32 count, then per pair u32 length + bytes, twice
//   u32 field count, then the fields
//   field: u32 name length, name; u32 format length, format (the C Data
//     Interface format string of the node; for a dictionary-encoded field the
//     index type's); u8 flags (kFieldNullable, kFieldHasDictionary,
//     kFieldDictionaryOrdered, kFieldMapKeysSorted; other bits 0); metadata;
//     u32 child count, the children; then, with kFieldHasDictionary, the
//     dictionary's value type as one more field (name "", nullable).
//
// Thread safety: every function here is thread-safe; none keeps state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "ferry/exchange/array.h"
#include "ferry/exchange/buffer.h"
#include "ferry/base/status.h"
#include "ferry/exchange/type.h"

namespace ferry::flow::wire {

inline constexpr uint32_t kHeaderMagic = 0x48595246;  // "FRYH" in memory
inline constexpr uint16_t kHeaderVersion = 1;
inline constexpr uint32_t kSchemaMagic = 0x53595246;  // "FRYS" in memory
inline constexpr uint16_t kSchemaVersion = 1;

inline constexpr int64_t kHeaderPrefixSize = 48;
inline constexpr int64_t kNodeRecordSize = 40;
inline constexpr int64_t kBufferRecordSize = 24;
// The segment id of an absent (null) buffer.
inline constexpr uint32_t kAbsentSegment = 0xFFFFFFFFu;
// Larger headers and schemas are refused on both sides (64 MiB: about a
// million columns).
inline constexpr int64_t kMaxEncodedSize = int64_t{1} << 26;
// Deeper types are refused (ValidateStructural refuses them too).
inline constexpr int kMaxNestingDepth = 128;

// Field flags of the schema encoding.
inline constexpr uint8_t kFieldNullable = 1u << 0;
inline constexpr uint8_t kFieldHasDictionary = 1u << 1;
inline constexpr uint8_t kFieldDictionaryOrdered = 1u << 2;
inline constexpr uint8_t kFieldMapKeysSorted = 1u << 3;

// A non-owning reference to a callable, for callbacks on the message path: it
// neither allocates nor copies the callable, so it must not outlive it (pass
// a lambda directly as the argument).
template <typename Signature>
class FunctionRef;

template <typename Return, typename... Args>
class FunctionRef<Return(Args...)> {
 public:
  template <typename Callable,
            typename = std::enable_if_t<
                !std::is_same_v<std::decay_t<Callable>, FunctionRef> &&
                std::is_invocable_r_v<Return, std::remove_reference_t<Callable>&, Args...>>>
  FunctionRef(
      Callable&& callable) noexcept  // NOLINT(google-explicit-constructor): lambdas pass as is
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(callable)))),
        invoke_([](void* object, Args... args) -> Return {
          return (*static_cast<std::remove_reference_t<Callable>*>(object))(
              std::forward<Args>(args)...);
        }) {}

  Return operator()(Args... args) const { return invoke_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  Return (*invoke_)(void*, Args...);
};

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

// The self-describing encoding of `schema` (layout above). Invalid for a type
// that cannot be written (a null type pointer, a dictionary whose index is not
// an integer, nesting deeper than kMaxNestingDepth).
Result<std::string> EncodeSchema(const Schema& schema);
// Decodes an encoded schema from untrusted bytes: all `size` bytes must be
// consumed, every type must pass ValidateType, and field paths name the error.
Result<SchemaPtr> DecodeSchema(const uint8_t* data, int64_t size);

}  // namespace ferry::flow::wire
