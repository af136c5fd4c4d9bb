#include "fleet/server/page_token.h"

#include <gtest/gtest.h>

#include <string>

#include "fleet/server/base64url.h"
#include "testing/test_util.h"

namespace ferry::fleet::server_internal {
namespace {

TEST(PageToken, RoundTripsAndRefusesOtherFilters) {
  JobFilter a;
  a.states = {JobState::kRunning, JobState::kPending};
  a.labels = {{"project", "llm"}};
  JobFilter same = a;
  same.states = {JobState::kPending, JobState::kRunning};
  JobFilter other = a;
  other.user = "bob";
  EXPECT_EQ(FilterDigest(a), FilterDigest(same));
  EXPECT_NE(FilterDigest(a), FilterDigest(other));

  const std::string token = EncodePageToken(1234, FilterDigest(a));
  ASSERT_OK_AND_ASSIGN(int64_t before, DecodePageToken(token, FilterDigest(same)));
  EXPECT_EQ(before, 1234);
  EXPECT_FALSE(DecodePageToken(token, FilterDigest(other)).ok());
  EXPECT_FALSE(DecodePageToken("not a token", FilterDigest(a)).ok());
  EXPECT_FALSE(DecodePageToken(Base64UrlEncode("[1,2]"), FilterDigest(a)).ok());
  EXPECT_FALSE(DecodePageToken(Base64UrlEncode(R"({"b":-1,"f":"x"})"), "x").ok());
  EXPECT_FALSE(DecodePageToken(Base64UrlEncode(R"({"b":"1","f":"x"})"), "x").ok());
  EXPECT_FALSE(DecodePageToken("", FilterDigest(a)).ok());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
