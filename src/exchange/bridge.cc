#include "ferry/exchange/bridge.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "exchange/bridge_internal.h"
#include "ferry/exchange/validate.h"
#include "ferry/telemetry/telemetry.h"

namespace ferry {
namespace internal {

std::string Quoted(std::string_view name) {
  std::string quoted = "'";
  for (char c : name) {
    if (c == '\'' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "'";
}

// Paths follow the convention of validate.h, e.g. "col 'points'.item.'x'":
// list-likes step into ".item", maps into ".entries", run-end encoded arrays
// into ".run_ends"/".values", structs and unions into ".'<name>'".
std::string ChildPath(const std::string& parent, const DataType& parent_type, int64_t index,
                      std::string_view child_name) {
  switch (parent_type.id) {
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kListView:
    case TypeId::kLargeListView:
    case TypeId::kFixedSizeList:
      return parent + ".item";
    case TypeId::kMap:
      return parent + ".entries";
    case TypeId::kRunEndEncoded:
      return parent + (index == 0 ? ".run_ends" : ".values");
    default:
      return parent + "." + Quoted(child_name);
  }
}

}  // namespace internal

namespace {

using internal::ArrayExportOptions;
using internal::ChildPath;
using internal::ImportedArrayHolder;
using internal::Quoted;
using internal::ValueRead;
using internal::ValueReader;
using telemetry::Counter;

// Deeper trees than this are rejected on import: a malicious or cyclic
// structure must give an error, not a stack overflow.
constexpr int kMaxNestingDepth = 200;

bool IsViewType(TypeId id) { return id == TypeId::kBinaryView || id == TypeId::kUtf8View; }

bool IsIntegerType(TypeId id) {
  switch (id) {
    case TypeId::kInt8:
    case TypeId::kUInt8:
    case TypeId::kInt16:
    case TypeId::kUInt16:
    case TypeId::kInt32:
    case TypeId::kUInt32:
    case TypeId::kInt64:
    case TypeId::kUInt64:
      return true;
    default:
      return false;
  }
}

// Null, union and run-end encoded arrays have no validity bitmap: buffer 0 is
// something else (or there is no buffer at all).
bool HasValidityBitmap(TypeId id) {
  return id != TypeId::kNull && id != TypeId::kSparseUnion && id != TypeId::kDenseUnion &&
         id != TypeId::kRunEndEncoded;
}

// The buffers of a dictionary-encoded array are those of its indices.
const DataType& StorageType(const DataType& type) {
  return type.id == TypeId::kDictionary && type.index_type ? *type.index_type : type;
}

// Buffers in the C layout, not counting the variadic data buffers and the
// trailing sizes buffer of view types.
int64_t FixedBufferCount(const DataType& type) { return StorageType(type).num_buffers(); }

int64_t ExpectedChildCount(const DataType& type) {
  return type.id == TypeId::kDictionary ? 0 : static_cast<int64_t>(type.children.size());
}

// Offsets of binary, utf8, list and map arrays: 4 or 8 bytes, or 0 if the
// type has no "length + 1" offsets buffer at index 1.
int OffsetWidthOfVariableLength(TypeId id) {
  switch (id) {
    case TypeId::kBinary:
    case TypeId::kUtf8:
    case TypeId::kList:
    case TypeId::kMap:
      return 4;
    case TypeId::kLargeBinary:
    case TypeId::kLargeUtf8:
    case TypeId::kLargeList:
      return 8;
    default:
      return 0;
  }
}

std::string DictionaryPath(const std::string& parent) { return parent + ".dictionary"; }

// ============================================================================
// Schema export
// ============================================================================

// Everything an exported ArrowSchema points at. Children and dictionary are
// owned here so that releasing the parent releases whatever the consumer did
// not move out.
struct ExportedSchema {
  std::string format;
  std::string name;
  std::string metadata;
  std::vector<ArrowSchema> children;
  std::vector<ArrowSchema*> child_pointers;
  ArrowSchema dictionary{};

  ~ExportedSchema() {
    for (ArrowSchema& child : children) {
      if (child.release != nullptr) child.release(&child);
    }
    if (dictionary.release != nullptr) dictionary.release(&dictionary);
  }
};

// A second call through a saved function pointer finds `release` already
// NULL: that is counted and nothing else is touched, since private_data may
// already be gone.
void ReleaseExportedSchema(ArrowSchema* schema) {
  if (schema == nullptr || schema->release == nullptr || schema->private_data == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return;
  }
  delete static_cast<ExportedSchema*>(schema->private_data);
  schema->private_data = nullptr;
  schema->release = nullptr;
  telemetry::Add(Counter::kReleases);
}

Status ExportSchemaNode(const DataType& type, std::string name, const Metadata& metadata,
                        bool nullable, ArrowSchema* out);

Status ExportChildren(const std::vector<Field>& fields, ExportedSchema* exported) {
  exported->children.assign(fields.size(), ArrowSchema{});
  exported->child_pointers.resize(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& field = fields[i];
    if (field.type == nullptr)
      return Status::Invalid("field " + Quoted(field.name) + " has no type");
    FERRY_RETURN_NOT_OK(ExportSchemaNode(*field.type, field.name, field.metadata, field.nullable,
                                         &exported->children[i]));
    exported->child_pointers[i] = &exported->children[i];
  }
  return Status::OK();
}

Status ExportSchemaNode(const DataType& type, std::string name, const Metadata& metadata,
                        bool nullable, ArrowSchema* out) {
  auto exported = std::make_unique<ExportedSchema>();
  // FormatString gives the index format for a dictionary type: the values
  // travel in `dictionary`.
  exported->format = FormatString(type);
  exported->name = std::move(name);
  exported->metadata = EncodeMetadata(metadata);

  int64_t flags = nullable ? ARROW_FLAG_NULLABLE : 0;
  if (type.id == TypeId::kDictionary) {
    if (type.index_type == nullptr || type.value_type == nullptr) {
      return Status::Invalid("dictionary type without index or value type");
    }
    if (type.ordered) flags |= ARROW_FLAG_DICTIONARY_ORDERED;
    FERRY_RETURN_NOT_OK(ExportSchemaNode(*type.value_type, "", Metadata{}, /*nullable=*/true,
                                         &exported->dictionary));
  } else {
    if (type.id == TypeId::kMap && type.keys_sorted) flags |= ARROW_FLAG_MAP_KEYS_SORTED;
    FERRY_RETURN_NOT_OK(ExportChildren(type.children, exported.get()));
  }

  out->format = exported->format.c_str();
  out->name = exported->name.c_str();
  out->metadata = exported->metadata.empty() ? nullptr : exported->metadata.data();
  out->flags = flags;
  out->n_children = static_cast<int64_t>(exported->children.size());
  out->children = exported->child_pointers.empty() ? nullptr : exported->child_pointers.data();
  out->dictionary = exported->dictionary.release != nullptr ? &exported->dictionary : nullptr;
  out->release = &ReleaseExportedSchema;
  out->private_data = exported.release();
  return Status::OK();
}

// ============================================================================
// Array export
// ============================================================================

struct ExportedArray {
  // Keeps every buffer of this node alive until the consumer releases it.
  ArrayDataPtr data;
  std::vector<const void*> buffer_pointers;
  // View types: the sizes of the variadic data buffers, exported as the
  // final buffer.
  std::vector<int64_t> variadic_sizes;
  // Device exports: where place_variadic_sizes put those sizes.
  BufferPtr placed_variadic_sizes;
  std::vector<ArrowArray> children;
  std::vector<ArrowArray*> child_pointers;
  ArrowArray dictionary{};

  ~ExportedArray() {
    for (ArrowArray& child : children) {
      if (child.release != nullptr) child.release(&child);
    }
    if (dictionary.release != nullptr) dictionary.release(&dictionary);
  }
};

void ReleaseExportedArray(ArrowArray* array) {
  if (array == nullptr || array->release == nullptr || array->private_data == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return;
  }
  delete static_cast<ExportedArray*>(array->private_data);
  array->private_data = nullptr;
  array->release = nullptr;
  telemetry::Add(Counter::kReleases);
}

// Some consumers insist on an offsets buffer even for an empty array; a
// static zero serves every zero-length, zero-offset binary or list array.
const int64_t kZeroOffsets[1] = {0};

Status ExportArrayNode(const ArrayDataPtr& data, const std::string& path,
                       const ArrayExportOptions& options, ArrowArray* out) {
  const std::string& where = path;
  if (data == nullptr) return Status::Invalid(where + ": ArrayData is null");
  if (data->type == nullptr) return Status::Invalid(where + ": ArrayData has no type");
  const DataType& type = *data->type;

  const int64_t fixed_buffers = FixedBufferCount(type);
  const int64_t buffer_count = static_cast<int64_t>(data->buffers.size());
  if (IsViewType(type.id) ? buffer_count < fixed_buffers : buffer_count != fixed_buffers) {
    return Status::Invalid(where + ": " + std::to_string(buffer_count) + " buffers, but type " +
                           type.ToString() + " needs " + std::to_string(fixed_buffers) +
                           (IsViewType(type.id) ? " or more" : ""));
  }
  if (static_cast<int64_t>(data->children.size()) != ExpectedChildCount(type)) {
    return Status::Invalid(where + ": " + std::to_string(data->children.size()) +
                           " children, but type " + type.ToString() + " needs " +
                           std::to_string(ExpectedChildCount(type)));
  }
  if ((type.id == TypeId::kDictionary) != (data->dictionary != nullptr)) {
    return Status::Invalid(where + (data->dictionary ? ": dictionary on a non-dictionary type"
                                                     : ": dictionary type without a dictionary"));
  }

  auto exported = std::make_unique<ExportedArray>();
  exported->data = data;
  exported->buffer_pointers.reserve(data->buffers.size() + 1);
  for (const BufferPtr& buffer : data->buffers) {
    exported->buffer_pointers.push_back(buffer ? buffer->data() : nullptr);
  }
  const DataType& storage = StorageType(type);
  if (options.host_readable && OffsetWidthOfVariableLength(storage.id) != 0 &&
      exported->buffer_pointers[1] == nullptr && data->length == 0 && data->offset == 0) {
    exported->buffer_pointers[1] = kZeroOffsets;
  }
  if (IsViewType(type.id)) {
    // At least one element so that the sizes buffer is never a NULL pointer.
    exported->variadic_sizes.reserve(std::max<size_t>(1, data->buffers.size() - 2));
    for (size_t i = 2; i < data->buffers.size(); ++i) {
      exported->variadic_sizes.push_back(data->buffers[i] ? data->buffers[i]->size() : 0);
    }
    const void* sizes_pointer = exported->variadic_sizes.data();
    if (!options.host_readable && options.place_variadic_sizes) {
      const auto count = static_cast<int64_t>(exported->variadic_sizes.size());
      sizes_pointer = nullptr;
      if (count > 0) {
        Result<BufferPtr> placed =
            options.place_variadic_sizes(exported->variadic_sizes.data(), count);
        if (!placed.ok()) return placed.status().WithPrefix(where + ": variadic buffer sizes: ");
        exported->placed_variadic_sizes = placed.MoveValueUnsafe();
        sizes_pointer = exported->placed_variadic_sizes->data();
      }
    }
    exported->buffer_pointers.push_back(sizes_pointer);
  }

  exported->children.assign(data->children.size(), ArrowArray{});
  exported->child_pointers.resize(data->children.size());
  for (size_t i = 0; i < data->children.size(); ++i) {
    const std::string child_name = i < type.children.size() ? type.children[i].name : "";
    FERRY_RETURN_NOT_OK(ExportArrayNode(data->children[i],
                                        ChildPath(path, type, static_cast<int64_t>(i), child_name),
                                        options, &exported->children[i]));
    exported->child_pointers[i] = &exported->children[i];
  }
  if (data->dictionary != nullptr) {
    FERRY_RETURN_NOT_OK(
        ExportArrayNode(data->dictionary, DictionaryPath(path), options, &exported->dictionary));
  }

  out->length = data->length;
  // Counting nulls reads the bitmap, which device memory does not allow.
  out->null_count = options.host_readable ? data->GetNullCount() : data->null_count;
  out->offset = data->offset;
  out->n_buffers = static_cast<int64_t>(exported->buffer_pointers.size());
  out->n_children = static_cast<int64_t>(exported->children.size());
  out->buffers = exported->buffer_pointers.empty() ? nullptr : exported->buffer_pointers.data();
  out->children = exported->child_pointers.empty() ? nullptr : exported->child_pointers.data();
  out->dictionary = exported->dictionary.release != nullptr ? &exported->dictionary : nullptr;
  out->release = &ReleaseExportedArray;
  out->private_data = exported.release();
  return Status::OK();
}

// ============================================================================
// Schema import
// ============================================================================

// Children a format string's type must have; -1 for "any number" (struct).
int64_t RequiredSchemaChildren(const DataType& type) {
  switch (type.id) {
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kListView:
    case TypeId::kLargeListView:
    case TypeId::kFixedSizeList:
    case TypeId::kMap:
      return 1;
    case TypeId::kRunEndEncoded:
      return 2;
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion:
      return static_cast<int64_t>(type.type_codes.size());
    case TypeId::kStruct:
      return -1;
    default:
      return 0;
  }
}

// Each node of a schema tree has exactly one parent (its parent's release
// releases it). A node reached twice is a cycle or a DAG, which could also
// describe exponentially many fields in little memory: it is rejected.
struct SchemaImport {
  std::unordered_set<const ArrowSchema*> visited;
};

// `top_level_columns`: the root is a schema, whose children are named as
// columns ("col 'x'").
Result<Field> ImportFieldNode(const ArrowSchema* schema, const std::string& path, int depth,
                              bool top_level_columns, SchemaImport* import) {
  const std::string& where = path;
  if (schema == nullptr) return Status::Invalid(where + ": ArrowSchema pointer is NULL");
  if (schema->release == nullptr) {
    return Status::Invalid(where + ": ArrowSchema is already released (release is NULL)");
  }
  if (depth > kMaxNestingDepth) {
    return Status::Invalid(where + ": nesting deeper than " + std::to_string(kMaxNestingDepth));
  }
  if (!import->visited.insert(schema).second) {
    return Status::Invalid(where +
                           ": ArrowSchema node appears twice in the tree (a cycle or a "
                           "shared child)");
  }
  if (schema->format == nullptr) return Status::Invalid(where + ": format is NULL");
  if (schema->n_children < 0) {
    return Status::Invalid(where + ": n_children is negative (" +
                           std::to_string(schema->n_children) + ")");
  }
  if (schema->n_children > 0 && schema->children == nullptr) {
    return Status::Invalid(where + ": children is NULL but n_children is " +
                           std::to_string(schema->n_children));
  }

  Result<DataType> parsed = ParseFormat(schema->format);
  if (!parsed.ok()) return parsed.status().WithPrefix(where + ": ");
  DataType node = parsed.MoveValueUnsafe();

  const int64_t required_children = RequiredSchemaChildren(node);
  if (required_children >= 0 && schema->n_children != required_children) {
    return Status::Invalid(where + ": format '" + schema->format + "' needs " +
                           std::to_string(required_children) + " children, got " +
                           std::to_string(schema->n_children));
  }

  Field field;
  field.name = schema->name != nullptr ? schema->name : "";
  field.nullable = (schema->flags & ARROW_FLAG_NULLABLE) != 0;
  Result<Metadata> metadata = DecodeMetadata(schema->metadata);
  if (!metadata.ok()) return metadata.status().WithPrefix(where + ": metadata: ");
  field.metadata = metadata.MoveValueUnsafe();

  node.children.reserve(static_cast<size_t>(schema->n_children));
  for (int64_t i = 0; i < schema->n_children; ++i) {
    const ArrowSchema* child = schema->children[i];
    const std::string child_path =
        depth == 0 && node.id == TypeId::kStruct && top_level_columns
            ? "col " + Quoted(child != nullptr && child->name != nullptr ? child->name : "")
            : ChildPath(path, node, i,
                        child != nullptr && child->name != nullptr ? child->name : "");
    FERRY_ASSIGN_OR_RAISE(Field child_field, ImportFieldNode(child, child_path, depth + 1,
                                                             /*top_level_columns=*/false, import));
    node.children.push_back(std::move(child_field));
  }
  if (node.id == TypeId::kMap) node.keys_sorted = (schema->flags & ARROW_FLAG_MAP_KEYS_SORTED) != 0;

  TypePtr type;
  if (schema->dictionary != nullptr) {
    if (!IsIntegerType(node.id)) {
      return Status::Invalid(where + ": dictionary on non-integer format '" + schema->format +
                             "' (indices must be an integer type)");
    }
    FERRY_ASSIGN_OR_RAISE(Field values,
                          ImportFieldNode(schema->dictionary, DictionaryPath(path), depth + 1,
                                          /*top_level_columns=*/false, import));
    type = dictionary(std::make_shared<const DataType>(std::move(node)), values.type,
                      (schema->flags & ARROW_FLAG_DICTIONARY_ORDERED) != 0);
  } else {
    type = std::make_shared<const DataType>(std::move(node));
  }
  Status valid = ValidateType(*type);
  if (!valid.ok()) return valid.WithPrefix(where + ": ");
  field.type = std::move(type);
  return field;
}

// ============================================================================
// Array import
// ============================================================================

Status ImportError(const std::string& where, const std::string& rule) {
  return Status::Invalid(where + ": " + rule);
}

Status CheckedMultiply(int64_t count, int64_t width, const std::string& where, int64_t* product) {
  if (__builtin_mul_overflow(count, width, product)) {
    return ImportError(where, "buffer size overflows int64");
  }
  return Status::OK();
}

// A buffer other than validity must be present when the array has values and
// the buffer has bytes; zero-length arrays may omit any buffer.
Status RequirePresent(const ArrowArray& array, int64_t index, int64_t size, const char* what,
                      const std::string& where) {
  if (array.length > 0 && size > 0 && array.buffers[index] == nullptr) {
    return ImportError(where, std::string(what) + " buffer (buffer " + std::to_string(index) +
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

// Sizes of the buffers that ArrayData keeps (all but the trailing sizes
// buffer of views), computed from the type and offset + length (`end`);
// variable-length data sizes come from the last offset (binary, utf8) or
// from the trailing sizes buffer (views), read through `source`. Every
// buffer is checked for presence before any byte of it is read. The caller
// has checked n_buffers. For device memory (not `in_place`) the last offset
// of a list or map with values is read too, into `list_last_offset`, since
// ValidateStructural cannot read it there.
Status ComputeBufferSizes(const ArrowArray& array, const DataType& storage, int64_t end,
                          const std::string& where, ValueSource* source,
                          std::vector<int64_t>* sizes, int64_t* list_last_offset) {
  const bool is_view = IsViewType(storage.id);
  sizes->assign(static_cast<size_t>(is_view ? array.n_buffers - 1 : array.n_buffers), 0);
  if (HasValidityBitmap(storage.id)) (*sizes)[0] = BytesForBits(end);

  switch (storage.id) {
    case TypeId::kNull:
    case TypeId::kRunEndEncoded:
    case TypeId::kStruct:
    case TypeId::kFixedSizeList:
      return Status::OK();
    case TypeId::kBool:
      (*sizes)[1] = BytesForBits(end);
      return RequirePresent(array, 1, (*sizes)[1], "values", where);
    case TypeId::kBinary:
    case TypeId::kUtf8:
    case TypeId::kLargeBinary:
    case TypeId::kLargeUtf8:
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kMap: {
      const int width = OffsetWidthOfVariableLength(storage.id);
      FERRY_RETURN_NOT_OK(CheckedMultiply(end + 1, width, where, &(*sizes)[1]));
      FERRY_RETURN_NOT_OK(RequirePresent(array, 1, (*sizes)[1], "offsets", where));
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
        return ImportError(where, "last offset is negative (" + std::to_string(last_offset) + ")");
      }
      (*sizes)[2] = last_offset;
      return RequirePresent(array, 2, last_offset, "data", where);
    }
    case TypeId::kBinaryView:
    case TypeId::kUtf8View: {
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, 16, where, &(*sizes)[1]));
      FERRY_RETURN_NOT_OK(RequirePresent(array, 1, (*sizes)[1], "views", where));
      const int64_t variadic_count = array.n_buffers - 3;
      const int64_t sizes_index = array.n_buffers - 1;
      const void* variadic_sizes = array.buffers[sizes_index];
      if (variadic_count > 0 && variadic_sizes == nullptr) {
        return ImportError(where, "variadic buffer sizes (buffer " + std::to_string(sizes_index) +
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
          return ImportError(where, "variadic data buffer " + std::to_string(i) +
                                        " has negative size " + std::to_string(size));
        }
        if (size > 0 && array.buffers[2 + i] == nullptr) {
          return ImportError(where, "variadic data buffer " + std::to_string(i) +
                                        " is NULL but its size is " + std::to_string(size));
        }
        (*sizes)[static_cast<size_t>(2 + i)] = size;
      }
      return Status::OK();
    }
    case TypeId::kListView:
    case TypeId::kLargeListView: {
      const int width = storage.id == TypeId::kListView ? 4 : 8;
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, width, where, &(*sizes)[1]));
      (*sizes)[2] = (*sizes)[1];
      FERRY_RETURN_NOT_OK(RequirePresent(array, 1, (*sizes)[1], "offsets", where));
      return RequirePresent(array, 2, (*sizes)[2], "sizes", where);
    }
    case TypeId::kSparseUnion:
      (*sizes)[0] = end;
      return RequirePresent(array, 0, end, "type ids", where);
    case TypeId::kDenseUnion:
      (*sizes)[0] = end;
      FERRY_RETURN_NOT_OK(RequirePresent(array, 0, end, "type ids", where));
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, 4, where, &(*sizes)[1]));
      return RequirePresent(array, 1, (*sizes)[1], "offsets", where);
    default: {
      const int32_t width = storage.fixed_width();
      if (width < 0 || sizes->size() != 2) {
        return ImportError(where, "cannot import type " + storage.ToString());
      }
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, width, where, &(*sizes)[1]));
      return RequirePresent(array, 1, (*sizes)[1], "values", where);
    }
  }
}

// The rules of ValidateStructural that import does not already guarantee by
// construction, limited to what needs no byte of device memory: header
// values, child lengths, and the fetched last offset of a list or map.
Status CheckDeviceNode(const ArrayData& data, const DataType& storage, int64_t end,
                       int64_t list_last_offset, const std::string& where) {
  if (!HasValidityBitmap(storage.id) && storage.id != TypeId::kNull && data.null_count > 0) {
    return ImportError(where, std::string(TypeIdName(storage.id)) +
                                  " arrays have no validity bitmap, so null_count must be 0 "
                                  "(or unknown), got " +
                                  std::to_string(data.null_count));
  }
  auto check_children_cover = [&](int64_t required, const char* reason) -> Status {
    for (size_t i = 0; i < data.children.size(); ++i) {
      if (data.children[i]->length < required) {
        return ImportError(
            where, "child " + std::to_string(i) + " (" + Quoted(storage.children[i].name) +
                       ") is too short: " + reason + " needs length " + std::to_string(required) +
                       ", child has " + std::to_string(data.children[i]->length));
      }
    }
    return Status::OK();
  };
  switch (storage.id) {
    case TypeId::kStruct:
    case TypeId::kSparseUnion:
      if (data.length == 0) return Status::OK();
      return check_children_cover(end, "offset + length");
    case TypeId::kFixedSizeList: {
      if (data.length == 0) return Status::OK();
      int64_t required = 0;
      FERRY_RETURN_NOT_OK(CheckedMultiply(end, storage.list_size, where, &required));
      return check_children_cover(required, "(offset + length) * list_size");
    }
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kMap:
      if (data.length == 0) return Status::OK();
      if (list_last_offset < 0) {
        return ImportError(where,
                           "last offset is negative (" + std::to_string(list_last_offset) + ")");
      }
      if (list_last_offset > data.children[0]->length) {
        return ImportError(where, "last offset exceeds the child length: offsets[" +
                                      std::to_string(end) +
                                      "]=" + std::to_string(list_last_offset) + " > " +
                                      std::to_string(data.children[0]->length));
      }
      return Status::OK();
    case TypeId::kRunEndEncoded:
      if (data.children[0]->length != data.children[1]->length) {
        return ImportError(where, "run_ends and values must have the same length: run_ends has " +
                                      std::to_string(data.children[0]->length) + ", values has " +
                                      std::to_string(data.children[1]->length));
      }
      return Status::OK();
    default:
      return Status::OK();
  }
}

// Builds ArrayData for one node of a foreign array (and, recursively, its
// children and dictionary). Every Buffer is owned by `owner`, the holder of
// the whole foreign tree. The header fields are checked before any buffer is
// read.
//
// While `source` records, nothing is built: the walk only checks headers and
// collects the reads, and the result is null.
Result<ArrayDataPtr> ImportArrayNode(const ArrowArray* array, const TypePtr& type,
                                     const std::shared_ptr<const void>& owner,
                                     const std::string& path, int depth, ValueSource* source) {
  const std::string& where = path;
  if (type == nullptr) return ImportError(where, "no type to import it as");
  if (array == nullptr) return ImportError(where, "ArrowArray pointer is NULL");
  if (array->release == nullptr) {
    return ImportError(where, "ArrowArray is already released (release is NULL)");
  }
  if (depth > kMaxNestingDepth) {
    return ImportError(where, "nesting deeper than " + std::to_string(kMaxNestingDepth));
  }
  if (array->length < 0) {
    return ImportError(where, "length is negative (" + std::to_string(array->length) + ")");
  }
  if (array->offset < 0) {
    return ImportError(where, "offset is negative (" + std::to_string(array->offset) + ")");
  }
  if (array->null_count < -1) {
    return ImportError(where, "null_count is negative (" + std::to_string(array->null_count) + ")");
  }
  if (array->null_count > array->length) {
    return ImportError(where, "null_count " + std::to_string(array->null_count) +
                                  " exceeds length " + std::to_string(array->length));
  }
  int64_t end;
  if (__builtin_add_overflow(array->offset, array->length, &end)) {
    return ImportError(where, "offset + length overflows int64");
  }

  const DataType& storage = StorageType(*type);
  const int64_t fixed_buffers = FixedBufferCount(*type);
  const bool is_view = IsViewType(storage.id);
  // Views carry, after validity and views, any number of data buffers and
  // then one int64 buffer with their sizes.
  if (is_view ? array->n_buffers < fixed_buffers + 1 : array->n_buffers != fixed_buffers) {
    return ImportError(where, "n_buffers is " + std::to_string(array->n_buffers) + " but type " +
                                  type->ToString() + " needs " +
                                  std::to_string(fixed_buffers + (is_view ? 1 : 0)) +
                                  (is_view ? " or more" : ""));
  }
  if (array->n_children != ExpectedChildCount(*type)) {
    return ImportError(where, "n_children is " + std::to_string(array->n_children) + " but type " +
                                  type->ToString() + " needs " +
                                  std::to_string(ExpectedChildCount(*type)));
  }
  if (array->n_buffers > 0 && array->buffers == nullptr) {
    return ImportError(where,
                       "buffers is NULL but n_buffers is " + std::to_string(array->n_buffers));
  }
  if (array->n_children > 0 && array->children == nullptr) {
    return ImportError(where,
                       "children is NULL but n_children is " + std::to_string(array->n_children));
  }
  if (type->id == TypeId::kDictionary && array->dictionary == nullptr) {
    return ImportError(where, "missing dictionary for dictionary type " + type->ToString());
  }
  if (type->id != TypeId::kDictionary && array->dictionary != nullptr) {
    return ImportError(where, "dictionary given for non-dictionary type " + type->ToString());
  }
  if (HasValidityBitmap(storage.id) && array->null_count > 0 && array->buffers[0] == nullptr) {
    return ImportError(where, "null_count is " + std::to_string(array->null_count) +
                                  " but the validity buffer is NULL");
  }

  std::vector<int64_t> sizes;
  int64_t list_last_offset = 0;
  FERRY_RETURN_NOT_OK(
      ComputeBufferSizes(*array, storage, end, where, source, &sizes, &list_last_offset));

  if (source->recording()) {
    for (int64_t i = 0; i < array->n_children; ++i) {
      const Field& child_field = type->children[static_cast<size_t>(i)];
      FERRY_RETURN_NOT_OK(ImportArrayNode(array->children[i], child_field.type, owner,
                                          ChildPath(path, *type, i, child_field.name), depth + 1,
                                          source)
                              .status());
    }
    if (type->id == TypeId::kDictionary) {
      FERRY_RETURN_NOT_OK(ImportArrayNode(array->dictionary, type->value_type, owner,
                                          DictionaryPath(path), depth + 1, source)
                              .status());
    }
    return ArrayDataPtr();
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
  data->buffers.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto* pointer = static_cast<const uint8_t*>(array->buffers[i]);
    data->buffers.push_back(
        pointer == nullptr ? nullptr : std::make_shared<Buffer>(pointer, sizes[i], owner));
  }

  data->children.reserve(static_cast<size_t>(array->n_children));
  for (int64_t i = 0; i < array->n_children; ++i) {
    const Field& child_field = type->children[static_cast<size_t>(i)];
    FERRY_ASSIGN_OR_RAISE(
        ArrayDataPtr child,
        ImportArrayNode(array->children[i], child_field.type, owner,
                        ChildPath(path, *type, i, child_field.name), depth + 1, source));
    data->children.push_back(std::move(child));
  }
  if (type->id == TypeId::kDictionary) {
    FERRY_ASSIGN_OR_RAISE(data->dictionary,
                          ImportArrayNode(array->dictionary, type->value_type, owner,
                                          DictionaryPath(path), depth + 1, source));
  }
  if (!source->in_place()) {
    FERRY_RETURN_NOT_OK(CheckDeviceNode(*data, storage, end, list_last_offset, where));
  }
  return ArrayDataPtr(std::move(data));
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
  const std::shared_ptr<const void> owner = holder;
  if (reader == nullptr) {
    ValueSource in_place;
    Result<ArrayDataPtr> imported =
        ImportArrayNode(&holder->array(), type, owner, "array", 0, &in_place);
    if (!imported.ok()) {
      telemetry::Add(Counter::kValidationErrors);
      return imported.status();
    }
    Status valid = ValidateStructural(**imported);
    if (!valid.ok()) {
      telemetry::Add(Counter::kValidationErrors);
      return valid;
    }
    telemetry::Add(Counter::kZeroCopyImports);
    return imported;
  }

  std::vector<ValueRead> reads;
  ValueSource recording = ValueSource::Recording(&reads);
  Status planned = ImportArrayNode(&holder->array(), type, owner, "array", 0, &recording).status();
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
  Result<ArrayDataPtr> imported =
      ImportArrayNode(&holder->array(), type, owner, "array", 0, &replaying);
  if (!imported.ok()) {
    telemetry::Add(Counter::kValidationErrors);
    return imported.status();
  }
  telemetry::Add(Counter::kZeroCopyImports);
  return imported;
}

Status ExportArrayWith(const ArrayDataPtr& data, ArrowArray* out,
                       const ArrayExportOptions& options) {
  if (out == nullptr) return Status::Invalid("output ArrowArray is NULL");
  return ExportArrayNode(data, "array", options, out);
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
  FERRY_RETURN_NOT_OK(ExportSchemaNode(type, "", Metadata{}, /*nullable=*/true, out));
  telemetry::Add(Counter::kSchemaExports);
  return Status::OK();
}

Status ExportField(const Field& field, ArrowSchema* out) {
  if (out == nullptr) return Status::Invalid("ExportField: output ArrowSchema is NULL");
  if (field.type == nullptr) {
    return Status::Invalid("ExportField: field " + Quoted(field.name) + " has no type");
  }
  FERRY_RETURN_NOT_OK(
      ExportSchemaNode(*field.type, field.name, field.metadata, field.nullable, out));
  telemetry::Add(Counter::kSchemaExports);
  return Status::OK();
}

Status ExportSchema(const Schema& schema, ArrowSchema* out) {
  if (out == nullptr) return Status::Invalid("ExportSchema: output ArrowSchema is NULL");
  const TypePtr root = struct_(schema.fields);
  FERRY_RETURN_NOT_OK(ExportSchemaNode(*root, "", schema.metadata, /*nullable=*/false, out));
  telemetry::Add(Counter::kSchemaExports);
  return Status::OK();
}

Status ExportArray(const ArrayDataPtr& data, ArrowArray* out) {
  if (out == nullptr) return Status::Invalid("ExportArray: output ArrowArray is NULL");
  static const ArrayExportOptions kHostMemory;
  Status exported = ExportArrayNode(data, "array", kHostMemory, out);
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
  if (out_schema != nullptr) FERRY_RETURN_NOT_OK(ExportSchema(*batch.schema(), out_schema));
  Status exported = ExportArray(batch.ToStructArray(), out);
  if (!exported.ok() && out_schema != nullptr) out_schema->release(out_schema);
  return exported;
}

Result<Field> ImportField(const ArrowSchema* schema) {
  const bool named = schema != nullptr && schema->name != nullptr && schema->name[0] != '\0';
  const std::string root_path = named ? "field " + Quoted(schema->name) : "field";
  SchemaImport import;
  FERRY_ASSIGN_OR_RAISE(
      Field field, ImportFieldNode(schema, root_path, 0, /*top_level_columns=*/false, &import));
  telemetry::Add(Counter::kSchemaImports);
  return field;
}

Result<TypePtr> ImportType(const ArrowSchema* schema) {
  FERRY_ASSIGN_OR_RAISE(Field field, ImportField(schema));
  return field.type;
}

Result<SchemaPtr> ImportSchema(const ArrowSchema* schema) {
  SchemaImport import;
  FERRY_ASSIGN_OR_RAISE(Field root,
                        ImportFieldNode(schema, "schema", 0, /*top_level_columns=*/true, &import));
  if (root.type->id != TypeId::kStruct) {
    return Status::Invalid(std::string("schema: a schema must be a struct ('+s'), got '") +
                           schema->format + "'");
  }
  auto imported = std::make_shared<Schema>();
  imported->fields = root.type->children;
  imported->metadata = std::move(root.metadata);
  telemetry::Add(Counter::kSchemaImports);
  return SchemaPtr(std::move(imported));
}

Result<ArrayDataPtr> ImportArray(ArrowArray* array, const TypePtr& type) {
  if (array == nullptr) return Status::Invalid("ImportArray: ArrowArray pointer is NULL");
  if (array->release == nullptr) {
    telemetry::Add(Counter::kReleaseErrors);
    return Status::Invalid("ImportArray: ArrowArray is already released (release is NULL)");
  }
  if (type == nullptr)
    return RejectForeignArray(array, Status::Invalid("ImportArray: type is null"));
  // From here on the foreign array is the holder's: whatever happens below,
  // its release runs once nothing points into it any more.
  return internal::ImportHeldArray(std::make_shared<ImportedArrayHolder>(array), type,
                                   /*reader=*/nullptr);
}

Result<ArrayDataPtr> ImportArray(ArrowArray* array, const ArrowSchema* schema) {
  Result<TypePtr> type = ImportType(schema);
  if (!type.ok()) return RejectForeignArray(array, type.status().WithPrefix("ImportArray: "));
  return ImportArray(array, *type);
}

Result<RecordBatchPtr> ImportRecordBatch(ArrowArray* array, const SchemaPtr& schema) {
  if (schema == nullptr) {
    return RejectForeignArray(array, Status::Invalid("ImportRecordBatch: schema is null"));
  }
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr data, ImportArray(array, struct_(schema->fields)));
  const int64_t null_count = data->GetNullCount();
  if (null_count != 0) {
    telemetry::Add(Counter::kValidationErrors);
    return Status::Invalid("ImportRecordBatch: the top-level struct array has " +
                           std::to_string(null_count) + " nulls; a record batch has none");
  }
  std::vector<ArrayDataPtr> columns;
  columns.reserve(data->children.size());
  for (const ArrayDataPtr& child : data->children) {
    // A struct's offset applies to its children; a batch's columns start at 0.
    const bool aligned = data->offset == 0 && child->length == data->length;
    columns.push_back(aligned ? child : Slice(child, data->offset, data->length));
  }
  return RecordBatch::Make(schema, data->length, std::move(columns));
}

Result<RecordBatchPtr> ImportRecordBatch(ArrowArray* array, const ArrowSchema* schema) {
  Result<SchemaPtr> imported_schema = ImportSchema(schema);
  if (!imported_schema.ok()) {
    return RejectForeignArray(array, imported_schema.status().WithPrefix("ImportRecordBatch: "));
  }
  return ImportRecordBatch(array, *imported_schema);
}

}  // namespace ferry
