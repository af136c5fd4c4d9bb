#include "ferry/fleet/model_json.h"

#include <gtest/gtest.h>

namespace ferry::fleet {
namespace {

using nlohmann::json;

std::vector<FieldError> ErrorsOf(const json& body) {
  std::vector<FieldError> errors;
  auto spec = ParseJobSpec(body, &errors);
  EXPECT_FALSE(spec.ok()) << body.dump();
  return errors;
}

bool HasError(const std::vector<FieldError>& errors, const std::string& field) {
  for (const auto& error : errors) {
    if (error.field == field) return true;
  }
  return false;
}

TEST(JobSpecJson, MinimalSpecGetsDefaults) {
  std::vector<FieldError> errors;
  auto spec = ParseJobSpec(json{{"name", "hello"}, {"command", {"echo", "hi"}}}, &errors);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(spec->name, "hello");
  EXPECT_EQ(spec->command, (std::vector<std::string>{"echo", "hi"}));
  EXPECT_EQ(spec->tasks, 1);
  EXPECT_EQ(spec->gpus_per_task, 0);
  EXPECT_EQ(spec->max_retries, 3);
}

TEST(JobSpecJson, FullSpecRoundTrips) {
  json body = {{"name", "train"},
               {"command", {"python", "train.py"}},
               {"env", {{"SEED", "1"}}},
               {"working_dir", "/data"},
               {"tasks", 2},
               {"gpus_per_task", 4},
               {"gpu_models", {"H200", "H100"}},
               {"cpus_per_task", 8.5},
               {"memory_mb_per_task", 65536},
               {"priority", -10},
               {"preemptible", true},
               {"max_runtime_seconds", 3600},
               {"max_retries", 0},
               {"labels", {{"project", "llm"}}},
               {"topology", "same_domain"},
               {"datasets", {"imagenet", "c4"}},
               {"pool_set", "gpu-cloud"},
               {"inputs", json::parse(R"([
                  {"name": "train", "dataset": "imagenet", "version": 3, "mode": "copy",
                   "manifest_digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                   "bytes": 10, "objects": 2},
                  {"name": "vocab", "uri": "https://h/vocab.txt", "mode": "copy", "size": 12,
                   "sha256": "1111111111111111111111111111111111111111111111111111111111111111",
                   "bytes": 12, "objects": 1}])")}};
  std::vector<FieldError> errors;
  auto spec = ParseJobSpec(body, &errors);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->topology, "same_domain");
  EXPECT_EQ(spec->datasets, (std::vector<std::string>{"imagenet", "c4"}));
  EXPECT_EQ(spec->pool_set, "gpu-cloud");
  EXPECT_EQ(ToJson(*spec), body);
  auto again = ParseJobSpec(ToJson(*spec), &errors);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ToJson(*again), body);
}

TEST(JobSpecJson, DataflowInsteadOfCommand) {
  std::vector<FieldError> errors;
  auto spec = ParseJobSpec(json{{"name", "df"}, {"dataflow", "pipeline.yml"}}, &errors);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->dataflow, "pipeline.yml");
  EXPECT_TRUE(spec->command.empty());
  EXPECT_EQ(ToJson(*spec).count("command"), 0u);
  EXPECT_TRUE(
      HasError(ErrorsOf({{"name", "x"}, {"dataflow", "a.yml"}, {"command", {"ls"}}}), "dataflow"));
}

TEST(JobSpecJson, EveryBadFieldIsReported) {
  auto errors = ErrorsOf({{"name", ""},
                          {"command", {"", 3}},
                          {"tasks", 0},
                          {"gpus_per_task", -1},
                          {"cpus_per_task", "lots"},
                          {"priority", 5000},
                          {"preemptible", "yes"},
                          {"env", {{"A", 1}}},
                          {"labels", json::array()},
                          {"colour", "blue"}});
  for (const char* field : {"name", "command[1]", "tasks", "gpus_per_task", "cpus_per_task",
                            "priority", "preemptible", "env.A", "labels", "colour"}) {
    EXPECT_TRUE(HasError(errors, field)) << field;
  }
}

TEST(JobSpecJson, RequiredFieldsAndShapes) {
  EXPECT_TRUE(HasError(ErrorsOf(json::object()), "name"));
  EXPECT_TRUE(HasError(ErrorsOf(json::object()), "command"));
  EXPECT_TRUE(HasError(ErrorsOf({{"name", "x"}, {"command", json::array()}}), "command"));
  EXPECT_TRUE(HasError(ErrorsOf({{"name", "x"}, {"command", {""}}}), "command[0]"));
  EXPECT_FALSE(ErrorsOf(json::array()).empty());
  EXPECT_FALSE(ErrorsOf(json("text")).empty());
  // Integers must be integers: 2.5 tasks or a huge unsigned value are refused.
  EXPECT_TRUE(HasError(ErrorsOf({{"name", "x"}, {"command", {"ls"}}, {"tasks", 2.5}}), "tasks"));
  EXPECT_TRUE(
      HasError(ErrorsOf({{"name", "x"}, {"command", {"ls"}}, {"memory_mb_per_task", UINT64_MAX}}),
               "memory_mb_per_task"));
  EXPECT_TRUE(HasError(ErrorsOf({{"name", "x"}, {"command", {"ls"}}, {"tasks", 1025}}), "tasks"));
}

TEST(JobSpecJson, SchedulingHints) {
  std::vector<FieldError> errors;
  auto spec = ParseJobSpec(json{{"name", "x"}, {"command", {"ls"}}}, &errors);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->topology, "");
  EXPECT_TRUE(spec->datasets.empty());
  EXPECT_EQ(spec->pool_set, "");
  EXPECT_EQ(ToJson(*spec)["topology"], "");
  for (const char* topology : {"", "same_node", "same_domain"}) {
    auto ok =
        ParseJobSpec(json{{"name", "x"}, {"command", {"ls"}}, {"topology", topology}}, &errors);
    ASSERT_TRUE(ok.ok()) << topology;
    EXPECT_EQ(ok->topology, topology);
  }
  EXPECT_TRUE(HasError(ErrorsOf({{"name", "x"}, {"command", {"ls"}}, {"topology", "same_rack"}}),
                       "topology"));
  EXPECT_TRUE(
      HasError(ErrorsOf({{"name", "x"}, {"command", {"ls"}}, {"topology", 1}}), "topology"));
  EXPECT_TRUE(
      HasError(ErrorsOf({{"name", "x"}, {"command", {"ls"}}, {"datasets", "c4"}}), "datasets"));
  EXPECT_TRUE(HasError(ErrorsOf({{"name", "x"}, {"command", {"ls"}}, {"datasets", {"c4", ""}}}),
                       "datasets[1]"));
  EXPECT_TRUE(
      HasError(ErrorsOf({{"name", "x"}, {"command", {"ls"}}, {"pool_set", false}}), "pool_set"));
}

TEST(JobSpecJson, NullMeansDefault) {
  std::vector<FieldError> errors;
  auto spec = ParseJobSpec(json{{"name", "x"}, {"command", {"ls"}}, {"tasks", nullptr}}, &errors);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->tasks, 1);
}

TEST(ModelJson, JobResourceShape) {
  Job job;
  job.id = 42;
  job.spec.name = "train";
  job.spec.command = {"true"};
  job.state = JobState::kRunning;
  job.reason = std::string(reason::kTasksStarted);
  job.created_at_ms = 1'796'000'000'123;
  job.placement.push_back({0, 7, "gpu-a", {11, 12}, {0, 1}});
  AttemptRecord attempt;
  attempt.attempt = 1;
  attempt.state = JobState::kRunning;
  attempt.exit_code = 0;
  job.attempts.push_back(attempt);
  json out = ToJson(job);
  EXPECT_EQ(out["id"], 42);
  EXPECT_EQ(out["state"], "RUNNING");
  EXPECT_EQ(out["reason"], "TASKS_STARTED");
  EXPECT_EQ(out["placement"][0]["node"], "gpu-a");
  EXPECT_EQ(out["placement"][0]["gpu_indices"], json({0, 1}));
  EXPECT_EQ(out["created_at"], "2026-11-30T00:53:20.123Z");
  EXPECT_TRUE(out["finished_at"].is_null());
  EXPECT_EQ(out["attempts"][0]["exit_code"], 0);
  EXPECT_EQ(ToJson(job, false).count("attempts"), 0u);
}

TEST(Utf8CodePoints, CountsCharactersAndRefusesMalformedText) {
  EXPECT_EQ(Utf8CodePoints(""), 0u);
  EXPECT_EQ(Utf8CodePoints("abc"), 3u);
  EXPECT_EQ(Utf8CodePoints("\xc3\xa9"), 1u);          // é
  EXPECT_EQ(Utf8CodePoints("\xe2\x82\xac"), 1u);      // €
  EXPECT_EQ(Utf8CodePoints("\xf0\x9f\x9a\x80"), 1u);  // U+1F680
  EXPECT_EQ(Utf8CodePoints("\xf4\x8f\xbf\xbf"), 1u);  // U+10FFFF, the last
  EXPECT_FALSE(Utf8CodePoints("\xff").has_value());
  EXPECT_FALSE(Utf8CodePoints("\x80").has_value());              // a lone continuation
  EXPECT_FALSE(Utf8CodePoints("\xc3").has_value());              // cut short
  EXPECT_FALSE(Utf8CodePoints("\xc3\x28").has_value());          // not a continuation
  EXPECT_FALSE(Utf8CodePoints("\xc0\xaf").has_value());          // overlong
  EXPECT_FALSE(Utf8CodePoints("\xe0\x80\xaf").has_value());      // overlong
  EXPECT_FALSE(Utf8CodePoints("\xed\xa0\x80").has_value());      // surrogate U+D800
  EXPECT_FALSE(Utf8CodePoints("\xf4\x90\x80\x80").has_value());  // past U+10FFFF
}

TEST(JobSpecJson, LengthsCountCodePoints) {
  std::string e128, e129;
  for (int i = 0; i < 128; ++i) e128 += "\xc3\xa9";
  e129 = e128 + "\xc3\xa9";
  std::vector<FieldError> errors;
  nlohmann::json body = {{"name", e128},
                         {"command", {"true"}},
                         {"env", {{e128, "v"}}},
                         {"labels", {{"k", e128}}},
                         {"datasets", {e128}}};
  EXPECT_TRUE(ParseJobSpec(body, &errors).ok()) << errors.front().detail;
  body["name"] = e129;
  body["env"] = {{e129, "v"}};
  body["datasets"] = {e129};
  EXPECT_FALSE(ParseJobSpec(body, &errors).ok());
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].field, "name");
  EXPECT_EQ(errors[0].detail, "must have between 1 and 128 characters");
  EXPECT_EQ(errors[1].field, "env." + e129);
  EXPECT_EQ(errors[2].field, "datasets[0]");
  // Built in C++ (not parsed from a body): bytes that are not UTF-8 are named.
  nlohmann::json bad = {{"name", "\xff"}, {"command", {"true"}}};
  EXPECT_FALSE(ParseJobSpec(bad, &errors).ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].detail, "must be valid UTF-8");
}

TEST(ModelNames, StatesAndRolesRoundTrip) {
  for (JobState state : {JobState::kPending, JobState::kAdmitted, JobState::kRunning,
                         JobState::kSucceeded, JobState::kFailed, JobState::kCancelled,
                         JobState::kPreempted, JobState::kTimeout, JobState::kLost}) {
    EXPECT_EQ(ParseJobState(ToString(state)), state);
  }
  EXPECT_FALSE(ParseJobState("running").has_value());
  EXPECT_TRUE(IsTerminal(JobState::kTimeout));
  EXPECT_FALSE(IsTerminal(JobState::kLost));
  EXPECT_FALSE(IsTerminal(JobState::kPreempted));
  for (Role role : {Role::kUser, Role::kTeamAdmin, Role::kPlatformAdmin, Role::kAgent}) {
    EXPECT_EQ(ParseRole(ToString(role)), role);
  }
  EXPECT_FALSE(ParseRole("root").has_value());
}

}  // namespace
}  // namespace ferry::fleet

namespace ferry::fleet {
namespace {

TEST(JobSpecJson, CheckpointParsesRoundTripsAndRefusesBadValues) {
  std::vector<FieldError> errors;
  json body = {{"name", "t"},
               {"command", {"train"}},
               {"checkpoint", {{"uri", "s3://ckpt/runs/"}, {"interval_seconds", 600}}}};
  auto spec = ParseJobSpec(body, &errors);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->checkpoint.uri, "s3://ckpt/runs/");
  EXPECT_EQ(spec->checkpoint.interval_seconds, 600);
  auto again = ParseJobSpec(ToJson(*spec), &errors);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->checkpoint.uri, "s3://ckpt/runs/");
  EXPECT_FALSE(ToJson(*ParseJobSpec(json{{"name", "t"}, {"command", {"x"}}}, &errors))
                   .contains("checkpoint"));
  auto refused = [&](const json& checkpoint) {
    json bad = body;
    bad["checkpoint"] = checkpoint;
    auto result = ParseJobSpec(bad, &errors);
    return result.ok() ? std::string() : result.status().message();
  };
  EXPECT_NE(refused({{"uri", "s3://ckpt/no-slash"}}).find("checkpoint.uri: must end in '/'"),
            std::string::npos);
  EXPECT_NE(refused({{"uri", "https://h/p/"}}).find("must be an s3:// or file:/// URI"),
            std::string::npos);
  EXPECT_NE(refused({{"uri", "s3:///p/"}}).find("needs a bucket"), std::string::npos);
  EXPECT_NE(refused({{"interval_seconds", 60}}).find("checkpoint.uri: is required"),
            std::string::npos);
  EXPECT_NE(refused({{"uri", "s3://c/p/"}, {"interval_seconds", 5}}).find("at least 10"),
            std::string::npos);
  EXPECT_NE(refused({{"uri", "s3://c/p/"}, {"every", 5}}).find("checkpoint.every: unknown field"),
            std::string::npos);
  EXPECT_NE(refused("s3://c/p/").find("checkpoint: must be an object"), std::string::npos);
  EXPECT_TRUE(refused({{"uri", "file:///mnt/ckpt/"}, {"interval_seconds", 0}}).empty());
}

TEST(JobSpecJson, OutputsParseRoundTripAndRefuseBadValues) {
  std::vector<FieldError> errors;
  json body = {{"name", "t"}, {"command", {"x"}}, {"outputs", {{"uri", "s3://res/runs/"}}}};
  auto spec = ParseJobSpec(body, &errors);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->outputs.uri, "s3://res/runs/");
  auto again = ParseJobSpec(ToJson(*spec), &errors);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outputs.uri, "s3://res/runs/");
  EXPECT_FALSE(
      ToJson(*ParseJobSpec(json{{"name", "t"}, {"command", {"x"}}}, &errors)).contains("outputs"));
  auto refused = [&](const json& outputs) {
    json bad = body;
    bad["outputs"] = outputs;
    auto result = ParseJobSpec(bad, &errors);
    return result.ok() ? std::string() : result.status().message();
  };
  EXPECT_NE(refused({{"uri", "s3://r/no-slash"}}).find("outputs.uri: must end in '/'"),
            std::string::npos);
  EXPECT_NE(refused({{"uri", "s3:///p/"}}).find("outputs.uri: needs a bucket"), std::string::npos);
  EXPECT_NE(refused(json::object()).find("outputs.uri: is required"), std::string::npos);
  EXPECT_NE(refused({{"uri", "s3://r/p/"}, {"interval_seconds", 5}})
                .find("outputs.interval_seconds: unknown field"),
            std::string::npos);
  EXPECT_TRUE(refused({{"uri", "file:///mnt/results/"}}).empty());
}

TEST(JobSpecJson, CodeParsesRoundTripsAndRefusesBadValues) {
  std::vector<FieldError> errors;
  const std::string digest = "sha256:" + std::string(64, 'a');
  const std::string commit(40, 'c');
  json body = {{"name", "t"}, {"command", {"./run.sh"}}, {"code", {{"bundle", digest}}}};
  auto bundle = ParseJobSpec(body, &errors);
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(bundle->code.bundle, digest);
  EXPECT_FALSE(bundle->code.empty());
  bundle->code.bytes = 1234;  // as the server fills it in
  auto again = ParseJobSpec(ToJson(*bundle), &errors);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->code.bundle, digest);
  EXPECT_EQ(again->code.bytes, 1234);
  auto git = ParseJobSpec(
      json{{"name", "t"},
           {"command", {"x"}},
           {"code", {{"git", "https://git.example.com/team/m.git"}, {"commit", commit}}}},
      &errors);
  ASSERT_TRUE(git.ok()) << git.status().ToString();
  auto git_again = ParseJobSpec(ToJson(*git), &errors);
  ASSERT_TRUE(git_again.ok());
  EXPECT_EQ(git_again->code.git, "https://git.example.com/team/m.git");
  EXPECT_EQ(git_again->code.commit, commit);
  EXPECT_TRUE(ParseJobSpec(json{{"name", "t"}, {"command", {"x"}}}, &errors)->code.empty());
  EXPECT_FALSE(
      ToJson(*ParseJobSpec(json{{"name", "t"}, {"command", {"x"}}}, &errors)).contains("code"));

  auto refused = [&](const json& code) {
    json bad = body;
    bad["code"] = code;
    auto result = ParseJobSpec(bad, &errors);
    return result.ok() ? std::string() : result.status().message();
  };
  EXPECT_NE(refused({{"bundle", "sha256:abc"}}).find("code.bundle: must be \"sha256:\""),
            std::string::npos);
  EXPECT_NE(refused({{"bundle", std::string(64, 'a')}}).find("code.bundle"), std::string::npos);
  EXPECT_NE(refused(json::object()).find("exactly one of bundle and git"), std::string::npos);
  EXPECT_NE(refused({{"bundle", digest}, {"git", "https://h/r"}, {"commit", commit}})
                .find("exactly one of bundle and git"),
            std::string::npos);
  EXPECT_NE(refused({{"git", "https://h/r"}}).find("code.commit: is required"), std::string::npos);
  EXPECT_NE(refused({{"git", "https://h/r"}, {"commit", "main"}}).find("40 lower-case hex"),
            std::string::npos);
  EXPECT_NE(
      refused({{"git", "https://h/r"}, {"commit", std::string(40, 'C')}}).find("40 lower-case hex"),
      std::string::npos);
  for (const char* url : {"--upload-pack=touch /tmp/x", "/srv/repo", "ftp://h/r", "https://",
                          "https://h/a b", "file://relative"}) {
    EXPECT_NE(refused({{"git", url}, {"commit", commit}}).find("code.git: must be"),
              std::string::npos)
        << url;
  }
  EXPECT_NE(refused({{"bundle", digest}, {"commit", commit}}).find("code.commit: is for git"),
            std::string::npos);
  EXPECT_NE(refused({{"bundle", digest}, {"path", "x"}}).find("code.path: unknown field"),
            std::string::npos);
  EXPECT_NE(refused("sha256:x").find("code: must be an object"), std::string::npos);
  EXPECT_TRUE(refused({{"git", "file:///srv/git/m.git"}, {"commit", commit}}).empty());
  EXPECT_TRUE(refused({{"git", "ssh://git@h/r.git"}, {"commit", commit}}).empty());
}

}  // namespace
}  // namespace ferry::fleet
