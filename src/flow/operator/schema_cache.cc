#include "flow/operator/schema_cache.h"

#include <cstring>
#include <utility>

#include "ferry/exchange/bridge.h"

namespace ferry::flow::internal {
namespace {

constexpr int kMaxDepth = 64;
constexpr uint64_t kNull = ~uint64_t{0};

// Writes the parts of a C schema that an import reads into a flat string.
struct Writer {
  std::string* out;
  bool Put(const void* data, size_t size) {
    out->append(static_cast<const char*>(data), size);
    return true;
  }
};

// Compares them with such a string, consuming it.
struct Reader {
  const char* at;
  const char* end;
  bool Put(const void* data, size_t size) {
    if (static_cast<size_t>(end - at) < size || std::memcmp(at, data, size) != 0) return false;
    at += size;
    return true;
  }
};

template <typename Sink>
bool PutNumber(Sink& sink, uint64_t value) {
  return sink.Put(&value, sizeof(value));
}

template <typename Sink>
bool PutBytes(Sink& sink, const char* data, size_t size) {
  return PutNumber(sink, size) && sink.Put(data, size);
}

template <typename Sink>
bool PutText(Sink& sink, const char* text) {
  if (text == nullptr) return PutNumber(sink, kNull);
  return PutBytes(sink, text, std::strlen(text));
}

// The size of the binary metadata (int32 count, then int32 length + bytes
// per key and value), or -1 when it is malformed (then nothing is cached:
// the import reports it).
int64_t MetadataSize(const char* metadata) {
  if (metadata == nullptr) return 0;
  int32_t count;
  std::memcpy(&count, metadata, sizeof(count));
  if (count < 0 || count > (1 << 20)) return -1;
  int64_t size = sizeof(int32_t);
  for (int64_t i = 0; i < 2 * int64_t{count}; ++i) {
    int32_t length;
    std::memcpy(&length, metadata + size, sizeof(length));
    if (length < 0) return -1;
    size += sizeof(int32_t) + length;
    if (size > (int64_t{1} << 30)) return -1;
  }
  return size;
}

template <typename Sink>
bool Walk(const ArrowSchema* schema, Sink& sink, int depth) {
  if (schema == nullptr || depth > kMaxDepth) return false;
  if (schema->release == nullptr || schema->n_children < 0) return false;
  if (schema->n_children > 0 && schema->children == nullptr) return false;
  const int64_t metadata_size = MetadataSize(schema->metadata);
  if (metadata_size < 0) return false;
  if (!PutText(sink, schema->format) || !PutText(sink, schema->name) ||
      !PutNumber(sink, schema->metadata == nullptr ? kNull : uint64_t(metadata_size)) ||
      (metadata_size > 0 && !sink.Put(schema->metadata, static_cast<size_t>(metadata_size))) ||
      !PutNumber(sink, static_cast<uint64_t>(schema->flags)) ||
      !PutNumber(sink, static_cast<uint64_t>(schema->n_children))) {
    return false;
  }
  for (int64_t i = 0; i < schema->n_children; ++i) {
    if (!Walk(schema->children[i], sink, depth + 1)) return false;
  }
  if (schema->dictionary == nullptr) return PutNumber(sink, 0);
  return PutNumber(sink, 1) && Walk(schema->dictionary, sink, depth + 1);
}

}  // namespace

ImportedSchema::~ImportedSchema() {
  if (exported.release != nullptr) exported.release(&exported);
}

Result<ImportedSchemaPtr> MakeImportedSchema(SchemaPtr schema, bool export_c) {
  auto imported = std::make_shared<ImportedSchema>();
  imported->struct_type = struct_(schema->fields);
  if (export_c) FERRY_RETURN_NOT_OK(ExportSchema(*schema, &imported->exported));
  imported->schema = std::move(schema);
  return ImportedSchemaPtr(std::move(imported));
}

Result<ImportedSchemaPtr> SchemaCache::Import(const ArrowSchema* c_schema) {
  if (cached_ != nullptr && c_schema != nullptr) {
    Reader reader{fingerprint_.data(), fingerprint_.data() + fingerprint_.size()};
    if (Walk(c_schema, reader, 0) && reader.at == reader.end) {
      ++hits_;
      return cached_;
    }
  }
  cached_.reset();
  fingerprint_.clear();
  FERRY_ASSIGN_OR_RAISE(SchemaPtr schema, ImportSchema(c_schema));
  FERRY_ASSIGN_OR_RAISE(ImportedSchemaPtr imported,
                        MakeImportedSchema(std::move(schema), export_c_));
  ++imports_;
  Writer writer{&fingerprint_};
  if (Walk(c_schema, writer, 0)) {
    cached_ = imported;
  } else {
    fingerprint_.clear();  // not comparable: imported every time
  }
  return imported;
}

Result<ImportedSchemaPtr> SchemaCache::Wrap(const SchemaPtr& schema) {
  if (schema == nullptr) return Status::Invalid("no schema");
  if (cached_ != nullptr &&
      (cached_->schema == schema || cached_->schema->Equals(*schema, /*check_metadata=*/true))) {
    ++hits_;
    return cached_;
  }
  FERRY_ASSIGN_OR_RAISE(cached_, MakeImportedSchema(schema, export_c_));
  ++imports_;
  return cached_;
}

}  // namespace ferry::flow::internal
