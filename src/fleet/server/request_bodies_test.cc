// The strict parsers of agent and admin request bodies.
#include "fleet/server/request_bodies.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::fleet::server_internal {
namespace {

using nlohmann::json;

TEST(RequestBodies, NodeRegistration) {
  std::vector<FieldError> errors;
  auto ok = ParseNodeRegistration(json::parse(R"({"name": "gpu-a", "instance": "i1", "cpus": 8,
      "memory_mb": 1024, "labels": {"zone": "a"},
      "gpus": [{"index": 0, "model": "H200", "memory_mb": 141312},
               {"index": 1, "model": "H200", "uuid": "GPU-1"}]})"),
                                  &errors);
  ASSERT_TRUE(ok.has_value());
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(ok->pool, "default");
  ASSERT_EQ(ok->gpus.size(), 2u);
  EXPECT_EQ(ok->gpus[0].uuid, "gpu-a-gpu0");
  EXPECT_EQ(ok->gpus[1].uuid, "GPU-1");

  errors.clear();
  auto bad = ParseNodeRegistration(json::parse(R"({"name": "a/b", "cpus": "8", "extra": 1,
      "gpus": [{"index": 0, "model": "X"}, {"index": 0, "model": "X"}, 3]})"),
                                   &errors);
  EXPECT_FALSE(bad.has_value());
  std::set<std::string> fields;
  for (const auto& e : errors) fields.insert(e.field);
  EXPECT_TRUE(fields.count("name"));
  EXPECT_TRUE(fields.count("instance"));
  EXPECT_TRUE(fields.count("cpus"));
  EXPECT_TRUE(fields.count("extra"));
  EXPECT_TRUE(fields.count("gpus[1].index"));
  EXPECT_TRUE(fields.count("gpus[2]"));
}

TEST(RequestBodies, SyncRequestAndReports) {
  std::vector<FieldError> errors;
  auto ok = ParseSyncRequest(json::parse(R"({"node": "n", "instance": "i",
      "running": [{"job_id": 1, "task": 0, "attempt": 1}],
      "reports": [{"job_id": 1, "task": 0, "attempt": 1, "kind": "exited", "exit_code": 3,
                   "signal": null, "message": "bye"},
                  {"job_id": 2, "task": 1, "attempt": 2, "kind": "started", "at_ms": 5}]})"),
                             777, &errors);
  ASSERT_TRUE(ok.has_value()) << (errors.empty() ? "" : errors[0].field + errors[0].detail);
  ASSERT_EQ(ok->reports.size(), 2u);
  EXPECT_EQ(ok->reports[0].kind, TaskReport::Kind::kExited);
  EXPECT_EQ(ok->reports[0].exit_code, 3);
  EXPECT_FALSE(ok->reports[0].signal.has_value());
  EXPECT_EQ(ok->reports[0].at_ms, 777);
  EXPECT_EQ(ok->reports[1].at_ms, 5);
  EXPECT_EQ(ok->running[0], (TaskRef{1, 0, 1}));

  errors.clear();
  EXPECT_FALSE(ParseSyncRequest(json::parse(R"({"node": "n", "instance": "i",
      "reports": [{"job_id": 1.5, "task": 0, "attempt": 1, "kind": "exploded"}]})"),
                                1, &errors)
                   .has_value());
  EXPECT_EQ(errors.size(), 2u);
  errors.clear();
  EXPECT_FALSE(ParseSyncRequest(json::array(), 1, &errors).has_value());
}

TEST(RequestBodies, StagingReportKinds) {
  std::vector<FieldError> errors;
  auto ok = ParseSyncRequest(json::parse(R"({"node": "n", "instance": "i",
      "reports": [{"job_id": 1, "task": 0, "attempt": 1, "kind": "staging", "message": "2 inputs"},
                  {"job_id": 1, "task": 0, "attempt": 1, "kind": "staged"},
                  {"job_id": 1, "task": 0, "attempt": 1, "kind": "staging_failed",
                   "message": "sha256 mismatch"}]})"),
                             1, &errors);
  ASSERT_TRUE(ok.has_value()) << (errors.empty() ? "" : errors[0].field + errors[0].detail);
  ASSERT_EQ(ok->reports.size(), 3u);
  EXPECT_EQ(ok->reports[0].kind, TaskReport::Kind::kStaging);
  EXPECT_EQ(ok->reports[0].message, "2 inputs");
  EXPECT_EQ(ok->reports[1].kind, TaskReport::Kind::kStaged);
  EXPECT_EQ(ok->reports[2].kind, TaskReport::Kind::kStagingFailed);
  errors.clear();
  EXPECT_FALSE(ParseSyncRequest(json::parse(R"({"node": "n", "instance": "i",
      "reports": [{"job_id": 1, "task": 0, "attempt": 1, "kind": "Staged"}]})"),
                                1, &errors)
                   .has_value());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].detail.find("\"staging_failed\""), std::string::npos) << errors[0].detail;
}

TEST(RequestBodies, LogUploadAndCreateUser) {
  std::vector<FieldError> errors;
  EXPECT_TRUE(ParseAgentLogUpload(json::parse(R"({"node": "n", "job_id": 3, "attempt": 1,
      "task": 0, "stream": "stdout", "data": "hi\n"})"),
                                  &errors)
                  .has_value());
  EXPECT_FALSE(ParseAgentLogUpload(json::parse(R"({"node": "n", "job_id": 3, "attempt": 1,
      "task": 0, "stream": "stdin", "data": 5})"),
                                   &errors)
                   .has_value());
  EXPECT_EQ(errors.size(), 2u);

  errors.clear();
  auto user = ParseCreateUserRequest(
      json::parse(R"({"tenant": "acme", "team": "ml", "name": "ana", "role": "team_admin"})"),
      &errors);
  ASSERT_TRUE(user.has_value());
  EXPECT_EQ(user->role, Role::kTeamAdmin);
  EXPECT_FALSE(
      ParseCreateUserRequest(
          json::parse(R"({"tenant": "acme", "team": "ml", "name": "ana", "role": "god"})"), &errors)
          .has_value());
}

TEST(RequestBodies, RevokeUser) {
  std::vector<FieldError> errors;
  auto ok = ParseRevokeUserRequest(json::parse(R"({"tenant": "acme", "name": "ana"})"), &errors);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->tenant, "acme");
  EXPECT_EQ(ok->name, "ana");
  // Both fields are required, names follow the name rule, nothing else is accepted.
  EXPECT_FALSE(ParseRevokeUserRequest(json::parse(R"({"name": "ana"})"), &errors).has_value());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "tenant");
  errors.clear();
  EXPECT_FALSE(ParseRevokeUserRequest(
                   json::parse(R"({"tenant": "acme", "name": "../x", "team": "ml"})"), &errors)
                   .has_value());
  EXPECT_EQ(errors.size(), 2u);
  errors.clear();
  EXPECT_FALSE(ParseRevokeUserRequest(json::array(), &errors).has_value());
  EXPECT_FALSE(errors.empty());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
