#include "ferry/exchange/sample.h"

#include <cstring>
#include <string>
#include <vector>

namespace ferry {
namespace {

// Fills a validity bitmap; returns nullptr (all valid) when nothing is null.
Result<BufferPtr> MakeValidity(int64_t length, const std::vector<bool>& valid, int64_t* nulls) {
  *nulls = 0;
  for (bool v : valid) *nulls += v ? 0 : 1;
  if (*nulls == 0) return BufferPtr();
  FERRY_ASSIGN_OR_RAISE(auto bitmap, Buffer::Allocate(BytesForBits(length)));
  std::memset(bitmap->mutable_data(), 0, static_cast<size_t>(bitmap->size()));
  for (int64_t i = 0; i < length; ++i) {
    if (valid[static_cast<size_t>(i)]) SetBit(bitmap->mutable_data(), i);
  }
  return bitmap;
}

// A utf8 array (or the given validity) from strings.
Result<ArrayDataPtr> MakeUtf8(const std::vector<std::string>& values,
                              const std::vector<bool>& valid) {
  const auto length = static_cast<int64_t>(values.size());
  int64_t total = 0;
  for (const auto& value : values) total += static_cast<int64_t>(value.size());
  FERRY_ASSIGN_OR_RAISE(auto offsets, Buffer::Allocate((length + 1) * sizeof(int32_t)));
  FERRY_ASSIGN_OR_RAISE(auto data, Buffer::Allocate(total));
  auto* offset_values = reinterpret_cast<int32_t*>(offsets->mutable_data());
  int32_t position = 0;
  for (int64_t i = 0; i < length; ++i) {
    offset_values[i] = position;
    const auto& value = values[static_cast<size_t>(i)];
    std::memcpy(data->mutable_data() + position, value.data(), value.size());
    position += static_cast<int32_t>(value.size());
  }
  offset_values[length] = position;
  auto array = std::make_shared<ArrayData>();
  array->type = utf8();
  array->length = length;
  FERRY_ASSIGN_OR_RAISE(auto validity, MakeValidity(length, valid, &array->null_count));
  array->buffers = {validity, offsets, data};
  return ArrayDataPtr(array);
}

template <typename T>
Result<ArrayDataPtr> MakeFixed(TypePtr type, int64_t length, T (*value_of)(int64_t)) {
  FERRY_ASSIGN_OR_RAISE(auto values, Buffer::Allocate(length * static_cast<int64_t>(sizeof(T))));
  auto* out = reinterpret_cast<T*>(values->mutable_data());
  for (int64_t i = 0; i < length; ++i) out[i] = value_of(i);
  auto array = std::make_shared<ArrayData>();
  array->type = std::move(type);
  array->length = length;
  array->buffers = {nullptr, values};
  return ArrayDataPtr(array);
}

}  // namespace

Result<RecordBatchPtr> MakeSampleBatch(int64_t num_rows) {
  if (num_rows < 0)
    return Status::Invalid("num_rows must be >= 0, got " + std::to_string(num_rows));
  FERRY_ASSIGN_OR_RAISE(auto ids,
                        MakeFixed<int64_t>(int64(), num_rows, [](int64_t i) { return i; }));
  FERRY_ASSIGN_OR_RAISE(auto scores, MakeFixed<double>(float64(), num_rows, [](int64_t i) {
                          return static_cast<double>(i) * 0.5;
                        }));
  std::vector<std::string> names(static_cast<size_t>(num_rows));
  std::vector<bool> name_valid(static_cast<size_t>(num_rows));
  std::vector<std::string> tag_values;
  std::vector<int32_t> tag_offsets{0};
  for (int64_t i = 0; i < num_rows; ++i) {
    name_valid[static_cast<size_t>(i)] = i % 7 != 6;
    if (name_valid[static_cast<size_t>(i)])
      names[static_cast<size_t>(i)] = "row-" + std::to_string(i);
    for (int64_t t = 0; t < i % 3; ++t) tag_values.push_back("t" + std::to_string(t));
    tag_offsets.push_back(static_cast<int32_t>(tag_values.size()));
  }
  FERRY_ASSIGN_OR_RAISE(auto name_array, MakeUtf8(names, name_valid));
  FERRY_ASSIGN_OR_RAISE(auto tag_items,
                        MakeUtf8(tag_values, std::vector<bool>(tag_values.size(), true)));
  const auto offsets_size = static_cast<int64_t>(tag_offsets.size() * sizeof(int32_t));
  FERRY_ASSIGN_OR_RAISE(auto list_offsets, Buffer::Allocate(offsets_size));
  std::memcpy(list_offsets->mutable_data(), tag_offsets.data(), static_cast<size_t>(offsets_size));
  auto tags = std::make_shared<ArrayData>();
  tags->type = list(field("item", utf8()));
  tags->length = num_rows;
  tags->buffers = {nullptr, list_offsets};
  tags->children = {tag_items};

  auto schema = std::make_shared<Schema>();
  schema->fields = {field("id", int64(), false), field("name", utf8()), field("score", float64()),
                    field("tags", list(field("item", utf8())))};
  schema->metadata = {{"producer", "ferry"}};
  return RecordBatch::Make(schema, num_rows, {ids, name_array, scores, ArrayDataPtr(tags)});
}

Result<RecordBatchPtr> MakeWideBatch(int num_columns, int64_t num_rows) {
  if (num_columns < 0 || num_rows < 0) return Status::Invalid("negative batch dimensions");
  auto schema = std::make_shared<Schema>();
  std::vector<ArrayDataPtr> columns;
  columns.reserve(static_cast<size_t>(num_columns));
  for (int c = 0; c < num_columns; ++c) {
    schema->fields.push_back(field("c" + std::to_string(c), int64(), false));
    FERRY_ASSIGN_OR_RAISE(auto values, Buffer::Allocate(num_rows * 8));
    auto* out = reinterpret_cast<int64_t*>(values->mutable_data());
    for (int64_t r = 0; r < num_rows; ++r) out[r] = c * num_rows + r;
    auto column = std::make_shared<ArrayData>();
    column->type = int64();
    column->length = num_rows;
    column->buffers = {nullptr, values};
    columns.push_back(column);
  }
  return RecordBatch::Make(schema, num_rows, std::move(columns));
}

}  // namespace ferry
