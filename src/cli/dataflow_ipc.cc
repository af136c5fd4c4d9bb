// The Arrow IPC file writer (dataflow_ipc.h). The flatbuffers of the
// format (Schema.fbs, Message.fbs, File.fbs) are built by hand, front to
// back: a table's vtable comes right before it and its strings, vectors and
// sub-tables after it, so every offset points forward as flatbuffers require.
#include "cli/dataflow_ipc.h"

#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>

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

}  // namespace ferry::cli
