#include "flow/operator/metadata_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/test_util.h"

namespace ferry::flow::internal {
namespace {

// What the writer produced before the hand-written path: nlohmann per string.
std::string Reference(const Metadata& metadata) {
  std::string out = "{";
  for (const auto& [key, value] : metadata) {
    if (out.size() > 1) out += ',';
    out += nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += ':';
    out += nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return out + '}';
}

TEST(MetadataJson, WritesWhatNlohmannWrites) {
  const std::string controls = [] {
    std::string all;
    for (int c = 1; c < 0x20; ++c) all += static_cast<char>(c);
    return all + "\x7f";
  }();
  const Metadata cases[] = {
      {},
      {{"t", "123456789012345678"}, {"seq", "1"}},
      {{"quote\"back\\slash", "tab\tnew\nline\rform\fbell\b"}},
      {{"controls", controls}},
      {{"utf8", "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"}},
      {{"twice", "1"}, {"twice", "2"}},
      {{"bad utf8", "a\xC3(b"}, {"overlong", "\xC0\xAF"}, {"surrogate", "\xED\xA0\x80"}},
      {{"truncated", "\xE2\x82"}},
      {{"", ""}},
  };
  for (const Metadata& metadata : cases) {
    EXPECT_EQ(MetadataToJson(metadata), Reference(metadata));
    std::string reused = "previous content";
    MetadataToJson(metadata, &reused);
    EXPECT_EQ(reused, Reference(metadata));
  }
}

TEST(MetadataJson, ReadsPlainAndGeneralObjects) {
  ASSERT_OK_AND_ASSIGN(Metadata plain, MetadataFromJson(R"({"b":"2","a":"1"})"));
  EXPECT_EQ(plain, (Metadata{{"b", "2"}, {"a", "1"}}));
  ASSERT_OK_AND_ASSIGN(Metadata spaced, MetadataFromJson(" {\n \"k\" : \"v\" ,\"x\":\"y\"}\t"));
  EXPECT_EQ(spaced, (Metadata{{"k", "v"}, {"x", "y"}}));
  ASSERT_OK_AND_ASSIGN(Metadata typed,
                       MetadataFromJson(R"({"n":7,"f":1.5,"b":true,"s":"a\"b","o":{"x":1}})"));
  EXPECT_EQ(typed,
            (Metadata{{"n", "7"}, {"f", "1.5"}, {"b", "true"}, {"s", "a\"b"}, {"o", "{\"x\":1}"}}));
  ASSERT_OK_AND_ASSIGN(Metadata empty, MetadataFromJson("{}"));
  EXPECT_TRUE(empty.empty());
  ASSERT_OK_AND_ASSIGN(Metadata none, MetadataFromJson(nullptr));
  EXPECT_TRUE(none.empty());
  // A repeated key: nlohmann's answer (one entry), not two.
  ASSERT_OK_AND_ASSIGN(Metadata twice, MetadataFromJson(R"({"k":"1","k":"2"})"));
  EXPECT_EQ(twice.size(), 1u);
  // Round trip of what the writer escapes.
  const Metadata escaped = {{"q\"", "line\nnext\x01"}, {"utf8", "\xE2\x82\xAC"}};
  ASSERT_OK_AND_ASSIGN(Metadata back, MetadataFromJson(MetadataToJson(escaped).c_str()));
  EXPECT_EQ(back, escaped);
}

TEST(MetadataJson, RefusesWhatIsNotAnObject) {
  for (const char* bad : {"[1,2]", "\"text\"", "{", R"({"k":"v")", R"({"k":"v"} x)", "{'k':'v'}",
                          R"({"k" "v"})", "{\"k\":\"a\xC3(\"}", "nul"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(MetadataFromJson(bad).ok());
    Metadata reused = {{"old", "entry"}};
    EXPECT_FALSE(MetadataFromJson(bad, &reused).ok());
  }
  EXPECT_EQ(MetadataFromJson("[1]").status().message(), "metadata must be a JSON object");
  EXPECT_EQ(MetadataFromJson("{").status().message(), "metadata is not valid JSON");
}

TEST(MetadataJson, ReusesTheEntriesOfTheLastParse) {
  Metadata reused;
  ASSERT_OK(MetadataFromJson(R"({"a":"1","b":"2","c":"3"})", &reused));
  EXPECT_EQ(reused.size(), 3u);
  ASSERT_OK(MetadataFromJson(R"({"x":"9"})", &reused));
  EXPECT_EQ(reused, (Metadata{{"x", "9"}}));
  ASSERT_OK(MetadataFromJson(R"({"n":1})", &reused));
  EXPECT_EQ(reused, (Metadata{{"n", "1"}}));
  ASSERT_OK(MetadataFromJson("", &reused));
  EXPECT_TRUE(reused.empty());
}

TEST(MetadataJson, CanonicalTextIsWhatTheWriterWouldWriteAgain) {
  auto canonical = [](const std::string& text) {
    return IsCanonicalMetadataJson(text.c_str(), text.size());
  };
  for (const std::string& text : {std::string("{}"), std::string(R"({"t":"1","seq":"2"})"),
                                  std::string("{\"e\":\"\xE2\x82\xAC\x7f\"}")}) {
    EXPECT_TRUE(canonical(text)) << text;
    ASSERT_OK_AND_ASSIGN(Metadata parsed, MetadataFromJson(text.c_str()));
    EXPECT_EQ(MetadataToJson(parsed), text);
  }
  for (const std::string& text :
       {std::string(""), std::string(" {}"), std::string(R"({"k": "v"})"),
        std::string(R"({"n":1})"), std::string(R"({"k":"a\"b"})"),
        std::string(R"({"k":"1","k":"2"})"), std::string("{\"k\":\"a\xC3(\"}"),
        std::string(R"({"k":"v"})") + "x", std::string(R"({"k":"v",})"),
        std::string("{\"k\":\"\t\"}")}) {
    EXPECT_FALSE(canonical(text)) << text;
  }
  EXPECT_FALSE(IsCanonicalMetadataJson(nullptr, 0));
}

}  // namespace
}  // namespace ferry::flow::internal
