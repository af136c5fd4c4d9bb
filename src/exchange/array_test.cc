#include "ferry/exchange/array.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ferry/exchange/builder.h"
#include "testing/sample_arrays.h"
#include "testing/test_util.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;

// ---- Hand-made arrays (for layouts builders never produce) -----------------------

template <typename T>
BufferPtr MakeBuffer(const std::vector<T>& values) {
  auto buffer = Buffer::CopyOf(values.data(), static_cast<int64_t>(values.size() * sizeof(T)));
  return buffer.ok() ? buffer.MoveValueUnsafe() : nullptr;
}

BufferPtr MakeBitmap(const std::vector<bool>& bits) {
  std::vector<uint8_t> bytes(BytesForBits(static_cast<int64_t>(bits.size())), 0);
  for (size_t i = 0; i < bits.size(); ++i) {
    if (bits[i]) SetBit(bytes.data(), static_cast<int64_t>(i));
  }
  return MakeBuffer(bytes);
}

BufferPtr MakeBytes(std::string_view bytes) {
  auto buffer = Buffer::CopyOf(bytes.data(), static_cast<int64_t>(bytes.size()));
  return buffer.ok() ? buffer.MoveValueUnsafe() : nullptr;
}

ArrayDataPtr MakeData(TypePtr type, int64_t length, std::vector<BufferPtr> buffers,
                      int64_t null_count = kUnknownNullCount,
                      std::vector<ArrayDataPtr> children = {}, int64_t offset = 0) {
  auto data = std::make_shared<ArrayData>();
  data->type = std::move(type);
  data->length = length;
  data->offset = offset;
  data->null_count = null_count;
  data->buffers = std::move(buffers);
  data->children = std::move(children);
  return data;
}

ArrayDataPtr Int32s(const std::vector<std::optional<int32_t>>& values) {
  auto result = MakeInt32Array(values);
  return result.ok() ? result.MoveValueUnsafe() : nullptr;
}

ArrayDataPtr Strings(const std::vector<std::optional<std::string>>& values,
                     const TypePtr& type = utf8()) {
  auto result = MakeStringArray(type, values);
  return result.ok() ? result.MoveValueUnsafe() : nullptr;
}

using ::ferry::testing::BuildSamples;
using ::ferry::testing::EveryType;

// ---- ArrayData ------------------------------------------------------------------------

TEST(ArrayDataTest, GetNullCountComputesUnknownCounts) {
  auto data = MakeData(int32(), 4,
                       {MakeBitmap({true, false, true, false}), MakeBuffer<int32_t>({1, 2, 3, 4})});
  EXPECT_EQ(data->GetNullCount(), 2);
  auto sliced = MakeData(int32(), 2, data->buffers, kUnknownNullCount, {}, /*offset=*/1);
  EXPECT_EQ(sliced->GetNullCount(), 1);
  auto known = MakeData(int32(), 4, data->buffers, /*null_count=*/2);
  EXPECT_EQ(known->GetNullCount(), 2);
  auto no_bitmap = MakeData(int32(), 4, {nullptr, data->buffers[1]});
  EXPECT_EQ(no_bitmap->GetNullCount(), 0);
  auto nulls = MakeData(null(), 5, {}, 0);
  EXPECT_EQ(nulls->GetNullCount(), 5);
  auto union_data = MakeData(sparse_union({field("a", int32())}), 1, {MakeBuffer<int8_t>({0})},
                             kUnknownNullCount, {Int32s({std::nullopt})});
  EXPECT_EQ(union_data->GetNullCount(), 0);
}

TEST(ArrayDataTest, IsValidAppliesTheOffset) {
  auto data = MakeData(int32(), 3,
                       {MakeBitmap({true, false, true, true}), MakeBuffer<int32_t>({1, 2, 3, 4})},
                       kUnknownNullCount, {}, /*offset=*/1);
  EXPECT_FALSE(data->IsValid(0));
  EXPECT_TRUE(data->IsValid(1));
  EXPECT_TRUE(data->IsValid(2));
  // A null_count of 0 means no nulls whatever the bitmap says.
  auto trusted = MakeData(
      int32(), 4, {MakeBitmap({false, false, false, false}), MakeBuffer<int32_t>({1, 2, 3, 4})}, 0);
  EXPECT_TRUE(trusted->IsValid(0));
  EXPECT_FALSE(MakeData(null(), 2, {}, 2)->IsValid(0));
  EXPECT_TRUE(MakeData(int32(), 1, {nullptr, MakeBuffer<int32_t>({1})})->IsValid(0));
}

// ---- Slice ---------------------------------------------------------------------------------

TEST(SliceTest, IsZeroCopyAndClamps) {
  ArrayDataPtr array = Int32s({1, std::nullopt, 3, 4, 5});
  ArrayDataPtr slice = Slice(array, 1, 3);
  EXPECT_EQ(slice->offset, 1);
  EXPECT_EQ(slice->length, 3);
  EXPECT_EQ(slice->buffers[1], array->buffers[1]);
  EXPECT_EQ(slice->buffers[1]->data(), array->buffers[1]->data());
  EXPECT_EQ(slice->null_count, kUnknownNullCount);
  EXPECT_EQ(slice->GetNullCount(), 1);
  EXPECT_TRUE(ArrayEquals(*slice, *Int32s({std::nullopt, 3, 4})));

  ArrayDataPtr nested = Slice(slice, 1, 10);  // clamped to the 2 remaining values
  EXPECT_EQ(nested->offset, 2);
  EXPECT_EQ(nested->length, 2);
  EXPECT_EQ(nested->GetNullCount(), 0);
  EXPECT_TRUE(ArrayEquals(*nested, *Int32s({3, 4})));

  ArrayDataPtr before = Slice(array, -5, 2);
  EXPECT_EQ(before->offset, 0);
  EXPECT_EQ(before->length, 2);
  ArrayDataPtr past = Slice(array, 9, 2);
  EXPECT_EQ(past->length, 0);
  EXPECT_EQ(past->null_count, 0);
  EXPECT_EQ(Slice(nullptr, 0, 1), nullptr);
  EXPECT_EQ(Slice(array, 0, 5)->null_count, 1);  // the whole array keeps its count
}

TEST(SliceTest, NullCountRules) {
  ArrayDataPtr no_nulls = Int32s({1, 2, 3});
  EXPECT_EQ(Slice(no_nulls, 1, 2)->null_count, 0);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr nulls, MakeArrayOfNulls(null(), 6));
  EXPECT_EQ(Slice(nulls, 1, 4)->null_count, 4);
  ASSERT_OK_AND_ASSIGN(auto runs, BuildSamples(run_end_encoded(int32(), int32()), {1, 2, 3, 4}));
  EXPECT_EQ(Slice(runs, 1, 4)->null_count, 0);
}

TEST(SliceTest, EveryTypeEqualsTheSameValuesElsewhere) {
  std::vector<int64_t> seeds;
  for (int64_t seed = 0; seed < 12; ++seed) seeds.push_back(seed);
  std::vector<int64_t> prefixed = {100, 101, 102, 103, 104};
  prefixed.insert(prefixed.end(), seeds.begin(), seeds.end());
  for (const TypePtr& type : EveryType()) {
    SCOPED_TRACE(type->ToString());
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, BuildSamples(type, seeds));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr shifted, BuildSamples(type, prefixed));
    const int64_t length = values->length;
    const int64_t prefix = shifted->length - length;
    ASSERT_GT(prefix, 0);
    EXPECT_TRUE(ArrayEquals(*values, *values));
    EXPECT_TRUE(ArrayEquals(*values, *Slice(shifted, prefix, length)));
    EXPECT_FALSE(ArrayEquals(*values, *shifted));
    ArrayDataPtr window = Slice(shifted, prefix, length);
    for (int64_t offset = 0; offset <= length; ++offset) {
      for (int64_t count = 0; offset + count <= length; ++count) {
        ArrayDataPtr left = Slice(values, offset, count);
        ASSERT_TRUE(ArrayEquals(*left, *Slice(shifted, prefix + offset, count)))
            << "offset " << offset << " count " << count;
        ASSERT_TRUE(ArrayEquals(*left, *Slice(window, offset, count)));
        if (count >= 4 && offset + 1 + count <= length && type->id != TypeId::kNull) {
          ASSERT_FALSE(ArrayEquals(*left, *Slice(values, offset + 1, count)))
              << "offset " << offset << " count " << count;
        }
      }
    }
    // Printing a slice of any type works too.
    EXPECT_THAT(ArrayToString(*Slice(values, 2, 3)), HasSubstr("(3 values"));
  }
}

// ---- ArrayEquals ------------------------------------------------------------------------

TEST(ArrayEqualsTest, DetectsDifferences) {
  ArrayDataPtr base = Int32s({1, 2, std::nullopt});
  EXPECT_TRUE(ArrayEquals(*base, *Int32s({1, 2, std::nullopt})));
  EXPECT_FALSE(ArrayEquals(*base, *Int32s({1, 2, 3})));             // validity
  EXPECT_FALSE(ArrayEquals(*base, *Int32s({1, 5, std::nullopt})));  // value
  EXPECT_FALSE(ArrayEquals(*base, *Int32s({1, 2})));                // length
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr as_uint,
                       MakeFixedWidthArray<uint32_t>(uint32(), {1, 2, std::nullopt}));
  EXPECT_FALSE(ArrayEquals(*base, *as_uint));  // same bytes, other type

  ASSERT_OK_AND_ASSIGN(ArrayDataPtr named_a, MakeStructArray({"a"}, {base}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr named_b, MakeStructArray({"b"}, {base}));
  EXPECT_FALSE(ArrayEquals(*named_a, *named_b));  // field names are part of the type
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr named_a2, MakeStructArray({"a"}, {Int32s({1, 2, 3})}));
  EXPECT_FALSE(ArrayEquals(*named_a, *named_a2));

  ArrayData untyped;
  EXPECT_FALSE(ArrayEquals(untyped, *base));
  EXPECT_TRUE(ArrayEquals(untyped, untyped));
}

TEST(ArrayEqualsTest, IgnoresBytesUnderNulls) {
  auto left =
      MakeData(int32(), 3, {MakeBitmap({true, false, true}), MakeBuffer<int32_t>({1, 12345, 3})});
  auto right =
      MakeData(int32(), 3, {MakeBitmap({true, false, true}), MakeBuffer<int32_t>({1, -7, 3})}, 1);
  EXPECT_TRUE(ArrayEquals(*left, *right));

  // A null string may even cover bytes.
  auto strings = MakeData(
      utf8(), 3,
      {MakeBitmap({true, false, true}), MakeBuffer<int32_t>({0, 1, 4, 5}), MakeBytes("aXYZc")});
  EXPECT_TRUE(ArrayEquals(*strings, *Strings({"a", std::nullopt, "c"})));
  EXPECT_FALSE(ArrayEquals(*strings, *Strings({"a", "XYZ", "c"})));

  // So may a null list, and a null struct hides its fields.
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr child, MakeInt32Array({1, 2, 3, 4}));
  auto lists = MakeData(list(field("item", int32())), 2,
                        {MakeBitmap({false, true}), MakeBuffer<int32_t>({0, 3, 4})},
                        kUnknownNullCount, {child});
  ListBuilder builder(list(field("item", int32())));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append());
  ASSERT_OK(dynamic_cast<FixedWidthBuilder<int32_t>*>(builder.value_builder())->Append(4));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr expected_lists, builder.Finish());
  EXPECT_TRUE(ArrayEquals(*lists, *expected_lists));

  ASSERT_OK_AND_ASSIGN(ArrayDataPtr struct_one,
                       MakeStructArray({"v"}, {Int32s({1, 2})}, {true, false}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr struct_two,
                       MakeStructArray({"v"}, {Int32s({1, 99})}, {true, false}));
  EXPECT_TRUE(ArrayEquals(*struct_one, *struct_two));

  auto booleans = MakeData(boolean(), 2, {MakeBitmap({false, true}), MakeBitmap({true, true})});
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr expected_booleans, MakeBooleanArray({std::nullopt, true}));
  EXPECT_TRUE(ArrayEquals(*booleans, *expected_booleans));
}

TEST(ArrayEqualsTest, IgnoresWhereOffsetsStart) {
  // Offsets that start past unrelated bytes describe the same strings.
  auto strings =
      MakeData(binary(), 2, {nullptr, MakeBuffer<int32_t>({3, 5, 6}), MakeBytes("___abc")}, 0);
  EXPECT_TRUE(ArrayEquals(*strings, *Strings({"ab", "c"}, binary())));
  auto large = MakeData(large_binary(), 2,
                        {nullptr, MakeBuffer<int64_t>({3, 5, 6}), MakeBytes("___abc")}, 0);
  EXPECT_TRUE(ArrayEquals(*large, *Strings({"ab", "c"}, large_binary())));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr child, MakeInt32Array({9, 9, 1, 2, 3}));
  auto lists = MakeData(list(field("item", int32())), 2, {nullptr, MakeBuffer<int32_t>({2, 4, 5})},
                        0, {child});
  ListBuilder builder(list(field("item", int32())));
  auto* values = dynamic_cast<FixedWidthBuilder<int32_t>*>(builder.value_builder());
  ASSERT_OK(builder.Append());
  ASSERT_OK(values->AppendValues({1, 2}));
  ASSERT_OK(builder.Append());
  ASSERT_OK(values->Append(3));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr expected, builder.Finish());
  EXPECT_TRUE(ArrayEquals(*lists, *expected));
  auto other = MakeData(list(field("item", int32())), 2, {nullptr, MakeBuffer<int32_t>({1, 3, 4})},
                        0, {child});
  EXPECT_FALSE(ArrayEquals(*other, *expected));
}

TEST(ArrayEqualsTest, ViewsCompareValuesNotBlocks) {
  std::vector<std::optional<std::string>> values = {"short", "a value longer than twelve",
                                                    std::nullopt, "another rather long value", ""};
  BinaryViewBuilder small_blocks(utf8_view(), default_memory_pool(), 8);
  for (const auto& value : values) ASSERT_OK(small_blocks.AppendOptional(value));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr many_blocks, small_blocks.Finish());
  ArrayDataPtr one_block = Strings(values, utf8_view());
  EXPECT_GT(many_blocks->buffers.size(), one_block->buffers.size());
  EXPECT_TRUE(ArrayEquals(*many_blocks, *one_block));
  EXPECT_TRUE(ArrayEquals(*Slice(many_blocks, 1, 3), *Slice(one_block, 1, 3)));
  values[3] = "another rather long valuE";
  EXPECT_FALSE(ArrayEquals(*many_blocks, *Strings(values, utf8_view())));
  // Same prefix, different tail in the data buffer.
  EXPECT_FALSE(ArrayEquals(*Strings({"prefix-and-tail-1"}, binary_view()),
                           *Strings({"prefix-and-tail-2"}, binary_view())));
  // A view pointing outside its buffers compares unequal instead of crashing.
  ArrayDataPtr broken =
      std::make_shared<ArrayData>(*Strings({"a value longer than twelve"}, utf8_view()));
  std::const_pointer_cast<ArrayData>(broken)->buffers.resize(2);
  EXPECT_FALSE(ArrayEquals(*broken, *Strings({"a value longer than twelve"}, utf8_view())));
}

TEST(ArrayEqualsTest, ListViewsCompareLogically) {
  // [[1, 2], null, [3], [2, 3]] with views in child order...
  ListViewBuilder ordered(list_view(field("item", int32())));
  auto* ordered_values = dynamic_cast<FixedWidthBuilder<int32_t>*>(ordered.value_builder());
  ASSERT_OK(ordered.Append());
  ASSERT_OK(ordered_values->AppendValues({1, 2}));
  ASSERT_OK(ordered.AppendNull());
  ASSERT_OK(ordered.Append());
  ASSERT_OK(ordered_values->Append(3));
  ASSERT_OK(ordered.Append());
  ASSERT_OK(ordered_values->AppendValues({2, 3}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr in_order, ordered.Finish());
  // ... and the same lists as overlapping, out-of-order views of [3, 1, 2, 3].
  ListViewBuilder shared(list_view(field("item", int32())));
  auto* shared_values = dynamic_cast<FixedWidthBuilder<int32_t>*>(shared.value_builder());
  ASSERT_OK(shared_values->AppendValues({3, 1, 2, 3}));
  ASSERT_OK(shared.AppendView(1, 2));
  ASSERT_OK(shared.AppendNull());
  ASSERT_OK(shared.AppendView(0, 1));
  ASSERT_OK(shared.AppendView(2, 2));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr out_of_order, shared.Finish());
  EXPECT_TRUE(ArrayEquals(*in_order, *out_of_order));
  EXPECT_TRUE(ArrayEquals(*Slice(in_order, 2, 2), *Slice(out_of_order, 2, 2)));
  EXPECT_FALSE(ArrayEquals(*Slice(in_order, 0, 1), *Slice(out_of_order, 3, 1)));
}

TEST(ArrayEqualsTest, DenseUnionsCompareTheSelectedValues) {
  auto type = dense_union({field("i", int32()), field("s", utf8())}, {0, 1});
  // Same logical values [7, "x", 8] from differently laid out children.
  auto left = MakeData(type, 3, {MakeBuffer<int8_t>({0, 1, 0}), MakeBuffer<int32_t>({0, 0, 1})}, 0,
                       {Int32s({7, 8}), Strings({"x"})});
  auto right = MakeData(type, 3, {MakeBuffer<int8_t>({0, 1, 0}), MakeBuffer<int32_t>({2, 1, 0})}, 0,
                        {Int32s({8, 99, 7}), Strings({"junk", "x"})});
  EXPECT_TRUE(ArrayEquals(*left, *right));
  EXPECT_TRUE(ArrayEquals(*Slice(left, 1, 2), *Slice(right, 1, 2)));
  auto different =
      MakeData(type, 3, {MakeBuffer<int8_t>({0, 1, 0}), MakeBuffer<int32_t>({1, 1, 0})}, 0,
               {Int32s({8, 99, 7}), Strings({"junk", "x"})});
  EXPECT_FALSE(ArrayEquals(*left, *different));
  auto other_codes =
      MakeData(type, 3, {MakeBuffer<int8_t>({1, 1, 0}), MakeBuffer<int32_t>({0, 1, 0})}, 0,
               {Int32s({8, 99, 7}), Strings({"junk", "x"})});
  EXPECT_FALSE(ArrayEquals(*left, *other_codes));
  auto undeclared =
      MakeData(type, 3, {MakeBuffer<int8_t>({5, 1, 0}), MakeBuffer<int32_t>({0, 0, 1})}, 0,
               {Int32s({7, 8}), Strings({"x"})});
  auto undeclared_copy = std::make_shared<ArrayData>(*undeclared);
  // Malformed: never equal (not even to a copy), never a crash.
  EXPECT_FALSE(ArrayEquals(*undeclared, *undeclared_copy));
  EXPECT_THAT(ArrayToString(*undeclared), HasSubstr("<undeclared type code 5>"));
}

TEST(ArrayEqualsTest, SparseUnionChildrenSeeTheParentOffset) {
  auto type = sparse_union({field("i", int32()), field("s", utf8())});
  auto data = MakeData(type, 4, {MakeBuffer<int8_t>({0, 1, 1, 0})}, 0,
                       {Int32s({1, 0, 0, 4}), Strings({"", "b", "c", ""})});
  auto expected =
      MakeData(type, 2, {MakeBuffer<int8_t>({1, 0})}, 0, {Int32s({0, 4}), Strings({"c", ""})});
  EXPECT_TRUE(ArrayEquals(*Slice(data, 2, 2), *expected));
  EXPECT_FALSE(ArrayEquals(*Slice(data, 1, 2), *expected));
  EXPECT_THAT(ArrayToString(*Slice(data, 2, 2)), HasSubstr("\"c\"\n  4"));
}

TEST(ArrayEqualsTest, RunEndEncodedComparesLogicalValues) {
  auto type = run_end_encoded(int32(), utf8());
  // x x y y y vs x | x y | y y: same logical values, other runs.
  auto merged = MakeData(
      type, 5, {}, 0,
      {MakeData(int32(), 2, {nullptr, MakeBuffer<int32_t>({2, 5})}, 0), Strings({"x", "y"})});
  auto split = MakeData(type, 5, {}, 0,
                        {MakeData(int32(), 4, {nullptr, MakeBuffer<int32_t>({1, 2, 3, 5})}, 0),
                         Strings({"x", "x", "y", "y"})});
  EXPECT_TRUE(ArrayEquals(*merged, *split));
  for (int64_t offset = 0; offset < 5; ++offset) {
    for (int64_t count = 0; offset + count <= 5; ++count) {
      EXPECT_TRUE(ArrayEquals(*Slice(merged, offset, count), *Slice(split, offset, count)));
    }
  }
  EXPECT_TRUE(ArrayEquals(
      *Slice(merged, 1, 2),
      *MakeData(
          type, 2, {}, 0,
          {MakeData(int32(), 2, {nullptr, MakeBuffer<int32_t>({1, 2})}, 0), Strings({"x", "y"})})));
  EXPECT_FALSE(ArrayEquals(*Slice(merged, 0, 2), *Slice(merged, 1, 2)));
  EXPECT_THAT(ArrayToString(*Slice(merged, 1, 3)), HasSubstr("\"x\"\n  \"y\"\n  \"y\""));

  // Run ends of the child may themselves be sliced.
  auto sliced_child =
      MakeData(type, 3, {}, 0,
               {Slice(MakeData(int32(), 3, {nullptr, MakeBuffer<int32_t>({7, 2, 3})}, 0), 1, 2),
                Slice(Strings({"junk", "x", "y"}), 1, 2)});
  EXPECT_TRUE(ArrayEquals(*sliced_child, *Slice(merged, 0, 3)));
  // Malformed run ends (not increasing) never compare equal.
  auto broken = MakeData(
      type, 5, {}, 0,
      {MakeData(int32(), 2, {nullptr, MakeBuffer<int32_t>({2, 1})}, 0), Strings({"x", "y"})});
  EXPECT_FALSE(ArrayEquals(*broken, *merged));
}

TEST(ArrayEqualsTest, DictionariesCompareValues) {
  auto type = dictionary(int8(), utf8());
  auto left = MakeData(type, 3, {nullptr, MakeBuffer<int8_t>({0, 1, 0})}, 0);
  std::const_pointer_cast<ArrayData>(left)->dictionary = Strings({"a", "b"});
  auto right = MakeData(type, 3, {nullptr, MakeBuffer<int8_t>({1, 0, 1})}, 0);
  std::const_pointer_cast<ArrayData>(right)->dictionary = Strings({"b", "a", "unused"});
  EXPECT_TRUE(ArrayEquals(*left, *right));
  auto same_indices = MakeData(type, 3, {nullptr, MakeBuffer<int8_t>({0, 1, 0})}, 0);
  std::const_pointer_cast<ArrayData>(same_indices)->dictionary = Strings({"b", "a"});
  EXPECT_FALSE(ArrayEquals(*left, *same_indices));
  auto out_of_range = MakeData(type, 3, {nullptr, MakeBuffer<int8_t>({0, 1, 9})}, 0);
  std::const_pointer_cast<ArrayData>(out_of_range)->dictionary = Strings({"a", "b"});
  EXPECT_FALSE(ArrayEquals(*left, *out_of_range));
  EXPECT_THAT(ArrayToString(*out_of_range), HasSubstr("<index 9 out of range>"));

  DictionaryBuilder builder(type);
  ASSERT_OK(builder.Append("a"));
  ASSERT_OK(builder.Append("b"));
  ASSERT_OK(builder.Append("a"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr built, builder.Finish());
  EXPECT_TRUE(ArrayEquals(*built, *right));
  DictionaryBuilder wider(dictionary(int16(), utf8()));
  ASSERT_OK(wider.Append("a"));
  ASSERT_OK(wider.Append("b"));
  ASSERT_OK(wider.Append("a"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr wide, wider.Finish());
  EXPECT_FALSE(ArrayEquals(*built, *wide));  // the index type is part of the type
}

TEST(ArrayEqualsTest, FloatsTreatNaNsAsEqualAndZerosAsEqual) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr left, MakeFloat64Array({nan, 0.0, 1.5}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr right, MakeFloat64Array({-nan, -0.0, 1.5}));
  EXPECT_TRUE(ArrayEquals(*left, *right));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr other, MakeFloat64Array({nan, 0.0, 1.25}));
  EXPECT_FALSE(ArrayEquals(*left, *other));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr single_left, MakeFloat32Array({std::nanf("1")}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr single_right, MakeFloat32Array({std::nanf("2")}));
  EXPECT_TRUE(ArrayEquals(*single_left, *single_right));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr half_left,
                       MakeFixedWidthArray<uint16_t>(float16(), {0x7E00, 0x0000}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr half_right,
                       MakeFixedWidthArray<uint16_t>(float16(), {0x7E01, 0x8000}));
  EXPECT_TRUE(ArrayEquals(*half_left, *half_right));
}

TEST(ArrayEqualsTest, FixedSizeListsAndStructsSliceTheirChildren) {
  auto type = fixed_size_list(field("item", int32()), 2);
  FixedSizeListBuilder builder(type);
  auto* values = dynamic_cast<FixedWidthBuilder<int32_t>*>(builder.value_builder());
  for (int32_t list_index = 0; list_index < 4; ++list_index) {
    ASSERT_OK(builder.Append());
    ASSERT_OK(values->AppendValues({list_index * 10, list_index * 10 + 1}));
  }
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr lists, builder.Finish());
  auto expected = MakeData(type, 2, {nullptr}, 0, {Int32s({20, 21, 30, 31})});
  EXPECT_TRUE(ArrayEquals(*Slice(lists, 2, 2), *expected));
  EXPECT_FALSE(ArrayEquals(*Slice(lists, 1, 2), *expected));
  // A child that carries its own offset.
  auto offset_child =
      MakeData(type, 2, {nullptr}, 0, {Slice(Int32s({0, 0, 20, 21, 30, 31}), 2, 4)});
  EXPECT_TRUE(ArrayEquals(*offset_child, *expected));

  ASSERT_OK_AND_ASSIGN(ArrayDataPtr rows,
                       MakeStructArray({"a", "b"}, {Int32s({1, 2, 3}), Strings({"x", "y", "z"})}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr tail,
                       MakeStructArray({"a", "b"}, {Int32s({2, 3}), Strings({"y", "z"})}));
  EXPECT_TRUE(ArrayEquals(*Slice(rows, 1, 2), *tail));
  EXPECT_FALSE(ArrayEquals(*Slice(rows, 0, 2), *tail));
}

TEST(ArrayEqualsTest, MapsCompareEntries) {
  auto build = [](const std::vector<std::pair<std::string, int64_t>>& first,
                  bool second_null) -> Result<ArrayDataPtr> {
    MapBuilder builder(map(utf8(), int64()));
    auto* keys = static_cast<BinaryBuilder*>(builder.key_builder());
    auto* items = static_cast<FixedWidthBuilder<int64_t>*>(builder.item_builder());
    FERRY_RETURN_NOT_OK(builder.Append());
    for (const auto& [key, item] : first) {
      FERRY_RETURN_NOT_OK(keys->Append(key));
      FERRY_RETURN_NOT_OK(items->Append(item));
    }
    FERRY_RETURN_NOT_OK(second_null ? builder.AppendNull() : builder.AppendEmptyValue());
    return builder.Finish();
  };
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr a, build({{"k", 1}, {"l", 2}}, true));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr b, build({{"k", 1}, {"l", 2}}, true));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr c, build({{"k", 1}, {"l", 3}}, true));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr d, build({{"k", 1}, {"l", 2}}, false));
  EXPECT_TRUE(ArrayEquals(*a, *b));
  EXPECT_FALSE(ArrayEquals(*a, *c));
  EXPECT_FALSE(ArrayEquals(*a, *d));
  EXPECT_TRUE(ArrayEquals(*Slice(a, 1, 1), *Slice(b, 1, 1)));
}

// ---- ArrayToString -------------------------------------------------------------------------

TEST(ArrayToStringTest, PrintsOneLinePerValue) {
  EXPECT_EQ(ArrayToString(*Int32s({1, std::nullopt, -3})),
            int32()->ToString() + " (3 values, 1 nulls)\n  1\n  null\n  -3");
  std::vector<std::optional<int32_t>> many(25, 7);
  const std::string truncated = ArrayToString(*Int32s(many), 3);
  EXPECT_THAT(truncated, HasSubstr("  7\n  7\n  7\n  ... 22 more"));
  EXPECT_THAT(ArrayToString(*Int32s(many)), HasSubstr("... 5 more"));
  EXPECT_THAT(ArrayToString(*Int32s(many), -1), ::testing::Not(HasSubstr("more")));
}

TEST(ArrayToStringTest, FormatsEachKindOfValue) {
  EXPECT_THAT(ArrayToString(*Strings({"say \"hi\"\n", std::nullopt})),
              HasSubstr("\"say \\\"hi\\\"\\x0a\"\n  null"));
  EXPECT_THAT(ArrayToString(*Strings({std::string("\x01\xff", 2)}, binary())),
              HasSubstr("b\"\\x01\\xff\""));
  EXPECT_THAT(ArrayToString(*Strings({"abc"}, fixed_size_binary(3))), HasSubstr("b\"abc\""));
  ASSERT_OK_AND_ASSIGN(auto dates, MakeFixedWidthArray<int32_t>(date32(), {0, 19723, -1}));
  EXPECT_THAT(ArrayToString(*dates), HasSubstr("1970-01-01\n  2024-01-01\n  1969-12-31"));
  ASSERT_OK_AND_ASSIGN(auto dates64,
                       MakeFixedWidthArray<int64_t>(date64(), {int64_t{951782400000}}));
  EXPECT_THAT(ArrayToString(*dates64), HasSubstr("2000-02-29"));
  ASSERT_OK_AND_ASSIGN(auto stamps,
                       MakeFixedWidthArray<int64_t>(timestamp(TimeUnit::kSecond), {1700000000}));
  EXPECT_THAT(ArrayToString(*stamps), HasSubstr("1700000000"));
  ASSERT_OK_AND_ASSIGN(auto halves, MakeFixedWidthArray<uint16_t>(float16(), {0x3E00}));
  EXPECT_THAT(ArrayToString(*halves), HasSubstr("1.5"));
  ASSERT_OK_AND_ASSIGN(auto months, MakeFixedWidthArray<int32_t>(interval_months(), {14}));
  EXPECT_THAT(ArrayToString(*months), HasSubstr("14M"));
  ASSERT_OK_AND_ASSIGN(auto day_time, MakeFixedWidthArray<DayTimeInterval>(
                                          interval_day_time(), {DayTimeInterval{2, 30}}));
  EXPECT_THAT(ArrayToString(*day_time), HasSubstr("2d30ms"));
  ASSERT_OK_AND_ASSIGN(auto mdn, MakeFixedWidthArray<MonthDayNanoInterval>(
                                     interval_month_day_nano(), {MonthDayNanoInterval{1, 2, 3}}));
  EXPECT_THAT(ArrayToString(*mdn), HasSubstr("1M2d3ns"));
  ASSERT_OK_AND_ASSIGN(auto booleans, MakeBooleanArray({true, false}));
  EXPECT_THAT(ArrayToString(*booleans), HasSubstr("true\n  false"));
  ASSERT_OK_AND_ASSIGN(auto unsigned_values, MakeUInt64Array({UINT64_MAX}));
  EXPECT_THAT(ArrayToString(*unsigned_values), HasSubstr("18446744073709551615"));
  ASSERT_OK_AND_ASSIGN(auto nulls, MakeArrayOfNulls(null(), 2));
  EXPECT_THAT(ArrayToString(*nulls), HasSubstr("null\n  null"));

  DecimalBuilder decimals(decimal(64, 10, 3));
  ASSERT_OK(decimals.Append(5));
  ASSERT_OK(decimals.Append(-12345));
  ASSERT_OK(decimals.Append(0));
  ASSERT_OK_AND_ASSIGN(auto decimal_array, decimals.Finish());
  EXPECT_THAT(ArrayToString(*decimal_array), HasSubstr("0.005\n  -12.345\n  0.000"));
  DecimalBuilder negative_scale(decimal(32, 5, -2));
  ASSERT_OK(negative_scale.Append(7));
  ASSERT_OK_AND_ASSIGN(auto scaled_array, negative_scale.Finish());
  EXPECT_THAT(ArrayToString(*scaled_array), HasSubstr("700"));

  ListBuilder long_lists(list(field("item", int32())));
  ASSERT_OK(long_lists.Append());
  ASSERT_OK(long_lists.value_builder()->AppendEmptyValues(5));
  ASSERT_OK_AND_ASSIGN(auto long_list_array, long_lists.Finish());
  EXPECT_THAT(ArrayToString(*long_list_array, 2), HasSubstr("[0, 0, ... 3 more]"));
  EXPECT_EQ(ArrayToString(ArrayData()), "<array without type>");
}

// ---- RecordBatch ----------------------------------------------------------------------------

SchemaPtr TwoColumnSchema() {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("id", int32()), field("name", utf8())};
  return schema;
}

TEST(RecordBatchTest, MakeChecksColumns) {
  ArrayDataPtr ids = Int32s({1, 2, 3});
  ArrayDataPtr names = Strings({"a", std::nullopt, "c"});
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, RecordBatch::Make(TwoColumnSchema(), 3, {ids, names}));
  EXPECT_EQ(batch->num_rows(), 3);
  EXPECT_EQ(batch->num_columns(), 2);
  EXPECT_EQ(batch->column(1), names);

  auto no_schema = RecordBatch::Make(nullptr, 3, {ids, names});
  EXPECT_THAT(no_schema.status().message(), HasSubstr("needs a schema"));
  auto negative = RecordBatch::Make(TwoColumnSchema(), -1, {});
  EXPECT_THAT(negative.status().message(), HasSubstr("-1 rows"));
  auto count = RecordBatch::Make(TwoColumnSchema(), 3, {ids});
  EXPECT_EQ(count.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(count.status().message(), HasSubstr("2 fields but 1 columns"));
  auto type = RecordBatch::Make(TwoColumnSchema(), 3, {names, ids});
  EXPECT_EQ(type.status().code(), StatusCode::kTypeError);
  EXPECT_THAT(type.status().message(), HasSubstr("column 0 'id' has type"));
  auto length = RecordBatch::Make(TwoColumnSchema(), 2, {ids, names});
  EXPECT_THAT(length.status().message(), HasSubstr("column 0 'id' has 3 rows, the batch 2"));
  auto missing = RecordBatch::Make(TwoColumnSchema(), 3, {ids, nullptr});
  EXPECT_THAT(missing.status().message(), HasSubstr("column 1 'name' has no array"));
}

TEST(RecordBatchTest, StructArrayRoundTrip) {
  ASSERT_OK_AND_ASSIGN(
      ArrayDataPtr rows,
      MakeStructArray({"id", "name"}, {Int32s({1, 2, 3, 4}), Strings({"a", "b", "c", "d"})}));
  ArrayDataPtr middle = Slice(rows, 1, 2);
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch,
                       RecordBatch::FromStructArray(middle, {{"origin", "test"}}));
  EXPECT_EQ(batch->num_rows(), 2);
  EXPECT_EQ(batch->schema()->metadata.size(), 1u);
  EXPECT_TRUE(ArrayEquals(*batch->column(0), *Int32s({2, 3})));
  EXPECT_TRUE(ArrayEquals(*batch->column(1), *Strings({"b", "c"})));
  EXPECT_EQ(batch->column(0)->buffers[1], rows->children[0]->buffers[1]);  // no copy

  ArrayDataPtr as_struct = batch->ToStructArray();
  EXPECT_EQ(as_struct->length, 2);
  EXPECT_TRUE(ArrayEquals(*as_struct, *middle));
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr again, RecordBatch::FromStructArray(as_struct));
  EXPECT_TRUE(again->Equals(*batch));

  ASSERT_OK_AND_ASSIGN(ArrayDataPtr with_nulls,
                       MakeStructArray({"id"}, {Int32s({1, 2})}, {true, false}));
  auto nulls = RecordBatch::FromStructArray(with_nulls);
  EXPECT_EQ(nulls.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(nulls.status().message(), HasSubstr("1 top-level nulls"));
  auto not_struct = RecordBatch::FromStructArray(Int32s({1}));
  EXPECT_EQ(not_struct.status().code(), StatusCode::kTypeError);
  EXPECT_THAT(not_struct.status().message(), HasSubstr("needs a struct array"));
  auto none = RecordBatch::FromStructArray(nullptr);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalid);
  auto short_child = MakeData(struct_({field("id", int32())}), 3, {nullptr}, 0, {Int32s({1})});
  EXPECT_THAT(RecordBatch::FromStructArray(short_child).status().message(),
              HasSubstr("shorter than the struct array"));
}

TEST(RecordBatchTest, SliceEqualsAndToString) {
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch,
                       RecordBatch::Make(TwoColumnSchema(), 3,
                                         {Int32s({1, 2, 3}), Strings({"a", std::nullopt, "c"})}));
  std::shared_ptr<RecordBatch> tail = batch->Slice(1, 5);
  EXPECT_EQ(tail->num_rows(), 2);
  ASSERT_OK_AND_ASSIGN(
      RecordBatchPtr expected,
      RecordBatch::Make(TwoColumnSchema(), 2, {Int32s({2, 3}), Strings({std::nullopt, "c"})}));
  EXPECT_TRUE(tail->Equals(*expected));
  EXPECT_FALSE(batch->Equals(*expected));
  EXPECT_FALSE(batch->Slice(0, 2)->Equals(*expected));
  EXPECT_EQ(batch->Slice(7, 1)->num_rows(), 0);

  auto renamed = std::make_shared<Schema>();
  renamed->fields = {field("key", int32()), field("name", utf8())};
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr other_schema,
                       RecordBatch::Make(renamed, 2, expected->columns()));
  EXPECT_FALSE(tail->Equals(*other_schema));

  const std::string text = batch->ToString();
  EXPECT_THAT(text, HasSubstr("3 rows, 2 columns"));
  EXPECT_THAT(text, HasSubstr("id: "));
  EXPECT_THAT(text, HasSubstr("\n    2\n"));
  EXPECT_THAT(text, HasSubstr("name: "));
  EXPECT_THAT(text, HasSubstr("\"c\""));
}

}  // namespace
}  // namespace ferry
