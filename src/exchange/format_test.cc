#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ferry/exchange/type.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;

struct FormatCase {
  std::string format;
  TypePtr expected;  // the node ParseFormat must give (children are not part of a format)
};

// A type node without children, as ParseFormat returns it for nested formats.
TypePtr Childless(TypePtr type) {
  auto node = std::make_shared<DataType>(*type);
  node->children.clear();
  return node;
}

std::vector<FormatCase> AllFormats() {
  const Field item = field("item", int32());
  return {
      {"n", null()},
      {"b", boolean()},
      {"c", int8()},
      {"C", uint8()},
      {"s", int16()},
      {"S", uint16()},
      {"i", int32()},
      {"I", uint32()},
      {"l", int64()},
      {"L", uint64()},
      {"e", float16()},
      {"f", float32()},
      {"g", float64()},
      {"z", binary()},
      {"Z", large_binary()},
      {"vz", binary_view()},
      {"u", utf8()},
      {"U", large_utf8()},
      {"vu", utf8_view()},
      {"d:10,2,128", decimal(128, 10, 2)},
      {"d:9,3,32", decimal(32, 9, 3)},
      {"d:18,0,64", decimal(64, 18, 0)},
      {"d:76,-5,256", decimal(256, 76, -5)},
      {"w:0", fixed_size_binary(0)},
      {"w:42", fixed_size_binary(42)},
      {"tdD", date32()},
      {"tdm", date64()},
      {"tts", time32(TimeUnit::kSecond)},
      {"ttm", time32(TimeUnit::kMilli)},
      {"ttu", time64(TimeUnit::kMicro)},
      {"ttn", time64(TimeUnit::kNano)},
      {"tss:", timestamp(TimeUnit::kSecond)},
      {"tsm:", timestamp(TimeUnit::kMilli)},
      {"tsu:", timestamp(TimeUnit::kMicro)},
      {"tsn:", timestamp(TimeUnit::kNano)},
      {"tss:UTC", timestamp(TimeUnit::kSecond, "UTC")},
      {"tsm:Europe/Paris", timestamp(TimeUnit::kMilli, "Europe/Paris")},
      {"tsu:+07:30", timestamp(TimeUnit::kMicro, "+07:30")},
      {"tsn:America/New_York", timestamp(TimeUnit::kNano, "America/New_York")},
      {"tDs", duration(TimeUnit::kSecond)},
      {"tDm", duration(TimeUnit::kMilli)},
      {"tDu", duration(TimeUnit::kMicro)},
      {"tDn", duration(TimeUnit::kNano)},
      {"tiM", interval_months()},
      {"tiD", interval_day_time()},
      {"tin", interval_month_day_nano()},
      {"+l", Childless(list(item))},
      {"+L", Childless(large_list(item))},
      {"+vl", Childless(list_view(item))},
      {"+vL", Childless(large_list_view(item))},
      {"+w:0", Childless(fixed_size_list(item, 0))},
      {"+w:123", Childless(fixed_size_list(item, 123))},
      {"+s", Childless(struct_({item}))},
      {"+m", Childless(map(utf8(), int32()))},
      {"+ud:", Childless(dense_union({}))},
      {"+ud:0,1,2", Childless(dense_union({item, item, item}))},
      {"+us:127", Childless(sparse_union({item}, {127}))},
      {"+us:5,0,77", Childless(sparse_union({item, item, item}, {5, 0, 77}))},
      {"+r", Childless(run_end_encoded(int32(), int32()))},
  };
}

TEST(FormatTest, ParsesEveryFormatOfTheSpec) {
  for (const FormatCase& format_case : AllFormats()) {
    Result<DataType> parsed = ParseFormat(format_case.format);
    ASSERT_TRUE(parsed.ok()) << format_case.format << ": " << parsed.status().ToString();
    EXPECT_TRUE(parsed->Equals(*format_case.expected))
        << format_case.format << " parsed as " << parsed->ToString() << ", expected "
        << format_case.expected->ToString();
    EXPECT_TRUE(parsed->children.empty()) << format_case.format;
  }
}

TEST(FormatTest, EveryFormatRoundTrips) {
  for (const FormatCase& format_case : AllFormats()) {
    EXPECT_EQ(FormatString(*format_case.expected), format_case.format);
    Result<DataType> parsed = ParseFormat(format_case.format);
    ASSERT_TRUE(parsed.ok()) << format_case.format;
    EXPECT_EQ(FormatString(*parsed), format_case.format);
  }
}

TEST(FormatTest, DecimalWithoutBitWidthIs128) {
  Result<DataType> parsed = ParseFormat("d:19,10");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->id, TypeId::kDecimal128);
  EXPECT_EQ(parsed->precision, 19);
  EXPECT_EQ(parsed->scale, 10);
  EXPECT_EQ(parsed->byte_width, 16);
  EXPECT_EQ(FormatString(*parsed), "d:19,10,128");
}

TEST(FormatTest, NestedFormatsIgnoreTheChildrenOfTheType) {
  EXPECT_EQ(FormatString(*struct_({field("a", int32()), field("b", utf8())})), "+s");
  EXPECT_EQ(FormatString(*fixed_size_list(field("item", utf8()), 4)), "+w:4");
  EXPECT_EQ(FormatString(*dense_union({field("a", int32()), field("b", utf8())})), "+ud:0,1");
  EXPECT_EQ(FormatString(*map(utf8(), int64())), "+m");
}

TEST(FormatTest, DictionaryFormatIsTheIndexFormat) {
  EXPECT_EQ(FormatString(*dictionary(int16(), utf8())), "s");
  EXPECT_EQ(FormatString(*dictionary(uint32(), utf8())), "I");
  EXPECT_EQ(FormatString(*dictionary(nullptr, utf8())), "");
}

TEST(FormatTest, TimestampTimezoneMayHoldAnyCharacters) {
  Result<DataType> parsed = ParseFormat("tsu:Etc/GMT+1,odd:zone");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->timezone, "Etc/GMT+1,odd:zone");
}

struct BadFormatCase {
  std::string format;
  std::string message_part;
};

TEST(FormatTest, RejectsMalformedFormatsQuotingThem) {
  const std::vector<BadFormatCase> cases = {
      {"", "it is empty"},
      {"Q", "unknown format string 'Q'"},
      {"ii", "unknown format string 'ii'"},
      {"n ", "unknown format string 'n '"},
      {"+", "unknown format string '+'"},
      {"+x", "unknown format string '+x'"},
      {"+lx", "unknown format string '+lx'"},
      {"+v", "unknown format string '+v'"},
      {"v", "unknown format string 'v'"},
      {"vx", "unknown format string 'vx'"},
      // Decimals.
      {"d", "'d': a ':' and parameters must follow"},
      {"d:", "'d:': a decimal needs"},
      {"d:10", "'d:10': a decimal needs"},
      {"d:10,2,128,1", "a decimal needs"},
      {"d:10,", "scale is missing"},
      {"d:,2", "precision is missing"},
      {"d:x,2", "precision 'x' is not a decimal integer"},
      {"d:10,2x", "scale '2x' is not a decimal integer"},
      {"d:10,+2", "scale '+2' is not a decimal integer"},
      {"d:10, 2", "scale ' 2' is not a decimal integer"},
      {"d:-10,2", "'d:-10,2': precision must not be negative"},
      {"d:10,2,", "bit width is missing"},
      {"d:10,2,100", "'d:10,2,100': decimal bit width must be 32, 64, 128 or 256"},
      {"d:10,2,-128", "bit width must not be negative"},
      {"d:99999999999,2", "precision '99999999999' does not fit in 32 bits"},
      {"d;10,2", "unknown format string 'd;10,2'"},
      // Fixed-size binary and list.
      {"w", "'w': a ':' and parameters must follow"},
      {"w:", "'w:': fixed-size binary width is missing"},
      {"w:-1", "'w:-1': fixed-size binary width must not be negative"},
      {"w:abc", "fixed-size binary width 'abc' is not a decimal integer"},
      {"w:12x", "'12x' is not a decimal integer"},
      {"w:2147483648", "does not fit in 32 bits"},
      {"w12", "unknown format string 'w12'"},
      {"+w", "'+w': a ':' and parameters must follow"},
      {"+w:", "fixed-size list size is missing"},
      {"+w:-3", "'+w:-3': fixed-size list size must not be negative"},
      {"+w:3,4", "'3,4' is not a decimal integer"},
      {"+w3", "unknown format string '+w3'"},
      // Temporal.
      {"t", "unknown format string 't'"},
      {"td", "unknown format string 'td'"},
      {"tdd", "unknown format string 'tdd'"},
      {"tdDx", "unknown format string 'tdDx'"},
      {"tt", "unknown format string 'tt'"},
      {"ttx", "'ttx': unknown time unit 'x'"},
      {"ttsx", "'ttsx': unexpected characters after the time unit"},
      {"ts", "unknown format string 'ts'"},
      {"tsu", "'tsu': a timestamp needs a ':'"},
      {"tsuUTC", "'tsuUTC': a timestamp needs a ':'"},
      {"tsx:UTC", "'tsx:UTC': unknown time unit 'x'"},
      {"tD", "unknown format string 'tD'"},
      {"tDx", "unknown time unit 'x'"},
      {"tDss", "unexpected characters after the time unit"},
      {"ti", "unknown format string 'ti'"},
      {"tix", "unknown format string 'tix'"},
      {"tiMM", "unknown format string 'tiMM'"},
      {"tx", "unknown format string 'tx'"},
      // Unions.
      {"+ud", "'+ud': a union needs a ':' before its type codes"},
      {"+us", "'+us': a union needs a ':'"},
      {"+ud0,1", "a union needs a ':'"},
      {"+ud:0,", "union type code is missing"},
      {"+ud:,0", "union type code is missing"},
      {"+ud:0,,1", "union type code is missing"},
      {"+ud:128", "'+ud:128': union type code 128 is outside 0..127"},
      {"+us:-1", "union type code -1 is outside 0..127"},
      {"+us:1,a", "union type code 'a' is not a decimal integer"},
      {"+us:1,1", "union type code 1 appears more than once"},
      {"+ux:1", "unknown format string '+ux:1'"},
  };
  for (const BadFormatCase& bad : cases) {
    Result<DataType> parsed = ParseFormat(bad.format);
    ASSERT_FALSE(parsed.ok()) << "'" << bad.format << "' parsed as " << parsed->ToString();
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalid) << bad.format;
    EXPECT_THAT(parsed.status().message(), HasSubstr(bad.message_part)) << bad.format;
    EXPECT_THAT(parsed.status().message(), HasSubstr("'" + bad.format + "'")) << bad.format;
  }
}

TEST(FormatTest, ErrorMessageMatchesTheDocumentedShape) {
  EXPECT_EQ(ParseFormat("Q").status().ToString(), "Invalid: unknown format string 'Q'");
}

TEST(FormatTest, FormatWithEmbeddedNulIsRejected) {
  const std::string with_nul("i\0", 2);
  EXPECT_FALSE(ParseFormat(with_nul).ok());
}

}  // namespace
}  // namespace ferry
