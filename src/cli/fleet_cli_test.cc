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

TEST(JobFile, ErrorsNameTheFileLineAndColumn) {
  auto message = [](const std::string& yaml) {
    auto parsed = JobFileToJson(yaml, "job.yaml");
    EXPECT_FALSE(parsed.ok()) << yaml;
    return parsed.status().message();
  };
  EXPECT_EQ(message("name: a\nname: b\n"), "job.yaml:2:1: name: appears twice");
  EXPECT_EQ(message("name: a\nenv:\n  SEED: 1\n  SEED: 2\n"),
            "job.yaml:4:3: env.SEED: appears twice");
  EXPECT_EQ(message("- a\n- b\n"), "job.yaml:1:1: a job file is a mapping of fields, not a list");
  EXPECT_EQ(message(""), "job.yaml: a job file is a mapping of fields; this one is empty");
  // A bad value: an escape that makes a NUL character.
  EXPECT_EQ(message("name: train\nworking_dir: \"a\\0b\"\n"),
            "job.yaml:2:14: NUL character is not allowed in a string");
  EXPECT_EQ(message("name: [unclosed\n"),
            "job.yaml:2:1: invalid YAML: end of sequence flow not found");
  std::string deep = "tasks: ";
  for (int i = 0; i < 40; ++i) deep += "[";
  for (int i = 0; i < 40; ++i) deep += "]";
  const std::string too_deep = message(deep);
  EXPECT_EQ(too_deep.rfind("job.yaml:1:40: tasks[0]", 0), 0u) << too_deep;
  EXPECT_NE(too_deep.find(": nested too deeply"), std::string::npos) << too_deep;
  EXPECT_EQ(message(std::string(2 << 20, ' ')),
            "job.yaml: the job file is 2097152 bytes; the limit is 1048576");
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

std::string NameOf(const std::string& command_line) {
  std::vector<std::string> words;
  std::string word;
  for (char c : command_line + " ") {
    if (c == ' ') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  return DefaultJobName(words, "");
}

TEST(DefaultJobName, SkipsInterpretersAndLaunchers) {
  EXPECT_EQ(NameOf("python train.py --epochs 3"), "train");
  EXPECT_EQ(NameOf("python3 -u examples/train.py"), "train");
  EXPECT_EQ(NameOf("python3.11 -W ignore -X dev train.py"), "train");
  EXPECT_EQ(NameOf("/usr/bin/pypy3 bench.py"), "bench");
  EXPECT_EQ(NameOf("python -m pkg.sub.evaluate --split test"), "evaluate");
  EXPECT_EQ(NameOf("python -mpytest -x"), "pytest");
  EXPECT_EQ(NameOf("python -c print(1)"), "python");
  EXPECT_EQ(NameOf("python"), "python");
  EXPECT_EQ(NameOf("bash scripts/run.sh"), "run");
  EXPECT_EQ(NameOf("sh -e ./job.sh"), "job");
  EXPECT_EQ(NameOf("/usr/bin/env python3 serve.py"), "serve");
  EXPECT_EQ(NameOf("env -i SEED=1 CUDA_LAUNCH_BLOCKING=1 python train.py"), "train");
  EXPECT_EQ(NameOf("SEED=1 python train.py"), "train");
  EXPECT_EQ(NameOf("uv run train.py"), "train");
  EXPECT_EQ(NameOf("uv run --with torch python finetune.py"), "finetune");
  EXPECT_EQ(NameOf("uv run -m pkg.serve"), "serve");
  EXPECT_EQ(NameOf("torchrun --nproc_per_node=8 train.py"), "train");
  EXPECT_EQ(NameOf("torchrun --standalone --nnodes 1 --nproc-per-node 8 pretrain.py"), "pretrain");
  EXPECT_EQ(NameOf("torchrun --nnodes 2 -m pkg.train"), "train");
  EXPECT_EQ(NameOf("python -m torch.distributed.run --nproc_per_node 4 ddp.py"), "ddp");
  EXPECT_EQ(NameOf("accelerate launch --multi_gpu --num_processes 8 sft.py --lr 1e-5"), "sft");
  EXPECT_EQ(NameOf("accelerate launch --config_file cfg.yaml train.py"), "train");
  EXPECT_EQ(NameOf("deepspeed --num_gpus 8 zero.py --deepspeed ds.json"), "zero");
  EXPECT_EQ(NameOf("mpirun -np 4 --allow-run-as-root python allreduce.py"), "allreduce");
  EXPECT_EQ(NameOf("node --require dotenv/config server.js"), "server");
  EXPECT_EQ(NameOf("Rscript analysis.R"), "analysis");
  EXPECT_EQ(NameOf("julia --project=. -t 8 sim.jl"), "sim");
  EXPECT_EQ(NameOf("timeout 3600 nice -n 10 python long.py"), "long");
  EXPECT_EQ(NameOf("conda run -n ml python fit.py"), "fit");
  // A shell's -c is a command line: named by its first command.
  EXPECT_EQ(DefaultJobName({"bash", "-c", "cd /data && python prep.py"}, ""), "prep");
  EXPECT_EQ(DefaultJobName({"sh", "-c", "export A=1; source env.sh; ./run.sh | tee log"}, ""),
            "run");
  EXPECT_EQ(DefaultJobName({"sh", "-c", "cd /data"}, ""), "cd");
  EXPECT_EQ(DefaultJobName({"sh", "-c", ""}, ""), "sh");
  EXPECT_EQ(DefaultJobName({"bash", "-lc", "python prep.py --fast"}, ""), "prep");
  // Plain programs keep their base name without extension.
  EXPECT_EQ(NameOf("./a.out"), "a");
  EXPECT_EQ(NameOf("/opt/tools/nvidia-smi -L"), "nvidia-smi");
  EXPECT_EQ(NameOf("echo hi"), "echo");
  // `uv pip` is uv itself, not `uv run`.
  EXPECT_EQ(NameOf("uv pip install x"), "uv");
}

TEST(DefaultJobName, DataflowsAndValidNames) {
  EXPECT_EQ(DefaultJobName({}, "examples/sensor/dataflow.yml"), "sensor");
  EXPECT_EQ(DefaultJobName({}, "/srv/flows/etl/dataflow.yaml"), "etl");
  EXPECT_EQ(DefaultJobName({}, "flows/pipeline.yml"), "pipeline");
  EXPECT_EQ(DefaultJobName({}, "dataflow.yml"), "dataflow");
  EXPECT_EQ(DefaultJobName({}, "./dataflow.yml"), "dataflow");
  EXPECT_EQ(DefaultJobName({}, ""), "job");
  EXPECT_EQ(DefaultJobName({"python", ""}, ""), "python");
  // 1 to 128 characters, whole UTF-8 characters, no control characters.
  const std::string long_name(300, 'x');
  EXPECT_EQ(DefaultJobName({long_name + ".py"}, ""), std::string(128, 'x'));
  std::string accents;
  for (int i = 0; i < 200; ++i) accents += "\xc3\xa9";  // é
  const std::string cut = DefaultJobName({accents}, "");
  EXPECT_EQ(cut.size(), 256u);  // 128 characters of 2 bytes
  EXPECT_EQ(DefaultJobName({"bad\xff\x01name"}, ""), "bad__name");
  EXPECT_EQ(DefaultJobName({"python", "."}, ""), "job");
}

TEST(Cancel, FinishedJobsAreNamedAndLiveOnesAreNot) {
  using nlohmann::json;
  EXPECT_EQ(AlreadyFinishedMessage(json{{"id", 3}, {"state", "SUCCEEDED"}}),
            "job 3 has already finished (SUCCEEDED); nothing to cancel");
  for (const char* state : {"FAILED", "CANCELLED", "TIMEOUT"}) {
    EXPECT_NE(AlreadyFinishedMessage(json{{"id", 4}, {"state", state}}).find(state),
              std::string::npos);
  }
  for (const char* state : {"PENDING", "ADMITTED", "RUNNING", "PREEMPTED", "LOST"}) {
    EXPECT_EQ(AlreadyFinishedMessage(json{{"id", 4}, {"state", state}}), "") << state;
  }
  EXPECT_EQ(AlreadyFinishedMessage(json::array()), "");
  EXPECT_EQ(AlreadyFinishedMessage(json{{"id", 4}}), "");
  EXPECT_EQ(AlreadyFinishedMessage(json{{"id", 4}, {"state", 7}}), "");
}

}  // namespace
}  // namespace ferry::cli
