#include "ferry/exchange/builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ferry/exchange/array.h"
#include "testing/sample_arrays.h"
#include "testing/test_pool.h"
#include "testing/test_util.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;

using ::ferry::testing::TestPool;

void ExpectAligned(const ArrayData& data, const std::string& path = "array") {
  for (size_t i = 0; i < data.buffers.size(); ++i) {
    if (data.buffers[i] == nullptr) continue;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data.buffers[i]->data()) % kBufferAlignment, 0u)
        << path << " buffer " << i;
  }
  for (size_t i = 0; i < data.children.size(); ++i) {
    ExpectAligned(*data.children[i], path + ".child" + std::to_string(i));
  }
  if (data.dictionary) ExpectAligned(*data.dictionary, path + ".dictionary");
}

template <typename T>
std::vector<T> Values(const ArrayData& data, int buffer_index = 1) {
  const T* values = data.GetValues<T>(buffer_index);
  return std::vector<T>(values, values + data.length);
}

std::vector<bool> Validity(const ArrayData& data) {
  std::vector<bool> valid;
  for (int64_t i = 0; i < data.length; ++i) valid.push_back(data.IsValid(i));
  return valid;
}

std::vector<int32_t> Offsets32(const ArrayData& data, int buffer_index = 1) {
  const int32_t* offsets = data.GetValues<int32_t>(buffer_index);
  return std::vector<int32_t>(offsets, offsets + data.length + 1);
}

// ---- Half floats ----------------------------------------------------------------------

TEST(HalfFloatTest, ConvertsExactValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
}

TEST(HalfFloatTest, RoundsToNearestEvenAndSaturatesToInfinity) {
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties to even.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7C00)));
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);  // below half the smallest subnormal
}

TEST(HalfFloatTest, RoundTripsEveryHalf) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float value = HalfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(FloatToHalf(value), bits) << bits;
  }
}

// ---- Null and boolean -------------------------------------------------------------------

TEST(NullBuilderTest, CountsNullsAndHasNoBuffers) {
  NullBuilder builder;
  ASSERT_OK(builder.AppendNulls(3));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.AppendEmptyValue());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->type->id, TypeId::kNull);
  EXPECT_EQ(array->length, 5);
  EXPECT_EQ(array->null_count, 5);
  EXPECT_TRUE(array->buffers.empty());
  EXPECT_EQ(builder.length(), 0);
}

TEST(NullBuilderTest, RejectsNegativeCounts) {
  NullBuilder builder;
  Status status = builder.AppendNulls(-1);
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_THAT(status.message(), HasSubstr("negative count"));
  EXPECT_EQ(builder.length(), 0);
}

TEST(BooleanBuilderTest, WithoutNullsOmitsValidity) {
  BooleanBuilder builder;
  ASSERT_OK(builder.Append(true));
  ASSERT_OK(builder.AppendValues({false, true, true}));
  ASSERT_OK(builder.AppendEmptyValue());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 5);
  EXPECT_EQ(array->null_count, 0);
  ASSERT_EQ(array->buffers.size(), 2u);
  EXPECT_EQ(array->buffers[0], nullptr);
  const uint8_t* bits = array->buffers[1]->data();
  EXPECT_EQ(bits[0], 0b01101);
  ExpectAligned(*array);
}

TEST(BooleanBuilderTest, WithNulls) {
  BooleanBuilder builder;
  ASSERT_OK(builder.Append(true));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.AppendOptional(false));
  ASSERT_OK(builder.AppendOptional(std::nullopt));
  ASSERT_OK(builder.Append(true));
  EXPECT_EQ(builder.null_count(), 2);
  EXPECT_TRUE(builder.value(4));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->null_count, 2);
  ASSERT_NE(array->buffers[0], nullptr);
  EXPECT_EQ(Validity(*array), (std::vector<bool>{true, false, true, false, true}));
  EXPECT_EQ(array->buffers[1]->data()[0], 0b10001);
  ExpectAligned(*array);
}

// ---- Fixed-width ------------------------------------------------------------------------------

TEST(FixedWidthBuilderTest, Int32WithoutNulls) {
  Int32Builder builder;
  ASSERT_OK(builder.Reserve(4));
  ASSERT_OK(builder.Append(1));
  ASSERT_OK(builder.AppendValues({2, 3}));
  ASSERT_OK(builder.AppendEmptyValue());
  EXPECT_EQ(builder.value(2), 3);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_TRUE(array->type->Equals(*int32()));
  EXPECT_EQ(array->null_count, 0);
  EXPECT_EQ(array->buffers[0], nullptr);
  EXPECT_EQ(Values<int32_t>(*array), (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_EQ(array->buffers[1]->size(), 16);
}

TEST(FixedWidthBuilderTest, Int64WithNullsAndValidBytes) {
  Int64Builder builder;
  const int64_t values[] = {10, 20, 30};
  const uint8_t valid[] = {1, 0, 1};
  ASSERT_OK(builder.AppendValues(values, 3, valid));
  ASSERT_OK(builder.AppendNulls(2));
  ASSERT_OK(builder.AppendOptional(40));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 6);
  EXPECT_EQ(array->null_count, 3);
  EXPECT_EQ(Validity(*array), (std::vector<bool>{true, false, true, false, false, true}));
  EXPECT_EQ(array->GetValues<int64_t>(1)[0], 10);
  EXPECT_EQ(array->GetValues<int64_t>(1)[5], 40);
  ExpectAligned(*array);
}

TEST(FixedWidthBuilderTest, NullAfterValuesBackfillsTheBitmap) {
  UInt8Builder builder;
  for (int i = 0; i < 20; ++i) ASSERT_OK(builder.Append(static_cast<uint8_t>(i)));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->null_count, 1);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(array->IsValid(i)) << i;
  EXPECT_FALSE(array->IsValid(20));
  EXPECT_EQ(array->GetNullCount(), 1);
}

TEST(FixedWidthBuilderTest, EveryPresetType) {
  {
    Int8Builder builder;
    ASSERT_OK(builder.Append(-5));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(array->type->id, TypeId::kInt8);
    EXPECT_EQ(Values<int8_t>(*array), std::vector<int8_t>{-5});
  }
  {
    Int16Builder builder;
    ASSERT_OK(builder.Append(-300));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(array->type->id, TypeId::kInt16);
    EXPECT_EQ(Values<int16_t>(*array), std::vector<int16_t>{-300});
  }
  {
    UInt16Builder builder;
    ASSERT_OK(builder.Append(65535));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(array->type->id, TypeId::kUInt16);
  }
  {
    UInt32Builder builder;
    ASSERT_OK(builder.Append(4000000000u));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(Values<uint32_t>(*array), std::vector<uint32_t>{4000000000u});
  }
  {
    UInt64Builder builder;
    ASSERT_OK(builder.Append(UINT64_MAX));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(Values<uint64_t>(*array), std::vector<uint64_t>{UINT64_MAX});
  }
  {
    HalfFloatBuilder builder;
    ASSERT_OK(builder.Append(FloatToHalf(1.5f)));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(array->type->id, TypeId::kHalfFloat);
    EXPECT_EQ(HalfToFloat(array->GetValues<uint16_t>(1)[0]), 1.5f);
  }
  {
    FloatBuilder builder;
    ASSERT_OK(builder.Append(2.5f));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(Values<float>(*array), std::vector<float>{2.5f});
  }
  {
    DoubleBuilder builder;
    ASSERT_OK(builder.Append(-0.25));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(Values<double>(*array), std::vector<double>{-0.25});
  }
  {
    Date32Builder builder;
    ASSERT_OK(builder.Append(19000));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(array->type->id, TypeId::kDate32);
  }
  {
    Date64Builder builder;
    ASSERT_OK(builder.Append(int64_t{86400000}));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(array->type->id, TypeId::kDate64);
  }
  {
    MonthIntervalBuilder builder;
    ASSERT_OK(builder.Append(14));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(array->type->id, TypeId::kIntervalMonths);
  }
  {
    DayTimeIntervalBuilder builder;
    ASSERT_OK(builder.Append(DayTimeInterval{3, 500}));
    ASSERT_OK(builder.AppendNull());
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(array->type->id, TypeId::kIntervalDayTime);
    EXPECT_EQ(array->buffers[1]->size(), 16);
    EXPECT_EQ((array->GetValues<DayTimeInterval>(1)[0]), (DayTimeInterval{3, 500}));
  }
  {
    MonthDayNanoIntervalBuilder builder;
    ASSERT_OK(builder.Append(MonthDayNanoInterval{1, 2, 3000000000LL}));
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_EQ(array->buffers[1]->size(), 16);
    EXPECT_EQ((array->GetValues<MonthDayNanoInterval>(1)[0]),
              (MonthDayNanoInterval{1, 2, 3000000000LL}));
  }
}

TEST(FixedWidthBuilderTest, ParameterisedTemporalTypes) {
  TimestampBuilder timestamps(timestamp(TimeUnit::kMicro, "UTC"));
  ASSERT_OK(timestamps.status());
  ASSERT_OK(timestamps.Append(1700000000000000));
  ASSERT_OK(timestamps.AppendNull());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, timestamps.Finish());
  EXPECT_EQ(array->type->timezone, "UTC");
  EXPECT_EQ(array->type->unit, TimeUnit::kMicro);
  EXPECT_EQ(array->null_count, 1);

  Time32Builder times(time32(TimeUnit::kMilli));
  ASSERT_OK(times.Append(1000));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr time_array, times.Finish());
  EXPECT_EQ(time_array->type->id, TypeId::kTime32);

  Time64Builder nanos(time64(TimeUnit::kNano));
  ASSERT_OK(nanos.Append(5));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr nano_array, nanos.Finish());
  EXPECT_EQ(nano_array->type->id, TypeId::kTime64);

  DurationBuilder durations(duration(TimeUnit::kSecond));
  ASSERT_OK(durations.Append(-7));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr duration_array, durations.Finish());
  EXPECT_EQ(Values<int64_t>(*duration_array), std::vector<int64_t>{-7});
}

TEST(FixedWidthBuilderTest, RejectsATypeOfAnotherWidth) {
  FixedWidthBuilder<int32_t> builder(int64());
  EXPECT_EQ(builder.status().code(), StatusCode::kTypeError);
  ASSERT_OK(builder.Append(1));  // harmless: Finish reports the error
  auto result = builder.Finish();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kTypeError);
  EXPECT_THAT(result.status().message(), HasSubstr("cannot build type int64"));

  FixedWidthBuilder<int32_t> no_type(nullptr);
  EXPECT_THAT(no_type.status().message(), HasSubstr("needs a type"));
  FixedWidthBuilder<int32_t> not_fixed(utf8());
  EXPECT_EQ(not_fixed.status().code(), StatusCode::kTypeError);
  FixedWidthBuilder<int32_t> right(int32());
  ASSERT_OK(right.status());
}

TEST(FixedWidthBuilderTest, FinishResetsForReuse) {
  Int32Builder builder;
  ASSERT_OK(builder.Append(1));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr first, builder.Finish());
  EXPECT_EQ(builder.length(), 0);
  EXPECT_EQ(builder.null_count(), 0);
  ASSERT_OK(builder.Append(7));
  ASSERT_OK(builder.Append(8));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr second, builder.Finish());
  EXPECT_EQ(second->length, 2);
  EXPECT_EQ(second->null_count, 0);
  EXPECT_EQ(second->buffers[0], nullptr);
  EXPECT_EQ(Values<int32_t>(*second), (std::vector<int32_t>{7, 8}));
  // The first array is untouched by the reuse.
  EXPECT_EQ(first->length, 2);
  EXPECT_EQ(first->GetValues<int32_t>(1)[0], 1);
  EXPECT_FALSE(first->IsValid(1));
}

TEST(FixedWidthBuilderTest, EmptyArrayStillHasAlignedBuffers) {
  Int32Builder builder;
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 0);
  ASSERT_NE(array->buffers[1], nullptr);
  EXPECT_EQ(array->buffers[1]->size(), 0);
  ExpectAligned(*array);
}

// ---- Decimal and fixed-size binary ---------------------------------------------------------

TEST(DecimalBuilderTest, SignExtendsInt64) {
  DecimalBuilder builder(decimal(128, 10, 2));
  ASSERT_OK(builder.status());
  ASSERT_OK(builder.Append(-1));
  ASSERT_OK(builder.Append(12345));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->buffers[1]->size(), 48);
  const uint8_t* bytes = array->buffers[1]->data();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(bytes[i], 0xFF) << i;
  EXPECT_EQ(bytes[16], 12345 & 0xFF);
  EXPECT_EQ(bytes[17], 12345 >> 8);
  for (int i = 18; i < 32; ++i) EXPECT_EQ(bytes[i], 0) << i;
  EXPECT_THAT(ArrayToString(*array), HasSubstr("123.45"));
  EXPECT_THAT(ArrayToString(*array), HasSubstr("-0.01"));
}

TEST(DecimalBuilderTest, EveryWidthAndRangeCheck) {
  DecimalBuilder small(decimal(32, 9, 0));
  ASSERT_OK(small.Append(INT32_MAX));
  Status status = small.Append(int64_t{1} << 40);
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_THAT(status.message(), HasSubstr("does not fit"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array32, small.Finish());
  EXPECT_EQ(array32->length, 1);
  EXPECT_EQ(array32->GetValues<int32_t>(1)[0], INT32_MAX);

  DecimalBuilder medium(decimal(64, 18, 3));
  ASSERT_OK(medium.Append(-5));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array64, medium.Finish());
  EXPECT_EQ(array64->GetValues<int64_t>(1)[0], -5);

  DecimalBuilder large(decimal(256, 76, 0));
  uint8_t bytes[32] = {};
  bytes[31] = 0x80;  // the most negative 256-bit value
  ASSERT_OK(large.AppendLittleEndian(bytes));
  ASSERT_OK(large.Append(INT64_MIN));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array256, large.Finish());
  EXPECT_EQ(array256->buffers[1]->size(), 64);
  EXPECT_THAT(ArrayToString(*array256),
              HasSubstr("-578960446186580977117854925043439539266349923328202820197287920039565648"
                        "19968"));
  EXPECT_THAT(ArrayToString(*array256), HasSubstr("-9223372036854775808"));

  DecimalBuilder wrong(int32());
  EXPECT_EQ(wrong.status().code(), StatusCode::kTypeError);
}

TEST(FixedSizeBinaryBuilderTest, ChecksTheWidth) {
  FixedSizeBinaryBuilder builder(fixed_size_binary(4));
  ASSERT_OK(builder.Append("abcd"));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.AppendOptional("wxyz"));
  Status status = builder.Append("abc");
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_THAT(status.message(), HasSubstr("must have 4 bytes, got 3"));
  EXPECT_EQ(builder.value(2), "wxyz");
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 3);
  EXPECT_EQ(array->null_count, 1);
  EXPECT_EQ(array->buffers[1]->view(), std::string_view("abcd\0\0\0\0wxyz", 12));

  FixedSizeBinaryBuilder wrong(binary());
  EXPECT_EQ(wrong.status().code(), StatusCode::kTypeError);
}

// ---- Binary -----------------------------------------------------------------------------------

TEST(BinaryBuilderTest, Utf8WithNulls) {
  Utf8Builder builder;
  ASSERT_OK(builder.Append("hello"));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append(""));
  ASSERT_OK(builder.AppendOptional("ferry"));
  ASSERT_OK(builder.AppendEmptyValue());
  EXPECT_EQ(builder.value(3), "ferry");
  EXPECT_EQ(builder.value(2), "");
  EXPECT_EQ(builder.value_data_length(), 10);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->type->id, TypeId::kUtf8);
  EXPECT_EQ(array->length, 5);
  EXPECT_EQ(array->null_count, 1);
  EXPECT_EQ(Offsets32(*array), (std::vector<int32_t>{0, 5, 5, 5, 10, 10}));
  EXPECT_EQ(array->buffers[2]->view(), "helloferry");
  ExpectAligned(*array);
}

TEST(BinaryBuilderTest, BinaryWithoutNullsAndEmpty) {
  BinaryBuilder builder;
  ASSERT_OK(builder.AppendValues({"a", std::string("\0b", 2)}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->type->id, TypeId::kBinary);
  EXPECT_EQ(array->buffers[0], nullptr);
  EXPECT_EQ(array->buffers[2]->view(), std::string_view("a\0b", 3));

  ASSERT_OK_AND_ASSIGN(ArrayDataPtr empty, builder.Finish());
  EXPECT_EQ(empty->length, 0);
  EXPECT_EQ(Offsets32(*empty), std::vector<int32_t>{0});
}

TEST(BinaryBuilderTest, LargeVariantsUseInt64Offsets) {
  LargeUtf8Builder builder;
  ASSERT_OK(builder.Append("ab"));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append("cde"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->type->id, TypeId::kLargeUtf8);
  const int64_t* offsets = array->GetValues<int64_t>(1);
  EXPECT_EQ(std::vector<int64_t>(offsets, offsets + 4), (std::vector<int64_t>{0, 2, 2, 5}));

  LargeBinaryBuilder binary_builder;
  ASSERT_OK(binary_builder.Append("x"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr binary_array, binary_builder.Finish());
  EXPECT_EQ(binary_array->type->id, TypeId::kLargeBinary);

  BinaryBuilder wrong(large_utf8());
  EXPECT_EQ(wrong.status().code(), StatusCode::kTypeError);
  LargeBinaryBuilder wrong_large(utf8());
  EXPECT_EQ(wrong_large.status().code(), StatusCode::kTypeError);
}

// ---- Binary views --------------------------------------------------------------------------

struct View {
  int32_t length;
  std::string inline_or_prefix;
  int32_t buffer_index = -1;
  int32_t offset = -1;
};

View ReadView(const ArrayData& data, int64_t index) {
  const uint8_t* view = data.buffers[1]->data() + (data.offset + index) * 16;
  View result;
  std::memcpy(&result.length, view, 4);
  if (result.length <= 12) {
    result.inline_or_prefix.assign(reinterpret_cast<const char*>(view + 4), 12);
  } else {
    result.inline_or_prefix.assign(reinterpret_cast<const char*>(view + 4), 4);
    std::memcpy(&result.buffer_index, view + 8, 4);
    std::memcpy(&result.offset, view + 12, 4);
  }
  return result;
}

TEST(BinaryViewBuilderTest, InlinesShortValuesAndRollsBlocks) {
  BinaryViewBuilder builder(utf8_view(), default_memory_pool(), /*block_size=*/32);
  ASSERT_OK(builder.Append("short"));                    // inline
  ASSERT_OK(builder.Append("exactly12byt"));             // inline, at the limit
  ASSERT_OK(builder.Append("thirteen byte"));            // block 0 offset 0
  ASSERT_OK(builder.Append("another long value"));       // 13 + 18 = 31 <= 32: block 0
  ASSERT_OK(builder.Append("spills into a new block"));  // block 1
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append(std::string(100, 'z')));  // larger than a block: block 2
  EXPECT_EQ(builder.num_data_buffers(), 3);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->type->id, TypeId::kUtf8View);
  EXPECT_EQ(array->length, 7);
  EXPECT_EQ(array->null_count, 1);
  ASSERT_EQ(array->buffers.size(), 5u);  // validity, views, 3 data buffers
  EXPECT_EQ(array->buffers[1]->size(), 7 * 16);

  View short_view = ReadView(*array, 0);
  EXPECT_EQ(short_view.length, 5);
  EXPECT_EQ(short_view.inline_or_prefix, std::string("short\0\0\0\0\0\0\0", 12));
  EXPECT_EQ(ReadView(*array, 1).inline_or_prefix, "exactly12byt");

  View first_long = ReadView(*array, 2);
  EXPECT_EQ(first_long.length, 13);
  EXPECT_EQ(first_long.inline_or_prefix, "thir");
  EXPECT_EQ(first_long.buffer_index, 0);
  EXPECT_EQ(first_long.offset, 0);
  View second_long = ReadView(*array, 3);
  EXPECT_EQ(second_long.buffer_index, 0);
  EXPECT_EQ(second_long.offset, 13);
  View spilled = ReadView(*array, 4);
  EXPECT_EQ(spilled.buffer_index, 1);
  EXPECT_EQ(spilled.offset, 0);
  View null_view = ReadView(*array, 5);
  EXPECT_EQ(null_view.length, 0);
  View huge = ReadView(*array, 6);
  EXPECT_EQ(huge.buffer_index, 2);
  EXPECT_EQ(array->buffers[4]->size(), 100);
  EXPECT_EQ(array->buffers[2]->view(), "thirteen byteanother long value");
  ExpectAligned(*array);
}

TEST(BinaryViewBuilderTest, AllInlineHasNoDataBuffers) {
  BinaryViewBuilder builder;
  ASSERT_OK(builder.Append("a"));
  ASSERT_OK(builder.AppendEmptyValue());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->type->id, TypeId::kBinaryView);
  EXPECT_EQ(array->buffers.size(), 2u);
  EXPECT_EQ(array->buffers[0], nullptr);
  EXPECT_EQ(builder.block_size(), BinaryViewBuilder::kDefaultBlockSize);

  Utf8ViewBuilder utf8_builder;
  EXPECT_EQ(utf8_builder.type()->id, TypeId::kUtf8View);
  BinaryViewBuilder wrong(utf8());
  EXPECT_EQ(wrong.status().code(), StatusCode::kTypeError);
}

// ---- Lists --------------------------------------------------------------------------------------

TEST(ListBuilderTest, ListOfInt32WithNulls) {
  ListBuilder builder(list(field("item", int32())));
  ASSERT_OK(builder.status());
  auto* values = dynamic_cast<FixedWidthBuilder<int32_t>*>(builder.value_builder());
  ASSERT_NE(values, nullptr);
  ASSERT_OK(builder.Append());
  ASSERT_OK(values->Append(1));
  ASSERT_OK(values->Append(2));
  ASSERT_OK(builder.Append());  // empty list
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append(true));
  ASSERT_OK(values->AppendNull());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 4);
  EXPECT_EQ(array->null_count, 1);
  EXPECT_EQ(Offsets32(*array), (std::vector<int32_t>{0, 2, 2, 2, 3}));
  ASSERT_EQ(array->children.size(), 1u);
  EXPECT_EQ(array->children[0]->length, 3);
  EXPECT_EQ(array->children[0]->null_count, 1);
  EXPECT_EQ(ArrayToString(*array, 10),
            array->type->ToString() + " (4 values, 1 nulls)\n  [1, 2]\n  []\n  null\n  [null]");
  ExpectAligned(*array);

  // Reuse: the child was reset too.
  ASSERT_OK(builder.Append());
  ASSERT_OK(values->Append(9));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr second, builder.Finish());
  EXPECT_EQ(second->length, 1);
  EXPECT_EQ(second->null_count, 0);
  EXPECT_EQ(second->buffers[0], nullptr);
  EXPECT_EQ(second->children[0]->length, 1);
}

TEST(ListBuilderTest, NestedListsAndLargeList) {
  ASSERT_OK_AND_ASSIGN(auto builder,
                       MakeBuilder(large_list(field("item", list(field("item", utf8()))))));
  auto* outer = dynamic_cast<LargeListBuilder*>(builder.get());
  ASSERT_NE(outer, nullptr);
  auto* inner = dynamic_cast<ListBuilder*>(outer->value_builder());
  ASSERT_NE(inner, nullptr);
  auto* strings = dynamic_cast<BinaryBuilder*>(inner->value_builder());
  ASSERT_NE(strings, nullptr);
  ASSERT_OK(outer->Append());
  ASSERT_OK(inner->Append());
  ASSERT_OK(strings->Append("a"));
  ASSERT_OK(inner->AppendNull());
  ASSERT_OK(outer->AppendNull());
  ASSERT_OK(outer->Append());
  ASSERT_OK(inner->Append());
  ASSERT_OK(strings->Append("b"));
  ASSERT_OK(strings->Append("c"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder->Finish());
  EXPECT_EQ(array->length, 3);
  const int64_t* offsets = array->GetValues<int64_t>(1);
  EXPECT_EQ(std::vector<int64_t>(offsets, offsets + 4), (std::vector<int64_t>{0, 2, 2, 3}));
  EXPECT_EQ(array->children[0]->length, 3);
  EXPECT_EQ(Offsets32(*array->children[0]), (std::vector<int32_t>{0, 1, 1, 3}));
  EXPECT_THAT(ArrayToString(*array), HasSubstr("[[\"a\"], null]"));
  EXPECT_THAT(ArrayToString(*array), HasSubstr("[[\"b\", \"c\"]]"));
  ExpectAligned(*array);
}

TEST(ListBuilderTest, WrongTypeGivesAPlaceholderChildAndAnError) {
  ListBuilder builder(int32());
  EXPECT_EQ(builder.status().code(), StatusCode::kTypeError);
  ASSERT_NE(builder.value_builder(), nullptr);
  ASSERT_OK(builder.Append());
  auto result = builder.Finish();
  EXPECT_EQ(result.status().code(), StatusCode::kTypeError);
  EXPECT_THAT(result.status().message(), HasSubstr("cannot build type int32"));
}

TEST(ListViewBuilderTest, AppendedElementsTakeTheValuesThatFollow) {
  ListViewBuilder builder(list_view(field("item", int16())));
  auto* values = dynamic_cast<FixedWidthBuilder<int16_t>*>(builder.value_builder());
  ASSERT_NE(values, nullptr);
  ASSERT_OK(builder.Append());
  ASSERT_OK(values->AppendValues({1, 2, 3}));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append());
  ASSERT_OK(values->Append(4));
  ASSERT_OK(builder.AppendView(1, 2));  // shares values 2, 3 with the first element
  ASSERT_OK(builder.AppendView(3, 0));
  ASSERT_OK(builder.AppendEmptyValue());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 6);
  EXPECT_EQ(array->null_count, 1);
  const int32_t* offsets = array->GetValues<int32_t>(1);
  const int32_t* sizes = array->GetValues<int32_t>(2);
  EXPECT_EQ(std::vector<int32_t>(offsets, offsets + 6), (std::vector<int32_t>{0, 0, 3, 1, 3, 0}));
  EXPECT_EQ(std::vector<int32_t>(sizes, sizes + 6), (std::vector<int32_t>{3, 0, 1, 2, 0, 0}));
  EXPECT_THAT(ArrayToString(*array), HasSubstr("[1, 2, 3]\n  null\n  [4]\n  [2, 3]\n  []"));
  ExpectAligned(*array);
}

TEST(ListViewBuilderTest, RejectsViewsOutsideTheChild) {
  LargeListViewBuilder builder(large_list_view(field("item", int32())));
  ASSERT_OK(builder.status());
  Status negative = builder.AppendView(-1, 2);
  EXPECT_EQ(negative.code(), StatusCode::kInvalid);
  EXPECT_THAT(negative.message(), HasSubstr("out of range"));
  EXPECT_EQ(builder.length(), 0);
  ASSERT_OK(builder.AppendView(0, 5));
  ASSERT_OK(builder.value_builder()->AppendEmptyValues(4));
  auto result = builder.Finish();
  EXPECT_EQ(result.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(result.status().message(), HasSubstr("exceeds the child length 4"));

  // After the failed Finish the builder is empty again and works.
  EXPECT_EQ(builder.length(), 0);
  ASSERT_OK(builder.AppendView(0, 1));
  ASSERT_OK(builder.value_builder()->AppendEmptyValue());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  const int64_t* sizes = array->GetValues<int64_t>(2);
  EXPECT_EQ(sizes[0], 1);
}

TEST(FixedSizeListBuilderTest, NullsFillTheChild) {
  FixedSizeListBuilder builder(fixed_size_list(field("item", float32()), 2));
  auto* values = dynamic_cast<FixedWidthBuilder<float>*>(builder.value_builder());
  ASSERT_NE(values, nullptr);
  EXPECT_EQ(builder.list_size(), 2);
  ASSERT_OK(builder.Append());
  ASSERT_OK(values->AppendValues({1.0f, 2.0f}));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append());
  ASSERT_OK(values->Append(3.0f));
  ASSERT_OK(values->AppendNull());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 3);
  EXPECT_EQ(array->null_count, 1);
  ASSERT_EQ(array->buffers.size(), 1u);
  EXPECT_EQ(array->children[0]->length, 6);
  EXPECT_EQ(ArrayToString(*array),
            array->type->ToString() + " (3 values, 1 nulls)\n  [1, 2]\n  null\n  [3, null]");
}

TEST(FixedSizeListBuilderTest, WrongChildCountIsAnError) {
  FixedSizeListBuilder builder(fixed_size_list(field("item", int8()), 3));
  ASSERT_OK(builder.Append());
  ASSERT_OK(builder.Append());
  ASSERT_OK(builder.value_builder()->AppendEmptyValues(5));
  auto result = builder.Finish();
  EXPECT_EQ(result.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(result.status().message(), HasSubstr("needs 6 child values, got 5"));
}

// ---- Struct and map ---------------------------------------------------------------------------

TEST(StructBuilderTest, AppendsAndNullsFillFields) {
  StructBuilder builder(struct_({field("a", int32()), field("b", utf8())}));
  ASSERT_OK(builder.status());
  ASSERT_EQ(builder.num_fields(), 2);
  auto* a = dynamic_cast<FixedWidthBuilder<int32_t>*>(builder.field_builder(0));
  auto* b = dynamic_cast<BinaryBuilder*>(builder.field_builder(1));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_OK(builder.Append());
  ASSERT_OK(a->Append(1));
  ASSERT_OK(b->Append("x"));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append(true));
  ASSERT_OK(a->AppendNull());
  ASSERT_OK(b->Append("y"));
  ASSERT_OK(builder.AppendEmptyValue());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 4);
  EXPECT_EQ(array->null_count, 1);
  EXPECT_EQ(array->children[0]->length, 4);
  EXPECT_EQ(array->children[1]->length, 4);
  EXPECT_EQ(ArrayToString(*array), array->type->ToString() +
                                       " (4 values, 1 nulls)\n  {a: 1, b: \"x\"}\n  null\n"
                                       "  {a: null, b: \"y\"}\n  {a: 0, b: \"\"}");
  ExpectAligned(*array);
}

TEST(StructBuilderTest, FieldLengthMismatchIsAnError) {
  StructBuilder builder(struct_({field("a", int32()), field("b", int64())}));
  ASSERT_OK(builder.Append());
  ASSERT_OK(builder.field_builder(0)->AppendEmptyValue());
  auto result = builder.Finish();
  EXPECT_EQ(result.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(result.status().message(), HasSubstr("struct field 'b' has 0 values, the struct 1"));
}

TEST(StructBuilderTest, UnsupportedFieldTypeNamesTheField) {
  StructBuilder builder(struct_(
      {field("ok", int32()), field("bad", dictionary(int32(), list(field("item", int8()))))}));
  EXPECT_EQ(builder.status().code(), StatusCode::kTypeError);
  EXPECT_THAT(builder.status().message(), HasSubstr("field 'bad'"));
  ASSERT_EQ(builder.num_fields(), 2);
  ASSERT_NE(builder.field_builder(1), nullptr);
}

TEST(MapBuilderTest, KeysAndItems) {
  MapBuilder builder(map(utf8(), int32()));
  ASSERT_OK(builder.status());
  auto* keys = dynamic_cast<BinaryBuilder*>(builder.key_builder());
  auto* items = dynamic_cast<FixedWidthBuilder<int32_t>*>(builder.item_builder());
  ASSERT_NE(keys, nullptr);
  ASSERT_NE(items, nullptr);
  ASSERT_OK(builder.Append());
  ASSERT_OK(keys->Append("a"));
  ASSERT_OK(items->Append(1));
  ASSERT_OK(keys->Append("b"));
  ASSERT_OK(items->AppendNull());
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.AppendEmptyValue());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 3);
  EXPECT_EQ(array->null_count, 1);
  EXPECT_EQ(Offsets32(*array), (std::vector<int32_t>{0, 2, 2, 2}));
  ASSERT_EQ(array->children.size(), 1u);
  const ArrayData& entries = *array->children[0];
  EXPECT_EQ(entries.type->id, TypeId::kStruct);
  EXPECT_EQ(entries.length, 2);
  EXPECT_EQ(entries.null_count, 0);
  EXPECT_EQ(entries.children.size(), 2u);
  EXPECT_THAT(ArrayToString(*array), HasSubstr("{\"a\": 1, \"b\": null}\n  null\n  {}"));
  ExpectAligned(*array);
}

TEST(MapBuilderTest, RejectsNullKeysAndUnpairedItems) {
  MapBuilder builder(map(int32(), int32()));
  ASSERT_OK(builder.Append());
  ASSERT_OK(builder.key_builder()->AppendNull());
  ASSERT_OK(builder.item_builder()->AppendEmptyValue());
  auto null_key = builder.Finish();
  EXPECT_EQ(null_key.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(null_key.status().message(), HasSubstr("map keys must not be null"));

  ASSERT_OK(builder.Append());
  ASSERT_OK(builder.key_builder()->AppendEmptyValue());
  auto unpaired = builder.Finish();
  EXPECT_EQ(unpaired.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(unpaired.status().message(), HasSubstr("1 keys but 0 items"));

  MapBuilder wrong(list(field("item", int32())));
  EXPECT_EQ(wrong.status().code(), StatusCode::kTypeError);
  ASSERT_NE(wrong.key_builder(), nullptr);
  ASSERT_NE(wrong.item_builder(), nullptr);
}

// ---- Unions -------------------------------------------------------------------------------------

TEST(UnionBuilderTest, DenseRecordsChildOffsets) {
  DenseUnionBuilder builder(dense_union({field("i", int32()), field("s", utf8())}, {5, 7}));
  ASSERT_OK(builder.status());
  auto* ints = dynamic_cast<FixedWidthBuilder<int32_t>*>(builder.child_for_code(5));
  auto* strings = dynamic_cast<BinaryBuilder*>(builder.child_for_code(7));
  ASSERT_NE(ints, nullptr);
  ASSERT_NE(strings, nullptr);
  EXPECT_EQ(builder.child_for_code(6), nullptr);
  EXPECT_EQ(builder.child_for_code(-3), nullptr);
  ASSERT_OK(builder.Append(5));
  ASSERT_OK(ints->Append(10));
  ASSERT_OK(builder.Append(7));
  ASSERT_OK(strings->Append("s"));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append(5));
  ASSERT_OK(ints->Append(11));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 4);
  EXPECT_EQ(array->null_count, 0);
  ASSERT_EQ(array->buffers.size(), 2u);
  EXPECT_EQ(Values<int8_t>(*array, 0), (std::vector<int8_t>{5, 7, 5, 5}));
  EXPECT_EQ(Values<int32_t>(*array, 1), (std::vector<int32_t>{0, 0, 1, 2}));
  EXPECT_EQ(array->children[0]->length, 3);
  EXPECT_EQ(array->children[0]->null_count, 1);
  EXPECT_EQ(array->children[1]->length, 1);
  EXPECT_EQ(ArrayToString(*array),
            array->type->ToString() + " (4 values, 0 nulls)\n  10\n  \"s\"\n  null\n  11");
  ExpectAligned(*array);
}

TEST(UnionBuilderTest, UndeclaredCodeAndMissingChildValue) {
  DenseUnionBuilder builder(dense_union({field("i", int32())}, {2}));
  Status status = builder.Append(3);
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_THAT(status.message(), HasSubstr("has no type code 3"));
  EXPECT_EQ(builder.length(), 0);
  ASSERT_OK(builder.Append(2));  // ... but no value appended to the child
  auto result = builder.Finish();
  EXPECT_EQ(result.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(result.status().message(), HasSubstr("refers to value 0 of child 'i'"));

  DenseUnionBuilder duplicate(dense_union({field("a", int32()), field("b", int32())}, {1, 1}));
  EXPECT_EQ(duplicate.status().code(), StatusCode::kTypeError);
  EXPECT_THAT(duplicate.status().message(), HasSubstr("distinct"));
  EXPECT_EQ(duplicate.child_for_code(1), nullptr);  // nothing half-built is reachable
  EXPECT_EQ(duplicate.Append(1).code(), StatusCode::kInvalid);
  EXPECT_EQ(duplicate.AppendNull().code(), StatusCode::kInvalid);
  SparseUnionBuilder wrong_kind(dense_union({field("a", int32())}));
  EXPECT_EQ(wrong_kind.status().code(), StatusCode::kTypeError);
}

TEST(UnionBuilderTest, SparseFillsOtherChildren) {
  SparseUnionBuilder builder(sparse_union({field("i", int64()), field("b", boolean())}));
  ASSERT_OK(builder.status());
  ASSERT_OK(builder.Append(1));
  ASSERT_OK(builder.child_for_code(1)->AppendEmptyValue());  // false
  ASSERT_OK(builder.Append(0));
  ASSERT_OK(dynamic_cast<FixedWidthBuilder<int64_t>*>(builder.child(0))->Append(42));
  ASSERT_OK(builder.AppendNulls(2));
  ASSERT_OK(builder.AppendEmptyValue());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 5);
  ASSERT_EQ(array->buffers.size(), 1u);
  EXPECT_EQ(Values<int8_t>(*array, 0), (std::vector<int8_t>{1, 0, 0, 0, 0}));
  EXPECT_EQ(array->children[0]->length, 5);
  EXPECT_EQ(array->children[1]->length, 5);
  EXPECT_EQ(array->children[0]->null_count, 2);
  EXPECT_THAT(ArrayToString(*array), HasSubstr("false\n  42\n  null\n  null\n  0"));
}

TEST(UnionBuilderTest, SparseChildLengthMismatchIsAnError) {
  SparseUnionBuilder builder(sparse_union({field("i", int64()), field("b", boolean())}));
  ASSERT_OK(builder.Append(0));  // the value for child 0 never comes
  auto result = builder.Finish();
  EXPECT_EQ(result.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(result.status().message(), HasSubstr("sparse union child 'i' has 0 values"));
}

// ---- Run-end encoded ----------------------------------------------------------------------------

TEST(RunEndEncodedBuilderTest, MergesEqualRuns) {
  RunEndEncodedBuilder builder(run_end_encoded(int32(), int64()));
  ASSERT_OK(builder.status());
  ASSERT_OK(builder.AppendValueRun<int64_t>(7, 3));
  ASSERT_OK(builder.AppendValueRun<int64_t>(7, 2));  // merges
  ASSERT_OK(builder.AppendNulls(2));
  ASSERT_OK(builder.AppendNull());  // merges with the null run
  ASSERT_OK(builder.AppendValueRun<int64_t>(8, 1));
  EXPECT_EQ(builder.num_runs(), 3);
  EXPECT_EQ(builder.length(), 9);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 9);
  EXPECT_EQ(array->null_count, 0);
  EXPECT_TRUE(array->buffers.empty());
  ASSERT_EQ(array->children.size(), 2u);
  EXPECT_EQ(Values<int32_t>(*array->children[0]), (std::vector<int32_t>{5, 8, 9}));
  EXPECT_EQ(array->children[1]->length, 3);
  EXPECT_EQ(array->children[1]->null_count, 1);
  EXPECT_EQ(ArrayToString(*array),
            array->type->ToString() +
                " (9 values, 0 nulls)\n  7\n  7\n  7\n  7\n  7\n  null\n  null\n  null\n  8");
  ExpectAligned(*array);
}

TEST(RunEndEncodedBuilderTest, WithoutMergingAndThroughTheValueBuilder) {
  RunEndEncodedBuilder builder(run_end_encoded(int16(), utf8()));
  builder.set_merge_equal_runs(false);
  EXPECT_FALSE(builder.merge_equal_runs());
  ASSERT_OK(builder.AppendStringRun("a", 2));
  ASSERT_OK(builder.AppendStringRun("a", 1));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(dynamic_cast<BinaryBuilder*>(builder.value_builder())->Append("b"));
  ASSERT_OK(builder.AppendRun(4));
  ASSERT_OK(builder.AppendEmptyValues(1));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(Values<int16_t>(*array->children[0]), (std::vector<int16_t>{2, 3, 4, 5, 9, 10}));
  EXPECT_EQ(array->children[1]->length, 6);
}

TEST(RunEndEncodedBuilderTest, RejectsBadRuns) {
  RunEndEncodedBuilder builder(run_end_encoded(int16(), int32()));
  Status zero = builder.AppendValueRun<int32_t>(1, 0);
  EXPECT_EQ(zero.code(), StatusCode::kInvalid);
  EXPECT_THAT(zero.message(), HasSubstr("at least 1"));
  Status overflow = builder.AppendValueRun<int32_t>(1, 40000);
  EXPECT_EQ(overflow.code(), StatusCode::kInvalid);
  EXPECT_THAT(overflow.message(), HasSubstr("exceeds the range"));
  Status no_value = builder.AppendRun(1);
  EXPECT_EQ(no_value.code(), StatusCode::kInvalid);
  EXPECT_THAT(no_value.message(), HasSubstr("exactly one value"));
  Status wrong_type = builder.AppendValueRun<int64_t>(1, 1);
  EXPECT_EQ(wrong_type.code(), StatusCode::kTypeError);
  Status not_strings = builder.AppendStringRun("x", 1);
  EXPECT_EQ(not_strings.code(), StatusCode::kTypeError);
  EXPECT_EQ(builder.length(), 0);
  ASSERT_OK(builder.AppendValueRun<int32_t>(1, 32767));
  EXPECT_EQ(builder.AppendNull().code(), StatusCode::kInvalid);

  // A value appended without its run is caught by the next typed run and by Finish.
  RunEndEncodedBuilder unpaired(run_end_encoded(int32(), int32()));
  ASSERT_OK(unpaired.value_builder()->AppendEmptyValue());
  EXPECT_THAT(unpaired.AppendValueRun<int32_t>(3, 1).message(), HasSubstr("out of step"));
  EXPECT_THAT(unpaired.Finish().status().message(), HasSubstr("out of step"));

  RunEndEncodedBuilder wrong(run_end_encoded(int8(), int32()));
  EXPECT_EQ(wrong.status().code(), StatusCode::kTypeError);
}

// ---- Dictionary --------------------------------------------------------------------------------

TEST(DictionaryBuilderTest, MemoisesStrings) {
  DictionaryBuilder builder(dictionary(int8(), utf8()));
  ASSERT_OK(builder.status());
  ASSERT_OK(builder.Append("apple"));
  ASSERT_OK(builder.Append("pear"));
  ASSERT_OK(builder.Append("apple"));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK(builder.Append(std::string_view("pear")));
  EXPECT_EQ(builder.dictionary_length(), 2);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(array->length, 5);
  EXPECT_EQ(array->null_count, 1);
  EXPECT_EQ(Values<int8_t>(*array)[0], 0);
  EXPECT_EQ(Values<int8_t>(*array)[1], 1);
  EXPECT_EQ(Values<int8_t>(*array)[2], 0);
  EXPECT_EQ(Values<int8_t>(*array)[4], 1);
  ASSERT_NE(array->dictionary, nullptr);
  EXPECT_EQ(array->dictionary->type->id, TypeId::kUtf8);
  EXPECT_EQ(array->dictionary->length, 2);
  EXPECT_EQ(array->dictionary->buffers[2]->view(), "applepear");
  EXPECT_THAT(ArrayToString(*array), HasSubstr("\"apple\"\n  \"pear\"\n  \"apple\"\n  null"));
  ExpectAligned(*array);

  // Finish also resets the memo.
  ASSERT_OK(builder.Append("kiwi"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr second, builder.Finish());
  EXPECT_EQ(second->dictionary->length, 1);
  EXPECT_EQ(Values<int8_t>(*second)[0], 0);
}

TEST(DictionaryBuilderTest, IntegerValuesAndRanges) {
  DictionaryBuilder builder(dictionary(uint16(), uint8()));
  ASSERT_OK(builder.Append(int64_t{200}));
  ASSERT_OK(builder.Append(int64_t{3}));
  ASSERT_OK(builder.Append(int64_t{200}));
  ASSERT_OK(builder.AppendEmptyValues(2));
  Status too_big = builder.Append(int64_t{300});
  EXPECT_EQ(too_big.code(), StatusCode::kInvalid);
  EXPECT_THAT(too_big.message(), HasSubstr("does not fit"));
  Status strings = builder.Append("x");
  EXPECT_EQ(strings.code(), StatusCode::kTypeError);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  EXPECT_EQ(Values<uint16_t>(*array), (std::vector<uint16_t>{0, 1, 0, 2, 2}));
  EXPECT_EQ(Values<uint8_t>(*array->dictionary), (std::vector<uint8_t>{200, 3, 0}));

  DictionaryBuilder string_dictionary(dictionary(int32(), binary()));
  EXPECT_EQ(string_dictionary.Append(int64_t{1}).code(), StatusCode::kTypeError);
}

TEST(DictionaryBuilderTest, IndexTypeOverflow) {
  DictionaryBuilder builder(dictionary(int8(), int32()));
  for (int64_t value = 0; value < 128; ++value) ASSERT_OK(builder.Append(value));
  Status status = builder.Append(int64_t{1000});
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_THAT(status.message(), HasSubstr("cannot be indexed by int8"));
  ASSERT_OK(builder.Append(int64_t{5}));  // an existing value still works
  EXPECT_EQ(builder.length(), 129);
}

TEST(DictionaryBuilderTest, ViewAndFixedSizeValues) {
  DictionaryBuilder views(dictionary(int32(), utf8_view()));
  ASSERT_OK(views.Append("a value longer than twelve"));
  ASSERT_OK(views.Append("a value longer than twelve"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr view_array, views.Finish());
  EXPECT_EQ(view_array->dictionary->type->id, TypeId::kUtf8View);
  EXPECT_EQ(view_array->dictionary->length, 1);

  DictionaryBuilder fixed(dictionary(int32(), fixed_size_binary(2)));
  ASSERT_OK(fixed.Append("ab"));
  EXPECT_THAT(fixed.Append("abc").message(), HasSubstr("must have 2 bytes"));
  ASSERT_OK(fixed.AppendEmptyValue());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr fixed_array, fixed.Finish());
  EXPECT_EQ(fixed_array->dictionary->buffers[1]->view(), std::string_view("ab\0\0", 4));

  DictionaryBuilder wrong(dictionary(float32(), utf8()));
  EXPECT_EQ(wrong.status().code(), StatusCode::kTypeError);
  DictionaryBuilder nested(dictionary(int32(), struct_({})));
  EXPECT_EQ(nested.status().code(), StatusCode::kTypeError);
}

// ---- MakeBuilder
// ---------------------------------------------------------------------------------

using ::ferry::testing::EveryType;

TEST(MakeBuilderTest, BuildsNullsAndEmptyValuesOfEveryType) {
  for (const TypePtr& type : EveryType()) {
    SCOPED_TRACE(type->ToString());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ArrayBuilder> builder, MakeBuilder(type));
    EXPECT_TRUE(builder->type()->Equals(*type));
    ASSERT_OK(builder->Reserve(4));
    ASSERT_OK(builder->AppendNulls(2));
    ASSERT_OK(builder->AppendEmptyValues(2));
    ASSERT_OK(builder->AppendNull());
    EXPECT_EQ(builder->length(), 5);
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder->Finish());
    EXPECT_EQ(array->length, 5);
    EXPECT_TRUE(array->type->Equals(*type));
    if (type->id == TypeId::kNull) {
      EXPECT_EQ(array->GetNullCount(), 5);
    } else if (type->id == TypeId::kDenseUnion || type->id == TypeId::kSparseUnion ||
               type->id == TypeId::kRunEndEncoded) {
      EXPECT_EQ(array->GetNullCount(), 0);  // no validity bitmap: nulls live in a child
    } else {
      EXPECT_EQ(array->GetNullCount(), 3);
      EXPECT_FALSE(array->IsValid(0));
      EXPECT_TRUE(array->IsValid(2));
    }
    ExpectAligned(*array);
    // A builder of any type can be reused right away.
    EXPECT_EQ(builder->length(), 0);
    ASSERT_OK(builder->AppendEmptyValue());
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr second, builder->Finish());
    EXPECT_EQ(second->length, 1);
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr empty, builder->Finish());
    EXPECT_EQ(empty->length, 0);
    EXPECT_TRUE(ArrayEquals(*Slice(array, 2, 2), *Slice(array, 2, 2)));
  }
}

TEST(MakeBuilderTest, ExposesChildrenOfNestedTypes) {
  ASSERT_OK_AND_ASSIGN(auto struct_builder,
                       MakeBuilder(struct_({field("a", int32()), field("b", utf8())})));
  EXPECT_EQ(struct_builder->num_children(), 2);
  EXPECT_EQ(struct_builder->child(1)->type()->id, TypeId::kUtf8);
  ASSERT_OK_AND_ASSIGN(auto map_builder, MakeBuilder(map(int8(), utf8())));
  EXPECT_EQ(map_builder->num_children(), 2);
  EXPECT_EQ(map_builder->child(0)->type()->id, TypeId::kInt8);
  ASSERT_OK_AND_ASSIGN(auto ree_builder, MakeBuilder(run_end_encoded(int64(), float32())));
  EXPECT_EQ(ree_builder->num_children(), 1);
  EXPECT_EQ(ree_builder->child(0)->type()->id, TypeId::kFloat);
  ASSERT_OK_AND_ASSIGN(auto leaf, MakeBuilder(int32()));
  EXPECT_EQ(leaf->num_children(), 0);
}

TEST(MakeBuilderTest, BuildersOfRejectedTypesStayMemorySafe) {
  DictionaryBuilder dictionary_builder(nullptr);
  EXPECT_EQ(dictionary_builder.Append("x").code(), StatusCode::kTypeError);
  EXPECT_EQ(dictionary_builder.Append(int64_t{1}).code(), StatusCode::kTypeError);
  EXPECT_EQ(dictionary_builder.AppendEmptyValue().code(), StatusCode::kTypeError);
  FixedSizeListBuilder lists(nullptr);
  ASSERT_OK(lists.AppendNull());
  EXPECT_EQ(lists.Finish().status().code(), StatusCode::kTypeError);
  RunEndEncodedBuilder runs(int32());
  EXPECT_EQ(runs.AppendStringRun("x", 1).code(), StatusCode::kTypeError);
  SparseUnionBuilder unions(nullptr);
  EXPECT_EQ(unions.AppendNull().code(), StatusCode::kInvalid);
  DecimalBuilder decimals(nullptr);
  ASSERT_OK(decimals.Append(1));
  EXPECT_EQ(decimals.Finish().status().code(), StatusCode::kTypeError);
}

TEST(MakeBuilderTest, RejectsWhatItCannotBuild) {
  auto no_type = MakeBuilder(nullptr);
  EXPECT_EQ(no_type.status().code(), StatusCode::kTypeError);
  EXPECT_THAT(no_type.status().message(), HasSubstr("needs a type"));
  auto nested_dictionary = MakeBuilder(dictionary(int32(), list(field("item", int32()))));
  EXPECT_EQ(nested_dictionary.status().code(), StatusCode::kTypeError);
  auto bad_child = MakeBuilder(list(field("item", run_end_encoded(utf8(), int32()))));
  EXPECT_EQ(bad_child.status().code(), StatusCode::kTypeError);
  EXPECT_THAT(bad_child.status().message(), HasSubstr("field 'item'"));
  auto good = MakeBuilder(list(field("item", int32())));
  ASSERT_OK(good);
}

// ---- Pools: allocation failures, leaks, plumbing ---------------------------------------------

Status BuildNested(MemoryPool* pool, ArrayDataPtr* out) {
  auto type = struct_({field("id", int64()), field("names", list(field("item", utf8()))),
                       field("tag", dictionary(int8(), utf8())), field("blob", binary_view()),
                       field("flag", boolean())});
  FERRY_ASSIGN_OR_RAISE(auto builder, MakeBuilder(type, pool));
  auto* root = static_cast<StructBuilder*>(builder.get());
  auto* ids = static_cast<FixedWidthBuilder<int64_t>*>(root->field_builder(0));
  auto* names = static_cast<ListBuilder*>(root->field_builder(1));
  auto* name_values = static_cast<BinaryBuilder*>(names->value_builder());
  auto* tags = static_cast<DictionaryBuilder*>(root->field_builder(2));
  auto* blobs = static_cast<BinaryViewBuilder*>(root->field_builder(3));
  auto* flags = static_cast<BooleanBuilder*>(root->field_builder(4));
  for (int row = 0; row < 200; ++row) {
    if (row % 17 == 5) {
      FERRY_RETURN_NOT_OK(root->AppendNull());
      continue;
    }
    FERRY_RETURN_NOT_OK(root->Append());
    FERRY_RETURN_NOT_OK(ids->Append(row));
    FERRY_RETURN_NOT_OK(names->Append());
    for (int name = 0; name < row % 3; ++name) {
      FERRY_RETURN_NOT_OK(name_values->Append("name-" + std::to_string(row)));
    }
    FERRY_RETURN_NOT_OK(tags->Append(row % 2 == 0 ? "even" : "odd"));
    FERRY_RETURN_NOT_OK(blobs->Append(std::string(static_cast<size_t>(row % 40), 'b')));
    FERRY_RETURN_NOT_OK(row % 5 == 0 ? flags->AppendNull() : flags->Append(row % 2 == 0));
  }
  FERRY_ASSIGN_OR_RAISE(*out, builder->Finish());
  return Status::OK();
}

TEST(BuilderPoolTest, AllocationFailuresBecomeStatuses) {
  int failures = 0;
  bool succeeded = false;
  for (int64_t allowed = 0; allowed < 400 && !succeeded; ++allowed) {
    TestPool pool(allowed);
    {
      ArrayDataPtr array;
      Status status = BuildNested(&pool, &array);
      if (status.ok()) {
        succeeded = true;
        EXPECT_EQ(array->length, 200);
        ExpectAligned(*array);
      } else {
        ++failures;
        EXPECT_EQ(status.code(), StatusCode::kOutOfMemory) << status.ToString();
        EXPECT_THAT(status.message(), HasSubstr("test pool refused"));
      }
    }
    // Whatever happened, every byte went back to the pool.
    EXPECT_EQ(pool.bytes_allocated(), 0) << "allowed " << allowed;
  }
  EXPECT_TRUE(succeeded);
  EXPECT_GT(failures, 5);
}

TEST(BuilderPoolTest, FailedAppendLeavesALeafBuilderUnchanged) {
  TestPool pool(1);
  Int32Builder builder(&pool);
  ASSERT_OK(builder.Append(1));  // the one allowed allocation (64 bytes)
  for (int i = 0; i < 15; ++i) ASSERT_OK(builder.Append(i));
  Status status = builder.Append(99);  // needs to grow: refused
  EXPECT_EQ(status.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(builder.length(), 16);
  status = builder.AppendNull();  // the validity bitmap would need memory too
  EXPECT_EQ(status.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(builder.length(), 16);
  EXPECT_EQ(builder.null_count(), 0);
}

TEST(BuilderPoolTest, BuffersComeFromTheGivenPoolAndGoBack) {
  TestPool pool(-1);
  {
    Utf8Builder builder(&pool);
    ASSERT_OK(builder.Append("hello"));
    ASSERT_OK(builder.AppendNull());
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
    EXPECT_GT(pool.bytes_allocated(), 0);
    EXPECT_EQ(pool.bytes_allocated() % kBufferAlignment, 0);
    ArrayDataPtr slice = Slice(array, 1, 1);
    array.reset();
    EXPECT_GT(pool.bytes_allocated(), 0);  // the slice keeps the buffers alive
  }
  EXPECT_EQ(pool.bytes_allocated(), 0);
  EXPECT_GT(pool.allocations(), 0);
}

TEST(BuilderPoolTest, HugeRequestsFailCleanly) {
  Int64Builder builder;
  Status status = builder.Reserve(std::numeric_limits<int64_t>::max() / 4);
  EXPECT_EQ(status.code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(status.message(), HasSubstr("exceeds the builder limit"));
  status = builder.AppendNulls(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(status.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(builder.length(), 0);
  FixedSizeListBuilder lists(fixed_size_list(field("item", int8()), 1 << 30));
  EXPECT_EQ(lists.AppendNulls(int64_t{1} << 40).code(), StatusCode::kOutOfMemory);
}

// ---- Convenience helpers ---------------------------------------------------------------------

TEST(ConvenienceTest, MakesArrays) {
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr ints, MakeInt32Array({1, 2, std::nullopt}));
  EXPECT_EQ(ints->length, 3);
  EXPECT_EQ(ints->null_count, 1);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr strings, MakeUtf8Array({"a", std::nullopt, "c"}));
  EXPECT_EQ(strings->type->id, TypeId::kUtf8);
  EXPECT_EQ(strings->null_count, 1);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr views,
                       MakeStringArray(utf8_view(), {"a", "a long string value"}));
  EXPECT_EQ(views->buffers.size(), 3u);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr bools, MakeBooleanArray({true, std::nullopt}));
  EXPECT_EQ(bools->null_count, 1);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr doubles, MakeFloat64Array({1.5}));
  EXPECT_EQ(doubles->type->id, TypeId::kDouble);
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr stamps, MakeFixedWidthArray<int64_t>(
                                                timestamp(TimeUnit::kSecond), {1, std::nullopt}));
  EXPECT_EQ(stamps->type->id, TypeId::kTimestamp);
  auto not_strings = MakeStringArray(int32(), {"x"});
  EXPECT_EQ(not_strings.status().code(), StatusCode::kTypeError);

  ASSERT_OK_AND_ASSIGN(ArrayDataPtr nulls, MakeArrayOfNulls(list(field("item", int32())), 4));
  EXPECT_EQ(nulls->null_count, 4);
  EXPECT_EQ(Offsets32(*nulls), (std::vector<int32_t>{0, 0, 0, 0, 0}));
}

TEST(ConvenienceTest, StructArrayChecksItsInputs) {
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr ints, MakeInt32Array({1, 2}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr strings, MakeUtf8Array({"a", "b"}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr three, MakeInt32Array({1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr struct_array,
                       MakeStructArray({"i", "s"}, {ints, strings}, {true, false}));
  EXPECT_EQ(struct_array->length, 2);
  EXPECT_EQ(struct_array->null_count, 1);
  EXPECT_TRUE(struct_array->type->Equals(*struct_({field("i", int32()), field("s", utf8())})));
  EXPECT_EQ(struct_array->children[0], ints);  // not copied

  auto mismatch = MakeStructArray({"i", "t"}, {ints, three});
  EXPECT_THAT(mismatch.status().message(), HasSubstr("field 't' has 3 values"));
  auto names = MakeStructArray({"i"}, {ints, strings});
  EXPECT_THAT(names.status().message(), HasSubstr("1 names for 2 children"));
  auto validity = MakeStructArray({"i"}, {ints}, {true});
  EXPECT_THAT(validity.status().message(), HasSubstr("1 entries for 2 rows"));
  auto missing = MakeStructArray({"i"}, {nullptr});
  EXPECT_THAT(missing.status().message(), HasSubstr("has no array"));
}

}  // namespace
}  // namespace ferry
