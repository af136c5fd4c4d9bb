#include "cli/fleet_cli.h"

#include <gtest/gtest.h>

#include "testing/test_util.h"

namespace ferry::cli {
namespace {

TEST(JobFile, TypesPlainScalarsAndKeepsStringFields) {
  ASSERT_OK_AND_ASSIGN(nlohmann::json body, JobFileToJson(R"(
name: train
command: [python, train.py, --epochs, 3]
env:
  SEED: 1
  DEBUG: true
labels: {project: llm}
gpu_models: [H200]
tasks: 2
gpus_per_task: 4
cpus_per_task: 1.5
preemptible: false
working_dir: "007"
max_runtime_seconds: ~
)",
                                                          "job.yaml"));
  EXPECT_EQ(body, nlohmann::json::parse(R"({
    "name": "train", "command": ["python", "train.py", "--epochs", "3"],
    "env": {"SEED": "1", "DEBUG": "true"}, "labels": {"project": "llm"}, "gpu_models": ["H200"],
    "tasks": 2, "gpus_per_task": 4, "cpus_per_task": 1.5, "preemptible": false,
    "working_dir": "007", "max_runtime_seconds": null})"));
}

TEST(JobFile, RefusesBadFiles) {
  auto not_map = JobFileToJson("- a\n- b\n", "job.yaml");
  ASSERT_FALSE(not_map.ok());
  EXPECT_NE(not_map.status().message().find("mapping"), std::string::npos);
  auto broken = JobFileToJson("name: [unclosed\n", "job.yaml");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().message().rfind("job.yaml:", 0), 0u) << broken.status().message();
  auto twice = JobFileToJson("name: a\nname: b\n", "job.yaml");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("twice"), std::string::npos);
  auto complex_key = JobFileToJson("? [a, b]\n: c\n", "job.yaml");
  EXPECT_FALSE(complex_key.ok());
  std::string deep = "a: ";
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  EXPECT_FALSE(JobFileToJson(deep, "job.yaml").ok());
  EXPECT_FALSE(JobFileToJson("", "job.yaml").ok());
}

TEST(KeyValue, Parses) {
  ASSERT_OK_AND_ASSIGN(auto pair, ParseKeyValue("A=b=c", "--env"));
  EXPECT_EQ(pair.first, "A");
  EXPECT_EQ(pair.second, "b=c");
  ASSERT_OK_AND_ASSIGN(auto empty, ParseKeyValue("A=", "--env"));
  EXPECT_EQ(empty.second, "");
  auto bad = ParseKeyValue("novalue", "--env");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--env expects KEY=VALUE, got 'novalue'");
  EXPECT_FALSE(ParseKeyValue("=x", "--label").ok());
}

TEST(Output, TableAndTimes) {
  EXPECT_EQ(FormatTable({{"ID", "NAME", "STATE"}, {"12", "train", "RUNNING"}, {"3", "x", ""}}),
            "ID  NAME   STATE\n12  train  RUNNING\n3   x\n");
  auto at = ParseTimestamp("2026-11-29T14:41:08.123Z");
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(*at % 1000, 123);
  EXPECT_EQ(ParseTimestamp("2026-11-29T14:41:08Z"), *at - 123);
  EXPECT_FALSE(ParseTimestamp("yesterday").has_value());
  EXPECT_FALSE(ParseTimestamp("").has_value());
  EXPECT_EQ(FormatAge(*at, *at + 5'000), "5s");
  EXPECT_EQ(FormatAge(*at, *at + 600'000), "10m");
  EXPECT_EQ(FormatAge(*at, *at + 5 * 3'600'000), "5h");
  EXPECT_EQ(FormatAge(*at, *at + 3 * 86'400'000LL), "3d");
  EXPECT_EQ(FormatAge(std::nullopt, 0), "-");
}

}  // namespace
}  // namespace ferry::cli
