#include "flow/transport/schema_codec.h"

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
#include "testing/test_util.h"

namespace ferry::flow::wire {
namespace {

using ::testing::HasSubstr;

// ---- Schemas --------------------------------------------------------------------------------

TEST(SchemaCodecTest, EveryTypeRoundTrips) {
  Schema schema;
  int index = 0;
  for (const TypePtr& type : EveryType()) {
    Metadata metadata;
    if (index % 3 == 0) metadata = {{"note", "field " + std::to_string(index)}, {"", ""}};
    schema.fields.push_back(
        field("f" + std::to_string(index), type, /*nullable=*/index % 2 == 0, metadata));
    ++index;
  }
  schema.fields.push_back(field("", int8()));
  schema.fields.push_back(field("quote ' and \\ in a name", utf8()));
  schema.fields.push_back(field(
      "extension", fixed_size_binary(16), true,
      {{std::string(kExtensionNameKey), "arrow.uuid"}, {std::string(kExtensionMetadataKey), ""}}));
  schema.metadata = {{"pandas", "{}"}, {"pandas", "twice"}, {"bytes", std::string("\0\1", 2)}};
  ASSERT_OK_AND_ASSIGN(std::string encoded, EncodeSchema(schema));
  ASSERT_OK_AND_ASSIGN(SchemaPtr decoded,
                       DecodeSchema(reinterpret_cast<const uint8_t*>(encoded.data()),
                                    static_cast<int64_t>(encoded.size())));
  EXPECT_TRUE(decoded->Equals(schema, /*check_metadata=*/true)) << decoded->ToString();
  for (size_t field_index = 0; field_index < schema.fields.size(); ++field_index) {
    const TypePtr& sent = schema.fields[field_index].type;
    const TypePtr& received = decoded->fields[field_index].type;
    EXPECT_EQ(sent->ToString(), received->ToString());
    if (sent->id == TypeId::kDictionary) {
      EXPECT_EQ(sent->ordered, received->ordered);
    }
    if (sent->id == TypeId::kMap) {
      EXPECT_EQ(sent->keys_sorted, received->keys_sorted);
    }
  }
}

TEST(SchemaCodecTest, EmptySchemaRoundTrips) {
  ASSERT_OK_AND_ASSIGN(std::string encoded, EncodeSchema(Schema{}));
  EXPECT_EQ(encoded.size(), 16u);  // prefix, metadata count, field count
  ASSERT_OK_AND_ASSIGN(SchemaPtr decoded,
                       DecodeSchema(reinterpret_cast<const uint8_t*>(encoded.data()),
                                    static_cast<int64_t>(encoded.size())));
  EXPECT_EQ(decoded->num_fields(), 0);
}

TEST(SchemaCodecTest, DecodedSchemasDecodeHeaders) {
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, HostileSample());
  ASSERT_OK_AND_ASSIGN(std::string encoded, EncodeSchema(*batch->schema()));
  ASSERT_OK_AND_ASSIGN(SchemaPtr schema,
                       DecodeSchema(reinterpret_cast<const uint8_t*>(encoded.data()),
                                    static_cast<int64_t>(encoded.size())));
  FakeSegments segments;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> header, EncodeBatch(*batch, &segments));
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr decoded, DecodeBatch(header, schema, &segments));
  EXPECT_TRUE(decoded->Equals(*batch));
  EXPECT_EQ(decoded->schema(), schema);
}

TEST(SchemaCodecTest, EncodeRefusesTypesItCannotWrite) {
  Schema schema;
  schema.fields = {field("broken", nullptr)};
  auto encoded = EncodeSchema(schema);
  ASSERT_FALSE(encoded.ok());
  EXPECT_THAT(encoded.status().message(), HasSubstr("col 'broken': field has no type"));

  schema.fields = {field("outer", struct_({field("inner", dictionary(utf8(), int32()))}))};
  encoded = EncodeSchema(schema);
  ASSERT_FALSE(encoded.ok());
  EXPECT_THAT(encoded.status().message(),
              HasSubstr("col 'outer'.'inner': dictionary index type must be an integer"));
}

// Schema bytes written by hand, for encodings EncodeSchema never produces.
class SchemaBytes {
 public:
  SchemaBytes() {
    Put(kSchemaMagic);
    Put(kSchemaVersion);
    Put(uint16_t{0});
    Put(uint32_t{0});  // no schema metadata
  }
  template <typename T>
  SchemaBytes& Put(T value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(value));
    return *this;
  }
  SchemaBytes& String(std::string_view text) {
    Put(static_cast<uint32_t>(text.size()));
    bytes_.append(text);
    return *this;
  }
  // A field header: name, format, flags, no metadata, `children` children.
  SchemaBytes& Field(std::string_view name, std::string_view format, uint8_t flags,
                     uint32_t children) {
    String(name).String(format).Put(flags).Put(uint32_t{0}).Put(children);
    return *this;
  }
  Result<SchemaPtr> Decode() const {
    // An exact-size heap copy, so ASan sees over-reads.
    auto copy = std::make_unique<uint8_t[]>(bytes_.size());
    std::memcpy(copy.get(), bytes_.data(), bytes_.size());
    return DecodeSchema(copy.get(), static_cast<int64_t>(bytes_.size()));
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

void ExpectSchemaRejected(const SchemaBytes& bytes, const std::string& expected) {
  auto decoded = bytes.Decode();
  ASSERT_FALSE(decoded.ok()) << (*decoded)->ToString();
  EXPECT_EQ(decoded.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(decoded.status().message(), HasSubstr(expected));
}

TEST(SchemaCodecTest, HandWrittenSchemasDecode) {
  SchemaBytes bytes;
  bytes.Put(uint32_t{2});
  bytes.Field("a", "i", kFieldNullable, 0);
  bytes.Field("b", "+l", 0, 1).Field("item", "u", kFieldNullable, 0);
  ASSERT_OK_AND_ASSIGN(SchemaPtr schema, bytes.Decode());
  Schema expected;
  expected.fields = {field("a", int32()), field("b", list(field("item", utf8())), false)};
  EXPECT_TRUE(schema->Equals(expected));
}

TEST(SchemaCodecTest, MalformedSchemasAreRejected) {
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("x", "+l", 0, 2);
    bytes.Field("a", "i", 0, 0).Field("b", "i", 0, 0);
    ExpectSchemaRejected(bytes, "col 'x': format '+l' needs 1 children, got 2");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("x", "i", 0, 1).Field("a", "i", 0, 0);
    ExpectSchemaRejected(bytes, "format 'i' needs 0 children, got 1");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("x", "Q", 0, 0);
    ExpectSchemaRejected(bytes, "col 'x': unknown format string 'Q'");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("x", "u", kFieldHasDictionary, 0).Field("", "u", 0, 0);
    ExpectSchemaRejected(bytes, "dictionary on non-integer format 'u'");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("x", "i", kFieldDictionaryOrdered, 0);
    ExpectSchemaRejected(bytes, "dictionary-ordered flag is set on a field without a dictionary");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("x", "i", kFieldMapKeysSorted, 0);
    ExpectSchemaRejected(bytes, "keys-sorted flag is set on format 'i'");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("x", "i", 0x80, 0);
    ExpectSchemaRejected(bytes, "unknown field flags 128");
  }
  {
    // A map whose entries are not a struct: ValidateType speaks.
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("m", "+m", 0, 1).Field("entries", "i", 0, 0);
    ExpectSchemaRejected(bytes, "col 'm': map entries must be a struct");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("u", "+us:1,1", 0, 2);
    ExpectSchemaRejected(bytes, "appears more than once");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{0xFFFFFFFF});
    ExpectSchemaRejected(bytes, "4294967295 fields cannot fit");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("s", "+s", 0, 0xFFFFFF);
    ExpectSchemaRejected(bytes, "16777215 children cannot fit");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).Field("x", "i", 0, 0).Put(uint8_t{0});
    ExpectSchemaRejected(bytes, "1 bytes left over after the last field");
  }
  {
    SchemaBytes bytes;
    bytes.bytes()[0] = 'X';
    bytes.Put(uint32_t{0});
    ExpectSchemaRejected(bytes, "bad magic");
  }
  {
    SchemaBytes bytes;
    bytes.bytes()[4] = 9;
    bytes.Put(uint32_t{0});
    ExpectSchemaRejected(bytes, "unsupported version 9");
  }
  {
    SchemaBytes bytes;
    bytes.bytes()[6] = 1;
    bytes.Put(uint32_t{0});
    ExpectSchemaRejected(bytes, "unknown flags 1");
  }
  {
    SchemaBytes bytes;
    bytes.bytes().resize(8);
    bytes.Put(uint32_t{0x10000000});  // schema metadata pairs
    ExpectSchemaRejected(bytes, "metadata pairs cannot fit");
  }
  {
    SchemaBytes bytes;
    bytes.Put(uint32_t{1}).String("x").String("i").Put(uint8_t{0}).Put(uint32_t{1});
    bytes.Put(uint32_t{100}).Put(uint32_t{0});  // a key claiming 100 bytes
    ExpectSchemaRejected(bytes, "col 'x': metadata pair 0 runs past the end");
  }
  auto negative = DecodeSchema(nullptr, -1);
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("no bytes"));
  auto huge = DecodeSchema(reinterpret_cast<const uint8_t*>("x"), int64_t{1} << 40);
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), HasSubstr("exceed the limit"));
}

TEST(SchemaCodecTest, NestingIsBounded) {
  for (int depth : {kMaxNestingDepth, kMaxNestingDepth + 1, 10000}) {
    SCOPED_TRACE(depth);
    SchemaBytes bytes;
    bytes.Put(uint32_t{1});
    for (int level = 0; level < depth; ++level) bytes.Field("l", "+l", kFieldNullable, 1);
    bytes.Field("leaf", "i", kFieldNullable, 0);
    auto decoded = bytes.Decode();
    if (depth <= kMaxNestingDepth) {
      ASSERT_OK(decoded);
    } else {
      ASSERT_FALSE(decoded.ok());
      EXPECT_THAT(decoded.status().message(), HasSubstr("nesting deeper than 128"));
    }
  }
}

TEST(SchemaCodecTest, TruncationAndBitFlipsAreRejectedOrValid) {
  Schema schema;
  schema.fields = {field("a", int32(), false, {{"k", "v"}}),
                   field("m", map(utf8(), list(field("item", float64())), true)),
                   field("d", dictionary(int16(), utf8(), true)),
                   field("u", dense_union({field("x", int8()), field("y", utf8())}, {1, 3})),
                   field("t", timestamp(TimeUnit::kMicro, "UTC"))};
  schema.metadata = {{"schema", "metadata"}};
  ASSERT_OK_AND_ASSIGN(std::string encoded, EncodeSchema(schema));
  for (size_t size = 0; size < encoded.size(); ++size) {
    SCOPED_TRACE(size);
    auto copy = std::make_unique<uint8_t[]>(size + 1);
    std::memcpy(copy.get(), encoded.data(), size);
    auto decoded = DecodeSchema(copy.get(), static_cast<int64_t>(size));
    ASSERT_FALSE(decoded.ok());
    EXPECT_THAT(decoded.status().message(), HasSubstr("schema"));
  }
  int rejected = 0;
  for (size_t byte = 0; byte < encoded.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = encoded;
      flipped[byte] = static_cast<char>(flipped[byte] ^ (1 << bit));
      auto copy = std::make_unique<uint8_t[]>(flipped.size());
      std::memcpy(copy.get(), flipped.data(), flipped.size());
      auto decoded = DecodeSchema(copy.get(), static_cast<int64_t>(flipped.size()));
      if (!decoded.ok()) {
        ++rejected;
        EXPECT_EQ(decoded.status().code(), StatusCode::kInvalid);
        continue;
      }
      // Accepted only if it is a well-formed schema (e.g. a changed name).
      for (const Field& decoded_field : (*decoded)->fields) {
        EXPECT_TRUE(ValidateType(*decoded_field.type).ok());
      }
    }
  }
  EXPECT_GT(rejected, 0);
  std::mt19937_64 random(99);
  for (int trial = 0; trial < 1000; ++trial) {
    std::string mutated = encoded;
    const size_t at = random() % (mutated.size() - 3);
    const auto value = static_cast<uint32_t>(random() % 2 == 0 ? random() : random() % 300);
    std::memcpy(mutated.data() + at, &value, sizeof(value));
    auto copy = std::make_unique<uint8_t[]>(mutated.size());
    std::memcpy(copy.get(), mutated.data(), mutated.size());
    auto decoded = DecodeSchema(copy.get(), static_cast<int64_t>(mutated.size()));
    if (decoded.ok()) {
      for (const Field& decoded_field : (*decoded)->fields) {
        EXPECT_TRUE(ValidateType(*decoded_field.type).ok());
      }
    }
  }
}

}  // namespace
}  // namespace ferry::flow::wire
