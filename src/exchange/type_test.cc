#include "ferry/exchange/type.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "testing/sample_arrays.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;

TEST(TypeFactoryTest, ParameterlessFactoriesShareOneInstance) {
  EXPECT_EQ(int32().get(), int32().get());
  EXPECT_EQ(utf8().get(), utf8().get());
  EXPECT_EQ(null().get(), null().get());
  EXPECT_EQ(interval_month_day_nano().get(), interval_month_day_nano().get());
  EXPECT_NE(int32().get(), uint32().get());
}

TEST(TypeFactoryTest, ParameterlessFactoriesSetTheirId) {
  const std::vector<std::pair<TypePtr, TypeId>> cases = {
      {null(), TypeId::kNull},
      {boolean(), TypeId::kBool},
      {int8(), TypeId::kInt8},
      {uint8(), TypeId::kUInt8},
      {int16(), TypeId::kInt16},
      {uint16(), TypeId::kUInt16},
      {int32(), TypeId::kInt32},
      {uint32(), TypeId::kUInt32},
      {int64(), TypeId::kInt64},
      {uint64(), TypeId::kUInt64},
      {float16(), TypeId::kHalfFloat},
      {float32(), TypeId::kFloat},
      {float64(), TypeId::kDouble},
      {binary(), TypeId::kBinary},
      {large_binary(), TypeId::kLargeBinary},
      {binary_view(), TypeId::kBinaryView},
      {utf8(), TypeId::kUtf8},
      {large_utf8(), TypeId::kLargeUtf8},
      {utf8_view(), TypeId::kUtf8View},
      {date32(), TypeId::kDate32},
      {date64(), TypeId::kDate64},
      {interval_months(), TypeId::kIntervalMonths},
      {interval_day_time(), TypeId::kIntervalDayTime},
      {interval_month_day_nano(), TypeId::kIntervalMonthDayNano},
  };
  for (const auto& [type, id] : cases) {
    EXPECT_EQ(type->id, id) << TypeIdName(id);
    EXPECT_TRUE(type->children.empty());
  }
}

TEST(TypeFactoryTest, DecimalPicksTheIdAndByteWidthFromTheBitWidth) {
  EXPECT_EQ(decimal(32, 9, 2)->id, TypeId::kDecimal32);
  EXPECT_EQ(decimal(32, 9, 2)->byte_width, 4);
  EXPECT_EQ(decimal(64, 18, 2)->id, TypeId::kDecimal64);
  EXPECT_EQ(decimal(64, 18, 2)->byte_width, 8);
  EXPECT_EQ(decimal(128, 38, 2)->id, TypeId::kDecimal128);
  EXPECT_EQ(decimal(128, 38, 2)->byte_width, 16);
  const TypePtr wide = decimal(256, 76, -3);
  EXPECT_EQ(wide->id, TypeId::kDecimal256);
  EXPECT_EQ(wide->byte_width, 32);
  EXPECT_EQ(wide->precision, 76);
  EXPECT_EQ(wide->scale, -3);
}

TEST(TypeFactoryTest, ParameterisedFactoriesKeepTheirParameters) {
  EXPECT_EQ(fixed_size_binary(7)->byte_width, 7);
  EXPECT_EQ(time32(TimeUnit::kMilli)->unit, TimeUnit::kMilli);
  EXPECT_EQ(time64(TimeUnit::kNano)->id, TypeId::kTime64);
  const TypePtr stamp = timestamp(TimeUnit::kMicro, "Europe/Paris");
  EXPECT_EQ(stamp->unit, TimeUnit::kMicro);
  EXPECT_EQ(stamp->timezone, "Europe/Paris");
  EXPECT_EQ(timestamp(TimeUnit::kSecond)->timezone, "");
  EXPECT_EQ(duration(TimeUnit::kNano)->unit, TimeUnit::kNano);

  const TypePtr fixed_list = fixed_size_list(field("item", int16()), 3);
  EXPECT_EQ(fixed_list->list_size, 3);
  ASSERT_EQ(fixed_list->children.size(), 1u);
  EXPECT_EQ(fixed_list->children[0].type->id, TypeId::kInt16);

  for (const TypePtr& list_type :
       {list(field("item", int8())), large_list(field("item", int8())),
        list_view(field("item", int8())), large_list_view(field("item", int8()))}) {
    ASSERT_EQ(list_type->children.size(), 1u);
    EXPECT_EQ(list_type->children[0].name, "item");
  }
  EXPECT_EQ(list(field("item", int8()))->id, TypeId::kList);
  EXPECT_EQ(large_list(field("item", int8()))->id, TypeId::kLargeList);
  EXPECT_EQ(list_view(field("item", int8()))->id, TypeId::kListView);
  EXPECT_EQ(large_list_view(field("item", int8()))->id, TypeId::kLargeListView);
}

TEST(TypeFactoryTest, MapBuildsANonNullableEntriesStruct) {
  const TypePtr map_type = map(utf8(), int32(), /*keys_sorted=*/true);
  EXPECT_EQ(map_type->id, TypeId::kMap);
  EXPECT_TRUE(map_type->keys_sorted);
  ASSERT_EQ(map_type->children.size(), 1u);
  const Field& entries = map_type->children[0];
  EXPECT_EQ(entries.name, "entries");
  EXPECT_FALSE(entries.nullable);
  ASSERT_EQ(entries.type->children.size(), 2u);
  EXPECT_EQ(entries.type->children[0].name, "key");
  EXPECT_FALSE(entries.type->children[0].nullable);
  EXPECT_EQ(entries.type->children[1].name, "value");
  EXPECT_TRUE(entries.type->children[1].nullable);
  EXPECT_TRUE(ValidateType(*map_type).ok());
}

TEST(TypeFactoryTest, UnionTypeCodesDefaultToChildPositions) {
  const TypePtr dense = dense_union({field("a", int32()), field("b", utf8())});
  EXPECT_EQ(dense->id, TypeId::kDenseUnion);
  EXPECT_EQ(dense->type_codes, (std::vector<int8_t>{0, 1}));
  const TypePtr sparse = sparse_union({field("a", int32()), field("b", utf8())}, {5, 9});
  EXPECT_EQ(sparse->id, TypeId::kSparseUnion);
  EXPECT_EQ(sparse->type_codes, (std::vector<int8_t>{5, 9}));
}

TEST(TypeFactoryTest, RunEndEncodedAndDictionary) {
  const TypePtr encoded = run_end_encoded(int32(), utf8());
  ASSERT_EQ(encoded->children.size(), 2u);
  EXPECT_EQ(encoded->children[0].name, "run_ends");
  EXPECT_FALSE(encoded->children[0].nullable);
  EXPECT_EQ(encoded->children[1].name, "values");
  EXPECT_EQ(encoded->children[1].type->id, TypeId::kUtf8);

  const TypePtr dict = dictionary(int16(), utf8(), /*ordered=*/true);
  EXPECT_EQ(dict->index_type->id, TypeId::kInt16);
  EXPECT_EQ(dict->value_type->id, TypeId::kUtf8);
  EXPECT_TRUE(dict->ordered);
}

TEST(FieldTest, FieldFactoryAndExtensionMetadata) {
  const Field plain = field("x", int32());
  EXPECT_EQ(plain.name, "x");
  EXPECT_TRUE(plain.nullable);
  EXPECT_FALSE(plain.extension_name().has_value());
  EXPECT_FALSE(plain.extension_metadata().has_value());

  const Field extension = field("uuid", fixed_size_binary(16), /*nullable=*/false,
                                {{"other", "1"},
                                 {"ARROW:extension:name", "arrow.uuid"},
                                 {"ARROW:extension:metadata", std::string("\0\1", 2)}});
  EXPECT_FALSE(extension.nullable);
  EXPECT_EQ(extension.extension_name(), "arrow.uuid");
  EXPECT_EQ(extension.extension_metadata(), std::string("\0\1", 2));
}

TEST(FieldTest, EqualsComparesNameTypeNullabilityAndOptionallyMetadata) {
  const Field base = field("x", int32(), true, {{"k", "v"}});
  EXPECT_TRUE(base.Equals(field("x", int32(), true, {{"k", "v"}})));
  EXPECT_FALSE(base.Equals(field("y", int32(), true, {{"k", "v"}})));
  EXPECT_FALSE(base.Equals(field("x", int64(), true, {{"k", "v"}})));
  EXPECT_FALSE(base.Equals(field("x", int32(), false, {{"k", "v"}})));
  EXPECT_FALSE(base.Equals(field("x", int32(), true, {{"k", "other"}})));
  EXPECT_TRUE(base.Equals(field("x", int32(), true, {{"k", "other"}}), /*check_metadata=*/false));
  EXPECT_FALSE(base.Equals(field("x", nullptr, true, {{"k", "v"}})));
  EXPECT_TRUE(field("x", nullptr).Equals(field("x", nullptr)));
}

TEST(FieldTest, ToStringShowsNullability) {
  EXPECT_EQ(field("x", int32()).ToString(), "x: int32");
  EXPECT_EQ(field("x", int32(), false).ToString(), "x: int32 not null");
  EXPECT_EQ(field("x", nullptr).ToString(), "x: <missing type>");
}

TEST(DataTypeTest, EqualsComparesTheRelevantParameters) {
  EXPECT_TRUE(int32()->Equals(*int32()));
  EXPECT_FALSE(int32()->Equals(*uint32()));
  EXPECT_TRUE(decimal(128, 10, 2)->Equals(*decimal(128, 10, 2)));
  EXPECT_FALSE(decimal(128, 10, 2)->Equals(*decimal(128, 10, 3)));
  EXPECT_FALSE(decimal(128, 10, 2)->Equals(*decimal(128, 11, 2)));
  EXPECT_FALSE(decimal(128, 10, 2)->Equals(*decimal(256, 10, 2)));
  EXPECT_TRUE(fixed_size_binary(4)->Equals(*fixed_size_binary(4)));
  EXPECT_FALSE(fixed_size_binary(4)->Equals(*fixed_size_binary(5)));
  EXPECT_FALSE(time32(TimeUnit::kSecond)->Equals(*time32(TimeUnit::kMilli)));
  EXPECT_TRUE(timestamp(TimeUnit::kMicro, "UTC")->Equals(*timestamp(TimeUnit::kMicro, "UTC")));
  EXPECT_FALSE(timestamp(TimeUnit::kMicro, "UTC")->Equals(*timestamp(TimeUnit::kMicro)));
  EXPECT_FALSE(timestamp(TimeUnit::kMicro)->Equals(*timestamp(TimeUnit::kNano)));
  EXPECT_FALSE(duration(TimeUnit::kMicro)->Equals(*duration(TimeUnit::kNano)));
  EXPECT_TRUE(list(field("item", int32()))->Equals(*list(field("item", int32()))));
  EXPECT_FALSE(list(field("item", int32()))->Equals(*list(field("item", int64()))));
  EXPECT_FALSE(list(field("item", int32()))->Equals(*large_list(field("item", int32()))));
  EXPECT_FALSE(fixed_size_list(field("item", int32()), 2)
                   ->Equals(*fixed_size_list(field("item", int32()), 3)));
  EXPECT_FALSE(map(utf8(), int32(), true)->Equals(*map(utf8(), int32(), false)));
  EXPECT_FALSE(
      dense_union({field("a", int32())}, {1})->Equals(*dense_union({field("a", int32())}, {2})));
  EXPECT_FALSE(dictionary(int32(), utf8())->Equals(*dictionary(int64(), utf8())));
  EXPECT_FALSE(dictionary(int32(), utf8())->Equals(*dictionary(int32(), binary())));
  EXPECT_FALSE(dictionary(int32(), utf8(), true)->Equals(*dictionary(int32(), utf8(), false)));
  EXPECT_TRUE(dictionary(int32(), utf8())->Equals(*dictionary(int32(), utf8())));
}

TEST(DataTypeTest, MapEqualityIgnoresEntryKeyAndValueNames) {
  const TypePtr standard = map(utf8(), int32());
  const TypePtr renamed = map(
      field("key_value", struct_({field("keys", utf8(), false), field("values", int32())}), false));
  EXPECT_TRUE(standard->Equals(*renamed));
  const TypePtr other_value = map(
      field("key_value", struct_({field("keys", utf8(), false), field("values", int64())}), false));
  EXPECT_FALSE(standard->Equals(*other_value));
  const TypePtr non_nullable_value = map(field(
      "entries", struct_({field("key", utf8(), false), field("value", int32(), false)}), false));
  EXPECT_FALSE(standard->Equals(*non_nullable_value));
  const TypePtr with_metadata = map(field(
      "entries",
      struct_({field("key", utf8(), false), field("value", int32(), true, {{"k", "v"}})}), false));
  EXPECT_FALSE(standard->Equals(*with_metadata));
  EXPECT_TRUE(standard->Equals(*with_metadata, /*check_metadata=*/false));
  // A malformed map (no entries) still compares without crashing.
  const TypePtr malformed = map(field("entries", int32(), false));
  EXPECT_FALSE(standard->Equals(*malformed));
  EXPECT_TRUE(malformed->Equals(*map(field("entries", int32(), false))));
}

TEST(DataTypeTest, EqualsChecksNestedMetadataOnlyWhenAsked) {
  const TypePtr left = struct_({field("a", int32(), true, {{"k", "1"}})});
  const TypePtr right = struct_({field("a", int32(), true, {{"k", "2"}})});
  EXPECT_FALSE(left->Equals(*right));
  EXPECT_TRUE(left->Equals(*right, /*check_metadata=*/false));
}

TEST(DataTypeTest, ToStringIsReadable) {
  EXPECT_EQ(int32()->ToString(), "int32");
  EXPECT_EQ(utf8()->ToString(), "string");
  EXPECT_EQ(decimal(128, 10, 2)->ToString(), "decimal128(10, 2)");
  EXPECT_EQ(fixed_size_binary(3)->ToString(), "fixed_size_binary[3]");
  EXPECT_EQ(timestamp(TimeUnit::kMicro, "UTC")->ToString(), "timestamp[us, tz=UTC]");
  EXPECT_EQ(timestamp(TimeUnit::kNano)->ToString(), "timestamp[ns]");
  EXPECT_EQ(time32(TimeUnit::kMilli)->ToString(), "time32[ms]");
  EXPECT_EQ(duration(TimeUnit::kSecond)->ToString(), "duration[s]");
  EXPECT_EQ(list(field("item", int32()))->ToString(), "list<item: int32>");
  EXPECT_EQ(fixed_size_list(field("item", int32(), false), 2)->ToString(),
            "fixed_size_list<item: int32 not null>[2]");
  EXPECT_EQ(struct_({field("a", int32()), field("b", utf8())})->ToString(),
            "struct<a: int32, b: string>");
  EXPECT_EQ(map(utf8(), int32())->ToString(),
            "map<entries: struct<key: string not null, value: int32> not null>");
  EXPECT_EQ(sparse_union({field("a", int32())}, {4})->ToString(), "sparse_union<a: int32=4>");
  EXPECT_EQ(run_end_encoded(int32(), utf8())->ToString(),
            "run_end_encoded<run_ends: int32 not null, values: string>");
  EXPECT_EQ(dictionary(int8(), utf8(), true)->ToString(),
            "dictionary<values=string, indices=int8, ordered>");
}

TEST(DataTypeTest, FixedWidth) {
  EXPECT_EQ(boolean()->fixed_width(), 0);
  EXPECT_EQ(null()->fixed_width(), 0);
  EXPECT_EQ(int8()->fixed_width(), 1);
  EXPECT_EQ(uint16()->fixed_width(), 2);
  EXPECT_EQ(float16()->fixed_width(), 2);
  EXPECT_EQ(int32()->fixed_width(), 4);
  EXPECT_EQ(float32()->fixed_width(), 4);
  EXPECT_EQ(date32()->fixed_width(), 4);
  EXPECT_EQ(time32(TimeUnit::kSecond)->fixed_width(), 4);
  EXPECT_EQ(interval_months()->fixed_width(), 4);
  EXPECT_EQ(uint64()->fixed_width(), 8);
  EXPECT_EQ(float64()->fixed_width(), 8);
  EXPECT_EQ(date64()->fixed_width(), 8);
  EXPECT_EQ(time64(TimeUnit::kNano)->fixed_width(), 8);
  EXPECT_EQ(timestamp(TimeUnit::kNano)->fixed_width(), 8);
  EXPECT_EQ(duration(TimeUnit::kNano)->fixed_width(), 8);
  EXPECT_EQ(interval_day_time()->fixed_width(), 8);
  EXPECT_EQ(interval_month_day_nano()->fixed_width(), 16);
  EXPECT_EQ(decimal(32, 5, 0)->fixed_width(), 4);
  EXPECT_EQ(decimal(64, 5, 0)->fixed_width(), 8);
  EXPECT_EQ(decimal(128, 5, 0)->fixed_width(), 16);
  EXPECT_EQ(decimal(256, 5, 0)->fixed_width(), 32);
  EXPECT_EQ(fixed_size_binary(11)->fixed_width(), 11);
  EXPECT_EQ(utf8()->fixed_width(), -1);
  EXPECT_EQ(binary_view()->fixed_width(), -1);
  EXPECT_EQ(list(field("item", int32()))->fixed_width(), -1);
  EXPECT_EQ(struct_({})->fixed_width(), -1);
}

TEST(DataTypeTest, NumBuffersFollowsTheCDataInterfaceLayout) {
  const Field item = field("item", int32());
  EXPECT_EQ(null()->num_buffers(), 0);
  EXPECT_EQ(boolean()->num_buffers(), 2);
  EXPECT_EQ(int64()->num_buffers(), 2);
  EXPECT_EQ(decimal(128, 10, 2)->num_buffers(), 2);
  EXPECT_EQ(timestamp(TimeUnit::kMicro)->num_buffers(), 2);
  EXPECT_EQ(interval_month_day_nano()->num_buffers(), 2);
  EXPECT_EQ(fixed_size_binary(4)->num_buffers(), 2);
  EXPECT_EQ(binary()->num_buffers(), 3);
  EXPECT_EQ(large_binary()->num_buffers(), 3);
  EXPECT_EQ(utf8()->num_buffers(), 3);
  EXPECT_EQ(large_utf8()->num_buffers(), 3);
  EXPECT_EQ(binary_view()->num_buffers(), 2);
  EXPECT_EQ(utf8_view()->num_buffers(), 2);
  EXPECT_EQ(list(item)->num_buffers(), 2);
  EXPECT_EQ(large_list(item)->num_buffers(), 2);
  EXPECT_EQ(map(utf8(), int32())->num_buffers(), 2);
  EXPECT_EQ(list_view(item)->num_buffers(), 3);
  EXPECT_EQ(large_list_view(item)->num_buffers(), 3);
  EXPECT_EQ(fixed_size_list(item, 2)->num_buffers(), 1);
  EXPECT_EQ(struct_({item})->num_buffers(), 1);
  EXPECT_EQ(sparse_union({item})->num_buffers(), 1);
  EXPECT_EQ(dense_union({item})->num_buffers(), 2);
  EXPECT_EQ(run_end_encoded(int32(), utf8())->num_buffers(), 0);
  EXPECT_EQ(dictionary(int32(), utf8())->num_buffers(), 2);
}

TEST(DataTypeTest, IsNested) {
  const Field item = field("item", int32());
  for (const TypePtr& nested :
       {list(item), large_list(item), list_view(item), large_list_view(item),
        fixed_size_list(item, 1), struct_({item}), map(utf8(), int32()), dense_union({item}),
        sparse_union({item}), run_end_encoded(int32(), int32())}) {
    EXPECT_TRUE(nested->is_nested()) << nested->ToString();
  }
  for (const TypePtr& flat : {int32(), utf8(), binary_view(), decimal(128, 1, 0),
                              timestamp(TimeUnit::kSecond), dictionary(int32(), utf8())}) {
    EXPECT_FALSE(flat->is_nested()) << flat->ToString();
  }
}

TEST(DataTypeTest, TypeIdNamesAreDistinct) {
  std::set<std::string> names;
  for (int id = 0; id <= static_cast<int>(TypeId::kDictionary); ++id) {
    const std::string name = TypeIdName(static_cast<TypeId>(id));
    EXPECT_NE(name, "unknown") << id;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(TypeId::kDictionary) + 1);
  EXPECT_STREQ(TypeIdName(static_cast<TypeId>(200)), "unknown");
}

TEST(DataTypeTest, TimeUnitNames) {
  EXPECT_STREQ(TimeUnitName(TimeUnit::kSecond), "s");
  EXPECT_STREQ(TimeUnitName(TimeUnit::kMilli), "ms");
  EXPECT_STREQ(TimeUnitName(TimeUnit::kMicro), "us");
  EXPECT_STREQ(TimeUnitName(TimeUnit::kNano), "ns");
}

// ---- ValidateType ----------------------------------------------------------

void ExpectInvalid(const TypePtr& type, const std::string& message_part) {
  const Status status = ValidateType(*type);
  EXPECT_EQ(status.code(), StatusCode::kInvalid) << type->ToString();
  EXPECT_THAT(status.message(), HasSubstr(message_part)) << type->ToString();
}

TEST(ValidateTypeTest, AcceptsEveryWellFormedType) {
  const Field item = field("item", int32());
  // The sample types, and edge cases of parameters and children.
  std::vector<TypePtr> types = ::ferry::testing::EveryType();
  for (TypePtr edge :
       {decimal(64, 18, -4), decimal(128, 38, 38), decimal(256, 1, 0), fixed_size_binary(0),
        timestamp(TimeUnit::kNano, "UTC"), duration(TimeUnit::kSecond), large_list(item),
        list_view(item), large_list_view(item), fixed_size_list(item, 0),
        struct_({item, field("s", utf8())}), map(utf8(), list(item)), dense_union({}),
        dense_union({item}, {127}), sparse_union({item, field("b", utf8())}, {3, 0}),
        run_end_encoded(int64(), struct_({item})), dictionary(uint8(), utf8()),
        dictionary(int64(), list(item))}) {
    types.push_back(std::move(edge));
  }
  for (const TypePtr& type : types) {
    const Status status = ValidateType(*type);
    EXPECT_TRUE(status.ok()) << type->ToString() << ": " << status.ToString();
  }
}

TEST(ValidateTypeTest, DecimalPrecisionRange) {
  ExpectInvalid(decimal(32, 10, 0), "decimal32 precision must be in 1..9, got 10");
  ExpectInvalid(decimal(64, 19, 0), "precision must be in 1..18");
  ExpectInvalid(decimal(128, 39, 0), "precision must be in 1..38");
  ExpectInvalid(decimal(256, 77, 0), "precision must be in 1..76");
  ExpectInvalid(decimal(128, 0, 0), "got 0");
  EXPECT_TRUE(ValidateType(*decimal(256, 76, 0)).ok());
}

TEST(ValidateTypeTest, DecimalScaleRange) {
  ExpectInvalid(decimal(32, 5, 10), "scale must be in -9..9, got 10");
  ExpectInvalid(decimal(128, 5, -39), "scale must be in -38..38");
  EXPECT_TRUE(ValidateType(*decimal(128, 5, -38)).ok());
}

TEST(ValidateTypeTest, DecimalBitWidth) {
  ExpectInvalid(decimal(100, 5, 1), "decimal bit width must be 32, 64, 128 or 256");
  ExpectInvalid(decimal(130, 5, 1), "decimal bit width must be 32, 64, 128 or 256");
}

TEST(ValidateTypeTest, NegativeSizes) {
  ExpectInvalid(fixed_size_binary(-1), "fixed_size_binary byte width must not be negative");
  ExpectInvalid(fixed_size_list(field("item", int8()), -2),
                "fixed_size_list size must not be negative");
}

TEST(ValidateTypeTest, TimeUnitsMatchTheWidth) {
  ExpectInvalid(time32(TimeUnit::kMicro), "time32 unit must be seconds or milliseconds, got us");
  ExpectInvalid(time32(TimeUnit::kNano), "time32 unit");
  ExpectInvalid(time64(TimeUnit::kSecond), "time64 unit must be microseconds or nanoseconds");
  ExpectInvalid(time64(TimeUnit::kMilli), "got ms");
}

TEST(ValidateTypeTest, ListLikesNeedExactlyOneChild) {
  DataType childless = *list(field("item", int32()));
  childless.children.clear();
  EXPECT_THAT(ValidateType(childless).message(),
              HasSubstr("list must have exactly 1 child field(s), has 0"));
  DataType two_children = *large_list_view(field("item", int32()));
  two_children.children.push_back(field("extra", int32()));
  EXPECT_THAT(ValidateType(two_children).message(), HasSubstr("has 2"));
}

TEST(ValidateTypeTest, ChildrenAreValidatedWithTheirPath) {
  const TypePtr nested = struct_({field("outer", list(field("inner", time32(TimeUnit::kNano))))});
  ExpectInvalid(nested, "field 'outer.inner': time32 unit");
  ExpectInvalid(struct_({field("missing", nullptr)}), "field 'missing' has no type");
}

TEST(ValidateTypeTest, MapEntriesShape) {
  ExpectInvalid(map(field("entries", int32(), false)),
                "map entries must be a struct of exactly two fields");
  ExpectInvalid(map(field("entries", struct_({field("key", utf8(), false)}), false)),
                "exactly two fields");
  ExpectInvalid(
      map(field("entries", struct_({field("key", utf8(), false), field("value", int32())}), true)),
      "map entries field must not be nullable");
  ExpectInvalid(
      map(field("entries", struct_({field("key", utf8(), true), field("value", int32())}), false)),
      "map key field must not be nullable");
  DataType no_entries = *map(utf8(), int32());
  no_entries.children.clear();
  EXPECT_THAT(ValidateType(no_entries).message(), HasSubstr("map must have exactly 1 child"));
  ExpectInvalid(map(utf8(), time64(TimeUnit::kSecond)), "time64 unit");
}

TEST(ValidateTypeTest, UnionTypeCodes) {
  ExpectInvalid(dense_union({field("a", int32()), field("b", int32())}, {1, 1}),
                "type code 1 appears more than once");
  ExpectInvalid(sparse_union({field("a", int32())}, {-1}), "type code -1 is outside 0..127");
  ExpectInvalid(sparse_union({field("a", int32()), field("b", int32())}, {0}),
                "needs one type code per child: 1 codes for 2 children");
  std::vector<Field> many_fields;
  for (int child_index = 0; child_index < 129; ++child_index) {
    many_fields.push_back(field("f" + std::to_string(child_index), int8()));
  }
  // Default codes for 129 children wrap past 127, which must be caught.
  ExpectInvalid(dense_union(many_fields), "outside 0..127");
}

TEST(ValidateTypeTest, RunEndTypes) {
  ExpectInvalid(run_end_encoded(int8(), utf8()),
                "run_end_encoded run ends must be int16, int32 or int64, got int8");
  ExpectInvalid(run_end_encoded(uint32(), utf8()), "got uint32");
  ExpectInvalid(run_end_encoded(nullptr, utf8()), "got <missing type>");
  DataType one_child = *run_end_encoded(int32(), utf8());
  one_child.children.pop_back();
  EXPECT_THAT(ValidateType(one_child).message(),
              HasSubstr("run_end_encoded must have exactly 2 child field(s), has 1"));
  ExpectInvalid(run_end_encoded(int32(), decimal(32, 99, 0)), "precision");
}

TEST(ValidateTypeTest, DictionaryIndexMustBeAnInteger) {
  ExpectInvalid(dictionary(utf8(), utf8()), "dictionary index type must be an integer, got string");
  ExpectInvalid(dictionary(float32(), utf8()), "got float");
  ExpectInvalid(dictionary(nullptr, utf8()), "got <missing type>");
  ExpectInvalid(dictionary(int32(), nullptr), "dictionary has no value type");
  ExpectInvalid(dictionary(int32(), time32(TimeUnit::kNano)), "time32 unit");
}

// ---- Schema ----------------------------------------------------------------

TEST(SchemaTest, GetFieldIndexFindsTheFirstMatch) {
  Schema schema{{field("a", int32()), field("b", utf8()), field("a", int64())}, {}};
  EXPECT_EQ(schema.num_fields(), 3);
  EXPECT_EQ(schema.GetFieldIndex("a"), 0);
  EXPECT_EQ(schema.GetFieldIndex("b"), 1);
  EXPECT_EQ(schema.GetFieldIndex("c"), -1);
  EXPECT_EQ(schema.GetFieldIndex(""), -1);
}

TEST(SchemaTest, EqualsAndMetadata) {
  const Schema base{{field("a", int32())}, {{"origin", "test"}}};
  EXPECT_TRUE(base.Equals(Schema{{field("a", int32())}, {{"origin", "test"}}}));
  EXPECT_FALSE(base.Equals(Schema{{field("a", int64())}, {{"origin", "test"}}}));
  EXPECT_FALSE(
      base.Equals(Schema{{field("a", int32()), field("b", int32())}, {{"origin", "test"}}}));
  EXPECT_FALSE(base.Equals(Schema{{field("a", int32())}, {}}));
  EXPECT_TRUE(base.Equals(Schema{{field("a", int32())}, {}}, /*check_metadata=*/false));
}

TEST(SchemaTest, ToStringListsFieldsAndMetadata) {
  const Schema schema{{field("a", int32()), field("b", utf8(), false)}, {{"k", "v"}}};
  EXPECT_EQ(schema.ToString(), "a: int32\nb: string not null\n-- metadata: k=v");
  EXPECT_EQ(Schema{}.ToString(), "");
}

// ---- Layout classification --------------------------------------------------------

TEST(LayoutClassificationTest, IntegerTypesAreTheEightFixedWidthIntegers) {
  for (const TypePtr& type :
       {int8(), uint8(), int16(), uint16(), int32(), uint32(), int64(), uint64()}) {
    EXPECT_TRUE(IsIntegerType(type->id)) << type->ToString();
  }
  for (const TypePtr& type : {boolean(), float16(), float64(), date32(), utf8()}) {
    EXPECT_FALSE(IsIntegerType(type->id)) << type->ToString();
  }
}

TEST(LayoutClassificationTest, ViewTypesAreBinaryViewAndUtf8View) {
  EXPECT_TRUE(IsViewType(TypeId::kBinaryView));
  EXPECT_TRUE(IsViewType(TypeId::kUtf8View));
  EXPECT_FALSE(IsViewType(TypeId::kBinary));
  EXPECT_FALSE(IsViewType(TypeId::kListView));
}

TEST(LayoutClassificationTest, NullUnionAndRunEndEncodedHaveNoValidityBitmap) {
  for (TypeId id :
       {TypeId::kNull, TypeId::kSparseUnion, TypeId::kDenseUnion, TypeId::kRunEndEncoded}) {
    EXPECT_FALSE(HasValidityBitmap(id)) << TypeIdName(id);
  }
  for (TypeId id :
       {TypeId::kBool, TypeId::kInt32, TypeId::kUtf8, TypeId::kStruct, TypeId::kDictionary}) {
    EXPECT_TRUE(HasValidityBitmap(id)) << TypeIdName(id);
  }
}

TEST(LayoutClassificationTest, OffsetWidthOfVariableLengthTypes) {
  EXPECT_EQ(OffsetWidthOfVariableLength(TypeId::kUtf8), 4);
  EXPECT_EQ(OffsetWidthOfVariableLength(TypeId::kMap), 4);
  EXPECT_EQ(OffsetWidthOfVariableLength(TypeId::kLargeBinary), 8);
  EXPECT_EQ(OffsetWidthOfVariableLength(TypeId::kLargeList), 8);
  // Views and list views keep offsets elsewhere; fixed-width types have none.
  EXPECT_EQ(OffsetWidthOfVariableLength(TypeId::kUtf8View), 0);
  EXPECT_EQ(OffsetWidthOfVariableLength(TypeId::kListView), 0);
  EXPECT_EQ(OffsetWidthOfVariableLength(TypeId::kInt64), 0);
}

TEST(LayoutClassificationTest, StorageTypeOfADictionaryIsItsIndexType) {
  const TypePtr encoded = dictionary(int16(), utf8());
  EXPECT_EQ(&StorageType(*encoded), encoded->index_type.get());
  const TypePtr plain = utf8();
  EXPECT_EQ(&StorageType(*plain), plain.get());
  DataType no_index = *encoded;
  no_index.index_type = nullptr;  // malformed: falls back to the type itself
  EXPECT_EQ(&StorageType(no_index), &no_index);
}

TEST(LayoutClassificationTest, LayoutBufferCountMatchesNumBuffersOutsideDictionaries) {
  EXPECT_EQ(LayoutBufferCount(TypeId::kNull), 0);
  EXPECT_EQ(LayoutBufferCount(TypeId::kStruct), 1);
  EXPECT_EQ(LayoutBufferCount(TypeId::kInt32), 2);
  EXPECT_EQ(LayoutBufferCount(TypeId::kUtf8), 3);
  EXPECT_EQ(LayoutBufferCount(TypeId::kDictionary), 2);
  for (const TypePtr& type : {int32(), utf8(), large_binary(), utf8_view(), boolean()}) {
    EXPECT_EQ(LayoutBufferCount(type->id), type->num_buffers()) << type->ToString();
  }
  // num_buffers follows the actual index type; the id alone cannot.
  const TypePtr odd_index = dictionary(utf8(), utf8());
  EXPECT_EQ(odd_index->num_buffers(), 3);
  EXPECT_EQ(LayoutBufferCount(odd_index->id), 2);
}

TEST(LayoutClassificationTest, RequiredChildCountOfParsedNodes) {
  EXPECT_EQ(RequiredChildCount(*list(field("item", int32()))), 1);
  EXPECT_EQ(RequiredChildCount(*map(utf8(), int32())), 1);
  EXPECT_EQ(RequiredChildCount(*run_end_encoded(int32(), utf8())), 2);
  EXPECT_EQ(RequiredChildCount(*sparse_union({field("a", int8()), field("b", utf8())})), 2);
  EXPECT_EQ(RequiredChildCount(*struct_({})), -1);
  EXPECT_EQ(RequiredChildCount(*int64()), 0);
}

}  // namespace
}  // namespace ferry
