#include "ferry/exchange/bridge.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exchange/array_internal.h"
#include "exchange/bridge_internal.h"
#include "exchange/validate_internal.h"
#include "ferry/base/telemetry.h"
#include "ferry/exchange/validate.h"

namespace ferry {
namespace internal {

std::string ChildPath(const std::string& parent, const DataType& parent_type, int64_t index,
                      std::string_view child_name) {
  const ColumnPath parent_path = ColumnPath::Root(parent);
  return parent_path.Child(parent_type.id, index, child_name).Render();
}

}  // namespace internal

namespace {

using internal::ArrayExportOptions;
using internal::ImportedArrayHolder;
using internal::ValueRead;
using internal::ValueReader;
using telemetry::Counter;

// Deeper trees than this are rejected on import: a malicious or cyclic
// structure must give an error, not a stack overflow.
constexpr int kMaxNestingDepth = 200;

// Buffers in the C layout, not counting the variadic data buffers and the
// trailing sizes buffer of view types.
int64_t FixedBufferCount(const DataType& type) { return StorageType(type).num_buffers(); }

int64_t ExpectedChildCount(const DataType& type) {
  return type.id == TypeId::kDictionary ? 0 : static_cast<int64_t>(type.children.size());
}

const std::vector<Field>& NoFields() {
  static const std::vector<Field> kNone;
  return kNone;
}

// ============================================================================
// Export: families of nodes
// ============================================================================

// Exported structs come in families: the children (and the dictionary) of
// one node share a single heap block with everything they point at (their
// buffer pointer arrays, format strings, names and metadata, and each one's
// private record), and the parent's `children` array points into it. The
// root of an export, whose struct is the caller's, gets a family of one. So
// a flat record batch of N columns costs two allocations per exported tree,
// not N + 1.
//
// A consumer may move members out and release them in any order and on any
// thread, so a block counts its references: one per member not released
// yet, plus one for its parent (for a root family: for the exporter, until
// the export is complete). The last release frees the block.
template <typename Struct, typename Record>
class Family {
 public:
  // Room for `n_children` members (plus one for a dictionary when
  // `with_dictionary`) and `extra_bytes` of their own arrays and strings.
  static Family* Allocate(int64_t n_children, bool with_dictionary, size_t extra_bytes) {
    return AllocateMembers(n_children, n_children + (with_dictionary ? 1 : 0), extra_bytes);
  }
  // A family of one for the root of an export, whose struct is the caller's
  // (the member's slot in the block stays unused).
  static Family* AllocateRoot(size_t extra_bytes) { return AllocateMembers(0, 1, extra_bytes); }

  int64_t n_children() const { return n_children_; }
  Struct** child_pointers() { return reinterpret_cast<Struct**>(this + 1); }
  Struct* members() { return reinterpret_cast<Struct*>(child_pointers() + n_children_); }
  Record* records() { return reinterpret_cast<Record*>(members() + n_members_); }
  char* extra() { return reinterpret_cast<char*>(records() + n_members_); }
  // The dictionary's slot and record (the member after the children), or null.
  Struct* dictionary_slot() { return n_members_ > n_children_ ? &members()[n_children_] : nullptr; }
  Record* dictionary_record() {
    return n_members_ > n_children_ ? &records()[n_children_] : nullptr;
  }
  Record* root_record() { return &records()[0]; }

  // The parent is released: releases the members the consumer did not move
  // out, then gives up the parent's reference.
  void ReleaseFromParent() {
    for (int64_t index = 0; index < n_members_; ++index) {
      Struct& member = members()[index];
      if (member.release != nullptr) member.release(&member);
    }
    Drop(1);
  }

  // An export that failed: releases the members it completed and gives up
  // the references of the others and of the parent (or exporter).
  void Discard() {
    int64_t unexported = 1;
    for (int64_t index = 0; index < n_members_; ++index) {
      Struct& member = members()[index];
      if (member.release != nullptr) {
        member.release(&member);
      } else {
        ++unexported;
      }
    }
    Drop(unexported);
  }

  // Gives up `count` references; the last frees the block.
  void Drop(int64_t count) {
    if (references_.fetch_sub(count, std::memory_order_acq_rel) != count) return;
    for (int64_t index = 0; index < n_members_; ++index) records()[index].~Record();
    this->~Family();
    ::operator delete(static_cast<void*>(this));
  }

 private:
  static Family* AllocateMembers(int64_t n_children, int64_t n_members, size_t extra_bytes) {
    const auto children = static_cast<size_t>(n_children);
    const auto members = static_cast<size_t>(n_members);
    void* memory = ::operator new(sizeof(Family) + children * sizeof(Struct*) +
                                  members * (sizeof(Struct) + sizeof(Record)) + extra_bytes);
    auto* family = new (memory) Family(n_children, static_cast<int64_t>(members));
    for (size_t index = 0; index < members; ++index) {
      new (&family->members()[index]) Struct{};
      new (&family->records()[index]) Record{};
      family->records()[index].family = family;
      if (index < children) family->child_pointers()[index] = &family->members()[index];
    }
    return family;
  }

  Family(int64_t n_children, int64_t n_members)
      : references_(n_members + 1), n_children_(n_children), n_members_(n_members) {}

  std::atomic<int64_t> references_;
  int64_t n_children_;
  int64_t n_members_;
};

// Reserves `bytes` (a multiple of 8, or the final strings) at `*cursor` in a
// family's extra area.
template <typename T>
T* Carve(char** cursor, size_t count) {
  T* carved = reinterpret_cast<T*>(*cursor);
  *cursor += count * sizeof(T);
  return carved;
}

// ============================================================================
// Schema export
// ============================================================================

struct SchemaRecord;
using SchemaFamily = Family<ArrowSchema, SchemaRecord>;

// An exported ArrowSchema's private data.
struct SchemaRecord {
  SchemaFamily* family = nullptr;    // the block this record lives in
  SchemaFamily* children = nullptr;  // the block of this node's children and dictionary
};
static_assert(sizeof(SchemaRecord) % 8 == 0 && sizeof(ArrowSchema) % 8 == 0);

// A second call through a saved function pointer finds `release` already
// NULL: that is counted and nothing else is touched, since private_data may
// already be gone.
void ReleaseExportedSchema(ArrowSchema* schema) {
  if (schema == nullptr || schema->release == nullptr || schema->private_data == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return;
  }
  auto* record = static_cast<SchemaRecord*>(schema->private_data);
  SchemaFamily* home = record->family;
  SchemaFamily* children = record->children;
  record->children = nullptr;
  schema->private_data = nullptr;
  schema->release = nullptr;
  telemetry::Add(Counter::kReleases);
  if (children != nullptr) children->ReleaseFromParent();
  home->Drop(1);
}

// Bytes of EncodeMetadata(metadata): an int32 count, then per pair an int32
// length and the bytes of key and of value; nothing at all when empty.
size_t EncodedMetadataSize(const Metadata& metadata) {
  if (metadata.empty()) return 0;
  size_t size = sizeof(int32_t);
  for (const auto& [key, value] : metadata) size += 2 * sizeof(int32_t) + key.size() + value.size();
  return size;
}

// What one schema export shares across its nodes.
class SchemaExport {
 public:
  // FormatString(type), remembered for the last few type objects asked
  // about: the columns of a schema often share a few. Types are immutable
  // and the caller's schema keeps every one alive during the export, so an
  // address stands for one type throughout. The text stays valid until the
  // next call.
  std::string_view FormatOf(const DataType& type) {
    for (const Entry& entry : entries_) {
      if (entry.type == &type) return entry.format;
    }
    Entry& entry = entries_[next_];
    next_ = (next_ + 1) % entries_.size();
    entry.format = FormatString(type);
    entry.type = &type;
    return entry.format;
  }

 private:
  struct Entry {
    const DataType* type = nullptr;
    std::string format;
  };
  std::array<Entry, 4> entries_;
  size_t next_ = 0;
};

// Room one schema node needs for its strings in its family's block.
size_t SchemaStringBytes(std::string_view format, std::string_view name, const Metadata& metadata) {
  return format.size() + 1 + name.size() + 1 + EncodedMetadataSize(metadata);
}

size_t FieldStringBytes(const Field& field, SchemaExport* context) {
  if (field.type == nullptr) return 0;
  return SchemaStringBytes(context->FormatOf(*field.type), field.name, field.metadata);
}

Status ExportTypeMember(const DataType& type, std::string_view name, const Metadata& metadata,
                        bool nullable, SchemaExport* context, SchemaRecord* record, char** strings,
                        ArrowSchema* out);

// Exports one schema node whose children are `children` (and, for a
// dictionary type, whose values are `dictionary_values`) into `out`, with
// `record` as its private data and its strings written at `*strings`.
// `format` is copied before any child is exported.
Status ExportSchemaMember(std::string_view format, std::string_view name, const Metadata& metadata,
                          int64_t flags, const std::vector<Field>& children,
                          const DataType* dictionary_values, SchemaExport* context,
                          SchemaRecord* record, char** strings, ArrowSchema* out) {
  char* format_text = Carve<char>(strings, format.size() + 1);
  std::memcpy(format_text, format.data(), format.size());
  format_text[format.size()] = '\0';
  char* name_text = Carve<char>(strings, name.size() + 1);
  std::memcpy(name_text, name.data(), name.size());
  name_text[name.size()] = '\0';
  const size_t metadata_size = EncodedMetadataSize(metadata);
  char* metadata_bytes = Carve<char>(strings, metadata_size);
  if (metadata_size > 0) {
    const std::string encoded = EncodeMetadata(metadata);
    if (encoded.size() != metadata_size) {
      return Status::UnknownError("metadata encoded to " + std::to_string(encoded.size()) +
                                  " bytes, not the " + std::to_string(metadata_size) +
                                  " planned (a bug in Ferry's bridge)");
    }
    // Arrow's C metadata encoding is length-prefixed binary, not a C string.
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result): no terminator belongs here
    std::memcpy(metadata_bytes, encoded.data(), encoded.size());
  }

  SchemaFamily* family = nullptr;
  if (!children.empty() || dictionary_values != nullptr) {
    size_t string_bytes = 0;
    for (const Field& field : children) string_bytes += FieldStringBytes(field, context);
    if (dictionary_values != nullptr) {
      string_bytes += SchemaStringBytes(context->FormatOf(*dictionary_values), "", Metadata{});
    }
    family = SchemaFamily::Allocate(static_cast<int64_t>(children.size()),
                                    dictionary_values != nullptr, string_bytes);
    char* member_strings = family->extra();
    Status status;
    if (dictionary_values != nullptr) {
      status =
          ExportTypeMember(*dictionary_values, "", Metadata{}, /*nullable=*/true, context,
                           family->dictionary_record(), &member_strings, family->dictionary_slot());
    }
    for (size_t index = 0; status.ok() && index < children.size(); ++index) {
      const Field& field = children[index];
      if (field.type == nullptr) {
        status = Status::Invalid("field " + QuoteName(field.name) + " has no type");
        break;
      }
      status =
          ExportTypeMember(*field.type, field.name, field.metadata, field.nullable, context,
                           &family->records()[index], &member_strings, &family->members()[index]);
    }
    if (!status.ok()) {
      family->Discard();
      return status;
    }
  }

  record->children = family;
  out->format = format_text;
  out->name = name_text;
  out->metadata = metadata_size == 0 ? nullptr : metadata_bytes;
  out->flags = flags;
  out->n_children = static_cast<int64_t>(children.size());
  out->children = children.empty() ? nullptr : family->child_pointers();
  out->dictionary = dictionary_values != nullptr ? family->dictionary_slot() : nullptr;
  out->release = &ReleaseExportedSchema;
  out->private_data = record;
  return Status::OK();
}

Status ExportTypeMember(const DataType& type, std::string_view name, const Metadata& metadata,
                        bool nullable, SchemaExport* context, SchemaRecord* record, char** strings,
                        ArrowSchema* out) {
  int64_t flags = nullable ? ARROW_FLAG_NULLABLE : 0;
  if (type.id == TypeId::kDictionary) {
    if (type.index_type == nullptr || type.value_type == nullptr) {
      return Status::Invalid("dictionary type without index or value type");
    }
    if (type.ordered) flags |= ARROW_FLAG_DICTIONARY_ORDERED;
    // FormatString gives the index format for a dictionary type: the values
    // travel in `dictionary`.
    return ExportSchemaMember(context->FormatOf(type), name, metadata, flags, NoFields(),
                              type.value_type.get(), context, record, strings, out);
  }
  if (type.id == TypeId::kMap && type.keys_sorted) flags |= ARROW_FLAG_MAP_KEYS_SORTED;
  return ExportSchemaMember(context->FormatOf(type), name, metadata, flags, type.children,
                            /*dictionary_values=*/nullptr, context, record, strings, out);
}

// Exports a root node into the caller's `out`: `export_member` fills it
// from a family of one whose strings have `string_bytes`.
template <typename ExportMember>
Status ExportSchemaRoot(size_t string_bytes, ExportMember export_member) {
  SchemaFamily* root = SchemaFamily::AllocateRoot(string_bytes);
  char* strings = root->extra();
  Status status = export_member(root->root_record(), &strings);
  if (!status.ok()) {
    root->Discard();
    return status;
  }
  root->Drop(1);  // the exporter's reference: the root member holds the block now
  return Status::OK();
}

// A type or field exported on its own.
Status ExportTypeTree(const DataType& type, std::string_view name, const Metadata& metadata,
                      bool nullable, ArrowSchema* out) {
  SchemaExport context;
  const size_t string_bytes = SchemaStringBytes(context.FormatOf(type), name, metadata);
  return ExportSchemaRoot(string_bytes, [&](SchemaRecord* record, char** strings) {
    return ExportTypeMember(type, name, metadata, nullable, &context, record, strings, out);
  });
}

// ============================================================================
// Array export
// ============================================================================

struct ArrayRecord;
using ArrayFamily = Family<ArrowArray, ArrayRecord>;

// An exported ArrowArray's private data.
struct ArrayRecord {
  ArrayFamily* family = nullptr;    // the block this record lives in
  ArrayFamily* children = nullptr;  // the block of this node's children and dictionary
  // Keeps every buffer of this node alive until the consumer releases it
  // (null for the root of a record batch, which has no buffer of its own).
  ArrayDataPtr data;
  // Device exports: where place_variadic_sizes put the variadic sizes.
  BufferPtr placed_variadic_sizes;
};
static_assert(sizeof(ArrayRecord) % 8 == 0 && sizeof(ArrowArray) % 8 == 0);

void ReleaseExportedArray(ArrowArray* array) {
  if (array == nullptr || array->release == nullptr || array->private_data == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return;
  }
  auto* record = static_cast<ArrayRecord*>(array->private_data);
  ArrayFamily* home = record->family;
  ArrayFamily* children = record->children;
  record->children = nullptr;
  array->private_data = nullptr;
  array->release = nullptr;
  telemetry::Add(Counter::kReleases);
  if (children != nullptr) children->ReleaseFromParent();
  // The buffers are free to go now, whatever the siblings still hold.
  record->data.reset();
  record->placed_variadic_sizes.reset();
  home->Drop(1);
}

// Some consumers insist on an offsets buffer even for an empty array, and
// Arrow C++ reads its first entry; a static zero serves as the offsets of
// every zero-length binary or list array (exported at offset 0, see
// ExportedOffset), whatever its own buffer holds there.
const int64_t kZeroOffsets[1] = {0};

// Room one array node needs in its family's block: its buffer pointers and,
// for a view array, one more for the sizes of its variadic buffers, which
// follow (at least one, so that the pointer is never NULL).
size_t ArrayExtraBytes(const ArrayDataPtr& data) {
  if (data == nullptr || data->type == nullptr) return 0;
  const size_t buffers = data->buffers.size();
  if (!IsViewType(data->type->id)) return buffers * sizeof(const void*);
  const size_t variadic = buffers > 2 ? buffers - 2 : 1;
  return (buffers + 1) * sizeof(const void*) + variadic * sizeof(int64_t);
}

Status ExportArrayMember(const ArrayDataPtr& data, const ColumnPath& path,
                         const ArrayExportOptions& options, ArrayRecord* record, char** extra,
                         ArrowArray* out);

// Exports `children` (named by `fields`, when there are as many, with paths
// as children of a `parent_id` node) and `dictionary` (if not null) as one
// family; null when there is neither.
Status ExportArrayFamily(const std::vector<ArrayDataPtr>& children, const ArrayDataPtr& dictionary,
                         TypeId parent_id, const std::vector<Field>& fields, const ColumnPath& path,
                         const ArrayExportOptions& options, ArrayFamily** family_out) {
  *family_out = nullptr;
  if (children.empty() && dictionary == nullptr) return Status::OK();
  size_t extra_bytes = dictionary != nullptr ? ArrayExtraBytes(dictionary) : 0;
  for (const ArrayDataPtr& child : children) extra_bytes += ArrayExtraBytes(child);
  ArrayFamily* family = ArrayFamily::Allocate(static_cast<int64_t>(children.size()),
                                              dictionary != nullptr, extra_bytes);
  char* extra = family->extra();
  Status status;
  for (size_t index = 0; status.ok() && index < children.size(); ++index) {
    const std::string_view child_name =
        index < fields.size() ? std::string_view(fields[index].name) : std::string_view();
    const ColumnPath child_path = path.Child(parent_id, static_cast<int64_t>(index), child_name);
    status = ExportArrayMember(children[index], child_path, options, &family->records()[index],
                               &extra, &family->members()[index]);
  }
  if (status.ok() && dictionary != nullptr) {
    const ColumnPath dictionary_path = path.Dictionary();
    status = ExportArrayMember(dictionary, dictionary_path, options, family->dictionary_record(),
                               &extra, family->dictionary_slot());
  }
  if (!status.ok()) {
    family->Discard();
    return status;
  }
  *family_out = family;
  return Status::OK();
}

void FillExportedArray(ArrayRecord* record, ArrayFamily* children, int64_t n_children,
                       int64_t length, int64_t null_count, int64_t offset, int64_t n_buffers,
                       const void** buffers, ArrowArray* out) {
  record->children = children;
  out->length = length;
  out->null_count = null_count;
  out->offset = offset;
  out->n_buffers = n_buffers;
  out->n_children = n_children;
  out->buffers = n_buffers == 0 ? nullptr : buffers;
  out->children = n_children == 0 ? nullptr : children->child_pointers();
  out->dictionary = children != nullptr ? children->dictionary_slot() : nullptr;
  out->release = &ReleaseExportedArray;
  out->private_data = record;
}

// Whether a zero-length array's own offsets can go out as they are: at
// offset 0, with a first entry of 0.
bool StartsAtZeroOffset(const ArrayData& data, int width) {
  const BufferPtr& offsets = data.buffers[1];
  if (data.offset != 0 || offsets == nullptr || offsets->size() < width) return false;
  int64_t first = 0;
  std::memcpy(&first, offsets->data(), static_cast<size_t>(width));  // little-endian
  return first == 0;
}

// A zero-length array is handed on at offset 0: it reads nothing at any
// offset, and Arrow C++'s importer sizes a zero-length array's buffers as
// empty, then refuses a view array whose offset points past them.
int64_t ExportedOffset(const ArrayData& data) { return data.length == 0 ? 0 : data.offset; }

// Arrow C++ aborts the importing process (pyarrow included) on a map whose
// entries struct or keys child has a null anywhere, so such a map is not
// handed on. Export counts each child's nulls for its header anyway.
Status CheckMapEntriesExportable(const ArrayData& map, const ColumnPath& path) {
  if (map.children.size() != 1 || map.children[0] == nullptr) return Status::OK();
  const ArrayData& entries = *map.children[0];
  if (const int64_t nulls = entries.GetNullCount(); nulls > 0) {
    return Status::Invalid(
        path.Render() + ": map entries must not be null: " + std::to_string(nulls) + " of the " +
        std::to_string(entries.length) + " entries are null, which Arrow C++ consumers refuse");
  }
  if (entries.children.empty() || entries.children[0] == nullptr) return Status::OK();
  const ArrayData& keys = *entries.children[0];
  if (const int64_t nulls = keys.GetNullCount(); nulls > 0) {
    return Status::Invalid(path.Render() + ": map keys must not be null: " + std::to_string(nulls) +
                           " of the " + std::to_string(keys.length) +
                           " keys are null, which Arrow C++ consumers refuse");
  }
  return Status::OK();
}

Status ExportArrayMember(const ArrayDataPtr& data, const ColumnPath& path,
                         const ArrayExportOptions& options, ArrayRecord* record, char** extra,
                         ArrowArray* out) {
  if (data == nullptr) return Status::Invalid(path.Render() + ": ArrayData is null");
  if (data->type == nullptr) return Status::Invalid(path.Render() + ": ArrayData has no type");
  const DataType& type = *data->type;

  const bool is_view = IsViewType(type.id);
  const int64_t fixed_buffers = FixedBufferCount(type);
  const int64_t buffer_count = static_cast<int64_t>(data->buffers.size());
  if (is_view ? buffer_count < fixed_buffers : buffer_count != fixed_buffers) {
    return Status::Invalid(path.Render() + ": " + std::to_string(buffer_count) +
                           " buffers, but type " + type.ToString() + " needs " +
                           std::to_string(fixed_buffers) + (is_view ? " or more" : ""));
  }
  if (static_cast<int64_t>(data->children.size()) != ExpectedChildCount(type)) {
    return Status::Invalid(path.Render() + ": " + std::to_string(data->children.size()) +
                           " children, but type " + type.ToString() + " needs " +
                           std::to_string(ExpectedChildCount(type)));
  }
  if ((type.id == TypeId::kDictionary) != (data->dictionary != nullptr)) {
    return Status::Invalid(path.Render() + (data->dictionary
                                                ? ": dictionary on a non-dictionary type"
                                                : ": dictionary type without a dictionary"));
  }

  // As ArrayExtraBytes planned: the buffer pointers, then for views the
  // sizes pointer and the sizes themselves.
  const int64_t exported_buffers = buffer_count + (is_view ? 1 : 0);
  const void** buffers = Carve<const void*>(extra, static_cast<size_t>(exported_buffers));
  for (int64_t index = 0; index < buffer_count; ++index) {
    const BufferPtr& buffer = data->buffers[static_cast<size_t>(index)];
    buffers[index] = buffer ? buffer->data() : nullptr;
  }
  const DataType& storage = StorageType(type);
  const int offset_width = OffsetWidthOfVariableLength(storage.id);
  if (options.host_readable && offset_width != 0 && data->length == 0 &&
      !StartsAtZeroOffset(*data, offset_width)) {
    buffers[1] = kZeroOffsets;
  }
  if (is_view) {
    const int64_t variadic_count = buffer_count - 2;
    int64_t* sizes =
        Carve<int64_t>(extra, static_cast<size_t>(std::max<int64_t>(1, variadic_count)));
    sizes[0] = 0;
    for (int64_t index = 0; index < variadic_count; ++index) {
      const BufferPtr& buffer = data->buffers[static_cast<size_t>(2 + index)];
      sizes[index] = buffer ? buffer->size() : 0;
    }
    const void* sizes_pointer = sizes;
    if (!options.host_readable && options.place_variadic_sizes) {
      sizes_pointer = nullptr;
      if (variadic_count > 0) {
        Result<BufferPtr> placed = options.place_variadic_sizes(sizes, variadic_count);
        if (!placed.ok()) {
          return placed.status().WithPrefix(path.Render() + ": variadic buffer sizes: ");
        }
        record->placed_variadic_sizes = placed.MoveValueUnsafe();
        sizes_pointer = record->placed_variadic_sizes->data();
      }
    }
    buffers[buffer_count] = sizes_pointer;
  }

  if (options.host_readable && storage.id == TypeId::kMap) {
    FERRY_RETURN_NOT_OK(CheckMapEntriesExportable(*data, path));
  }

  ArrayFamily* children = nullptr;
  FERRY_RETURN_NOT_OK(ExportArrayFamily(data->children, data->dictionary, type.id, type.children,
                                        path, options, &children));
  record->data = data;
  // Counting nulls reads the bitmap, which device memory does not allow.
  const int64_t null_count = options.host_readable ? data->GetNullCount() : data->null_count;
  FillExportedArray(record, children, static_cast<int64_t>(data->children.size()), data->length,
                    null_count, ExportedOffset(*data), exported_buffers, buffers, out);
  return Status::OK();
}

// Exports a root node into the caller's `out`: `export_member` fills it
// from a family of one with `extra_bytes` of room.
template <typename ExportMember>
Status ExportArrayRoot(size_t extra_bytes, ExportMember export_member) {
  ArrayFamily* root = ArrayFamily::AllocateRoot(extra_bytes);
  char* extra = root->extra();
  Status status = export_member(root->root_record(), &extra);
  if (!status.ok()) {
    root->Discard();
    return status;
  }
  root->Drop(1);  // the exporter's reference: the root member holds the block now
  return Status::OK();
}

Status ExportArrayNode(const ArrayDataPtr& data, const ColumnPath& path,
                       const ArrayExportOptions& options, ArrowArray* out) {
  return ExportArrayRoot(ArrayExtraBytes(data), [&](ArrayRecord* record, char** extra) {
    return ExportArrayMember(data, path, options, record, extra, out);
  });
}

// The struct array of a record batch, exported straight from its columns:
// no struct type or ArrayData is built for the root, which has no buffer of
// its own (its validity is absent: a batch has no null rows).
Status ExportBatchArray(const RecordBatch& batch, ArrowArray* out) {
  static const ArrayExportOptions kHostMemory;
  const ColumnPath root = ColumnPath::Root("array");
  const std::vector<Field>& fields = batch.schema() ? batch.schema()->fields : NoFields();
  return ExportArrayRoot(sizeof(const void*), [&](ArrayRecord* record, char** extra) {
    const void** buffers = Carve<const void*>(extra, 1);
    buffers[0] = nullptr;
    ArrayFamily* columns = nullptr;
    FERRY_RETURN_NOT_OK(ExportArrayFamily(batch.columns(), /*dictionary=*/nullptr, TypeId::kStruct,
                                          fields, root, kHostMemory, &columns));
    FillExportedArray(record, columns, batch.num_columns(), batch.num_rows(), /*null_count=*/0,
                      /*offset=*/0, /*n_buffers=*/1, buffers, out);
    return Status::OK();
  });
}

// ============================================================================
// Schema import
// ============================================================================

// The shared instance of a type without parameters or children, or null for
// any other type. A parsed node of such a type is no different from it, and
// sharing it saves building and validating a node per column.
TypePtr SharedLeafType(TypeId id) {
  switch (id) {
    case TypeId::kNull:
      return null();
    case TypeId::kBool:
      return boolean();
    case TypeId::kInt8:
      return int8();
    case TypeId::kUInt8:
      return uint8();
    case TypeId::kInt16:
      return int16();
    case TypeId::kUInt16:
      return uint16();
    case TypeId::kInt32:
      return int32();
    case TypeId::kUInt32:
      return uint32();
    case TypeId::kInt64:
      return int64();
    case TypeId::kUInt64:
      return uint64();
    case TypeId::kHalfFloat:
      return float16();
    case TypeId::kFloat:
      return float32();
    case TypeId::kDouble:
      return float64();
    case TypeId::kBinary:
      return binary();
    case TypeId::kLargeBinary:
      return large_binary();
    case TypeId::kBinaryView:
      return binary_view();
    case TypeId::kUtf8:
      return utf8();
    case TypeId::kLargeUtf8:
      return large_utf8();
    case TypeId::kUtf8View:
      return utf8_view();
    case TypeId::kDate32:
      return date32();
    case TypeId::kDate64:
      return date64();
    case TypeId::kIntervalMonths:
      return interval_months();
    case TypeId::kIntervalDayTime:
      return interval_day_time();
    case TypeId::kIntervalMonthDayNano:
      return interval_month_day_nano();
    default:
      return nullptr;
  }
}

// ValidateType for a node whose children have passed it already (import
// builds and checks them first). Structs and variable-size lists have no
// rule but their number of children, which the format check settled, and
// their children's: for them the recursive check would only walk the
// subtree again.
Status ValidateImportedTypeNode(const DataType& type) {
  switch (type.id) {
    case TypeId::kStruct:
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kListView:
    case TypeId::kLargeListView:
      return Status::OK();
    default:
      return ValidateType(type);
  }
}

// The ArrowSchema nodes one import has visited, as an open-addressing hash
// set of pointers: a schema of N nodes costs O(N) and a few allocations.
class VisitedNodes {
 public:
  // False if `node` was inserted before.
  bool Insert(const ArrowSchema* node) {
    if ((count_ + 1) * 2 > slots_.size()) Grow(std::max<size_t>(64, slots_.size() * 2));
    const size_t mask = slots_.size() - 1;
    for (size_t slot = Hash(node) & mask;; slot = (slot + 1) & mask) {
      if (slots_[slot] == node) return false;
      if (slots_[slot] == nullptr) {
        slots_[slot] = node;
        ++count_;
        return true;
      }
    }
  }

  // Makes room for `expected` nodes at once.
  void Reserve(size_t expected) {
    size_t capacity = 64;
    while (capacity < expected * 2) capacity *= 2;
    if (capacity > slots_.size()) Grow(capacity);
  }

 private:
  static size_t Hash(const ArrowSchema* node) {
    const auto bits = reinterpret_cast<uintptr_t>(node);
    return static_cast<size_t>((bits >> 3) * 0x9E3779B97F4A7C15ULL >> 20);
  }

  void Grow(size_t capacity) {
    std::vector<const ArrowSchema*> old = std::move(slots_);
    slots_.assign(capacity, nullptr);
    count_ = 0;
    for (const ArrowSchema* node : old) {
      if (node != nullptr) Insert(node);
    }
  }

  std::vector<const ArrowSchema*> slots_;
  size_t count_ = 0;
};

// Schema nodes without children or dictionary whose format strings this
// import has already turned into types. Columns of one type (or of a few)
// are the common case: each is then parsed, built and validated once per
// schema instead of once per column. A format string alone determines such
// a node's type, so sharing it is exact.
class LeafTypeMemo {
 public:
  const TypePtr* Find(std::string_view format) const {
    for (const Entry& entry : entries_) {
      if (entry.type != nullptr && entry.format == format) return &entry.type;
    }
    return nullptr;
  }
  void Add(std::string_view format, TypePtr type) {
    Entry& entry = entries_[next_];
    next_ = (next_ + 1) % entries_.size();
    entry.format.assign(format);
    entry.type = std::move(type);
  }

 private:
  struct Entry {
    std::string format;
    TypePtr type;
  };
  std::array<Entry, 8> entries_;
  size_t next_ = 0;
};

// Each node of a schema tree has exactly one parent (its parent's release
// releases it). A node reached twice is a cycle or a DAG, which could also
// describe exponentially many fields in little memory: it is rejected.
struct SchemaImport {
  VisitedNodes visited;
  LeafTypeMemo leaf_types;
  // Levels of the imported type, counted as ValidateStructural counts them
  // (a dictionary's index type is one level below it).
  int type_nesting = 0;
};

// The type of a node whose format is `format`, with `children` already
// imported (and validated) and, for dictionary-encoded nodes, `dictionary`.
Result<TypePtr> MakeImportedType(const ArrowSchema& schema, DataType node,
                                 const Field* dictionary_values) {
  if (dictionary_values != nullptr) {
    TypePtr indices = SharedLeafType(node.id);
    TypePtr type =
        dictionary(indices ? std::move(indices) : std::make_shared<const DataType>(std::move(node)),
                   dictionary_values->type, (schema.flags & ARROW_FLAG_DICTIONARY_ORDERED) != 0);
    FERRY_RETURN_NOT_OK(ValidateImportedTypeNode(*type));
    return type;
  }
  if (node.children.empty()) {
    if (TypePtr shared = SharedLeafType(node.id)) return shared;
  }
  TypePtr type = std::make_shared<const DataType>(std::move(node));
  FERRY_RETURN_NOT_OK(ValidateImportedTypeNode(*type));
  return type;
}

// Imports one schema node into `field` (and, recursively, its children and
// dictionary). `top_level_columns`: the root is a schema, whose children
// are named as columns ("col 'x'").
Status ImportFieldNode(const ArrowSchema* schema, const ColumnPath& path, int depth,
                       bool top_level_columns, SchemaImport* import, Field* field) {
  if (schema == nullptr) return Status::Invalid(path.Render() + ": ArrowSchema pointer is NULL");
  if (schema->release == nullptr) {
    return Status::Invalid(path.Render() + ": ArrowSchema is already released (release is NULL)");
  }
  if (depth > kMaxNestingDepth) {
    return Status::Invalid(path.Render() + ": nesting deeper than " +
                           std::to_string(kMaxNestingDepth));
  }
  if (!import->visited.Insert(schema)) {
    return Status::Invalid(path.Render() +
                           ": ArrowSchema node appears twice in the tree (a cycle or a "
                           "shared child)");
  }
  if (schema->format == nullptr) return Status::Invalid(path.Render() + ": format is NULL");
  if (schema->n_children < 0) {
    return Status::Invalid(path.Render() + ": n_children is negative (" +
                           std::to_string(schema->n_children) + ")");
  }
  if (schema->n_children > 0 && schema->children == nullptr) {
    return Status::Invalid(path.Render() + ": children is NULL but n_children is " +
                           std::to_string(schema->n_children));
  }

  if (schema->name != nullptr) field->name.assign(schema->name);
  field->nullable = (schema->flags & ARROW_FLAG_NULLABLE) != 0;
  import->type_nesting = std::max(import->type_nesting, depth + 1);

  const std::string_view format = schema->format;
  const bool leaf = schema->n_children == 0 && schema->dictionary == nullptr;
  const TypePtr* known = leaf ? import->leaf_types.Find(format) : nullptr;
  if (known != nullptr) {
    field->type = *known;
  } else {
    Result<DataType> parsed = ParseFormat(format);
    if (!parsed.ok()) return parsed.status().WithPrefix(path.Render() + ": ");
    DataType node = parsed.MoveValueUnsafe();

    const int64_t required_children = RequiredChildCount(node);
    if (required_children >= 0 && schema->n_children != required_children) {
      return Status::Invalid(path.Render() + ": format '" + schema->format + "' needs " +
                             std::to_string(required_children) + " children, got " +
                             std::to_string(schema->n_children));
    }
    if (schema->metadata != nullptr) {
      Result<Metadata> metadata = DecodeMetadata(schema->metadata);
      if (!metadata.ok()) return metadata.status().WithPrefix(path.Render() + ": metadata: ");
      field->metadata = metadata.MoveValueUnsafe();
    }

    const bool columns = depth == 0 && node.id == TypeId::kStruct && top_level_columns;
    // Room for the children up front, within reason: n_children is the
    // producer's word, and each child is checked only when it is reached.
    const auto expected_children =
        static_cast<size_t>(std::min<int64_t>(schema->n_children, int64_t{1} << 16));
    if (depth == 0) import->visited.Reserve(expected_children + 1);
    node.children.reserve(expected_children);
    for (int64_t index = 0; index < schema->n_children; ++index) {
      const ArrowSchema* child = schema->children[index];
      const std::string_view child_name =
          child != nullptr && child->name != nullptr ? child->name : "";
      const ColumnPath child_path = columns ? ColumnPath::QuotedRoot("col", child_name)
                                            : path.Child(node.id, index, child_name);
      FERRY_RETURN_NOT_OK(ImportFieldNode(child, child_path, depth + 1,
                                          /*top_level_columns=*/false, import,
                                          &node.children.emplace_back()));
    }
    if (node.id == TypeId::kMap) {
      node.keys_sorted = (schema->flags & ARROW_FLAG_MAP_KEYS_SORTED) != 0;
    }

    Field values;
    if (schema->dictionary != nullptr) {
      if (!IsIntegerType(node.id)) {
        return Status::Invalid(path.Render() + ": dictionary on non-integer format '" +
                               schema->format + "' (indices must be an integer type)");
      }
      const ColumnPath dictionary_path = path.Dictionary();
      FERRY_RETURN_NOT_OK(ImportFieldNode(schema->dictionary, dictionary_path, depth + 1,
                                          /*top_level_columns=*/false, import, &values));
      import->type_nesting = std::max(import->type_nesting, depth + 2);
    }
    Result<TypePtr> type = MakeImportedType(*schema, std::move(node),
                                            schema->dictionary != nullptr ? &values : nullptr);
    if (!type.ok()) return type.status().WithPrefix(path.Render() + ": ");
    field->type = type.MoveValueUnsafe();
    if (leaf) import->leaf_types.Add(format, field->type);
    return Status::OK();
  }
  // A memoized leaf: only its metadata is left to read.
  if (schema->metadata != nullptr) {
    Result<Metadata> metadata = DecodeMetadata(schema->metadata);
    if (!metadata.ok()) return metadata.status().WithPrefix(path.Render() + ": metadata: ");
    field->metadata = metadata.MoveValueUnsafe();
  }
  return Status::OK();
}

// A schema tree imported, with what the array import may rely on: the type
// passed ValidateType and nests `type_nesting` levels deep.
struct ImportedField {
  Field field;
  int type_nesting = 0;
};

Result<ImportedField> ImportFieldTree(const ArrowSchema* schema, const ColumnPath& root,
                                      bool top_level_columns) {
  SchemaImport import;
  ImportedField imported;
  FERRY_RETURN_NOT_OK(
      ImportFieldNode(schema, root, 0, top_level_columns, &import, &imported.field));
  imported.type_nesting = import.type_nesting;
  return imported;
}

// ============================================================================
// Array import
// ============================================================================

Status ImportError(const ColumnPath& path, const std::string& rule) {
  return Status::Invalid(path.Render() + ": " + rule);
}

Status CheckedMultiply(int64_t count, int64_t width, const ColumnPath& path, int64_t* product) {
  if (__builtin_mul_overflow(count, width, product)) {
    return ImportError(path, "buffer size overflows int64");
  }
  return Status::OK();
}

// A buffer other than validity must be present when the array has values and
// the buffer has bytes; zero-length arrays may omit any buffer.
Status RequirePresent(const ArrowArray& array, int64_t index, int64_t size, const char* what,
                      const ColumnPath& path) {
  if (array.length > 0 && size > 0 && array.buffers[index] == nullptr) {
    return ImportError(path, std::string(what) + " buffer (buffer " + std::to_string(index) +
                                 ") is NULL but length is " + std::to_string(array.length));
  }
  return Status::OK();
}

// Where import gets the few values it must read from the producer's buffers
// (see bridge_internal.h): in place for host memory; for device memory a
// first walk records the reads and a second one replays the fetched values.
class ValueSource {
 public:
  // Reads host memory in place.
  ValueSource() = default;
  static ValueSource Recording(std::vector<ValueRead>* reads) {
    ValueSource source;
    source.mode_ = Mode::kRecording;
    source.recorded_ = reads;
    return source;
  }
  static ValueSource Replaying(const std::vector<ValueRead>* reads,
                               const std::vector<int64_t>* values) {
    ValueSource source;
    source.mode_ = Mode::kReplaying;
    source.replayed_reads_ = reads;
    source.values_ = values;
    return source;
  }

  bool in_place() const { return mode_ == Mode::kInPlace; }
  bool recording() const { return mode_ == Mode::kRecording; }

  // The little-endian signed value of `width` (4 or 8) bytes at `address`;
  // 0 while recording.
  Status Read(const void* address, int32_t width, int64_t* value) {
    switch (mode_) {
      case Mode::kInPlace:
        *value = Load(address, width);
        return Status::OK();
      case Mode::kRecording:
        recorded_->push_back(ValueRead{address, width});
        *value = 0;
        return Status::OK();
      case Mode::kReplaying:
        break;
    }
    if (next_ >= replayed_reads_->size() || (*replayed_reads_)[next_].address != address ||
        (*replayed_reads_)[next_].width != width) {
      return Status::UnknownError(
          "import asked for a value it did not plan to read (a bug in Ferry's bridge)");
    }
    *value = (*values_)[next_++];
    return Status::OK();
  }

 private:
  enum class Mode : uint8_t { kInPlace, kRecording, kReplaying };

  static int64_t Load(const void* address, int32_t width) {
    if (width == 4) {
      int32_t value;
      std::memcpy(&value, address, sizeof(value));
      return value;
    }
    int64_t value;
    std::memcpy(&value, address, sizeof(value));
    return value;
  }

  Mode mode_ = Mode::kInPlace;
  std::vector<ValueRead>* recorded_ = nullptr;
  const std::vector<ValueRead>* replayed_reads_ = nullptr;
  const std::vector<int64_t>* values_ = nullptr;
  size_t next_ = 0;
};

const void* OffsetAddress(const void* offsets, int32_t width, int64_t index) {
  return static_cast<const uint8_t*>(offsets) + index * width;
}

// The sizes of one node's buffers: at most three for every layout but views,
// which may have any number, so those few live inline.
class BufferSizes {
 public:
  void Reset(size_t count) {
    count_ = count;
    if (count > kInline) {
      spilled_.assign(count, 0);
    } else {
      inline_.fill(0);
    }
  }
  size_t size() const { return count_; }
  int64_t& operator[](size_t index) { return count_ > kInline ? spilled_[index] : inline_[index]; }

 private:
  static constexpr size_t kInline = 4;
  std::array<int64_t, kInline> inline_{};
  std::vector<int64_t> spilled_;
  size_t count_ = 0;
};

// Sizes of the buffers that ArrayData keeps (all but the trailing sizes
// buffer of views), computed from the type and offset + length (`end`);
// variable-length data sizes come from the last offset (binary, utf8) or
// from the trailing sizes buffer (views), read through `source`. Every
// buffer is checked for presence before any byte of it is read. The caller
// has checked n_buffers. For device memory (not `in_place`) the last offset
// of a list or map with values is read too, into `list_last_offset`, since
// ValidateStructural's rules cannot read it there.
Status ComputeBufferSizes(const ArrowArray& array, const DataType& storage, int64_t end,
                          const ColumnPath& path, ValueSource* source, BufferSizes* sizes,
                          int64_t* list_last_offset) {
  const bool is_view = IsViewType(storage.id);
  sizes->Reset(static_cast<size_t>(is_view ? array.n_buffers - 1 : array.n_buffers));
  if (HasValidityBitmap(storage.id)) (*sizes)[0] = BytesForBits(end);

  switch (storage.id) {
    case TypeId::kNull:
    case TypeId::kRunEndEncoded:
    case TypeId::kStruct:
    case TypeId::kFixedSizeList:
      return Status::OK();
    case TypeId::kBool:
      (*sizes)[1] = BytesForBits(end);
      return RequirePresent(array, 1, (*sizes)[1], "values", path);
    case TypeId::kBinary:
    case TypeId::kUtf8:
    case TypeId::kLargeBinary:
    case TypeId::kLargeUtf8:
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kMap: {
      const int width = OffsetWidthOfVariableLength(storage.id);
      // offset + length + 1 entries; the + 1 must not overflow either.
      int64_t entries;
      if (__builtin_add_overflow(end, 1, &entries)) {
        return ImportError(path, "buffer size overflows int64");
      }
      FERRY_RETURN_NOT_OK(CheckedMultiply(entries, width, path, &(*sizes)[1]));
      FERRY_RETURN_NOT_OK(RequirePresent(array, 1, (*sizes)[1], "offsets", path));
      if (sizes->size() < 3) {  // lists and maps: the data is the child
        if (!source->in_place() && array.length > 0) {
          return source->Read(OffsetAddress(array.buffers[1], width, end), width, list_last_offset);
        }
        return Status::OK();
      }
      // A non-null offsets buffer holds offset + length + 1 entries, so the
      // last one can be read even for a zero-length array (in place only:
      // from device memory nothing is fetched for an array without values).
      int64_t last_offset = 0;
      if (array.buffers[1] != nullptr && (source->in_place() || array.length > 0)) {
        FERRY_RETURN_NOT_OK(
            source->Read(OffsetAddress(array.buffers[1], width, end), width, &last_offset));
      }
      if (last_offset < 0) {
        return ImportError(path, "last offset is negative (" + std::to_string(last_offset) + ")");
      }
      (*sizes)[2] = last_offset;
      return RequirePresent(array, 2, last_offset, "data", path);
    }
    case TypeId::kBinaryView:
    case TypeId::kUtf8View: {
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, 16, path, &(*sizes)[1]));
      FERRY_RETURN_NOT_OK(RequirePresent(array, 1, (*sizes)[1], "views", path));
      const int64_t variadic_count = array.n_buffers - 3;
      const int64_t sizes_index = array.n_buffers - 1;
      const void* variadic_sizes = array.buffers[sizes_index];
      if (variadic_count > 0 && variadic_sizes == nullptr) {
        return ImportError(path, "variadic buffer sizes (buffer " + std::to_string(sizes_index) +
                                     ") is NULL but there are " + std::to_string(variadic_count) +
                                     " data buffers");
      }
      // From device memory nothing is fetched for an array without values:
      // its data buffers keep size 0.
      if (!source->in_place() && array.length == 0) return Status::OK();
      for (int64_t i = 0; i < variadic_count; ++i) {
        int64_t size;
        FERRY_RETURN_NOT_OK(
            source->Read(static_cast<const uint8_t*>(variadic_sizes) + i * 8, 8, &size));
        if (size < 0) {
          return ImportError(path, "variadic data buffer " + std::to_string(i) +
                                       " has negative size " + std::to_string(size));
        }
        if (size > 0 && array.buffers[2 + i] == nullptr) {
          return ImportError(path, "variadic data buffer " + std::to_string(i) +
                                       " is NULL but its size is " + std::to_string(size));
        }
        (*sizes)[static_cast<size_t>(2 + i)] = size;
      }
      return Status::OK();
    }
    case TypeId::kListView:
    case TypeId::kLargeListView: {
      const int width = storage.id == TypeId::kListView ? 4 : 8;
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, width, path, &(*sizes)[1]));
      (*sizes)[2] = (*sizes)[1];
      FERRY_RETURN_NOT_OK(RequirePresent(array, 1, (*sizes)[1], "offsets", path));
      return RequirePresent(array, 2, (*sizes)[2], "sizes", path);
    }
    case TypeId::kSparseUnion:
      (*sizes)[0] = end;
      return RequirePresent(array, 0, end, "type ids", path);
    case TypeId::kDenseUnion:
      (*sizes)[0] = end;
      FERRY_RETURN_NOT_OK(RequirePresent(array, 0, end, "type ids", path));
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, 4, path, &(*sizes)[1]));
      return RequirePresent(array, 1, (*sizes)[1], "offsets", path);
    default: {
      const int32_t width = storage.fixed_width();
      if (width < 0 || sizes->size() != 2) {
        return ImportError(path, "cannot import type " + storage.ToString());
      }
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, width, path, &(*sizes)[1]));
      return RequirePresent(array, 1, (*sizes)[1], "values", path);
    }
  }
}

// The rules of ValidateStructural that import does not already guarantee by
// construction, limited to what needs no byte of device memory: header
// values, child lengths, and the fetched last offset of a list or map.
Status CheckDeviceNode(const ArrayData& data, const DataType& storage, int64_t end,
                       int64_t list_last_offset, const ColumnPath& path) {
  if (!HasValidityBitmap(storage.id) && storage.id != TypeId::kNull && data.null_count > 0) {
    return ImportError(path, std::string(TypeIdName(storage.id)) +
                                 " arrays have no validity bitmap, so null_count must be 0 "
                                 "(or unknown), got " +
                                 std::to_string(data.null_count));
  }
  auto check_children_cover = [&](int64_t required, const char* reason) -> Status {
    for (size_t i = 0; i < data.children.size(); ++i) {
      if (data.children[i]->length < required) {
        return ImportError(
            path, "child " + std::to_string(i) + " (" + QuoteName(storage.children[i].name) +
                      ") is too short: " + reason + " needs length " + std::to_string(required) +
                      ", child has " + std::to_string(data.children[i]->length));
      }
    }
    return Status::OK();
  };
  switch (storage.id) {
    case TypeId::kStruct:
    case TypeId::kSparseUnion:
      return check_children_cover(end, "offset + length");
    case TypeId::kFixedSizeList: {
      if (data.length == 0) return Status::OK();
      int64_t required = 0;
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, storage.list_size, path, &required));
      return check_children_cover(required, "(offset + length) * list_size");
    }
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kMap:
      if (data.length == 0) return Status::OK();
      if (list_last_offset < 0) {
        return ImportError(path,
                           "last offset is negative (" + std::to_string(list_last_offset) + ")");
      }
      if (list_last_offset > data.children[0]->length) {
        return ImportError(path, "last offset exceeds the child length: offsets[" +
                                     std::to_string(end) + "]=" + std::to_string(list_last_offset) +
                                     " > " + std::to_string(data.children[0]->length));
      }
      return Status::OK();
    case TypeId::kRunEndEncoded:
      if (data.children[0]->length != data.children[1]->length) {
        return ImportError(path, "run_ends and values must have the same length: run_ends has " +
                                     std::to_string(data.children[0]->length) + ", values has " +
                                     std::to_string(data.children[1]->length));
      }
      return Status::OK();
    default:
      return Status::OK();
  }
}

// The Buffers of one imported tree, made in chunks rather than one heap
// block each. A BufferPtr shares the reference count of the chunk its Buffer
// sits in; a chunk holds nothing but Buffers, each of which keeps the
// foreign array's holder alive as its owner, so no reference cycle can form.
// A chunk lives as long as any of its Buffers is referenced: a few dozen
// bytes per slot, while any one Buffer keeps the whole foreign array anyway.
class BufferArena {
 public:
  BufferArena(const std::shared_ptr<const void>& owner, size_t expected_buffers)
      : owner_(owner), next_capacity_(std::clamp<size_t>(expected_buffers, 4, kMaxChunk)) {}

  BufferPtr Make(const uint8_t* data, int64_t size) {
    if (used_ == capacity_) {
      capacity_ = next_capacity_;
      next_capacity_ = std::min(capacity_ * 2, kMaxChunk);
      chunk_ = std::make_shared<Slot[]>(capacity_);
      used_ = 0;
    }
    Slot& slot = chunk_[used_++];
    slot.emplace(data, size, owner_);
    return BufferPtr(chunk_, &*slot);
  }

 private:
  using Slot = std::optional<Buffer>;
  // 1024 slots of 40 bytes: well below the size at which malloc maps pages.
  static constexpr size_t kMaxChunk = 1024;

  const std::shared_ptr<const void>& owner_;
  std::shared_ptr<Slot[]> chunk_;
  size_t used_ = 0;
  size_t capacity_ = 0;
  size_t next_capacity_;
};

// What one walk over a foreign array shares across its nodes.
struct ArrayImport {
  // Makes the Buffers, each owned by the holder of the whole foreign tree.
  BufferArena* buffers;
  ValueSource* source;
  // Host memory under a type that passed ValidateRootType: each node, once
  // built, is held to ValidateStructural's rules for that node, so the
  // finished tree needs no second walk.
  bool check_structure;
};

// Builds ArrayData for one node of a foreign array (and, recursively, its
// children and dictionary). Every Buffer is owned by the holder of the whole
// foreign tree. The header fields are checked before any buffer is read.
//
// While the source records, nothing is built: the walk only checks headers
// and collects the reads, and the result is null.
Result<std::shared_ptr<ArrayData>> ImportArrayNode(const ArrowArray* array, const TypePtr& type,
                                                   const ColumnPath& path, int depth,
                                                   ArrayImport* import) {
  if (type == nullptr) return ImportError(path, "no type to import it as");
  if (array == nullptr) return ImportError(path, "ArrowArray pointer is NULL");
  if (array->release == nullptr) {
    return ImportError(path, "ArrowArray is already released (release is NULL)");
  }
  if (depth > kMaxNestingDepth) {
    return ImportError(path, "nesting deeper than " + std::to_string(kMaxNestingDepth));
  }
  if (array->length < 0) {
    return ImportError(path, "length is negative (" + std::to_string(array->length) + ")");
  }
  if (array->offset < 0) {
    return ImportError(path, "offset is negative (" + std::to_string(array->offset) + ")");
  }
  if (array->null_count < -1) {
    return ImportError(path, "null_count is negative (" + std::to_string(array->null_count) + ")");
  }
  if (array->null_count > array->length) {
    return ImportError(path, "null_count " + std::to_string(array->null_count) +
                                 " exceeds length " + std::to_string(array->length));
  }
  int64_t end;
  if (__builtin_add_overflow(array->offset, array->length, &end)) {
    return ImportError(path, "offset + length overflows int64");
  }

  const DataType& storage = StorageType(*type);
  const int64_t fixed_buffers = FixedBufferCount(*type);
  const bool is_view = IsViewType(storage.id);
  // Views carry, after validity and views, any number of data buffers and
  // then one int64 buffer with their sizes.
  if (is_view ? array->n_buffers < fixed_buffers + 1 : array->n_buffers != fixed_buffers) {
    return ImportError(path, "n_buffers is " + std::to_string(array->n_buffers) + " but type " +
                                 type->ToString() + " needs " +
                                 std::to_string(fixed_buffers + (is_view ? 1 : 0)) +
                                 (is_view ? " or more" : ""));
  }
  if (array->n_children != ExpectedChildCount(*type)) {
    return ImportError(path, "n_children is " + std::to_string(array->n_children) + " but type " +
                                 type->ToString() + " needs " +
                                 std::to_string(ExpectedChildCount(*type)));
  }
  if (array->n_buffers > 0 && array->buffers == nullptr) {
    return ImportError(path,
                       "buffers is NULL but n_buffers is " + std::to_string(array->n_buffers));
  }
  if (array->n_children > 0 && array->children == nullptr) {
    return ImportError(path,
                       "children is NULL but n_children is " + std::to_string(array->n_children));
  }
  if (type->id == TypeId::kDictionary && array->dictionary == nullptr) {
    return ImportError(path, "missing dictionary for dictionary type " + type->ToString());
  }
  if (type->id != TypeId::kDictionary && array->dictionary != nullptr) {
    return ImportError(path, "dictionary given for non-dictionary type " + type->ToString());
  }
  if (HasValidityBitmap(storage.id) && array->null_count > 0 && array->buffers[0] == nullptr) {
    return ImportError(path, "null_count is " + std::to_string(array->null_count) +
                                 " but the validity buffer is NULL");
  }

  ValueSource* source = import->source;
  BufferSizes sizes;
  int64_t list_last_offset = 0;
  FERRY_RETURN_NOT_OK(
      ComputeBufferSizes(*array, storage, end, path, source, &sizes, &list_last_offset));

  if (source->recording()) {
    for (int64_t i = 0; i < array->n_children; ++i) {
      const Field& child_field = type->children[static_cast<size_t>(i)];
      const ColumnPath child_path = path.Child(type->id, i, child_field.name);
      FERRY_RETURN_NOT_OK(
          ImportArrayNode(array->children[i], child_field.type, child_path, depth + 1, import)
              .status());
    }
    if (type->id == TypeId::kDictionary) {
      const ColumnPath dictionary_path = path.Dictionary();
      FERRY_RETURN_NOT_OK(
          ImportArrayNode(array->dictionary, type->value_type, dictionary_path, depth + 1, import)
              .status());
    }
    return std::shared_ptr<ArrayData>();
  }

  auto data = std::make_shared<ArrayData>();
  data->type = type;
  data->length = array->length;
  data->offset = array->offset;
  if (storage.id == TypeId::kNull) {
    data->null_count = array->length;
  } else {
    data->null_count = array->null_count < 0 ? kUnknownNullCount : array->null_count;
  }
  data->buffers.resize(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto* pointer = static_cast<const uint8_t*>(array->buffers[i]);
    if (pointer != nullptr) {
      data->buffers[i] = import->buffers->Make(pointer, sizes[i]);
    }
  }

  if (array->n_children > 0) {
    data->children.reserve(static_cast<size_t>(array->n_children));
    for (int64_t i = 0; i < array->n_children; ++i) {
      const Field& child_field = type->children[static_cast<size_t>(i)];
      const ColumnPath child_path = path.Child(type->id, i, child_field.name);
      FERRY_ASSIGN_OR_RAISE(
          std::shared_ptr<ArrayData> child,
          ImportArrayNode(array->children[i], child_field.type, child_path, depth + 1, import));
      data->children.push_back(std::move(child));
    }
  }
  if (type->id == TypeId::kDictionary) {
    const ColumnPath dictionary_path = path.Dictionary();
    FERRY_ASSIGN_OR_RAISE(data->dictionary, ImportArrayNode(array->dictionary, type->value_type,
                                                            dictionary_path, depth + 1, import));
  }
  if (!source->in_place()) {
    FERRY_RETURN_NOT_OK(CheckDeviceNode(*data, storage, end, list_last_offset, path));
  } else if (import->check_structure) {
    FERRY_RETURN_NOT_OK(internal::ValidateNodeStructure(*data, path));
  }
  return data;
}

// Releases a foreign array that import owns but will not use.
void DiscardForeignArray(ArrowArray* array) {
  if (array != nullptr && array->release != nullptr) ImportedArrayHolder discarded(array);
}

// Import has taken ownership of `array` and rejects it for `status`.
Status RejectForeignArray(ArrowArray* array, const Status& status) {
  DiscardForeignArray(array);
  telemetry::Add(Counter::kValidationErrors);
  return status;
}

// What import may assume of the type it is given.
struct TypeTrust {
  // The type came from this import's own schema import, which passed every
  // node through ValidateType and counted `nesting` levels.
  bool validated = false;
  int nesting = 0;
};

// A first guess at the number of buffers of a foreign tree, from its root
// alone (its children are not trusted yet): a record batch of N columns has
// about two per column.
size_t ExpectedBufferCount(const ArrowArray& root) {
  if (root.n_children < 0 || root.n_buffers < 0) return 0;
  const int64_t guess = root.n_buffers + 2 * std::min<int64_t>(root.n_children, int64_t{1} << 20);
  return static_cast<size_t>(guess);
}

// ImportHeldArray (bridge_internal.h) with what is known of the type.
Result<std::shared_ptr<ArrayData>> ImportHeld(const std::shared_ptr<ImportedArrayHolder>& holder,
                                              const TypePtr& type, const ValueReader* reader,
                                              const TypeTrust& trust) {
  const std::shared_ptr<const void> owner = holder;
  const ColumnPath root = ColumnPath::Root("array");
  if (reader == nullptr) {
    // ValidateStructural's rules, checked node by node during the walk. Its
    // root checks come first; a type that fails them is reported after the
    // walk, whose own errors come first, as they did when the rules ran on
    // the finished tree.
    Status type_status;
    if (type != nullptr) {
      type_status = trust.validated ? internal::CheckTypeNesting(trust.nesting, root)
                                    : internal::ValidateRootType(*type, root);
    }
    ValueSource in_place;
    BufferArena buffers(owner, ExpectedBufferCount(holder->array()));
    ArrayImport import{&buffers, &in_place, /*check_structure=*/type_status.ok()};
    Result<std::shared_ptr<ArrayData>> imported =
        ImportArrayNode(&holder->array(), type, root, 0, &import);
    if (!imported.ok()) {
      telemetry::Add(Counter::kValidationErrors);
      return imported.status();
    }
    if (!type_status.ok()) {
      telemetry::Add(Counter::kValidationErrors);
      return type_status;
    }
    telemetry::Add(Counter::kZeroCopyImports);
    return imported;
  }

  std::vector<ValueRead> reads;
  ValueSource recording = ValueSource::Recording(&reads);
  BufferArena buffers(owner, ExpectedBufferCount(holder->array()));
  ArrayImport planning{&buffers, &recording, /*check_structure=*/false};
  Status planned = ImportArrayNode(&holder->array(), type, root, 0, &planning).status();
  if (!planned.ok()) {
    telemetry::Add(Counter::kValidationErrors);
    return planned;
  }
  std::vector<int64_t> values;
  if (!reads.empty()) {
    FERRY_RETURN_NOT_OK((*reader)(reads, &values));
    if (values.size() != reads.size()) {
      return Status::UnknownError("the value reader returned " + std::to_string(values.size()) +
                                  " values for " + std::to_string(reads.size()) + " reads");
    }
  }
  ValueSource replaying = ValueSource::Replaying(&reads, &values);
  ArrayImport building{&buffers, &replaying, /*check_structure=*/false};
  Result<std::shared_ptr<ArrayData>> imported =
      ImportArrayNode(&holder->array(), type, root, 0, &building);
  if (!imported.ok()) {
    telemetry::Add(Counter::kValidationErrors);
    return imported.status();
  }
  telemetry::Add(Counter::kZeroCopyImports);
  return imported;
}

// ImportArray with what is known of the type.
Result<std::shared_ptr<ArrayData>> ImportTrusted(ArrowArray* array, const TypePtr& type,
                                                 const TypeTrust& trust) {
  if (array == nullptr) return Status::Invalid("ImportArray: ArrowArray pointer is NULL");
  if (array->release == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return Status::Invalid("ImportArray: ArrowArray is already released (release is NULL)");
  }
  if (type == nullptr) {
    return RejectForeignArray(array, Status::Invalid("ImportArray: type is null"));
  }
  // From here on the foreign array is the holder's: whatever happens below,
  // its release runs once nothing points into it any more.
  return ImportHeld(std::make_shared<ImportedArrayHolder>(array), type, /*reader=*/nullptr, trust);
}

// A record batch from a foreign struct array of type `root_type`, whose
// fields are `schema`'s.
Result<RecordBatchPtr> ImportBatch(ArrowArray* array, SchemaPtr schema, const TypePtr& root_type,
                                   const TypeTrust& trust) {
  FERRY_ASSIGN_OR_RAISE(std::shared_ptr<ArrayData> data, ImportTrusted(array, root_type, trust));
  const int64_t null_count = data->GetNullCount();
  if (null_count != 0) {
    telemetry::Add(Counter::kValidationErrors);
    return Status::Invalid("ImportRecordBatch: the top-level struct array has " +
                           std::to_string(null_count) + " nulls; a record batch has none");
  }
  // The import checked what RecordBatch::Make would: one child per field,
  // each of the field's type and covering offset + length.
  std::vector<ArrayDataPtr> columns;
  columns.reserve(data->children.size());
  for (ArrayDataPtr& child : data->children) {
    // A struct's offset applies to its children; a batch's columns start at 0.
    const bool aligned = data->offset == 0 && child->length == data->length;
    columns.push_back(aligned ? std::move(child) : Slice(child, data->offset, data->length));
  }
  return internal::RecordBatchAccess::MakeTrusted(std::move(schema), data->length,
                                                  std::move(columns));
}

}  // namespace

// ============================================================================
// Internal API (bridge_internal.h)
// ============================================================================

namespace internal {

ImportedArrayHolder::ImportedArrayHolder(ArrowArray* source) { MoveArray(source, &array_); }

ImportedArrayHolder::~ImportedArrayHolder() {
  if (array_.release != nullptr) {
    array_.release(&array_);
    telemetry::Add(Counter::kForeignReleases);
  }
}

Result<ArrayDataPtr> ImportHeldArray(const std::shared_ptr<ImportedArrayHolder>& holder,
                                     const TypePtr& type, const ValueReader* reader) {
  FERRY_ASSIGN_OR_RAISE(std::shared_ptr<ArrayData> data,
                        ImportHeld(holder, type, reader, TypeTrust{}));
  return ArrayDataPtr(std::move(data));
}

Status ExportArrayWith(const ArrayDataPtr& data, ArrowArray* out,
                       const ArrayExportOptions& options) {
  if (out == nullptr) return Status::Invalid("output ArrowArray is NULL");
  const ColumnPath root = ColumnPath::Root("array");
  return ExportArrayNode(data, root, options, out);
}

}  // namespace internal

// ============================================================================
// Public API
// ============================================================================

void MoveSchema(ArrowSchema* src, ArrowSchema* dst) {
  *dst = *src;
  src->release = nullptr;
}

void MoveArray(ArrowArray* src, ArrowArray* dst) {
  *dst = *src;
  src->release = nullptr;
}

void MoveArrayStream(ArrowArrayStream* src, ArrowArrayStream* dst) {
  *dst = *src;
  src->release = nullptr;
}

Status ExportType(const DataType& type, ArrowSchema* out) {
  if (out == nullptr) return Status::Invalid("ExportType: output ArrowSchema is NULL");
  FERRY_RETURN_NOT_OK(ExportTypeTree(type, "", Metadata{}, /*nullable=*/true, out));
  telemetry::Add(Counter::kSchemaExports);
  return Status::OK();
}

Status ExportField(const Field& field, ArrowSchema* out) {
  if (out == nullptr) return Status::Invalid("ExportField: output ArrowSchema is NULL");
  if (field.type == nullptr) {
    return Status::Invalid("ExportField: field " + QuoteName(field.name) + " has no type");
  }
  FERRY_RETURN_NOT_OK(ExportTypeTree(*field.type, field.name, field.metadata, field.nullable, out));
  telemetry::Add(Counter::kSchemaExports);
  return Status::OK();
}

Status ExportSchema(const Schema& schema, ArrowSchema* out) {
  if (out == nullptr) return Status::Invalid("ExportSchema: output ArrowSchema is NULL");
  // The root is a non-nullable struct of the fields, written straight from
  // them rather than through a struct type built for the purpose.
  SchemaExport context;
  const size_t string_bytes = SchemaStringBytes("+s", "", schema.metadata);
  FERRY_RETURN_NOT_OK(ExportSchemaRoot(string_bytes, [&](SchemaRecord* record, char** strings) {
    return ExportSchemaMember("+s", "", schema.metadata, /*flags=*/0, schema.fields,
                              /*dictionary_values=*/nullptr, &context, record, strings, out);
  }));
  telemetry::Add(Counter::kSchemaExports);
  return Status::OK();
}

Status ExportArray(const ArrayDataPtr& data, ArrowArray* out) {
  if (out == nullptr) return Status::Invalid("ExportArray: output ArrowArray is NULL");
  static const ArrayExportOptions kHostMemory;
  const ColumnPath root = ColumnPath::Root("array");
  Status exported = ExportArrayNode(data, root, kHostMemory, out);
  if (!exported.ok()) return exported.WithPrefix("ExportArray: ");
  telemetry::Add(Counter::kZeroCopyExports);
  return Status::OK();
}

Status ExportArray(const ArrayDataPtr& data, ArrowArray* out, ArrowSchema* out_schema) {
  if (data == nullptr || data->type == nullptr) {
    return Status::Invalid("ExportArray: ArrayData or its type is null");
  }
  if (out_schema == nullptr) return Status::Invalid("ExportArray: output ArrowSchema is NULL");
  FERRY_RETURN_NOT_OK(ExportType(*data->type, out_schema));
  Status exported = ExportArray(data, out);
  if (!exported.ok()) out_schema->release(out_schema);
  return exported;
}

Status ExportRecordBatch(const RecordBatch& batch, ArrowArray* out, ArrowSchema* out_schema) {
  if (out == nullptr) return Status::Invalid("ExportArray: output ArrowArray is NULL");
  if (out_schema != nullptr) FERRY_RETURN_NOT_OK(ExportSchema(*batch.schema(), out_schema));
  Status exported = ExportBatchArray(batch, out);
  if (!exported.ok()) {
    if (out_schema != nullptr) out_schema->release(out_schema);
    return exported.WithPrefix("ExportArray: ");
  }
  telemetry::Add(Counter::kZeroCopyExports);
  return Status::OK();
}

Result<Field> ImportField(const ArrowSchema* schema) {
  const bool named = schema != nullptr && schema->name != nullptr && schema->name[0] != '\0';
  const ColumnPath root =
      named ? ColumnPath::QuotedRoot("field", schema->name) : ColumnPath::Root("field");
  FERRY_ASSIGN_OR_RAISE(ImportedField imported,
                        ImportFieldTree(schema, root, /*top_level_columns=*/false));
  telemetry::Add(Counter::kSchemaImports);
  return std::move(imported.field);
}

Result<TypePtr> ImportType(const ArrowSchema* schema) {
  FERRY_ASSIGN_OR_RAISE(Field field, ImportField(schema));
  return field.type;
}

namespace {

// ImportSchema, keeping the struct type the fields came from and what is
// known of it.
struct ImportedSchema {
  SchemaPtr schema;
  TypePtr root_type;
  int type_nesting = 0;
};

Result<ImportedSchema> ImportSchemaTree(const ArrowSchema* schema) {
  const ColumnPath root = ColumnPath::Root("schema");
  FERRY_ASSIGN_OR_RAISE(ImportedField imported,
                        ImportFieldTree(schema, root, /*top_level_columns=*/true));
  if (imported.field.type->id != TypeId::kStruct) {
    return Status::Invalid(std::string("schema: a schema must be a struct ('+s'), got '") +
                           schema->format + "'");
  }
  auto fields = std::make_shared<Schema>();
  fields->fields = imported.field.type->children;
  fields->metadata = std::move(imported.field.metadata);
  telemetry::Add(Counter::kSchemaImports);
  return ImportedSchema{std::move(fields), std::move(imported.field.type), imported.type_nesting};
}

}  // namespace

Result<SchemaPtr> ImportSchema(const ArrowSchema* schema) {
  FERRY_ASSIGN_OR_RAISE(ImportedSchema imported, ImportSchemaTree(schema));
  return std::move(imported.schema);
}

Result<ArrayDataPtr> ImportArray(ArrowArray* array, const TypePtr& type) {
  FERRY_ASSIGN_OR_RAISE(std::shared_ptr<ArrayData> data, ImportTrusted(array, type, TypeTrust{}));
  return ArrayDataPtr(std::move(data));
}

Result<ArrayDataPtr> ImportArray(ArrowArray* array, const ArrowSchema* schema) {
  const bool named = schema != nullptr && schema->name != nullptr && schema->name[0] != '\0';
  const ColumnPath root =
      named ? ColumnPath::QuotedRoot("field", schema->name) : ColumnPath::Root("field");
  Result<ImportedField> imported = ImportFieldTree(schema, root, /*top_level_columns=*/false);
  if (!imported.ok()) {
    return RejectForeignArray(array, imported.status().WithPrefix("ImportArray: "));
  }
  telemetry::Add(Counter::kSchemaImports);
  FERRY_ASSIGN_OR_RAISE(std::shared_ptr<ArrayData> data,
                        ImportTrusted(array, imported->field.type,
                                      TypeTrust{/*validated=*/true, imported->type_nesting}));
  return ArrayDataPtr(std::move(data));
}

Result<RecordBatchPtr> ImportRecordBatch(ArrowArray* array, const SchemaPtr& schema) {
  if (schema == nullptr) {
    return RejectForeignArray(array, Status::Invalid("ImportRecordBatch: schema is null"));
  }
  // A schema from the caller: its types are validated with the array.
  return ImportBatch(array, schema, struct_(schema->fields), TypeTrust{});
}

Result<RecordBatchPtr> ImportRecordBatch(ArrowArray* array, const ArrowSchema* schema) {
  Result<ImportedSchema> imported = ImportSchemaTree(schema);
  if (!imported.ok()) {
    return RejectForeignArray(array, imported.status().WithPrefix("ImportRecordBatch: "));
  }
  return ImportBatch(array, std::move(imported->schema), imported->root_type,
                     TypeTrust{/*validated=*/true, imported->type_nesting});
}

}  // namespace ferry
