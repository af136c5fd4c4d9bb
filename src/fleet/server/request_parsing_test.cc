#include "fleet/server/request_parsing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::fleet::server_internal {
namespace {

TEST(MatchPath, CapturesSegments) {
  std::vector<std::string> captures;
  EXPECT_TRUE(MatchPath("/v1/jobs/{}", "/v1/jobs/42", &captures));
  EXPECT_EQ(captures, std::vector<std::string>{"42"});
  captures.clear();
  EXPECT_TRUE(MatchPath("/v1/jobs/{}:cancel", "/v1/jobs/7:cancel", &captures));
  EXPECT_EQ(captures, std::vector<std::string>{"7"});
  captures.clear();
  EXPECT_FALSE(MatchPath("/v1/jobs/{}", "/v1/jobs/7:cancel", &captures));
  EXPECT_FALSE(MatchPath("/v1/jobs/{}", "/v1/jobs/", &captures));
  EXPECT_FALSE(MatchPath("/v1/jobs/{}", "/v1/jobs/1/events", &captures));
  EXPECT_FALSE(MatchPath("/v1/jobs", "/v1/jobs/", &captures));
  captures.clear();
  EXPECT_TRUE(MatchPath("/v1/jobs/{}/logs", "/v1/jobs/x/logs", &captures));
  EXPECT_EQ(captures, std::vector<std::string>{"x"});
  // A very long path is no problem for the linear matcher.
  EXPECT_FALSE(MatchPath("/v1/jobs/{}", "/v1/jobs/" + std::string(100000, '9') + "/", &captures));
}

TEST(ParseQuery, SplitsAtTheFirstEqualsAndDecodes) {
  auto params = ParseQuery("/v1/jobs?label=batch=p&state=A,B&state=C&user=a%20b+c&flag&&x=%zz");
  EXPECT_EQ(params.count("state"), 2u);
  EXPECT_EQ(params.find("label")->second, "batch=p");
  EXPECT_EQ(params.find("user")->second, "a b c");
  EXPECT_EQ(params.find("flag")->second, "");
  EXPECT_EQ(params.find("x")->second, "%zz");
  EXPECT_EQ(ParseQuery("/v1/jobs?label=k%3Dv").find("label")->second, "k=v");
  EXPECT_TRUE(ParseQuery("/v1/jobs").empty());
  EXPECT_TRUE(ParseQuery("/v1/jobs?").empty());
}

TEST(Checks, IdempotencyKeysContentTypesNamesAndDepth) {
  EXPECT_TRUE(ValidIdempotencyKey("abc-123 ok"));
  EXPECT_FALSE(ValidIdempotencyKey(""));
  EXPECT_FALSE(ValidIdempotencyKey(std::string(256, 'a')));
  EXPECT_TRUE(ValidIdempotencyKey(std::string(255, 'a')));
  EXPECT_FALSE(ValidIdempotencyKey("tab\there"));
  EXPECT_FALSE(ValidIdempotencyKey("\xc3\xa9"));

  EXPECT_TRUE(IsJsonContentType("application/json"));
  EXPECT_TRUE(IsJsonContentType("Application/JSON; charset=utf-8"));
  EXPECT_FALSE(IsJsonContentType("text/plain"));
  EXPECT_FALSE(IsJsonContentType(""));
  EXPECT_FALSE(IsJsonContentType("application/jsonx"));

  EXPECT_TRUE(ValidName("gpu-a.b_1"));
  EXPECT_FALSE(ValidName(""));
  EXPECT_FALSE(ValidName(".hidden"));
  EXPECT_FALSE(ValidName("a/b"));
  EXPECT_FALSE(ValidName(std::string(129, 'a')));

  EXPECT_TRUE(JsonNestingWithin(R"({"a": [[1]], "b": "[[[[[[["})", 3));
  EXPECT_FALSE(JsonNestingWithin("[[[[", 3));
  EXPECT_TRUE(JsonNestingWithin(R"(["\"[[[[[["])", 1));

  EXPECT_EQ(ParseInt("42"), 42);
  EXPECT_EQ(ParseInt("-3"), -3);
  EXPECT_FALSE(ParseInt("4x").has_value());
  EXPECT_FALSE(ParseInt("").has_value());
  EXPECT_FALSE(ParseInt("99999999999999999999").has_value());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
