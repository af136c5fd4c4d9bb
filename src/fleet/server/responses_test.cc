#include "fleet/server/responses.h"

#include <gtest/gtest.h>

namespace ferry::fleet::server_internal {
namespace {

using nlohmann::json;

TEST(Problem, HasTheRfc9457Members) {
  json problem = Problem(422, "validation", "2 fields are invalid", "/v1/jobs");
  EXPECT_EQ(problem["type"], "urn:ferry:problem:validation");
  EXPECT_EQ(problem["status"], 422);
  EXPECT_EQ(problem["detail"], "2 fields are invalid");
  EXPECT_EQ(problem["instance"], "/v1/jobs");
  EXPECT_TRUE(problem["title"].is_string());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
