// The transport's message header: encoding and decoding (batch_header.h).

#include "flow/transport/batch_header.h"

#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/exchange/column_path.h"
#include "ferry/exchange/validate.h"
#include "flow/transport/codec_column_path.h"

namespace ferry::flow::wire {

namespace {

// ---- Fixed-width records -------------------------------------------------------------

struct HeaderPrefix {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  uint64_t total_size;
  int64_t num_rows;
  uint32_t column_count;
  uint32_t node_count;
  uint32_t buffer_count;
  uint32_t metadata_count;
  uint32_t metadata_bytes;
  uint32_t reserved;
};
static_assert(sizeof(HeaderPrefix) == kHeaderPrefixSize);

struct NodeRecord {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  uint32_t buffer_count;
  uint32_t child_count;
  uint8_t type_id;
  uint8_t has_dictionary;
  uint16_t reserved16;
  uint32_t reserved32;
};
static_assert(sizeof(NodeRecord) == kNodeRecordSize);

struct BufferRecord {
  uint32_t segment_id;
  uint32_t reserved;
  uint64_t offset;
  uint64_t length;
};
static_assert(sizeof(BufferRecord) == kBufferRecordSize);

static_assert(std::is_trivially_copyable_v<HeaderPrefix> &&
              std::is_trivially_copyable_v<NodeRecord> &&
              std::is_trivially_copyable_v<BufferRecord>);

// ---- The expected shape of a node ------------------------------------------------------

// Children of an array node of this type (a dictionary's values are not a child).
size_t ExpectedChildCount(const DataType& type) {
  return type.id == TypeId::kDictionary ? 0 : type.children.size();
}

std::string BufferCountRule(const DataType& type) {
  return std::to_string(type.num_buffers()) + (IsViewType(type.id) ? " or more" : "");
}

bool BufferCountFits(const DataType& type, uint64_t buffer_count) {
  const auto fixed = static_cast<uint64_t>(type.num_buffers());
  return IsViewType(type.id) ? buffer_count >= fixed : buffer_count == fixed;
}

// ---- Header encoding ---------------------------------------------------------------------

Status EncodeError(const ColumnPath& path, const std::string& rule) {
  return Status::Invalid("cannot encode message header: " + path.Render() + ": " + rule);
}

// Walks a batch in record order, writing records into `out` while they fit
// and counting them always, so that an `out` that is too small still learns
// the size it needed. Without `out` it only counts (and never locates).
class HeaderWriter {
 public:
  HeaderWriter(LocateBuffer* locate, uint8_t* out, int64_t out_size)
      : locate_(locate), out_(out), out_size_(out_size) {}

  void set_cursor(uint64_t cursor) { cursor_ = cursor; }
  uint64_t cursor() const { return cursor_; }
  uint32_t node_count() const { return node_count_; }
  uint32_t buffer_count() const { return buffer_count_; }
  bool overflowed() const { return overflowed_; }

  // Room for `size` bytes at the cursor, or nullptr once `out` is too small.
  uint8_t* Reserve(uint64_t size) {
    if (out_ == nullptr) return nullptr;
    if (cursor_ + size > static_cast<uint64_t>(out_size_)) {
      out_ = nullptr;
      overflowed_ = true;
      return nullptr;
    }
    return out_ + cursor_;
  }

  Status WriteNode(const ArrayData& data, const ColumnPath& path, int depth) {
    if (depth > kMaxNestingDepth) {
      return EncodeError(path, "nesting deeper than " + std::to_string(kMaxNestingDepth));
    }
    if (data.type == nullptr) return EncodeError(path, "array has no type");
    const DataType& type = *data.type;
    if (!BufferCountFits(type, data.buffers.size())) {
      return EncodeError(path, "array has " + std::to_string(data.buffers.size()) +
                                   " buffers but type " + type.ToString() + " needs " +
                                   BufferCountRule(type));
    }
    if (data.children.size() != ExpectedChildCount(type)) {
      return EncodeError(path, "array has " + std::to_string(data.children.size()) +
                                   " children but type " + type.ToString() + " needs " +
                                   std::to_string(ExpectedChildCount(type)));
    }
    const bool has_dictionary = type.id == TypeId::kDictionary;
    if (has_dictionary != (data.dictionary != nullptr)) {
      return EncodeError(path, has_dictionary ? "dictionary type without a dictionary"
                                              : "dictionary given for a non-dictionary type");
    }
    if (node_count_ == std::numeric_limits<uint32_t>::max() ||
        data.buffers.size() > std::numeric_limits<uint32_t>::max() - buffer_count_) {
      return EncodeError(path, "too many array nodes or buffers for one header");
    }

    if (uint8_t* slot = Reserve(kNodeRecordSize)) {
      NodeRecord node{};
      node.length = data.length;
      node.null_count = data.null_count;
      node.offset = data.offset;
      node.buffer_count = static_cast<uint32_t>(data.buffers.size());
      node.child_count = static_cast<uint32_t>(data.children.size());
      node.type_id = static_cast<uint8_t>(type.id);
      node.has_dictionary = has_dictionary ? 1 : 0;
      std::memcpy(slot, &node, sizeof(node));
    }
    cursor_ += kNodeRecordSize;
    ++node_count_;

    for (size_t buffer_index = 0; buffer_index < data.buffers.size(); ++buffer_index) {
      FERRY_RETURN_NOT_OK(WriteBuffer(data.buffers[buffer_index].get(), path, buffer_index));
    }
    for (size_t child_index = 0; child_index < data.children.size(); ++child_index) {
      const ArrayDataPtr& child = data.children[child_index];
      const ColumnPath child_path = ChildStep(path, type, child_index);
      if (child == nullptr) return EncodeError(child_path, "child array is missing");
      FERRY_RETURN_NOT_OK(WriteNode(*child, child_path, depth + 1));
    }
    if (has_dictionary) {
      const ColumnPath dictionary_path = path.Dictionary();
      FERRY_RETURN_NOT_OK(WriteNode(*data.dictionary, dictionary_path, depth + 1));
    }
    return Status::OK();
  }

 private:
  Status WriteBuffer(const Buffer* buffer, const ColumnPath& path, size_t buffer_index) {
    uint8_t* slot = Reserve(kBufferRecordSize);
    cursor_ += kBufferRecordSize;
    ++buffer_count_;
    if (slot == nullptr) return Status::OK();  // counting only
    BufferRecord record{};
    if (buffer == nullptr) {
      record.segment_id = kAbsentSegment;
    } else {
      Result<BufferLocation> located = (*locate_)(*buffer);
      if (!located.ok()) {
        return located.status().WithPrefix("cannot encode message header: " + path.Render() +
                                           ": buffer " + std::to_string(buffer_index) + ": ");
      }
      const BufferLocation& location = *located;
      if (location.segment_id == kAbsentSegment) {
        return EncodeError(path, "buffer " + std::to_string(buffer_index) +
                                     " was located in the reserved segment id " +
                                     std::to_string(kAbsentSegment));
      }
      if (location.length != static_cast<uint64_t>(buffer->size())) {
        return EncodeError(path, "buffer " + std::to_string(buffer_index) + " of " +
                                     std::to_string(buffer->size()) +
                                     " bytes was located with length " +
                                     std::to_string(location.length));
      }
      record.segment_id = location.segment_id;
      record.offset = location.offset;
      record.length = location.length;
    }
    std::memcpy(slot, &record, sizeof(record));
    return Status::OK();
  }

  LocateBuffer* locate_;
  uint8_t* out_;
  int64_t out_size_;
  uint64_t cursor_ = 0;
  uint32_t node_count_ = 0;
  uint32_t buffer_count_ = 0;
  bool overflowed_ = false;
};

struct MetadataSize {
  uint32_t count = 0;
  uint32_t bytes = 0;
};

Result<MetadataSize> MeasureMetadata(const Metadata& metadata) {
  uint64_t bytes = 0;
  for (const auto& [key, value] : metadata) bytes += 8 + key.size() + value.size();
  if (metadata.size() > std::numeric_limits<uint32_t>::max() ||
      bytes > std::numeric_limits<uint32_t>::max()) {
    return Status::Invalid("cannot encode message header: message metadata of " +
                           std::to_string(bytes) + " bytes is too large");
  }
  return MetadataSize{static_cast<uint32_t>(metadata.size()), static_cast<uint32_t>(bytes)};
}

void PutU32(uint8_t* out, uint64_t* cursor, uint32_t value) {
  std::memcpy(out + *cursor, &value, sizeof(value));
  *cursor += sizeof(value);
}

void PutBytes(uint8_t* out, uint64_t* cursor, std::string_view bytes) {
  if (!bytes.empty()) std::memcpy(out + *cursor, bytes.data(), bytes.size());
  *cursor += bytes.size();
}

// The shared walk of EncodedHeaderSize (out == nullptr) and EncodeHeader.
Result<int64_t> WriteHeader(const RecordBatch& batch, const Metadata& message_metadata,
                            LocateBuffer* locate, uint8_t* out, int64_t out_size) {
  if (batch.schema() == nullptr) {
    return Status::Invalid("cannot encode message header: the batch has no schema");
  }
  const std::vector<Field>& fields = batch.schema()->fields;
  if (fields.size() != static_cast<size_t>(batch.num_columns())) {
    return Status::Invalid("cannot encode message header: the batch has " +
                           std::to_string(batch.num_columns()) + " columns but its schema " +
                           std::to_string(fields.size()) + " fields");
  }
  FERRY_ASSIGN_OR_RAISE(const MetadataSize metadata_size, MeasureMetadata(message_metadata));

  HeaderWriter writer(locate, out, out_size);
  writer.set_cursor(kHeaderPrefixSize);
  const uint64_t metadata_padded = PadTo8(metadata_size.bytes);
  if (uint8_t* section = writer.Reserve(metadata_padded)) {
    uint64_t cursor = 0;
    for (const auto& [key, value] : message_metadata) {
      PutU32(section, &cursor, static_cast<uint32_t>(key.size()));
      PutBytes(section, &cursor, key);
      PutU32(section, &cursor, static_cast<uint32_t>(value.size()));
      PutBytes(section, &cursor, value);
    }
    std::memset(section + cursor, 0, metadata_padded - cursor);
  }
  writer.set_cursor(kHeaderPrefixSize + metadata_padded);

  for (size_t column_index = 0; column_index < fields.size(); ++column_index) {
    const ColumnPath path = ColumnRoot(fields[column_index].name);
    const ArrayDataPtr& column = batch.columns()[column_index];
    if (column == nullptr) return EncodeError(path, "column is missing");
    FERRY_RETURN_NOT_OK(writer.WriteNode(*column, path, 0));
    if (writer.cursor() > static_cast<uint64_t>(kMaxEncodedSize)) break;
  }
  const uint64_t total_size = writer.cursor();
  if (total_size > static_cast<uint64_t>(kMaxEncodedSize)) {
    return Status::Invalid("cannot encode message header: it would exceed " +
                           std::to_string(kMaxEncodedSize) + " bytes");
  }
  if (writer.overflowed() || (out != nullptr && total_size > static_cast<uint64_t>(out_size))) {
    return Status::Invalid("cannot encode message header: it needs " + std::to_string(total_size) +
                           " bytes but the output has " + std::to_string(out_size));
  }
  if (out != nullptr) {
    HeaderPrefix prefix{};
    prefix.magic = kHeaderMagic;
    prefix.version = kHeaderVersion;
    prefix.total_size = total_size;
    prefix.num_rows = batch.num_rows();
    prefix.column_count = static_cast<uint32_t>(fields.size());
    prefix.node_count = writer.node_count();
    prefix.buffer_count = writer.buffer_count();
    prefix.metadata_count = metadata_size.count;
    prefix.metadata_bytes = metadata_size.bytes;
    std::memcpy(out, &prefix, sizeof(prefix));
  }
  return static_cast<int64_t>(total_size);
}

// ---- Header decoding -------------------------------------------------------------------

Status HeaderError(const std::string& rule) { return Status::Invalid("message header: " + rule); }

Status NodeError(const ColumnPath& path, const std::string& rule) {
  return Status::Invalid("message header: " + path.Render() + ": " + rule);
}

std::string TypeIdText(uint8_t type_id) {
  if (type_id > static_cast<uint8_t>(TypeId::kDictionary)) {
    return "unknown type id " + std::to_string(type_id);
  }
  return std::string(TypeIdName(static_cast<TypeId>(type_id)));
}

// The Buffer objects of one message, allocated together: each BufferPtr
// aliases the block, and each Buffer holds the drop token. ArrayData nodes
// (allocated one by one) reference the block, never the other way round, so
// there is no cycle: the block goes when the last buffer reference does.
struct BufferBlock {
  std::vector<Buffer> buffers;
};

// Reads the node and buffer records (from private memory) in schema order.
class HeaderReader {
 public:
  HeaderReader(const uint8_t* records, uint64_t size, uint32_t node_count, uint32_t buffer_count,
               LookupSegment* lookup, const std::shared_ptr<const void>& owner)
      : records_(records, size),
        nodes_left_(node_count),
        buffers_left_(buffer_count),
        lookup_(lookup),
        owner_(owner) {}

  // Makes room for every buffer record up front, so that Buffer objects never
  // move. The count is bounded by the header's size (24 bytes per record).
  Status Prepare() {
    if (buffers_left_ == 0) return Status::OK();
    block_ = std::make_shared<BufferBlock>();
    block_->buffers.reserve(buffers_left_);
    return Status::OK();
  }

  uint32_t nodes_left() const { return nodes_left_; }
  uint32_t buffers_left() const { return buffers_left_; }

  Result<ArrayDataPtr> ReadNode(const TypePtr& type_pointer, const ColumnPath& path, int depth) {
    if (type_pointer == nullptr) return NodeError(path, "the schema gives this field no type");
    if (depth > kMaxNestingDepth) {
      return NodeError(path, "nesting deeper than " + std::to_string(kMaxNestingDepth));
    }
    NodeRecord node{};
    if (nodes_left_ == 0 || !records_.Read(&node)) {
      return NodeError(path, "the schema needs more array nodes than the header's node_count");
    }
    --nodes_left_;
    const DataType& type = *type_pointer;
    if (node.type_id != static_cast<uint8_t>(type.id)) {
      return NodeError(path, "node has type " + TypeIdText(node.type_id) +
                                 " but the schema declares " + type.ToString());
    }
    if (node.reserved16 != 0 || node.reserved32 != 0) {
      return NodeError(path, "reserved node bytes are not zero");
    }
    if (node.length < 0) {
      return NodeError(path, "length is negative (" + std::to_string(node.length) + ")");
    }
    if (node.offset < 0) {
      return NodeError(path, "offset is negative (" + std::to_string(node.offset) + ")");
    }
    int64_t end;
    if (__builtin_add_overflow(node.offset, node.length, &end)) {
      return NodeError(path, "offset + length overflows int64");
    }
    if (node.null_count < kUnknownNullCount || node.null_count > node.length) {
      return NodeError(path, "null_count " + std::to_string(node.null_count) + " is outside -1.." +
                                 std::to_string(node.length));
    }
    const bool needs_dictionary = type.id == TypeId::kDictionary;
    if (node.has_dictionary > 1 || (node.has_dictionary == 1) != needs_dictionary) {
      return NodeError(path, "has_dictionary is " + std::to_string(node.has_dictionary) +
                                 " but type " + type.ToString() +
                                 (needs_dictionary ? " needs a dictionary" : " has none"));
    }
    if (node.child_count != ExpectedChildCount(type)) {
      return NodeError(path, "node has " + std::to_string(node.child_count) +
                                 " children but type " + type.ToString() + " needs " +
                                 std::to_string(ExpectedChildCount(type)));
    }
    if (!BufferCountFits(type, node.buffer_count)) {
      return NodeError(path, "node has " + std::to_string(node.buffer_count) +
                                 " buffers but type " + type.ToString() + " needs " +
                                 BufferCountRule(type));
    }
    if (node.buffer_count > buffers_left_) {
      return NodeError(path, "node has " + std::to_string(node.buffer_count) +
                                 " buffers but only " + std::to_string(buffers_left_) +
                                 " of the header's buffer_count remain");
    }

    auto data = std::make_shared<ArrayData>();
    data->type = type_pointer;
    data->length = node.length;
    data->offset = node.offset;
    data->null_count = node.null_count;
    data->buffers.reserve(node.buffer_count);
    for (uint32_t buffer_index = 0; buffer_index < node.buffer_count; ++buffer_index) {
      FERRY_ASSIGN_OR_RAISE(BufferPtr buffer, ReadBuffer(path, buffer_index));
      data->buffers.push_back(std::move(buffer));
    }
    if (node.child_count > 0) {
      data->children.reserve(node.child_count);
      for (size_t child_index = 0; child_index < node.child_count; ++child_index) {
        const ColumnPath child_path = ChildStep(path, type, child_index);
        FERRY_ASSIGN_OR_RAISE(ArrayDataPtr child,
                              ReadNode(type.children[child_index].type, child_path, depth + 1));
        data->children.push_back(std::move(child));
      }
    }
    if (needs_dictionary) {
      const ColumnPath dictionary_path = path.Dictionary();
      FERRY_ASSIGN_OR_RAISE(data->dictionary,
                            ReadNode(type.value_type, dictionary_path, depth + 1));
    }
    return ArrayDataPtr(std::move(data));
  }

 private:
  Result<BufferPtr> ReadBuffer(const ColumnPath& path, uint32_t buffer_index) {
    BufferRecord record{};
    if (buffers_left_ == 0 || !records_.Read(&record)) {
      return NodeError(path, "buffer " + std::to_string(buffer_index) +
                                 " runs past the header's buffer records");
    }
    --buffers_left_;
    if (record.reserved != 0) {
      return NodeError(path,
                       "buffer " + std::to_string(buffer_index) + ": reserved bytes are not zero");
    }
    if (record.segment_id == kAbsentSegment) {
      if (record.offset != 0 || record.length != 0) {
        return NodeError(path, "buffer " + std::to_string(buffer_index) +
                                   " is absent but has offset " + std::to_string(record.offset) +
                                   " and length " + std::to_string(record.length));
      }
      return BufferPtr();
    }
    if (!segment_cached_ || record.segment_id != cached_segment_id_) {
      Result<SegmentView> segment = (*lookup_)(record.segment_id);
      if (!segment.ok()) {
        return segment.status().WithPrefix("message header: " + path.Render() + ": buffer " +
                                           std::to_string(buffer_index) + ": segment " +
                                           std::to_string(record.segment_id) + ": ");
      }
      if (segment->size < 0 || (segment->data == nullptr && segment->size > 0)) {
        return NodeError(path, "buffer " + std::to_string(buffer_index) + ": segment " +
                                   std::to_string(record.segment_id) +
                                   " was looked up as an invalid mapping");
      }
      cached_segment_ = *segment;
      cached_segment_id_ = record.segment_id;
      segment_cached_ = true;
    }
    const auto segment_size = static_cast<uint64_t>(cached_segment_.size);
    // Written so that nothing can overflow: offset is checked first.
    if (record.offset > segment_size || record.length > segment_size - record.offset) {
      return NodeError(path, "buffer " + std::to_string(buffer_index) + " (offset " +
                                 std::to_string(record.offset) + ", length " +
                                 std::to_string(record.length) + ") lies outside segment " +
                                 std::to_string(record.segment_id) + " of " +
                                 std::to_string(segment_size) + " bytes");
    }
    block_->buffers.emplace_back(cached_segment_.data + record.offset,
                                 static_cast<int64_t>(record.length), owner_);
    return BufferPtr(block_, &block_->buffers.back());
  }

  ByteReader records_;
  uint32_t nodes_left_;
  uint32_t buffers_left_;
  LookupSegment* lookup_;
  const std::shared_ptr<const void>& owner_;
  std::shared_ptr<BufferBlock> block_;
  bool segment_cached_ = false;
  uint32_t cached_segment_id_ = 0;
  SegmentView cached_segment_;
};

// Headers up to this size are copied to the stack; larger ones to the heap.
constexpr int64_t kStackCopySize = 4096;

}  // namespace

// ---- Public header functions -------------------------------------------------------------

Result<int64_t> EncodedHeaderSize(const RecordBatch& batch, const Metadata& message_metadata) {
  return WriteHeader(batch, message_metadata, nullptr, nullptr, 0);
}

Result<int64_t> EncodeHeader(const RecordBatch& batch, const Metadata& message_metadata,
                             LocateBuffer locate, uint8_t* out, int64_t out_size) {
  if (out == nullptr || out_size < kHeaderPrefixSize) {
    return Status::Invalid("cannot encode message header: the output needs at least " +
                           std::to_string(kHeaderPrefixSize) + " bytes, got " +
                           std::to_string(out == nullptr ? 0 : out_size));
  }
  return WriteHeader(batch, message_metadata, &locate, out, out_size);
}

Result<RecordBatchPtr> DecodeHeader(const uint8_t* header, int64_t header_size,
                                    const SchemaPtr& schema, LookupSegment lookup,
                                    const std::shared_ptr<const void>& owner,
                                    Metadata* message_metadata_out, const DecodeOptions& options) {
  if (schema == nullptr) return HeaderError("no schema to decode against");
  if (header == nullptr || header_size < kHeaderPrefixSize) {
    return HeaderError("truncated: " + std::to_string(header == nullptr ? 0 : header_size) +
                       " bytes, the prefix alone needs " + std::to_string(kHeaderPrefixSize));
  }
  // Every field is read from private copies: the sender may still be writing.
  HeaderPrefix prefix{};
  std::memcpy(&prefix, header, sizeof(prefix));
  if (prefix.magic != kHeaderMagic) return HeaderError("bad magic (not a Ferry message header)");
  if (prefix.version != kHeaderVersion) {
    return HeaderError("unsupported version " + std::to_string(prefix.version) + " (expected " +
                       std::to_string(kHeaderVersion) + ")");
  }
  if (prefix.flags != 0 || prefix.reserved != 0) {
    return HeaderError("unknown flags or reserved bytes set");
  }
  if (prefix.total_size > static_cast<uint64_t>(header_size)) {
    return HeaderError("truncated: total_size is " + std::to_string(prefix.total_size) +
                       " bytes but only " + std::to_string(header_size) + " are given");
  }
  if (prefix.total_size > static_cast<uint64_t>(kMaxEncodedSize)) {
    return HeaderError("total_size " + std::to_string(prefix.total_size) + " exceeds the limit " +
                       std::to_string(kMaxEncodedSize));
  }
  // The counts are 32-bit, so this sum cannot overflow 64 bits.
  const uint64_t metadata_padded = PadTo8(prefix.metadata_bytes);
  const uint64_t records_size = uint64_t{prefix.node_count} * kNodeRecordSize +
                                uint64_t{prefix.buffer_count} * kBufferRecordSize;
  const uint64_t expected_size = kHeaderPrefixSize + metadata_padded + records_size;
  if (prefix.total_size != expected_size) {
    return HeaderError("total_size is " + std::to_string(prefix.total_size) + " but " +
                       std::to_string(prefix.node_count) + " nodes, " +
                       std::to_string(prefix.buffer_count) + " buffers and " +
                       std::to_string(prefix.metadata_bytes) + " metadata bytes need " +
                       std::to_string(expected_size));
  }
  if (prefix.num_rows < 0) {
    return HeaderError("num_rows is negative (" + std::to_string(prefix.num_rows) + ")");
  }
  const std::vector<Field>& fields = schema->fields;
  if (prefix.column_count != fields.size()) {
    return HeaderError("the header has " + std::to_string(prefix.column_count) +
                       " columns but the schema " + std::to_string(fields.size()));
  }

  const uint64_t body_size = prefix.total_size - kHeaderPrefixSize;
  alignas(8) uint8_t stack_copy[kStackCopySize];
  std::unique_ptr<uint8_t[]> heap_copy;
  uint8_t* body = stack_copy;
  if (body_size > sizeof(stack_copy)) {
    heap_copy.reset(new (std::nothrow) uint8_t[body_size]);
    if (heap_copy == nullptr) return Status::OutOfMemory("message header: cannot copy the header");
    body = heap_copy.get();
  }
  if (body_size > 0) std::memcpy(body, header + kHeaderPrefixSize, body_size);

  ByteReader metadata_reader(body, prefix.metadata_bytes);
  Metadata message_metadata;
  FERRY_RETURN_NOT_OK(
      ReadMetadataPairs(&metadata_reader, prefix.metadata_count, "message header",
                        message_metadata_out != nullptr ? &message_metadata : nullptr));
  if (metadata_reader.remaining() != 0) {
    return HeaderError("the metadata section has " + std::to_string(metadata_reader.remaining()) +
                       " bytes after its " + std::to_string(prefix.metadata_count) + " pairs");
  }
  for (uint64_t pad = prefix.metadata_bytes; pad < metadata_padded; ++pad) {
    if (body[pad] != 0) return HeaderError("metadata padding is not zero");
  }

  HeaderReader reader(body + metadata_padded, records_size, prefix.node_count, prefix.buffer_count,
                      &lookup, owner);
  FERRY_RETURN_NOT_OK(reader.Prepare());
  std::vector<ArrayDataPtr> columns;
  columns.reserve(fields.size());
  for (const Field& field : fields) {
    const ColumnPath path = ColumnRoot(field.name);
    FERRY_ASSIGN_OR_RAISE(ArrayDataPtr column, reader.ReadNode(field.type, path, 0));
    columns.push_back(std::move(column));
  }
  if (reader.nodes_left() != 0 || reader.buffers_left() != 0) {
    return HeaderError("the header has " + std::to_string(reader.nodes_left()) + " nodes and " +
                       std::to_string(reader.buffers_left()) +
                       " buffers more than the schema describes");
  }

  Result<RecordBatchPtr> batch = RecordBatch::Make(schema, prefix.num_rows, std::move(columns));
  if (!batch.ok()) return batch.status().WithPrefix("message header: ");
  const Status valid = options.payload_on_device ? ValidateLayout(**batch)
                       : options.validate_full   ? ValidateFull(**batch)
                                                 : ValidateStructural(**batch);
  if (!valid.ok()) return valid.WithPrefix("message header: ");
  if (message_metadata_out != nullptr) *message_metadata_out = std::move(message_metadata);
  return batch;
}

}  // namespace ferry::flow::wire
