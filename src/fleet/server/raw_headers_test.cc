// Empty header lines are found in a raw request head (httplib drops them).
#include "fleet/server/raw_headers.h"

#include <gtest/gtest.h>

namespace ferry::fleet::server_internal {
namespace {

TEST(EmptyHeaderNames, FindsHeadersWithoutAValue) {
  EXPECT_EQ(EmptyHeaderNames("POST /v1/jobs HTTP/1.1\r\nHost: a\r\nIdempotency-Key:\r\n"
                             "X-Spaces: \t \r\nX-Set: 1\r\n\r\n{\"body\": \"A:\"}"),
            (std::vector<std::string>{"idempotency-key", "x-spaces"}));
  EXPECT_TRUE(EmptyHeaderNames("GET / HTTP/1.1\r\nHost: a\r\n\r\n").empty());
  EXPECT_TRUE(EmptyHeaderNames("").empty());
  EXPECT_TRUE(EmptyHeaderNames("GET / HTTP/1.1\r\n: no name\r\n\r\n").empty());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
