#include "ferry/base/json_string.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace ferry::json_text {
namespace {

std::string Quoted(std::string_view text, bool* valid = nullptr) {
  std::string out = "prefix:";
  const bool ok = AppendQuoted(text, &out);
  if (valid != nullptr) *valid = ok;
  return out.substr(7);
}

TEST(JsonStringTest, EscapesExactlyAsNlohmannDumps) {
  std::string every_ascii;
  for (int c = 0; c < 0x80; ++c) every_ascii.push_back(static_cast<char>(c));
  for (const std::string& text :
       {std::string(), std::string("plain"), every_ascii,
        std::string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80"),
        std::string("\"quoted\" and \\back\\slashed"), std::string("\x01\x1f\x7f\b\f")}) {
    bool valid = false;
    EXPECT_EQ(Quoted(text, &valid), nlohmann::json(text).dump()) << text;
    EXPECT_TRUE(valid);
  }
}

TEST(JsonStringTest, InvalidUtf8IsReportedAndKeptByteForByte) {
  for (const std::string& bad : {std::string("\xff"), std::string("\xc0\xaf"),  // overlong '/'
                                 std::string("\xed\xa0\x80"),                   // a surrogate
                                 std::string("\xf4\x90\x80\x80"),               // above U+10FFFF
                                 std::string("\xe2\x82"),                       // cut short
                                 std::string("ok\x80tail")}) {
    bool valid = true;
    const std::string quoted = Quoted(bad, &valid);
    EXPECT_FALSE(valid);
    EXPECT_EQ(quoted, "\"" + bad + "\"");
  }
}

TEST(JsonStringTest, SequenceLengthFollowsRfc3629) {
  const auto length = [](std::string_view bytes) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    return Utf8SequenceLength(p, p + bytes.size());
  };
  EXPECT_EQ(length("\xc3\xa9"), 2U);
  EXPECT_EQ(length("\xe0\xa0\x80"), 3U);
  EXPECT_EQ(length("\xe0\x9f\xbf"), 0U);  // overlong three-byte form
  EXPECT_EQ(length("\xf0\x90\x80\x80"), 4U);
  EXPECT_EQ(length("\xf4\x8f\xbf\xbf"), 4U);  // U+10FFFF
  EXPECT_EQ(length("\xc1\xbf"), 0U);
  EXPECT_EQ(length("\x80"), 0U);  // a continuation byte cannot lead
}

}  // namespace
}  // namespace ferry::json_text
