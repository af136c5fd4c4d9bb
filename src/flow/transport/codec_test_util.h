// Shared by the batch-header and schema codec tests: a fake segment table
// standing in for shared memory, encode/decode helpers over it, and sample
// batches built from testing/sample_arrays.h. Test-only.
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
#include "testing/sample_arrays.h"
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

// ---- Sample batches (the sample arrays come from testing/sample_arrays.h) -------------------

using ::ferry::testing::BuildSamples;
using ::ferry::testing::EveryType;

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
