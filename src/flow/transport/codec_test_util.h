// Shared by the batch-header and schema codec tests: a fake segment table
// standing in for shared memory, encode/decode helpers over it, and sample
// batches of every type. Test-only.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ferry/exchange/builder.h"
#include "ferry/exchange/sample.h"
#include "ferry/exchange/validate.h"
#include "flow/transport/batch_header.h"
#include "testing/test_util.h"

namespace ferry::flow::wire {

// ---- A fake segment table ------------------------------------------------------------------

// Payload memory of a few segments: Locate copies each buffer into one of
// them (64-byte aligned, round robin), Seal moves every segment into a heap
// block of exactly its size so that ASan sees any read past its end.
class FakeSegments {
 public:
  static constexpr uint32_t kFirstId = 7;

  explicit FakeSegments(size_t segment_count = 3) : staging_(segment_count) {}

  Result<BufferLocation> Locate(const Buffer& buffer) {
    if (sealed_) return Status::Invalid("segments are sealed");
    const size_t index = next_segment_++ % staging_.size();
    std::vector<uint8_t>& bytes = staging_[index];
    bytes.resize(static_cast<size_t>(PaddedSize(static_cast<int64_t>(bytes.size()))));
    const uint64_t offset = bytes.size();
    if (buffer.size() > 0) bytes.insert(bytes.end(), buffer.data(), buffer.data() + buffer.size());
    return BufferLocation{kFirstId + static_cast<uint32_t>(index), offset,
                          static_cast<uint64_t>(buffer.size())};
  }

  void Seal() {
    if (sealed_) return;
    sealed_ = true;
    for (const std::vector<uint8_t>& bytes : staging_) {
      Block block;
      block.size = static_cast<int64_t>(bytes.size());
      block.data.reset(static_cast<uint8_t*>(
          ::operator new (bytes.empty() ? 1 : bytes.size(), std::align_val_t{64})));
      if (!bytes.empty()) std::memcpy(block.data.get(), bytes.data(), bytes.size());
      blocks_.push_back(std::move(block));
    }
  }

  Result<SegmentView> Lookup(uint32_t segment_id) {
    Seal();
    ++lookups_;
    if (segment_id < kFirstId || segment_id - kFirstId >= blocks_.size()) {
      return Status::Invalid("unknown segment id " + std::to_string(segment_id));
    }
    const Block& block = blocks_[segment_id - kFirstId];
    return SegmentView{block.data.get(), block.size};
  }

  // Whether [data, data + size) lies inside one segment.
  bool Contains(const uint8_t* data, int64_t size) const {
    for (const Block& block : blocks_) {
      const uint8_t* begin = block.data.get();
      if (data >= begin && data <= begin + block.size && size <= (begin + block.size) - data) {
        return true;
      }
    }
    return false;
  }

  int64_t segment_size(uint32_t segment_id) const { return blocks_.at(segment_id - kFirstId).size; }
  int lookups() const { return lookups_; }

 private:
  struct AlignedDelete {
    void operator()(uint8_t* data) const { ::operator delete (data, std::align_val_t{64}); }
  };
  struct Block {
    std::unique_ptr<uint8_t, AlignedDelete> data;
    int64_t size = 0;
  };

  std::vector<std::vector<uint8_t>> staging_;
  std::vector<Block> blocks_;
  size_t next_segment_ = 0;
  bool sealed_ = false;
  int lookups_ = 0;
};

inline Result<std::vector<uint8_t>> EncodeBatch(const RecordBatch& batch, FakeSegments* segments,
                                                const Metadata& metadata = {}) {
  FERRY_ASSIGN_OR_RAISE(const int64_t size, EncodedHeaderSize(batch, metadata));
  std::vector<uint8_t> header(static_cast<size_t>(size));
  FERRY_ASSIGN_OR_RAISE(
      const int64_t written,
      EncodeHeader(
          batch, metadata, [&](const Buffer& buffer) { return segments->Locate(buffer); },
          header.data(), size));
  if (written != size) return Status::UnknownError("EncodeHeader wrote a different size");
  segments->Seal();
  return header;
}

inline Result<RecordBatchPtr> DecodeBytes(const uint8_t* header, int64_t size,
                                          const SchemaPtr& schema, FakeSegments* segments,
                                          std::shared_ptr<const void> owner = nullptr,
                                          Metadata* metadata = nullptr,
                                          DecodeOptions options = {}) {
  return DecodeHeader(
      header, size, schema, [&](uint32_t segment_id) { return segments->Lookup(segment_id); },
      std::move(owner), metadata, options);
}

inline Result<RecordBatchPtr> DecodeBatch(const std::vector<uint8_t>& header,
                                          const SchemaPtr& schema, FakeSegments* segments,
                                          std::shared_ptr<const void> owner = nullptr,
                                          Metadata* metadata = nullptr,
                                          DecodeOptions options = {}) {
  return DecodeBytes(header.data(), static_cast<int64_t>(header.size()), schema, segments,
                     std::move(owner), metadata, options);
}

// Every present buffer of the tree lies in a segment and holds `owner`.
inline void ExpectBuffersInSegments(const ArrayData& data, const FakeSegments& segments,
                                    const std::shared_ptr<const void>& owner) {
  for (const BufferPtr& buffer : data.buffers) {
    if (buffer == nullptr) continue;
    EXPECT_TRUE(segments.Contains(buffer->data(), buffer->size()));
    EXPECT_EQ(buffer->owner(), owner);
  }
  for (const ArrayDataPtr& child : data.children) {
    ExpectBuffersInSegments(*child, segments, owner);
  }
  if (data.dictionary) ExpectBuffersInSegments(*data.dictionary, segments, owner);
}

// ---- Sample data of every type, through the generic builder API -------------------------------

inline std::string SampleText(int64_t seed) {
  std::string text;
  // Some values are longer than a view's 12 inline bytes.
  for (int64_t i = 0; i < seed % 17; ++i) text.push_back(static_cast<char>('a' + (seed + i) % 26));
  return text;
}

inline Status AppendText(ArrayBuilder* builder, std::string_view text) {
  if (auto* binary = dynamic_cast<BaseBinaryBuilder<int32_t>*>(builder))
    return binary->Append(text);
  if (auto* large = dynamic_cast<BaseBinaryBuilder<int64_t>*>(builder)) return large->Append(text);
  if (auto* view = dynamic_cast<BinaryViewBuilder*>(builder)) return view->Append(text);
  return Status::TypeError("not a string builder");
}

// Appends one value chosen by `seed`; every fifth slot is null where nulls are allowed.
inline Status AppendSample(ArrayBuilder* builder, int64_t seed, bool allow_null = true) {
  const DataType& type = *builder->type();
  const bool make_null = allow_null && seed % 5 == 2;
  if (type.id == TypeId::kRunEndEncoded) {
    auto* runs = static_cast<RunEndEncodedBuilder*>(builder);
    if (make_null) return runs->AppendNulls(1 + seed % 2);
    FERRY_RETURN_NOT_OK(AppendSample(runs->value_builder(), seed, /*allow_null=*/false));
    return runs->AppendRun(1 + seed % 3);
  }
  if (make_null || type.id == TypeId::kNull) return builder->AppendNull();
  switch (type.id) {
    case TypeId::kBool:
      return static_cast<BooleanBuilder*>(builder)->Append(seed % 3 == 0);
    case TypeId::kBinary:
    case TypeId::kLargeBinary:
    case TypeId::kUtf8:
    case TypeId::kLargeUtf8:
    case TypeId::kBinaryView:
    case TypeId::kUtf8View:
      return AppendText(builder, SampleText(seed));
    case TypeId::kList:
      FERRY_RETURN_NOT_OK(static_cast<ListBuilder*>(builder)->Append());
      break;
    case TypeId::kLargeList:
      FERRY_RETURN_NOT_OK(static_cast<LargeListBuilder*>(builder)->Append());
      break;
    case TypeId::kListView:
      FERRY_RETURN_NOT_OK(static_cast<ListViewBuilder*>(builder)->Append());
      break;
    case TypeId::kLargeListView:
      FERRY_RETURN_NOT_OK(static_cast<LargeListViewBuilder*>(builder)->Append());
      break;
    case TypeId::kFixedSizeList: {
      FERRY_RETURN_NOT_OK(static_cast<FixedSizeListBuilder*>(builder)->Append());
      for (int32_t k = 0; k < type.list_size; ++k) {
        FERRY_RETURN_NOT_OK(AppendSample(builder->child(0), seed * 7 + k));
      }
      return Status::OK();
    }
    case TypeId::kStruct: {
      FERRY_RETURN_NOT_OK(static_cast<StructBuilder*>(builder)->Append());
      for (int child_index = 0; child_index < builder->num_children(); ++child_index) {
        FERRY_RETURN_NOT_OK(AppendSample(builder->child(child_index), seed + child_index + 1));
      }
      return Status::OK();
    }
    case TypeId::kMap: {
      auto* maps = static_cast<MapBuilder*>(builder);
      FERRY_RETURN_NOT_OK(maps->Append());
      for (int64_t k = 0; k < seed % 3; ++k) {
        FERRY_RETURN_NOT_OK(AppendSample(maps->key_builder(), seed * 3 + k, false));
        FERRY_RETURN_NOT_OK(AppendSample(maps->item_builder(), seed * 3 + k));
      }
      return Status::OK();
    }
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion: {
      auto* unions = static_cast<UnionBuilder*>(builder);
      const int8_t code = type.type_codes[static_cast<size_t>(seed) % type.type_codes.size()];
      FERRY_RETURN_NOT_OK(unions->Append(code));
      return AppendSample(unions->child_for_code(code), seed, /*allow_null=*/false);
    }
    case TypeId::kDictionary: {
      auto* dictionary_builder = static_cast<DictionaryBuilder*>(builder);
      const TypeId value_id = type.value_type->id;
      if (value_id == TypeId::kUtf8 || value_id == TypeId::kBinary ||
          value_id == TypeId::kLargeUtf8 || value_id == TypeId::kLargeBinary ||
          value_id == TypeId::kUtf8View || value_id == TypeId::kBinaryView) {
        return dictionary_builder->Append(SampleText(seed % 4 + 13));
      }
      return dictionary_builder->Append(seed % 4);
    }
    default: {
      auto* fixed = dynamic_cast<FixedBytesBuilder*>(builder);
      if (fixed == nullptr) return Status::TypeError("no sample for " + type.ToString());
      std::vector<uint8_t> bytes(static_cast<size_t>(fixed->byte_width()));
      for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<uint8_t>(seed * 31 + j);
      return fixed->AppendBytes(bytes.data());
    }
  }
  // Variable-size lists: 0..3 items.
  for (int64_t k = 0; k < seed % 4; ++k) {
    FERRY_RETURN_NOT_OK(AppendSample(builder->child(0), seed * 5 + k));
  }
  return Status::OK();
}

inline Result<ArrayDataPtr> BuildSamples(const TypePtr& type, int64_t count,
                                         int64_t first_seed = 0) {
  FERRY_ASSIGN_OR_RAISE(auto builder, MakeBuilder(type));
  for (int64_t seed = first_seed; seed < first_seed + count; ++seed) {
    FERRY_RETURN_NOT_OK(AppendSample(builder.get(), seed));
  }
  return builder->Finish();
}

inline std::vector<TypePtr> EveryType() {
  return {
      null(),
      boolean(),
      int8(),
      uint8(),
      int16(),
      uint16(),
      int32(),
      uint32(),
      int64(),
      uint64(),
      float16(),
      float32(),
      float64(),
      decimal(32, 9, 2),
      decimal(64, 18, -3),
      decimal(128, 38, 10),
      decimal(256, 76, 0),
      binary(),
      large_binary(),
      binary_view(),
      utf8(),
      large_utf8(),
      utf8_view(),
      fixed_size_binary(5),
      date32(),
      date64(),
      time32(TimeUnit::kSecond),
      time32(TimeUnit::kMilli),
      time64(TimeUnit::kMicro),
      time64(TimeUnit::kNano),
      timestamp(TimeUnit::kSecond),
      timestamp(TimeUnit::kNano, "Europe/Paris"),
      duration(TimeUnit::kMilli),
      interval_months(),
      interval_day_time(),
      interval_month_day_nano(),
      list(field("item", int32())),
      large_list(field("item", utf8(), /*nullable=*/false)),
      list_view(field("item", int16())),
      large_list_view(field("item", utf8_view())),
      fixed_size_list(field("item", int32()), 3),
      struct_({field("a", int32()), field("b's \\ name", utf8()),
               field("c", list(field("item", int8())))}),
      struct_({}),
      map(utf8(), int64()),
      map(int32(), list(field("item", utf8())), /*keys_sorted=*/true),
      dense_union({field("i", int32()), field("s", utf8())}, {4, 9}),
      sparse_union({field("i", int32()), field("s", utf8()), field("b", boolean())}),
      run_end_encoded(int16(), utf8()),
      run_end_encoded(int32(), float64()),
      run_end_encoded(int64(), list(field("item", int32()))),
      dictionary(int8(), utf8()),
      dictionary(uint32(), int16(), /*ordered=*/true),
      dictionary(int64(), binary()),
      list(field("item",
                 struct_({field("x", float64()),
                          field("y", dense_union({field("u", int8()), field("v", boolean())}))}))),
      struct_({field("inner", fixed_size_list(field("item", sparse_union({field("p", int32()),
                                                                          field("q", utf8())})),
                                              2))}),
      list(field("item", run_end_encoded(int32(), int32()))),
      list(field("item", dictionary(int16(), utf8()))),
      struct_({field("d", dictionary(uint8(), utf8_view()))}),
  };
}

// A batch of two columns: the type under test and an int64 counter.
inline Result<RecordBatchPtr> BatchOf(const TypePtr& type, int64_t rows, int64_t first_seed = 0) {
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr values, BuildSamples(type, rows, first_seed));
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr counter, BuildSamples(int64(), values->length, 100));
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("value", type), field("counter", int64())};
  schema->metadata = {{"origin", "codec_test"}};
  return RecordBatch::Make(schema, values->length, {values, counter});
}

inline void ExpectRoundTrip(const RecordBatch& batch, const Metadata& metadata = {}) {
  FakeSegments segments;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, EncodeBatch(batch, &segments, metadata));
  auto token = std::make_shared<int>(7);
  Metadata decoded_metadata = {{"stale", "entry"}};
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr decoded,
                       DecodeBatch(header, batch.schema(), &segments, token, &decoded_metadata,
                                   DecodeOptions{/*validate_full=*/true}));
  EXPECT_TRUE(decoded->Equals(batch)) << "sent:\n"
                                      << batch.ToString() << "\nreceived:\n"
                                      << decoded->ToString();
  EXPECT_EQ(decoded_metadata, metadata);
  EXPECT_EQ(decoded->schema(), batch.schema());
  for (int column = 0; column < decoded->num_columns(); ++column) {
    ExpectBuffersInSegments(*decoded->column(column), segments, token);
    EXPECT_EQ(decoded->column(column)->offset, batch.column(column)->offset);
    EXPECT_EQ(decoded->column(column)->null_count, batch.column(column)->null_count);
  }
  // The batch is what keeps the drop token alive.
  EXPECT_GT(token.use_count(), 1);
  decoded.reset();
  EXPECT_EQ(token.use_count(), 1);
}

// A batch that touches every kind of record: nulls, absent validity,
// variable-length data, a nested list, a dictionary, views with variadic
// buffers, a union and run-end encoding; and message metadata.
inline Result<RecordBatchPtr> HostileSample() {
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr ints, MakeInt32Array({1, std::nullopt, 3, 4, 5, 6}));
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr texts,
                        MakeUtf8Array({"alpha", "", std::nullopt, "delta", "e", "phi"}));
  const TypePtr list_type = list(field("item", int16()));
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr lists, BuildSamples(list_type, 6));
  const TypePtr dictionary_type = dictionary(int8(), utf8());
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr codes, BuildSamples(dictionary_type, 6));
  BinaryViewBuilder views(utf8_view(), default_memory_pool(), /*block_size=*/20);
  for (int i = 0; i < 6; ++i) {
    FERRY_RETURN_NOT_OK(
        views.Append(i % 2 == 0 ? "tiny" : "a long string value " + std::to_string(i)));
  }
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr view_values, views.Finish());
  const TypePtr union_type = sparse_union({field("i", int32()), field("s", utf8())}, {2, 5});
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr unions, BuildSamples(union_type, 6));
  auto runs_builder_result = MakeBuilder(run_end_encoded(int32(), int64()));
  FERRY_RETURN_NOT_OK(runs_builder_result.status());
  auto* runs = static_cast<RunEndEncodedBuilder*>(runs_builder_result->get());
  FERRY_RETURN_NOT_OK(runs->AppendValueRun<int64_t>(10, 2));
  FERRY_RETURN_NOT_OK(runs->AppendNulls(1));
  FERRY_RETURN_NOT_OK(runs->AppendValueRun<int64_t>(-4, 3));
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr run_values, runs->Finish());

  auto schema = std::make_shared<Schema>();
  schema->fields = {field("ints", int32()),         field("texts", utf8()),
                    field("lists", list_type),      field("codes", dictionary_type),
                    field("views", utf8_view()),    field("unions", union_type),
                    field("runs", run_values->type)};
  return RecordBatch::Make(schema, 6, {ints, texts, lists, codes, view_values, unions, run_values});
}

}  // namespace ferry::flow::wire
