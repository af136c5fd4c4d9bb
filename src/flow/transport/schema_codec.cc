// The transport's schema encoding (schema_codec.h).

#include "flow/transport/schema_codec.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/exchange/column_path.h"
#include "ferry/exchange/validate.h"
#include "flow/transport/codec_column_path.h"

namespace ferry::flow::wire {

namespace {

Status SchemaEncodeError(const ColumnPath& path, const std::string& rule) {
  return Status::Invalid("cannot encode schema: " + path.Render() + ": " + rule);
}

Status PutMetadata(ByteSink* sink, const Metadata& metadata, const ColumnPath* path) {
  if (!FitsU32(metadata.size())) {
    return path != nullptr ? SchemaEncodeError(*path, "too many metadata pairs")
                           : Status::Invalid("cannot encode schema: too many metadata pairs");
  }
  sink->Put(static_cast<uint32_t>(metadata.size()));
  for (const auto& [key, value] : metadata) {
    if (!FitsU32(key.size()) || !FitsU32(value.size())) {
      return path != nullptr ? SchemaEncodeError(*path, "metadata entry too long")
                             : Status::Invalid("cannot encode schema: metadata entry too long");
    }
    sink->PutString(key);
    sink->PutString(value);
  }
  return Status::OK();
}

Status PutField(ByteSink* sink, const Field& field, const ColumnPath& path, int depth) {
  if (depth > kMaxNestingDepth) {
    return SchemaEncodeError(path, "nesting deeper than " + std::to_string(kMaxNestingDepth));
  }
  if (field.type == nullptr) return SchemaEncodeError(path, "field has no type");
  const DataType& type = *field.type;
  const bool is_dictionary = type.id == TypeId::kDictionary;
  if (is_dictionary && (type.index_type == nullptr || !IsIntegerType(type.index_type->id))) {
    return SchemaEncodeError(path, "dictionary index type must be an integer");
  }
  if (is_dictionary && type.value_type == nullptr) {
    return SchemaEncodeError(path, "dictionary has no value type");
  }
  const DataType& node = StorageType(type);
  const std::string format = FormatString(node);
  if (format.empty()) return SchemaEncodeError(path, "type " + type.ToString() + " has no format");
  if (!FitsU32(field.name.size()) || !FitsU32(node.children.size())) {
    return SchemaEncodeError(path, "name or child count too large");
  }
  uint8_t flags = 0;
  if (field.nullable) flags |= kFieldNullable;
  if (is_dictionary) flags |= kFieldHasDictionary;
  if (is_dictionary && type.ordered) flags |= kFieldDictionaryOrdered;
  if (node.id == TypeId::kMap && node.keys_sorted) flags |= kFieldMapKeysSorted;

  sink->PutString(field.name);
  sink->PutString(format);
  sink->Put(flags);
  FERRY_RETURN_NOT_OK(PutMetadata(sink, field.metadata, &path));
  sink->Put(static_cast<uint32_t>(node.children.size()));
  for (size_t child_index = 0; child_index < node.children.size(); ++child_index) {
    FERRY_RETURN_NOT_OK(
        PutField(sink, node.children[child_index], ChildStep(path, node, child_index), depth + 1));
  }
  if (is_dictionary) {
    const ColumnPath dictionary_path = path.Dictionary();
    FERRY_RETURN_NOT_OK(
        PutField(sink, ferry::field("", type.value_type), dictionary_path, depth + 1));
  }
  return Status::OK();
}

// The fewest bytes a field can take: name length, format length, one format
// byte, flags, metadata count, child count.
constexpr uint64_t kMinFieldBytes = 4 + 4 + 1 + 1 + 4 + 4;

class SchemaReader {
 public:
  SchemaReader(const uint8_t* data, uint64_t size) : reader_(data, size) {}

  ByteReader& bytes() { return reader_; }

  // `parent` is null for a top-level column; `parent_id` says how the child
  // is named in paths.
  Result<Field> ReadField(const ColumnPath* parent, TypeId parent_id, size_t child_index,
                          bool is_dictionary_value, int depth) {
    std::string_view name;
    if (!reader_.ReadString(&name)) return Truncated(parent, "a field name");
    Field field;
    field.name = std::string(name);
    const ColumnPath path =
        is_dictionary_value
            ? (parent != nullptr ? parent->Dictionary() : ColumnPath::Root(".dictionary"))
            : (parent != nullptr
                   ? parent->Child(parent_id, static_cast<int64_t>(child_index), field.name)
                   : ColumnRoot(field.name));
    if (depth > kMaxNestingDepth) {
      return Error(path, "nesting deeper than " + std::to_string(kMaxNestingDepth));
    }

    std::string_view format;
    uint8_t flags = 0;
    if (!reader_.ReadString(&format)) return Truncated(&path, "the format string");
    if (!reader_.Read(&flags)) return Truncated(&path, "the field flags");
    Result<DataType> parsed = ParseFormat(format);
    if (!parsed.ok()) return parsed.status().WithPrefix("schema: " + path.Render() + ": ");
    DataType node = parsed.MoveValueUnsafe();
    const bool has_dictionary = (flags & kFieldHasDictionary) != 0;
    if ((flags & ~(kFieldNullable | kFieldHasDictionary | kFieldDictionaryOrdered |
                   kFieldMapKeysSorted)) != 0) {
      return Error(path, "unknown field flags " + std::to_string(flags));
    }
    if ((flags & kFieldDictionaryOrdered) != 0 && !has_dictionary) {
      return Error(path, "the dictionary-ordered flag is set on a field without a dictionary");
    }
    if ((flags & kFieldMapKeysSorted) != 0 && node.id != TypeId::kMap) {
      return Error(path, "the keys-sorted flag is set on format '" + std::string(format) +
                             "', which is not a map");
    }
    if (has_dictionary && !IsIntegerType(node.id)) {
      return Error(path, "dictionary on non-integer format '" + std::string(format) +
                             "' (indices must be an integer type)");
    }
    field.nullable = (flags & kFieldNullable) != 0;
    node.keys_sorted = (flags & kFieldMapKeysSorted) != 0;

    uint32_t metadata_count = 0;
    if (!reader_.Read(&metadata_count)) return Truncated(&path, "the metadata count");
    FERRY_RETURN_NOT_OK(
        ReadMetadataPairs(&reader_, metadata_count, "schema: " + path.Render(), &field.metadata));

    uint32_t child_count = 0;
    if (!reader_.Read(&child_count)) return Truncated(&path, "the child count");
    const int64_t required = RequiredChildCount(node);
    if (required >= 0 && child_count != required) {
      return Error(path, "format '" + std::string(format) + "' needs " + std::to_string(required) +
                             " children, got " + std::to_string(child_count));
    }
    if (child_count > reader_.remaining() / kMinFieldBytes) {
      return Error(path, std::to_string(child_count) + " children cannot fit in the " +
                             std::to_string(reader_.remaining()) + " bytes left");
    }
    node.children.reserve(child_count);
    for (uint32_t index = 0; index < child_count; ++index) {
      FERRY_ASSIGN_OR_RAISE(Field child, ReadField(&path, node.id, index,
                                                   /*is_dictionary_value=*/false, depth + 1));
      node.children.push_back(std::move(child));
    }

    if (has_dictionary) {
      FERRY_ASSIGN_OR_RAISE(Field values, ReadField(&path, node.id, 0,
                                                    /*is_dictionary_value=*/true, depth + 1));
      field.type = dictionary(std::make_shared<const DataType>(std::move(node)), values.type,
                              (flags & kFieldDictionaryOrdered) != 0);
    } else {
      field.type = std::make_shared<const DataType>(std::move(node));
    }
    return field;
  }

 private:
  Status Error(const ColumnPath& path, const std::string& rule) {
    return Status::Invalid("schema: " + path.Render() + ": " + rule);
  }
  Status Truncated(const ColumnPath* path, const std::string& what) {
    return Status::Invalid("schema: " + (path != nullptr ? path->Render() + ": " : "") +
                           "truncated while reading " + what + " at byte " +
                           std::to_string(reader_.position()));
  }

  ByteReader reader_;
};

}  // namespace

Result<std::string> EncodeSchema(const Schema& schema) {
  if (!FitsU32(schema.fields.size())) {
    return Status::Invalid("cannot encode schema: too many fields");
  }
  ByteSink sink;
  sink.Put(kSchemaMagic);
  sink.Put(kSchemaVersion);
  sink.Put(uint16_t{0});
  FERRY_RETURN_NOT_OK(PutMetadata(&sink, schema.metadata, nullptr));
  sink.Put(static_cast<uint32_t>(schema.fields.size()));
  for (const Field& field : schema.fields) {
    const ColumnPath path = ColumnRoot(field.name);
    FERRY_RETURN_NOT_OK(PutField(&sink, field, path, 0));
    if (sink.bytes().size() > static_cast<uint64_t>(kMaxEncodedSize)) break;
  }
  if (sink.bytes().size() > static_cast<uint64_t>(kMaxEncodedSize)) {
    return Status::Invalid("cannot encode schema: it would exceed " +
                           std::to_string(kMaxEncodedSize) + " bytes");
  }
  return std::move(sink.bytes());
}

Result<SchemaPtr> DecodeSchema(const uint8_t* data, int64_t size) {
  if (size < 0 || (data == nullptr && size > 0)) {
    return Status::Invalid("schema: no bytes to decode");
  }
  if (size > kMaxEncodedSize) {
    return Status::Invalid("schema: " + std::to_string(size) + " bytes exceed the limit " +
                           std::to_string(kMaxEncodedSize));
  }
  // Read from a private copy: the sender may still be writing.
  const std::string copy(reinterpret_cast<const char*>(data), static_cast<size_t>(size));
  SchemaReader schema_reader(reinterpret_cast<const uint8_t*>(copy.data()), copy.size());
  ByteReader& reader = schema_reader.bytes();

  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t flags = 0;
  if (!reader.Read(&magic) || !reader.Read(&version) || !reader.Read(&flags)) {
    return Status::Invalid("schema: truncated: " + std::to_string(size) +
                           " bytes cannot hold the 8-byte prefix");
  }
  if (magic != kSchemaMagic) return Status::Invalid("schema: bad magic (not a Ferry schema)");
  if (version != kSchemaVersion) {
    return Status::Invalid("schema: unsupported version " + std::to_string(version) +
                           " (expected " + std::to_string(kSchemaVersion) + ")");
  }
  if (flags != 0) return Status::Invalid("schema: unknown flags " + std::to_string(flags));

  auto schema = std::make_shared<Schema>();
  uint32_t metadata_count = 0;
  if (!reader.Read(&metadata_count)) {
    return Status::Invalid("schema: truncated while reading the metadata count");
  }
  FERRY_RETURN_NOT_OK(ReadMetadataPairs(&reader, metadata_count, "schema", &schema->metadata));
  uint32_t field_count = 0;
  if (!reader.Read(&field_count)) {
    return Status::Invalid("schema: truncated while reading the field count");
  }
  if (field_count > reader.remaining() / kMinFieldBytes) {
    return Status::Invalid("schema: " + std::to_string(field_count) + " fields cannot fit in the " +
                           std::to_string(reader.remaining()) + " bytes left");
  }
  schema->fields.reserve(field_count);
  for (uint32_t index = 0; index < field_count; ++index) {
    FERRY_ASSIGN_OR_RAISE(Field field, schema_reader.ReadField(nullptr, TypeId::kStruct, index,
                                                               /*is_dictionary_value=*/false, 0));
    const Status valid = ValidateType(*field.type);
    if (!valid.ok()) {
      return valid.WithPrefix("schema: " + ColumnRoot(field.name).Render() + ": ");
    }
    schema->fields.push_back(std::move(field));
  }
  if (reader.remaining() != 0) {
    return Status::Invalid("schema: " + std::to_string(reader.remaining()) +
                           " bytes left over after the last field");
  }
  return SchemaPtr(std::move(schema));
}

}  // namespace ferry::flow::wire
