#include "flow/transport/batch_header.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ferry/exchange/builder.h"
#include "ferry/exchange/validate.h"
#include "flow/transport/codec_test_util.h"
#include "flow/transport/schema_codec.h"
#include "testing/test_util.h"

namespace ferry::flow::wire {
namespace {

using ::testing::HasSubstr;

// ---- Header field positions (see batch_header.h)---------------------------------------------

constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 4;
constexpr size_t kFlagsAt = 6;
constexpr size_t kTotalSizeAt = 8;
constexpr size_t kNumRowsAt = 16;
constexpr size_t kColumnCountAt = 24;
constexpr size_t kNodeCountAt = 28;
constexpr size_t kBufferCountAt = 32;
constexpr size_t kMetadataCountAt = 36;
constexpr size_t kMetadataBytesAt = 40;
constexpr size_t kReservedAt = 44;
// Within a node record.
constexpr size_t kNodeLengthAt = 0;
constexpr size_t kNodeNullCountAt = 8;
constexpr size_t kNodeOffsetAt = 16;
constexpr size_t kNodeBuffersAt = 24;
constexpr size_t kNodeChildrenAt = 28;
constexpr size_t kNodeTypeIdAt = 32;
constexpr size_t kNodeHasDictionaryAt = 33;
constexpr size_t kNodeReservedAt = 34;
// Within a buffer record.
constexpr size_t kBufferSegmentAt = 0;
constexpr size_t kBufferReservedAt = 4;
constexpr size_t kBufferOffsetAt = 8;
constexpr size_t kBufferLengthAt = 16;

template <typename T>
void Poke(std::vector<uint8_t>* bytes, size_t at, T value) {
  std::memcpy(bytes->data() + at, &value, sizeof(T));
}
template <typename T>
T Peek(const std::vector<uint8_t>& bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

size_t RecordsStart(const std::vector<uint8_t>& header) {
  const auto metadata_bytes = Peek<uint32_t>(header, kMetadataBytesAt);
  return static_cast<size_t>(kHeaderPrefixSize) + ((metadata_bytes + 7) & ~7u);
}

// ---- FunctionRef
// ---------------------------------------------------------------------------------

TEST(FunctionRefTest, CallsTheReferencedCallableWithoutCopyingIt) {
  int calls = 0;
  auto add = [&calls](int value) {
    ++calls;
    return value + 1;
  };
  FunctionRef<int(int)> reference = add;
  EXPECT_EQ(reference(41), 42);
  EXPECT_EQ(reference(1), 2);
  EXPECT_EQ(calls, 2);
  const auto constant = [](int value) { return value * 2; };
  EXPECT_EQ(FunctionRef<int(int)>(constant)(4), 8);
}

// ---- Header round trips -------------------------------------------------------------------------

TEST(HeaderRoundTripTest, EveryType) {
  for (const TypePtr& type : EveryType()) {
    SCOPED_TRACE(type->ToString());
    ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, BatchOf(type, 23));
    ExpectRoundTrip(*batch);
  }
}

TEST(HeaderRoundTripTest, EveryTypeSlicedAtEveryOffset) {
  for (const TypePtr& type : EveryType()) {
    SCOPED_TRACE(type->ToString());
    ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, BatchOf(type, 9, 3));
    for (int64_t offset = 0; offset <= batch->num_rows(); offset += 2) {
      for (int64_t length : {int64_t{0}, int64_t{1}, int64_t{4}, batch->num_rows()}) {
        SCOPED_TRACE("offset " + std::to_string(offset) + " length " + std::to_string(length));
        RecordBatchPtr slice = batch->Slice(offset, length);
        ExpectRoundTrip(*slice);
      }
    }
  }
}

TEST(HeaderRoundTripTest, ZeroRowsOfEveryType) {
  for (const TypePtr& type : EveryType()) {
    SCOPED_TRACE(type->ToString());
    ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, BatchOf(type, 0));
    ASSERT_EQ(batch->num_rows(), 0);
    ExpectRoundTrip(*batch);
  }
}

TEST(HeaderRoundTripTest, BatchWithoutColumns) {
  auto schema = std::make_shared<Schema>();
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, RecordBatch::Make(schema, 12, {}));
  FakeSegments segments;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, EncodeBatch(*batch, &segments));
  EXPECT_EQ(header.size(), static_cast<size_t>(kHeaderPrefixSize));
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr decoded, DecodeBatch(header, schema, &segments));
  EXPECT_EQ(decoded->num_rows(), 12);
  EXPECT_EQ(decoded->num_columns(), 0);
  EXPECT_EQ(segments.lookups(), 0);
}

TEST(HeaderRoundTripTest, SampleBatchWithMetadata) {
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, MakeSampleBatch(100));
  const Metadata metadata = {{"trace_id", "abc123"},
                             {"", ""},
                             {"trace_id", "repeated key"},
                             {"binary", std::string("\0\xff\x01", 3)},
                             {"odd", "lengths!"}};
  ExpectRoundTrip(*batch, metadata);
  ExpectRoundTrip(*batch->Slice(17, 50), metadata);
}

TEST(HeaderRoundTripTest, AbsentBuffersTravelAsTheSentinel) {
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, MakeInt32Array({1, 2, 3}));
  ASSERT_EQ(values->buffers[0], nullptr);  // no nulls, no validity bitmap
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("x", int32())};
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, RecordBatch::Make(schema, 3, {values}));
  FakeSegments segments;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, EncodeBatch(*batch, &segments));
  const size_t validity_record = RecordsStart(header) + kNodeRecordSize;
  EXPECT_EQ(Peek<uint32_t>(header, validity_record + kBufferSegmentAt), kAbsentSegment);
  EXPECT_EQ(Peek<uint64_t>(header, validity_record + kBufferOffsetAt), 0u);
  EXPECT_EQ(Peek<uint64_t>(header, validity_record + kBufferLengthAt), 0u);
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr decoded, DecodeBatch(header, schema, &segments));
  EXPECT_EQ(decoded->column(0)->buffers[0], nullptr);
  EXPECT_TRUE(decoded->Equals(*batch));
}

TEST(HeaderRoundTripTest, ViewColumnsCarryTheirVariadicBufferCount) {
  BinaryViewBuilder builder(utf8_view(), default_memory_pool(), /*block_size=*/32);
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(builder.Append("a value longer than twelve bytes #" + std::to_string(i)));
  }
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append("short"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, builder.Finish());
  ASSERT_GT(values->buffers.size(), 5u);
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("text", utf8_view())};
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, RecordBatch::Make(schema, values->length, {values}));
  FakeSegments segments;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, EncodeBatch(*batch, &segments));
  EXPECT_EQ(Peek<uint32_t>(header, RecordsStart(header) + kNodeBuffersAt), values->buffers.size());
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr decoded,
                       DecodeBatch(header, schema, &segments, nullptr, nullptr,
                                   DecodeOptions{/*validate_full=*/true}));
  EXPECT_EQ(decoded->column(0)->buffers.size(), values->buffers.size());
  EXPECT_TRUE(decoded->Equals(*batch));
  ExpectRoundTrip(*batch->Slice(3, 10));
}

TEST(HeaderRoundTripTest, LargeHeadersAreCopiedToTheHeap) {
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, MakeWideBatch(200, 3));
  FakeSegments segments;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, EncodeBatch(*batch, &segments));
  ASSERT_GT(header.size(), 4096u);
  ExpectRoundTrip(*batch);
}

TEST(HeaderRoundTripTest, BytesAfterTotalSizeAreIgnored) {
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, MakeSampleBatch(5));
  FakeSegments segments;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, EncodeBatch(*batch, &segments));
  std::vector<uint8_t> slot = header;
  slot.resize(header.size() + 100, 0xAB);
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr decoded, DecodeBatch(slot, batch->schema(), &segments));
  EXPECT_TRUE(decoded->Equals(*batch));
}

TEST(HeaderRoundTripTest, LayoutMatchesTheDocumentedFormula) {
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, MakeSampleBatch(10));
  const Metadata metadata = {{"k", "value"}};  // 8 + 1 + 5 = 14 bytes, padded to 16
  FakeSegments segments;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, EncodeBatch(*batch, &segments, metadata));
  // id, score: 1 node and 2 buffers each; name utf8: 1 node, 3 buffers; tags
  // list<utf8>: 2 nodes, 2 + 3 buffers.
  EXPECT_EQ(Peek<uint32_t>(header, kMagicAt), kHeaderMagic);
  EXPECT_EQ(Peek<uint16_t>(header, kVersionAt), kHeaderVersion);
  EXPECT_EQ(Peek<uint32_t>(header, kColumnCountAt), 4u);
  EXPECT_EQ(Peek<uint32_t>(header, kNodeCountAt), 5u);
  EXPECT_EQ(Peek<uint32_t>(header, kBufferCountAt), 12u);
  EXPECT_EQ(Peek<uint32_t>(header, kMetadataCountAt), 1u);
  EXPECT_EQ(Peek<uint32_t>(header, kMetadataBytesAt), 14u);
  EXPECT_EQ(Peek<int64_t>(header, kNumRowsAt), 10);
  const uint64_t expected = kHeaderPrefixSize + 16 + 5 * kNodeRecordSize + 12 * kBufferRecordSize;
  EXPECT_EQ(Peek<uint64_t>(header, kTotalSizeAt), expected);
  EXPECT_EQ(header.size(), expected);
  ASSERT_OK_AND_ASSIGN(int64_t size, EncodedHeaderSize(*batch, metadata));
  EXPECT_EQ(size, static_cast<int64_t>(expected));
}

// ---- Encoding errors ---------------------------------------------------------------------------

TEST(EncodeHeaderTest, TooSmallOutputSaysHowManyBytesItNeeds) {
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, MakeSampleBatch(4));
  ASSERT_OK_AND_ASSIGN(const int64_t size, EncodedHeaderSize(*batch, {}));
  FakeSegments segments;
  std::vector<uint8_t> out(static_cast<size_t>(size));
  for (int64_t out_size : {int64_t{0}, int64_t{47}, int64_t{48}, size / 2, size - 1}) {
    SCOPED_TRACE(out_size);
    auto written = EncodeHeader(
        *batch, {}, [&](const Buffer& buffer) { return segments.Locate(buffer); }, out.data(),
        out_size);
    ASSERT_FALSE(written.ok());
    EXPECT_EQ(written.status().code(), StatusCode::kInvalid);
    if (out_size >= kHeaderPrefixSize) {
      EXPECT_THAT(written.status().message(), HasSubstr("needs " + std::to_string(size)));
    } else {
      EXPECT_THAT(written.status().message(), HasSubstr("at least 48 bytes"));
    }
  }
  auto written = EncodeHeader(
      *batch, {}, [&](const Buffer& buffer) { return segments.Locate(buffer); }, out.data(), size);
  ASSERT_OK(written);
  EXPECT_EQ(*written, size);
}

TEST(EncodeHeaderTest, LocateErrorsNameTheColumnAndBuffer) {
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, MakeSampleBatch(4));
  std::vector<uint8_t> out(4096);
  int calls = 0;
  auto failing = [&](const Buffer& buffer) -> Result<BufferLocation> {
    if (++calls == 3) return Status::Invalid("buffer is not in loaned memory");
    return BufferLocation{1, 0, static_cast<uint64_t>(buffer.size())};
  };
  auto written = EncodeHeader(*batch, {}, failing, out.data(), 4096);
  ASSERT_FALSE(written.ok());
  EXPECT_THAT(written.status().message(), HasSubstr("not in loaned memory"));
  EXPECT_THAT(written.status().message(), HasSubstr("col '"));
  EXPECT_THAT(written.status().message(), HasSubstr("buffer "));
}

TEST(EncodeHeaderTest, LocateMustReportTheBufferLengthAndAValidSegment) {
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, MakeInt32Array({1, 2, 3}));
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("x", int32())};
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, RecordBatch::Make(schema, 3, {values}));
  std::vector<uint8_t> out(4096);
  auto short_length = [](const Buffer& buffer) -> Result<BufferLocation> {
    return BufferLocation{1, 0, static_cast<uint64_t>(buffer.size()) - 1};
  };
  auto written = EncodeHeader(*batch, {}, short_length, out.data(), 4096);
  ASSERT_FALSE(written.ok());
  EXPECT_THAT(written.status().message(), HasSubstr("col 'x': buffer 1 of 12 bytes"));
  auto reserved_segment = [](const Buffer& buffer) -> Result<BufferLocation> {
    return BufferLocation{kAbsentSegment, 0, static_cast<uint64_t>(buffer.size())};
  };
  written = EncodeHeader(*batch, {}, reserved_segment, out.data(), 4096);
  ASSERT_FALSE(written.ok());
  EXPECT_THAT(written.status().message(), HasSubstr("reserved segment id"));
  auto good = [](const Buffer& buffer) -> Result<BufferLocation> {
    return BufferLocation{1, 64, static_cast<uint64_t>(buffer.size())};
  };
  ASSERT_OK(EncodeHeader(*batch, {}, good, out.data(), 4096));
}

TEST(EncodeHeaderTest, MalformedArraysAreRefusedWithTheirPath) {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("points", list(field("item", int32())))};
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr good, BuildSamples(schema->fields[0].type, 4));
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, RecordBatch::Make(schema, 4, {good}));
  ASSERT_OK(EncodedHeaderSize(*batch, {}));

  auto bad_child = std::make_shared<ArrayData>(*good->children[0]);
  bad_child->buffers.push_back(nullptr);  // int32 with three buffers
  auto bad = std::make_shared<ArrayData>(*good);
  bad->children[0] = bad_child;
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr bad_batch, RecordBatch::Make(schema, 4, {bad}));
  auto size = EncodedHeaderSize(*bad_batch, {});
  ASSERT_FALSE(size.ok());
  EXPECT_THAT(size.status().message(),
              HasSubstr("col 'points'.item: array has 3 buffers but type int32 needs 2"));

  auto missing_children = std::make_shared<ArrayData>(*good);
  missing_children->children.clear();
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr childless, RecordBatch::Make(schema, 4, {missing_children}));
  size = EncodedHeaderSize(*childless, {});
  ASSERT_FALSE(size.ok());
  EXPECT_THAT(size.status().message(), HasSubstr("array has 0 children"));

  auto with_dictionary = std::make_shared<ArrayData>(*good);
  with_dictionary->dictionary = good->children[0];
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr dictionary_batch,
                       RecordBatch::Make(schema, 4, {with_dictionary}));
  size = EncodedHeaderSize(*dictionary_batch, {});
  ASSERT_FALSE(size.ok());
  EXPECT_THAT(size.status().message(), HasSubstr("dictionary given for a non-dictionary type"));
}

TEST(EncodeHeaderTest, NestingDeeperThanTheLimitIsRefused) {
  TypePtr type = int32();
  for (int level = 0; level <= kMaxNestingDepth + 1; ++level) type = list(field("item", type));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr nulls, MakeArrayOfNulls(type, 1));
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("deep", type)};
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, RecordBatch::Make(schema, 1, {nulls}));
  auto size = EncodedHeaderSize(*batch, {});
  ASSERT_FALSE(size.ok());
  EXPECT_THAT(size.status().message(), HasSubstr("nesting deeper than 128"));
  auto encoded = EncodeSchema(*schema);
  ASSERT_FALSE(encoded.ok());
  EXPECT_THAT(encoded.status().message(), HasSubstr("nesting deeper than 128"));
}

// ---- Hostile headers
// ------------------------------------------------------------------------------

const Metadata kHostileMetadata = {{"key", "value"}, {"x", ""}};

class HostileHeaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto batch = HostileSample();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    batch_ = *batch;
    auto header = EncodeBatch(*batch_, &segments_, kHostileMetadata);
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    header_ = *header;
  }

  // Decodes `header` from an exact-size heap copy (ASan sees over-reads).
  Result<RecordBatchPtr> Decode(const std::vector<uint8_t>& header,
                                std::shared_ptr<const void> owner = nullptr,
                                DecodeOptions options = {}) {
    auto copy = std::make_unique<uint8_t[]>(header.size());
    if (!header.empty()) std::memcpy(copy.get(), header.data(), header.size());
    return DecodeBytes(copy.get(), static_cast<int64_t>(header.size()), batch_->schema(),
                       &segments_, std::move(owner), nullptr, options);
  }

  // Expects `header` to be refused with a message containing `expected`.
  void ExpectRejected(const std::vector<uint8_t>& header, const std::string& expected) {
    auto token = std::make_shared<int>(0);
    auto decoded = Decode(header, token);
    ASSERT_FALSE(decoded.ok()) << "accepted:\n" << (*decoded)->ToString();
    EXPECT_EQ(decoded.status().code(), StatusCode::kInvalid) << decoded.status().ToString();
    EXPECT_THAT(decoded.status().message(), HasSubstr(expected));
    EXPECT_EQ(token.use_count(), 1) << "a rejected message must not keep its drop token";
  }

  // Offsets of the node and buffer records, in record order.
  void RecordPositions(std::vector<size_t>* nodes, std::vector<size_t>* buffers) const {
    const uint32_t node_count = Peek<uint32_t>(header_, kNodeCountAt);
    size_t at = RecordsStart(header_);
    for (uint32_t node = 0; node < node_count; ++node) {
      nodes->push_back(at);
      const uint32_t buffer_count = Peek<uint32_t>(header_, at + kNodeBuffersAt);
      at += kNodeRecordSize;
      for (uint32_t buffer = 0; buffer < buffer_count; ++buffer) {
        buffers->push_back(at);
        at += kBufferRecordSize;
      }
    }
  }

  // Checks that an accepted (mutated) header gave a batch that is safe to use.
  void CheckAcceptedBatch(const RecordBatch& batch, const std::shared_ptr<const void>& owner) {
    for (int column = 0; column < batch.num_columns(); ++column) {
      ExpectBuffersInSegments(*batch.column(column), segments_, owner);
    }
    if (ValidateFull(batch).ok()) {
      // Fully valid data may be read by anyone: exercise every value.
      EXPECT_FALSE(batch.ToString().empty());
      EXPECT_TRUE(batch.Equals(batch));
    }
  }

  FakeSegments segments_;
  RecordBatchPtr batch_;
  std::vector<uint8_t> header_;
};

TEST_F(HostileHeaderTest, ThePristineHeaderDecodes) {
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr decoded,
                       Decode(header_, nullptr, DecodeOptions{/*validate_full=*/true}));
  EXPECT_TRUE(decoded->Equals(*batch_));
}

TEST_F(HostileHeaderTest, TruncationAtEveryByteIsAnError) {
  for (size_t size = 0; size < header_.size(); ++size) {
    SCOPED_TRACE(size);
    std::vector<uint8_t> truncated(header_.begin(), header_.begin() + static_cast<long>(size));
    ExpectRejected(truncated, "truncated");
  }
  auto null_header = DecodeBytes(nullptr, 100, batch_->schema(), &segments_);
  ASSERT_FALSE(null_header.ok());
  EXPECT_THAT(null_header.status().message(), HasSubstr("truncated: 0 bytes"));
}

TEST_F(HostileHeaderTest, PrefixFieldsAreChecked) {
  std::vector<uint8_t> header = header_;
  Poke<uint32_t>(&header, kMagicAt, 0x12345678);
  ExpectRejected(header, "bad magic");

  header = header_;
  Poke<uint16_t>(&header, kVersionAt, 2);
  ExpectRejected(header, "unsupported version 2 (expected 1)");

  header = header_;
  Poke<uint16_t>(&header, kFlagsAt, 1);
  ExpectRejected(header, "unknown flags or reserved bytes");

  header = header_;
  Poke<uint32_t>(&header, kReservedAt, 1);
  ExpectRejected(header, "unknown flags or reserved bytes");

  header = header_;
  Poke<uint64_t>(&header, kTotalSizeAt, header.size() - 8);
  ExpectRejected(header, "total_size is " + std::to_string(header.size() - 8) + " but");

  header = header_;
  Poke<uint64_t>(&header, kTotalSizeAt, std::numeric_limits<uint64_t>::max());
  ExpectRejected(header, "truncated: total_size is 18446744073709551615");

  header = header_;
  Poke<int64_t>(&header, kNumRowsAt, -1);
  ExpectRejected(header, "num_rows is negative");

  header = header_;
  Poke<int64_t>(&header, kNumRowsAt, 5);
  ExpectRejected(header, "has 6 rows");

  header = header_;
  Poke<uint32_t>(&header, kColumnCountAt, 6);
  ExpectRejected(header, "the header has 6 columns but the schema 7");
}

TEST_F(HostileHeaderTest, HugeTotalSizesAreRefusedBeforeCopying) {
  std::vector<uint8_t> header = header_;
  const uint64_t huge = static_cast<uint64_t>(kMaxEncodedSize) + 8;
  Poke<uint64_t>(&header, kTotalSizeAt, huge);
  // Claim a huge slot: the limit must refuse it without reading that far.
  auto decoded = DecodeBytes(header.data(), int64_t{1} << 40, batch_->schema(), &segments_);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("exceeds the limit"));
}

TEST_F(HostileHeaderTest, CountsMustMatchTheSizeAndTheSchema) {
  // node_count / buffer_count that disagree with total_size.
  for (size_t at : {kNodeCountAt, kBufferCountAt, kMetadataBytesAt}) {
    for (uint32_t value : {0u, 0xFFFFFFFFu, Peek<uint32_t>(header_, at) + 8}) {
      std::vector<uint8_t> header = header_;
      Poke<uint32_t>(&header, at, value);
      ExpectRejected(header, "total_size is");
    }
  }
  // 25 metadata bytes padded to 32: one more still pads to 32, but is not parsed.
  ASSERT_EQ(Peek<uint32_t>(header_, kMetadataBytesAt), 25u);
  std::vector<uint8_t> longer = header_;
  Poke<uint32_t>(&longer, kMetadataBytesAt, 26);
  ExpectRejected(longer, "the metadata section has 1 bytes after its 2 pairs");
  // Non-zero padding.
  longer = header_;
  longer[kHeaderPrefixSize + 30] = 1;
  ExpectRejected(longer, "metadata padding is not zero");
  // One more node record than the schema needs, with a consistent total size.
  std::vector<uint8_t> header = header_;
  header.insert(header.end(), kNodeRecordSize, 0);
  Poke<uint32_t>(&header, kNodeCountAt, Peek<uint32_t>(header_, kNodeCountAt) + 1);
  Poke<uint64_t>(&header, kTotalSizeAt, header.size());
  ExpectRejected(header, "1 nodes and 0 buffers more than the schema describes");
  // A huge metadata count in a consistent header.
  header = header_;
  Poke<uint32_t>(&header, kMetadataCountAt, 0xFFFFFFFFu);
  ExpectRejected(header, "4294967295 metadata pairs cannot fit");
  header = header_;
  Poke<uint32_t>(&header, kMetadataCountAt, 1);
  ExpectRejected(header, "bytes after its 1 pairs");
  header = header_;
  Poke<uint32_t>(&header, kMetadataCountAt, 3);
  ExpectRejected(header, "metadata pair 2 runs past the end");
}

TEST_F(HostileHeaderTest, NodeFieldsAreChecked) {
  std::vector<size_t> nodes;
  std::vector<size_t> buffers;
  RecordPositions(&nodes, &buffers);
  const size_t ints = nodes[0];
  const size_t list_node = nodes[2];  // after ints and texts

  std::vector<uint8_t> header = header_;
  Poke<uint8_t>(&header, ints + kNodeTypeIdAt, static_cast<uint8_t>(TypeId::kInt64));
  ExpectRejected(header, "col 'ints': node has type int64 but the schema declares int32");
  Poke<uint8_t>(&header, ints + kNodeTypeIdAt, 200);
  ExpectRejected(header, "unknown type id 200");

  header = header_;
  Poke<int64_t>(&header, ints + kNodeLengthAt, -3);
  ExpectRejected(header, "col 'ints': length is negative (-3)");

  header = header_;
  Poke<int64_t>(&header, ints + kNodeOffsetAt, -1);
  ExpectRejected(header, "col 'ints': offset is negative");

  header = header_;
  Poke<int64_t>(&header, ints + kNodeOffsetAt, std::numeric_limits<int64_t>::max());
  ExpectRejected(header, "offset + length overflows int64");

  header = header_;
  Poke<int64_t>(&header, ints + kNodeNullCountAt, 7);
  ExpectRejected(header, "null_count 7 is outside -1..6");
  Poke<int64_t>(&header, ints + kNodeNullCountAt, -2);
  ExpectRejected(header, "null_count -2 is outside -1..6");

  header = header_;
  Poke<uint32_t>(&header, ints + kNodeBuffersAt, 3);
  ExpectRejected(header, "col 'ints': node has 3 buffers but type int32 needs 2");

  header = header_;
  Poke<uint32_t>(&header, list_node + kNodeChildrenAt, 2);
  ExpectRejected(header, "col 'lists': node has 2 children but type list<item: int16> needs 1");

  header = header_;
  Poke<uint8_t>(&header, ints + kNodeHasDictionaryAt, 1);
  ExpectRejected(header, "has_dictionary is 1 but type int32 has none");

  header = header_;
  Poke<uint8_t>(&header, nodes[4] + kNodeHasDictionaryAt, 0);  // the dictionary column
  ExpectRejected(header, "col 'codes': has_dictionary is 0");

  header = header_;
  Poke<uint8_t>(&header, ints + kNodeReservedAt, 1);
  ExpectRejected(header, "reserved node bytes are not zero");

  // A child's error names its path.
  header = header_;
  Poke<int64_t>(&header, nodes[3] + kNodeLengthAt, -1);
  ExpectRejected(header, "col 'lists'.item: length is negative");
}

TEST_F(HostileHeaderTest, ViewBufferCountsAreBoundedByTheHeader) {
  std::vector<size_t> nodes;
  std::vector<size_t> buffers;
  RecordPositions(&nodes, &buffers);
  size_t view_node = 0;
  for (size_t at : nodes) {
    if (Peek<uint8_t>(header_, at + kNodeTypeIdAt) == static_cast<uint8_t>(TypeId::kUtf8View)) {
      view_node = at;
    }
  }
  ASSERT_NE(view_node, 0u);
  std::vector<uint8_t> header = header_;
  Poke<uint32_t>(&header, view_node + kNodeBuffersAt, 0xFFFFFFFFu);
  ExpectRejected(header, "buffers but only");
  Poke<uint32_t>(&header, view_node + kNodeBuffersAt, 1);
  ExpectRejected(header, "node has 1 buffers but type string_view needs 2 or more");
}

TEST_F(HostileHeaderTest, BufferRangesMustLieInsideTheirSegment) {
  std::vector<size_t> nodes;
  std::vector<size_t> buffers;
  RecordPositions(&nodes, &buffers);
  const size_t values = buffers[1];  // ints: the data buffer
  const uint32_t segment_id = Peek<uint32_t>(header_, values + kBufferSegmentAt);
  const auto segment_size = static_cast<uint64_t>(segments_.segment_size(segment_id));

  struct Range {
    uint64_t offset;
    uint64_t length;
  };
  for (const Range range :
       {Range{segment_size - 1, 24}, Range{segment_size + 1, 0},
        Range{std::numeric_limits<uint64_t>::max(), 1},
        Range{1, std::numeric_limits<uint64_t>::max()},
        Range{std::numeric_limits<uint64_t>::max() - 3, 8}, Range{0, segment_size + 1}}) {
    SCOPED_TRACE(std::to_string(range.offset) + " + " + std::to_string(range.length));
    std::vector<uint8_t> header = header_;
    Poke<uint64_t>(&header, values + kBufferOffsetAt, range.offset);
    Poke<uint64_t>(&header, values + kBufferLengthAt, range.length);
    ExpectRejected(header, "col 'ints': buffer 1 (offset " + std::to_string(range.offset));
  }
  // Inside the segment but too short for six int32 values: validation says so.
  std::vector<uint8_t> header = header_;
  Poke<uint64_t>(&header, values + kBufferLengthAt, 8);
  ExpectRejected(header, "col 'ints'");
  // The very end of the segment, with length 0, is a valid empty range.
  header = header_;
  Poke<uint64_t>(&header, buffers[0] + kBufferOffsetAt, segment_size);
  Poke<uint64_t>(&header, buffers[0] + kBufferLengthAt, 0);
  Poke<uint32_t>(&header, buffers[0] + kBufferSegmentAt, segment_id);
  ExpectRejected(header, "col 'ints'");  // a 0-byte validity bitmap for 1 null
}

TEST_F(HostileHeaderTest, UnknownSegmentsAndBadAbsentRecordsAreErrors) {
  std::vector<size_t> nodes;
  std::vector<size_t> buffers;
  RecordPositions(&nodes, &buffers);
  std::vector<uint8_t> header = header_;
  Poke<uint32_t>(&header, buffers[1] + kBufferSegmentAt, 1000);
  ExpectRejected(header, "col 'ints': buffer 1: segment 1000: unknown segment id 1000");

  header = header_;
  Poke<uint32_t>(&header, buffers[1] + kBufferReservedAt, 5);
  ExpectRejected(header, "buffer 1: reserved bytes are not zero");

  // texts has no absent buffer; find an absent one (the list's validity has
  // nulls, so take the views' validity: no nulls there).
  size_t absent = 0;
  for (size_t at : buffers) {
    if (Peek<uint32_t>(header_, at + kBufferSegmentAt) == kAbsentSegment) absent = at;
  }
  ASSERT_NE(absent, 0u);
  header = header_;
  Poke<uint64_t>(&header, absent + kBufferLengthAt, 4);
  ExpectRejected(header, "is absent but has offset 0 and length 4");
}

TEST_F(HostileHeaderTest, DecodingAgainstAnotherSchemaIsAnError) {
  auto other = std::make_shared<Schema>(*batch_->schema());
  other->fields[1] = field("texts", large_utf8());
  auto decoded = DecodeBatch(header_, other, &segments_);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(),
              HasSubstr("col 'texts': node has type string but the schema declares large_string"));
  auto fewer = std::make_shared<Schema>(*batch_->schema());
  fewer->fields.pop_back();
  decoded = DecodeBatch(header_, fewer, &segments_);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("7 columns but the schema 6"));
  decoded = DecodeBatch(header_, nullptr, &segments_);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("no schema"));
}

TEST_F(HostileHeaderTest, StructuralValidationRunsAndFullValidationIsOptional) {
  // Point the texts' offsets at the ints' values: 1, (null), 3, 4, 5, 6 read as
  // offsets are non-decreasing except for the null slot's garbage... make
  // them plainly decreasing instead with a fresh buffer in a new header.
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("s", utf8())};
  std::vector<int32_t> offsets = {0, 4, 2, 6};  // not monotonic, but the last offset fits
  ASSERT_OK_AND_ASSIGN(BufferPtr offset_buffer, Buffer::CopyOf(offsets.data(), 16));
  ASSERT_OK_AND_ASSIGN(BufferPtr data_buffer, Buffer::CopyOf("abcdef", 6));
  auto column = std::make_shared<ArrayData>();
  column->type = utf8();
  column->length = 3;
  column->buffers = {nullptr, offset_buffer, data_buffer};
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, RecordBatch::Make(schema, 3, {column}));
  FakeSegments segments;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, EncodeBatch(*batch, &segments));
  ASSERT_OK(DecodeBatch(header, schema, &segments));
  auto full = DecodeBatch(header, schema, &segments, nullptr, nullptr,
                          DecodeOptions{/*validate_full=*/true});
  ASSERT_FALSE(full.ok());
  EXPECT_THAT(full.status().message(), HasSubstr("message header: col 's'"));
  EXPECT_THAT(full.status().message(), HasSubstr("non-decreasing"));

  // A last offset beyond the data is a structural error.
  offsets = {0, 1, 2, 60};
  ASSERT_OK_AND_ASSIGN(offset_buffer, Buffer::CopyOf(offsets.data(), 16));
  column->buffers[1] = offset_buffer;
  ASSERT_OK_AND_ASSIGN(batch, RecordBatch::Make(schema, 3, {column}));
  FakeSegments more_segments;
  ASSERT_OK_AND_ASSIGN(header, EncodeBatch(*batch, &more_segments));
  auto structural = DecodeBatch(header, schema, &more_segments);
  ASSERT_FALSE(structural.ok());
  EXPECT_THAT(structural.status().message(), HasSubstr("message header: col 's'"));
}

TEST_F(HostileHeaderTest, TheHeaderIsReadOnceEvenIfTheSenderKeepsWriting) {
  // The lookup runs in the middle of decoding: it scribbles over the whole
  // header (as a hostile sender could) and the decode must still use what
  // it saw first.
  std::vector<uint8_t> shared = header_;
  auto decoded = DecodeHeader(
      shared.data(), static_cast<int64_t>(shared.size()), batch_->schema(),
      [&](uint32_t segment_id) {
        std::memset(shared.data(), 0xFF, shared.size());
        return segments_.Lookup(segment_id);
      },
      nullptr, nullptr);
  ASSERT_OK(decoded);
  EXPECT_TRUE((*decoded)->Equals(*batch_));
}

TEST_F(HostileHeaderTest, EveryBitFlipIsRejectedOrSafe) {
  // Flipping any bit of the prefix (outside the metadata) or of a node's
  // type, counts, dictionary flag or reserved bytes must be rejected;
  // elsewhere a flip may still describe a structurally valid batch, which
  // must then be safe to use.
  std::vector<size_t> nodes;
  std::vector<size_t> buffers;
  RecordPositions(&nodes, &buffers);
  std::vector<bool> must_reject(header_.size(), false);
  for (size_t at = 0; at < static_cast<size_t>(kHeaderPrefixSize); ++at) must_reject[at] = true;
  for (size_t node : nodes) {
    for (size_t at = node + kNodeBuffersAt; at < node + kNodeRecordSize; ++at) {
      must_reject[at] = true;
    }
  }
  for (size_t buffer : buffers) {
    for (size_t at = buffer + kBufferReservedAt; at < buffer + kBufferOffsetAt; ++at) {
      must_reject[at] = true;
    }
  }
  int rejected = 0;
  int accepted = 0;
  for (size_t byte = 0; byte < header_.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> header = header_;
      header[byte] ^= static_cast<uint8_t>(1u << bit);
      auto token = std::make_shared<int>(0);
      auto decoded = Decode(header, token);
      if (!decoded.ok()) {
        ++rejected;
        EXPECT_EQ(decoded.status().code(), StatusCode::kInvalid) << decoded.status().ToString();
        EXPECT_THAT(decoded.status().message(), HasSubstr("message header"));
        EXPECT_EQ(token.use_count(), 1);
        continue;
      }
      ++accepted;
      EXPECT_FALSE(must_reject[byte])
          << "flip of byte " << byte << " bit " << bit << " was accepted";
      CheckAcceptedBatch(**decoded, token);
    }
  }
  EXPECT_GT(rejected, accepted);
  // The header itself was never damaged: it still decodes to the same batch.
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr decoded, Decode(header_));
  EXPECT_TRUE(decoded->Equals(*batch_));
}

TEST_F(HostileHeaderTest, RandomFieldValuesAreRejectedOrSafe) {
  std::mt19937_64 random(20240917);
  const std::vector<uint64_t> interesting = {0,
                                             1,
                                             7,
                                             8,
                                             63,
                                             64,
                                             0x7FFFFFFF,
                                             0x80000000,
                                             0xFFFFFFFF,
                                             0x100000000,
                                             static_cast<uint64_t>(INT64_MAX),
                                             static_cast<uint64_t>(INT64_MIN),
                                             UINT64_MAX,
                                             UINT64_MAX - 7};
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> header = header_;
    const int changes = 1 + static_cast<int>(random() % 3);
    for (int change = 0; change < changes; ++change) {
      // A 1-, 4- or 8-byte field at a random aligned position.
      const size_t width = size_t{1} << (random() % 3 == 0 ? 0 : (random() % 2 == 0 ? 2 : 3));
      const size_t at = (random() % (header.size() / width)) * width;
      const uint64_t value =
          random() % 2 == 0 ? interesting[random() % interesting.size()] : random();
      std::memcpy(header.data() + at, &value, width);
    }
    auto token = std::make_shared<int>(0);
    auto decoded = Decode(header, token);
    if (!decoded.ok()) {
      ++rejected;
      EXPECT_EQ(token.use_count(), 1);
      continue;
    }
    CheckAcceptedBatch(**decoded, token);
  }
  EXPECT_GT(rejected, 1500);
}

TEST_F(HostileHeaderTest, RandomBytesAreRejected) {
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<uint8_t> header(static_cast<size_t>(random() % 600));
    for (uint8_t& byte : header) byte = static_cast<uint8_t>(random());
    if (trial % 2 == 0 && header.size() >= 8) {
      Poke<uint32_t>(&header, kMagicAt, kHeaderMagic);
      Poke<uint16_t>(&header, kVersionAt, kHeaderVersion);
      Poke<uint16_t>(&header, kFlagsAt, 0);
    }
    auto decoded = Decode(header);
    EXPECT_FALSE(decoded.ok());
  }
}

}  // namespace
}  // namespace ferry::flow::wire
