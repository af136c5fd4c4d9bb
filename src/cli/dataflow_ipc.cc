// The Arrow IPC file writer (dataflow_ipc.h). The flatbuffers of the
// format (Schema.fbs, Message.fbs, File.fbs) are built by hand, front to
// back: a table's vtable comes right before it and its strings, vectors and
// sub-tables after it, so every offset points forward as flatbuffers require.
#include "cli/dataflow_ipc.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>

#include "ferry/exchange/validate.h"

namespace ferry::cli {
namespace {

// ---- A minimal flatbuffer builder.

class Flatbuffer {
 public:
  // A table field: a scalar stored inline, or an offset to something the
  // writer appends later (it returns that object's position).
  struct Slot {
    std::string scalar;  // empty for an offset
    std::function<size_t(Flatbuffer&)> child;
  };
  template <typename T>
  static std::optional<Slot> Scalar(T value) {
    Slot slot;
    slot.scalar.assign(reinterpret_cast<const char*>(&value), sizeof(T));
    return slot;
  }
  static std::optional<Slot> Child(std::function<size_t(Flatbuffer&)> write) {
    Slot slot;
    slot.child = std::move(write);
    return slot;
  }

  // The whole buffer, starting with the root offset, padded to 8 bytes.
  static std::string Finish(const std::function<size_t(Flatbuffer&)>& root) {
    Flatbuffer fb;
    fb.bytes_.resize(4);
    const size_t table = root(fb);
    fb.Patch(0, static_cast<uint32_t>(table));
    fb.Align(8);
    return std::move(fb.bytes_);
  }

  // Fields by id; nullopt = absent. Returns the table's position.
  size_t Table(const std::vector<std::optional<Slot>>& fields) {
    // Inline layout: the soffset, then each field aligned to its size.
    std::vector<uint16_t> field_offsets(fields.size(), 0);
    size_t inline_size = 4, table_align = 4;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (!fields[i]) continue;
      const size_t size = fields[i]->child ? 4 : fields[i]->scalar.size();
      inline_size = (inline_size + size - 1) / size * size;
      field_offsets[i] = static_cast<uint16_t>(inline_size);
      inline_size += size;
      table_align = std::max(table_align, size);
    }
    // The vtable, then padding so that the table is aligned.
    Align(2);
    const size_t vtable = bytes_.size();
    Put(static_cast<uint16_t>(4 + 2 * fields.size()));
    Put(static_cast<uint16_t>(inline_size));
    for (uint16_t offset : field_offsets) Put(offset);
    Align(table_align);
    const size_t table = bytes_.size();
    bytes_.resize(table + inline_size, '\0');
    Patch(table, static_cast<int32_t>(table - vtable));
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i] && !fields[i]->child) {
        std::memcpy(&bytes_[table + field_offsets[i]], fields[i]->scalar.data(),
                    fields[i]->scalar.size());
      }
    }
    for (size_t i = 0; i < fields.size(); ++i) {
      if (!fields[i] || !fields[i]->child) continue;
      const size_t field = table + field_offsets[i];
      const size_t target = fields[i]->child(*this);
      Patch(field, static_cast<uint32_t>(target - field));
    }
    return table;
  }

  size_t String(const std::string& text) {
    Align(4);
    const size_t at = bytes_.size();
    Put(static_cast<uint32_t>(text.size()));
    bytes_ += text;
    bytes_.push_back('\0');
    return at;
  }

  // A vector of structs, each `element` bytes aligned to `align`.
  size_t Structs(const std::string& elements, size_t count, size_t align) {
    while ((bytes_.size() + 4) % std::max<size_t>(align, 4) != 0) bytes_.push_back('\0');
    const size_t at = bytes_.size();
    Put(static_cast<uint32_t>(count));
    bytes_ += elements;
    return at;
  }

  // A vector of tables, written by `writers`.
  size_t Tables(const std::vector<std::function<size_t(Flatbuffer&)>>& writers) {
    Align(4);
    const size_t at = bytes_.size();
    Put(static_cast<uint32_t>(writers.size()));
    const size_t first = bytes_.size();
    bytes_.resize(first + 4 * writers.size(), '\0');
    for (size_t i = 0; i < writers.size(); ++i) {
      const size_t slot = first + 4 * i;
      const size_t target = writers[i](*this);
      Patch(slot, static_cast<uint32_t>(target - slot));
    }
    return at;
  }

 private:
  template <typename T>
  void Put(T value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  template <typename T>
  void Patch(size_t at, T value) {
    std::memcpy(&bytes_[at], &value, sizeof(T));
  }
  void Align(size_t align) {
    while (bytes_.size() % align != 0) bytes_.push_back('\0');
  }
  std::string bytes_;
};

using Writer = std::function<size_t(Flatbuffer&)>;

// ---- Schema.fbs

enum TypeTag : uint8_t {
  kTagNull = 1,
  kTagInt = 2,
  kTagFloatingPoint = 3,
  kTagBinary = 4,
  kTagUtf8 = 5,
  kTagBool = 6,
  kTagDate = 8,
  kTagTime = 9,
  kTagTimestamp = 10,
  kTagList = 12,
  kTagStruct = 13,
  kTagFixedSizeBinary = 15,
  kTagFixedSizeList = 16,
  kTagDuration = 18,
  kTagLargeBinary = 19,
  kTagLargeUtf8 = 20,
  kTagLargeList = 21,
};

constexpr int16_t kMetadataV5 = 4;

int16_t UnitCode(TimeUnit unit) { return static_cast<int16_t>(unit); }  // same order

// The type's union tag and table.
std::pair<uint8_t, Writer> TypeTable(const DataType& type) {
  using F = Flatbuffer;
  const auto empty = [](Flatbuffer& fb) { return fb.Table({}); };
  switch (type.id) {
    case TypeId::kNull:
      return {kTagNull, empty};
    case TypeId::kBool:
      return {kTagBool, empty};
    case TypeId::kInt8:
    case TypeId::kUInt8:
    case TypeId::kInt16:
    case TypeId::kUInt16:
    case TypeId::kInt32:
    case TypeId::kUInt32:
    case TypeId::kInt64:
    case TypeId::kUInt64: {
      const int32_t bits = type.fixed_width() * 8;
      const bool is_signed = type.id == TypeId::kInt8 || type.id == TypeId::kInt16 ||
                             type.id == TypeId::kInt32 || type.id == TypeId::kInt64;
      return {kTagInt, [bits, is_signed](Flatbuffer& fb) {
                return fb.Table({F::Scalar(bits), F::Scalar(static_cast<uint8_t>(is_signed))});
              }};
    }
    case TypeId::kHalfFloat:
    case TypeId::kFloat:
    case TypeId::kDouble: {
      const int16_t precision = type.id == TypeId::kHalfFloat ? 0
                                : type.id == TypeId::kFloat   ? 1
                                                              : 2;
      return {kTagFloatingPoint,
              [precision](Flatbuffer& fb) { return fb.Table({F::Scalar(precision)}); }};
    }
    case TypeId::kBinary:
      return {kTagBinary, empty};
    case TypeId::kUtf8:
      return {kTagUtf8, empty};
    case TypeId::kLargeBinary:
      return {kTagLargeBinary, empty};
    case TypeId::kLargeUtf8:
      return {kTagLargeUtf8, empty};
    case TypeId::kFixedSizeBinary: {
      const int32_t width = type.byte_width;
      return {kTagFixedSizeBinary,
              [width](Flatbuffer& fb) { return fb.Table({F::Scalar(width)}); }};
    }
    case TypeId::kDate32:
    case TypeId::kDate64: {
      const int16_t unit = type.id == TypeId::kDate32 ? 0 : 1;
      return {kTagDate, [unit](Flatbuffer& fb) { return fb.Table({F::Scalar(unit)}); }};
    }
    case TypeId::kTime32:
    case TypeId::kTime64: {
      const int16_t unit = UnitCode(type.unit);
      const int32_t bits = type.id == TypeId::kTime32 ? 32 : 64;
      return {kTagTime, [unit, bits](Flatbuffer& fb) {
                return fb.Table({F::Scalar(unit), F::Scalar(bits)});
              }};
    }
    case TypeId::kTimestamp: {
      const int16_t unit = UnitCode(type.unit);
      const std::string timezone = type.timezone;
      return {kTagTimestamp, [unit, timezone](Flatbuffer& fb) {
                std::optional<F::Slot> zone;
                if (!timezone.empty()) {
                  zone = F::Child([timezone](Flatbuffer& inner) { return inner.String(timezone); });
                }
                return fb.Table({F::Scalar(unit), zone});
              }};
    }
    case TypeId::kDuration: {
      const int16_t unit = UnitCode(type.unit);
      return {kTagDuration, [unit](Flatbuffer& fb) { return fb.Table({F::Scalar(unit)}); }};
    }
    case TypeId::kList:
      return {kTagList, empty};
    case TypeId::kLargeList:
      return {kTagLargeList, empty};
    case TypeId::kFixedSizeList: {
      const int32_t size = type.list_size;
      return {kTagFixedSizeList, [size](Flatbuffer& fb) { return fb.Table({F::Scalar(size)}); }};
    }
    case TypeId::kStruct:
      return {kTagStruct, empty};
    default:
      return {0, nullptr};
  }
}

Writer KeyValues(const Metadata& metadata) {
  return [metadata](Flatbuffer& fb) {
    std::vector<Writer> pairs;
    for (const auto& pair : metadata) {
      const std::string key = pair.first;  // a structured binding cannot be captured (clang 14)
      const std::string value = pair.second;
      pairs.push_back([key, value](Flatbuffer& inner) {
        return inner.Table({Flatbuffer::Child([key](Flatbuffer& f) { return f.String(key); }),
                            Flatbuffer::Child([value](Flatbuffer& f) { return f.String(value); })});
      });
    }
    return fb.Tables(pairs);
  };
}

Writer FieldTable(const Field& field) {
  return [field](Flatbuffer& fb) {
    using F = Flatbuffer;
    auto [tag, type] = TypeTable(*field.type);
    std::vector<Writer> children;
    for (const Field& child : field.type->children) children.push_back(FieldTable(child));
    const std::string name = field.name;
    return fb.Table({F::Child([name](Flatbuffer& f) { return f.String(name); }),
                     F::Scalar(static_cast<uint8_t>(field.nullable)), F::Scalar(tag),
                     F::Child(type), std::nullopt,
                     F::Child([children](Flatbuffer& f) { return f.Tables(children); }),
                     field.metadata.empty() ? std::nullopt : F::Child(KeyValues(field.metadata))});
  };
}

Writer SchemaTable(const Schema& schema) {
  return [schema](Flatbuffer& fb) {
    using F = Flatbuffer;
    std::vector<Writer> fields;
    for (const Field& field : schema.fields) fields.push_back(FieldTable(field));
    return fb.Table(
        {F::Scalar(int16_t{0}), F::Child([fields](Flatbuffer& f) { return f.Tables(fields); }),
         schema.metadata.empty() ? std::nullopt : F::Child(KeyValues(schema.metadata))});
  };
}

// ---- Record batch bodies.

struct Body {
  std::string nodes;    // FieldNode structs
  std::string buffers;  // Buffer structs
  size_t node_count = 0, buffer_count = 0;
  std::vector<std::pair<const uint8_t*, int64_t>> pieces;  // in order, each padded to 8
  int64_t length = 0;

  void AddNode(int64_t length_, int64_t nulls) {
    nodes.append(reinterpret_cast<const char*>(&length_), 8);
    nodes.append(reinterpret_cast<const char*>(&nulls), 8);
    ++node_count;
  }
  void AddBuffer(const uint8_t* data, int64_t size) {
    const int64_t at = length;
    buffers.append(reinterpret_cast<const char*>(&at), 8);
    buffers.append(reinterpret_cast<const char*>(&size), 8);
    ++buffer_count;
    pieces.emplace_back(data, size);
    length += (size + 7) / 8 * 8;
  }
};

const uint8_t* BufferData(const ArrayData& data, int index) {
  const auto& buffer = data.buffers.size() > static_cast<size_t>(index)
                           ? data.buffers[static_cast<size_t>(index)]
                           : nullptr;
  return buffer ? buffer->data_as<uint8_t>() : nullptr;
}

Status AddArray(const ArrayData& data, Body* body) {
  if (data.offset != 0) {
    return Status::NotImplemented("ferry record: arrays with an offset (slices) are not written");
  }
  const DataType& type = *data.type;
  const int64_t nulls = type.id == TypeId::kNull ? data.length : data.GetNullCount();
  body->AddNode(data.length, nulls);
  if (type.id == TypeId::kNull) return Status::OK();
  const uint8_t* validity = BufferData(data, 0);
  body->AddBuffer(validity, validity != nullptr && nulls > 0 ? (data.length + 7) / 8 : 0);
  switch (type.id) {
    case TypeId::kStruct:
      for (const auto& child : data.children) FERRY_RETURN_NOT_OK(AddArray(*child, body));
      return Status::OK();
    case TypeId::kFixedSizeList:
      return AddArray(*data.children.at(0), body);
    case TypeId::kList:
    case TypeId::kLargeList: {
      const int width = type.id == TypeId::kList ? 4 : 8;
      body->AddBuffer(BufferData(data, 1), data.length == 0 ? 0 : (data.length + 1) * width);
      return AddArray(*data.children.at(0), body);
    }
    case TypeId::kBinary:
    case TypeId::kUtf8:
    case TypeId::kLargeBinary:
    case TypeId::kLargeUtf8: {
      const int width = OffsetWidthOfVariableLength(type.id);
      const uint8_t* offsets = BufferData(data, 1);
      int64_t end = 0;
      if (data.length > 0 && offsets != nullptr) {
        if (width == 4) {
          end = reinterpret_cast<const int32_t*>(offsets)[data.length];
        } else {
          end = reinterpret_cast<const int64_t*>(offsets)[data.length];
        }
      }
      body->AddBuffer(offsets, data.length == 0 ? 0 : (data.length + 1) * width);
      body->AddBuffer(BufferData(data, 2), end);
      return Status::OK();
    }
    case TypeId::kBool:
      body->AddBuffer(BufferData(data, 1), (data.length + 7) / 8);
      return Status::OK();
    default: {
      const int32_t width = type.fixed_width();
      if (width <= 0) return Status::NotImplemented("ferry record: type " + type.ToString());
      body->AddBuffer(BufferData(data, 1), data.length * width);
      return Status::OK();
    }
  }
}

}  // namespace

Status CheckIpcType(const DataType& type) {
  if (TypeTable(type).second == nullptr) {
    return Status::NotImplemented("type " + type.ToString() +
                                  " cannot be recorded yet (supported: null, bool, integers, "
                                  "floats, binary, utf8, fixed-size binary, dates, times, "
                                  "timestamps, durations, lists and structs of them)");
  }
  for (const Field& child : type.children) FERRY_RETURN_NOT_OK(CheckIpcType(*child.type));
  return Status::OK();
}

Result<std::unique_ptr<IpcFileWriter>> IpcFileWriter::Open(const std::string& path,
                                                           SchemaPtr schema) {
  for (const Field& field : schema->fields) FERRY_RETURN_NOT_OK(CheckIpcType(*field.type));
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return Status::IOError("cannot create " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<IpcFileWriter> writer(new IpcFileWriter(file, path, std::move(schema)));
  FERRY_RETURN_NOT_OK(writer->WriteBytes("ARROW1\0\0", 8));
  const std::string flatbuffer = Flatbuffer::Finish([&](Flatbuffer& fb) {
    using F = Flatbuffer;
    return fb.Table({F::Scalar(kMetadataV5), F::Scalar(uint8_t{1}),
                     F::Child(SchemaTable(*writer->schema_)), F::Scalar(int64_t{0})});
  });
  FERRY_RETURN_NOT_OK(writer->WriteMessage(flatbuffer, {}).status());
  return writer;
}

IpcFileWriter::~IpcFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status IpcFileWriter::WriteBytes(const void* data, size_t size) {
  if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
    return Status::IOError("cannot write " + path_ + ": " + std::strerror(errno));
  }
  position_ += static_cast<int64_t>(size);
  return Status::OK();
}

Result<IpcFileWriter::Block> IpcFileWriter::WriteMessage(
    const std::string& flatbuffer, const std::vector<std::pair<const uint8_t*, int64_t>>& body) {
  static const char kZeros[8] = {};
  Block block{position_, 0, 0};
  const uint32_t continuation = 0xFFFFFFFF;
  const auto length = static_cast<int32_t>(flatbuffer.size());  // a multiple of 8
  FERRY_RETURN_NOT_OK(WriteBytes(&continuation, 4));
  FERRY_RETURN_NOT_OK(WriteBytes(&length, 4));
  FERRY_RETURN_NOT_OK(WriteBytes(flatbuffer.data(), flatbuffer.size()));
  block.metadata_length = 8 + length;
  const int64_t body_begin = position_;
  for (const auto& [data, size] : body) {
    if (size > 0) FERRY_RETURN_NOT_OK(WriteBytes(data, static_cast<size_t>(size)));
    FERRY_RETURN_NOT_OK(WriteBytes(kZeros, static_cast<size_t>((8 - size % 8) % 8)));
  }
  block.body_length = position_ - body_begin;
  return block;
}

Status IpcFileWriter::WriteBatch(int64_t num_rows, const std::vector<ArrayDataPtr>& columns) {
  if (file_ == nullptr) return Status::Invalid("the recording " + path_ + " is closed");
  if (columns.size() != schema_->fields.size()) {
    return Status::Invalid("a batch of " + std::to_string(columns.size()) + " columns for a " +
                           std::to_string(schema_->fields.size()) + "-column schema");
  }
  Body body;
  for (const auto& column : columns) FERRY_RETURN_NOT_OK(AddArray(*column, &body));
  const std::string flatbuffer = Flatbuffer::Finish([&](Flatbuffer& fb) {
    using F = Flatbuffer;
    Writer batch = [&](Flatbuffer& f) {
      return f.Table(
          {F::Scalar(num_rows),
           F::Child([&](Flatbuffer& v) { return v.Structs(body.nodes, body.node_count, 8); }),
           F::Child([&](Flatbuffer& v) { return v.Structs(body.buffers, body.buffer_count, 8); })});
    };
    return fb.Table(
        {F::Scalar(kMetadataV5), F::Scalar(uint8_t{3}), F::Child(batch), F::Scalar(body.length)});
  });
  FERRY_ASSIGN_OR_RAISE(Block block, WriteMessage(flatbuffer, body.pieces));
  blocks_.push_back(block);
  return Status::OK();
}

Status IpcFileWriter::Close() {
  if (file_ == nullptr) return Status::OK();
  // The end-of-stream marker, then the footer.
  const uint64_t end_of_stream = 0x00000000FFFFFFFFULL;
  FERRY_RETURN_NOT_OK(WriteBytes(&end_of_stream, 8));
  std::string blocks;
  for (const Block& block : blocks_) {
    const int32_t padding = 0;
    blocks.append(reinterpret_cast<const char*>(&block.offset), 8);
    blocks.append(reinterpret_cast<const char*>(&block.metadata_length), 4);
    blocks.append(reinterpret_cast<const char*>(&padding), 4);
    blocks.append(reinterpret_cast<const char*>(&block.body_length), 8);
  }
  const std::string footer = Flatbuffer::Finish([&](Flatbuffer& fb) {
    using F = Flatbuffer;
    return fb.Table(
        {F::Scalar(kMetadataV5), F::Child(SchemaTable(*schema_)),
         F::Child([](Flatbuffer& v) { return v.Structs("", 0, 8); }),
         F::Child([&](Flatbuffer& v) { return v.Structs(blocks, blocks_.size(), 8); })});
  });
  FERRY_RETURN_NOT_OK(WriteBytes(footer.data(), footer.size()));
  const auto footer_length = static_cast<int32_t>(footer.size());
  FERRY_RETURN_NOT_OK(WriteBytes(&footer_length, 4));
  FERRY_RETURN_NOT_OK(WriteBytes("ARROW1", 6));
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) return Status::IOError("cannot write " + path_ + ": " + std::strerror(errno));
  return Status::OK();
}

// ---- Reading.

namespace {

// A damaged or foreign file; caught at the reader's entry points.
struct Corrupt : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Bounds-checked reads of the flatbuffer in bytes [begin, begin + size).
class FlatbufferView {
 public:
  FlatbufferView(const uint8_t* begin, size_t size) : begin_(begin), size_(size) {}

  template <typename T>
  T Read(size_t at) const {
    if (at > size_ || sizeof(T) > size_ - at) throw Corrupt("an offset points outside");
    T value;
    std::memcpy(&value, begin_ + at, sizeof(T));
    return value;
  }
  size_t Root() const { return Read<uint32_t>(0); }
  // Where field `id` of the table at `table` is stored (0: absent).
  size_t Field(size_t table, int id) const {
    const int64_t vtable = static_cast<int64_t>(table) - Read<int32_t>(table);
    if (vtable < 0) throw Corrupt("a vtable lies outside");
    const auto vtable_size = Read<uint16_t>(static_cast<size_t>(vtable));
    const size_t entry = 4 + 2 * static_cast<size_t>(id);
    if (entry + 2 > vtable_size) return 0;
    const auto offset = Read<uint16_t>(static_cast<size_t>(vtable) + entry);
    return offset == 0 ? 0 : table + offset;
  }
  template <typename T>
  T Scalar(size_t table, int id, T fallback) const {
    const size_t at = Field(table, id);
    return at == 0 ? fallback : Read<T>(at);
  }
  // What an offset field points to (0: absent).
  size_t Ref(size_t table, int id) const {
    const size_t at = Field(table, id);
    return at == 0 ? 0 : at + Read<uint32_t>(at);
  }
  std::string String(size_t table, int id) const {
    const size_t at = Ref(table, id);
    if (at == 0) return "";
    const auto length = Read<uint32_t>(at);
    if (length > size_ - at - 4) throw Corrupt("a string runs past the end");
    return std::string(reinterpret_cast<const char*>(begin_ + at + 4), length);
  }
  // A vector field: where its elements begin and how many there are.
  std::pair<size_t, size_t> Vector(size_t table, int id, size_t element_size) const {
    const size_t at = Ref(table, id);
    if (at == 0) return {0, 0};
    const size_t count = Read<uint32_t>(at);
    if (count * element_size > size_ - at - 4) throw Corrupt("a vector runs past the end");
    return {at + 4, count};
  }
  // The tables of a vector of tables.
  std::vector<size_t> Tables(size_t table, int id) const {
    auto [first, count] = Vector(table, id, 4);
    std::vector<size_t> tables;
    for (size_t i = 0; i < count; ++i)
      tables.push_back(first + 4 * i + Read<uint32_t>(first + 4 * i));
    return tables;
  }

 private:
  const uint8_t* begin_;
  size_t size_;
};

TimeUnit UnitFromCode(int16_t code) {
  if (code < 0 || code > 3) throw Corrupt("unknown time unit " + std::to_string(code));
  return static_cast<TimeUnit>(code);
}

Metadata ReadKeyValues(const FlatbufferView& fb, size_t table, int id) {
  Metadata metadata;
  for (size_t pair : fb.Tables(table, id))
    metadata.emplace_back(fb.String(pair, 0), fb.String(pair, 1));
  return metadata;
}

ferry::Field ReadField(const FlatbufferView& fb, size_t at, int depth) {
  if (depth > 64) throw Corrupt("types nested too deeply");
  std::vector<ferry::Field> children;
  for (size_t child : fb.Tables(at, 5)) children.push_back(ReadField(fb, child, depth + 1));
  const auto tag = fb.Scalar<uint8_t>(at, 2, 0);
  const size_t type = fb.Ref(at, 3);
  if (fb.Ref(at, 4) != 0) throw Corrupt("dictionary-encoded fields are not read");
  auto child = [&]() -> ferry::Field {
    if (children.size() != 1) throw Corrupt("a list type without exactly one child");
    return children[0];
  };
  TypePtr result;
  switch (tag) {
    case kTagNull:
      result = null();
      break;
    case kTagBool:
      result = boolean();
      break;
    case kTagInt: {
      const int32_t bits = type == 0 ? 0 : fb.Scalar<int32_t>(type, 0, 0);
      const bool is_signed = type != 0 && fb.Scalar<uint8_t>(type, 1, 0) != 0;
      switch (bits) {
        case 8:
          result = is_signed ? int8() : uint8();
          break;
        case 16:
          result = is_signed ? int16() : uint16();
          break;
        case 32:
          result = is_signed ? int32() : uint32();
          break;
        case 64:
          result = is_signed ? int64() : uint64();
          break;
        default:
          throw Corrupt("an integer of " + std::to_string(bits) + " bits");
      }
      break;
    }
    case kTagFloatingPoint: {
      const int16_t precision = type == 0 ? 0 : fb.Scalar<int16_t>(type, 0, 0);
      if (precision < 0 || precision > 2) throw Corrupt("unknown float precision");
      result = precision == 0 ? float16() : precision == 1 ? float32() : float64();
      break;
    }
    case kTagBinary:
      result = binary();
      break;
    case kTagUtf8:
      result = utf8();
      break;
    case kTagLargeBinary:
      result = large_binary();
      break;
    case kTagLargeUtf8:
      result = large_utf8();
      break;
    case kTagFixedSizeBinary:
      result = fixed_size_binary(fb.Scalar<int32_t>(type, 0, 0));
      break;
    case kTagDate:
      result = fb.Scalar<int16_t>(type, 0, 1) == 0 ? date32() : date64();
      break;
    case kTagTime: {
      const TimeUnit unit = UnitFromCode(fb.Scalar<int16_t>(type, 0, 1));
      result = fb.Scalar<int32_t>(type, 1, 32) == 32 ? time32(unit) : time64(unit);
      break;
    }
    case kTagTimestamp:
      result = timestamp(UnitFromCode(fb.Scalar<int16_t>(type, 0, 0)), fb.String(type, 1));
      break;
    case kTagDuration:
      result = duration(UnitFromCode(fb.Scalar<int16_t>(type, 0, 1)));
      break;
    case kTagList:
      result = list(child());
      break;
    case kTagLargeList:
      result = large_list(child());
      break;
    case kTagFixedSizeList:
      result = fixed_size_list(child(), fb.Scalar<int32_t>(type, 0, 0));
      break;
    case kTagStruct:
      result = struct_(children);
      break;
    default:
      throw Corrupt("a field of a type Ferry does not read (type tag " + std::to_string(tag) + ")");
  }
  if (type == 0 && tag != kTagNull) throw Corrupt("a field without its type");
  if (Status valid = ValidateType(*result); !valid.ok()) throw Corrupt(valid.message());
  return ferry::field(fb.String(at, 0), result, fb.Scalar<uint8_t>(at, 1, 0) != 0,
                      ReadKeyValues(fb, at, 6));
}

SchemaPtr ReadSchema(const FlatbufferView& fb, size_t at) {
  auto schema = std::make_shared<Schema>();
  if (fb.Scalar<int16_t>(at, 0, 0) != 0) throw Corrupt("a big-endian file");
  for (size_t field : fb.Tables(at, 1)) schema->fields.push_back(ReadField(fb, field, 0));
  schema->metadata = ReadKeyValues(fb, at, 2);
  return schema;
}

// Rebuilds arrays from a record batch's field nodes and buffers.
struct BodyReader {
  const FlatbufferView& fb;
  size_t nodes_at, node_count, buffers_at, buffer_count;
  const uint8_t* body;
  int64_t body_length;
  std::shared_ptr<const void> owner;
  size_t next_node = 0, next_buffer = 0;

  BufferPtr NextBuffer() {
    if (next_buffer >= buffer_count) throw Corrupt("fewer buffers than the schema needs");
    const size_t at = buffers_at + 16 * next_buffer++;
    const auto offset = fb.Read<int64_t>(at);
    const auto length = fb.Read<int64_t>(at + 8);
    if (offset < 0 || length < 0 || offset > body_length || length > body_length - offset) {
      throw Corrupt("a buffer lies outside the message body");
    }
    if (length == 0) return nullptr;
    // Values are read in place: they must be aligned as the format promises.
    if (reinterpret_cast<uintptr_t>(body + offset) % 8 != 0) throw Corrupt("a misaligned buffer");
    return std::make_shared<Buffer>(body + offset, length, owner);
  }
  static void Need(const BufferPtr& buffer, int64_t bytes) {
    if (bytes > 0 && (buffer == nullptr || buffer->size() < bytes)) {
      throw Corrupt("a buffer is shorter than its array");
    }
  }

  ArrayDataPtr Next(const TypePtr& type) {
    if (next_node >= node_count) throw Corrupt("fewer field nodes than the schema needs");
    const size_t at = nodes_at + 16 * next_node++;
    auto data = std::make_shared<ArrayData>();
    data->type = type;
    data->length = fb.Read<int64_t>(at);
    data->null_count = fb.Read<int64_t>(at + 8);
    if (data->length < 0 || data->null_count < 0 || data->null_count > data->length) {
      throw Corrupt("a field node with a bad length or null count");
    }
    if (type->id == TypeId::kNull) {
      data->null_count = data->length;
      return data;
    }
    BufferPtr validity = NextBuffer();
    if (data->null_count > 0) Need(validity, (data->length + 7) / 8);
    data->buffers.push_back(data->null_count > 0 ? validity : nullptr);
    switch (type->id) {
      case TypeId::kStruct:
        for (const auto& child : type->children) {
          data->children.push_back(Next(child.type));
          if (data->children.back()->length < data->length) throw Corrupt("a short struct child");
        }
        break;
      case TypeId::kFixedSizeList:
        data->children.push_back(Next(type->children.at(0).type));
        if (data->children.back()->length < data->length * type->list_size) {
          throw Corrupt("a short fixed-size list child");
        }
        break;
      case TypeId::kList:
      case TypeId::kLargeList:
      case TypeId::kBinary:
      case TypeId::kUtf8:
      case TypeId::kLargeBinary:
      case TypeId::kLargeUtf8: {
        const bool large = type->id == TypeId::kLargeList || type->id == TypeId::kLargeBinary ||
                           type->id == TypeId::kLargeUtf8;
        const int width = large ? 8 : 4;
        BufferPtr offsets = NextBuffer();
        Need(offsets, data->length == 0 ? 0 : (data->length + 1) * width);
        // Offsets must rise and stay within what follows.
        int64_t previous = 0, last = 0;
        for (int64_t i = 0; i <= data->length && data->length > 0; ++i) {
          const int64_t value =
              large ? offsets->data_as<int64_t>()[i] : offsets->data_as<int32_t>()[i];
          if (value < previous) throw Corrupt("offsets that go down");
          previous = last = value;
        }
        data->buffers.push_back(offsets);
        if (type->id == TypeId::kList || type->id == TypeId::kLargeList) {
          data->children.push_back(Next(type->children.at(0).type));
          if (data->children.back()->length < last) throw Corrupt("a short list child");
        } else {
          BufferPtr values = NextBuffer();
          Need(values, last);
          data->buffers.push_back(values);
        }
        break;
      }
      case TypeId::kBool: {
        BufferPtr values = NextBuffer();
        Need(values, (data->length + 7) / 8);
        data->buffers.push_back(values);
        break;
      }
      default: {
        BufferPtr values = NextBuffer();
        Need(values, data->length * type->fixed_width());
        data->buffers.push_back(values);
      }
    }
    return data;
  }
};

}  // namespace

Result<std::unique_ptr<IpcFileReader>> IpcFileReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || info.st_size < 32) {
    ::close(fd);
    return Status::Invalid(path + " is not an Arrow IPC file (too short)");
  }
  const auto size = static_cast<size_t>(info.st_size);
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED)
    return Status::IOError("cannot map " + path + ": " + std::strerror(errno));
  std::unique_ptr<IpcFileReader> reader(new IpcFileReader());
  reader->path_ = path;
  reader->mapping_ = std::shared_ptr<const std::string_view>(
      new std::string_view(static_cast<const char*>(mapped), size),
      [size](const std::string_view* view) {
        ::munmap(const_cast<char*>(view->data()), size);
        delete view;
      });
  const std::string_view file = *reader->mapping_;
  try {
    if (file.substr(0, 6) != "ARROW1" || file.substr(size - 6) != "ARROW1") {
      throw Corrupt("no ARROW1 magic at its start and end");
    }
    int32_t footer_length = 0;
    std::memcpy(&footer_length, file.data() + size - 10, 4);
    if (footer_length <= 0 || static_cast<size_t>(footer_length) > size - 18) {
      throw Corrupt("a bad footer length");
    }
    const auto* footer = reinterpret_cast<const uint8_t*>(file.data()) + size - 10 - footer_length;
    const FlatbufferView fb(footer, static_cast<size_t>(footer_length));
    const size_t root = fb.Root();
    const size_t schema = fb.Ref(root, 1);
    if (schema == 0) throw Corrupt("a footer without a schema");
    reader->schema_ = ReadSchema(fb, schema);
    if (fb.Vector(root, 2, 24).second != 0) throw Corrupt("dictionary batches are not read");
    auto [first, count] = fb.Vector(root, 3, 24);
    for (size_t i = 0; i < count; ++i) {
      const size_t at = first + 24 * i;
      Block block{fb.Read<int64_t>(at), fb.Read<int32_t>(at + 8), fb.Read<int64_t>(at + 16)};
      if (block.offset < 8 || block.metadata_length < 8 || block.body_length < 0 ||
          static_cast<uint64_t>(block.offset) + static_cast<uint64_t>(block.metadata_length) +
                  static_cast<uint64_t>(block.body_length) >
              size) {
        throw Corrupt("a record batch block outside the file");
      }
      reader->blocks_.push_back(block);
    }
  } catch (const Corrupt& problem) {
    return Status::Invalid(path + " is not an Arrow IPC file Ferry reads: " + problem.what());
  }
  return reader;
}

Result<std::pair<int64_t, std::vector<ArrayDataPtr>>> IpcFileReader::ReadBatch(
    int64_t index) const {
  if (index < 0 || index >= num_batches())
    return Status::Invalid("no batch " + std::to_string(index));
  const Block& block = blocks_[static_cast<size_t>(index)];
  const auto* base = reinterpret_cast<const uint8_t*>(mapping_->data());
  try {
    // The encapsulated message: continuation, length, flatbuffer, body.
    uint32_t continuation = 0;
    int32_t length = 0;
    std::memcpy(&continuation, base + block.offset, 4);
    std::memcpy(&length, base + block.offset + 4, 4);
    if (continuation != 0xFFFFFFFF || length <= 0 || length > block.metadata_length - 8) {
      throw Corrupt("a record batch message without its prefix");
    }
    const FlatbufferView fb(base + block.offset + 8, static_cast<size_t>(length));
    const size_t message = fb.Root();
    if (fb.Scalar<uint8_t>(message, 1, 0) != 3) throw Corrupt("a block that is no record batch");
    const size_t batch = fb.Ref(message, 2);
    if (batch == 0) throw Corrupt("a record batch message without its header");
    if (fb.Ref(batch, 3) != 0) throw Corrupt("compressed buffers are not read");
    const auto rows = fb.Scalar<int64_t>(batch, 0, 0);
    auto [nodes_at, node_count] = fb.Vector(batch, 1, 16);
    auto [buffers_at, buffer_count] = fb.Vector(batch, 2, 16);
    BodyReader body{fb,
                    nodes_at,
                    node_count,
                    buffers_at,
                    buffer_count,
                    base + block.offset + block.metadata_length,
                    block.body_length,
                    mapping_};
    std::vector<ArrayDataPtr> columns;
    for (const ferry::Field& field : schema_->fields) {
      columns.push_back(body.Next(field.type));
      if (columns.back()->length < rows) throw Corrupt("a column shorter than its batch");
      // Everything a consumer may rely on (offsets, UTF-8, lengths).
      Status valid = ValidateFull(*columns.back(), "col '" + field.name + "'");
      if (!valid.ok()) throw Corrupt(valid.message());
    }
    return std::make_pair(rows, std::move(columns));
  } catch (const Corrupt& problem) {
    return Status::Invalid(path_ + ", batch " + std::to_string(index) + ": " + problem.what());
  }
}

}  // namespace ferry::cli
